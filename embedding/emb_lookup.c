/* Forward: lookup of rows and torch.nn.EmbeddingBag (sum, mean, max) on a
 * local table, with a prefetching gather. Threads take blocks of positions
 * (lookup) or of bags (cut by position) as they come free, and each output
 * row is computed by one thread in order of position. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "embedding/embedding.h"
#include "kernels/cpu/hx_kernels.h"

/* Positions ahead whose rows the gather prefetches. */
#define PREFETCH_AHEAD 10
/* Lines of a row it prefetches at most (larger rows stream anyway). */
#define PREFETCH_MAX_LINES 16
/* Below this many positions a call stays on the calling thread. */
#define PARALLEL_MIN 2048
/* Positions of a unit of work: threads take blocks as they come free. */
#define BLOCK 1024

hx_emb_query hx_emb_query_rows(const int64_t *ids, int64_t n)
{
    hx_emb_query q;
    memset(&q, 0, sizeof q);
    q.ids = ids;
    q.id_dtype = HX_DTYPE_I64;
    q.n = n;
    q.mode = HX_EMB_ROWS;
    q.nthreads = 1;
    return q;
}

hx_emb_query hx_emb_query_bags(const int64_t *ids, int64_t n, const int64_t *offsets,
                               int64_t n_offsets, hx_emb_mode mode)
{
    hx_emb_query q = hx_emb_query_rows(ids, n);
    q.mode = mode;
    q.offsets = offsets;
    q.n_offsets = n_offsets;
    return q;
}

int64_t hx_emb_query_out_rows(const hx_emb_query *q)
{
    if (q->mode == HX_EMB_ROWS) return q->n;
    return q->include_last_offset ? q->n_offsets - 1 : q->n_offsets;
}

static const char *mode_name(hx_emb_mode m)
{
    switch (m) {
    case HX_EMB_ROWS: return "lookup";
    case HX_EMB_SUM: return "bag(sum)";
    case HX_EMB_MEAN: return "bag(mean)";
    case HX_EMB_MAX: return "bag(max)";
    }
    return "bag";
}

hx_status hx_emb_query_check(const hx_emb_query *q, int64_t *nbags, hx_emb_err *err)
{
    if (!q) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding: query is NULL");
    const char *op = mode_name(q->mode);
    if (q->mode != HX_EMB_ROWS && q->mode != HX_EMB_SUM && q->mode != HX_EMB_MEAN && q->mode != HX_EMB_MAX)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding: unknown mode %d", (int)q->mode);
    if (q->id_dtype != HX_DTYPE_I32 && q->id_dtype != HX_DTYPE_I64)
        return hx_emb_fail(err, HX_ERR_DTYPE, "embedding %s: ids are %s; use i32 or i64", op,
                           hx_emb_dtype_name(q->id_dtype));
    if (q->n < 0 || q->n > (int64_t)UINT32_MAX)
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding %s: %lld ids; at most 2^32 - 1 per call", op,
                           (long long)q->n);
    if (q->n > 0 && !q->ids) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding %s: ids is NULL", op);
    if (q->nthreads < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding %s: nthreads %d < 1", op, q->nthreads);
    if (q->weights && q->mode != HX_EMB_SUM)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding %s: per-sample weights need mode sum (as torch.nn.EmbeddingBag)", op);
    if (q->mode == HX_EMB_ROWS) {
        *nbags = q->n;
        return HX_OK;
    }
    if (q->n_offsets < 0 || (q->n_offsets > 0 && !q->offsets))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding %s: offsets is NULL", op);
    if (q->include_last_offset && q->n_offsets < 1)
        return hx_emb_fail(err, HX_ERR_SHAPE,
                           "embedding %s: include_last_offset needs at least one offset (the last, = n)", op);
    int64_t nb = q->include_last_offset ? q->n_offsets - 1 : q->n_offsets;
    if (nb == 0 && q->n > 0 && !q->include_last_offset)
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding %s: %lld ids but no bags (offsets is empty)", op,
                           (long long)q->n);
    int64_t prev = 0;
    for (int64_t b = 0; b < q->n_offsets; b++) {
        int64_t o = hx_emb_id_at(q->offsets, q->id_dtype, b);
        if (b == 0 && o != 0)
            return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                               "embedding %s: offsets[0] is %lld; the first bag must start at 0", op,
                               (long long)o);
        if (o < prev || o > q->n)
            return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                               "embedding %s: offsets[%lld] = %lld is outside [offsets[%lld] = %lld, n = %lld]; "
                               "offsets must not decrease nor pass the number of ids",
                               op, (long long)b, (long long)o, (long long)(b > 0 ? b - 1 : 0),
                               (long long)prev, (long long)q->n);
        prev = o;
    }
    if (q->include_last_offset && prev != q->n)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding %s: the last offset is %lld; with include_last_offset it must be n = %lld",
                           op, (long long)prev, (long long)q->n);
    if (q->include_last_offset && nb == 0 && q->n > 0)
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding %s: %lld ids but no bags", op, (long long)q->n);
    *nbags = nb;
    return HX_OK;
}

