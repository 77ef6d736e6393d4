/* Floating-point work of an op: what emu's simulated compute rate and
 * auto_offload's cost of recomputation count. */
#include "graph/graph.h"

double hx__op_flops(const hx_tensor *y)
{
    double n = (double)hx_tensor_numel(y);
    if (y->op != HX_OP_MATMUL || y->n_src < 1) return n;
    const hx_tensor *a = y->src[0];
    double k = (double)a->shape[a->ndim - (y->attr.i[0] ? 2 : 1)];
    return 2.0 * n * k;
}

double hx__run_flops(const hx_tensor *y, const hx_lowered *low)
{
    double f = hx__op_flops(y);
    hx_lower_kind kind = low ? (hx_lower_kind)low[y->id].kind : HX_LOWER_NONE;
    if (kind == HX_LOWER_ADD_LAYERNORM) return f + hx__op_flops(y->src[0]);
    if (kind == HX_LOWER_WRITTEN_BY_READER) return 0; /* counted in its reader's */
    if (kind == HX_LOWER_MATMUL_PERMUTED_OUT) return hx__op_flops(y->src[0]); /* no copy */
    if (!hx__lower_fuses_matmul(kind)) return f;
    for (const hx_tensor *s = y->src[0];; s = s->src[0]) { /* the group's bias_add, matmul */
        f += hx__op_flops(s);
        if (s->op == HX_OP_MATMUL) return f;
    }
}
