/* test_conv: what the op reference suite (test_ops) does not reach of the
 * convolutional ops: batch norm's running statistics (updated in training
 * runs on the host and on the emulated device, used in the other runs,
 * saved and loaded with checkpoints) and the build-time errors of conv,
 * pooling and batch norm, each leaving the graph unchanged. */
#include "hetex.h"
#include "hetex_checks.h"
#include "testutil.h"
#include "tmpdir.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 4, C = 3, H = 5, W = 6, S = H * W, NX = N * C * S };
static const float MOMENTUM = 0.25f, EPS = 1e-5f;

static test_rng rng;

typedef struct bn_graph {
    hx_graph *g;
    hx_tensor *x, *gamma, *beta, *y, *mean, *var;
} bn_graph;

static bn_graph bn_build(void)
{
    bn_graph b = {.g = hx_graph_create()};
    int64_t xs[4] = {N, C, H, W}, cs[1] = {C};
    b.x = hx_graph_input(b.g, "x", HX_DTYPE_F32, 4, xs);
    b.gamma = hx_graph_param(b.g, "gamma", HX_DTYPE_F32, 1, cs, hx_init_uniform(0.5, 1.5));
    b.beta = hx_graph_param(b.g, "beta", HX_DTYPE_F32, 1, cs, hx_init_uniform(-0.5, 0.5));
    b.y = hx_batchnorm(b.g, b.x, b.gamma, b.beta, MOMENTUM, EPS);
    CHECK(b.y != NULL, "batchnorm: %s", hx_last_error());
    b.mean = hx_graph_find(b.g, "gamma/running_mean");
    b.var = hx_graph_find(b.g, "gamma/running_var");
    CHECK(b.mean && b.var, "running statistics not found: %s", hx_last_error());
    CHECK(b.mean && hx_tensor_kind_of(b.mean) == HX_TENSOR_STATE,
          "running mean is not persistent state");
    return b;
}

/* Batch mean and unbiased variance of channel c of x (N, C, S). */
static void batch_stats(const float *x, int c, double *mean, double *unbiased)
{
    double s = 0, q = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < S; k++) s += x[(n * C + c) * S + k];
    *mean = s / (N * S);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < S; k++) {
            double d = x[(n * C + c) * S + k] - *mean;
            q += d * d;
        }
    *unbiased = q / (N * S - 1);
}

/* Two training runs move the running statistics as the reference does;
 * an inference run normalises with them. */
static void running_stats_on(hx_accelerator acc)
{
    const char *where = acc == HX_ACCELERATOR_NONE ? "cpu" : "emu";
    bn_graph b = bn_build();
    hx_session *s = b.y ? test_session(b.g, acc, 2) : NULL;
    if (!s) {
        hx_graph_free(b.g);
        return;
    }
    double ref_mean[C] = {0}, ref_var[C] = {1, 1, 1};
    float x[NX], y[NX];
    for (int step = 0; step < 2; step++) {
        test_fill_uniform(&rng, x, NX, -2 + step, 3);
        hx_feed f = {NULL, b.x, x, sizeof x};
        hx_fetch out = {NULL, b.y, y, sizeof y};
        OK(hx_session_run(s, &f, 1, &out, 1, HX_RUN_TRAIN));
        for (int c = 0; c < C; c++) {
            double m, v;
            batch_stats(x, c, &m, &v);
            ref_mean[c] = (1 - MOMENTUM) * ref_mean[c] + MOMENTUM * m;
            ref_var[c] = (1 - MOMENTUM) * ref_var[c] + MOMENTUM * v;
        }
    }
    float mean[C], var[C], gamma[C], beta[C];
    OK(hx_session_read(s, b.mean, mean, sizeof mean));
    OK(hx_session_read(s, b.var, var, sizeof var));
    OK(hx_session_read(s, b.gamma, gamma, sizeof gamma));
    OK(hx_session_read(s, b.beta, beta, sizeof beta));
    for (int c = 0; c < C; c++)
        CHECK(fabs(mean[c] - ref_mean[c]) < 1e-5 && fabs(var[c] - ref_var[c]) < 1e-5 * ref_var[c],
              "%s channel %d: running mean %.7g var %.7g, want %.7g %.7g", where, c, mean[c],
              var[c], ref_mean[c], ref_var[c]);

    test_fill_uniform(&rng, x, NX, -1, 1);
    hx_feed f = {NULL, b.x, x, sizeof x};
    hx_fetch out = {NULL, b.y, y, sizeof y};
    OK(hx_session_run(s, &f, 1, &out, 1, 0));
    int bad = 0;
    for (int i = 0; i < NX; i++) {
        int c = i / S % C;
        double want = (x[i] - mean[c]) / sqrt((double)var[c] + EPS) * gamma[c] + beta[c];
        bad += !(fabs(y[i] - want) <= 1e-5 * fabs(want) + 1e-6);
    }
    CHECK(bad == 0, "%s: inference output: %d of %d elements off the running-statistics "
          "reference", where, bad, NX);
    float again[C];
    OK(hx_session_read(s, b.mean, again, sizeof again));
    CHECK(memcmp(again, mean, sizeof mean) == 0, "%s: an inference run changed the running mean",
          where);
    hx_session_free(s);
    hx_graph_free(b.g);
}

