/* Reductions over any set of axes, strided copies (permute, slice, concat,
 * broadcast), and rows by id (gather, the deterministic scatter-add). */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/gpu/gk_common.cuh"

/* ---- reduce_sum --------------------------------------------------------------------
 * x is read as (kept dims) x (reduced dims): neighbouring dims of the same
 * kind are merged first. Each output is summed over its reduced elements in
 * a fixed order, split into k chunks when there are few outputs (k depends
 * on the shape only), and the chunk partials are added in chunk order. */

struct red_geom {
    int nk, nr;                  /* kept and reduced dims after merging */
    int64_t ks[HX_K_MAX_DIMS], kst[HX_K_MAX_DIMS]; /* sizes, x strides */
    int64_t rs[HX_K_MAX_DIMS], rst[HX_K_MAX_DIMS];
    int64_t O, R;                /* outputs, reduced elements per output */
    int inner_reduced;           /* x's innermost dim is reduced: walk it with a warp */
};

static void red_geom_of(red_geom *g, const int64_t *shape, int ndim, const uint8_t *reduce)
{
    int64_t stride[HX_K_MAX_DIMS], s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= shape[d];
    }
    g->nk = g->nr = 0;
    g->O = g->R = 1;
    g->inner_reduced = 0;
    int last_kind = -1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        int red = reduce[d] != 0;
        int64_t *sz = red ? g->rs : g->ks, *st_ = red ? g->rst : g->kst;
        int *cnt = red ? &g->nr : &g->nk;
        if (last_kind == red && *cnt > 0 && st_[*cnt - 1] == stride[d] * shape[d]) {
            sz[*cnt - 1] *= shape[d]; /* merge with the dim before */
            st_[*cnt - 1] = stride[d];
        } else {
            sz[*cnt] = shape[d];
            st_[*cnt] = stride[d];
            (*cnt)++;
        }
        (red ? g->R : g->O) *= shape[d];
        last_kind = red;
        g->inner_reduced = red;
    }
}

/* Chunks keep about RED_THREADS threads busy (132 SMs x 2048 threads, twice)
 * without cutting a thread's share below RED_MIN_CHUNK elements: a bias
 * gradient (16384 rows, 384 outputs) would otherwise run on 384 threads. */
#define RED_THREADS ((int64_t)1 << 19)
#define RED_MIN_CHUNK 64
#define RED_MAX_CHUNKS 1024

static int64_t red_chunks(const red_geom *g)
{
    int64_t lanes = g->inner_reduced ? 32 : 1; /* threads per output within a chunk */
    int64_t threads = g->O * lanes, k = g->R / (RED_MIN_CHUNK * lanes);
    if (threads >= RED_THREADS || k < 2) return 1;
    int64_t cap = (RED_THREADS + threads - 1) / threads;
    if (k > cap) k = cap;
    return k > RED_MAX_CHUNKS ? RED_MAX_CHUNKS : k;
}

size_t hx_gk_reduce_sum_scratch_bytes(const int64_t *shape, int ndim, const uint8_t *reduce)
{
    if (ndim < 0 || ndim > HX_K_MAX_DIMS) return 0;
    red_geom g;
    red_geom_of(&g, shape, ndim, reduce);
    int64_t k = red_chunks(&g);
    return k > 1 ? (size_t)(k * g.O) * sizeof(float) : 0;
}

__device__ __forceinline__ int64_t offset_of(int64_t i, int n, const int64_t *size,
                                             const int64_t *stride)
{
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % size[d]) * stride[d];
        i /= size[d];
    }
    return off;
}

/* Offset of reduced element r: one multiply in the common case of a single
 * (merged) reduced dim, instead of 64-bit divisions per element. */
__device__ __forceinline__ int64_t red_offset(int64_t r, const red_geom &g)
{
    return g.nr == 1 ? r * g.rst[0] : offset_of(r, g.nr, g.rs, g.rst);
}

