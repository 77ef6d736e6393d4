/* A worker's device cache of a server-mode table (device_cache_rows with
 * one worker): the store behind an hx_emb_devcache is the servers. A
 * batch of misses is one fetch to each server holding some (their rows
 * with their optimizer state, as records; a lazy row never written comes
 * back as a flag, and the worker's slot takes its initial value); a batch
 * of write-backs is one store to each server (records; no reply: a
 * server takes a worker's requests in the order sent, so the worker's
 * next fetch, read or save finds them). With one worker every row has a
 * single writer, so the cache owns the rows it holds and the servers hold
 * each as it was last written back: training is bitwise that without the
 * cache, and a worker that dies leaves the servers its last write-backs.
 * Both sides live here: the worker's store and the server's answers; the
 * cache of hot rows that several workers share (ps_hot.c) fetches and
 * stores through the same messages, its stores naming the steps their
 * rows include (a server keeps the newer of two). */
#include "embedding/ps_impl.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of a row's record for the optimizer o over rows of dim elements
 * of esize bytes. */
static size_t record_bytes(const hx_emb_optim *o, int64_t dim, size_t esize)
{
    size_t sf = o->kind == HX_EMB_OPTIM_ROW_ADAGRAD ? 1 : (size_t)dim;
    return (size_t)dim * esize + (size_t)hx_emb_optim_nstate(o->kind) * sf * sizeof(float);
}

static size_t worker_record(const hx_emb_ps *c)
{
    return record_bytes(&c->route.optim, c->base.dim, c->route.tc.dtype == HX_DTYPE_F32 ? 4 : 2);
}

/* rows[0 .. n) grouped by server: their local ids in loc (server j's from
 * displ[j], count[j] of them) and the position each came from in at. */
typedef struct grouped {
    int64_t *loc, *at, *count, *displ;
} grouped;

static void grouped_free(grouped *g)
{
    free(g->loc);
    free(g->at);
    free(g->count);
    free(g->displ);
}

static hx_status group(hx_emb_ps *c, const int64_t *rows, int64_t n, grouped *g, hx_emb_err *err)
{
    int S = c->ps->S;
    int *owner = malloc((size_t)(n + 1) * sizeof *owner);
    int64_t *local = malloc((size_t)(n + 1) * sizeof *local), *fill = calloc((size_t)S, sizeof *fill);
    g->loc = malloc((size_t)(n + 1) * sizeof *g->loc);
    g->at = malloc((size_t)(n + 1) * sizeof *g->at);
    g->count = calloc((size_t)S, sizeof *g->count);
    g->displ = calloc((size_t)S + 1, sizeof *g->displ);
    bool ok = owner && local && fill && g->loc && g->at && g->count && g->displ;
    for (int64_t i = 0; i < n && ok; i++) {
        hx__shard_place(&c->route, rows[i], &owner[i], &local[i]);
        g->count[owner[i]]++;
    }
    for (int j = 0; j < S && ok; j++) g->displ[j + 1] = g->displ[j] + g->count[j];
    for (int64_t i = 0; i < n && ok; i++) {
        int64_t k = g->displ[owner[i]] + fill[owner[i]]++;
        g->loc[k] = local[i];
        g->at[k] = i;
    }
    free(owner);
    free(local);
    free(fill);
    if (!ok) grouped_free(g);
    return ok ? HX_OK : hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode (device cache): out of memory");
}

static void count(hx_ps *ps, bool fetch, uint64_t bytes, int64_t rows)
{
    pthread_mutex_lock(&ps->lock);
    if (fetch) {
        ps->stats.pulls++;
        ps->stats.pull_bytes += bytes;
        ps->stats.rows_pulled += rows;
    } else {
        ps->stats.pushes++;
        ps->stats.push_bytes += bytes;
    }
    pthread_mutex_unlock(&ps->lock);
}

/* One request h to each server that owns some of g's rows: h, its local
 * row numbers and (recs not NULL) each row's rec-byte record, read at
 * stride from recs in the order of the rows given to group(). Under c's
 * lock; adds the bytes sent to *bytes. */
