/* Automatic placement: HX_TARGET_AUTO and its rules, the planner against
 * the exact search on random small problems, graphs where all-host or
 * all-device is wrong (compared by the planner's predicted steps, which
 * follow emu's simulated machine: a timed assertion would be noise on a
 * shared machine; ./build.sh bench placement measures the steps), results
 * bitwise those of an all-CPU run, and the op cost cache. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"
#include "tmpdir.h"
#include "ap_random.h"
#include "session/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char cache_dir[256];

static const char *cache_path(void)
{
    static char p[300];
    if (!cache_dir[0]) CHECK(test_make_tmpdir(cache_dir, sizeof cache_dir, "hx-autoplace"), "tmpdir");
    snprintf(p, sizeof p, "%s/op_costs", cache_dir);
    return p;
}

/* Sanitizer builds run kernels several times slower: the simulated
 * machine slows down with them, so that its floors stay above the real
 * kernels' times; TSan also gets fewer random problems. */
static bool under_tsan(void)
{
    const char *s = getenv("HX_TEST_SANITIZER");
    return s && strstr(s, "thread");
}

static double slowdown(void) { return getenv("HX_TEST_SANITIZER") ? 10 : 1; }

/* emu as a machine whose device is 20x faster than its host and whose
 * link moves 8 GB/s; both floors above the real kernels' times. */
static hx_session_config simulated(size_t cap)
{
    double k = slowdown();
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.max_device_memory = cap;
    c.emu_cost = (hx_emu_cost){.copy_bytes_per_s = 8e9 / k, .launch_latency_s = 10e-6 * k,
                               .flops_per_s = 2e9 / k};
    c.emu_host_cost = (hx_emu_host_cost){.flops_per_s = 1e8 / k, .launch_latency_s = 2e-6 * k};
    c.placement_cache = cache_path();
    return c;
}

static hx_tensor *on(hx_tensor *t, hx_target tg)
{
    CHECK(hx_tensor_set_target(t, tg) == HX_OK, "set_target: %s", hx_last_error());
    return t;
}

static hx_tensor *param(hx_graph *g, const char *name, int64_t r, int64_t c)
{
    int64_t s[2] = {r, c};
    return hx_graph_param(g, name, HX_DTYPE_F32, 2, s, hx_init_xavier_uniform(1.0));
}

/* x (B,64) through `layers` matmul+relu layers of width 64, mse to y, Adam. */
static hx_graph *mlp(int64_t B, int layers, hx_tensor **x, hx_tensor **y, hx_tensor **loss)
{
    hx_graph *g = hx_graph_create();
    int64_t s[2] = {B, 64};
    *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, s);
    *y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, s);
    hx_tensor *h = *x;
    for (int l = 0; l < layers; l++) {
        char n[16];
        snprintf(n, sizeof n, "w%d", l);
        h = hx_relu(g, hx_matmul(g, h, param(g, n, 64, 64), false, false));
    }
    *loss = hx_mse(g, h, *y);
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    CHECK(hx_graph_backward(g, *loss) == HX_OK && hx_graph_apply_optimizer(g, NULL, &adam) == HX_OK,
          "build: %s", hx_last_error());
    return g;
}

static hx_placement_report report(hx_session *s)
{
    hx_placement_report r;
    memset(&r, 0, sizeof r);
    CHECK(hx_session_placement_report(s, &r) == HX_OK, "report: %s", hx_last_error());
    return r;
}

/* ---- rules ------------------------------------------------------------------------ */

