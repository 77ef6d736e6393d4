/* Data parallel (hx_session_config.comm), ZeRO stage 0: before the
 * gradient scan, every dense gradient is summed over the ranks, chunk by
 * chunk (dist/dp.c), in the graph's order of update nodes so that every
 * rank lays them out alike; the average's 1/N goes with the loss scale's
 * unscaling into the updates (session.c). */
#include "session/session.h"
#include "dist/dist.h"

#include <stdlib.h>

hx_status hx__session_dp_setup(hx_session *s)
{
    hx_comm *c = s->e.cfg.comm;
    if (!c) return HX_OK;
    const hx_graph *g = s->e.g;
    if (g->n_tables)
        return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: data parallel (config.comm) takes no "
                         "embedding tables yet: their sparse updates would stay local to each rank");
    if (s->e.be[HX_DEV_ACCEL] && !s->e.accel_on_host)
        return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: data parallel (config.comm) sums "
                         "gradients in host memory; on CUDA the gradients are in GPU memory and the "
                         "NCCL path is not joined to sessions yet: use accelerator EMU or NONE");
    s->dp_index = malloc(sizeof *s->dp_index * (size_t)(g->n ? g->n : 1));
    size_t *bytes = malloc(sizeof *bytes * (size_t)(g->n ? g->n : 1));
    if (!s->dp_index || !bytes) {
        free(bytes);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    int64_t n = 0;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *u = g->tensors[i];
        s->dp_index[i] = -1;
        if (u->kind != HX_TENSOR_UPDATE || u->op == HX_OP_EMBEDDING_UPDATE) continue;
        const hx_tensor *grad = u->src[1];
        if (grad->dtype != HX_DTYPE_F32) {
            free(bytes);
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: data parallel (config.comm) sums "
                             "f32 gradients; the gradient of '%s' is %s", u->param->name,
                             hx_dtype_name(grad->dtype));
        }
        s->dp_index[i] = (int)n;
        bytes[n++] = hx_tensor_nbytes(grad);
    }
    s->dp_n = n;
    hx_status st = hx__dp_create(c, bytes, n, s->e.cfg.offload.chunk_size, &s->dp);
    free(bytes);
    return st;
}

hx_status hx__session_dp_grads(hx_session *s, const hx_plan *p)
{
    void **at = calloc((size_t)(s->dp_n ? s->dp_n : 1), sizeof *at);
    if (!at) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    for (int i = 0; i < hx__plan_grad_count(p); i++) {
        void *v;
        int home;
        const hx_tensor *u = hx__plan_grad(p, i, &v, &home);
        if (s->dp_index[u->id] >= 0) at[s->dp_index[u->id]] = v;
    }
    for (int64_t k = 0; k < s->dp_n; k++)
        if (!at[k]) { /* every rank must sum the same chunks */
            free(at);
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: data parallel sums every dense "
                             "gradient of the graph each training run; this run updates only some");
        }
    hx_status st = hx__dp_all_reduce(s->dp, at);
    free(at);
    return st;
}
