/* Collective reads and writes of a sharded table's rows and optimizer
 * state (hetex.h's hx_embedding_table_read_rows, _write_rows and
 * _read_state on a table with a communicator): each rank's ids routed to
 * their owners, which read or write their part. */
#include "embedding/shard_impl.h"

#include <stdlib.h>
#include <string.h>

/* This rank's own input: sizes, pointers and (fixed tables) ids. */
static hx_status check_input(const hx_emb_shard *s, const char *fn, const int64_t *ids, int64_t n,
                             const void *data, hx_emb_err *err)
{
    if (n < 0 || (n && (!ids || !data)))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "%s: %lld ids at %p, rows at %p", fn, (long long)n,
                           (const void *)ids, data);
    for (int64_t i = 0; i < n && !s->dynamic; i++)
        if (ids[i] < 0 || ids[i] >= s->base.rows)
            return hx_emb_fail(err, HX_ERR_INDEX, "%s: id %lld at position %lld is outside the table's rows "
                               "[0, %lld)", fn, (long long)ids[i], (long long)i, (long long)s->base.rows);
    return HX_OK;
}

/* The rows of the part that the received ids name (-1: a DYNAMIC key
 * without a row). */
static hx_status part_rows(hx_emb_shard *s, const hx_emb_route *r, int64_t *rows, hx_emb_err *err)
{
    if (!s->dynamic) {
        memcpy(rows, r->recv, (size_t)r->nrecv * sizeof *rows);
        return HX_OK;
    }
    if (!r->nrecv) return HX_OK;
    return hx_emb_idmap_map(hx_emb_dynamic_idmap(s->part), r->recv, r->nrecv, 0, 0, rows, NULL, NULL, err);
}

hx_status hx_emb_shard_read(hx_emb_shard *s, int k, const int64_t *ids, int64_t n, float *out,
                            hx_emb_err *err)
{
    bool state = k != HX_EMB_SHARD_ROWS;
    const char *fn = state ? "read state (sharded)" : "read rows (sharded)";
    int64_t dim = s->base.dim;
    int ns = hx_emb_optim_nstate(s->optim.kind);
    int64_t width = state && s->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD ? 1 : dim;
    hx_emb_err mine;
    hx_status verdict = state && (k < 0 || k >= ns) ? hx_emb_fail(&mine, HX_ERR_INVALID_ARGUMENT, "%s: state array %d: the "
                                              "table's optimizer (%s) keeps %d", fn, k,
                                              hx_emb_optim_name(s->optim.kind), ns)
                                : check_input(s, fn, ids, n, out, &mine);
    hx_emb_route r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&s->lock);
    hx__shard_hot_before(s, false, &verdict, &mine); /* the owners' rows current */
    if (!verdict) verdict = hx__shard_route_plan(s, ids, n, NULL, true, &r, &mine);
    hx_status st = hx__shard_exchange_ids(s, HX_EMB_X_READ, &r, verdict, &mine, err);
    float *owned = NULL, *got = NULL, *tmp = NULL;
    int64_t *rows = NULL;
    if (!st) {
        owned = malloc((size_t)(r.nrecv * width + 1) * sizeof *owned);
        got = malloc((size_t)(r.U * width + 1) * sizeof *got);
        rows = malloc((size_t)(r.nrecv + 1) * sizeof *rows);
        tmp = malloc((size_t)hx_emb_row_stride(dim, HX_DTYPE_F32) * sizeof *tmp);
        hx_status own = owned && got && rows && tmp
                            ? part_rows(s, &r, rows, &mine)
                            : hx_emb_fail(&mine, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        for (int64_t i = 0; i < r.nrecv && !own; i++) {
            float *dst = owned + i * width;
            if (state) {
                hx_emb_local_read_state(s->local, k, rows[i], tmp);
                memcpy(dst, tmp, (size_t)width * sizeof *dst);
            } else if (rows[i] < 0) {
                memset(dst, 0, (size_t)dim * sizeof *dst);
            } else {
                hx_emb_local_read_row(s->local, rows[i], tmp);
                memcpy(dst, tmp, (size_t)dim * sizeof *dst);
            }
        }
        st = hx__shard_reply(s, HX_EMB_X_READ, &r, owned, width, own, &mine, got, err);
    }
    pthread_mutex_unlock(&s->lock);
    for (int64_t i = 0; i < n && !st; i++)
        memcpy(out + i * width, got + r.inv[i] * width, (size_t)width * sizeof *out);
    free(owned);
    free(got);
    free(rows);
    free(tmp);
    hx__shard_route_free(&r);
    return st;
}

hx_status hx_emb_shard_write(hx_emb_shard *s, const int64_t *ids, int64_t n, const float *data,
                             hx_emb_err *err)
{
    const char *fn = "write rows (sharded)";
    int64_t dim = s->base.dim;
    hx_emb_err mine;
    hx_status verdict = check_input(s, fn, ids, n, data, &mine);
    hx_emb_route r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&s->lock);
    hx__shard_hot_before(s, true, &verdict, &mine); /* the owners' rows current, the cache empty */
    /* no de-dup: an id written twice ends with its last row */
    if (!verdict) verdict = hx__shard_route_plan(s, ids, n, NULL, false, &r, &mine);
    hx_status st = hx__shard_exchange_ids(s, HX_EMB_X_WRITE, &r, verdict, &mine, err);
    float *send = NULL, *recv = NULL, *tmp = NULL;
    int64_t *rows = NULL;
    if (!st) {
        send = malloc((size_t)(r.U * dim + 1) * sizeof *send);
        recv = malloc((size_t)(r.nrecv * dim + 1) * sizeof *recv);
        if (!send || !recv) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        for (int64_t u = 0; u < r.U && !st; u++)
            memcpy(send + u * dim, data + r.first[u] * dim, (size_t)dim * sizeof *send);
        if (!st) st = hx__shard_push(s, &r, send, dim, recv, err);
    }
    if (!st) {
        /* every id checked on every owner before any row is written */
        rows = malloc((size_t)(r.nrecv + 1) * sizeof *rows);
        tmp = malloc((size_t)hx_emb_row_stride(dim, HX_DTYPE_F32) * sizeof *tmp);
        hx_status own = rows && tmp ? part_rows(s, &r, rows, &mine)
                                    : hx_emb_fail(&mine, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        for (int64_t i = 0; i < r.nrecv && !own; i++)
            if (rows[i] < 0) {
                int from = 0;
                while (from + 1 < s->size && r.rdispl[from + 1] <= i) from++;
                own = hx_emb_fail(&mine, HX_ERR_NOT_FOUND,
                                  "%s: id %lld (from rank %d) holds no row yet (a DYNAMIC table gives "
                                  "ids rows in training runs); nothing was written", fn,
                                  (long long)r.recv[i], from);
            }
        st = hx__shard_agree(s, HX_EMB_X_WRITE, own, &mine, err);
        for (int64_t i = 0; i < r.nrecv && !st; i++) hx_emb_local_write_row(s->local, rows[i], recv + i * dim, tmp);
    }
    pthread_mutex_unlock(&s->lock);
    free(send);
    free(recv);
    free(rows);
    free(tmp);
    hx__shard_route_free(&r);
    return st;
}
