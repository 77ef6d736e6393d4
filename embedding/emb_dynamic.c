/* The dynamic table: a local table (or one on disk) behind an id map. Its queries and
 * sparse gradients carry keys; they are mapped to rows (keys without a row
 * become -2, read as zero rows and dropped from updates; padding becomes
 * -1, the padding id of the mapped query) and handed to the local table. */
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"

typedef struct dyn {
    hx_emb_table base;
    hx_emb_table *local;
    hx_emb_idmap *map;
    hx_emb_idmap_config mcfg;
} dyn;

static const hx_emb_ops dyn_ops;

static dyn *as_dyn(hx_emb_table *t) { return t && t->ops == &dyn_ops ? (dyn *)t : NULL; }

hx_emb_idmap *hx_emb_dynamic_idmap(hx_emb_table *t)
{
    dyn *d = as_dyn(t);
    return d ? d->map : NULL;
}

hx_emb_table *hx_emb_dynamic_local(hx_emb_table *t)
{
    dyn *d = as_dyn(t);
    return d ? d->local : NULL;
}

/* The inner table's calls: a local table, one on disk (ssd.h) or one
 * behind a device cache (cache.h). Keys
 * without a row (-2) read as zero rows and get no update, uncounted. */
static hx_status inner_lookup(dyn *d, const hx_emb_query *q, float *out, int64_t *argmax, hx_emb_err *err)
{
    hx_emb_ssd *s = hx_emb_as_ssd(d->local);
    if (s) return hx_emb_ssd_lookup(s, q, HX_EMB_OOB_ZERO, NULL, out, argmax, err);
    hx_emb_devcache *c = hx_emb_as_devcache(d->local);
    if (c) return hx_emb_devcache_lookup(c, q, HX_EMB_OOB_ZERO, NULL, out, argmax, err);
    return hx_emb_local_lookup(hx_emb_as_local(d->local), q, HX_EMB_OOB_ZERO, NULL, out, argmax, err);
}

static hx_status inner_update(dyn *d, const hx_emb_query *q, const hx_emb_grad_input *gi, int64_t step,
                              hx_emb_workspace *ws, hx_emb_err *err)
{
    hx_emb_ssd *s = hx_emb_as_ssd(d->local);
    if (s) return hx_emb_ssd_backward_update(s, q, gi, step, HX_EMB_OOB_ZERO, ws, err);
    hx_emb_devcache *c = hx_emb_as_devcache(d->local);
    if (c) return hx_emb_devcache_backward_update(c, q, gi, step, HX_EMB_OOB_ZERO, ws, err);
    return hx_emb_local_backward_update(hx_emb_as_local(d->local), q, gi, step, HX_EMB_OOB_ZERO, ws, err);
}

static hx_status inner_apply(dyn *d, const hx_emb_sparse_grad *g, int64_t step, int nthreads, hx_emb_err *err)
{
    hx_emb_ssd *s = hx_emb_as_ssd(d->local);
    if (s) return hx_emb_ssd_apply(s, g, step, nthreads, HX_EMB_OOB_ZERO, err);
    hx_emb_devcache *c = hx_emb_as_devcache(d->local);
    if (c) return hx_emb_devcache_apply(c, g, step, nthreads, HX_EMB_OOB_ZERO, err);
    return hx_emb_local_apply(hx_emb_as_local(d->local), g, step, nthreads, HX_EMB_OOB_ZERO, err);
}

static void inner_reset(dyn *d, const int64_t *rows, int64_t n)
{
    hx_emb_ssd *s = hx_emb_as_ssd(d->local);
    hx_emb_devcache *c = hx_emb_as_devcache(d->local);
    if (s) hx_emb_ssd_reset_rows(s, rows, n);
    else if (c) hx_emb_devcache_reset_rows(c, rows, n);
    else hx_emb_local_reset_rows(d->local, rows, n);
}

/* Row ids of a query's keys; the buffers come from ws, or are allocated
 * into *own (freed by the caller). */
typedef struct mapped {
    hx_emb_query q;
    void *own[3];
} mapped;

static void mapped_free(mapped *mp)
{
    for (int i = 0; i < 3; i++) free(mp->own[i]);
}

