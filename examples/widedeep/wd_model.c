/* The wide & deep graph. B is the batch, E the deep embedding width, K the
 * deep (categorical) columns, W the wide ids per row, D the dense features.
 *
 *   host:    deep_ids (B,K) -> lookup(deep table) (B,K,E)
 *            wide_ids (B*W) -> bag sum(wide table, dim 1) (B,1)      [FTRL]
 *   device:  concat(dense (B,D), reshape (B,K*E)) -> relu(x W1 + b1)
 *            -> relu(. W2 + b2) -> . W3 + b3 (B,1)                   [Adam]
 *            + wide (B,1) -> (B) -> sigmoid cross-entropy with labels
 *
 * The wide bag does not depend on the MLP, so it runs beside it. */
#include "wd.h"

#include <stdio.h>
#include <string.h>

static hx_tensor *mlp_param(hx_graph *g, hx_target where, const char *name, int ndim,
                            const int64_t *shape, hx_init init)
{
    hx_tensor *p = hx_graph_param(g, name, HX_DTYPE_F32, ndim, shape, init);
    if (p && hx_tensor_set_target(p, where)) return NULL;
    return p;
}

/* x (B,in) W (in,out) + b (out) */
static hx_tensor *dense_layer(hx_graph *g, hx_target where, hx_tensor *x, int64_t in, int64_t out,
                              int layer)
{
    char w[16], b[16];
    snprintf(w, sizeof w, "mlp%d.w", layer);
    snprintf(b, sizeof b, "mlp%d.b", layer);
    int64_t ws[2] = {in, out};
    hx_tensor *W = mlp_param(g, where, w, 2, ws, hx_init_xavier_uniform(1.0));
    hx_tensor *bias = mlp_param(g, where, b, 1, &out, hx_init_zeros());
    return hx_bias_add(g, hx_matmul(g, x, W, false, false), bias);
}

static hx_status tables(const wd_options *o, const wd_features *wf, wd_model *m)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "deep";
    ec.rows = wf->deep_rows;
    ec.dim = o->deep_dim;
    ec.init = hx_init_normal(0, 0.05);
    ec.seed = o->seed;
    ec.n_threads = o->threads;
    ec.optimizer = hx_embedding_optimizer_default(o->embedding_optimizer);
    ec.optimizer.lr = o->lr_embedding;
    ec.ssd_path = o->deep_on_disk;
    ec.cache_bytes = o->deep_cache_bytes;
    ec.device_cache_rows = o->device_cache_rows;
    ec.comm = o->ps ? NULL : o->comm; /* --shards */
    ec.ps = o->ps;                     /* --servers */
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    bool capped = o->table_bytes && !o->ps; /* --servers: hx_ps_config.rank_bytes caps them together */
    ec.rank_bytes = capped ? o->table_bytes : 0;
    hx_status st = hx_embedding_table_create(&ec, &m->deep);
    if (st) return st;
    hx_embedding_stats ds;
    if ((st = hx_embedding_table_stats(m->deep, &ds))) return st;
    ec = hx_embedding_config_default();
    ec.name = "wide";
    ec.rows = wf->shape.wide_dim;
    ec.dim = 1;
    ec.init = hx_init_zeros();
    ec.n_threads = o->threads;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_FTRL);
    ec.optimizer.lr = o->lr_wide;
    ec.optimizer.l1 = o->l1_wide;
    ec.optimizer.l2 = o->l2_wide;
    ec.comm = o->ps ? NULL : o->comm;
    ec.ps = o->ps;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    /* the wide shard gets what the deep one left of the rank's cap (at least a byte: refused then) */
    ec.rank_bytes = !capped ? 0 : ds.bytes < o->table_bytes ? o->table_bytes - ds.bytes : 1;
    return hx_embedding_table_create(&ec, &m->wide);
}

