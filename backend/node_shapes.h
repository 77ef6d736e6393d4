/* Shape helpers for kernel launchers: turning a node's shapes into the
 * element strides and row counts kernels take. */
#ifndef HX_NODE_SHAPES_H
#define HX_NODE_SHAPES_H

#include "graph/graph.h"

static inline int64_t hx__last_dim(const hx_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* Contiguous element strides of t. */
static inline void hx__strides_of(const hx_tensor *t, int64_t *st)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= t->shape[d];
    }
}

/* Strides that read x (right-aligned) as if broadcast to y's shape. */
static inline void hx__broadcast_strides(const hx_tensor *x, const hx_tensor *y, int64_t *st)
{
    int64_t xs[HX_MAX_DIMS];
    hx__strides_of(x, xs);
    int lead = y->ndim - x->ndim;
    for (int d = 0; d < y->ndim; d++) {
        int dx = d - lead;
        st[d] = dx < 0 || x->shape[dx] == 1 ? 0 : xs[dx];
    }
}

/* A slice node y (attr: i[0] axis, i[1] start) of its source's value x0:
 * the first element it reads, with the source's strides (xs) and its own
 * (ys), for a strided copy of y's shape. */
static inline const char *hx__slice_view(const hx_tensor *y, const void *x0, int64_t *xs,
                                         int64_t *ys)
{
    hx__strides_of(y->src[0], xs);
    hx__strides_of(y, ys);
    return (const char *)x0 + y->attr.i[1] * xs[y->attr.i[0]] * hx_dtype_size(y->dtype);
}

/* A matmul node's GEMM: (batch of) M x K times K x N, leading dims of a and
 * b, and b's batch stride (0 when a 2-D b is shared by every batch, which is
 * then one GEMM over all rows of a). */
typedef struct hx__gemm_shape {
    bool ta, tb;
    int64_t batch, M, N, K, lda, ldb, b_stride;
} hx__gemm_shape;

static inline hx__gemm_shape hx__matmul_shape(const hx_tensor *y)
{
    const hx_tensor *a = y->src[0], *b = y->src[1];
    hx__gemm_shape g = {.ta = y->attr.i[0], .tb = y->attr.i[1]};
    g.K = a->shape[a->ndim - (g.ta ? 2 : 1)];
    g.M = y->shape[y->ndim - 2];
    g.N = y->shape[y->ndim - 1];
    g.batch = hx_tensor_numel(y) / (g.M * g.N);
    g.lda = a->shape[a->ndim - 1];
    g.ldb = b->shape[b->ndim - 1];
    if (b->ndim == 2 && g.batch > 1) {
        g.M *= g.batch;
        g.batch = 1;
    }
    g.b_stride = b->ndim == 2 ? 0 : g.K * g.N;
    return g;
}

#endif
