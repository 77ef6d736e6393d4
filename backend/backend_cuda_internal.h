/* Between the cuda backend (backend_cuda.c) and its kernel launchers
 * (backend_cuda_ops.c). A launcher runs inside the backend's launch(), on
 * the launching thread, which is where the stream it enqueues on is known:
 * the backend sets it for that thread for the duration of the call. */
#ifndef HX_BACKEND_CUDA_INTERNAL_H
#define HX_BACKEND_CUDA_INTERNAL_H

#include "backend/backend.h"
#include "kernels/gpu/hx_gpu_kernels.h"

/* The kernel context of the stream of the launch in progress on this thread. */
const hx_gk_ctx *hx__cuda_ctx(void);
/* Grows that stream's scratch to at least `bytes` (through the backend's
 * allocator, so it counts against the device's capacity). */
hx_status hx__cuda_scratch(const hx_tensor *node, size_t bytes);
/* A bad-id slot (see hx_gpu_kernels.h) for a kernel reading `ids` with
 * values in [0, limit): the stream checks it at its next synchronisation
 * (stream_sync, or event_sync of a later event) and fails that call with
 * HX_ERR_INDEX naming node, ids, the id and its position (`what`: "id",
 * "label"). */
hx_status hx__cuda_index_check(const hx_tensor *node, const hx_tensor *ids, int64_t limit,
                               const char *what, uint64_t **slot);
#ifdef HX_HAVE_CUDNN
/* The cuDNN handle of that stream, made on its first use and destroyed
 * with the stream; errors name node. */
hx_status hx__cuda_dnn(const hx_tensor *node, void **handle);
/* The launcher of lowered op HX_LOWERED_OP(kind) (graph.h) on dtype dt, or
 * NULL (backend_cuda_cudnn.c). */
hx_launch_fn hx__cudnn_kernel(hx_op op, hx_dtype dt);
#endif
/* The status for a kernel's failure on node: the CUDA/cuBLAS text, with
 * HX_ERR_DEVICE_OOM for out-of-memory. */
hx_status hx__cuda_fail(const hx_tensor *node, hx_gk_status st);

/* The launcher for op on dtype dt, or NULL: no cuda kernel (host-only ops,
 * dtypes the op does not take). op may be HX_KERNEL_SUMSQ. */
hx_launch_fn hx__cuda_kernel(hx_op op, hx_dtype dt);

#endif
