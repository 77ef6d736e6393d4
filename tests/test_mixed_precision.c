/* Mixed-precision optimizer offload (ZeRO-Offload style): f32 masters and
 * AdamW on the host, used on the (emu) device through their bf16 or f16
 * copies. The copy is fused into the update (written by the kernel, not
 * recomputed), the update reads the half gradient itself, and the device
 * sees 2 bytes per parameter each way per step. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 3000 };

/* loss = sum(f32(half(w))^2 * x) on the device, w's AdamW on the host. With
 * `unfused`, w also feeds a zero-scaled term, so its cast is not its only
 * use (the same values, computed the unfused way). */
typedef struct model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *w, *wh, *loss;
} model;

static model make(hx_dtype half, bool unfused, bool loss_scaling)
{
    model m = {.g = hx_graph_create()};
    int64_t n = N;
    hx_tensor *x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 1, &n);
    m.w = hx_graph_param(m.g, "w", HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
    hx_tensor_set_target(m.w, HX_TARGET_CPU);
    OK(hx_graph_push_target(m.g, HX_TARGET_DEVICE));
    m.wh = hx_cast(m.g, m.w, half);
    OK(hx_tensor_set_name(m.wh, "w_half"));
    hx_tensor *w32 = hx_cast(m.g, m.wh, HX_DTYPE_F32);
    m.loss = hx_reduce_sum(m.g, hx_mul(m.g, hx_mul(m.g, w32, w32), x), 0, NULL, false);
    hx_graph_pop_target(m.g);
    if (unfused) {
        hx_tensor *zero = hx_reduce_sum(m.g, hx_scale(m.g, m.w, 0.0f), 0, NULL, false);
        hx_tensor_set_target(zero, HX_TARGET_CPU);
        m.loss = hx_add(m.g, m.loss, zero);
    }
    OK(hx_graph_backward(m.g, m.loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_ADAMW);
    opt.lr = 0.01;
    OK(hx_graph_apply_optimizer(m.g, NULL, &opt));
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = HX_ACCELERATOR_EMU;
    cfg.loss_scale.enabled = loss_scaling;
    cfg.loss_scale.initial_scale = 256;
    OK(hx_session_create(m.g, &cfg, &m.s));
    return m;
}

static void drop(model *m)
{
    hx_session_free(m->s);
    hx_graph_free(m->g);
}

static hx_status step(model *m, const float *x)
{
    hx_feed f = {"x", NULL, x, sizeof(float) * N};
    return hx_session_run(m->s, &f, 1, NULL, 0, HX_RUN_TRAIN);
}

static void fill_x(int t, float *x)
{
    test_rng r = test_rng_make(300 + t);
    test_fill_uniform(&r, x, N, -2, 2);
}

/* The half copy holds the master rounded, bit for bit. */
static void check_copy_is_master(model *m, hx_dtype half, const char *when)
{
    float w[N];
    uint16_t got[N], want[N];
    OK(hx_session_read(m->s, m->w, w, sizeof w));
    OK(hx_session_read(m->s, m->wh, got, sizeof got));
    /* a second graph casts for us: the library's own rounding */
    hx_graph *g = hx_graph_create();
    int64_t n = N;
    hx_tensor *in = hx_graph_input(g, "w", HX_DTYPE_F32, 1, &n), *out = hx_cast(g, in, half);
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_NONE;
    hx_session *s;
    OK(hx_session_create(g, &cfg, &s));
    hx_feed f = {NULL, in, w, sizeof w};
    hx_fetch o = {NULL, out, want, sizeof want};
    OK(hx_session_run(s, &f, 1, &o, 1, 0));
    hx_session_free(s);
    hx_graph_free(g);
    CHECK(!memcmp(got, want, sizeof got), "%s: the half copy is not the master rounded", when);
}

/* Fused and unfused give the same master bit for bit after 5 steps; the
 * fused copy tracks the master; the device traffic is 2 bytes per param
 * each way. */
static void test_fused_equals_unfused(hx_dtype half)
{
    model a = make(half, false, false), b = make(half, true, false);
    hx_placement_stats ps;
    OK(hx_session_placement_stats(a.s, &ps));
    CHECK(ps.n_h2d == 3 && ps.n_d2h == 1 &&
              ps.copy_bytes == 2 * 2 * N + sizeof(float) * N + sizeof(float),
          "fused: %d h2d, %d d2h, %zu bytes per step (want the half copy in, the half "
          "gradient out, x and the loss seed)", ps.n_h2d, ps.n_d2h, ps.copy_bytes);
    float x[N], wa[N], wb[N];
    for (int t = 0; t < 5; t++) {
        fill_x(t, x);
        OK(step(&a, x));
        OK(step(&b, x));
    }
    OK(hx_session_read(a.s, a.w, wa, sizeof wa));
    OK(hx_session_read(b.s, b.w, wb, sizeof wb));
    CHECK(!memcmp(wa, wb, sizeof wa), "fused and unfused masters differ after 5 steps");
    check_copy_is_master(&a, half, "after 5 steps");

    /* hx_session_write of the master sets its copy */
    for (int i = 0; i < N; i++) wa[i] = (float)i / N - 0.37f;
    OK(hx_session_write(a.s, a.w, wa, sizeof wa));
    check_copy_is_master(&a, half, "after hx_session_write");

    /* a checkpoint carries the copy; loading restores both */
    char path[] = "/tmp/hx_mixed_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    OK(hx_session_save(a.s, path));
    fill_x(9, x);
    OK(step(&a, x));
    OK(hx_session_load(a.s, path));
    float back[N];
    OK(hx_session_read(a.s, a.w, back, sizeof back));
    CHECK(!memcmp(back, wa, sizeof wa), "load did not restore the master");
    check_copy_is_master(&a, half, "after hx_session_load");
    remove(path);
    drop(&a);
    drop(&b);
}

/* An overflow in the half gradient skips the step and halves the loss
 * scale; the master, its moments and its copy are untouched. */
static void test_overflow_skips(void)
{
    model m = make(HX_DTYPE_F16, false, true);
    float x[N], w0[N], w1[N];
    uint16_t c0[N], c1[N];
    fill_x(0, x);
    OK(step(&m, x));
    OK(hx_session_read(m.s, m.w, w0, sizeof w0));
    OK(hx_session_read(m.s, m.wh, c0, sizeof c0));
    hx_train_stats st;
    OK(hx_session_train_stats(m.s, &st));
    double scale = st.loss_scale;
    fill_x(1, x);
    x[1234] = 1e5f; /* 2 w x * scale 256 overflows f16 (max 65504) in the gradient */
    OK(step(&m, x));
    OK(hx_session_train_stats(m.s, &st));
    CHECK(st.last_skipped && st.skipped_steps == 1 && st.loss_scale == scale / 2 && st.step == 1,
          "overflow: skipped %d (%lld), scale %g (was %g), step %lld", st.last_skipped,
          (long long)st.skipped_steps, st.loss_scale, scale, (long long)st.step);
    OK(hx_session_read(m.s, m.w, w1, sizeof w1));
    OK(hx_session_read(m.s, m.wh, c1, sizeof c1));
    CHECK(!memcmp(w0, w1, sizeof w0) && !memcmp(c0, c1, sizeof c0),
          "a skipped step changed the master or its copy");
    x[1234] = 1.0f;
    OK(step(&m, x));
    OK(hx_session_train_stats(m.s, &st));
    CHECK(!st.last_skipped && st.step == 2, "the next step is taken");
    check_copy_is_master(&m, HX_DTYPE_F16, "after a skipped and a taken step");
    drop(&m);
}

static void fused_equals_unfused_bf16(void) { test_fused_equals_unfused(HX_DTYPE_BF16); }
static void fused_equals_unfused_f16(void) { test_fused_equals_unfused(HX_DTYPE_F16); }

static const test_case cases[] = {
    {"fused_equals_unfused_bf16", fused_equals_unfused_bf16},
    {"fused_equals_unfused_f16", fused_equals_unfused_f16},
    {"overflow_skips", test_overflow_skips},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "mixed_precision", cases, TEST_COUNT(cases));
}
