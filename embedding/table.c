/* The public embedding table: creation from hx_embedding_config, rows in
 * and out, save/load, stats, the count of graphs using it; and the two
 * calls the CPU launchers make (query, update), which map ids, take the
 * lock and route embedding/ errors into hx_last_error(). */
#include "embedding/table.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hx_status hx__emb_error(hx_status st, const hx_emb_err *e, const char *where_fmt, ...)
{
    char where[256];
    va_list ap;
    va_start(ap, where_fmt);
    vsnprintf(where, sizeof where, where_fmt, ap);
    va_end(ap);
    return hx__error(st, "%s: %s", where, e->msg);
}

/* ---- configuration ---------------------------------------------------------- */

hx_embedding_optimizer hx_embedding_optimizer_default(hx_embedding_optimizer_kind kind)
{
    hx_emb_optim o = hx_emb_optim_default((hx_emb_optim_kind)kind);
    return (hx_embedding_optimizer){kind, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                    o.lr_decay, o.initial_accumulator, o.l1, o.l2,
                                    o.l2_shrinkage};
}

hx_embedding_config hx_embedding_config_default(void)
{
    hx_embedding_config c;
    memset(&c, 0, sizeof c);
    c.dtype = HX_DTYPE_F32;
    c.init = hx_init_uniform(-0.05, 0.05);
    c.ids = HX_EMBEDDING_IDS_ROWS;
    c.out_of_range = HX_EMBEDDING_OUT_OF_RANGE_ERROR;
    c.optimizer.kind = HX_EMBEDDING_OPTIMIZER_NONE;
    c.shard_rank = -1;
    return c;
}

_Static_assert((int)HX_EMB_OPTIM_NONE == (int)HX_EMBEDDING_OPTIMIZER_NONE &&
                   (int)HX_EMB_OPTIM_LAZY_ADAM == (int)HX_EMBEDDING_OPTIMIZER_LAZY_ADAM &&
                   (int)HX_EMB_OPTIM_ADAGRAD == (int)HX_EMBEDDING_OPTIMIZER_ADAGRAD &&
                   (int)HX_EMB_OPTIM_ROW_ADAGRAD == (int)HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD &&
                   (int)HX_EMB_OPTIM_FTRL == (int)HX_EMBEDDING_OPTIMIZER_FTRL,
               "embedding optimizer kinds mirror hx_emb_optim_kind");

static hx_status to_optim(const hx_embedding_optimizer *o, const char *fn, hx_emb_optim *out)
{
    if ((unsigned)o->kind > HX_EMBEDDING_OPTIMIZER_FTRL)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: unknown optimizer kind %d (use "
                         "HX_EMBEDDING_OPTIMIZER_*)", fn, (int)o->kind);
    *out = hx_emb_optim_default((hx_emb_optim_kind)o->kind);
    out->lr = o->lr;
    out->beta1 = o->beta1;
    out->beta2 = o->beta2;
    out->eps = o->eps;
    out->weight_decay = o->weight_decay;
    out->lr_decay = o->lr_decay;
    out->initial_accumulator = o->initial_accumulator;
    out->l1 = o->l1;
    out->l2 = o->l2;
    out->l2_shrinkage = o->l2_shrinkage;
    return HX_OK;
}

/* The embedding/ configs of a public one; fails on what embedding/ does
 * not check itself. */
