/* Host fusion (graph/lower.c's host rules, backend/backend_cpu_fused.c):
 * an MLP of three linear layers (matmul + bias_add), each followed by an
 * activation (gelu, relu, gelu_erf), run on the host with fusion on and
 * off (hx_session_config.no_host_fusion):
 * - train: each bias_add runs as one fused GEMM reading x, w and b (the
 *   activations not: their gradients read the pre-activation); the plan
 *   has no step for the three forward matmuls; loss and every gradient are
 *   bitwise those of the unfused session, run after run;
 * - inference (no backward): the activations fuse too (all three kinds),
 *   and neither the matmuls nor the bias_adds are planned; outputs bitwise;
 * - recompute: with the MLP in a recompute block, a recomputing session
 *   fuses the forward activations (their pre-activation is read by the
 *   recomputed copy's gradient, not by them), gives the bits of the
 *   unfused one, and every fused node reads its group's own matmul inputs;
 * - half: the same MLP stored in bf16 and in f16 fuses as in f32 (the
 *   epilogue rounds each stage through the dtype), and training and
 *   inference give the unfused session's bits;
 * - why not: a bias_add on the host of a matmul on the (emulated) device
 *   is not fused, nor (in training) the activation whose gradient reads
 *   the pre-activation, and hx__lower_why_not says so.
 * Residual add + layernorm (HX_LOWER_ADD_LAYERNORM), on a net of two
 * pre-norm residual blocks and a final layernorm:
 * - residual: the two layernorms of a residual sum run as one kernel that
 *   writes the sum too, the adds' steps run nothing; loss, output and every
 *   gradient bitwise the unfused session's at 1 and 2 threads; the
 *   gradients agree with central finite differences of a double reference
 *   of the net;
 * - residual_half: the same net stored in bf16 and in f16 fuses the same
 *   two layernorms (hx_k_add_layernorm_half) and gives the unfused bits;
 * - residual_why_not: a sum some node reads without depending on the
 *   layernorm, and an add that broadcasts, are not fused (and say why).
 * Attention through head-swap permutes (HX_LOWER_MATMUL_PERMUTED*), on
 * softmax(q k^T / sqrt(D)) v of three (B,T,C) params split into heads:
 * - attention: the scores and the gradient of the product read their
 *   permuted operands in place, the four permutes of matmuls (the product,
 *   dq, dk, dv) run their matmul writing in place, no plan step copies a
 *   head-swap permute (8 without fusion); loss, output and gradients bitwise
 *   the unfused session's at 1 and 2 threads, the gradients against central
 *   differences of a double reference; the same recomputing the attention;
 * - attention_half: the same bits in bf16 and f16, and (f32, bf16) on
 *   256 x 256 scores that gemm.c tiles differently per call of H matrices.
 * The fused kernels' bits against their chains at 1-3 threads are
 * test_kernels' gemm_fused and add_layernorm; the unfused ops' double
 * references and finite differences are test_ops'. */
#include "hetex.h"
#include "testutil.h"
#include "session/session.h"
#include "scheduler/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, T = 5, D0 = 20, D1 = 300, D2 = 24, D3 = 8, LAYERS = 3 };

typedef struct net {
    hx_graph *g;
    hx_tensor *x, *w[LAYERS], *b[LAYERS], *mm[LAYERS], *ba[LAYERS], *act[LAYERS], *loss;
} net;

static test_rng rng;
static float xv[B * T * D0];

/* the matmuls on mm_target, the rest on target */
static net build(hx_dtype dt, bool train, bool recompute, hx_target target, hx_target mm_target)
{
    static const int64_t dims[LAYERS + 1] = {D0, D1, D2, D3};
    net m = {.g = hx_graph_create()};
    int64_t xs[3] = {B, T, D0};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 3, xs);
    hx_graph_push_target(m.g, target);
    hx_tensor *h = hx_cast(m.g, m.x, dt);
    if (recompute) hx_graph_push_recompute(m.g);
    for (int l = 0; l < LAYERS; l++) {
        char name[16];
        int64_t ws[2] = {dims[l], dims[l + 1]}, bs[1] = {dims[l + 1]};
        snprintf(name, sizeof name, "w%d", l);
        m.w[l] = hx_graph_param(m.g, name, HX_DTYPE_F32, 2, ws, hx_init_uniform(-0.3, 0.3));
        snprintf(name, sizeof name, "b%d", l);
        m.b[l] = hx_graph_param(m.g, name, HX_DTYPE_F32, 1, bs, hx_init_uniform(-0.5, 0.5));
        hx_tensor *w = hx_cast(m.g, m.w[l], dt);
        hx_graph_push_target(m.g, mm_target);
        m.mm[l] = hx_matmul(m.g, h, w, false, false);
        hx_graph_pop_target(m.g);
        m.ba[l] = hx_bias_add(m.g, m.mm[l], hx_cast(m.g, m.b[l], dt));
        h = m.act[l] = l == 0 ? hx_gelu(m.g, m.ba[l])
                     : l == 1 ? hx_relu(m.g, m.ba[l])
                              : hx_gelu_erf(m.g, m.ba[l]);
    }
    if (recompute) hx_graph_pop_recompute(m.g);
    hx_tensor *y = hx_cast(m.g, h, HX_DTYPE_F32);
    static const int all[3] = {0, 1, 2};
    m.loss = hx_reduce_mean(m.g, hx_mul(m.g, y, y), 3, all, false);
    hx_graph_pop_target(m.g);
    CHECK(m.loss != NULL, "build: %s", hx_last_error());
    if (train) CHECK(hx_graph_backward(m.g, m.loss) == HX_OK, "backward: %s", hx_last_error());
    return m;
}

