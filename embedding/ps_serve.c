/* A server's loop (hetex.h's hx_ps_serve): requests taken in the order
 * they arrive; a push waits in its worker's queue until every worker's
 * push of that step is there (or the worker finished), and then the step
 * is applied to the shard as collective mode's owner applies one (the
 * workers' rows concatenated in worker order, one fused backward_update
 * that sums each id's rows in that order); a pull is answered as soon as
 * its table has applied the steps it needs (at once, or after a step), and
 * a worker's save of a table waits as a pull does, then runs the table's
 * collective save over the servers (each server takes that request at the
 * same step: the one after the saving worker's last push, whose next push
 * comes after it). A DYNAMIC table's training pulls are answered
 * together: the workers' k-th ones, once all are here, as one lookup of
 * their keys in worker order (collective mode's order), so keys get their
 * rows, and filter counts their occurrences, as they would there. */
#include "embedding/ps_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct server {
    hx_ps *ps;
    bool *finished;
    double *heard;     /* when each worker last sent anything */
    hx_status failed;  /* the loop's end: every waiting pull is told why */
    char why[700];
} server;

/* A reply to request h of worker dst about table `table`. */
static hx_status reply(server *sv, int dst, const ps_req *h, hx_status status, const char *msg, int64_t applied,
                       const float *rows, int64_t n, int64_t width)
{
    size_t ml = status ? strlen(msg) : 0, nb = sizeof(ps_reply) + ml + (status ? 0 : (size_t)(n * width) * sizeof(float));
    char *buf = malloc(nb);
    if (!buf) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_ps_serve: out of host memory for a reply");
    ps_reply r = {status, h->seq, applied, status ? 0 : n, width, (int64_t)ml, status ? 0 : n};
    memcpy(buf, &r, sizeof r);
    if (status) memcpy(buf + sizeof r, msg, ml);
    else if (n) memcpy(buf + sizeof r, rows, (size_t)(n * width) * sizeof(float));
    hx_status st = hx__msg_send(sv->ps->mb, dst, PS_TAG_REPLY + (int)h->table, buf, nb);
    free(buf);
    if (!st) {
        pthread_mutex_lock(&sv->ps->lock);
        sv->ps->stats.pull_bytes += nb;
        pthread_mutex_unlock(&sv->ps->lock);
    }
    return st;
}

/* A versioned pull of a fixed table's rows (a worker's cache sent the
 * version of each copy it holds): n flags, then the rows of the ids whose
 * row changed since (or that it does not hold). */
static hx_status answer_versions(server *sv, ps_entry *e, const hx_msg *m)
{
    const ps_req *h = m->data;
    const int64_t *ids = (const int64_t *)(h + 1), *vers = ids + h->n;
    int64_t dim = e->shard->base.dim, pad = (h->n + 7) / 8 * 8, k = 0;
    hx_emb_err err;
    hx_status st = HX_OK;
    for (int64_t i = 0; i < h->n && !st; i++)
        if (ids[i] < 0 || !e->ver || ids[i] >= e->shard->part->rows)
            st = hx_emb_fail(&err, HX_ERR_INDEX, "table '%s': local row %lld outside server %d's rows", e->name,
                             (long long)ids[i], sv->ps->index);
    size_t nb = sizeof(ps_reply) + (size_t)pad + (size_t)(h->n * dim) * sizeof(float);
    char *buf = st ? NULL : malloc(nb);
    int64_t *changed = st ? NULL : malloc((size_t)(h->n + 1) * sizeof *changed);
    if (!st && (!buf || !changed)) st = hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
    if (!st) {
        unsigned char *flag = (unsigned char *)buf + sizeof(ps_reply);
        memset(flag, 0, (size_t)pad);
        for (int64_t i = 0; i < h->n; i++)
            if (vers[i] < 0 || e->ver[ids[i]] > vers[i]) {
                flag[i] = 1;
                changed[k++] = ids[i];
            }
        hx_emb_query q = hx_emb_query_rows(changed, k);
        if (k) st = hx_emb_table_lookup(e->shard->part, &q, (float *)(flag + pad), NULL, &err);
    }
    free(changed);
    if (st) {
        free(buf);
        return reply(sv, m->src, h, st, err.msg, e->applied, NULL, 0, 0);
    }
    ps_reply r = {HX_OK, h->seq, e->applied, h->n, dim, 0, k};
    memcpy(buf, &r, sizeof r);
    nb = sizeof r + (size_t)pad + (size_t)(k * dim) * sizeof(float);
    st = hx__msg_send(sv->ps->mb, m->src, PS_TAG_REPLY + (int)h->table, buf, nb);
    free(buf);
    pthread_mutex_lock(&sv->ps->lock);
    sv->ps->stats.pulls++;
    sv->ps->stats.rows_pulled += k;
    if (h->step - e->applied > sv->ps->stats.max_staleness) sv->ps->stats.max_staleness = h->step - e->applied;
    if (!st) sv->ps->stats.pull_bytes += nb;
    pthread_mutex_unlock(&sv->ps->lock);
    return st;
}

