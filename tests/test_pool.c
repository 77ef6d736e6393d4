/* test_pool: the device pools (memory/pool.h) and the PyTorch-style
 * baseline (memory/caching_baseline.h): randomized alloc/free against a
 * shadow map of live ranges (no overlap, alignment, data intact),
 * statistics consistent after every operation, coalescing, lifetime
 * segregation, the cap and the OOM report, retries when the device
 * refuses, bad input, two threads at once; the baseline's size rules;
 * the pinned host pool (blocks, mlock or plain and why, hooks, capacity). */
#include "memory/caching_baseline.h"
#include "memory/pinned.h"
#include "memory/pool.h"
#include "memory/pool_plan.h"
#include "testutil.h"

#include <pthread.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

/* ---- a real memory source that counts, and can refuse ---------------------------- */

typedef struct counting_src {
    size_t reserved, peak;
    size_t refuse_above; /* reserve fails when reserved would pass this (0: never) */
    int64_t reserves, releases, refusals;
    pthread_mutex_t mu;
} counting_src;

static hx_status cs_reserve(void *ctx, size_t bytes, void **out)
{
    counting_src *c = ctx;
    pthread_mutex_lock(&c->mu);
    bool refuse = c->refuse_above && c->reserved + bytes > c->refuse_above;
    if (refuse) c->refusals++;
    pthread_mutex_unlock(&c->mu);
    if (refuse) return HX_ERR_DEVICE_OOM;
    void *p = aligned_alloc(4096, hx__mem_round(bytes, 4096));
    if (!p) return HX_ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    c->reserved += bytes;
    if (c->reserved > c->peak) c->peak = c->reserved;
    c->reserves++;
    pthread_mutex_unlock(&c->mu);
    *out = p;
    return HX_OK;
}

static void cs_release(void *ctx, void *p, size_t bytes)
{
    counting_src *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->reserved -= bytes;
    c->releases++;
    pthread_mutex_unlock(&c->mu);
    free(p);
}

/* small_max and small_segment: 0 keeps the default's. */
static hx_mem_pools *make_pools_with(counting_src *c, size_t cap, size_t small_max,
                                     size_t small_segment)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    hx_mem_pools_config cfg = hx_mem_pools_config_default("test device", cap);
    if (small_max) cfg.small_max = small_max;
    if (small_segment) cfg.small_segment = small_segment;
    cfg.source = (hx_mem_source){c, cs_reserve, cs_release};
    hx_mem_pools *p = NULL;
    hx_mem_err err;
    hx_status st = hx_mem_pools_create(&cfg, &p, &err);
    CHECK(st == HX_OK, "create: %s", err.msg);
    return p;
}

static hx_mem_pools *make_pools(counting_src *c, size_t cap) { return make_pools_with(c, cap, 0, 0); }

/* ---- the shadow map ------------------------------------------------------------------ */

typedef struct live_t {
    unsigned char *p;
    size_t bytes;
    bool persistent;
    unsigned char tag;
} live_t;

static bool overlaps(const live_t *l, int n, const unsigned char *p, size_t bytes)
{
    size_t len = bytes ? bytes : 1;
    for (int i = 0; i < n; i++) {
        size_t li = l[i].bytes ? l[i].bytes : 1;
        if (p < l[i].p + li && l[i].p < p + len) return true;
    }
    return false;
}

/* Blocks are tagged at both ends (the shadow map checks the middle). */
static void tag(const live_t *l)
{
    size_t n = l->bytes < 128 ? l->bytes : 64;
    memset(l->p, l->tag, n);
    memset(l->p + l->bytes - n, l->tag, n);
}

static bool intact(const live_t *l)
{
    size_t n = l->bytes < 128 ? l->bytes : 64;
    for (size_t k = 0; k < n; k++)
        if (l->p[k] != l->tag || l->p[l->bytes - 1 - k] != l->tag) return false;
    return true;
}

/* Every statistic agrees with the shadow map and the source. */
static void check_stats(hx_mem_pools *p, const counting_src *c, const live_t *l, int n,
                        size_t cap, const char *when)
{
    hx_device_pools_stats s;
    hx_mem_pools_stats(p, &s);
    size_t req[2] = {0, 0}, alloc[2] = {0, 0};
    int64_t blocks[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        req[!l[i].persistent] += l[i].bytes;
        alloc[!l[i].persistent] += hx__mem_round(l[i].bytes ? l[i].bytes : 1, 256);
        blocks[!l[i].persistent]++;
    }
    const hx_pool_stats *ps[2] = {&s.persistent, &s.transient};
    bool ok = true;
    for (int k = 0; k < 2; k++) {
        const hx_pool_stats *q = ps[k];
        ok &= q->requested == req[k] && q->allocated == alloc[k] && q->live_blocks == blocks[k];
        ok &= q->free_bytes == q->reserved - q->allocated && q->largest_free <= q->free_bytes;
        ok &= q->peak_reserved >= q->reserved && q->peak_allocated >= q->allocated &&
              q->peak_requested >= q->requested;
        ok &= q->fragmentation >= 0 && q->fragmentation <= 1;
        ok &= (q->free_bytes == 0) == (q->free_blocks == 0);
    }
    ok &= s.total.reserved == c->reserved && s.total.reserved <= cap &&
          s.total.reserved == s.persistent.reserved + s.transient.reserved &&
          s.total.allocated == alloc[0] + alloc[1] && s.total.peak_reserved == c->peak;
    ok &= s.total.segments == s.persistent.segments + s.transient.segments;
    CHECK(ok, "%s: stats disagree: T res %zu alloc %zu req %zu / shadow alloc %zu+%zu req %zu+%zu "
          "src %zu peak %zu/%zu", when, s.total.reserved, s.total.allocated, s.total.requested,
          alloc[0], alloc[1], req[0], req[1], c->reserved, s.total.peak_reserved, c->peak);
}

/* ---- randomized ---------------------------------------------------------------------- */

static size_t random_size(test_rng *r)
{
    int octave = (int)(test_rng_u64(r) % 23); /* 1 B .. 8 MiB */
    size_t b = (size_t)1 << octave;
    return b + test_rng_u64(r) % b - (test_rng_u64(r) % 7 == 0 ? b : 0);
}

