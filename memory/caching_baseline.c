/* The PyTorch-style single-pool caching allocator (see caching_baseline.h),
 * on the engine of arena.c with PyTorch's size rules as policies. */
#include "memory/caching_baseline.h"
#include "memory/pool.h"
#include "memory/ptrmap.h"

#include <pthread.h>
#include <stdlib.h>

#define ROUND 512
#define SMALL_MAX HX_MIB
#define SMALL_SEGMENT (2 * HX_MIB)
#define LARGE_SEGMENT (20 * HX_MIB)
#define MIN_LARGE_ALLOC (10 * HX_MIB)
#define ROUND_LARGE (2 * HX_MIB)

struct hx_mem_baseline {
    pthread_mutex_t mu;
    size_t capacity;
    hx_mem_source src;
    hx_arena small, large;
    hx_ptrmap live;
    hx_mem_tally t;
    int64_t ooms;
};

hx_status hx_mem_baseline_create(size_t capacity, hx_mem_source src, hx_mem_baseline **out,
                                 hx_mem_err *err)
{
    if (!out || !src.reserve || !src.release || !capacity)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_mem_baseline_create: needs out, a memory source and a capacity > 0");
    hx_mem_baseline *b = calloc(1, sizeof *b);
    if (!b) return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "hx_mem_baseline_create: out of host memory");
    pthread_mutex_init(&b->mu, NULL);
    b->capacity = capacity;
    b->src = src;
    hx_arena_policy small = {.round = ROUND, .min_split = ROUND, .max_slack = 0,
                             .fixed_upto = SMALL_MAX, .fixed_size = SMALL_SEGMENT,
                             .seg_round = ROUND_LARGE};
    hx_arena_policy large = {.round = ROUND, .min_split = SMALL_MAX + ROUND,
                             .max_slack = SMALL_MAX, .fixed_upto = MIN_LARGE_ALLOC - 1,
                             .fixed_size = LARGE_SEGMENT, .seg_round = ROUND_LARGE};
    hx__arena_init(&b->small, &small);
    hx__arena_init(&b->large, &large);
    *out = b;
    return HX_OK;
}

void hx_mem_baseline_destroy(hx_mem_baseline *b)
{
    if (!b) return;
    hx__arena_destroy(&b->small, &b->src);
    hx__arena_destroy(&b->large, &b->src);
    hx__ptrmap_free(&b->live);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static void retally(hx_mem_baseline *b)
{
    b->t.reserved = b->small.t.reserved + b->large.t.reserved;
    b->t.allocated = b->small.t.allocated + b->large.t.allocated;
    b->t.requested = b->small.t.requested + b->large.t.requested;
    hx__tally_peaks(&b->t);
}

static size_t release_free(hx_mem_baseline *b)
{
    return hx__arena_release_free(&b->small, &b->src) + hx__arena_release_free(&b->large, &b->src);
}

hx_status hx_mem_baseline_alloc(hx_mem_baseline *b, size_t bytes, void **out, hx_mem_err *err)
{
    *out = NULL;
    pthread_mutex_lock(&b->mu);
    hx_status st = HX_OK;
    size_t rounded = hx__mem_round(bytes ? bytes : 1, ROUND);
    hx_arena *a = rounded <= SMALL_MAX ? &b->small : &b->large;
    hx_mblock *blk = hx__arena_best_fit(a, rounded);
    for (int attempt = 0; !blk && attempt < 2; attempt++) {
        size_t seg = hx__arena_segment_size(a, rounded);
        void *base = NULL;
        if (seg == SIZE_MAX || seg > b->capacity - b->t.reserved ||
            b->src.reserve(b->src.ctx, seg, &base)) {
            if (!attempt) release_free(b);
            retally(b);
            continue;
        }
        if (!hx__arena_add_segment(a, base, seg)) {
            b->src.release(b->src.ctx, base, seg);
            st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "baseline allocator: out of host memory");
            goto done;
        }
        retally(b);
        blk = hx__arena_best_fit(a, rounded);
    }
    if (!blk) {
        b->ooms++;
        st = hx__mem_fail(err, HX_ERR_DEVICE_OOM,
                          "baseline allocator: out of memory allocating %zu bytes: capacity %zu, "
                          "reserved %zu, allocated %zu", bytes, b->capacity, b->t.reserved,
                          b->t.allocated);
        goto done;
    }
    if (!(blk = hx__arena_take(a, blk, rounded, bytes)) ||
        !hx__ptrmap_put(&b->live, blk->addr, blk)) {
        if (blk) hx__arena_put(a, blk);
        st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "baseline allocator: out of host memory");
        goto done;
    }
    retally(b);
    *out = (void *)blk->addr;
done:
    pthread_mutex_unlock(&b->mu);
    return st;
}

hx_status hx_mem_baseline_free(hx_mem_baseline *b, void *p, hx_mem_err *err)
{
    if (!p) return HX_OK;
    pthread_mutex_lock(&b->mu);
    hx_mblock *blk = hx__ptrmap_del(&b->live, (uintptr_t)p);
    if (blk) {
        hx__arena_put(blk->arena, blk);
        retally(b);
    }
    pthread_mutex_unlock(&b->mu);
    if (!blk)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "baseline allocator: free of %p, which it did not hand out", p);
    return HX_OK;
}

size_t hx_mem_baseline_empty_cache(hx_mem_baseline *b)
{
    pthread_mutex_lock(&b->mu);
    size_t n = release_free(b);
    retally(b);
    pthread_mutex_unlock(&b->mu);
    return n;
}

void hx_mem_baseline_stats(hx_mem_baseline *b, hx_pool_stats *out)
{
    pthread_mutex_lock(&b->mu);
    hx_arena *both[2] = {&b->small, &b->large};
    hx__pool_stats_fill(out, &b->t, both, 2, b->ooms);
    pthread_mutex_unlock(&b->mu);
}
