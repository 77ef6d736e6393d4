/* Activation recomputation (hx_graph_push_recompute, offload.recompute): a
 * residual MLP of pre-norm blocks (layernorm, matmul, bias, gelu, dropout,
 * matmul, residual add), each block marked. hx_graph_backward emits each
 * block's internal values again ("<name>/recompute"), not its output nor a
 * value made from parameters alone (a weight's bf16 cast); a session that
 * recomputes trains bitwise like one that does not and like the unmarked
 * graph (parameters and losses after 5 steps, f32 and bf16, with dropout,
 * on emu and with no accelerator); its plan runs the recomputed ops in
 * backward; its device peak is predicted exactly and is lower than
 * without by the activations of all blocks but one; the scope's errors;
 * the key. */
#include "hetex.h"
#include "hetex_checks.h"
#include "testutil.h"
#include "session/session.h"
#include "graph/graph.h" /* tensor names, hx__clear_error */
#include "scheduler/plan.h" /* the plan's fields */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 128, W = 32, H = 4 * W, L = 4, STEPS = 5, MAX_P = 6 * L };

typedef struct model {
    hx_graph *g;
    hx_tensor *x, *y, *loss;
    hx_tensor *p[MAX_P];
    int np;
    hx_tensor *ln[L], *out[L], *w1_half[L]; /* per block: an internal value, the output */
} model;

static float xv[STEPS][B * W], yv[STEPS][B * W];

static hx_tensor *param(model *m, const char *what, int l, int ndim, const int64_t *shape,
                        hx_init init)
{
    char name[32];
    snprintf(name, sizeof name, "%s%d", what, l);
    hx_tensor *p = hx_graph_param(m->g, name, HX_DTYPE_F32, ndim, shape, init);
    if (p) m->p[m->np++] = p;
    return p;
}

/* Every op on the DEVICE target, the weights used as dt (f32 masters cast
 * inside the block), blocks marked for recomputation when `mark`. */
static hx_status build(model *m, hx_dtype dt, bool mark)
{
    memset(m, 0, sizeof *m);
    hx_graph *g = m->g = hx_graph_create();
    if (!g) return HX_ERR_OUT_OF_MEMORY;
    int64_t xs[2] = {B, W}, w1s[2] = {W, H}, w2s[2] = {H, W}, hs[1] = {H}, ws[1] = {W};
    m->x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    m->y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, xs);
    hx_graph_push_target(g, HX_TARGET_DEVICE);
    hx_tensor *h = hx_cast(g, m->x, dt);
    for (int l = 0; l < L; l++) {
        hx_tensor *gam = param(m, "gamma", l, 1, ws, hx_init_uniform(0.8, 1.2));
        hx_tensor *bet = param(m, "beta", l, 1, ws, hx_init_uniform(-0.1, 0.1));
        hx_tensor *w1 = param(m, "w1_", l, 2, w1s, hx_init_xavier_uniform(1.0));
        hx_tensor *b1 = param(m, "b1_", l, 1, hs, hx_init_uniform(-0.1, 0.1));
        hx_tensor *w2 = param(m, "w2_", l, 2, w2s, hx_init_xavier_uniform(1.0));
        if (mark) hx_graph_push_recompute(g);
        hx_tensor *a = m->ln[l] = hx_layernorm(g, h, hx_cast(g, gam, dt), hx_cast(g, bet, dt), 1e-5f);
        hx_tensor *w1h = m->w1_half[l] = hx_cast(g, w1, dt);
        hx_tensor *u = hx_gelu(g, hx_bias_add(g, hx_matmul(g, a, w1h, false, false), hx_cast(g, b1, dt)));
        u = hx_dropout(g, u, 0.1f, 1234 + l);
        h = m->out[l] = hx_add(g, h, hx_matmul(g, u, hx_cast(g, w2, dt), false, false));
        if (mark) hx_graph_pop_recompute(g);
    }
    m->loss = hx_mse(g, hx_cast(g, h, HX_DTYPE_F32), m->y);
    hx_graph_pop_target(g);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAMW);
    oc.lr = 1e-2;
    hx_status st = m->loss ? hx_graph_backward(g, m->loss) : HX_ERR_INVALID_ARGUMENT;
    if (!st) st = hx_graph_apply_optimizer(g, NULL, &oc);
    return st;
}