/* ---- id checks ------------------------------------------------------------------- */

static inline int is_padding(const hx_emb_query *q, int64_t id)
{
    return q->has_padding && id == q->padding_id;
}

/* The first position whose id (not padding) is outside [0, rows), or -1;
 * *count = such positions. On the calling thread: a pass over the ids costs
 * less than a parallel region's start on a busy machine. */
static int64_t scan_ids(const hx_emb_query *q, int64_t rows, int64_t *count)
{
    int64_t first = -1, cnt = 0, n = q->n;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = hx_emb_id_at(q->ids, q->id_dtype, i);
        if (!is_padding(q, id) && (id < 0 || id >= rows)) {
            if (cnt++ == 0) first = i;
        }
    }
    *count = cnt;
    return first;
}

hx_status hx_emb_check_ids(const hx_emb_query *q, int64_t rows, hx_emb_oob oob,
                           _Atomic int64_t *oob_count, const char *op, hx_emb_err *err)
{
    int64_t cnt;
    int64_t bad = scan_ids(q, rows, &cnt);
    if (bad >= 0 && oob == HX_EMB_OOB_ERROR)
        return hx_emb_fail(err, HX_ERR_INDEX,
                           "embedding %s: id %lld at position %lld is outside the table's rows [0, %lld)%s",
                           op, (long long)hx_emb_id_at(q->ids, q->id_dtype, bad), (long long)bad,
                           (long long)rows,
                           cnt > 1 ? " (and more ids after it); map raw ids to rows (ids "
                                     "HX_EMBEDDING_IDS_MODULO), or read them as zero rows "
                                     "(out_of_range HX_EMBEDDING_OUT_OF_RANGE_ZERO)"
                                   : "; map raw ids to rows (ids HX_EMBEDDING_IDS_MODULO), or read "
                                     "them as zero rows (out_of_range HX_EMBEDDING_OUT_OF_RANGE_ZERO)");
    if (cnt && oob_count) atomic_fetch_add(oob_count, cnt);
    return HX_OK;
}

/* ---- rows --------------------------------------------------------------------------- */

typedef struct src {
    const hx_emb_local *t;
    const char *base;
    size_t row_bytes, stride_bytes;
    int lines;
    int direct; /* f32 storage, no lazy rows: rows are read in place */
} src;

static src make_src(const hx_emb_local *t)
{
    src s;
    s.t = t;
    s.base = t->param;
    s.row_bytes = (size_t)t->base.dim * t->esize;
    s.stride_bytes = (size_t)t->stride * t->esize;
    int64_t lines = ((int64_t)s.row_bytes + 63) / 64;
    s.lines = (int)(lines < PREFETCH_MAX_LINES ? lines : PREFETCH_MAX_LINES);
    s.direct = t->dtype == HX_DTYPE_F32 && !t->lazy;
    return s;
}

/* always_inline: a function of prefetches alone is 'pure' to GCC's IPA
 * pure-const pass, and -O3 then deletes every call that is not inlined
 * (the release library had no prefetch left in this file). */
