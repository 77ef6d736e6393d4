/* The cached table: a row store on disk with a host row cache in front
 * (see ssd.h). The cache is a local table of C slots; a call maps its row
 * ids to slots (reading the misses in, evicting as it must), then runs the
 * local table's lookup or update on the slot ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"
#include "memory/memory.h"

#define HEAD 16       /* the store's record head */
#define META_BYTES 48 /* per slot: its row, counters, stamp, two map entries */
#define FLUSH_CHUNK 4096
/* Requests in flight, and rows read ahead at a time: a step's misses
 * beyond it are read when the step needs them. */
#define HX_EMB_SSD_DEPTH 4096

struct hx_emb_ssd {
    hx_emb_table base;
    hx_emb_local *cache;
    hx_emb_store *store;
    hx_emb_init init;
    hx_emb_oob oob;
    _Atomic int64_t oob_count;
    int64_t C;
    hx_emb_slots slots;   /* which rows hold the slots (cache.h); dirty: 0 clean, 1 dirty,
                             2 dirty and written ahead since its last change */
    size_t payload, rec;
    int ns, rowwise;
    bool ahead_on;        /* write ahead (not no_write_ahead) */
    /* grow-only scratch */
    char *io;
    size_t io_cap;
    int64_t *wrows, *rrows;
    int64_t scratch_cap;
    int64_t *remap;
    int64_t remap_cap;
    float *tmp;
    char *ahead;          /* the records of the write-ahead in flight */
    int64_t *ahead_rows, ahead_cap;
    int64_t expect;       /* victims the next call that misses will want: the last one's */
    uint64_t cold;
};

static const hx_emb_ops ssd_ops;

hx_emb_ssd *hx_emb_as_ssd(hx_emb_table *t) { return t && t->ops == &ssd_ops ? (hx_emb_ssd *)t : NULL; }
hx_emb_local *hx_emb_ssd_cache(hx_emb_ssd *t) { return t->cache; }
hx_emb_store *hx_emb_ssd_store(hx_emb_ssd *t) { return t->store; }
_Atomic int64_t *hx_emb_ssd_oob_counter(hx_emb_ssd *t) { return &t->oob_count; }

void hx_emb_ssd_describe(const hx_emb_ssd *t, hx_dtype *dtype, hx_emb_optim_kind *optim, hx_emb_init *init)
{
    *dtype = t->cache->dtype;
    *optim = t->cache->optim.kind;
    *init = t->init;
}

void hx_emb_ssd_set_init(hx_emb_ssd *t, const hx_emb_init *init)
{
    t->init = *init;
    t->cache->init = *init;
}

/* ---- records <-> slots --------------------------------------------------------------------- */

static size_t state_floats(const hx_emb_ssd *t) { return t->rowwise ? 1 : (size_t)t->base.dim; }

static void pack(const hx_emb_ssd *t, int64_t slot, char *rec)
{
    hx_emb_local_pack_row(t->cache, slot, t->ns, t->rowwise, rec + HEAD);
}

static void unpack(hx_emb_ssd *t, int64_t slot, const char *rec)
{
    hx_emb_local_unpack_row(t->cache, slot, t->ns, t->rowwise, rec + HEAD);
}

/* ---- scratch ------------------------------------------------------------------------------- */

static bool grow_i64(int64_t **p, int64_t n)
{
    int64_t *q = realloc(*p, (size_t)(n ? n : 1) * sizeof *q);
    if (!q) return false;
    *p = q;
    return true;
}

/* Room for a call of n positions (n distinct rows at most) and its I/O. */
static hx_status scratch(hx_emb_ssd *t, int64_t n, hx_emb_err *err)
{
    int64_t u = n < t->C ? n : t->C; /* misses and victims of one call */
    bool ok = true;
    if (n > t->scratch_cap) {
        ok = grow_i64(&t->wrows, n) && grow_i64(&t->rrows, n);
        if (ok) t->scratch_cap = n;
    }
    ok = ok && hx_emb_slots_room(&t->slots, n);
    size_t need = (size_t)(2 * (u > FLUSH_CHUNK ? u : FLUSH_CHUNK)) * t->rec;
    if (ok && need > t->io_cap) {
        free(t->io);
        t->io = aligned_alloc(4096, (need + 4095) / 4096 * 4096);
        t->io_cap = t->io ? need : 0;
        ok = t->io != NULL;
    }
    return ok ? HX_OK : hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding row cache: out of memory "
                                    "for a call of %lld ids", (long long)n);
}

