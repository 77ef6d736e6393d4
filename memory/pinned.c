/* The pinned host pool (see pinned.h). */
#include "memory/pinned.h"
#include "memory/pool.h"
#include "memory/ptrmap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#define PAGE 4096

struct hx_pinned_pool {
    pthread_mutex_t mu;
    hx_pinned_config cfg;
    hx_pinned_hooks hooks;
    hx_arena arena;
    hx_ptrmap live;      /* address -> used block */
    hx_ptrmap locked;    /* block base -> 1 when page-locked */
    hx_mem_tally t;
    hx_pinned_stats st;
};

hx_pinned_config hx_pinned_config_default(void)
{
    return (hx_pinned_config){.block_size = 64 * HX_MIB, .capacity = SIZE_MAX, .lock = true};
}

/* ---- the block source: hooks, mlock, or plain ------------------------------------- */

static hx_status block_reserve(void *ctx, size_t bytes, void **out)
{
    hx_pinned_pool *p = ctx;
    if (p->cfg.hooks) {
        hx_status st = p->hooks.alloc(p->hooks.ctx, bytes, out);
        if (st) return st;
        if (!hx__ptrmap_put(&p->locked, (uintptr_t)*out, (void *)1)) {
            p->hooks.free(p->hooks.ctx, *out, bytes);
            return HX_ERR_OUT_OF_MEMORY;
        }
        p->st.locked_bytes += bytes;
        p->st.locked_blocks++;
        return HX_OK;
    }
    void *m = aligned_alloc(PAGE, bytes);
    if (!m) return HX_ERR_OUT_OF_MEMORY;
    const char *why = NULL;
    char buf[sizeof p->st.plain_reason];
    struct rlimit rl;
    if (!p->cfg.lock) {
        why = "locking not asked for (lock = false)";
    } else if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
               p->st.locked_bytes + bytes > rl.rlim_cur) {
        snprintf(buf, sizeof buf, "RLIMIT_MEMLOCK (%llu bytes) would be passed; raise it with "
                 "ulimit -l or limits.conf", (unsigned long long)rl.rlim_cur);
        why = buf;
    } else if (mlock(m, bytes) != 0) {
        snprintf(buf, sizeof buf, "mlock failed: %s", strerror(errno));
        why = buf;
    }
    if (why) {
        snprintf(p->st.plain_reason, sizeof p->st.plain_reason, "%s", why);
        p->st.plain_blocks++;
    } else if (!hx__ptrmap_put(&p->locked, (uintptr_t)m, (void *)1)) {
        munlock(m, bytes);
        free(m);
        return HX_ERR_OUT_OF_MEMORY;
    } else {
        p->st.locked_bytes += bytes;
        p->st.locked_blocks++;
    }
    *out = m;
    return HX_OK;
}

static void block_release(void *ctx, void *m, size_t bytes)
{
    hx_pinned_pool *p = ctx;
    bool locked = hx__ptrmap_del(&p->locked, (uintptr_t)m) != NULL;
    if (locked) {
        p->st.locked_bytes -= bytes;
        p->st.locked_blocks--;
    } else {
        p->st.plain_blocks--;
    }
    if (p->cfg.hooks) {
        p->hooks.free(p->hooks.ctx, m, bytes);
        return;
    }
    if (locked) munlock(m, bytes);
    free(m);
}

static hx_mem_source source_of(hx_pinned_pool *p)
{
    return (hx_mem_source){p, block_reserve, block_release};
}

/* ---- the pool ------------------------------------------------------------------------------ */

hx_status hx_pinned_create(const hx_pinned_config *cfg, hx_pinned_pool **out, hx_mem_err *err)
{
    if (!out) return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_pinned_create: out is NULL");
    *out = NULL;
    if (!cfg || !cfg->block_size || cfg->block_size % PAGE || !cfg->capacity ||
        (cfg->hooks && (!cfg->hooks->alloc || !cfg->hooks->free)))
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_pinned_create: host_mem_block_size %zu must be a positive multiple "
                            "of 4096, the capacity positive, and hooks (if any) need alloc and free",
                            cfg ? cfg->block_size : 0);
    hx_pinned_pool *p = calloc(1, sizeof *p);
    if (!p) return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "hx_pinned_create: out of host memory");
    pthread_mutex_init(&p->mu, NULL);
    p->cfg = *cfg;
    if (cfg->hooks) {
        p->hooks = *cfg->hooks;
        p->cfg.hooks = &p->hooks;
    }
    hx_arena_policy pol = {.round = 64, .min_split = 64, .max_slack = 0,
                           .fixed_upto = cfg->block_size, .fixed_size = cfg->block_size,
                           .seg_round = PAGE};
    hx__arena_init(&p->arena, &pol);
    p->st.block_size = cfg->block_size;
    p->st.locked_by = cfg->hooks ? (cfg->hooks->name ? cfg->hooks->name : "hooks")
                      : cfg->lock ? "mlock" : "none";
    *out = p;
    return HX_OK;
}

