/* cuDNN convolutions on the GPU (kernels/gpu/conv_cudnn.c, the lowering of
 * graph/lower.c):
 * - kernels: forward, backward data and backward filter against a direct
 *   double convolution (tests/util/conv_ref.h) on fixed and random shapes
 *   (odd sizes, groups, depthwise, stride > kernel, dilation, padding) in
 *   f32, f16 and bf16, each element within its rounding bound: the output
 *   dtype's half unit of |want| plus (K + 2) f32 units of the sum of
 *   |products| (K products per element), times 2; the workspace stays under
 *   the columns' bytes; a second call gives the same bits;
 * - graph: a two-conv graph on the cuda device lowers its five conv nodes
 *   (two forwards, two weight gradients, one column gradient), plans no
 *   columns on the device, gives the CPU run's loss and gradients within
 *   the dtype's tolerance and the same bits on a second run.
 * Prints the cuDNN library opened and its version. Skips without a device;
 * fails where cuDNN does not open (the log says why). */
#include "gpu_testutil.h"
#include "conv_ref.h"
#include "session/session.h"
#include "scheduler/plan.h"

#include <math.h>

static test_rng rng;

typedef struct shape {
    int64_t N, C, H, W, C_out, groups, kh, kw, sh, sw, ph, pw, dh, dw;
} shape;

static const shape fixed[] = {
    {2, 3, 7, 5, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1},    /* odd sizes, padding */
    {3, 4, 9, 8, 6, 2, 3, 2, 2, 1, 1, 0, 1, 2},    /* groups, dilation */
    {2, 6, 8, 7, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1},    /* depthwise */
    {2, 4, 11, 10, 4, 1, 2, 2, 3, 3, 0, 1, 1, 1},  /* stride > kernel */
    {4, 16, 16, 16, 32, 1, 3, 3, 2, 2, 1, 1, 1, 1} /* a ResNet downsampling conv */
};
enum { N_FIXED = sizeof fixed / sizeof fixed[0], N_RANDOM = 6 };

static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(test_rng_u64(&rng) % (uint64_t)(hi - lo + 1)); }

static shape random_shape(void)
{
    for (;;) {
        shape s = {pick(1, 3), 0, pick(3, 12), pick(3, 12), 0, pick(1, 3), pick(1, 4), pick(1, 4),
                   pick(1, 3), pick(1, 3), pick(0, 2), pick(0, 2), pick(1, 2), pick(1, 2)};
        s.C = s.groups * pick(1, 3);
        s.C_out = s.groups * pick(1, 3);
        if (s.dh * (s.kh - 1) < s.H + 2 * s.ph && s.dw * (s.kw - 1) < s.W + 2 * s.pw) return s;
    }
}

static hx_k_window window_of(const shape *s)
{
    hx_k_window w = {s->N, s->C, s->H, s->W, 0, 0, s->kh, s->kw, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw};
    w.OH = (w.H + 2 * w.ph - w.dh * (w.kh - 1) - 1) / w.sh + 1;
    w.OW = (w.W + 2 * w.pw - w.dw * (w.kw - 1) - 1) / w.sw + 1;
    return w;
}

/* Elements of each operand: [0] x, [1] w, [2] y. */
static void sizes(const hx_k_window *w, const shape *s, int64_t n[3])
{
    n[0] = w->N * w->C * w->H * w->W;
    n[1] = s->C_out * (s->C / s->groups) * w->kh * w->kw;
    n[2] = w->N * s->C_out * w->OH * w->OW;
}

/* 1: within the bound, 0: not, -1: cuDNN offers no deterministic algorithm
 * within the columns' bytes (the backend then runs the node as built). */