static hx_status send_requests(hx_emb_ps *c, ps_req *h, const grouped *g, const char *recs, size_t stride,
                               size_t rec, uint64_t *bytes, hx_emb_err *err)
{
    hx_ps *ps = c->ps;
    hx_status st = HX_OK;
    for (int j = 0; j < ps->S && !st; j++) {
        if (!g->count[j]) continue;
        h->n = g->count[j];
        size_t nb = sizeof *h + (size_t)h->n * (sizeof(int64_t) + (recs ? rec : 0));
        char *buf = malloc(nb);
        if (!buf) {
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode (device cache): out of memory");
            break;
        }
        memcpy(buf, h, sizeof *h);
        memcpy(buf + sizeof *h, g->loc + g->displ[j], (size_t)h->n * sizeof(int64_t));
        char *r = buf + sizeof *h + (size_t)h->n * sizeof(int64_t);
        for (int64_t i = 0; recs && i < h->n; i++)
            memcpy(r + (size_t)i * rec, recs + (size_t)g->at[g->displ[j] + i] * stride, rec);
        if ((st = hx__ps_send(c, j, buf, nb)))
            st = hx_emb_fail(err, st, "server mode: %s", hx_last_error());
        free(buf);
        *bytes += nb;
    }
    return st;
}

/* ---- the worker's store ------------------------------------------------------------------ */

/* A fetch sent and not yet answered. */
typedef struct pending_fetch {
    grouped g;
    int64_t seq;
    uint64_t bytes;
} pending_fetch;

/* Sends the fetch of rows[0 .. n), answered once the servers have applied
 * every push this worker made; under c's lock. */
static hx_status start_fetch(hx_emb_ps *c, const int64_t *rows, int64_t n, pending_fetch **out, hx_emb_err *err)
{
    hx_ps *ps = c->ps;
    size_t rec = worker_record(c);
    if (ps->rank_bytes && (size_t)n * rec > ps->rank_bytes)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode: one fetch of %lld rows with their optimizer "
                           "state (%zu bytes each) is over this worker's cap of %zu bytes "
                           "(hx_ps_config.rank_bytes): give it smaller batches or raise the cap", (long long)n, rec,
                           ps->rank_bytes);
    pending_fetch *f = calloc(1, sizeof *f);
    if (!f) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode (device cache): out of memory");
    hx_status st = group(c, rows, n, &f->g, err);
    if (st) {
        free(f);
        return st;
    }
    ps_req h = {.kind = PS_FETCH, .table = c->index, .hash = (int64_t)c->hash, .seq = ++c->seq, .tpull = -1,
                .step = c->pushes, .need = c->pushes, .k = HX_EMB_SHARD_ROWS, .optim = c->route.optim.kind,
                .rec = (int64_t)rec};
    f->seq = h.seq;
    st = send_requests(c, &h, &f->g, NULL, 0, 0, &f->bytes, err);
    if (st) {
        grouped_free(&f->g);
        free(f);
        return st;
    }
    *out = f;
    return HX_OK;
}

/* Takes fetch f's records (and frees f, also on failure); under c's lock. */
static hx_status finish_fetch(hx_emb_ps *c, pending_fetch *f, const int32_t *to, char *recs, size_t stride,
                              uint8_t *cold, hx_emb_err *err)
{
    hx_ps *ps = c->ps;
    size_t rec = worker_record(c);
    hx_status st = HX_OK;
    int64_t got = 0;
    for (int j = 0; j < ps->S && !st; j++) {
        if (!f->g.count[j]) continue;
        hx_msg m;
        if ((st = hx__ps_wait_reply(c, j, f->seq, &m, err))) break;
        const ps_reply *rp = m.data;
        int64_t na = f->g.count[j], pad = (na + 7) / 8 * 8, sent = 0;
        const unsigned char *flag = (const unsigned char *)(rp + 1);
        for (int64_t i = 0; !rp->status && rp->n == na && m.n >= sizeof *rp + (size_t)pad && i < na; i++)
            sent += flag[i] != 0;
        f->bytes += m.n;
        if (rp->status)
            st = hx__ps_server_failed(ps, j, rp, m.n, err);
        else if (rp->n != na || rp->width != (int64_t)rec || rp->rows != sent ||
                 m.n != sizeof *rp + (size_t)pad + (size_t)sent * rec)
            st = hx_emb_fail(err, HX_ERR_COMM, "server mode: server rank %d answered a fetch of %lld rows with "
                             "%lld records of %lld bytes", ps->W + j, (long long)na, (long long)rp->rows,
                             (long long)rp->width);
        const char *r = (const char *)(flag + pad);
        for (int64_t i = 0; i < na && !st; i++) {
            int64_t at = f->g.at[f->g.displ[j] + i];
            if (to) at = to[at];
            cold[at] = !flag[i];
            if (!flag[i]) continue;
            memcpy(recs + (size_t)at * stride, r, rec);
            r += rec;
            got++;
        }
        free(m.data);
    }
    count(ps, true, f->bytes, got);
    grouped_free(&f->g);
    free(f);
    return st;
}

