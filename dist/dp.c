/* Data parallel: the ranks' gradients (f32 or bf16) summed, moved as whole
 * chunks of the chunk layout (memory/chunks.h) over the gradients in a
 * fixed order, the same on every rank; a chunk is sent up to the end of
 * its last gradient (its used bytes), not its empty tail. Stage 0 and 1
 * sum every chunk on every rank (all-reduce); with ZeRO (stage >= 1) the
 * chunks are of one size, their count padded to a multiple of the N
 * ranks, and each rank owns as many of them (balance, below); stage 2
 * sends each chunk's sum to its owner only: group g is every rank's g-th
 * chunk, one reduce-scatter of blocks as long as the group's longest. */
#include "dist/dist.h"
#include "memory/memory.h"

#include <stdlib.h>
#include <string.h>

struct hx_dp {
    hx_comm *c;
    hx_dtype dt;          /* of every gradient here */
    int stage;
    int64_t n;            /* gradients */
    size_t *bytes;        /* each one's */
    size_t *at;           /* each one's offset in stage_buf (stage 2: in its group's send buffer) */
    int64_t *chunk_of;    /* each one's chunk */
    int64_t n_chunks;     /* holding gradients */
    size_t *chunk_lo;     /* stage 0, 1: chunk k is stage_buf [chunk_lo[k], chunk_lo[k+1]) */
    char *stage_buf;      /* stage 0, 1: the chunks' used bytes, back to back */
    size_t chunk;         /* the chunk size */
    /* ZeRO */
    int *chunk_rank;      /* per chunk: its owner */
    int64_t *chunk_group; /* per chunk: its place among its owner's chunks */
    int64_t n_groups;     /* ceil(chunks / N) */
    size_t *group_len;    /* stage 2, per group: each rank's block, the longest used chunk */
    size_t *own_lo;       /* stage 2, per group: where this rank's block is in own */
    char *own;            /* stage 2: this rank's chunks, group after group */
    char *group;          /* stage 2: one group's N blocks to send */
    size_t group_max;     /* stage 2: the longest group_len */
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
    free(d->group_len);
    free(d->own_lo);
    free(d->own);
    free(d->group);
    free(d->q);
    free(d);
}

/* A layout of the gradients: per gradient its chunk and offset, per
 * chunk its gradient bytes (fill), used bytes, and (ZeRO) owner and place
 * among the owner's chunks. */
typedef struct layout {
    int64_t n_chunks, *chunk_of, *group_of, *placed;
    size_t *offset_of, *fill, *used, *load;
    int *rank_of;
} layout;

static void layout_free(layout *z)
{
    free(z->chunk_of);
    free(z->group_of);
    free(z->placed);
    free(z->offset_of);
    free(z->fill);
    free(z->used);
    free(z->load);
    free(z->rank_of);
}

/* Deals the chunks to the ranks, each rank ceil(n_chunks / ranks) of them
 * (empty ones pad the count): the fullest first, each to the least loaded
 * rank with a place left (the lower rank on a tie). Returns the busiest
 * rank's gradient bytes. */
static size_t balance(layout *z, int ranks)
{
    int64_t per = (z->n_chunks + ranks - 1) / ranks;
    for (int r = 0; r < ranks; r++) z->load[r] = 0, z->placed[r] = 0;
    for (int64_t k = 0; k < z->n_chunks; k++) z->rank_of[k] = -1;
    size_t busiest = 0;
    for (int64_t done = 0; done < z->n_chunks; done++) {
        int64_t next = -1; /* the fullest chunk not dealt yet (the first on a tie) */
        for (int64_t k = 0; k < z->n_chunks; k++)
            if (z->rank_of[k] < 0 && (next < 0 || z->fill[k] > z->fill[next])) next = k;
        int to = -1;
        for (int r = 0; r < ranks; r++)
            if (z->placed[r] < per && (to < 0 || z->load[r] < z->load[to])) to = r;
        z->rank_of[next] = to;
        z->group_of[next] = z->placed[to]++;
        z->load[to] += z->fill[next];
        if (z->load[to] > busiest) busiest = z->load[to];
    }
    return busiest;
}

/* Lays the gradients out in chunks of cs into z (ranks > 0: dealt to the
 * ranks). HX_OK or HX_ERR_OUT_OF_MEMORY / the layout's error. */