static hx_session *session(const net *m, bool fuse, bool recompute, hx_accelerator acc)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = acc;
    c.n_threads = 2;
    c.no_host_fusion = !fuse;
    c.offload.recompute = recompute;
    hx_session *s = NULL;
    CHECK(hx_session_create(m->g, &c, &s) == HX_OK, "session: %s", hx_last_error());
    return s;
}

typedef struct result {
    float loss, out[B * T * D3], grad[LAYERS][2][D1 * D2];
} result;

static result run(hx_session *s, const net *m, bool train)
{
    result r;
    memset(&r, 0, sizeof r);
    hx_feed f = {NULL, m->x, xv, sizeof xv};
    hx_fetch out[2 + 2 * LAYERS] = {{NULL, m->loss, &r.loss, sizeof r.loss},
                                    {NULL, m->act[LAYERS - 1], r.out,
                                     hx_tensor_nbytes(m->act[LAYERS - 1])}};
    int n = 2;
    for (int l = 0; train && l < LAYERS; l++)
        for (int k = 0; k < 2; k++) {
            hx_tensor *p = k ? m->b[l] : m->w[l];
            out[n++] = (hx_fetch){NULL, hx_tensor_grad(p), r.grad[l][k], hx_tensor_nbytes(p)};
        }
    CHECK(hx_session_run(s, &f, 1, out, n, 0) == HX_OK, "run: %s", hx_last_error());
    return r;
}

/* How many of the plan's steps run one of the nodes in ts[LAYERS]. */
static int steps_of(const hx_plan *p, hx_tensor *const *ts)
{
    int n = 0;
    for (int k = 0; k < p->n_steps; k++)
        for (int l = 0; l < LAYERS; l++) n += p->steps[k].fn && p->steps[k].node == ts[l];
    return n;
}

static int lowered_as(const hx_session *s, hx_tensor *const *ts, hx_lower_kind kind)
{
    int n = 0;
    for (int l = 0; l < LAYERS; l++)
        n += s->e.lowered && s->e.lowered[ts[l]->id].kind == (int8_t)kind;
    return n;
}

/* The gelu_backward node of gelu y (its gradient reads y as source 2). */
static const hx_tensor *gelu_backward_of(const net *m, const hx_tensor *y)
{
    for (int i = y->id + 1; i < m->g->n; i++) {
        const hx_tensor *t = m->g->tensors[i];
        if (t->op == HX_OP_GELU_BACKWARD && t->n_src == 3 && t->src[2] == y) return t;
    }
    return NULL;
}

static void test_train(void)
{
    net m = build(HX_DTYPE_F32, true, false, HX_TARGET_CPU, HX_TARGET_CPU);
    hx_session *on = session(&m, true, false, HX_ACCELERATOR_NONE);
    hx_session *off = session(&m, false, false, HX_ACCELERATOR_NONE);
    if (!on || !off) return;
    /* and the gelu (layer 0) keeps its derivative for its gradient: 2 more */
    CHECK(lowered_as(on, m.ba, HX_LOWER_MATMUL_BIAS) == LAYERS && on->n_lowered == LAYERS + 2 &&
              lowered_as(on, m.act, HX_LOWER_GELU_SAVE) == 1 && !off->e.lowered &&
              off->n_lowered == 0,
          "%d of %d bias_adds fused, %d gelu saving (%d lowered in all), %d without fusion",
          lowered_as(on, m.ba, HX_LOWER_MATMUL_BIAS), LAYERS,
          lowered_as(on, m.act, HX_LOWER_GELU_SAVE), on->n_lowered, off->n_lowered);
    const hx_tensor *gb = gelu_backward_of(&m, m.act[0]);
    CHECK(gb && on->e.lowered && on->e.lowered[gb->id].kind == HX_LOWER_GELU_BACKWARD_SAVED &&
              hx__n_read(gb, on->e.lowered) == 2 && hx__read(&on->e, gb, 1) == m.act[0] &&
              hx__n_read(m.act[0], on->e.lowered) == 1,
          "the gelu's gradient reads dy and the gelu (its saved derivative), not its input");
    for (int l = 0; l < LAYERS && on->e.lowered; l++) {
        const hx_tensor *t = m.ba[l];
        CHECK(hx__n_read(t, on->e.lowered) == 3 && hx__read(&on->e, t, 0) == m.mm[l]->src[0] &&
                  hx__read(&on->e, t, 1) == m.mm[l]->src[1] &&
                  hx__read(&on->e, t, 2) == m.ba[l]->src[1],
              "'%s' reads the matmul's x and w and the bias", t->name);
    }
    result want = run(off, &m, true), got = run(on, &m, true), again = run(on, &m, true);
    CHECK(!memcmp(&got, &want, sizeof got), "fused loss and gradients bitwise the unfused ones "
          "(loss %.9g vs %.9g)", got.loss, want.loss);
    CHECK(!memcmp(&got, &again, sizeof got), "two fused runs are bitwise equal");
    CHECK(steps_of(on->last_plan, m.mm) == 0 && steps_of(off->last_plan, m.mm) == LAYERS,
          "forward matmul steps: %d fused, %d unfused", steps_of(on->last_plan, m.mm),
          steps_of(off->last_plan, m.mm));
    hx_session_free(on);
    hx_session_free(off);
    hx_graph_free(m.g);
}

