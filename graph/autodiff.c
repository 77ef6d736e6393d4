/* Reverse-mode autodiff over the graph, and optimizer update nodes. */
#include "graph/graph.h"
#include "embedding/embedding.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_leaf(const hx_tensor *t) { return t->op <= HX_OP_STATE; }

/* Marks tensors whose value depends on a parameter or an embedding table
 * (float tensors only). */
static void mark_requires_grad(const hx_graph *g, int n, bool *req)
{
    for (int i = 0; i < n; i++) {
        const hx_tensor *t = g->tensors[i];
        req[i] = t->kind == HX_TENSOR_PARAMETER ||
                 t->op == HX_OP_EMBEDDING_LOOKUP || t->op == HX_OP_EMBEDDING_BAG;
        for (int k = 0; !req[i] && k < t->n_src && !is_leaf(t); k++) req[i] = req[t->src[k]->id];
        req[i] = req[i] && hx__is_float(t->dtype) && t->kind != HX_TENSOR_UPDATE;
    }
}

/* a + b for two gradients of one tensor: f32 arithmetic, so half-precision
 * gradients are widened, summed and rounded back once. */
static hx_tensor *accumulate(hx_graph *g, hx_tensor *a, hx_tensor *b)
{
    if (a->dtype == HX_DTYPE_F32) return hx_add(g, a, b);
    return hx_cast(g, hx_add(g, hx_cast(g, a, HX_DTYPE_F32), hx_cast(g, b, HX_DTYPE_F32)),
                   a->dtype);
}

/* Builds the gradients of node t's inputs from its gradient and adds them
 * into grad[]. Runs with t's target as the scoped default, so gradient nodes
 * inherit the target of their forward op. */
static hx_status backprop_node(hx_graph *g, hx_tensor *t, hx_tensor **grad, const bool *req)
{
    const hx_op_info *info = &hx__ops[t->op];
    bool needs[t->n_src];
    hx_tensor *dsrc[t->n_src];
    bool any = false;
    for (int k = 0; k < t->n_src; k++) {
        needs[k] = req[t->src[k]->id];
        dsrc[k] = NULL;
        any |= needs[k];
    }
    if (!any) return HX_OK;
    if (!info->backward)
        return hx__error(HX_ERR_UNSUPPORTED,
                         "hx_graph_backward: op '%s' (%s) has no gradient rule", t->name,
                         info->name);
    hx_status st = hx_graph_push_target(g, t->target);
    if (st) return st;
    st = info->backward(g, t, grad[t->id], needs, dsrc);
    for (int k = 0; !st && k < t->n_src; k++) {
        if (!needs[k]) continue;
        if (!dsrc[k]) { st = HX_ERR_INTERNAL; break; } /* the builder set the message */
        int s = t->src[k]->id;
        grad[s] = grad[s] ? accumulate(g, grad[s], dsrc[k]) : dsrc[k];
        if (!grad[s]) st = HX_ERR_INTERNAL;
    }
    hx_graph_pop_target(g);
    return st;
}

