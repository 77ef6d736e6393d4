/* The row -> slot map of the row cache and the store's read-ahead (ssd.h):
 * open addressing with linear probing at most half full, deletion by
 * shifting the entries of the run back (no tombstones); or, for keys of a
 * known small range, an array indexed by the key. */
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"

int hx_emb_rowmap_init(hx_emb_rowmap *m, int64_t n)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->mask = cap - 1;
    m->direct = 0;
    if (!m->keys || !m->vals) {
        hx_emb_rowmap_free(m);
        return -1;
    }
    hx_emb_rowmap_clear(m);
    return 0;
}

int hx_emb_rowmap_init_direct(hx_emb_rowmap *m, int64_t n)
{
    m->keys = NULL;
    m->mask = 0;
    m->direct = n > 0 ? n : 1;
    m->vals = malloc((size_t)m->direct * sizeof *m->vals);
    if (!m->vals) return -1;
    hx_emb_rowmap_clear(m);
    return 0;
}

void hx_emb_rowmap_free(hx_emb_rowmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->direct = 0;
}

void hx_emb_rowmap_clear(hx_emb_rowmap *m)
{
    if (m->direct && m->vals) memset(m->vals, 0xff, (size_t)m->direct * sizeof *m->vals);
    else if (m->keys) memset(m->keys, 0xff, (m->mask + 1) * sizeof *m->keys);
}

int32_t hx_emb_rowmap_get(const hx_emb_rowmap *m, int64_t key)
{
    if (m->direct) return m->vals[key];
    for (uint64_t i = hx_emb_rowmap_home(m, key);; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) return m->vals[i];
        if (m->keys[i] < 0) return -1;
    }
}

void hx_emb_rowmap_put(hx_emb_rowmap *m, int64_t key, int32_t val)
{
    if (m->direct) {
        m->vals[key] = val;
        return;
    }
    uint64_t i = hx_emb_rowmap_home(m, key);
    while (m->keys[i] >= 0) i = (i + 1) & m->mask;
    m->keys[i] = key;
    m->vals[i] = val;
}

void hx_emb_rowmap_del(hx_emb_rowmap *m, int64_t key)
{
    if (m->direct) {
        m->vals[key] = -1;
        return;
    }
    uint64_t i = hx_emb_rowmap_home(m, key);
    while (m->keys[i] != key) {
        if (m->keys[i] < 0) return;
        i = (i + 1) & m->mask;
    }
    /* Shift back every later entry of the run that may sit at i. */
    for (uint64_t j = (i + 1) & m->mask; m->keys[j] >= 0; j = (j + 1) & m->mask) {
        uint64_t h = hx_emb_rowmap_home(m, m->keys[j]);
        /* j's entry can move to i when its home h is not in (i, j] (cyclically). */
        if (((j - h) & m->mask) >= ((j - i) & m->mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = -1;
}