static void test_inference(void)
{
    net m = build(HX_DTYPE_F32, false, false, HX_TARGET_CPU, HX_TARGET_CPU);
    hx_session *on = session(&m, true, false, HX_ACCELERATOR_NONE);
    hx_session *off = session(&m, false, false, HX_ACCELERATOR_NONE);
    if (!on || !off) return;
    CHECK(on->e.lowered && on->e.lowered[m.act[0]->id].kind == HX_LOWER_MATMUL_BIAS_GELU &&
              on->e.lowered[m.act[1]->id].kind == HX_LOWER_MATMUL_BIAS_RELU &&
              on->e.lowered[m.act[2]->id].kind == HX_LOWER_MATMUL_BIAS_GELU_ERF &&
              lowered_as(on, m.ba, HX_LOWER_MATMUL_BIAS) == 0 && on->n_lowered == LAYERS,
          "the three activations fused with their matmul and bias (%d lowered)", on->n_lowered);
    result want = run(off, &m, false), got = run(on, &m, false);
    CHECK(!memcmp(&got, &want, sizeof got), "fused outputs bitwise the unfused ones");
    CHECK(steps_of(on->last_plan, m.mm) + steps_of(on->last_plan, m.ba) == 0 &&
              steps_of(on->last_plan, m.act) == LAYERS,
          "fused plan: %d matmul, %d bias_add, %d activation steps",
          steps_of(on->last_plan, m.mm), steps_of(on->last_plan, m.ba),
          steps_of(on->last_plan, m.act));
    hx_session_free(on);
    hx_session_free(off);
    hx_graph_free(m.g);
}

static void test_recompute(void)
{
    net m = build(HX_DTYPE_F32, true, true, HX_TARGET_CPU, HX_TARGET_CPU);
    hx_session *redo = session(&m, true, true, HX_ACCELERATOR_NONE);
    hx_session *plain = session(&m, false, true, HX_ACCELERATOR_NONE);
    hx_session *keep = session(&m, true, false, HX_ACCELERATOR_NONE);
    if (!redo || !plain || !keep) return;
    int acts = 0;
    for (int i = 0; redo->e.lowered && i < m.g->n; i++) {
        const hx_tensor *t = m.g->tensors[i];
        hx_lower_kind k = (hx_lower_kind)redo->e.lowered[i].kind;
        if (k < HX_LOWER_MATMUL_BIAS_RELU || !hx__lower_fuses_matmul(k)) continue;
        acts++;
        const hx_tensor *mm = t->src[0]->src[0];
        CHECK(!t->recompute_of && hx__read(&redo->e, t, 0) == mm->src[0] &&
                  hx__read(&redo->e, t, 1) == mm->src[1],
              "fused '%s' is a forward original reading its own matmul's sources", t->name);
    }
    CHECK(acts == LAYERS, "%d forward activations fused when recomputing", acts);
    /* the gradient reads the recomputed gelu, which keeps the derivative
     * (the forward original is fused with its matmul: nothing else reads its
     * input) */
    const hx_tensor *gb = gelu_backward_of(&m, m.act[0]);
    CHECK(gb && m.act[0]->recomputed && redo->e.lowered &&
              redo->e.lowered[m.act[0]->recomputed->id].kind == HX_LOWER_GELU_SAVE &&
              redo->e.lowered[m.act[0]->id].kind == HX_LOWER_MATMUL_BIAS_GELU &&
              hx__read(&redo->e, gb, 1) == m.act[0]->recomputed,
          "recomputing: the recomputed gelu keeps its derivative, its gradient reads that");
    result want = run(plain, &m, true), got = run(redo, &m, true), kept = run(keep, &m, true);
    CHECK(redo->last_plan->n_recomputed > 0, "the plan recomputes");
    CHECK(!memcmp(&got, &want, sizeof got) && !memcmp(&kept, &want, sizeof got),
          "recomputing with fusion gives the unfused bits, and so does keeping");
    hx_session_free(redo);
    hx_session_free(plain);
    hx_session_free(keep);
    hx_graph_free(m.g);
}

/* bf16 and f16: training fuses the bias_adds, inference the activations,
 * each bitwise the unfused chain (which rounds after every op). */
static void test_half(void)
{
    for (int h = 0; h < 2; h++) {
        hx_dtype dt = h ? HX_DTYPE_F16 : HX_DTYPE_BF16;
        for (int train = 0; train < 2; train++) {
            net m = build(dt, train, false, HX_TARGET_CPU, HX_TARGET_CPU);
            hx_session *on = session(&m, true, false, HX_ACCELERATOR_NONE);
            hx_session *off = session(&m, false, false, HX_ACCELERATOR_NONE);
            if (on && off) {
                int fused = train ? lowered_as(on, m.ba, HX_LOWER_MATMUL_BIAS)
                                  : lowered_as(on, m.act, HX_LOWER_MATMUL_BIAS_GELU) +
                                            lowered_as(on, m.act, HX_LOWER_MATMUL_BIAS_RELU) +
                                            lowered_as(on, m.act, HX_LOWER_MATMUL_BIAS_GELU_ERF);
                /* training: the gelu keeps its derivative too (2 nodes) */
                CHECK(fused == LAYERS && on->n_lowered == LAYERS + 2 * train &&
                          lowered_as(on, m.act, HX_LOWER_GELU_SAVE) == train,
                      "%s %s: %d of %d groups fused", hx_dtype_name(dt),
                      train ? "train" : "inference", fused, LAYERS);
                result want = run(off, &m, train), got = run(on, &m, train);
                CHECK(!memcmp(&got, &want, sizeof got),
                      "%s %s: fused bitwise the unfused chain (loss %.9g vs %.9g)",
                      hx_dtype_name(dt), train ? "train" : "inference", got.loss, want.loss);
                CHECK(got.loss > 0, "%s: a loss was computed", hx_dtype_name(dt));
            }
            hx_session_free(on);
            hx_session_free(off);
            hx_graph_free(m.g);
        }
    }
}

static bool has_kernel(void *ctx, hx_target t, hx_op op, hx_dtype dt)
{
    const hx_session *s = ctx;
    const hx_backend *b = s->e.be[t == HX_TARGET_DEVICE ? HX_DEV_ACCEL : HX_DEV_HOST];
    return b && b->kernel(b, op, dt);
}