static inline __attribute__((always_inline)) void prefetch_row(const src *s, int64_t id, int64_t rows)
{
    if (id < 0 || id >= rows) return;
    const char *p = s->base + (size_t)id * s->stride_bytes;
    for (int l = 0; l < s->lines; l++) __builtin_prefetch(p + 64 * l, 0, 3);
}

/* The f32 values of row id (dim of them): in place, or converted into buf. */
static inline const float *row_f32(const src *s, int64_t id, float *buf)
{
    if (s->direct) return (const float *)(s->base + (size_t)id * s->stride_bytes);
    if (s->t->dtype == HX_DTYPE_BF16 &&
        !(s->t->lazy && !((atomic_load_explicit(&s->t->ready[id >> 6], memory_order_relaxed) >> (id & 63)) & 1))) {
        const uint16_t *h = (const uint16_t *)(s->base + (size_t)id * s->stride_bytes);
        int64_t dim = s->t->base.dim;
        uint32_t *u = (uint32_t *)buf;
        for (int64_t k = 0; k < dim; k++) u[k] = (uint32_t)h[k] << 16;
        return buf;
    }
    hx_emb_local_read_row(s->t, id, buf);
    return buf;
}

/* ---- the kernels ------------------------------------------------------------------------ */

typedef struct job {
    const hx_emb_query *q;
    src s;
    int64_t rows, dim;
    float *out;
    int64_t *argmax;
} job;

static void lookup_range(const job *jb, int64_t lo, int64_t hi, float *buf)
{
    const hx_emb_query *q = jb->q;
    int64_t dim = jb->dim, rows = jb->rows;
    for (int64_t i = lo; i < hi && i < lo + PREFETCH_AHEAD; i++)
        prefetch_row(&jb->s, hx_emb_id_at(q->ids, q->id_dtype, i), rows);
    for (int64_t i = lo; i < hi; i++) {
        if (i + PREFETCH_AHEAD < hi)
            prefetch_row(&jb->s, hx_emb_id_at(q->ids, q->id_dtype, i + PREFETCH_AHEAD), rows);
        int64_t id = hx_emb_id_at(q->ids, q->id_dtype, i);
        float *o = jb->out + i * dim;
        if (is_padding(q, id) || id < 0 || id >= rows) {
            memset(o, 0, (size_t)dim * sizeof(float));
            continue;
        }
        const float *r = row_f32(&jb->s, id, buf);
        memcpy(o, r, (size_t)dim * sizeof(float));
    }
}

static inline void add_row(float *restrict acc, const float *restrict r, int64_t dim)
{
    for (int64_t k = 0; k < dim; k++) acc[k] += r[k];
}

static inline void add_row_scaled(float *restrict acc, const float *restrict r, float w, int64_t dim)
{
    for (int64_t k = 0; k < dim; k++) acc[k] += w * r[k];
}

/* Bags [b0, b1). Compiled for AVX-512, AVX2 and the baseline (picked at
 * load time); with contraction off every clone rounds alike. */
