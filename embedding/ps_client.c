/* A worker's server-mode table (the table interface, embedding.h's
 * hx_emb_ops): a lookup routes its unique ids to their servers as
 * collective mode routes them to owners (hx__shard_route_plan over the
 * servers), pulls their rows once the servers have applied the steps the
 * staleness bound asks for, and pools them as a local table would
 * (hx__shard_pool); an update pushes each unique id's summed gradient to
 * its server, one push to every server each step (empty ones too: a
 * server applies a step when every worker's push of it has come); a save
 * asks the servers to save the table once they have applied every push
 * this worker made. The worker holds no rows beyond one call's, unless
 * hx_ps_config.cache_rows gives it a cache of pulled rows (ps_cache.c,
 * pull_cached below). */
#include "embedding/ps_impl.h"

#include <stdlib.h>
#include <string.h>


hx_status hx__ps_wait_reply(hx_emb_ps *c, int j, int64_t seq, hx_msg *m, hx_emb_err *err)
{
    hx_ps *ps = c->ps;
    double t0 = hx__now();
    for (long idle = 0;; idle++) {
        bool got = false;
        hx_status st = hx__msg_poll(ps->mb, ps->W + j, PS_TAG_REPLY + c->index, m, &got);
        if (st) return hx_emb_fail(err, st, "server mode: %s", hx_last_error());
        if (got && m->n >= sizeof(ps_reply) && ((const ps_reply *)m->data)->seq == seq) break;
        if (got) {
            free(m->data);
            continue;
        }
        if (hx__now() - t0 > ps->timeout_s)
            return hx_emb_fail(err, HX_ERR_COMM, "server mode: parameter server rank %d (server %d of %d) "
                               "did not answer within %g s: it died or hangs (hx_ps_config.timeout_s sets "
                               "the limit)", ps->W + j, j, ps->S, ps->timeout_s);
        hx__msg_idle(idle);
    }
    pthread_mutex_lock(&ps->lock);
    ps->stats.wait_s += hx__now() - t0;
    pthread_mutex_unlock(&ps->lock);
    return HX_OK;
}

hx_status hx__ps_server_failed(const hx_ps *ps, int j, const ps_reply *rp, size_t n, hx_emb_err *err)
{
    size_t text = n - sizeof *rp < (size_t)rp->msglen ? n - sizeof *rp : (size_t)rp->msglen;
    return hx_emb_fail(err, (hx_status)rp->status, "server rank %d: %.*s", ps->W + j, (int)text,
                       (const char *)(rp + 1));
}

hx_status hx__ps_send(hx_emb_ps *c, int j, const void *buf, size_t n)
{
    hx_status st = hx__msg_send(c->ps->mb, c->ps->W + j, PS_TAG_REQ, buf, n);
    if (!st) c->sent_at = hx__now();
    return st;
}

/* One pull's figures into the stats (rows received, from the cache, found
 * unchanged by the servers; the staleness of what it used). */
static void count_pull(hx_ps *ps, uint64_t bytes, int64_t rows, int64_t hits, int64_t current,
                       int64_t stale)
{
    pthread_mutex_lock(&ps->lock);
    ps->stats.pulls++;
    ps->stats.pull_bytes += bytes;
    ps->stats.rows_pulled += rows;
    ps->stats.cache_hits += hits;
    ps->stats.cache_current += current;
    if (stale > ps->stats.max_staleness) ps->stats.max_staleness = stale;
    pthread_mutex_unlock(&ps->lock);
}

/* Rows (k HX_EMB_SHARD_ROWS) or state array k of r's ids, width floats
 * each, into got (r->U x width, r->send's order), from the servers once
 * they have applied `need` steps. A DYNAMIC table's training pull (q: its
 * query) goes to every server, empty or not, numbered, with each id's
 * occurrences where a frequency filter counts them (cnt, r->send's
 * order). */
