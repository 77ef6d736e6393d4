/* Device memory pools segregated by lifetime (see pool.h). */
#include "memory/pool.h"
#include "memory/memtrace.h"
#include "memory/ptrmap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct hx_mem_pools {
    pthread_mutex_t mu;
    hx_mem_pools_config cfg;
    char name[64];
    hx_arena arena[2]; /* by hx_mem_lifetime */
    hx_ptrmap live;       /* address -> used block */
    hx_mem_tally life[2], total;
    int64_t ooms[2];
};

hx_mem_pools_config hx_mem_pools_config_default(const char *name, size_t capacity)
{
    return (hx_mem_pools_config){.name = name, .capacity = capacity, .align = 256,
                                 .small_max = HX_MIB, .small_segment = 2 * HX_MIB,
                                 .segment_round = 2 * HX_MIB};
}

static bool pow2(size_t x) { return x && !(x & (x - 1)); }

hx_status hx_mem_pools_create(const hx_mem_pools_config *cfg, hx_mem_pools **out,
                              hx_mem_err *err)
{
    if (!out) return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_mem_pools_create: out is NULL");
    *out = NULL;
    if (!cfg || !cfg->source.reserve || !cfg->source.release)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_mem_pools_create: the config needs a memory source (reserve "
                            "and release)");
    if (cfg->align < 64 || !pow2(cfg->align) || cfg->small_max < cfg->align ||
        cfg->small_segment < cfg->small_max || cfg->small_segment % cfg->align ||
        cfg->segment_round < cfg->align || cfg->segment_round % cfg->align || !cfg->capacity)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_mem_pools_create: align %zu must be a power of 2 >= 64; "
                            "small_max %zu >= align; small_segment %zu >= small_max; "
                            "segment_round %zu >= align; both multiples of align; capacity "
                            "%zu > 0", cfg->align, cfg->small_max, cfg->small_segment,
                            cfg->segment_round, cfg->capacity);
    hx_mem_pools *p = calloc(1, sizeof *p);
    if (!p) return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "hx_mem_pools_create: out of host memory");
    pthread_mutex_init(&p->mu, NULL);
    p->cfg = *cfg;
    snprintf(p->name, sizeof p->name, "%s", cfg->name ? cfg->name : "device");
    p->cfg.name = p->name;
    /* Both pools: large requests get segments of their own size, small ones
     * share small segments and the tails of large ones. Transient segments
     * are rounded to segment_round so that their tails serve later
     * requests; persistent ones are exact (to align): a long-lived tensor
     * is freed rarely, so a rounded tail would mostly stay unused (a 1.28 MB
     * parameter in a 2 MiB segment left 36% of it idle). */
    hx_arena_policy pol = {.round = cfg->align, .min_split = cfg->align, .max_slack = 0,
                           .fixed_upto = cfg->small_max, .fixed_size = cfg->small_segment,
                           .seg_round = cfg->segment_round};
    hx__arena_init(&p->arena[HX_MEM_TRANSIENT], &pol);
    pol.seg_round = cfg->align;
    hx__arena_init(&p->arena[HX_MEM_PERSISTENT], &pol);
    *out = p;
    return HX_OK;
}