static void test_random(uint64_t seed, size_t cap, int ops)
{
    counting_src c;
    hx_mem_pools *p = make_pools(&c, cap);
    test_rng r = test_rng_make(seed);
    enum { MAXLIVE = 300 };
    live_t l[MAXLIVE];
    int n = 0, fails = 0, ooms = 0;
    hx_mem_err err;
    for (int op = 0; op < ops && !fails; op++) {
        bool do_alloc = n < MAXLIVE && (n == 0 || test_rng_u64(&r) % 100 < 55);
        if (do_alloc) {
            size_t bytes = random_size(&r);
            bool pers = test_rng_u64(&r) % 5 == 0;
            void *q = NULL;
            hx_status st = hx_mem_pools_alloc(p, bytes, pers ? HX_MEM_PERSISTENT : HX_MEM_TRANSIENT,
                                              "random", &q, &err);
            if (st == HX_ERR_DEVICE_OOM) {
                ooms++;
                CHECK(cap != SIZE_MAX, "OOM without a cap: %s", err.msg);
                continue;
            }
            CHECK(st == HX_OK && q, "alloc %zu: %s", bytes, err.msg);
            if (st) { fails++; break; }
            CHECK((uintptr_t)q % 256 == 0, "alignment of %p", q);
            if (overlaps(l, n, q, bytes)) {
                CHECK(false, "op %d: block %p (%zu bytes) overlaps a live one", op, q, bytes);
                fails++;
            }
            l[n] = (live_t){q, bytes, pers, (unsigned char)(op * 31 + 7)};
            tag(&l[n]);
            n++;
        } else {
            int i = (int)(test_rng_u64(&r) % n);
            if (!intact(&l[i])) {
                CHECK(false, "op %d: block %p was overwritten while live", op, (void *)l[i].p);
                fails++;
            }
            CHECK(hx_mem_pools_free(p, l[i].p, &err) == HX_OK, "free: %s", err.msg);
            l[i] = l[--n];
        }
        char when[64];
        snprintf(when, sizeof when, "seed %llu op %d", (unsigned long long)seed, op);
        check_stats(p, &c, l, n, cap, when);
    }
    if (cap != SIZE_MAX) CHECK(ooms > 0, "seed %llu: the cap %zu was never reached", (unsigned long long)seed, cap);
    while (n) {
        CHECK(hx_mem_pools_free(p, l[n - 1].p, &err) == HX_OK, "free: %s", err.msg);
        n--;
    }
    hx_device_pools_stats s;
    hx_mem_pools_stats(p, &s);
    CHECK(s.total.allocated == 0 && s.total.requested == 0, "all freed: %zu allocated", s.total.allocated);
    size_t released = hx_mem_pools_trim(p);
    hx_mem_pools_stats(p, &s);
    CHECK(s.total.reserved == 0 && c.reserved == 0 && released > 0,
          "trim gives every free segment back: %zu left", s.total.reserved);
    hx_mem_pools_destroy(p);
    CHECK(c.reserved == 0, "destroy releases everything");
}

/* ---- coalescing ------------------------------------------------------------------------ */

static void test_coalescing(void)
{
    /* the persistent pool (the transient one would lay out a plan once empty);
     * small requests up to 1 MiB, a first small segment of 256 MiB / 128 = 2 MiB */
    counting_src c;
    hx_mem_pools *p = make_pools_with(&c, SIZE_MAX, HX_MIB, 256 * HX_MIB);
    hx_mem_err err;
    void *b[6];
    for (int i = 0; i < 6; i++)
        hx_mem_pools_alloc(p, 300 * 1024, HX_MEM_PERSISTENT, "small", &b[i], &err);
    hx_device_pools_stats s;
    hx_mem_pools_stats(p, &s);
    CHECK(s.persistent.segments == 1 && s.persistent.reserved == 2 * HX_MIB,
          "six 300 KiB blocks share one 2 MiB segment (%lld segments)", (long long)s.persistent.segments);
    for (int i = 1; i < 6; i++)
        CHECK((char *)b[i] == (char *)b[i - 1] + 300 * 1024, "blocks are carved in address order");
    /* free 0, 2, 4: three holes, no merging */
    for (int i = 0; i < 6; i += 2) hx_mem_pools_free(p, b[i], &err);
    hx_mem_pools_stats(p, &s);
    CHECK(s.persistent.free_blocks == 4 && s.persistent.largest_free == 300 * 1024,
          "holes stay apart: %lld free blocks, largest %zu", (long long)s.persistent.free_blocks,
          s.persistent.largest_free);
    CHECK(s.persistent.fragmentation > 0.5, "fragmentation %.3f", s.persistent.fragmentation);
    /* free 1 and 3: 0..4 merge into one; 5 still splits the tail */
    hx_mem_pools_free(p, b[1], &err);
    hx_mem_pools_free(p, b[3], &err);
    hx_mem_pools_stats(p, &s);
    CHECK(s.persistent.free_blocks == 2 && s.persistent.largest_free == 5 * 300 * 1024,
          "neighbours coalesce: %lld free blocks, largest %zu", (long long)s.persistent.free_blocks,
          s.persistent.largest_free);
    void *big;
    hx_mem_pools_alloc(p, 4 * 256 * 1024, HX_MEM_PERSISTENT, "merged", &big, &err);
    CHECK(big == b[0] && c.reserves == 1, "the merged hole serves a 1 MiB request in place");
    hx_mem_pools_free(p, big, &err);
    hx_mem_pools_free(p, b[5], &err);
    hx_mem_pools_stats(p, &s);
    CHECK(s.persistent.free_blocks == 1 && s.persistent.largest_free == 2 * HX_MIB &&
          s.persistent.fragmentation == 0, "everything coalesces back into the segment");
    hx_mem_pools_destroy(p);
}

/* ---- segregation ------------------------------------------------------------------------ */

