/* GPT training throughput per placement, against the GEMM rate measured in
 * the same run. One JSON object per line on stdout.
 *
 *   bench_gpt [--steps N] [--layers N] [--width N] [--heads N] [--context N]
 *             [--batch N] [--threads N]
 *
 * Cases: accelerator none; emu with everything on the device (offload
 * none); emu with AdamW on the host (offload optimizer); the same two with
 * bf16 params and activations on the device (f32 masters; offload moves
 * 2 bytes per param each way per step), and offload with the delayed
 * parameter update (from the first step on). Each reports
 * steps/s and tokens/s over N steps after 3 warm-up steps, the model's
 * FLOPs per step (6 per parameter per token plus attention, as nanoGPT
 * counts them), the GFLOP/s that makes, and `ratio` = that over the
 * ceiling: hx_k_gemm_f32 on the model's largest GEMM shape (B*T x 4C x C)
 * at the same thread count. Tokens are random: throughput does not depend
 * on the text.
 *
 *   bench_gpt --capacity MiB [--host-mib N] [--layers N] [--heads N]
 *             [--context N] [--batch N] [--steps N] [--threads N] [--recompute-only 1]
 *
 * Capacity instead: per offload mode (none; AdamW on the host; that and
 * auto_offload, which streams the parameters from the host in chunks, of
 * the size and prefetch depth it picks, when they do not fit), the
 * widest bf16 GPT at the given layers whose session and training step fit
 * an emu device capped at MiB (gpt_plan_largest), its parameters over those
 * of mode none, and then N timed training steps of it under the cap
 * (after one warm-up step) against the uncapped run of mode none's largest
 * model. Widths are searched up to what --host-mib of host memory holds
 * (the host keeps up to HOST_BYTES_PER_PARAM per parameter; default:
 * MemAvailable less the cap, emu's memory, and 2 GiB); `limited_by` says
 * which bound stopped the search.
 *
 * Then recomputation (gpt_recompute lines): with AdamW on the host and
 * activations kept, offloaded to the host (offload_activations=cpu, 1 MiB
 * segments, depth 1) or the blocks recomputed, the longest context (steps
 * of 8) at the given model and the most layers at its width that fit the
 * cap; and the step time of the given model uncapped with and without
 * recomputation: the overhead (time with / without - 1) against the FLOP
 * ratio (recomputed FLOPs over the step's, both counted as emu counts them:
 * 2mnk per matmul, one per output element otherwise). --recompute-only 1
 * runs these lines only. */
#include "examples/gpt/gpt.h"
#include "kernels/cpu/hx_kernels.h"
#include "session/session.h" /* the last run's steps, for its FLOPs */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double gemm_gflops(int64_t m, int64_t n, int64_t k, int threads)
{
    float *a = malloc(sizeof *a * m * k), *b = malloc(sizeof *b * k * n), *c = malloc(sizeof *c * m * n);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_gpt: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)(i % 5) * 0.1f;
    double best = 1e30;
    for (int rep = 0; rep < 20; rep++) {
        double t = now();
        hx_k_gemm_f32(0, 0, 1, m, n, k, 1.0f, a, k, 0, b, n, 0, 0.0f, c, n, 0, threads);
        t = now() - t;
        if (t < best) best = t;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * m * n * k / best * 1e-9;
}

/* Host bytes per parameter in the offload modes, at most: f32 master, two
 * AdamW moments, the bf16 copy the update writes, the bf16 gradient copied
 * out (14 persistent + 2 transient measured) and slack. */
#define HOST_BYTES_PER_PARAM 18

static int64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib * 1024;
}

/* Parameters of c at width w: 12 w^2 + 13 w per block, embeddings, final LayerNorm. */
static double params_at(const gpt_config *c, double w)
{
    return c->layers * (12 * w * w + 13 * w) + (double)(c->vocab + c->context) * w + 2 * w;
}

/* Seconds per training step over `steps` after `warmup` steps; -1 on an
 * error (hx_last_error() says which). */
static double step_seconds(gpt_run *run, const gpt_config *c, const int32_t *tok,
                           const int32_t *tgt, int warmup, int steps)
{
    size_t bytes = sizeof *tok * c->batch * c->context;
    hx_feed feeds[2] = {{NULL, run->m.tokens, tok, bytes}, {NULL, run->m.targets, tgt, bytes}};
    float loss;
    hx_fetch fetch = {NULL, run->m.loss, &loss, sizeof loss};
    double t0 = 0;
    for (int s = -warmup; s < steps; s++) {
        if (!s) t0 = now();
        if (hx_session_run(run->s, feeds, 2, &fetch, 1, HX_RUN_TRAIN)) return -1;
    }
    return (now() - t0) / steps;
}

