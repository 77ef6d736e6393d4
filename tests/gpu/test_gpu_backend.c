/* The cuda backend on a real device: the backend table (memory accounting,
 * copies through the pinned staging buffers and straight from pinned
 * memory, events across streams), the overlap of two independent streams,
 * pinned vs pageable copy bandwidth (one JSON line each), and sessions:
 * seeded random graphs (tests/util/randgraph.h) with random CPU/DEVICE
 * targets run under accelerator CUDA against the all-CPU run (f32 within
 * 1e-4 relative over chains of ops, others within 1e-2), a bad label on the
 * device failing with HX_ERR_INDEX, and a device OOM under a small cap. */
#include "gpu_testutil.h"
#include "randgraph.h"
#include "backend/backend_cuda_internal.h"

#include <math.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static hx_backend *cuda_backend(size_t cap)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_CUDA;
    cfg.max_device_memory = cap;
    hx_backend *b = NULL;
    hx_status st = hx__backend_cuda_for(&cfg, (hx_trace_hooks){0}, &b, NULL);
    CHECK(st == HX_OK && b, "cuda backend: %s", hx_last_error());
    return st == HX_OK ? b : NULL;
}

/* ---- copies ------------------------------------------------------------------------ */

static void check_copies(hx_backend *b)
{
    hx_stream *s;
    CHECK(b->stream_create(b, &s) == HX_OK, "%s", hx_last_error());
    /* sizes around the 4 MiB staging chunk, odd ones included */
    size_t sizes[5] = {1, 4093, (size_t)4 << 20, ((size_t)9 << 20) + 17, 123457};
    test_rng r = test_rng_make(5);
    for (int k = 0; k < 5; k++) {
        size_t n = sizes[k];
        unsigned char *src = malloc(n), *dst = malloc(n), *pinned;
        GT_CUDA(cudaHostAlloc((void **)&pinned, n, cudaHostAllocDefault));
        for (size_t i = 0; i < n; i++) src[i] = (unsigned char)test_rng_u64(&r);
        void *dev;
        hx_backend_stats before, after;
        b->stats(b, &before);
        CHECK(b->alloc(b, n, HX_MEM_TRANSIENT, "a test buffer", &dev) == HX_OK, "%s", hx_last_error());
        CHECK(b->copy_h2d(b, s, (hx_h2d_copy){.dev = dev, .host = src, .bytes = n}) == HX_OK,
              "%s", hx_last_error());
        memset(src, 0, n); /* pageable source may be reused at once */
        CHECK(b->copy_d2h(b, s, (hx_d2h_copy){.host = pinned, .dev = dev, .bytes = n}) == HX_OK,
              "%s", hx_last_error());
        CHECK(b->copy_h2d(b, s, (hx_h2d_copy){.dev = dev, .host = pinned, .bytes = n}) == HX_OK,
              "%s", hx_last_error());
        memset(dst, 0xAB, n);
        CHECK(b->copy_d2h(b, s, (hx_d2h_copy){.host = dst, .dev = dev, .bytes = n}) == HX_OK,
              "%s", hx_last_error());
        CHECK(b->stream_sync(b, s) == HX_OK, "%s", hx_last_error());
        CHECK(!memcmp(dst, pinned, n), "round trip of %zu bytes", n);
        b->stats(b, &after);
        CHECK(after.used >= before.used + n && after.h2d_bytes == before.h2d_bytes + 2 * n &&
                  after.d2h_copies == before.d2h_copies + 2, "stats");
        b->free(b, dev);
        b->stats(b, &after);
        CHECK(after.used == before.used, "free gives the bytes back");
        free(src), free(dst);
        cudaFreeHost(pinned);
    }
    b->stream_destroy(b, s);
}

/* ---- events and overlap ------------------------------------------------------------------ */

/* The overlap lanes: a row softmax over few rows (8 x 65536) fills few SMs,
 * so two streams can run side by side. */
static hx_tensor *g_node; /* a softmax node whose launcher the overlap test enqueues */

