/* Placement on the emu accelerator: copy and subgraph counts of crafted
 * graphs, placement errors, device OOM. More crafted graphs are in
 * test_partition.c; 300 seeded random graphs whose outputs, gradients and
 * training steps under random placements equal the all-CPU run bitwise are
 * in test_random_graphs.c. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <stdlib.h>
#include <string.h>

static hx_session *open_session(hx_graph *g, hx_accelerator acc, size_t cap)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = acc;
    c.max_device_memory = cap;
    c.n_threads = 2;
    return test_session_with(g, &c, "session");
}

static hx_tensor *on(hx_tensor *t, hx_target tg)
{
    hx_tensor_set_target(t, tg);
    return t;
}

static hx_placement_stats run_stats(hx_session *s, const hx_tensor *x, const hx_tensor *y,
                                    float *out, size_t out_bytes)
{
    static float xv[64];
    for (int i = 0; i < 64; i++) xv[i] = (float)(i % 7) - 3;
    hx_feed f = {NULL, x, xv, hx_tensor_nbytes(x)};
    hx_fetch o = {NULL, y, out, out_bytes};
    CHECK(hx_session_run(s, &f, 1, &o, 1, 0) == HX_OK, "run: %s", hx_last_error());
    hx_placement_stats ps = {0};
    CHECK(hx_session_placement_stats(s, &ps) == HX_OK, "stats: %s", hx_last_error());
    return ps;
}

/* One host tensor read by three device ops is copied once. */
static void test_one_copy_for_three_readers(void)
{
    hx_graph *g = hx_graph_create();
    int64_t sh[2] = {4, 8};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, sh);
    hx_tensor *h = on(hx_relu(g, x), HX_TARGET_CPU);
    hx_tensor *a = on(hx_exp(g, h), HX_TARGET_DEVICE), *b = on(hx_tanh(g, h), HX_TARGET_DEVICE);
    hx_tensor *c = on(hx_sigmoid(g, h), HX_TARGET_DEVICE);
    hx_tensor *y = on(hx_add(g, hx_add(g, a, b), c), HX_TARGET_DEVICE);
    hx_session *s = open_session(g, HX_ACCELERATOR_EMU, 0);
    float out[32];
    hx_placement_stats ps = run_stats(s, x, y, out, sizeof out);
    CHECK(ps.n_copies == 1 && ps.n_h2d == 1 && ps.n_d2h == 0, "copies %d (h2d %d, d2h %d)",
          ps.n_copies, ps.n_h2d, ps.n_d2h);
    CHECK(ps.n_subgraphs == 2 && ps.n_device_subgraphs == 1, "subgraphs %d", ps.n_subgraphs);
    CHECK(ps.copy_bytes == 4 * 4 * 8, "copy bytes %zu", ps.copy_bytes);
    hx_session_free(s);
    hx_graph_free(g);
}

/* CPU -> DEVICE -> CPU -> DEVICE: four subgraphs, a copy at each crossing
 * (fetches are copied out after the run, not as plan steps). */
static void test_chain(void)
{
    hx_graph *g = hx_graph_create();
    int64_t sh[2] = {4, 8};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, sh);
    hx_tensor *a = on(hx_relu(g, x), HX_TARGET_CPU);
    hx_tensor *b = on(hx_exp(g, a), HX_TARGET_DEVICE);
    hx_tensor *c = on(hx_tanh(g, b), HX_TARGET_CPU);
    hx_tensor *d = on(hx_sigmoid(g, c), HX_TARGET_DEVICE);
    hx_session *s = open_session(g, HX_ACCELERATOR_EMU, 0);
    float out[32];
    hx_placement_stats ps = run_stats(s, x, d, out, sizeof out);
    CHECK(ps.n_subgraphs == 4 && ps.n_device_subgraphs == 2, "subgraphs %d", ps.n_subgraphs);
    CHECK(ps.n_h2d == 2 && ps.n_d2h == 1, "h2d %d d2h %d", ps.n_h2d, ps.n_d2h);
    hx_session_free(s);
    hx_graph_free(g);
}

