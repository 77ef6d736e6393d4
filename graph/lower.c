/* Device lowering (graph.h): which device nodes a session runs as one
 * library call reading other sources. Today: a convolution (im2col +
 * conv_gemm, graph/ops_conv.c) and its two gradients as cuDNN calls of x,
 * w and dy, where the device backend has those kernels. The graph is not
 * changed; the answer is a per-node table the session's plans read through. */
#include "graph/graph.h"

#include <stdlib.h>

typedef struct rule {
    hx_op op;         /* the node lowered */
    int via;          /* its source that must be... */
    hx_op via_op;     /* ...the output of this op */
    hx_lower_kind kind;
    int8_t path[2][2];
} rule;

static const rule rules[] = {
    {HX_OP_CONV_GEMM, 0, HX_OP_IM2COL, HX_LOWER_CONV2D, {{0, 0}, {1, -1}}},
    {HX_OP_COL2IM, 0, HX_OP_CONV_GEMM_BACKWARD_COLS, HX_LOWER_CONV2D_BACKWARD_DATA, {{0, 0}, {0, 1}}},
    {HX_OP_CONV_GEMM_BACKWARD_W, 1, HX_OP_IM2COL, HX_LOWER_CONV2D_BACKWARD_FILTER, {{0, -1}, {1, 0}}},
};
enum { N_RULES = sizeof rules / sizeof rules[0] };

static const rule *rule_of(const hx_tensor *t)
{
    for (int r = 0; r < N_RULES; r++)
        if (rules[r].op == t->op && t->src[rules[r].via]->op == rules[r].via_op) return &rules[r];
    return NULL;
}

hx_status hx__lower(const hx_graph *g, const hx_target *target, hx_has_kernel_fn has_kernel,
                    void *ctx, hx_lowered **out, int *n_lowered)
{
    *out = NULL;
    *n_lowered = 0;
    hx_lowered *low = NULL;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        const rule *r = target[i] == HX_TARGET_DEVICE ? rule_of(t) : NULL;
        if (!r || !has_kernel(ctx, HX_TARGET_DEVICE, HX_LOWERED_OP(r->kind), t->dtype)) continue;
        if (!low && !(low = calloc((size_t)g->n, sizeof *low)))
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
        low[i].kind = (int8_t)r->kind;
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 2; k++) low[i].path[j][k] = r->path[j][k];
        ++*n_lowered;
    }
    *out = low;
    return HX_OK;
}

size_t hx__lowered_workspace(const hx_tensor *t, hx_lower_kind kind)
{
    switch (kind) {
    case HX_LOWER_CONV2D:
    case HX_LOWER_CONV2D_BACKWARD_DATA: return hx_tensor_nbytes(t->src[0]);
    case HX_LOWER_CONV2D_BACKWARD_FILTER: return hx_tensor_nbytes(t->src[1]);
    default: return 0;
    }
}

const char *hx__lower_name(hx_lower_kind kind)
{
    switch (kind) {
    case HX_LOWER_CONV2D: return "cuDNN convolution forward";
    case HX_LOWER_CONV2D_BACKWARD_DATA: return "cuDNN convolution backward data";
    case HX_LOWER_CONV2D_BACKWARD_FILTER: return "cuDNN convolution backward filter";
    default: return "none";
    }
}

const char *hx__lower_why_not(const hx_tensor *t, const hx_target *target, const hx_lowered *low,
                              hx_has_kernel_fn has_kernel, void *ctx)
{
    if (target[t->id] != HX_TARGET_DEVICE || (low && low[t->id].kind)) return NULL;
    if (t->op == HX_OP_IM2COL) return NULL; /* its readers say */
    const rule *r = rule_of(t);
    if (!r) {
        bool conv = t->op == HX_OP_CONV_GEMM || t->op == HX_OP_COL2IM ||
                    t->op == HX_OP_CONV_GEMM_BACKWARD_W;
        return conv ? "its columns are not an im2col's (another op made or summed them)" : NULL;
    }
    return has_kernel(ctx, HX_TARGET_DEVICE, HX_LOWERED_OP(r->kind), t->dtype)
                   ? NULL
                   : "the device has no cuDNN convolution for this dtype (not a cuda "
                     "accelerator, or hetex was built without cuDNN)";
}
