/* The device cache of hot rows (cache.h): a local table of C slots in
 * front of a host local table. A call maps its rows to slots (misses
 * copied in from the host, dirty victims written back, one batch per
 * call), then runs the local table's lookup or update on the slot ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"

struct hx_emb_devcache {
    hx_emb_table base;
    hx_emb_local *host, *cache;
    hx_emb_local *spare;          /* bound to a device: the host-page slots, kept so that
                                     taking the cache back cannot fail; else NULL */
    hx_emb_slots slots;
    int64_t C;
    hx_emb_oob oob;
    int ns, rowwise;
    size_t pbytes, sfloats, rec; /* bytes of a row's params, floats of a state row, a record */
    /* one call's batch: records of the dirty victims, then of the misses */
    char *stage;
    size_t stage_cap;
    uint8_t *cold;                /* per miss: came in as its initial value */
    int64_t *wrows;               /* rows of the dirty victims (C) */
    int64_t *remap;
    int64_t remap_cap;
    /* rows copied in ahead: row -> record of pbuf (C records; prow: each
     * record's row, -1 free; pgen: the prefetch call that staged it) */
    hx_emb_rowmap pmap;
    char *pbuf;
    uint8_t *pcold;
    int64_t *prow, *pfree, npfree;
    uint64_t *pgen, gen;
    float *tmp;
    hx_emb_table_config ccfg; /* the cache's local table, as created */
    char what[200];           /* names the slots in a device's memory report */
    uint64_t rows_in, rows_out, rows_init, prefetched;
    int64_t calls;
    hx_emb_devcache_faults faults;
};

static const hx_emb_ops devcache_ops;

hx_emb_devcache *hx_emb_as_devcache(hx_emb_table *t)
{
    return t && t->ops == &devcache_ops ? (hx_emb_devcache *)t : NULL;
}
hx_emb_local *hx_emb_devcache_host(hx_emb_devcache *t) { return t->host; }
void hx_emb_devcache_set_faults(hx_emb_devcache *t, const hx_emb_devcache_faults *f) { t->faults = *f; }

/* ---- records: a row's params (storage dtype) and state arrays ------------------------ */

static void pack(const hx_emb_devcache *t, const hx_emb_local *L, int64_t r, char *rec)
{
    hx_emb_local_pack_row(L, r, t->ns, t->rowwise, rec);
}

static void unpack(const hx_emb_devcache *t, hx_emb_local *L, int64_t r, const char *rec)
{
    hx_emb_local_unpack_row(L, r, t->ns, t->rowwise, rec);
}

/* Whether host row r is a lazy row not yet written (its values are its
 * initial value and start state, not in storage). */
static bool host_cold(const hx_emb_devcache *t, int64_t r)
{
    const hx_emb_local *h = t->host;
    return h->lazy && !((atomic_load_explicit(&h->ready[r >> 6], memory_order_relaxed) >> (r & 63)) & 1);
}

/* Host row r into record rec, or *cold when it is a lazy row not yet
 * written: nothing is copied, the slot takes its initial value where it
 * lives (counted apart). */
static void copy_in(hx_emb_devcache *t, int64_t r, char *rec, uint8_t *cold)
{
    *cold = host_cold(t, r);
    if (*cold) {
        t->rows_init++;
        return;
    }
    pack(t, t->host, r, rec);
    t->rows_in++;
}

/* Slot k from a record, or as host row r's initial value. */
static void install(hx_emb_devcache *t, int64_t k, int64_t r, const char *rec, bool cold)
{
    t->cache->init = t->host->init; /* a load may have changed it */
    if (cold) hx_emb_local_init_row_as(t->cache, k, hx_emb_local_init_of(t->host, r), t->tmp);
    else unpack(t, t->cache, k, rec);
}

/* A record of slot k written back to host row r. */
/* Frees row r's read-ahead record, if it has one. */
static void unstage(hx_emb_devcache *t, int64_t r)
{
    int32_t p = hx_emb_rowmap_get(&t->pmap, r);
    if (p < 0) return;
    hx_emb_rowmap_del(&t->pmap, r);
    t->prow[p] = -1;
    t->pfree[t->npfree++] = p;
}

/* A staged row is not resident, and becomes resident only through a miss,
 * which takes its staged copy: write-backs (of resident rows) never make
 * one stale. */
static void write_back(hx_emb_devcache *t, int64_t r, const char *rec)
{
    t->rows_out++;
    if (r == t->faults.skip_writeback_row) return;
    hx_emb_local_materialise(t->host, r, t->tmp);
    unpack(t, t->host, r, rec);
}

