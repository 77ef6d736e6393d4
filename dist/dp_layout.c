/* The chunks the data-parallel gradients are summed in, and (ZeRO) which
 * rank owns each: see dp_layout.h. */
#include "dist/dp_layout.h"
#include "memory/memory.h"

#include <stdlib.h>

hx_status hx__dp_layout_init(hx_dp_layout *z, int64_t n, int ranks)
{
    size_t nn = (size_t)(n ? n : 1);
    *z = (hx_dp_layout){.chunk_of = calloc(nn, sizeof *z->chunk_of),
                        .offset_of = calloc(nn, sizeof *z->offset_of),
                        .load = calloc((size_t)ranks, sizeof *z->load)};
    if (z->chunk_of && z->offset_of && z->load) return HX_OK;
    hx__dp_layout_free(z);
    return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
}

void hx__dp_layout_free(hx_dp_layout *z)
{
    free(z->chunk_of);
    free(z->group_of);
    free(z->offset_of);
    free(z->fill);
    free(z->used);
    free(z->load);
    free(z->rank_of);
    *z = (hx_dp_layout){0};
}

/* Deals the chunks to the ranks and groups them (see hx__dp_layout). */
static void balance(hx_dp_layout *z, int ranks)
{
    for (int r = 0; r < ranks; r++) z->load[r] = 0;
    for (int64_t k = 0; k < z->n_chunks; k++) z->rank_of[k] = -1;
    for (int64_t done = 0; done < z->n_chunks; done++) {
        int64_t next = -1; /* the fullest chunk not dealt yet (the first on a tie) */
        for (int64_t k = 0; k < z->n_chunks; k++)
            if (z->rank_of[k] < 0 && (next < 0 || z->fill[k] > z->fill[next])) next = k;
        int to = 0; /* the least loaded rank (the lower on a tie) */
        for (int r = 1; r < ranks; r++)
            if (z->load[r] < z->load[to]) to = r;
        z->rank_of[next] = to;
        z->load[to] += z->fill[next];
    }
    /* groups: runs of neighbours in execution order, each rank's chunk once */
    int64_t in_group = 0; /* chunks in the open group */
    z->n_groups = 0;
    for (int64_t k = 0; k < z->n_chunks; k++) {
        bool taken = false;
        for (int64_t j = k - in_group; j < k && !taken; j++) taken = z->rank_of[j] == z->rank_of[k];
        if (!k || taken) z->n_groups++, in_group = 0;
        z->group_of[k] = z->n_groups - 1;
        in_group++;
    }
}

hx_status hx__dp_layout(hx_dp_layout *z, const size_t *bytes, int64_t n, size_t cs, size_t esz,
                        int ranks)
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
    z->rank_of = calloc(nc, sizeof *z->rank_of);
    z->group_of = calloc(nc, sizeof *z->group_of);
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

size_t hx__dp_layout_groups(const hx_dp_layout *z, int ranks, size_t *len)
{
    size_t total = 0, most = 0;
    for (int64_t g = 0; g < z->n_groups; g++) len[g] = 0;
    for (int64_t k = 0; k < z->n_chunks; k++) len[z->group_of[k]] += z->used[k], total += z->used[k];
    for (int r = 0; r < ranks; r++) {
        size_t own = 0;
        for (int64_t k = 0; k < z->n_chunks; k++)
            if (z->rank_of[k] == r) own += z->used[k];
        size_t sent = total - own + (size_t)(ranks - 1) * own;
        if (sent > most) most = sent;
    }
    return most;
}

hx_status hx__dp_layout_zero(hx_dp_layout *z, const size_t *bytes, int64_t n, size_t cap, size_t esz,
                             int ranks, size_t *chunk_size)
{
    size_t total = 0, largest = esz, best = 0, best_own = 0, best_sent = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t b = hx__mem_round(bytes[i], esz);
        total += b;
        if (b > largest) largest = b;
    }
    size_t *len = malloc(sizeof *len * (size_t)(n ? n : 1)); /* groups <= gradients */
    hx_status st = len ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int k = 1; k <= 32 && !st; k++) {
        size_t cs = hx__mem_round((total + (size_t)k * ranks - 1) / ((size_t)k * ranks), esz);
        if (cs > cap) cs = hx__mem_round(cap, esz);
        if (cs < largest) cs = largest;
        if ((st = hx__dp_layout(z, bytes, n, cs, esz, ranks))) break;
        size_t busiest = 0;
        for (int r = 0; r < ranks; r++)
            if (z->load[r] > busiest) busiest = z->load[r];
        size_t sent = hx__dp_layout_groups(z, ranks, len);
        if (!best || busiest < best_own || (busiest == best_own && sent < best_sent) ||
            (busiest == best_own && sent == best_sent && cs < best))
            best = cs, best_own = busiest, best_sent = sent;
    }
    free(len);
    if (!st) st = hx__dp_layout(z, bytes, n, best, esz, ranks);
    *chunk_size = best;
    return st;
}