static hx_status pull(hx_emb_ps *c, const hx_emb_route *r, int k, const hx_emb_query *q, const int64_t *cnt,
                      int64_t need, int64_t width, float *got, hx_emb_err *err)
{
    bool train = q && q->train, group = train && c->route.dynamic;
    hx_ps *ps = c->ps;
    if (ps->rank_bytes && (size_t)(r->U * width) * sizeof(float) > ps->rank_bytes)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode: one pull of %lld rows of %lld floats "
                           "is over this worker's cap of %zu bytes (hx_ps_config.rank_bytes): give it "
                           "smaller batches or raise the cap", (long long)r->U, (long long)width,
                           ps->rank_bytes);
    int64_t seq = ++c->seq;
    ps_req h = {.kind = PS_PULL, .table = c->index, .hash = (int64_t)c->hash, .seq = seq, .step = c->pushes,
                .need = need, .k = k, .train = train, .qstep = q ? q->step : 0, .tpull = group ? c->tpulls++ : -1,
                .counts = cnt != NULL};
    uint64_t bytes = 0;
    hx_status st = HX_OK;
    for (int j = 0; j < ps->S && !st; j++) {
        if (!r->scount[j] && !group) continue;
        h.n = r->scount[j];
        size_t n = sizeof h + (size_t)h.n * sizeof(int64_t) * (cnt ? 2 : 1);
        char *buf = malloc(n);
        if (!buf) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode: out of memory");
        memcpy(buf, &h, sizeof h);
        memcpy(buf + sizeof h, r->send + r->sdispl[j], (size_t)h.n * sizeof(int64_t));
        if (cnt) memcpy(buf + sizeof h + (size_t)h.n * sizeof(int64_t), cnt + r->sdispl[j], (size_t)h.n * sizeof(int64_t));
        st = hx__ps_send(c, j, buf, n);
        free(buf);
        if (st) return hx_emb_fail(err, st, "server mode: %s", hx_last_error());
        bytes += n;
    }
    int64_t stale = 0, rows = 0;
    for (int j = 0; j < ps->S && !st; j++) {
        if (!r->scount[j] && !group) continue;
        hx_msg m;
        if ((st = hx__ps_wait_reply(c, j, seq, &m, err))) break;
        const ps_reply *rp = m.data;
        bytes += m.n;
        if (rp->status)
            st = hx__ps_server_failed(ps, j, rp, m.n, err);
        else if (rp->n != r->scount[j] || rp->width != width ||
                 m.n != sizeof *rp + (size_t)(rp->n * rp->width) * sizeof(float))
            st = hx_emb_fail(err, HX_ERR_COMM, "server mode: server rank %d answered %lld rows of %lld for "
                             "%lld of %lld", ps->W + j, (long long)rp->n, (long long)rp->width,
                             (long long)r->scount[j], (long long)width);
        else
            memcpy(got + r->sdispl[j] * width, rp + 1, (size_t)(rp->n * width) * sizeof(float));
        if (!st && k == HX_EMB_SHARD_ROWS) rows += rp->n;
        if (!st && c->pushes - rp->applied > stale) stale = c->pushes - rp->applied;
        free(m.data);
    }
    count_pull(ps, bytes, rows, 0, 0, stale);
    return st;
}

static int64_t need_of(const hx_emb_ps *c) { return c->pushes - c->ps->staleness; }

/* pull's rows through the worker's cache (a fixed table's rows, c->cache,
 * keyed by local id * servers + server: each row once):
 * a kept row at least `need` steps fresh is used as it is; every other id
 * goes to its server with the version of the row kept (-1: none), and the
 * server returns only the rows that changed since (ps_serve.c's
 * answer_versions): the rest are the kept ones, so got holds the rows a
 * plain pull would give. */