void hx_mem_pools_destroy(hx_mem_pools *p)
{
    if (!p) return;
    for (int l = 0; l < 2; l++) hx__arena_destroy(&p->arena[l], &p->cfg.source);
    hx__ptrmap_free(&p->live);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---- statistics --------------------------------------------------------------------- */

/* Recomputes the lifetime and total tallies from the arenas (peaks kept). */
static void retally(hx_mem_pools *p)
{
    p->total.reserved = p->total.allocated = p->total.requested = 0;
    for (int l = 0; l < 2; l++) {
        hx_mem_tally *t = &p->life[l];
        t->reserved = p->arena[l].t.reserved;
        t->allocated = p->arena[l].t.allocated;
        t->requested = p->arena[l].t.requested;
        hx__tally_peaks(t);
        p->total.reserved += t->reserved;
        p->total.allocated += t->allocated;
        p->total.requested += t->requested;
    }
    hx__tally_peaks(&p->total);
}

void hx__pool_stats_fill(hx_pool_stats *out, const hx_mem_tally *t, hx_arena *const *arenas,
                         int n, int64_t ooms)
{
    memset(out, 0, sizeof *out);
    out->reserved = t->reserved;
    out->allocated = t->allocated;
    out->requested = t->requested;
    out->peak_reserved = t->peak_reserved;
    out->peak_allocated = t->peak_allocated;
    out->peak_requested = t->peak_requested;
    out->free_bytes = t->reserved - t->allocated;
    out->ooms = ooms;
    for (int i = 0; i < n; i++) {
        const hx_arena *a = arenas[i];
        size_t lf = hx__arena_largest_free(a);
        if (lf > out->largest_free) out->largest_free = lf;
        out->segments += a->n_segs;
        out->live_blocks += a->n_live;
        out->free_blocks += (int64_t)a->n_free;
        out->allocs += a->allocs;
        out->frees += a->frees;
        out->reserves += a->reserves;
        out->releases += a->releases;
    }
    out->fragmentation = out->free_bytes ? 1.0 - (double)out->largest_free / out->free_bytes : 0;
}

static void stats_locked(hx_mem_pools *p, hx_device_pools_stats *out)
{
    hx_arena *all[2] = {&p->arena[0], &p->arena[1]};
    out->capacity = p->cfg.capacity;
    hx__pool_stats_fill(&out->persistent, &p->life[0], all, 1, p->ooms[0]);
    hx__pool_stats_fill(&out->transient, &p->life[1], all + 1, 1, p->ooms[1]);
    hx__pool_stats_fill(&out->total, &p->total, all, 2, p->ooms[0] + p->ooms[1]);
}

void hx_mem_pools_stats(hx_mem_pools *p, hx_device_pools_stats *out)
{
    pthread_mutex_lock(&p->mu);
    stats_locked(p, out);
    pthread_mutex_unlock(&p->mu);
}

/* ---- growth and the OOM report ----------------------------------------------------- */

static size_t release_all_free(hx_mem_pools *p)
{
    size_t n = 0;
    for (int l = 0; l < 2; l++) n += hx__arena_release_free(&p->arena[l], &p->cfg.source);
    return n;
}

static const char *lifetime_name(hx_mem_lifetime lt)
{
    return lt == HX_MEM_PERSISTENT ? "persistent" : "transient";
}

static hx_status oom_report(hx_mem_pools *p, size_t bytes, hx_mem_lifetime lt, const char *what,
                            const char *why, hx_mem_err *err)
{
    p->ooms[lt]++;
    retally(p);
    hx_device_pools_stats s;
    stats_locked(p, &s);
    char cap[32];
    if (p->cfg.capacity == SIZE_MAX) snprintf(cap, sizeof cap, "none");
    else snprintf(cap, sizeof cap, "%zu bytes", p->cfg.capacity);
    const char *frag_hint =
        s.total.free_bytes >= bytes
            ? "; the pools hold enough free bytes but in pieces too small (fragmented): "
              "free long-lived tensors from the transient pool or allocate them as persistent"
            : "";
    return hx__mem_fail(
        err, HX_ERR_DEVICE_OOM,
        "%s: out of memory allocating %zu bytes (%s) for %s (%s): capacity %s; reserved %zu "
        "(persistent %zu, transient %zu); in use %zu (persistent %zu, transient %zu); free in "
        "the pools %zu, largest free block %zu, fragmentation %.1f%%%s; try: offload params or "
        "optimizer state to the host (offload_param=cpu), a smaller batch, or a larger cap "
        "(max_device_memory)",
        p->name, bytes, lifetime_name(lt), what ? what : "an allocation", why, cap,
        s.total.reserved, s.persistent.reserved, s.transient.reserved, s.total.allocated,
        s.persistent.allocated, s.transient.allocated, s.total.free_bytes, s.total.largest_free,
        100.0 * s.total.fragmentation, frag_hint);
}

/* Reserves a segment in arena a for a rounded request and returns its free
 * block, or fails with the OOM report. */
static hx_status grow(hx_mem_pools *p, hx_arena *a, size_t bytes, size_t rounded,
                      hx_mem_lifetime lt, const char *what, hx_mblock **out, hx_mem_err *err)
{
    const hx_mem_source *src = &p->cfg.source;
    if (rounded > p->cfg.small_max) hx__arena_release_free(a, src);
    size_t want = hx__arena_segment_size(a, rounded);
    const char *why = "the cap is reached";
    for (int attempt = 0; attempt < 2; attempt++, release_all_free(p)) {
        retally(p);
        size_t room = p->cfg.capacity > p->total.reserved ? p->cfg.capacity - p->total.reserved : 0;
        size_t seg = want;
        if (seg > room) {
            if (rounded > room) continue;
            seg = room / p->cfg.align * p->cfg.align; /* the last bytes under the cap */
        }
        void *base = NULL;
        if (src->reserve(src->ctx, seg, &base)) {
            why = "the device refused a segment";
            continue;
        }
        if (!hx__arena_add_segment(a, base, seg)) {
            src->release(src->ctx, base, seg);
            return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of host memory for pool records",
                                p->name);
        }
        retally(p);
        *out = hx__arena_best_fit(a, rounded);
        return HX_OK;
    }
    return oom_report(p, bytes, lt, what, why, err);
}

