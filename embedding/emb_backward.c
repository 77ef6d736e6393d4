/* Backward of lookups and bags to a sparse gradient: the positions that get
 * a gradient are grouped by id (radix sort of (id, position), or XXH3-keyed
 * hash maps over id partitions), then each unique id's row is summed over
 * its positions in ascending order, by one thread. Each thread groups its
 * own share of the ids from the whole input, so the threads need not wait
 * for each other (on a loaded machine a barrier costs a time slice). */
#pragma GCC optimize("fp-contract=off")
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "embedding/embedding.h"

/* Below this many positions grouping stays on the calling thread. */
#define PARALLEL_MIN 1024
/* Hash partitions (the hash method's unit of work per thread). */
#define NPARTS 256
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

static size_t align64(size_t x) { return (x + 63) / 64 * 64; }

/* Per-thread memory for n positions: keys and payloads (two buffers each),
 * the groups, MAX winner flags, and for HASH the table and its locals. */
typedef struct tmem {
    uint64_t *a, *b;
    uint32_t *va, *vb;
    int64_t *uniq, *start;
    uint32_t *pos;
    uint8_t *win;
    struct hslot *tab;
    int64_t *ucnt, *rank;
} tmem;

typedef struct hslot {
    int64_t key;
    int64_t idx; /* local unique index, -1: empty */
} hslot;

static size_t tmem_bytes(int64_t n, int hash)
{
    size_t m = (size_t)(n > 0 ? n : 1);
    size_t b = 2 * align64(m * 8) + 2 * align64(m * 4) + 2 * align64(m * 8) + 8 + align64(m * 4) + align64(m);
    if (hash) b += align64(4 * m * sizeof(hslot)) + 2 * align64(m * 8) + 64;
    return align64(b + 64);
}

static tmem tmem_at(char *base, int64_t n, int hash)
{
    size_t m = (size_t)(n > 0 ? n : 1);
    char *p = (char *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
    tmem t;
    memset(&t, 0, sizeof t);
    t.a = (uint64_t *)p;
    p += align64(m * 8);
    t.b = (uint64_t *)p;
    p += align64(m * 8);
    t.va = (uint32_t *)p;
    p += align64(m * 4);
    t.vb = (uint32_t *)p;
    p += align64(m * 4);
    t.uniq = (int64_t *)p;
    p += align64(m * 8);
    t.start = (int64_t *)p;
    p += align64(m * 8 + 8);
    t.pos = (uint32_t *)p;
    p += align64(m * 4);
    t.win = (uint8_t *)p;
    p += align64(m);
    if (hash) {
        t.tab = (hslot *)p;
        p += align64(4 * m * sizeof(hslot));
        t.ucnt = (int64_t *)p;
        p += align64(m * 8);
        t.rank = (int64_t *)p;
    }
    return t;
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
    int64_t dim = gi->dim;
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
    int64_t n = q->n, mn = INT64_MAX, mx = INT64_MIN;
    for (int64_t j = 0; j < n; j++) {
        int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
        if (is_padding(q, id) || (limit > 0 && (id < 0 || id >= limit))) continue;
        if (id < mn) mn = id;
        if (id > mx) mx = id;
    }
    memset(p, 0, sizeof *p);
    p->q = q;
    p->gi = gi;
    p->nbags = nbags;
    p->limit = limit;
    p->mn = mn <= mx ? mn : 0;
    p->span = mn <= mx ? (uint64_t)mx - (uint64_t)mn : 0;
    p->pb = bit_length((uint64_t)(n > 1 ? n - 1 : 1));
    p->method = gi->dedup;
    if (p->method == HX_EMB_DEDUP_AUTO)
        p->method = bit_length(p->span) <= SORT_MAX_BITS ? HX_EMB_DEDUP_SORT : HX_EMB_DEDUP_HASH;
    p->nthreads = n >= PARALLEL_MIN ? q->nthreads : 1;
    p->tbytes = tmem_bytes(n, p->method == HX_EMB_DEDUP_HASH);
    p->bag_of = hx_emb_ws_get(ws, HX_EMB_WS_BAG, (size_t)(n > 0 ? n : 1) * 8);
    p->scale = hx_emb_ws_get(ws, HX_EMB_WS_SCALE, (size_t)(n > 0 ? n : 1) * 4);
    p->mem = hx_emb_ws_get(ws, HX_EMB_WS_GROUP, p->tbytes * (size_t)p->nthreads + 64);
    if (!p->bag_of || !p->scale || !p->mem)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory for %lld ids",
                           (long long)n);
    return HX_OK;
}