/* FLOPs of one training step: 6 per non-embedding parameter per token plus
 * attention, as nanoGPT counts them. */
static double model_flops(const gpt_config *c, int64_t n_params)
{
    int64_t tokens = (int64_t)c->batch * c->context;
    int64_t n_emb = (int64_t)c->vocab * c->width + (int64_t)c->context * c->width;
    return 6.0 * (double)(n_params - n_emb) * tokens +
           12.0 * c->layers * c->width * (double)c->context * tokens;
}

static int capacity(gpt_config c, size_t cap, int64_t host_bytes, int steps, int threads,
                    const int32_t *tok, const int32_t *tgt)
{
    static const struct {
        const char *name;
        gpt_offload optimizer;
        bool auto_offload;
    } modes[] = {
        {"none", GPT_OFFLOAD_NONE, false},
        {"optimizer", GPT_OFFLOAD_OPTIMIZER, false},
        {"optimizer+auto_offload", GPT_OFFLOAD_OPTIMIZER, true},
    };
    c.dtype = HX_DTYPE_BF16;
    int step = 8 * c.heads;
    /* the widest model the host holds: params_at(w) * HOST_BYTES_PER_PARAM <= host_bytes */
    double n_max = (double)host_bytes / HOST_BYTES_PER_PARAM;
    int w_host = (int)((sqrt(1 + 4.0 * 12 * c.layers * n_max / (13.0 * 13)) - 1) * 13 /
                       (2.0 * 12));
    while (w_host > step && params_at(&c, w_host) > n_max) w_host -= step;
    int64_t base_params = 0;
    double base_gflops = 0;
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        gpt_optim o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                       .offload = modes[k].optimizer};
        hx_session_config sc = hx_session_config_default();
        sc.n_threads = threads;
        sc.accelerator = HX_ACCELERATOR_EMU;
        sc.max_device_memory = cap;
        sc.offload.auto_offload = modes[k].auto_offload;
        double t = now();
        int64_t n_params = 0;
        int width = gpt_plan_largest(&c, GPT_KNOB_WIDTH, step, w_host, &o, &sc, &n_params);
        double search_s = now() - t;
        if (!width) {
            printf("{\"bench\":\"gpt_capacity\",\"case\":\"%s\",\"capacity_mib\":%.0f,"
                   "\"fits\":false}\n", modes[k].name, cap / 1048576.0);
            fflush(stdout);
            continue;
        }
        c.width = width;
        gpt_run run;
        hx_memory_stats ms = {0};
        double dt = -1;
        hx_device_pools_stats ps = {0};
        hx_offload_report rep = {0};
        if (!gpt_run_create(&c, &o, &sc, &run)) {
            dt = step_seconds(&run, &c, tok, tgt, 1, steps);
            hx_session_offload_report(run.s, &rep);
            hx_session_memory_stats(run.s, &ms);
            hx_session_pool_stats(run.s, &ps);
            gpt_run_free(&run);
        }
        if (dt < 0) {
            fprintf(stderr, "bench_gpt: %s at width %d: %s\n", modes[k].name, width,
                    hx_last_error());
            return 1;
        }
        double gflops = model_flops(&c, n_params) / dt * 1e-9;
        if (!k) { /* the same model without the cap: the throughput to compare with */
            base_params = n_params;
            sc.max_device_memory = 0;
            if (gpt_run_create(&c, &o, &sc, &run)) return 1;
            double du = step_seconds(&run, &c, tok, tgt, 1, steps);
            gpt_run_free(&run);
            if (du < 0) return 1;
            base_gflops = model_flops(&c, n_params) / du * 1e-9;
        }
        printf("{\"bench\":\"gpt_capacity\",\"case\":\"%s\",\"capacity_mib\":%.0f,\"layers\":%d,"
               "\"heads\":%d,\"context\":%d,\"batch\":%d,\"dtype\":\"bf16\",\"width\":%d,"
               "\"params\":%lld,\"params_over_none\":%.2f,\"limited_by\":\"%s\","
               "\"host_limit_width\":%d,\"search_s\":%.1f,\"peak_reserved_mib\":%.1f,"
               "\"host_persistent_mib\":%.1f,\"offload_param\":\"%s\",\"chunk_mib\":%.2f,"
               "\"prefetch_depth\":%d,\"step_s\":%.3f,\"gflops\":%.2f,"
               "\"uncapped_none_gflops\":%.2f,\"ratio\":%.3f}\n",
               modes[k].name, cap / 1048576.0, c.layers, c.heads, c.context, c.batch, width,
               (long long)n_params, (double)n_params / base_params,
               width + step > w_host ? "host" : "device", w_host, search_s,
               ps.total.peak_reserved / 1048576.0,
               ms.persistent_bytes / 1048576.0,
               hx_offload_target_name(rep.offload_param),
               rep.offload_param ? rep.chunk_size / 1048576.0 : 0.0,
               rep.prefetch_depth, dt, gflops,
               base_gflops, gflops / base_gflops);
        fflush(stdout);
    }
    return 0;
}