/* ---- making rows resident --------------------------------------------------------------- */

static hx_status room(hx_emb_devcache *t, int64_t n, hx_emb_err *err)
{
    int64_t u = n < t->C ? n : t->C;
    size_t need = (size_t)(2 * (u ? u : 1)) * t->rec;
    bool ok = hx_emb_slots_room(&t->slots, n);
    if (ok && need > t->stage_cap) {
        char *s = realloc(t->stage, need);
        uint8_t *c = realloc(t->cold, (size_t)u ? (size_t)u : 1);
        if (s) t->stage = s;
        if (c) t->cold = c;
        ok = s && c;
        if (ok) t->stage_cap = need;
    }
    if (ok && n > t->remap_cap) {
        int64_t *q = realloc(t->remap, (size_t)(n ? n : 1) * sizeof *q);
        ok = q != NULL;
        if (ok) {
            t->remap = q;
            t->remap_cap = n;
        }
    }
    return ok ? HX_OK : hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of memory "
                                    "for a call of %lld ids", (long long)n);
}

/* The batch of a call's misses: dirty victims out, misses in. */
static void fill(hx_emb_devcache *t)
{
    hx_emb_slots *s = &t->slots;
    hx_emb_slots_victims(s);
    int64_t nw = 0;
    char *wbuf = t->stage, *rbuf = t->stage + (size_t)s->nv * t->rec;
    int64_t *wrows = t->wrows;
    for (int64_t i = 0; i < s->nv; i++) {
        int64_t k = s->victim[i];
        if (!s->dirty[k]) continue;
        pack(t, t->cache, k, wbuf + (size_t)nw * t->rec);
        wrows[nw++] = s->slot_row[k];
    }
    for (int64_t m = 0; m < s->nmiss; m++) {
        int32_t p = hx_emb_rowmap_get(&t->pmap, s->miss[m]);
        char *rec = rbuf + (size_t)m * t->rec;
        if (p >= 0) {
            t->cold[m] = t->pcold[p];
            if (!t->cold[m]) memcpy(rec, t->pbuf + (size_t)p * t->rec, t->rec);
            unstage(t, s->miss[m]);
        } else {
            copy_in(t, s->miss[m], rec, &t->cold[m]);
        }
    }
    for (int64_t i = 0; i < nw; i++) write_back(t, wrows[i], wbuf + (size_t)i * t->rec);
    hx_emb_slots_install(s);
    for (int64_t m = 0; m < s->nmiss; m++)
        install(t, s->mslot[m], s->miss[m], rbuf + (size_t)m * t->rec, t->cold[m]);
}

/* The slots of n ids into out (t->remap): -1 padding, -2 outside [0, rows). */
static hx_status ensure(hx_emb_devcache *t, const void *ids, hx_dtype dt, int64_t n, int has_padding,
                        int64_t padding_id, bool lookup, hx_emb_err *err)
{
    hx_status st = room(t, n, err);
    if (st) return st;
    hx_emb_slots_begin(&t->slots);
    int64_t used = hx_emb_slots_map(&t->slots, ids, dt, n, has_padding, padding_id, t->base.rows, lookup, t->remap);
    if (used > t->C) {
        hx_emb_slots_begin(&t->slots); /* unpins */
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                           "embedding device cache: one call touches %lld distinct rows but the cache "
                           "holds %lld; raise device_cache_rows to at least %lld", (long long)used,
                           (long long)t->C, (long long)used);
    }
    t->calls++;
    if (t->slots.nmiss) fill(t);
    hx_emb_slots_resolve(&t->slots, t->remap, n);
    return HX_OK;
}

/* q over the slots of its rows in *mq (ids in t->remap, offsets after them). */
static hx_status map_query(hx_emb_devcache *t, const hx_emb_query *q, bool lookup, hx_emb_query *mq,
                           hx_emb_err *err)
{
    hx_status st = room(t, hx_emb_slot_query_len(q), err);
    if (!st) st = ensure(t, q->ids, q->id_dtype, q->n, q->has_padding, q->padding_id, lookup, err);
    if (st) return st;
    hx_emb_slot_query(q, t->remap, mq);
    return HX_OK;
}

static void mark_dirty(hx_emb_devcache *t, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (t->remap[j] >= 0) t->slots.dirty[t->remap[j]] = 1;
}

/* ---- the table's calls ------------------------------------------------------------------ */

