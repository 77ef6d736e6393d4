/* The device cache of hot rows (cache.h): a local table of C slots in
 * front of a backing store (a host local table here; the servers of a
 * server-mode table in ps_devcache.c). A call maps its rows to slots
 * (dirty victims written back, misses read in, one batch each per call),
 * then runs the local table's lookup or update on the slot ids; a call
 * whose ids the previous call's slots still hold (the update after a
 * training lookup) takes those slots without hashing its ids again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"

struct hx_emb_devcache {
    hx_emb_table base;
    hx_emb_table *back;           /* the store's table */
    const hx_emb_devstore_ops *store;
    hx_emb_local *host;           /* back, when it is a host local table; else NULL */
    hx_emb_local *cache;
    _Atomic int64_t *oob_count;
    hx_emb_devmem dm;             /* where the slots live (a device's memory: bound) */
    hx_emb_slots slots;
    int64_t C;
    hx_emb_oob oob;
    int ns, rowwise;
    size_t pbytes, sfloats, rec; /* bytes of a row's params, floats of a state row, a record */
    /* one call's batch: records of the dirty victims, then of the misses
     * read from the store (the staged ones are installed from pbuf) */
    char *stage;
    size_t stage_cap;
    uint8_t *cold;                /* per miss: came in as its initial value; then per row read */
    int64_t *wrows;               /* rows of the dirty victims (C) */
    int64_t *rrows;               /* rows read from the store (C) */
    int32_t *mrec;                /* per miss: its read-ahead record, -1: read now; per row a
                                     prefetch reads: its record (C) */
    int64_t *remap;
    int64_t remap_cap, mapped_n; /* remap[0 .. mapped_n): the last call's slots (-1: none) */
    /* rows copied in ahead: row -> record of pbuf (C records; prow: each
     * record's row, -1 free; pgen: the last read-ahead that named it;
     * plist[g & 1]: the records read-ahead g named) */
    hx_emb_rowmap pmap;
    char *pbuf;
    uint8_t *pcold;
    int64_t *prow, *pfree, npfree;
    uint64_t *pgen, gen;
    int32_t *plist[2];
    int64_t nplist[2];
    /* hint[g & 1]: the slots of the resident rows read-ahead g named, by
     * position (-1: not resident), for the call of its step to map */
    int32_t *hint[2];
    int64_t nhint[2], hint_cap[2];
    /* a read-ahead asked for and not yet taken in (store->read_start):
     * rows aread[0 .. naread) into records aat[]; pcold of each is
     * IN_FLIGHT until then */
    void *pending;
    int64_t *aread, naread;
    int32_t *aat;
    float *tmp;
    uint64_t rows_in, rows_out, rows_init, prefetched;
    int64_t calls;
    hx_emb_devcache_faults faults;
};

static const hx_emb_ops devcache_ops;

/* The slots' pages written once now (they hold zeros), as a device's
 * allocation is, so that no step pays for a page's first touch. */
static void touch_slots(hx_emb_local *c)
{
    for (int i = 0; i < 3; i++)
        if (c->reg[i].ptr && !c->mem.alloc) memset(c->reg[i].ptr, 0, c->reg[i].bytes);
}

hx_emb_devcache *hx_emb_as_devcache(hx_emb_table *t)
{
    return t && t->ops == &devcache_ops ? (hx_emb_devcache *)t : NULL;
}
hx_emb_local *hx_emb_devcache_host(hx_emb_devcache *t) { return t->host; }
hx_emb_table *hx_emb_devcache_back(hx_emb_devcache *t) { return t->back; }
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

/* n rows from the store into records (stride t->rec) and cold flags, row
 * i's at index at[i] (at NULL: i); counted. */
static hx_status read_rows(hx_emb_devcache *t, const int64_t *rows, int64_t n, const int32_t *at, char *recs,
                           uint8_t *cold, hx_emb_err *err)
{
    if (!n) return HX_OK;
    hx_status st = t->store->read(t->back, rows, n, at, recs, t->rec, cold, err);
    for (int64_t i = 0; i < n && !st; i++) {
        uint8_t c = cold[at ? at[i] : i];
        t->rows_init += c;
        t->rows_in += !c;
    }
    return st;
}

