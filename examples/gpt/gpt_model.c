/* The GPT graph: see gpt.h. Shapes in comments: B batch, T context, C
 * width, H heads, D = C / H, V vocabulary. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
    hx_graph *g;
    const gpt_config *c;
    gpt_model *m;
    int cap;
} builder;

/* A parameter: an f32 master, used as it is or (mixed precision) through
 * one cast to the model's dtype, which hetex fuses into its update. */
static hx_tensor *param(builder *b, const char *name, int ndim, const int64_t *shape, hx_init init)
{
    hx_tensor *p = hx_graph_param(b->g, name, HX_DTYPE_F32, ndim, shape, init);
    gpt_model *m = b->m;
    if (!p) return NULL;
    if (m->n_tensors == b->cap) {
        hx_tensor **grown = realloc(m->params, sizeof *grown * (b->cap = 2 * b->cap + 16));
        if (!grown) return NULL; /* the next op fails on the NULL input */
        m->params = grown;
    }
    m->params[m->n_tensors++] = p;
    m->n_params += hx_tensor_numel(p);
    return b->c->dtype == HX_DTYPE_F32 ? p : hx_cast(b->g, p, b->c->dtype);
}

static hx_tensor *vec(builder *b, const char *prefix, const char *what, int64_t n, hx_init init)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    return param(b, name, 1, &n, init);
}

static hx_tensor *mat(builder *b, const char *prefix, const char *what, int64_t rows,
                      int64_t cols, double std)
{
    char name[96];
    int64_t shape[2] = {rows, cols};
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    return param(b, name, 2, shape, hx_init_normal(0, std));
}

/* x (B,T,K) W (K,N) + bias (N) -> (B,T,N) */
static hx_tensor *linear(builder *b, hx_tensor *x, const char *prefix, const char *what,
                         int64_t in, int64_t out, double std)
{
    char bias[64];
    snprintf(bias, sizeof bias, "%s_bias", what);
    /* one statement each, in the order the model has always been built in
     * (its checkpoints' parameter order and its op names): an argument
     * list's order of evaluation is the compiler's choice */
    hx_tensor *w = mat(b, prefix, what, in, out, std);
    hx_tensor *bias_p = vec(b, prefix, bias, out, hx_init_zeros());
    return hx_bias_add(b->g, hx_matmul(b->g, x, w, false, false), bias_p);
}

static hx_tensor *layernorm(builder *b, hx_tensor *x, const char *prefix, const char *what)
{
    char gain[64], shift[64];
    snprintf(gain, sizeof gain, "%s_gain", what);
    snprintf(shift, sizeof shift, "%s_bias", what);
    int64_t c = b->c->width;
    hx_tensor *beta = vec(b, prefix, shift, c, hx_init_zeros()); /* first: as in linear */
    hx_tensor *gamma = vec(b, prefix, gain, c, hx_init_constant(1));
    return hx_layernorm(b->g, x, gamma, beta, 1e-5f);
}

static hx_tensor *dropout(builder *b, hx_tensor *x, uint64_t salt)
{
    return b->c->dropout > 0 ? hx_dropout(b->g, x, b->c->dropout, b->c->seed * 1000003u + salt) : x;
}

/* (B,T,C) -> (B,H,T,D) */
static hx_tensor *split_heads(builder *b, hx_tensor *x)
{
    const gpt_config *c = b->c;
    int64_t shape[4] = {c->batch, c->context, c->heads, c->width / c->heads};
    static const int perm[4] = {0, 2, 1, 3};
    return hx_permute(b->g, hx_reshape(b->g, x, 4, shape), perm);
}

/* Causal self-attention of h (B,T,C) -> (B,T,C) */
static hx_tensor *attention(builder *b, hx_tensor *h, const char *prefix, int layer)
{
    const gpt_config *c = b->c;
    hx_graph *g = b->g;
    int64_t C = c->width;
    double std = 0.02, proj_std = 0.02 / sqrt(2.0 * c->layers);
    hx_tensor *qkv = linear(b, h, prefix, "qkv", C, 3 * C, std); /* (B,T,3C) */
    hx_tensor *q = split_heads(b, hx_slice(g, qkv, -1, 0, C));
    hx_tensor *k = split_heads(b, hx_slice(g, qkv, -1, C, 2 * C));
    hx_tensor *v = split_heads(b, hx_slice(g, qkv, -1, 2 * C, 3 * C));
    float scale = (float)(1.0 / sqrt((double)(C / c->heads)));
    hx_tensor *att = hx_scale(g, hx_matmul(g, q, k, false, true), scale); /* (B,H,T,T) */
    att = dropout(b, hx_softmax(g, hx_causal_mask(g, att)), 2 * (uint64_t)layer);
    hx_tensor *y = hx_matmul(g, att, v, false, false); /* (B,H,T,D) */
    static const int perm[4] = {0, 2, 1, 3};
    int64_t shape[3] = {c->batch, c->context, C};
    y = hx_reshape(g, hx_permute(g, y, perm), 3, shape);
    return linear(b, y, prefix, "proj", C, C, proj_std);
}