HX_EMB_CLONES
static void bag_range(const job *jb, int64_t b0, int64_t b1, float *buf)
{
    const hx_emb_query *q = jb->q;
    int64_t dim = jb->dim, rows = jb->rows;
    int64_t p0 = hx_emb_bag_bound(q, b0), p1 = hx_emb_bag_bound(q, b1);
    for (int64_t i = p0; i < p1 && i < p0 + PREFETCH_AHEAD; i++)
        prefetch_row(&jb->s, hx_emb_id_at(q->ids, q->id_dtype, i), rows);
    for (int64_t b = b0; b < b1; b++) {
        int64_t s = hx_emb_bag_bound(q, b), e = hx_emb_bag_bound(q, b + 1);
        float *o = jb->out + b * dim;
        int64_t *am = jb->argmax ? jb->argmax + b * dim : NULL;
        memset(o, 0, (size_t)dim * sizeof(float));
        int64_t cnt = 0;
        for (int64_t j = s; j < e; j++) {
            if (j + PREFETCH_AHEAD < p1)
                prefetch_row(&jb->s, hx_emb_id_at(q->ids, q->id_dtype, j + PREFETCH_AHEAD), rows);
            int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
            if (is_padding(q, id)) continue;
            int zero = id < 0 || id >= rows;
            if (q->mode == HX_EMB_MAX) {
                /* A zero row (out of range under OOB_ZERO) takes part as zeros. */
                if (zero) memset(buf, 0, (size_t)dim * sizeof(float));
                const float *r = zero ? buf : row_f32(&jb->s, id, buf);
                if (cnt == 0) {
                    memcpy(o, r, (size_t)dim * sizeof(float));
                    if (am)
                        for (int64_t k = 0; k < dim; k++) am[k] = j;
                } else {
                    for (int64_t k = 0; k < dim; k++) {
                        if (r[k] > o[k]) {
                            o[k] = r[k];
                            if (am) am[k] = j;
                        }
                    }
                }
                cnt++;
                continue;
            }
            cnt++;
            if (zero) continue;
            const float *r = row_f32(&jb->s, id, buf);
            if (q->weights) add_row_scaled(o, r, q->weights[j], dim);
            else add_row(o, r, dim);
        }
        if (q->mode == HX_EMB_MEAN && cnt > 0) {
            float inv = 1.0f / (float)cnt;
            for (int64_t k = 0; k < dim; k++) o[k] *= inv;
        }
        if (q->mode == HX_EMB_MAX && cnt == 0 && am)
            for (int64_t k = 0; k < dim; k++) am[k] = -1;
    }
}

/* The first bag whose start is at or after position p. */
static int64_t bag_at(const hx_emb_query *q, int64_t nbags, int64_t p)
{
    int64_t lo = 0, hi = nbags;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (hx_emb_bag_bound(q, mid) < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

hx_status hx_emb_local_lookup(hx_emb_local *t, const hx_emb_query *q, hx_emb_oob oob,
                              _Atomic int64_t *oob_count, float *out, int64_t *argmax,
                              hx_emb_err *err)
{
    int64_t nbags;
    hx_status st = hx_emb_query_check(q, &nbags, err);
    if (st) return st;
    if (nbags > 0 && !out)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding %s: out is NULL", mode_name(q->mode));
    st = hx_emb_check_ids(q, t->base.rows, oob, oob_count, mode_name(q->mode), err);
    if (st) return st;
    job jb = {q, make_src(t), t->base.rows, t->base.dim, out, argmax};
    int64_t nblocks = q->mode == HX_EMB_ROWS ? (q->n + BLOCK - 1) / BLOCK : (q->n + BLOCK - 1) / BLOCK + 1;
    int nt = q->n >= PARALLEL_MIN || nbags >= PARALLEL_MIN ? q->nthreads : 1;
    int fail = 0;
    /* Blocks of about BLOCK positions, taken by threads as they come free. */
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : fail)
    {
        float *buf = jb.s.direct && q->mode != HX_EMB_MAX ? NULL : malloc((size_t)t->gstride * sizeof(float));
        fail = !buf && (!jb.s.direct || q->mode == HX_EMB_MAX);
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t k = 0; k < nblocks; k++) {
            if (fail) continue;
            if (q->mode == HX_EMB_ROWS) {
                lookup_range(&jb, k * BLOCK, (k + 1) * BLOCK < q->n ? (k + 1) * BLOCK : q->n, buf);
            } else {
                /* The bags starting in positions [k * BLOCK, (k + 1) * BLOCK); the
                 * last block also takes the empty bags at the end. */
                int64_t b0 = k == 0 ? 0 : bag_at(q, nbags, k * BLOCK);
                int64_t b1 = k == nblocks - 1 ? nbags : bag_at(q, nbags, (k + 1) * BLOCK);
                if (b0 < b1) bag_range(&jb, b0, b1, buf);
            }
        }
        free(buf);
    }
    if (fail) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding %s: out of memory", mode_name(q->mode));
    return HX_OK;
}
