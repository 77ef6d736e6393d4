/* Backward of lookups and bags to a sparse gradient: the positions that get
 * a gradient are grouped by id (radix sort of (id, position), or XXH3-keyed
 * hash maps over id partitions), then each unique id's row is summed over
 * its positions in ascending order, by one thread. */
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
/* A row update weighs as much as this many summed positions when groups
 * are split between threads. */
#define ROW_WEIGHT 4
/* AUTO sorts ids spanning at most this many bits. */
#define SORT_MAX_BITS 40

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

/* ---- positions: bag, scale, whether they get a gradient ------------------------------------- */

static inline int is_padding(const hx_emb_query *q, int64_t id)
{
    return q->has_padding && id == q->padding_id;
}

/* Fills bag_of, scale and act (1: gets a gradient) per position; in MAX
 * mode checks argmax. Returns -1, or the first bad argmax element
 * (b * dim + k). */
static int64_t mark_positions(const hx_emb_query *q, const hx_emb_grad_input *gi, int64_t nbags,
                              int64_t limit, int nt, int64_t *bag_of, float *scale, uint8_t *act)
{
    int64_t dim = gi->dim, first_bad = INT64_MAX;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(min : first_bad)
    for (int64_t b = 0; b < nbags; b++) {
        int64_t s = hx_emb_bag_bound(q, b), e = hx_emb_bag_bound(q, b + 1), cnt = 0;
        for (int64_t j = s; j < e; j++) {
            int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
            int pad = is_padding(q, id);
            cnt += !pad;
            bag_of[j] = b;
            act[j] = !pad && (limit <= 0 || (id >= 0 && id < limit));
            scale[j] = q->weights ? q->weights[j] : 1.0f;
        }
        if (q->mode == HX_EMB_MEAN && cnt > 0) {
            float inv = 1.0f / (float)cnt;
            for (int64_t j = s; j < e; j++) scale[j] = inv;
        }
        if (q->mode != HX_EMB_MAX) continue;
        const int64_t *am = gi->argmax + b * dim;
        for (int64_t k = 0; k < dim; k++) {
            int64_t a = am[k];
            if (a == -1) continue;
            if (a < s || a >= e || is_padding(q, hx_emb_id_at(q->ids, q->id_dtype, a))) {
                if (b * dim + k < first_bad) first_bad = b * dim + k;
                continue;
            }
            act[a] |= 2;
        }
        for (int64_t j = s; j < e; j++) act[j] = act[j] == 3;
    }
    return first_bad == INT64_MAX ? -1 : first_bad;
}

/* ---- radix sort --------------------------------------------------------------------------- */

/* Stable LSD sort of keys a (with payload va, or NULL) by bits [lo, lo + bits),
 * 8 bits a pass, using b / vb as the other buffers; *ka / *kv get the sorted
 * arrays. hist: nt * 256 counters. */
static void radix_sort(uint64_t *a, uint64_t *b, uint32_t *va, uint32_t *vb, int64_t m, int lo,
                       int bits, int nt, int64_t *hist, uint64_t **ka, uint32_t **kv)
{
    int passes = (bits + 7) / 8;
    *ka = passes % 2 ? b : a;
    *kv = passes % 2 ? vb : va;
    if (passes == 0) return;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        uint64_t *src = a, *dst = b;
        uint32_t *vs = va, *vd = vb;
        int64_t s0 = m * t / T, s1 = m * (t + 1) / T;
        int64_t *h = hist + (size_t)t * 256;
        for (int p = 0; p < passes; p++) {
            int shift = lo + 8 * p;
            memset(h, 0, 256 * sizeof(int64_t));
            for (int64_t i = s0; i < s1; i++) h[(src[i] >> shift) & 255]++;
#pragma omp barrier
#pragma omp single
            {
                int64_t run = 0;
                for (int d = 0; d < 256; d++)
                    for (int u = 0; u < T; u++) {
                        int64_t x = hist[(size_t)u * 256 + d];
                        hist[(size_t)u * 256 + d] = run;
                        run += x;
                    }
            }
            for (int64_t i = s0; i < s1; i++) {
                int64_t o = h[(src[i] >> shift) & 255]++;
                dst[o] = src[i];
                if (vs) vd[o] = vs[i];
            }
#pragma omp barrier
            uint64_t *tk = src;
            src = dst;
            dst = tk;
            uint32_t *tv = vs;
            vs = vd;
            vd = tv;
        }
    }
}