/* Sum of x[o, r] for r in [lo, hi): one thread, in order of r. */
template <typename T>
__device__ __forceinline__ float sum_range(const T *x, const red_geom &g, int64_t base, int64_t lo,
                                           int64_t hi)
{
    float acc = 0.0f;
    for (int64_t r = lo; r < hi; r++) acc += ld(x + base + red_offset(r, g));
    return acc;
}

/* Innermost dim kept: a thread per output, coalesced across the warp.
 * grid.y = chunk; out_f (partials) when chunks > 1, else out. */
template <typename T>
__global__ void reduce_by_thread(T *out, float *out_f, const T *x, red_geom g, int64_t chunk)
{
    int64_t lo = blockIdx.y * chunk, hi = lo + chunk < g.R ? lo + chunk : g.R;
    GRID_STRIDE(o, g.O) {
        float acc = sum_range(x, g, offset_of(o, g.nk, g.ks, g.kst), lo, hi);
        if (out_f) out_f[blockIdx.y * g.O + o] = acc;
        else st(out + o, acc);
    }
}

/* Innermost dim reduced: a warp per output, lanes stride the reduced
 * elements (contiguous at the inner end), then a fixed shuffle tree. */
template <typename T>
__global__ void reduce_by_warp(T *out, float *out_f, const T *x, red_geom g, int64_t chunk)
{
    int64_t lo = blockIdx.y * chunk, hi = lo + chunk < g.R ? lo + chunk : g.R;
    int lane = threadIdx.x & 31;
    int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t o = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < g.O; o += warps) {
        int64_t base = offset_of(o, g.nk, g.ks, g.kst);
        float acc = 0.0f;
        for (int64_t r = lo + lane; r < hi; r += 32) acc += ld(x + base + red_offset(r, g));
        for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
        if (lane == 0) {
            if (out_f) out_f[blockIdx.y * g.O + o] = acc;
            else st(out + o, acc);
        }
    }
}

template <typename T>
__global__ void add_chunks_kernel(T *out, const float *part, int64_t O, int64_t k)
{
    GRID_STRIDE(o, O) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; p++) acc += part[p * O + o];
        st(out + o, acc);
    }
}

hx_gk_status hx_gk_reduce_sum(const hx_gk_ctx *c, hx_kdtype dt, void *out, const void *x,
                              const int64_t *shape, int ndim, const uint8_t *reduce)
{
    if (ndim < 0 || ndim > HX_K_MAX_DIMS) return HX_GK_BAD_ARG;
    red_geom g;
    red_geom_of(&g, shape, ndim, reduce);
    int64_t nout = 1, nx = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return HX_GK_BAD_ARG;
        nx *= shape[d];
        if (!reduce[d]) nout *= shape[d];
    }
    if (nx == 0) /* sums over nothing are zero */
        return hx_gk_memset0(c, out, (size_t)nout * hx_k_dtype_size(dt));
    int64_t k = red_chunks(&g), chunk = (g.R + k - 1) / k;
    k = (g.R + chunk - 1) / chunk;
    if (k > 1 && c->scratch_bytes < (size_t)(k * g.O) * sizeof(float)) return HX_GK_SCRATCH;
    float *part = k > 1 ? (float *)c->scratch : NULL;
    int64_t items = g.inner_reduced ? g.O * 32 : g.O;
    dim3 grid(hx_gk_blocks(items, HX_GK_THREADS), (unsigned)k);
    HX_GK_FLOAT_TYPES(dt, T,
        if (g.inner_reduced)
            reduce_by_warp<T><<<grid, HX_GK_THREADS, 0, c->stream>>>((T *)out, part, (const T *)x, g, chunk);
        else
            reduce_by_thread<T><<<grid, HX_GK_THREADS, 0, c->stream>>>((T *)out, part, (const T *)x, g, chunk);
        GK_TRY(hx_gk_launched());
        if (k > 1)
            add_chunks_kernel<T><<<hx_gk_blocks(g.O, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
                (T *)out, part, g.O, k));
    return hx_gk_launched();
}

