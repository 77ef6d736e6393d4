/* Data parallel: the ranks' gradients (f32 or bf16) summed, moved as whole
 * chunks of the layout (dp_layout.c) over the gradients in a fixed order,
 * the same on every rank; a chunk is sent up to the end of its last
 * gradient (its used bytes), not its empty tail. Stage 0 and 1 sum every
 * chunk on every rank (all-reduce); with ZeRO (stage >= 1) each rank owns
 * as many chunks of one size, group g being every rank's g-th chunk:
 * stage 2 sends each chunk's sum to its owner only (a reduce-scatter per
 * group of blocks as long as its longest chunk), and after the updates
 * each owner's values go to every rank the same way (an all-gather per
 * group). */
#include "dist/dist.h"
#include "dist/dp_layout.h"
#include "memory/memory.h"

#include <stdlib.h>
#include <string.h>

struct hx_dp {
    hx_comm *c;
    hx_dtype dt;          /* of every gradient here */
    int stage;
    int64_t n;            /* gradients */
    size_t *bytes;        /* each one's */
    size_t *at;           /* stage 0, 1: each one's offset in stage_buf */
    int64_t *chunk_of;    /* each one's chunk */
    int64_t n_chunks;     /* holding gradients */
    size_t *chunk_lo;     /* stage 0, 1: chunk k is stage_buf [chunk_lo[k], chunk_lo[k+1]) */
    char *stage_buf;      /* stage 0, 1: the chunks' used bytes, back to back */
    size_t chunk;         /* the chunk size */
    /* ZeRO */
    int *chunk_rank;      /* per chunk: its owner */
    int64_t *chunk_group; /* per chunk: its place among its owner's chunks */
    int64_t n_groups;     /* ceil(chunks / N) */
    size_t *in_group;     /* per gradient: its offset in its group's buffer */
    size_t *group_len;    /* per group: each rank's block, its longest used chunk */
    size_t *own_lo;       /* stage 2, per group: where this rank's block is in own */
    char *own;            /* stage 2: this rank's chunks, group after group */
    char *group;          /* one group's N blocks */
    size_t group_max;     /* the longest group_len */
    hx_coll **q;          /* per chunk, in flight */
};

void hx__dp_free(hx_dp *d)
{
    if (!d) return;
    free(d->bytes);
    free(d->at);
    free(d->chunk_of);
    free(d->chunk_lo);
    free(d->stage_buf);
    free(d->chunk_rank);
    free(d->chunk_group);
    free(d->in_group);
    free(d->group_len);
    free(d->own_lo);
    free(d->own);
    free(d->group);
    free(d->q);
    free(d);
}

static hx_status no_memory(size_t bytes)
{
    return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: data parallel: out of host memory "
                     "for %zu bytes of gradient chunks", bytes);
}

/* ZeRO's group buffers from layout z: per group its block length, each
 * gradient's place in its group's buffer, the buffer (stage 2 also this
 * rank's blocks, group after group). */
static hx_status group_buffers(hx_dp *d, const hx_dp_layout *z)
{
    int ranks = hx_comm_size(d->c);
    size_t ng = (size_t)(d->n_groups ? d->n_groups : 1);
    d->group_len = malloc(ng * sizeof *d->group_len);
    d->own_lo = calloc(ng + 1, sizeof *d->own_lo);
    d->in_group = malloc((size_t)(d->n ? d->n : 1) * sizeof *d->in_group);
    if (!d->group_len || !d->own_lo || !d->in_group)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    hx__dp_layout_groups(z, ranks, d->group_len);
    for (int64_t g = 0; g < d->n_groups; g++) {
        d->own_lo[g + 1] = d->own_lo[g] + d->group_len[g];
        if (d->group_len[g] > d->group_max) d->group_max = d->group_len[g];
    }
    for (int64_t i = 0; i < d->n; i++) {
        int64_t k = z->chunk_of[i];
        d->in_group[i] = (size_t)z->rank_of[k] * d->group_len[z->group_of[k]] + z->offset_of[i];
    }
    d->group = calloc((size_t)ranks, d->group_max ? d->group_max : 1);
    if (d->stage == 2) d->own = calloc(d->own_lo[d->n_groups] ? d->own_lo[d->n_groups] : 1, 1);
    if (!d->group || (d->stage == 2 && !d->own))
        return no_memory((d->stage == 2 ? d->own_lo[d->n_groups] : 0) + ranks * d->group_max);
    return HX_OK;
}

