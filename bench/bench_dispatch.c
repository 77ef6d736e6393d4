/* Dispatch overhead: a chain of 10,000 adds on 16-element tensors through a
 * session (ns per op) beside the same chain as plain C calls, at 1 and 2
 * threads; and 1,000 adds on 1M-element tensors in GB/s beside a plain
 * OpenMP loop at the same thread count; the tiny chain also as launches on
 * the emulated accelerator, whose stream is served by its own thread (the
 * calling thread queues the launches and waits). One JSON object per case. */
#include "hetex.h"

#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_dispatch: %s: %s\n", what, hx_last_error());
    exit(1);
}

/* y = x + c + c + ... (n adds); returns the session and the last tensor. */
static hx_session *chain(int64_t len, int n, int threads, hx_accelerator acc, hx_graph **gp,
                         hx_tensor **last)
{
    hx_graph *g = hx_graph_create();
    float *c = malloc(sizeof *c * len);
    for (int64_t i = 0; i < len; i++) c[i] = 1e-3f * (float)(i % 17);
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, &len);
    hx_tensor *k = hx_graph_constant(g, "c", HX_DTYPE_F32, 1, &len, c);
    hx_tensor *y = x;
    for (int i = 0; i < n; i++) y = hx_add(g, y, k);
    free(c);
    if (!y) die("building the chain");
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = threads;
    cfg.accelerator = acc;
    hx_session *s;
    if (hx_session_create(g, &cfg, &s)) die("hx_session_create");
    *gp = g;
    *last = y;
    return s;
}

/* Best time of `reps` runs (the first run builds the plan and is not timed). */
static double time_runs(hx_session *s, hx_tensor *out, float *x, float *y, int64_t len, int reps)
{
    hx_feed feed = {"x", NULL, x, sizeof *x * len};
    hx_fetch fetch = {NULL, out, y, sizeof *y * len};
    if (hx_session_run(s, &feed, 1, &fetch, 1, 0)) die("hx_session_run");
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        hx_session_run(s, &feed, 1, &fetch, 1, 0);
        double t = now() - t0;
        if (t < best) best = t;
    }
    return best;
}

__attribute__((noinline)) static void plain_add(float *restrict y, const float *a,
                                                const float *restrict b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void plain_add_omp(float *restrict y, const float *a, const float *restrict b, int64_t n,
                          int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* The same chain as plain calls, ping-ponging two buffers; with threads > 1
 * every add is an OpenMP loop over that many threads. */
static double time_plain(int64_t len, int n, int threads, int reps)
{
    float *a = aligned_alloc(64, sizeof *a * len + 64), *b = aligned_alloc(64, sizeof *b * len + 64);
    float *c = aligned_alloc(64, sizeof *c * len + 64);
    for (int64_t i = 0; i < len; i++) a[i] = 0, c[i] = 1e-3f * (float)(i % 17);
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        for (int i = 0; i < n; i++) {
            float *src = i & 1 ? b : a, *dst = i & 1 ? a : b;
            if (threads > 1) plain_add_omp(dst, src, c, len, threads);
            else plain_add(dst, src, c, len);
        }
        double t = now() - t0;
        if (r && t < best) best = t;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

static void run_case(const char *name, int64_t len, int n, int threads, hx_accelerator acc,
                     int reps)
{
    hx_graph *g;
    hx_tensor *last;
    hx_session *s = chain(len, n, threads, acc, &g, &last);
    float *x = malloc(sizeof *x * len), *y = malloc(sizeof *y * len);
    for (int64_t i = 0; i < len; i++) x[i] = (float)(i % 5);
    double t = time_runs(s, last, x, y, len, reps);
    /* Tiny adds are compared with plain single-thread calls (what a good
     * runtime does with them); the OpenMP figure shows what spreading them costs. */
    bool tiny = len < 32768;
    double tp = time_plain(len, n, tiny ? 1 : threads, reps);
    double tomp = threads > 1 && tiny ? time_plain(len, n, threads, reps) : tp;
    double bytes = 3.0 * sizeof(float) * (double)len * n; /* read 2, write 1 per add */
    hx_memory_stats ms;
    hx_session_memory_stats(s, &ms);
    size_t arena = ms.transient_planned_bytes + ms.device_transient_planned_bytes;
    printf("{\"bench\":\"dispatch\",\"case\":\"%s\",\"backend\":\"%s\",\"elements\":%lld,\"ops\":%d,\"threads\":%d,"
           "\"ns_per_op\":%.1f,\"plain_ns_per_op\":%.1f,\"gb_per_s\":%.2f,\"plain_gb_per_s\":%.2f,"
           "\"plain_omp_ns_per_op\":%.1f,\"ratio_to_plain\":%.3f,\"arena_bytes\":%zu,"
           "\"tensor_bytes\":%zu}\n",
           name, acc == HX_ACCELERATOR_EMU ? "emu" : "cpu", (long long)len, n, threads, t / n * 1e9, tp / n * 1e9, bytes / t * 1e-9,
           bytes / tp * 1e-9, tomp / n * 1e9, tp / t, arena, ms.transient_tensor_bytes);
    fflush(stdout);
    hx_session_free(s);
    hx_graph_free(g);
    free(x);
    free(y);
}

int main(void)
{
    for (int threads = 1; threads <= 2; threads++)
        run_case("chain16", 16, 10000, threads, HX_ACCELERATOR_NONE, 50);
    for (int threads = 1; threads <= 2; threads++) /* launches queued to an emu stream thread */
        run_case("chain16", 16, 10000, threads, HX_ACCELERATOR_EMU, 50);
    for (int threads = 1; threads <= 2; threads++)
        run_case("add1M", 1 << 20, 1000, threads, HX_ACCELERATOR_NONE, 5);
    return 0;
}
