/* The emu device behind memory/'s pools, through a session: statistics
 * (hx_session_pool_stats, hx_session_memory_stats), persistent and
 * transient memory in separate segments, device OOM past the cap with the
 * pools' report and the session still usable (its results bitwise those of
 * a session that never ran out), and HX_MEMTRACE traces (every device
 * allocation, or the plan's tensors) that hx_memreplay replays. */
#include "hetex.h"
#include "testutil.h"
#include "session/session.h"
#include "scheduler/scheduler.h"
#include "backend/backend.h"
#include "core/core.h" /* HX_ASAN */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(HX_ASAN)
#include <sanitizer/asan_interface.h>
#endif

enum { B = 16, D = 24, H = 32, STEPS = 4 };
#define CAP ((size_t)1 << 20)

typedef struct model {
    hx_graph *g;
    hx_tensor *x, *y, *loss;
    hx_tensor *xb, *yb; /* a branch whose arena does not fit under CAP */
} model;

static hx_tensor *dev(hx_tensor *t)
{
    hx_tensor_set_target(t, HX_TARGET_DEVICE);
    return t;
}

/* A two-layer MLP on the device, trained with Adam; the big branch is fetched alone. */
static model build(void)
{
    model m = {.g = hx_graph_create()};
    int64_t xs[2] = {B, D}, ys[2] = {B, 1}, w1s[2] = {D, H}, w2s[2] = {H, 1}, bs[2] = {512, 512};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 2, xs);
    m.y = hx_graph_input(m.g, "y", HX_DTYPE_F32, 2, ys);
    hx_tensor *w1 = dev(hx_graph_param(m.g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1.0)));
    hx_tensor *w2 = dev(hx_graph_param(m.g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(1.0)));
    hx_tensor *h = dev(hx_relu(m.g, dev(hx_matmul(m.g, m.x, w1, false, false))));
    m.loss = dev(hx_mse(m.g, dev(hx_matmul(m.g, h, w2, false, false)), m.y));
    m.xb = hx_graph_input(m.g, "xb", HX_DTYPE_F32, 2, bs);
    m.yb = dev(hx_exp(m.g, dev(hx_tanh(m.g, m.xb))));
    CHECK(hx_graph_backward(m.g, m.loss) == HX_OK, "backward: %s", hx_last_error());
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    oc.lr = 0.01;
    CHECK(hx_graph_apply_optimizer(m.g, NULL, &oc) == HX_OK, "optimizer: %s", hx_last_error());
    return m;
}

static hx_session *open_emu(const model *m, size_t cap)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.max_device_memory = cap;
    c.n_threads = 2;
    hx_session *s = NULL;
    hx_status st = hx_session_create(m->g, &c, &s);
    CHECK(st == HX_OK, "session: %s", hx_last_error());
    return s;
}

static float xv[STEPS][B * D], yv[STEPS][B];

static void make_data(void)
{
    test_rng r = test_rng_make(9);
    for (int k = 0; k < STEPS; k++) {
        test_fill_uniform(&r, xv[k], B * D, -1, 1);
        test_fill_uniform(&r, yv[k], B, -1, 1);
    }
}

static hx_status step(hx_session *s, const model *m, int k, float *loss)
{
    hx_feed f[2] = {{NULL, m->x, xv[k], sizeof xv[k]}, {NULL, m->y, yv[k], sizeof yv[k]}};
    hx_fetch o = {NULL, m->loss, loss, sizeof *loss};
    return hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN);
}

static void check_pool(const char *what, const hx_pool_stats *p, size_t cap)
{
    CHECK(p->allocated <= p->reserved && p->reserved <= cap && p->requested <= p->allocated,
          "%s: requested %zu, allocated %zu, reserved %zu, cap %zu", what, p->requested,
          p->allocated, p->reserved, cap);
    CHECK(p->peak_allocated >= p->allocated && p->peak_reserved >= p->reserved &&
              p->peak_allocated <= p->peak_reserved && p->free_bytes == p->reserved - p->allocated &&
              p->largest_free <= p->free_bytes,
          "%s: peaks %zu/%zu, free %zu, largest free %zu", what, p->peak_allocated,
          p->peak_reserved, p->free_bytes, p->largest_free);
    double want = p->free_bytes ? 1.0 - (double)p->largest_free / p->free_bytes : 0;
    CHECK(fabs(p->fragmentation - want) < 1e-12, "%s: fragmentation %g, want %g", what,
          p->fragmentation, want);
}