/* Slot k from a record, or as row r's initial value. */
static void install(hx_emb_devcache *t, int64_t k, int64_t r, const char *rec, bool cold)
{
    if (t->host) t->cache->init = t->host->init; /* a load may have changed it */
    if (cold) hx_emb_local_init_row_as(t->cache, k, r, t->tmp);
    else unpack(t, t->cache, k, rec);
}

/* Frees row r's read-ahead record p. */
static void unstage_at(hx_emb_devcache *t, int64_t r, int32_t p)
{
    hx_emb_rowmap_del(&t->pmap, r);
    t->prow[p] = -1;
    t->pfree[t->npfree++] = p;
}

/* Frees row r's read-ahead record, if it has one. */
static void unstage(hx_emb_devcache *t, int64_t r)
{
    int32_t p = hx_emb_rowmap_get(&t->pmap, r);
    if (p >= 0) unstage_at(t, r, p);
}

/* pcold of a record whose read is under way. */
enum { IN_FLIGHT = 2 };

/* The end of the read of the read-ahead's rows aread[0 .. nr) into their
 * records aat[] (st: how it went): on failure the records are freed (in
 * reverse: pfree as it was), else the rows count as read ahead and, as
 * read_rows counts them, read in. */
static hx_status ahead_read(hx_emb_devcache *t, int64_t nr, hx_status st)
{
    for (int64_t i = nr; i-- > 0;) {
        int32_t p = t->aat[i];
        if (st) {
            unstage_at(t, t->aread[i], p);
            continue;
        }
        t->rows_init += t->pcold[p];
        t->rows_in += !t->pcold[p];
        t->prefetched++;
    }
    return st;
}

/* Takes in the read-ahead under way, if any; on failure its rows are not
 * staged. */
static hx_status finish_ahead(hx_emb_devcache *t, hx_emb_err *err)
{
    if (!t->pending) return HX_OK;
    void *p = t->pending;
    t->pending = NULL;
    hx_status st = t->store->read_finish(t->back, p, t->aat, t->pbuf, t->rec, t->pcold, err);
    int64_t nr = t->naread;
    t->naread = 0;
    return ahead_read(t, nr, st);
}

/* n records (stride t->rec) of rows written back to the store. A staged
 * row is not resident, and becomes resident only through a miss, which
 * takes its staged copy: write-backs (of resident rows) never make one
 * stale. */
static hx_status write_rows(hx_emb_devcache *t, int64_t *rows, int64_t n, char *recs, hx_emb_err *err)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) { /* a broken cache (tests) drops one row's write-backs */
        if (rows[i] == t->faults.skip_writeback_row) continue;
        if (m != i) memcpy(recs + (size_t)m * t->rec, recs + (size_t)i * t->rec, t->rec);
        rows[m++] = rows[i];
    }
    hx_status st = m ? t->store->write(t->back, rows, m, recs, t->rec, err) : HX_OK;
    if (!st) t->rows_out += (uint64_t)n;
    return st;
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

/* The batch of a call's misses: dirty victims out, misses in (the staged
 * ones from the staging area, the others read from the store at once). On
 * failure the victims stay resident as they were. */
static hx_status fill(hx_emb_devcache *t, hx_emb_err *err)
{
    hx_emb_slots *s = &t->slots;
    hx_emb_slots_victims(s);
    int64_t nw = 0, nr = 0;
    char *wbuf = t->stage, *rbuf = t->stage + (size_t)s->nv * t->rec;
    for (int64_t i = 0; i < s->nv; i++) {
        int64_t k = s->victim[i];
        if (!s->dirty[k]) continue;
        pack(t, t->cache, k, wbuf + (size_t)nw * t->rec);
        t->wrows[nw++] = s->slot_row[k];
    }
    bool wait = false; /* for the read-ahead under way: a miss staged by it, or one to read now */
    for (int64_t m = 0; m < s->nmiss && t->pending && !wait; m++) {
        int32_t p = hx_emb_rowmap_get(&t->pmap, s->miss[m]);
        wait = p < 0 || t->pcold[p] == IN_FLIGHT;
    }
    hx_status st = wait ? finish_ahead(t, err) : HX_OK;
    if (st) {
        hx_emb_slots_cancel(s);
        return st;
    }
    for (int64_t m = 0; m < s->nmiss; m++)
        if ((t->mrec[m] = hx_emb_rowmap_get(&t->pmap, s->miss[m])) < 0) t->rrows[nr++] = s->miss[m];
    st = write_rows(t, t->wrows, nw, wbuf, err);
    if (!st) st = read_rows(t, t->rrows, nr, NULL, rbuf, t->cold, err);
    if (st) {
        hx_emb_slots_cancel(s);
        return st;
    }
    hx_emb_slots_install(s);
    for (int64_t i = 0, m = 0; m < s->nmiss; m++) {
        int32_t p = t->mrec[m];
        if (p < 0) {
            install(t, s->mslot[m], s->miss[m], rbuf + (size_t)i * t->rec, t->cold[i]);
            i++;
        } else {
            install(t, s->mslot[m], s->miss[m], t->pbuf + (size_t)p * t->rec, t->pcold[p]);
            unstage_at(t, s->miss[m], p);
        }
    }
    return HX_OK;
}