static int check_one(const shape *s, hx_kdtype dt, hx_gk_conv_dir dir, void *dnn, hx_gk_ctx *c)
{
    static const char *dirs[] = {"forward", "backward data", "backward filter"};
    hx_k_window w = window_of(s);
    hx_gk_conv p = {w, s->C_out, s->groups};
    int64_t n[3];
    sizes(&w, s, n);
    /* operands: forward x, w; data dy, w; filter dy, x; result y, dx, dw */
    int ia = dir == HX_GK_CONV_FORWARD ? 0 : 2, ib = dir == HX_GK_CONV_BACKWARD_FILTER ? 0 : 1,
        io = dir == HX_GK_CONV_FORWARD ? 2 : dir == HX_GK_CONV_BACKWARD_DATA ? 0 : 1;
    float *a = gt_random(&rng, n[ia], -1, 1), *b = gt_random(&rng, n[ib], -1, 1);
    void *da = gt_upload(dt, a, n[ia]), *db = gt_upload(dt, b, n[ib]); /* a, b now rounded */
    void *dout = gt_poisoned(dt, n[io]);
    size_t es = hx_k_dtype_size(dt), cols = (size_t)(w.N * w.C * w.kh * w.kw * w.OH * w.OW) * es;
    size_t limit = cols < c->scratch_bytes ? cols : c->scratch_bytes, ws = 0;
    int algo = -1;
    char what[200];
    snprintf(what, sizeof what, "%s N%lld C%lld %lldx%lld -> %lld, g%lld, k%lldx%lld s%lld,%lld "
             "p%lld,%lld d%lld,%lld", dirs[dir], (long long)s->N, (long long)s->C, (long long)s->H,
             (long long)s->W, (long long)s->C_out, (long long)s->groups, (long long)s->kh,
             (long long)s->kw, (long long)s->sh, (long long)s->sw, (long long)s->ph,
             (long long)s->pw, (long long)s->dh, (long long)s->dw);
    hx_gk_status st = hx_gk_conv_cudnn_algo(dnn, c, dt, dir, &p, limit, &algo, &ws);
    if (st == HX_GK_BAD_ARG) { /* the backend runs this one as built (backend_cuda_cudnn.c) */
        printf("%s (%s): no deterministic cuDNN algorithm within %zu bytes: runs as built\n", what,
               dt == HX_K_F32 ? "f32" : dt == HX_K_F16 ? "f16" : "bf16", limit);
        free(a), free(b);
        cudaFree(da), cudaFree(db), cudaFree(dout);
        return -1;
    }
    CHECK(!st && ws <= limit, "%s: algorithm: %s (workspace %zu of %zu)", what,
          hx_gk_cudnn_strerror(st), ws, limit);
    if (!st) st = hx_gk_conv_cudnn(dnn, c, dt, dir, &p, algo, ws, dout, da, db);
    CHECK(!st, "%s: %s", what, hx_gk_cudnn_strerror(st));
    float *got = gt_download(c, dt, dout, n[io]);
    double *want = malloc(sizeof *want * n[io]), *mag = malloc(sizeof *mag * n[io]);
    conv_ref((conv_ref_dir)dir, &w, s->C_out, s->groups, a, b, want, mag);
    int64_t K = dir == HX_GK_CONV_FORWARD ? n[1] / s->C_out
              : dir == HX_GK_CONV_BACKWARD_DATA ? s->C_out / s->groups * w.kh * w.kw
                                                : w.N * w.OH * w.OW;
    double u_out = dt == HX_K_F32 ? 0x1p-24 : dt == HX_K_F16 ? 0x1p-11 : 0x1p-8;
    int64_t bad = -1;
    double worst = 0;
    for (int64_t k = 0; k < n[io]; k++) {
        double bound = 2 * (u_out * fabs(want[k]) + (double)(K + 2) * 0x1p-24 * mag[k]) + 1e-30;
        double e = fabs(got[k] - want[k]) / bound;
        if (!(e <= 1)) bad = bad < 0 ? k : bad;
        if (e > worst || e != e) worst = e;
    }
    CHECK(bad < 0, "%s (%s): element %lld is %.9g, want %.9g (%.2f of its bound)", what,
          dt == HX_K_F32 ? "f32" : dt == HX_K_F16 ? "f16" : "bf16", (long long)bad,
          bad >= 0 ? got[bad] : 0.0, bad >= 0 ? want[bad] : 0.0, worst);
    /* again: the same algorithm, the same bits */
    void *again = gt_poisoned(dt, n[io]);
    if (!st) st = hx_gk_conv_cudnn(dnn, c, dt, dir, &p, algo, ws, again, da, db);
    float *got2 = gt_download(c, dt, again, n[io]);
    CHECK(!st && !memcmp(got, got2, sizeof *got * n[io]), "%s: a second call gives the same bits", what);
    free(a), free(b), free(got), free(got2), free(want), free(mag);
    cudaFree(da), cudaFree(db), cudaFree(dout), cudaFree(again);
    return bad < 0;
}

