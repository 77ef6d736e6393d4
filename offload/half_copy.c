/* Half copies of f32 masters (graph/autodiff.c fuse_half_copy): optimizer
 * state of dtype f16 or bf16 whose value is always its parameter rounded to
 * nearest even. The parameter's update writes it as it updates the master;
 * here it is set from the master when the master is set another way
 * (initialisation, hx_session_write). */
#include "offload/offload.h"

#include <stdlib.h>

bool hx__is_half_copy(const hx_tensor *t)
{
    return t->kind == HX_TENSOR_STATE && t->dtype != HX_DTYPE_F32;
}

hx_status hx__half_copies_refresh(hx_engine *e, const hx_tensor *master)
{
    const hx_graph *g = e->g;
    hx_status st = HX_OK;
    for (int i = 0; i < g->n && !st; i++) {
        const hx_tensor *c = g->tensors[i], *p = c->param;
        if (!hx__is_half_copy(c) || (master && p != master)) continue;
        int64_t n = hx_tensor_numel(c);
        int dp = hx__dev_of(e, p->id), dc = hx__dev_of(e, c->id);
        float *m = dp == HX_DEV_HOST ? e->persist[p->id] : malloc(sizeof *m * (n ? n : 1));
        void *h = dc == HX_DEV_HOST ? e->persist[c->id] : malloc(hx_tensor_nbytes(c) + 1);
        if (!m || !h) st = hx__error(HX_ERR_OUT_OF_MEMORY, "half copy of '%s': out of host memory",
                                     p->name);
        if (!st && dp != HX_DEV_HOST)
            st = hx__engine_copy_out(e, dp, m, e->persist[p->id], sizeof *m * n);
        if (!st) hx__host_round(h, c->dtype, m, n, e->nthreads);
        if (!st && dc != HX_DEV_HOST)
            st = hx__engine_copy_in(e, dc, e->persist[c->id], h, hx_tensor_nbytes(c));
        if (m != e->persist[p->id]) free(m);
        if (h != e->persist[c->id]) free(h);
    }
    return st;
}