static inline int bit_length(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

/* ---- grouping by sort ----------------------------------------------------------------------- */

typedef struct grp_out {
    int64_t *uniq, *start;
    uint32_t *pos;
} grp_out;

/* Groups the m active positions (ids spanning `span` above `mn`) by sort. */
static hx_status group_sort(const hx_emb_query *q, const uint8_t *act, int64_t m, int64_t mn,
                            uint64_t span, int nt, hx_emb_workspace *ws, grp_out *go,
                            int64_t *U_out, hx_emb_err *err)
{
    int64_t n = q->n;
    int kb = bit_length(span), pb = bit_length((uint64_t)(n > 1 ? n - 1 : 1));
    int packed = kb + pb <= 64;
    uint64_t *A = hx_emb_ws_get(ws, HX_EMB_WS_KEYS_A, (size_t)m * 8);
    uint64_t *B = hx_emb_ws_get(ws, HX_EMB_WS_KEYS_B, (size_t)m * 8);
    uint32_t *VA = packed ? NULL : hx_emb_ws_get(ws, HX_EMB_WS_VALS_A, (size_t)m * 4);
    uint32_t *VB = packed ? NULL : hx_emb_ws_get(ws, HX_EMB_WS_VALS_B, (size_t)m * 4);
    int64_t *hist = hx_emb_ws_get(ws, HX_EMB_WS_THREAD, (size_t)(nt + 1) * 256 * 8);
    if (!A || !B || !hist || (!packed && (!VA || !VB)))
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory grouping %lld ids",
                           (long long)m);
    /* Compact the active positions in order: (id - mn) << pb | position. */
    int64_t *cnt = hist; /* nt + 1 counters before the sort uses it */
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t lo = n * t / T, hi = n * (t + 1) / T, c = 0;
        for (int64_t j = lo; j < hi; j++) c += act[j];
        cnt[t + 1] = c;
#pragma omp barrier
#pragma omp single
        {
            cnt[0] = 0;
            for (int u = 0; u < T; u++) cnt[u + 1] += cnt[u];
        }
        int64_t o = cnt[t];
        for (int64_t j = lo; j < hi; j++) {
            if (!act[j]) continue;
            uint64_t k = (uint64_t)hx_emb_id_at(q->ids, q->id_dtype, j) - (uint64_t)mn;
            if (packed) {
                A[o++] = k << pb | (uint64_t)j;
            } else {
                A[o] = k;
                VA[o++] = (uint32_t)j;
            }
        }
    }
    uint64_t *K;
    uint32_t *V;
    radix_sort(A, B, VA, VB, m, packed ? pb : 0, kb, nt, hist, &K, &V);
    /* Runs of equal ids. */
    uint64_t pmask = packed ? (pb == 64 ? ~0ull : (1ull << pb) - 1) : 0;
    int shift = packed ? pb : 0;
    int64_t *runs = hist; /* nt + 1 counters again */
    int64_t U = 0;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t lo = m * t / T, hi = m * (t + 1) / T, c = 0;
        for (int64_t i = lo; i < hi; i++) c += i == 0 || (K[i] >> shift) != (K[i - 1] >> shift);
        runs[t + 1] = c;
#pragma omp barrier
#pragma omp single
        {
            runs[0] = 0;
            for (int u = 0; u < T; u++) runs[u + 1] += runs[u];
            U = runs[T];
            go->uniq = hx_emb_ws_get(ws, HX_EMB_WS_UNIQ, (size_t)U * 8);
            go->start = hx_emb_ws_get(ws, HX_EMB_WS_START, (size_t)(U + 1) * 8);
            go->pos = hx_emb_ws_get(ws, HX_EMB_WS_POS, (size_t)m * 4);
        }
        if (go->uniq && go->start && go->pos) {
            int64_t u = runs[t];
            for (int64_t i = lo; i < hi; i++) {
                uint64_t k = K[i] >> shift;
                if (i == 0 || k != (K[i - 1] >> shift)) {
                    go->uniq[u] = (int64_t)(k + (uint64_t)mn);
                    go->start[u++] = i;
                }
                go->pos[i] = packed ? (uint32_t)(K[i] & pmask) : V[i];
            }
        }
    }
    if (!go->uniq || !go->start || !go->pos)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory grouping %lld ids",
                           (long long)m);
    go->start[U] = m;
    *U_out = U;
    return HX_OK;
}

