/* A DYNAMIC table's checkpoint at another layout (embedding/shard.h): the
 * keys of every saved shard that this table now holds, re-hashed to their
 * owners, move with their frequency-filter counts, expiry clocks, rows and
 * optimizer state. Rows are handed out anew, 0, 1, ... in ascending key
 * order (so the result does not depend on the saved layout); a key still
 * counting (below min_count) keeps its count and no row. */
#include "embedding/shard_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int cmp_key(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* One picked key: its map entry (key, row, count, last) and its shard. */
typedef struct pick {
    int64_t key, row, count, last, shard;
} pick;

hx_status hx__shard_rekey(hx_emb_table *const *src, int64_t nsrc, bool (*mine)(const void *ctx, int64_t key),
                          const void *ctx, hx_emb_table *dst, hx_emb_err *err)
{
    hx_emb_local *to = hx_emb_as_local(hx_emb_dynamic_local(dst));
    if (!to)
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED, "a DYNAMIC table's sharded checkpoint loads into a DYNAMIC "
                           "table in memory");
    /* every saved entry this table holds, by key */
    int64_t n = 0, cap = 0;
    pick *p = NULL;
    int64_t *w = NULL;
    hx_status st = HX_OK;
    for (int64_t s = 0; s < nsrc && !st; s++) {
        hx_emb_idmap *m = src[s] ? hx_emb_dynamic_idmap(src[s]) : NULL;
        if (!m) continue;
        int64_t nw = hx_emb_idmap_serial_size(m);
        int64_t *ws = realloc(w, (size_t)nw * sizeof *w);
        if (!ws) {
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory re-hashing a DYNAMIC table's keys");
            break;
        }
        w = ws;
        hx_emb_idmap_serial_write(m, w);
        int64_t at = 2 + w[1], ne = w[at++];
        for (int64_t e = 0; e < ne && !st; e++, at += 4) {
            if (!mine(ctx, w[at])) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                pick *q = realloc(p, (size_t)cap * sizeof *p);
                if (!q) {
                    st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory re-hashing a DYNAMIC table's keys");
                    break;
                }
                p = q;
            }
            p[n++] = (pick){w[at], w[at + 1], w[at + 2], w[at + 3], s};
        }
    }
    if (!st && n) qsort(p, (size_t)n, sizeof *p, cmp_key);
    /* the new map: rows 0.. in key order, nothing freed */
    int64_t rows = 0;
    for (int64_t i = 0; i < n && !st; i++) rows += p[i].row >= 0;
    if (!st && rows > to->base.rows)
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "the checkpoint holds %" PRId64 " keys with a row that this "
                         "rank now owns, more than its %" PRId64 " rows (the table's rows over the ranks): give "
                         "the table more rows or load it at more ranks", rows, to->base.rows);
    int64_t *words = st ? NULL : malloc((size_t)(3 + 4 * n) * sizeof *words);
    if (!st && !words) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory re-hashing a DYNAMIC table's keys");
    hx_emb_idmap *map = NULL;
    if (!st) {
        words[0] = rows;
        words[1] = 0;
        words[2] = n;
        for (int64_t i = 0, r = 0; i < n; i++) {
            int64_t *e = words + 3 + 4 * i;
            e[0] = p[i].key;
            e[1] = p[i].row >= 0 ? r++ : p[i].row;
            e[2] = p[i].count;
            e[3] = p[i].last;
        }
        st = hx_emb_dynamic_map_from(dst, words, 3 + 4 * n, &map, err);
    }
    /* nothing can fail past here: rows and state to their new rows, then the map */
    float *buf = st ? NULL : malloc((size_t)to->gstride * 2 * sizeof *buf);
    if (!st && !buf) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory re-hashing a DYNAMIC table's keys");
    if (st) hx_emb_idmap_free(map);
    int ns = hx_emb_optim_nstate(to->optim.kind);
    bool rowwise = to->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    for (int64_t i = 0, r = 0; i < n && !st; i++) {
        if (p[i].row < 0) continue;
        hx_emb_local *from = hx_emb_as_local(hx_emb_dynamic_local(src[p[i].shard]));
        int64_t l = p[i].row;
        bool ready = !from->lazy || ((atomic_load(&from->ready[l >> 6]) >> (l & 63)) & 1);
        hx_emb_local_reset_rows(&to->base, &r, 1); /* its state starts as the optimizer's */
        hx_emb_local_read_row(from, l, buf);       /* (never written: the saved shard's start) */
        hx_emb_local_write_row(to, r, buf, buf + to->gstride);
        for (int k = 0; k < ns && ready; k++) {
            hx_emb_local_read_state(from, k, l, buf);
            memcpy(to->state[k] + (rowwise ? r : r * to->gstride), buf,
                   (size_t)(rowwise ? 1 : to->base.dim) * sizeof *buf);
        }
        r++;
    }
    if (!st) hx_emb_dynamic_set_map(dst, map);
    free(buf);
    free(words);
    free(w);
    free(p);
    return st;
}