static hx_session_config config(hx_accelerator acc, bool recompute)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = acc;
    c.n_threads = 2;
    c.seed = 7;
    c.offload.recompute = recompute;
    return c;
}

/* STEPS training steps (fetching the loss into loss[] when it is not
 * NULL); the session, or NULL on a failure (reported). */
static hx_session *train(const model *m, const hx_session_config *c, float *loss,
                         const char *what)
{
    hx_session *s = test_session_with(m->g, c, what);
    for (int k = 0; s && k < STEPS; k++) {
        hx_feed f[2] = {{NULL, m->x, xv[k], sizeof xv[k]}, {NULL, m->y, yv[k], sizeof yv[k]}};
        hx_fetch o = {NULL, m->loss, loss ? &loss[k] : NULL, sizeof(float)};
        hx_status st = hx_session_run(s, f, 2, &o, loss ? 1 : 0, HX_RUN_TRAIN);
        CHECK(st == HX_OK, "%s: step %d: %s", what, k, hx_last_error());
        if (st) {
            hx_session_free(s);
            s = NULL;
        }
    }
    return s;
}

/* Parameters of a and b (models of the same build) hold the same bytes. */
static void check_same_params(hx_session *a, const model *ma, hx_session *b, const model *mb,
                              const char *what)
{
    for (int i = 0; i < ma->np; i++) {
        size_t n = hx_tensor_nbytes(ma->p[i]);
        char *pa = malloc(n), *pb = malloc(n);
        CHECK(pa && pb && hx_session_read(a, ma->p[i], pa, n) == HX_OK &&
                  hx_session_read(b, mb->p[i], pb, n) == HX_OK,
              "%s: read '%s': %s", what, hx_tensor_name(ma->p[i]), hx_last_error());
        CHECK(pa && pb && !memcmp(pa, pb, n), "%s: parameter '%s' differs", what,
              hx_tensor_name(ma->p[i]));
        free(pa);
        free(pb);
    }
}

/* Steps of the session's last plan that run a recomputed op. */
static int recomputed_steps(const hx_session *s)
{
    int n = 0;
    const hx_plan *p = s->last_plan;
    for (int k = 0; p && k < p->n_steps; k++)
        n += p->steps[k].fn && strstr(p->steps[k].node->name, "/recompute") != NULL;
    return n;
}

static void test_scope(void)
{
    hx_graph *g = hx_graph_create();
    CHECK(hx_graph_push_recompute(NULL) == HX_ERR_INVALID_ARGUMENT, "push NULL");
    CHECK(hx_graph_pop_recompute(NULL) == HX_ERR_INVALID_ARGUMENT, "pop NULL");
    CHECK(hx_graph_pop_recompute(g) == HX_ERR_STATE && strstr(hx_last_error(), "no recompute"),
          "pop without push: %s", hx_last_error());
    OK(hx_graph_push_recompute(g));
    CHECK(hx_graph_push_recompute(g) == HX_ERR_STATE && strstr(hx_last_error(), "nest"),
          "nested push: %s", hx_last_error());
    OK(hx_graph_pop_recompute(g));
    CHECK(hx_graph_pop_recompute(g) == HX_ERR_STATE, "second pop");
    hx_graph_free(g);
}

