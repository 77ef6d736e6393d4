/* A GPT graph with its optimizer and a session over it. */
#include "gpt.h"

#include <string.h>

/* AdamW on every parameter, weight decay on matrices only. With offload
 * none the updates (and so the parameters and moments) sit on the device;
 * with offload optimizer they stay on the host, their default. */
static hx_status add_optimizer(hx_graph *g, const gpt_model *m, const gpt_optim *o,
                               hx_target where)
{
    hx_optimizer_config c = hx_optimizer_config_default(HX_OPTIMIZER_ADAMW);
    c.lr = o->lr;
    c.beta1 = o->beta1;
    c.beta2 = o->beta2;
    bool on_device = o->offload == GPT_OFFLOAD_NONE;
    hx_status st = on_device ? hx_graph_push_target(g, where) : HX_OK;
    for (int i = 0; i < m->n_tensors && !st; i++) {
        c.weight_decay = gpt_param_decays(m->params[i]) ? o->weight_decay : 0;
        st = hx_graph_apply_optimizer(g, m->params[i], &c);
    }
    hx_status pop = on_device ? hx_graph_pop_target(g) : HX_OK;
    return st ? st : pop;
}

hx_status gpt_run_create(const gpt_config *c, const gpt_optim *o, const hx_session_config *sc,
                         gpt_run *r)
{
    memset(r, 0, sizeof *r);
    r->g = hx_graph_create();
    hx_target where = c->placement ? c->placement : HX_TARGET_DEVICE;
    hx_status st = r->g ? hx_graph_push_target(r->g, where) : HX_ERR_OUT_OF_MEMORY;
    if (!st) st = gpt_build(r->g, c, &r->m);
    if (!st) st = hx_graph_pop_target(r->g);
    if (!st) st = hx_graph_backward(r->g, r->m.loss);
    if (!st) st = add_optimizer(r->g, &r->m, o, where);
    if (!st) st = hx_session_create(r->g, sc, &r->s);
    if (st) gpt_run_free(r);
    return st;
}

void gpt_run_free(gpt_run *r)
{
    hx_session_free(r->s);
    hx_graph_free(r->g);
    gpt_model_free(&r->m);
    memset(r, 0, sizeof *r);
}