static hx_status to_configs(const hx_embedding_config *c, hx_emb_table_config *tc,
                            hx_emb_idmap_config *mc)
{
    const char *fn = "hx_embedding_table_create";
    const char *name = c->name ? c->name : "embedding";
    if ((unsigned)c->ids > HX_EMBEDDING_IDS_DYNAMIC ||
        (unsigned)c->out_of_range > HX_EMBEDDING_OUT_OF_RANGE_ZERO)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s '%s': ids %d or out_of_range %d is not one of HX_EMBEDDING_IDS_* / "
                         "HX_EMBEDDING_OUT_OF_RANGE_*", fn, name, (int)c->ids, (int)c->out_of_range);
    if (c->init.kind != HX_INIT_ZEROS && c->init.kind != HX_INIT_UNIFORM &&
        c->init.kind != HX_INIT_NORMAL)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s '%s': initialiser kind %d; tables take hx_init_zeros(), "
                         "hx_init_uniform() or hx_init_normal()", fn, name, (int)c->init.kind);
    if (c->device_cache_rows < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s '%s': device_cache_rows %lld must be >= 0 "
                         "(0: no device cache)", fn, name, (long long)c->device_cache_rows);
    if (c->device_cache_rows > 0 && c->ssd_path) /* comm: shard_hot.c; ps: hx__ps_table_create decides */
        return hx__error(HX_ERR_UNSUPPORTED,
                         "%s '%s': device_cache_rows with ssd_path is not built: the host cache of a table "
                         "on disk would need to hand its rows to a second cache; leave device_cache_rows 0",
                         fn, name);
    if (c->rank_bytes && !c->comm && !c->ps)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s '%s': rank_bytes %zu caps one rank's shard of a "
                         "sharded table: give comm or ps too, or leave it 0", fn, name, c->rank_bytes);
    if (c->n_threads < 0 || c->min_count < 0 || c->expire_after < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s '%s': n_threads %d, min_count %lld and expire_after %lld must be "
                         ">= 0", fn, name, c->n_threads, (long long)c->min_count,
                         (long long)c->expire_after);
    if (c->ids != HX_EMBEDDING_IDS_DYNAMIC && (c->min_count > 1 || c->expire_after > 0 ||
                                               c->evict_when_full))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s '%s': min_count, expire_after and evict_when_full apply to "
                         "HX_EMBEDDING_IDS_DYNAMIC tables only", fn, name);
    *tc = hx_emb_table_config_default(c->rows, c->dim);
    tc->dtype = c->dtype;
    tc->init = (hx_emb_init){c->init.kind == HX_INIT_ZEROS     ? HX_EMB_INIT_ZEROS
                             : c->init.kind == HX_INIT_UNIFORM ? HX_EMB_INIT_UNIFORM
                                                               : HX_EMB_INIT_NORMAL,
                             c->init.a, c->init.b, c->seed};
    tc->lazy_init = c->lazy_init;
    tc->backing_file = c->backing_file;
    tc->ssd_path = c->ssd_path;
    tc->device_cache_rows = c->device_cache_rows;
    tc->cache_bytes = c->cache_bytes ? c->cache_bytes : HX_EMBEDDING_CACHE_DEFAULT;
    tc->oob = c->out_of_range == HX_EMBEDDING_OUT_OF_RANGE_ZERO ? HX_EMB_OOB_ZERO : HX_EMB_OOB_ERROR;
    tc->nthreads = c->n_threads ? c->n_threads : omp_get_num_procs();
    hx_status st = to_optim(&c->optimizer, fn, &tc->optim);
    *mc = (hx_emb_idmap_config){c->rows, c->min_count, c->expire_after,
                                c->evict_when_full ? HX_EMB_FULL_EVICT : HX_EMB_FULL_ERROR,
                                c->seed};
    return st;
}

hx_status hx_embedding_table_create(const hx_embedding_config *cfg, hx_embedding_table **out)
{
    if (!out || !cfg)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_embedding_table_create: %s is NULL",
                         out ? "cfg" : "out");
    *out = NULL;
    const char *name = cfg->name ? cfg->name : "embedding";
    if (!*name)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_embedding_table_create: name is empty; give the table a name (or "
                         "NULL for \"embedding\")");
    hx_emb_table_config tc;
    hx_emb_idmap_config mc;
    hx_status st = to_configs(cfg, &tc, &mc);
    if (st) return st;
    hx_embedding_table *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name)) || !(t->ws = hx_emb_workspace_create())) {
        if (t) free(t->name);
        free(t);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_embedding_table_create '%s': out of host memory",
                         name);
    }
    hx_emb_err err;
    if (cfg->ps)
        st = hx__ps_table_create(cfg, &tc, &mc, &t->impl);
    else if (cfg->comm)
        st = hx__embedding_shard_create(cfg, &tc, &mc, &t->impl);
    else if ((st = cfg->ids == HX_EMBEDDING_IDS_DYNAMIC ? hx_emb_dynamic_create(&tc, &mc, &t->impl, &err)
                                                        : hx_emb_fixed_create(&tc, &t->impl, &err)))
        st = hx__emb_error(st, &err, "hx_embedding_table_create '%s'", name);
    if (st) {
        hx_emb_workspace_free(t->ws);
        free(t->name);
        free(t);
        return st;
    }
    t->shard = hx_emb_as_shard(t->impl);
    t->ps = cfg->ps;
    hx_emb_table *inner = cfg->ids == HX_EMBEDDING_IDS_DYNAMIC ? hx_emb_dynamic_local(t->impl) : t->impl;
    t->local = hx_emb_as_local(inner);
    t->ssd = hx_emb_as_ssd(inner);
    t->dev = hx_emb_as_devcache(inner);
    if (t->dev) t->local = hx_emb_devcache_host(t->dev); /* rows as of the last write-back (NULL: servers') */
    t->client = hx_emb_as_ps(t->dev ? hx_emb_devcache_back(t->dev) : t->impl);
    t->ids = cfg->ids;
    t->expire_after = cfg->expire_after;
    pthread_mutex_init(&t->lock, NULL);
    *out = t;
    return HX_OK;
}