hx_status hx__ps_fetch_locked(hx_emb_ps *c, const int64_t *rows, int64_t n, char *recs, size_t stride,
                              uint8_t *cold, hx_emb_err *err)
{
    pending_fetch *f;
    hx_status st = start_fetch(c, rows, n, &f, err);
    return st ? st : finish_fetch(c, f, NULL, recs, stride, cold, err);
}

static hx_status fetch_start(hx_emb_table *back, const int64_t *rows, int64_t n, void **pending, hx_emb_err *err)
{
    hx_emb_ps *c = hx_emb_as_ps(back);
    pthread_mutex_lock(&c->lock);
    pending_fetch *f = NULL;
    hx_status st = start_fetch(c, rows, n, &f, err);
    pthread_mutex_unlock(&c->lock);
    *pending = f;
    return st;
}

static hx_status fetch_finish(hx_emb_table *back, void *pending, const int32_t *to, char *recs, size_t stride,
                              uint8_t *cold, hx_emb_err *err)
{
    hx_emb_ps *c = hx_emb_as_ps(back);
    pthread_mutex_lock(&c->lock);
    hx_status st = finish_fetch(c, pending, to, recs, stride, cold, err);
    pthread_mutex_unlock(&c->lock);
    return st;
}

static hx_status fetch(hx_emb_table *back, const int64_t *rows, int64_t n, const int32_t *to, char *recs,
                       size_t stride, uint8_t *cold, hx_emb_err *err)
{
    void *f;
    hx_status st = fetch_start(back, rows, n, &f, err);
    return st ? st : fetch_finish(back, f, to, recs, stride, cold, err);
}

hx_status hx__ps_store_locked(hx_emb_ps *c, const int64_t *rows, int64_t n, const char *recs, size_t stride,
                              int64_t tag, hx_emb_err *err)
{
    size_t rec = worker_record(c);
    grouped g;
    hx_status st = group(c, rows, n, &g, err);
    if (st) return st;
    ps_req h = {.kind = PS_STORE, .table = c->index, .hash = (int64_t)c->hash, .seq = ++c->seq, .tpull = -1,
                .step = tag, .optim = c->route.optim.kind, .rec = (int64_t)rec};
    uint64_t bytes = 0;
    st = send_requests(c, &h, &g, recs, stride, rec, &bytes, err);
    grouped_free(&g);
    if (!st) count(c->ps, false, bytes, 0);
    return st;
}

static hx_status store(hx_emb_table *back, const int64_t *rows, int64_t n, const char *recs, size_t stride,
                       hx_emb_err *err)
{
    hx_emb_ps *c = hx_emb_as_ps(back);
    pthread_mutex_lock(&c->lock);
    hx_status st = hx__ps_store_locked(c, rows, n, recs, stride, c->pushes, err);
    pthread_mutex_unlock(&c->lock);
    return st;
}

void hx__ps_alive_locked(hx_emb_ps *c)
{
    hx_ps *ps = c->ps;
    if (hx__now() - c->sent_at <= ps->timeout_s / 4) return;
    ps_req h = {.kind = PS_ALIVE, .table = c->index, .hash = (int64_t)c->hash, .seq = ++c->seq, .tpull = -1};
    for (int j = 0; j < ps->S; j++) hx__ps_send(c, j, &h, sizeof h); /* a failure shows at the next
                                                                    request that waits for an answer */
}

static void touch(hx_emb_table *back)
{
    hx_emb_ps *c = hx_emb_as_ps(back);
    pthread_mutex_lock(&c->lock);
    hx__ps_alive_locked(c);
    pthread_mutex_unlock(&c->lock);
}

