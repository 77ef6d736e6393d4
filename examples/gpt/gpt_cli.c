/* hetex gpt: trains the GPT of gpt_model.c on a character corpus and
 * reports the validation loss every few steps. */
#include "gpt.h"
#include "cli/cli.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT_DATA "data/tinyshakespeare/input.txt" /* the bundled corpus */

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
    bool recompute; /* recompute every block in backward (offload.recompute) */
    bool no_fusion; /* hx_session_config.no_host_fusion: every op as built */
    bool pin;       /* hx_session_config.pin_update_threads */
    bool quiet;                 /* no progress output */
    double progress_interval;   /* seconds between progress lines off a terminal */
    int zero;                   /* data parallel under mpirun: the ZeRO stage; -1: off */
    const char *save, *resume;  /* checkpoint folders */
    const char *metrics;        /* JSON lines */
    const char *tensorboard;    /* a folder for TensorBoard event files */
    int sample;                 /* characters of generated text at each evaluation */
} options;

static const char usage[] =
    "usage: hetex gpt [options]\n"
    "  --data PATH             character corpus (data/tinyshakespeare/input.txt: the source\n"
    "                          tree's, else the installed PREFIX/share/hetex/data/...)\n"
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
    "  --recompute             keep only each block's input from forward and recompute its\n"
    "                          attention and MLP in backward (activation checkpointing:\n"
    "                          about a third more FLOPs, a block's activations instead of all)\n"
    "  --no-fusion             run every op as built: no host fusion of matmul + bias\n"
    "                          (+ activation) into one GEMM (for comparison)\n"
    "  --eval-every N --eval-iters N   validation loss every N steps over M batches (250 20)\n"
    "  --accelerator auto|cuda|emu|none   where DEVICE ops run (auto)\n"
    "  --placement device|auto|host   every op on the device, placed by the measured\n"
    "                          cost model, or on the host (device)\n"
    "  --offload none|optimizer   optimizer on the device, or AdamW on the host (optimizer)\n"
    "  --max-device-memory N[K|M|G]   accelerator memory cap\n"
    "  --threads N --seed N\n"
    "  --pin-update-threads    bind each thread of the host optimizer updates to a core, each\n"
    "                          rank of --zero on this host to its own cores (HX_DEBUG=pin\n"
    "                          prints them; off)\n"
    "  --quiet                 no progress output\n"
    "  --progress-interval S   seconds between progress lines when not on a terminal (10)\n"
    "  --save DIR              checkpoint folder, replaced as a whole at every evaluation,\n"
    "                          at the end and on Ctrl-C (then the run stops, exit 130)\n"
    "  --resume DIR            continue from a checkpoint folder, bitwise as if never\n"
    "                          stopped (the same flags as the run that saved it)\n"
    "  --metrics PATH          JSON lines: every step's loss, lr and tokens/s, every\n"
    "                          evaluation, the samples; appended to on --resume\n"
    "                          ('hetex plot PATH' draws them)\n"
    "  --tensorboard DIR       the same numbers as TensorBoard scalars (a new event file in\n"
    "                          DIR, made if missing: tensorboard --logdir DIR)\n"
    "  --sample N              N characters of generated text at each evaluation and at\n"
    "                          the end, drawn with --seed (100; 0: none)\n"
    "  --zero S                data parallel over mpirun's ranks, ZeRO stage S (0: gradients\n"
    "                          summed over the ranks; 1: optimizer state sharded; 2: gradients\n"
    "                          too; 3: 16-bit parameters too, gathered chunk by chunk, which\n"
    "                          with an accelerator needs --offload-config offload_param=cpu);\n"
    "                          --batch is the global batch, each rank trains on its rows of\n"
    "                          it; rank 0 reports. With --save at stages 1-3 each rank saves\n"
    "                          its shard (at evaluations and the end); --resume takes a\n"
    "                          checkpoint of any rank count, --zero or not, made with the\n"
    "                          same global --batch (off)\n";