/* Stage 0 and 1's buffer from layout z: the chunks' used bytes back to back. */
static hx_status summed_buffer(hx_dp *d, const hx_dp_layout *z)
{
    d->chunk_lo = calloc((size_t)d->n_chunks + 1, sizeof *d->chunk_lo);
    if (!d->chunk_lo) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int64_t k = 0; k < d->n_chunks; k++) d->chunk_lo[k + 1] = d->chunk_lo[k] + z->used[k];
    for (int64_t i = 0; i < d->n; i++) d->at[i] = d->chunk_lo[z->chunk_of[i]] + z->offset_of[i];
    d->stage_buf = calloc(d->chunk_lo[d->n_chunks] ? d->chunk_lo[d->n_chunks] : 1, 1);
    return d->stage_buf ? HX_OK : no_memory(d->chunk_lo[d->n_chunks]);
}

hx_status hx__dp_create(hx_comm *c, const size_t *bytes, int64_t n, size_t chunk_size, hx_dtype dt,
                        int stage, hx_dp **out)
{
    *out = NULL;
    size_t esz = hx_dtype_size(dt);
    int ranks = hx_comm_size(c);
    /* no chunk larger than all the gradients: a small model sends no empty tail */
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) total += hx__mem_round(bytes[i], esz);
    if (!chunk_size) chunk_size = 32 * HX_MIB;
    if (!stage && chunk_size > total) chunk_size = total;
    chunk_size = hx__mem_round(chunk_size ? chunk_size : esz, esz);
    size_t nn = (size_t)(n ? n : 1);
    hx_dp *d = calloc(1, sizeof *d);
    hx_dp_layout z;
    hx_status st = hx__dp_layout_init(&z, n, ranks);
    if (d) {
        d->c = c;
        d->dt = dt;
        d->stage = stage;
        d->n = n;
        d->bytes = malloc(nn * sizeof *d->bytes);
        d->at = malloc(nn * sizeof *d->at);
    }
    if (!st && (!d || !d->bytes || !d->at))
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    if (!st) st = stage ? hx__dp_layout_zero(&z, bytes, n, chunk_size, esz, ranks, &chunk_size)
                        : hx__dp_layout(&z, bytes, n, chunk_size, esz, 0);
    if (!st) {
        memcpy(d->bytes, bytes, (size_t)n * sizeof *bytes);
        d->chunk = chunk_size;
        d->n_chunks = z.n_chunks;
        d->n_groups = (d->n_chunks + ranks - 1) / ranks;
        d->q = calloc((size_t)(d->n_chunks ? d->n_chunks : 1), sizeof *d->q);
        if (!d->q) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    if (!st && stage != 2) st = summed_buffer(d, &z);
    if (!st && stage) st = group_buffers(d, &z);
    if (!st) { /* the layout's arrays d keeps */
        d->chunk_of = z.chunk_of, z.chunk_of = NULL;
        d->chunk_rank = z.rank_of, z.rank_of = NULL;
        d->chunk_group = z.group_of, z.group_of = NULL;
    }
    hx__dp_layout_free(&z);
    if (st) {
        hx__dp_free(d);
        return st;
    }
    *out = d;
    return HX_OK;
}

int64_t hx__dp_chunks(const hx_dp *d) { return d->n_chunks; }

size_t hx__dp_chunk_bytes(const hx_dp *d)
{
    size_t groups = d->stage ? (size_t)hx_comm_size(d->c) * d->group_max : 0;
    if (d->stage == 2) return d->own_lo[d->n_groups] + groups;
    return d->chunk_lo[d->n_chunks] + groups;
}

size_t hx__dp_chunk_size(const hx_dp *d) { return d->chunk; }

int64_t hx__dp_padded_chunks(const hx_dp *d)
{
    return d->stage ? d->n_groups * hx_comm_size(d->c) : d->n_chunks;
}

int hx__dp_owner(const hx_dp *d, int64_t i) { return d->stage ? d->chunk_rank[d->chunk_of[i]] : -1; }

size_t hx__dp_grad_shard_bytes(const hx_dp *d) { return d->stage == 2 ? d->own_lo[d->n_groups] : 0; }

int64_t hx__dp_groups(const hx_dp *d) { return d->stage ? d->n_groups : 0; }

size_t hx__dp_group_bytes(const hx_dp *d, int64_t g)
{
    return (size_t)hx_comm_size(d->c) * d->group_len[g];
}

int64_t hx__dp_group_of(const hx_dp *d, int64_t i) { return d->chunk_group[d->chunk_of[i]]; }

size_t hx__dp_in_group(const hx_dp *d, int64_t i) { return d->in_group[i]; }