/* FLOPs of the last run's forward and backward, as emu counts them. */
static double run_flops(const gpt_run *run)
{
    int n;
    const hx_step *st = hx__plan_steps(run->s->last_plan, 0, &n);
    double f = 0;
    for (int k = 0; k < n; k++)
        if (st[k].fn) f += hx__run_flops(st[k].node, run->s->e.lowered);
    return f;
}

static int recompute_modes(gpt_config c, size_t cap, int steps, int threads, const int32_t *tok,
                           const int32_t *tgt)
{
    static const struct {
        const char *name, *offload;
    } modes[] = {
        {"keep", ""},
        {"activation_offload", "offload_activations=cpu,chunk_size=1MB,prefetch_depth=1"},
        {"recompute", "recompute=true"},
    };
    c.dtype = HX_DTYPE_BF16;
    c.recompute = true;
    gpt_optim o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                   .offload = GPT_OFFLOAD_OPTIMIZER};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        hx_session_config sc = hx_session_config_default();
        sc.n_threads = threads;
        sc.accelerator = HX_ACCELERATOR_EMU;
        sc.max_device_memory = cap;
        if (hx_offload_config_parse(modes[k].offload, &sc.offload)) return 1;
        int64_t np_ctx = 0, np_layers = 0;
        double t = now();
        int ctx = gpt_plan_largest(&c, GPT_KNOB_CONTEXT, 8, 1 << 16, &o, &sc, &np_ctx);
        int layers = gpt_plan_largest(&c, GPT_KNOB_LAYERS, 1, 4096, &o, &sc, &np_layers);
        printf("{\"bench\":\"gpt_recompute\",\"case\":\"capacity\",\"mode\":\"%s\","
               "\"capacity_mib\":%.0f,\"layers\":%d,\"width\":%d,\"heads\":%d,\"context\":%d,"
               "\"batch\":%d,\"dtype\":\"bf16\",\"largest_context\":%d,\"largest_layers\":%d,"
               "\"params_at_largest_layers\":%lld,\"search_s\":%.1f}\n",
               modes[k].name, cap / 1048576.0, c.layers, c.width, c.heads, c.context, c.batch, ctx,
               layers, (long long)np_layers, now() - t);
        fflush(stdout);
    }
    double dt[2], flops[2];
    hx_offload_report rep = {0};
    for (int rc = 0; rc < 2; rc++) {
        hx_session_config sc = hx_session_config_default();
        sc.n_threads = threads;
        sc.accelerator = HX_ACCELERATOR_EMU;
        sc.offload.recompute = rc;
        gpt_run run;
        if (gpt_run_create(&c, &o, &sc, &run)) return 1;
        dt[rc] = step_seconds(&run, &c, tok, tgt, 2, steps);
        flops[rc] = run_flops(&run);
        if (rc) hx_session_offload_report(run.s, &rep);
        gpt_run_free(&run);
        if (dt[rc] < 0) return 1;
    }
    double overhead = dt[1] / dt[0] - 1, flop_ratio = rep.recompute_flops / flops[0];
    printf("{\"bench\":\"gpt_recompute\",\"case\":\"step_time\",\"layers\":%d,\"width\":%d,"
           "\"heads\":%d,\"context\":%d,\"batch\":%d,\"dtype\":\"bf16\",\"steps\":%d,"
           "\"step_s_keep\":%.4f,\"step_s_recompute\":%.4f,\"overhead\":%.3f,"
           "\"step_flops\":%.4g,\"step_flops_recompute\":%.4g,\"recomputed_flops\":%.4g,"
           "\"recomputed_ops\":%d,\"flop_ratio\":%.3f,\"overhead_over_flop_ratio\":%.2f}\n",
           c.layers, c.width, c.heads, c.context, c.batch, steps, dt[0], dt[1], overhead,
           flops[0], flops[1], rep.recompute_flops, rep.recomputed_ops, flop_ratio,
           overhead / flop_ratio);
    return 0;
}