static void test_kernels(void)
{
    const char *lib = NULL;
    int ok = hx_gk_cudnn_load(&lib);
    printf("cuDNN: %s: %s, version %zu (built against %zu)\n", ok ? "opened" : "NOT USABLE", lib,
           hx_gk_cudnn_version(), hx_gk_cudnn_built_version());
    CHECK(ok, "cuDNN does not open: %s", lib);
    if (!ok) return;
    hx_gk_ctx c = gt_ctx((size_t)64 << 20);
    void *dnn = NULL;
    hx_gk_status st = hx_gk_cudnn_create(c.stream, &dnn);
    CHECK(!st, "cudnnCreate: %s", hx_gk_cudnn_strerror(st));
    int cases = 0, good = 0, as_built = 0;
    for (int k = 0; !st && k < N_FIXED + N_RANDOM; k++) {
        shape s = k < N_FIXED ? fixed[k] : random_shape();
        for (int dt = HX_K_F32; dt <= HX_K_BF16; dt++)
            for (int dir = HX_GK_CONV_FORWARD; dir <= HX_GK_CONV_BACKWARD_FILTER; dir++) {
                int r = check_one(&s, (hx_kdtype)dt, (hx_gk_conv_dir)dir, dnn, &c);
                cases++, good += r > 0, as_built += r < 0;
            }
    }
    printf("cudnn kernels: %d of %d cases within their bounds, %d with no deterministic "
           "algorithm in the columns' bytes (run as built)\n", good, cases, as_built);
    hx_gk_cudnn_destroy(dnn);
    gt_ctx_free(&c);
}

/* ---- the lowering on the device ---------------------------------------------------- */

enum { GN = 4, GC = 8, GH = 13, GW = 11 };

typedef struct net {
    hx_graph *g;
    hx_tensor *x, *w1, *w2, *loss;
} net;

/* conv 3x3 pad 1 stride 2 (8 -> 16), relu, depthwise 3x3 dilation 2 pad 2;
 * loss: the mean of the output squared (f32). */
static net build(hx_dtype dt)
{
    net m = {.g = hx_graph_create()};
    int64_t xs[4] = {GN, GC, GH, GW}, w1s[4] = {16, GC, 3, 3}, w2s[4] = {16, 1, 3, 3};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 4, xs);
    m.w1 = hx_graph_param(m.g, "w1", HX_DTYPE_F32, 4, w1s, hx_init_uniform(-0.3, 0.3));
    m.w2 = hx_graph_param(m.g, "w2", HX_DTYPE_F32, 4, w2s, hx_init_uniform(-0.3, 0.3));
    hx_graph_push_target(m.g, HX_TARGET_DEVICE);
    hx_conv2d_params p1 = {{2, 2}, {1, 1}, {1, 1}, 1}, p2 = {{1, 1}, {2, 2}, {2, 2}, 16};
    hx_tensor *h = hx_relu(m.g, hx_conv2d(m.g, hx_cast(m.g, m.x, dt), hx_cast(m.g, m.w1, dt), &p1));
    hx_tensor *y = hx_cast(m.g, hx_conv2d(m.g, h, hx_cast(m.g, m.w2, dt), &p2), HX_DTYPE_F32);
    static const int all[4] = {0, 1, 2, 3};
    m.loss = hx_reduce_mean(m.g, hx_mul(m.g, y, y), 4, all, false);
    hx_graph_pop_target(m.g);
    CHECK(m.loss && hx_graph_backward(m.g, m.loss) == HX_OK, "build: %s", hx_last_error());
    return m;
}

typedef struct result {
    float loss, dw1[16 * GC * 9], dw2[16 * 9];
} result;

static float xv[GN * GC * GH * GW];

