/* test_partition: crafted graphs whose subgraph and copy counts follow from
 * the placement and partition rules (beyond test_placement's three readers,
 * C->D->C->D chain and diamond): a device value read by three host ops, a
 * host value read by two device subgraphs, the mirrored diamond, nested
 * target scopes, the training step of a parameter offloaded to the host and
 * of one kept on the device, and the no-kernel error with its fallback.
 * Every graph's fetched values also equal the all-CPU run bitwise. */
#include "hetex.h"
#include "backend_suite.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <stdlib.h>
#include <string.h>

static test_rng rng;

typedef struct want {
    int subgraphs, device_subgraphs, h2d, d2h;
} want;

static hx_tensor *on(hx_tensor *t, hx_target tg)
{
    CHECK(hx_tensor_set_target(t, tg) == HX_OK, "set_target: %s", hx_last_error());
    return t;
}

static hx_session *open_session(hx_graph *g, hx_accelerator acc, hx_fallback fb)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = acc;
    c.n_threads = 2;
    c.fallback = fb;
    return test_session_with(g, &c, acc == HX_ACCELERATOR_EMU ? "session (emu)" : "session (cpu)");
}

/* Runs `steps` runs (train: HX_RUN_TRAIN) fetching y on s; the fetched
 * bytes of every run, one after another, go to out. */
static void run(hx_session *s, hx_tensor *x, const float *xv, hx_tensor *y, int steps, bool train,
                unsigned char *out)
{
    size_t n = hx_tensor_nbytes(y);
    for (int k = 0; k < steps; k++) {
        hx_feed f = {.tensor = x, .data = xv + k * hx_tensor_numel(x), .bytes = hx_tensor_nbytes(x)};
        hx_fetch o = {.tensor = y, .data = out + k * n, .bytes = n};
        hx_status st = hx_session_run(s, &f, 1, &o, 1, train ? HX_RUN_TRAIN : 0);
        CHECK(st == HX_OK, "run %d: %s", k, hx_last_error());
    }
}

/* Plans and runs g under emu: the plan's counts must be w, and y (after
 * each of `steps` runs) must equal the all-CPU run bitwise. */
static void check(const char *what, hx_graph *g, hx_tensor *x, hx_tensor *y, int steps, bool train,
                  want w, hx_fallback fb)
{
    int64_t nx = hx_tensor_numel(x);
    float *xv = malloc(sizeof *xv * nx * steps);
    size_t ny = hx_tensor_nbytes(y) * steps;
    unsigned char *got = malloc(ny), *ref = malloc(ny);
    test_fill_uniform(&rng, xv, nx * steps, -2, 2);
    memset(got, 0xff, ny);
    memset(ref, 0x00, ny);

    hx_session *s = open_session(g, HX_ACCELERATOR_EMU, fb);
    if (s) {
        run(s, x, xv, y, steps, train, got);
        hx_placement_stats ps = {0};
        CHECK(hx_session_placement_stats(s, &ps) == HX_OK, "%s: stats: %s", what, hx_last_error());
        bool ok = ps.n_subgraphs == w.subgraphs && ps.n_device_subgraphs == w.device_subgraphs &&
                  ps.n_h2d == w.h2d && ps.n_d2h == w.d2h && ps.n_copies == w.h2d + w.d2h;
        CHECK(ok, "%s: %d subgraphs (%d device), %d h2d, %d d2h; want %d (%d), %d, %d", what,
              ps.n_subgraphs, ps.n_device_subgraphs, ps.n_h2d, ps.n_d2h, w.subgraphs,
              w.device_subgraphs, w.h2d, w.d2h);
        if (!ok) bsuite_print_summary(s, stderr);
        hx_session_free(s);
    }
    s = open_session(g, HX_ACCELERATOR_NONE, HX_FALLBACK_ERROR);
    if (s) {
        run(s, x, xv, y, steps, train, ref);
        CHECK(!memcmp(got, ref, ny), "%s: values differ from the all-CPU run", what);
        hx_session_free(s);
    }
    free(xv);
    free(got);
    free(ref);
}