hx_status hx_embedding_table_free(hx_embedding_table *t)
{
    if (!t) return HX_OK;
    int graphs = atomic_load(&t->graphs);
    if (graphs)
        return hx__error(HX_ERR_STATE,
                         "hx_embedding_table_free '%s': %d graph(s) still use the table; free "
                         "them (and their sessions) first", t->name, graphs);
    if (t->ps) hx__ps_forget(t->ps, t->impl);
    hx_emb_table_free(t->impl);
    hx_emb_workspace_free(t->ws);
    pthread_mutex_destroy(&t->lock);
    free(t->name);
    free(t);
    return HX_OK;
}

hx_emb_optim_kind hx__embedding_optim_kind(const hx_embedding_table *t)
{
    if (t->shard) return hx_emb_shard_optim(t->shard)->kind;
    if (t->client) return hx__ps_optim(t->client)->kind;
    return t->ssd ? hx_emb_ssd_cache(t->ssd)->optim.kind : t->local->optim.kind;
}

void hx__embedding_use(hx_embedding_table *t, int delta) { atomic_fetch_add(&t->graphs, delta); }

/* The bytes of t's device cache: one worker's (t->dev) or the hot rows
 * several ranks replicate (server mode's workers, a collective sharded
 * table's ranks); false where it has none. */
static bool device_cache_bytes(hx_embedding_table *t, size_t *bytes)
{
    hx_emb_devcache_stats ds;
    if (t->dev) *bytes = hx_emb_devcache_bytes(t->dev);
    else if ((t->client && hx__ps_device_stats(t->client, &ds)) || (t->shard && hx_emb_shard_hot_stats(t->shard, &ds)))
        *bytes = ds.bytes;
    else return false;
    return true;
}

hx_status hx__embedding_cache_bind(hx_embedding_table *t, const hx_emb_mem *mem, const void *owner)
{
    size_t bytes;
    if (!device_cache_bytes(t, &bytes)) return HX_OK;
    hx_status st = HX_OK;
    hx_emb_err err;
    pthread_mutex_lock(&t->lock);
    if (mem ? !t->dev_owner : t->dev_owner == owner) {
        st = t->dev      ? hx_emb_devcache_bind(t->dev, mem, &err)
             : t->client ? hx__ps_hot_bind(t->client, mem, &err)
                         : hx_emb_shard_hot_bind(t->shard, mem, &err);
        if (!st) t->dev_owner = mem ? owner : NULL;
        else
            st = hx__error(st, "embedding table '%s': its device cache (device_cache_rows, %zu bytes of "
                           "rows and optimizer state) does not fit the device: %s; lower "
                           "device_cache_rows or raise max_device_memory", t->name, bytes, err.msg);
    }
    pthread_mutex_unlock(&t->lock);
    return st;
}

hx_status hx__embedding_hold(hx_embedding_table *t, bool alone, const char *fn)
{
    int n = atomic_load(&t->users);
    do {
        if (n < 0 || (alone && n > 0))
            return hx__error(HX_ERR_STATE,
                             "%s: embedding table '%s' is in use by another thread (%s); a run "
                             "that trains the table, hx_embedding_table_write_rows, _load and "
                             "_set_optimizer need it alone, runs that only read it may overlap: "
                             "wait for the other call to return", fn, t->name,
                             n < 0 ? "a call that holds it alone" : "runs that read it");
    } while (!atomic_compare_exchange_weak(&t->users, &n, alone ? -1 : n + 1));
    return HX_OK;
}

void hx__embedding_release(hx_embedding_table *t, bool alone)
{
    if (alone) atomic_store(&t->users, 0);
    else atomic_fetch_sub(&t->users, 1);
}