/* A diamond with one branch on each target joins on the device. */
static void test_diamond(void)
{
    hx_graph *g = hx_graph_create();
    int64_t sh[2] = {4, 8};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, sh);
    hx_tensor *top = on(hx_relu(g, x), HX_TARGET_DEVICE);
    hx_tensor *l = on(hx_exp(g, top), HX_TARGET_CPU);
    hx_tensor *r = on(hx_tanh(g, top), HX_TARGET_DEVICE);
    hx_tensor *y = on(hx_add(g, l, r), HX_TARGET_DEVICE);
    hx_session *s = open_session(g, HX_ACCELERATOR_EMU, 0);
    float out[32];
    hx_placement_stats ps = run_stats(s, x, y, out, sizeof out);
    /* device {top, r} -> cpu {l} -> device {y}: y cannot join top's subgraph */
    CHECK(ps.n_subgraphs == 3, "subgraphs %d", ps.n_subgraphs);
    CHECK(ps.n_h2d == 2 && ps.n_d2h == 1, "h2d %d (x, l) d2h %d (top)", ps.n_h2d, ps.n_d2h);
    char path[] = "/tmp/hx_diamond_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    CHECK(hx_session_dump_dot(s, path) == HX_OK, "dot: %s", hx_last_error());
    CHECK(hx_session_dump_summary(s, path) == HX_OK, "summary: %s", hx_last_error());
    remove(path);
    hx_session_free(s);
    hx_graph_free(g);
}

static void test_errors(void)
{
    /* an op with no kernel on its target (emu has no FTRL), and the fallback */
    hx_graph *g = hx_graph_create();
    int64_t sh[2] = {4, 8}, ws[2] = {8, 2};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, sh);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_uniform(-1, 1));
    hx_tensor *loss = hx_reduce_mean(g, hx_matmul(g, x, w, false, false), 0, NULL, false);
    hx_graph_backward(g, loss);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_FTRL);
    hx_tensor_set_target(w, HX_TARGET_DEVICE);
    hx_graph_apply_optimizer(g, w, &oc);
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    hx_session *s = NULL;
    hx_status st = hx_session_create(g, &c, &s);
    CHECK(st == HX_ERR_NO_KERNEL && strstr(hx_last_error(), "ftrl_update"), "%s: %s",
          hx_status_name(st), hx_last_error());
    c.fallback = HX_FALLBACK_CPU;
    st = hx_session_create(g, &c, &s);
    CHECK(st == HX_OK, "fallback: %s", hx_last_error());
    hx_placement_stats ps = {0};
    CHECK(s && hx_session_placement_stats(s, &ps) == HX_OK && ps.n_fallbacks == 1,
          "fallbacks %d", ps.n_fallbacks);
    hx_session_free(s);
    c.accelerator = HX_ACCELERATOR_CUDA;
    CHECK(hx_session_create(g, &c, &s) == HX_ERR_UNSUPPORTED, "cuda in a build without it");
    hx_graph_free(g);

    /* device OOM under a small cap, then the session still serves a small run */
    g = hx_graph_create();
    int64_t big[2] = {256, 256}, small[2] = {2, 2};
    hx_tensor *xb = hx_graph_input(g, "xb", HX_DTYPE_F32, 2, big);
    hx_tensor *xs = hx_graph_input(g, "xs", HX_DTYPE_F32, 2, small);
    hx_tensor *yb = on(hx_exp(g, xb), HX_TARGET_DEVICE), *ys = on(hx_exp(g, xs), HX_TARGET_DEVICE);
    s = open_session(g, HX_ACCELERATOR_EMU, 64 * 1024);
    float *buf = calloc(256 * 256, sizeof *buf);
    hx_feed fb = {NULL, xb, buf, hx_tensor_nbytes(xb)};
    hx_fetch ob = {NULL, yb, buf, hx_tensor_nbytes(yb)};
    st = hx_session_run(s, &fb, 1, &ob, 1, 0);
    CHECK(st == HX_ERR_DEVICE_OOM && strstr(hx_last_error(), "capacity 65536"), "%s: %s",
          hx_status_name(st), hx_last_error());
    float sv[4] = {0, 1, 2, 3}, so[4];
    hx_feed fs = {NULL, xs, sv, sizeof sv};
    hx_fetch os = {NULL, ys, so, sizeof so};
    st = hx_session_run(s, &fs, 1, &os, 1, 0);
    CHECK(st == HX_OK && so[0] == 1.0f, "after OOM: %s", hx_last_error());
    free(buf);
    hx_session_free(s);
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"one_copy_for_three_readers", test_one_copy_for_three_readers},
    {"chain", test_chain},
    {"diamond", test_diamond},
    {"errors", test_errors},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "placement", cases, TEST_COUNT(cases));
}
