/* Device lowering (graph/lower.c) without a GPU: a convolution's im2col +
 * conv_gemm pair, its column gradient's col2im and its weight gradient run
 * as one kernel each on a device that has them. Here the device is emu,
 * given those kernels by the test (its backend table's kernel lookup
 * wrapped: double-precision direct convolutions standing in for cuDNN's),
 * so that the rewrite, the plans that read through it and the bytes they
 * plan are checked on any machine:
 * - rewrite: on a two-conv graph (groups, stride, padding, dilation, odd
 *   sizes) the device nodes lowered are the two forwards, the two weight
 *   gradients and the one column gradient that has a col2im, each reading
 *   the sources the kernel takes (x, w / dy, w / dy, x); none where the
 *   device has no such kernel (not for the dtype, or the ops on the CPU);
 * - runs: the lowered session's loss and gradients equal the CPU run's
 *   within f32 rounding, and two runs are bitwise equal; with recomputation
 *   the lowered kernels read the recomputed values and give the same bits
 *   as without;
 * - plan: no im2col or column-gradient step and no columns in the device
 *   arena, which is smaller than the unlowered session's; the plan's
 *   workspace is the largest columns tensor left out. */
#include "hetex.h"
#include "testutil.h"
#include "session/session.h"
#include "scheduler/plan.h"
#include "backend/backend.h"
#include "backend/node_args.h"
#include "conv_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 3, C = 4, H = 9, W = 7, C1 = 6, C2 = 4 };

typedef struct net {
    hx_graph *g;
    hx_tensor *x, *w1, *w2, *y1, *y2, *loss;
} net;

static test_rng rng;
static float xv[N * C * H * W];

/* conv1: groups 2, stride (2, 1), padding 1, dilation (1, 2), 3x3;
 * relu; conv2: groups 2, 2x3, stride 1, padding (0, 1). The
 * loss is the mean of y2 squared; x is an input (no gradient), so conv1
 * has no col2im and conv2 has one. */
static net build(hx_dtype dt, hx_target target, bool recompute)
{
    net m = {.g = hx_graph_create()};
    int64_t xs[4] = {N, C, H, W}, w1s[4] = {C1, C / 2, 3, 3}, w2s[4] = {C2, C1 / 2, 2, 3};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 4, xs);
    m.w1 = hx_graph_param(m.g, "w1", HX_DTYPE_F32, 4, w1s, hx_init_uniform(-0.5, 0.5));
    m.w2 = hx_graph_param(m.g, "w2", HX_DTYPE_F32, 4, w2s, hx_init_uniform(-0.5, 0.5));
    hx_graph_push_target(m.g, target);
    hx_tensor *x = hx_cast(m.g, m.x, dt); /* the block's input: an op outside it */
    if (recompute) hx_graph_push_recompute(m.g);
    hx_conv2d_params p1 = {{2, 1}, {1, 1}, {1, 2}, 2}, p2 = {{1, 1}, {0, 1}, {1, 1}, 2};
    hx_tensor *h = hx_relu(m.g, m.y1 = hx_conv2d(m.g, x, hx_cast(m.g, m.w1, dt), &p1));
    m.y2 = hx_conv2d(m.g, h, hx_cast(m.g, m.w2, dt), &p2);
    if (recompute) hx_graph_pop_recompute(m.g);
    hx_tensor *y = hx_cast(m.g, m.y2, HX_DTYPE_F32);
    static const int all[4] = {0, 1, 2, 3};
    m.loss = hx_reduce_mean(m.g, hx_mul(m.g, y, y), 4, all, false);
    hx_graph_pop_target(m.g);
    CHECK(m.loss && hx_graph_backward(m.g, m.loss) == HX_OK, "build: %s", hx_last_error());
    return m;
}

/* ---- the stand-in kernels: direct convolutions in double (conv_ref.h) ----------- */

static int lowered_runs[HX_LOWER_COUNT];