/* The rows or state a pull asks for, answered. */
static hx_status answer(server *sv, ps_entry *e, const hx_msg *m)
{
    if (((const ps_req *)m->data)->vers) return answer_versions(sv, e, m);
    hx_ps *ps = sv->ps;
    const ps_req *h = m->data;
    const int64_t *ids = (const int64_t *)(h + 1);
    hx_emb_shard *s = e->shard;
    int64_t dim = s->base.dim, width = dim;
    bool state = h->k != HX_EMB_SHARD_ROWS;
    if (state && s->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD) width = 1;
    hx_emb_err err;
    hx_status st = HX_OK;
    hx_emb_local *l = hx_emb_shard_local(s);
    int ns = hx_emb_optim_nstate(s->optim.kind);
    if (!l) st = hx_emb_fail(&err, HX_ERR_STATE, "table '%s': server %d holds none of its rows", e->name, ps->index);
    else if (state && (h->k < 0 || h->k >= ns))
        st = hx_emb_fail(&err, HX_ERR_INVALID_ARGUMENT, "table '%s': state array %lld: the servers' optimizer "
                         "(%s) keeps %d", e->name, (long long)h->k, hx_emb_optim_name(s->optim.kind), ns);
    for (int64_t i = 0; i < h->n && !st && !s->dynamic; i++)
        if (ids[i] < 0 || ids[i] >= l->base.rows)
            st = hx_emb_fail(&err, HX_ERR_INDEX, "table '%s': local row %lld outside server %d's %lld rows",
                             e->name, (long long)ids[i], ps->index, (long long)l->base.rows);
    float *out = st ? NULL : malloc((size_t)(h->n * width + 1) * sizeof *out);
    float *tmp = st ? NULL : malloc((size_t)hx_emb_row_stride(dim, HX_DTYPE_F32) * sizeof *tmp);
    int64_t *rows = st || !state ? NULL : malloc((size_t)(h->n + 1) * sizeof *rows);
    if (!st && (!out || !tmp || (state && !rows))) st = hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
    if (!st && !state) {
        hx_emb_query q = hx_emb_query_rows(ids, h->n);
        q.train = (int)h->train;
        q.step = h->qstep;
        st = hx_emb_table_lookup(s->part, &q, out, NULL, &err);
    }
    if (!st && state) { /* a DYNAMIC key's row (-1: none, read as the state's start) */
        if (s->dynamic) st = hx_emb_idmap_map(hx_emb_dynamic_idmap(s->part), ids, h->n, 0, 0, rows, NULL, NULL, &err);
        else memcpy(rows, ids, (size_t)h->n * sizeof *rows);
    }
    for (int64_t i = 0; i < h->n && !st && state; i++) {
        hx_emb_local_read_state(l, (int)h->k, rows[i], tmp);
        memcpy(out + i * width, tmp, (size_t)width * sizeof *out);
    }
    pthread_mutex_lock(&ps->lock);
    ps->stats.pulls++;
    if (!st && !state) ps->stats.rows_pulled += h->n;
    if (h->step - e->applied > ps->stats.max_staleness) ps->stats.max_staleness = h->step - e->applied;
    pthread_mutex_unlock(&ps->lock);
    hx_status x = reply(sv, m->src, h, st, err.msg, e->applied, out, h->n, width);
    free(out);
    free(tmp);
    free(rows);
    return x;
}

/* The workers' k-th training pulls of a DYNAMIC table, once each worker's
 * is here (or it finished) and the steps they need are applied: one
 * lookup over their keys in worker order (each repeated by its count where
 * a frequency filter counts them), as collective mode's owner looks up
 * the ranks' keys in rank order, so that keys get their rows in the same
 * order (the first copy's row goes back); each worker gets its keys'. */