static double run_lanes(hx_backend *b, hx_stream **ss, int nstreams, void **bufs, int reps)
{
    hx_launch_fn fn = b->kernel(b, HX_OP_SOFTMAX, HX_DTYPE_F32);
    hx_exec ex = {.nthreads = 1, .grad_unscale = 1.0f};
    for (int j = 0; j < nstreams; j++) CHECK(b->stream_sync(b, ss[j]) == HX_OK, "sync");
    double t0 = now();
    for (int k = 0; k < reps; k++)
        for (int j = 0; j < nstreams; j++) {
            void *in[1] = {bufs[2 * j]};
            if (b->launch(b, ss[j], fn, &ex, g_node, bufs[2 * j + 1], in)) {
                CHECK(0, "launch: %s", hx_last_error());
                return 0;
            }
        }
    for (int j = 0; j < nstreams; j++) CHECK(b->stream_sync(b, ss[j]) == HX_OK, "sync");
    return now() - t0;
}

static void check_events_and_overlap(hx_backend *b)
{
    hx_graph *g = hx_graph_create();
    int64_t shape[2] = {8, 65536};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, shape);
    g_node = hx_softmax(g, x);
    hx_stream *ss[2];
    void *bufs[4];
    size_t bytes = 8 * 65536 * 4;
    for (int j = 0; j < 2; j++) CHECK(b->stream_create(b, &ss[j]) == HX_OK, "%s", hx_last_error());
    float *h = calloc(8 * 65536, 4);
    for (int j = 0; j < 4; j++) {
        CHECK(b->alloc(b, bytes, HX_MEM_TRANSIENT, "overlap buffer", &bufs[j]) == HX_OK, "%s", hx_last_error());
        b->copy_h2d(b, ss[0], (hx_h2d_copy){.dev = bufs[j], .host = h, .bytes = bytes});
    }
    /* an event orders stream 1 after stream 0's copy */
    hx_event *e;
    CHECK(b->event_create(b, &e) == HX_OK, "%s", hx_last_error());
    CHECK(b->event_record(b, e, ss[0]) == HX_OK && b->stream_wait(b, ss[1], e) == HX_OK &&
              b->event_sync(b, e) == HX_OK, "%s", hx_last_error());
    bool done = false; /* cudaEventQuery: done once event_sync has returned */
    CHECK(b->event_query(b, e, &done) == HX_OK && done, "event_query after event_sync: %s", hx_last_error());
    b->event_destroy(b, e);

    run_lanes(b, ss, 2, bufs, 5); /* warm-up */
    double one = run_lanes(b, ss, 1, bufs, 200);
    double two = run_lanes(b, ss, 2, bufs, 200);
    printf("{\"test\":\"overlap_two_streams\",\"one_stream_s\":%.6f,\"two_streams_s\":%.6f,"
           "\"ratio_to_serial\":%.3f}\n", one, two, two / (2 * one));
    CHECK(two < 1.6 * one, "two independent streams did not overlap: one lane %.4f s, two %.4f s",
          one, two);

    /* host work overlaps device work: the device lane runs while the host computes */
    volatile double sink = 0;
    double t0 = now();
    for (int i = 0; i < 20000000; i++) sink += i * 1e-9;
    double host = now() - t0;
    hx_launch_fn fn = b->kernel(b, HX_OP_SOFTMAX, HX_DTYPE_F32);
    hx_exec ex = {.nthreads = 1, .grad_unscale = 1.0f};
    t0 = now();
    for (int k = 0; k < 200; k++) {
        void *in[1] = {bufs[0]};
        b->launch(b, ss[0], fn, &ex, g_node, bufs[1], in);
    }
    for (int i = 0; i < 20000000; i++) sink += i * 1e-9;
    b->stream_sync(b, ss[0]);
    double both = now() - t0;
    printf("{\"test\":\"overlap_host_device\",\"host_s\":%.6f,\"device_s\":%.6f,\"both_s\":%.6f}\n",
           host, one, both);
    CHECK(both < 0.9 * (host + one), "host and device work did not overlap");
    for (int j = 0; j < 4; j++) b->free(b, bufs[j]);
    for (int j = 0; j < 2; j++) b->stream_destroy(b, ss[j]);
    free(h);
    hx_graph_free(g);
}

/* ---- copy bandwidth --------------------------------------------------------------------------- */