static const int64_t SH[2] = {4, 8};

/* A device value read by three host ops: one D2H copy. */
static void test_three_host_readers(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, SH);
    hx_tensor *a = on(hx_relu(g, x), HX_TARGET_DEVICE);
    hx_tensor *b = on(hx_exp(g, a), HX_TARGET_CPU), *c = on(hx_tanh(g, a), HX_TARGET_CPU);
    hx_tensor *d = on(hx_sigmoid(g, a), HX_TARGET_CPU);
    hx_tensor *y = on(hx_add(g, on(hx_add(g, b, c), HX_TARGET_CPU), d), HX_TARGET_CPU);
    check("three host readers", g, x, y, 1, false, (want){2, 1, 1, 1}, HX_FALLBACK_ERROR);
    hx_graph_free(g);
}

/* x is read on the device before and after a host op: the second device
 * subgraph cannot join the first (it would depend on itself through the
 * host op), and x is still copied once per run. */
static void test_host_value_two_device_subgraphs(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, SH);
    hx_tensor *a = on(hx_exp(g, x), HX_TARGET_DEVICE);
    hx_tensor *b = on(hx_relu(g, a), HX_TARGET_CPU);
    hx_tensor *y = on(hx_add(g, b, x), HX_TARGET_DEVICE);
    check("host value, two device subgraphs", g, x, y, 1, false, (want){3, 2, 2, 1}, HX_FALLBACK_ERROR);
    hx_graph_free(g);
}

/* The diamond mirrored: top and right branch on the host, left on the
 * device, join on the host (a new host subgraph: joining top's would close
 * a cycle through the device branch). */
static void test_mirrored_diamond(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, SH);
    hx_tensor *top = on(hx_relu(g, x), HX_TARGET_CPU);
    hx_tensor *l = on(hx_exp(g, top), HX_TARGET_DEVICE);
    hx_tensor *r = on(hx_tanh(g, top), HX_TARGET_CPU);
    hx_tensor *y = on(hx_mul(g, l, r), HX_TARGET_CPU);
    check("mirrored diamond", g, x, y, 1, false, (want){3, 1, 1, 1}, HX_FALLBACK_ERROR);
    hx_graph_free(g);
}

/* Nested scopes: CPU { exp, DEVICE { tanh }, sigmoid }, then relu at its op
 * default (the device): C -> D -> C -> D. */
static void test_nested_scopes(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, SH);
    CHECK(hx_graph_push_target(g, HX_TARGET_CPU) == HX_OK, "push: %s", hx_last_error());
    hx_tensor *a = hx_exp(g, x);
    CHECK(hx_graph_push_target(g, HX_TARGET_DEVICE) == HX_OK, "push: %s", hx_last_error());
    hx_tensor *b = hx_tanh(g, a);
    CHECK(hx_graph_pop_target(g) == HX_OK, "pop: %s", hx_last_error());
    hx_tensor *c = hx_sigmoid(g, b);
    CHECK(hx_graph_pop_target(g) == HX_OK, "pop: %s", hx_last_error());
    hx_tensor *y = hx_relu(g, c);
    CHECK(hx_tensor_target(a) == HX_TARGET_CPU && hx_tensor_target(b) == HX_TARGET_DEVICE &&
              hx_tensor_target(c) == HX_TARGET_CPU && hx_tensor_target(y) == HX_TARGET_DEFAULT,
          "scoped attributes %d %d %d %d", hx_tensor_target(a), hx_tensor_target(b),
          hx_tensor_target(c), hx_tensor_target(y));
    CHECK(hx_graph_pop_target(g) == HX_ERR_STATE, "a pop without a push fails");
    check("nested scopes", g, x, y, 1, false, (want){4, 2, 2, 1}, HX_FALLBACK_ERROR);
    hx_graph_free(g);
}

/* loss = mean(tanh(x w)) on the device, SGD on w. The update runs on the
 * host (its default), so w lives there: each step copies x, w (tanh's
 * gradient reads its output) and the loss seed (a host constant) to the
 * device and w's gradient back. With w's attribute DEVICE, the update
 * follows it and only x and the seed cross. */
