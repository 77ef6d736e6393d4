/* Device memory pools segregated by lifetime (see pool.h). */
#include "memory/pool.h"
#include "memory/memtrace.h"
#include "memory/pool_plan.h"
#include "memory/ptrmap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SMALL = 0, LARGE = 1 }; /* size classes: each has its own segments */

/* While the transient pool learns its first cycle, a large request takes a
 * cached free block only when that block is at most 1/8 larger: splitting
 * a big block for a smaller request is what leaves it too small for the
 * big request that comes next. */
#define LEARN_SLACK_DIV 8
/* ... for the first LEARN_MAX allocations of the cycle: a transient pool
 * that never empties (no cycle, no plan) then reuses its cache freely
 * instead of reserving a segment for each request that finds none close. */
#define LEARN_MAX 2048
/* How far ahead of the plan's next entry a request may find its own. */
#define PLAN_WINDOW 8

struct hx_mem_pools {
    pthread_mutex_t mu;
    hx_mem_pools_config cfg;
    char name[64];
    hx_arena arena[2][2]; /* [hx_mem_lifetime][SMALL or LARGE] */
    hx_ptrmap live;       /* address -> used block */
    hx_mem_tally life[2], total;
    int64_t ooms[2];
    /* the transient pool's step plan (pool_plan.h) */
    hx_pool_cycle cycle;  /* what this cycle asked for so far */
    hx_pool_plan plan;    /* the layout the plan segment follows */
    hx_mseg *plan_seg;    /* in arena[TRANSIENT][LARGE]; NULL: no plan */
    size_t plan_next;     /* the allocation of this cycle the plan serves next */
    bool off_plan;        /* this cycle asked for something the plan does not hold */
    bool grew;            /* this cycle reserved a transient segment */
    hx_mem_plan_stats ps;
};

hx_mem_pools_config hx_mem_pools_config_default(const char *name, size_t capacity)
{
    return (hx_mem_pools_config){.name = name, .capacity = capacity, .align = 256,
                                 .small_max = 256 * 1024, .small_segment = 2 * HX_MIB,
                                 .segment_round = 4096};
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
    /* Small requests share small segments; a large one gets a segment of its
     * own size when no cached block serves it, and a large block is split
     * only for large requests. Segment sizes are chosen in grow(). */
    hx_arena_policy small = {.round = cfg->align, .min_split = cfg->align, .max_slack = 0,
                             .fixed_upto = cfg->small_max, .fixed_size = cfg->small_segment,
                             .seg_round = cfg->align};
    hx_arena_policy large = {.round = cfg->align, .min_split = cfg->align, .max_slack = 0,
                             .fixed_upto = 0, .fixed_size = 0, .seg_round = cfg->segment_round};
    for (int l = 0; l < 2; l++) {
        hx__arena_init(&p->arena[l][SMALL], &small);
        hx__arena_init(&p->arena[l][LARGE], &large);
    }
    /* long-lived tensors are freed rarely: their segments are exact (to align) */
    p->arena[HX_MEM_PERSISTENT][LARGE].pol.seg_round = cfg->align;
    *out = p;
    return HX_OK;
}

void hx_mem_pools_destroy(hx_mem_pools *p)
{
    if (!p) return;
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2; k++) hx__arena_destroy(&p->arena[l][k], &p->cfg.source);
    hx__cycle_destroy(&p->cycle);
    hx__pool_plan_free(&p->plan);
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
        t->reserved = t->allocated = t->requested = 0;
        for (int k = 0; k < 2; k++) {
            t->reserved += p->arena[l][k].t.reserved;
            t->allocated += p->arena[l][k].t.allocated;
            t->requested += p->arena[l][k].t.requested;
        }
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
    hx_arena *all[4] = {&p->arena[0][SMALL], &p->arena[0][LARGE], &p->arena[1][SMALL],
                        &p->arena[1][LARGE]};
    out->capacity = p->cfg.capacity;
    hx__pool_stats_fill(&out->persistent, &p->life[0], all, 2, p->ooms[0]);
    hx__pool_stats_fill(&out->transient, &p->life[1], all + 2, 2, p->ooms[1]);
    hx__pool_stats_fill(&out->total, &p->total, all, 4, p->ooms[0] + p->ooms[1]);
}

void hx_mem_pools_stats(hx_mem_pools *p, hx_device_pools_stats *out)
{
    pthread_mutex_lock(&p->mu);
    stats_locked(p, out);
    pthread_mutex_unlock(&p->mu);
}

void hx_mem_pools_plan_stats(hx_mem_pools *p, hx_mem_plan_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->ps;
    out->plan_bytes = p->plan_seg ? p->plan_seg->size : 0;
    pthread_mutex_unlock(&p->mu);
}

/* ---- releasing cached segments ------------------------------------------------------ */

static void drop_plan(hx_mem_pools *p)
{
    p->plan_seg = NULL;
    hx__pool_plan_free(&p->plan);
}

