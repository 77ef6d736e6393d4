/* The network: a 3x3 stem, three stages of basic blocks (two 3x3 convs with
 * batch norm, ReLU and a residual add; a block that halves the image or
 * changes the width has a 1x1 strided conv with batch norm on its
 * shortcut), global average pooling and a linear layer. Parameters are f32
 * masters; a 16-bit dtype computes on cast copies of them. */
#include "resnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PARAMS = 512 };

typedef struct builder {
    hx_graph *g;
    const resnet_config *c;
    resnet_model *m;
} builder;

static hx_tensor *param(builder *b, bool decays, const char *name, int nd, const int64_t *shape,
                        hx_init init)
{
    hx_tensor *p = hx_graph_param(b->g, name, HX_DTYPE_F32, nd, shape, init);
    if (!p) return NULL;
    resnet_model *m = b->m;
    if (decays) m->weights[m->n_weights++] = p;
    else m->others[m->n_others++] = p;
    m->n_params += hx_tensor_numel(p);
    return b->c->dtype == HX_DTYPE_F32 ? p : hx_cast(b->g, p, b->c->dtype);
}

/* conv (no bias), He-initialised, then batch norm; relu if asked */
static hx_tensor *conv_bn(builder *b, const char *name, hx_tensor *x, int cout, int k, int stride,
                          bool relu)
{
    if (!x) return NULL;
    char n[96];
    int64_t cin = hx_tensor_dim(x, 1), ws[4] = {cout, cin, k, k}, cs[1] = {cout};
    snprintf(n, sizeof n, "%s/w", name);
    hx_tensor *w = param(b, true, n, 4, ws, hx_init_normal(0, sqrt(2.0 / (double)(cin * k * k))));
    snprintf(n, sizeof n, "%s/gamma", name);
    hx_tensor *gamma = param(b, false, n, 1, cs, hx_init_constant(1));
    snprintf(n, sizeof n, "%s/beta", name);
    hx_tensor *beta = param(b, false, n, 1, cs, hx_init_zeros());
    if (!w || !gamma || !beta) return NULL;
    hx_conv2d_params p = {.stride = {stride, stride}, .padding = {k / 2, k / 2}};
    hx_tensor *y = hx_batchnorm(b->g, hx_conv2d(b->g, x, w, &p), gamma, beta, 0.1f, 1e-5f);
    return relu && y ? hx_relu(b->g, y) : y;
}

static hx_tensor *basic_block(builder *b, const char *name, hx_tensor *x, int cout, int stride)
{
    char n[64];
    snprintf(n, sizeof n, "%s/conv1", name);
    hx_tensor *h = conv_bn(b, n, x, cout, 3, stride, true);
    snprintf(n, sizeof n, "%s/conv2", name);
    h = conv_bn(b, n, h, cout, 3, 1, false);
    hx_tensor *shortcut = x;
    if (x && (stride != 1 || hx_tensor_dim(x, 1) != cout)) {
        snprintf(n, sizeof n, "%s/shortcut", name);
        shortcut = conv_bn(b, n, x, cout, 1, stride, false);
    }
    return h && shortcut ? hx_relu(b->g, hx_add(b->g, h, shortcut)) : NULL;
}

hx_status resnet_build(hx_graph *g, const resnet_config *c, resnet_model *m)
{
    memset(m, 0, sizeof *m);
    m->weights = calloc(MAX_PARAMS, sizeof *m->weights);
    m->others = calloc(MAX_PARAMS, sizeof *m->others);
    if (!m->weights || !m->others || c->blocks < 1 || c->blocks > 20 || c->width < 1) {
        resnet_model_free(m);
        return c->blocks < 1 || c->blocks > 20 || c->width < 1 ? HX_ERR_INVALID_ARGUMENT
                                                               : HX_ERR_OUT_OF_MEMORY;
    }
    builder b = {g, c, m};
    int64_t is[4] = {c->batch, 1, RESNET_SIDE, RESNET_SIDE}, ls[1] = {c->batch};
    m->images = hx_graph_input(g, "images", HX_DTYPE_F32, 4, is);
    m->labels = hx_graph_input(g, "labels", HX_DTYPE_I32, 1, ls);
    hx_tensor *x = m->images && c->dtype != HX_DTYPE_F32 ? hx_cast(g, m->images, c->dtype) : m->images;
    x = conv_bn(&b, "stem", x, c->width, 3, 1, true);
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < c->blocks; k++) {
            char n[32];
            snprintf(n, sizeof n, "stage%d/block%d", s + 1, k);
            x = basic_block(&b, n, x, c->width << s, s > 0 && k == 0 ? 2 : 1);
        }
    hx_tensor *pooled = x ? hx_global_avg_pool2d(g, x) : NULL; // (B, 4w)
    int64_t fs[2] = {4 * c->width, RESNET_CLASSES}, bs[1] = {RESNET_CLASSES};
    hx_tensor *fc = param(&b, true, "fc/w", 2, fs, hx_init_xavier_uniform(1));
    hx_tensor *bias = param(&b, false, "fc/b", 1, bs, hx_init_zeros());
    hx_tensor *logits = pooled && fc && bias ? hx_bias_add(g, hx_matmul(g, pooled, fc, false, false), bias)
                                             : NULL;
    if (logits && c->dtype != HX_DTYPE_F32) logits = hx_cast(g, logits, HX_DTYPE_F32);
    m->logits = logits;
    m->loss = logits && m->labels ? hx_cross_entropy(g, logits, m->labels) : NULL;
    if (!m->loss) {
        resnet_model_free(m);
        return HX_ERR_INVALID_ARGUMENT;
    }
    return HX_OK;
}

void resnet_model_free(resnet_model *m)
{
    free(m->weights);
    free(m->others);
    memset(m, 0, sizeof *m);
}
