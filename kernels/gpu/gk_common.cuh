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