/* What hx_graph_backward emits again, and what it keeps. */
static void test_graph(void)
{
    model m, plain;
    OK(build(&m, HX_DTYPE_BF16, true));
    OK(build(&plain, HX_DTYPE_BF16, false));
    int again = 0, again_plain = 0;
    for (int l = 0; l < L; l++) {
        char name[256];
        snprintf(name, sizeof name, "%s/recompute", hx_tensor_name(m.ln[l]));
        CHECK(hx_graph_find(m.g, name) != NULL, "block %d: layernorm not recomputed", l);
        snprintf(name, sizeof name, "%s/recompute", hx_tensor_name(m.out[l]));
        CHECK(hx_graph_find(m.g, name) == NULL, "block %d: its output is recomputed", l);
        snprintf(name, sizeof name, "%s/recompute", hx_tensor_name(m.w1_half[l]));
        CHECK(hx_graph_find(m.g, name) == NULL, "block %d: a weight's cast is recomputed", l);
    }
    hx__clear_error();
    model *both[2] = {&m, &plain};
    int *count[2] = {&again, &again_plain};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < hx_graph_tensor_count(both[k]->g); i++) {
            const hx_tensor *t = both[k]->g->tensors[i];
            *count[k] += strstr(t->name, "/recompute") != NULL;
        }
    /* per block: layernorm, matmul, bias_add, gelu, dropout, matmul */
    CHECK(again == 6 * L && again_plain == 0, "recomputed ops: %d marked, %d unmarked", again,
          again_plain);
    hx_graph_free(m.g);
    hx_graph_free(plain.g);
}

/* recompute on and off, and the unmarked graph, train to the same bits. */
static void check_bitwise(hx_dtype dt, hx_accelerator acc, const char *what)
{
    model m, plain;
    OK(build(&m, dt, true));
    OK(build(&plain, dt, false));
    hx_session_config off = config(acc, false), on = config(acc, true);
    float l_plain[STEPS], l_off[STEPS], l_on[STEPS];
    hx_session *sp = train(&plain, &off, l_plain, what);
    hx_session *s0 = train(&m, &off, l_off, what);
    hx_session *s1 = train(&m, &on, l_on, what);
    if (sp && s0 && s1) {
        CHECK(!memcmp(l_on, l_off, sizeof l_on) && !memcmp(l_off, l_plain, sizeof l_off),
              "%s: losses %.9g (recompute) %.9g (off) %.9g (unmarked) at the last step", what,
              l_on[STEPS - 1], l_off[STEPS - 1], l_plain[STEPS - 1]);
        CHECK(l_on[STEPS - 1] < l_on[0], "%s: loss %g -> %g", what, l_on[0], l_on[STEPS - 1]);
        check_same_params(s1, &m, s0, &m, what);
        check_same_params(s1, &m, sp, &plain, what);
        /* not the second matmul: no gradient reads its output; on the host
         * the first matmul runs inside its bias_add's fused GEMM (f32, bf16
         * and f16 alike) */
        int want = acc == HX_ACCELERATOR_NONE ? 4 * L : 5 * L;
        CHECK(recomputed_steps(s1) == want && recomputed_steps(s0) == 0,
              "%s: recomputed steps %d on, %d off", what, recomputed_steps(s1),
              recomputed_steps(s0));
    }
    hx_session_free(sp);
    hx_session_free(s0);
    hx_session_free(s1);
    hx_graph_free(m.g);
    hx_graph_free(plain.g);
}

static void test_bitwise_f32_emu(void) { check_bitwise(HX_DTYPE_F32, HX_ACCELERATOR_EMU, "f32 emu"); }
static void test_bitwise_bf16_emu(void) { check_bitwise(HX_DTYPE_BF16, HX_ACCELERATOR_EMU, "bf16 emu"); }
static void test_bitwise_f32_none(void) { check_bitwise(HX_DTYPE_F32, HX_ACCELERATOR_NONE, "f32 none"); }
static void test_bitwise_bf16_none(void) { check_bitwise(HX_DTYPE_BF16, HX_ACCELERATOR_NONE, "bf16 none"); }

static hx_offload_report report_of(hx_session *s, const char *what)
{
    hx_offload_report r;
    memset(&r, 0, sizeof r);
    CHECK(hx_session_offload_report(s, &r) == HX_OK, "%s: report: %s", what, hx_last_error());
    printf("%s: predicted peak %zu B (persistent %zu, arena %zu), measured %zu B reserved\n",
           what, r.predicted_peak, r.predicted_persistent, r.predicted_arena,
           r.measured_peak_reserved);
    return r;
}

/* The device peak: predicted = measured with and without recomputation
 * (training runs without fetches: the plan the prediction is made for),
 * and lower with it by the activations of all the blocks but one. */