/* ---- grouping by hash ------------------------------------------------------------------------ */

typedef struct slot {
    int64_t key;
    int64_t idx; /* local unique index, -1: empty */
} slot;

typedef struct part_state {
    int64_t owned;   /* positions of this thread's partitions */
    int64_t cap;     /* slots, a power of two */
    int64_t U;       /* unique ids found */
    size_t off;      /* byte offset of this thread's memory in the block */
} part_state;

static inline uint64_t id_hash(int64_t id) { return XXH3_64bits_withSeed(&id, sizeof id, HASH_SEED); }

static size_t part_bytes(const part_state *ps)
{
    /* slots, then per local unique: key, count, rank, partition; 64-byte multiples */
    size_t b = (size_t)ps->cap * sizeof(slot) + (size_t)ps->owned * (3 * sizeof(int64_t) + 1);
    return (b + 63) / 64 * 64;
}

/* Thread t of T owns partitions [NPARTS * t / T, NPARTS * (t + 1) / T):
 * output ids in partition order, within one in order of first position. */
static hx_status group_hash(const hx_emb_query *q, const uint8_t *act, int64_t m, int nt,
                            hx_emb_workspace *ws, grp_out *go, int64_t *U_out, hx_emb_err *err)
{
    int64_t n = q->n;
    uint64_t *H = hx_emb_ws_get(ws, HX_EMB_WS_KEYS_A, (size_t)n * 8);
    uint32_t *inv = hx_emb_ws_get(ws, HX_EMB_WS_VALS_A, (size_t)n * 4);
    int64_t *hist = hx_emb_ws_get(ws, HX_EMB_WS_KEYS_B, (size_t)nt * NPARTS * 8);
    part_state *ps = hx_emb_ws_get(ws, HX_EMB_WS_VALS_B, (size_t)(nt + 1) * sizeof(part_state));
    go->uniq = hx_emb_ws_get(ws, HX_EMB_WS_UNIQ, (size_t)m * 8);
    go->start = hx_emb_ws_get(ws, HX_EMB_WS_START, (size_t)(m + 1) * 8);
    go->pos = hx_emb_ws_get(ws, HX_EMB_WS_POS, (size_t)m * 4);
    if (!H || !inv || !hist || !ps || !go->uniq || !go->start || !go->pos)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory grouping %lld ids",
                           (long long)m);
    char *block = NULL;
    int oom = 0;
    int64_t U = 0;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int p0 = NPARTS * t / T, p1 = NPARTS * (t + 1) / T;
        int64_t lo = n * t / T, hi = n * (t + 1) / T;
        int64_t *h = hist + (size_t)t * NPARTS;
        memset(h, 0, NPARTS * sizeof(int64_t));
        for (int64_t j = lo; j < hi; j++) {
            if (!act[j]) continue;
            H[j] = id_hash(hx_emb_id_at(q->ids, q->id_dtype, j));
            h[H[j] >> 56]++;
        }
#pragma omp barrier
        part_state *me = &ps[t];
        me->owned = 0;
        for (int u = 0; u < T; u++)
            for (int p = p0; p < p1; p++) me->owned += hist[(size_t)u * NPARTS + p];
        me->cap = 16;
        while (me->cap < 2 * me->owned) me->cap *= 2;
        me->U = 0;