static hx_status stand_in(hx_lower_kind kind, conv_ref_dir dir, const hx_tensor *y, void *out,
                          void *const *in)
{
    hx__conv_args a = hx__conv_lowered_of(y, kind);
    int64_t n = hx_tensor_numel(y);
    double *acc = malloc(sizeof *acc * n);
    if (!acc || n != conv_ref_numel(dir, &a.win, a.C_out, a.groups)) {
        free(acc);
        return HX_ERR_INTERNAL;
    }
    conv_ref(dir, &a.win, a.C_out, a.groups, in[0], in[1], acc, NULL);
    for (int64_t k = 0; k < n; k++) ((float *)out)[k] = (float)acc[k];
    free(acc);
    lowered_runs[kind]++;
    return HX_OK;
}

static hx_status fake_forward(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    return stand_in(HX_LOWER_CONV2D, CONV_REF_FORWARD, y, out, in);
}

static hx_status fake_backward_data(const hx_exec *ex, const hx_tensor *y, void *out,
                                    void *const *in)
{
    return stand_in(HX_LOWER_CONV2D_BACKWARD_DATA, CONV_REF_BACKWARD_DATA, y, out, in);
}

static hx_status fake_backward_filter(const hx_exec *ex, const hx_tensor *y, void *out,
                                      void *const *in)
{
    return stand_in(HX_LOWER_CONV2D_BACKWARD_FILTER, CONV_REF_BACKWARD_FILTER, y, out, in);
}

static hx_launch_fn (*emu_kernel)(const hx_backend *b, hx_op op, hx_dtype dt);

/* emu's table with the lowered convolutions, on f32 only. */
static hx_launch_fn with_conv(const hx_backend *b, hx_op op, hx_dtype dt)
{
    if (dt == HX_DTYPE_F32 && op == HX_LOWERED_OP(HX_LOWER_CONV2D)) return fake_forward;
    if (dt == HX_DTYPE_F32 && op == HX_LOWERED_OP(HX_LOWER_CONV2D_BACKWARD_DATA))
        return fake_backward_data;
    if (dt == HX_DTYPE_F32 && op == HX_LOWERED_OP(HX_LOWER_CONV2D_BACKWARD_FILTER))
        return fake_backward_filter;
    return emu_kernel(b, op, dt);
}

static bool device_has(void *ctx, hx_target t, hx_op op, hx_dtype dt)
{
    const hx_backend *b = ctx;
    return t == HX_TARGET_DEVICE && b->kernel(b, op, dt);
}

/* An emu session of m; with `lower`, its device given the convolutions and
 * the lowering done again as session creation does it (before any plan:
 * the graph has no updates, so creation planned nothing). */
static hx_session *session(const net *m, hx_accelerator acc, bool lower, bool recompute)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = acc;
    c.n_threads = 2;
    c.offload.recompute = recompute;
    hx_session *s = NULL;
    CHECK(hx_session_create(m->g, &c, &s) == HX_OK, "session: %s", hx_last_error());
    if (!s || !lower) return s;
    hx_backend *b = s->e.be[HX_DEV_ACCEL];
    emu_kernel = b->kernel;
    b->kernel = with_conv;
    CHECK(s->e.lowered == NULL && s->e.plans == NULL, "emu lowered nothing and planned nothing");
    CHECK(hx__lower(m->g, s->e.target, device_has, b, true, hx__recompute_on(&s->e), &s->e.lowered,
                    &s->n_lowered) == HX_OK,
          "lower: %s", hx_last_error());
    return s;
}

typedef struct result {
    float loss, dw1[C1 * C / 2 * 9], dw2[C2 * C1 / 2 * 6];
} result;

static result run(hx_session *s, const net *m)
{
    result r;
    hx_feed f = {NULL, m->x, xv, sizeof xv};
    hx_fetch out[3] = {{NULL, m->loss, &r.loss, sizeof r.loss},
                       {NULL, hx_tensor_grad(m->w1), r.dw1, sizeof r.dw1},
                       {NULL, hx_tensor_grad(m->w2), r.dw2, sizeof r.dw2}};
    memset(&r, 0, sizeof r);
    CHECK(hx_session_run(s, &f, 1, out, 3, 0) == HX_OK, "run: %s", hx_last_error());
    return r;
}

static void close_to(const char *what, const float *got, const float *want, int n)
{
    double worst = 0;
    for (int k = 0; k < n; k++) {
        double e = fabs((double)got[k] - want[k]) / (fabs(want[k]) + 1e-3);
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-4, "%s: relative error %.3g against the CPU run", what, worst);
}