/* ---- strided copy ------------------------------------------------------------------------- */

struct copy_geom {
    int ndim;
    int64_t shape[HX_K_MAX_DIMS], os[HX_K_MAX_DIMS], xs[HX_K_MAX_DIMS];
};

template <typename E>
__global__ void copy_strided_kernel(E *out, const E *x, copy_geom g, int64_t n)
{
    GRID_STRIDE(i, n) {
        int64_t r = i, oo = 0, ox = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t k = r % g.shape[d];
            r /= g.shape[d];
            oo += k * g.os[d];
            ox += k * g.xs[d];
        }
        out[oo] = x[ox];
    }
}

/* Where the innermost dim is contiguous in both out and x (a permute of
 * attention heads keeps each head's D values together), w of its elements
 * move as one word of up to 16 bytes, if its size, the other strides and
 * both bases allow: one index computation per 16 bytes, not per element.
 * Returns the word size. */
static size_t widen(copy_geom *g, int64_t *n, const void *out, const void *x, size_t es)
{
    int last = g->ndim - 1;
    if (last < 0 || g->os[last] != 1 || g->xs[last] != 1) return es;
    for (size_t w = 16 / es; w > 1; w /= 2) {
        size_t word = es * w;
        bool ok = g->shape[last] % (int64_t)w == 0 && (uintptr_t)out % word == 0 &&
                  (uintptr_t)x % word == 0;
        for (int d = 0; d < last && ok; d++) /* a dim of size 1 never moves: any stride */
            ok = g->shape[d] == 1 || ((g->os[d] * es) % word == 0 && (g->xs[d] * es) % word == 0);
        if (!ok) continue;
        g->shape[last] /= w;
        for (int d = 0; d < last; d++) {
            g->os[d] = g->shape[d] == 1 ? 0 : g->os[d] / (int64_t)w;
            g->xs[d] = g->shape[d] == 1 ? 0 : g->xs[d] / (int64_t)w;
        }
        *n /= (int64_t)w;
        return word;
    }
    return es;
}

hx_gk_status hx_gk_copy_strided(const hx_gk_ctx *c, void *out, const int64_t *out_strides,
                                const void *x, const int64_t *x_strides, const int64_t *shape,
                                int ndim, size_t elem_size)
{
    if (ndim < 0 || ndim > HX_K_MAX_DIMS) return HX_GK_BAD_ARG;
    copy_geom g = {ndim, {0}, {0}, {0}};
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        g.shape[d] = shape[d];
        g.os[d] = out_strides[d];
        g.xs[d] = x_strides[d];
        n *= shape[d];
    }
    if (n <= 0) return n < 0 ? HX_GK_BAD_ARG : HX_GK_OK;
    if (elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8)
        elem_size = widen(&g, &n, out, x, elem_size);
    unsigned blocks = hx_gk_blocks(n, HX_GK_THREADS);
    switch (elem_size) {
    case 1: copy_strided_kernel<uint8_t><<<blocks, HX_GK_THREADS, 0, c->stream>>>((uint8_t *)out, (const uint8_t *)x, g, n); break;
    case 2: copy_strided_kernel<uint16_t><<<blocks, HX_GK_THREADS, 0, c->stream>>>((uint16_t *)out, (const uint16_t *)x, g, n); break;
    case 4: copy_strided_kernel<uint32_t><<<blocks, HX_GK_THREADS, 0, c->stream>>>((uint32_t *)out, (const uint32_t *)x, g, n); break;
    case 8: copy_strided_kernel<uint64_t><<<blocks, HX_GK_THREADS, 0, c->stream>>>((uint64_t *)out, (const uint64_t *)x, g, n); break;
    case 16: copy_strided_kernel<uint4><<<blocks, HX_GK_THREADS, 0, c->stream>>>((uint4 *)out, (const uint4 *)x, g, n); break;
    default: return HX_GK_BAD_ARG;
    }
    return hx_gk_launched();
}