static void copy_bandwidth(hx_backend *b)
{
    size_t n = (size_t)256 << 20;
    hx_stream *s;
    void *dev, *pinned, *pageable = malloc(n);
    b->stream_create(b, &s);
    CHECK(b->alloc(b, n, HX_MEM_TRANSIENT, "bandwidth buffer", &dev) == HX_OK, "%s", hx_last_error());
    GT_CUDA(cudaHostAlloc(&pinned, n, cudaHostAllocDefault));
    memset(pageable, 1, n);
    memset(pinned, 1, n);
    struct { const char *name; void *host; int h2d; } cases[4] = {
        {"h2d_pinned", pinned, 1}, {"h2d_pageable", pageable, 1},
        {"d2h_pinned", pinned, 0}, {"d2h_pageable", pageable, 0}};
    for (int k = 0; k < 4; k++) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            hx_status st =
                cases[k].h2d
                    ? b->copy_h2d(b, s, (hx_h2d_copy){.dev = dev, .host = cases[k].host, .bytes = n})
                    : b->copy_d2h(b, s, (hx_d2h_copy){.host = cases[k].host, .dev = dev, .bytes = n});
            st = st ? st : b->stream_sync(b, s);
            CHECK(st == HX_OK, "%s", hx_last_error());
            double t = now() - t0;
            if (t < best) best = t;
        }
        printf("{\"test\":\"copy_bandwidth\",\"case\":\"%s\",\"bytes\":%zu,\"gb_per_s\":%.2f}\n",
               cases[k].name, n, n / best / 1e9);
    }
    b->free(b, dev);
    cudaFreeHost(pinned);
    free(pageable);
    b->stream_destroy(b, s);
}

/* ---- sessions ----------------------------------------------------------------------------------- */

static bool close_values(const hx_tensor *t, const void *got, const void *want)
{
    int64_t n = hx_tensor_numel(t);
    hx_dtype dt = hx_tensor_dtype(t);
    if (dt == HX_DTYPE_I32 || dt == HX_DTYPE_I64) return !memcmp(got, want, hx_tensor_nbytes(t));
    float *a = malloc(sizeof *a * (n ? n : 1)), *w = malloc(sizeof *w * (n ? n : 1));
    hx_k_cast(a, HX_K_F32, got, (hx_kdtype)dt, n, 1);
    hx_k_cast(w, HX_K_F32, want, (hx_kdtype)dt, n, 1);
    double tol = dt == HX_DTYPE_F32 ? 1e-4 : 1e-2;
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++)
        ok = fabs((double)a[i] - w[i]) <= tol * (1 + fabs((double)w[i])) ||
             (isnan(a[i]) && isnan(w[i]));
    free(a), free(w);
    return ok;
}

static hx_status run_graph(rg_graph *r, hx_accelerator acc, void **out)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = acc;
    cfg.fallback = HX_FALLBACK_CPU;
    hx_session *s;
    hx_status st = hx_session_create(r->g, &cfg, &s);
    if (st) return st;
    hx_feed feeds[r->n_inputs + 1];
    hx_fetch fetches[r->n_fetch + 1];
    for (int run = 0; run < 2 && !st; run++) {
        rg_feeds(r, (uint64_t)run, feeds);
        for (int i = 0; i < r->n_fetch; i++)
            fetches[i] = (hx_fetch){.tensor = r->fetch[i], .data = out[i],
                                    .bytes = hx_tensor_nbytes(r->fetch[i])};
        st = hx_session_run(s, feeds, r->n_inputs, fetches, r->n_fetch, run ? HX_RUN_TRAIN : 0);
    }
    hx_session_free(s);
    return st;
}

