/* Placement: every node gets a concrete target and the reason for it.
 * Ops: their own attribute, else the scoped default, else the op's default
 * (AUTO with the session's auto_placement); an op with no kernel there is
 * an error, or with the fallback policy moves to the CPU. AUTO ops follow
 * the rules first (host-table ops stay on the host, no op goes where it has
 * no kernel) and are otherwise left to the planner (autoplace.c), whose
 * choice comes back in o->decided. Parameters: their own attribute, else
 * where their optimizer update runs (it writes them in place), else where
 * all their readers run (readers on both targets: the host, where the
 * memory is). Updates and optimizer state follow their parameter; inputs
 * and constants are host. */
#include "graph/graph.h"

#include <stdlib.h>

const char *hx__place_why_str(hx_place_why w)
{
    switch (w) {
    case HX_WHY_ATTRIBUTE: return "its target attribute";
    case HX_WHY_SCOPE: return "the scoped default target (hx_graph_push_target, or inherited by a gradient from its forward op)";
    case HX_WHY_OP_DEFAULT: return "the op's default target";
    case HX_WHY_NO_DEVICE: return "the session has no accelerator";
    case HX_WHY_FALLBACK: return "no kernel on its target; moved to the CPU by the fallback policy";
    case HX_WHY_PARAM_ATTRIBUTE: return "the parameter's target attribute";
    case HX_WHY_PARAM_UPDATE: return "its optimizer update runs there";
    case HX_WHY_PARAM_USERS: return "every op that reads it runs there";
    case HX_WHY_PARAM_MIXED: return "ops on both targets read it; it stays on the host";
    case HX_WHY_FOLLOWS_PARAM: return "it follows its parameter";
    case HX_WHY_HOST_LEAF: return "inputs and constants are host data";
    case HX_WHY_FOLLOWS_OP: return "the op that updates it in place runs there";
    case HX_WHY_OFFLOAD: return "offload_param: parameters, their state and updates live on the host";
    case HX_WHY_AUTO: return "auto: the planner's choice";
    case HX_WHY_AUTO_HOST_ONLY: return "auto: it works on a host table, so it stays on the host";
    case HX_WHY_AUTO_NO_KERNEL: return "auto: the other target has no kernel for it";
    }
    return "(unknown)";
}

static bool is_leaf(const hx_tensor *t) { return t->op <= HX_OP_STATE; }

/* The target an op asks for, before kernels are considered. */
static hx_target requested(const hx_tensor *t, const hx_place_opts *o, hx_place_why *why)
{
    if (t->target != HX_TARGET_DEFAULT) {
        *why = t->target_set ? HX_WHY_ATTRIBUTE : HX_WHY_SCOPE;
        return t->target;
    }
    *why = HX_WHY_OP_DEFAULT;
    return o->auto_default ? HX_TARGET_AUTO : hx__ops[t->op].default_target;
}

/* The rules for an AUTO op: host-table ops and ops with a kernel on one
 * target only are settled; the rest are the planner's (o->decided, or
 * AUTO left in *tgt when the planner has not run). */
static void resolve_auto(const hx_tensor *t, const hx_place_opts *o, hx_target *tgt,
                         hx_place_why *why)
{
    bool cpu = o->has_kernel(o->ctx, HX_TARGET_CPU, t->op, t->dtype);
    bool dev = o->has_kernel(o->ctx, HX_TARGET_DEVICE, t->op, t->dtype);
    if (hx__ops[t->op].host_only) {
        *tgt = HX_TARGET_CPU;
        *why = HX_WHY_AUTO_HOST_ONLY;
    } else if (cpu != dev) {
        *tgt = cpu ? HX_TARGET_CPU : HX_TARGET_DEVICE;
        *why = HX_WHY_AUTO_NO_KERNEL;
    } else {
        *tgt = o->decided ? o->decided[t->id] : HX_TARGET_AUTO;
        *why = HX_WHY_AUTO;
    }
}

bool hx__place_pending(const hx_tensor *t, const hx_place_opts *o)
{
    hx_place_why why;
    hx_target tgt = requested(t, o, &why);
    if (tgt != HX_TARGET_AUTO || !o->has_device) return false;
    resolve_auto(t, o, &tgt, &why);
    return why == HX_WHY_AUTO;
}

/* Checks the kernel on *tgt; applies the fallback policy. */
static hx_status settle(const hx_tensor *t, const hx_place_opts *o, hx_target *tgt,
                        hx_place_why *why)
{
    if (o->has_kernel(o->ctx, *tgt, t->op, t->dtype)) return HX_OK;
    if (*tgt == HX_TARGET_DEVICE && o->fallback_cpu &&
        o->has_kernel(o->ctx, HX_TARGET_CPU, t->op, t->dtype)) {
        *tgt = HX_TARGET_CPU;
        *why = HX_WHY_FALLBACK;
        return HX_OK;
    }
    return hx__error(HX_ERR_NO_KERNEL,
                     "placement: op '%s' (%s, %s) has no kernel on target '%s'; place it on the "
                     "%s with hx_tensor_set_target%s", t->name, hx__ops[t->op].name,
                     hx_dtype_name(t->dtype), hx_target_name(*tgt),
                     *tgt == HX_TARGET_DEVICE ? "CPU" : "device",
                     *tgt == HX_TARGET_DEVICE
                         ? ", or set hx_session_config.fallback = HX_FALLBACK_CPU"
                         : "");
}