/* [lo, hi) lies inside one of the n segments. */
static bool inside(uintptr_t lo, uintptr_t hi, const uintptr_t *base, const size_t *size, int n)
{
    for (int i = 0; i < n; i++)
        if (lo >= base[i] && hi <= base[i] + size[i]) return true;
    return false;
}

/* Persistent allocations (parameters and state placed on the device, feed
 * buffers) lie in persistent segments, the arena in a transient one, and
 * no segment of one pool overlaps one of the other. */
static void check_segregated(hx_session *s, void *feed_buf, size_t feed_bytes)
{
    hx_mem_pools *pools = s->e.be[HX_DEV_ACCEL]->pools;
    enum { MAXSEG = 64 };
    uintptr_t pb[MAXSEG], tb[MAXSEG];
    size_t ps[MAXSEG], ts[MAXSEG];
    int np = hx_mem_pools_segments(pools, HX_MEM_PERSISTENT, pb, ps, MAXSEG);
    int nt = hx_mem_pools_segments(pools, HX_MEM_TRANSIENT, tb, ts, MAXSEG);
    CHECK(np > 0 && nt > 0 && np <= MAXSEG && nt <= MAXSEG, "segments: %d persistent, %d transient", np, nt);
    for (int i = 0; i < np && i < MAXSEG; i++)
        for (int j = 0; j < nt && j < MAXSEG; j++)
            CHECK(pb[i] + ps[i] <= tb[j] || tb[j] + ts[j] <= pb[i], "segments %d and %d overlap", i, j);
    int n_dev = 0;
    for (int i = 0; i < s->e.g->n; i++) {
        if (!s->e.persist[i] || s->e.target[i] != HX_TARGET_DEVICE) continue;
        n_dev++;
        uintptr_t a = (uintptr_t)s->e.persist[i];
        CHECK(inside(a, a + hx_tensor_nbytes(s->e.g->tensors[i]), pb, ps, np),
              "'%s' is not in a persistent segment", s->e.g->tensors[i]->name);
    }
    CHECK(n_dev > 0, "some parameters or state live on the device");
    uintptr_t f = (uintptr_t)feed_buf, a = (uintptr_t)s->e.arena[HX_DEV_ACCEL];
    CHECK(inside(f, f + feed_bytes, pb, ps, np), "the device feed buffer is persistent");
    CHECK(a && inside(a, a + s->e.arena_bytes[HX_DEV_ACCEL], tb, ts, nt), "the arena is transient");
}