/* ---- making rows resident ------------------------------------------------------------------ */

/* Writes dirty victims back and reads misses, then installs the misses in
 * the victims' slots (and free ones). On failure the cache is as it was
 * (victims still resident, dirty as they were). */
static hx_status fill(hx_emb_ssd *t, hx_emb_err *err)
{
    hx_emb_store_settle(t->store); /* what was written ahead is clean now */
    hx_emb_slots *s = &t->slots;
    hx_emb_slots_victims(s);
    int64_t nw = 0, nr = 0;
    char *wbuf = t->io, *rbuf = t->io + (size_t)s->nv * t->rec;
    for (int64_t i = 0; i < s->nv; i++) {
        int64_t k = s->victim[i];
        if (!s->dirty[k]) continue;
        pack(t, k, wbuf + (size_t)nw * t->rec);
        t->wrows[nw++] = s->slot_row[k];
    }
    for (int64_t m = 0; m < s->nmiss; m++)
        if (hx_emb_store_has(t->store, s->miss[m])) t->rrows[nr++] = s->miss[m];
    hx_status st = hx_emb_store_batch(t->store, t->wrows, wbuf, nw, t->rrows, rbuf, nr, err);
    if (st) {
        hx_emb_slots_cancel(s);
        return st;
    }
    hx_emb_slots_install(s);
    int64_t read = 0;
    for (int64_t m = 0; m < s->nmiss; m++) {
        int64_t k = s->mslot[m], r = s->miss[m];
        if (read < nr && t->rrows[read] == r) {
            unpack(t, k, rbuf + (size_t)read++ * t->rec);
        } else {
            hx_emb_local_init_row_as(t->cache, k, r, t->tmp);
            t->cold++;
        }
    }
    return HX_OK;
}

/* ---- writing ahead ---------------------------------------------------------------------------- */

static void ahead_done(void *ctx, int64_t row, bool ok)
{
    hx_emb_ssd *t = ctx;
    int32_t k = hx_emb_rowmap_get(&t->slots.map, row);
    if (k < 0 || t->slots.dirty[k] != 2) return; /* changed since it was packed: still dirty */
    t->slots.dirty[k] = ok ? 0 : 1;
    t->slots.writebacks += ok;
}

/* The clock's next victims are the slots ahead of its hand whose counters
 * are zero, then those at one; the dirty ones among the next `expect` of
 * them (not used by this call) are written now, while the call and the rest of the step
 * compute, so that the eviction that comes finds them clean. Rows stay
 * resident and are read and updated as ever (an update makes a row dirty
 * again). Best effort: out of memory or a write-ahead still in flight
 * skip it; a failed write leaves the row dirty. */