/* ---- one thread's share ---------------------------------------------------------------------- */

static inline uint64_t id_hash(int64_t id) { return XXH3_64bits_withSeed(&id, sizeof id, HASH_SEED); }

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

void hx_emb_group_part(const hx_emb_gplan *p, int part, int nparts, hx_emb_groups *g)
{
    const hx_emb_query *q = p->q;
    const hx_emb_grad_input *gi = p->gi;
    int64_t n = q->n, dim = gi->dim;
    int hash = p->method == HX_EMB_DEDUP_HASH;
    tmem m = tmem_at(p->mem + p->tbytes * (size_t)part, n, hash);
    /* My share: ids (minus mn) in [klo, klast], or hash partitions [p0, p1). */
    unsigned __int128 keys = (unsigned __int128)p->span + 1;
    uint64_t klo = (uint64_t)(keys * (unsigned)part / (unsigned)nparts);
    unsigned __int128 kend = keys * (unsigned)(part + 1) / (unsigned)nparts;
    int empty = kend == klo;
    uint64_t klast = empty ? klo : (uint64_t)(kend - 1);
    int p0 = NPARTS * part / nparts, p1 = NPARTS * (part + 1) / nparts;
    int kb = bit_length(klast - klo), pb = p->pb;
    int packed = kb + pb <= 64;
    /* Collect my positions in order, with their bag and factor. */
    int64_t c = 0;
    if (q->mode == HX_EMB_MAX) memset(m.win, 0, (size_t)(n > 0 ? n : 1));
    for (int64_t b = 0; b < p->nbags; b++) {
        int64_t s = hx_emb_bag_bound(q, b), e = hx_emb_bag_bound(q, b + 1);
        float sc = 1.0f;
        if (q->mode == HX_EMB_MEAN) {
            int64_t cnt = 0;
            for (int64_t j = s; j < e; j++) cnt += !is_padding(q, hx_emb_id_at(q->ids, q->id_dtype, j));
            sc = cnt > 0 ? 1.0f / (float)cnt : 0.0f;
        }
        const int64_t *am = q->mode == HX_EMB_MAX ? gi->argmax + b * dim : NULL;
        if (am)
            for (int64_t k = 0; k < dim; k++)
                if (am[k] >= 0) m.win[am[k]] = 1;
        for (int64_t j = s; j < e; j++) {
            int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
            if (is_padding(q, id) || (p->limit > 0 && (id < 0 || id >= p->limit)) || (am && !m.win[j]))
                continue;
            uint64_t key = (uint64_t)id - (uint64_t)p->mn, h = 0;
            if (hash) {
                h = id_hash(id);
                int pt = (int)(h >> 56);
                if (pt < p0 || pt >= p1) continue;
                m.a[c] = h;
                m.va[c++] = (uint32_t)j;
            } else {
                if (empty || key < klo || key > klast) continue;
                if (packed) {
                    m.a[c++] = (key - klo) << pb | (uint64_t)j;
                } else {
                    m.a[c] = key - klo;
                    m.va[c++] = (uint32_t)j;
                }
            }
            p->bag_of[j] = b;
            p->scale[j] = q->weights ? q->weights[j] : sc;
        }
    }
    int64_t U = 0;
    if (!hash) {
        /* Sort by id, then runs of equal ids. */
        int shift = packed ? pb : 0;
        int in_b = radix_sort(m.a, m.b, packed ? NULL : m.va, packed ? NULL : m.vb, c, shift, kb);
        const uint64_t *K = in_b ? m.b : m.a;
        const uint32_t *V = in_b ? m.vb : m.va;
        uint64_t pmask = pb >= 64 ? ~0ull : ((uint64_t)1 << pb) - 1;
        for (int64_t i = 0; i < c; i++) {
            uint64_t k = K[i] >> shift;
            if (i == 0 || k != (K[i - 1] >> shift)) {
                m.uniq[U] = (int64_t)(k + klo + (uint64_t)p->mn);
                m.start[U++] = i;
            }
            m.pos[i] = packed ? (uint32_t)(K[i] & pmask) : V[i];
        }
    } else {
        /* Unique ids in order of first position, then ranked by partition. */
        int64_t cap = 16;
        while (cap < 2 * c) cap *= 2;
        uint64_t mask = (uint64_t)cap - 1;
        for (int64_t s = 0; s < cap; s++) m.tab[s].idx = -1;
        for (int64_t i = 0; i < c; i++) {
            int64_t id = hx_emb_id_at(q->ids, q->id_dtype, m.va[i]);
            uint64_t s = m.a[i] & mask;
            while (m.tab[s].idx >= 0 && m.tab[s].key != id) s = (s + 1) & mask;
            if (m.tab[s].idx < 0) {
                m.tab[s].key = id;
                m.tab[s].idx = U;
                m.b[U] = m.a[i] >> 56; /* partition of local unique U */
                m.uniq[U] = id;
                m.ucnt[U++] = 0;
            }
            m.vb[i] = (uint32_t)m.tab[s].idx;
            m.ucnt[m.tab[s].idx]++;
        }
        int64_t pc[NPARTS + 1];
        memset(pc, 0, sizeof pc);
        for (int64_t L = 0; L < U; L++) pc[m.b[L] + 1]++;
        for (int pt = 0; pt < NPARTS; pt++) pc[pt + 1] += pc[pt];
        for (int64_t L = 0; L < U; L++) m.rank[L] = pc[m.b[L]]++;
        /* uniq in rank order (through a), starts from the counts, then positions. */
        for (int64_t L = 0; L < U; L++) {
            m.a[m.rank[L]] = (uint64_t)m.uniq[L];
            m.start[m.rank[L]] = m.ucnt[L];
        }
        int64_t run = 0;
        for (int64_t r = 0; r < U; r++) {
            int64_t cnt = m.start[r];
            m.uniq[r] = (int64_t)m.a[r];
            m.start[r] = run;
            run += cnt;
        }
        for (int64_t L = 0; L < U; L++) m.ucnt[L] = m.start[m.rank[L]];
        for (int64_t i = 0; i < c; i++) m.pos[m.ucnt[m.vb[i]]++] = m.va[i];
    }
    m.start[U] = c;
    g->U = U;
    g->uniq = m.uniq;
    g->start = m.start;
    g->pos = m.pos;
    g->bag_of = p->bag_of;
    g->scale = p->scale;
}

__attribute__((target_clones("avx512f", "avx2", "default")))
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
    int64_t offs[257];
    if (!st) {
        int nt = p.nthreads < 256 ? p.nthreads : 256;
        hx_status rst = HX_OK;
        /* Group, then (once every thread knows its count) size the output
         * and write each thread's rows at its offset. */
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            int t = omp_get_thread_num(), T = omp_get_num_threads();
            hx_emb_groups g;
            hx_emb_group_part(&p, t, T, &g);
            offs[t + 1] = g.U;
#pragma omp barrier
#pragma omp single
            {
                offs[0] = 0;
                for (int u = 0; u < T; u++) offs[u + 1] += offs[u];
                rst = hx_emb_sparse_grad_reserve(out, offs[T], gi->dim, err);
            }
            if (!rst) {
                int64_t gs = out->stride;
                for (int64_t u = 0; u < g.U; u++) {
                    out->ids[offs[t] + u] = g.uniq[u];
                    hx_emb_group_sum(q, gi, &g, u, gs, out->rows + (offs[t] + u) * gs);
                }
            }
        }
        st = rst;
    }
    hx_emb_workspace_free(own);
    return st;
}