static hx_status save(hx_emb_table *back, const char *path, hx_emb_err *err)
{
    return hx_emb_table_save(back, path, err); /* the servers', after the write-backs sent before */
}

static hx_status load(hx_emb_table *back, const char *path, hx_emb_err *err)
{
    return hx_emb_table_load(back, path, err); /* refused: the servers load */
}

static hx_status set_optim(hx_emb_table *back, const hx_emb_optim *optim, int nthreads, hx_emb_err *err)
{
    (void)nthreads;
    return hx__ps_set_optim(hx_emb_as_ps(back), optim, err);
}

const hx_emb_devstore_ops hx__ps_devstore = {true, fetch, fetch_start, fetch_finish, store, save, load, set_optim,
                                            touch};

/* ---- the server's side ------------------------------------------------------------------- */

/* e's rows on this server into *out, checked against h (its record's
 * bytes, its ids). */
static hx_status records_of(const ps_entry *e, const ps_req *h, const int64_t *ids, hx_emb_local **out,
                            hx_emb_err *err)
{
    hx_emb_local *l = *out = hx_emb_shard_local(e->shard);
    if (!l) return hx_emb_fail(err, HX_ERR_STATE, "table '%s': this server holds none of its rows", e->name);
    size_t rec = record_bytes(&l->optim, l->base.dim, l->esize);
    if (h->rec != (int64_t)rec)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "table '%s': records of %lld bytes, the servers' rows "
                           "with their %s state take %zu", e->name, (long long)h->rec,
                           hx_emb_optim_name(l->optim.kind), rec);
    for (int64_t i = 0; i < h->n; i++)
        if (ids[i] < 0 || ids[i] >= l->base.rows)
            return hx_emb_fail(err, HX_ERR_INDEX, "table '%s': local row %lld outside this server's %lld rows",
                               e->name, (long long)ids[i], (long long)l->base.rows);
    return HX_OK;
}

hx_status hx__ps_fetch_reply(const ps_entry *e, const ps_req *h, int64_t applied, char **buf, size_t *nb,
                             hx_emb_err *err)
{
    const int64_t *ids = (const int64_t *)(h + 1);
    hx_emb_local *l;
    hx_status st = records_of(e, h, ids, &l, err);
    if (st) return st;
    int ns = hx_emb_optim_nstate(l->optim.kind);
    bool rowwise = l->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    int64_t pad = (h->n + 7) / 8 * 8, k = 0;
    *nb = sizeof(ps_reply) + (size_t)pad + (size_t)h->n * (size_t)h->rec;
    if (!(*buf = malloc(*nb))) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
    unsigned char *flag = (unsigned char *)*buf + sizeof(ps_reply);
    memset(flag, 0, (size_t)pad);
    char *r = (char *)flag + pad;
    for (int64_t i = 0; i < h->n; i++) {
        if (hx_emb_local_is_cold(l, ids[i])) continue; /* the worker takes its initial value */
        flag[i] = 1;
        hx_emb_local_pack_row(l, ids[i], ns, rowwise, r + (size_t)k++ * (size_t)h->rec);
    }
    ps_reply rp = {HX_OK, h->seq, applied, h->n, h->rec, 0, k};
    memcpy(*buf, &rp, sizeof rp);
    *nb = sizeof rp + (size_t)pad + (size_t)k * (size_t)h->rec;
    return HX_OK;
}

hx_status hx__ps_store(ps_entry *e, const ps_req *h, hx_emb_err *err)
{
    const int64_t *ids = (const int64_t *)(h + 1);
    hx_emb_local *l;
    hx_status st = records_of(e, h, ids, &l, err);
    if (st) return st;
    float *tmp = malloc((size_t)l->gstride * sizeof *tmp);
    if (!tmp) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
    const char *r = (const char *)(ids + h->n);
    for (int64_t i = 0; i < h->n; i++) {
        if (e->ver && h->step < e->ver[ids[i]]) continue; /* an older write-back than the row's value */
        if (e->ver) e->ver[ids[i]] = h->step;
        hx_emb_local_materialise(l, ids[i], tmp);
        hx_emb_local_unpack_row(l, ids[i], hx_emb_optim_nstate(l->optim.kind),
                                l->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD, r + (size_t)i * (size_t)h->rec);
    }
    free(tmp);
    return HX_OK;
}
