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
 * - why not: bf16 nodes, and a bias_add on the host of a matmul on the
 *   (emulated) device, are not fused, and hx__lower_why_not says so.
 * The fused kernel's bits against the chain's at 1-3 threads are
 * test_kernels' gemm_fused; the unfused ops' double references and finite
 * differences are test_ops'. */
#include "hetex.h"
#include "testutil.h"
#include "session/session.h"
#include "scheduler/plan.h"

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
                                    {NULL, m->act[LAYERS - 1], r.out, sizeof r.out}};
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

static void test_train(void)
{
    net m = build(HX_DTYPE_F32, true, false, HX_TARGET_CPU, HX_TARGET_CPU);
    hx_session *on = session(&m, true, false, HX_ACCELERATOR_NONE);
    hx_session *off = session(&m, false, false, HX_ACCELERATOR_NONE);
    if (!on || !off) return;
    CHECK(lowered_as(on, m.ba, HX_LOWER_MATMUL_BIAS) == LAYERS && on->n_lowered == LAYERS &&
              !off->e.lowered && off->n_lowered == 0,
          "%d of %d bias_adds fused (%d lowered in all), %d without fusion",
          lowered_as(on, m.ba, HX_LOWER_MATMUL_BIAS), LAYERS, on->n_lowered, off->n_lowered);
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
        if (k < HX_LOWER_MATMUL_BIAS_RELU) continue;
        acts++;
        const hx_tensor *mm = t->src[0]->src[0];
        CHECK(!t->recompute_of && hx__read(&redo->e, t, 0) == mm->src[0] &&
                  hx__read(&redo->e, t, 1) == mm->src[1],
              "fused '%s' is a forward original reading its own matmul's sources", t->name);
    }
    CHECK(acts == LAYERS, "%d forward activations fused when recomputing", acts);
    result want = run(plain, &m, true), got = run(redo, &m, true), kept = run(keep, &m, true);
    CHECK(redo->last_plan->n_recomputed > 0, "the plan recomputes");
    CHECK(!memcmp(&got, &want, sizeof got) && !memcmp(&kept, &want, sizeof got),
          "recomputing with fusion gives the unfused bits, and so does keeping");
    hx_session_free(redo);
    hx_session_free(plain);
    hx_session_free(keep);
    hx_graph_free(m.g);
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
        net m = build(k ? HX_DTYPE_F32 : HX_DTYPE_BF16, true, false, HX_TARGET_CPU,
                      k ? HX_TARGET_DEVICE : HX_TARGET_CPU);
        hx_session *s = session(&m, true, false, k ? HX_ACCELERATOR_EMU : HX_ACCELERATOR_NONE);
        if (!s) continue;
        CHECK(!s->e.lowered && s->n_lowered == 0, "%s: nothing fused",
              k ? "on the device" : "bf16");
        int *readers = hx__lower_readers(m.g, false);
        const char *why = hx__lower_why_not(m.ba[0], s->e.target, s->e.lowered, has_kernel,
                                            s, true, false, readers);
        CHECK(why && strstr(why, k ? "device" : "dtype"), "why not: %s", why ? why : "(none)");
        free(readers);
        hx_session_free(s);
        hx_graph_free(m.g);
    }
}

static const test_case cases[] = {
    {"train", test_train},
    {"inference", test_inference},
    {"recompute", test_recompute},
    {"why_not", test_why_not},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(4242);
    test_fill_uniform(&rng, xv, B * T * D0, -1, 1);
    return test_main(argc, argv, "fusion", cases, TEST_COUNT(cases));
}
