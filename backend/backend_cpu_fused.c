/* The cpu backend's host fusions (graph.h's lowering, graph/lower.c): a
 * node bias_add(matmul(x, w), b), or relu / gelu / gelu_erf of one, run as
 * one GEMM whose epilogue adds the bias and applies the activation to each
 * tile (kernels/cpu/gemm.c), bitwise the ops run one by one. in[] is x, w,
 * b; the matmul's shapes and transposes are the group's matmul node's. A
 * group stored in f16 or bf16 runs hx_k_gemm_half (x, w and b widened
 * exactly, per panel for x), whose epilogue rounds each stage through the
 * dtype as each op of the chain rounds its output.
 * layernorm(s = add(x, r)) runs as one pass over rows writing s and the
 * layernorm (kernels/cpu/rows.c), in f32, or for f16 / bf16 widening each
 * row and rounding the sum and the output as the chain does (bitwise); the
 * add's own step runs nothing.
 * In training, gelu(x) keeps gelu'(x) (f32) behind its values
 * (hx__gelu_saved_at) and its gradient multiplies dy by it: bitwise the
 * gelu and gelu_backward kernels, in f32 and through 16-bit storage.
 * A matmul through attention's head-swap permutes (graph/lower_permuted.c)
 * reads its operands and writes its product in the permutes' sources:
 * strided GEMMs instead of the copies. */
#include "backend/backend.h"
#include "backend/backend_cpu_widen.h"
#include "backend/node_args.h"
#include "kernels/cpu/hx_kernels.h"

/* The group's bias_add node (y itself, or the activation's source). */
static const hx_tensor *bias_add_of(const hx_tensor *y)
{
    return y->op == HX_OP_BIAS_ADD ? y : y->src[0];
}

static hx_status fused(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in, int act)
{
    hx__gemm_args g = hx__matmul_args(bias_add_of(y)->src[0]);
    if (y->dtype != HX_DTYPE_F32) return hx__cpu_gemm_half(ex, y, &g, out, in[0], in[1], in[2], act);
    hx_k_gemm_bias_act_f32(g.ta, g.tb, g.batch, g.M, g.N, g.K, in[0], g.lda, g.a_stride, in[1],
                           g.ldb, g.b_stride, in[2], act, HX_K_F32, out, g.ldc, g.c_stride,
                           ex->nthreads);
    return HX_OK;
}

#define FUSED(name, act)                                                                    \
    static hx_status name(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in) \
    {                                                                                       \
        return fused(ex, y, out, in, act);                                                  \
    }
FUSED(matmul_bias, -1)
FUSED(matmul_bias_relu, HX_UNARY_RELU)
FUSED(matmul_bias_gelu, HX_UNARY_GELU)
FUSED(matmul_bias_gelu_erf, HX_UNARY_GELU_ERF)

/* in: x, r, gamma, beta, then s (the add's output, written here); all of
 * y's dtype (the add and the layernorm take sources of one float dtype) */
static hx_status add_layernorm(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    hx__rows_args r = hx__rows_of(y);
    if (y->dtype == HX_DTYPE_F32) {
        hx_k_add_layernorm_f32(in[4], out, in[0], in[1], in[2], in[3], y->attr.f[0], r.rows,
                               r.cols, ex->nthreads);
        return HX_OK;
    }
    if (hx_k_add_layernorm_half(in[4], out, in[0], in[1], in[2], in[3], (hx_kdtype)y->dtype,
                                y->attr.f[0], r.rows, r.cols, ex->nthreads))
        return hx__cpu_row_scratch_error(ex, y, r.cols);
    return HX_OK;
}

/* in: x; the derivative goes behind y's values */
static hx_status gelu_save(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    hx_k_gelu_save(out, (float *)((char *)out + hx__gelu_saved_at(y)), in[0],
                   (hx_kdtype)y->dtype, hx_tensor_numel(y), ex->nthreads);
    return HX_OK;
}

/* in: dy, then the gelu's buffer (y = gelu_backward's source 2, or its
 * recomputed twin: the same shape and dtype) */
static hx_status gelu_backward_saved(const hx_exec *ex, const hx_tensor *y, void *out,
                                     void *const *in)
{
    const float *d = (const float *)((const char *)in[1] + hx__gelu_saved_at(y->src[2]));
    hx_k_gelu_backward_saved(out, in[0], d, (hx_kdtype)y->dtype, hx_tensor_numel(y),
                             ex->nthreads);
    return HX_OK;
}

/* in: the matmul's a and b, each read in place of its head-swap permute's
 * source where it is one; out: the matmul's, or (y a head-swap permute of
 * the matmul) the permute's. Per batch b, the GEMM of its H heads: the
 * matmul's kernel on the same matrices (only the leading dimensions and
 * strides differ) */
static hx_status matmul_permuted(const hx_exec *ex, const hx_tensor *y, void *out,
                                 void *const *in)
{
    hx__gemm_bh_args r = hx__matmul_permuted_args(y);
    const hx__gemm_args *g = &r.g;
    if (hx_k_gemm_heads(g->ta, g->tb, r.outer, g->batch, g->M, g->N, g->K, in[0], g->lda,
                        g->a_stride, r.a_outer, in[1], g->ldb, g->b_stride, r.b_outer,
                        (hx_kdtype)y->dtype, out, g->ldc, g->c_stride, r.c_outer, ex->nthreads))
        return hx__cpu_gemm_scratch_error(ex, y, g);
    return HX_OK;
}

static hx_status written_by_reader(const hx_exec *ex, const hx_tensor *y, void *out,
                                   void *const *in)
{
    return HX_OK;
}

hx_launch_fn hx__cpu_fused_kernel(hx_op op, hx_dtype dt)
{
    if (dt != HX_DTYPE_F32 && dt != HX_DTYPE_F16 && dt != HX_DTYPE_BF16) return NULL;
    if (op == HX_LOWERED_OP(HX_LOWER_ADD_LAYERNORM)) return add_layernorm;
    if (op == HX_LOWERED_OP(HX_LOWER_WRITTEN_BY_READER)) return written_by_reader;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS)) return matmul_bias;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS_RELU)) return matmul_bias_relu;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS_GELU)) return matmul_bias_gelu;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_BIAS_GELU_ERF)) return matmul_bias_gelu_erf;
    if (op == HX_LOWERED_OP(HX_LOWER_GELU_SAVE)) return gelu_save;
    if (op == HX_LOWERED_OP(HX_LOWER_GELU_BACKWARD_SAVED)) return gelu_backward_saved;
    if (op == HX_LOWERED_OP(HX_LOWER_MATMUL_PERMUTED) ||
        op == HX_LOWERED_OP(HX_LOWER_MATMUL_PERMUTED_OUT))
        return matmul_permuted;
    return NULL;
}