static void test_stats_segments_oom(void)
{
    model m = build();
    hx_session *s = open_emu(&m, CAP), *ref = open_emu(&m, CAP);
    hx_device_pools_stats prev = {0}, ps;
    void *feed = NULL;
    size_t feed_bytes = 3000;
    CHECK(hx_session_device_alloc(s, feed_bytes, &feed) == HX_OK, "%s", hx_last_error());
    for (int k = 0; k < STEPS; k++) {
        float l = NAN, lr = NAN;
        CHECK(step(s, &m, k, &l) == HX_OK && step(ref, &m, k, &lr) == HX_OK, "step %d: %s", k,
              hx_last_error());
        CHECK(isfinite(l) && !memcmp(&l, &lr, sizeof l), "step %d: loss %g vs %g", k, l, lr);
        CHECK(hx_session_pool_stats(s, &ps) == HX_OK, "%s", hx_last_error());
        CHECK(ps.capacity == CAP, "capacity %zu", ps.capacity);
        check_pool("persistent", &ps.persistent, CAP);
        check_pool("transient", &ps.transient, CAP);
        check_pool("total", &ps.total, CAP);
        CHECK(ps.total.reserved == ps.persistent.reserved + ps.transient.reserved &&
                  ps.total.allocated == ps.persistent.allocated + ps.transient.allocated,
              "total is the sum of the pools");
        CHECK(ps.persistent.allocated > feed_bytes && ps.transient.allocated > 0,
              "both pools in use: %zu, %zu", ps.persistent.allocated, ps.transient.allocated);
        CHECK(ps.total.peak_reserved >= prev.total.peak_reserved &&
                  ps.total.peak_allocated >= prev.total.peak_allocated &&
                  ps.persistent.peak_allocated >= prev.persistent.peak_allocated &&
                  ps.transient.peak_allocated >= prev.transient.peak_allocated,
              "peaks never go down (step %d)", k);
        CHECK(k < 2 || (ps.total.reserves == prev.total.reserves &&
                        ps.total.releases == prev.total.releases),
              "step %d reserves or releases segments (%lld, %lld after %lld, %lld): steady steps "
              "must not", k, (long long)ps.total.reserves, (long long)ps.total.releases,
              (long long)prev.total.reserves, (long long)prev.total.releases);
        hx_memory_stats ms;
        CHECK(hx_session_memory_stats(s, &ms) == HX_OK, "%s", hx_last_error());
        CHECK(ms.device_used_bytes == ps.total.allocated &&
                  ms.device_peak_bytes == ps.total.peak_allocated && ms.device_capacity == CAP,
              "memory stats from the pools: used %zu peak %zu", ms.device_used_bytes,
              ms.device_peak_bytes);
        CHECK(ms.device_persistent_bytes + feed_bytes <= ps.persistent.requested &&
                  ms.device_transient_planned_bytes <= ps.transient.requested,
              "the pools hold the session's device bytes");
        prev = ps;
    }
    check_segregated(s, feed, feed_bytes);

    /* persistent OOM: a feed buffer larger than what is left */
    void *big = NULL;
    size_t want = CAP - ps.persistent.reserved / 2;
    hx_status st = hx_session_device_alloc(s, want, &big);
    const char *msg = hx_last_error();
    char req[64];
    snprintf(req, sizeof req, "allocating %zu bytes (persistent)", want);
    CHECK(st == HX_ERR_DEVICE_OOM && !big, "oom: %s", hx_status_name(st));
    CHECK(strstr(msg, "hx_session_device_alloc") && strstr(msg, req) &&
              strstr(msg, "capacity 1048576 bytes") && strstr(msg, "reserved") &&
              strstr(msg, "in use") && strstr(msg, "largest free block") &&
              strstr(msg, "fragmentation") && strstr(msg, "offload") &&
              strstr(msg, "smaller batch"),
          "report: %s", msg);
    /* transient OOM: a plan whose arena (2 MiB) does not fit */
    float *bx = calloc(512 * 512, sizeof *bx), *by = calloc(512 * 512, sizeof *by);
    test_rng r = test_rng_make(3);
    test_fill_uniform(&r, bx, 512 * 512, -2, 2);
    hx_feed fb = {NULL, m.xb, bx, 512 * 512 * sizeof *bx};
    hx_fetch ob = {NULL, m.yb, by, 512 * 512 * sizeof *by};
    st = hx_session_run(s, &fb, 1, &ob, 1, 0);
    CHECK(st == HX_ERR_DEVICE_OOM && strstr(hx_last_error(), "(transient)") &&
              strstr(hx_last_error(), "the transient (activation) arena"),
          "arena past the cap: %s %s", hx_status_name(st), hx_last_error());
    hx_device_pools_stats after;
    CHECK(hx_session_pool_stats(s, &after) == HX_OK, "%s", hx_last_error());
    CHECK(after.persistent.ooms == ps.persistent.ooms + 1 && after.transient.ooms >= ps.transient.ooms + 1,
          "ooms counted: %lld, %lld", (long long)after.persistent.ooms, (long long)after.transient.ooms);
    CHECK(after.persistent.allocated == ps.persistent.allocated, "a failed alloc changes nothing");
    check_pool("total after OOM", &after.total, CAP);
    /* still usable: training goes on bitwise as in the session that never ran out */
    for (int k = 0; k < STEPS; k++) {
        float l = NAN, lr = NAN;
        CHECK(step(s, &m, k, &l) == HX_OK && step(ref, &m, k, &lr) == HX_OK, "after OOM %d: %s",
              k, hx_last_error());
        CHECK(!memcmp(&l, &lr, sizeof l), "after OOM, step %d: loss %g vs %g", k, l, lr);
    }
    hx_session_device_free(s, feed);
    CHECK(hx_session_pool_stats(s, &after) == HX_OK && after.persistent.allocated + feed_bytes <= ps.persistent.allocated,
          "the feed buffer given back");
    CHECK(hx_session_pool_stats(NULL, &after) == HX_ERR_INVALID_ARGUMENT, "NULL session");
    free(bx);
    free(by);
    hx_session_free(s);
    hx_session_free(ref);

    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_NONE;
    CHECK(hx_session_create(m.g, &c, &s) == HX_OK, "%s", hx_last_error());
    CHECK(hx_session_pool_stats(s, &after) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "no accelerator"), "no device pools without an accelerator");
    hx_session_free(s);
    hx_graph_free(m.g);
}