#pragma omp barrier
#pragma omp single
        {
            size_t total = 0;
            for (int u = 0; u < T; u++) {
                ps[u].off = total;
                total += part_bytes(&ps[u]);
            }
            block = hx_emb_ws_get(ws, HX_EMB_WS_THREAD, total);
            oom = block == NULL;
        }
        if (!oom) {
            char *mem = block + me->off;
            slot *tab = (slot *)mem;
            int64_t *ukey = (int64_t *)(tab + me->cap);
            int64_t *ucnt = ukey + me->owned, *rank = ucnt + me->owned;
            uint8_t *upart = (uint8_t *)(rank + me->owned);
            uint64_t mask = (uint64_t)me->cap - 1;
            for (int64_t s = 0; s < me->cap; s++) tab[s].idx = -1;
            /* Unique ids of my partitions, in order of first position. */
            for (int64_t j = 0; j < n; j++) {
                if (!act[j]) continue;
                int p = (int)(H[j] >> 56);
                if (p < p0 || p >= p1) continue;
                int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
                uint64_t s = H[j] & mask;
                while (tab[s].idx >= 0 && tab[s].key != id) s = (s + 1) & mask;
                if (tab[s].idx < 0) {
                    tab[s].key = id;
                    tab[s].idx = me->U;
                    ukey[me->U] = id;
                    ucnt[me->U] = 0;
                    upart[me->U++] = (uint8_t)p;
                }
                inv[j] = (uint32_t)tab[s].idx;
                ucnt[tab[s].idx]++;
            }
            /* Rank of each local unique: by partition, then first position. */
            int64_t pc[NPARTS + 1];
            memset(pc, 0, sizeof pc);
            for (int64_t L = 0; L < me->U; L++) pc[upart[L] + 1]++;
            for (int p = 0; p < NPARTS; p++) pc[p + 1] += pc[p];
            for (int64_t L = 0; L < me->U; L++) rank[L] = pc[upart[L]]++;
        }
#pragma omp barrier
#pragma omp single
        {
            int64_t u = 0, pos = 0;
            for (int v = 0; v < T; v++) {
                int64_t nu = ps[v].U, np = ps[v].owned;
                ps[v].U = u;     /* from here: first output index */
                ps[v].owned = pos; /* from here: first output position */
                u += nu;
                pos += np;
            }
            ps[T].U = u;
            ps[T].owned = pos;
            U = u;
        }
        if (!oom) {
            char *mem = block + me->off;
            int64_t uo = me->U, po = me->owned, nu = ps[t + 1].U - uo;
            slot *tab = (slot *)mem;
            int64_t own = ps[t + 1].owned - po;
            int64_t *ukey = (int64_t *)(tab + me->cap);
            int64_t *ucnt = ukey + own, *rank = ucnt + own;
            /* Starts in rank order, then positions in ascending order. */
            for (int64_t L = 0; L < nu; L++) {
                go->uniq[uo + rank[L]] = ukey[L];
                go->start[uo + rank[L]] = ucnt[L];
            }
            int64_t run = po;
            for (int64_t r = uo; r < uo + nu; r++) {
                int64_t c = go->start[r];
                go->start[r] = run;
                run += c;
            }
            /* ucnt becomes the write cursor of each local unique. */
            for (int64_t L = 0; L < nu; L++) ucnt[L] = go->start[uo + rank[L]];
            for (int64_t j = 0; j < n; j++) {
                if (!act[j]) continue;
                int p = (int)(H[j] >> 56);
                if (p < p0 || p >= p1) continue;
                go->pos[ucnt[inv[j]]++] = (uint32_t)j;
            }
        }
    }
    if (oom)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory grouping %lld ids",
                           (long long)m);
    go->start[U] = m;
    *U_out = U;
    return HX_OK;
}

/* ---- groups ------------------------------------------------------------------------------------ */

