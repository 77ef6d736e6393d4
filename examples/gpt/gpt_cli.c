/* hetex gpt: trains the GPT of gpt_model.c on a character corpus and
 * reports the validation loss every few steps. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct options {
    gpt_config model;
    const char *data;
    gpt_optim optim;
    int steps, eval_every, eval_iters, threads;
    hx_accelerator accelerator;
    size_t max_device_memory;
    double clip;
    int dpu; /* delayed parameter update after this many steps; -1: off */
    const char *offload_config; /* hx_offload_config_parse's key=value,... */
} options;

static const char usage[] =
    "usage: hetex gpt [options]\n"
    "  --data PATH             character corpus (data/tinyshakespeare/input.txt)\n"
    "  --layers N --heads N --width N --context N --batch N   model and batch (2 4 128 64 32)\n"
    "  --dropout P             dropout after attention and MLP (0)\n"
    "  --steps N               training steps (2000)\n"
    "  --lr X --beta1 X --beta2 X --weight-decay X   AdamW (1e-3 0.9 0.99 0.1)\n"
    "  --warmup N --min-lr-ratio X   linear warmup steps, then cosine decay to lr * X (100 0.1)\n"
    "  --clip X                clip the global gradient norm to X; 0: off (1)\n"
    "  --dtype f32|bf16|f16    params (f32 masters' copies) and activations on the device (bf16);\n"
    "                          f16 turns on dynamic loss scaling\n"
    "  --dpu K                 delayed parameter update after K steps (ZeRO-Offload's DPU;\n"
    "                          offload optimizer with bf16/f16 only); -1: off (-1)\n"
    "  --offload-config K=V,...  parameter offload (MindSpore's offload_config keys:\n"
    "                          offload_param=cpu, chunk_size=, prefetch_depth=, ...)\n"
    "  --eval-every N --eval-iters N   validation loss every N steps over M batches (250 20)\n"
    "  --accelerator auto|cuda|emu|none   where DEVICE ops run (auto)\n"
    "  --offload none|optimizer   optimizer on the device, or AdamW on the host (optimizer)\n"
    "  --max-device-memory N[K|M|G]   accelerator memory cap\n"
    "  --threads N --seed N\n";

static bool parse_size(const char *v, size_t *out)
{
    char *end;
    double x = strtod(v, &end);
    double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    if (unit != 1.0) end++;
    if (end == v || *end || !(x > 0)) return false;
    *out = (size_t)(x * unit);
    return true;
}

static int parse(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!v) {
            fprintf(stderr, "hetex gpt: option %s needs a value\n", a);
            return 2;
        }
        bool ok = true;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--layers")) o->model.layers = atoi(v);
        else if (!strcmp(a, "--heads")) o->model.heads = atoi(v);
        else if (!strcmp(a, "--width")) o->model.width = atoi(v);
        else if (!strcmp(a, "--context")) o->model.context = atoi(v);
        else if (!strcmp(a, "--batch")) o->model.batch = atoi(v);
        else if (!strcmp(a, "--dropout")) o->model.dropout = strtof(v, NULL);
        else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--lr")) o->optim.lr = strtod(v, NULL);
        else if (!strcmp(a, "--beta1")) o->optim.beta1 = strtod(v, NULL);
        else if (!strcmp(a, "--beta2")) o->optim.beta2 = strtod(v, NULL);
        else if (!strcmp(a, "--weight-decay")) o->optim.weight_decay = strtod(v, NULL);
        else if (!strcmp(a, "--warmup")) o->optim.warmup = atoi(v);
        else if (!strcmp(a, "--min-lr-ratio")) o->optim.min_lr_ratio = strtod(v, NULL);
        else if (!strcmp(a, "--clip")) o->clip = strtod(v, NULL);
        else if (!strcmp(a, "--dpu")) o->dpu = atoi(v);
        else if (!strcmp(a, "--offload-config")) o->offload_config = v;
        else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f32")) o->model.dtype = HX_DTYPE_F32;
            else if (!strcmp(v, "bf16")) o->model.dtype = HX_DTYPE_BF16;
            else if (!strcmp(v, "f16")) o->model.dtype = HX_DTYPE_F16;
            else ok = false;
        }
        else if (!strcmp(a, "--eval-every")) o->eval_every = atoi(v);
        else if (!strcmp(a, "--eval-iters")) o->eval_iters = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--seed")) o->model.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-device-memory")) ok = parse_size(v, &o->max_device_memory);
        else if (!strcmp(a, "--accelerator")) {
            if (!strcmp(v, "auto")) o->accelerator = HX_ACCELERATOR_AUTO;
            else if (!strcmp(v, "cuda")) o->accelerator = HX_ACCELERATOR_CUDA;
            else if (!strcmp(v, "emu")) o->accelerator = HX_ACCELERATOR_EMU;
            else if (!strcmp(v, "none")) o->accelerator = HX_ACCELERATOR_NONE;
            else ok = false;
        } else if (!strcmp(a, "--offload")) {
            if (!strcmp(v, "none")) o->optim.offload = GPT_OFFLOAD_NONE;
            else if (!strcmp(v, "optimizer")) o->optim.offload = GPT_OFFLOAD_OPTIMIZER;
            else ok = false;
        } else {
            fprintf(stderr, "hetex gpt: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "hetex gpt: bad value '%s' for %s (see --help)\n", v, a);
            return 2;
        }
        i++;
    }
    const gpt_config *m = &o->model;
    if (m->layers < 1 || m->heads < 1 || m->width < 1 || m->width % m->heads ||
        m->context < 1 || m->batch < 1 || !(m->dropout >= 0 && m->dropout < 1) ||
        o->steps < 1 || o->eval_every < 1 || o->eval_iters < 1 || o->threads < 0 ||
        !(o->optim.lr > 0) || o->optim.warmup < 0 ||
        !(o->optim.min_lr_ratio >= 0 && o->optim.min_lr_ratio <= 1) || !(o->clip >= 0) ||
        o->dpu < -1) {
        fprintf(stderr, "hetex gpt: layers, heads, width, context, batch, steps, eval-every, "
                        "eval-iters and lr must be positive, width a multiple of heads, "
                        "0 <= dropout < 1, warmup >= 0, 0 <= min-lr-ratio <= 1, clip >= 0, "
                        "dpu >= -1\n");
        return 2;
    }
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Mean loss over eval_iters validation batches (forward only). */
static hx_status val_loss(hx_session *s, const gpt_model *m, const gpt_text *text,
                          const options *o, int32_t *tok, int32_t *tgt, double *out)
{
    uint64_t rng = 0x5eed; /* the same batches at every evaluation */
    size_t bytes = sizeof *tok * o->model.batch * o->model.context;
    double sum = 0;
    for (int i = 0; i < o->eval_iters; i++) {
        gpt_text_batch(text, true, o->model.batch, o->model.context, &rng, tok, tgt);
        float l;
        hx_feed feeds[2] = {{NULL, m->tokens, tok, bytes}, {NULL, m->targets, tgt, bytes}};
        hx_fetch fetch = {NULL, m->loss, &l, sizeof l};
        hx_status st = hx_session_run(s, feeds, 2, &fetch, 1, 0);
        if (st) return st;
        sum += l;
    }
    *out = sum / o->eval_iters;
    return HX_OK;
}

