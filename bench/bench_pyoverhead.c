/* The C side of python/bench/overhead.py: the cost of one session run of a
 * tiny graph (y = relu(x + c), 4 elements, one feed and one fetch, all on
 * the CPU, one thread) and of adding one op to a graph, timed as the Python
 * benchmark times the same calls through the binding. Each figure is the
 * best of `repeats` rounds (the least disturbed on a shared machine); one
 * JSON object per case on stdout.
 *   bench_pyoverhead [runs_per_round [ops_per_round [repeats]]] */
#include "hetex.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_pyoverhead: %s: %s\n", what, hx_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    long runs = argc > 1 ? atol(argv[1]) : 20000, ops = argc > 2 ? atol(argv[2]) : 2000;
    int repeats = argc > 3 ? atoi(argv[3]) : 5;
    if (runs < 1 || ops < 1 || repeats < 1) {
        fprintf(stderr, "usage: bench_pyoverhead [runs [ops [repeats]]] (each >= 1)\n");
        return 2;
    }
    int64_t n = 4;
    const float cv[4] = {1, -2, 3, -4};
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, &n);
    hx_tensor *c = hx_graph_constant(g, "c", HX_DTYPE_F32, 1, &n, cv);
    hx_tensor *y = hx_relu(g, hx_add(g, x, c));
    if (!y) die("graph");
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.n_threads = 1;
    hx_session *s;
    if (hx_session_create(g, &cfg, &s)) die("session");
    float xb[4] = {0.5f, 0.5f, 0.5f, 0.5f}, yb[4];
    hx_feed feed = {NULL, x, xb, sizeof xb};
    hx_fetch fetch = {NULL, y, yb, sizeof yb};
    for (int i = 0; i < 1000; i++)
        if (hx_session_run(s, &feed, 1, &fetch, 1, 0)) die("run");
    double best_run = 1e30, best_op = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        for (long i = 0; i < runs; i++)
            if (hx_session_run(s, &feed, 1, &fetch, 1, 0)) die("run");
        double t = (now() - t0) / (double)runs;
        if (t < best_run) best_run = t;
        hx_graph *h = hx_graph_create();
        hx_tensor *z = hx_graph_input(h, "z", HX_DTYPE_F32, 1, &n);
        t0 = now();
        for (long i = 0; i < ops; i++) z = hx_relu(h, z);
        t = (now() - t0) / (double)ops;
        if (!z) die("build");
        hx_graph_free(h);
        if (t < best_op) best_op = t;
    }
    printf("{\"bench\":\"pyoverhead\",\"side\":\"c\",\"case\":\"run\",\"us\":%.4f,\"runs\":%ld,"
           "\"repeats\":%d}\n", best_run * 1e6, runs, repeats);
    printf("{\"bench\":\"pyoverhead\",\"side\":\"c\",\"case\":\"op\",\"us\":%.4f,\"ops\":%ld,"
           "\"repeats\":%d}\n", best_op * 1e6, ops, repeats);
    hx_session_free(s);
    hx_graph_free(g);
    return 0;
}