static hx_status pull_cached(hx_emb_ps *c, const hx_emb_route *r, int64_t need, float *got, hx_emb_err *err)
{
    hx_ps *ps = c->ps;
    int64_t dim = c->base.dim, hits = 0, current = 0, rows = 0, stale = 0;
    int64_t *ask = malloc((size_t)(2 * r->U + 1) * sizeof *ask), *at = malloc((size_t)(r->U + 1) * sizeof *at);
    if (!ask || !at) {
        free(ask);
        free(at);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode: out of memory");
    }
    int64_t seq = ++c->seq;
    ps_req h = {.kind = PS_PULL, .table = c->index, .hash = (int64_t)c->hash, .seq = seq, .step = c->pushes,
                .need = need, .k = HX_EMB_SHARD_ROWS, .tpull = -1, .vers = 1};
    uint64_t bytes = 0;
    hx_status st = HX_OK;
    int64_t *asked = calloc((size_t)ps->S, sizeof *asked); /* ids asked of each server */
    if (!asked) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode: out of memory");
    for (int j = 0; j < ps->S && !st; j++) {
        int64_t na = 0;
        int64_t *ids = ask, *vers = ask + r->scount[j];
        for (int64_t u = r->sdispl[j]; u < r->sdispl[j] + r->scount[j]; u++) {
            int64_t ver = -1;
            const float *row = hx__ps_cache_get(c->cache, r->send[u] * ps->S + j, &ver);
            if (row) memcpy(got + u * dim, row, (size_t)dim * sizeof *got);
            if (row && ver >= need) { /* fresh enough: not asked */
                hits++;
                if (c->pushes - ver > stale) stale = c->pushes - ver;
                continue;
            }
            ids[na] = r->send[u];
            vers[na] = row ? ver : -1;
            at[r->sdispl[j] + na++] = u;
        }
        if (!na) continue;
        memmove(ask + na, vers, (size_t)na * sizeof *ask);
        h.n = na;
        size_t n = sizeof h + 2 * (size_t)na * sizeof(int64_t);
        char *buf = malloc(n);
        if (!buf) {
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode: out of memory");
            break;
        }
        memcpy(buf, &h, sizeof h);
        memcpy(buf + sizeof h, ask, 2 * (size_t)na * sizeof(int64_t));
        st = hx__ps_send(c, j, buf, n);
        free(buf);
        if (st) st = hx_emb_fail(err, st, "server mode: %s", hx_last_error());
        bytes += n;
        asked[j] = na;
    }
    for (int j = 0; j < ps->S && !st; j++) {
        if (!asked[j]) continue;
        hx_msg m;
        if ((st = hx__ps_wait_reply(c, j, seq, &m, err))) break;
        const ps_reply *rp = m.data;
        int64_t na = asked[j], pad = (na + 7) / 8 * 8;
        const unsigned char *flag = (const unsigned char *)(rp + 1);
        int64_t sent = 0;
        for (int64_t i = 0; !rp->status && rp->n == na && m.n >= sizeof *rp + (size_t)pad && i < na; i++)
            sent += flag[i] != 0;
        bytes += m.n;
        if (rp->status)
            st = hx__ps_server_failed(ps, j, rp, m.n, err);
        else if (rp->n != na || rp->width != dim || rp->rows != sent ||
                 m.n != sizeof *rp + (size_t)pad + (size_t)(sent * dim) * sizeof(float))
            st = hx_emb_fail(err, HX_ERR_COMM, "server mode: server rank %d answered %lld rows of %lld ids for %lld",
                             ps->W + j, (long long)rp->rows, (long long)rp->n, (long long)na);
        const float *row = (const float *)(flag + pad);
        for (int64_t i = 0; i < na && !st; i++) {
            float *dst = got + at[r->sdispl[j] + i] * dim;
            if (flag[i]) {
                memcpy(dst, row, (size_t)dim * sizeof *dst);
                row += dim;
                rows++;
            } else {
                current++;
            }
            hx__ps_cache_put(c->cache, r->send[at[r->sdispl[j] + i]] * ps->S + j, rp->applied, dst);
        }
        if (!st && c->pushes - rp->applied > stale) stale = c->pushes - rp->applied;
        free(m.data);
    }
    free(asked);
    free(ask);
    free(at);
    count_pull(ps, bytes, rows, hits, current, stale);
    return st;
}

