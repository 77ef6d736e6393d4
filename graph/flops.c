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