hx_status hx_emb_devcache_lookup(hx_emb_devcache *t, const hx_emb_query *q, hx_emb_oob oob,
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

hx_status hx_emb_devcache_backward_update(hx_emb_devcache *t, const hx_emb_query *q, const hx_emb_grad_input *gi,
                                          int64_t step, hx_emb_oob oob, hx_emb_workspace *ws, hx_emb_err *err)
{
    int64_t nbags;
    hx_status st = hx_emb_query_check(q, &nbags, err);
    if (!st) st = hx_emb_check_ids(q, t->base.rows, oob, NULL, "embedding update", err);
    hx_emb_query mq;
    if (!st) st = map_query(t, q, false, &mq, err);
    if (!st) st = hx_emb_local_backward_update(t->cache, &mq, gi, step, HX_EMB_OOB_ZERO, ws, err);
    if (!st) mark_dirty(t, q->n);
    return st;
}

hx_status hx_emb_devcache_apply(hx_emb_devcache *t, const hx_emb_sparse_grad *g, int64_t step, int nthreads,
                                hx_emb_oob oob, hx_emb_err *err)
{
    if (!g || g->n < 0 || (g->n > 0 && !g->ids))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding update: bad sparse gradient");
    for (int64_t i = 0; oob == HX_EMB_OOB_ERROR && i < g->n; i++)
        if (g->ids[i] < 0 || g->ids[i] >= t->base.rows)
            return hx_emb_fail(err, HX_ERR_INDEX, "embedding update: id %lld at position %lld is outside "
                               "the table's rows [0, %lld)", (long long)g->ids[i], (long long)i,
                               (long long)t->base.rows);
    hx_status st = ensure(t, g->ids, HX_DTYPE_I64, g->n, 0, 0, false, err);
    if (st) return st;
    hx_emb_sparse_grad g2 = *g;
    g2.ids = t->remap;
    st = hx_emb_local_apply(t->cache, &g2, step, nthreads, HX_EMB_OOB_ZERO, err);
    if (!st) mark_dirty(t, g->n);
    return st;
}

void hx_emb_devcache_reset_rows(hx_emb_devcache *t, const int64_t *rows, int64_t n)
{
    hx_emb_local_reset_rows(&t->host->base, rows, n);
    for (int64_t i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= t->base.rows) continue;
        unstage(t, rows[i]);
        int32_t k = hx_emb_rowmap_get(&t->slots.map, rows[i]);
        if (k < 0) continue;
        hx_emb_local_init_row_as(t->cache, k, hx_emb_local_init_of(t->host, rows[i]), t->tmp);
        t->slots.dirty[k] = 0;
    }
}

void hx_emb_devcache_prefetch(hx_emb_devcache *t, const int64_t *rows, int64_t n)
{
    /* Records staged before the previous call were for a step that has run. */
    t->gen++;
    for (int64_t p = 0; p < t->C; p++)
        if (t->prow[p] >= 0 && t->pgen[p] + 1 < t->gen) unstage(t, t->prow[p]);
    for (int64_t i = 0; i < n && t->npfree > 0; i++) {
        int64_t r = rows[i];
        if (r < 0 || r >= t->base.rows || hx_emb_rowmap_get(&t->slots.map, r) >= 0) continue;
        int32_t p = hx_emb_rowmap_get(&t->pmap, r);
        if (p >= 0) {
            t->pgen[p] = t->gen;
            continue;
        }
        p = (int32_t)t->pfree[--t->npfree];
        copy_in(t, r, t->pbuf + (size_t)p * t->rec, &t->pcold[p]);
        hx_emb_rowmap_put(&t->pmap, r, p);
        t->prow[p] = r;
        t->pgen[p] = t->gen;
        t->prefetched++;
    }
}

/* Forgets every row read ahead. */
static void unstage_all(hx_emb_devcache *t)
{
    hx_emb_rowmap_clear(&t->pmap);
    t->npfree = 0;
    for (int64_t p = t->C; p-- > 0;) {
        t->prow[p] = -1;
        t->pfree[t->npfree++] = p;
    }
}

void hx_emb_devcache_flush(hx_emb_devcache *t)
{
    hx_emb_slots *s = &t->slots;
    for (int64_t k = 0; k < t->C; k++) {
        if (!s->dirty[k]) continue;
        pack(t, t->cache, k, t->stage);
        write_back(t, s->slot_row[k], t->stage);
        s->dirty[k] = 0;
        s->writebacks++;
    }
}