/* The offload policy in force (auto_offload's choice) and the device peak
 * measured against the one predicted for it. */
static void print_offload(hx_session *s)
{
    hx_offload_report r;
    if (hx_session_offload_report(s, &r)) return;
    printf("offload: %s parameters %s%s, activations %s (%d tensors, %zu B each way per step), "
           "chunk %zu B, prefetch depth %d; device peak %zu B reserved, predicted %zu B, cap "
           "%zu B\n", r.automatic ? "auto_offload chose" : "manual:",
           r.offload_param ? "to " : "", r.offload_param ? hx_offload_target_name(r.offload_param) : "kept",
           r.offload_activations ? "offloaded" : "kept",
           r.activations_offloaded, r.activation_bytes, r.chunk_size, r.prefetch_depth,
           r.measured_peak_reserved, r.predicted_peak, r.capacity);
}

/* Device bytes per parameter: what each offload mode keeps there by
 * construction, then this session's measured persistent bytes and the
 * step's planned transient (half copies, gradients, activations). */
static void print_memory(hx_session *s, const gpt_model *m, hx_dtype dt)
{
    hx_memory_stats ms;
    if (hx_session_memory_stats(s, &ms)) return;
    int h = (int)hx_dtype_size(dt), half_copy = dt == HX_DTYPE_F32 ? 0 : h;
    printf("memory: device bytes per param: offload none %d (f32 master and 2 moments%s, %s "
           "gradient), offload optimizer %d (%s param in, gradient out), plus activations\n",
           12 + half_copy + h, half_copy ? ", its copy" : "", hx_dtype_name(dt), 2 * h,
           hx_dtype_name(dt));
    double mib = 1.0 / (1 << 20), n = (double)m->n_params;
    size_t dev = ms.device_persistent_bytes + ms.device_transient_planned_bytes;
    printf("memory: %lld params; device %.1f MiB persistent (%.1f bytes/param) + %.1f MiB "
           "planned transient = %.1f bytes/param at the step's peak; host %.1f MiB persistent "
           "(%.1f bytes/param) + %.1f MiB transient\n",
           (long long)m->n_params, ms.device_persistent_bytes * mib,
           ms.device_persistent_bytes / n, ms.device_transient_planned_bytes * mib, dev / n,
           ms.persistent_bytes * mib, ms.persistent_bytes / n, ms.transient_planned_bytes * mib);
}