static hx_status answer_group(server *sv, ps_entry *e)
{
    hx_ps *ps = sv->ps;
    hx_emb_shard *s = e->shard;
    int W = ps->W;
    int64_t dim = s->base.dim;
    for (;;) {
        const ps_req *first = NULL;
        int64_t total = 0;
        for (int w = 0; w < W; w++) {
            ps_pull *p = e->thead[w];
            if (!p && !sv->finished[w]) return HX_OK; /* waits for w */
            if (!p) continue;
            const ps_req *h = p->m.data;
            if (h->need > e->applied) return HX_OK;
            if (first && h->tpull != first->tpull)
                return hx__error(HX_ERR_STATE, "hx_ps_serve: table '%s': worker rank %d made training lookup %lld "
                                 "while another made %lld: every worker makes the same lookups in the same order",
                                 e->name, w, (long long)h->tpull, (long long)first->tpull);
            if (!first) first = h;
            const int64_t *cnt = (const int64_t *)(h + 1) + h->n;
            for (int64_t i = 0; i < h->n; i++) total += h->counts && cnt[i] > 1 ? cnt[i] : 1;
        }
        if (!first) return HX_OK;
        int64_t *keys = malloc((size_t)(total + 1) * sizeof *keys);
        float *all = malloc((size_t)(total * dim + 1) * sizeof *all);
        hx_emb_err err;
        hx_status st = keys && all ? HX_OK : hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
        int64_t k = 0;
        for (int w = 0; w < W && !st; w++) {
            if (!e->thead[w]) continue;
            const ps_req *h = e->thead[w]->m.data;
            const int64_t *id = (const int64_t *)(h + 1), *cnt = id + h->n;
            for (int64_t i = 0; i < h->n; i++)
                for (int64_t c = 0; c < (h->counts && cnt[i] > 1 ? cnt[i] : 1); c++) keys[k++] = id[i];
        }
        if (!st && total) {
            hx_emb_query q = hx_emb_query_rows(keys, total);
            q.train = 1;
            q.step = first->qstep;
            st = hx_emb_table_lookup(s->part, &q, all, NULL, &err);
        }
        free(keys);
        /* each worker's rows: the first copy of each of its keys */
        float *out = st ? NULL : malloc((size_t)(total * dim + 1) * sizeof *out);
        if (!st && !out) st = hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
        hx_status x = HX_OK;
        k = 0;
        for (int w = 0; w < W && !x; w++) {
            ps_pull *p = e->thead[w];
            if (!p) continue;
            const ps_req *h = p->m.data;
            const int64_t *cnt = (const int64_t *)(h + 1) + h->n;
            for (int64_t i = 0; i < h->n && !st; i++) {
                memcpy(out + i * dim, all + k * dim, (size_t)dim * sizeof *out);
                k += h->counts && cnt[i] > 1 ? cnt[i] : 1;
            }
            x = reply(sv, p->m.src, h, st, err.msg, e->applied, out, h->n, dim);
            pthread_mutex_lock(&ps->lock);
            ps->stats.pulls++;
            pthread_mutex_unlock(&ps->lock);
            e->thead[w] = p->next;
            if (!p->next) e->ttail[w] = NULL;
            free(p->m.data);
            free(p);
        }
        free(all);
        free(out);
        if (x) return x;
    }
}

/* A worker's save of e, its steps applied: the shard's save, collective
 * over the servers (each reaches it at the same step), and its status to
 * the worker. */
static hx_status save_table(server *sv, ps_entry *e, const hx_msg *m)
{
    const ps_req *h = m->data;
    char *path = malloc((size_t)h->n + 1);
    hx_emb_err err;
    hx_status st = path ? HX_OK : hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
    if (path) {
        memcpy(path, h + 1, (size_t)h->n);
        path[h->n] = 0;
    }
    if (!st) st = hx_emb_table_save(e->impl, path, &err);
    free(path);
    return reply(sv, m->src, h, st, err.msg, e->applied, NULL, 0, 0);
}

/* A worker's device cache fetches rows with their state
 * (embedding/ps_devcache.c). */
