/* test_persistent_rw: hx_session_read and hx_session_write on every kind of
 * persistent tensor, as include/hetex.h states them: a parameter; a
 * constant (written in one session only); optimizer state (written, it is
 * what the next update reads, and the step count stays); the f16/bf16 copy
 * of a master fused into its update (rewritten by a write of the master,
 * set by a write of its own until the next update); and the refusals:
 * inputs and op outputs, a wrong size, another graph's tensor, NULLs. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <string.h>

enum { N = 4 };

/* The bf16 nearest a finite f, ties to even. */
static uint16_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

typedef struct model {
    hx_graph *g;
    hx_tensor *x, *w, *c, *m2, *half, *wxc;
} model;

/* loss = sum(w * x * c) + f32(sum(bf16(m2) * bf16(x))), every parameter
 * trained by Adam; m2 is read only through its bf16 cast, which the update
 * then keeps as its half copy. */
static model build(void)
{
    model m = {.g = hx_graph_create()};
    int64_t n = N;
    const float c0[N] = {1, 2, 3, 4};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 1, &n);
    m.w = hx_graph_param(m.g, "w", HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
    m.c = hx_graph_constant(m.g, "c", HX_DTYPE_F32, 1, &n, c0);
    m.m2 = hx_graph_param(m.g, "m2", HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
    m.half = hx_cast(m.g, m.m2, HX_DTYPE_BF16);
    m.wxc = hx_mul(m.g, hx_mul(m.g, m.w, m.x), m.c);
    OK(hx_tensor_set_name(m.wxc, "wxc"));
    hx_tensor *hsum = hx_reduce_sum(m.g, hx_mul(m.g, m.half, hx_cast(m.g, m.x, HX_DTYPE_BF16)), 0, NULL, false);
    hx_tensor *loss = hx_add(m.g, hx_reduce_sum(m.g, m.wxc, 0, NULL, false), hx_cast(m.g, hsum, HX_DTYPE_F32));
    OK(hx_graph_backward(m.g, loss));
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    OK(hx_graph_apply_optimizer(m.g, NULL, &adam));
    return m;
}

static void test_kinds(void)
{
    model m = build();
    CHECK(hx_tensor_kind_of(m.half) == HX_TENSOR_STATE, "the bf16 cast of m2 is kind %d, not state",
          (int)hx_tensor_kind_of(m.half));
    hx_session *s = test_session(m.g, HX_ACCELERATOR_NONE, 1);
    hx_session *s2 = test_session(m.g, HX_ACCELERATOR_NONE, 1);
    if (!s || !s2) return;
    float v[N], got[N];
    const float x[N] = {0.5f, -1.0f, 2.0f, 0.25f};

    /* a parameter */
    const float w0[N] = {0.5f, -0.75f, 1.25f, 2.0f};
    OK(hx_session_write(s, m.w, w0, sizeof w0));
    OK(hx_session_read(s, m.w, got, sizeof got));
    CHECK(!memcmp(got, w0, sizeof w0), "parameter read back");

    /* a constant: this session's value only */
    const float c5[N] = {5, 5, 5, 5};
    OK(hx_session_write(s, m.c, c5, sizeof c5));
    OK(hx_session_read(s, m.c, got, sizeof got));
    CHECK(!memcmp(got, c5, sizeof c5), "constant read back");
    OK(hx_session_read(s2, m.c, got, sizeof got));
    CHECK(got[0] == 1 && got[3] == 4, "the other session's constant changed: %g", (double)got[0]);
    hx_feed f = {"x", NULL, x, sizeof x};
    hx_fetch fe = {"wxc", NULL, v, sizeof v};
    OK(hx_session_run(s, &f, 1, &fe, 1, 0));
    for (int i = 0; i < N; i++)
        CHECK(v[i] == w0[i] * x[i] * 5, "a run reads the written constant: %g", (double)v[i]);

    /* optimizer state: the next update reads it; the step count stays */
    hx_tensor *mt = hx_graph_find(m.g, "w/exp_avg");
    OK(hx_session_read(s, mt, got, sizeof got));
    CHECK(got[0] == 0 && got[3] == 0, "exp_avg starts at 0: %g", (double)got[0]);
    const float m0[N] = {0.5f, 0.5f, -0.5f, 1.0f};
    OK(hx_session_write(s, mt, m0, sizeof m0));
    CHECK(hx_session_step(s) == 0, "a state write moved the step to %lld", (long long)hx_session_step(s));
    OK(hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN));
    OK(hx_session_read(s, mt, got, sizeof got));
    for (int i = 0; i < N; i++) {
        float g = 5 * x[i]; /* d loss / d w = c * x */
        float want = fmaf((float)(1 - 0.9), g, m0[i] * (float)0.9);
        CHECK(got[i] == want, "exp_avg[%d] after the step: %.9g, from the written %g: %.9g", i, (double)got[i],
              (double)m0[i], (double)want);
    }

    /* the bf16 copy of a master: follows the master's writes and updates */
    uint16_t h[N];
    const float m2v[N] = {1.5f, -2.25f, 3.0f, 0.125f};
    OK(hx_session_write(s, m.m2, m2v, sizeof m2v));
    OK(hx_session_read(s, m.half, h, sizeof h));
    for (int i = 0; i < N; i++) CHECK(h[i] == bf16_bits(m2v[i]), "half copy[%d] %04x after the master's write", i, h[i]);
    const uint16_t sevens[N] = {bf16_bits(7), bf16_bits(7), bf16_bits(7), bf16_bits(7)};
    OK(hx_session_write(s, m.half, sevens, sizeof sevens));
    OK(hx_session_read(s, m.half, h, sizeof h));
    OK(hx_session_read(s, m.m2, got, sizeof got));
    CHECK(!memcmp(h, sevens, sizeof h) && !memcmp(got, m2v, sizeof got), "a half copy write sets it only");
    OK(hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN));
    OK(hx_session_read(s, m.half, h, sizeof h));
    OK(hx_session_read(s, m.m2, got, sizeof got));
    for (int i = 0; i < N; i++)
        CHECK(h[i] == bf16_bits(got[i]), "the update rewrote half copy[%d] from the master %.9g: %04x", i,
              (double)got[i], h[i]);
    CHECK(hx_session_step(s) == 2, "two steps: %lld", (long long)hx_session_step(s));

    /* refusals, changing nothing */
    CHECK(hx_session_read(s, m.x, got, sizeof got) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "'x'") && strstr(hx_last_error(), "not a parameter"),
          "reading an input: %s", hx_last_error());
    CHECK(hx_session_write(s, m.wxc, got, sizeof got) == HX_ERR_INVALID_ARGUMENT, "writing an op output");
    CHECK(hx_session_read(s, m.w, got, sizeof got - 1) == HX_ERR_SHAPE, "a short buffer");
    CHECK(hx_session_write(s, m.w, NULL, sizeof got) == HX_ERR_INVALID_ARGUMENT &&
              hx_session_read(NULL, m.w, got, sizeof got) == HX_ERR_INVALID_ARGUMENT &&
              hx_session_read(s, NULL, got, sizeof got) == HX_ERR_INVALID_ARGUMENT,
          "NULL arguments");
    model other = build();
    CHECK(hx_session_read(s, other.w, got, sizeof got) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "another graph"),
          "another graph's tensor: %s", hx_last_error());
    hx_graph_free(other.g);
    hx_session_free(s);
    hx_session_free(s2);
    hx_graph_free(m.g);
}

static const test_case cases[] = {
    {"kinds", test_kinds},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "persistent_rw", cases, TEST_COUNT(cases));
}