/* The slots of n ids into out (t->remap): -1 padding, -2 outside [0, rows). */
static hx_status ensure(hx_emb_devcache *t, const void *ids, hx_dtype dt, int64_t n, int has_padding,
                        int64_t padding_id, bool lookup, hx_emb_err *err)
{
    hx_status st = room(t, n, err);
    if (st) return st;
    if (t->store->touch) t->store->touch(t->back);
    hx_emb_slots_begin(&t->slots);
    if (n == t->mapped_n && /* the update after a training lookup of these ids */
        hx_emb_slots_remap(&t->slots, ids, dt, n, has_padding, padding_id, t->base.rows, lookup, t->remap)) {
        t->calls++;
        return HX_OK;
    }
    t->mapped_n = -1;
    int h = (t->gen - 1) & 1; /* the read-ahead before the last one named this step's rows */
    int64_t used = hx_emb_slots_map(&t->slots, ids, dt, n, has_padding, padding_id, t->base.rows, lookup,
                                    t->nhint[h] == n ? t->hint[h] : NULL, t->remap);
    if (used > t->C) {
        hx_emb_slots_begin(&t->slots); /* unpins */
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                           "embedding device cache: one call touches %lld distinct rows but the cache "
                           "holds %lld; raise device_cache_rows to at least %lld", (long long)used,
                           (long long)t->C, (long long)used);
    }
    if (t->slots.nmiss && (st = fill(t, err))) {
        hx_emb_slots_begin(&t->slots); /* unpins */
        return st;
    }
    t->calls++;
    hx_emb_slots_resolve(&t->slots, t->remap, n);
    t->mapped_n = n;
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
    if (!t->host) return; /* a DYNAMIC table's expiry: only a host table is behind one */
    hx_emb_local_reset_rows(&t->host->base, rows, n);
    for (int64_t i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= t->base.rows) continue;
        unstage(t, rows[i]);
        int32_t k = hx_emb_rowmap_get(&t->slots.map, rows[i]);
        if (k < 0) continue;
        hx_emb_local_init_row_as(t->cache, k, rows[i], t->tmp);
        t->slots.dirty[k] = 0;
    }
}

/* Room for read-ahead g's hints of n rows. */
static hx_status hint_room(hx_emb_devcache *t, int g, int64_t n, hx_emb_err *err)
{
    if (n <= t->hint_cap[g]) return HX_OK;
    int32_t *h = realloc(t->hint[g], (size_t)n * sizeof *h);
    if (!h)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of memory to read %lld rows "
                           "ahead", (long long)n);
    t->hint[g] = h;
    t->hint_cap[g] = n;
    return HX_OK;
}