/* Rows (k HX_EMB_SHARD_ROWS) or state array k of r's ids (global rows:
 * ids[r->first[u]]) with a cache of hot rows (ps_hot.c): the cached ones
 * read from their slots, the others pulled as the cache of pulled rows,
 * or a plain pull, would; got as pull's. Counts the lookup's hits. A
 * lookup that every slot serves sends the servers nothing: the worker
 * says it lives (hx__ps_alive_locked), so that they can tell it from a
 * dead one (ps_serve.c's check_silent). */
static hx_status pull_hot(hx_emb_ps *c, const hx_emb_route *r, const int64_t *ids, int k, const hx_emb_query *q,
                          int64_t need, int64_t width, float *got, hx_emb_err *err)
{
    hx_ps *ps = c->ps;
    hx_status st = hx_emb_hot_readable(c->hot, err);
    if (st) return st;
    hx__ps_alive_locked(c);
    hx_emb_route sub;
    memset(&sub, 0, sizeof sub);
    int64_t *at = malloc((size_t)(r->U + 1) * sizeof *at);
    float *part = malloc((size_t)(r->U * width + 1) * sizeof *part);
    float *tmp = malloc((size_t)hx_emb_row_stride(c->base.dim, HX_DTYPE_F32) * sizeof *tmp);
    sub.send = malloc((size_t)(r->U + 1) * sizeof *sub.send);
    sub.scount = calloc((size_t)ps->S * 4, sizeof *sub.scount); /* as a route's: sdispl follows */
    if (!at || !part || !tmp || !sub.send || !sub.scount)
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode: out of memory");
    else
        sub.sdispl = sub.scount + ps->S;
    int64_t hits = 0;
    for (int j = 0; j < ps->S && !st; j++) {
        sub.sdispl[j] = sub.U;
        for (int64_t u = r->sdispl[j]; u < r->sdispl[j] + r->scount[j]; u++) {
            int32_t slot = hx_emb_hot_slot(c->hot, ids[r->first[u]]);
            if (slot >= 0) {
                hx_emb_hot_read(c->hot, k, slot, tmp);
                memcpy(got + u * width, tmp, (size_t)width * sizeof *got);
                hits++;
                continue;
            }
            at[sub.U] = u;
            sub.send[sub.U++] = r->send[u];
            sub.scount[j]++;
        }
    }
    if (!st && sub.U)
        st = k == HX_EMB_SHARD_ROWS && c->cache ? pull_cached(c, &sub, need, part, err)
                                                : pull(c, &sub, k, q, NULL, need, width, part, err);
    for (int64_t i = 0; i < sub.U && !st; i++)
        memcpy(got + at[i] * width, part + i * width, (size_t)width * sizeof *got);
    if (!st && q) hx_emb_hot_count(c->hot, r->U, hits);
    hx__shard_route_free(&sub);
    free(at);
    free(part);
    free(tmp);
    return st;
}

static hx_status ps_lookup(hx_emb_table *t, const hx_emb_query *q, float *out, int64_t *argmax, hx_emb_err *err)
{
    hx_emb_ps *c = (hx_emb_ps *)t;
    int64_t nbags = 0, dim = c->base.dim;
    hx_status st = hx_emb_query_check(q, &nbags, err);
    if (!st && nbags > 0 && !out)
        st = hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "server-mode embedding lookup: out is NULL");
    /* an id outside the table fails here, before anything is sent (a DYNAMIC table's ids are keys) */
    if (!st && !c->route.dynamic)
        st = hx_emb_check_ids(q, c->base.rows, c->route.oob, &c->oob_count, "lookup (server mode)", err);
    if (st) return st;
    int64_t *ids = NULL, *cnt = NULL;
    signed char *skip = NULL;
    float *rows = NULL;
    hx_emb_route r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&c->lock);
    st = hx__shard_ids_of(&c->route, q, &ids, &skip, err);
    if (!st) st = hx__shard_route_plan(&c->route, ids, q->n, skip, true, &r, err);
    if (!st && !(rows = malloc((size_t)(r.U * dim + 1) * sizeof *rows)))
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server-mode embedding lookup: out of memory");
    /* a frequency filter counts occurrences: each unique id's go with it (as collective mode's) */
    if (!st && c->route.dynamic && q->train && c->route.mc.min_count > 1) {
        if (!(cnt = calloc((size_t)(r.U + 1), sizeof *cnt)))
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server-mode embedding lookup: out of memory");
        for (int64_t i = 0; i < q->n && !st; i++)
            if (r.inv[i] >= 0) cnt[r.inv[i]]++;
    }
    if (!st) st = c->hot     ? pull_hot(c, &r, ids, HX_EMB_SHARD_ROWS, q, need_of(c), dim, rows, err)
                  : c->cache ? pull_cached(c, &r, need_of(c), rows, err)
                             : pull(c, &r, HX_EMB_SHARD_ROWS, q, cnt, need_of(c), dim, rows, err);
    pthread_mutex_unlock(&c->lock);
    if (!st) st = hx__shard_pool(&c->route, q, &r, rows, out, argmax, err);
    free(rows);
    free(ids);
    free(cnt);
    free(skip);
    hx__shard_route_free(&r);
    return st;
}