/* The flags, their ranges and where each goes; then the checks between flags. */
static int parse(int argc, char **argv, options *o)
{
    gpt_config *m = &o->model;
    double dropout = m->dropout;
    int dtype = m->dtype == HX_DTYPE_F32 ? 0 : m->dtype == HX_DTYPE_BF16 ? 1 : 2;
    static const hx_target places[] = {HX_TARGET_DEVICE, HX_TARGET_AUTO, HX_TARGET_CPU};
    int place = m->placement == HX_TARGET_AUTO ? 1 : m->placement == HX_TARGET_CPU ? 2 : 0;
    int accel = (int)o->accelerator, offload = (int)o->optim.offload;
    const cli_flag flags[] = {
        CLI_FLAG_TEXT("--data", &o->data),
        CLI_FLAG_NUM("--layers", CLI_INT, &m->layers, 1, 1024),
        CLI_FLAG_NUM("--heads", CLI_INT, &m->heads, 1, 1024),
        CLI_FLAG_NUM("--width", CLI_INT, &m->width, 1, 65536),
        CLI_FLAG_NUM("--context", CLI_INT, &m->context, 1, 65536),
        CLI_FLAG_NUM("--batch", CLI_INT, &m->batch, 1, 65536),
        CLI_FLAG_NUM("--dropout", CLI_DOUBLE, &dropout, 0, 0.99),
        CLI_FLAG_NUM("--steps", CLI_INT, &o->steps, 1, 1000000000),
        CLI_FLAG_ABOVE("--lr", &o->optim.lr, 0, 10),
        CLI_FLAG_NUM("--beta1", CLI_DOUBLE, &o->optim.beta1, 0, 0.999999),
        CLI_FLAG_NUM("--beta2", CLI_DOUBLE, &o->optim.beta2, 0, 0.999999),
        CLI_FLAG_NUM("--weight-decay", CLI_DOUBLE, &o->optim.weight_decay, 0, 10),
        CLI_FLAG_NUM("--warmup", CLI_INT, &o->optim.warmup, 0, 1000000000),
        CLI_FLAG_NUM("--min-lr-ratio", CLI_DOUBLE, &o->optim.min_lr_ratio, 0, 1),
        CLI_FLAG_NUM("--clip", CLI_DOUBLE, &o->clip, 0, 1e6),
        CLI_FLAG_NUM("--dpu", CLI_INT, &o->dpu, -1, 1000000000),
        CLI_FLAG_TEXT("--offload-config", &o->offload_config),
        CLI_FLAG_CHOICE("--dtype", &dtype, "f32|bf16|f16"),
        CLI_FLAG_NUM("--eval-every", CLI_INT, &o->eval_every, 1, 1000000000),
        CLI_FLAG_NUM("--eval-iters", CLI_INT, &o->eval_iters, 1, 1000000),
        CLI_FLAG_NUM("--threads", CLI_INT, &o->threads, 0, 1024),
        CLI_FLAG_U64("--seed", &m->seed),
        CLI_FLAG_NUM("--max-device-memory", CLI_BYTES, &o->max_device_memory, 1 << 20, 0x1p44),
        CLI_FLAG_CHOICE("--accelerator", &accel, CLI_ACCELERATORS),
        CLI_FLAG_CHOICE("--placement", &place, "device|auto|host"),
        CLI_FLAG_CHOICE("--offload", &offload, "none|optimizer"), /* gpt_offload's order */
        CLI_FLAG_SWITCH("--quiet", &o->quiet),
        CLI_FLAG_SWITCH("--recompute", &o->recompute),
        CLI_FLAG_SWITCH("--no-fusion", &o->no_fusion),
        CLI_FLAG_SWITCH("--pin-update-threads", &o->pin),
        CLI_FLAG_ABOVE("--progress-interval", &o->progress_interval, 0, 3600),
        CLI_FLAG_NUM("--zero", CLI_INT, &o->zero, 0, 3),
        CLI_FLAG_TEXT("--save", &o->save),
        CLI_FLAG_TEXT("--resume", &o->resume),
        CLI_FLAG_TEXT("--metrics", &o->metrics),
        CLI_FLAG_TEXT("--tensorboard", &o->tensorboard),
        CLI_FLAG_NUM("--sample", CLI_INT, &o->sample, 0, 2000),
    };
    const cli_command c = {.name = "gpt", .usage = usage, .flags = flags,
                           .n_flags = CLI_COUNT(flags)};
    int rc = cli_parse(&c, argc, argv);
    if (rc) return rc;
    static const hx_dtype dtypes[] = {HX_DTYPE_F32, HX_DTYPE_BF16, HX_DTYPE_F16};
    m->dtype = dtypes[dtype];
    m->dropout = (float)dropout;
    o->accelerator = (hx_accelerator)accel;
    m->placement = places[place];
    static char data[4096];
    if (!strcmp(o->data, GPT_DATA)) o->data = cli_data_path(o->data, data, sizeof data);
    o->optim.offload = (gpt_offload)offload;
    if (m->width % m->heads)
        return cli_flag_error("gpt", "--width %d is not a multiple of --heads %d", m->width,
                              m->heads);
    if (o->save && !cli_check_output("gpt", "--save", o->save, CLI_PATH_DIR)) return CLI_EXIT_USAGE;
    if (o->metrics && !cli_check_output("gpt", "--metrics", o->metrics, CLI_PATH_FILE))
        return CLI_EXIT_USAGE;
    return CLI_OK;
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
           "chunk %zu B, prefetch depth %d, recompute %s (%d ops, %.3g FLOP per step); device "
           "peak %zu B reserved, predicted %zu B, cap %zu B\n",
           r.automatic ? "auto_offload chose" : "manual:",
           r.offload_param ? "to " : "", r.offload_param ? hx_offload_target_name(r.offload_param) : "kept",
           r.offload_activations ? "offloaded" : "kept",
           r.activations_offloaded, r.activation_bytes, r.chunk_size, r.prefetch_depth,
           r.recompute ? "on" : "off", r.recomputed_ops, r.recompute_flops,
           r.measured_peak_reserved, r.predicted_peak, r.capacity);
    if (r.automatic) printf("offload: why: %s\n", r.reason);
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