/* ---- gather ---------------------------------------------------------------------------------- */

/* Rows move in 4-byte words when row_bytes and both bases allow, else bytes. */
template <typename E>
__global__ void gather_kernel(E *out, const E *table, int64_t rows, int64_t words,
                              const void *ids, int i64, int64_t n, uint64_t *bad)
{
    GRID_STRIDE(e, n * words) {
        int64_t i = e / words, w = e % words, id = id_at(ids, i64, i);
        if (id < 0 || id >= rows) {
            if (w == 0) note_bad(bad, i);
            out[e] = 0;
        } else {
            out[e] = table[id * words + w];
        }
    }
}

hx_gk_status hx_gk_gather_rows(const hx_gk_ctx *c, void *out, const void *table, int64_t rows,
                               size_t row_bytes, const void *ids, hx_kdtype id_dt, int64_t n,
                               uint64_t *bad)
{
    if (n < 0 || rows < 0 || (id_dt != HX_K_I32 && id_dt != HX_K_I64)) return HX_GK_BAD_ARG;
    if (!n || !row_bytes) return HX_GK_OK;
    int i64 = id_dt == HX_K_I64;
    int words4 = row_bytes % 4 == 0 && (uintptr_t)out % 4 == 0 && (uintptr_t)table % 4 == 0;
    int64_t words = words4 ? (int64_t)row_bytes / 4 : (int64_t)row_bytes;
    unsigned blocks = hx_gk_blocks(n * words, HX_GK_THREADS);
    if (words4)
        gather_kernel<uint32_t><<<blocks, HX_GK_THREADS, 0, c->stream>>>(
            (uint32_t *)out, (const uint32_t *)table, rows, words, ids, i64, n, bad);
    else
        gather_kernel<uint8_t><<<blocks, HX_GK_THREADS, 0, c->stream>>>(
            (uint8_t *)out, (const uint8_t *)table, rows, words, ids, i64, n, bad);
    GK_TRY(hx_gk_launched());
    return hx_gk_fill_bad_id(c, bad, ids, i64);
}

/* ---- scatter-add ------------------------------------------------------------------------------
 * Scratch: keys in/out (u64), positions in/out (u32), then CUB's temp. A
 * bad id gets the key `rows`, which sorts after every good one and is
 * skipped. The radix sort is stable, so each row's positions stay in
 * increasing order and its sum is the CPU's sequential one. */

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

static int key_bits(int64_t rows)
{
    int b = 1;
    while (b < 64 && ((unsigned long long)rows >> b) != 0) b++;
    return b; /* enough for 0..rows */
}

static size_t cub_temp_bytes(int64_t n, int64_t rows)
{
    size_t temp = 0;
    cub::DeviceRadixSort::SortPairs(NULL, temp, (const unsigned long long *)NULL,
                                    (unsigned long long *)NULL, (const unsigned *)NULL,
                                    (unsigned *)NULL, (int)n, 0, key_bits(rows));
    return temp;
}

size_t hx_gk_scatter_add_scratch_bytes(int64_t n, int64_t rows)
{
    if (n <= 0 || n > INT32_MAX || rows < 0) return 0;
    return 2 * align256((size_t)n * 8) + 2 * align256((size_t)n * 4) +
           align256(cub_temp_bytes(n, rows));
}

__global__ void scatter_keys_kernel(unsigned long long *keys, unsigned *pos, const void *ids,
                                    int i64, int64_t rows, int64_t n, uint64_t *bad)
{
    GRID_STRIDE(i, n) {
        int64_t id = id_at(ids, i64, i);
        if (id < 0 || id >= rows) {
            note_bad(bad, i);
            id = rows;
        }
        keys[i] = (unsigned long long)id;
        pos[i] = (unsigned)i;
    }
}

