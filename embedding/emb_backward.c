/* Backward of lookups and bags to a sparse gradient: the positions that get
 * a gradient are grouped by id (radix sort of (id, position), or XXH3-keyed
 * hash maps over id partitions), then each unique id's row is summed over
 * its positions in ascending order, by one thread. The positions are first
 * bucketed into shares of the ids on the calling thread; threads then take
 * shares as they come free and never wait for each other inside (on a
 * loaded machine a thread that waits for a preempted one loses a time
 * slice). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "embedding/embedding.h"

/* Below this many positions grouping stays on the calling thread. */
#define PARALLEL_MIN 1024
/* Positions a share aims at. */
#define SHARE_POSITIONS 2048
/* AUTO sorts ids spanning at most this many bits. */
#define SORT_MAX_BITS 40
/* Radix digits have at most this many bits. */
#define DIGIT_MAX_BITS 11

static const uint64_t HASH_SEED = 0x5EED0E3B0C1D2A47ull;

/* ---- workspace --------------------------------------------------------------------- */

struct hx_emb_workspace {
    void *buf[HX_EMB_WS_SLOTS];
    size_t cap[HX_EMB_WS_SLOTS];
};

hx_emb_workspace *hx_emb_workspace_create(void) { return calloc(1, sizeof(hx_emb_workspace)); }

void hx_emb_workspace_free(hx_emb_workspace *ws)
{
    if (!ws) return;
    for (int i = 0; i < HX_EMB_WS_SLOTS; i++) free(ws->buf[i]);
    free(ws);
}

void *hx_emb_ws_get(hx_emb_workspace *ws, int slot, size_t bytes)
{
    if (bytes == 0) bytes = 64;
    if (ws->cap[slot] < bytes) {
        size_t want = bytes + bytes / 4;
        void *p = malloc(want);
        if (!p) return NULL;
        free(ws->buf[slot]);
        ws->buf[slot] = p;
        ws->cap[slot] = want;
    }
    return ws->buf[slot];
}

/* ---- sparse gradients ------------------------------------------------------------------ */

void hx_emb_sparse_grad_free(hx_emb_sparse_grad *g)
{
    if (!g) return;
    free(g->ids);
    free(g->rows);
    memset(g, 0, sizeof *g);
}

hx_status hx_emb_sparse_grad_reserve(hx_emb_sparse_grad *g, int64_t n, int64_t dim,
                                     hx_emb_err *err)
{
    if (!g || n < 0 || dim < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding sparse gradient: bad arguments (n %lld, dim %lld)",
                           (long long)n, (long long)dim);
    int64_t stride = hx_emb_row_stride(dim, HX_DTYPE_F32);
    if (n > g->cap || stride != g->stride) {
        int64_t cap = n > g->cap ? n + n / 4 + 16 : g->cap;
        int64_t *ids = malloc((size_t)cap * sizeof(int64_t));
        float *rows = aligned_alloc(64, (size_t)cap * (size_t)stride * sizeof(float));
        if (!ids || !rows) {
            free(ids);
            free(rows);
            return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                               "embedding sparse gradient: out of memory for %lld rows of %lld", (long long)n,
                               (long long)dim);
        }
        free(g->ids);
        free(g->rows);
        g->ids = ids;
        g->rows = rows;
        g->cap = cap;
    }
    g->n = n;
    g->dim = dim;
    g->stride = stride;
    return HX_OK;
}

/* ---- the plan --------------------------------------------------------------------------- */

static inline int is_padding(const hx_emb_query *q, int64_t id)
{
    return q->has_padding && id == q->padding_id;
}

static inline int bit_length(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

static inline uint64_t id_hash(int64_t id) { return XXH3_64bits_withSeed(&id, sizeof id, HASH_SEED); }

static size_t align64(size_t x) { return (x + 63) / 64 * 64; }

/* The share of a position's id (key = id - mn, h its hash). */
static inline int share_of(const hx_emb_gplan *p, uint64_t key, uint64_t h)
{
    if (p->method == HX_EMB_DEDUP_HASH) return p->shift >= 64 ? 0 : (int)(h >> p->shift);
    return p->shift >= 64 ? 0 : (int)(key >> p->shift);
}

static hx_status oom(hx_emb_err *err, int64_t n)
{
    return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory grouping %lld ids",
                       (long long)n);
}

