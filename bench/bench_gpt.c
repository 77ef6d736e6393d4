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
 * on the text. */
#include "examples/gpt/gpt.h"
#include "kernels/cpu/hx_kernels.h"

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

int main(int argc, char **argv)
{
    gpt_config c = {.vocab = 65, .layers = 2, .heads = 4, .width = 128, .context = 64,
                    .batch = 32, .dropout = 0, .seed = 1};
    int steps = 20, threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = v;
        else if (!strcmp(argv[i], "--layers")) c.layers = v;
        else if (!strcmp(argv[i], "--width")) c.width = v;
        else if (!strcmp(argv[i], "--heads")) c.heads = v;
        else if (!strcmp(argv[i], "--context")) c.context = v;
        else if (!strcmp(argv[i], "--batch")) c.batch = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
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
    int32_t *tok = malloc(sizeof *tok * tokens), *tgt = malloc(sizeof *tgt * tokens);
    if (!tok || !tgt) return 1;
    uint64_t r = 12345;
    for (int64_t i = 0; i < tokens; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((r >> 33) % (uint64_t)c.vocab);
        tgt[i] = (int32_t)((r >> 17) % (uint64_t)c.vocab);
    }
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
        hx_feed feeds[2] = {{NULL, run.m.tokens, tok, sizeof *tok * tokens},
                            {NULL, run.m.targets, tgt, sizeof *tgt * tokens}};
        float loss;
        hx_fetch fetch = {NULL, run.m.loss, &loss, sizeof loss};
        double t0 = 0;
        for (int s = -3; s < steps; s++) {
            if (!s) t0 = now();
            if (hx_session_run(run.s, feeds, 2, &fetch, 1, HX_RUN_TRAIN)) {
                fprintf(stderr, "bench_gpt: %s: %s\n", cases[k].name, hx_last_error());
                return 1;
            }
        }
        double dt = (now() - t0) / steps;
        int64_t n_emb = (int64_t)c.vocab * c.width + (int64_t)c.context * c.width;
        double flops = 6.0 * (double)(run.m.n_params - n_emb) * tokens +
                       12.0 * c.layers * c.width * (double)c.context * tokens;
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