/* HX_MEMTRACE: the device's allocations replay to the same peak the
 * session's pools saw; with HX_MEMTRACE_MODE=tensors, each run's device
 * tensors, whose live bytes never exceed the static plan's arena. */
static void test_memtrace(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/hx_test_device_pools_%d.trace", (int)getpid());
    model m = build();
    for (int mode = 0; mode < 2; mode++) {
        setenv("HX_MEMTRACE", path, 1);
        if (mode) setenv("HX_MEMTRACE_MODE", "tensors", 1);
        hx_session *s = open_emu(&m, 0);
        hx_device_pools_stats ps;
        hx_memory_stats ms;
        for (int k = 0; k < STEPS; k++) {
            float l;
            CHECK(step(s, &m, k, &l) == HX_OK, "%s", hx_last_error());
        }
        CHECK(hx_session_pool_stats(s, &ps) == HX_OK && hx_session_memory_stats(s, &ms) == HX_OK,
              "%s", hx_last_error());
        hx_session_free(s);
        unsetenv("HX_MEMTRACE");
        unsetenv("HX_MEMTRACE_MODE");
        hx_memreplay_report rep;
        hx_status st = hx_memreplay(path, 0, &rep);
        CHECK(st == HX_OK, "replay (mode %d): %s", mode, hx_last_error());
        CHECK(rep.allocs == rep.frees && rep.allocs == rep.events / 2 && rep.pools_oom_event < 0,
              "mode %d: %lld allocs, %lld frees", mode, (long long)rep.allocs, (long long)rep.frees);
        if (!mode) {
            CHECK(rep.allocs == ps.total.allocs && rep.peak_live == ps.total.peak_requested,
                  "blocks: %lld allocs (pools %lld), peak live %zu (pools %zu)",
                  (long long)rep.allocs, (long long)ps.total.allocs, rep.peak_live,
                  ps.total.peak_requested);
        } else {
            size_t pers = ps.persistent.peak_requested;
            CHECK(rep.allocs > STEPS * 6 && rep.peak_live > pers &&
                      rep.peak_live - pers <= ms.device_transient_planned_bytes,
                  "tensors: %lld allocs, peak live %zu, persistent %zu, planned arena %zu",
                  (long long)rep.allocs, rep.peak_live, pers, ms.device_transient_planned_bytes);
        }
        CHECK(rep.pools_ratio >= 1.0 && rep.baseline_ratio >= 1.0, "ratios %g %g", rep.pools_ratio,
              rep.baseline_ratio);
        remove(path);
    }
    /* a mode that does not exist, a path that cannot be written */
    hx_session *s = NULL;
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    setenv("HX_MEMTRACE", path, 1);
    setenv("HX_MEMTRACE_MODE", "everything", 1);
    hx_status st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !s && strstr(hx_last_error(), "HX_MEMTRACE_MODE='everything'"),
          "bad mode: %s %s", hx_status_name(st), hx_last_error());
    unsetenv("HX_MEMTRACE_MODE");
    setenv("HX_MEMTRACE", "/nonexistent-dir/x.trace", 1);
    st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_ERR_IO && !s && strstr(hx_last_error(), "/nonexistent-dir/x.trace"),
          "unwritable trace: %s %s", hx_status_name(st), hx_last_error());
    unsetenv("HX_MEMTRACE");
    remove(path);
    hx_graph_free(m.g);
}