static void test_why_not(void)
{
    for (int k = 0; k < 2; k++) {
        net m = build(HX_DTYPE_F32, true, false, HX_TARGET_CPU,
                      k ? HX_TARGET_DEVICE : HX_TARGET_CPU);
        hx_session *s = session(&m, true, false, k ? HX_ACCELERATOR_EMU : HX_ACCELERATOR_NONE);
        if (!s) continue;
        /* the host gelu keeps its derivative either way (2 nodes) */
        CHECK(lowered_as(s, m.act, HX_LOWER_GELU_SAVE) == 1 &&
                  s->n_lowered == (k ? 2 : LAYERS + 2) &&
                  lowered_as(s, m.ba, HX_LOWER_MATMUL_BIAS) == (k ? 0 : LAYERS),
              "%s: %d lowered", k ? "matmuls on the device" : "on the host", s->n_lowered);
        int *readers = hx__lower_readers(m.g, false);
        /* k 0: the relu, whose gradient reads its bias_add */
        const char *why = hx__lower_why_not(k ? m.ba[0] : m.act[1], s->e.target, s->e.lowered,
                                            has_kernel, s, true, false, readers);
        CHECK(why && strstr(why, k ? "device" : "read by other nodes"), "why not: %s",
              why ? why : "(none)");
        free(readers);
        hx_session_free(s);
        hx_graph_free(m.g);
    }
}

/* ---- residual add + layernorm ----------------------------------------------------- */

enum { RB = 2, RT = 3, RD = 40, RN = RB * RT * RD };

typedef struct resnet {
    hx_graph *g;
    hx_tensor *x0, *gam[3], *bet[3], *ln[3], *sum[2], *out, *loss;
} resnet;

static float rv[RN]; /* the loss's random weights */

/* t in dt (a cast when dt is not t's) */
static hx_tensor *half(hx_graph *g, hx_tensor *t, hx_dtype dt)
{
    return dt == t->dtype ? t : hx_cast(g, t, dt);
}

/* ln0 = LN(x0); s0 = x0 + gelu(ln0); ln1 = LN(s0); s1 = s0 + gelu(ln1);
 * out = ln2 = LN(s1); loss = sum(out^2 * R) (not linear in out: with
 * sum(out * R) the layernorm's gradients would not depend on its output,
 * could run before it, and it would rightly not be fused). With broadcast,
 * s0 adds a [RD] vector (not fusable); with side, loss also reads s0 * s0,
 * which does not depend on ln1. */
static resnet build_res(bool broadcast, bool side, hx_dtype dt)
{
    resnet m = {.g = hx_graph_create()};
    int64_t xs[3] = {RB, RT, RD}, ds[1] = {RD};
    m.x0 = hx_graph_param(m.g, "x0", HX_DTYPE_F32, 3, xs, hx_init_uniform(-1, 1));
    hx_graph_push_target(m.g, HX_TARGET_CPU);
    for (int l = 0; l < 3; l++) {
        char name[16];
        snprintf(name, sizeof name, "gamma%d", l);
        m.gam[l] = hx_graph_param(m.g, name, HX_DTYPE_F32, 1, ds, hx_init_uniform(0.5, 1.5));
        snprintf(name, sizeof name, "beta%d", l);
        m.bet[l] = hx_graph_param(m.g, name, HX_DTYPE_F32, 1, ds, hx_init_uniform(-0.5, 0.5));
    }
    hx_tensor *h = half(m.g, m.x0, dt), *gam[3], *bet[3];
    for (int l = 0; l < 3; l++) gam[l] = half(m.g, m.gam[l], dt), bet[l] = half(m.g, m.bet[l], dt);
    for (int l = 0; l < 2; l++) {
        m.ln[l] = hx_layernorm(m.g, h, gam[l], bet[l], 1e-5f);
        hx_tensor *f = hx_gelu(m.g, m.ln[l]);
        h = m.sum[l] = broadcast && l == 0 ? hx_add(m.g, f, bet[2]) : hx_add(m.g, h, f);
    }
    m.ln[2] = hx_layernorm(m.g, h, gam[2], bet[2], 1e-5f);
    m.out = dt == HX_DTYPE_F32 ? m.ln[2] : hx_cast(m.g, m.ln[2], HX_DTYPE_F32);
    hx_tensor *r = hx_graph_constant(m.g, "R", HX_DTYPE_F32, 3, xs, rv);
    static const int all[3] = {0, 1, 2};
    hx_tensor *prod = hx_mul(m.g, hx_mul(m.g, m.out, m.out), r);
    if (side) prod = hx_add(m.g, prod, hx_mul(m.g, m.sum[0], m.sum[0]));
    m.loss = hx_reduce_sum(m.g, prod, 3, all, false);
    hx_graph_pop_target(m.g);
    CHECK(m.loss != NULL, "build_res: %s", hx_last_error());
    CHECK(hx_graph_backward(m.g, m.loss) == HX_OK, "backward: %s", hx_last_error());
    return m;
}

typedef struct res_result {
    float loss, out[RN], sum[2][RN], gx[RN], gg[3][RD], gb[3][RD];
} res_result;

static res_result run_res(hx_session *s, const resnet *m)
{
    res_result r;
    memset(&r, 0, sizeof r);
    hx_fetch f[4 + 6 + 1] = {{NULL, m->loss, &r.loss, sizeof r.loss},
                             {NULL, m->out, r.out, sizeof r.out},
                             {NULL, m->sum[0], r.sum[0], hx_tensor_nbytes(m->sum[0])},
                             {NULL, m->sum[1], r.sum[1], hx_tensor_nbytes(m->sum[1])}};
    int n = 4;
    for (int l = 0; l < 3; l++) {
        f[n++] = (hx_fetch){NULL, hx_tensor_grad(m->gam[l]), r.gg[l], sizeof r.gg[l]};
        f[n++] = (hx_fetch){NULL, hx_tensor_grad(m->bet[l]), r.gb[l], sizeof r.gb[l]};
    }
    f[n++] = (hx_fetch){NULL, hx_tensor_grad(m->x0), r.gx, sizeof r.gx};
    CHECK(hx_session_run(s, NULL, 0, f, n, 0) == HX_OK, "run: %s", hx_last_error());
    return r;
}

