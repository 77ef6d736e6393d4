/* How a plan is described to people: its copies on stderr
 * (HX_DEBUG=placement), its counts, Graphviz DOT and a text summary (with
 * the executor's units: "u:lane(n steps; after p@k ...)" waits for unit p
 * before its step k), with the engine's placement and device names. */
#include "scheduler/plan.h"

#include <stdio.h>

/* The engine's device names, indexed like its backends. */
static void dev_names(const hx_engine *e, const char *names[HX_NDEV])
{
    for (int d = 0; d < HX_NDEV; d++) names[d] = e->be[d] ? e->be[d]->name : NULL;
}

/* The first step after k that reads the copy made at step k (an
 * activation out: the copy back). */
static const hx_tensor *copy_reader(const hx_engine *e, const hx_plan *p, int k)
{
    const hx_step *c = &p->steps[k];
    for (int j = k + 1; p->step_role[k] == HX_ROLE_ACT_OUT && j < p->n_steps; j++)
        if (p->step_role[j] == HX_ROLE_ACT_IN && p->steps[j].node == c->node) {
            k = j;
            c = &p->steps[j];
        }
    for (int j = k + 1; j < p->n_steps; j++) {
        const hx_step *sp = &p->steps[j];
        for (int i = 0; sp->fn && sp->dev == c->dev && i < hx__n_reads(e, sp->node); i++)
            if (hx__read(e, sp->node, i) == c->node) return sp->node;
    }
    return c->node;
}

const char *hx__copy_role_name(char role)
{
    switch (role) {
    case HX_ROLE_STREAM_IN: return "parameter streamed in";
    case HX_ROLE_GRAD_OUT: return "gradient out for the host update";
    case HX_ROLE_ACT_OUT: return "activation out";
    case HX_ROLE_ACT_IN: return "activation back";
    default: return NULL;
    }
}

/* Why step k copies: its role, with the chunk where offload put it. */
static void copy_cause(const hx_plan *p, int k, char *buf, size_t n)
{
    const hx_step *c = &p->steps[k];
    const char *role = hx__copy_role_name(p->step_role[k]);
    int chunk = p->step_chunk ? p->step_chunk[k] : -1;
    if (!role) {
        snprintf(buf, n, "%s", c->dev == HX_DEV_ACCEL ? "read on the device" : "read on the host");
    } else if (p->step_role[k] == HX_ROLE_ACT_OUT) {
        int back = -1;
        for (int j = k + 1; j < p->n_steps && back < 0; j++)
            if (p->step_role[j] == HX_ROLE_ACT_IN && p->steps[j].node == c->node) back = j;
        snprintf(buf, n, "%s: made in chunk %d, read again from chunk %d", role, chunk,
                 back >= 0 && p->step_chunk ? p->step_chunk[back] : -1);
    } else if (chunk >= 0) {
        snprintf(buf, n, "%s, chunk %d", role, chunk);
    } else {
        snprintf(buf, n, "%s", role);
    }
}

void hx__plan_debug_copies(const hx_engine *e, const hx_plan *p)
{
    const char *dev_name[HX_NDEV];
    dev_names(e, dev_name);
    for (int k = 0; k < p->n_steps; k++) {
        const hx_step *sp = &p->steps[k];
        if (sp->fn) continue;
        const hx_tensor *r = copy_reader(e, p, k);
        char cause[160];
        copy_cause(p, k, cause, sizeof cause);
        fprintf(stderr, "hetex copy: '%s' %s -> %s (%zu bytes): read by '%s' (%s) on %s; %s\n",
                sp->node->name, dev_name[sp->src_dev], dev_name[sp->dev],
                hx_tensor_nbytes(sp->node), r->name, hx__ops[r->op].name,
                hx_target_name(e->target[r->id]), cause);
    }
    if (p->n_act)
        fprintf(stderr, "hetex copy: %d activations out and back, %zu bytes each way per run, "
                "%d chunks\n", p->n_act, p->act_bytes, p->n_chunks);
}

void hx__plan_stats(const hx_plan *p, hx_placement_stats *out)
{
    *out = (hx_placement_stats){.n_subgraphs = p->part.n_sub, .n_copies = p->n_copies,
                                .n_h2d = p->n_h2d, .n_d2h = p->n_d2h, .copy_bytes = p->copy_bytes};
    for (int k = 0; k < p->n_steps; k++) {
        out->n_ops += p->steps[k].fn != NULL;
        out->n_device_ops += p->steps[k].fn && p->steps[k].dev == HX_DEV_ACCEL;
    }
    for (int i = 0; i < p->part.n_sub; i++)
        out->n_device_subgraphs += p->part.sub_target[i] == HX_TARGET_DEVICE;
}

