/* The transient pool's step plan (see pool_plan.h). */
#include "memory/pool_plan.h"

#include <stdlib.h>
#include <string.h>

int64_t hx__cycle_alloc(hx_pool_cycle *c, size_t rounded)
{
    c->clock++;
    if (c->overflow) return -1;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        size_t *size = cap > HX_POOL_CYCLE_MAX ? NULL : realloc(c->size, cap * sizeof *size);
        if (size) c->size = size;
        int64_t *t0 = size ? realloc(c->t0, cap * sizeof *t0) : NULL;
        if (t0) c->t0 = t0;
        int64_t *t1 = t0 ? realloc(c->t1, cap * sizeof *t1) : NULL;
        if (t1) c->t1 = t1;
        if (!t1) {
            c->overflow = true;
            return -1;
        }
        c->cap = cap;
    }
    c->size[c->n] = rounded;
    c->t0[c->n] = c->clock;
    c->t1[c->n] = INT64_MAX;
    return (int64_t)c->n++;
}

void hx__cycle_free(hx_pool_cycle *c, int64_t i)
{
    c->clock++;
    if (i >= 0 && (size_t)i < c->n) c->t1[i] = c->clock;
}

void hx__cycle_reset(hx_pool_cycle *c)
{
    c->n = 0;
    c->clock = 0;
    c->overflow = false;
}

void hx__cycle_destroy(hx_pool_cycle *c)
{
    free(c->size);
    free(c->t0);
    free(c->t1);
    memset(c, 0, sizeof *c);
}

/* ---- the layout --------------------------------------------------------------------- */

/* Sort keys: qsort has no context argument, so each entry carries its own. */
typedef struct by_key { size_t key1, key2; size_t i; } by_key;
typedef struct by_offset { size_t offset, end; } by_offset;

static int key_desc(const void *x, const void *y)
{
    const by_key *a = x, *b = y;
    if (a->key1 != b->key1) return a->key1 > b->key1 ? -1 : 1;
    if (a->key2 != b->key2) return a->key2 > b->key2 ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int lower_offset(const void *x, const void *y)
{
    const by_offset *a = x, *b = y;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* Places the blocks in the given order, each at the lowest aligned offset
 * where it overlaps none placed before it that is live at the same time;
 * returns the extent. live: scratch for n entries. */
static size_t place(const hx_pool_cycle *c, const by_key *order, size_t align, by_offset *live,
                    size_t *offset)
{
    size_t extent = 0;
    for (size_t k = 0; k < c->n; k++) {
        size_t i = order[k].i, m = 0;
        for (size_t q = 0; q < k; q++) {
            size_t j = order[q].i;
            if (c->t0[i] < c->t1[j] && c->t0[j] < c->t1[i])
                live[m++] = (by_offset){offset[j], offset[j] + c->size[j]};
        }
        qsort(live, m, sizeof *live, lower_offset);
        size_t at = 0;
        for (size_t q = 0; q < m && live[q].offset < at + c->size[i]; q++) {
            size_t end = hx__mem_round(live[q].end, align);
            if (end > at) at = end;
        }
        offset[i] = at;
        if (at + c->size[i] > extent) extent = at + c->size[i];
    }
    return extent;
}

static void fill_order(const hx_pool_cycle *c, int rule, size_t align, by_key *order)
{
    for (size_t i = 0; i < c->n; i++) {
        size_t life = (size_t)(c->t1[i] - c->t0[i]), sz = c->size[i];
        order[i] = rule == 0 ? (by_key){sz, life, i}
                 : rule == 1 ? (by_key){life, sz, i}
                             : (by_key){sz / align * life, sz, i};
    }
    qsort(order, c->n, sizeof *order, key_desc);
}

/* Three orders: largest first (then the longest lived), longest lived
 * first (then the largest), largest size x lifetime first; then a local
 * search from the best of them: swap two blocks of the order, keep the
 * swap when the layout is no larger (a budget of about 2e7 overlap tests,
 * a deterministic sequence of swaps). None of the orders wins on every
 * trace, and the search takes a few percent more off some. */
bool hx__pool_plan_layout(const hx_pool_cycle *c, size_t align, hx_pool_plan *out)
{
    if (c->overflow || !c->n) return false;
    size_t n = c->n;
    by_key *order = malloc(n * sizeof *order);
    by_offset *live = malloc(n * sizeof *live);
    size_t *size = malloc(n * sizeof *size), *offset = malloc(n * sizeof *offset);
    size_t *best = malloc(n * sizeof *best);
    bool *taken = calloc(n, sizeof *taken);
    if (!order || !live || !size || !offset || !best || !taken) {
        free(order), free(live), free(size), free(offset), free(best), free(taken);
        return false;
    }
    size_t best_extent = SIZE_MAX;
    int best_rule = 0;
    for (int rule = 0; rule < 3; rule++) {
        fill_order(c, rule, align, order);
        size_t extent = place(c, order, align, live, offset);
        if (extent < best_extent) {
            best_extent = extent;
            best_rule = rule;
            memcpy(best, offset, n * sizeof *best);
        }
    }
    fill_order(c, best_rule, align, order);
    size_t tries = n > 1 ? 20000000 / (n * n) : 0, cur = best_extent;
    if (tries > 200) tries = 200;
    uint64_t rng = 0x9E3779B97F4A7C15u;
    for (size_t t = 0; t < tries; t++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t i = rng % n, j = (rng >> 32) % n;
        by_key tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
        size_t extent = place(c, order, align, live, offset);
        if (extent <= cur) {
            cur = extent;
            if (extent < best_extent) {
                best_extent = extent;
                memcpy(best, offset, n * sizeof *best);
            }
        } else {
            order[j] = order[i];
            order[i] = tmp;
        }
    }
    for (size_t i = 0; i < n; i++) size[i] = c->size[i];
    free(order);
    free(live);
    free(offset);
    hx__pool_plan_free(out);
    *out = (hx_pool_plan){.n = n, .size = size, .offset = best, .taken = taken,
                          .bytes = hx__mem_round(best_extent, align)};
    return true;
}

void hx__pool_plan_free(hx_pool_plan *p)
{
    free(p->size);
    free(p->offset);
    free(p->taken);
    memset(p, 0, sizeof *p);
}
