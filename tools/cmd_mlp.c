/* hetex mlp: the foundation's main job. A 2-layer MLP learns to imitate a
 * random "teacher" network on generated data; the loss printed every few
 * steps falls as it learns. */
#include "hetex.h"
#include "commands.h"
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IN = 16, TEACHER_HIDDEN = 32, CLASSES = 4 };

typedef struct { uint64_t s; } rng;

static double rng_uniform(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((double)((z ^ (z >> 31)) >> 11) + 0.5) * 0x1.0p-53;
}

static double rng_normal(rng *r)
{
    return sqrt(-2 * log(rng_uniform(r))) * cos(6.283185307179586 * rng_uniform(r));
}

/* The teacher: label = argmax(tanh(x W1) W2). */
typedef struct { float w1[IN * TEACHER_HIDDEN], w2[TEACHER_HIDDEN * CLASSES]; } teacher;

static void teacher_init(teacher *t, rng *r)
{
    for (int i = 0; i < IN * TEACHER_HIDDEN; i++) t->w1[i] = (float)(rng_normal(r) / sqrt(IN));
    for (int i = 0; i < TEACHER_HIDDEN * CLASSES; i++) t->w2[i] = (float)rng_normal(r);
}

static void make_batch(const teacher *t, rng *r, int batch, float *x, int32_t *y)
{
    for (int b = 0; b < batch; b++) {
        float *xb = x + b * IN, h[TEACHER_HIDDEN];
        for (int i = 0; i < IN; i++) xb[i] = (float)rng_normal(r);
        for (int j = 0; j < TEACHER_HIDDEN; j++) {
            double s = 0;
            for (int i = 0; i < IN; i++) s += xb[i] * t->w1[i * TEACHER_HIDDEN + j];
            h[j] = (float)tanh(s);
        }
        int best = 0;
        double best_v = -INFINITY;
        for (int c = 0; c < CLASSES; c++) {
            double s = 0;
            for (int j = 0; j < TEACHER_HIDDEN; j++) s += h[j] * t->w2[j * CLASSES + c];
            if (s > best_v) best_v = s, best = c;
        }
        y[b] = best;
    }
}

typedef struct {
    int steps, batch, hidden, threads, every;
    double lr, momentum;
    uint64_t seed;
    const char *metrics; /* JSON lines of every step's loss, or NULL */
    const char *tensorboard; /* a folder for TensorBoard event files of the same, or NULL */
} options;

static const char usage[] =
    "usage: hetex mlp [options]\n"
    "  --steps N               training steps (3000)\n"
    "  --batch N --hidden N    batch and hidden width (64 64)\n"
    "  --lr X --momentum X     SGD (0.02 0.9)\n"
    "  --threads N             session threads, 0: all cores (0)\n"
    "  --seed N                data and initialisation (1)\n"
    "  --every N               print the mean loss every N steps (200)\n"
    "  --metrics PATH          JSON lines: every step's loss ('hetex plot PATH' draws them)\n"
    "  --tensorboard DIR       the same numbers as TensorBoard scalars (a new event file in\n"
    "                          DIR, made if missing: tensorboard --logdir DIR)\n";

static int parse(int argc, char **argv, options *o)
{
    const cli_flag flags[] = {
        CLI_FLAG_NUM("--steps", CLI_INT, &o->steps, 1, 1000000000),
        CLI_FLAG_NUM("--batch", CLI_INT, &o->batch, 1, 1 << 20),
        CLI_FLAG_NUM("--hidden", CLI_INT, &o->hidden, 1, 65536),
        CLI_FLAG_ABOVE("--lr", &o->lr, 0, 10),
        CLI_FLAG_NUM("--momentum", CLI_DOUBLE, &o->momentum, 0, 0.999999),
        CLI_FLAG_NUM("--threads", CLI_INT, &o->threads, 0, 1024),
        CLI_FLAG_U64("--seed", &o->seed),
        CLI_FLAG_NUM("--every", CLI_INT, &o->every, 1, 1000000000),
        CLI_FLAG_TEXT("--metrics", &o->metrics),
        CLI_FLAG_TEXT("--tensorboard", &o->tensorboard),
    };
    const cli_command c = {.name = "mlp", .usage = usage, .flags = flags,
                           .n_flags = CLI_COUNT(flags)};
    int rc = cli_parse(&c, argc, argv);
    if (!rc && o->metrics && !cli_check_output("mlp", "--metrics", o->metrics, CLI_PATH_FILE))
        return CLI_EXIT_USAGE;
    return rc;
}

