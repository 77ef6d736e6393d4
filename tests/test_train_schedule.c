/* Per-step training controls: the learning-rate scale (warmup and decay
 * schedules) and global gradient-norm clipping, on a host parameter and a
 * device (emu) parameter at once, so that both halves of the gradient scan
 * are exercised. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* loss = sum(a * xa) + sum(b * xb): the gradients of a (host) and b
 * (device) are the fed xa and xb. */
typedef struct model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *a, *b;
    int64_t na, nb;
} model;

typedef struct setup {
    hx_optimizer_kind kind;
    double lr, clip;
    int threads;
    bool loss_scaling;
    int64_t na, nb;
} setup;

static model make(setup u)
{
    model m = {.g = hx_graph_create(), .na = u.na, .nb = u.nb};
    hx_tensor *xa = hx_graph_input(m.g, "xa", HX_DTYPE_F32, 1, &u.na);
    hx_tensor *xb = hx_graph_input(m.g, "xb", HX_DTYPE_F32, 1, &u.nb);
    m.a = hx_graph_param(m.g, "a", HX_DTYPE_F32, 1, &u.na, hx_init_uniform(-1, 1));
    m.b = hx_graph_param(m.g, "b", HX_DTYPE_F32, 1, &u.nb, hx_init_uniform(-1, 1));
    hx_tensor_set_target(m.a, HX_TARGET_CPU);
    hx_tensor_set_target(m.b, HX_TARGET_DEVICE);
    hx_tensor *pa = hx_mul(m.g, m.a, xa), *pb = hx_mul(m.g, m.b, xb);
    hx_tensor_set_target(pa, HX_TARGET_CPU);
    hx_tensor_set_target(pb, HX_TARGET_DEVICE);
    hx_tensor *sa = hx_reduce_sum(m.g, pa, 0, NULL, false);
    hx_tensor *sb = hx_reduce_sum(m.g, pb, 0, NULL, false);
    hx_tensor_set_target(sb, HX_TARGET_DEVICE);
    hx_tensor *loss = hx_add(m.g, sa, sb);
    OK(hx_graph_backward(m.g, loss));
    hx_optimizer_config opt = hx_optimizer_config_default(u.kind);
    opt.lr = u.lr;
    OK(hx_graph_apply_optimizer(m.g, NULL, &opt));
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = u.threads;
    cfg.accelerator = HX_ACCELERATOR_EMU;
    cfg.clip_grad_norm = u.clip;
    cfg.loss_scale.enabled = u.loss_scaling;
    cfg.loss_scale.initial_scale = 1024;
    OK(hx_session_create(m.g, &cfg, &m.s));
    return m;
}

static void drop(model *m)
{
    hx_session_free(m->s);
    hx_graph_free(m->g);
}

static void step(model *m, const float *xa, const float *xb)
{
    hx_feed f[2] = {{"xa", NULL, xa, sizeof(float) * m->na}, {"xb", NULL, xb, sizeof(float) * m->nb}};
    OK(hx_session_run(m->s, f, 2, NULL, 0, HX_RUN_TRAIN));
}

static void read_params(model *m, float *a, float *b)
{
    OK(hx_session_read(m->s, m->a, a, sizeof(float) * m->na));
    OK(hx_session_read(m->s, m->b, b, sizeof(float) * m->nb));
}

static double grad_norm(const model *m)
{
    hx_train_stats st;
    OK(hx_session_train_stats(m->s, &st));
    return st.grad_norm;
}

static double norm_of(const float *xa, int64_t na, const float *xb, int64_t nb)
{
    double s = 0;
    for (int64_t i = 0; i < na; i++) s += (double)xa[i] * xa[i];
    for (int64_t i = 0; i < nb; i++) s += (double)xb[i] * xb[i];
    return sqrt(s);
}

/* lr 0.1 scaled by 0.5 is lr 0.05, bit for bit, for Adam over 4 steps;
 * scale 0 leaves SGD's params as they were; a bad scale is refused. */