static void write_ahead(hx_emb_ssd *t)
{
    int64_t want = t->expect - t->slots.n_free;
    if (!t->ahead_on || want <= 0 || hx_emb_store_ahead_busy(t->store)) return;
    if (want > t->ahead_cap) {
        char *b = aligned_alloc(4096, hx__mem_round((size_t)want * t->rec, 4096));
        int64_t *r = b ? realloc(t->ahead_rows, (size_t)want * sizeof *r) : NULL;
        if (!r) {
            free(b);
            return;
        }
        free(t->ahead);
        t->ahead = b;
        t->ahead_rows = r;
        t->ahead_cap = want;
    }
    /* The hand takes counters at zero first, then (after halving them)
     * those at one: two passes, in the hand's order. */
    int64_t n = 0, seen = 0, window = 4 * want + 4096;
    for (int level = 0; level < 2 && seen < want; level++) {
        int64_t k = t->slots.hand;
        for (int64_t i = 0; i < t->C && i < window && seen < want; i++, k = k + 1 == t->C ? 0 : k + 1) {
            if (t->slots.slot_row[k] < 0 || t->slots.stamp[k] == t->slots.call || t->slots.freq[k] != level) continue;
            seen++;
            if (t->slots.dirty[k] != 1) continue;
            pack(t, k, t->ahead + (size_t)n * t->rec);
            t->ahead_rows[n++] = t->slots.slot_row[k];
            t->slots.dirty[k] = 2;
        }
    }
    if (n && !hx_emb_store_write_ahead(t->store, t->ahead_rows, t->ahead, n, ahead_done, t))
        for (int64_t i = 0; i < n; i++) t->slots.dirty[hx_emb_rowmap_get(&t->slots.map, t->ahead_rows[i])] = 1;
}

/* Makes the rows of n ids resident and writes their slots to out: -1 for
 * the padding id (when has_padding), -2 for ids outside [0, rows). A
 * lookup counts its rows and hits; other calls (an update after its
 * lookup, reads and writes of rows) count only the rows they miss. */
static hx_status ensure(hx_emb_ssd *t, const void *ids, hx_dtype dt, int64_t n, int has_padding,
                        int64_t padding_id, bool lookup, int64_t *out, hx_emb_err *err)
{
    hx_status st = scratch(t, n, err);
    if (st) return st;
    hx_emb_store_poll(t->store);
    hx_emb_slots_begin(&t->slots);
    int64_t used = hx_emb_slots_map(&t->slots, ids, dt, n, has_padding, padding_id, t->base.rows, lookup, NULL, out);
    if (used > t->C) {
        hx_emb_slots_begin(&t->slots); /* unpins */
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                           "embedding row cache: one call touches %lld distinct rows but the cache "
                           "holds %lld; raise cache_bytes to at least %lld bytes",
                           (long long)used, (long long)t->C,
                           (long long)(used * (int64_t)(t->payload + META_BYTES)));
    }
    if (t->slots.nmiss) {
        st = fill(t, err);
        if (st) return st;
        t->expect = t->slots.nmiss;
    }
    hx_emb_slots_resolve(&t->slots, out, n);
    write_ahead(t);
    return HX_OK;
}

static hx_status remap_room(hx_emb_ssd *t, int64_t n, hx_emb_err *err)
{
    if (n <= t->remap_cap) return HX_OK;
    if (!grow_i64(&t->remap, n))
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding row cache: out of memory");
    t->remap_cap = n;
    return HX_OK;
}

/* q's rows made resident, and q over their slots in *mq (ids in t->remap). */
static hx_status map_query(hx_emb_ssd *t, const hx_emb_query *q, bool lookup, hx_emb_query *mq,
                           hx_emb_err *err)
{
    hx_status st = remap_room(t, hx_emb_slot_query_len(q), err);
    if (!st) st = ensure(t, q->ids, q->id_dtype, q->n, q->has_padding, q->padding_id, lookup, t->remap, err);
    if (st) return st;
    hx_emb_slot_query(q, t->remap, mq);
    return HX_OK;
}

/* ---- the table's calls ---------------------------------------------------------------------- */

hx_status hx_emb_ssd_lookup(hx_emb_ssd *t, const hx_emb_query *q, hx_emb_oob oob,
                            _Atomic int64_t *oob_count, float *out, int64_t *argmax, hx_emb_err *err)
{
    int64_t nbags;
    hx_status st = hx_emb_query_check(q, &nbags, err);
    if (!st && !out && nbags > 0) st = hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding lookup: out is NULL");
    if (!st) st = hx_emb_check_ids(q, t->base.rows, oob, oob_count, "embedding lookup", err);
    hx_emb_query mq;
    if (!st) st = map_query(t, q, true, &mq, err);
    if (!st) st = hx_emb_local_lookup(t->cache, &mq, HX_EMB_OOB_ZERO, NULL, out, argmax, err);
    return st;
}