/* A training step that can never fit the cap is refused when the session
 * is made, with the report and the options that would help (here only
 * activations occupy the device: no parameter offload is offered), and a
 * step that fits is not. */
static void test_impossible_plan(void)
{
    hx_graph *g = hx_graph_create();
    int64_t xs[2] = {512, 512}, ws[2] = {512, 8};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
    hx_tensor *h = dev(hx_tanh(g, dev(hx_scale(g, x, 2.0f)))); /* 1 MiB activations on the device */
    hx_tensor *loss = hx_reduce_sum(g, hx_matmul(g, h, w, false, false), 0, NULL, false);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    CHECK(loss && hx_graph_backward(g, loss) == HX_OK && hx_graph_apply_optimizer(g, NULL, &oc) == HX_OK,
          "graph: %s", hx_last_error());
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 1;
    c.max_device_memory = CAP;
    hx_session *s = NULL;
    hx_status st = hx_session_create(g, &c, &s);
    const char *msg = hx_last_error();
    CHECK(st == HX_ERR_DEVICE_OOM && !s, "a step past the cap: %s: %s", hx_status_name(st), msg);
    CHECK(strstr(msg, "hx_session_create") && strstr(msg, "offload_activations=cpu") &&
              strstr(msg, "auto_offload") && strstr(msg, "smaller batch") && !strstr(msg, "offload_param"),
          "the report: %s", msg);
    hx_session_free(s);
    c.max_device_memory = 16 * CAP;
    st = hx_session_create(g, &c, &s);
    CHECK(st == HX_OK, "under a 16 MiB cap: %s", hx_last_error());
    if (s) {
        float *xv = calloc(512 * 512, sizeof *xv);
        hx_feed f = {NULL, x, xv, 512 * 512 * sizeof *xv};
        CHECK(hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN) == HX_OK, "a step: %s", hx_last_error());
        free(xv);
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* Under ASan (GCC's or clang's: core.h's HX_ASAN) the emu device poisons
 * the bytes of its segments that no live block covers: the bytes past a
 * block are poisoned, its own are not, and freeing it poisons them. */
static void test_asan_poisoning(void)
{
#if defined(HX_ASAN)
    hx_backend *emu = NULL;
    hx_emu_options o = {0};
    CHECK(hx__backend_emu_create(CAP, &o, &emu) == HX_OK, "emu: %s", hx_last_error());
    if (!emu) return;
    void *p = NULL;
    CHECK(emu->alloc(emu, 100, HX_MEM_TRANSIENT, "a test block", &p) == HX_OK, "alloc: %s", hx_last_error());
    if (p) {
        char *c = p;
        CHECK(!__asan_region_is_poisoned(c, 100), "a live block's bytes are addressable");
        CHECK(__asan_address_is_poisoned(c + 100), "the byte past the block is poisoned");
        emu->free(emu, p);
        CHECK(__asan_address_is_poisoned(c), "a freed block is poisoned");
    }
    emu->destroy(emu);
#else
    test_skip("not an ASan build");
#endif
}

static const test_case cases[] = {
    {"stats_segments_oom", test_stats_segments_oom},
    {"memtrace", test_memtrace},
    {"impossible_plan", test_impossible_plan},
    {"asan_poisoning", test_asan_poisoning},
};

int main(int argc, char **argv)
{
    make_data();
    return test_main(argc, argv, "device_pools", cases, TEST_COUNT(cases));
}
