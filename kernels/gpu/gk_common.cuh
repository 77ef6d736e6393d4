/* Shared by the .cu files of kernels/gpu: storage types, launch shapes,
 * deterministic block reductions, error checks. */
#ifndef HX_GK_COMMON_CUH
#define HX_GK_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/gpu/hx_gpu_kernels.h"

/* Loads widen to f32, stores round to nearest even. */
__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* Runs `body` with T the storage type of dt; returns HX_GK_BAD_ARG for
 * other dtypes. */
#define HX_GK_FLOAT_TYPES(dt, T, ...)                              \
    switch (dt) {                                                  \
    case HX_K_F32: { typedef float T; __VA_ARGS__; } break;        \
    case HX_K_F16: { typedef __half T; __VA_ARGS__; } break;       \
    case HX_K_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break; \
    default: return HX_GK_BAD_ARG;                                 \
    }

#define HX_GK_THREADS 256

/* Blocks for a grid-stride loop over n items: enough to fill the device,
 * never more than the items need. */
static inline unsigned hx_gk_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b > 65536) b = 65536;
    return (unsigned)(b < 1 ? 1 : b);
}

#define GRID_STRIDE(i, n)                                                                  \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

/* The status of the launch just made (configuration errors, a sticky
 * device error). */
static inline hx_gk_status hx_gk_launched(void) { return hx_gk_cuda(cudaGetLastError()); }

#define GK_TRY(expr)                         \
    do {                                     \
        hx_gk_status gk_st_ = (expr);        \
        if (gk_st_) return gk_st_;           \
    } while (0)

/* ---- elementwise maps in 16-byte packets --------------------------------------------
 * y[i] = f(i, a[i], b[i]) for i < n (b may be NULL: f then gets 0). Where
 * y, a and b are 16-byte aligned each thread moves whole packets (8 halves
 * or 4 floats per load and store), as a copy does; the math per element is
 * the scalar kernel's, so results are the same bits. */
template <typename T>
struct __align__(16) hx_gk_packet {
    T v[16 / sizeof(T)];
};

template <typename T, typename F>
__global__ void hx_gk_map_kernel(T *y, const T *a, const T *b, int64_t n, F f, int packets)
{
    constexpr int N = 16 / sizeof(T);
    int64_t done = 0;
    if (packets) {
        int64_t np = n / N;
        GRID_STRIDE(p, np) {
            hx_gk_packet<T> va = ((const hx_gk_packet<T> *)a)[p], vb, vy;
            if (b) vb = ((const hx_gk_packet<T> *)b)[p];
#pragma unroll
            for (int k = 0; k < N; k++)
                st(&vy.v[k], f(p * N + k, ld(&va.v[k]), b ? ld(&vb.v[k]) : 0.0f));
            ((hx_gk_packet<T> *)y)[p] = vy;
        }
        done = np * N;
    }
    GRID_STRIDE(j, n - done) {
        int64_t i = done + j;
        st(y + i, f(i, ld(a + i), b ? ld(b + i) : 0.0f));
    }
}

static inline int hx_gk_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T, typename F>
static hx_gk_status hx_gk_map(const hx_gk_ctx *c, T *y, const T *a, const T *b, int64_t n, F f)
{
    int packets = hx_gk_aligned16(y) && hx_gk_aligned16(a) && (!b || hx_gk_aligned16(b));
    int64_t items = packets ? (n + (16 / sizeof(T)) - 1) / (16 / sizeof(T)) : n;
    hx_gk_map_kernel<T, F><<<hx_gk_blocks(items, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
        y, a, b, n, f, packets);
    return hx_gk_launched();
}

/* Sum of v over the block, in a fixed tree (warp shuffles, then the warp
 * sums in order): the same bits every run. Every thread gets the total.
 * `shared` holds 32 values; blockDim.x is a multiple of 32. */
template <typename A>
__device__ __forceinline__ A block_sum(A v, A *shared)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); /* shared may still be read from a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    A t = 0;
    for (int w = 0; w < nw; w++) t += shared[w];
    return t;
}

__device__ __forceinline__ float block_max(float v, float *shared)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int w = 0; w < nw; w++) t = fmaxf(t, shared[w]);
    return t;
}

/* Threads for a block that walks one row of n: a multiple of 32, at most 256. */
static inline int hx_gk_row_threads(int64_t n)
{
    int64_t t = (n + 31) / 32 * 32;
    return (int)(t > 256 ? 256 : t < 32 ? 32 : t);
}

/* Rows handled by one launch: the grid's x dimension holds at most 2^31 - 1. */
#define HX_GK_MAX_GRID 2147483647LL

__device__ __forceinline__ int64_t id_at(const void *ids, int i64, int64_t i)
{
    return i64 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

/* Records position i as bad (the smallest wins). */
__device__ __forceinline__ void note_bad(uint64_t *bad, int64_t i)
{
    atomicMin((unsigned long long *)bad, (unsigned long long)i);
}

/* After a kernel that may have noted bad positions: bad[1] = the id there. */
hx_gk_status hx_gk_fill_bad_id(const hx_gk_ctx *c, uint64_t *bad, const void *ids, int i64);

#endif