/* ---- cases ----------------------------------------------------------------------- */

static void test_rewrite(void)
{
    net m = build(HX_DTYPE_F32, HX_TARGET_DEVICE, false);
    hx_session *s = session(&m, HX_ACCELERATOR_EMU, true, false);
    if (!s) return;
    const hx_lowered *low = s->e.lowered;
    int kinds[HX_LOWER_COUNT] = {0};
    for (int i = 0; i < m.g->n; i++) {
        const hx_tensor *t = m.g->tensors[i];
        if (!low[i].kind) continue;
        kinds[low[i].kind]++;
        const hx_tensor *a = hx__read_src(t, 0, false, low), *b = hx__read_src(t, 1, false, low);
        switch ((hx_lower_kind)low[i].kind) {
        case HX_LOWER_CONV2D: /* x (the image), w */
            CHECK(t->op == HX_OP_CONV_GEMM && a == t->src[0]->src[0] && b == t->src[1],
                  "forward '%s' reads '%s', '%s'", t->name, a->name, b->name);
            break;
        case HX_LOWER_CONV2D_BACKWARD_DATA: /* dy, w */
            CHECK(t->op == HX_OP_COL2IM && a == t->src[0]->src[0] && b == t->src[0]->src[1] &&
                      b == m.y2->src[1],
                  "backward data '%s' reads '%s', '%s'", t->name, a->name, b->name);
            break;
        case HX_LOWER_CONV2D_BACKWARD_FILTER: /* dy, x */
            CHECK(t->op == HX_OP_CONV_GEMM_BACKWARD_W && a == t->src[0] &&
                      b == t->src[1]->src[0],
                  "backward filter '%s' reads '%s', '%s'", t->name, a->name, b->name);
            break;
        default: CHECK(false, "kind %d", low[i].kind);
        }
        CHECK(hx__n_read(t, low) == 2 && hx__run_op(t, low) == HX_LOWERED_OP(low[i].kind),
              "'%s' runs as its lowered kernel with two sources", t->name);
    }
    CHECK(kinds[HX_LOWER_CONV2D] == 2 && kinds[HX_LOWER_CONV2D_BACKWARD_FILTER] == 2 &&
              kinds[HX_LOWER_CONV2D_BACKWARD_DATA] == 1 && s->n_lowered == 5,
          "lowered %d forward, %d filter, %d data (%d in all)", kinds[HX_LOWER_CONV2D],
          kinds[HX_LOWER_CONV2D_BACKWARD_FILTER], kinds[HX_LOWER_CONV2D_BACKWARD_DATA],
          s->n_lowered);
    hx_session_free(s);
    hx_graph_free(m.g);

    /* no kernel for the dtype, or the ops on the CPU: nothing lowered */
    for (int k = 0; k < 2; k++) {
        net o = build(k ? HX_DTYPE_F32 : HX_DTYPE_BF16, k ? HX_TARGET_CPU : HX_TARGET_DEVICE, false);
        hx_session *q = session(&o, HX_ACCELERATOR_EMU, true, false);
        CHECK(q && !q->e.lowered && q->n_lowered == 0, "%s: nothing lowered",
              k ? "ops on the CPU" : "bf16 (the stand-in has f32 only)");
        const char *why = NULL;
        for (int i = 0; q && !k && i < o.g->n && !why; i++)
            why = hx__lower_why_not(o.g->tensors[i], q->e.target, q->e.lowered, device_has,
                                    q->e.be[HX_DEV_ACCEL], true, false, NULL);
        CHECK(k || (why && strstr(why, "dtype")), "why not: %s", why ? why : "(none)");
        hx_session_free(q);
        hx_graph_free(o.g);
    }
}

