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
    hx_ps_config c = {.comm = NULL, .servers = 1, .staleness = 0, .timeout_s = 60.0, .rank_bytes = 0};
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
    ps->rank_bytes = cfg->rank_bytes;
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
        out->bytes_held = ps->held_bytes;
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
            ps->tables[i]->shard = NULL;
            ps->held_bytes -= ps->tables[i]->bytes;
            ps->tables[i]->bytes = 0;
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
        ps->held_bytes += e->bytes;
    }
    pthread_mutex_unlock(&ps->lock);
    return st == HX_ERR_SHAPE ? hx__error(st, "hx_embedding_table_create '%s': a ps serves at most %d tables",
                                          e->name, PS_MAX_TABLES)
           : st ? hx__error(st, "hx_embedding_table_create '%s': out of host memory", e->name) : HX_OK;
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
    hx_emb_shard_config sc;
    hx_status st = hx__embedding_shard_config(cfg, tc, mc, ps->S, &sc);
    if (st) return st;
    ps_entry *e = calloc(1, sizeof *e);
    if (!e) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s '%s': out of host memory", fn, name);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->hash = hx__shard_config_hash(&sc);
    int index = -1;
    if (ps->server) {
        hx_emb_err err;
        sc.comm = ps->role;
        st = hx_emb_shard_create(&sc, &e->impl, &err);
        if (st) {
            free(e);
            return hx__emb_error(st, &err, "%s '%s' (server %d of %d)", fn, name, ps->index, ps->S);
        }
        e->shard = hx_emb_as_shard(e->impl);
        hx_status own = HX_OK;
        e->bytes = hx_emb_shard_bytes(e->shard);
        if (!own && ps->rank_bytes && ps->held_bytes + e->bytes > ps->rank_bytes)
            own = hx_emb_fail(&err, HX_ERR_OUT_OF_MEMORY, "server rank %d would hold %zu bytes of tables "
                              "(this one's rows and state: %zu), over the per-rank cap of %zu "
                              "(hx_ps_config.rank_bytes): add servers or raise the cap", ps->rank,
                              ps->held_bytes + e->bytes, e->bytes, ps->rank_bytes);
        st = hx__shard_agree(e->shard, HX_EMB_X_CREATE, own, &err, &err);
        if (st) {
            hx_emb_table_free(e->impl);
            free(e);
            return hx__emb_error(st, &err, "%s '%s'", fn, name);
        }
        if ((st = add_entry(ps, e, &index))) {
            hx_emb_table_free(e->impl);
            free(e);
            return st;
        }
    } else {
        if ((st = add_entry(ps, e, &index))) {
            free(e);
            return st;
        }
        e->impl = hx__ps_client_create(ps, &sc, name, e->hash, index);
        if (!e->impl) {
            hx__ps_forget(ps, NULL);
            return hx__error(HX_ERR_OUT_OF_MEMORY, "%s '%s': out of host memory", fn, name);
        }
    }
    *out = e->impl;
    return HX_OK;
}