/* Marks the slots of n mapped positions dirty. */
static void mark_dirty(hx_emb_ssd *t, const int64_t *slots, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (slots[j] >= 0) t->slots.dirty[slots[j]] = 1;
}

hx_status hx_emb_ssd_backward_update(hx_emb_ssd *t, const hx_emb_query *q, const hx_emb_grad_input *gi,
                                     int64_t step, hx_emb_oob oob, hx_emb_workspace *ws, hx_emb_err *err)
{
    int64_t nbags;
    hx_status st = hx_emb_query_check(q, &nbags, err);
    if (!st) st = hx_emb_check_ids(q, t->base.rows, oob, NULL, "embedding update", err);
    hx_emb_query mq;
    if (!st) st = map_query(t, q, false, &mq, err);
    if (!st) st = hx_emb_local_backward_update(t->cache, &mq, gi, step, HX_EMB_OOB_ZERO, ws, err);
    if (!st) mark_dirty(t, t->remap, q->n);
    return st;
}

hx_status hx_emb_ssd_apply(hx_emb_ssd *t, const hx_emb_sparse_grad *g, int64_t step, int nthreads,
                           hx_emb_oob oob, hx_emb_err *err)
{
    if (!g || g->n < 0 || (g->n > 0 && !g->ids))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding update: bad sparse gradient");
    for (int64_t i = 0; oob == HX_EMB_OOB_ERROR && i < g->n; i++)
        if (g->ids[i] < 0 || g->ids[i] >= t->base.rows)
            return hx_emb_fail(err, HX_ERR_INDEX, "embedding update: id %lld at position %lld is outside "
                               "the table's rows [0, %lld)", (long long)g->ids[i], (long long)i,
                               (long long)t->base.rows);
    hx_status st = remap_room(t, g->n, err);
    if (!st) st = ensure(t, g->ids, HX_DTYPE_I64, g->n, 0, 0, false, t->remap, err);
    if (st) return st;
    hx_emb_sparse_grad g2 = *g;
    g2.ids = t->remap;
    st = hx_emb_local_apply(t->cache, &g2, step, nthreads, HX_EMB_OOB_ZERO, err);
    if (!st) mark_dirty(t, t->remap, g->n);
    return st;
}

void hx_emb_ssd_reset_rows(hx_emb_ssd *t, const int64_t *rows, int64_t n)
{
    hx_emb_store_forget(t->store, rows, n);
    for (int64_t i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= t->base.rows) continue;
        int32_t k = hx_emb_rowmap_get(&t->slots.map, rows[i]);
        if (k < 0) continue;
        hx_emb_local_init_row_as(t->cache, k, rows[i], t->tmp);
        t->slots.dirty[k] = 0;
    }
}

void hx_emb_ssd_prefetch(hx_emb_ssd *t, const int64_t *rows, int64_t n)
{
    if (!rows || n <= 0 || remap_room(t, n, NULL)) return;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (rows[i] >= 0 && rows[i] < t->base.rows && hx_emb_rowmap_get(&t->slots.map, rows[i]) < 0)
            t->remap[m++] = rows[i];
    hx_emb_store_prefetch(t->store, t->remap, m);
}

/* Rows through the cache, in calls of at most C distinct rows. fn works
 * on the resident slots of rows[i0 .. i0 + len). */
typedef void (*slot_fn)(hx_emb_ssd *t, const int64_t *slots, int64_t i0, int64_t len, void *ctx);

static hx_status in_chunks(hx_emb_ssd *t, const int64_t *rows, int64_t n, slot_fn fn, void *ctx,
                           hx_emb_err *err)
{
    for (int64_t i0 = 0; i0 < n;) {
        int64_t len = n - i0 < t->C ? n - i0 : t->C;
        hx_status st = remap_room(t, len, err);
        if (!st) st = ensure(t, rows + i0, HX_DTYPE_I64, len, 0, 0, false, t->remap, err);
        if (st) return st;
        fn(t, t->remap, i0, len, ctx);
        i0 += len;
    }
    return HX_OK;
}

