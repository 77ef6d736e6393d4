/* See deep_mlp.h. */
#include "deep_mlp.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hx_status deep_mlp_build(int batch, int width, int layers, deep_mlp *m)
{
    memset(m, 0, sizeof *m);
    m->g = hx_graph_create();
    m->w = calloc(layers, sizeof *m->w);
    m->b = calloc(layers, sizeof *m->b);
    m->layers = layers;
    if (!m->g || !m->w || !m->b) {
        deep_mlp_free(m);
        return HX_ERR_OUT_OF_MEMORY;
    }
    int64_t xs[2] = {batch, width}, ws[2] = {width, width}, bs[1] = {width};
    m->x = hx_graph_input(m->g, "x", HX_DTYPE_F32, 2, xs);
    m->y = hx_graph_input(m->g, "y", HX_DTYPE_F32, 2, xs);
    hx_graph_push_target(m->g, HX_TARGET_DEVICE);
    hx_tensor *h = m->x;
    for (int l = 0; l < layers; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        m->w[l] = hx_graph_param(m->g, name, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1.4));
        snprintf(name, sizeof name, "b%d", l);
        m->b[l] = hx_graph_param(m->g, name, HX_DTYPE_F32, 1, bs, hx_init_uniform(-0.1, 0.1));
        if (!m->w[l] || !m->b[l]) break; /* the next op fails on the NULL input */
        m->param_bytes += hx_tensor_nbytes(m->w[l]) + hx_tensor_nbytes(m->b[l]);
        hx_tensor *z = hx_bias_add(m->g, hx_matmul(m->g, h, m->w[l], false, false), m->b[l]);
        h = l + 1 < layers ? hx_relu(m->g, z) : z;
    }
    m->loss = hx_mse(m->g, h, m->y);
    hx_graph_pop_target(m->g);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    oc.lr = 1e-3;
    hx_status st = m->loss ? hx_graph_backward(m->g, m->loss) : HX_ERR_INVALID_ARGUMENT;
    if (!st) st = hx_graph_apply_optimizer(m->g, NULL, &oc);
    if (st) deep_mlp_free(m);
    return st;
}

void deep_mlp_free(deep_mlp *m)
{
    hx_graph_free(m->g);
    free(m->w);
    free(m->b);
    memset(m, 0, sizeof *m);
}

void deep_mlp_check_same_params(hx_session *a, hx_session *b, const deep_mlp *m,
                                const char *what)
{
    for (int l = 0; l < m->layers; l++) {
        const hx_tensor *t[2] = {m->w[l], m->b[l]};
        for (int j = 0; j < 2; j++) {
            size_t n = hx_tensor_nbytes(t[j]);
            char *pa = malloc(n), *pb = malloc(n);
            CHECK(pa && pb && hx_session_read(a, t[j], pa, n) == HX_OK &&
                      hx_session_read(b, t[j], pb, n) == HX_OK,
                  "%s: read '%s': %s", what, hx_tensor_name(t[j]), hx_last_error());
            CHECK(pa && pb && !memcmp(pa, pb, n), "%s: parameter '%s' differs", what,
                  hx_tensor_name(t[j]));
            free(pa);
            free(pb);
        }
    }
}