static void test_target_values(void)
{
    CHECK(!strcmp(hx_target_name(HX_TARGET_AUTO), "auto"), "name %s", hx_target_name(HX_TARGET_AUTO));
    hx_graph *g = hx_graph_create();
    int64_t s[2] = {4, 4};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, s);
    hx_tensor *a = hx_relu(g, x);
    CHECK(hx_tensor_set_target(a, HX_TARGET_AUTO) == HX_OK && hx_tensor_target(a) == HX_TARGET_AUTO,
          "set AUTO: %s", hx_last_error());
    CHECK(hx_tensor_set_target(a, (hx_target)4) == HX_ERR_INVALID_ARGUMENT &&
          hx_tensor_target(a) == HX_TARGET_AUTO, "an invalid target is refused, a unchanged");
    CHECK(hx_graph_push_target(g, (hx_target)4) == HX_ERR_INVALID_ARGUMENT, "invalid push");
    CHECK(hx_graph_push_target(g, HX_TARGET_AUTO) == HX_OK, "push AUTO: %s", hx_last_error());
    hx_tensor *b = hx_exp(g, a);
    CHECK(hx_graph_pop_target(g) == HX_OK && hx_tensor_target(b) == HX_TARGET_AUTO, "scoped AUTO");
    hx_session_config c = simulated(0);
    c.emu_host_cost.flops_per_s = -1;
    hx_session *bad = NULL;
    CHECK(hx_session_create(g, &c, &bad) == HX_ERR_INVALID_ARGUMENT && !bad &&
          strstr(hx_last_error(), "emu_host_cost"), "negative host rate: %s", hx_last_error());
    c = simulated(0);
    c.emu_host_cost.launch_latency_s = NAN;
    CHECK(hx_session_create(g, &c, &bad) == HX_ERR_INVALID_ARGUMENT && !bad, "NaN host latency");
    hx_graph_free(g);
}

/* Explicit targets bind; host-table ops stay on the host; the session-wide
 * switch makes DEFAULT ops AUTO; without an accelerator AUTO is the host. */
static void test_rules(void)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "t";
    ec.rows = 16;
    ec.dim = 64;
    hx_embedding_table *tab = NULL;
    CHECK(hx_embedding_table_create(&ec, &tab) == HX_OK, "table: %s", hx_last_error());
    hx_graph *g = hx_graph_create();
    int64_t is[1] = {8}, xs[2] = {8, 64};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, is);
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *e = hx_embedding_lookup(g, tab, ids); /* (8,64) */
    hx_tensor *cpu = on(hx_relu(g, e), HX_TARGET_CPU);
    hx_tensor *dev = on(hx_tanh(g, x), HX_TARGET_DEVICE);
    hx_tensor *m = hx_matmul(g, hx_add(g, cpu, dev), param(g, "w", 64, 64), false, false);
    hx_tensor *loss = hx_mse(g, m, x);
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    CHECK(hx_graph_backward(g, loss) == HX_OK && hx_graph_apply_optimizer(g, NULL, &sgd) == HX_OK,
          "build: %s", hx_last_error());
    hx_session_config c = simulated(0);
    c.auto_placement = true;
    hx_session *s = test_session_with(g, &c, "auto session");
    if (s) {
        const hx_engine *en = &s->e;
        CHECK(en->target[cpu->id] == HX_TARGET_CPU && en->why[cpu->id] == HX_WHY_ATTRIBUTE, "CPU binds");
        CHECK(en->target[dev->id] == HX_TARGET_DEVICE && en->why[dev->id] == HX_WHY_ATTRIBUTE, "DEVICE binds");
        CHECK(en->target[e->id] == HX_TARGET_CPU && en->why[e->id] == HX_WHY_AUTO_HOST_ONLY,
              "lookup: %s (%d)", hx_target_name(en->target[e->id]), (int)en->why[e->id]);
        CHECK(en->why[m->id] == HX_WHY_AUTO, "matmul left to the planner (%d)", (int)en->why[m->id]);
        hx_placement_report r = report(s);
        CHECK(r.n_auto > 0 && r.predicted_step_s > 0 && r.predicted_step_s <= r.predicted_all_host_s &&
              r.predicted_step_s <= r.predicted_all_device_s, "report: %d auto, %g vs %g / %g",
              r.n_auto, r.predicted_step_s, r.predicted_all_host_s, r.predicted_all_device_s);
        const hx_tensor *w = hx_graph_find(g, "w");
        for (int i = 0; w && i < g->n; i++) /* a parameter lives with its update */
            if (g->tensors[i]->kind == HX_TENSOR_UPDATE && g->tensors[i]->param == w)
                CHECK(en->target[i] == en->target[w->id], "w and its update together");
    }
    hx_session_free(s);
    c.accelerator = HX_ACCELERATOR_NONE;
    s = test_session_with(g, &c, "no accelerator");
    if (s) {
        for (int i = 0; i < g->n; i++) CHECK(s->e.target[i] == HX_TARGET_CPU, "all host");
        CHECK(report(s).n_auto == 0, "nothing planned");
    }
    hx_session_free(s);
    hx_graph_free(g);
    hx_embedding_table_free(tab);
}