typedef struct rw_ctx {
    float *out;
    const float *src;
    int k;
} rw_ctx;

static void read_fn(hx_emb_ssd *t, const int64_t *slots, int64_t i0, int64_t len, void *vc)
{
    rw_ctx *c = vc;
    int64_t dim = t->base.dim;
    for (int64_t i = 0; i < len; i++) {
        float *dst = c->out + (i0 + i) * dim;
        if (slots[i] < 0) memset(dst, 0, (size_t)dim * sizeof *dst);
        else {
            hx_emb_local_read_row(t->cache, slots[i], t->tmp);
            memcpy(dst, t->tmp, (size_t)dim * sizeof *dst);
        }
    }
}

static void state_fn(hx_emb_ssd *t, const int64_t *slots, int64_t i0, int64_t len, void *vc)
{
    rw_ctx *c = vc;
    int64_t w = (int64_t)state_floats(t);
    for (int64_t i = 0; i < len; i++)
        hx_emb_local_read_state(t->cache, c->k, slots[i] < 0 ? -1 : slots[i], c->out + (i0 + i) * w);
}

static void write_fn(hx_emb_ssd *t, const int64_t *slots, int64_t i0, int64_t len, void *vc)
{
    rw_ctx *c = vc;
    for (int64_t i = 0; i < len; i++) {
        hx_emb_local_write_row(t->cache, slots[i], c->src + (i0 + i) * t->base.dim, t->tmp);
        t->slots.dirty[slots[i]] = 1;
    }
}

hx_status hx_emb_ssd_read_rows(hx_emb_ssd *t, const int64_t *rows, int64_t n, float *out, hx_emb_err *err)
{
    rw_ctx c = {out, NULL, 0};
    return in_chunks(t, rows, n, read_fn, &c, err);
}

hx_status hx_emb_ssd_read_state(hx_emb_ssd *t, int k, const int64_t *rows, int64_t n, float *out,
                                hx_emb_err *err)
{
    rw_ctx c = {out, NULL, k};
    return in_chunks(t, rows, n, state_fn, &c, err);
}

hx_status hx_emb_ssd_write_rows(hx_emb_ssd *t, const int64_t *rows, int64_t n, const float *src,
                                hx_emb_err *err)
{
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= t->base.rows)
            return hx_emb_fail(err, HX_ERR_INDEX, "embedding write: row %lld at position %lld is outside "
                               "[0, %lld)", (long long)rows[i], (long long)i, (long long)t->base.rows);
    rw_ctx c = {NULL, src, 0};
    return in_chunks(t, rows, n, write_fn, &c, err);
}

hx_status hx_emb_ssd_set_optim(hx_emb_ssd *t, const hx_emb_optim *optim, hx_emb_err *err)
{
    if (optim->kind != t->cache->optim.kind)
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED,
                           "a table on disk (ssd_path) keeps the optimizer kind it was created with "
                           "(%s): its records hold that optimizer's state; create the table with %s",
                           hx_emb_optim_name(t->cache->optim.kind), hx_emb_optim_name(optim->kind));
    return hx_emb_local_set_optim(&t->cache->base, optim, 1, err);
}

hx_status hx_emb_ssd_flush(hx_emb_ssd *t, hx_emb_err *err)
{
    hx_emb_store_settle(t->store);
    hx_status st = scratch(t, t->C < FLUSH_CHUNK ? t->C : FLUSH_CHUNK, err); /* rows of a chunk */
    for (int64_t k0 = 0; !st && k0 < t->C;) {
        int64_t nw = 0, k = k0;
        for (; k < t->C && nw < FLUSH_CHUNK; k++) {
            if (!t->slots.dirty[k]) continue;
            pack(t, k, t->io + (size_t)nw * t->rec);
            t->wrows[nw] = t->slots.slot_row[k];
            t->slots.victim[nw++] = k;
        }
        st = hx_emb_store_batch(t->store, t->wrows, t->io, nw, NULL, NULL, 0, err);
        for (int64_t i = 0; !st && i < nw; i++) t->slots.dirty[t->slots.victim[i]] = 0;
        t->slots.writebacks += st ? 0 : (uint64_t)nw;
        k0 = k;
    }
    return st;
}