/* x (B,IN) -> relu(x W1 + b1) (B,H) -> W2 + b2 (B,C) -> cross-entropy */
static hx_tensor *build(hx_graph *g, const options *o, hx_tensor **logits)
{
    int64_t xs[2] = {o->batch, IN}, ys[1] = {o->batch};
    int64_t w1s[2] = {IN, o->hidden}, b1s[1] = {o->hidden};
    int64_t w2s[2] = {o->hidden, CLASSES}, b2s[1] = {CLASSES};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_I32, 1, ys);
    hx_tensor *w1 = hx_graph_param(g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1.0));
    hx_tensor *b1 = hx_graph_param(g, "b1", HX_DTYPE_F32, 1, b1s, hx_init_zeros());
    hx_tensor *w2 = hx_graph_param(g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(1.0));
    hx_tensor *b2 = hx_graph_param(g, "b2", HX_DTYPE_F32, 1, b2s, hx_init_zeros());
    hx_tensor *h = hx_relu(g, hx_bias_add(g, hx_matmul(g, x, w1, false, false), b1));
    *logits = hx_bias_add(g, hx_matmul(g, h, w2, false, false), b2);
    return hx_cross_entropy(g, *logits, y);
}

static double accuracy(const float *logits, const int32_t *y, int batch)
{
    int right = 0;
    for (int b = 0; b < batch; b++) {
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (logits[b * CLASSES + c] > logits[b * CLASSES + best]) best = c;
        right += best == y[b];
    }
    return (double)right / batch;
}

int hx_cmd_mlp(int argc, char **argv)
{
    options o = {.steps = 3000, .batch = 64, .hidden = 64, .threads = 0, .every = 200,
                 .lr = 0.02, .momentum = 0.9, .seed = 1};
    int prc = parse(argc, argv, &o);
    if (prc) return prc == CLI_HELP ? 0 : prc;

    hx_graph *g = hx_graph_create();
    hx_session *s = NULL;
    float *x = malloc(sizeof *x * o.batch * IN), *logits = malloc(sizeof *logits * o.batch * CLASSES);
    int32_t *y = malloc(sizeof *y * o.batch);
    hx_tensor *logit_t = NULL, *loss = g && x && logits && y ? build(g, &o, &logit_t) : NULL;
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    opt.lr = o.lr;
    opt.momentum = o.momentum;
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = o.threads;
    cfg.seed = o.seed;
    int rc = 1;
    cli_metrics metrics = {0};
    if (!loss || hx_graph_backward(g, loss) || hx_graph_apply_optimizer(g, NULL, &opt) ||
        hx_session_create(g, &cfg, &s)) {
        cli_error("mlp", NULL, hx_last_error());
        goto out;
    }

    rng r = {o.seed};
    teacher t;
    teacher_init(&t, &r);
    printf("hetex mlp: %d-%d-%d MLP, batch %d, SGD lr %g momentum %g, %d steps\n", IN, o.hidden,
           CLASSES, o.batch, o.lr, o.momentum, o.steps);
    cli_print_accelerator(stdout, "mlp", s);
    if (!cli_metrics_open(&metrics, "mlp", o.metrics, o.tensorboard, false)) goto out;
    double window = 0;
    int in_window = 0;
    for (int step = 1; step <= o.steps; step++) {
        make_batch(&t, &r, o.batch, x, y);
        float l;
        hx_feed feeds[2] = {{"x", NULL, x, sizeof *x * o.batch * IN},
                            {"y", NULL, y, sizeof *y * o.batch}};
        hx_fetch fetch = {NULL, loss, &l, sizeof l};
        if (hx_session_run(s, feeds, 2, &fetch, 1, HX_RUN_TRAIN)) {
            char what[32];
            snprintf(what, sizeof what, "step %d", step);
            cli_error("mlp", what, hx_last_error());
            goto out;
        }
        cli_metrics_begin(&metrics, "step");
        cli_metrics_int(&metrics, "step", step);
        cli_metrics_num(&metrics, "loss", l);
        if (!cli_metrics_end(&metrics)) goto out;
        window += l;
        if (++in_window == o.every || step == o.steps) {
            printf("step %5d  loss %.4f\n", step, window / in_window);
            fflush(stdout);
            window = 0;
            in_window = 0;
        }
    }
    make_batch(&t, &r, o.batch, x, y);
    hx_feed feeds[2] = {{"x", NULL, x, sizeof *x * o.batch * IN}, {"y", NULL, y, sizeof *y * o.batch}};
    hx_fetch fetch = {NULL, logit_t, logits, sizeof *logits * o.batch * CLASSES};
    if (hx_session_run(s, feeds, 2, &fetch, 1, 0)) {
        cli_error("mlp", "evaluation", hx_last_error());
        goto out;
    }
    printf("held-out accuracy %.3f (chance %.3f)\n", accuracy(logits, y, o.batch), 1.0 / CLASSES);
    rc = cli_metrics_close(&metrics) ? 0 : 1;
out:
    cli_metrics_close(&metrics);
    hx_session_free(s);
    hx_graph_free(g);
    free(x);
    free(logits);
    free(y);
    return rc;
}