static hx_status run(hx_session *s, const net *m, result *r)
{
    hx_feed f = {NULL, m->x, xv, sizeof xv};
    hx_fetch out[3] = {{NULL, m->loss, &r->loss, sizeof r->loss},
                       {NULL, hx_tensor_grad(m->w1), r->dw1, sizeof r->dw1},
                       {NULL, hx_tensor_grad(m->w2), r->dw2, sizeof r->dw2}};
    memset(r, 0, sizeof *r);
    return hx_session_run(s, &f, 1, out, 3, 0);
}

static void close_to(const char *what, hx_dtype dt, const float *got, const float *want, int n)
{
    double tol = dt == HX_DTYPE_F32 ? 1e-4 : 5e-2, worst = 0, scale = 0;
    for (int k = 0; k < n; k++) scale = fmax(scale, fabs(want[k]));
    for (int k = 0; k < n; k++) worst = fmax(worst, fabs((double)got[k] - want[k]) / (scale + 1e-30));
    CHECK(worst <= tol, "%s (%s): error %.3g of the largest |value| against the CPU run (tolerance %g)",
          what, hx_dtype_name(dt), worst, tol);
}

static void graph_on(hx_dtype dt)
{
    net m = build(dt);
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_NONE;
    hx_session *cpu = NULL, *dev = NULL;
    CHECK(hx_session_create(m.g, &c, &cpu) == HX_OK, "cpu session: %s", hx_last_error());
    c.accelerator = HX_ACCELERATOR_CUDA;
    CHECK(hx_session_create(m.g, &c, &dev) == HX_OK, "cuda session: %s", hx_last_error());
    result want, got, again;
    if (cpu && dev) {
        CHECK(dev->n_lowered == 5, "%s: %d conv nodes lowered, want 5", hx_dtype_name(dt),
              dev->n_lowered);
        CHECK(run(cpu, &m, &want) == HX_OK, "cpu run: %s", hx_last_error());
        CHECK(run(dev, &m, &got) == HX_OK, "cuda run: %s", hx_last_error());
        CHECK(run(dev, &m, &again) == HX_OK, "cuda run: %s", hx_last_error());
        close_to("loss", dt, &got.loss, &want.loss, 1);
        close_to("d w1", dt, got.dw1, want.dw1, (int)(sizeof got.dw1 / sizeof(float)));
        close_to("d w2", dt, got.dw2, want.dw2, (int)(sizeof got.dw2 / sizeof(float)));
        CHECK(!memcmp(&got, &again, sizeof got), "%s: two cuda runs are bitwise equal",
              hx_dtype_name(dt));
        const hx_plan *p = dev->last_plan;
        int planned = 0, steps = 0;
        for (int i = 0; i < m.g->n; i++) {
            hx_op op = m.g->tensors[i]->op;
            if (op == HX_OP_IM2COL || op == HX_OP_CONV_GEMM_BACKWARD_COLS)
                planned += p->offset[HX_DEV_ACCEL * m.g->n + i] >= 0;
        }
        for (int k = 0; k < p->n_steps; k++)
            steps += p->steps[k].node->op == HX_OP_IM2COL ||
                     p->steps[k].node->op == HX_OP_CONV_GEMM_BACKWARD_COLS;
        CHECK(!planned && !steps && p->workspace_bytes > 0,
              "%s: %d columns on the device, %d column steps, workspace bound %zu",
              hx_dtype_name(dt), planned, steps, p->workspace_bytes);
        printf("graph %s: loss %.6g (cpu %.6g), device arena %zu bytes, workspace bound %zu\n",
               hx_dtype_name(dt), got.loss, want.loss, p->arena_bytes[HX_DEV_ACCEL],
               p->workspace_bytes);
    }
    hx_session_free(cpu);
    hx_session_free(dev);
    hx_graph_free(m.g);
}

static void test_graph(void)
{
    test_fill_uniform(&rng, xv, GN * GC * GH * GW, -1, 1);
    graph_on(HX_DTYPE_F32);
    graph_on(HX_DTYPE_F16);
    graph_on(HX_DTYPE_BF16);
}

static const test_case cases[] = {{"kernels", test_kernels}, {"graph", test_graph}};

int main(int argc, char **argv)
{
    rng = test_rng_make(2424);
    test_options o = {.setup = gt_require_device};
    return test_main_with(argc, argv, "gpu_cudnn", cases, TEST_COUNT(cases), &o);
}