hx_status hx__embedding_padding(const hx_embedding_table *t, int64_t padding_id, const char *op,
                                int64_t *out)
{
    int64_t rows = t->impl->rows;
    *out = padding_id;
    if (t->ids != HX_EMBEDDING_IDS_ROWS) return HX_OK;
    if (padding_id < -rows || padding_id >= rows)
        return hx__error(HX_ERR_INDEX,
                         "%s (table '%s'): padding_id %lld is outside [-%lld, %lld): a ROWS "
                         "table's padding_id names a row, a negative one counting from the end "
                         "(-1: row %lld), as torch's padding_idx", op, t->name,
                         (long long)padding_id, (long long)rows, (long long)rows,
                         (long long)(rows - 1));
    if (padding_id < 0) *out = padding_id + rows;
    return HX_OK;
}

int64_t hx_embedding_table_rows(const hx_embedding_table *t) { return t ? t->impl->rows : -1; }
int64_t hx_embedding_table_dim(const hx_embedding_table *t) { return t ? t->impl->dim : -1; }

hx_status hx_embedding_table_set_optimizer(hx_embedding_table *t, const hx_embedding_optimizer *opt)
{
    const char *fn = "hx_embedding_table_set_optimizer";
    if (!t || !opt) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, t ? "opt" : "table");
    hx_emb_optim o;
    hx_status st = to_optim(opt, fn, &o);
    if (st) return st;
    if ((st = hx__embedding_hold(t, true, fn))) return st;
    hx_emb_err err;
    pthread_mutex_lock(&t->lock);
    st = t->dev ? hx_emb_devcache_set_optim(t->dev, &o, omp_get_num_procs(), &err) /* and its store's */
         : t->client ? hx__ps_set_optim(t->client, &o, &err) /* the servers apply theirs: set it alike there */
         : t->shard ? hx_emb_shard_set_optim(t->shard, &o, omp_get_num_procs(), &err)
         : t->ssd ? hx_emb_ssd_set_optim(t->ssd, &o, &err)
                  : hx_emb_local_set_optim(&t->local->base, &o, omp_get_num_procs(), &err);
    pthread_mutex_unlock(&t->lock);
    hx__embedding_release(t, true);
    return st ? hx__emb_error(st, &err, "%s '%s'", fn, t->name) : HX_OK;
}

/* ---- rows in and out ----------------------------------------------------------------- */

/* The rows of n ids (DYNAMIC: -1 for an id without a row); HX_ERR_INDEX for
 * an id outside the table. */
static hx_status rows_of(hx_embedding_table *t, const char *fn, const int64_t *ids, int64_t n,
                         int64_t *rows)
{
    int64_t R = t->impl->rows;
    if (t->ids == HX_EMBEDDING_IDS_MODULO) {
        hx_emb_keys_mod(ids, n, R, rows);
    } else if (t->ids == HX_EMBEDDING_IDS_DYNAMIC) {
        hx_emb_err err;
        hx_status st = hx_emb_idmap_map(hx_emb_dynamic_idmap(t->impl), ids, n, 0, 0, rows, NULL,
                                        NULL, &err);
        if (st) return hx__emb_error(st, &err, "%s '%s'", fn, t->name);
    } else {
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= R)
                return hx__error(HX_ERR_INDEX,
                                 "%s '%s': id %lld at position %lld is outside the table's rows "
                                 "[0, %lld)", fn, t->name, (long long)ids[i], (long long)i,
                                 (long long)R);
            rows[i] = ids[i];
        }
    }
    return HX_OK;
}

/* Checks the arguments of read/write_rows and maps the ids; *rows is freed by the caller. */
static hx_status rows_args(hx_embedding_table *t, const char *fn, const int64_t *ids, int64_t n,
                           const void *data, int64_t **rows, float **tmp)
{
    *rows = NULL;
    *tmp = NULL;
    if (!t || (n && (!ids || !data)) || n < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: table %p, %lld ids at %p, rows at %p", fn,
                         (void *)t, (long long)n, (const void *)ids, data);
    *rows = malloc((size_t)(n ? n : 1) * sizeof **rows);
    *tmp = malloc((size_t)hx_emb_row_stride(t->impl->dim, HX_DTYPE_F32) * sizeof **tmp);
    if (!*rows || !*tmp)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "%s '%s': out of host memory", fn, t->name);
    return rows_of(t, fn, ids, n, *rows);
}

