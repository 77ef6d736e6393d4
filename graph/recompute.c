/* Activation recomputation: the blocks that hx_graph_push_recompute marks,
 * and the forward ops autodiff emits again in backward for them. A block
 * keeps its inputs and its outputs (what ops outside it read); its
 * internal values are emitted a second time just before the block's
 * gradients are built, and the gradients read those (hx__src), so a
 * session that recomputes frees the originals once the forward has read
 * them. A dropout emitted again keeps its seed and mask stream: the same
 * mask, bitwise. */
#include "graph/graph.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

struct hx_recompute {
    int n0;
    bool *redo;    /* per tensor id < n0: recomputed */
    bool *emitted; /* per block */
};

hx_status hx_graph_push_recompute(hx_graph *g)
{
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_push_recompute: graph is NULL");
    if (g->open_block)
        return hx__error(HX_ERR_STATE,
                         "hx_graph_push_recompute: a recompute scope is open already (block %d); "
                         "scopes do not nest: pop it first", g->open_block);
    if (g->n_blocks == INT_MAX - 1)
        return hx__error(HX_ERR_STATE, "hx_graph_push_recompute: too many recompute blocks");
    g->open_block = ++g->n_blocks;
    return HX_OK;
}

hx_status hx_graph_pop_recompute(hx_graph *g)
{
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_pop_recompute: graph is NULL");
    if (!g->open_block)
        return hx__error(HX_ERR_STATE,
                         "hx_graph_pop_recompute: no recompute scope is open (pop without a push)");
    g->open_block = 0;
    return HX_OK;
}

static bool is_op(const hx_tensor *t) { return t->op > HX_OP_STATE; }

/* Ops that may run twice with the same result and no side effect: not a
 * batchnorm, which updates its running statistics as it runs. */
static bool replayable(const hx_tensor *t)
{
    return is_op(t) && t->kind != HX_TENSOR_UPDATE && !t->table && !hx__ops[t->op].host_only &&
           t->op != HX_OP_BATCHNORM;
}

hx_recompute *hx__recompute_begin(const hx_graph *g, int n0, const hx_tensor *loss)
{
    hx_recompute *r = calloc(1, sizeof *r);
    bool *outside = calloc(n0 ? n0 : 1, sizeof *outside); /* read by an op outside its block */
    bool *act = calloc(n0 ? n0 : 1, sizeof *act);         /* depends on an activation */
    if (r) r->redo = calloc(n0 ? n0 : 1, sizeof *r->redo);
    if (r) r->emitted = calloc((size_t)g->n_blocks + 1, sizeof *r->emitted);
    if (!r || !outside || !act || !r->redo || !r->emitted) {
        free(outside);
        free(act);
        if (r) free(r->redo), free(r->emitted), free(r);
        hx__error(HX_ERR_OUT_OF_MEMORY, "hx_graph_backward: out of host memory");
        return NULL;
    }
    r->n0 = n0;
    outside[loss->id] = true;
    for (int i = 0; i < n0; i++) {
        const hx_tensor *t = g->tensors[i];
        for (int k = 0; k < t->n_src; k++)
            if (t->src[k]->block != t->block) outside[t->src[k]->id] = true;
    }
    /* a block's activations: what depends on an op output from outside the
     * block (one of its inputs); a value made from leaves alone is kept */
    for (int i = 0; i < n0; i++) {
        const hx_tensor *t = g->tensors[i];
        for (int k = 0; k < t->n_src && is_op(t) && !act[i]; k++) {
            const hx_tensor *s = t->src[k];
            act[i] = is_op(s) && (s->block != t->block || act[s->id]);
        }
        r->redo[i] = t->block && act[i] && !outside[i] && replayable(t);
    }
    free(outside);
    free(act);
    return r;
}

/* "<name>/recompute", or the automatic name when that one is taken. */
static void name_recomputed(hx_tensor *c, const hx_tensor *t)
{
    char name[512];
    snprintf(name, sizeof name, "%s/recompute", t->name);
    if (hx_tensor_set_name(c, name)) hx__clear_error();
}

static hx_status emit_block(hx_graph *g, hx_recompute *r, int block)
{
    for (int i = 0; i < r->n0; i++) {
        hx_tensor *t = g->tensors[i];
        if (t->block != block || !r->redo[i]) continue;
        hx_tensor *src[t->n_src ? t->n_src : 1];
        for (int k = 0; k < t->n_src; k++)
            src[k] = t->src[k]->recomputed ? t->src[k]->recomputed : t->src[k];
        hx_tensor *c = hx__node_new(g, t->op, t->n_src, src, t->dtype, t->ndim, t->shape,
                                    &t->attr);
        if (!c) return HX_ERR_INTERNAL; /* the builder set the message */
        c->target = t->target;
        c->target_set = t->target_set;
        name_recomputed(c, t);
        t->recomputed = c;
        c->recompute_of = t;
    }
    return HX_OK;
}

hx_status hx__recompute_before(hx_graph *g, hx_recompute *r, const hx_tensor *t)
{
    if (!t->block || t->id >= r->n0 || r->emitted[t->block]) return HX_OK;
    r->emitted[t->block] = true;
    return emit_block(g, r, t->block);
}

void hx__recompute_end(hx_graph *g, hx_recompute *r, bool failed)
{
    if (!r) return;
    for (int i = 0; failed && i < r->n0; i++) g->tensors[i]->recomputed = NULL;
    free(r->redo);
    free(r->emitted);
    free(r);
}