hx_status hx_graph_backward(hx_graph *g, hx_tensor *loss)
{
    hx_tensor *src[1] = {loss};
    hx_status st = hx__check_srcs(g, "hx_graph_backward", 1, src);
    if (st) return st;
    if (g->has_backward)
        return hx__error(HX_ERR_STATE,
                         "hx_graph_backward: the graph already has gradients; it is called once "
                         "per graph (sum several losses into one first)");
    char sl[HX_SHAPE_STR_LEN];
    if (loss->dtype != HX_DTYPE_F32 || hx_tensor_numel(loss) != 1)
        return hx__error(HX_ERR_SHAPE,
                         "hx_graph_backward: loss '%s' is %s %s; it must be an f32 scalar "
                         "(reduce it with hx_reduce_mean or hx_reduce_sum)", loss->name,
                         hx_dtype_name(loss->dtype), hx__shape_str(loss, sl, sizeof sl));
    if (is_leaf(loss)) /* its gradient would be the seed itself, which no op writes */
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_graph_backward: loss '%s' is %s, not computed by an op; pass "
                         "the op that computes the loss (a parameter alone: hx_reduce_sum of it)",
                         loss->name, loss->op == HX_OP_PARAM ? "a parameter"
                                     : loss->op == HX_OP_INPUT ? "an input"
                                     : loss->op == HX_OP_CONSTANT ? "a constant" : "optimizer state");

    int n0 = g->n;
    bool *req = calloc(n0, sizeof *req);
    hx_tensor **grad = calloc(n0, sizeof *grad);
    if (!req || !grad) {
        free(req);
        free(grad);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_graph_backward: out of host memory");
    }
    mark_requires_grad(g, n0, req);
    if (!req[loss->id]) {
        st = hx__error(HX_ERR_INVALID_ARGUMENT,
                       "hx_graph_backward: loss '%s' does not depend on any parameter or "
                       "embedding table",
                       loss->name);
        goto out;
    }

    char seed_name[512];
    snprintf(seed_name, sizeof seed_name, "%s/grad_seed", loss->name);
    const float one = 1.0f;
    int open_block = g->open_block; /* gradients belong to no recompute block */
    g->open_block = 0;
    hx_recompute *rc = hx__recompute_begin(g, n0, loss);
    if (rc) grad[loss->id] = hx_graph_constant(g, seed_name, HX_DTYPE_F32, loss->ndim, loss->shape,
                                               &one);
    st = !rc ? HX_ERR_OUT_OF_MEMORY : grad[loss->id] ? HX_OK : HX_ERR_INTERNAL;
    for (int i = loss->id; !st && i >= 0; i--) {
        hx_tensor *t = g->tensors[i];
        if (!grad[i] || is_leaf(t)) continue;
        st = hx__recompute_before(g, rc, t);
        if (!st) st = backprop_node(g, t, grad, req);
    }
    hx__recompute_end(g, rc, st != HX_OK);
    g->open_block = open_block;
    if (st) {
        hx__graph_truncate(g, n0);
        goto out;
    }
    for (int i = 0; i < n0; i++) g->tensors[i]->grad = grad[i];
    g->has_backward = true;
    g->grad_seed = grad[loss->id];
out:
    free(req);
    free(grad);
    return st;
}

hx_tensor *hx_tensor_grad(const hx_tensor *t)
{
    if (!t) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "hx_tensor_grad: tensor is NULL");
        return NULL;
    }
    if (!t->grad)
        hx__error(HX_ERR_NOT_FOUND,
                  t->graph->has_backward
                      ? "hx_tensor_grad: '%s' has no gradient: it does not reach the loss (or "
                        "is not a float tensor that depends on a parameter)"
                      : "hx_tensor_grad: '%s' has no gradient yet: call hx_graph_backward first",
                  t->name);
    return t->grad;
}

/* ---- optimizers ----------------------------------------------------------------- */