static void test_peak(void)
{
    model m;
    OK(build(&m, HX_DTYPE_F32, true));
    hx_session_config off = config(HX_ACCELERATOR_EMU, false), on = config(HX_ACCELERATOR_EMU, true);
    hx_session *s0 = train(&m, &off, NULL, "peak, off");
    hx_session *s1 = train(&m, &on, NULL, "peak, on");
    if (s0 && s1) {
        hx_offload_report r0 = report_of(s0, "recompute off"), r1 = report_of(s1, "recompute on");
        CHECK(r0.predicted_peak == r0.measured_peak_reserved, "off: predicted %zu, measured %zu",
              r0.predicted_peak, r0.measured_peak_reserved);
        CHECK(r1.predicted_peak == r1.measured_peak_reserved, "on: predicted %zu, measured %zu",
              r1.predicted_peak, r1.measured_peak_reserved);
        /* what a block's backward reads of its forward: the layernorm's
         * output (B x W), gelu's input and the dropout's output (B x H);
         * recomputed, only one block's are held at a time */
        size_t block = (size_t)B * (W + 2 * H) * sizeof(float);
        size_t saved = r0.predicted_peak - r1.predicted_peak;
        CHECK(r1.predicted_peak < r0.predicted_peak && saved >= (L - 1) * block,
              "saved %zu B; a block's activations are %zu B, %d blocks", saved, block, L);
        printf("saved %zu B of device peak; a block's activations: %zu B, %d blocks\n", saved,
               block, L);
    }
    hx_session_free(s0);
    hx_session_free(s1);
    hx_graph_free(m.g);
}

/* The key, its errors, and $HX_OFFLOAD. */
static void test_parse(void)
{
    hx_offload_config c = hx_offload_config_default();
    CHECK(!c.recompute, "default");
    OK(hx_offload_config_parse(" recompute = true ", &c));
    CHECK(c.recompute, "recompute=true");
    const char *bad[] = {"recompute=yes", "recompute=", "recompute"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hx_offload_config before = c;
        hx_status st = hx_offload_config_parse(bad[i], &c);
        CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "recompute"),
              "'%s': %s, '%s'", bad[i], hx_status_name(st), hx_last_error());
        CHECK(!memcmp(&before, &c, sizeof c), "'%s' changed the config", bad[i]);
    }
    model m;
    OK(build(&m, HX_DTYPE_F32, true));
    hx_session_config sc = config(HX_ACCELERATOR_EMU, false);
    setenv("HX_OFFLOAD", "recompute=1", 1);
    hx_session *s = test_session_with(m.g, &sc, "HX_OFFLOAD");
    CHECK(s && s->e.cfg.offload.recompute, "HX_OFFLOAD not applied");
    hx_session_free(s);
    unsetenv("HX_OFFLOAD");
    hx_graph_free(m.g);
}

/* auto_offload under a cap that both recomputation and activation offload
 * meet (and keeping everything does not): with a slow simulated link it
 * chooses recomputation, which trains bitwise like the uncapped run; with
 * a fast link and a slow device, activation offload. */
#define AUTO_CAP ((size_t)600000)

static void test_auto(void)
{
    model m;
    OK(build(&m, HX_DTYPE_F32, true));
    hx_session_config ref_c = config(HX_ACCELERATOR_EMU, false);
    hx_session *ref = train(&m, &ref_c, NULL, "uncapped");
    hx_session_config c = ref_c;
    c.max_device_memory = AUTO_CAP;
    c.offload.auto_offload = true;
    c.emu_cost = (hx_emu_cost){.copy_bytes_per_s = 1e8, .flops_per_s = 1e11};
    hx_session *s = train(&m, &c, NULL, "auto, slow link");
    if (s && ref) {
        hx_offload_report r = report_of(s, "auto, slow link");
        printf("why: %s\n", r.reason);
        CHECK(r.automatic && r.recompute && !r.offload_activations && !r.offload_param &&
                  r.recomputed_ops == 5 * L && r.link_bytes_per_s == 1e8 &&
                  r.device_flops_per_s == 1e11 && strstr(r.reason, "recompute=true adds"),
              "slow link: recompute %d, activations %d: %s", r.recompute,
              (int)r.offload_activations, r.reason);
        CHECK(r.measured_peak_reserved <= AUTO_CAP && r.predicted_peak == r.measured_peak_reserved,
              "slow link: measured %zu, predicted %zu", r.measured_peak_reserved, r.predicted_peak);
        check_same_params(s, &m, ref, &m, "auto, slow link");
    }
    hx_session_free(s);
    c.emu_cost = (hx_emu_cost){.copy_bytes_per_s = 1e13, .flops_per_s = 1e6};
    s = test_session_with(m.g, &c, "auto, fast link");
    if (s) {
        hx_offload_report r = report_of(s, "auto, fast link");
        printf("why: %s\n", r.reason);
        CHECK(r.automatic && !r.recompute && r.offload_activations == HX_OFFLOAD_CPU &&
                  r.activations_offloaded > 0 && strstr(r.reason, "next: offload_param=none "
                                                              "offload_activations=none recompute=true") &&
                  r.predicted_peak + r.margin <= AUTO_CAP,
              "fast link: recompute %d, activations %d: %s", r.recompute,
              (int)r.offload_activations, r.reason);
    }
    hx_session_free(s);
    hx_session_free(ref);
    hx_graph_free(m.g);
}