int gpt_main(int argc, char **argv)
{
    options o = {.model = {.layers = 2, .heads = 4, .width = 128, .context = 64, .batch = 32,
                           .dropout = 0, .seed = 1, .dtype = HX_DTYPE_BF16},
                 .optim = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                           .offload = GPT_OFFLOAD_OPTIMIZER, .warmup = 100,
                           .min_lr_ratio = 0.1},
                 .clip = 1.0, .dpu = -1,
                 .data = "data/tinyshakespeare/input.txt", .steps = 2000, .eval_every = 250,
                 .eval_iters = 20, .accelerator = HX_ACCELERATOR_AUTO};
    if (parse(argc, argv, &o)) return 2;

    char msg[512];
    gpt_text text;
    if (gpt_text_load(o.data, &text, msg, sizeof msg)) {
        fprintf(stderr, "hetex gpt: %s\n", msg);
        return 1;
    }
    o.model.vocab = text.vocab;
    int64_t val_len = text.n - text.n_train;
    if (text.n_train <= o.model.context || val_len <= o.model.context) {
        fprintf(stderr, "hetex gpt: '%s' is too short for context %d (train %lld, val %lld "
                "characters)\n", o.data, o.model.context, (long long)text.n_train,
                (long long)val_len);
        gpt_text_free(&text);
        return 1;
    }

    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = o.threads;
    cfg.seed = o.model.seed;
    cfg.accelerator = o.accelerator;
    cfg.max_device_memory = o.max_device_memory;
    cfg.clip_grad_norm = o.clip;
    cfg.loss_scale.enabled = o.model.dtype == HX_DTYPE_F16;
    cfg.delayed_param_update = o.dpu >= 0;
    cfg.dpu_warmup_steps = o.dpu >= 0 ? o.dpu : 0;
    if (o.offload_config && hx_offload_config_parse(o.offload_config, &cfg.offload)) {
        fprintf(stderr, "hetex gpt: --offload-config: %s\n", hx_last_error());
        gpt_text_free(&text);
        return 2;
    }
    /* The report assumes parameters on the device (gpt.h). */
    const char *env_offload = getenv("HX_OFFLOAD");
    if (o.max_device_memory && !o.offload_config && !(env_offload && *env_offload))
        gpt_plan_report(&o.model, &o.optim, &cfg);
    else if (o.max_device_memory)
        printf("plan: no report of the largest model per offload mode: it assumes parameters "
               "on the device, and parameter offload is configured\n");

    gpt_run r;
    size_t n_tok = (size_t)o.model.batch * o.model.context;
    int32_t *tok = malloc(sizeof *tok * n_tok), *tgt = malloc(sizeof *tgt * n_tok);
    int rc = 1;
    if (!tok || !tgt) {
        fprintf(stderr, "hetex gpt: out of memory\n");
        free(tok);
        free(tgt);
        gpt_text_free(&text);
        return 1;
    }
    if (gpt_run_create(&o.model, &o.optim, &cfg, &r)) {
        fprintf(stderr, "hetex gpt: %s\n", hx_last_error());
        goto out;
    }
    printf("hetex gpt: %d layers, %d heads, width %d, context %d, batch %d, vocab %d, %s; "
           "AdamW lr %g (warmup %d, cosine to x%g), clip %g; offload %s%s\n", o.model.layers,
           o.model.heads, o.model.width, o.model.context, o.model.batch, o.model.vocab,
           hx_dtype_name(o.model.dtype), o.optim.lr, o.optim.warmup, o.optim.min_lr_ratio,
           o.clip, o.optim.offload == GPT_OFFLOAD_NONE ? "none" : "optimizer",
           o.dpu >= 0 ? ", delayed parameter update" : "");
    print_memory(r.s, &r.m, o.model.dtype);

    uint64_t rng = o.model.seed;
    double t0 = now(), window = 0;
    int in_window = 0;
    for (int step = 1; step <= o.steps; step++) {
        gpt_text_batch(&text, false, o.model.batch, o.model.context, &rng, tok, tgt);
        float l;
        hx_feed feeds[2] = {{NULL, r.m.tokens, tok, sizeof *tok * n_tok},
                            {NULL, r.m.targets, tgt, sizeof *tgt * n_tok}};
        hx_fetch fetch = {NULL, r.m.loss, &l, sizeof l};
        if (hx_session_set_lr_scale(r.s, gpt_lr_scale(&o.optim, step - 1, o.steps)) ||
            hx_session_run(r.s, feeds, 2, &fetch, 1, HX_RUN_TRAIN)) {
            fprintf(stderr, "hetex gpt: step %d: %s\n", step, hx_last_error());
            goto out;
        }
        window += l;
        in_window++;
        if (step % o.eval_every == 0 || step == o.steps) {
            double vl;
            if (val_loss(r.s, &r.m, &text, &o, tok, tgt, &vl)) {
                fprintf(stderr, "hetex gpt: evaluation: %s\n", hx_last_error());
                goto out;
            }
            printf("step %5d  train loss %.4f  val loss %.4f  %.2f steps/s\n", step,
                   window / in_window, vl, step / (now() - t0));
            fflush(stdout);
            window = 0;
            in_window = 0;
        }
    }
    if (cfg.max_device_memory || o.offload_config) print_offload(r.s);
    rc = 0;
out:
    gpt_run_free(&r);
    gpt_text_free(&text);
    free(tok);
    free(tgt);
    return rc;
}