hx_status hx_emb_group_plan(const hx_emb_query *q, const hx_emb_grad_input *gi, int64_t limit,
                            hx_emb_workspace *ws, hx_emb_gplan *p, hx_emb_err *err)
{
    int64_t nbags;
    hx_status st = hx_emb_query_check(q, &nbags, err);
    if (st) return st;
    if (!gi) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding backward: gradient input is NULL");
    if (gi->dim < 1)
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding backward: dim %lld < 1", (long long)gi->dim);
    if (nbags > 0 && !gi->dout)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding backward: dout is NULL");
    if (q->mode == HX_EMB_MAX && nbags > 0 && !gi->argmax)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding bag(max) backward: argmax is NULL; pass the forward's argmax");
    if (gi->dedup != HX_EMB_DEDUP_AUTO && gi->dedup != HX_EMB_DEDUP_SORT && gi->dedup != HX_EMB_DEDUP_HASH)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding backward: unknown dedup method %d",
                           (int)gi->dedup);
    int64_t dim = gi->dim, n = q->n;
    if (q->mode == HX_EMB_MAX) {
        for (int64_t b = 0; b < nbags; b++) {
            int64_t s = hx_emb_bag_bound(q, b), e = hx_emb_bag_bound(q, b + 1);
            for (int64_t k = 0; k < dim; k++) {
                int64_t a = gi->argmax[b * dim + k];
                if (a == -1 || (a >= s && a < e && !is_padding(q, hx_emb_id_at(q->ids, q->id_dtype, a))))
                    continue;
                return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                                   "embedding bag(max) backward: argmax[%lld][%lld] = %lld is not a non-padding "
                                   "position of bag %lld [%lld, %lld); pass the argmax of the same forward",
                                   (long long)b, (long long)k, (long long)a, (long long)b, (long long)s,
                                   (long long)e);
            }
        }
    }
    /* The span of the ids that may get a gradient. */
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (int64_t j = 0; j < n; j++) {
        int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
        if (is_padding(q, id) || (limit > 0 && (id < 0 || id >= limit))) continue;
        if (id < mn) mn = id;
        if (id > mx) mx = id;
    }
    memset(p, 0, sizeof *p);
    p->q = q;
    p->gi = gi;
    p->mn = mn <= mx ? mn : 0;
    uint64_t span = mn <= mx ? (uint64_t)mx - (uint64_t)mn : 0;
    p->pb = bit_length((uint64_t)(n > 1 ? n - 1 : 1));
    p->method = gi->dedup;
    if (p->method == HX_EMB_DEDUP_AUTO)
        p->method = bit_length(span) <= SORT_MAX_BITS ? HX_EMB_DEDUP_SORT : HX_EMB_DEDUP_HASH;
    int hash = p->method == HX_EMB_DEDUP_HASH;
    /* About SHARE_POSITIONS positions a share: SORT cuts the span at a power
     * of two, HASH takes the top bits of the hash. */
    int64_t want = n / SHARE_POSITIONS;
    want = want < 1 ? 1 : want > HX_EMB_MAX_SHARES ? HX_EMB_MAX_SHARES : want;
    if (hash) {
        int bits = 0;
        while ((2 << bits) <= want) bits++;
        p->shift = 64 - bits;
        p->nshares = 1 << bits;
    } else {
        p->shift = 0;
        while (p->shift < 64 && (span >> p->shift) >= (uint64_t)want) p->shift++;
        p->nshares = p->shift >= 64 ? 1 : (int)(span >> p->shift) + 1;
    }
    p->nthreads = n >= PARALLEL_MIN ? q->nthreads : 1;
    p->bag_of = hx_emb_ws_get(ws, HX_EMB_WS_BAG, (size_t)(n > 0 ? n : 1) * 8);
    p->scale = hx_emb_ws_get(ws, HX_EMB_WS_SCALE, (size_t)(n > 0 ? n : 1) * 4);
    size_t nn = (size_t)(n > 0 ? n : 1);
    char *pm = hx_emb_ws_get(ws, HX_EMB_WS_SHARE, align64(nn) + (hash ? nn * 8 : 0) + 64);
    if (!p->bag_of || !p->scale || !pm) return oom(err, n);
    uint8_t *sh = (uint8_t *)pm;
    uint64_t *H = hash ? (uint64_t *)(pm + align64(nn)) : NULL;
    /* Each position: bag, factor, and its share (0xFF: no gradient). */
    int64_t cnt[HX_EMB_MAX_SHARES + 1];
    memset(cnt, 0, sizeof cnt);
    if (q->mode == HX_EMB_MAX) memset(sh, 0, nn);
    for (int64_t b = 0; b < nbags; b++) {
        int64_t s = hx_emb_bag_bound(q, b), e = hx_emb_bag_bound(q, b + 1);
        float sc = 1.0f;
        if (q->mode == HX_EMB_MEAN) {
            int64_t c = 0;
            for (int64_t j = s; j < e; j++) c += !is_padding(q, hx_emb_id_at(q->ids, q->id_dtype, j));
            sc = c > 0 ? 1.0f / (float)c : 0.0f;
        }
        const int64_t *am = q->mode == HX_EMB_MAX ? gi->argmax + b * dim : NULL;
        if (am) /* winners of this bag, marked 1 until their turn below */
            for (int64_t k = 0; k < dim; k++)
                if (am[k] >= 0) sh[am[k]] = 1;
        for (int64_t j = s; j < e; j++) {
            int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
            p->bag_of[j] = b;
            p->scale[j] = q->weights ? q->weights[j] : sc;
            if (is_padding(q, id) || (limit > 0 && (id < 0 || id >= limit)) || (am && sh[j] != 1)) {
                sh[j] = 0xFF;
                continue;
            }
            uint64_t h = hash ? id_hash(id) : 0;
            if (hash) H[j] = h;
            int si = share_of(p, (uint64_t)id - (uint64_t)p->mn, h);
            sh[j] = (uint8_t)si;
            cnt[si + 1]++;
        }
    }
    for (int si = 0; si < p->nshares; si++) cnt[si + 1] += cnt[si];
    p->m = cnt[p->nshares];
    memcpy(p->bucket, cnt, sizeof(int64_t) * (size_t)(p->nshares + 1));
    /* Hash tables: at least twice the share's positions, a power of two. */
    for (int si = 0; si < p->nshares; si++) {
        int64_t c = p->bucket[si + 1] - p->bucket[si], cap = 16;
        while (hash && cap < 2 * c) cap *= 2;
        p->tab_off[si + 1] = p->tab_off[si] + (hash ? cap : 0);
    }
    size_t m = (size_t)(p->m > 0 ? p->m : 1), S = (size_t)p->nshares;
    size_t bytes = align64(m * 4) + (hash ? align64(m * 8) : 0) + 2 * align64(m * 8) + 2 * align64(m * 4) +
                   align64(m * 8) + align64((m + S) * 8) + align64(m * 4) + align64(m * 8) +
                   align64((size_t)p->tab_off[p->nshares] * sizeof(hx_emb_hslot)) + 64;
    char *g = hx_emb_ws_get(ws, HX_EMB_WS_GROUP, bytes);
    if (!g) return oom(err, n);
    g = (char *)(((uintptr_t)g + 63) & ~(uintptr_t)63);
    p->list = (uint32_t *)g;
    g += align64(m * 4);
    if (hash) {
        p->lhash = (uint64_t *)g;
        g += align64(m * 8);
    }
    p->ka = (uint64_t *)g;
    g += align64(m * 8);
    p->kb = (uint64_t *)g;
    g += align64(m * 8);
    p->va = (uint32_t *)g;
    g += align64(m * 4);
    p->vb = (uint32_t *)g;
    g += align64(m * 4);
    p->uniq = (int64_t *)g;
    g += align64(m * 8);
    p->start = (int64_t *)g;
    g += align64((m + S) * 8);
    p->pos = (uint32_t *)g;
    g += align64(m * 4);
    p->ucnt = (int64_t *)g;
    g += align64(m * 8);
    p->tab = (hx_emb_hslot *)g;
    /* Positions by share, ascending within one (a stable counting sort). */
    for (int64_t j = 0; j < n; j++) {
        if (sh[j] == 0xFF) continue;
        int64_t at = cnt[sh[j]]++;
        p->list[at] = (uint32_t)j;
        if (hash) p->lhash[at] = H[j];
    }
    return HX_OK;
}