hx_status hx_emb_devcache_prefetch(hx_emb_devcache *t, const int64_t *rows, int64_t n, hx_emb_err *err)
{
    hx_status st = finish_ahead(t, err);
    if (st) return st;
    int g = (int)(++t->gen & 1);
    /* Records read-ahead gen - 2 named and no later one did: their step has run. */
    for (int64_t i = 0; i < t->nplist[g]; i++) {
        int32_t p = t->plist[g][i];
        if (t->prow[p] >= 0 && t->pgen[p] + 2 == t->gen) unstage_at(t, t->prow[p], p);
    }
    t->nplist[g] = t->nhint[g] = 0;
    st = hint_room(t, g, n, err);
    if (st) return st;
    hx_emb_slots_want_begin(&t->slots);
    int64_t nr = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows[i], ra = i + 16 < n ? rows[i + 16] : -1;
        if (ra >= 0 && ra < t->base.rows) hx_emb_rowmap_prefetch(&t->slots.map, ra);
        t->hint[g][i] = -1;
        /* resident: spared until the step after this one has mapped it */
        if (r < 0 || r >= t->base.rows || (t->hint[g][i] = hx_emb_slots_want(&t->slots, r)) >= 0) continue;
        int32_t p = hx_emb_rowmap_get(&t->pmap, r);
        if (p < 0) { /* each new row gets its record now: read once */
            if (!t->npfree) continue;
            p = (int32_t)t->pfree[--t->npfree];
            hx_emb_rowmap_put(&t->pmap, r, p);
            t->prow[p] = r;
            t->aread[nr] = r;
            t->aat[nr++] = p;
        }
        if (t->pgen[p] != t->gen) {
            t->pgen[p] = t->gen;
            t->plist[g][t->nplist[g]++] = p;
        }
    }
    t->nhint[g] = n;
    if (!nr) return HX_OK;
    if (t->store->read_start) { /* taken in when a call needs them, or by the next read-ahead */
        if (!(st = t->store->read_start(t->back, t->aread, nr, &t->pending, err))) {
            t->naread = nr;
            for (int64_t i = 0; i < nr; i++) t->pcold[t->aat[i]] = IN_FLIGHT;
            return HX_OK;
        }
    } else { /* straight into the records */
        st = t->store->read(t->back, t->aread, nr, t->aat, t->pbuf, t->rec, t->pcold, err);
    }
    return ahead_read(t, nr, st);
}

/* Forgets every row read ahead. */
static void unstage_all(hx_emb_devcache *t)
{
    hx_emb_rowmap_clear(&t->pmap);
    t->npfree = t->nplist[0] = t->nplist[1] = 0;
    for (int64_t p = t->C; p-- > 0;) {
        t->prow[p] = -1;
        t->pfree[t->npfree++] = p;
    }
}

hx_status hx_emb_devcache_flush(hx_emb_devcache *t, hx_emb_err *err)
{
    hx_emb_slots *s = &t->slots;
    hx_status ahead = finish_ahead(t, err); /* the store's next calls may wait for answers */
    if (ahead) return ahead;
    int64_t nd = 0;
    for (int64_t k = 0; k < t->C; k++) nd += s->dirty[k];
    if (!nd) return HX_OK;
    char *buf = malloc((size_t)nd * t->rec);
    int64_t *rows = malloc((size_t)nd * sizeof *rows);
    hx_status st = buf && rows ? HX_OK : hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of "
                                                      "memory to write %lld rows back", (long long)nd);
    for (int64_t k = 0, i = 0; k < t->C && !st; k++) {
        if (!s->dirty[k]) continue;
        pack(t, t->cache, k, buf + (size_t)i * t->rec);
        rows[i++] = s->slot_row[k];
    }
    if (!st) st = write_rows(t, rows, nd, buf, err);
    for (int64_t k = 0; k < t->C && !st; k++) {
        s->writebacks += s->dirty[k];
        s->dirty[k] = 0;
    }
    free(buf);
    free(rows);
    return st;
}

hx_status hx_emb_devcache_drop(hx_emb_devcache *t, hx_emb_err *err)
{
    hx_status st = hx_emb_devcache_flush(t, err);
    hx_emb_slots_drop(&t->slots);
    unstage_all(t); /* the stored rows may change next */
    return st;
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
    hx_status st = hx_emb_devcache_drop(t, err);
    if (!st) st = t->store->set_optim(t->back, optim, nthreads, err);
    if (!st) st = hx_emb_devmem_set_optim(t->cache, &t->dm, optim, err);
    if (!st) touch_slots(t->cache);
    if (!st) {
        t->ns = hx_emb_optim_nstate(optim->kind);
        t->rowwise = optim->kind == HX_EMB_OPTIM_ROW_ADAGRAD;
        t->sfloats = t->rowwise ? 1 : (size_t)t->base.dim;
    }
    return st;
}