static void test_running_stats(void)
{
    running_stats_on(HX_ACCELERATOR_NONE);
    running_stats_on(HX_ACCELERATOR_EMU);
}

/* A checkpoint holds the running statistics: a fresh session that loads it
 * reads them back bitwise. */
static void test_checkpoint(void)
{
    char dir[256], path[300];
    if (!test_make_tmpdir(dir, sizeof dir, "hx-conv")) {
        CHECK(false, "no temporary directory");
        return;
    }
    snprintf(path, sizeof path, "%s/ckpt", dir);
    bn_graph b = bn_build();
    hx_session *s = b.y ? test_session(b.g, HX_ACCELERATOR_EMU, 1) : NULL;
    float x[NX], y[NX], mean[C], var[C], got[C];
    test_fill_uniform(&rng, x, NX, 1, 4);
    hx_feed f = {NULL, b.x, x, sizeof x};
    hx_fetch out = {NULL, b.y, y, sizeof y};
    if (s) {
        OK(hx_session_run(s, &f, 1, &out, 1, HX_RUN_TRAIN));
        OK(hx_session_read(s, b.mean, mean, sizeof mean));
        OK(hx_session_read(s, b.var, var, sizeof var));
        CHECK(mean[0] != 0.0f && var[0] != 1.0f, "the training run left the statistics at their "
              "initial values");
        OK(hx_session_save(s, path));
    }
    hx_session_free(s);
    s = b.y ? test_session(b.g, HX_ACCELERATOR_EMU, 1) : NULL;
    if (s) {
        OK(hx_session_read(s, b.mean, got, sizeof got));
        CHECK(got[0] == 0.0f, "a fresh session's running mean is %g, not 0", got[0]);
        OK(hx_session_load(s, path));
        OK(hx_session_read(s, b.mean, got, sizeof got));
        CHECK(memcmp(got, mean, sizeof got) == 0, "running mean not restored by the checkpoint");
        OK(hx_session_read(s, b.var, got, sizeof got));
        CHECK(memcmp(got, var, sizeof got) == 0, "running var not restored by the checkpoint");
    }
    hx_session_free(s);
    hx_graph_free(b.g);
    test_remove_tree(dir);
}