/* The net of build_res(false, false) in double: its loss. */
static double gelu_d(double x)
{
    return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static void ln_d(double *y, const double *x, const double *g, const double *b)
{
    for (int r = 0; r < RB * RT; r++) {
        double mean = 0, var = 0;
        for (int j = 0; j < RD; j++) mean += x[r * RD + j] / RD;
        for (int j = 0; j < RD; j++) var += (x[r * RD + j] - mean) * (x[r * RD + j] - mean) / RD;
        double rstd = 1 / sqrt(var + 1e-5);
        for (int j = 0; j < RD; j++) y[r * RD + j] = (x[r * RD + j] - mean) * rstd * g[j] + b[j];
    }
}
static double loss_d(const double *x0, double gam[3][RD], double bet[3][RD])
{
    static double h[RN], y[RN];
    memcpy(h, x0, sizeof h);
    for (int l = 0; l < 2; l++) {
        ln_d(y, h, gam[l], bet[l]);
        for (int i = 0; i < RN; i++) h[i] += gelu_d(y[i]);
    }
    ln_d(y, h, gam[2], bet[2]);
    double loss = 0;
    for (int i = 0; i < RN; i++) loss += y[i] * y[i] * rv[i];
    return loss;
}

/* Analytic gradient g (n) of value v (n, double) against central
 * differences of loss_d. */
static void check_fd(const char *what, double *v, const float *g, int n, double *x0,
                     double gam[3][RD], double bet[3][RD])
{
    double worst = 0, scale = 0;
    int at = -1;
    double fds[RN];
    for (int i = 0; i < n; i++) {
        double keep = v[i], e = 1e-4;
        v[i] = keep + e;
        double up = loss_d(x0, gam, bet);
        v[i] = keep - e;
        double dn = loss_d(x0, gam, bet);
        v[i] = keep;
        fds[i] = (up - dn) / (2 * e);
        scale = fmax(scale, fabs(fds[i]));
    }
    for (int i = 0; i < n; i++) {
        double err = fabs(g[i] - fds[i]) / (1e-3 * scale + 1e-2 * fabs(fds[i]) + 1e-6);
        if (err > worst) worst = err, at = i;
    }
    CHECK(worst <= 1, "%s: element %d: analytic %.7g, finite difference %.7g (scale %.3g)", what,
          at, at < 0 ? 0.0 : g[at], at < 0 ? 0.0 : fds[at], scale);
}

static hx_session *res_session(const resnet *m, bool fuse, int threads)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_NONE;
    c.n_threads = threads;
    c.no_host_fusion = !fuse;
    hx_session *s = NULL;
    CHECK(hx_session_create(m->g, &c, &s) == HX_OK, "session: %s", hx_last_error());
    return s;
}

static void test_residual(void)
{
    resnet m = build_res(false, false, HX_DTYPE_F32);
    hx_session *off = res_session(&m, false, 2), *on1 = res_session(&m, true, 1),
               *on2 = res_session(&m, true, 2);
    if (!off || !on1 || !on2) goto done;
    const hx_lowered *low = on2->e.lowered;
    for (int l = 1; l < 3; l++) {
        const hx_tensor *ln = m.ln[l], *sum = m.sum[l - 1];
        CHECK(low && low[ln->id].kind == HX_LOWER_ADD_LAYERNORM &&
                  low[sum->id].kind == HX_LOWER_WRITTEN_BY_READER,
              "'%s' fused with its add '%s'", ln->name, sum->name);
        CHECK(low && hx__n_read(ln, low) == 5 && hx__read(&on2->e, ln, 0) == sum->src[0] &&
                  hx__read(&on2->e, ln, 1) == sum->src[1] &&
                  hx__read(&on2->e, ln, 2) == m.gam[l] && hx__read(&on2->e, ln, 3) == m.bet[l] &&
                  hx__read(&on2->e, ln, 4) == sum,
              "'%s' reads x, r, gamma, beta and the sum it writes", ln->name);
    }
    /* 4: the two fused layernorms and their sums; 4 more: both gelus keep
     * their derivatives for their gradients */
    CHECK(low && !low[m.ln[0]->id].kind && on2->n_lowered == 4 + 4,
          "the first layernorm (of a parameter) is not fused; %d nodes lowered", on2->n_lowered);
    res_result want = run_res(off, &m), got1 = run_res(on1, &m), got2 = run_res(on2, &m);
    CHECK(!memcmp(&got1, &want, sizeof want) && !memcmp(&got2, &want, sizeof want),
          "fused (1 and 2 threads) bitwise the unfused: loss %.9g / %.9g vs %.9g, out[0] %.9g "
          "vs %.9g, sum[1][0] %.9g vs %.9g", got1.loss, got2.loss, want.loss, got2.out[0],
          want.out[0], got2.sum[1][0], want.sum[1][0]);
    /* gradients against finite differences of the double reference */
    static double x0[RN], gam[3][RD], bet[3][RD];
    float buf[RN];
    CHECK(hx_session_read(on2, m.x0, buf, sizeof buf) == HX_OK, "read x0: %s", hx_last_error());
    for (int i = 0; i < RN; i++) x0[i] = buf[i];
    for (int l = 0; l < 3; l++) {
        CHECK(hx_session_read(on2, m.gam[l], buf, RD * sizeof(float)) == HX_OK, "read: %s",
              hx_last_error());
        for (int j = 0; j < RD; j++) gam[l][j] = buf[j];
        CHECK(hx_session_read(on2, m.bet[l], buf, RD * sizeof(float)) == HX_OK, "read: %s",
              hx_last_error());
        for (int j = 0; j < RD; j++) bet[l][j] = buf[j];
    }
    CHECK(fabs(got2.loss - loss_d(x0, gam, bet)) <= 1e-4 * (1 + fabs(got2.loss)),
          "loss %.9g, the double reference's %.9g", got2.loss, loss_d(x0, gam, bet));
    check_fd("d loss / d x0", x0, got2.gx, RN, x0, gam, bet);
    for (int l = 0; l < 3; l++) {
        char what[40];
        snprintf(what, sizeof what, "d loss / d gamma%d", l);
        check_fd(what, gam[l], got2.gg[l], RD, x0, gam, bet);
        snprintf(what, sizeof what, "d loss / d beta%d", l);
        check_fd(what, bet[l], got2.gb[l], RD, x0, gam, bet);
    }
done:
    hx_session_free(off);
    hx_session_free(on1);
    hx_session_free(on2);
    hx_graph_free(m.g);
}