static void place_params(const hx_graph *g, const hx_place_opts *o, hx_target *target,
                         hx_place_why *why, const hx_tensor **update_of)
{
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t->kind != HX_TENSOR_PARAMETER) continue;
        if (!o->has_device) {
            target[i] = HX_TARGET_CPU;
            why[i] = HX_WHY_NO_DEVICE;
        } else if (t->target != HX_TARGET_DEFAULT && t->target != HX_TARGET_AUTO) {
            target[i] = t->target;
            why[i] = HX_WHY_PARAM_ATTRIBUTE;
        } else if (t->target == HX_TARGET_AUTO ||
                   (update_of[i] && hx__place_pending(update_of[i], o))) {
            target[i] = o->decided ? o->decided[i] : HX_TARGET_AUTO; /* with its update */
            why[i] = HX_WHY_AUTO;
        } else if (update_of[i]) {
            hx_place_why w;
            target[i] = requested(update_of[i], o, &w);
            if (target[i] == HX_TARGET_AUTO) resolve_auto(update_of[i], o, &target[i], &w);
            why[i] = HX_WHY_PARAM_UPDATE;
        } else {
            hx_target seen = HX_TARGET_DEFAULT;
            bool mixed = false;
            for (int j = i + 1; j < g->n; j++) {
                const hx_tensor *u = g->tensors[j];
                for (int k = 0; k < u->n_src && u->kind != HX_TENSOR_UPDATE; k++)
                    if (u->src[k] == t) {
                        mixed |= seen != HX_TARGET_DEFAULT && seen != target[j];
                        seen = target[j];
                    }
            }
            target[i] = mixed || seen == HX_TARGET_DEFAULT ? HX_TARGET_CPU : seen;
            why[i] = mixed ? HX_WHY_PARAM_MIXED : HX_WHY_PARAM_USERS;
        }
    }
}

hx_status hx__place(const hx_graph *g, const hx_place_opts *o, hx_target *target,
                    hx_place_why *why)
{
    const hx_tensor **update_of = calloc(g->n ? g->n : 1, sizeof *update_of);
    if (!update_of) return hx__error(HX_ERR_OUT_OF_MEMORY, "placement: out of host memory");
    hx_status st = HX_OK;
    for (int i = 0; i < g->n && !st; i++) { /* ops other than updates */
        const hx_tensor *t = g->tensors[i];
        target[i] = HX_TARGET_CPU;
        why[i] = HX_WHY_HOST_LEAF;
        if (t->kind == HX_TENSOR_UPDATE) update_of[t->param->id] = t;
        if (is_leaf(t) || t->kind == HX_TENSOR_UPDATE) continue;
        target[i] = requested(t, o, &why[i]);
        if (!o->has_device) {
            target[i] = HX_TARGET_CPU;
            if (why[i] != HX_WHY_ATTRIBUTE || t->target != HX_TARGET_CPU) why[i] = HX_WHY_NO_DEVICE;
        }
        if (target[i] == HX_TARGET_AUTO) resolve_auto(t, o, &target[i], &why[i]);
        if (target[i] != HX_TARGET_AUTO) st = settle(t, o, &target[i], &why[i]);
    }
    if (!st) place_params(g, o, target, why, update_of);
    for (int i = 0; i < g->n && !st; i++) { /* updates and their state follow the parameter */
        const hx_tensor *t = g->tensors[i];
        if (t->kind != HX_TENSOR_UPDATE) continue;
        int p = t->param->id;
        target[i] = target[p];
        why[i] = HX_WHY_FOLLOWS_PARAM;
        if (target[i] != HX_TARGET_AUTO && (st = settle(t, o, &target[i], &why[i]))) break;
        if (target[i] != target[p]) { /* fell back: the parameter moves with it */
            target[p] = target[i];
            why[p] = HX_WHY_PARAM_UPDATE;
        }
        for (int k = 2; k < t->n_src; k++) {
            if (t->src[k]->kind != HX_TENSOR_STATE) continue; /* an embedding update's ids */
            target[t->src[k]->id] = target[i];
            why[t->src[k]->id] = target[i] == HX_TARGET_AUTO ? HX_WHY_AUTO : HX_WHY_FOLLOWS_PARAM;
        }
        if (target[i] == HX_TARGET_AUTO) why[i] = HX_WHY_AUTO; /* the planner's, with the parameter */
    }
    for (int i = 0; i < g->n && !st; i++) { /* batchnorm writes its running statistics */
        const hx_tensor *t = g->tensors[i];
        if (t->op != HX_OP_BATCHNORM) continue;
        for (int k = 3; k < 5; k++) {
            target[t->src[k]->id] = target[i];
            why[t->src[k]->id] = target[i] == HX_TARGET_AUTO ? HX_WHY_AUTO : HX_WHY_FOLLOWS_OP;
        }
    }
    free(update_of);
    return st;
}
