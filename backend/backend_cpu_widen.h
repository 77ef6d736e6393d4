/* The CPU backend's f16/bf16 path for kernels that compute in f32. */
#ifndef HX_BACKEND_CPU_WIDEN_H
#define HX_BACKEND_CPU_WIDEN_H

#include "backend/launch.h"

/* Runs f32_kernel (a launcher that reads and writes f32 buffers) on node y
 * whose float inputs and output are stored as f16 or bf16: widens those
 * inputs to f32 scratch, runs the kernel into f32 scratch, and rounds the
 * result to y's dtype (nearest even). Integer inputs (ids, labels) pass as
 * they are. Fails with HX_ERR_OUT_OF_MEMORY when the scratch cannot be had. */
hx_status hx__cpu_widen(hx_launch_fn f32_kernel, const hx_exec *ex, const hx_tensor *y,
                        void *out, void *const *in);
/* The same for a node that reads other tensors than its sources (a host
 * fusion, graph.h's lowering): in[k] holds src[k], k < n. */
hx_status hx__cpu_widen_reading(hx_launch_fn f32_kernel, const hx_exec *ex, const hx_tensor *y,
                                void *out, void *const *in, const hx_tensor *const *src, int n);

#endif
