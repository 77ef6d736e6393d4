/* Server mode's roles (hetex.h's hx_ps_*): the split of a communicator
 * into servers and workers, the registry of tables created with the ps,
 * and the creation of each table on either role. */
#include "embedding/ps_impl.h"
#include "embedding/table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hx_ps_config hx_ps_config_default(void)
{
    hx_ps_config c = {.comm = NULL, .servers = 1, .staleness = 0, .timeout_s = 60.0, .rank_bytes = 0,
                      .cache_rows = 0};
    return c;
}

hx_status hx_ps_create(const hx_ps_config *cfg, hx_ps **out)
{
    const char *fn = "hx_ps_create";
    if (out) *out = NULL;
    if (!cfg || !out || !cfg->comm)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !cfg ? "cfg" : !out ? "out" : "cfg->comm");
    int size = hx_comm_size(cfg->comm), rank = hx_comm_rank(cfg->comm);
    if (cfg->servers < 1 || cfg->servers >= size)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: %d servers of %d ranks: give 1 to %d (every rank "
                         "left is a worker, and there must be one)", fn, cfg->servers, size, size - 1);
    if (cfg->staleness < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: staleness %d: give the steps a worker may run "
                         "ahead of the applied pushes, >= 0 (0: synchronous)", fn, cfg->staleness);
    if (cfg->cache_rows < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: cache_rows %lld: give the rows a worker keeps of each "
                         "table, >= 0 (0: no cache)", fn, (long long)cfg->cache_rows);
    if (!isfinite(cfg->timeout_s) || cfg->timeout_s <= 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: timeout_s %g: give the seconds after which a "
                         "silent peer is dead, > 0 (default 60)", fn, cfg->timeout_s);
    hx_ps *ps = calloc(1, sizeof *ps);
    if (!ps) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    ps->rank = rank;
    ps->size = size;
    ps->S = cfg->servers;
    ps->W = size - cfg->servers;
    ps->server = rank >= ps->W;
    ps->index = ps->server ? rank - ps->W : rank;
    ps->staleness = cfg->staleness;
    ps->timeout_s = cfg->timeout_s;
    ps->rank_bytes = ps->held.cap = cfg->rank_bytes;
    ps->cache_rows = cfg->cache_rows;
    pthread_mutex_init(&ps->lock, NULL);
    hx_status st = hx__mailbox_create(cfg->comm, &ps->mb);
    if (!st) st = hx__comm_split(cfg->comm, ps->server, &ps->role);
    if (st) {
        hx_ps_free(ps);
        return st;
    }
    *out = ps;
    return HX_OK;
}

bool hx_ps_is_server(const hx_ps *ps) { return ps && ps->server; }
int hx_ps_index(const hx_ps *ps) { return ps ? ps->index : -1; }
hx_comm *hx_ps_workers(hx_ps *ps) { return ps && !ps->server ? ps->role : NULL; }

hx_status hx_ps_finish(hx_ps *ps)
{
    const char *fn = "hx_ps_finish";
    if (!ps) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: ps is NULL", fn);
    if (ps->server || ps->finished)
        return hx__error(HX_ERR_STATE, "%s: %s", fn, ps->server ? "this rank is a server (servers call "
                         "hx_ps_serve; workers call hx_ps_finish)" : "called twice");
    ps->finished = true;
    /* every device cache's dirty rows to the servers first (they go before the finish) */
    for (int i = 0;; i++) {
        ps_entry *e = hx__ps_entry(ps, i);
        if (!e) break;
        hx_emb_ps *c = hx_emb_as_ps(e->impl);
        hx_emb_devcache *d = c ? hx_emb_as_devcache(c->dev) : NULL;
        hx_emb_err err;
        hx_status st = d ? hx_emb_devcache_flush(d, &err) : HX_OK;
        if (!st && c && c->hot && ps->index == 0) { /* hot rows on every worker: worker 0 writes them back */
            pthread_mutex_lock(&c->lock);
            st = hx__ps_hot_flush(c, &err);
            pthread_mutex_unlock(&c->lock);
        }
        if (st) return hx__emb_error(st, &err, "%s: writing back table '%s''s device cache", fn, e->name);
    }
    ps_req h = {.kind = PS_FINISH};
    for (int j = 0; j < ps->S; j++) {
        hx_status st = hx__msg_send(ps->mb, ps->W + j, PS_TAG_REQ, &h, sizeof h);
        if (st) return st;
    }
    int peer = -1;
    if (!hx__msg_flush(ps->mb, ps->timeout_s, &peer))
        return hx__error(HX_ERR_COMM, "%s: server rank %d did not take this worker's messages within "
                         "%g s (it died or hangs; hx_ps_config.timeout_s sets the limit)", fn, peer,
                         ps->timeout_s);
    return HX_OK;
}

