/* Embedding op builders: lookup and bag over a host table. They run on the
 * CPU (the op table marks them host-only) whatever the scoped target; the
 * table is not a tensor of the graph but a user object the node points to,
 * counted as used by the graph until the graph is freed. */
#include "graph/graph.h"
#include "embedding/embedding.h"

#include <string.h>

#define SHAPE(t, buf) hx__shape_str((t), (buf), sizeof(buf))

static hx_status check_table(const char *op, const hx_embedding_table *t)
{
    if (!t)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s: table is NULL; create one with hx_embedding_table_create", op);
    return HX_OK;
}

static hx_status check_ids(const char *op, const hx_tensor *x, const char *role)
{
    if (x->dtype == HX_DTYPE_I32 || x->dtype == HX_DTYPE_I64) return HX_OK;
    return hx__error(HX_ERR_DTYPE, "%s: %s '%s' is %s; it must be i32 or i64", op, role, x->name,
                     hx_dtype_name(x->dtype));
}

/* The node, on the op's own target, recorded as a user of t. */
static hx_tensor *table_node(hx_graph *g, hx_op op, hx_embedding_table *t, int n_src,
                             hx_tensor *const *src, int ndim, const int64_t *shape,
                             const hx_attrs *at)
{
    int n0 = g->n;
    hx_tensor *y = hx__node_new(g, op, n_src, src, HX_DTYPE_F32, ndim, shape, at);
    if (!y) return NULL;
    y->target = HX_TARGET_DEFAULT; /* not the scope's: the table lives on the host */
    y->table = t;
    if (hx__graph_use_table(g, t, y->id)) {
        hx__graph_truncate(g, n0);
        return NULL;
    }
    return y;
}

hx_tensor *hx_embedding_lookup(hx_graph *g, hx_embedding_table *t, hx_tensor *ids)
{
    const char *op = "embedding_lookup";
    char si[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, op, 1, &ids) || check_table(op, t) || check_ids(op, ids, "ids"))
        return NULL;
    if (ids->ndim + 1 > HX_MAX_DIMS || hx_tensor_numel(ids) > (int64_t)UINT32_MAX) {
        hx__error(HX_ERR_SHAPE,
                  "%s (table '%s'): ids '%s' %s must have at most %d dims and fewer than 2^32 "
                  "elements", op, t->name, ids->name, SHAPE(ids, si), HX_MAX_DIMS - 1);
        return NULL;
    }
    int64_t shape[HX_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof(int64_t) * ids->ndim);
    shape[ids->ndim] = hx_embedding_table_dim(t);
    return table_node(g, HX_OP_EMBEDDING_LOOKUP, t, 1, &ids, ids->ndim + 1, shape, NULL);
}

/* attr: i[0] mode, i[1] flags, i[2] the padding id as queries compare ids
 * (hx__embedding_padding); src: ids, offsets[, weights] */
hx_tensor *hx_embedding_bag(hx_graph *g, hx_embedding_table *t, hx_tensor *ids,
                            hx_tensor *offsets, hx_tensor *per_sample_weights,
                            hx_embedding_bag_mode mode, unsigned flags, int64_t padding_id)
{
    const char *op = "embedding_bag";
    hx_tensor *src[3] = {ids, offsets, per_sample_weights};
    int n_src = per_sample_weights ? 3 : 2;
    char si[HX_SHAPE_STR_LEN], so[HX_SHAPE_STR_LEN], sw[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, op, n_src, src) || check_table(op, t) || check_ids(op, ids, "ids"))
        return NULL;
    if ((unsigned)mode > HX_EMBEDDING_BAG_MAX ||
        (flags & ~(unsigned)(HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET | HX_EMBEDDING_BAG_PADDING))) {
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "%s (table '%s'): mode %d or flags 0x%x unknown (HX_EMBEDDING_BAG_SUM/MEAN/MAX; "
                  "flags HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET | HX_EMBEDDING_BAG_PADDING)", op,
                  t->name, (int)mode, flags);
        return NULL;
    }
    if (offsets->dtype != ids->dtype) {
        hx__error(HX_ERR_DTYPE, "%s (table '%s'): offsets '%s' are %s and ids '%s' %s; they must "
                  "have the same dtype", op, t->name, offsets->name,
                  hx_dtype_name(offsets->dtype), ids->name, hx_dtype_name(ids->dtype));
        return NULL;
    }
    bool last = flags & HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET;
    if (ids->ndim != 1 || offsets->ndim != 1 || offsets->shape[0] - last < 1 ||
        ids->shape[0] > (int64_t)UINT32_MAX) {
        hx__error(HX_ERR_SHAPE,
                  "%s (table '%s'): ids '%s' %s must be 1-D (fewer than 2^32) and offsets '%s' "
                  "%s 1-D with one entry per bag%s", op, t->name, ids->name, SHAPE(ids, si),
                  offsets->name, SHAPE(offsets, so),
                  last ? " plus the last (include_last_offset)" : "");
        return NULL;
    }
    if (per_sample_weights) {
        const hx_tensor *w = per_sample_weights;
        if (mode != HX_EMBEDDING_BAG_SUM || w->dtype != HX_DTYPE_F32 || !hx__same_shape(w, ids)) {
            hx__error(HX_ERR_SHAPE,
                      "%s (table '%s'): per-sample weights '%s' %s %s need mode SUM, f32 and "
                      "the shape of ids '%s' %s (as torch.nn.EmbeddingBag)", op, t->name,
                      w->name, hx_dtype_name(w->dtype), SHAPE(w, sw), ids->name, SHAPE(ids, si));
            return NULL;
        }
    }
    int64_t pad = padding_id;
    if ((flags & HX_EMBEDDING_BAG_PADDING) && hx__embedding_padding(t, padding_id, op, &pad))
        return NULL;
    int64_t shape[2] = {offsets->shape[0] - last, hx_embedding_table_dim(t)};
    hx_attrs at = {.i = {mode, flags, pad}};
    return table_node(g, HX_OP_EMBEDDING_BAG, t, n_src, src, 2, shape, &at);
}