/* The residual net stored in bf16 and in f16 (x0, gamma and beta cast):
 * both sums' layernorms fused (hx_k_add_layernorm_half), loss, output, sums
 * and gradients bitwise the unfused session's at 1 and 2 threads. */
static void test_residual_half(void)
{
    for (int h = 0; h < 2; h++) {
        hx_dtype dt = h ? HX_DTYPE_F16 : HX_DTYPE_BF16;
        resnet m = build_res(false, false, dt);
        hx_session *off = res_session(&m, false, 2), *on1 = res_session(&m, true, 1),
                   *on2 = res_session(&m, true, 2);
        if (off && on1 && on2) {
            const hx_lowered *low = on2->e.lowered;
            for (int l = 1; l < 3; l++)
                CHECK(low && low[m.ln[l]->id].kind == HX_LOWER_ADD_LAYERNORM &&
                          low[m.sum[l - 1]->id].kind == HX_LOWER_WRITTEN_BY_READER,
                      "%s: '%s' fused with its add", hx_dtype_name(dt), m.ln[l]->name);
            res_result want = run_res(off, &m), got1 = run_res(on1, &m), got2 = run_res(on2, &m);
            CHECK(!memcmp(&got1, &want, sizeof want) && !memcmp(&got2, &want, sizeof want),
                  "%s: fused (1 and 2 threads) bitwise the unfused: loss %.9g / %.9g vs %.9g",
                  hx_dtype_name(dt), got1.loss, got2.loss, want.loss);
            CHECK(want.loss != 0, "%s: a loss was computed", hx_dtype_name(dt));
        }
        hx_session_free(off);
        hx_session_free(on1);
        hx_session_free(on2);
        hx_graph_free(m.g);
    }
}

static void test_residual_why_not(void)
{
    for (int k = 0; k < 2; k++) {
        resnet m = build_res(k == 0, k == 1, HX_DTYPE_F32);
        hx_session *on = res_session(&m, true, 2), *off = res_session(&m, false, 2);
        if (on && off) {
            const hx_lowered *low = on->e.lowered;
            CHECK(!(low && low[m.ln[1]->id].kind) && low && low[m.ln[2]->id].kind,
                  "%s: the first sum's layernorm is not fused, the second's is",
                  k ? "a side reader" : "broadcast");
            int *readers = hx__lower_readers(m.g, false);
            const char *why = hx__lower_why_not(m.ln[1], on->e.target, low, has_kernel, on, true,
                                                false, readers);
            CHECK(why && strstr(why, k ? "does not depend" : "broadcasts"), "why not: %s",
                  why ? why : "(none)");
            free(readers);
            res_result want = run_res(off, &m), got = run_res(on, &m);
            CHECK(!memcmp(&got, &want, sizeof want), "%s: bitwise the unfused session",
                  k ? "side reader" : "broadcast");
        }
        hx_session_free(on);
        hx_session_free(off);
        hx_graph_free(m.g);
    }
}


/* ---- attention through head-swap permutes ------------------------------------------
 * q, k, v (B,T,C) params, each reshaped to (B,T,H,D) and permuted to
 * (B,H,T,D); a = softmax(q k^T / sqrt(D)); y = a v, permuted back and
 * reshaped to (B,T,C); loss = sum(y^2 R). */

typedef struct attn_dims {
    int64_t B, T, H, D;
} attn_dims;

typedef struct attn {
    hx_graph *g;
    attn_dims d;
    hx_tensor *x[3], *perm[3], *scores, *y_perm, *out, *loss;
} attn;

static float *attn_r; /* the loss's weights (the largest net's size) */

static hx_tensor *split_heads(hx_graph *g, hx_tensor *x, attn_dims d)
{
    int64_t shape[4] = {d.B, d.T, d.H, d.D};
    static const int perm[4] = {0, 2, 1, 3};
    return hx_permute(g, hx_reshape(g, x, 4, shape), perm);
}