/* ---- the planner against the exact search ------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_heuristic_vs_exact(void)
{
    enum { N_MAX = 200 };
    const int N = under_tsan() ? 40 : N_MAX;
    test_rng r = test_rng_make(17);
    double ratio[N_MAX];
    int within = 0, infeasible = 0;
    for (int t = 0; t < N; t++) {
        hx_ap_problem p;
        int k = 4 + (int)test_rng_uniform(&r, 0, 10.999);
        test_ap_random(&r, k, 4 * k + 16, &p);
        int8_t h[32], x[32];
        double th = 0, tx = 0;
        CHECK(hx__ap_plan(&p, h, &th) == HX_OK && hx__ap_exact(&p, x, &tx) == HX_OK, "plan: %s",
              hx_last_error());
        CHECK(th >= tx * (1 - 1e-12), "the heuristic (%g) cannot beat the optimum (%g)", th, tx);
        if (!isfinite(tx)) { /* nothing fits: the heuristic must say so too */
            CHECK(!isfinite(th), "problem %d: nothing fits, heuristic %g", t, th);
            ratio[t] = 1;
            infeasible++;
        } else {
            ratio[t] = th / tx;
        }
        within += ratio[t] <= 1.10;
        test_ap_free(&p);
    }
    int8_t big[32];
    double tb;
    hx_ap_problem p;
    test_ap_random(&r, 21, 4 * 21 + 16, &p);
    CHECK(hx__ap_exact(&p, big, &tb) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "20"),
          "21 groups refused: %s", hx_last_error());
    test_ap_free(&p);
    qsort(ratio, N, sizeof ratio[0], cmp_double);
    int exact = 0;
    for (int t = 0; t < N; t++) exact += ratio[t] <= 1 + 1e-9;
    printf("heuristic / optimum over %d random problems (%d with nothing fitting): optimal %d, "
           "within 10%% %d; median %.4f, p90 %.4f, p95 %.4f, p99 %.4f, max %.4f\n", N, infeasible,
           exact, within, ratio[N / 2], ratio[N * 9 / 10], ratio[N * 95 / 100], ratio[N * 99 / 100],
           ratio[N - 1]);
    CHECK(within >= N * 95 / 100, "within 10%% on %d of %d", within, N);
}

/* ---- graphs where one side alone is wrong -------------------------------------------- */