/* Releases every entirely free segment of lifetime l (the plan's too). */
static size_t release_free(hx_mem_pools *p, int l)
{
    if (l == HX_MEM_TRANSIENT && p->plan_seg && hx__arena_segment_free(p->plan_seg)) drop_plan(p);
    size_t n = 0;
    for (int k = 0; k < 2; k++) n += hx__arena_release_free(&p->arena[l][k], &p->cfg.source);
    return n;
}

static size_t release_all_free(hx_mem_pools *p)
{
    return release_free(p, HX_MEM_PERSISTENT) + release_free(p, HX_MEM_TRANSIENT);
}

/* Before the pools reserve `want` bytes for lifetime l: cached segments of
 * l that hold nothing are given back, largest first, for as long as the
 * reservation would otherwise raise the peak. Below the peak they stay:
 * keeping them costs no device memory that was not needed already, and
 * releasing them would make the next step reserve them again. */
static void release_above_peak(hx_mem_pools *p, int l, size_t want)
{
    while (p->total.reserved + want > p->total.peak_reserved) {
        hx_mseg *s[2] = {hx__arena_largest_free_segment(&p->arena[l][SMALL]),
                         hx__arena_largest_free_segment(&p->arena[l][LARGE])};
        int k = !s[SMALL] || (s[LARGE] && s[LARGE]->size > s[SMALL]->size) ? LARGE : SMALL;
        if (!s[k]) return;
        if (s[k] == p->plan_seg) drop_plan(p); /* nothing of it is live: the plan goes with it */
        hx__arena_release_segment(&p->arena[l][k], s[k], &p->cfg.source);
        retally(p);
    }
}

/* ---- growth and the OOM report ----------------------------------------------------- */

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
    /* The options that would lower what occupies the device: persistent
     * bytes are parameters and optimizer state, transient ones activations
     * (which scale with the batch). */
    bool params = s.persistent.allocated > 0 || lt == HX_MEM_PERSISTENT;
    bool acts = s.transient.allocated > 0 || lt == HX_MEM_TRANSIENT;
    return hx__mem_fail(
        err, HX_ERR_DEVICE_OOM,
        "%s: out of memory allocating %zu bytes (%s) for %s (%s): capacity %s; reserved %zu "
        "(persistent %zu, transient %zu); in use %zu (persistent %zu, transient %zu); free in "
        "the pools %zu, largest free block %zu, fragmentation %.1f%%%s" HX_MEM_OOM_ADVICE
        "%s%sauto_offload=true (offload planned to fit the cap), or a larger cap "
        "(max_device_memory)",
        p->name, bytes, lifetime_name(lt), what ? what : "an allocation", why, cap,
        s.total.reserved, s.persistent.reserved, s.transient.reserved, s.total.allocated,
        s.persistent.allocated, s.transient.allocated, s.total.free_bytes, s.total.largest_free,
        100.0 * s.total.fragmentation, frag_hint,
        params ? "parameters and optimizer state on the host (offload_param=cpu), " : "",
        acts ? "activations on the host (offload_activations=cpu), a smaller batch, " : "");
}

/* The segment a small request of lifetime l gets: small_segment / 32
 * (persistent: / 128, its small tensors come once and its last segment's
 * tail stays unused) but at least 4 KiB, doubled while under 1/64 of what
 * l holds, at most small_segment, at least the request. A small model's
 * pools stay small; a large one's reserve few segments. */
#define SMALL_FIRST_MIN 4096
static size_t small_segment_size(const hx_mem_pools *p, int l, size_t rounded)
{
    size_t first = p->cfg.small_segment / (l == HX_MEM_PERSISTENT ? 128 : 32);
    if (first < SMALL_FIRST_MIN) first = SMALL_FIRST_MIN;
    size_t g = hx__mem_round(first, p->cfg.align);
    while (g < p->cfg.small_segment && g < p->life[l].reserved / 64) g *= 2;
    if (g > p->cfg.small_segment) g = p->cfg.small_segment;
    return g < rounded ? rounded : g;
}

/* Reserves a segment in arena a for a rounded request and returns its free
 * block, or fails with the OOM report. */
static hx_status grow(hx_mem_pools *p, hx_arena *a, size_t bytes, size_t rounded,
                      hx_mem_lifetime lt, const char *what, hx_mblock **out, hx_mem_err *err)
{
    const hx_mem_source *src = &p->cfg.source;
    size_t want = a == &p->arena[lt][SMALL] ? small_segment_size(p, lt, rounded)
                                            : hx__arena_segment_size(a, rounded);
    retally(p);
    release_above_peak(p, lt, want);
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
        p->grew |= lt == HX_MEM_TRANSIENT;
        retally(p);
        *out = hx__arena_best_fit(a, rounded);
        return HX_OK;
    }
    return oom_report(p, bytes, lt, what, why, err);
}

/* ---- the step plan ----------------------------------------------------------------- */

/* The next allocation of the cycle from the plan: the first entry among
 * the next PLAN_WINDOW not taken yet this cycle, of the request's size and
 * with its place free (so that requests in a slightly different order
 * still follow the plan); else NULL and the cycle is off the plan. */