static void test_lr_scale(void)
{
    enum { NA = 300, NB = 200 };
    float xa[NA], xb[NB], a1[NA], b1[NB], a2[NA], b2[NB];
    model m1 = make((setup){HX_OPTIMIZER_ADAM, 0.1, 0, 1, false, NA, NB});
    model m2 = make((setup){HX_OPTIMIZER_ADAM, 0.05, 0, 1, false, NA, NB});
    OK(hx_session_set_lr_scale(m1.s, 0.5));
    test_rng r = test_rng_make(7);
    for (int t = 0; t < 4; t++) {
        test_fill_uniform(&r, xa, NA, -2, 2);
        test_fill_uniform(&r, xb, NB, -2, 2);
        step(&m1, xa, xb);
        step(&m2, xa, xb);
    }
    read_params(&m1, a1, b1);
    read_params(&m2, a2, b2);
    CHECK(!memcmp(a1, a2, sizeof a1) && !memcmp(b1, b2, sizeof b1),
          "lr 0.1 x scale 0.5 differs from lr 0.05");
    CHECK(hx_session_set_lr_scale(m1.s, -1) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "finite and >= 0"),
          "a negative lr scale: %s", hx_last_error());
    CHECK(hx_session_set_lr_scale(m1.s, NAN) == HX_ERR_INVALID_ARGUMENT, "a NaN lr scale accepted");
    CHECK(hx_session_set_lr_scale(NULL, 1) == HX_ERR_INVALID_ARGUMENT, "a NULL session accepted");
    drop(&m1);
    drop(&m2);

    model m = make((setup){HX_OPTIMIZER_SGD, 0.1, 0, 1, false, NA, NB});
    read_params(&m, a1, b1);
    OK(hx_session_set_lr_scale(m.s, 0));
    step(&m, xa, xb);
    read_params(&m, a2, b2);
    CHECK(!memcmp(a1, a2, sizeof a1) && !memcmp(b1, b2, sizeof b1), "lr scale 0 moved SGD's params");
    drop(&m);
}

/* SGD without momentum: p' = p - lr * g * coef, coef = min(1, clip / (norm + 1e-6)). */
static void check_clipped_step(bool loss_scaling)
{
    enum { NA = 1000, NB = 700 };
    static float xa[NA], xb[NB], a0[NA], b0[NB], a1[NA], b1[NB];
    const double lr = 0.25;
    test_rng r = test_rng_make(11 + loss_scaling);
    test_fill_uniform(&r, xa, NA, -3, 3);
    test_fill_uniform(&r, xb, NB, -3, 3);
    double norm = norm_of(xa, NA, xb, NB);
    for (int k = 0; k < 3; k++) {
        double clip = k == 0 ? norm / 4 : k == 1 ? norm / 1.5 : norm * 2; /* the last: no clipping */
        model m = make((setup){HX_OPTIMIZER_SGD, lr, clip, 2, loss_scaling, NA, NB});
        read_params(&m, a0, b0);
        step(&m, xa, xb);
        read_params(&m, a1, b1);
        double got = grad_norm(&m), coef = fmin(1.0, clip / (norm + 1e-6));
        CHECK(fabs(got - norm) <= 1e-12 * norm, "grad_norm %.17g, reference %.17g (loss scaling %d)",
              got, norm, loss_scaling);
        double moved = 0, worst = 0;
        for (int i = 0; i < NA + NB; i++) {
            double p0 = i < NA ? a0[i] : b0[i - NA], p1 = i < NA ? a1[i] : b1[i - NA];
            double g = i < NA ? xa[i] : xb[i - NA], want = p0 - lr * g * coef;
            double err = fabs(p1 - want) / (fabs(p0) + fabs(lr * g)); /* f32 rounding */
            worst = err > worst ? err : worst;
            moved += (p1 - p0) * (p1 - p0);
        }
        CHECK(worst < 1e-6, "clip %g: a param is %g off p - lr g coef (coef %g)", clip, worst, coef);
        /* the step taken has norm lr * min(norm, clip) */
        double want = lr * fmin(norm, clip);
        CHECK(fabs(sqrt(moved) - want) < 1e-4 * want, "clip %g: the step's norm %g, want %g", clip,
              sqrt(moved), want);
        drop(&m);
    }
}