void hx__plan_write_dot(FILE *f, const hx_engine *e, const hx_plan *p)
{
    const hx_graph *g = e->g;
    const char *dev_name[HX_NDEV];
    dev_names(e, dev_name);
    fprintf(f, "digraph hetex {\n  rankdir=TB;\n  node [shape=box, style=filled];\n");
    for (int sg = 0; sg < p->part.n_sub; sg++) {
        bool dev = p->part.sub_target[sg] == HX_TARGET_DEVICE;
        fprintf(f, "  subgraph cluster_%d {\n    label=\"subgraph %d (%s)\";\n", sg, sg,
                dev ? dev_name[HX_DEV_ACCEL] : "cpu");
        for (int i = 0; i < g->n; i++)
            if (p->part.sub_of[i] == sg)
                fprintf(f, "    t%d [label=\"%s\\n%s\", fillcolor=\"%s\"];\n", i, g->tensors[i]->name,
                        hx__ops[g->tensors[i]->op].name, dev ? "palegreen" : "lightblue");
        fprintf(f, "  }\n");
    }
    for (int k = 0; k < p->n_steps; k++) { /* edges; copies as their own nodes */
        const hx_step *sp = &p->steps[k];
        const hx_tensor *t = sp->node;
        if (!sp->fn) {
            fprintf(f, "  c%d [label=\"copy %s->%s\\n%zu bytes\", shape=cds, fillcolor=orange];\n",
                    k, dev_name[sp->src_dev], dev_name[sp->dev], hx_tensor_nbytes(t));
            fprintf(f, "  t%d -> c%d;\n", t->id, k);
            continue;
        }
        for (int j = 0; j < hx__n_reads(e, t); j++) {
            const hx_tensor *u = hx__read(e, t, j);
            if (u->op <= HX_OP_STATE && p->part.sub_of[u->id] < 0)
                fprintf(f, "  t%d [label=\"%s\\n%s\", shape=ellipse, fillcolor=%s];\n", u->id,
                        u->name, hx__ops[u->op].name,
                        e->target[u->id] == HX_TARGET_DEVICE ? "palegreen" : "lightblue");
            int c = -1;
            for (int q = 0; q < k && hx__dev_of(e, u->id) != sp->dev; q++)
                if (!p->steps[q].fn && p->steps[q].node == u && p->steps[q].dev == sp->dev) c = q;
            if (c >= 0) fprintf(f, "  c%d -> t%d;\n", c, t->id);
            else fprintf(f, "  t%d -> t%d;\n", u->id, t->id);
        }
    }
    fprintf(f, "}\n");
}

void hx__plan_write_summary(FILE *f, const hx_engine *e, const hx_plan *p)
{
    const hx_graph *g = e->g;
    const char *dev_name[HX_NDEV];
    dev_names(e, dev_name);
    fprintf(f, "hetex plan: %d steps, %d subgraphs, %d copies (%d h2d, %d d2h), %zu bytes "
            "copied per step\n", p->n_steps, p->part.n_sub, p->n_copies, p->n_h2d, p->n_d2h,
            p->copy_bytes);
    static const char *lane[HX_NLANES] = {"host", "device", "h2d copy", "d2h copy"};
    for (int ph = 0; ph < 2; ph++) {
        fprintf(f, "phase %d (%s): host lanes %d x %d threads, device %d threads; units:", ph,
                ph ? "updates" : "forward and backward", p->host_lanes[ph], p->threads[ph][0],
                p->threads[ph][1]);
        for (int u = p->first_unit[ph]; u < p->first_unit[ph + 1]; u++) {
            const hx_unit *x = &p->units[u];
            fprintf(f, " %d:%s(%d steps", u, lane[x->lane], x->n_steps);
            for (int j = 0; j < x->n_pred; j++)
                fprintf(f, "%s%d@%d", j ? " " : "; after ", p->links[x->first_pred + j],
                        p->link_at[x->first_pred + j]);
            fprintf(f, ")");
        }
        fprintf(f, "\n");
    }
    for (int sg = 0; sg < p->part.n_sub; sg++) {
        fprintf(f, "subgraph %d on %s: %d ops; after", sg,
                hx_target_name(p->part.sub_target[sg]), p->part.sub_ops[sg]);
        int n_dep = 0;
        for (int b = 0; b < p->part.n_sub; b++)
            if (p->part.dep[(size_t)sg * p->part.n_sub + b]) fprintf(f, " %d", b), n_dep++;
        fprintf(f, "%s\n", n_dep ? "" : " nothing");
        for (int i = 0; i < g->n; i++)
            if (p->part.sub_of[i] == sg)
                fprintf(f, "  %s (%s)\n", g->tensors[i]->name, hx__ops[g->tensors[i]->op].name);
    }
    for (int k = 0; k < p->n_steps; k++)
        if (!p->steps[k].fn)
            fprintf(f, "copy '%s' %s -> %s: %zu bytes\n", p->steps[k].node->name,
                    dev_name[p->steps[k].src_dev], dev_name[p->steps[k].dev],
                    hx_tensor_nbytes(p->steps[k].node));
}