static attn build_attn(attn_dims d, hx_dtype dt, bool recompute)
{
    attn m = {.g = hx_graph_create(), .d = d};
    int64_t xs[3] = {d.B, d.T, d.H * d.D};
    hx_graph_push_target(m.g, HX_TARGET_CPU);
    if (recompute) hx_graph_push_recompute(m.g);
    hx_tensor *h[3];
    for (int k = 0; k < 3; k++) {
        char name[8];
        snprintf(name, sizeof name, "x%c", "qkv"[k]);
        m.x[k] = hx_graph_param(m.g, name, HX_DTYPE_F32, 3, xs, hx_init_uniform(-1, 1));
        h[k] = m.perm[k] = split_heads(m.g, half(m.g, m.x[k], dt), d);
    }
    m.scores = hx_matmul(m.g, h[0], h[1], false, true);
    hx_tensor *a = hx_softmax(m.g, hx_scale(m.g, m.scores, (float)(1 / sqrt((double)d.D))));
    static const int perm[4] = {0, 2, 1, 3};
    m.y_perm = hx_permute(m.g, hx_matmul(m.g, a, h[2], false, false), perm);
    hx_tensor *y = hx_reshape(m.g, m.y_perm, 3, xs);
    if (recompute) hx_graph_pop_recompute(m.g);
    m.out = half(m.g, y, HX_DTYPE_F32);
    hx_tensor *r = hx_graph_constant(m.g, "R", HX_DTYPE_F32, 3, xs, attn_r);
    static const int all[3] = {0, 1, 2};
    m.loss = hx_reduce_sum(m.g, hx_mul(m.g, hx_mul(m.g, m.out, m.out), r), 3, all, false);
    hx_graph_pop_target(m.g);
    CHECK(m.loss != NULL, "build_attn: %s", hx_last_error());
    CHECK(hx_graph_backward(m.g, m.loss) == HX_OK, "backward: %s", hx_last_error());
    return m;
}

static hx_session *attn_session(const attn *m, bool fuse, int threads, bool recompute)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_NONE;
    c.n_threads = threads;
    c.no_host_fusion = !fuse;
    c.offload.recompute = recompute;
    hx_session *s = NULL;
    CHECK(hx_session_create(m->g, &c, &s) == HX_OK, "session: %s", hx_last_error());
    return s;
}

/* loss, out, then the three gradients: 1 + 4n floats (n = B*T*C); the caller frees */
static float *run_attn(hx_session *s, const attn *m)
{
    int64_t n = hx_tensor_numel(m->x[0]);
    float *r = calloc((size_t)(1 + 4 * n), sizeof *r);
    hx_fetch f[5] = {{NULL, m->loss, r, sizeof *r},
                     {NULL, m->out, r + 1, (size_t)n * sizeof *r}};
    for (int k = 0; k < 3; k++)
        f[2 + k] = (hx_fetch){NULL, hx_tensor_grad(m->x[k]), r + 1 + (1 + k) * n,
                              (size_t)n * sizeof *r};
    CHECK(hx_session_run(s, NULL, 0, f, 5, 0) == HX_OK, "run: %s", hx_last_error());
    return r;
}

/* Steps of s's plan that copy a head-swap permute, and nodes lowered as kind. */
static int permute_copies(const hx_session *s)
{
    int n = 0;
    for (int k = 0; k < s->last_plan->n_steps; k++) {
        const hx_step *sp = &s->last_plan->steps[k];
        n += sp->fn && hx__head_swap(sp->node) && hx__run_op(sp->node, s->e.lowered) == HX_OP_PERMUTE;
    }
    return n;
}
static int n_lowered_as(const hx_session *s, hx_lower_kind kind)
{
    int n = 0;
    for (int i = 0; s->e.lowered && i < s->e.g->n; i++) n += s->e.lowered[i].kind == (int8_t)kind;
    return n;
}

/* The net in double: its loss. */
static double attn_loss_d(attn_dims d, double *const x[3])
{
    int64_t C = d.H * d.D;
    double loss = 0, *a = malloc((size_t)d.T * sizeof *a);
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t h = 0; h < d.H; h++)
            for (int64_t t = 0; t < d.T; t++) {
                const double *q = x[0] + (b * d.T + t) * C + h * d.D;
                double top = -INFINITY, sum = 0;
                for (int64_t u = 0; u < d.T; u++) {
                    const double *k = x[1] + (b * d.T + u) * C + h * d.D;
                    a[u] = 0;
                    for (int64_t e = 0; e < d.D; e++) a[u] += q[e] * k[e];
                    a[u] /= sqrt((double)d.D);
                    top = fmax(top, a[u]);
                }
                for (int64_t u = 0; u < d.T; u++) sum += a[u] = exp(a[u] - top);
                for (int64_t e = 0; e < d.D; e++) {
                    double y = 0;
                    for (int64_t u = 0; u < d.T; u++)
                        y += a[u] / sum * x[2][(b * d.T + u) * C + h * d.D + e];
                    loss += y * y * attn_r[(b * d.T + t) * C + h * d.D + e];
                }
            }
    free(a);
    return loss;
}

/* Which nodes run lowered, that no permute is copied, that fused runs give
 * the unfused bits at 1 and 2 threads; returns the fused run (2 threads). */