void hx_pinned_destroy(hx_pinned_pool *p)
{
    if (!p) return;
    hx_mem_source src = source_of(p);
    hx__arena_destroy(&p->arena, &src);
    hx__ptrmap_free(&p->live);
    hx__ptrmap_free(&p->locked);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void retally(hx_pinned_pool *p)
{
    p->t.reserved = p->arena.t.reserved;
    p->t.allocated = p->arena.t.allocated;
    p->t.requested = p->arena.t.requested;
    hx__tally_peaks(&p->t);
}

hx_status hx_pinned_alloc(hx_pinned_pool *p, size_t bytes, void **out, hx_mem_err *err)
{
    if (!p || !out) return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_pinned_alloc: pool or out is NULL");
    *out = NULL;
    pthread_mutex_lock(&p->mu);
    hx_status st = HX_OK;
    hx_mem_source src = source_of(p);
    size_t rounded = hx__arena_round(&p->arena, bytes);
    hx_mblock *b = rounded == SIZE_MAX ? NULL : hx__arena_best_fit(&p->arena, rounded);
    if (!b && rounded != SIZE_MAX) {
        size_t seg = hx__arena_segment_size(&p->arena, rounded);
        if (seg > p->cfg.capacity - p->t.reserved) {
            hx__arena_release_free(&p->arena, &src);
            retally(p);
        }
        void *m = NULL;
        if (seg <= p->cfg.capacity - p->t.reserved && !src.reserve(src.ctx, seg, &m)) {
            if (hx__arena_add_segment(&p->arena, m, seg)) b = hx__arena_best_fit(&p->arena, rounded);
            else src.release(src.ctx, m, seg);
        }
    }
    if (!b || !(b = hx__arena_take(&p->arena, b, rounded, bytes))) {
        st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY,
                          "pinned host pool: cannot allocate %zu bytes: %zu of %zu bytes of blocks "
                          "in use, %zu reserved; raise the pinned capacity (offload_cpu_size) or "
                          "host_mem_block_size, or free host memory",
                          bytes, p->t.allocated, p->cfg.capacity, p->t.reserved);
    } else if (!hx__ptrmap_put(&p->live, b->addr, b)) {
        hx__arena_put(&p->arena, b);
        st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "pinned host pool: out of host memory for records");
    } else {
        *out = (void *)b->addr;
    }
    retally(p);
    pthread_mutex_unlock(&p->mu);
    return st;
}

hx_status hx_pinned_free(hx_pinned_pool *p, void *ptr, hx_mem_err *err)
{
    if (!p || !ptr) return HX_OK;
    pthread_mutex_lock(&p->mu);
    hx_mblock *b = hx__ptrmap_del(&p->live, (uintptr_t)ptr);
    if (b) {
        hx__arena_put(&p->arena, b);
        retally(p);
    }
    pthread_mutex_unlock(&p->mu);
    if (!b)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "pinned host pool: free of %p, which it did not hand out; nothing freed", ptr);
    return HX_OK;
}

size_t hx_pinned_trim(hx_pinned_pool *p)
{
    pthread_mutex_lock(&p->mu);
    hx_mem_source src = source_of(p);
    size_t n = hx__arena_release_free(&p->arena, &src);
    retally(p);
    pthread_mutex_unlock(&p->mu);
    return n;
}

void hx_pinned_stats_get(hx_pinned_pool *p, hx_pinned_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    hx_arena *a = &p->arena;
    hx__pool_stats_fill(&out->pool, &p->t, &a, 1, 0);
    pthread_mutex_unlock(&p->mu);
}