void hx_ps_free(hx_ps *ps)
{
    if (!ps) return;
    for (int i = 0; i < ps->n_tables; i++) free(ps->tables[i]);
    free(ps->tables);
    hx__mailbox_free(ps->mb);
    hx_comm_free(ps->role);
    pthread_mutex_destroy(&ps->lock);
    free(ps);
}

hx_status hx_ps_stats_get(hx_ps *ps, hx_ps_stats *out)
{
    if (!ps || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_ps_stats_get: %s is NULL", ps ? "out" : "ps");
    pthread_mutex_lock(&ps->lock);
    *out = ps->stats;
    if (ps->server) {
        out->rows_held = 0;
        out->bytes_held = atomic_load(&ps->held.used);
        for (int i = 0; i < ps->n_tables; i++) {
            hx_emb_local *l = ps->tables[i]->shard ? hx_emb_shard_local(ps->tables[i]->shard) : NULL;
            if (l) out->rows_held += l->base.rows;
        }
    }
    pthread_mutex_unlock(&ps->lock);
    return HX_OK;
}

ps_entry *hx__ps_entry(hx_ps *ps, int64_t i)
{
    pthread_mutex_lock(&ps->lock);
    ps_entry *e = i >= 0 && i < ps->n_tables ? ps->tables[i] : NULL;
    pthread_mutex_unlock(&ps->lock);
    return e;
}

void hx__ps_forget(hx_ps *ps, hx_emb_table *impl)
{
    pthread_mutex_lock(&ps->lock);
    for (int i = 0; i < ps->n_tables; i++)
        if (ps->tables[i]->impl == impl) {
            ps->tables[i]->impl = NULL;
            ps->tables[i]->shard = NULL; /* its bytes go back to ps->held as it is freed */
        }
    pthread_mutex_unlock(&ps->lock);
}

static hx_status add_entry(hx_ps *ps, ps_entry *e, int *index)
{
    pthread_mutex_lock(&ps->lock);
    hx_status st = HX_OK;
    if (ps->n_tables == PS_MAX_TABLES) st = HX_ERR_SHAPE;
    if (!st && ps->n_tables == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 8;
        ps_entry **t = realloc(ps->tables, (size_t)cap * sizeof *t);
        if (t) {
            ps->tables = t;
            ps->cap = cap;
        } else {
            st = HX_ERR_OUT_OF_MEMORY;
        }
    }
    if (!st) {
        *index = ps->n_tables;
        ps->tables[ps->n_tables++] = e;
    }
    pthread_mutex_unlock(&ps->lock);
    return st == HX_ERR_SHAPE ? hx__error(st, "hx_embedding_table_create '%s': a ps serves at most %d tables",
                                          e->name, PS_MAX_TABLES)
           : st ? hx__error(st, "hx_embedding_table_create '%s': out of host memory", e->name) : HX_OK;
}

/* Undoes add_entry of the table being created (the registry's last). */
static void drop_entry(hx_ps *ps, ps_entry *e)
{
    pthread_mutex_lock(&ps->lock);
    if (ps->n_tables && ps->tables[ps->n_tables - 1] == e) ps->n_tables--;
    pthread_mutex_unlock(&ps->lock);
}

/* The servers' verdict on table `index` (st, msg: agreed among them),
 * from server 0 to every worker: a ps_reply whose seq is the index,
 * followed by the message when st fails. On a refusal the servers wait
 * (up to the timeout) until the workers have it, so that the job ends
 * now, not at a pull's timeout. */
static hx_status send_verdict(hx_ps *ps, int index, hx_status st, const char *msg)
{
    size_t ml = st ? strlen(msg) : 0;
    char *buf = malloc(sizeof(ps_reply) + ml + 1);
    if (!buf) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_embedding_table_create: out of host memory");
    ps_reply r = {.status = st, .seq = index, .msglen = (int64_t)ml};
    memcpy(buf, &r, sizeof r);
    memcpy(buf + sizeof r, msg, ml);
    hx_status x = HX_OK;
    for (int w = 0; w < ps->W && !x && ps->index == 0; w++)
        x = hx__msg_send(ps->mb, w, PS_TAG_CREATE, buf, sizeof r + ml);
    free(buf);
    int peer = -1;
    if (!x && st && !hx__msg_flush(ps->mb, ps->timeout_s, &peer))
        x = hx__error(HX_ERR_COMM, "hx_embedding_table_create: worker rank %d did not take the servers' "
                      "refusal within %g s", peer, ps->timeout_s);
    return x;
}

/* A worker: the servers' verdict on table `index`, within the timeout. */
static hx_status take_verdict(hx_ps *ps, int index, const char *name)
{
    const char *fn = "hx_embedding_table_create";
    double t0 = hx__now();
    hx_msg m;
    for (long idle = 0;; idle++) {
        bool got = false;
        hx_status st = hx__msg_poll(ps->mb, ps->W, PS_TAG_CREATE, &m, &got);
        if (st) return st;
        if (got) break;
        if (hx__now() - t0 > ps->timeout_s)
            return hx__error(HX_ERR_COMM, "%s '%s': parameter server rank %d (server 0 of %d) did not say "
                             "within %g s whether the servers hold the table: it died or hangs "
                             "(hx_ps_config.timeout_s sets the limit)", fn, name, ps->W, ps->S, ps->timeout_s);
        hx__msg_idle(idle);
    }
    const ps_reply *r = m.data;
    hx_status st = HX_OK;
    if (m.n < sizeof *r || r->msglen < 0 || m.n != sizeof *r + (size_t)r->msglen || r->seq != index)
        st = hx__error(HX_ERR_STATE, "%s '%s': the servers answered for table %lld, this worker creates its "
                       "table %d: create every table on every rank, in the same order", fn, name,
                       m.n >= sizeof *r ? (long long)r->seq : -1LL, index);
    else if (r->status)
        st = hx__error((hx_status)r->status, "%s '%s': the servers refused it: %.*s", fn, name, (int)r->msglen,
                       (const char *)(r + 1));
    free(m.data);
    return st;
}

hx_status hx__ps_table_create(const hx_embedding_config *cfg, const hx_emb_table_config *tc,
                              const hx_emb_idmap_config *mc, hx_emb_table **out)
{
    const char *fn = "hx_embedding_table_create";
    const char *name = cfg->name ? cfg->name : "embedding";
    hx_ps *ps = cfg->ps;
    *out = NULL;
    if (cfg->comm)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s '%s': give comm (collective mode) or ps (server "
                         "mode), not both", fn, name);
    if (tc->device_cache_rows > 0 && (cfg->ids == HX_EMBEDDING_IDS_DYNAMIC || (ps->W > 1 && ps->staleness)))
        return hx__error(HX_ERR_UNSUPPORTED, "%s '%s': device_cache_rows in server mode %s; leave "
                         "device_cache_rows 0 (hx_ps_config.cache_rows keeps pulled rows on each worker, "
                         "read-only within the staleness bound)", fn, name,
                         cfg->ids == HX_EMBEDDING_IDS_DYNAMIC
                             ? "takes ROWS or MODULO ids (a DYNAMIC table's keys get their rows on the servers)"
                             : "with several workers takes synchronous training (hx_ps_config.staleness 0): "
                               "every worker holds the same hot rows and they apply every worker's gradient "
                               "each step, which a worker running ahead would miss");
    hx_emb_shard_config sc;
    hx_status st = hx__embedding_shard_config(cfg, tc, mc, ps->S, &sc);
    if (st) return st;
    ps_entry *e = calloc(1, sizeof *e);
    if (!e) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s '%s': out of host memory", fn, name);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->hash = hx__shard_config_hash(&sc);
    int index = -1;
    if (!ps->server) { /* the servers' verdict decides: a refusal fails every rank now */
        if (!(st = add_entry(ps, e, &index)) && !(e->impl = hx__ps_client_create(ps, &sc, name, e->hash, index)))
            st = hx__error(HX_ERR_OUT_OF_MEMORY, "%s '%s': out of host memory", fn, name);
        hx_emb_table *dev = NULL; /* the worker's device cache in front (device_cache_rows) */
        hx_emb_err err;
        if (!st && tc->device_cache_rows > 0 && ps->W == 1 &&
            (st = hx_emb_devcache_create_over(tc, e->impl, &hx__ps_devstore, &hx_emb_as_ps(e->impl)->oob_count,
                                              &dev, &err)))
            st = hx__emb_error(st, &err, "%s '%s'", fn, name);
        if (!st && tc->device_cache_rows > 0 && ps->W > 1 && /* hot rows on every worker (ps_hot.c) */
            (st = hx__ps_hot_create(hx_emb_as_ps(e->impl), tc, &err)))
            st = hx__emb_error(st, &err, "%s '%s'", fn, name);
        hx_status v = index >= 0 ? take_verdict(ps, index, name) : HX_OK;
        if (!st) st = v;
        if (st) {
            drop_entry(ps, e);
            if (dev) hx_emb_table_free(dev); /* and the client behind it */
            else hx_emb_table_free(e->impl);
            free(e);
            return st;
        }
        if (dev) hx_emb_as_ps(e->impl)->dev = dev;
        *out = dev ? dev : e->impl;
        return HX_OK;
    }
    hx_emb_err err;
    sc.comm = ps->role;
    sc.counted = true; /* under ps->held: a DYNAMIC map grows within the server's cap */
    st = hx_emb_shard_create(&sc, &e->impl, &err); /* agreed among the servers */
    if (!st) {
        e->shard = hx_emb_as_shard(e->impl);
        size_t bytes = hx_emb_shard_bytes(e->shard), before = atomic_load(&ps->held.used);
        hx_status own = HX_OK;
        if (hx_emb_budget_take(&ps->held, bytes))
            own = hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "server rank %d would hold %zu bytes of tables "
                              "(table '%s''s rows and state%s: %zu), over the per-rank cap of %zu "
                              "(hx_ps_config.rank_bytes): add servers or raise the cap", ps->rank, before + bytes,
                              name, sc.dynamic ? ", its id map with a queue for every row" : "", bytes,
                              ps->rank_bytes);
        else
            hx_emb_shard_budget_under(e->shard, &ps->held); /* given back as the shard is freed */
        if (!own && (own = add_entry(ps, e, &index)))
            hx_emb_fail(&err, own, "%s", hx_last_error());
        st = hx__shard_agree(e->shard, HX_EMB_X_CREATE, own, &err, &err);
        if (st && index >= 0) drop_entry(ps, e);
    }
    hx_status v = send_verdict(ps, ps->n_tables - !st, st, err.msg);
    if (!st && v) drop_entry(ps, e);
    if (st || v) {
        hx_emb_table_free(e->impl);
        free(e);
        return st ? hx__emb_error(st, &err, "%s '%s'", fn, name) : v;
    }
    *out = e->impl;
    return HX_OK;
}
