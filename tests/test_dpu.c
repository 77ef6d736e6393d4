/* The delayed parameter update (ZeRO-Offload's DPU) against a simulation
 * of its schedule, bit for bit: after the warm-up, the forward and backward
 * of step t use the parameters updated through step t-2, while the host
 * applies step t-1's update. Also: before the warm-up ends (or with DPU
 * off) the run is the synchronous one; a plan the device reads masters in
 * updates in step; reads and checkpoints see the landed update. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 2000, STEPS = 9 };
static const double LR = 0.05;

/* loss = sum(y * y * x), y = f32(bf16(w)) on the device, SGD on the host:
 * the device sees w only through its bf16 copy (or, with `f32`, w itself). */
typedef struct model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *w;
} model;

static model make(bool dpu, int warmup, bool f32)
{
    model m = {.g = hx_graph_create()};
    int64_t n = N;
    hx_tensor *x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 1, &n);
    m.w = hx_graph_param(m.g, "w", HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
    hx_tensor_set_target(m.w, HX_TARGET_CPU);
    OK(hx_graph_push_target(m.g, HX_TARGET_DEVICE));
    hx_tensor *y = f32 ? m.w : hx_cast(m.g, hx_cast(m.g, m.w, HX_DTYPE_BF16), HX_DTYPE_F32);
    hx_tensor *loss = hx_reduce_sum(m.g, hx_mul(m.g, hx_mul(m.g, y, y), x), 0, NULL, false);
    hx_graph_pop_target(m.g);
    OK(hx_graph_backward(m.g, loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    opt.lr = LR;
    OK(hx_graph_apply_optimizer(m.g, NULL, &opt));
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 2;
    cfg.accelerator = HX_ACCELERATOR_EMU;
    cfg.delayed_param_update = dpu;
    cfg.dpu_warmup_steps = warmup;
    OK(hx_session_create(m.g, &cfg, &m.s));
    return m;
}

static void drop(model *m)
{
    hx_session_free(m->s);
    hx_graph_free(m->g);
}

static void feed(int t, float *x)
{
    test_rng r = test_rng_make(900 + t);
    test_fill_uniform(&r, x, N, -2, 2);
}

static void train(model *m, int steps, float *w_out)
{
    float x[N];
    for (int t = 0; t < steps; t++) {
        feed(t, x);
        hx_feed f = {"x", NULL, x, sizeof x};
        OK(hx_session_run(m->s, &f, 1, NULL, 0, HX_RUN_TRAIN));
    }
    OK(hx_session_read(m->s, m->w, w_out, sizeof(float) * N));
}

/* f32 -> bf16 -> f32, round to nearest even (no NaN here). */
static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* The schedule written out: grad of sum(y^2 x) is bf16(2 (x y)); SGD is
 * p = fma(-lr, g, p) in f32. */
static void simulate(const float *w0, int warmup, float *w)
{
    static float pub[N], pending[N], g[N], x[N];
    bool has_pending = false;
    memcpy(w, w0, sizeof(float) * N);
    for (int i = 0; i < N; i++) pub[i] = bf16_round(w[i]);
    for (int t = 0; t < STEPS; t++) {
        feed(t, x);
        for (int i = 0; i < N; i++) g[i] = bf16_round(2.0f * (x[i] * pub[i]));
        if (has_pending) { /* the update of step t-1 lands once step t's backward is done */
            for (int i = 0; i < N; i++) w[i] = fmaf(-(float)LR, pending[i], w[i]);
            for (int i = 0; i < N; i++) pub[i] = bf16_round(w[i]);
            has_pending = false;
        }
        if (t >= warmup) {
            memcpy(pending, g, sizeof g);
            has_pending = true;
        } else {
            for (int i = 0; i < N; i++) w[i] = fmaf(-(float)LR, g[i], w[i]);
            for (int i = 0; i < N; i++) pub[i] = bf16_round(w[i]);
        }
    }
    if (has_pending) /* reading the session lands the last one */
        for (int i = 0; i < N; i++) w[i] = fmaf(-(float)LR, pending[i], w[i]);
}

static void test_against_schedule(void)
{
    static float w0[N], got[N], want[N], sync[N];
    for (int warmup = 0; warmup <= 3; warmup += 3) {
        model m = make(true, warmup, false);
        OK(hx_session_read(m.s, m.w, w0, sizeof w0));
        train(&m, STEPS, got);
        hx_train_stats st;
        OK(hx_session_train_stats(m.s, &st));
        CHECK(st.step == STEPS, "steps taken %lld", (long long)st.step);
        drop(&m);
        simulate(w0, warmup, want);
        CHECK(!memcmp(got, want, sizeof got), "warm-up %d: DPU differs from its schedule", warmup);
    }
    /* a warm-up past the run is the synchronous run; so is DPU off */
    model a = make(true, STEPS, false), b = make(false, 0, false);
    train(&a, STEPS, got);
    train(&b, STEPS, sync);
    CHECK(!memcmp(got, sync, sizeof got), "DPU before its warm-up differs from the synchronous run");
    simulate(w0, STEPS, want);
    CHECK(!memcmp(sync, want, sizeof sync), "the synchronous run differs from its schedule");
    drop(&a);
    drop(&b);
}

/* The device reads the f32 master itself: the update cannot run behind the
 * next step, so the run updates in step. */
static void test_master_read_updates_in_step(void)
{
    static float a[N], b[N];
    model m1 = make(true, 0, true), m2 = make(false, 0, true);
    train(&m1, 5, a);
    train(&m2, 5, b);
    CHECK(!memcmp(a, b, sizeof a), "DPU on a plan that reads masters is not the synchronous run");
    drop(&m1);
    drop(&m2);
}

/* A checkpoint written right after a delayed step holds the landed update,
 * and loading it into a fresh session continues like the original. */
static void test_checkpoint_lands_the_update(void)
{
    static float a[N], b[N], x[N];
    model m1 = make(true, 0, false), m2 = make(true, 0, false);
    char path[] = "/tmp/hx_dpu_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    for (int t = 0; t < 3; t++) {
        feed(t, x);
        hx_feed f = {"x", NULL, x, sizeof x};
        OK(hx_session_run(m1.s, &f, 1, NULL, 0, HX_RUN_TRAIN));
    }
    OK(hx_session_save(m1.s, path));
    OK(hx_session_load(m2.s, path));
    for (int t = 3; t < 6; t++) {
        feed(t, x);
        hx_feed f = {"x", NULL, x, sizeof x};
        OK(hx_session_run(m1.s, &f, 1, NULL, 0, HX_RUN_TRAIN));
        OK(hx_session_run(m2.s, &f, 1, NULL, 0, HX_RUN_TRAIN));
    }
    OK(hx_session_read(m1.s, m1.w, a, sizeof a));
    OK(hx_session_read(m2.s, m2.w, b, sizeof b));
    CHECK(!memcmp(a, b, sizeof a), "a session loaded after a delayed step diverged");
    remove(path);
    drop(&m1);
    drop(&m2);
}

static const test_case cases[] = {
    {"against_schedule", test_against_schedule},
    {"master_read_updates_in_step", test_master_read_updates_in_step},
    {"checkpoint_lands_the_update", test_checkpoint_lands_the_update},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "dpu", cases, TEST_COUNT(cases));
}