/* g to the servers as step c->pushes (optimizer t = step): one message to
 * each server, its ids and their rows; with a cache of hot rows, those
 * rows' gradients go to the workers instead (ps_hot.c), and the rows it
 * admits are fetched once the servers have applied the step. */
static hx_status push(hx_emb_ps *c, const hx_emb_sparse_grad *g, int64_t step, hx_emb_err *err)
{
    hx_ps *ps = c->ps;
    int64_t dim = c->base.dim, n = g->n;
    signed char *skip = malloc((size_t)(n ? n : 1));
    if (!skip) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server-mode embedding update: out of memory");
    for (int64_t i = 0; i < n; i++) /* OOB_ZERO: no update (a DYNAMIC table's ids are keys) */
        skip[i] = !c->route.dynamic && (g->ids[i] < 0 || g->ids[i] >= c->base.rows);
    hx_emb_route r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&c->lock);
    hx_status was = c->hot ? c->hot->broken : HX_OK;
    hx_status st = c->hot ? hx__ps_hot_update(c, g, step, skip, err) : HX_OK;
    /* this worker's cache broke after the workers' exchange (a store of
     * victims failed): its push still goes, so that the step the others
     * pushed is applied and none of them waits for it; the call fails,
     * and the next exchange fails every worker */
    hx_emb_err late = {""};
    hx_status broke = st && !was && c->hot->broken ? st : HX_OK;
    if (broke) {
        late = *err;
        st = HX_OK;
    }
    if (!st) st = hx__shard_route_plan(&c->route, g->ids, n, skip, false, &r, err);
    ps_req h = {.kind = PS_PUSH, .table = c->index, .hash = (int64_t)c->hash, .seq = ++c->seq,
                .step = c->pushes, .optim = c->route.optim.kind, .optstep = step};
    uint64_t bytes = 0;
    for (int j = 0; j < ps->S && !st; j++) {
        h.n = r.scount[j];
        size_t nb = sizeof h + (size_t)h.n * (sizeof(int64_t) + (size_t)dim * sizeof(float));
        char *buf = malloc(nb);
        if (!buf) {
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server-mode embedding update: out of memory");
            break;
        }
        memcpy(buf, &h, sizeof h);
        memcpy(buf + sizeof h, r.send + r.sdispl[j], (size_t)h.n * sizeof(int64_t));
        float *rows = (float *)(buf + sizeof h + (size_t)h.n * sizeof(int64_t));
        for (int64_t u = 0; u < h.n; u++)
            memcpy(rows + u * dim, g->rows + r.first[r.sdispl[j] + u] * g->stride, (size_t)dim * sizeof(float));
        st = hx__ps_send(c, j, buf, nb);
        free(buf);
        if (st) st = hx_emb_fail(err, st, "server mode: %s", hx_last_error());
        bytes += nb;
    }
    if (!st) c->pushes++;
    if (c->hot) st = hx__ps_hot_fill(c, st, err);
    int64_t pushes = c->pushes;
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&ps->lock);
    ps->stats.pushes += !st;
    ps->stats.steps = ps->stats.steps > pushes ? ps->stats.steps : pushes;
    ps->stats.push_bytes += bytes;
    pthread_mutex_unlock(&ps->lock);
    if (broke && !st) {
        st = broke;
        *err = late;
    }
    free(skip);
    hx__shard_route_free(&r);
    return st;
}

