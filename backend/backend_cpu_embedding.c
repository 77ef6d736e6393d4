/* CPU launchers of the embedding ops: a node's inputs become an embedding/
 * query on its table (embedding/table.c maps ids, locks and reports
 * errors). The update node's step is the session's step + 1, as for dense
 * optimizers; its gradient was scanned for Inf/NaN before it runs. */
#include "backend/backend_cpu_embedding.h"

#include "embedding/embedding.h"
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>

/* The query of lookup or bag node l over its inputs' values. */
static hx_emb_query node_query(const hx_exec *ex, const hx_tensor *l, const void *ids,
                               const void *offsets, const float *weights)
{
    static const hx_emb_mode modes[] = {
        [HX_EMBEDDING_BAG_SUM] = HX_EMB_SUM, [HX_EMBEDDING_BAG_MEAN] = HX_EMB_MEAN,
        [HX_EMBEDDING_BAG_MAX] = HX_EMB_MAX};
    hx_emb_query q = {.ids = ids, .id_dtype = l->src[0]->dtype,
                      .n = hx_tensor_numel(l->src[0]), .mode = HX_EMB_ROWS,
                      .train = ex->train, .step = ex->step + 1, .nthreads = ex->nthreads};
    if (l->op == HX_OP_EMBEDDING_BAG) {
        int64_t flags = l->attr.i[1];
        q.mode = modes[l->attr.i[0]];
        q.offsets = offsets;
        q.n_offsets = l->src[1]->shape[0];
        q.include_last_offset = (flags & HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET) != 0;
        q.weights = weights;
        q.has_padding = (flags & HX_EMBEDDING_BAG_PADDING) != 0;
        q.padding_id = l->attr.i[2];
    }
    return q;
}

static const char *where_of(const hx_tensor *y, char *buf, size_t n)
{
    snprintf(buf, n, "%s '%s' (table '%s')", hx__ops[y->op].name, y->name, y->table->name);
    return buf;
}

hx_status hx__cpu_embedding_lookup(const hx_exec *ex, const hx_tensor *y, void *out,
                                   void *const *in)
{
    char where[320];
    hx_emb_query q = node_query(ex, y, in[0], NULL, NULL);
    return hx__embedding_query(y->table, &q, out, NULL, true, where_of(y, where, sizeof where));
}

hx_status hx__cpu_embedding_bag(const hx_exec *ex, const hx_tensor *y, void *out,
                                void *const *in)
{
    char where[320];
    hx_emb_query q = node_query(ex, y, in[0], in[1], y->n_src > 2 ? in[2] : NULL);
    return hx__embedding_query(y->table, &q, out, NULL, true, where_of(y, where, sizeof where));
}

/* in: dy, ids, offsets; the attributes are the bag's. Reads the rows of the
 * ids as the forward did (padding and out-of-range ids as zero rows). */
hx_status hx__cpu_embedding_bag_weights_backward(const hx_exec *ex, const hx_tensor *y, void *out,
                                                 void *const *in)
{
    char where[320];
    where_of(y, where, sizeof where);
    const hx_tensor *ids = y->src[1];
    int64_t n = hx_tensor_numel(ids), dim = hx_embedding_table_dim(y->table);
    int64_t nbags = y->src[0]->shape[0], flags = y->attr.i[1];
    hx_emb_query q = {.ids = in[1], .id_dtype = ids->dtype, .n = n, .mode = HX_EMB_ROWS,
                      .has_padding = (flags & HX_EMBEDDING_BAG_PADDING) != 0,
                      .padding_id = y->attr.i[2], .nthreads = ex->nthreads};
    float *rows = malloc((size_t)(n * dim) * sizeof *rows);
    if (!rows) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", where);
    hx_status st = hx__embedding_query(y->table, &q, rows, NULL, false, where);
    const float *dy = in[0];
    float *dw = out;
    for (int64_t b = 0; b < nbags && !st; b++) {
        int64_t lo = hx_emb_id_at(in[2], ids->dtype, b);
        int64_t hi = b + 1 < y->src[2]->shape[0] ? hx_emb_id_at(in[2], ids->dtype, b + 1) : n;
        for (int64_t j = lo; j < hi; j++) {
            float acc = 0;
            for (int64_t k = 0; k < dim; k++) acc += rows[j * dim + k] * dy[b * dim + k];
            dw[j] = acc;
        }
    }
    free(rows);
    return st;
}

/* in: src[1] is every lookup's output gradient (see hx_emb_update_info). */
hx_status hx__cpu_embedding_update(const hx_exec *ex, const hx_tensor *y, void *out,
                                   void *const *in)
{
    (void)out;
    char where[320];
    where_of(y, where, sizeof where);
    const hx_emb_update_info *info = y->emb_update;
    int nq = info->n;
    int64_t total = hx_tensor_numel(y), dim = hx_embedding_table_dim(y->table);
    hx_emb_query *qs = calloc((size_t)nq, sizeof *qs);
    hx_emb_grad_input *gis = calloc((size_t)nq, sizeof *gis);
    int64_t **argmax = calloc((size_t)nq, sizeof *argmax);
    bool scaled = ex->grad_unscale != 1.0f;
    float *grad = scaled ? malloc((size_t)(total ? total : 1) * sizeof *grad) : in[1];
    hx_status st = HX_OK;
    if (!qs || !gis || !argmax || !grad) {
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", where);
        goto out;
    }
    if (scaled) /* the loss scale divided out before the optimizer sees the gradient */
        for (int64_t i = 0; i < total; i++) grad[i] = ((const float *)in[1])[i] * ex->grad_unscale;
    for (int k = 0; k < nq && !st; k++) {
        const hx_emb_update_src *e = &info->src[k];
        qs[k] = node_query(ex, e->lookup, in[e->ids], e->offsets >= 0 ? in[e->offsets] : NULL,
                           e->weights >= 0 ? in[e->weights] : NULL);
        qs[k].train = 0; /* a DYNAMIC table's rows were assigned by the forward */
        gis[k] = (hx_emb_grad_input){grad + e->grad_offset, NULL, dim, HX_EMB_DEDUP_AUTO};
        if (qs[k].mode != HX_EMB_MAX) continue;
        /* MAX: which position won each element, from the rows the forward read. */
        int64_t bags = hx_tensor_dim(e->lookup, 0);
        float *rows = malloc((size_t)(bags * dim) * sizeof *rows);
        argmax[k] = malloc((size_t)(bags * dim) * sizeof **argmax);
        st = rows && argmax[k] ? hx__embedding_query(y->table, &qs[k], rows, argmax[k], false, where)
                               : hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", where);
        free(rows);
        gis[k].argmax = argmax[k];
    }
    if (!st) st = hx__embedding_update(y->table, qs, gis, nq, ex->step + 1, where);
out:
    for (int k = 0; argmax && k < nq; k++) free(argmax[k]);
    free(argmax);
    if (scaled) free(grad);
    free(qs);
    free(gis);
    return st;
}