hx_optimizer_config hx_optimizer_config_default(hx_optimizer_kind kind)
{
    hx_optimizer_config c = {.kind = kind, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    switch (kind) {
    case HX_OPTIMIZER_SGD: break;
    case HX_OPTIMIZER_ADAM: c.lr = 1e-3; break;
    case HX_OPTIMIZER_ADAMW: c.lr = 1e-3; c.weight_decay = 1e-2; break;
    case HX_OPTIMIZER_ADAGRAD: c.eps = 1e-10; break;
    case HX_OPTIMIZER_FTRL: c.lr = 1e-3; c.initial_accumulator = 0.1; break;
    }
    return c;
}

static bool nonneg(double x) { return x >= 0 && isfinite(x); }

static hx_status check_config(const hx_optimizer_config *c)
{
    if (!c) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_apply_optimizer: config is NULL");
    if ((unsigned)c->kind > HX_OPTIMIZER_FTRL)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_graph_apply_optimizer: unknown optimizer kind %d", (int)c->kind);
    bool ok = nonneg(c->lr) && nonneg(c->weight_decay) && nonneg(c->momentum) &&
              isfinite(c->dampening) && c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 &&
              c->beta2 < 1 && nonneg(c->eps) && nonneg(c->lr_decay) &&
              nonneg(c->initial_accumulator) && nonneg(c->l1) && nonneg(c->l2) &&
              nonneg(c->l2_shrinkage);
    if (!ok)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_graph_apply_optimizer: hyper-parameters out of range (lr %g, "
                         "weight_decay %g, momentum %g, beta1 %g, beta2 %g, eps %g): rates and "
                         "decays must be finite and >= 0, betas in [0, 1)", c->lr,
                         c->weight_decay, c->momentum, c->beta1, c->beta2, c->eps);
    if (c->kind == HX_OPTIMIZER_SGD && c->nesterov && (c->momentum <= 0 || c->dampening != 0))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_graph_apply_optimizer: Nesterov momentum needs momentum > 0 and "
                         "dampening 0");
    if (c->kind == HX_OPTIMIZER_FTRL && c->lr <= 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_apply_optimizer: FTRL needs lr > 0");
    return HX_OK;
}

static bool has_update(const hx_graph *g, const hx_tensor *p)
{
    for (int i = p->id + 1; i < g->n; i++)
        if (g->tensors[i]->kind == HX_TENSOR_UPDATE && g->tensors[i]->param == p) return true;
    return false;
}

/* The update node and its state: srcs are param, grad, then the state
 * tensors in the order the kernel takes them. */
static hx_status add_update(hx_graph *g, hx_tensor *p, const hx_optimizer_config *c)
{
    static const struct { hx_op op; const char *state[2]; } kinds[] = {
        [HX_OPTIMIZER_SGD] = {HX_OP_SGD_UPDATE, {"momentum", NULL}},
        [HX_OPTIMIZER_ADAM] = {HX_OP_ADAM_UPDATE, {"exp_avg", "exp_avg_sq"}},
        [HX_OPTIMIZER_ADAMW] = {HX_OP_ADAM_UPDATE, {"exp_avg", "exp_avg_sq"}},
        [HX_OPTIMIZER_ADAGRAD] = {HX_OP_ADAGRAD_UPDATE, {"sum", NULL}},
        [HX_OPTIMIZER_FTRL] = {HX_OP_FTRL_UPDATE, {"accum", "linear"}},
    };
    hx_tensor *src[4] = {p, p->grad};
    int n = 2;
    for (int k = 0; k < 2 && kinds[c->kind].state[k]; k++) {
        if (c->kind == HX_OPTIMIZER_SGD && c->momentum == 0) break;
        bool accum = (c->kind == HX_OPTIMIZER_ADAGRAD || c->kind == HX_OPTIMIZER_FTRL) && k == 0;
        hx_init init = accum ? hx_init_constant(c->initial_accumulator) : hx_init_zeros();
        if (!(src[n++] = hx__state_new(g, p, kinds[c->kind].state[k], init))) return HX_ERR_INTERNAL;
    }
    hx_optimizer_config *copy = malloc(sizeof *copy);
    if (!copy) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_graph_apply_optimizer: out of host memory");
    *copy = *c;
    hx_tensor *u = hx__node_new(g, kinds[c->kind].op, n, src, p->dtype, p->ndim, p->shape, NULL);
    if (!u) {
        free(copy);
        return HX_ERR_INTERNAL;
    }
    u->optimizer = copy;
    u->param = p;
    if (p->target != HX_TARGET_DEFAULT) u->target = p->target;
    for (int k = 2; k < n; k++) src[k]->target = u->target;
    return HX_OK;
}

static hx_status check_param(const hx_graph *g, const hx_tensor *p)
{
    if (p->graph != g || p->kind != HX_TENSOR_PARAMETER)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_graph_apply_optimizer: '%s' is not a parameter of this graph",
                         p->name);
    if (!p->grad)
        return hx__error(HX_ERR_NOT_FOUND,
                         "hx_graph_apply_optimizer: parameter '%s' has no gradient: it does "
                         "not reach the loss; remove it or use it", p->name);
    if (p->dtype != HX_DTYPE_F32)
        return hx__error(HX_ERR_DTYPE,
                         "hx_graph_apply_optimizer: parameter '%s' is %s; updates need an f32 "
                         "master (keep the parameter f32 and hx_cast it for use)", p->name,
                         hx_dtype_name(p->dtype));
    if (has_update(g, p))
        return hx__error(HX_ERR_STATE,
                         "hx_graph_apply_optimizer: parameter '%s' already has an optimizer",
                         p->name);
    return HX_OK;
}

/* ---- embedding tables ------------------------------------------------------------ */