void hx_emb_ssd_drop_cache(hx_emb_ssd *t)
{
    if (t->store) hx_emb_store_settle(t->store); /* none yet at creation */
    hx_emb_slots_drop(&t->slots);
}

void hx_emb_ssd_stats_get(const hx_emb_ssd *t, hx_emb_ssd_stats *out)
{
    *out = (hx_emb_ssd_stats){.lookups = t->slots.lookups, .hits = t->slots.hits, .cold = t->cold, .evictions = t->slots.evictions,
                              .writebacks = t->slots.writebacks, .cache_rows = t->C};
    for (int64_t k = 0; k < t->C; k++) {
        out->resident += t->slots.slot_row[k] >= 0;
        out->dirty += t->slots.dirty[k] != 0;
    }
    hx_emb_store_stats_get(t->store, &out->store);
}

/* ---- the interface -------------------------------------------------------------------------- */

static hx_status ops_lookup(hx_emb_table *tt, const hx_emb_query *q, float *out, int64_t *argmax,
                            hx_emb_err *err)
{
    hx_emb_ssd *t = (hx_emb_ssd *)tt;
    return hx_emb_ssd_lookup(t, q, t->oob, &t->oob_count, out, argmax, err);
}

static hx_status ops_apply(hx_emb_table *tt, const hx_emb_sparse_grad *g, int64_t step, int nthreads,
                           hx_emb_err *err)
{
    hx_emb_ssd *t = (hx_emb_ssd *)tt;
    return hx_emb_ssd_apply(t, g, step, nthreads, t->oob, err);
}

static hx_status ops_backward_update(hx_emb_table *tt, const hx_emb_query *q, const hx_emb_grad_input *gi,
                                     int64_t step, hx_emb_workspace *ws, hx_emb_err *err)
{
    hx_emb_ssd *t = (hx_emb_ssd *)tt;
    return hx_emb_ssd_backward_update(t, q, gi, step, t->oob, ws, err);
}

static hx_status ops_save(hx_emb_table *tt, const char *path, hx_emb_err *err)
{
    return hx_emb_ssd_save_with((hx_emb_ssd *)tt, path, NULL, 0, err);
}

static hx_status ops_load(hx_emb_table *tt, const char *path, hx_emb_err *err)
{
    return hx_emb_ssd_load_with((hx_emb_ssd *)tt, path, NULL, NULL, err);
}

static void ops_free(hx_emb_table *tt)
{
    hx_emb_ssd *t = (hx_emb_ssd *)tt;
    hx_emb_table_free(t->cache ? &t->cache->base : NULL);
    hx_emb_store_close(t->store);
    hx_emb_slots_free(&t->slots);
    free(t->io);
    free(t->wrows);
    free(t->rrows);
    free(t->remap);
    free(t->tmp);
    free(t->ahead);
    free(t->ahead_rows);
    free(t);
}

static const hx_emb_ops ssd_ops = {
    "ssd", ops_lookup, ops_apply, ops_backward_update, ops_save, ops_load, ops_free,
};

/* What the payload means, for a reused file: dim, dtype and optimizer. */
static uint64_t shape_of(const hx_emb_table_config *cfg)
{
    return (uint64_t)cfg->dim | (uint64_t)cfg->dtype << 32 | (uint64_t)cfg->optim.kind << 40;
}

