/* Chunk layout and chunk-size search (see chunks.h). */
#include "memory/chunks.h"

#include <string.h>

/* The layout's totals only, with no checks: the search's inner loop. */
static void layout(const size_t *sizes, int64_t n, size_t chunk, size_t align, size_t own_round,
                   hx_chunk_plan *p, int64_t *chunk_of, size_t *offset_of)
{
    memset(p, 0, sizeof *p);
    p->chunk_size = chunk;
    size_t used = 0;         /* bytes taken in the open chunk (offset of its end) */
    int64_t open = -1;       /* the open chunk's number, -1: none */
    int64_t next = 0;        /* the next chunk number */
    for (int64_t i = 0; i < n; i++) {
        size_t sz = sizes[i];
        p->param_bytes += sz;
        if (sz > chunk) {
            p->n_own++;
            p->total_bytes += hx__mem_round(sz, own_round);
            if (chunk_of) chunk_of[i] = next, offset_of[i] = 0;
            next++;
            continue;
        }
        size_t off = open < 0 ? 0 : hx__mem_round(used, align);
        if (open < 0 || off > chunk || sz > chunk - off) {
            open = next++;
            p->n_chunks++;
            p->total_bytes += chunk;
            off = 0;
        }
        if (chunk_of) chunk_of[i] = open, offset_of[i] = off;
        used = off + sz;
    }
    if (open >= 0) { /* the last chunk ends at its last parameter, rounded to the step */
        size_t last = hx__mem_round(used, own_round);
        p->last_chunk = last < chunk ? last : chunk;
        p->total_bytes -= chunk - p->last_chunk;
    }
    p->waste = p->total_bytes - p->param_bytes;
    p->waste_fraction = p->total_bytes ? (double)p->waste / p->total_bytes : 0;
}

static hx_status check(const size_t *sizes, int64_t n, size_t align, size_t round, hx_mem_err *err,
                       const char *fn)
{
    if ((!sizes && n) || n < 0 || !align || !round)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "%s: needs n >= 0 sizes, param_align >= 1 and a step >= 1", fn);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (sizes[i] > SIZE_MAX / 4 - total)
            return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "%s: parameter sizes overflow", fn);
        total += sizes[i];
    }
    return HX_OK;
}

hx_status hx_chunk_layout(const size_t *sizes, int64_t n, size_t chunk_size, size_t param_align,
                          size_t own_round, hx_chunk_plan *out, int64_t *chunk_of,
                          size_t *offset_of, hx_mem_err *err)
{
    hx_status st = check(sizes, n, param_align, own_round, err, "hx_chunk_layout");
    if (st) return st;
    if (!out || !chunk_size || (!chunk_of != !offset_of))
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_chunk_layout: needs out, a chunk size > 0, and both or neither of "
                            "chunk_of and offset_of");
    layout(sizes, n, chunk_size, param_align, own_round, out, chunk_of, offset_of);
    return HX_OK;
}

hx_status hx_chunk_search_run(const size_t *sizes, int64_t n, const hx_chunk_search *s,
                              hx_chunk_plan *best, hx_mem_err *err)
{
    if (!s || !best) return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_chunk_search_run: s or best is NULL");
    hx_status st = check(sizes, n, s->param_align, s->step, err, "hx_chunk_search_run");
    if (st) return st;
    if (!s->min_chunk || s->min_chunk > s->max_chunk || (s->max_chunk - s->min_chunk) / s->step > 100000000)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_chunk_search_run: the range [%zu, %zu] must be non-empty, start "
                            "above 0 and hold at most 10^8 steps of %zu", s->min_chunk,
                            s->max_chunk, s->step);
    hx_chunk_plan p;
    bool have = false;
    for (size_t c = s->min_chunk; c <= s->max_chunk; c += s->step) {
        layout(sizes, n, c, s->param_align, s->step, &p, NULL, NULL);
        if (!have || p.waste < best->waste) *best = p;
        have = true;
        if (s->max_chunk - c < s->step) break;
    }
    return HX_OK;
}