void hx_emb_devcache_drop(hx_emb_devcache *t)
{
    hx_emb_devcache_flush(t);
    hx_emb_slots_drop(&t->slots);
    unstage_all(t); /* the host rows may change next */
}

/* Bytes a row with its state moves. */
static uint64_t payload(const hx_emb_devcache *t) { return t->pbytes + (size_t)t->ns * t->sfloats * 4; }

void hx_emb_devcache_stats_get(const hx_emb_devcache *t, hx_emb_devcache_stats *out)
{
    const hx_emb_slots *s = &t->slots;
    *out = (hx_emb_devcache_stats){.cache_rows = t->C, .lookups = s->lookups, .hits = s->hits,
                                   .rows_in = t->rows_in, .rows_out = t->rows_out, .rows_init = t->rows_init,
                                   .bytes_in = t->rows_in * payload(t), .bytes_out = t->rows_out * payload(t),
                                   .prefetched = t->prefetched, .evictions = s->evictions,
                                   .calls = t->calls, .bytes = hx_emb_devcache_bytes(t),
                                   .on_device = t->cache->mem.alloc != NULL};
    for (int64_t k = 0; k < t->C; k++) {
        out->resident += s->slot_row[k] >= 0;
        out->dirty += s->dirty[k];
    }
}

hx_status hx_emb_devcache_set_optim(hx_emb_devcache *t, const hx_emb_optim *optim, int nthreads,
                                    hx_emb_err *err)
{
    hx_emb_devcache_drop(t);
    hx_status st = hx_emb_local_set_optim(&t->host->base, optim, nthreads, err);
    if (!st) st = hx_emb_local_set_optim(&t->cache->base, optim, 1, err);
    if (!st && t->spare) st = hx_emb_local_set_optim(&t->spare->base, optim, 1, err);
    if (!st) {
        t->ns = hx_emb_optim_nstate(optim->kind);
        t->rowwise = optim->kind == HX_EMB_OPTIM_ROW_ADAGRAD;
        t->sfloats = t->rowwise ? 1 : (size_t)t->base.dim;
    }
    return st;
}

hx_status hx_emb_devcache_bind(hx_emb_devcache *t, const hx_emb_mem *mem, hx_emb_err *err)
{
    if (!mem) {
        if (!t->spare) return HX_OK;
        hx_emb_devcache_drop(t);
        hx_emb_table_free(&t->cache->base);
        t->cache = t->spare;
        t->spare = NULL;
        return HX_OK;
    }
    if (t->spare) return hx_emb_fail(err, HX_ERR_STATE, "embedding device cache: already in a device's memory");
    hx_emb_mem m = *mem;
    snprintf(t->what, sizeof t->what, "%s", mem->what ? mem->what : "an embedding device cache");
    m.what = t->what;
    hx_emb_table_config cc = t->ccfg;
    cc.mem = &m;
    cc.optim = t->host->optim;
    hx_emb_table *nc;
    hx_status st = hx_emb_local_create(&cc, &nc, err);
    if (st) return st;
    hx_emb_devcache_drop(t); /* every dirty row written back: the new slots start empty */
    t->spare = t->cache;
    t->cache = hx_emb_as_local(nc);
    t->cache->init = t->host->init;
    return HX_OK;
}

size_t hx_emb_devcache_bytes(const hx_emb_devcache *t)
{
    const hx_emb_local *c = t->cache;
    return c->reg[0].bytes + c->reg[1].bytes + c->reg[2].bytes + c->reg[3].bytes;
}

/* ---- the interface ------------------------------------------------------------------------- */

static hx_status ops_lookup(hx_emb_table *tt, const hx_emb_query *q, float *out, int64_t *argmax,
                            hx_emb_err *err)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    return hx_emb_devcache_lookup(t, q, t->oob, &t->host->oob_count, out, argmax, err);
}

static hx_status ops_apply(hx_emb_table *tt, const hx_emb_sparse_grad *g, int64_t step, int nthreads,
                           hx_emb_err *err)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    return hx_emb_devcache_apply(t, g, step, nthreads, t->oob, err);
}

static hx_status ops_backward_update(hx_emb_table *tt, const hx_emb_query *q, const hx_emb_grad_input *gi,
                                     int64_t step, hx_emb_workspace *ws, hx_emb_err *err)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    return hx_emb_devcache_backward_update(t, q, gi, step, t->oob, ws, err);
}