/* Copies of parameter p's device value (its fused bf16 copy) streamed in
 * by plan pl. */
static int streamed_copies(const hx_plan *pl, const hx_tensor *p)
{
    int n = 0;
    for (int k = 0; k < pl->n_steps; k++)
        n += pl->step_role[k] == HX_ROLE_STREAM_IN && pl->steps[k].node->param == p;
    return n;
}

/* With parameter offload in chunks of a block's parameters (depth 0, so
 * the backward copies them again): recomputation reads a weight while the
 * copy that its block's gradients read is on the device, so the weights
 * (w1, w2) are copied as often as without recomputation; a parameter that
 * only the forward reads (b1, beta; gamma of the first block, whose input
 * needs no gradient) comes once more. Both train to the same bits. */
static void test_param_chunks(void)
{
    model m;
    OK(build(&m, HX_DTYPE_BF16, true));
    size_t block = 0; /* a block's bf16 parameters as streamed (5 per block) */
    for (int i = 0; i < 5; i++) block += hx_tensor_nbytes(m.p[i]) / 2;
    hx_session *s[2];
    for (int rc = 0; rc < 2; rc++) {
        hx_session_config c = config(HX_ACCELERATOR_EMU, rc);
        c.offload.offload_param = HX_OFFLOAD_CPU;
        c.offload.chunk_size = block;
        c.offload.prefetch_depth = 0;
        s[rc] = train(&m, &c, NULL, rc ? "param offload, recompute" : "param offload");
    }
    if (s[0] && s[1]) {
        const hx_plan *p0 = s[0]->last_plan, *p1 = s[1]->last_plan;
        printf("parameter bytes streamed per step: %zu without recomputation, %zu with; copies to "
               "the device %d and %d\n", p0->streamed_bytes, p1->streamed_bytes, p0->n_h2d,
               p1->n_h2d);
        int again = 0;
        for (int i = 0; i < m.np; i++) {
            const char *name = hx_tensor_name(m.p[i]);
            int n0 = streamed_copies(p0, m.p[i]), n1 = streamed_copies(p1, m.p[i]);
            bool weight = !strncmp(name, "w1_", 3) || !strncmp(name, "w2_", 3);
            CHECK(n0 >= 1 && (weight ? n1 == n0 : n1 <= n0 + 1),
                  "'%s' copied %d times with recomputation, %d without", name, n1, n0);
            again += n1 - n0;
        }
        CHECK(again < m.np && p0->streamed_bytes < p1->streamed_bytes + block,
              "%d more copies", again);
        check_same_params(s[1], &m, s[0], &m, "param offload");
    }
    hx_session_free(s[0]);
    hx_session_free(s[1]);
    hx_graph_free(m.g);
}

/* A batchnorm in a block is kept (recomputing it would update its running
 * statistics twice), while the ops around it are recomputed: parameters
 * and running statistics after 5 steps are bitwise those without. */