hx_status hx_emb_ssd_create(const hx_emb_table_config *cfg, hx_emb_table **out, hx_emb_err *err)
{
    *out = NULL;
    /* The cache: a local table of C slots, eager with zeros (its slots are
     * filled as rows come in), taking the table's initialiser after. */
    hx_emb_table_config cc = *cfg;
    cc.init = (hx_emb_init){HX_EMB_INIT_ZEROS, 0, 0, 0};
    cc.lazy_init = 0;
    cc.backing_file = NULL;
    cc.ssd_path = NULL;
    cc.oob = HX_EMB_OOB_ZERO;
    int64_t stride = hx_emb_row_stride(cfg->dim, cfg->dtype);
    int64_t gstride = hx_emb_row_stride(cfg->dim, HX_DTYPE_F32);
    int ns = hx_emb_optim_nstate(cfg->optim.kind), rowwise = cfg->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    size_t esize = cfg->dtype == HX_DTYPE_F32 ? 4 : 2;
    size_t slot_bytes = (size_t)stride * esize + (size_t)ns * (rowwise ? 4 : (size_t)gstride * 4) + META_BYTES;
    int64_t C = (int64_t)(cfg->cache_bytes / slot_bytes);
    if (C > cfg->rows) C = cfg->rows;
    if (C > INT32_MAX) C = INT32_MAX;
    if (cfg->rows < 1 || cfg->dim < 1 || cfg->dim > ((int64_t)1 << 20)) C = 1; /* the local table says why */
    if (C < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding table on disk: cache_bytes %zu holds no row (a row with its "
                           "optimizer state takes %zu bytes); give the cache at least the rows one "
                           "step touches", cfg->cache_bytes, slot_bytes);
    cc.rows = C;
    hx_emb_table *cache;
    hx_status st = hx_emb_local_create(&cc, &cache, err);
    if (st) return st;
    if (cfg->rows > (int64_t)UINT32_MAX - 2) {
        hx_emb_table_free(cache);
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding table on disk: %lld rows; a row store holds "
                           "up to 2^32 - 2", (long long)cfg->rows);
    }
    hx_emb_ssd *t = calloc(1, sizeof *t);
    if (!t) {
        hx_emb_table_free(cache);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding table on disk: out of memory");
    }
    t->base = (hx_emb_table){&ssd_ops, cfg->rows, cfg->dim};
    t->cache = hx_emb_as_local(cache);
    t->cache->init = cfg->init;
    t->init = cfg->init;
    t->oob = cfg->oob;
    t->C = C;
    t->ahead_on = !cfg->no_write_ahead;
    t->ns = ns;
    t->rowwise = rowwise;
    t->payload = (size_t)cfg->dim * esize + (size_t)ns * (rowwise ? 4 : (size_t)cfg->dim * 4);
    t->tmp = malloc((size_t)gstride * sizeof *t->tmp);
    if (!t->tmp || hx_emb_slots_init(&t->slots, C, 0)) {
        ops_free(&t->base);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding table on disk: out of memory for a "
                           "cache of %lld rows", (long long)C);
    }
    t->slots.freq_max = (uint8_t)(cfg->cache_counter_max >= 1 && cfg->cache_counter_max < HX_EMB_FREQ_MAX
                                      ? cfg->cache_counter_max : HX_EMB_FREQ_MAX);
    hx_emb_store_config sc = {cfg->ssd_path, cfg->rows, t->payload, shape_of(cfg), HX_EMB_SSD_DEPTH, true};
    st = hx_emb_store_open(&sc, &t->store, err);
    if (st) {
        ops_free(&t->base);
        return st;
    }
    t->rec = hx_emb_store_rec(t->store);
    *out = &t->base;
    return HX_OK;
}

hx_status hx_emb_fixed_create(const hx_emb_table_config *cfg, hx_emb_table **out, hx_emb_err *err)
{
    if (cfg && out && cfg->device_cache_rows > 0) return hx_emb_devcache_create(cfg, out, err);
    if (!cfg || !cfg->ssd_path) return hx_emb_local_create(cfg, out, err);
    if (!out) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding table: out is NULL");
    if (cfg->backing_file)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding table: backing_file and ssd_path are two ways to keep a table "
                           "on disk; give one");
    return hx_emb_ssd_create(cfg, out, err);
}
