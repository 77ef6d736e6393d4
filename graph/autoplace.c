/* The placement planner's problem from a graph: one node per tensor, in
 * creation order (a topological order); the AUTO nodes that must move
 * together share a group (a parameter with its optimizer update and state,
 * which write it in place; batchnorm with its running statistics); every
 * other node is fixed where the rules put it. A recomputed op costs
 * nothing (only recomputing sessions run it, and then beside its original). */
#include "graph/graph.h"

#include <math.h>
#include <stdlib.h>

void hx__ap_problem_free(hx_ap_problem *p)
{
    if (!p) return;
    free(p->node);
    free(p->src);
    p->node = NULL;
    p->src = NULL;
}

static int root(int *up, int i)
{
    while (up[i] != i) i = up[i] = up[up[i]];
    return i;
}

static void join(int *up, int a, int b)
{
    a = root(up, a);
    b = root(up, b);
    if (a != b) up[a > b ? a : b] = a < b ? a : b;
}

static bool pending(const hx_target *target, const hx_place_why *why, int i)
{
    return target[i] == HX_TARGET_AUTO && why[i] == HX_WHY_AUTO;
}

hx_status hx__ap_build(const hx_graph *g, const hx_target *target, const hx_place_why *why,
                       const hx_place_opts *o, hx_ap_cost_fn cost, void *ctx,
                       hx_ap_problem *out, int *group_of)
{
    int n = g->n;
    size_t nz = n ? (size_t)n : 1, edges = 1;
    for (int i = 0; i < n; i++) edges += (size_t)g->tensors[i]->n_src;
    *out = (hx_ap_problem){.n = n};
    out->node = calloc(nz, sizeof *out->node);
    out->src = malloc(sizeof *out->src * edges);
    int *up = malloc(sizeof *up * nz);
    if (!out->node || !out->src || !up) {
        free(up);
        hx__ap_problem_free(out);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "placement planner: out of host memory");
    }
    for (int i = 0; i < n; i++) up[i] = i;
    for (int i = 0; i < n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (!pending(target, why, i)) continue;
        if (t->kind == HX_TENSOR_UPDATE) {
            join(up, i, t->param->id);
            for (int k = 2; k < t->n_src; k++)
                if (t->src[k]->kind == HX_TENSOR_STATE) join(up, i, t->src[k]->id);
        } else if (t->op == HX_OP_BATCHNORM) {
            join(up, i, t->src[3]->id);
            join(up, i, t->src[4]->id);
        }
    }
    int ng = 0;
    for (int i = 0; i < n; i++) group_of[i] = -1;
    for (int i = 0; i < n; i++) {
        if (!pending(target, why, i)) continue;
        int r = root(up, i);
        if (group_of[r] < 0) group_of[r] = ng++;
        group_of[i] = group_of[r];
    }
    free(up);
    size_t e = 0;
    for (int i = 0; i < n; i++) {
        const hx_tensor *t = g->tensors[i];
        hx_ap_node *a = &out->node[i];
        a->group = group_of[i];
        a->side = target[i] == HX_TARGET_DEVICE ? 1 : 0;
        a->leaf = t->op <= HX_OP_STATE;
        a->persistent = t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE ||
                        t->kind == HX_TENSOR_CONSTANT;
        a->phase1 = t->kind == HX_TENSOR_UPDATE;
        a->bytes = hx_tensor_nbytes(t);
        a->first_src = (int)e;
        a->n_src = t->n_src;
        for (int k = 0; k < t->n_src; k++) out->src[e++] = t->src[k]->id;
        if (a->leaf || t->recompute_of) continue;
        for (int s = 0; s < 2; s++) {
            bool can = a->group >= 0 ? o->has_kernel(o->ctx, s ? HX_TARGET_DEVICE : HX_TARGET_CPU,
                                                      t->op, t->dtype)
                                     : s == a->side;
            a->cost[s] = can ? cost(ctx, t, s ? HX_TARGET_DEVICE : HX_TARGET_CPU) : INFINITY;
        }
    }
    out->n_groups = ng;
    return HX_OK;
}