static void test_segregation(void)
{
    counting_src c;
    hx_mem_pools *p = make_pools(&c, SIZE_MAX);
    hx_mem_err err;
    test_rng r = test_rng_make(5);
    void *params[40];
    void *act[64] = {0};
    /* parameters arrive between activations, as with lazily created optimizer state */
    for (int i = 0; i < 40; i++) {
        hx_mem_pools_alloc(p, (size_t)(1 + i % 5) * HX_MIB + 4096 * (i % 3), HX_MEM_PERSISTENT,
                           "param", &params[i], &err);
        for (int k = 0; k < 4; k++) {
            int j = (int)(test_rng_u64(&r) % 64);
            hx_mem_pools_free(p, act[j], &err);
            hx_mem_pools_alloc(p, 1 + test_rng_u64(&r) % (8 * HX_MIB), HX_MEM_TRANSIENT, "act", &act[j], &err);
        }
    }
    hx_device_pools_stats before, after;
    hx_mem_pools_stats(p, &before);
    /* heavy transient churn must not touch the persistent pool */
    for (int i = 0; i < 3000; i++) {
        int j = (int)(test_rng_u64(&r) % 64);
        hx_mem_pools_free(p, act[j], &err);
        hx_mem_pools_alloc(p, 1 + test_rng_u64(&r) % (24 * HX_MIB), HX_MEM_TRANSIENT, "act", &act[j], &err);
    }
    hx_mem_pools_stats(p, &after);
    CHECK(!memcmp(&before.persistent, &after.persistent, sizeof before.persistent),
          "transient churn leaves the persistent pool as it was (reserved %zu -> %zu, free "
          "blocks %lld -> %lld)", before.persistent.reserved, after.persistent.reserved,
          (long long)before.persistent.free_blocks, (long long)after.persistent.free_blocks);
    CHECK(after.transient.allocs > 3000, "the churn ran");
    /* no parameter lies inside a transient block */
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < 64; j++)
            CHECK(!act[j] || (char *)params[i] + HX_MIB <= (char *)act[j] ||
                  (char *)act[j] + 1 <= (char *)params[i] || params[i] != act[j],
                  "param %d and activation %d overlap", i, j);
    /* and the persistent pool wastes at most a segment rounding per param */
    CHECK(after.persistent.fragmentation <= 1 && after.persistent.reserved <=
          after.persistent.requested + 40 * 2 * HX_MIB, "persistent reserved %zu for %zu requested",
          after.persistent.reserved, after.persistent.requested);
    for (int j = 0; j < 64; j++) hx_mem_pools_free(p, act[j], &err);
    for (int i = 0; i < 40; i++) hx_mem_pools_free(p, params[i], &err);
    hx_mem_pools_destroy(p);
}

/* ---- the cap, the OOM report, retries, bad input ------------------------------------- */

