/* The cpu backend's host fusions (graph.h's lowering, graph/lower.c): a
 * node bias_add(matmul(x, w), b), or relu / gelu / gelu_erf of one, run as
 * one GEMM whose epilogue adds the bias and applies the activation to each
 * tile (kernels/cpu/gemm.c), bitwise the ops run one by one. in[] is x, w,
 * b; the matmul's shapes and transposes are the group's matmul node's. f32
 * only: a 16-bit chain rounds between its ops, which the epilogue does not. */
#include "backend/backend.h"
#include "backend/node_args.h"
#include "kernels/cpu/hx_kernels.h"

static hx_status fused(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in,
                       int act)
{
    const hx_tensor *mm = y->op == HX_OP_BIAS_ADD ? y->src[0] : y->src[0]->src[0];
    hx__gemm_args g = hx__matmul_args(mm);
    hx_k_gemm_bias_act_f32(g.ta, g.tb, g.batch, g.M, g.N, g.K, in[0], g.lda, g.a_stride, in[1],
                           g.ldb, g.b_stride, in[2], act, out, g.ldc, g.c_stride, ex->nthreads);
    return HX_OK;
}

static hx_status matmul_bias(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    return fused(ex, y, out, in, -1);
}
static hx_status matmul_bias_relu(const hx_exec *ex, const hx_tensor *y, void *out,
                                  void *const *in)
{
    return fused(ex, y, out, in, HX_UNARY_RELU);
}
static hx_status matmul_bias_gelu(const hx_exec *ex, const hx_tensor *y, void *out,
                                  void *const *in)
{
    return fused(ex, y, out, in, HX_UNARY_GELU);
}
static hx_status matmul_bias_gelu_erf(const hx_exec *ex, const hx_tensor *y, void *out,
                                      void *const *in)
{
    return fused(ex, y, out, in, HX_UNARY_GELU_ERF);
}

hx_launch_fn hx__cpu_fused_kernel(hx_op op, hx_dtype dt)
{
    if (dt != HX_DTYPE_F32) return NULL;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS)) return matmul_bias;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS_RELU)) return matmul_bias_relu;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS_GELU)) return matmul_bias_gelu;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS_GELU_ERF)) return matmul_bias_gelu_erf;
    return NULL;
}