/* ---- one share --------------------------------------------------------------------------------- */

/* Stable LSD radix sort of a (payload va, or NULL) by bits [lo, lo + bits),
 * with b / vb as the other buffers; returns which pair holds the result
 * (0: a, 1: b). */
static int radix_sort(uint64_t *a, uint64_t *b, uint32_t *va, uint32_t *vb, int64_t m, int lo, int bits)
{
    int64_t hist[1 << DIGIT_MAX_BITS];
    int passes = (bits + DIGIT_MAX_BITS - 1) / DIGIT_MAX_BITS;
    int width = passes ? (bits + passes - 1) / passes : 0;
    uint64_t mask = ((uint64_t)1 << width) - 1;
    for (int p = 0; p < passes; p++) {
        int shift = lo + p * width;
        memset(hist, 0, sizeof(int64_t) << width);
        for (int64_t i = 0; i < m; i++) hist[(a[i] >> shift) & mask]++;
        int64_t run = 0;
        for (uint64_t d = 0; d <= mask; d++) {
            int64_t x = hist[d];
            hist[d] = run;
            run += x;
        }
        for (int64_t i = 0; i < m; i++) {
            int64_t o = hist[(a[i] >> shift) & mask]++;
            b[o] = a[i];
            if (va) vb[o] = va[i];
        }
        uint64_t *tk = a;
        a = b;
        b = tk;
        uint32_t *tv = va;
        va = vb;
        vb = tv;
    }
    return passes % 2;
}