static void test_oom_report(void)
{
    counting_src c;
    size_t cap = 64 * HX_MIB;
    /* requests up to 1 MiB share small segments of 2 MiB (64 MiB / 32) */
    hx_mem_pools *p = make_pools_with(&c, cap, HX_MIB, 64 * HX_MIB);
    hx_mem_err err;
    void *w, *a[48], *q = NULL;
    CHECK(!hx_mem_pools_alloc(p, 40 * HX_MIB, HX_MEM_PERSISTENT, "'w'", &w, &err), "%s", err.msg);
    for (int i = 0; i < 48; i++) /* 24 MiB in 12 small segments: the cap is reached */
        CHECK(!hx_mem_pools_alloc(p, HX_MIB / 2, HX_MEM_TRANSIENT, "act", &a[i], &err), "%s", err.msg);
    for (int i = 0; i < 48; i += 2) hx_mem_pools_free(p, a[i], &err); /* 12 MiB free in 0.5 MiB holes */
    hx_device_pools_stats before, after;
    hx_mem_pools_stats(p, &before);
    hx_status st = hx_mem_pools_alloc(p, 10 * HX_MIB, HX_MEM_TRANSIENT, "'logits' (matmul)", &q, &err);
    CHECK(st == HX_ERR_DEVICE_OOM && !q, "10 MiB past the cap: %d", st);
    const char *want[] = {"test device", "10485760", "transient", "'logits' (matmul)",
                          "capacity 67108864", "persistent 41943040", "transient 12582912",
                          "largest free block 524288", "fragmentation 95.8%", "fragmented",
                          "offload", "smaller batch",
                          "max_device_memory"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(strstr(err.msg, want[i]), "the OOM report mentions '%s': %s", want[i], err.msg);
    hx_mem_pools_stats(p, &after);
    after.transient.ooms = after.total.ooms = 0;
    CHECK(!memcmp(&before, &after, sizeof before), "a failed allocation changes nothing");
    hx_mem_pools_stats(p, &after);
    CHECK(after.total.ooms == 1 && after.transient.ooms == 1, "the OOM is counted");
    /* a request that fits a hole still succeeds at the cap */
    void *hole;
    int64_t reserves = c.reserves;
    CHECK(!hx_mem_pools_alloc(p, HX_MIB / 2, HX_MEM_TRANSIENT, "hole", &hole, &err) &&
          c.reserves == reserves, "%s", err.msg);
    hx_mem_pools_free(p, hole, &err);
    /* bad input */
    int local;
    CHECK(hx_mem_pools_free(p, &local, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "did not hand out"),
          "a foreign pointer is refused: %s", err.msg);
    CHECK(hx_mem_pools_free(p, (char *)w + 256, &err) == HX_ERR_INVALID_ARGUMENT, "an interior pointer is refused");
    CHECK(hx_mem_pools_alloc(p, 1, (hx_mem_lifetime)7, "x", &q, &err) == HX_ERR_INVALID_ARGUMENT, "bad lifetime");
    hx_mem_pools_stats(p, &after);
    CHECK(after.total.allocated == before.total.allocated, "bad calls change nothing");
    hx_mem_pools_destroy(p);

    hx_mem_pools_config cfg = hx_mem_pools_config_default("x", SIZE_MAX);
    hx_mem_pools *bad = NULL;
    CHECK(hx_mem_pools_create(&cfg, &bad, &err) == HX_ERR_INVALID_ARGUMENT && !bad, "no source");
    cfg.source = (hx_mem_source){&c, cs_reserve, cs_release};
    cfg.align = 100;
    CHECK(hx_mem_pools_create(&cfg, &bad, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "align"),
          "align must be a power of 2: %s", err.msg);
}

/* The report's options follow what occupies the device: activations only
 * (no parameters on it) name activation offload, auto_offload and a
 * smaller batch, never parameter offload; parameters only name parameter
 * offload and auto_offload, not the batch. */
static void test_oom_options(void)
{
    counting_src c;
    hx_mem_err err;
    void *a, *q = NULL;
    hx_mem_pools *p = make_pools_with(&c, 8 * HX_MIB, HX_MIB, 8 * HX_MIB);
    CHECK(!hx_mem_pools_alloc(p, 6 * HX_MIB, HX_MEM_TRANSIENT, "'h' (relu)", &a, &err), "%s", err.msg);
    CHECK(hx_mem_pools_alloc(p, 4 * HX_MIB, HX_MEM_TRANSIENT, "the transient (activation) arena", &q, &err) ==
              HX_ERR_DEVICE_OOM, "activations past the cap");
    CHECK(strstr(err.msg, "offload_activations=cpu") && strstr(err.msg, "auto_offload") &&
              strstr(err.msg, "smaller batch") && strstr(err.msg, "max_device_memory") &&
              !strstr(err.msg, "offload_param"),
          "activations only: %s", err.msg);
    hx_mem_pools_free(p, a, &err);
    hx_mem_pools_destroy(p);

    p = make_pools_with(&c, 8 * HX_MIB, HX_MIB, 8 * HX_MIB);
    CHECK(!hx_mem_pools_alloc(p, 6 * HX_MIB, HX_MEM_PERSISTENT, "'w' (param)", &a, &err), "%s", err.msg);
    CHECK(hx_mem_pools_alloc(p, 4 * HX_MIB, HX_MEM_PERSISTENT, "'w2' (param)", &q, &err) == HX_ERR_DEVICE_OOM,
          "parameters past the cap");
    CHECK(strstr(err.msg, "offload_param=cpu") && strstr(err.msg, "auto_offload") &&
              !strstr(err.msg, "offload_activations") && !strstr(err.msg, "batch"),
          "parameters only: %s", err.msg);
    hx_mem_pools_free(p, a, &err);
    hx_mem_pools_destroy(p);
}

static void test_device_refuses(void)
{
    /* the device holds less than the cap: cached segments are given back and
     * the reservation retried before an OOM is reported */
    counting_src c;
    hx_mem_pools *p = make_pools(&c, SIZE_MAX);
    c.refuse_above = 32 * HX_MIB;
    hx_mem_err err;
    void *a, *b;
    CHECK(!hx_mem_pools_alloc(p, 20 * HX_MIB, HX_MEM_PERSISTENT, "a", &a, &err), "%s", err.msg);
    hx_mem_pools_free(p, a, &err); /* 20 MiB cached */
    CHECK(!hx_mem_pools_alloc(p, 10 * HX_MIB, HX_MEM_TRANSIENT, "b", &b, &err), "%s", err.msg);
    hx_mem_pools_free(p, b, &err);
    CHECK(!hx_mem_pools_alloc(p, 30 * HX_MIB, HX_MEM_TRANSIENT, "c", &b, &err),
          "the cached segments make room: %s", err.msg);
    CHECK(c.refusals == 1 && c.reserved == 30 * HX_MIB, "one refusal, then the retry (%lld, %zu)",
          (long long)c.refusals, c.reserved);
    void *d;
    CHECK(hx_mem_pools_alloc(p, 8 * HX_MIB, HX_MEM_TRANSIENT, "d", &d, &err) == HX_ERR_DEVICE_OOM &&
          strstr(err.msg, "device refused"), "then a real OOM: %s", err.msg);
    hx_mem_pools_destroy(p);
}

/* ---- threads --------------------------------------------------------------------------- */

typedef struct thread_arg {
    hx_mem_pools *p;
    uint64_t seed;
    int bad;
} thread_arg;

static void *thread_main(void *v)
{
    thread_arg *t = v;
    test_rng r = test_rng_make(t->seed);
    live_t l[64];
    int n = 0;
    hx_mem_err err;
    for (int op = 0; op < 4000; op++) {
        if (n < 64 && (n == 0 || test_rng_u64(&r) & 1)) {
            size_t bytes = 1 + test_rng_u64(&r) % (3 * HX_MIB);
            void *q;
            if (hx_mem_pools_alloc(t->p, bytes, op % 3 ? HX_MEM_TRANSIENT : HX_MEM_PERSISTENT, "t", &q, &err)) {
                t->bad++;
                continue;
            }
            l[n] = (live_t){q, bytes, false, (unsigned char)(t->seed * 17 + op)};
            tag(&l[n]);
            n++;
        } else {
            int i = (int)(test_rng_u64(&r) % n);
            if (!intact(&l[i])) t->bad++;
            hx_mem_pools_free(t->p, l[i].p, &err);
            l[i] = l[--n];
        }
    }
    while (n) hx_mem_pools_free(t->p, l[--n].p, &err);
    return NULL;
}

static void test_threads(void)
{
    counting_src c;
    hx_mem_pools *p = make_pools(&c, SIZE_MAX);
    pthread_t th[2];
    thread_arg a[2] = {{p, 1, 0}, {p, 2, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, thread_main, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    hx_device_pools_stats s;
    hx_mem_pools_stats(p, &s);
    CHECK(a[0].bad == 0 && a[1].bad == 0 && s.total.allocated == 0 && s.total.live_blocks == 0,
          "two threads: %d + %d bad blocks, %zu left allocated", a[0].bad, a[1].bad, s.total.allocated);
    hx_mem_pools_destroy(p);
}

/* ---- the baseline ------------------------------------------------------------------------ */

static void test_baseline(void)
{
    counting_src c = {0};
    pthread_mutex_init(&c.mu, NULL);
    hx_mem_baseline *b;
    hx_mem_err err;
    CHECK(!hx_mem_baseline_create(32 * HX_MIB, (hx_mem_source){&c, cs_reserve, cs_release}, &b, &err), "%s", err.msg);
    hx_pool_stats s;
    void *x, *y, *z, *w;
    hx_mem_baseline_alloc(b, 100, &x, &err);
    hx_mem_baseline_stats(b, &s);
    CHECK(s.allocated == 512 && s.reserved == 2 * HX_MIB, "100 B: a 512 B block of a 2 MiB segment (%zu, %zu)",
          s.allocated, s.reserved);
    hx_mem_baseline_alloc(b, 3 * HX_MIB, &y, &err);
    hx_mem_baseline_alloc(b, 3 * HX_MIB + 1, &z, &err);
    hx_mem_baseline_stats(b, &s);
    CHECK(s.reserved == 22 * HX_MIB && s.segments == 2 && (char *)z == (char *)y + 3 * HX_MIB,
          "3 MiB requests share a 20 MiB segment (%zu reserved, %lld segments)", s.reserved, (long long)s.segments);
    CHECK(s.allocated == 512 + 6 * HX_MIB + 512, "3 MiB + 1 rounds to 512 B (%zu)", s.allocated);
    hx_mem_baseline_free(b, y, &err);
    hx_mem_baseline_free(b, z, &err);
    /* a cached 20 MiB block: 19.5 MiB leaves 0.5 MiB, not split */
    hx_mem_baseline_alloc(b, 19 * HX_MIB + HX_MIB / 2, &w, &err);
    hx_mem_baseline_stats(b, &s);
    CHECK(s.allocated == 512 + 20 * HX_MIB && s.reserved == 22 * HX_MIB,
          "a remainder of 1 MiB or less stays in the block (%zu)", s.allocated);
    hx_mem_baseline_free(b, w, &err);
    hx_mem_baseline_free(b, x, &err);
    hx_mem_baseline_stats(b, &s);
    CHECK(s.reserved == 22 * HX_MIB && s.allocated == 0, "nothing goes back until told (%zu)", s.reserved);
    /* 11 MiB: served by splitting the cached 20 MiB block */
    CHECK(!hx_mem_baseline_alloc(b, 11 * HX_MIB, &w, &err), "%s", err.msg);
    hx_mem_baseline_stats(b, &s);
    CHECK(s.reserved == 22 * HX_MIB && s.allocated == 11 * HX_MIB, "best fit splits a cached block");
    hx_mem_baseline_free(b, w, &err);
    /* 21 MiB (a 22 MiB segment): under the cap only if the cache goes back first */
    CHECK(!hx_mem_baseline_alloc(b, 21 * HX_MIB, &w, &err), "%s", err.msg);
    hx_mem_baseline_stats(b, &s);
    CHECK(s.reserved == 22 * HX_MIB && s.releases == 2 && s.segments == 1,
          "at the cap it releases its cache and retries (%zu, %lld releases)", s.reserved, (long long)s.releases);
    CHECK(hx_mem_baseline_alloc(b, 24 * HX_MIB, &x, &err) == HX_ERR_DEVICE_OOM, "then it is out of memory");
    hx_mem_baseline_free(b, w, &err);
    CHECK(hx_mem_baseline_empty_cache(b) == 22 * HX_MIB && c.reserved == 0, "empty_cache gives back the rest");
    int local;
    CHECK(hx_mem_baseline_free(b, &local, &err) == HX_ERR_INVALID_ARGUMENT, "a foreign pointer is refused");
    hx_mem_baseline_destroy(b);
}


/* Release rules, on the persistent pool (exact segments, no plan): a
 * reservation that would raise the peak first gives back cached segments
 * of its lifetime that hold nothing, largest first, only as many as it
 * takes; below the peak, and those of the other lifetime, stay cached. */
static void test_release_rules(void)
{
    counting_src c;
    hx_mem_pools *p = make_pools(&c, SIZE_MAX);
    hx_mem_err err;
    void *a, *b, *d, *e;
    const size_t M = HX_MIB;
    hx_mem_pools_alloc(p, 4 * M, HX_MEM_PERSISTENT, "a", &a, &err);
    hx_mem_pools_alloc(p, 4 * M, HX_MEM_PERSISTENT, "b", &b, &err);
    hx_mem_pools_free(p, a, &err);
    CHECK(c.reserved == 8 * M && c.releases == 0, "a freed block's segment stays cached (%zu)", c.reserved);
    hx_mem_pools_alloc(p, 6 * M, HX_MEM_PERSISTENT, "c", &a, &err);
    CHECK(c.reserved == 10 * M && c.releases == 1 && c.peak == 10 * M,
          "6 MiB, no block fits: the cached 4 MiB goes before the new segment (%zu reserved, %lld "
          "released)", c.reserved, (long long)c.releases);
    hx_mem_pools_free(p, a, &err);
    hx_mem_pools_free(p, b, &err);
    CHECK(hx_mem_pools_trim(p) == 10 * M && c.reserved == 0 && c.releases == 3, "trim gives back both");
    /* the peak stays 10: cached 3 and 4, then 5 MiB takes only the 4 */
    hx_mem_pools_alloc(p, 3 * M, HX_MEM_PERSISTENT, "d", &d, &err);
    hx_mem_pools_alloc(p, 4 * M, HX_MEM_PERSISTENT, "e", &e, &err);
    hx_mem_pools_free(p, d, &err);
    hx_mem_pools_free(p, e, &err);
    hx_mem_pools_alloc(p, 5 * M, HX_MEM_PERSISTENT, "f", &a, &err);
    CHECK(c.reserved == 8 * M && c.releases == 4,
          "5 MiB: the largest cached segment (4) goes, the 3 MiB one stays (%zu reserved)", c.reserved);
    int64_t reserves = c.reserves;
    hx_mem_pools_alloc(p, 1 * M, HX_MEM_PERSISTENT, "g", &b, &err);
    CHECK(c.reserves == reserves && c.reserved == 8 * M, "1 MiB is carved from the cached 3 MiB");
    hx_mem_pools_free(p, b, &err);
    hx_mem_pools_free(p, a, &err);
    CHECK(hx_mem_pools_trim(p) == 8 * M && c.releases == 6, "trim");
    /* under the peak nothing is released */
    hx_mem_pools_alloc(p, 3 * M, HX_MEM_PERSISTENT, "h", &a, &err);
    hx_mem_pools_free(p, a, &err);
    hx_mem_pools_alloc(p, 6 * M, HX_MEM_PERSISTENT, "i", &a, &err);
    CHECK(c.releases == 6 && c.reserved == 9 * M, "6 MiB fits under the peak: the cached 3 MiB stays");
    /* and a transient reservation never takes the persistent cache */
    hx_mem_pools_alloc(p, 2 * M, HX_MEM_TRANSIENT, "j", &e, &err);
    CHECK(c.releases == 6 && c.reserved == 11 * M && c.peak == 11 * M, "the persistent cache stays (%zu)",
          c.reserved);
    hx_mem_pools_free(p, e, &err);
    hx_mem_pools_free(p, a, &err);
    hx_mem_pools_destroy(p);
    CHECK(c.reserved == 0, "destroy releases everything");
}

/* ---- the step plan ------------------------------------------------------------------- */

/* A random step: n allocations of random sizes, each freed
 * at a random later point; every transient one freed by the end. ev[k] >= 0:
 * allocate block ev[k]; < 0: free block -ev[k] - 1. */
typedef struct step_t {
    int n, n_ev;
    size_t bytes[96];
    int ev[192];
} step_t;

static void make_step(test_rng *r, step_t *st, int n)
{
    st->n = n;
    st->n_ev = 0;
    int order[96], live = 0;
    for (int i = 0; i < n; i++) st->bytes[i] = random_size(r) % (6 * HX_MIB);
    int next = 0;
    while (next < n || live) {
        bool alloc = next < n && (live <= 1 || test_rng_u64(r) % 100 < 60); /* one cycle */
        if (alloc) {
            st->ev[st->n_ev++] = next;
            order[live++] = next++;
        } else {
            int k = (int)(test_rng_u64(r) % live);
            st->ev[st->n_ev++] = -order[k] - 1;
            order[k] = order[--live];
        }
    }
}

/* Runs a step: no block overlaps a live one, data stays intact, the stats
 * agree with the shadow map after every call. */
static void run_step(hx_mem_pools *p, counting_src *c, const step_t *st, live_t *pers, int n_pers,
                     const char *what)
{
    live_t l[96 + 64];
    int n = 0, at[96];
    memcpy(l, pers, n_pers * sizeof *l);
    n = n_pers;
    hx_mem_err err;
    for (int e = 0; e < st->n_ev; e++) {
        int k = st->ev[e];
        if (k >= 0) {
            void *q = NULL;
            CHECK(!hx_mem_pools_alloc(p, st->bytes[k], HX_MEM_TRANSIENT, "step", &q, &err), "%s: %s", what, err.msg);
            CHECK(!overlaps(l, n, q, st->bytes[k]), "%s: block %d overlaps a live one", what, k);
            l[n] = (live_t){q, st->bytes[k], false, (unsigned char)(k * 7 + 3)};
            tag(&l[n]);
            at[k] = n++;
        } else {
            int i = at[-k - 1];
            CHECK(intact(&l[i]), "%s: block %d overwritten while live", what, -k - 1);
            CHECK(!hx_mem_pools_free(p, l[i].p, &err), "%s: %s", what, err.msg);
            l[i] = l[--n];
            for (int j = 0; j < st->n; j++)
                if (j != -k - 1 && at[j] == n) at[j] = i;
        }
        check_stats(p, c, l, n, SIZE_MAX, what);
    }
}

/* Random steps repeated: the first is learned, its layout becomes the plan,
 * and the steps after it reserve and release nothing; the plan's segment
 * holds the step's peak; a different step runs off the plan without
 * overlap; trim releases everything. */
static void test_plan_steps(uint64_t seed)
{
    counting_src c;
    hx_mem_pools *p = make_pools(&c, SIZE_MAX);
    test_rng r = test_rng_make(seed);
    hx_mem_err err;
    live_t pers[4];
    for (int i = 0; i < 4; i++) { /* persistent blocks live across the steps */
        size_t b = 1 + test_rng_u64(&r) % (3 * HX_MIB);
        void *q;
        CHECK(!hx_mem_pools_alloc(p, b, HX_MEM_PERSISTENT, "param", &q, &err), "%s", err.msg);
        pers[i] = (live_t){q, b, true, (unsigned char)(200 + i)};
        tag(&pers[i]);
    }
    step_t st, other;
    make_step(&r, &st, 40 + (int)(test_rng_u64(&r) % 50));
    make_step(&r, &other, 30);
    char what[64];
    snprintf(what, sizeof what, "seed %llu step 1", (unsigned long long)seed);
    run_step(p, &c, &st, pers, 4, what);
    hx_mem_plan_stats ps;
    hx_mem_pools_plan_stats(p, &ps);
    CHECK(ps.plans == 1 && ps.plan_bytes > 0, "%s: the first step is laid out (%lld plans)", what, (long long)ps.plans);
    hx_device_pools_stats s;
    hx_mem_pools_stats(p, &s);
    CHECK(s.transient.reserved == ps.plan_bytes && s.transient.segments == 1,
          "%s: one transient segment, the plan's (%zu reserved, %zu plan)", what, s.transient.reserved,
          ps.plan_bytes);
    int64_t ops = c.reserves + c.releases, planned = ps.planned;
    size_t peak = s.total.peak_reserved;
    for (int k = 2; k <= 4; k++) {
        snprintf(what, sizeof what, "seed %llu step %d", (unsigned long long)seed, k);
        run_step(p, &c, &st, pers, 4, what);
        hx_mem_pools_plan_stats(p, &ps);
        CHECK(ps.planned - planned == st.n, "%s: the plan serves all %d allocations (%lld)", what,
              st.n, (long long)(ps.planned - planned));
        planned = ps.planned;
    }
    hx_mem_pools_stats(p, &s);
    CHECK(c.reserves + c.releases == ops && s.total.peak_reserved == peak,
          "seed %llu: steady steps reserve and release nothing (%lld ops) and keep the peak",
          (unsigned long long)seed, (long long)(c.reserves + c.releases - ops));
    /* the same step with two allocations that follow each other swapped:
     * both places are free then, so the plan still serves every request */
    step_t swapped = st;
    for (int e = 0; e + 1 < swapped.n_ev; e++)
        if (swapped.ev[e] >= 0 && swapped.ev[e + 1] >= 0) {
            int t = swapped.ev[e];
            swapped.ev[e] = swapped.ev[e + 1];
            swapped.ev[e + 1] = t;
            break;
        }
    snprintf(what, sizeof what, "seed %llu swapped step", (unsigned long long)seed);
    run_step(p, &c, &swapped, pers, 4, what);
    hx_mem_pools_plan_stats(p, &ps);
    CHECK(ps.planned - planned == st.n && c.reserves + c.releases == ops,
          "%s: the plan serves all %d allocations (%lld), no segment reserved or released", what,
          st.n, (long long)(ps.planned - planned));
    snprintf(what, sizeof what, "seed %llu other step", (unsigned long long)seed);
    run_step(p, &c, &other, pers, 4, what);
    run_step(p, &c, &st, pers, 4, what);
    hx_mem_err e2;
    for (int i = 0; i < 4; i++) {
        CHECK(intact(&pers[i]), "a persistent block survives the steps");
        hx_mem_pools_free(p, pers[i].p, &e2);
    }
    hx_mem_pools_trim(p);
    hx_mem_pools_stats(p, &s);
    CHECK(s.total.reserved == 0 && c.reserved == 0, "trim releases the plan's segment too (%zu)", s.total.reserved);
    hx_mem_pools_plan_stats(p, &ps);
    CHECK(ps.plan_bytes == 0, "and the plan with it");
    hx_mem_pools_destroy(p);
}

/* While the first step is learned, a large request skips a cached block
 * much larger than itself and reserves its own segment, except at the cap:
 * there the cached block serves it rather than an OOM. */
static void test_learning_at_cap(void)
{
    counting_src c;
    const size_t M = HX_MIB;
    hx_mem_pools *p = make_pools(&c, 6 * M + 64 * 1024);
    hx_mem_err err;
    void *s1, *a, *b, *d;
    CHECK(!hx_mem_pools_alloc(p, 1024, HX_MEM_TRANSIENT, "s1", &s1, &err), "%s", err.msg);
    CHECK(!hx_mem_pools_alloc(p, 6 * M, HX_MEM_TRANSIENT, "a", &a, &err), "%s", err.msg);
    hx_mem_pools_free(p, a, &err); /* the step goes on: s1 is live */
    CHECK(!hx_mem_pools_alloc(p, 5 * M + M / 2, HX_MEM_TRANSIENT, "b", &b, &err) && b == a,
          "5.5 MiB takes the cached 6 MiB (within 1/8): %s", err.msg);
    int64_t reserves = c.reserves;
    CHECK(!hx_mem_pools_alloc(p, 300 * 1024, HX_MEM_TRANSIENT, "d", &d, &err) &&
              (char *)d == (char *)b + 5 * M + M / 2 && c.reserves == reserves,
          "at the cap 300 KiB takes the 512 KiB left in it: %s", err.msg);
    hx_mem_pools_free(p, d, &err);
    hx_mem_pools_free(p, b, &err);
    hx_mem_pools_free(p, s1, &err);
    hx_device_pools_stats s;
    hx_mem_pools_stats(p, &s);
    CHECK(s.total.ooms == 0 && s.total.allocated == 0 && s.total.reserved <= 6 * M + 64 * 1024,
          "no OOM, all freed, under the cap (%zu)", s.total.reserved);
    hx_mem_pools_destroy(p);
}

/* The layout itself: random cycles; blocks live at the same time never
 * share bytes, the extent covers every block and is at least the peak of
 * live bytes. */
static void test_plan_layout(uint64_t seed)
{
    test_rng r = test_rng_make(seed);
    hx_pool_cycle c = {0};
    step_t st;
    make_step(&r, &st, 80);
    int64_t idx[96];
    size_t live = 0, peak = 0;
    for (int e = 0; e < st.n_ev; e++) {
        int k = st.ev[e];
        size_t b = hx__mem_round(st.bytes[k >= 0 ? k : -k - 1] + 1, 256);
        if (k >= 0) {
            idx[k] = hx__cycle_alloc(&c, b);
            live += b;
            if (live > peak) peak = live;
        } else {
            hx__cycle_free(&c, idx[-k - 1]);
            live -= b;
        }
    }
    hx_pool_plan pl = {0};
    CHECK(hx__pool_plan_layout(&c, 256, &pl), "layout");
    bool ok = pl.n == (size_t)st.n && pl.bytes >= peak;
    for (size_t i = 0; i < pl.n; i++) {
        ok &= pl.offset[i] % 256 == 0 && pl.offset[i] + pl.size[i] <= pl.bytes;
        for (size_t j = 0; j < i; j++) {
            bool together = c.t0[i] < c.t1[j] && c.t0[j] < c.t1[i];
            bool apart = pl.offset[i] + pl.size[i] <= pl.offset[j] || pl.offset[j] + pl.size[j] <= pl.offset[i];
            ok &= !together || apart;
        }
    }
    CHECK(ok, "seed %llu: the layout places %zu blocks without overlap in %zu bytes (peak live %zu)",
          (unsigned long long)seed, pl.n, pl.bytes, peak);
    hx__pool_plan_free(&pl);
    hx_pool_cycle empty = {0};
    CHECK(!hx__pool_plan_layout(&empty, 256, &pl), "an empty cycle has no layout");
    hx__cycle_destroy(&c);
}

/* ---- the pinned host pool ------------------------------------------------------------------ */

typedef struct fake_cuda { int64_t allocs, frees; } fake_cuda;
static hx_status fake_host_alloc(void *ctx, size_t bytes, void **out)
{
    ((fake_cuda *)ctx)->allocs++;
    *out = aligned_alloc(4096, bytes);
    return *out ? HX_OK : HX_ERR_OUT_OF_MEMORY;
}
static void fake_host_free(void *ctx, void *p, size_t bytes)
{
    ((fake_cuda *)ctx)->frees++;
    free(p);
}

static void test_pinned(void)
{
    hx_mem_err err;
    hx_pinned_config cfg = hx_pinned_config_default();
    cfg.block_size = HX_MIB;
    hx_pinned_pool *p;
    CHECK(!hx_pinned_create(&cfg, &p, &err), "%s", err.msg);
    test_rng r = test_rng_make(9);
    live_t l[40];
    int n = 0;
    for (int op = 0; op < 2000; op++) {
        if (n < 40 && (n == 0 || test_rng_u64(&r) & 1)) {
            size_t bytes = 1 + test_rng_u64(&r) % (op % 50 ? 200 * 1024 : 3 * HX_MIB);
            void *q;
            CHECK(!hx_pinned_alloc(p, bytes, &q, &err), "%s", err.msg);
            CHECK((uintptr_t)q % 64 == 0 && !overlaps(l, n, q, bytes), "pinned block %p: aligned, no overlap", q);
            l[n] = (live_t){q, bytes, false, (unsigned char)op};
            tag(&l[n]);
            n++;
        } else {
            int i = (int)(test_rng_u64(&r) % n);
            CHECK(intact(&l[i]), "pinned block intact");
            hx_pinned_free(p, l[i].p, &err);
            l[i] = l[--n];
        }
    }
    hx_pinned_stats s;
    hx_pinned_stats_get(p, &s);
    CHECK(s.block_size == HX_MIB && s.pool.live_blocks == n && s.locked_blocks + s.plain_blocks == s.pool.segments &&
          s.pool.reserved >= s.pool.allocated && !strcmp(s.locked_by, "mlock"),
          "pinned stats: %lld blocks (%lld locked, %lld plain)", (long long)s.pool.segments,
          (long long)s.locked_blocks, (long long)s.plain_blocks);
    CHECK(s.plain_blocks == 0 || s.plain_reason[0], "a plain block says why: '%s'", s.plain_reason);
    while (n) hx_pinned_free(p, l[--n].p, &err);
    hx_pinned_trim(p);
    hx_pinned_stats_get(p, &s);
    CHECK(s.pool.reserved == 0 && s.locked_bytes == 0 && s.locked_blocks == 0 && s.plain_blocks == 0,
          "trim gives every block back");
    int local;
    CHECK(hx_pinned_free(p, &local, &err) == HX_ERR_INVALID_ARGUMENT, "a foreign pointer is refused");
    hx_pinned_destroy(p);

    /* RLIMIT_MEMLOCK below a block: plain memory, and the reason */
    struct rlimit old, low;
    getrlimit(RLIMIT_MEMLOCK, &old);
    low = old;
    low.rlim_cur = 64 * 1024;
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < low.rlim_cur) low.rlim_cur = old.rlim_max;
    CHECK(setrlimit(RLIMIT_MEMLOCK, &low) == 0, "lowering RLIMIT_MEMLOCK");
    CHECK(!hx_pinned_create(&cfg, &p, &err), "%s", err.msg);
    void *q;
    CHECK(!hx_pinned_alloc(p, 1000, &q, &err), "%s", err.msg);
    hx_pinned_stats_get(p, &s);
    CHECK(s.plain_blocks == 1 && s.locked_blocks == 0 && strstr(s.plain_reason, "RLIMIT_MEMLOCK"),
          "over the memlock limit: plain, because '%s'", s.plain_reason);
    hx_pinned_destroy(p);
    setrlimit(RLIMIT_MEMLOCK, &old);
    cfg.lock = false;
    CHECK(!hx_pinned_create(&cfg, &p, &err) && !hx_pinned_alloc(p, 1000, &q, &err), "%s", err.msg);
    hx_pinned_stats_get(p, &s);
    CHECK(s.plain_blocks == 1 && strstr(s.plain_reason, "not asked") && !strcmp(s.locked_by, "none"),
          "lock = false: plain ('%s')", s.plain_reason);
    hx_pinned_destroy(p);

    /* hooks (cudaHostAlloc) and the capacity */
    fake_cuda fc = {0};
    hx_pinned_hooks hooks = {&fc, fake_host_alloc, fake_host_free, "cudaHostAlloc"};
    cfg = hx_pinned_config_default();
    cfg.block_size = HX_MIB;
    cfg.capacity = 4 * HX_MIB + HX_MIB / 2;
    cfg.hooks = &hooks;
    CHECK(!hx_pinned_create(&cfg, &p, &err), "%s", err.msg);
    void *a, *b, *c;
    CHECK(!hx_pinned_alloc(p, 600 * 1024, &a, &err) && !hx_pinned_alloc(p, 600 * 1024, &b, &err), "%s", err.msg);
    CHECK(!hx_pinned_alloc(p, 2 * HX_MIB - 100, &c, &err), "a request larger than a block gets its own");
    hx_pinned_stats_get(p, &s);
    CHECK(fc.allocs == 3 && s.locked_blocks == 3 && !strcmp(s.locked_by, "cudaHostAlloc") &&
          s.pool.reserved == 4 * HX_MIB, "hooks: %lld calls, %zu reserved", (long long)fc.allocs, s.pool.reserved);
    void *d;
    CHECK(hx_pinned_alloc(p, 512 * 1024, &d, &err) == HX_ERR_OUT_OF_MEMORY && strstr(err.msg, "pinned"),
          "past the capacity: %s", err.msg);
    hx_pinned_free(p, b, &err);
    CHECK(!hx_pinned_alloc(p, 512 * 1024, &d, &err) && d == b, "a freed piece is reused");
    hx_pinned_destroy(p);
    CHECK(fc.frees == 3, "destroy frees every block through the hooks");
    cfg.block_size = 1000;
    CHECK(hx_pinned_create(&cfg, &p, &err) == HX_ERR_INVALID_ARGUMENT, "block size must be pages");
}

static void random_uncapped(void) { test_random(1, SIZE_MAX, 4000); }
static void random_cap_96mib(void) { test_random(2, 96 * HX_MIB, 4000); }
static void random_cap_40mib(void) { test_random(3, 40 * HX_MIB, 3000); }

static void plan_steps(void)
{
    for (uint64_t seed = 1; seed <= 6; seed++) test_plan_steps(seed);
}

static void plan_layout(void)
{
    for (uint64_t seed = 1; seed <= 6; seed++) test_plan_layout(seed);
}

static const test_case cases[] = {
    {"random_uncapped", random_uncapped},
    {"random_cap_96mib", random_cap_96mib},
    {"random_cap_40mib", random_cap_40mib},
    {"coalescing", test_coalescing},
    {"release_rules", test_release_rules},
    {"learning_at_cap", test_learning_at_cap},
    {"plan_steps", plan_steps},
    {"plan_layout", plan_layout},
    {"segregation", test_segregation},
    {"oom_report", test_oom_report},
    {"oom_options", test_oom_options},
    {"device_refuses", test_device_refuses},
    {"threads", test_threads},
    {"baseline", test_baseline},
    {"pinned", test_pinned},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "pool", cases, TEST_COUNT(cases));
}