/* The training step is planned before any training (at session creation,
 * or here): a model that does not fit the device cap is refused, naming
 * the settings that would fit; one whose
 * host memory exceeds what the machine has available is refused with the
 * estimate. */
static void say_what_would_fit(const options *o, const hx_session_config *cfg)
{
    char cap[32], alternatives[512];
    snprintf(cap, sizeof cap, "%.1f MiB", cfg->max_device_memory / 1048576.0);
    int n = gpt_plan_alternatives(&o->model, &o->optim, cfg, alternatives, sizeof alternatives);
    if (n)
        fprintf(stderr, "hetex gpt: the model does not fit the device memory cap "
                "(--max-device-memory %s): its training step was planned before any training. "
                "These would fit: %s\n", cap, alternatives);
    else
        fprintf(stderr, "hetex gpt: the model does not fit the device memory cap "
                "(--max-device-memory %s), nor with its optimizer or parameters offloaded "
                "to the host: raise --max-device-memory, or lower --batch, --context, "
                "--width or --layers\n", cap);
}

static bool fits_or_says_what_would(const options *o, const hx_session_config *cfg, gpt_run *r)
{
    hx_memory_stats ms;
    hx_status st = hx_session_memory_stats(r->s, &ms);
    if (st == HX_ERR_DEVICE_OOM) {
        gpt_run_free(r); /* its device memory, before the planner tries others */
        say_what_would_fit(o, cfg);
        return false;
    }
    if (st) {
        cli_error("gpt", "planning the training step", hx_last_error());
        return false;
    }
    return cli_check_host_memory("gpt", &ms, r->s, "lower --batch or --context");
}

/* --sample's text after an evaluation: printed and written to --metrics
 * (report), or only drawn: at ZeRO stage 3 every run gathers parameters
 * over the ranks, so every rank draws it. */
static bool sample(gpt_run *r, const options *o, const gpt_text *text, int step, cli_metrics *mt,
                   bool report)
{
    if (!o->sample) return true;
    char *buf = malloc((size_t)o->sample + 1);
    if (!buf || gpt_sample(r->s, &r->m, &o->model, text, o->sample, o->model.seed + (uint64_t)step,
                           buf)) {
        cli_error("gpt", "--sample", buf ? hx_last_error() : "out of host memory");
        free(buf);
        return false;
    }
    if (!report) {
        free(buf);
        return true;
    }
    printf("sample at step %d (%d characters, --seed %llu):\n%s\n", step, o->sample,
           (unsigned long long)o->model.seed, buf);
    cli_metrics_begin(mt, "sample");
    cli_metrics_int(mt, "step", step);
    cli_metrics_text(mt, "text", buf, (size_t)o->sample);
    free(buf);
    return cli_metrics_end(mt);
}

