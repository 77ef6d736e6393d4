/* The allocation engine (see arena.h). The free index is a sorted array:
 * pools hold tens to a few thousand free blocks, and a binary search plus a
 * memmove of a few KiB is cheaper than chasing tree pointers. */
#include "memory/arena.h"

#include <stdlib.h>
#include <string.h>

void hx__tally_peaks(hx_mem_tally *t)
{
    if (t->reserved > t->peak_reserved) t->peak_reserved = t->reserved;
    if (t->allocated > t->peak_allocated) t->peak_allocated = t->allocated;
    if (t->requested > t->peak_requested) t->peak_requested = t->requested;
}

/* ---- the virtual source -------------------------------------------------------- */

static hx_status virtual_reserve(void *ctx, size_t bytes, void **out)
{
    hx_mem_virtual *v = ctx;
    if (!v->next) v->next = (uintptr_t)1 << 40;
    *out = (void *)v->next;
    /* a gap between segments, so that no two ever look adjacent */
    v->next += hx__mem_round(bytes, HX_MIB) + HX_MIB;
    return HX_OK;
}

static void virtual_release(void *ctx, void *p, size_t bytes) {}

hx_mem_source hx__mem_virtual_source(hx_mem_virtual *v)
{
    return (hx_mem_source){v, virtual_reserve, virtual_release};
}

/* ---- free index ------------------------------------------------------------------ */

static bool before(const hx_mblock *a, size_t size, uintptr_t addr)
{
    return a->size < size || (a->size == size && a->addr < addr);
}