static hx_mblock *take_planned(hx_mem_pools *p, size_t rounded, size_t bytes)
{
    if (!p->plan_seg || p->off_plan) return NULL;
    hx_pool_plan *pl = &p->plan;
    hx_mblock *b = NULL;
    for (size_t k = p->plan_next; !b && k < pl->n && k < p->plan_next + PLAN_WINDOW; k++) {
        if (pl->taken[k] || pl->size[k] != rounded) continue;
        b = hx__arena_take_at(&p->arena[HX_MEM_TRANSIENT][LARGE], p->plan_seg,
                              p->plan_seg->base + pl->offset[k], rounded, bytes);
        pl->taken[k] = b != NULL;
    }
    while (p->plan_next < pl->n && pl->taken[p->plan_next]) p->plan_next++;
    if (!b) p->off_plan = true;
    return b;
}

/* The transient pool is empty: a cycle ended. The first one, and any that
 * had to reserve memory, is laid out offline; its layout becomes the plan
 * in one segment (never smaller than the last), which replaces every
 * cached transient segment. A cycle that followed the plan (or fit in its
 * segment's free space) changes nothing: in steady state no segment is
 * reserved or released. */
static void cycle_end(hx_mem_pools *p)
{
    hx_pool_plan next = {0};
    if ((!p->plan_seg || p->grew) &&
        hx__pool_plan_layout(&p->cycle, p->cfg.align, &next)) {
        hx_arena *sm = &p->arena[HX_MEM_TRANSIENT][SMALL], *lg = &p->arena[HX_MEM_TRANSIENT][LARGE];
        size_t want = hx__mem_round(next.bytes, p->arena[HX_MEM_TRANSIENT][LARGE].pol.seg_round);
        if (p->plan_seg && p->plan_seg->size > want) want = p->plan_seg->size;
        hx_mseg *seg = NULL;
        if (!sm->n_segs && lg->n_segs == 1 && lg->segs->size >= want) {
            seg = lg->segs; /* the one cached segment holds the layout */
        } else {
            retally(p);
            size_t others = p->total.reserved - p->life[HX_MEM_TRANSIENT].reserved;
            void *base = NULL;
            if (others <= p->cfg.capacity && want <= p->cfg.capacity - others) {
                release_free(p, HX_MEM_TRANSIENT);
                if (!p->cfg.source.reserve(p->cfg.source.ctx, want, &base)) {
                    if (hx__arena_add_segment(lg, base, want)) seg = lg->segs; /* it goes first */
                    else p->cfg.source.release(p->cfg.source.ctx, base, want);
                }
            }
            retally(p);
        }
        if (seg) {
            hx__pool_plan_free(&p->plan);
            p->plan = next;
            p->plan_seg = seg;
            p->ps.plans++;
        } else {
            hx__pool_plan_free(&next);
        }
    }
    hx__cycle_reset(&p->cycle);
    if (p->plan_seg) memset(p->plan.taken, 0, p->plan.n * sizeof *p->plan.taken);
    p->plan_next = 0;
    p->off_plan = false;
    p->grew = false;
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
    bool transient = lt == HX_MEM_TRANSIENT;
    hx_mblock *b = transient ? take_planned(p, rounded, bytes) : NULL;
    if (b) {
        p->ps.planned++;
    } else {
        hx_arena *a = &p->arena[lt][rounded > p->cfg.small_max];
        /* off the plan, the plan's segment is tried first, small requests too */
        if (transient && p->plan_seg && (b = hx__arena_best_fit(&p->arena[lt][LARGE], rounded)))
            a = &p->arena[lt][LARGE];
        else
            b = hx__arena_best_fit(a, rounded);
        bool learning = transient && !p->plan_seg && p->cycle.n < LEARN_MAX;
        if (b && learning && a == &p->arena[lt][LARGE] && b->size - rounded > rounded / LEARN_SLACK_DIV &&
            p->cfg.capacity - p->total.reserved >= hx__arena_segment_size(a, rounded))
            b = NULL; /* under the cap a segment of its own; at the cap the block it found */
        if (!b && (st = grow(p, a, bytes, rounded, lt, what, &b, err))) goto done;
        if (!(b = hx__arena_take(a, b, rounded, bytes))) {
            st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of host memory for pool records", p->name);
            goto done;
        }
        if (transient) p->ps.unplanned++;
    }
    if (!hx__ptrmap_put(&p->live, b->addr, b)) {
        hx__arena_put(b->arena, b);
        st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of host memory for pool records", p->name);
        goto done;
    }
    b->rec = transient ? hx__cycle_alloc(&p->cycle, rounded) : -1;
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
    bool transient = b->arena == &p->arena[HX_MEM_TRANSIENT][SMALL] ||
                     b->arena == &p->arena[HX_MEM_TRANSIENT][LARGE];
    if (transient) hx__cycle_free(&p->cycle, b->rec);
    hx__arena_put(b->arena, b);
    retally(p);
    if (transient && !p->life[HX_MEM_TRANSIENT].allocated) cycle_end(p);
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
    for (int k = 0; k < 2; k++)
        for (const hx_mseg *g = p->arena[lt][k].segs; g; g = g->next, n++)
            if (n < max) {
                base[n] = g->base;
                size[n] = g->size;
            }
    pthread_mutex_unlock(&p->mu);
    return n;
}