/* GELU MLP of h (B,T,C) -> (B,T,C) */
static hx_tensor *mlp(builder *b, hx_tensor *h, const char *prefix)
{
    int64_t C = b->c->width;
    double proj_std = 0.02 / sqrt(2.0 * b->c->layers);
    hx_tensor *u = hx_gelu(b->g, linear(b, h, prefix, "fc", C, 4 * C, 0.02));
    return linear(b, u, prefix, "fc_proj", 4 * C, C, proj_std);
}

hx_status gpt_build(hx_graph *g, const gpt_config *c, gpt_model *m)
{
    memset(m, 0, sizeof *m);
    builder b = {g, c, m, 0};
    int64_t B = c->batch, T = c->context, C = c->width, V = c->vocab;
    int64_t tok_shape[2] = {B, T}, tgt_shape[1] = {B * T};
    int64_t wte_shape[2] = {V, C}, wpe_shape[2] = {T, C};
    m->tokens = hx_graph_input(g, "tokens", HX_DTYPE_I32, 2, tok_shape);
    m->targets = hx_graph_input(g, "targets", HX_DTYPE_I32, 1, tgt_shape);
    hx_tensor *wte = param(&b, "wte", 2, wte_shape, hx_init_normal(0, 0.02));
    hx_tensor *wpe = param(&b, "wpe", 2, wpe_shape, hx_init_normal(0, 0.02));
    hx_tensor *x = hx_add(g, hx_gather(g, wte, m->tokens), wpe); /* (B,T,C) + (T,C) */
    x = dropout(&b, x, 1u << 20);
    for (int l = 0; l < c->layers; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h%d", l);
        /* each block one checkpoint: a session with offload.recompute keeps
         * its input and recomputes its attention and MLP in backward */
        hx_status st = c->recompute ? hx_graph_push_recompute(g) : HX_OK;
        if (st) return st;
        x = hx_add(g, x, dropout(&b, attention(&b, layernorm(&b, x, prefix, "ln1"), prefix, l),
                                 2 * (uint64_t)l + 1));
        x = hx_add(g, x, dropout(&b, mlp(&b, layernorm(&b, x, prefix, "ln2"), prefix),
                                 (1u << 16) + (uint64_t)l));
        if (c->recompute && (st = hx_graph_pop_recompute(g))) return st;
    }
    x = layernorm(&b, x, "final", "ln");
    hx_tensor *logits = hx_matmul(g, x, wte, false, true); /* (B,T,V), tied head */
    int64_t flat[2] = {B * T, V};
    logits = hx_reshape(g, logits, 2, flat);
    if (c->dtype != HX_DTYPE_F32) logits = hx_cast(g, logits, HX_DTYPE_F32);
    m->logits = logits;
    m->loss = hx_cross_entropy(g, logits, m->targets);
    if (m->loss && hx_tensor_set_name(m->loss, "loss")) return HX_ERR_INVALID_ARGUMENT;
    return m->loss ? HX_OK : HX_ERR_INVALID_ARGUMENT;
}

void gpt_model_free(gpt_model *m)
{
    free(m->params);
    memset(m, 0, sizeof *m);
}

bool gpt_param_decays(const hx_tensor *p) { return hx_tensor_ndim(p) >= 2; }

double gpt_lr_scale(const gpt_optim *o, int step, int steps)
{
    if (step < o->warmup) return (step + 1.0) / o->warmup;
    if (steps <= o->warmup + 1) return 1.0;
    double progress = (double)(step - o->warmup) / (steps - 1 - o->warmup);
    return o->min_lr_ratio + (1 - o->min_lr_ratio) * 0.5 * (1 + cos(3.14159265358979323846 * progress));
}