/* One thread per (sorted position, column); the threads of each id's first
 * position sum that id's run of gradient rows in order, so the sum is the
 * CPU's sequential one. The run's end is found by binary search, and its
 * rows are read eight at a time with all eight loads issued before the
 * adds: the run of a frequent id (a space in text: a sixth of all tokens)
 * is long, and one dependent load per row made it the slowest kernel of
 * a GPT step. */
__device__ int64_t run_end(const unsigned long long *keys, int64_t k, int64_t n)
{
    unsigned long long key = keys[k];
    int64_t lo = k + 1, hi = n; /* the first q >= lo with keys[q] != key lies in [lo, hi] */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] == key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

template <typename T>
__global__ void scatter_rows_kernel(T *dtable, const T *dy, const unsigned long long *keys,
                                    const unsigned *pos, int64_t rows, int64_t dim, int64_t n)
{
    GRID_STRIDE(e, n * dim) {
        int64_t k = e / dim, j = e % dim;
        unsigned long long key = keys[k];
        if (key >= (unsigned long long)rows || (k > 0 && keys[k - 1] == key)) continue;
        int64_t end = run_end(keys, k, n), q = k;
        float acc = 0.0f;
        for (; q + 8 <= end; q += 8) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) v[u] = ld(dy + (int64_t)pos[q + u] * dim + j);
#pragma unroll
            for (int u = 0; u < 8; u++) acc += v[u];
        }
        for (; q < end; q++) acc += ld(dy + (int64_t)pos[q] * dim + j);
        st(dtable + (int64_t)key * dim + j, acc);
    }
}

hx_gk_status hx_gk_scatter_add_rows(const hx_gk_ctx *c, hx_kdtype dt, void *dtable, int64_t rows,
                                    int64_t dim, const void *dy, const void *ids,
                                    hx_kdtype id_dt, int64_t n, uint64_t *bad)
{
    if (n < 0 || n > INT32_MAX || rows < 0 || dim < 0 || (id_dt != HX_K_I32 && id_dt != HX_K_I64) ||
        (dt != HX_K_F32 && dt != HX_K_F16 && dt != HX_K_BF16))
        return HX_GK_BAD_ARG;
    GK_TRY(hx_gk_memset0(c, dtable, (size_t)(rows * dim) * hx_k_dtype_size(dt)));
    if (!n) return HX_GK_OK;
    if (c->scratch_bytes < hx_gk_scatter_add_scratch_bytes(n, rows)) return HX_GK_SCRATCH;
    char *s = (char *)c->scratch;
    unsigned long long *keys_in = (unsigned long long *)s, *keys_out;
    s += align256((size_t)n * 8);
    keys_out = (unsigned long long *)s;
    s += align256((size_t)n * 8);
    unsigned *pos_in = (unsigned *)s;
    s += align256((size_t)n * 4);
    unsigned *pos_out = (unsigned *)s;
    s += align256((size_t)n * 4);
    size_t temp = cub_temp_bytes(n, rows);
    int i64 = id_dt == HX_K_I64;
    scatter_keys_kernel<<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
        keys_in, pos_in, ids, i64, rows, n, bad);
    GK_TRY(hx_gk_launched());
    GK_TRY(hx_gk_cuda(cub::DeviceRadixSort::SortPairs(s, temp, keys_in, keys_out, pos_in, pos_out,
                                                      (int)n, 0, key_bits(rows), c->stream)));
    HX_GK_FLOAT_TYPES(dt, T,
        scatter_rows_kernel<T><<<hx_gk_blocks(n * dim, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)dtable, (const T *)dy, keys_out, pos_out, rows, dim, n));
    GK_TRY(hx_gk_launched());
    return hx_gk_fill_bad_id(c, bad, ids, i64);
}
