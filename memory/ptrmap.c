/* Address -> pointer hash map (see ptrmap.h). */
#include "memory/ptrmap.h"

#include <stdlib.h>

static size_t slot_of(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static bool grow(hx_ptrmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *keys = calloc(cap, sizeof *keys);
    void **vals = malloc(cap * sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = slot_of(m->keys[i], cap);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return true;
}

bool hx__ptrmap_put(hx_ptrmap *m, uint64_t key, void *val)
{
    if ((m->n + 1) * 2 > m->cap && !grow(m)) return false;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return true;
}

void *hx__ptrmap_get(const hx_ptrmap *m, uint64_t key)
{
    if (!m->cap) return NULL;
    for (size_t i = slot_of(key, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) return m->vals[i];
    return NULL;
}

void *hx__ptrmap_del(hx_ptrmap *m, uint64_t key)
{
    if (!m->cap) return NULL;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & mask;
    if (!m->keys[i]) return NULL;
    void *val = m->vals[i];
    /* Backward shift: move later entries of the probe run into the hole
     * when their home slot does not lie between the hole and them. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        m->keys[hole] = m->keys[j];
        m->vals[hole] = m->vals[j];
        hole = j;
    }
    m->keys[hole] = 0;
    m->n--;
    return val;
}

void hx__ptrmap_free(hx_ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    *m = (hx_ptrmap){0};
}