void hx_emb_group_share(const hx_emb_gplan *p, int si, hx_emb_groups *g)
{
    const hx_emb_query *q = p->q;
    int64_t lo = p->bucket[si], c = p->bucket[si + 1] - lo;
    const uint32_t *list = p->list + lo;
    int64_t *uniq = p->uniq + lo, *start = p->start + lo + si;
    uint32_t *pos = p->pos + lo;
    int64_t U = 0;
    if (p->method == HX_EMB_DEDUP_SORT) {
        /* Keys within the share: (id - mn) - (si << shift), below 2^shift. */
        uint64_t base = p->shift >= 64 ? 0 : (uint64_t)si << p->shift;
        int kb = p->shift >= 64 ? 64 : p->shift, pb = p->pb;
        int packed = kb + pb <= 64;
        uint64_t *a = p->ka + lo, *b = p->kb + lo;
        uint32_t *va = p->va + lo, *vb = p->vb + lo;
        for (int64_t i = 0; i < c; i++) {
            uint64_t key = (uint64_t)hx_emb_id_at(q->ids, q->id_dtype, list[i]) - (uint64_t)p->mn - base;
            if (packed) {
                a[i] = key << pb | list[i];
            } else {
                a[i] = key;
                va[i] = list[i];
            }
        }
        int shift = packed ? pb : 0;
        int in_b = radix_sort(a, b, packed ? NULL : va, packed ? NULL : vb, c, shift, kb);
        const uint64_t *K = in_b ? b : a;
        const uint32_t *V = in_b ? vb : va;
        uint64_t pmask = pb >= 64 ? ~0ull : ((uint64_t)1 << pb) - 1;
        for (int64_t i = 0; i < c; i++) {
            uint64_t k = K[i] >> shift;
            if (i == 0 || k != (K[i - 1] >> shift)) {
                uniq[U] = (int64_t)(k + base + (uint64_t)p->mn);
                start[U++] = i;
            }
            pos[i] = packed ? (uint32_t)(K[i] & pmask) : V[i];
        }
    } else {
        /* Unique ids in order of first position; then positions by id. */
        hx_emb_hslot *tab = p->tab + p->tab_off[si];
        int64_t cap = p->tab_off[si + 1] - p->tab_off[si];
        uint64_t mask = (uint64_t)cap - 1;
        const uint64_t *hs = p->lhash + lo;
        uint32_t *inv = p->va + lo;
        int64_t *ucnt = p->ucnt + lo;
        for (int64_t s = 0; s < cap; s++) tab[s].idx = -1;
        for (int64_t i = 0; i < c; i++) {
            int64_t id = hx_emb_id_at(q->ids, q->id_dtype, list[i]);
            uint64_t s = hs[i] & mask;
            while (tab[s].idx >= 0 && tab[s].key != id) s = (s + 1) & mask;
            if (tab[s].idx < 0) {
                tab[s].key = id;
                tab[s].idx = U;
                uniq[U] = id;
                ucnt[U++] = 0;
            }
            inv[i] = (uint32_t)tab[s].idx;
            ucnt[tab[s].idx]++;
        }
        int64_t run = 0;
        for (int64_t u = 0; u < U; u++) {
            start[u] = run;
            run += ucnt[u];
            ucnt[u] = start[u];
        }
        for (int64_t i = 0; i < c; i++) pos[ucnt[inv[i]]++] = list[i];
    }
    start[U] = c;
    g->U = U;
    g->uniq = uniq;
    g->start = start;
    g->pos = pos;
    g->bag_of = p->bag_of;
    g->scale = p->scale;
}