/* ---- alloc and free --------------------------------------------------------------- */

hx_status hx_mem_pools_alloc(hx_mem_pools *p, size_t bytes, hx_mem_lifetime lt,
                             const char *what, void **out, hx_mem_err *err)
{
    if (!p || !out || (unsigned)lt > HX_MEM_TRANSIENT)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_mem_pools_alloc: %s", !p ? "pools is NULL" : !out ? "out is NULL"
                                                                : "lifetime must be HX_MEM_PERSISTENT or HX_MEM_TRANSIENT");
    *out = NULL;
    pthread_mutex_lock(&p->mu);
    size_t rounded = hx__mem_round(bytes ? bytes : 1, p->cfg.align);
    hx_status st = HX_OK;
    if (rounded == SIZE_MAX) {
        st = oom_report(p, bytes, lt, what, "the request is larger than any device", err);
        goto done;
    }
    hx_arena *a = &p->arena[lt];
    hx_mblock *b = hx__arena_best_fit(a, rounded);
    if (!b && (st = grow(p, a, bytes, rounded, lt, what, &b, err))) goto done;
    if (!(b = hx__arena_take(a, b, rounded, bytes))) {
        st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of host memory for pool records", p->name);
        goto done;
    }
    if (!hx__ptrmap_put(&p->live, b->addr, b)) {
        hx__arena_put(a, b);
        st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of host memory for pool records", p->name);
        goto done;
    }
    retally(p);
    if (p->cfg.trace && (lt == HX_MEM_PERSISTENT || !p->cfg.trace_persistent_only))
        hx_memtrace_alloc(p->cfg.trace, (void *)b->addr, bytes, lt == HX_MEM_PERSISTENT);
    *out = (void *)b->addr;
done:
    pthread_mutex_unlock(&p->mu);
    return st;
}

hx_status hx_mem_pools_free(hx_mem_pools *p, void *ptr, hx_mem_err *err)
{
    if (!p || !ptr) return HX_OK;
    pthread_mutex_lock(&p->mu);
    hx_mblock *b = hx__ptrmap_del(&p->live, (uintptr_t)ptr);
    if (!b) {
        pthread_mutex_unlock(&p->mu);
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "%s: free of %p, which these pools did not hand out (or freed "
                            "already); nothing freed", p->name, ptr);
    }
    if (p->cfg.trace) hx_memtrace_free(p->cfg.trace, ptr);
    hx__arena_put(b->arena, b);
    retally(p);
    pthread_mutex_unlock(&p->mu);
    return HX_OK;
}

size_t hx_mem_pools_trim(hx_mem_pools *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = release_all_free(p);
    retally(p);
    pthread_mutex_unlock(&p->mu);
    return n;
}

size_t hx_mem_pools_size_of(hx_mem_pools *p, const void *ptr)
{
    if (!p || !ptr) return 0;
    pthread_mutex_lock(&p->mu);
    const hx_mblock *b = hx__ptrmap_get(&p->live, (uintptr_t)ptr);
    size_t n = b ? b->requested : 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

const hx_mem_pools_config *hx_mem_pools_config_of(const hx_mem_pools *p) { return &p->cfg; }

int hx_mem_pools_segments(hx_mem_pools *p, hx_mem_lifetime lt, uintptr_t *base, size_t *size,
                          int max)
{
    pthread_mutex_lock(&p->mu);
    int n = 0;
    for (const hx_mseg *g = p->arena[lt].segs; g; g = g->next, n++)
        if (n < max) {
            base[n] = g->base;
            size[n] = g->size;
        }
    pthread_mutex_unlock(&p->mu);
    return n;
}
