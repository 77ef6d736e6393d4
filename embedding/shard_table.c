/* The sharded table (embedding/shard.h): creation over a duplicate of the
 * caller's communicator, and the table interface (hx_emb_ops) in
 * collective mode: lookups and sparse updates exchange ids, rows and
 * gradients with the owners; this rank's part is an ordinary local or
 * dynamic table that the owners' work calls unchanged. */
#include "embedding/shard_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- lookups -------------------------------------------------------------------- */

hx_status hx__shard_ids_of(const hx_emb_shard *s, const hx_emb_query *q, int64_t **ids, signed char **skip,
                        hx_emb_err *err)
{
    size_t n = (size_t)(q->n ? q->n : 1);
    *ids = malloc(n * sizeof **ids);
    *skip = malloc(n);
    if (!*ids || !*skip) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    for (int64_t i = 0; i < q->n; i++) {
        int64_t id = hx_emb_id_at(q->ids, q->id_dtype, i);
        (*ids)[i] = id;
        (*skip)[i] = q->has_padding && id == q->padding_id ? -1
                     : !s->dynamic && (id < 0 || id >= s->base.rows) ? 1 : 0;
    }
    return HX_OK;
}

hx_status hx__shard_pool(const hx_emb_shard *s, const hx_emb_query *q, const hx_emb_route *r, float *rows,
                      float *out, int64_t *argmax, hx_emb_err *err)
{
    int64_t dim = s->base.dim, noff = q->mode == HX_EMB_ROWS ? 0 : q->n_offsets;
    int64_t *off = NULL;
    if (noff && q->id_dtype != HX_DTYPE_I64) {
        off = malloc((size_t)noff * sizeof *off);
        if (!off) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
        for (int64_t b = 0; b < noff; b++) off[b] = hx_emb_id_at(q->offsets, q->id_dtype, b);
    }
    hx_emb_local view;
    memset(&view, 0, sizeof view);
    view.base.ops = &hx_emb_local_ops;
    view.base.rows = r->U;
    view.base.dim = dim;
    view.dtype = HX_DTYPE_F32;
    view.esize = sizeof(float);
    view.stride = dim;
    view.gstride = hx_emb_row_stride(dim, HX_DTYPE_F32);
    view.oob = HX_EMB_OOB_ZERO;
    view.param = rows;
    view.backing_fd = -1;
    hx_emb_query rq = *q;
    rq.ids = r->inv;
    rq.id_dtype = HX_DTYPE_I64;
    if (off) rq.offsets = off;
    rq.padding_id = -1; /* padding positions are -1; zero rows -2 */
    hx_status st = hx_emb_local_lookup(&view, &rq, HX_EMB_OOB_ZERO, NULL, out, argmax, err);
    free(off);
    return st;
}

/* The owner's part of a lookup: the rows of the ids received into owned
 * (a DYNAMIC training lookup assigns rows to new keys here). rcnt (NULL
 * but for a frequency filter): each id's occurrences on the rank that
 * sent it, so that the filter counts them as one process would: the ids
 * are looked up that many times each and the first row kept. */
static hx_status owner_lookup(hx_emb_shard *s, const hx_emb_query *q, const hx_emb_route *r, const int64_t *rcnt,
                              float *owned, hx_emb_err *err)
{
    int64_t dim = s->base.dim, total = 0;
    for (int64_t i = 0; rcnt && i < r->nrecv; i++) total += rcnt[i] > 1 ? rcnt[i] : 1;
    int64_t *keys = rcnt ? malloc((size_t)total * sizeof *keys) : NULL;
    float *all = rcnt ? malloc((size_t)(total * dim) * sizeof *all) : NULL;
    if (rcnt && (!keys || !all)) {
        free(keys);
        free(all);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    }
    for (int64_t i = 0, k = 0; rcnt && i < r->nrecv; i++)
        for (int64_t c = 0; c < (rcnt[i] > 1 ? rcnt[i] : 1); c++) keys[k++] = r->recv[i];
    hx_emb_query lq = hx_emb_query_rows(rcnt ? keys : r->recv, rcnt ? total : r->nrecv);
    lq.train = q->train;
    lq.step = q->step;
    lq.nthreads = q->nthreads;
    hx_status st = hx_emb_table_lookup(s->part, &lq, rcnt ? all : owned, NULL, err);
    for (int64_t i = 0, k = 0; rcnt && !st && i < r->nrecv; k += rcnt[i] > 1 ? rcnt[i] : 1, i++)
        memcpy(owned + i * dim, all + k * dim, (size_t)dim * sizeof *owned);
    free(keys);
    free(all);
    return st;
}