hx_status hx_embedding_table_read_rows(hx_embedding_table *t, const int64_t *ids, int64_t n,
                                       float *out)
{
    int64_t *rows;
    float *tmp;
    if (t && (t->shard || t->client))
        return hx__embedding_shard_rows(t, "hx_embedding_table_read_rows", HX_EMB_SHARD_ROWS, ids, n, out, NULL);
    if (t) pthread_mutex_lock(&t->lock); /* a training lookup may be changing the id map */
    hx_status st = rows_args(t, "hx_embedding_table_read_rows", ids, n, out, &rows, &tmp);
    hx_emb_err err;
    if (!st && t->dev) hx_emb_devcache_flush(t->dev, &err); /* the host rows are then current */
    int64_t dim = st ? 0 : t->impl->dim;
    if (!st && t->ssd && (st = hx_emb_ssd_read_rows(t->ssd, rows, n, out, &err)))
        st = hx__emb_error(st, &err, "hx_embedding_table_read_rows '%s'", t->name);
    for (int64_t i = 0; i < n && !st && !t->ssd; i++) {
        if (rows[i] < 0) {
            memset(out + i * dim, 0, (size_t)dim * sizeof *out);
            continue;
        }
        hx_emb_local_read_row(t->local, rows[i], tmp);
        memcpy(out + i * dim, tmp, (size_t)dim * sizeof *out);
    }
    if (t) pthread_mutex_unlock(&t->lock);
    free(rows);
    free(tmp);
    return st;
}

hx_status hx_embedding_table_write_rows(hx_embedding_table *t, const int64_t *ids, int64_t n,
                                        const float *data)
{
    const char *fn = "hx_embedding_table_write_rows";
    int64_t *rows = NULL;
    float *tmp = NULL;
    hx_status st = t ? hx__embedding_hold(t, true, fn) : HX_OK;
    if (st) return st;
    if (t && t->client) {
        hx__embedding_release(t, true);
        return hx__error(HX_ERR_UNSUPPORTED, "%s '%s': a worker writes no rows of a server-mode table: write "
                         "them on the servers (collective over them)", fn, t->name);
    }
    if (t && t->shard) {
        st = hx__embedding_shard_rows(t, fn, HX_EMB_SHARD_ROWS, ids, n, NULL, data);
        hx__embedding_release(t, true);
        return st;
    }
    if (t) pthread_mutex_lock(&t->lock);
    st = rows_args(t, fn, ids, n, data, &rows, &tmp);
    hx_emb_err err;
    if (!st && t->dev) hx_emb_devcache_drop(t->dev, &err); /* the host rows change under it (never fails) */
    for (int64_t i = 0; i < n && !st; i++)
        if (rows[i] < 0)
            st = hx__error(HX_ERR_NOT_FOUND,
                           "%s '%s': id %lld at position %lld holds no row yet (a DYNAMIC table "
                           "gives ids rows in training runs); nothing was written", fn, t->name,
                           (long long)ids[i], (long long)i);
    if (!st && t->ssd && (st = hx_emb_ssd_write_rows(t->ssd, rows, n, data, &err)))
        st = hx__emb_error(st, &err, "%s '%s'", fn, t->name);
    for (int64_t i = 0; i < n && !st && !t->ssd; i++)
        hx_emb_local_write_row(t->local, rows[i], data + i * t->impl->dim, tmp);
    if (t) {
        pthread_mutex_unlock(&t->lock);
        hx__embedding_release(t, true);
    }
    free(rows);
    free(tmp);
    return st;
}

/* The optimizer's state arrays, for messages. */
static const char *state_arrays(hx_emb_optim_kind kind)
{
    switch (kind) {
    case HX_EMB_OPTIM_LAZY_ADAM: return "0: m, 1: v";
    case HX_EMB_OPTIM_ADAGRAD: return "0: sum";
    case HX_EMB_OPTIM_ROW_ADAGRAD: return "0: the row's accumulator";
    case HX_EMB_OPTIM_FTRL: return "0: accum, 1: linear";
    case HX_EMB_OPTIM_NONE: break;
    }
    return "none";
}