static hx_status fetch(server *sv, ps_entry *e, const hx_msg *m)
{
    const ps_req *h = m->data;
    hx_emb_err err;
    char *buf = NULL;
    size_t nb = 0;
    hx_status st = hx__ps_fetch_reply(e, h, e->applied, &buf, &nb, &err);
    if (st) return reply(sv, m->src, h, st, err.msg, e->applied, NULL, 0, 0);
    st = hx__msg_send(sv->ps->mb, m->src, PS_TAG_REPLY + (int)h->table, buf, nb);
    pthread_mutex_lock(&sv->ps->lock);
    sv->ps->stats.pulls++;
    sv->ps->stats.rows_pulled += ((const ps_reply *)buf)->rows;
    if (!st) sv->ps->stats.pull_bytes += nb;
    pthread_mutex_unlock(&sv->ps->lock);
    free(buf);
    return st;
}

/* A pull, a fetch or a save whose steps are applied. */
static hx_status respond(server *sv, ps_entry *e, const hx_msg *m)
{
    int64_t kind = ((const ps_req *)m->data)->kind;
    return kind == PS_SAVE ? save_table(sv, e, m) : kind == PS_FETCH ? fetch(sv, e, m) : answer(sv, e, m);
}

/* Applies every step of e that has all its pushes. */
static hx_status apply_steps(server *sv, ps_entry *e)
{
    hx_ps *ps = sv->ps;
    int W = ps->W;
    hx_emb_shard *s = e->shard;
    int64_t dim = s->base.dim;
    for (;;) {
        int64_t n = 0, optstep = 0;
        bool any = false;
        for (int w = 0; w < W; w++) {
            ps_push *p = e->head[w];
            if (!p && !sv->finished[w]) return HX_OK; /* the step waits for w */
            if (!p) continue;
            if (p->h->step != e->applied)
                return hx__error(HX_ERR_STATE, "hx_ps_serve: table '%s': worker rank %d pushed step %lld while "
                                 "the servers wait for step %lld: every worker pushes every step once, in order",
                                 e->name, w, (long long)p->h->step, (long long)e->applied);
            if (!any) optstep = p->h->optstep;
            any = true;
            n += p->h->n;
        }
        if (!any) return HX_OK;
        int64_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
        float *rows = malloc((size_t)(n * dim + 1) * sizeof *rows);
        hx_emb_err err;
        hx_status st = ids && rows ? HX_OK : hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "out of host memory");
        int64_t at = 0;
        for (int w = 0; w < W && !st; w++) {
            ps_push *p = e->head[w];
            if (!p) continue;
            const int64_t *pid = (const int64_t *)(p->h + 1);
            memcpy(ids + at, pid, (size_t)p->h->n * sizeof *ids);
            memcpy(rows + at * dim, pid + p->h->n, (size_t)(p->h->n * dim) * sizeof *rows);
            at += p->h->n;
        }
        for (int64_t i = 0; i < n && !st && !s->dynamic; i++)
            if (ids[i] < 0 || !s->part || ids[i] >= s->part->rows)
                st = hx_emb_fail(&err, HX_ERR_INDEX, "a push of local row %lld, outside server %d's rows",
                                 (long long)ids[i], ps->index);
        if (!st && n) {
            hx_emb_query q = hx_emb_query_rows(ids, n);
            hx_emb_grad_input gi = {rows, NULL, dim, HX_EMB_DEDUP_AUTO};
            st = hx_emb_table_backward_update(s->part, &q, &gi, optstep, e->ws, &err);
        }
        for (int64_t i = 0; i < n && !st && e->ver; i++) e->ver[ids[i]] = e->applied + 1; /* changed by this step */
        free(ids);
        free(rows);
        if (st) return hx__emb_error(st, &err, "hx_ps_serve: table '%s', step %lld", e->name, (long long)e->applied);
        for (int w = 0; w < W; w++) {
            ps_push *p = e->head[w];
            if (!p) continue;
            e->head[w] = p->next;
            if (!p->next) e->tail[w] = NULL;
            free(p->m.data);
            free(p);
        }
        /* a DYNAMIC map expires its keys as a table of one process does after an update */
        if (!st && s->dynamic && s->mc.expire_after > 0 && optstep % s->mc.expire_after == 0)
            hx_emb_idmap_expire(hx_emb_dynamic_idmap(s->part), optstep);
        e->applied++;
        pthread_mutex_lock(&ps->lock);
        ps->stats.steps++;
        pthread_mutex_unlock(&ps->lock);
    }
}

