/* The ResNet graph with its gradients and optimizer, a session over it, and
 * its accuracy on a set. */
#include "resnet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double resnet_lr_scale(const resnet_optim *o, int64_t step, int64_t total)
{
    if (step < o->warmup) return (double)(step + 1) / (double)o->warmup;
    double t = total > o->warmup ? (double)(step - o->warmup) / (double)(total - o->warmup) : 1;
    return 0.5 * (1 + cos(3.14159265358979323846 * (t < 1 ? t : 1)));
}

/* SGD with Nesterov momentum on the device: weight decay on the weights only. */
static hx_status add_optimizer(hx_graph *g, const resnet_model *m, const resnet_optim *o)
{
    hx_optimizer_config c = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    c.lr = o->lr;
    c.momentum = o->momentum;
    c.nesterov = o->momentum > 0;
    hx_status st = hx_graph_push_target(g, HX_TARGET_DEVICE);
    for (int i = 0; i < m->n_weights + m->n_others && !st; i++) {
        bool w = i < m->n_weights;
        c.weight_decay = w ? o->weight_decay : 0;
        st = hx_graph_apply_optimizer(g, w ? m->weights[i] : m->others[i - m->n_weights], &c);
    }
    hx_status pop = hx_graph_pop_target(g);
    return st ? st : pop;
}

hx_status resnet_run_graph(const resnet_config *c, const resnet_optim *o, resnet_run *r)
{
    memset(r, 0, sizeof *r);
    r->g = hx_graph_create();
    hx_status st = r->g ? hx_graph_push_target(r->g, HX_TARGET_DEVICE) : HX_ERR_OUT_OF_MEMORY;
    if (!st) st = resnet_build(r->g, c, &r->m);
    if (!st) st = hx_graph_pop_target(r->g);
    if (!st) st = hx_graph_backward(r->g, r->m.loss);
    if (!st) st = add_optimizer(r->g, &r->m, o);
    if (st) resnet_run_free(r);
    return st;
}

hx_status resnet_run_create(const resnet_config *c, const resnet_optim *o,
                            const hx_session_config *sc, resnet_run *r)
{
    hx_status st = resnet_run_graph(c, o, r);
    if (!st) st = hx_session_create(r->g, sc, &r->s);
    if (st) resnet_run_free(r);
    return st;
}

void resnet_run_free(resnet_run *r)
{
    hx_session_free(r->s);
    hx_graph_free(r->g);
    resnet_model_free(&r->m);
    memset(r, 0, sizeof *r);
}

hx_status resnet_accuracy(resnet_run *r, int B, const resnet_set *s, int64_t n, float *x,
                          int32_t *y, double *acc)
{
    float *logits = malloc(sizeof *logits * (size_t)B * RESNET_CLASSES);
    int64_t *order = malloc(sizeof *order * (size_t)B), right = 0;
    hx_status st = logits && order ? HX_OK : HX_ERR_OUT_OF_MEMORY;
    for (int64_t start = 0; start < n && !st; start += B) {
        for (int b = 0; b < B; b++) order[b] = start + b < n ? start + b : 0; /* padding: image 0 */
        resnet_batch(s, order, 0, B, 0, x, y);
        hx_feed feeds[2] = {{NULL, r->m.images, x, sizeof *x * (size_t)B * RESNET_PIXELS},
                            {NULL, r->m.labels, y, sizeof *y * (size_t)B}};
        hx_fetch f = {NULL, r->m.logits, logits, sizeof *logits * (size_t)B * RESNET_CLASSES};
        st = hx_session_run(r->s, feeds, 2, &f, 1, 0);
        for (int b = 0; b < B && start + b < n && !st; b++) {
            const float *l = logits + (size_t)b * RESNET_CLASSES;
            int best = 0;
            for (int k = 1; k < RESNET_CLASSES; k++)
                if (l[k] > l[best]) best = k;
            right += best == y[b];
        }
    }
    free(logits);
    free(order);
    *acc = n && !st ? (double)right / (double)n : 0;
    return st;
}
