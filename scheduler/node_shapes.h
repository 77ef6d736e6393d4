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

#endif
