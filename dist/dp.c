/* Data parallel, stage 0: the ranks' gradients (f32 or bf16) summed in place, moved
 * as whole chunks of the chunk layout (memory/chunks.h) over the
 * gradients in a fixed order, the same on every rank. */
#include "dist/dist.h"
#include "memory/memory.h"

#include <stdlib.h>
#include <string.h>

struct hx_dp {
    hx_comm *c;
    hx_dtype dt;          /* of every gradient here */
    int64_t n;            /* gradients */
    size_t *bytes;        /* each one's */
    size_t *at;           /* each one's offset in stage */
    int64_t n_chunks;
    size_t *chunk_lo;     /* chunk k: stage bytes [chunk_lo[k], chunk_lo[k+1]) */
    char *stage;          /* the chunks, back to back; gaps stay zero */
    hx_coll **q;          /* per chunk, in flight */
};

void hx__dp_free(hx_dp *d)
{
    if (!d) return;
    free(d->bytes);
    free(d->at);
    free(d->chunk_lo);
    free(d->stage);
    free(d->q);
    free(d);
}

hx_status hx__dp_create(hx_comm *c, const size_t *bytes, int64_t n, size_t chunk_size, hx_dtype dt,
                        hx_dp **out)
{
    *out = NULL;
    size_t esz = hx_dtype_size(dt);
    /* no chunk larger than all the gradients: a small model sends no empty tail */
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) total += hx__mem_round(bytes[i], esz);
    if (!chunk_size) chunk_size = 32 * HX_MIB;
    if (chunk_size > total) chunk_size = total;
    chunk_size = hx__mem_round(chunk_size ? chunk_size : esz, esz);
    hx_dp *d = calloc(1, sizeof *d);
    int64_t *chunk_of = calloc((size_t)(n ? n : 1), sizeof *chunk_of);
    size_t *offset_of = calloc((size_t)(n ? n : 1), sizeof *offset_of);
    if (d) {
        d->c = c;
        d->dt = dt;
        d->n = n;
        d->bytes = malloc((size_t)(n ? n : 1) * sizeof *d->bytes);
        d->at = malloc((size_t)(n ? n : 1) * sizeof *d->at);
    }
    hx_chunk_plan plan;
    hx_mem_err err;
    hx_status st = !d || !chunk_of || !offset_of || !d->bytes || !d->at
                           ? hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory")
                           : HX_OK;
    if (!st && hx_chunk_layout(bytes, n, chunk_size, esz, esz, &plan, chunk_of,
                               offset_of, &err))
        st = hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: data parallel: %s", err.msg);
    if (!st) {
        memcpy(d->bytes, bytes, (size_t)n * sizeof *bytes);
        d->n_chunks = plan.n_chunks + plan.n_own;
        d->chunk_lo = calloc((size_t)d->n_chunks + 1, sizeof *d->chunk_lo);
        d->q = calloc((size_t)(d->n_chunks ? d->n_chunks : 1), sizeof *d->q);
        if (!d->chunk_lo || !d->q) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    if (!st) {
        /* a chunk of its own holds one gradient larger than chunk_size */
        for (int64_t k = 0; k < d->n_chunks; k++) d->chunk_lo[k + 1] = chunk_size;
        for (int64_t i = 0; i < n; i++)
            if (bytes[i] > chunk_size) d->chunk_lo[chunk_of[i] + 1] = hx__mem_round(bytes[i], esz);
        for (int64_t k = 0; k < d->n_chunks; k++) d->chunk_lo[k + 1] += d->chunk_lo[k];
        for (int64_t i = 0; i < n; i++) d->at[i] = d->chunk_lo[chunk_of[i]] + offset_of[i];
        d->stage = calloc(d->chunk_lo[d->n_chunks] ? d->chunk_lo[d->n_chunks] : 1, 1);
        if (!d->stage)
            st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: data parallel: out of host "
                           "memory for %zu bytes of gradient chunks", d->chunk_lo[d->n_chunks]);
    }
    free(chunk_of);
    free(offset_of);
    if (st) {
        hx__dp_free(d);
        return st;
    }
    *out = d;
    return HX_OK;
}

int64_t hx__dp_chunks(const hx_dp *d) { return d->n_chunks; }
size_t hx__dp_chunk_bytes(const hx_dp *d) { return d->chunk_lo[d->n_chunks]; }

hx_status hx__dp_all_reduce(hx_dp *d, void *const *grads)
{
    for (int64_t i = 0; i < d->n; i++) memcpy(d->stage + d->at[i], grads[i], d->bytes[i]);
    hx_status st = HX_OK;
    int64_t started = 0;
    for (; started < d->n_chunks && !st; started++) {
        char *lo = d->stage + d->chunk_lo[started];
        int64_t count = (int64_t)((d->chunk_lo[started + 1] - d->chunk_lo[started]) / hx_dtype_size(d->dt));
        st = hx__comm_all_reduce(d->c, lo, lo, count, d->dt, &d->q[started]);
        if (st) d->q[started] = NULL;
    }
    /* every chunk started is waited for (and freed), also after a failure */
    for (int64_t k = 0; k < started; k++) {
        hx_status w = hx__coll_wait(d->q[k]);
        if (!st) st = w;
    }
    if (st) return st;
    for (int64_t i = 0; i < d->n; i++) memcpy(grads[i], d->stage + d->at[i], d->bytes[i]);
    return HX_OK;
}