hx_status hx_embedding_table_read_state(hx_embedding_table *t, int k, const int64_t *ids,
                                        int64_t n, float *out)
{
    const char *fn = "hx_embedding_table_read_state";
    int64_t *rows = NULL;
    float *tmp = NULL;
    if (t && (t->shard || t->client)) return hx__embedding_shard_rows(t, fn, k, ids, n, out, NULL);
    if (t) pthread_mutex_lock(&t->lock); /* as read_rows; the optimizer may be changing too */
    hx_emb_optim_kind kind = t ? hx__embedding_optim_kind(t) : HX_EMB_OPTIM_NONE;
    int ns = hx_emb_optim_nstate(kind);
    hx_status st = HX_OK;
    if (t && (k < 0 || k >= ns))
        st = hx__error(HX_ERR_INVALID_ARGUMENT,
                       "%s '%s': state array %d: the table's optimizer (%s) keeps %d (%s)", fn,
                       t->name, k, hx_emb_optim_name(kind), ns, state_arrays(kind));
    if (!st) st = rows_args(t, fn, ids, n, out, &rows, &tmp);
    hx_emb_err err;
    if (!st && t->dev) hx_emb_devcache_flush(t->dev, &err); /* a host table behind it: never fails */
    int64_t w = st ? 0 : kind == HX_EMB_OPTIM_ROW_ADAGRAD ? 1 : t->impl->dim;
    if (!st && t->ssd && (st = hx_emb_ssd_read_state(t->ssd, k, rows, n, out, &err)))
        st = hx__emb_error(st, &err, "%s '%s'", fn, t->name);
    for (int64_t i = 0; i < n && !st && !t->ssd; i++) hx_emb_local_read_state(t->local, k, rows[i], out + i * w);
    if (t) pthread_mutex_unlock(&t->lock);
    free(rows);
    free(tmp);
    return st;
}

/* ---- save, load, stats --------------------------------------------------------------- */

hx_status hx_embedding_table_save(hx_embedding_table *t, const char *path)
{
    if (!t || !path)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_embedding_table_save: %s is NULL",
                         t ? "path" : "table");
    hx_emb_err err;
    pthread_mutex_lock(&t->lock);
    hx_status st = hx_emb_table_save(t->impl, path, &err);
    pthread_mutex_unlock(&t->lock);
    return st ? hx__emb_error(st, &err, "hx_embedding_table_save '%s' to %s", t->name, path) : HX_OK;
}

hx_status hx_embedding_table_load(hx_embedding_table *t, const char *path)
{
    if (!t || !path)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_embedding_table_load: %s is NULL",
                         t ? "path" : "table");
    hx_status st = hx__embedding_hold(t, true, "hx_embedding_table_load");
    if (st) return st;
    hx_emb_err err;
    pthread_mutex_lock(&t->lock);
    /* a sharded table's checkpoint into a fixed table of one process */
    bool shards = !t->shard && !t->client && hx_emb_shard_is_manifest(path);
    if (shards && t->ssd)
        st = hx_emb_fail(&err, HX_ERR_UNSUPPORTED, "a sharded checkpoint loads into a table in memory "
                         "(a table on disk takes its own checkpoints)");
    else if (shards && t->ids == HX_EMBEDDING_IDS_DYNAMIC)
        st = hx_emb_shard_load_dynamic(t->impl, path, &err);
    else if (shards) {
        if (t->dev) hx_emb_devcache_drop(t->dev, &err); /* written back (to the host table: never fails);
                                                           a failed load keeps the rows */
        st = hx_emb_shard_load_local(t->local, path, &err);
    } else st = hx_emb_table_load(t->impl, path, &err);
    pthread_mutex_unlock(&t->lock);
    hx__embedding_release(t, true);
    return st ? hx__emb_error(st, &err, "hx_embedding_table_load '%s' from %s", t->name, path)
              : HX_OK;
}

/* The device cache's counts (device_cache_rows) into *out; none: nothing. */
static void device_cache_stats(const hx_embedding_table *t, hx_embedding_stats *out)
{
    hx_emb_devcache_stats ds;
    bool got = t->dev || (t->client && hx__ps_device_stats(t->client, &ds)) /* several workers' (ps_hot.c) */
               || (t->shard && hx_emb_shard_hot_stats(t->shard, &ds)); /* collective (shard_hot.c) */
    if (!got) return;
    pthread_mutex_lock((pthread_mutex_t *)&t->lock);
    if (t->dev) hx_emb_devcache_stats_get(t->dev, &ds);
    pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
    out->device_cache_rows = ds.cache_rows;
    out->device_cache_lookups = (int64_t)ds.lookups;
    out->device_cache_hits = (int64_t)ds.hits;
    out->device_rows_in = (int64_t)ds.rows_in;
    out->device_rows_out = (int64_t)ds.rows_out;
    out->device_bytes_in = (int64_t)ds.bytes_in;
    out->device_bytes_out = (int64_t)ds.bytes_out;
    out->device_rows_init = (int64_t)ds.rows_init;
    out->device_rows_prefetched = (int64_t)ds.prefetched;
    out->device_cache_calls = ds.calls;
    out->device_cache_bytes = ds.bytes;
    out->device_cache_on_device = ds.on_device;
}