/* First position whose block is not before (size, addr). */
static size_t lower_bound(const hx_arena *a, size_t size, uintptr_t addr)
{
    size_t lo = 0, hi = a->n_free;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (before(a->free_idx[mid], size, addr)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The index has room for every block of the arena (free or not), so that
 * freeing never needs memory: callers grow it before a block is created. */
static bool index_reserve(hx_arena *a, size_t blocks)
{
    if (blocks <= a->cap_free) return true;
    size_t cap = a->cap_free ? a->cap_free * 2 : 64;
    while (cap < blocks) cap *= 2;
    hx_mblock **idx = realloc(a->free_idx, cap * sizeof *idx);
    if (!idx) return false;
    a->free_idx = idx;
    a->cap_free = cap;
    return true;
}

static void index_insert(hx_arena *a, hx_mblock *b)
{
    size_t i = lower_bound(a, b->size, b->addr);
    memmove(a->free_idx + i + 1, a->free_idx + i, (a->n_free - i) * sizeof *a->free_idx);
    a->free_idx[i] = b;
    a->n_free++;
}

static void index_remove(hx_arena *a, const hx_mblock *b)
{
    size_t i = lower_bound(a, b->size, b->addr);
    memmove(a->free_idx + i, a->free_idx + i + 1, (a->n_free - i - 1) * sizeof *a->free_idx);
    a->n_free--;
}

/* ---- the engine --------------------------------------------------------------------- */

void hx__arena_init(hx_arena *a, const hx_arena_policy *pol)
{
    memset(a, 0, sizeof *a);
    a->pol = *pol;
}

static void drop_segment(hx_arena *a, hx_mseg *s, const hx_mem_source *src)
{
    for (hx_mblock *b = s->first, *nx; b; b = nx) {
        nx = b->next;
        if (b->used) {
            a->t.allocated -= b->size;
            a->t.requested -= b->requested;
            a->n_live--;
        }
        a->n_blocks--;
        free(b);
    }
    if (s->prev) s->prev->next = s->next;
    else a->segs = s->next;
    if (s->next) s->next->prev = s->prev;
    src->release(src->ctx, (void *)s->base, s->size);
    a->t.reserved -= s->size;
    a->n_segs--;
    a->releases++;
    free(s);
}

void hx__arena_destroy(hx_arena *a, const hx_mem_source *src)
{
    while (a->segs) drop_segment(a, a->segs, src);
    free(a->free_idx);
    memset(a, 0, sizeof *a);
}

size_t hx__arena_round(const hx_arena *a, size_t bytes)
{
    return hx__mem_round(bytes ? bytes : 1, a->pol.round);
}

size_t hx__arena_segment_size(const hx_arena *a, size_t rounded)
{
    if (rounded <= a->pol.fixed_upto) return a->pol.fixed_size;
    return hx__mem_round(rounded, a->pol.seg_round);
}

static bool usable(const hx_arena_policy *p, size_t size, size_t rounded)
{
    size_t rest = size - rounded;
    return rest <= p->max_slack || rest >= p->min_split;
}

hx_mblock *hx__arena_best_fit(const hx_arena *a, size_t rounded)
{
    for (size_t i = lower_bound(a, rounded, 0); i < a->n_free; i++)
        if (usable(&a->pol, a->free_idx[i]->size, rounded)) return a->free_idx[i];
    return NULL;
}

bool hx__arena_add_segment(hx_arena *a, void *base, size_t size)
{
    hx_mseg *s = calloc(1, sizeof *s);
    hx_mblock *b = calloc(1, sizeof *b);
    if (!s || !b || !index_reserve(a, a->n_blocks + 1)) {
        free(s);
        free(b);
        return false;
    }
    s->base = (uintptr_t)base;
    s->size = size;
    s->first = b;
    s->next = a->segs;
    if (a->segs) a->segs->prev = s;
    a->segs = s;
    *b = (hx_mblock){.addr = s->base, .size = size, .seg = s, .arena = a};
    index_insert(a, b);
    a->t.reserved += size;
    a->n_blocks++;
    a->n_segs++;
    a->reserves++;
    hx__tally_peaks(&a->t);
    return true;
}

hx_mblock *hx__arena_take(hx_arena *a, hx_mblock *blk, size_t rounded, size_t requested)
{
    hx_mblock *rest = NULL;
    if (blk->size - rounded >= a->pol.min_split && blk->size > rounded) {
        rest = calloc(1, sizeof *rest);
        if (!rest || !index_reserve(a, a->n_blocks + 1)) {
            free(rest);
            return NULL;
        }
        a->n_blocks++;
    }
    index_remove(a, blk);
    if (rest) {
        *rest = (hx_mblock){.addr = blk->addr + rounded, .size = blk->size - rounded,
                            .prev = blk, .next = blk->next, .seg = blk->seg, .arena = a};
        if (blk->next) blk->next->prev = rest;
        blk->next = rest;
        blk->size = rounded;
        index_insert(a, rest);
    }
    blk->used = true;
    blk->requested = requested;
    a->t.allocated += blk->size;
    a->t.requested += requested;
    a->n_live++;
    a->allocs++;
    hx__tally_peaks(&a->t);
    return blk;
}

hx_mblock *hx__arena_take_at(hx_arena *a, hx_mseg *s, uintptr_t addr, size_t rounded,
                             size_t requested)
{
    hx_mblock *b = s->first;
    while (b && b->addr + b->size <= addr) b = b->next;
    if (!b || b->used || b->addr > addr || b->addr + b->size - addr < rounded) return NULL;
    if (addr == b->addr) return hx__arena_take(a, b, rounded, requested);
    /* split off the free front [b->addr, addr), then take the rest */
    hx_mblock *r = calloc(1, sizeof *r);
    if (!r || !index_reserve(a, a->n_blocks + 2)) {
        free(r);
        return NULL;
    }
    index_remove(a, b);
    *r = (hx_mblock){.addr = addr, .size = b->addr + b->size - addr, .prev = b, .next = b->next,
                     .seg = s, .arena = a};
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = addr - b->addr;
    a->n_blocks++;
    index_insert(a, b);
    index_insert(a, r);
    hx_mblock *got = hx__arena_take(a, r, rounded, requested);
    if (!got) { /* put the front back as it was */
        index_remove(a, b);
        index_remove(a, r);
        b->size += r->size;
        b->next = r->next;
        if (r->next) r->next->prev = b;
        a->n_blocks--;
        free(r);
        index_insert(a, b);
    }
    return got;
}

/* Merges free block b's right neighbour (free, out of the index) into b. */
static void absorb_next(hx_arena *a, hx_mblock *b)
{
    hx_mblock *n = b->next;
    a->n_blocks--;
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    free(n);
}

hx_mblock *hx__arena_put(hx_arena *a, hx_mblock *blk)
{
    a->t.allocated -= blk->size;
    a->t.requested -= blk->requested;
    a->n_live--;
    a->frees++;
    blk->used = false;
    blk->requested = 0;
    if (blk->next && !blk->next->used) {
        index_remove(a, blk->next);
        absorb_next(a, blk);
    }
    if (blk->prev && !blk->prev->used) {
        hx_mblock *p = blk->prev;
        index_remove(a, p);
        absorb_next(a, p);
        blk = p;
    }
    index_insert(a, blk);
    return blk;
}

size_t hx__arena_release_free(hx_arena *a, const hx_mem_source *src)
{
    size_t released = 0;
    for (hx_mseg *s = a->segs, *nx; s; s = nx) {
        nx = s->next;
        if (!hx__arena_segment_free(s)) continue;
        released += s->size;
        hx__arena_release_segment(a, s, src);
    }
    return released;
}

size_t hx__arena_largest_free(const hx_arena *a)
{
    return a->n_free ? a->free_idx[a->n_free - 1]->size : 0;
}

bool hx__arena_segment_free(const hx_mseg *s) { return !s->first->used && !s->first->next; }

hx_mseg *hx__arena_largest_free_segment(const hx_arena *a)
{
    hx_mseg *best = NULL;
    for (hx_mseg *s = a->segs; s; s = s->next)
        if (hx__arena_segment_free(s) && (!best || s->size > best->size)) best = s;
    return best;
}

void hx__arena_release_segment(hx_arena *a, hx_mseg *s, const hx_mem_source *src)
{
    index_remove(a, s->first);
    drop_segment(a, s, src);
}