static hx_status ops_save(hx_emb_table *tt, const char *path, hx_emb_err *err)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    hx_emb_devcache_flush(t);
    return hx_emb_local_save_with(t->host, path, NULL, 0, err);
}

static hx_status ops_load(hx_emb_table *tt, const char *path, hx_emb_err *err)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    hx_emb_devcache_drop(t);
    return hx_emb_local_load_with(t->host, path, NULL, NULL, err);
}

static void ops_free(hx_emb_table *tt)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    hx_emb_table_free(t->cache ? &t->cache->base : NULL);
    hx_emb_table_free(t->spare ? &t->spare->base : NULL);
    hx_emb_table_free(t->host ? &t->host->base : NULL);
    hx_emb_slots_free(&t->slots);
    hx_emb_rowmap_free(&t->pmap);
    free(t->stage);
    free(t->cold);
    free(t->wrows);
    free(t->remap);
    free(t->pbuf);
    free(t->pcold);
    free(t->prow);
    free(t->pfree);
    free(t->pgen);
    free(t->tmp);
    free(t);
}

static const hx_emb_ops devcache_ops = {
    "devcache", ops_lookup, ops_apply, ops_backward_update, ops_save, ops_load, ops_free,
};

hx_status hx_emb_devcache_create(const hx_emb_table_config *cfg, hx_emb_table **out, hx_emb_err *err)
{
    *out = NULL;
    if (cfg->ssd_path)
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED,
                           "embedding table: device_cache_rows and ssd_path: a device cache in front "
                           "of a table on disk is not built; give one of them");
    hx_emb_table_config hc = *cfg;
    hc.device_cache_rows = 0;
    hx_emb_table *host;
    hx_status st = hx_emb_local_create(&hc, &host, err);
    if (st) return st;
    /* The cache: a local table of C slots, eager with zeros (slots are
     * filled as rows come in), in plain memory. */
    hx_emb_table_config cc = hc;
    cc.rows = cfg->device_cache_rows < cfg->rows ? cfg->device_cache_rows : cfg->rows;
    if (cc.rows > INT32_MAX) cc.rows = INT32_MAX;
    cc.init = (hx_emb_init){HX_EMB_INIT_ZEROS, 0, 0, 0};
    cc.lazy_init = 0;
    cc.huge_pages = 0;
    cc.backing_file = NULL;
    cc.oob = HX_EMB_OOB_ZERO;
    cc.row_stride = cc.row_offset = 0;
    cc.nthreads = 1;
    hx_emb_table *cache;
    st = hx_emb_local_create(&cc, &cache, err);
    if (st) {
        hx_emb_table_free(host);
        return st;
    }
    hx_emb_devcache *t = calloc(1, sizeof *t);
    if (!t) {
        hx_emb_table_free(cache);
        hx_emb_table_free(host);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of memory");
    }
    t->base = (hx_emb_table){&devcache_ops, cfg->rows, cfg->dim};
    t->host = hx_emb_as_local(host);
    t->cache = hx_emb_as_local(cache);
    t->cache->init = cfg->init;
    t->C = cc.rows;
    t->oob = cfg->oob;
    t->ns = hx_emb_optim_nstate(cfg->optim.kind);
    t->rowwise = cfg->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    t->pbytes = (size_t)cfg->dim * t->host->esize;
    t->sfloats = t->rowwise ? 1 : (size_t)cfg->dim;
    t->rec = t->pbytes + 2 * (size_t)cfg->dim * 4; /* room for any optimizer's state */
    t->ccfg = cc;
    t->faults.skip_writeback_row = -1;
    t->tmp = malloc((size_t)t->host->gstride * sizeof *t->tmp);
    t->pbuf = malloc((size_t)t->C * t->rec);
    t->pcold = malloc((size_t)t->C);
    t->wrows = malloc((size_t)t->C * sizeof *t->wrows);
    t->prow = malloc((size_t)t->C * sizeof *t->prow);
    t->pfree = malloc((size_t)t->C * sizeof *t->pfree);
    t->pgen = calloc((size_t)t->C, sizeof *t->pgen);
    if (!t->tmp || !t->pbuf || !t->pcold || !t->wrows || !t->prow || !t->pfree || !t->pgen ||
        hx_emb_slots_init(&t->slots, t->C) || hx_emb_rowmap_init(&t->pmap, t->C) || room(t, 1, NULL)) {
        ops_free(&t->base);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of memory for %lld rows",
                           (long long)t->C);
    }
    unstage_all(t);
    *out = &t->base;
    return HX_OK;
}