static float *attn_bitwise(const char *what, attn *m, bool recompute)
{
    hx_session *off = attn_session(m, false, 2, recompute), *on1 = attn_session(m, true, 1, recompute),
               *on2 = attn_session(m, true, 2, recompute);
    float *got = NULL;
    if (off && on1 && on2) {
        const hx_lowered *low = on2->e.lowered;
        /* forward: the scores read q and k in place, the permute of a v writes
         * in place; backward: the product's gradient reads dy's source, and
         * the three permutes of dq, dk, dv (of matmuls) write in place */
        CHECK(low && low[m->scores->id].kind == HX_LOWER_MATMUL_PERMUTED &&
                  low[m->y_perm->id].kind == HX_LOWER_MATMUL_PERMUTED_OUT &&
                  n_lowered_as(on2, HX_LOWER_MATMUL_PERMUTED) == 2 &&
                  n_lowered_as(on2, HX_LOWER_MATMUL_PERMUTED_OUT) == 4,
              "%s: %d matmuls read through permutes, %d write through them", what,
              n_lowered_as(on2, HX_LOWER_MATMUL_PERMUTED),
              n_lowered_as(on2, HX_LOWER_MATMUL_PERMUTED_OUT));
        for (int k = 0; k < 2 && low; k++)
            CHECK(hx__read(&on2->e, m->scores, k) == m->perm[k]->src[0],
                  "%s: the scores read %c's source", what, "qk"[k]);
        float *want = run_attn(off, m), *g1 = run_attn(on1, m);
        got = run_attn(on2, m);
        CHECK(permute_copies(on1) == 0 && permute_copies(on2) == 0 && permute_copies(off) == 8,
              "%s: head-swap permutes copied: %d fused, %d unfused", what, permute_copies(on2),
              permute_copies(off));
        size_t bytes = (size_t)(1 + 4 * hx_tensor_numel(m->x[0])) * sizeof(float);
        CHECK(!memcmp(g1, want, bytes) && !memcmp(got, want, bytes),
              "%s: fused (1 and 2 threads) bitwise the unfused: loss %.9g / %.9g vs %.9g", what,
              g1[0], got[0], want[0]);
        CHECK(want[0] != 0, "%s: a loss was computed", what);
        free(want);
        free(g1);
    }
    hx_session_free(off);
    hx_session_free(on1);
    hx_session_free(on2);
    return got;
}

static const attn_dims attn_small = {2, 5, 3, 4};

/* f32: bitwise, and the gradients agree with central differences of the
 * double net; then recomputing the attention. */
static void test_attention(void)
{
    attn m = build_attn(attn_small, HX_DTYPE_F32, false);
    float *got = attn_bitwise("f32", &m, false);
    int64_t n = hx_tensor_numel(m.x[0]);
    double *x[3];
    for (int k = 0; k < 3; k++) {
        x[k] = malloc((size_t)n * sizeof *x[k]);
        float *buf = malloc((size_t)n * sizeof *buf);
        hx_session *s = attn_session(&m, true, 1, false);
        CHECK(s && hx_session_read(s, m.x[k], buf, (size_t)n * sizeof *buf) == HX_OK,
              "read: %s", hx_last_error());
        for (int64_t i = 0; i < n; i++) x[k][i] = buf[i];
        hx_session_free(s);
        free(buf);
    }
    double want = attn_loss_d(m.d, x);
    CHECK(got && fabs(got[0] - want) <= 1e-4 * (1 + fabs(want)), "loss %.9g, double %.9g",
          got ? got[0] : 0.0, want);
    for (int k = 0; k < 3 && got; k++) {
        double worst = 0, scale = 0, *fd = malloc((size_t)n * sizeof *fd);
        int64_t at = 0;
        for (int64_t i = 0; i < n; i++) {
            double keep = x[k][i], e = 1e-4;
            x[k][i] = keep + e;
            double up = attn_loss_d(m.d, x);
            x[k][i] = keep - e;
            fd[i] = (up - attn_loss_d(m.d, x)) / (2 * e);
            x[k][i] = keep;
            scale = fmax(scale, fabs(fd[i]));
        }
        const float *g = got + 1 + (1 + k) * n;
        for (int64_t i = 0; i < n; i++) {
            double err = fabs(g[i] - fd[i]) / (1e-3 * scale + 1e-2 * fabs(fd[i]) + 1e-6);
            if (err > worst) worst = err, at = i;
        }
        CHECK(worst <= 1, "d loss / d x%c[%lld]: analytic %.7g, finite difference %.7g",
              "qkv"[k], (long long)at, g[at], fd[at]);
        free(fd);
    }
    for (int k = 0; k < 3; k++) free(x[k]);
    free(got);
    hx_graph_free(m.g);
    attn r = build_attn(attn_small, HX_DTYPE_F32, true);
    free(attn_bitwise("f32 recomputed", &r, true));
    hx_graph_free(r.g);
}

/* bf16 and f16 (hx_k_gemm_half per batch), and in f32 and bf16 a net whose
 * 256 x 256 scores gemm.c cuts into other tiles at H matrices a call than
 * at B*H (128 x 256, not 256 x 256: the same bits all the same). */
static void test_attention_half(void)
{
    for (int h = 0; h < 2; h++) {
        hx_dtype dt = h ? HX_DTYPE_F16 : HX_DTYPE_BF16;
        attn m = build_attn(attn_small, dt, false);
        free(attn_bitwise(hx_dtype_name(dt), &m, false));
        hx_graph_free(m.g);
    }
    for (int h = 0; h < 2; h++) { /* 4 GEMMs (b) at 2 threads: one a thread at a time */
        attn m = build_attn((attn_dims){4, 256, 2, 32}, h ? HX_DTYPE_BF16 : HX_DTYPE_F32, false);
        free(attn_bitwise(h ? "bf16 4x2 heads of 256x32" : "f32 4x2 heads of 256x32", &m, false));
        hx_graph_free(m.g);
    }
}

static const test_case cases[] = {
    {"train", test_train},
    {"inference", test_inference},
    {"recompute", test_recompute},
    {"half", test_half},
    {"why_not", test_why_not},
    {"residual", test_residual},
    {"residual_half", test_residual_half},
    {"residual_why_not", test_residual_why_not},
    {"attention", test_attention},
    {"attention_half", test_attention_half},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(4242);
    test_fill_uniform(&rng, xv, B * T * D0, -1, 1);
    test_fill_uniform(&rng, rv, RN, -1, 1);
    enum { ATTN_MAX = 4 * 256 * 2 * 32 };
    static float r[ATTN_MAX];
    test_fill_uniform(&rng, r, ATTN_MAX, -1, 1);
    attn_r = r;
    return test_main(argc, argv, "fusion", cases, TEST_COUNT(cases));
}