static bool is_lookup(const hx_tensor *t)
{
    return t->op == HX_OP_EMBEDDING_LOOKUP || t->op == HX_OP_EMBEDDING_BAG;
}

/* Names u after its table: the session's gradient scan names the update's
 * "parameter" (u itself) when a gradient holds Inf or NaN. */
static void name_after_table(hx_tensor *u, const char *table)
{
    char name[512];
    snprintf(name, sizeof name, "%s", table);
    for (int k = 0; hx_tensor_set_name(u, name) && k < 100; k++)
        snprintf(name, sizeof name, "%s/update_%d", table, k);
    hx__clear_error();
}

/* One update node for table t over every lookup of t with a gradient:
 * src = ids of the first lookup, the gradient (one lookup's, or all of them
 * flattened and concatenated on the CPU), then the other lookups' ids and
 * every offsets and weights, and last the lookups themselves (so that they
 * run before the update even when no value needs their output: a DYNAMIC
 * table's forward gives new ids their rows); emb_update: where each
 * lookup's inputs are. Weights that are a parameter are read through a copy
 * made before any update runs (their own update may run first and change
 * them in place). */
static hx_status add_table_update(hx_graph *g, hx_embedding_table *t, int n0)
{
    int nl = 0;
    for (int i = 0; i < n0; i++) nl += g->tensors[i]->table == t && is_lookup(g->tensors[i]) &&
                                      g->tensors[i]->grad;
    if (!nl) return HX_OK;
    hx_emb_update_info *info = malloc(sizeof *info + sizeof info->src[0] * nl);
    hx_tensor **src = malloc(sizeof *src * (4 * nl + 1));
    hx_tensor **grads = malloc(sizeof *grads * nl);
    hx_status st = info && src && grads ? hx_graph_push_target(g, HX_TARGET_CPU)
                                        : hx__error(HX_ERR_OUT_OF_MEMORY,
                                                    "hx_graph_apply_optimizer: out of host memory");
    if (st) goto out;
    info->n = nl;
    int ns = 2, k = 0;
    int64_t off = 0;
    bool ok = true; /* false: a builder failed and set the message */
    for (int i = 0; i < n0 && ok; i++) {
        hx_tensor *l = g->tensors[i];
        if (l->table != t || !is_lookup(l) || !l->grad) continue;
        hx_emb_update_src *e = &info->src[k];
        *e = (hx_emb_update_src){l, k ? ns : 0, -1, -1, off};
        if (k) src[ns++] = l->src[0];
        if (l->n_src > 1) src[e->offsets = ns++] = l->src[1];
        if (l->n_src > 2) {
            hx_tensor *w = l->src[2];
            if (w->kind == HX_TENSOR_PARAMETER) ok = (w = hx_reshape(g, w, w->ndim, w->shape));
            src[e->weights = ns++] = w;
        }
        grads[k++] = l->grad;
        off += hx_tensor_numel(l);
    }
    src[0] = info->src[0].lookup->src[0];
    for (k = 0; k < nl; k++) src[ns++] = (hx_tensor *)info->src[k].lookup;
    if (ok && nl == 1) {
        src[1] = grads[0];
    } else if (ok) {
        for (k = 0; k < nl && ok; k++) {
            int64_t flat = hx_tensor_numel(grads[k]);
            ok = (grads[k] = hx_reshape(g, grads[k], 1, &flat));
        }
        ok = ok && (src[1] = hx_concat(g, nl, grads, 0));
    }
    hx_tensor *u = ok ? hx__node_new(g, HX_OP_EMBEDDING_UPDATE, ns, src, HX_DTYPE_F32,
                                     src[1]->ndim, src[1]->shape, NULL)
                      : NULL;
    hx_graph_pop_target(g);
    if (!u) {
        st = HX_ERR_INTERNAL;
        goto out;
    }
    u->emb_update = info;
    info = NULL;
    u->table = t;
    u->param = u;
    name_after_table(u, t->name);
out:
    free(info);
    free(src);
    free(grads);
    return st;
}

static bool table_has_update(const hx_graph *g, const hx_embedding_table *t)
{
    for (int i = 0; i < g->n; i++)
        if (g->tensors[i]->op == HX_OP_EMBEDDING_UPDATE && g->tensors[i]->table == t) return true;
    return false;
}