hx_status hx_embedding_table_stats(const hx_embedding_table *t, hx_embedding_stats *out)
{
    if (!t || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_embedding_table_stats: %s is NULL",
                         t ? "out" : "table");
    if (t->shard || t->client) {
        hx_status st = hx__embedding_shard_stats(t, out);
        if (!st) device_cache_stats(t, out);
        return st;
    }
    hx_emb_local_stats ls;
    hx_emb_err err;
    hx_emb_ssd_stats ss = {0};
    pthread_mutex_lock((pthread_mutex_t *)&t->lock);
    if (t->ssd) hx_emb_ssd_stats_get(t->ssd, &ss);
    pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
    hx_status st = hx_emb_local_stats_get(t->ssd ? &hx_emb_ssd_cache(t->ssd)->base : &t->local->base, &ls, &err);
    if (st) return hx__emb_error(st, &err, "hx_embedding_table_stats '%s'", t->name);
    if (t->ssd) {
        ls.oob_ids = atomic_load(hx_emb_ssd_oob_counter(t->ssd));
        ls.rows_ready = ss.store.rows_on_disk;
    }
    *out = (hx_embedding_stats){.rows = t->impl->rows, .dim = t->impl->dim,
                                .rows_assigned = ls.rows_ready, .out_of_range = ls.oob_ids,
                                .updates = atomic_load(&t->updates),
                                .last_step = atomic_load(&t->last_step), .bytes = ls.bytes,
                                .graphs = atomic_load(&t->graphs),
                                .cache_rows = ss.cache_rows, .cache_lookups = (int64_t)ss.lookups,
                                .cache_hits = (int64_t)ss.hits,
                                .disk_rows_read = (int64_t)ss.store.rows_read,
                                .disk_rows_written = (int64_t)ss.store.rows_written,
                                .disk_rows_written_ahead = (int64_t)ss.store.written_ahead,
                                .disk_bytes_read = (int64_t)ss.store.bytes_read,
                                .disk_bytes_written = (int64_t)ss.store.bytes_written,
                                .io_wait_s = ss.store.io_wait_s};
    device_cache_stats(t, out);
    hx__embedding_idmap_stats(t, hx_emb_dynamic_idmap(t->impl), out);
    return HX_OK;
}

void hx__embedding_idmap_stats(const hx_embedding_table *t, const hx_emb_idmap *map,
                               hx_embedding_stats *out)
{
    if (!map) return;
    hx_emb_idmap_stats ms;
    pthread_mutex_lock((pthread_mutex_t *)&t->lock);
    hx_emb_idmap_stats_get(map, &ms);
    pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
    out->rows_assigned = ms.keys;
    out->evictions = ms.evicted;
    out->expirations = ms.expired;
    out->filtered = ms.filtered;
}

void hx_embedding_hash_strings(const char *const *strs, const size_t *lens, int64_t n,
                               uint64_t seed, int64_t *keys)
{
    if (strs && lens && keys && n > 0) hx_emb_hash_strings(strs, lens, n, seed, keys);
}

/* ---- what the launchers call ------------------------------------------------------------ */

/* q with its ids (and offsets) as rows of a MODULO table, in i64 buffers
 * *own (freed by the caller); other tables take q as it is. */
static hx_status map_query(const hx_embedding_table *t, const hx_emb_query *q, hx_emb_query *out,
                           int64_t **own, const char *where)
{
    *out = *q;
    *own = NULL;
    if (t->ids != HX_EMBEDDING_IDS_MODULO) return HX_OK;
    int64_t noff = q->mode == HX_EMB_ROWS ? 0 : q->n_offsets;
    int64_t *buf = malloc((size_t)(q->n + noff + 1) * sizeof *buf);
    if (!buf) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", where);
    for (int64_t i = 0; i < q->n; i++) buf[i] = hx_emb_id_at(q->ids, q->id_dtype, i);
    hx_emb_keys_mod(buf, q->n, t->impl->rows, buf);
    for (int64_t b = 0; b < noff; b++) buf[q->n + b] = hx_emb_id_at(q->offsets, q->id_dtype, b);
    out->ids = buf;
    out->offsets = noff ? buf + q->n : q->offsets;
    out->id_dtype = HX_DTYPE_I64;
    /* The padding id names a raw id; as a row it would also match other ids. */
    if (q->has_padding) out->padding_id = -1;
    for (int64_t i = 0; q->has_padding && i < q->n; i++)
        if (hx_emb_id_at(q->ids, q->id_dtype, i) == q->padding_id) buf[i] = -1;
    *own = buf;
    return HX_OK;
}