/* A builder that must fail, with a message holding `says`, adding nothing to g. */
#define EXPECT_FAIL(g, says, call)                                                              \
    do {                                                                                        \
        int n0_ = hx_graph_tensor_count(g);                                                     \
        hx_tensor *t_ = (call);                                                                 \
        CHECK(t_ == NULL && strstr(hx_last_error(), says), "%s: want a failure saying '%s', "   \
              "got %s: %s", #call, says, t_ ? "a tensor" : "this", hx_last_error());            \
        CHECK(hx_graph_tensor_count(g) == n0_, "%s added %d tensors", #call,                    \
              hx_graph_tensor_count(g) - n0_);                                                  \
    } while (0)

static void test_build_errors(void)
{
    hx_graph *g = hx_graph_create();
    int64_t xs[4] = {2, 4, 8, 8}, x3[3] = {4, 8, 8}, ws[4] = {6, 4, 3, 3}, wg[4] = {6, 2, 3, 3};
    int64_t big[4] = {6, 4, 11, 3}, cs[1] = {4}, c5[1] = {5};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 4, xs);
    hx_tensor *xh = hx_graph_input(g, "xh", HX_DTYPE_F16, 4, xs);
    hx_tensor *xi = hx_graph_input(g, "xi", HX_DTYPE_I32, 4, xs);
    hx_tensor *x3d = hx_graph_input(g, "x3", HX_DTYPE_F32, 3, x3);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 4, ws, hx_init_normal(0, 1));
    hx_tensor *w2 = hx_graph_param(g, "w2", HX_DTYPE_F32, 4, wg, hx_init_normal(0, 1));
    hx_tensor *wbig = hx_graph_param(g, "wbig", HX_DTYPE_F32, 4, big, hx_init_normal(0, 1));
    hx_tensor *gamma = hx_graph_param(g, "gamma", HX_DTYPE_F32, 1, cs, hx_init_constant(1));
    hx_tensor *beta = hx_graph_param(g, "beta", HX_DTYPE_F32, 1, cs, hx_init_zeros());
    hx_tensor *g5 = hx_graph_param(g, "g5", HX_DTYPE_F32, 1, c5, hx_init_constant(1));
    hx_conv2d_params groups3 = {.groups = 3}, neg = {.stride = {-1, 1}};
    hx_conv2d_params g2 = {.groups = 2}, pad = {.padding = {1, 1}};

    EXPECT_FAIL(g, "must be 4-D", hx_conv2d(g, x3d, w, NULL));
    EXPECT_FAIL(g, "C / groups", hx_conv2d(g, x, w2, NULL));      /* w's C/groups is 2, not 4 */
    EXPECT_FAIL(g, "multiples of groups", hx_conv2d(g, x, w2, &groups3));  /* 4 channels, 3 groups */
    EXPECT_FAIL(g, "larger than the padded input", hx_conv2d(g, x, wbig, NULL));    /* kernel 11 > 8 */
    EXPECT_FAIL(g, "one dtype", hx_conv2d(g, xh, w, NULL));
    EXPECT_FAIL(g, "f32, f16 or bf16", hx_conv2d(g, xi, w, NULL));
    EXPECT_FAIL(g, "must not be negative", hx_conv2d(g, x, w, &neg));
    /* (2^27 + 2 INT_MAX) x (2^28 + 2 INT_MAX) output pixels: past int64 unchecked */
    int64_t huge_s[4] = {1, 1, (int64_t)1 << 27, (int64_t)1 << 28}, w1s[4] = {1, 1, 1, 1};
    hx_tensor *huge = hx_graph_input(g, "huge", HX_DTYPE_F32, 4, huge_s);
    hx_tensor *w1 = hx_graph_param(g, "w1", HX_DTYPE_F32, 4, w1s, hx_init_normal(0, 1));
    hx_conv2d_params maxpad = {.padding = {INT_MAX, INT_MAX}};
    CHECK(huge && w1, "a 2^55-element input and a 1x1 kernel: %s", hx_last_error());
    EXPECT_FAIL(g, "pass HX_MAX_ELEMENTS", hx_conv2d(g, huge, w1, &maxpad));
    EXPECT_FAIL(g, "conv2d", hx_conv2d(g, NULL, w, NULL));
    EXPECT_FAIL(g, "must be 4-D", hx_max_pool2d(g, x3d, 2, 2, 0, 0, 0, 0));
    EXPECT_FAIL(g, "paddings in [0, kernel / 2]", hx_max_pool2d(g, x, 2, 2, 0, 0, 2, 0)); /* pad > k/2 */
    EXPECT_FAIL(g, "kernels must be >= 1", hx_avg_pool2d(g, x, 0, 2, 0, 0, 0, 0));
    EXPECT_FAIL(g, "larger than the padded input", hx_avg_pool2d(g, x, 9, 2, 0, 0, 0, 0));           /* 9 > 8 */
    EXPECT_FAIL(g, "f32, f16 or bf16", hx_max_pool2d(g, xi, 2, 2, 0, 0, 0, 0));
    EXPECT_FAIL(g, "must be 4-D", hx_global_avg_pool2d(g, x3d));
    EXPECT_FAIL(g, "gamma 'g5' [5]", hx_batchnorm(g, x, g5, beta, 0.1f, 1e-5f));
    EXPECT_FAIL(g, "(N, C, H, W) or (N, C)", hx_batchnorm(g, x3d, gamma, beta, 0.1f, 1e-5f));
    EXPECT_FAIL(g, "one dtype", hx_batchnorm(g, xh, gamma, beta, 0.1f, 1e-5f));
    EXPECT_FAIL(g, "eps 0 must be positive", hx_batchnorm(g, x, gamma, beta, 0.1f, 0.0f));
    EXPECT_FAIL(g, "momentum 1.5 in [0, 1]", hx_batchnorm(g, x, gamma, beta, 1.5f, 1e-5f));

    hx_tensor *y = hx_conv2d(g, x, w2, &g2);
    CHECK(y && hx_tensor_dim(y, 1) == 6 && hx_tensor_dim(y, 2) == 6, "grouped conv: %s",
          hx_last_error());
    y = hx_conv2d(g, x, w, &pad);
    CHECK(y && hx_tensor_dim(y, 2) == 8 && hx_tensor_dim(y, 3) == 8, "padded conv: %s",
          hx_last_error());
    CHECK(hx_batchnorm(g, x, gamma, beta, 0.1f, 1e-5f) != NULL, "batchnorm: %s", hx_last_error());
    EXPECT_FAIL(g, "each gamma serves one batchnorm", hx_batchnorm(g, x, gamma, beta, 0.1f, 1e-5f));
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"running_stats", test_running_stats},
    {"checkpoint", test_checkpoint},
    {"build_errors", test_build_errors},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(2411);
    return test_main(argc, argv, "conv", cases, TEST_COUNT(cases));
}