/* Update nodes for the tables of g that have an optimizer and none yet;
 * *added counts them. */
static hx_status add_table_updates(hx_graph *g, int n0, int *added)
{
    hx_status st = HX_OK;
    for (int i = 0; i < g->n_tables && !st; i++) {
        hx_embedding_table *t = g->tables[i].table;
        if (hx__embedding_optim_kind(t) == HX_EMB_OPTIM_NONE || table_has_update(g, t)) continue;
        int before = g->n;
        st = add_table_update(g, t, n0);
        *added += g->n > before;
    }
    return st;
}

/* ---- mixed precision ---------------------------------------------------------------- */

/* The one consumer of p other than its update, if it is a cast to f16 or
 * bf16 (the mixed-precision pattern: an f32 master used through its half
 * copy); else NULL. */
static hx_tensor *only_half_cast(const hx_graph *g, const hx_tensor *p)
{
    hx_tensor *cast = NULL;
    for (int i = p->id + 1; i < g->n; i++) {
        hx_tensor *t = g->tensors[i];
        if (t->kind == HX_TENSOR_UPDATE) continue;
        for (int k = 0; k < t->n_src; k++) {
            if (t->src[k] != p) continue;
            if (cast || t->op != HX_OP_CAST || t->dtype == HX_DTYPE_F32) return NULL;
            cast = t;
        }
    }
    return cast;
}

/* Fuses the half copy of u's parameter into u (ZeRO-Offload's fused
 * update): the cast becomes a state of the parameter that u writes as it
 * updates the master (the kernel rounds each new value into it), so it is
 * not recomputed every step, and where the parameter's gradient is only
 * the cast's gradient widened, u reads the half gradient itself. The
 * session sets the copy from the master at creation and on every
 * hx_session_write of the master. Best effort: without memory for the
 * longer source list nothing changes, and the unfused graph computes the
 * same values. */
static void fuse_half_copy(hx_graph *g, hx_tensor *u)
{
    hx_tensor *p = u->param, *c = only_half_cast(g, p);
    if (!c || u->attr.i[0]) return;
    hx_tensor **src = realloc(u->src, sizeof *src * (u->n_src + 1));
    if (!src) return;
    u->src = src;
    hx_tensor *half_grad = c->grad;
    u->attr.i[0] = u->n_src; /* where the half copy is among u's sources */
    src[u->n_src++] = c;
    if (half_grad && p->grad->op == HX_OP_CAST && p->grad->src[0] == half_grad) src[1] = half_grad;
    c->op = HX_OP_STATE;
    c->kind = HX_TENSOR_STATE;
    c->n_src = 0;
    c->param = p;
    c->init = hx_init_zeros();
    c->target = u->target;
}

hx_status hx_graph_apply_optimizer(hx_graph *g, hx_tensor *param, const hx_optimizer_config *cfg)
{
    hx_status st = hx__check_srcs(g, "hx_graph_apply_optimizer", 0, NULL);
    if (!st) st = check_config(cfg);
    if (st) return st;
    if (!g->has_backward)
        return hx__error(HX_ERR_STATE,
                         "hx_graph_apply_optimizer: the graph has no gradients; call "
                         "hx_graph_backward first");
    int n0 = g->n, added = 0;
    if (param) {
        st = check_param(g, param);
        if (!st) st = add_update(g, param, cfg);
    } else {
        for (int i = 0; i < n0 && !st; i++) {
            hx_tensor *p = g->tensors[i];
            if (p->kind != HX_TENSOR_PARAMETER || !p->grad || has_update(g, p)) continue;
            st = check_param(g, p);
            if (!st) st = add_update(g, p, cfg);
            added++;
        }
        if (!st) st = add_table_updates(g, n0, &added);
        if (!st && !added)
            return hx__error(HX_ERR_NOT_FOUND,
                             "hx_graph_apply_optimizer: no parameter without an optimizer has a "
                             "gradient, and no embedding table with an optimizer is looked up "
                             "on the loss's path");
    }
    if (st) {
        hx__graph_truncate(g, n0);
        return st;
    }
    for (int i = n0; i < g->n; i++)
        if (hx__is_dense_update(g->tensors[i])) fuse_half_copy(g, g->tensors[i]);
    return HX_OK;
}