hx_status hx_emb_devcache_bind(hx_emb_devcache *t, const hx_emb_mem *mem, hx_emb_err *err)
{
    return hx_emb_devmem_move(&t->cache, &t->dm, mem, err);
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
    return hx_emb_devcache_lookup(t, q, t->oob, t->oob_count, out, argmax, err);
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
    hx_status st = hx_emb_devcache_flush(t, err);
    return st ? st : t->store->save(t->back, path, err);
}

static hx_status ops_load(hx_emb_table *tt, const char *path, hx_emb_err *err)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    hx_status st = hx_emb_devcache_drop(t, err);
    return st ? st : t->store->load(t->back, path, err);
}

static void ops_free(hx_emb_table *tt)
{
    hx_emb_devcache *t = (hx_emb_devcache *)tt;
    hx_emb_err err;
    if (t->back && t->cache && t->store->persistent) /* the rows outlive it (a failed write-back: the */
        hx_emb_devcache_flush(t, &err);               /* store holds the last one) */
    hx_emb_table_free(t->cache ? &t->cache->base : NULL);
    hx_emb_devmem_free(&t->dm);
    hx_emb_table_free(t->back);
    hx_emb_slots_free(&t->slots);
    hx_emb_rowmap_free(&t->pmap);
    free(t->stage);
    free(t->cold);
    free(t->wrows);
    free(t->rrows);
    free(t->mrec);
    free(t->remap);
    free(t->pbuf);
    free(t->pcold);
    free(t->prow);
    free(t->pfree);
    free(t->pgen);
    free(t->plist[0]);
    free(t->plist[1]);
    free(t->hint[0]);
    free(t->hint[1]);
    free(t->aread);
    free(t->aat);
    free(t->tmp);
    free(t);
}

static const hx_emb_ops devcache_ops = {
    "devcache", ops_lookup, ops_apply, ops_backward_update, ops_save, ops_load, ops_free,
};

/* ---- a host local table as the store ------------------------------------------------------ */

static int host_ns(const hx_emb_local *h) { return hx_emb_optim_nstate(h->optim.kind); }
static bool host_rowwise(const hx_emb_local *h) { return h->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD; }

static hx_status host_read(hx_emb_table *back, const int64_t *rows, int64_t n, const int32_t *at, char *recs,
                           size_t stride, uint8_t *cold, hx_emb_err *err)
{
    (void)err;
    const hx_emb_local *h = hx_emb_as_local(back);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = at ? at[i] : i;
        cold[k] = hx_emb_local_is_cold(h, rows[i]);
        if (!cold[k]) hx_emb_local_pack_row(h, rows[i], host_ns(h), host_rowwise(h), recs + (size_t)k * stride);
    }
    return HX_OK;
}

static hx_status host_write(hx_emb_table *back, const int64_t *rows, int64_t n, const char *recs, size_t stride,
                            hx_emb_err *err)
{
    hx_emb_local *h = hx_emb_as_local(back);
    float *tmp = malloc((size_t)h->gstride * sizeof *tmp);
    if (!tmp) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of memory");
    for (int64_t i = 0; i < n; i++) {
        hx_emb_local_materialise(h, rows[i], tmp);
        hx_emb_local_unpack_row(h, rows[i], host_ns(h), host_rowwise(h), recs + (size_t)i * stride);
    }
    free(tmp);
    return HX_OK;
}

static hx_status host_save(hx_emb_table *back, const char *path, hx_emb_err *err)
{
    return hx_emb_local_save_with(hx_emb_as_local(back), path, NULL, 0, err);
}

static hx_status host_load(hx_emb_table *back, const char *path, hx_emb_err *err)
{
    return hx_emb_local_load_with(hx_emb_as_local(back), path, NULL, NULL, err);
}

static hx_status host_set_optim(hx_emb_table *back, const hx_emb_optim *optim, int nthreads, hx_emb_err *err)
{
    return hx_emb_local_set_optim(back, optim, nthreads, err);
}

