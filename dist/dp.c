/* Data parallel: the ranks' gradients (f32 or bf16) summed, moved as whole
 * chunks of the layout (dp_layout.c) over the gradients in a fixed order,
 * the same on every rank; a chunk is sent up to the end of its last
 * gradient (its used bytes), not its empty tail. Stage 0 sums every chunk
 * on every rank (all-reduce); with ZeRO (stage >= 1) each chunk (of one
 * size) has an owner, and the groups are runs of neighbouring chunks in
 * execution order, at most one of each rank (dp_layout.h): each chunk's
 * sum goes to its owner only (a reduce-scatter per group whose blocks are
 * the group's chunks, each exactly as long as its used bytes: nothing
 * padded; a rank with no chunk in the group has an empty block), and
 * after the updates each owner's values go to every rank (an all-gather
 * per group, from and into the values themselves: no group buffer). */
#include "dist/dist.h"
#include "dist/dp_layout.h"
#include "memory/memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hx_dp {
    hx_comm *c;
    hx_dtype dt;          /* of every gradient here */
    int stage;
    int64_t n;            /* gradients */
    size_t *bytes;        /* each one's */
    size_t *at;           /* stage 0: each one's offset in stage_buf */
    int64_t *chunk_of;    /* each one's chunk */
    int64_t n_chunks;     /* holding gradients */
    size_t *chunk_lo;     /* stage 0: chunk k is stage_buf [chunk_lo[k], chunk_lo[k+1]) */
    char *stage_buf;      /* stage 0: the chunks' used bytes, back to back */
    size_t chunk;         /* the chunk size */
    /* ZeRO */
    int *chunk_rank;      /* per chunk: its owner */
    int64_t *chunk_group; /* per chunk: its group */
    int64_t n_groups;     /* ZeRO: the layout's groups */
    size_t *in_group;     /* per gradient: its offset in its group's buffer */
    size_t *blk;          /* per group N+1 bounds: rank j's block (its chunk) is
                           * [blk[j], blk[j+1]) of the group's buffer, in bytes */
    int64_t *counts;      /* per group N: the blocks' elements */
    size_t *own_lo;       /* per group: where this rank's block is in own */
    char *own;            /* this rank's chunks, group after group */
    char *group;          /* n_slots buffers of group_max bytes */
    size_t group_max;     /* the largest group's bytes */
    int n_slots;          /* ZeRO: groups whose collectives may be in flight at once (stage 0: 1) */
    bool *slot_busy;      /* ZeRO, per slot: a reduce-scatter uses it */
    int *slot_of;         /* ZeRO, per group: the slot its reduce-scatter uses, -1 */
    bool *gathering;      /* ZeRO, per group: its all-gather started, not finished */
    hx_coll **share_q;    /* ZeRO, per group: its all-gather in flight (beside its reduce-scatter) */
    int free_slots;
    hx_coll **q;          /* per unit (ZeRO: group, else chunk): its sum in flight */
};

/* ZeRO's group buffers: the groups whose reduce-scatters may be in flight
 * at once. */
enum { DP_SLOTS = 3 };

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
    free(d->blk);
    free(d->counts);
    free(d->own_lo);
    free(d->own);
    free(d->group);
    free(d->slot_busy);
    free(d->slot_of);
    free(d->gathering);
    free(d->share_q);
    free(d->q);
    free(d);
}

static hx_status no_memory(size_t bytes)
{
    return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: data parallel: out of host memory "
                     "for %zu bytes of gradient chunks", bytes);
}

/* Group g's bounds: rank j's block. */
static size_t *bounds(const hx_dp *d, int64_t g)
{
    return d->blk + (size_t)g * (size_t)(hx_comm_size(d->c) + 1);
}

/* ZeRO's group buffers from layout z: per group its blocks (each rank's
 * chunk of it, 0 bytes where it has none), each gradient's place in its
 * group's buffer, the slots' buffers and this rank's blocks, group after
 * group. */