/* The graph at batch B over m's tables. */
static hx_status graph(const wd_options *o, const wd_features *wf, int64_t B, wd_model *m)
{
    hx_status st;
    if (!(m->g = hx_graph_create())) {
        wd_model_free(m);
        return HX_ERR_OUT_OF_MEMORY;
    }
    hx_graph *g = m->g;
    int64_t K = wf->n_deep, E = o->deep_dim, W = wf->shape.n_wide;
    int64_t D = wf->shape.dense_dim;
    int64_t dense_s[2] = {B, D}, deep_s[2] = {B, K}, wide_s[1] = {B * W}, row_s[1] = {B};
    m->dense = hx_graph_input(g, "dense", HX_DTYPE_F32, 2, dense_s);
    m->deep_ids = hx_graph_input(g, "deep_ids", HX_DTYPE_I64, 2, deep_s);
    m->wide_ids = hx_graph_input(g, "wide_ids", HX_DTYPE_I64, 1, wide_s);
    m->wide_offsets = hx_graph_input(g, "wide_offsets", HX_DTYPE_I64, 1, row_s);
    m->labels = hx_graph_input(g, "labels", HX_DTYPE_F32, 1, row_s);

    hx_tensor *emb = hx_embedding_lookup(g, m->deep, m->deep_ids); /* (B,K,E) host */
    hx_tensor *wide = hx_embedding_bag(g, m->wide, m->wide_ids, m->wide_offsets, NULL,
                                       HX_EMBEDDING_BAG_SUM, 0, 0); /* (B,1) host */
    hx_target where = o->placement ? o->placement : HX_TARGET_DEVICE;
    st = hx_graph_push_target(g, where);
    if (st) goto fail;
    int64_t flat_s[2] = {B, K * E};
    hx_tensor *parts[2] = {m->dense, hx_reshape(g, emb, 2, flat_s)};
    hx_tensor *x = hx_concat(g, 2, parts, 1); /* (B, D + K*E) */
    x = hx_relu(g, dense_layer(g, where, x, D + K * E, o->hidden[0], 1));
    x = hx_relu(g, dense_layer(g, where, x, o->hidden[0], o->hidden[1], 2));
    hx_tensor *logit = hx_add(g, dense_layer(g, where, x, o->hidden[1], 1, 3), wide); /* (B,1) */
    logit = hx_reshape(g, logit, 1, row_s);
    m->prob = hx_sigmoid(g, logit);
    m->loss = hx_bce_with_logits(g, logit, m->labels);
    if ((st = hx_graph_pop_target(g))) goto fail;
    if (!m->loss || !m->prob) {
        st = HX_ERR_INVALID_ARGUMENT;
        goto fail;
    }
    if ((st = hx_tensor_set_name(m->prob, "prob")) || (st = hx_tensor_set_name(m->loss, "loss")))
        goto fail;
    if ((st = hx_graph_backward(g, m->loss))) goto fail;
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    adam.lr = o->lr_dense;
    if ((st = hx_graph_apply_optimizer(g, NULL, &adam))) goto fail;
    return HX_OK;
fail:
    wd_model_free(m);
    return st;
}

hx_status wd_model_build(const wd_options *o, const wd_features *wf, wd_model *m)
{
    memset(m, 0, sizeof *m);
    hx_status st = tables(o, wf, m);
    if (st) {
        wd_model_free(m);
        return st;
    }
    return graph(o, wf, o->batch, m);
}

hx_status wd_model_build_twin(const wd_options *o, const wd_features *wf, const wd_model *of,
                              int64_t batch, wd_model *m)
{
    *m = (wd_model){.deep = of->deep, .wide = of->wide, .borrowed = true};
    return graph(o, wf, batch, m);
}

void wd_model_free(wd_model *m)
{
    hx_graph_free(m->g); /* before the tables it uses */
    if (!m->borrowed) {
        hx_embedding_table_free(m->deep);
        hx_embedding_table_free(m->wide);
    }
    memset(m, 0, sizeof *m);
}

void wd_feeds(const wd_model *m, const wd_feed *fd, int64_t batch, const wd_features *wf,
              hx_feed feeds[WD_N_FEEDS])
{
    int64_t D = wf->shape.dense_dim, K = wf->n_deep, W = wf->shape.n_wide;
    feeds[0] = (hx_feed){NULL, m->dense, fd->dense, sizeof(float) * batch * D};
    feeds[1] = (hx_feed){NULL, m->deep_ids, fd->deep_ids, sizeof(int64_t) * batch * K};
    feeds[2] = (hx_feed){NULL, m->wide_ids, fd->wide_ids, sizeof(int64_t) * batch * W};
    feeds[3] = (hx_feed){NULL, m->wide_offsets, fd->wide_offsets, sizeof(int64_t) * batch};
    feeds[4] = (hx_feed){NULL, m->labels, fd->labels, sizeof(float) * batch};
}