static const hx_emb_devstore_ops host_store = {false, host_read, NULL, NULL, host_write, host_save, host_load,
                                               host_set_optim, NULL};

/* ---- creation ------------------------------------------------------------------------------ */

/* The rows whose slots (and read-ahead records) an array finds (one
 * memory access an id, against a hash map's probes) when it takes no more
 * memory than the slots' records (4 bytes a row); else 0: hash maps of C
 * entries. */
static int64_t direct_rows(const hx_emb_devcache *t)
{
    return (uint64_t)t->base.rows * 4 <= (uint64_t)t->C * t->rec ? t->base.rows : 0;
}

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
    if (!st) st = hx_emb_devcache_create_over(cfg, host, &host_store, &hx_emb_as_local(host)->oob_count, out, err);
    if (st) hx_emb_table_free(host);
    return st;
}

hx_status hx_emb_devcache_create_over(const hx_emb_table_config *cfg, hx_emb_table *back,
                                      const hx_emb_devstore_ops *ops, _Atomic int64_t *oob_count,
                                      hx_emb_table **out, hx_emb_err *err)
{
    *out = NULL;
    /* The cache: a local table of C slots, eager with zeros (slots are
     * filled as rows come in), in plain memory. */
    hx_emb_table_config cc = *cfg;
    cc.device_cache_rows = 0;
    cc.ssd_path = NULL;
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
    hx_status st = hx_emb_local_create(&cc, &cache, err);
    if (st) return st;
    hx_emb_devcache *t = calloc(1, sizeof *t);
    if (!t) {
        hx_emb_table_free(cache);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of memory");
    }
    t->base = (hx_emb_table){&devcache_ops, cfg->rows, cfg->dim};
    t->store = ops;
    t->host = ops == &host_store ? hx_emb_as_local(back) : NULL;
    t->oob_count = oob_count;
    t->cache = hx_emb_as_local(cache);
    t->cache->init = cfg->init;
    t->C = cc.rows;
    t->oob = cfg->oob;
    t->ns = hx_emb_optim_nstate(cfg->optim.kind);
    t->rowwise = cfg->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    t->pbytes = (size_t)cfg->dim * t->cache->esize;
    t->sfloats = t->rowwise ? 1 : (size_t)cfg->dim;
    t->rec = t->pbytes + 2 * (size_t)cfg->dim * 4; /* room for any optimizer's state */
    t->faults.skip_writeback_row = -1;
    t->mapped_n = -1;
    t->tmp = malloc((size_t)t->cache->gstride * sizeof *t->tmp);
    t->pbuf = malloc((size_t)t->C * t->rec);
    t->pcold = malloc((size_t)t->C);
    t->wrows = malloc((size_t)t->C * sizeof *t->wrows);
    t->rrows = malloc((size_t)t->C * sizeof *t->rrows);
    t->mrec = malloc((size_t)t->C * sizeof *t->mrec);
    t->prow = malloc((size_t)t->C * sizeof *t->prow);
    t->pfree = malloc((size_t)t->C * sizeof *t->pfree);
    t->pgen = calloc((size_t)t->C, sizeof *t->pgen);
    t->plist[0] = malloc((size_t)t->C * sizeof *t->plist[0]);
    t->plist[1] = malloc((size_t)t->C * sizeof *t->plist[1]);
    t->aread = malloc((size_t)t->C * sizeof *t->aread);
    t->aat = malloc((size_t)t->C * sizeof *t->aat);
    if (!t->tmp || !t->pbuf || !t->pcold || !t->wrows || !t->rrows || !t->mrec || !t->prow || !t->pfree ||
        !t->pgen || !t->plist[0] || !t->plist[1] || !t->aread || !t->aat ||
        hx_emb_slots_init(&t->slots, t->C, direct_rows(t)) ||
        (direct_rows(t) ? hx_emb_rowmap_init_direct(&t->pmap, direct_rows(t)) : hx_emb_rowmap_init(&t->pmap, t->C)) ||
        room(t, 1, NULL)) {
        ops_free(&t->base); /* back is the caller's still */
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding device cache: out of memory for %lld rows",
                           (long long)t->C);
    }
    t->back = back;
    touch_slots(t->cache);
    unstage_all(t);
    *out = &t->base;
    return HX_OK;
}
