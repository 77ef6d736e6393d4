/* The public table's sharded form (hx_embedding_config.comm): the choice
 * of row-wise or table-wise and of the owner, and the collective reads,
 * writes and stats that embedding/table.c hands over for such a table. */
#include "embedding/table.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

bool hx__embedding_sharded(const hx_embedding_table *t) { return t->shard || t->client; }

hx_status hx__embedding_shard_config(const hx_embedding_config *cfg, const hx_emb_table_config *tc,
                                     const hx_emb_idmap_config *mc, int N, hx_emb_shard_config *sc)
{
    const char *fn = "hx_embedding_table_create";
    const char *name = cfg->name ? cfg->name : "embedding";
    if ((unsigned)cfg->sharding > HX_EMBEDDING_SHARD_TABLE || cfg->shard_rank < -1 || cfg->shard_rank >= N)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s '%s': sharding %d, shard_rank %d: give HX_EMBEDDING_SHARD_* and a rank in "
                         "[0, %d) (or -1: by the table's name)", fn, name, (int)cfg->sharding,
                         cfg->shard_rank, N);
    if (cfg->backing_file || cfg->ssd_path)
        return hx__error(HX_ERR_UNSUPPORTED,
                         "%s '%s': a sharded table (comm or ps) keeps its rows in memory; backing_file "
                         "and ssd_path are for tables of one process", fn, name);
    size_t bytes = (size_t)tc->rows * (size_t)hx_emb_row_stride(tc->dim, tc->dtype) *
                   (tc->dtype == HX_DTYPE_F32 ? 4 : 2);
    *sc = (hx_emb_shard_config){.comm = cfg->comm, .dynamic = cfg->ids == HX_EMBEDDING_IDS_DYNAMIC,
                                .tc = *tc, .mc = *mc, .rank_bytes = cfg->rank_bytes};
    sc->table_wise = cfg->sharding == HX_EMBEDDING_SHARD_TABLE ||
                     (cfg->sharding == HX_EMBEDDING_SHARD_AUTO && bytes < HX_EMBEDDING_SHARD_TABLE_BYTES);
    sc->owner = cfg->shard_rank >= 0 ? cfg->shard_rank
                                     : (int)(XXH3_64bits(name, strlen(name)) % (uint64_t)(N > 0 ? N : 1));
    return HX_OK;
}

hx_status hx__embedding_shard_create(const hx_embedding_config *cfg, const hx_emb_table_config *tc,
                                     const hx_emb_idmap_config *mc, hx_emb_table **out)
{
    hx_emb_shard_config sc;
    hx_status st = hx__embedding_shard_config(cfg, tc, mc, hx_comm_size(cfg->comm), &sc);
    if (st) return st;
    hx_emb_err err;
    st = hx_emb_shard_create(&sc, out, &err);
    if (!st && tc->device_cache_rows > 0 && (st = hx_emb_shard_hot_create(hx_emb_as_shard(*out), &err))) {
        hx_emb_table_free(*out);
        *out = NULL;
    }
    return st ? hx__emb_error(st, &err, "hx_embedding_table_create '%s'", cfg->name ? cfg->name : "embedding")
              : HX_OK;
}

hx_status hx__embedding_shard_rows(hx_embedding_table *t, const char *fn, int k, const int64_t *ids,
                                   int64_t n, float *out, const float *in)
{
    int64_t *rows = NULL;
    const int64_t *use = ids;
    if (t->ids == HX_EMBEDDING_IDS_MODULO && n > 0 && ids) {
        rows = malloc((size_t)n * sizeof *rows);
        if (rows) hx_emb_keys_mod(ids, n, t->impl->rows, rows);
        use = rows; /* NULL when out of memory: refused with the other ranks told */
    }
    hx_emb_err err;
    hx_status st = HX_OK;
    if (t->dev) { /* a worker's device cache: its dirty rows to the servers first */
        pthread_mutex_lock(&t->lock);
        st = hx_emb_devcache_flush(t->dev, &err);
        pthread_mutex_unlock(&t->lock);
    }
    if (!st) st = t->client ? hx__ps_read(t->client, k, use, n, out, &err)
                   : in      ? hx_emb_shard_write(t->shard, use, n, in, &err)
                             : hx_emb_shard_read(t->shard, k, use, n, out, &err);
    free(rows);
    return st ? hx__emb_error(st, &err, "%s '%s'", fn, t->name) : HX_OK;
}

hx_status hx__embedding_shard_stats(const hx_embedding_table *t, hx_embedding_stats *out)
{
    hx_emb_shard *s = t->shard;
    if (!s) { /* a worker's server-mode table holds no rows (beyond a device cache's: the caller's) */
        *out = (hx_embedding_stats){.rows = t->impl->rows, .dim = t->impl->dim, .updates = atomic_load(&t->updates),
                                    .last_step = atomic_load(&t->last_step), .graphs = atomic_load(&t->graphs)};
        return HX_OK;
    }
    hx_emb_local *l = hx_emb_shard_local(s);
    hx_emb_local_stats ls = {0};
    hx_emb_err err;
    hx_status st = l ? hx_emb_local_stats_get(&l->base, &ls, &err) : HX_OK;
    if (st) return hx__emb_error(st, &err, "hx_embedding_table_stats '%s'", t->name);
    hx_emb_shard_stats ss;
    hx_emb_shard_stats_get(s, &ss);
    ls.oob_ids = ss.out_of_range;
    *out = (hx_embedding_stats){.rows = t->impl->rows, .dim = t->impl->dim, .rows_assigned = ls.rows_ready,
                                .out_of_range = ls.oob_ids, .updates = atomic_load(&t->updates),
                                .last_step = atomic_load(&t->last_step), .bytes = hx_emb_shard_bytes(s),
                                .graphs = atomic_load(&t->graphs)};
    hx_emb_table *part = hx_emb_shard_part(s);
    hx__embedding_idmap_stats(t, part ? hx_emb_dynamic_idmap(part) : NULL, out);
    return HX_OK;
}