static hx_status shard_lookup(hx_emb_table *t, const hx_emb_query *q, float *out, int64_t *argmax,
                              hx_emb_err *err)
{
    hx_emb_shard *s = (hx_emb_shard *)t;
    int64_t nbags = 0, dim = s->base.dim;
    hx_emb_err mine;
    hx_emb_query empty = hx_emb_query_rows(NULL, 0);
    hx_status verdict = hx_emb_query_check(q, &nbags, &mine);
    if (verdict) q = &empty; /* this rank sends nothing and fails with its message */
    if (!verdict && nbags > 0 && !out)
        verdict = hx_emb_fail(&mine, HX_ERR_INVALID_ARGUMENT, "sharded embedding lookup: out is NULL");
    if (!verdict && !s->dynamic)
        verdict = hx_emb_check_ids(q, s->base.rows, s->oob, &s->oob_count, "lookup (sharded)", &mine);
    int64_t *ids = NULL;
    signed char *skip = NULL;
    hx_emb_route r;
    memset(&r, 0, sizeof r);
    hx_emb_shard_hits hits = {0};
    pthread_mutex_lock(&s->lock);
    if (!verdict) verdict = hx__shard_ids_of(s, q, &ids, &skip, &mine);
    if (!verdict && s->hot) verdict = hx__shard_hot_split(s, ids, q->n, skip, &hits, &mine); /* read here */
    if (!verdict) verdict = hx__shard_route_plan(s, ids, verdict ? 0 : q->n, skip, s->dedup, &r, &mine);
    hx_emb_xkind kind = q->train ? HX_EMB_X_TRAIN_LOOKUP : HX_EMB_X_LOOKUP;
    hx_status st = hx__shard_exchange_ids(s, kind, &r, verdict, &mine, err);
    /* a frequency filter counts occurrences: each id's count goes with it */
    int64_t *cnt = NULL, *rcnt = NULL;
    if (!st && s->dynamic && q->train && s->mc.min_count > 1) {
        cnt = calloc((size_t)(r.U + 1), sizeof *cnt);
        rcnt = malloc((size_t)(r.nrecv + 1) * sizeof *rcnt);
        if (!cnt || !rcnt) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
        for (int64_t i = 0; i < q->n && !st; i++)
            if (r.inv[i] >= 0) cnt[r.inv[i]]++;
        if (!st) st = hx__shard_push_counts(s, &r, cnt, rcnt, err);
    }
    float *owned = NULL, *rows = NULL;
    if (!st) {
        owned = malloc((size_t)(r.nrecv * dim + 1) * sizeof *owned);
        rows = malloc((size_t)(r.U * dim + 1) * sizeof *rows);
        /* the owner's part: rows of the ids asked for (a DYNAMIC training
         * lookup assigns rows to new keys here) */
        hx_status own = owned && rows ? HX_OK
                                      : hx_emb_fail(&mine, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
        if (!own && r.nrecv) own = owner_lookup(s, q, &r, rcnt, owned, &mine);
        st = hx__shard_reply(s, kind, &r, owned, dim, own, &mine, rows, err);
    }
    if (!st && s->hot) st = hx__shard_hot_rows(s, &hits, &r, &rows, err);
    pthread_mutex_unlock(&s->lock);
    if (!st) st = hx__shard_pool(s, q, &r, rows, out, argmax, err);
    free(owned);
    free(rows);
    free(ids);
    free(skip);
    free(cnt);
    free(rcnt);
    hx__shard_hits_free(&hits);
    hx__shard_route_free(&r);
    return st;
}

/* ---- updates -------------------------------------------------------------------- */

/* g's rows applied by their owners as step `step`; verdict: this rank's
 * input failed before (it sends nothing and fails every rank). */
static hx_status update(hx_emb_shard *s, const hx_emb_sparse_grad *g, int64_t step, int nthreads,
                        hx_status verdict, hx_emb_err *mine, hx_emb_err *err)
{
    int64_t dim = s->base.dim, n = verdict ? 0 : g->n;
    signed char *skip = malloc((size_t)(n ? n : 1));
    if (!skip && !verdict) verdict = hx_emb_fail(mine, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    for (int64_t i = 0; !verdict && i < n; i++)
        skip[i] = !s->dynamic && (g->ids[i] < 0 || g->ids[i] >= s->base.rows); /* OOB_ZERO: no update */
    hx_emb_route r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&s->lock);
    if (!verdict && s->hot) verdict = hx_emb_hot_check(s->hot, mine); /* broken: every rank fails, none changes */
    if (!verdict && s->hot) hx_emb_hot_mark(s->hot, g, skip); /* their gradients go to every rank */
    /* no de-dup: repeated ids of g reach their owner in order */
    if (!verdict) verdict = hx__shard_route_plan(s, g->ids, n, skip, false, &r, mine);
    hx_status st = hx__shard_exchange_ids(s, HX_EMB_X_UPDATE, &r, verdict, mine, err);
    float *send = NULL, *recv = NULL;
    if (!st) {
        send = malloc((size_t)(r.U * dim + 1) * sizeof *send);
        recv = malloc((size_t)(r.nrecv * dim + 1) * sizeof *recv);
        if (!send || !recv) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
        for (int64_t k = 0; !st && k < r.U; k++)
            memcpy(send + k * dim, g->rows + r.first[k] * g->stride, (size_t)dim * sizeof *send);
        /* (out of memory here leaves the peers waiting: they fail when the
         * communicator's timeout passes, naming this rank) */
        if (!st) st = hx__shard_push(s, &r, send, dim, recv, err);
    }
    if (!st) {
        /* the owner: each id's rows from every rank summed in rank order, one step */
        hx_status own = HX_OK;
        if (r.nrecv) {
            hx_emb_query lq = hx_emb_query_rows(r.recv, r.nrecv);
            lq.nthreads = nthreads;
            hx_emb_grad_input gi = {recv, NULL, dim, HX_EMB_DEDUP_AUTO};
            own = hx_emb_table_backward_update(s->part, &lq, &gi, step, s->ws, mine);
        }
        st = hx__shard_agree(s, HX_EMB_X_UPDATE, own, mine, err);
    }
    if (!st && s->hot) st = hx__shard_hot_step(s, g, step, skip, err);
    pthread_mutex_unlock(&s->lock);
    free(send);
    free(recv);
    free(skip);
    hx__shard_route_free(&r);
    return st;
}

hx_status hx__shard_update(hx_emb_shard *s, const hx_emb_sparse_grad *g, int64_t step,
                           int nthreads, hx_emb_err *err)
{
    hx_emb_err mine;
    hx_status verdict = g && (g->n == 0 || (g->ids && g->rows && g->dim == s->base.dim)) ? HX_OK
        : hx_emb_fail(&mine, HX_ERR_INVALID_ARGUMENT, "sharded embedding update: a gradient of dim %lld "
                      "for a table of dim %lld", g ? (long long)g->dim : -1LL, (long long)s->base.dim);
    return update(s, g, step, nthreads, verdict, &mine, err);
}

static hx_status shard_apply(hx_emb_table *t, const hx_emb_sparse_grad *g, int64_t step, int nthreads,
                             hx_emb_err *err)
{
    return hx__shard_update((hx_emb_shard *)t, g, step, nthreads, err);
}

static hx_status shard_backward_update(hx_emb_table *t, const hx_emb_query *q, const hx_emb_grad_input *gi,
                                       int64_t step, hx_emb_workspace *ws, hx_emb_err *err)
{
    hx_emb_shard *s = (hx_emb_shard *)t;
    hx_emb_err mine;
    hx_emb_sparse_grad g;
    memset(&g, 0, sizeof g);
    hx_status verdict = HX_OK;
    if (!s->dynamic && s->oob == HX_EMB_OOB_ERROR)
        verdict = hx_emb_check_ids(q, s->base.rows, s->oob, NULL, "update (sharded)", &mine);
    if (!verdict) verdict = hx_emb_backward(q, gi, ws, &g, &mine);
    hx_status st = update(s, &g, step, q ? q->nthreads : 1, verdict, &mine, err);
    hx_emb_sparse_grad_free(&g);
    return st;
}

static void shard_free(hx_emb_table *t)
{
    hx_emb_shard *s = (hx_emb_shard *)t;
    hx_emb_hot_free(s->hot);
    hx_emb_table_free(s->part); /* a map's charge goes back with it */
    if (s->budget.parent) hx_emb_budget_give(s->budget.parent, atomic_load(&s->budget.used));
    hx_emb_workspace_free(s->ws);
    hx_comm_free(s->comm);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static const hx_emb_ops shard_ops = {"sharded", shard_lookup, shard_apply, shard_backward_update,
                                     hx__shard_save, hx__shard_load, shard_free};

hx_emb_shard *hx_emb_as_shard(hx_emb_table *t) { return t && t->ops == &shard_ops ? (hx_emb_shard *)t : NULL; }
hx_emb_table *hx_emb_shard_part(hx_emb_shard *s) { return s->part; }
hx_emb_local *hx_emb_shard_local(hx_emb_shard *s) { return s->local; }

size_t hx_emb_shard_bytes(hx_emb_shard *s)
{
    hx_emb_local_stats ls = {0};
    hx_emb_err err;
    if (s->local && hx_emb_local_stats_get(&s->local->base, &ls, &err)) ls.bytes = 0; /* never: a local table */
    hx_emb_idmap *m = s->dynamic && s->part ? hx_emb_dynamic_idmap(s->part) : NULL;
    return ls.bytes + (m ? hx_emb_idmap_bytes(m) : 0);
}
void hx_emb_shard_budget_under(hx_emb_shard *s, hx_emb_budget *parent) { s->budget.parent = parent; }
int hx_emb_shard_rank(const hx_emb_shard *s) { return s->rank; }
int hx_emb_shard_size(const hx_emb_shard *s) { return s->size; }
bool hx_emb_shard_table_wise(const hx_emb_shard *s) { return s->table_wise; }
const hx_emb_optim *hx_emb_shard_optim(const hx_emb_shard *s) { return &s->optim; }
void hx_emb_shard_set_dedup(hx_emb_shard *s, bool on) { s->dedup = on; }

void hx_emb_shard_stats_get(const hx_emb_shard *s, hx_emb_shard_stats *out)
{
    *out = s->stats;
    out->bytes_sent = hx__comm_bytes_sent(s->comm);
    out->out_of_range = atomic_load(&s->oob_count);
}

hx_status hx_emb_shard_set_optim(hx_emb_shard *s, const hx_emb_optim *o, int nthreads, hx_emb_err *err)
{
    pthread_mutex_lock(&s->lock);
    hx_status st = s->hot ? hx__shard_hot_flush(s, true, err) : HX_OK; /* rows back, state re-read */
    if (!st && s->local) st = hx_emb_local_set_optim(&s->local->base, o, nthreads, err);
    if (!st && s->hot) st = hx_emb_hot_set_optim(s->hot, o, err);
    if (!st) s->optim = *o;
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* ---- creation ------------------------------------------------------------------- */

/* What every rank must agree on, hashed. */
static uint64_t config_hash(const hx_emb_shard_config *c)
{
    const hx_emb_table_config *t = &c->tc;
    double d[16] = {t->init.a, t->init.b, t->optim.lr, t->optim.beta1, t->optim.beta2, t->optim.eps,
                    t->optim.weight_decay, t->optim.lr_decay, t->optim.initial_accumulator, t->optim.l1,
                    t->optim.l2, t->optim.l2_shrinkage, t->optim.lr_power};
    int64_t v[16] = {t->rows, t->dim, t->dtype, t->init.kind, (int64_t)t->init.seed, t->lazy_init, t->oob,
                     t->optim.kind, c->table_wise, c->owner, c->dynamic, c->mc.min_count,
                     c->mc.expire_after, c->mc.on_full, (int64_t)c->mc.seed, t->device_cache_rows};
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)d;
    for (size_t i = 0; i < sizeof d; i++) h = (h ^ p[i]) * 1099511628211ull;
    p = (const unsigned char *)v;
    for (size_t i = 0; i < sizeof v; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

hx_status hx__shard_make_part(hx_emb_shard *s, hx_emb_table **part, hx_emb_table **storage, hx_emb_err *err)
{
    hx_emb_table_config tc = s->tc;
    hx_emb_idmap_config mc = s->mc;
    int64_t R = tc.rows, N = s->size;
    *part = *storage = NULL;
    tc.optim = s->optim;
    tc.device_cache_rows = 0; /* the cache is the shard's (shard_hot.c) */
    if (s->table_wise) {
        if (s->rank != s->owner) return HX_OK;
    } else if (s->dynamic) {
        tc.rows = mc.capacity = (R + N - 1) / N;
    } else {
        if (s->rank >= R) return HX_OK;
        tc.rows = (R - s->rank + N - 1) / N;
        tc.row_stride = N; /* local row l starts as global row l * N + rank */
        tc.row_offset = s->rank;
    }
    hx_status st = s->dynamic ? hx_emb_dynamic_create(&tc, &mc, part, err) : hx_emb_local_create(&tc, part, err);
    if (!st) *storage = s->dynamic ? hx_emb_dynamic_local(*part) : *part;
    return st;
}

void hx__shard_init_place(hx_emb_shard *s, const hx_emb_shard_config *cfg, int size)
{
    s->base.rows = cfg->tc.rows;
    s->base.dim = cfg->tc.dim;
    s->size = size;
    s->table_wise = cfg->table_wise;
    s->owner = cfg->owner;
    s->dynamic = cfg->dynamic;
    s->dedup = true;
    s->owner_seed = cfg->mc.seed ^ 0x5348415244ull; /* not the map's own slot hash */
    s->oob = cfg->tc.oob;
    s->optim = cfg->tc.optim;
    s->tc = cfg->tc;
    s->mc = cfg->mc;
}

uint64_t hx__shard_config_hash(const hx_emb_shard_config *c) { return config_hash(c); }

/* This rank's part charged to s->budget (cap rank_bytes): its rows and
 * state, then a DYNAMIC part's map, which grows within the budget from
 * now on (hx_emb_idmap_set_budget). */
static hx_status charge_part(hx_emb_shard *s, size_t cap, int N, hx_emb_err *err)
{
    hx_emb_idmap *m = s->dynamic && s->part ? hx_emb_dynamic_idmap(s->part) : NULL;
    s->budget.cap = cap;
    hx_emb_err merr;
    hx_status st = hx_emb_budget_take(&s->budget, hx_emb_shard_bytes(s)) ? HX_ERR_OUT_OF_MEMORY : HX_OK;
    if (!st && m) { /* the map's bytes were in the figure above: charged by the map itself from now on */
        hx_emb_budget_give(&s->budget, hx_emb_idmap_bytes(m));
        st = hx_emb_idmap_set_budget(m, &s->budget, &merr);
    }
    size_t held = hx_emb_shard_bytes(s);
    if (!st || !cap || held <= cap) return st ? hx_emb_fail(err, st, "%s", merr.msg) : HX_OK;
    return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                       "rank %d's shard allocates %zu bytes (%lld of the table's %lld rows with their optimizer "
                       "state%s), over the per-rank cap of %zu bytes (rank_bytes): shard it over more ranks "
                       "(at least %zu) or raise the cap", s->rank, held,
                       (long long)(s->local ? s->local->base.rows : 0), (long long)s->tc.rows,
                       m ? ", and its id map with a queue for every row" : "", cap,
                       (held * (size_t)N + cap - 1) / cap);
}

hx_status hx_emb_shard_create(const hx_emb_shard_config *cfg, hx_emb_table **out, hx_emb_err *err)
{
    *out = NULL;
    int N = hx_comm_size(cfg->comm);
    if (N < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "sharded embedding: no communicator");
    if (cfg->table_wise && (cfg->owner < 0 || cfg->owner >= N))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "sharded embedding: table-wise on rank %d of a communicator of %d ranks",
                           cfg->owner, N);
    hx_emb_shard *s = calloc(1, sizeof *s);
    if (!s || !(s->ws = hx_emb_workspace_create())) {
        free(s);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    }
    hx__shard_init_place(s, cfg, N);
    s->base.ops = &shard_ops;
    pthread_mutex_init(&s->lock, NULL);
    hx_status st = hx__comm_dup(cfg->comm, &s->comm);
    if (st) {
        hx_emb_fail(err, st, "sharded embedding: %s", hx_last_error());
        hx_emb_workspace_free(s->ws);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return st;
    }
    s->rank = hx_comm_rank(s->comm);
    /* every rank's configuration must be rank 0's */
    int64_t mine = (int64_t)config_hash(cfg), *all = malloc((size_t)N * sizeof *all);
    hx_coll *q = NULL;
    st = all ? hx__comm_all_gather(s->comm, &mine, all, 1, HX_DTYPE_I64, &q) : HX_ERR_OUT_OF_MEMORY;
    if (!st) st = hx__coll_wait(q);
    if (st) hx_emb_fail(err, st, "sharded embedding: comparing the ranks' configurations: %s",
                        st == HX_ERR_OUT_OF_MEMORY ? "out of memory" : hx_last_error());
    for (int j = 1; j < N && !st; j++)
        if (all[j] != all[0])
            st = hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                             "sharded embedding: rank %d's table configuration differs from rank 0's "
                             "(rows, dim, dtype, initialiser, seed, ids, sharding, optimizer, device cache): every "
                             "rank must create the table alike", j);
    free(all);
    hx_emb_err perr;
    hx_emb_table *storage = NULL;
    hx_status pst = st ? HX_OK : hx__shard_make_part(s, &s->part, &storage, &perr);
    s->local = hx_emb_as_local(storage);
    if (!st && !pst && (cfg->rank_bytes || cfg->counted)) pst = charge_part(s, cfg->rank_bytes, N, &perr);
    if (!st) st = hx__shard_agree(s, HX_EMB_X_CREATE, pst, &perr, err);
    if (st) {
        shard_free(&s->base);
        return st;
    }
    *out = &s->base;
    return HX_OK;
}