static void test_batchnorm_kept(void)
{
    hx_graph *g = hx_graph_create();
    int64_t xs[2] = {B, W}, ws[2] = {W, W}, cs[1] = {W};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, xs);
    hx_tensor *w[3];
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        w[i] = hx_graph_param(g, name, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1.0));
    }
    hx_tensor *gam = hx_graph_param(g, "bn_gamma", HX_DTYPE_F32, 1, cs, hx_init_uniform(0.8, 1.2));
    hx_tensor *bet = hx_graph_param(g, "bn_beta", HX_DTYPE_F32, 1, cs, hx_init_uniform(-0.1, 0.1));
    hx_graph_push_target(g, HX_TARGET_DEVICE);
    hx_tensor *h = hx_relu(g, hx_matmul(g, x, w[0], false, false));
    OK(hx_graph_push_recompute(g));
    hx_tensor *a = hx_matmul(g, h, w[1], false, false);
    hx_tensor *bn = hx_batchnorm(g, a, gam, bet, 0.1f, 1e-5f);
    hx_tensor *c = hx_relu(g, bn);
    hx_tensor *d = hx_matmul(g, c, w[2], false, false);
    OK(hx_graph_pop_recompute(g));
    hx_tensor *loss = hx_mse(g, d, y);
    hx_graph_pop_target(g);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAMW);
    OK(loss ? hx_graph_backward(g, loss) : HX_ERR_INVALID_ARGUMENT);
    OK(hx_graph_apply_optimizer(g, NULL, &oc));
    const hx_tensor *want[3] = {a, bn, c};
    for (int i = 0; i < 3; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s/recompute", hx_tensor_name(want[i]));
        bool again = hx_graph_find(g, name) != NULL;
        CHECK(again == (want[i] != bn), "'%s' recomputed: %d", hx_tensor_name(want[i]), again);
    }
    hx__clear_error();
    hx_session *s[2];
    for (int rc = 0; rc < 2; rc++) {
        hx_session_config cfg = config(HX_ACCELERATOR_EMU, rc);
        s[rc] = test_session_with(g, &cfg, "batchnorm");
        for (int k = 0; s[rc] && k < STEPS; k++) {
            hx_feed f[2] = {{NULL, x, xv[k], sizeof xv[k]}, {NULL, y, yv[k], sizeof yv[k]}};
            OK(hx_session_run(s[rc], f, 2, NULL, 0, HX_RUN_TRAIN));
        }
    }
    const char *names[] = {"w0", "w1", "w2", "bn_gamma", "bn_beta", "bn_gamma/running_mean",
                           "bn_gamma/running_var"};
    for (size_t i = 0; s[0] && s[1] && i < sizeof names / sizeof *names; i++) {
        const hx_tensor *t = hx_graph_find(g, names[i]);
        size_t n = t ? hx_tensor_nbytes(t) : 0;
        char *p0 = malloc(n ? n : 1), *p1 = malloc(n ? n : 1);
        CHECK(t && hx_session_read(s[0], t, p0, n) == HX_OK &&
                  hx_session_read(s[1], t, p1, n) == HX_OK && !memcmp(p0, p1, n),
              "'%s' differs with recomputation (%s)", names[i], hx_last_error());
        free(p0);
        free(p1);
    }
    hx_session_free(s[0]);
    hx_session_free(s[1]);
    hx_graph_free(g);
}

static int setup(void)
{
    test_rng r = test_rng_make(23);
    for (int k = 0; k < STEPS; k++) {
        test_fill_uniform(&r, xv[k], B * W, -1, 1);
        test_fill_uniform(&r, yv[k], B * W, -1, 1);
    }
    return 0;
}

static const test_case cases[] = {
    {"scope", test_scope},
    {"graph", test_graph},
    {"bitwise_f32_emu", test_bitwise_f32_emu},
    {"bitwise_bf16_emu", test_bitwise_bf16_emu},
    {"bitwise_f32_none", test_bitwise_f32_none},
    {"bitwise_bf16_none", test_bitwise_bf16_none},
    {"peak", test_peak},
    {"parse", test_parse},
    {"auto", test_auto},
    {"param_chunks", test_param_chunks},
    {"batchnorm_kept", test_batchnorm_kept},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup};
    return test_main_with(argc, argv, "recompute", cases, TEST_COUNT(cases), &o);
}