/* Answers e's pulls whose steps are applied. */
static hx_status serve_pulls(server *sv, ps_entry *e)
{
    hx_status st = HX_OK;
    for (ps_pull **pp = &e->pulls; *pp && !st;) {
        ps_pull *p = *pp;
        if (((const ps_req *)p->m.data)->need > e->applied) {
            pp = &p->next;
            continue;
        }
        st = respond(sv, e, &p->m);
        *pp = p->next;
        free(p->m.data);
        free(p);
    }
    return st ? st : answer_group(sv, e);
}

/* A request: checked against its table, then queued or answered (m's data
 * is taken). */
static hx_status take(server *sv, hx_msg *m)
{
    hx_ps *ps = sv->ps;
    int w = m->src;
    const ps_req *h = m->data;
    if (w < 0 || w >= ps->W || m->n < sizeof *h) {
        free(m->data);
        return hx__error(HX_ERR_COMM, "hx_ps_serve: a message of %zu bytes from rank %d, not a worker's request "
                         "(a server takes requests from ranks 0..%d)", m->n, w, ps->W - 1);
    }
    sv->heard[w] = hx__now();
    if (h->kind == PS_FINISH) {
        sv->finished[w] = true;
        free(m->data);
        hx_status st = HX_OK;
        for (int i = 0; i < ps->n_tables && !st; i++)
            if (ps->tables[i]->shard && !(st = apply_steps(sv, ps->tables[i]))) st = serve_pulls(sv, ps->tables[i]);
        return st;
    }
    ps_entry *e = hx__ps_entry(ps, h->table);
    char why[300] = "";
    size_t want = sizeof *h +
                  (h->n >= 0 ? (size_t)h->n * (h->kind == PS_SAVE ? 1 : sizeof(int64_t) * (1 + !!h->counts + !!h->vers)) : 0) +
                  (h->kind == PS_PUSH && e && e->shard && h->n >= 0 ? (size_t)(h->n * e->shard->base.dim) * sizeof(float) : 0);
    bool records = h->kind == PS_FETCH || h->kind == PS_STORE; /* a worker's device cache */
    if (h->kind == PS_STORE && h->n >= 0 && h->rec > 0 && (size_t)h->n <= m->n / (sizeof(int64_t) + (size_t)h->rec))
        want += (size_t)h->n * (size_t)h->rec;
    if (!e || !e->shard)
        snprintf(why, sizeof why, "table %lld: this server has no such table (create every table on every rank, "
                 "in the same order)", (long long)h->table);
    else if ((uint64_t)h->hash != e->hash)
        snprintf(why, sizeof why, "table '%s': worker rank %d created it otherwise than the servers (rows, dim, "
                 "dtype, initialiser, seed, ids, sharding, optimizer must be alike on every rank)", e->name, w);
    else if ((h->kind < PS_PULL || h->kind > PS_ALIVE || h->kind == PS_FINISH) || h->n < 0 || m->n != want ||
             (h->kind == PS_ALIVE && h->n) ||
             (records && (h->rec <= 0 || e->shard->dynamic || h->counts || h->vers)) ||
             (h->kind == PS_SAVE && (!h->n || memchr(h + 1, 0, (size_t)h->n))) ||
             (h->counts && (h->kind != PS_PULL || h->tpull < 0)) ||
             (h->vers && (h->kind != PS_PULL || h->k != HX_EMB_SHARD_ROWS || e->shard->dynamic || h->counts)) ||
             (h->kind == PS_PULL && h->tpull >= 0 && (!e->shard->dynamic || !h->train)))
        snprintf(why, sizeof why, "table '%s': a malformed request of %zu bytes from worker rank %d", e->name, m->n, w);
    else if ((h->kind == PS_PUSH || records) && h->optim != e->shard->optim.kind)
        snprintf(why, sizeof why, "table '%s': worker rank %d pushes for %s, the servers apply %s: set the same "
                 "optimizer on every rank", e->name, w, hx_emb_optim_name((hx_emb_optim_kind)h->optim),
                 hx_emb_optim_name(e->shard->optim.kind));
    for (int64_t i = 0; !*why && h->counts && i < h->n; i++) { /* occurrences of one call's id */
        int64_t c = ((const int64_t *)(h + 1))[h->n + i];
        if (c < 1 || c > ((int64_t)1 << 32))
            snprintf(why, sizeof why, "table '%s': worker rank %d counted an id %lld times", e->name, w, (long long)c);
    }
    if (*why) {
        hx_status st = h->kind != PS_PUSH && h->kind != PS_STORE ? reply(sv, w, h, HX_ERR_INVALID_ARGUMENT, why, 0,
                                                                          NULL, 0, 0) : HX_OK;
        free(m->data);
        return st ? st : hx__error(HX_ERR_INVALID_ARGUMENT, "hx_ps_serve: %s", why);
    }
    if (h->kind == PS_PULL && h->tpull >= 0) { /* answered with the other workers' (answer_group) */
        ps_pull *p = malloc(sizeof *p);
        if (!p) {
            free(m->data);
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_ps_serve: out of host memory");
        }
        *p = (ps_pull){*m, NULL};
        if (e->ttail[w]) e->ttail[w]->next = p;
        else e->thead[w] = p;
        e->ttail[w] = p;
        return answer_group(sv, e);
    }
    if (records || h->kind == PS_ALIVE) e->cached_by = w; /* check_silent watches that worker */
    if (h->kind == PS_ALIVE) {
        free(m->data);
        return HX_OK;
    }
    if (h->kind == PS_STORE) { /* a device cache's write-backs: stored now, in the order sent */
        hx_emb_err err;
        hx_status st = hx__ps_store(e, h, &err);
        pthread_mutex_lock(&ps->lock);
        ps->stats.pushes += !st;
        ps->stats.push_bytes += st ? 0 : m->n;
        pthread_mutex_unlock(&ps->lock);
        free(m->data);
        return st ? hx__error(st, "hx_ps_serve: table '%s': worker rank %d's write-back: %s", e->name, w, err.msg)
                  : HX_OK;
    }
    if (h->kind != PS_PUSH) {
        if (h->need <= e->applied) {
            hx_status st = respond(sv, e, m);
            free(m->data);
            return st;
        }
        ps_pull *p = malloc(sizeof *p);
        if (!p) {
            free(m->data);
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_ps_serve: out of host memory");
        }
        *p = (ps_pull){*m, e->pulls};
        e->pulls = p;
        return HX_OK;
    }
    ps_push *p = malloc(sizeof *p);
    if (!p) {
        free(m->data);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_ps_serve: out of host memory");
    }
    *p = (ps_push){*m, m->data, NULL};
    if (e->tail[w]) e->tail[w]->next = p;
    else e->head[w] = p;
    e->tail[w] = p;
    pthread_mutex_lock(&ps->lock);
    ps->stats.pushes++;
    ps->stats.push_bytes += m->n;
    pthread_mutex_unlock(&ps->lock);
    hx_status st = apply_steps(sv, e);
    return st ? st : serve_pulls(sv, e);
}