static void *buf(hx_emb_workspace *ws, int slot, size_t bytes, void **own)
{
    if (ws) return hx_emb_ws_get(ws, slot, bytes);
    *own = malloc(bytes ? bytes : 8);
    return *own;
}

static hx_status map_query(dyn *d, const hx_emb_query *q, int train, hx_emb_workspace *ws,
                           mapped *mp, hx_emb_err *err)
{
    memset(mp, 0, sizeof *mp);
    int64_t nbags;
    hx_status st = hx_emb_query_check(q, &nbags, err);
    if (st) return st;
    int64_t n = q->n;
    int64_t *rows = buf(ws, HX_EMB_WS_XIDS, (size_t)n * 8, &mp->own[0]);
    int64_t *fresh = train ? malloc((size_t)(n ? n : 1) * 8) : NULL;
    mp->own[1] = fresh;
    int convert = q->mode != HX_EMB_ROWS && q->id_dtype == HX_DTYPE_I32;
    int64_t *off = convert ? buf(ws, HX_EMB_WS_XOFF, (size_t)q->n_offsets * 8, &mp->own[2]) : NULL;
    if (!rows || (train && !fresh) || (convert && !off)) {
        mapped_free(mp);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding dynamic table: out of memory mapping %lld keys",
                           (long long)n);
    }
    /* Keys of the positions that are not padding, mapped in place. */
    int64_t c = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t key = hx_emb_id_at(q->ids, q->id_dtype, j);
        if (!(q->has_padding && key == q->padding_id)) rows[c++] = key;
    }
    int64_t nf = 0;
    st = hx_emb_idmap_map(d->map, rows, c, train, q->step, rows, fresh, &nf, err);
    if (st) {
        mapped_free(mp);
        return st;
    }
    inner_reset(d, fresh, nf);
    for (int64_t j = n - 1; j >= 0; j--) {
        int64_t key = hx_emb_id_at(q->ids, q->id_dtype, j);
        if (q->has_padding && key == q->padding_id) rows[j] = -1;
        else rows[j] = rows[--c] >= 0 ? rows[c] : -2;
    }
    if (convert)
        for (int64_t b = 0; b < q->n_offsets; b++) off[b] = hx_emb_id_at(q->offsets, q->id_dtype, b);
    mp->q = *q;
    mp->q.ids = rows;
    mp->q.id_dtype = HX_DTYPE_I64;
    if (convert) mp->q.offsets = off;
    mp->q.has_padding = 1;
    mp->q.padding_id = -1;
    return HX_OK;
}

static hx_status dyn_lookup(hx_emb_table *t, const hx_emb_query *q, float *out,
                            int64_t *argmax, hx_emb_err *err)
{
    dyn *d = (dyn *)t;
    if (q && !out && hx_emb_query_out_rows(q) > 0) /* before the map changes */
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding lookup: out is NULL");
    mapped mp;
    hx_status st = map_query(d, q, q && q->train, NULL, &mp, err);
    if (st) return st;
    st = inner_lookup(d, &mp.q, out, argmax, err);
    mapped_free(&mp);
    return st;
}

static hx_status dyn_backward_update(hx_emb_table *t, const hx_emb_query *q,
                                     const hx_emb_grad_input *gi, int64_t step,
                                     hx_emb_workspace *ws, hx_emb_err *err)
{
    dyn *d = (dyn *)t;
    mapped mp;
    hx_status st = map_query(d, q, 0, ws, &mp, err);
    if (st) return st;
    st = inner_update(d, &mp.q, gi, step, ws, err);
    mapped_free(&mp);
    return st;
}

static hx_status dyn_apply(hx_emb_table *t, const hx_emb_sparse_grad *g, int64_t step,
                           int nthreads, hx_emb_err *err)
{
    dyn *d = (dyn *)t;
    if (!g || g->n < 0 || (g->n > 0 && !g->ids))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding update: bad sparse gradient");
    int64_t *rows = malloc((size_t)(g->n ? g->n : 1) * 8);
    if (!rows) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding update: out of memory");
    hx_status st = hx_emb_idmap_map(d->map, g->ids, g->n, 0, 0, rows, NULL, NULL, err);
    if (!st) {
        for (int64_t i = 0; i < g->n; i++)
            if (rows[i] < 0) rows[i] = -2;
        hx_emb_sparse_grad g2 = *g;
        g2.ids = rows;
        st = inner_apply(d, &g2, step, nthreads, err);
    }
    free(rows);
    return st;
}