HX_EMB_CLONES
void hx_emb_group_sum(const hx_emb_query *q, const hx_emb_grad_input *gi,
                      const hx_emb_groups *gr, int64_t u, int64_t gstride, float *dst)
{
    int64_t dim = gi->dim;
    memset(dst, 0, (size_t)gstride * sizeof(float));
    for (int64_t p = gr->start[u]; p < gr->start[u + 1]; p++) {
        int64_t j = gr->pos[p], b = gr->bag_of[j];
        const float *restrict d = gi->dout + b * dim;
        if (q->mode == HX_EMB_MAX) {
            const int64_t *am = gi->argmax + b * dim;
            for (int64_t k = 0; k < dim; k++)
                if (am[k] == j) dst[k] += d[k];
        } else {
            float s = gr->scale[j];
            for (int64_t k = 0; k < dim; k++) dst[k] += s * d[k];
        }
    }
}

/* ---- backward ------------------------------------------------------------------------------------ */

hx_status hx_emb_backward(const hx_emb_query *q, const hx_emb_grad_input *gi,
                          hx_emb_workspace *ws, hx_emb_sparse_grad *out, hx_emb_err *err)
{
    if (!out) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding backward: out is NULL");
    hx_emb_workspace *own = NULL;
    if (!ws && !(ws = own = hx_emb_workspace_create()))
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory");
    hx_emb_gplan p;
    hx_status st = hx_emb_group_plan(q, gi, 0, ws, &p, err);
    if (!st) {
        /* Group every share, then (with the counts known) write the rows, share by share. */
        hx_emb_groups g[HX_EMB_MAX_SHARES];
        int64_t offs[HX_EMB_MAX_SHARES + 1];
        int S = p.nshares;
#pragma omp parallel for num_threads(p.nthreads) if (p.nthreads > 1) schedule(dynamic, 1)
        for (int si = 0; si < S; si++) hx_emb_group_share(&p, si, &g[si]);
        offs[0] = 0;
        for (int si = 0; si < S; si++) offs[si + 1] = offs[si] + g[si].U;
        st = hx_emb_sparse_grad_reserve(out, offs[S], gi->dim, err);
        if (!st) {
            int64_t gs = out->stride;
#pragma omp parallel for num_threads(p.nthreads) if (p.nthreads > 1) schedule(dynamic, 1)
            for (int si = 0; si < S; si++)
                for (int64_t u = 0; u < g[si].U; u++) {
                    out->ids[offs[si] + u] = g[si].uniq[u];
                    hx_emb_group_sum(q, gi, &g[si], u, gs, out->rows + (offs[si] + u) * gs);
                }
        }
    }
    hx_emb_workspace_free(own);
    return st;
}