static void test_training_step(bool w_on_device)
{
    hx_graph *g = hx_graph_create();
    int64_t ws[2] = {8, 3};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, SH);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_uniform(-1, 1));
    if (w_on_device) on(w, HX_TARGET_DEVICE);
    hx_tensor *y = on(hx_matmul(g, x, w, false, false), HX_TARGET_DEVICE);
    hx_tensor *loss = hx_reduce_mean(g, hx_tanh(g, y), 0, NULL, false);
    CHECK(hx_graph_backward(g, loss) == HX_OK, "backward: %s", hx_last_error());
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    oc.lr = 0.1;
    oc.momentum = 0.9;
    CHECK(hx_graph_apply_optimizer(g, NULL, &oc) == HX_OK, "optimizer: %s", hx_last_error());
    want w_host = {2, 1, 3, 1}, w_dev = {1, 1, 2, 0};
    /* three steps: the fetched parameter shows each step's update */
    check(w_on_device ? "training step, parameter on the device"
                      : "training step, parameter on the host",
          g, x, w, 3, true, w_on_device ? w_dev : w_host, HX_FALLBACK_ERROR);
    hx_graph_free(g);
}

/* FTRL on a device parameter: emu has no FTRL kernel. Without the fallback
 * the session fails naming the op and the fix, and the graph stays usable;
 * with it the update and its parameter move to the host. */
static void test_no_kernel(void)
{
    hx_graph *g = hx_graph_create();
    int64_t ws[2] = {8, 2};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, SH);
    hx_tensor *w = on(hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_uniform(-1, 1)),
                      HX_TARGET_DEVICE);
    hx_tensor *loss = hx_reduce_mean(g, hx_tanh(g, hx_matmul(g, x, w, false, false)), 0, NULL, false);
    CHECK(hx_graph_backward(g, loss) == HX_OK, "backward: %s", hx_last_error());
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_FTRL);
    CHECK(hx_graph_apply_optimizer(g, w, &oc) == HX_OK, "optimizer: %s", hx_last_error());

    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    hx_session *s = (hx_session *)&c; /* must come back NULL */
    hx_status st = hx_session_create(g, &c, &s);
    const char *msg = hx_last_error();
    CHECK(st == HX_ERR_NO_KERNEL && s == NULL, "%s, session %p", hx_status_name(st), (void *)s);
    CHECK(strstr(msg, "ftrl_update") && strstr(msg, "device") && strstr(msg, "HX_FALLBACK_CPU"),
          "the message names the op, the target and the fallback: %s", msg);
    hx_tensor *extra = hx_relu(g, x); /* a failed create leaves the graph open */
    CHECK(extra != NULL, "graph frozen after a failed session: %s", hx_last_error());

    s = open_session(g, HX_ACCELERATOR_EMU, HX_FALLBACK_CPU);
    hx_placement_stats ps = {0};
    CHECK(s && hx_session_placement_stats(s, &ps) == HX_OK && ps.n_fallbacks == 1,
          "fallbacks %d", ps.n_fallbacks);
    hx_session_free(s);
    /* the update and w on the host, the rest on the device: x and w go up,
     * the seed too; w's gradient comes down */
    check("FTRL fallback", g, x, w, 2, true, (want){2, 1, 3, 1}, HX_FALLBACK_CPU);
    hx_graph_free(g);
}

static void training_step_w_on_host(void) { test_training_step(false); }
static void training_step_w_on_device(void) { test_training_step(true); }

static const test_case cases[] = {
    {"three_host_readers", test_three_host_readers},
    {"host_value_two_device_subgraphs", test_host_value_two_device_subgraphs},
    {"mirrored_diamond", test_mirrored_diamond},
    {"nested_scopes", test_nested_scopes},
    {"training_step_w_on_host", training_step_w_on_host},
    {"training_step_w_on_device", training_step_w_on_device},
    {"no_kernel", test_no_kernel},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(2024);
    return test_main(argc, argv, "partition", cases, TEST_COUNT(cases));
}