hx_status hx_emb_group(const hx_emb_query *q, const hx_emb_grad_input *gi, int64_t limit,
                       hx_emb_workspace *ws, hx_emb_groups *gr, hx_emb_err *err)
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
    int64_t n = q->n;
    int nt = n >= PARALLEL_MIN ? q->nthreads : 1;
    int64_t *bag_of = hx_emb_ws_get(ws, HX_EMB_WS_BAG, (size_t)n * 8);
    float *scale = hx_emb_ws_get(ws, HX_EMB_WS_SCALE, (size_t)n * 4);
    uint8_t *act = hx_emb_ws_get(ws, HX_EMB_WS_FLAGS, (size_t)n);
    if (!bag_of || !scale || !act)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory for %lld ids",
                           (long long)n);
    int64_t bad = mark_positions(q, gi, nbags, limit, nt, bag_of, scale, act);
    if (bad >= 0) {
        int64_t b = bad / gi->dim, k = bad % gi->dim;
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding bag(max) backward: argmax[%lld][%lld] = %lld is not a non-padding "
                           "position of bag %lld [%lld, %lld); pass the argmax of the same forward",
                           (long long)b, (long long)k, (long long)gi->argmax[bad], (long long)b,
                           (long long)hx_emb_bag_bound(q, b), (long long)hx_emb_bag_bound(q, b + 1));
    }
    /* Active positions, and the span of their ids. */
    int64_t m = 0, mn = INT64_MAX, mx = INT64_MIN;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : m) reduction(min : mn) reduction(max : mx)
    for (int64_t j = 0; j < n; j++) {
        if (!act[j]) continue;
        int64_t id = hx_emb_id_at(q->ids, q->id_dtype, j);
        m++;
        if (id < mn) mn = id;
        if (id > mx) mx = id;
    }
    grp_out go = {NULL, NULL, NULL};
    int64_t U = 0;
    if (m == 0) {
        go.start = hx_emb_ws_get(ws, HX_EMB_WS_START, 8);
        if (!go.start) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory");
        go.start[0] = 0;
    } else {
        uint64_t span = (uint64_t)mx - (uint64_t)mn;
        hx_emb_dedup method = gi->dedup;
        if (method == HX_EMB_DEDUP_AUTO)
            method = bit_length(span) <= SORT_MAX_BITS ? HX_EMB_DEDUP_SORT : HX_EMB_DEDUP_HASH;
        st = method == HX_EMB_DEDUP_SORT ? group_sort(q, act, m, mn, span, nt, ws, &go, &U, err)
                                         : group_hash(q, act, m, nt, ws, &go, &U, err);
        if (st) return st;
    }
    gr->U = U;
    gr->uniq = go.uniq;
    gr->start = go.start;
    gr->pos = go.pos;
    gr->bag_of = bag_of;
    gr->scale = scale;
    return HX_OK;
}

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

void hx_emb_group_split(const hx_emb_groups *gr, int part, int nparts, int64_t *u0, int64_t *u1)
{
    int64_t U = gr->U, total = gr->start[U] + ROW_WEIGHT * U;
    int64_t bound[2];
    for (int e = 0; e < 2; e++) {
        int64_t p = part + e;
        if (p >= nparts) {
            bound[e] = U;
            continue;
        }
        /* The first group whose weight before it reaches total * p / nparts. */
        int64_t target = (int64_t)((__int128)total * p / nparts), lo = 0, hi = U;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (gr->start[mid] + ROW_WEIGHT * mid < target) lo = mid + 1;
            else hi = mid;
        }
        bound[e] = lo;
    }
    *u0 = bound[0];
    *u1 = bound[1];
}

/* ---- backward ------------------------------------------------------------------------------------ */

hx_status hx_emb_backward(const hx_emb_query *q, const hx_emb_grad_input *gi,
                          hx_emb_workspace *ws, hx_emb_sparse_grad *out, hx_emb_err *err)
{
    if (!out) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding backward: out is NULL");
    hx_emb_workspace *own = NULL;
    if (!ws && !(ws = own = hx_emb_workspace_create()))
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward: out of memory");
    hx_emb_groups gr;
    hx_status st = hx_emb_group(q, gi, 0, ws, &gr, err);
    if (!st) st = hx_emb_sparse_grad_reserve(out, gr.U, gi->dim, err);
    if (!st) {
        int nt = q->n >= PARALLEL_MIN ? q->nthreads : 1;
        int64_t gs = out->stride;
#pragma omp parallel num_threads(nt)
        {
            int64_t u0, u1;
            hx_emb_group_split(&gr, omp_get_thread_num(), omp_get_num_threads(), &u0, &u1);
            for (int64_t u = u0; u < u1; u++) {
                out->ids[u] = gr.uniq[u];
                hx_emb_group_sum(q, gi, &gr, u, gs, out->rows + u * gs);
            }
        }
    }
    hx_emb_workspace_free(own);
    return st;
}
