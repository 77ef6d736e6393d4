/* Several queries of one table as one optimizer step: a graph that looks a
 * table up in several places trains it with one update per step, each
 * touched row's gradient summed over every query first. */
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"

hx_status hx_emb_table_backward_update_many(hx_emb_table *t, const hx_emb_query *qs,
                                            const hx_emb_grad_input *gis, int nq, int64_t step,
                                            hx_emb_workspace *ws, hx_emb_err *err)
{
    if (!t || !qs || !gis || nq < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding update: %d queries at %p for table %p", nq, (const void *)qs,
                           (const void *)t);
    if (nq == 1) return hx_emb_table_backward_update(t, qs, gis, step, ws, err);
    int64_t dim = t->dim;
    for (int k = 0; k < nq; k++)
        if (gis[k].dim != dim)
            return hx_emb_fail(err, HX_ERR_SHAPE,
                               "embedding update: query %d's gradient rows have dim %lld, the "
                               "table %lld", k, (long long)gis[k].dim, (long long)dim);
    hx_emb_sparse_grad *sg = calloc((size_t)nq, sizeof *sg);
    if (!sg) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding update: out of memory");
    hx_status st = HX_OK;
    int64_t total = 0;
    for (int k = 0; k < nq && !st; k++) {
        st = hx_emb_backward(&qs[k], &gis[k], ws, &sg[k], err);
        total += sg[k].n;
    }
    int64_t *ids = st ? NULL : malloc((size_t)(total ? total : 1) * sizeof *ids);
    float *rows = st ? NULL : malloc((size_t)(total ? total : 1) * (size_t)dim * sizeof *rows);
    if (!st && (!ids || !rows))
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                         "embedding update: out of memory for %lld gradient rows", (long long)total);
    if (!st) {
        /* The sparse gradients as one ROWS query over their ids, rows packed to dim. */
        int64_t at = 0;
        for (int k = 0; k < nq; k++)
            for (int64_t u = 0; u < sg[k].n; u++, at++) {
                ids[at] = sg[k].ids[u];
                memcpy(rows + at * dim, sg[k].rows + u * sg[k].stride, (size_t)dim * sizeof *rows);
            }
        hx_emb_query q = hx_emb_query_rows(ids, total);
        q.nthreads = qs[0].nthreads;
        hx_emb_grad_input gi = {rows, NULL, dim, gis[0].dedup};
        st = hx_emb_table_backward_update(t, &q, &gi, step, ws, err);
    }
    free(ids);
    free(rows);
    for (int k = 0; k < nq; k++) hx_emb_sparse_grad_free(&sg[k]);
    free(sg);
    return st;
}