static hx_status group_buffers(hx_dp *d, const hx_dp_layout *z)
{
    int ranks = hx_comm_size(d->c), rank = hx_comm_rank(d->c);
    size_t ng = (size_t)(d->n_groups ? d->n_groups : 1), esz = hx_dtype_size(d->dt);
    d->blk = calloc(ng * (size_t)(ranks + 1), sizeof *d->blk);
    d->counts = calloc(ng * (size_t)ranks, sizeof *d->counts);
    d->own_lo = calloc(ng + 1, sizeof *d->own_lo);
    d->in_group = malloc((size_t)(d->n ? d->n : 1) * sizeof *d->in_group);
    if (!d->blk || !d->counts || !d->own_lo || !d->in_group)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int64_t k = 0; k < z->n_chunks; k++)
        d->counts[(size_t)z->group_of[k] * (size_t)ranks + (size_t)z->rank_of[k]] = (int64_t)(z->used[k] / esz);
    for (int64_t g = 0; g < d->n_groups; g++) {
        size_t *b = bounds(d, g);
        const int64_t *n = d->counts + (size_t)g * (size_t)ranks;
        for (int j = 0; j < ranks; j++) b[j + 1] = b[j] + (size_t)n[j] * esz;
        d->own_lo[g + 1] = d->own_lo[g] + (size_t)n[rank] * esz;
        if (b[ranks] > d->group_max) d->group_max = b[ranks];
    }
    for (int64_t i = 0; i < d->n; i++) {
        int64_t k = z->chunk_of[i];
        d->in_group[i] = bounds(d, z->group_of[k])[z->rank_of[k]] + z->offset_of[i];
    }
    d->n_slots = d->n_groups > 1 ? (d->n_groups < DP_SLOTS ? (int)d->n_groups : DP_SLOTS) : 1;
    d->free_slots = d->n_slots;
    d->group = calloc((size_t)d->n_slots, d->group_max ? d->group_max : 1);
    d->slot_busy = calloc((size_t)d->n_slots, sizeof *d->slot_busy);
    d->slot_of = malloc(ng * sizeof *d->slot_of);
    d->gathering = calloc(ng, sizeof *d->gathering);
    d->share_q = calloc(ng, sizeof *d->share_q);
    d->own = calloc(d->own_lo[d->n_groups] ? d->own_lo[d->n_groups] : 1, 1);
    if (!d->group || !d->slot_busy || !d->slot_of || !d->gathering || !d->share_q || !d->own)
        return no_memory(d->own_lo[d->n_groups] + (size_t)d->n_slots * d->group_max);
    for (size_t g = 0; g < ng; g++) d->slot_of[g] = -1;
    return HX_OK;
}

/* Stage 0's buffer from layout z: the chunks' used bytes back to back. */
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
        d->n_groups = stage ? z.n_groups : 0;
        d->q = calloc((size_t)(d->n_chunks ? d->n_chunks : 1), sizeof *d->q);
        if (!d->q) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    if (!st && !stage) st = summed_buffer(d, &z);
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
    if (d->stage) return d->own_lo[d->n_groups] + (size_t)d->n_slots * d->group_max;
    return d->chunk_lo[d->n_chunks];
}

size_t hx__dp_chunk_size(const hx_dp *d) { return d->chunk; }

int64_t hx__dp_padded_chunks(const hx_dp *d)
{
    return d->stage ? d->n_groups * hx_comm_size(d->c) : d->n_chunks;
}

int hx__dp_owner(const hx_dp *d, int64_t i) { return d->stage ? d->chunk_rank[d->chunk_of[i]] : -1; }

size_t hx__dp_grad_shard_bytes(const hx_dp *d) { return d->stage == 2 ? d->own_lo[d->n_groups] : 0; }

int64_t hx__dp_groups(const hx_dp *d) { return d->stage ? d->n_groups : 0; }

size_t hx__dp_group_bytes(const hx_dp *d, int64_t g) { return bounds(d, g)[hx_comm_size(d->c)]; }

int64_t hx__dp_group_of(const hx_dp *d, int64_t i) { return d->chunk_group[d->chunk_of[i]]; }