/* Matmuls 20x faster on the device: all-host loses. */
static void test_all_host_wrong(void)
{
    hx_tensor *x, *y, *loss;
    hx_graph *g = mlp(64, 3, &x, &y, &loss);
    hx_session_config c = simulated(0);
    c.auto_placement = true;
    hx_session *s = test_session_with(g, &c, "auto");
    if (s) {
        hx_placement_report r = report(s);
        CHECK(r.predicted_step_s < 0.8 * r.predicted_all_host_s, "auto %g, all-host %g",
              r.predicted_step_s, r.predicted_all_host_s);
        CHECK(r.predicted_step_s <= r.predicted_all_device_s, "auto %g, all-device %g",
              r.predicted_step_s, r.predicted_all_device_s);
        /* the forward chain's matmuls on the device (a gradient's may run on
         * the host beside the device's work) */
        int fwd = 0, fwd_dev = 0;
        for (int i = 0; i < loss->id; i++)
            if (g->tensors[i]->op == HX_OP_MATMUL) {
                fwd++;
                fwd_dev += s->e.target[i] == HX_TARGET_DEVICE;
            }
        CHECK(fwd == 3 && fwd_dev == fwd, "%d of %d forward matmuls on the device", fwd_dev, fwd);
        CHECK(r.predicted_device_bytes <= r.device_cap, "fits");
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* A table larger than the device cap (gathered rows feeding an MLP) and a
 * chain of tiny ops between two host ops: all-device does not fit, and
 * the chain would pay two copies and its launches; all-host loses the
 * matmuls. Auto beats both and fits. */
static void test_all_device_wrong(void)
{
    hx_graph *g = hx_graph_create();
    int64_t is[1] = {64}, s2[2] = {64, 64}, tiny[2] = {4, 4};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, is);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, s2);
    hx_tensor *z = hx_graph_input(g, "z", HX_DTYPE_F32, 2, tiny);
    hx_tensor *table = param(g, "table", 8192, 64); /* 2 MiB */
    hx_tensor *h = hx_gather(g, table, ids);         /* (64,64) */
    for (int l = 0; l < 3; l++) {
        char n[16];
        snprintf(n, sizeof n, "w%d", l);
        h = hx_relu(g, hx_matmul(g, h, param(g, n, 64, 64), false, false));
    }
    hx_tensor *c0 = on(hx_exp(g, z), HX_TARGET_CPU), *c = c0;
    for (int l = 0; l < 6; l++) c = hx_tanh(g, c);
    hx_tensor *c1 = on(hx_sigmoid(g, c), HX_TARGET_CPU);
    hx_tensor *loss = hx_add(g, hx_mse(g, h, y), hx_reduce_sum(g, c1, 0, NULL, false));
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    CHECK(loss && hx_graph_backward(g, loss) == HX_OK && hx_graph_apply_optimizer(g, NULL, &adam) == HX_OK,
          "build: %s", hx_last_error());
    hx_session_config cfg = simulated((size_t)1 << 20); /* 1 MiB */
    cfg.auto_placement = true;
    hx_session *s = test_session_with(g, &cfg, "auto under a 1 MiB cap");
    if (s) {
        hx_placement_report r = report(s);
        CHECK(!isfinite(r.predicted_all_device_s), "all-device cannot fit: %g", r.predicted_all_device_s);
        CHECK(r.predicted_step_s < 0.8 * r.predicted_all_host_s, "auto %g, all-host %g",
              r.predicted_step_s, r.predicted_all_host_s);
        CHECK(r.predicted_device_bytes <= r.device_cap, "predicted %zu, cap %zu",
              r.predicted_device_bytes, r.device_cap);
        CHECK(s->e.target[table->id] == HX_TARGET_CPU, "the table stays on the host");
        int chain_dev = 0;
        for (int i = c0->id + 1; i < c1->id; i++) chain_dev += s->e.target[i] == HX_TARGET_DEVICE;
        CHECK(!chain_dev, "%d of the tiny chain's ops on the device", chain_dev);
        CHECK(s->e.target[h->src[0]->id] == HX_TARGET_DEVICE, "the last matmul on the device");
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* No cap, but a long chain of tiny ops between two host ops beside a small
 * MLP: all-device pays the chain's device launches and two copies, all-host
 * the matmuls; auto beats both (by more than the 10% a mixed placement must
 * win by). */
static void test_tiny_chain(void)
{
    hx_graph *g = hx_graph_create();
    int64_t s2[2] = {16, 64}, tiny[2] = {4, 4};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, s2);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, s2);
    hx_tensor *z = hx_graph_input(g, "z", HX_DTYPE_F32, 2, tiny);
    hx_tensor *h = x;
    for (int l = 0; l < 2; l++) {
        char n[16];
        snprintf(n, sizeof n, "w%d", l);
        h = hx_relu(g, hx_matmul(g, h, param(g, n, 64, 64), false, false));
    }
    hx_tensor *c0 = on(hx_exp(g, z), HX_TARGET_CPU), *c = c0;
    for (int l = 0; l < 40; l++) c = l % 2 ? hx_tanh(g, c) : hx_sigmoid(g, c);
    hx_tensor *c1 = on(hx_exp(g, c), HX_TARGET_CPU);
    hx_tensor *loss = hx_add(g, hx_mse(g, h, y), hx_reduce_sum(g, c1, 0, NULL, false));
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    CHECK(loss && hx_graph_backward(g, loss) == HX_OK && hx_graph_apply_optimizer(g, NULL, &adam) == HX_OK,
          "build: %s", hx_last_error());
    hx_session_config cfg = simulated(0);
    cfg.auto_placement = true;
    hx_session *s = test_session_with(g, &cfg, "auto");
    if (s) {
        hx_placement_report r = report(s);
        CHECK(r.predicted_step_s < r.predicted_all_device_s && r.predicted_step_s < r.predicted_all_host_s,
              "auto %g, all-device %g, all-host %g", r.predicted_step_s, r.predicted_all_device_s,
              r.predicted_all_host_s);
        int chain_dev = 0;
        for (int i = c0->id + 1; i < c1->id; i++) chain_dev += s->e.target[i] == HX_TARGET_DEVICE;
        CHECK(!chain_dev, "%d of the tiny chain's ops on the device", chain_dev);
        CHECK(s->e.target[h->src[0]->id] == HX_TARGET_DEVICE, "the last matmul on the device");
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* ---- results ------------------------------------------------------------------------- */

static void train(hx_session *s, hx_tensor *x, hx_tensor *y, hx_tensor *loss, float *losses)
{
    test_rng r = test_rng_make(5);
    float xv[32 * 64], yv[32 * 64];
    for (int step = 0; step < 3; step++) {
        test_fill_uniform(&r, xv, 32 * 64, -1, 1);
        test_fill_uniform(&r, yv, 32 * 64, -1, 1);
        hx_feed f[2] = {{NULL, x, xv, sizeof xv}, {NULL, y, yv, sizeof yv}};
        hx_fetch o = {NULL, loss, &losses[step], sizeof losses[step]};
        CHECK(hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN) == HX_OK, "train: %s", hx_last_error());
    }
}

static void test_bitwise_all_cpu(void)
{
    hx_tensor *x, *y, *loss;
    hx_graph *g = mlp(32, 3, &x, &y, &loss);
    hx_session_config c = simulated(0);
    c.auto_placement = true;
    hx_session *a = test_session_with(g, &c, "auto");
    c.accelerator = HX_ACCELERATOR_NONE;
    hx_session *b = test_session_with(g, &c, "all CPU");
    if (a && b) {
        CHECK(report(a).n_auto_device > 0, "auto put something on the device");
        float la[3], lb[3];
        train(a, x, y, loss, la);
        train(b, x, y, loss, lb);
        CHECK(!memcmp(la, lb, sizeof la), "losses %g %g %g vs %g %g %g", la[0], la[1], la[2],
              lb[0], lb[1], lb[2]);
        float wa[64 * 64], wb[64 * 64];
        for (int l = 0; l < 3; l++) {
            char n[16];
            snprintf(n, sizeof n, "w%d", l);
            const hx_tensor *w = hx_graph_find(g, n);
            CHECK(hx_session_read(a, w, wa, sizeof wa) == HX_OK &&
                  hx_session_read(b, w, wb, sizeof wb) == HX_OK && !memcmp(wa, wb, sizeof wa),
                  "%s bitwise", n);
        }
        hx_placement_report r = report(a);
        CHECK(r.measured_steps == 3 && r.measured_step_s > 0, "measured %d steps", r.measured_steps);
    }
    hx_session_free(a);
    hx_session_free(b);
    hx_graph_free(g);
}

/* ---- the op cost cache ----------------------------------------------------------------- */

static void test_cache(void)
{
    hx_tensor *x, *y, *loss;
    hx_graph *g = mlp(16, 2, &x, &y, &loss);
    hx_session_config c = simulated(0);
    c.auto_placement = true;
    char path[320];
    snprintf(path, sizeof path, "%s.cache_test", cache_path());
    remove(path);
    c.placement_cache = path;
    hx_session *s = test_session_with(g, &c, "first");
    hx_placement_report r1 = s ? report(s) : (hx_placement_report){0};
    hx_session_free(s);
    CHECK(r1.n_signatures > 0 && r1.n_cache_hits == 0, "first: %d signatures, %d hits",
          r1.n_signatures, r1.n_cache_hits);
    s = test_session_with(g, &c, "second");
    hx_placement_report r2 = s ? report(s) : (hx_placement_report){0};
    hx_session_free(s);
    CHECK(r2.n_signatures == r1.n_signatures && r2.n_cache_hits == r2.n_signatures,
          "second: %d signatures, %d hits", r2.n_signatures, r2.n_cache_hits);
    /* files that are not valid are ignored whole and rewritten */
    const char *bad[] = {"not a cache\n", "hetex-op-costs 1\n0123 4567 1e-3 matmul\n",
                         "hetex-op-costs 1\n0123456789abcdef 0123456789abcdef nan matmul\n",
                         "hetex-op-costs 1\n0123456789abcdef 0123456789abcdef -1 matmul\n",
                         "hetex-op-costs 1\n0123456789abcdef 0123456789abcdef 1e-3 bad/name\n",
                         "hetex-op-costs 1\n0123456789abcdef 0123456789abcdef 1e-3 x extra\n",
                         "hetex-op-costs 1\n0123456789abcdef 0123456789abcdef 1e-3 matmul"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "write %s", path);
        if (!f) break;
        fputs(bad[k], f);
        fclose(f);
        s = test_session_with(g, &c, "bad cache");
        hx_placement_report r = s ? report(s) : (hx_placement_report){0};
        hx_session_free(s);
        CHECK(r.n_cache_hits == 0 && r.n_auto == r1.n_auto, "bad file %zu: %d hits", k, r.n_cache_hits);
        s = test_session_with(g, &c, "rewritten cache");
        r = s ? report(s) : (hx_placement_report){0};
        hx_session_free(s);
        CHECK(r.n_cache_hits == r.n_signatures, "bad file %zu rewritten: %d of %d hits", k,
              r.n_cache_hits, r.n_signatures);
    }
    /* a file that repeats an entry: the newest counts, for a get and for a
     * put (a put once changed the oldest, so a get kept answering the newest;
     * found by tests/fuzz/fuzz_op_costs.c) */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "write %s", path);
    if (f) {
        fputs("hetex-op-costs 1\n00000000000000aa 00000000000000bb 1e-3 matmul\n"
              "00000000000000aa 00000000000000bb 2e-3 matmul\n", f);
        fclose(f);
    }
    hx_op_costs *oc = NULL;
    double sec = 0;
    CHECK(hx__op_costs_open(path, 0xaa, &oc) == HX_OK, "open: %s", hx_last_error());
    CHECK(oc && hx__op_costs_get(oc, 0xbb, &sec, NULL) && sec == 2e-3, "get gives the newest: %g", sec);
    CHECK(oc && hx__op_costs_put(oc, 0xbb, 5e-3, "matmul") == HX_OK && hx__op_costs_save(oc) == HX_OK,
          "put and save: %s", hx_last_error());
    CHECK(oc && hx__op_costs_get(oc, 0xbb, &sec, NULL) && sec == 5e-3, "get after put: %g", sec);
    hx__op_costs_free(oc);
    oc = NULL;
    CHECK(hx__op_costs_open(path, 0xaa, &oc) == HX_OK && hx__op_costs_get(oc, 0xbb, &sec, NULL) &&
          sec == 5e-3, "the saved file gives the put: %g", sec);
    hx__op_costs_free(oc);
    c.placement_cache = "";
    s = test_session_with(g, &c, "no cache");
    CHECK(s && report(s).n_cache_hits == 0, "no cache file");
    hx_session_free(s);
    c.placement_cache = "/nonexistent-dir/op_costs"; /* unwritable: the session still works */
    s = test_session_with(g, &c, "unwritable cache");
    CHECK(s && report(s).n_auto > 0, "unwritable cache: %s", hx_last_error());
    hx_session_free(s);
    remove(path);
    hx_graph_free(g);
}

static void cleanup(void)
{
    if (cache_dir[0]) test_remove_tree(cache_dir);
}

static const test_case cases[] = {
    {"target_values", test_target_values},
    {"rules", test_rules},
    {"heuristic_vs_exact", test_heuristic_vs_exact},
    {"all_host_wrong", test_all_host_wrong},
    {"all_device_wrong", test_all_device_wrong},
    {"tiny_chain", test_tiny_chain},
    {"bitwise_all_cpu", test_bitwise_all_cpu},
    {"cache", test_cache},
};

int main(int argc, char **argv)
{
    int rc = test_main(argc, argv, "autoplace", cases, TEST_COUNT(cases));
    cleanup();
    return rc;
}