static void test_clipping(void)
{
    check_clipped_step(false);
    check_clipped_step(true);
}

/* The norm of gradients larger than one scan block is the same at 1 and 2
 * threads (host and device), and clipping below it gives the same params. */
static void test_norm_thread_invariant(void)
{
    enum { NA = 150001, NB = 70001 };
    float *xa = malloc(sizeof *xa * NA), *xb = malloc(sizeof *xb * NB);
    float *a[2] = {malloc(sizeof(float) * NA), malloc(sizeof(float) * NA)};
    float *b[2] = {malloc(sizeof(float) * NB), malloc(sizeof(float) * NB)};
    test_rng r = test_rng_make(21);
    test_fill_uniform(&r, xa, NA, -1, 1);
    test_fill_uniform(&r, xb, NB, -1, 1);
    double norm = norm_of(xa, NA, xb, NB), got[2];
    for (int k = 0; k < 2; k++) {
        model m = make((setup){HX_OPTIMIZER_ADAMW, 0.01, norm / 3, k + 1, false, NA, NB});
        step(&m, xa, xb);
        got[k] = grad_norm(&m);
        read_params(&m, a[k], b[k]);
        drop(&m);
    }
    CHECK(got[0] == got[1], "grad_norm at 1 and 2 threads: %.17g vs %.17g", got[0], got[1]);
    CHECK(fabs(got[0] - norm) <= 1e-10 * norm, "grad_norm %.17g, reference %.17g", got[0], norm);
    CHECK(!memcmp(a[0], a[1], sizeof(float) * NA) && !memcmp(b[0], b[1], sizeof(float) * NB),
          "clipped AdamW params differ between 1 and 2 threads");
    free(xa), free(xb), free(a[0]), free(a[1]), free(b[0]), free(b[1]);
}

/* A NaN gradient reports a non-finite norm and changes nothing; a bad clip
 * setting is refused at creation. */
static void test_errors(void)
{
    enum { NA = 64, NB = 64 };
    float xa[NA], xb[NB], a0[NA], b0[NB], a1[NA], b1[NB];
    test_rng r = test_rng_make(5);
    test_fill_uniform(&r, xa, NA, -1, 1);
    test_fill_uniform(&r, xb, NB, -1, 1);
    xb[17] = NAN;
    model m = make((setup){HX_OPTIMIZER_SGD, 0.1, 1.0, 1, false, NA, NB});
    read_params(&m, a0, b0);
    hx_feed f[2] = {{"xa", NULL, xa, sizeof xa}, {"xb", NULL, xb, sizeof xb}};
    CHECK(hx_session_run(m.s, f, 2, NULL, 0, HX_RUN_TRAIN) == HX_ERR_NUMERIC &&
              strstr(hx_last_error(), "'b'"),
          "a NaN gradient of b: %s", hx_last_error());
    read_params(&m, a1, b1);
    CHECK(!memcmp(a0, a1, sizeof a0) && !memcmp(b0, b1, sizeof b0), "a failed step moved params");
    CHECK(!isfinite(grad_norm(&m)), "the norm of a NaN gradient is %g", grad_norm(&m));
    drop(&m);

    hx_graph *g = hx_graph_create();
    int64_t n = 4;
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
    OK(hx_graph_backward(g, hx_reduce_sum(g, w, 0, NULL, false)));
    hx_session_config cfg = hx_session_config_default();
    hx_session *s = NULL;
    double bad[] = {-1, NAN, INFINITY};
    for (int k = 0; k < 3; k++) {
        cfg.clip_grad_norm = bad[k];
        CHECK(hx_session_create(g, &cfg, &s) == HX_ERR_INVALID_ARGUMENT && !s &&
                  strstr(hx_last_error(), "clip_grad_norm"),
              "clip_grad_norm %g: %s", bad[k], hx_last_error());
    }
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"lr_scale", test_lr_scale},
    {"clipping", test_clipping},
    {"norm_thread_invariant", test_norm_thread_invariant},
    {"errors", test_errors},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "train_schedule", cases, TEST_COUNT(cases));
}
