/* The CPU backend's f16/bf16 path for kernels that compute in f32, and
 * the errors of its 16-bit kernels. */
#ifndef HX_BACKEND_CPU_WIDEN_H
#define HX_BACKEND_CPU_WIDEN_H

#include "backend/launch.h"
#include "backend/node_args.h"

/* Runs f32_kernel (a launcher that reads and writes f32 buffers) on node y
 * whose float inputs and output are stored as f16 or bf16: widens those
 * inputs to f32 scratch, runs the kernel into f32 scratch, and rounds the
 * result to y's dtype (nearest even). Integer inputs (ids, labels) pass as
 * they are. Fails with HX_ERR_OUT_OF_MEMORY when the scratch cannot be had. */
hx_status hx__cpu_widen(hx_launch_fn f32_kernel, const hx_exec *ex, const hx_tensor *y,
                        void *out, void *const *in);
/* Node y's GEMM g (x, w in y's dtype, f16 or bf16) through hx_k_gemm_half:
 * out = act(x w + b) (b NULL: no bias; act an hx_unary_op or -1), each
 * stage rounded to y's dtype as the ops one by one round their outputs.
 * Fails with HX_ERR_OUT_OF_MEMORY when its f32 scratch cannot be had. */
hx_status hx__cpu_gemm_half(const hx_exec *ex, const hx_tensor *y, const hx__gemm_args *g,
                            void *out, const void *x, const void *w, const void *b, int act);

/* The error of node y's 16-bit GEMM g whose f32 scratch could not be had:
 * HX_ERR_OUT_OF_MEMORY, naming the node and the shape. */
hx_status hx__cpu_gemm_scratch_error(const hx_exec *ex, const hx_tensor *y,
                                     const hx__gemm_args *g);

/* The error of node y's 16-bit row kernel whose f32 row scratch (rows of
 * `cols`) could not be had: HX_ERR_OUT_OF_MEMORY, naming the node. */
hx_status hx__cpu_row_scratch_error(const hx_exec *ex, const hx_tensor *y, int64_t cols);

#endif
