/* A worker's cache of the rows it pulled from the servers (hetex.h's
 * hx_ps_config.cache_rows; embedding/ps_client.c asks it): sets of two
 * slots by a hash of the id; a row missing from its set replaces the slot
 * used less (each pass over a slot halves its count, so that old
 * popularity fades), as MindSpore's cache keeps the frequent rows. Each
 * row keeps the version it was pulled at (the servers' applied steps),
 * which a pull sends so that a server returns only the rows that changed
 * since. One thread at a time (the table's lock). */
#include "embedding/ps_impl.h"

#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

typedef struct way {
    int64_t id, ver, uses; /* id -1: empty */
} way;

struct ps_cache {
    int64_t sets, dim;
    way *ways;    /* 2 a set */
    float *rows;  /* a row per way */
};

ps_cache *hx__ps_cache_create(int64_t rows, int64_t dim)
{
    ps_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->sets = (rows + 1) / 2;
    c->dim = dim;
    c->ways = malloc((size_t)(2 * c->sets) * sizeof *c->ways);
    c->rows = malloc((size_t)(2 * c->sets * dim) * sizeof *c->rows);
    if (!c->ways || !c->rows) {
        hx__ps_cache_free(c);
        return NULL;
    }
    for (int64_t i = 0; i < 2 * c->sets; i++) c->ways[i] = (way){-1, -1, 0};
    return c;
}

void hx__ps_cache_free(ps_cache *c)
{
    if (!c) return;
    free(c->ways);
    free(c->rows);
    free(c);
}

static way *set_of(ps_cache *c, int64_t id)
{
    return c->ways + 2 * (int64_t)(XXH3_64bits(&id, sizeof id) % (uint64_t)c->sets);
}

const float *hx__ps_cache_get(ps_cache *c, int64_t id, int64_t *ver)
{
    way *w = set_of(c, id);
    for (int k = 0; k < 2; k++)
        if (w[k].id == id) {
            w[k].uses++;
            *ver = w[k].ver;
            return c->rows + (w + k - c->ways) * c->dim;
        }
    return NULL;
}

void hx__ps_cache_put(ps_cache *c, int64_t id, int64_t ver, const float *row)
{
    way *w = set_of(c, id);
    int k = w[0].id == id ? 0 : w[1].id == id ? 1 : -1;
    if (k < 0) { /* the slot used less goes; the other's count fades */
        k = w[0].id < 0 ? 0 : w[1].id < 0 ? 1 : w[0].uses <= w[1].uses ? 0 : 1;
        w[1 - k].uses /= 2;
        w[k] = (way){id, ver, 1};
    }
    w[k].ver = ver;
    memcpy(c->rows + (w + k - c->ways) * c->dim, row, (size_t)c->dim * sizeof *c->rows);
}