static hx_status dyn_save(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    dyn *d = (dyn *)t;
    int64_t n = hx_emb_idmap_serial_size(d->map);
    int64_t *w = malloc((size_t)n * 8);
    if (!w) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding save: out of memory for the id map");
    hx_emb_idmap_serial_write(d->map, w);
    hx_emb_ssd *s = hx_emb_as_ssd(d->local);
    hx_emb_devcache *c = hx_emb_as_devcache(d->local);
    hx_status st = c ? hx_emb_devcache_flush(c, err) : HX_OK;
    if (!st) st = s ? hx_emb_ssd_save_with(s, path, w, n, err)
                    : hx_emb_local_save_with(c ? hx_emb_devcache_host(c) : hx_emb_as_local(d->local), path, w, n, err);
    free(w);
    return st;
}

typedef struct load_ctx {
    dyn *d;
    hx_emb_idmap *map;
} load_ctx;

static hx_status take_map(void *vctx, const int64_t *words, int64_t nwords, hx_emb_err *err)
{
    load_ctx *c = vctx;
    if (!words)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding load: the file holds a fixed table (no id map); load it into a local table");
    return hx_emb_idmap_serial_read(&c->d->mcfg, words, nwords, &c->map, err);
}

static hx_status dyn_load(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    dyn *d = (dyn *)t;
    load_ctx c = {d, NULL};
    hx_emb_ssd *s = hx_emb_as_ssd(d->local);
    hx_emb_devcache *dc = hx_emb_as_devcache(d->local);
    if (dc) hx_emb_devcache_drop(dc, err); /* a host table behind it: never fails */
    hx_status st = s ? hx_emb_ssd_load_with(s, path, take_map, &c, err)
                     : hx_emb_local_load_with(dc ? hx_emb_devcache_host(dc) : hx_emb_as_local(d->local), path, take_map, &c, err);
    if (st) {
        hx_emb_idmap_free(c.map);
        return st;
    }
    hx_emb_idmap_free(d->map);
    d->map = c.map;
    return HX_OK;
}

hx_status hx_emb_dynamic_map_from(hx_emb_table *t, const int64_t *words, int64_t n, hx_emb_idmap **out,
                                  hx_emb_err *err)
{
    dyn *d = as_dyn(t);
    *out = NULL;
    if (!d) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding: not a DYNAMIC table");
    return hx_emb_idmap_serial_read(&d->mcfg, words, n, out, err);
}

void hx_emb_dynamic_set_map(hx_emb_table *t, hx_emb_idmap *m)
{
    dyn *d = as_dyn(t);
    hx_emb_idmap_free(d->map);
    d->map = m;
}

static void dyn_free(hx_emb_table *t)
{
    dyn *d = (dyn *)t;
    hx_emb_table_free(d->local);
    hx_emb_idmap_free(d->map);
    free(d);
}

static const hx_emb_ops dyn_ops = {
    "dynamic", dyn_lookup, dyn_apply, dyn_backward_update, dyn_save, dyn_load, dyn_free,
};

hx_status hx_emb_dynamic_create(const hx_emb_table_config *cfg,
                                const hx_emb_idmap_config *mcfg, hx_emb_table **out,
                                hx_emb_err *err)
{
    if (!out) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding dynamic table: out is NULL");
    *out = NULL;
    if (!cfg || !mcfg) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding dynamic table: config is NULL");
    if (mcfg->capacity != cfg->rows)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding dynamic table: the map's capacity (%lld) must equal the table's rows (%lld)",
                           (long long)mcfg->capacity, (long long)cfg->rows);
    dyn *d = calloc(1, sizeof *d);
    if (!d) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding dynamic table: out of memory");
    hx_status st = hx_emb_fixed_create(cfg, &d->local, err);
    if (!st) st = hx_emb_idmap_create(mcfg, &d->map, err);
    if (st) {
        hx_emb_table_free(d->local);
        free(d);
        return st;
    }
    d->mcfg = *mcfg;
    d->base.ops = &dyn_ops;
    d->base.rows = cfg->rows;
    d->base.dim = cfg->dim;
    *out = &d->base;
    return HX_OK;
}