size_t hx__dp_in_group(const hx_dp *d, int64_t i) { return d->in_group[i]; }

hx_status hx__dp_gather_start(hx_dp *d, int64_t g, void *buf, hx_coll **out)
{
    return hx__comm_all_gather_v(d->c, (char *)buf + bounds(d, g)[hx_comm_rank(d->c)], buf,
                                 d->counts + (size_t)g * (size_t)hx_comm_size(d->c), d->dt, out);
}

/* ZeRO: the buffer of slot `slot` (the largest group's bytes). */
static char *slot_buf(const hx_dp *d, int slot) { return d->group + (size_t)slot * d->group_max; }

int64_t hx__dp_units(const hx_dp *d) { return d->stage ? d->n_groups : d->n_chunks; }

int64_t hx__dp_unit_of(const hx_dp *d, int64_t i)
{
    return d->stage ? d->chunk_group[d->chunk_of[i]] : d->chunk_of[i];
}

bool hx__dp_can_start(const hx_dp *d) { return d->stage == 0 || d->free_slots > 0; }

/* A free slot's buffer, now unit x's (one is free: hx__dp_can_start). */
static char *take_slot(hx_dp *d, int64_t x)
{
    int slot = 0;
    while (d->slot_busy[slot]) slot++;
    d->slot_busy[slot] = true;
    d->slot_of[x] = slot;
    d->free_slots--;
    return slot_buf(d, slot);
}

static void give_slot(hx_dp *d, int64_t x)
{
    if (d->slot_of[x] < 0) return;
    d->slot_busy[d->slot_of[x]] = false;
    d->slot_of[x] = -1;
    d->free_slots++;
}

/* Gradient i is in group g and (mine) on this rank's chunk, or not. */
static bool in(const hx_dp *d, int64_t i, int64_t g, bool mine)
{
    int64_t k = d->chunk_of[i];
    return d->chunk_group[k] == g && (d->chunk_rank[k] == hx_comm_rank(d->c)) == mine;
}

hx_status hx__dp_start(hx_dp *d, int64_t x, void *const *grads)
{
    size_t esz = hx_dtype_size(d->dt);
    hx_status st;
    if (!d->stage) { /* the chunk's gradients into its place, summed there */
        for (int64_t i = 0; i < d->n; i++)
            if (d->chunk_of[i] == x) memcpy(d->stage_buf + d->at[i], grads[i], d->bytes[i]);
        char *lo = d->stage_buf + d->chunk_lo[x];
        st = hx__comm_all_reduce(d->c, lo, lo, (int64_t)((d->chunk_lo[x + 1] - d->chunk_lo[x]) / esz),
                                 d->dt, &d->q[x]);
    } else { /* the group's blocks in a free slot; this rank's sums into own */
        char *buf = take_slot(d, x);
        memset(buf, 0, hx__dp_group_bytes(d, x));
        for (int64_t i = 0; i < d->n; i++)
            if (d->chunk_group[d->chunk_of[i]] == x) memcpy(buf + d->in_group[i], grads[i], d->bytes[i]);
        st = hx__comm_reduce_scatter_v(d->c, buf, d->own + d->own_lo[x],
                                       d->counts + (size_t)x * (size_t)hx_comm_size(d->c), d->dt, &d->q[x]);
        if (st) give_slot(d, x);
    }
    if (st) d->q[x] = NULL;
    return st;
}

/* Moves *q on; once it is complete (or failed) waits for it, which frees
 * it, and sets *q NULL (*done; NULL: done). */
static hx_status test_coll(hx_coll **q, bool *done)
{
    *done = !*q;
    if (*done) return HX_OK;
    hx_status st = hx__coll_test(*q, done);
    if (!st && !*done) return HX_OK;
    hx_coll *c = *q;
    *q = NULL;
    *done = true;
    if (!st) return hx__coll_wait(c);
    char msg[1024]; /* the wait that frees it says only that it failed: keep the first message */
    snprintf(msg, sizeof msg, "%s", hx_last_error());
    hx__coll_wait(c);
    return hx__error(st, "%s", msg);
}