/* A worker silent for the timeout while a step of some table waits for
 * it: HX_ERR_COMM naming it. */
static hx_status check_silent(server *sv)
{
    hx_ps *ps = sv->ps;
    double now = hx__now();
    for (int i = 0; i < ps->n_tables; i++) {
        ps_entry *e = ps->tables[i];
        if (!e->shard) continue;
        int owner = e->cached_by; /* a device cache: its worker says it lives at least every timeout / 4 */
        if (owner >= 0 && !sv->finished[owner] && now - sv->heard[owner] > ps->timeout_s)
            return hx__error(HX_ERR_COMM, "hx_ps_serve (server rank %d): worker rank %d sent nothing for %g s while "
                             "its device cache held rows of table '%s' (it died or hangs; hx_ps_config.timeout_s "
                             "sets the limit): the tables hold its rows as it last wrote them back, the dirty "
                             "rows of its cache are lost; save them now", ps->rank, owner, ps->timeout_s, e->name);
        bool waiting = e->pulls != NULL;
        for (int w = 0; w < ps->W && !waiting; w++) waiting = e->head[w] || e->thead[w];
        for (int w = 0; w < ps->W && waiting; w++)
            if (!e->head[w] && !e->thead[w] && !sv->finished[w] && now - sv->heard[w] > ps->timeout_s)
                return hx__error(HX_ERR_COMM, "hx_ps_serve (server rank %d): worker rank %d sent nothing for %g s "
                                 "while step %lld of table '%s' waited for it (it died or hangs; "
                                 "hx_ps_config.timeout_s sets the limit): the tables hold every step before it "
                                 "applied, and that step's pushes from the other workers were dropped; save "
                                 "them now", ps->rank, w, ps->timeout_s, (long long)e->applied, e->name);
    }
    return HX_OK;
}