hx_status hx__dp_gather_start(hx_dp *d, int64_t g, void *buf, hx_coll **out)
{
    size_t len = d->group_len[g];
    return hx__comm_all_gather(d->c, (char *)buf + (size_t)hx_comm_rank(d->c) * len, buf,
                               (int64_t)(len / hx_dtype_size(d->dt)), d->dt, out);
}

/* Waits for the first `started` collectives of q (each freed, also after
 * a failure); st: the failure so far. */
static hx_status wait_all(hx_dp *d, int64_t started, hx_status st)
{
    for (int64_t k = 0; k < started; k++) {
        hx_status w = hx__coll_wait(d->q[k]);
        if (!st) st = w;
    }
    return st;
}

hx_status hx__dp_all_reduce(hx_dp *d, void *const *grads)
{
    if (d->stage == 2)
        return hx__error(HX_ERR_INTERNAL, "hetex dist: an all-reduce of ZeRO stage 2's chunks");
    for (int64_t i = 0; i < d->n; i++) memcpy(d->stage_buf + d->at[i], grads[i], d->bytes[i]);
    hx_status st = HX_OK;
    int64_t started = 0;
    for (; started < d->n_chunks && !st; started++) {
        char *lo = d->stage_buf + d->chunk_lo[started];
        int64_t count = (int64_t)((d->chunk_lo[started + 1] - d->chunk_lo[started]) / hx_dtype_size(d->dt));
        st = hx__comm_all_reduce(d->c, lo, lo, count, d->dt, &d->q[started]);
        if (st) d->q[started] = NULL;
    }
    if ((st = wait_all(d, started, st))) return st;
    for (int64_t i = 0; i < d->n; i++) memcpy(grads[i], d->stage_buf + d->at[i], d->bytes[i]);
    return HX_OK;
}

/* Gradient i is in group g and (mine) on this rank's chunk, or not. */
static bool in(const hx_dp *d, int64_t i, int64_t g, bool mine)
{
    int64_t k = d->chunk_of[i];
    return d->chunk_group[k] == g && (d->chunk_rank[k] == hx_comm_rank(d->c)) == mine;
}

hx_status hx__dp_reduce_scatter(hx_dp *d, void *const *grads)
{
    if (d->stage != 2)
        return hx__error(HX_ERR_INTERNAL, "hetex dist: a reduce-scatter of stage %d's chunks", d->stage);
    int ranks = hx_comm_size(d->c), rank = hx_comm_rank(d->c);
    size_t esz = hx_dtype_size(d->dt);
    hx_status st = HX_OK;
    /* group after group through one buffer: the rank's own blocks are all that stays */
    for (int64_t g = 0; g < d->n_groups && !st; g++) {
        size_t len = d->group_len[g];
        memset(d->group, 0, (size_t)ranks * len);
        for (int64_t i = 0; i < d->n; i++)
            if (d->chunk_group[d->chunk_of[i]] == g) memcpy(d->group + d->in_group[i], grads[i], d->bytes[i]);
        st = hx__comm_reduce_scatter(d->c, d->group, d->own + d->own_lo[g], (int64_t)(len / esz), d->dt,
                                     &d->q[0]);
        if (!st) st = wait_all(d, 1, st);
        for (int64_t i = 0; i < d->n && !st; i++)
            if (in(d, i, g, true))
                memcpy(grads[i], d->own + d->own_lo[g] + d->in_group[i] - (size_t)rank * len, d->bytes[i]);
    }
    return st;
}

hx_status hx__dp_all_gather(hx_dp *d, void *const *vals, const size_t *val_bytes)
{
    if (!d->stage)
        return hx__error(HX_ERR_INTERNAL, "hetex dist: an all-gather of stage 0's chunks");
    int rank = hx_comm_rank(d->c);
    size_t esz = hx_dtype_size(d->dt);
    hx_status st = HX_OK;
    for (int64_t g = 0; g < d->n_groups && !st; g++) {
        size_t len = d->group_len[g];
        for (int64_t i = 0; i < d->n; i++)
            if (in(d, i, g, true)) memcpy(d->group + d->in_group[i], vals[i], val_bytes[i]);
        st = hx__comm_all_gather(d->c, d->group + (size_t)rank * len, d->group, (int64_t)(len / esz),
                                 d->dt, &d->q[0]);
        if (!st) st = wait_all(d, 1, st);
        for (int64_t i = 0; i < d->n && !st; i++)
            if (in(d, i, g, false)) memcpy(vals[i], d->group + d->in_group[i], val_bytes[i]);
    }
    return st;
}