static hx_status ps_apply(hx_emb_table *t, const hx_emb_sparse_grad *g, int64_t step, int nthreads, hx_emb_err *err)
{
    hx_emb_ps *c = (hx_emb_ps *)t;
    if (!g || (g->n && (!g->ids || !g->rows || g->dim != c->base.dim)))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "server-mode embedding update: a gradient of dim %lld "
                           "for a table of dim %lld", g ? (long long)g->dim : -1LL, (long long)c->base.dim);
    return push(c, g, step, err);
}

static hx_status ps_backward_update(hx_emb_table *t, const hx_emb_query *q, const hx_emb_grad_input *gi,
                                    int64_t step, hx_emb_workspace *ws, hx_emb_err *err)
{
    hx_emb_ps *c = (hx_emb_ps *)t;
    hx_status st = c->route.oob == HX_EMB_OOB_ERROR && !c->route.dynamic
                       ? hx_emb_check_ids(q, c->base.rows, c->route.oob, NULL, "update (server mode)", err)
                       : HX_OK;
    hx_emb_sparse_grad g;
    memset(&g, 0, sizeof g);
    if (!st) st = hx_emb_backward(q, gi, ws, &g, err);
    if (!st) st = push(c, &g, step, err);
    hx_emb_sparse_grad_free(&g);
    return st;
}

/* A save by the servers, once they have applied every push this worker
 * made (embedding/ps_serve.c): one request to each, their replies awaited. */