int gpt_main(int argc, char **argv)
{
    options o = {.model = {.layers = 2, .heads = 4, .width = 128, .context = 64, .batch = 32,
                           .dropout = 0, .seed = 1, .dtype = HX_DTYPE_BF16, .recompute = true},
                 .optim = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                           .offload = GPT_OFFLOAD_OPTIMIZER, .warmup = 100,
                           .min_lr_ratio = 0.1},
                 .clip = 1.0, .dpu = -1,
                 .data = GPT_DATA, .steps = 2000, .eval_every = 250,
                 .eval_iters = 20, .accelerator = HX_ACCELERATOR_AUTO,
                 .progress_interval = 10, .zero = -1, .sample = 100};
    int prc = parse(argc, argv, &o);
    if (prc) return prc == CLI_HELP ? 0 : prc;
    hx_comm *comm = NULL;
    int rank = 0;
    if (o.zero >= 0) {
        int zrc = gpt_zero_start(o.zero, o.model.batch, &comm, &o.model.batch);
        if (zrc) return zrc;
        rank = hx_comm_rank(comm);
        o.quiet |= rank != 0; /* rank 0 reports; each rank its memory and bytes */
    }
    bool lead = rank == 0;

    char msg[512];
    gpt_text text;
    if (gpt_text_load(o.data, &text, msg, sizeof msg)) {
        fprintf(stderr, "hetex gpt: %s\n", msg);
        hx_comm_free(comm);
        return 1;
    }
    o.model.vocab = text.vocab;
    int64_t val_len = text.n - text.n_train;
    if (text.n_train <= o.model.context || val_len <= o.model.context) {
        fprintf(stderr, "hetex gpt: '%s' is too short for context %d (train %lld, val %lld "
                "characters)\n", o.data, o.model.context, (long long)text.n_train,
                (long long)val_len);
        gpt_text_free(&text);
        hx_comm_free(comm);
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
        cli_error("gpt", "--offload-config", hx_last_error());
        gpt_text_free(&text);
        hx_comm_free(comm);
        return 2;
    }
    cfg.offload.recompute |= o.recompute;
    cfg.no_host_fusion = o.no_fusion;
    cfg.pin_update_threads = o.pin;
    cfg.auto_placement = o.model.placement == HX_TARGET_AUTO;
    cfg.comm = comm;
    cfg.zero_stage = comm ? o.zero : 0;
    /* The report assumes parameters on the device (gpt.h). */
    const char *env_offload = getenv("HX_OFFLOAD");
    if (o.max_device_memory && !o.offload_config && !(env_offload && *env_offload) && !comm)
        gpt_plan_report(&o.model, &o.optim, &cfg);
    else if (o.max_device_memory && lead)
        printf("plan: no report of the largest model per offload mode: it assumes parameters "
               "on the device, and parameter offload is configured\n");

    gpt_run r;
    cli_metrics metrics = {0};
    /* every rank draws the global batch and trains on its rows of it */
    int ranks = comm ? hx_comm_size(comm) : 1;
    size_t n_tok = (size_t)o.model.batch * o.model.context, mine = (size_t)rank * n_tok;
    int32_t *tok = malloc(sizeof *tok * n_tok * ranks), *tgt = malloc(sizeof *tgt * n_tok * ranks);
    int rc = 1;
    if (!tok || !tgt) {
        fprintf(stderr, "hetex gpt: out of memory\n");
        free(tok);
        free(tgt);
        gpt_text_free(&text);
        hx_comm_free(comm);
        return 1;
    }
    hx_status created = gpt_run_create(&o.model, &o.optim, &cfg, &r);
    if (created == HX_ERR_DEVICE_OOM) { /* the session refused a step that cannot fit */
        say_what_would_fit(&o, &cfg);
        goto out;
    }
    if (created) {
        cli_error("gpt", NULL, hx_last_error());
        goto out;
    }
    if (lead) {
        printf("hetex gpt: %d layers, %d heads, width %d, context %d, batch %d, vocab %d, %s; "
               "AdamW lr %g (warmup %d, cosine to x%g), clip %g; offload %s%s%s\n", o.model.layers,
               o.model.heads, o.model.width, o.model.context, o.model.batch, o.model.vocab,
               hx_dtype_name(o.model.dtype), o.optim.lr, o.optim.warmup, o.optim.min_lr_ratio,
               o.clip, o.optim.offload == GPT_OFFLOAD_NONE ? "none" : "optimizer",
               o.dpu >= 0 ? ", delayed parameter update" : "",
               cfg.offload.recompute ? ", blocks recomputed in backward" : "");
        cli_print_accelerator(stdout, "gpt", r.s);
        cli_print_placement(stdout, "gpt", r.s);
    }
    if (!fits_or_says_what_would(&o, &cfg, &r)) goto out;
    if (lead) print_memory(r.s, &r.m, o.model.dtype);
    if (comm) {
        if (lead)
            printf("zero: %d ranks, stage %d, global batch %d (%d per rank)\n", hx_comm_size(comm),
                   o.zero, o.model.batch * hx_comm_size(comm), o.model.batch);
        fflush(stdout);
        gpt_zero_print_memory(r.s, &r.m, comm, o.zero, o.model.dtype);
    }
    uint64_t sent0 = hx_comm_bytes_sent(comm);

    gpt_resume at = {.rng = o.model.seed, .last_val = NAN};
    gpt_config global = o.model; /* the checkpoint records the global batch */
    global.batch *= ranks;
    const gpt_identity id = {&global, &o.optim, o.clip, o.dpu, o.steps, text.n, gpt_text_hash(&text),
                             comm, comm ? o.zero : 0};
    if (o.resume) {
        if (!gpt_checkpoint_load(o.resume, r.s, &id, &at)) goto out;
        if (lead) printf("hetex gpt: resumed from '%s' at step %d of %d\n", o.resume, at.step, o.steps);
    }
    if (!cli_metrics_open(&metrics, "gpt", lead ? o.metrics : NULL, lead ? o.tensorboard : NULL,
                          o.resume != NULL)) goto out;
    uint64_t rng = at.rng;
    double window = at.window, last_val = at.last_val;
    int in_window = at.in_window, first = at.step + 1;
    cli_interrupt_arm();
    cli_progress bar;
    cli_progress_start(&bar, stdout, o.quiet, o.progress_interval, "steps", "tokens",
                       (double)(o.steps - at.step) * (double)n_tok);
    for (int step = first; step <= o.steps; step++) {
        gpt_text_batch(&text, false, o.model.batch * ranks, o.model.context, &rng, tok, tgt);
        float l;
        hx_feed feeds[2] = {{NULL, r.m.tokens, tok + mine, sizeof *tok * n_tok},
                            {NULL, r.m.targets, tgt + mine, sizeof *tgt * n_tok}};
        hx_fetch fetch = {NULL, r.m.loss, &l, sizeof l};
        double lr = o.optim.lr * gpt_lr_scale(&o.optim, step - 1, o.steps);
        if (hx_session_set_lr_scale(r.s, gpt_lr_scale(&o.optim, step - 1, o.steps)) ||
            hx_session_run(r.s, feeds, 2, &fetch, 1, HX_RUN_TRAIN)) {
            cli_progress_end(&bar);
            char what[32];
            snprintf(what, sizeof what, "step %d", step);
            cli_error("gpt", what, hx_last_error());
            goto out;
        }
        window += l;
        in_window++;
        cli_progress_update(&bar, (double)(step - at.step) * (double)n_tok, window / in_window);
        cli_metrics_begin(&metrics, "step");
        cli_metrics_int(&metrics, "step", step);
        cli_metrics_num(&metrics, "loss", l);
        cli_metrics_num(&metrics, "lr", lr);
        cli_metrics_num(&metrics, "tokens_per_s", (double)(step - at.step) * (double)n_tok /
                                                      (cli_now() - bar.t0));
        if (!cli_metrics_end(&metrics)) goto out;
        cli_interrupt_tick();
        if (step % o.eval_every == 0 || step == o.steps) {
            double vl;
            cli_progress_end(&bar);
            if (val_loss(r.s, &r.m, &text, &o, tok, tgt, &vl)) {
                cli_error("gpt", "evaluation", hx_last_error());
                goto out;
            }
            double elapsed = cli_now() - bar.t0, done = step - at.step;
            if (lead) {
                printf("step %5d  train loss %.4f  val loss %.4f  lr %.3g  %.2f steps/s  %.0f "
                       "tokens/s\n", step, window / in_window, vl, lr, done / elapsed,
                       done * (double)n_tok / elapsed);
            }
            fflush(stdout);
            cli_metrics_begin(&metrics, "eval");
            cli_metrics_int(&metrics, "step", step);
            cli_metrics_num(&metrics, "train_loss", window / in_window);
            cli_metrics_num(&metrics, "val_loss", vl);
            cli_metrics_num(&metrics, "lr", lr);
            if (!cli_metrics_end(&metrics)) goto out;
            last_val = vl;
            window = 0;
            in_window = 0;
            if ((lead || o.zero == 3) && !sample(&r, &o, &text, step, &metrics, lead)) goto out;
            gpt_resume now = {step, rng, window, in_window, last_val};
            if (o.save && !gpt_checkpoint_save(o.save, r.s, &id, &now)) goto out;
        }
        if (cli_interrupted() && step < o.steps) { /* after the last step: the run is done */
            cli_progress_end(&bar);
            gpt_resume now = {step, rng, window, in_window, last_val};
            /* a sharded save is a collective, and the ranks may see the signal at different
             * steps: the last evaluation's checkpoint stands */
            bool sharded = id.zero >= 1,
                 saved = o.save && (step % o.eval_every == 0 ||
                                    (!sharded && gpt_checkpoint_save(o.save, r.s, &id, &now)));
            if (o.save && !saved && !sharded) goto out;
            if (lead)
                printf("hetex gpt: interrupted (%s) after step %d of %d; %s%s%s\n",
                       cli_interrupted() == SIGINT ? "Ctrl-C" : "SIGTERM", step, o.steps,
                       saved ? "saved to '" : o.save ? "not saved (--zero saves at evaluations "
                       "only; the last one's is in '" : "nothing saved (--save DIR keeps a run)",
                       o.save ? o.save : "", saved ? "': continue with the same flags and --resume "
                       "it" : o.save ? "'): continue with the same flags and --resume it" : "");
            rc = CLI_EXIT_INTERRUPTED;
            goto out;
        }
    }
    if (first > o.steps && lead)
        printf("hetex gpt: the checkpoint is at the last step; nothing left to train\n");
    char took[16];
    cli_duration(cli_now() - bar.t0, took, sizeof took);
    if (lead) {
        double run = (double)(o.steps - at.step) * (double)n_tok;
        printf("summary: %d steps, %.0f tokens in %s (%.0f tokens/s); final val loss %.4f\n",
               o.steps - at.step, run, took, run / (cli_now() - bar.t0), last_val);
    }
    cli_metrics_begin(&metrics, "summary");
    cli_metrics_int(&metrics, "step", o.steps);
    cli_metrics_num(&metrics, "val_loss", last_val);
    cli_metrics_num(&metrics, "seconds", cli_now() - bar.t0);
    if (!cli_metrics_end(&metrics)) goto out;
    if (lead && (cfg.max_device_memory || o.offload_config || cfg.offload.recompute)) print_offload(r.s);
    if (lead) cli_print_placement(stdout, "gpt", r.s);
    if (comm) {
        fflush(stdout);
        gpt_zero_print_comm(&r.m, comm, o.model.dtype, o.zero, hx_comm_bytes_sent(comm) - sent0, o.steps);
        if (o.zero == 3) gpt_zero_print_gathered(r.s, comm);
    }
    rc = cli_metrics_close(&metrics) ? 0 : 1;
out:
    if (rc) cli_metrics_close(&metrics);
    gpt_run_free(&r);
    hx_comm_free(comm);
    gpt_text_free(&text);
    free(tok);
    free(tgt);
    return rc;
}