int main(int argc, char **argv)
{
    gpt_config c = {.vocab = 65, .layers = 2, .heads = 4, .width = 128, .context = 64,
                    .batch = 32, .dropout = 0, .seed = 1};
    int steps = 20, threads = 2;
    size_t capacity_mib = 0;
    int64_t host_mib = -1;
    bool recompute_only = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = v;
        else if (!strcmp(argv[i], "--layers")) c.layers = v;
        else if (!strcmp(argv[i], "--width")) c.width = v;
        else if (!strcmp(argv[i], "--heads")) c.heads = v;
        else if (!strcmp(argv[i], "--context")) c.context = v;
        else if (!strcmp(argv[i], "--batch")) c.batch = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
        else if (!strcmp(argv[i], "--capacity")) capacity_mib = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--host-mib")) host_mib = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--recompute-only")) recompute_only = v != 0;
        else {
            fprintf(stderr, "bench_gpt: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (steps < 1 || threads < 1 || c.width % c.heads) {
        fprintf(stderr, "bench_gpt: steps and threads positive, width a multiple of heads\n");
        return 2;
    }
    int64_t tokens = (int64_t)c.batch * c.context;
    int32_t *tok = malloc(sizeof *tok * tokens), *tgt = malloc(sizeof *tgt * tokens);
    if (!tok || !tgt) return 1;
    uint64_t r = 12345;
    for (int64_t i = 0; i < tokens; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((r >> 33) % (uint64_t)c.vocab);
        tgt[i] = (int32_t)((r >> 17) % (uint64_t)c.vocab);
    }
    if (capacity_mib) {
        if (host_mib < 0) host_mib = mem_available() / 1048576 - (int64_t)capacity_mib - 2048;
        int rc = recompute_only ? 0
                                : capacity(c, capacity_mib << 20, host_mib << 20, steps, threads,
                                           tok, tgt);
        if (!rc) rc = recompute_modes(c, capacity_mib << 20, steps, threads, tok, tgt);
        free(tok);
        free(tgt);
        return rc;
    }
    double ceiling = gemm_gflops(tokens, 4 * c.width, c.width, threads);

    struct {
        const char *name;
        hx_accelerator acc;
        gpt_offload off;
        hx_dtype dt;
        bool dpu;
    } cases[] = {
        {"none", HX_ACCELERATOR_NONE, GPT_OFFLOAD_NONE, HX_DTYPE_F32, false},
        {"emu", HX_ACCELERATOR_EMU, GPT_OFFLOAD_NONE, HX_DTYPE_F32, false},
        {"emu+offload", HX_ACCELERATOR_EMU, GPT_OFFLOAD_OPTIMIZER, HX_DTYPE_F32, false},
        {"emu bf16", HX_ACCELERATOR_EMU, GPT_OFFLOAD_NONE, HX_DTYPE_BF16, false},
        {"emu+offload bf16", HX_ACCELERATOR_EMU, GPT_OFFLOAD_OPTIMIZER, HX_DTYPE_BF16, false},
        {"emu+offload bf16+dpu", HX_ACCELERATOR_EMU, GPT_OFFLOAD_OPTIMIZER, HX_DTYPE_BF16, true},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gpt_optim o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                       .offload = cases[k].off};
        hx_session_config sc = hx_session_config_default();
        sc.n_threads = threads;
        sc.accelerator = cases[k].acc;
        sc.delayed_param_update = cases[k].dpu;
        c.dtype = cases[k].dt;
        gpt_run run;
        if (gpt_run_create(&c, &o, &sc, &run)) {
            fprintf(stderr, "bench_gpt: %s: %s\n", cases[k].name, hx_last_error());
            return 1;
        }
        double dt = step_seconds(&run, &c, tok, tgt, 3, steps);
        if (dt < 0) {
            fprintf(stderr, "bench_gpt: %s: %s\n", cases[k].name, hx_last_error());
            return 1;
        }
        double flops = model_flops(&c, run.m.n_params);
        hx_placement_stats ps;
        hx_session_placement_stats(run.s, &ps);
        printf("{\"bench\":\"gpt\",\"case\":\"%s\",\"dtype\":\"%s\",\"threads\":%d,\"layers\":%d,\"width\":%d,"
               "\"context\":%d,\"batch\":%d,\"params\":%lld,\"steps_per_s\":%.3f,"
               "\"tokens_per_s\":%.0f,\"gflop_per_step\":%.3f,\"gflops\":%.2f,"
               "\"ceiling_gemm_gflops\":%.2f,\"ratio\":%.3f,\"copies_per_step\":%d,"
               "\"copy_bytes_per_step\":%zu}\n",
               cases[k].name, hx_dtype_name(c.dtype), threads, c.layers, c.width, c.context, c.batch,
               (long long)run.m.n_params, 1 / dt, tokens / dt, flops * 1e-9, flops / dt * 1e-9,
               ceiling, flops / dt * 1e-9 / ceiling, ps.n_copies, ps.copy_bytes);
        fflush(stdout);
        gpt_run_free(&run);
    }
    free(tok);
    free(tgt);
    return 0;
}