static bool all_done(const server *sv)
{
    hx_ps *ps = sv->ps;
    for (int w = 0; w < ps->W; w++)
        if (!sv->finished[w]) return false;
    for (int i = 0; i < ps->n_tables; i++)
        for (int w = 0; ps->tables[i]->shard && w < ps->W; w++)
            if (ps->tables[i]->head[w]) return false;
    return true;
}

/* The end of the loop: waiting pulls told why (st), queues dropped. */
static void drain(server *sv, hx_status st)
{
    hx_ps *ps = sv->ps;
    snprintf(sv->why, sizeof sv->why, "the server stopped serving: %s", st ? hx_last_error() : "done");
    for (int i = 0; i < ps->n_tables; i++) {
        ps_entry *e = ps->tables[i];
        for (ps_pull *p = e->pulls, *n; p; p = n) {
            n = p->next;
            if (st) reply(sv, p->m.src, p->m.data, st, sv->why, e->applied, NULL, 0, 0);
            free(p->m.data);
            free(p);
        }
        e->pulls = NULL;
        for (int w = 0; e->head && w < ps->W; w++)
            for (ps_push *p = e->head[w], *n; p; p = n) {
                n = p->next;
                free(p->m.data);
                free(p);
            }
        for (int w = 0; e->thead && w < ps->W; w++)
            for (ps_pull *p = e->thead[w], *n; p; p = n) {
                n = p->next;
                if (st) reply(sv, p->m.src, p->m.data, st, sv->why, e->applied, NULL, 0, 0);
                free(p->m.data);
                free(p);
            }
        free(e->head);
        free(e->thead);
        e->head = e->tail = NULL;
        e->thead = e->ttail = NULL;
        hx_emb_workspace_free(e->ws);
        e->ws = NULL;
        free(e->ver);
        e->ver = NULL;
    }
}

hx_status hx_ps_serve(hx_ps *ps)
{
    if (!ps) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_ps_serve: ps is NULL");
    if (!ps->server || ps->served)
        return hx__error(HX_ERR_STATE, "hx_ps_serve: %s", !ps->server ? "this rank is a worker (workers train "
                         "and call hx_ps_finish; servers call hx_ps_serve)" : "called twice");
    ps->served = true;
    server sv = {.ps = ps};
    sv.finished = calloc((size_t)ps->W, sizeof *sv.finished);
    sv.heard = malloc((size_t)ps->W * sizeof *sv.heard);
    hx_status st = sv.finished && sv.heard ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_ps_serve: out of host memory");
    for (int w = 0; w < ps->W && !st; w++) sv.heard[w] = hx__now();
    for (int i = 0; i < ps->n_tables && !st; i++) {
        ps_entry *e = ps->tables[i];
        e->head = calloc((size_t)ps->W * 2, sizeof *e->head);
        e->tail = e->head ? e->head + ps->W : NULL;
        e->thead = calloc((size_t)ps->W * 2, sizeof *e->thead);
        e->ttail = e->thead ? e->thead + ps->W : NULL;
        e->ws = hx_emb_workspace_create();
        e->cached_by = -1;
        hx_emb_table *part = e->shard ? e->shard->part : NULL;
        if (part && !e->shard->dynamic) e->ver = calloc((size_t)part->rows + 1, sizeof *e->ver);
        if (!e->head || !e->thead || !e->ws || (part && !e->shard->dynamic && !e->ver))
            st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_ps_serve: out of host memory");
    }
    for (long idle = 0; !st && !all_done(&sv);) {
        hx_msg m;
        bool got = false;
        st = hx__msg_poll(ps->mb, -1, PS_TAG_REQ, &m, &got);
        if (!st && got) {
            idle = 0;
            st = take(&sv, &m);
        } else if (!st) {
            st = check_silent(&sv);
            hx__msg_idle(idle++);
        }
    }
    drain(&sv, st);
    int peer = -1;
    if (!hx__msg_flush(ps->mb, st ? 1.0 : ps->timeout_s, &peer) && !st)
        st = hx__error(HX_ERR_COMM, "hx_ps_serve: worker rank %d did not take its last reply within %g s", peer,
                       ps->timeout_s);
    free(sv.finished);
    free(sv.heard);
    return st;
}