static void check_random_graphs(int n_seeds)
{
    rg_options o = rg_options_default();
    o.ftrl = false;
    int failed = 0;
    for (int seed = 1; seed <= n_seeds; seed++) {
        rg_graph *r = rg_build((uint64_t)seed, &o);
        if (!r || r->error[0]) {
            CHECK(0, "seed %d: %s", seed, r ? r->error : "out of memory");
            rg_free(r);
            continue;
        }
        void *got[r->n_fetch + 1], *want[r->n_fetch + 1];
        for (int i = 0; i < r->n_fetch; i++) {
            got[i] = malloc(hx_tensor_nbytes(r->fetch[i]) + 1);
            want[i] = malloc(hx_tensor_nbytes(r->fetch[i]) + 1);
            memset(got[i], 0xFF, hx_tensor_nbytes(r->fetch[i]));
        }
        hx_status a = run_graph(r, HX_ACCELERATOR_CUDA, got), b = run_graph(r, HX_ACCELERATOR_NONE, want);
        CHECK(a == b, "seed %d: status %s on cuda, %s on the CPU: %s", seed, hx_status_name(a),
              hx_status_name(b), hx_last_error());
        for (int i = 0; i < r->n_fetch && !a && !b; i++)
            if (!close_values(r->fetch[i], got[i], want[i]) && failed++ < 3) {
                CHECK(0, "seed %d: '%s' differs between cuda and the CPU", seed,
                      hx_tensor_name(r->fetch[i]));
                fprintf(stderr, "%s", rg_describe(r));
            }
        for (int i = 0; i < r->n_fetch; i++) free(got[i]), free(want[i]);
        rg_free(r);
    }
}

static void check_bad_label_and_oom(void)
{
    hx_graph *g = hx_graph_create();
    int64_t xs[2] = {4, 5}, ls[1] = {4};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_I32, 1, ls);
    hx_tensor *loss = hx_cross_entropy(g, x, y);
    hx_tensor_set_target(loss, HX_TARGET_DEVICE);
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_CUDA;
    hx_session *s;
    CHECK(hx_session_create(g, &cfg, &s) == HX_OK, "%s", hx_last_error());
    float xv[20] = {0}, l;
    int32_t yv[4] = {1, 2, 7, 0};
    hx_feed f[2] = {{"x", NULL, xv, sizeof xv}, {"y", NULL, yv, sizeof yv}};
    hx_fetch out = {NULL, loss, &l, sizeof l};
    hx_status st = hx_session_run(s, f, 2, &out, 1, 0);
    CHECK(st == HX_ERR_INDEX && strstr(hx_last_error(), "label 7 at position 2"),
          "bad label on the device: %s %s", hx_status_name(st), hx_last_error());
    yv[2] = 3;
    st = hx_session_run(s, f, 2, &out, 1, 0);
    CHECK(st == HX_OK && fabsf(l - logf(5.0f)) < 1e-5f, "loss %g after a bad run: %s", l,
          hx_last_error());
    hx_session_free(s);
    hx_graph_free(g);

    hx_backend *b = cuda_backend((size_t)64 << 20);
    void *p;
    st = b->alloc(b, (size_t)128 << 20, HX_MEM_TRANSIENT, "a too-large buffer", &p);
    CHECK(st == HX_ERR_DEVICE_OOM && strstr(hx_last_error(), "a too-large buffer") &&
              strstr(hx_last_error(), "capacity"), "OOM report: %s", hx_last_error());
    b->destroy(b);
}

/* fn on a backend of its own (uncapped). */
static void on_backend(void (*fn)(hx_backend *))
{
    hx_backend *b = cuda_backend(0);
    if (!b) return;
    fn(b);
    b->destroy(b);
}

static void copies(void) { on_backend(check_copies); }
static void events_and_overlap(void) { on_backend(check_events_and_overlap); }
static void bandwidth(void) { on_backend(copy_bandwidth); }

static int n_seeds = 60;

static int flag(int argc, char **argv, int i)
{
    if (strcmp(argv[i], "--seeds")) return 0;
    if (i + 1 >= argc || (n_seeds = atoi(argv[i + 1])) <= 0) return -1;
    return 2;
}

static void random_graphs(void) { check_random_graphs(n_seeds); }

static const test_case cases[] = {
    {"copies", copies},
    {"events_and_overlap", events_and_overlap},
    {"copy_bandwidth", bandwidth},
    {"bad_label_and_oom", check_bad_label_and_oom},
    {"random_graphs", random_graphs},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = gt_require_device, .flag = flag,
                      .flags_help = "  --seeds N    random graphs 1..N (60)\n"};
    return test_main_with(argc, argv, "gpu_backend", cases, TEST_COUNT(cases), &o);
}