static hx_status lay(const size_t *bytes, int64_t n, size_t cs, size_t esz, int ranks, layout *z)
{
    hx_chunk_plan plan;
    hx_mem_err err;
    if (hx_chunk_layout(bytes, n, cs, esz, esz, &plan, z->chunk_of, z->offset_of, &err))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: data parallel: %s", err.msg);
    z->n_chunks = plan.n_chunks + plan.n_own;
    size_t nc = (size_t)(z->n_chunks ? z->n_chunks : 1);
    free(z->fill);
    free(z->used);
    free(z->rank_of);
    free(z->group_of);
    z->fill = calloc(nc, sizeof *z->fill);
    z->used = calloc(nc, sizeof *z->used);
    z->rank_of = malloc(nc * sizeof *z->rank_of);
    z->group_of = malloc(nc * sizeof *z->group_of);
    if (!z->fill || !z->used || !z->rank_of || !z->group_of)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int64_t i = 0; i < n; i++) {
        size_t b = hx__mem_round(bytes[i], esz), k = (size_t)z->chunk_of[i];
        z->fill[k] += b;
        if (z->offset_of[i] + b > z->used[k]) z->used[k] = z->offset_of[i] + b;
    }
    if (ranks) balance(z, ranks);
    return HX_OK;
}

/* Bytes a rank sends per reduce-scatter of z's groups: N blocks per group
 * as long as its longest used chunk. */
static size_t group_bytes(const layout *z, int ranks, int64_t n_groups, size_t *len)
{
    for (int64_t g = 0; g < n_groups; g++) len[g] = 0;
    for (int64_t k = 0; k < z->n_chunks; k++)
        if (z->used[k] > len[z->group_of[k]]) len[z->group_of[k]] = z->used[k];
    size_t sum = 0;
    for (int64_t g = 0; g < n_groups; g++) sum += len[g];
    return sum * (size_t)ranks;
}

/* ZeRO's chunk size: at least the largest gradient (no chunk of its own),
 * at most cap where that allows; of the sizes that cut the gradients into
 * k*N chunks (k = 1..32), the one whose busiest rank owns the fewest
 * gradient bytes, then whose groups send the fewest bytes, then the
 * smaller. Leaves its layout in z. */
static hx_status zero_chunk(const size_t *bytes, int64_t n, size_t cap, size_t esz, int ranks,
                            size_t total, layout *z, size_t *out)
{
    size_t largest = esz, best = 0, best_own = 0, best_sent = 0;
    for (int64_t i = 0; i < n; i++)
        if (hx__mem_round(bytes[i], esz) > largest) largest = hx__mem_round(bytes[i], esz);
    size_t *len = malloc(sizeof *len * (size_t)(n ? n : 1)); /* n_groups <= n */
    hx_status st = len ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int k = 1; k <= 32 && !st; k++) {
        size_t cs = hx__mem_round((total + (size_t)k * ranks - 1) / ((size_t)k * ranks), esz);
        if (cs > cap) cs = hx__mem_round(cap, esz);
        if (cs < largest) cs = largest;
        if ((st = lay(bytes, n, cs, esz, ranks, z))) break;
        size_t busiest = 0;
        for (int r = 0; r < ranks; r++)
            if (z->load[r] > busiest) busiest = z->load[r];
        size_t sent = group_bytes(z, ranks, (z->n_chunks + ranks - 1) / ranks, len);
        if (!best || busiest < best_own || (busiest == best_own && sent < best_sent) ||
            (busiest == best_own && sent == best_sent && cs < best))
            best = cs, best_own = busiest, best_sent = sent;
    }
    free(len);
    if (!st) st = lay(bytes, n, best, esz, ranks, z);
    *out = best;
    return st;
}

/* Stage 2's buffers from layout z: per group its block length and this
 * rank's block in own, the send buffer, each gradient's place in its
 * group's. */
static hx_status stage2_buffers(hx_dp *d, const layout *z)
{
    int ranks = hx_comm_size(d->c);
    size_t ng = (size_t)(d->n_groups ? d->n_groups : 1);
    d->group_len = malloc(ng * sizeof *d->group_len);
    d->own_lo = calloc(ng + 1, sizeof *d->own_lo);
    if (!d->group_len || !d->own_lo) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    group_bytes(z, ranks, d->n_groups, d->group_len);
    for (int64_t g = 0; g < d->n_groups; g++) {
        d->own_lo[g + 1] = d->own_lo[g] + d->group_len[g];
        if (d->group_len[g] > d->group_max) d->group_max = d->group_len[g];
    }
    for (int64_t i = 0; i < d->n; i++) {
        int64_t k = z->chunk_of[i];
        d->at[i] = (size_t)z->rank_of[k] * d->group_len[z->group_of[k]] + z->offset_of[i];
    }
    d->own = calloc(d->own_lo[d->n_groups] ? d->own_lo[d->n_groups] : 1, 1);
    d->group = calloc((size_t)ranks, d->group_max ? d->group_max : 1);
    if (!d->own || !d->group)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: data parallel: out of host memory "
                         "for %zu bytes of gradient chunks", d->own_lo[d->n_groups] + ranks * d->group_max);
    return HX_OK;
}