/* Waits for *q (NULL: none) and sets it NULL. */
static hx_status wait_coll(hx_coll **q)
{
    hx_coll *c = *q;
    *q = NULL;
    return hx__coll_wait(c);
}

hx_status hx__dp_test(hx_dp *d, int64_t x, bool *done)
{
    hx_status st = test_coll(&d->q[x], done);
    if (*done && d->stage) give_slot(d, x); /* a reduce-scatter's buffer */
    return st;
}

hx_status hx__dp_finish(hx_dp *d, int64_t x, void *const *grads)
{
    hx_status st = wait_coll(&d->q[x]);
    if (d->stage) give_slot(d, x);
    if (st || !grads) return st;
    if (!d->stage) {
        for (int64_t i = 0; i < d->n; i++)
            if (d->chunk_of[i] == x) memcpy(grads[i], d->stage_buf + d->at[i], d->bytes[i]);
        return HX_OK;
    }
    size_t mine = bounds(d, x)[hx_comm_rank(d->c)];
    for (int64_t i = 0; i < d->n; i++)
        if (in(d, i, x, true)) memcpy(grads[i], d->own + d->own_lo[x] + d->in_group[i] - mine, d->bytes[i]);
    return HX_OK;
}

hx_status hx__dp_sum(hx_dp *d, void *const *grads)
{
    int64_t n = hx__dp_units(d), done = 0;
    hx_status st = HX_OK;
    for (int64_t x = 0; x < n && !st; x++) {
        while (!hx__dp_can_start(d) && !st) st = hx__dp_finish(d, done++, grads); /* the oldest */
        if (!st) st = hx__dp_start(d, x, grads);
        if (st) n = x; /* x was not started */
    }
    for (; done < n; done++) {
        hx_status w = hx__dp_finish(d, done, st ? NULL : grads);
        if (!st) st = w;
    }
    return st;
}

hx_status hx__dp_share_start(hx_dp *d, int64_t g, void *const *vals, const size_t *val_bytes)
{
    int size = hx_comm_size(d->c);
    int64_t n = 0, *lo = malloc(sizeof *lo * (size_t)(size + 1));
    int64_t *len = malloc(sizeof *len * (size_t)(d->n ? d->n : 1));
    void **seg = malloc(sizeof *seg * (size_t)(d->n ? d->n : 1));
    hx_status st = lo && len && seg ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: ZeRO: "
                                                         "out of host memory for an all-gather's list");
    for (int j = 0; j < size && !st; j++) { /* rank j's values of the group, in gradient order */
        lo[j] = n;
        for (int64_t i = 0; i < d->n; i++) {
            int64_t k = d->chunk_of[i];
            if (d->chunk_group[k] != g || d->chunk_rank[k] != j) continue;
            seg[n] = vals[i];
            len[n++] = (int64_t)val_bytes[i];
        }
    }
    if (!st) {
        lo[size] = n;
        st = hx__comm_all_gather_segments(d->c, seg, len, lo, &d->share_q[g]);
    }
    if (st) d->share_q[g] = NULL;
    else d->gathering[g] = true;
    free(lo);
    free(len);
    free(seg);
    return st;
}

hx_status hx__dp_share_test(hx_dp *d, int64_t g, bool *done) { return test_coll(&d->share_q[g], done); }

hx_status hx__dp_share_finish(hx_dp *d, int64_t g)
{
    d->gathering[g] = false;
    return wait_coll(&d->share_q[g]);
}

bool hx__dp_sharing(const hx_dp *d, int64_t g) { return d->stage && d->gathering[g]; }

hx_status hx__dp_all_gather(hx_dp *d, void *const *vals, const size_t *val_bytes)
{
    hx_status st = HX_OK;
    for (int64_t g = 0; g < d->n_groups && !st; g++) {
        st = hx__dp_share_start(d, g, vals, val_bytes);
        if (!st) st = hx__dp_share_finish(d, g);
    }
    return st;
}