hx_status hx__embedding_query(hx_embedding_table *t, const hx_emb_query *q, float *out,
                              int64_t *argmax, bool forward, const char *where)
{
    hx_emb_query mq;
    int64_t *own;
    hx_status st = map_query(t, q, &mq, &own, where);
    if (st) return st;
    bool lock = (t->ids == HX_EMBEDDING_IDS_DYNAMIC && q->train) || t->ssd || t->dev; /* a cache changes */
    hx_emb_err err;
    if (lock) pthread_mutex_lock(&t->lock);
    if (!forward && t->local && t->impl == &t->local->base) /* a re-read: its bad ids were counted */
        st = hx_emb_local_lookup(t->local, &mq, t->local->oob, NULL, out, argmax, &err);
    else if (!forward && hx_emb_as_devcache(t->impl)) /* as above, through the cache */
        st = hx_emb_devcache_lookup(t->dev, &mq, t->local ? t->local->oob : HX_EMB_OOB_ZERO, NULL, out, argmax,
                                    &err); /* (bad ids failed the forward already) */
    else
        st = hx_emb_table_lookup(t->impl, &mq, out, argmax, &err);
    if (lock) pthread_mutex_unlock(&t->lock);
    free(own);
    return st ? hx__emb_error(st, &err, "%s", where) : HX_OK;
}

hx_status hx__embedding_update(hx_embedding_table *t, const hx_emb_query *qs,
                               const hx_emb_grad_input *gis, int nq, int64_t step,
                               const char *where)
{
    hx_emb_query *mq = calloc((size_t)nq, sizeof *mq);
    int64_t **own = calloc((size_t)nq, sizeof *own);
    hx_status st = mq && own ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", where);
    for (int k = 0; k < nq && !st; k++) st = map_query(t, &qs[k], &mq[k], &own[k], where);
    if (!st) {
        hx_emb_err err;
        pthread_mutex_lock(&t->lock);
        st = hx_emb_table_backward_update_many(t->impl, mq, gis, nq, step, t->ws, &err);
        if (!st) {
            atomic_fetch_add(&t->updates, 1);
            atomic_store(&t->last_step, step);
            if (t->expire_after > 0 && step % t->expire_after == 0) {
                /* a shard expires its own map (where it holds one); a worker's
                 * server-mode table holds none (its servers expire theirs) */
                hx_emb_table *m = t->client ? NULL : t->shard ? hx_emb_shard_part(t->shard) : t->impl;
                if (m) hx_emb_idmap_expire(hx_emb_dynamic_idmap(m), step);
            }
        }
        pthread_mutex_unlock(&t->lock);
        if (st) st = hx__emb_error(st, &err, "%s", where);
    }
    for (int k = 0; own && k < nq; k++) free(own[k]);
    free(own);
    free(mq);
    return st;
}

hx_status hx_embedding_table_prefetch(hx_embedding_table *t, const int64_t *ids, int64_t n)
{
    if (!t || n < 0 || (n && !ids))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_embedding_table_prefetch: table %p, %lld ids at %p",
                         (void *)t, (long long)n, (const void *)ids);
    if ((!t->ssd && !t->dev) || !n) return HX_OK;
    int64_t *rows = malloc((size_t)n * sizeof *rows);
    if (!rows)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_embedding_table_prefetch '%s': out of host memory", t->name);
    pthread_mutex_lock(&t->lock);
    hx_status st = HX_OK;
    hx_emb_err err;
    if (t->ids == HX_EMBEDDING_IDS_MODULO) hx_emb_keys_mod(ids, n, t->impl->rows, rows);
    else if (t->ids == HX_EMBEDDING_IDS_ROWS) memcpy(rows, ids, (size_t)n * sizeof *rows);
    else {
        st = hx_emb_idmap_map(hx_emb_dynamic_idmap(t->impl), ids, n, 0, 0, rows, NULL, NULL, &err);
        if (st) st = hx__emb_error(st, &err, "hx_embedding_table_prefetch '%s'", t->name);
    }
    if (!st && t->ssd) hx_emb_ssd_prefetch(t->ssd, rows, n); /* ids outside the table are skipped */
    if (!st && t->dev && (st = hx_emb_devcache_prefetch(t->dev, rows, n, &err)))
        st = hx__emb_error(st, &err, "hx_embedding_table_prefetch '%s'", t->name);
    pthread_mutex_unlock(&t->lock);
    free(rows);
    return st;
}