/* Stage 0 and 1's buffer from layout z: the chunks' used bytes back to back. */
static hx_status summed_buffer(hx_dp *d, const layout *z)
{
    d->chunk_lo = calloc((size_t)d->n_chunks + 1, sizeof *d->chunk_lo);
    if (!d->chunk_lo) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int64_t k = 0; k < d->n_chunks; k++) d->chunk_lo[k + 1] = d->chunk_lo[k] + z->used[k];
    for (int64_t i = 0; i < d->n; i++) d->at[i] = d->chunk_lo[z->chunk_of[i]] + z->offset_of[i];
    d->stage_buf = calloc(d->chunk_lo[d->n_chunks] ? d->chunk_lo[d->n_chunks] : 1, 1);
    if (!d->stage_buf)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: data parallel: out of host memory "
                         "for %zu bytes of gradient chunks", d->chunk_lo[d->n_chunks]);
    return HX_OK;
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
    layout z = {.chunk_of = calloc(nn, sizeof *z.chunk_of), .offset_of = calloc(nn, sizeof *z.offset_of),
                .placed = calloc((size_t)ranks, sizeof *z.placed),
                .load = calloc((size_t)ranks, sizeof *z.load)};
    if (d) {
        d->c = c;
        d->dt = dt;
        d->stage = stage;
        d->n = n;
        d->bytes = malloc(nn * sizeof *d->bytes);
        d->at = malloc(nn * sizeof *d->at);
    }
    hx_status st = !d || !z.chunk_of || !z.offset_of || !z.placed || !z.load || !d->bytes || !d->at
                           ? hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory")
                           : HX_OK;
    if (!st) st = stage ? zero_chunk(bytes, n, chunk_size, esz, ranks, total, &z, &chunk_size)
                        : lay(bytes, n, chunk_size, esz, 0, &z);
    if (!st) {
        memcpy(d->bytes, bytes, (size_t)n * sizeof *bytes);
        d->chunk = chunk_size;
        d->n_chunks = z.n_chunks;
        d->n_groups = (d->n_chunks + ranks - 1) / ranks;
        d->q = calloc((size_t)(d->n_chunks ? d->n_chunks : 1), sizeof *d->q);
        if (!d->q) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    if (!st) st = stage == 2 ? stage2_buffers(d, &z) : summed_buffer(d, &z);
    if (!st) { /* the layout's arrays d keeps */
        d->chunk_of = z.chunk_of, z.chunk_of = NULL;
        d->chunk_rank = z.rank_of, z.rank_of = NULL;
        d->chunk_group = z.group_of, z.group_of = NULL;
    }
    layout_free(&z);
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
    if (d->stage == 2) return d->own_lo[d->n_groups] + (size_t)hx_comm_size(d->c) * d->group_max;
    return d->chunk_lo[d->n_chunks];
}

size_t hx__dp_chunk_size(const hx_dp *d) { return d->chunk; }

int64_t hx__dp_padded_chunks(const hx_dp *d)
{
    return d->stage ? d->n_groups * hx_comm_size(d->c) : d->n_chunks;
}

int hx__dp_owner(const hx_dp *d, int64_t i) { return d->stage ? d->chunk_rank[d->chunk_of[i]] : -1; }

size_t hx__dp_grad_shard_bytes(const hx_dp *d) { return d->stage == 2 ? d->own_lo[d->n_groups] : 0; }

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

hx_status hx__dp_reduce_scatter(hx_dp *d, void *const *grads)
{
    if (d->stage != 2)
        return hx__error(HX_ERR_INTERNAL, "hetex dist: a reduce-scatter of stage %d's chunks", d->stage);
    int ranks = hx_comm_size(d->c), rank = hx_comm_rank(d->c);
    size_t esz = hx_dtype_size(d->dt);
    hx_status st = HX_OK;
    /* group after group through one send buffer: the rank's own blocks
     * are all that stays */
    for (int64_t g = 0; g < d->n_groups && !st; g++) {
        memset(d->group, 0, (size_t)ranks * d->group_len[g]);
        for (int64_t i = 0; i < d->n; i++)
            if (d->chunk_group[d->chunk_of[i]] == g) memcpy(d->group + d->at[i], grads[i], d->bytes[i]);
        st = hx__comm_reduce_scatter(d->c, d->group, d->own + d->own_lo[g],
                                     (int64_t)(d->group_len[g] / esz), d->dt, &d->q[0]);
        if (!st) st = wait_all(d, 1, st);
    }
    if (st) return st;
    for (int64_t i = 0; i < d->n; i++) {
        int64_t k = d->chunk_of[i], g = d->chunk_group[k];
        if (d->chunk_rank[k] == rank)
            memcpy(grads[i], d->own + d->own_lo[g] + (d->at[i] - (size_t)rank * d->group_len[g]),
                   d->bytes[i]);
    }
    return HX_OK;
}