static hx_status ps_save(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    hx_emb_ps *c = (hx_emb_ps *)t;
    hx_ps *ps = c->ps;
    size_t len = strlen(path);
    if (!len || len > 4096)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "server-mode save: a path of %zu bytes: give 1 to 4096",
                           len);
    char *buf = malloc(sizeof(ps_req) + len);
    if (!buf) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server-mode save: out of memory");
    pthread_mutex_lock(&c->lock);
    hx_status st = c->hot ? hx__ps_hot_flush(c, err) : HX_OK; /* the cached rows that changed, first */
    ps_req h = {.kind = PS_SAVE, .table = c->index, .hash = (int64_t)c->hash, .seq = ++c->seq, .step = c->pushes,
                .need = c->pushes, .n = (int64_t)len};
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, path, len);
    for (int j = 0; j < ps->S && !st; j++)
        if ((st = hx__ps_send(c, j, buf, sizeof h + len)))
            st = hx_emb_fail(err, st, "server mode: %s", hx_last_error());
    free(buf);
    /* every server's answer (a failed save fails on all of them: the first one's message) */
    for (int j = 0; j < ps->S && !st; j++) {
        hx_msg m;
        if ((st = hx__ps_wait_reply(c, j, h.seq, &m, err))) break;
        const ps_reply *rp = m.data;
        if (rp->status)
            st = hx__ps_server_failed(ps, j, rp, m.n, err);
        free(m.data);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

static hx_status ps_load(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    return hx_emb_fail(err, HX_ERR_UNSUPPORTED, "a worker holds no rows of a server-mode table: load it on "
                       "the servers (hx_embedding_table_load there, before hx_ps_serve)");
}

static void ps_free(hx_emb_table *t)
{
    hx_emb_ps *c = (hx_emb_ps *)t;
    if (c->hot && c->ps->index == 0 && !c->ps->finished) { /* worker 0 writes the hot rows back */
        hx_emb_err err;
        pthread_mutex_lock(&c->lock);
        hx__ps_hot_flush(c, &err); /* failed: the servers keep the rows as last written back */
        pthread_mutex_unlock(&c->lock);
    }
    hx__ps_forget(c->ps, t);
    hx__ps_cache_free(c->cache);
    hx__ps_hot_free(c);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static const hx_emb_ops ps_ops = {"server mode", ps_lookup, ps_apply, ps_backward_update, ps_save, ps_load,
                                  ps_free};

hx_emb_ps *hx_emb_as_ps(hx_emb_table *t) { return t && t->ops == &ps_ops ? (hx_emb_ps *)t : NULL; }
const hx_emb_optim *hx__ps_optim(const hx_emb_ps *c) { return &c->route.optim; }
hx_status hx__ps_set_optim(hx_emb_ps *c, const hx_emb_optim *o, hx_emb_err *err)
{
    pthread_mutex_lock(&c->lock);
    hx_status st = c->hot ? hx__ps_hot_set_optim(c, o, err) : HX_OK;
    if (!st) c->route.optim = *o;
    pthread_mutex_unlock(&c->lock);
    return st;
}

bool hx__ps_device_stats(hx_emb_ps *c, hx_emb_devcache_stats *out)
{
    if (!c->hot) return false;
    pthread_mutex_lock(&c->lock);
    hx_emb_hot_stats(c->hot, out);
    pthread_mutex_unlock(&c->lock);
    return true;
}

hx_emb_table *hx__ps_client_create(hx_ps *ps, const hx_emb_shard_config *sc, const char *name,
                                   uint64_t hash, int index)
{
    hx_emb_ps *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    hx__shard_init_place(&c->route, sc, ps->S);
    c->base.ops = &ps_ops;
    c->base.rows = sc->tc.rows;
    c->base.dim = sc->tc.dim;
    c->ps = ps;
    c->index = index;
    c->hash = hash;
    if (ps->cache_rows > 0 && !sc->dynamic &&
        !(c->cache = hx__ps_cache_create(ps->cache_rows < sc->tc.rows ? ps->cache_rows : sc->tc.rows, sc->tc.dim))) {
        free(c);
        return NULL;
    }
    snprintf(c->name, sizeof c->name, "%s", name);
    pthread_mutex_init(&c->lock, NULL);
    return &c->base;
}

hx_status hx__ps_read(hx_emb_ps *c, int k, const int64_t *ids, int64_t n, float *out, hx_emb_err *err)
{
    bool state = k != HX_EMB_SHARD_ROWS;
    const char *fn = state ? "read state (server mode)" : "read rows (server mode)";
    int ns = hx_emb_optim_nstate(c->route.optim.kind);
    int64_t dim = c->base.dim, width = state && c->route.optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD ? 1 : dim;
    if (state && (k < 0 || k >= ns))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "%s: state array %d: the table's optimizer (%s) keeps %d",
                           fn, k, hx_emb_optim_name(c->route.optim.kind), ns);
    if (n < 0 || (n && (!ids || !out)))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "%s: %lld ids at %p, out at %p", fn, (long long)n,
                           (const void *)ids, (void *)out);
    for (int64_t i = 0; i < n && !c->route.dynamic; i++)
        if (ids[i] < 0 || ids[i] >= c->base.rows)
            return hx_emb_fail(err, HX_ERR_INDEX, "%s: id %lld at position %lld is outside the table's rows "
                               "[0, %lld)", fn, (long long)ids[i], (long long)i, (long long)c->base.rows);
    hx_emb_route r;
    float *got = NULL;
    pthread_mutex_lock(&c->lock);
    hx_status st = hx__shard_route_plan(&c->route, ids, n, NULL, true, &r, err);
    if (!st && !(got = malloc((size_t)(r.U * width + 1) * sizeof *got)))
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    /* every push of this worker applied first */
    if (!st) st = c->hot ? pull_hot(c, &r, ids, k, NULL, c->pushes, width, got, err)
                         : pull(c, &r, k, NULL, NULL, c->pushes, width, got, err);
    pthread_mutex_unlock(&c->lock);
    for (int64_t i = 0; i < n && !st; i++) memcpy(out + i * width, got + r.inv[i] * width, (size_t)width * sizeof *out);
    free(got);
    hx__shard_route_free(&r);
    return st;
}