static void test_runs(void)
{
    net m = build(HX_DTYPE_F32, HX_TARGET_DEVICE, false);
    hx_session *cpu = session(&m, HX_ACCELERATOR_NONE, false, false);
    hx_session *plain = session(&m, HX_ACCELERATOR_EMU, false, false);
    hx_session *low = session(&m, HX_ACCELERATOR_EMU, true, false);
    if (!cpu || !plain || !low) return;
    result want = run(cpu, &m);
    memset(lowered_runs, 0, sizeof lowered_runs);
    result got = run(low, &m), again = run(low, &m);
    CHECK(lowered_runs[HX_LOWER_CONV2D] == 4 && lowered_runs[HX_LOWER_CONV2D_BACKWARD_DATA] == 2 &&
              lowered_runs[HX_LOWER_CONV2D_BACKWARD_FILTER] == 4,
          "the lowered kernels ran (%d, %d, %d times in two runs)", lowered_runs[1],
          lowered_runs[2], lowered_runs[3]);
    close_to("loss", &got.loss, &want.loss, 1);
    close_to("d w1", got.dw1, want.dw1, (int)(sizeof got.dw1 / sizeof(float)));
    close_to("d w2", got.dw2, want.dw2, (int)(sizeof got.dw2 / sizeof(float)));
    CHECK(!memcmp(&got, &again, sizeof got), "two runs are bitwise equal");

    /* the plan: no columns on the device, a smaller arena, the workspace */
    run(plain, &m);
    const hx_plan *p = low->last_plan, *q = plain->last_plan;
    size_t cols_max = 0;
    int n = m.g->n, cols_planned = 0, cols_steps = 0;
    for (int i = 0; i < n; i++) {
        const hx_tensor *t = m.g->tensors[i];
        if (t->op != HX_OP_IM2COL && t->op != HX_OP_CONV_GEMM_BACKWARD_COLS) continue;
        if (hx_tensor_nbytes(t) > cols_max) cols_max = hx_tensor_nbytes(t);
        cols_planned += p->offset[HX_DEV_ACCEL * n + i] >= 0;
    }
    for (int k = 0; k < p->n_steps; k++)
        cols_steps += p->steps[k].node->op == HX_OP_IM2COL ||
                      p->steps[k].node->op == HX_OP_CONV_GEMM_BACKWARD_COLS;
    CHECK(cols_planned == 0 && cols_steps == 0, "%d columns in the arena, %d column steps",
          cols_planned, cols_steps);
    CHECK(p->arena_bytes[HX_DEV_ACCEL] < q->arena_bytes[HX_DEV_ACCEL],
          "device arena %zu bytes lowered, %zu as built", p->arena_bytes[HX_DEV_ACCEL],
          q->arena_bytes[HX_DEV_ACCEL]);
    CHECK(p->workspace_bytes == cols_max && q->workspace_bytes == 0 &&
              hx__plan_sizes(p).workspace_bytes == cols_max,
          "workspace %zu bytes (the largest columns: %zu), %zu as built", p->workspace_bytes,
          cols_max, q->workspace_bytes);
    hx_session_free(cpu);
    hx_session_free(plain);
    hx_session_free(low);
    hx_graph_free(m.g);
}

/* The convolutions in a recompute block: the lowered backward kernels read
 * the recomputed image and the results keep their bits. */
static void test_recompute(void)
{
    net m = build(HX_DTYPE_F32, HX_TARGET_DEVICE, true);
    hx_session *keep = session(&m, HX_ACCELERATOR_EMU, true, false);
    hx_session *redo = session(&m, HX_ACCELERATOR_EMU, true, true);
    if (!keep || !redo) return;
    int reads_recomputed = 0;
    for (int i = 0; i < m.g->n; i++) {
        const hx_tensor *t = m.g->tensors[i];
        if (redo->e.lowered[i].kind == HX_LOWER_CONV2D_BACKWARD_FILTER)
            reads_recomputed += hx__read(&redo->e, t, 1)->recompute_of != NULL;
    }
    CHECK(reads_recomputed == 1, "%d weight gradients read a recomputed image (conv2's: relu's)",
          reads_recomputed);
    result a = run(keep, &m), b = run(redo, &m);
    CHECK(redo->last_plan->n_recomputed > 0, "the plan recomputes");
    CHECK(!memcmp(&a, &b, sizeof a), "recomputing gives the same bits");
    hx_session_free(keep);
    hx_session_free(redo);
    hx_graph_free(m.g);
}

static const test_case cases[] = {
    {"rewrite", test_rewrite},
    {"runs", test_runs},
    {"recompute", test_recompute},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(2424);
    test_fill_uniform(&rng, xv, N * C * H * W, -1, 1);
    return test_main(argc, argv, "lower", cases, TEST_COUNT(cases));
}
