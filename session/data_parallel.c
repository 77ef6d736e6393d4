/* Data parallel (hx_session_config.comm): before the gradient scan, every
 * dense gradient is summed over the ranks, chunk by chunk (dist/dp.c,
 * started during the backward by dp_overlap.c), f32
 * and bf16 gradients in chunks of their own dtype, in the graph's order of
 * update nodes so that every rank lays them out alike (ZeRO stages 1-3:
 * each chunk's sum only on its owner; the owners: zero.c); the average's 1/N
 * goes with the loss scale's unscaling into the updates (session.c). On
 * CUDA a gradient whose update runs on the device stays there and is summed
 * in place over NCCL (stage 0 only), in plan order, the same on every rank. */
#include "session/session.h"
#include "dist/dist.h"
#include "embedding/embedding.h"

#include <stdio.h>
#include <stdlib.h>

static const hx_dtype group_dtype[2] = {HX_DTYPE_F32, HX_DTYPE_BF16};

/* Whether update u's gradient is summed over NCCL: its update runs on an
 * accelerator of its own memory (CUDA), so the gradient stays there. */
static bool on_nccl(const hx_engine *e, int u)
{
    return e->be[HX_DEV_ACCEL] && !e->accel_on_host && hx__dev_of(e, u) != HX_DEV_HOST;
}

/* The ranks sum gradients, and ZeRO gathers parameters, in host memory
 * (emu's device memory is host memory too), but for the gradients summed
 * over NCCL: on CUDA an update on the device needs stage 0, and at stages
 * 1-3 what the ranks read of each parameter must live on the host (copied
 * to the device each step). Counts the NCCL gradients into s->nccl_n. */
static hx_status check_homes(hx_session *s)
{
    const hx_engine *e = &s->e;
    s->nccl_n = 0;
    if (!e->be[HX_DEV_ACCEL] || e->accel_on_host) return HX_OK;
    for (int i = 0; i < e->g->n; i++) {
        const hx_tensor *u = e->g->tensors[i];
        if (u->kind != HX_TENSOR_UPDATE || u->op == HX_OP_EMBEDDING_UPDATE) continue;
        if (on_nccl(e, i) && e->cfg.zero_stage)
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: ZeRO stage %d shards in host "
                             "memory, and the update of '%s' runs on the %s device: put the "
                             "optimizer on the host (hetex gpt --offload optimizer, or the update "
                             "ops' target CPU), or use zero_stage 0 (its gradients then summed on "
                             "the device over NCCL)", e->cfg.zero_stage, u->param->name,
                             e->be[HX_DEV_ACCEL]->name);
        s->nccl_n += on_nccl(e, i);
        const hx_tensor *r = hx__zero_replica(u);
        if (e->cfg.zero_stage && hx__dev_of(e, r->id) != HX_DEV_HOST)
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: ZeRO stage %d gathers the "
                             "parameters in host memory, and '%s' lives on the %s device: keep it on "
                             "the host (the optimizer on the host, or offload_param=cpu), or use "
                             "zero_stage 0", e->cfg.zero_stage, r->name, e->be[HX_DEV_ACCEL]->name);
    }
    if (!s->nccl_n) return HX_OK;
    hx_status st = hx__nccl_create(e->cfg.comm, e->cfg.cuda_device, &s->nccl);
    if (!st) {
        if (hx__debug("zero"))
            fprintf(stderr, "hetex zero: rank %d: %lld gradients summed in %s device memory over NCCL\n",
                    hx_comm_rank(e->cfg.comm), (long long)s->nccl_n, e->be[HX_DEV_ACCEL]->name);
        return HX_OK;
    }
    char why[HX_ERROR_LEN]; /* hx__error writes where hx_last_error reads */
    snprintf(why, sizeof why, "%s", hx_last_error());
    return hx__error(st, "hx_session_create: data parallel sums the gradients of the updates on the "
                     "%s device over NCCL: %s", e->be[HX_DEV_ACCEL]->name, why);
}

hx_status hx__session_dp_setup(hx_session *s)
{
    hx_comm *c = s->e.cfg.comm;
    if (!c) return HX_OK;
    hx_status st = hx__session_dp_check(s);
    if (st) return st;
    const hx_graph *g = s->e.g;
    for (int i = 0; i < g->n_tables; i++) /* a sharded table's updates reach every rank's rows */
        if (!hx__embedding_sharded(g->tables[i].table))
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: data parallel (config.comm) takes "
                             "sharded embedding tables only: table '%s' has no communicator, so its "
                             "sparse updates would stay local to each rank (give it "
                             "hx_embedding_config.comm)", g->tables[i].table->name);
    if (g->n_tables && s->e.cfg.zero_stage) /* zero.c's owners and scan know dense updates only */
        return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: ZeRO stage %d with embedding tables "
                         "(table '%s') is not built: train sharded tables with zero_stage 0",
                         s->e.cfg.zero_stage, g->tables[0].table->name);
    if ((st = check_homes(s))) return st;
    s->dp_index = malloc(sizeof *s->dp_index * (size_t)(g->n ? g->n : 1));
    size_t *bytes = malloc(sizeof *bytes * (size_t)(g->n ? g->n : 1));
    if (!s->dp_index || !bytes) {
        free(bytes);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    for (int grp = 0; grp < 2 && !st; grp++) {
        int64_t n = 0;
        for (int i = 0; i < g->n && !st; i++) {
            const hx_tensor *u = g->tensors[i];
            if (grp == 0) s->dp_index[i] = -1;
            if (u->kind != HX_TENSOR_UPDATE || u->op == HX_OP_EMBEDDING_UPDATE || on_nccl(&s->e, i))
                continue;
            hx_dtype dt = u->src[1]->dtype;
            if (dt != HX_DTYPE_F32 && dt != HX_DTYPE_BF16)
                st = hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: data parallel (config.comm) "
                               "sums f32 or bf16 gradients; the gradient of '%s' is %s",
                               u->param->name, hx_dtype_name(dt));
            if (st || dt != group_dtype[grp]) continue;
            s->dp_index[i] = (int)(2 * n + grp);
            bytes[n++] = hx_tensor_nbytes(u->src[1]);
        }
        s->dp_n[grp] = n;
        if (!st && n)
            st = hx__dp_create(c, bytes, n, s->e.cfg.offload.chunk_size, group_dtype[grp],
                               s->e.cfg.zero_stage < 2 ? s->e.cfg.zero_stage : 2, /* 3 sums as 2 */
                               &s->dp[grp]);
    }
    free(bytes);
    if (!st) st = hx__session_dp_overlap_create(s);
    if (!st && s->e.cfg.zero_stage) st = hx__session_zero_setup(s);
    return st;
}

hx_status hx__session_dp_nccl(hx_session *s, const hx_plan *p)
{
    if (!s->nccl) return HX_OK;
    hx_status st = HX_OK;
    int64_t n_nccl = 0;
    for (int i = 0; i < hx__plan_grad_count(p) && !st; i++) {
        void *v;
        int home;
        const hx_tensor *u = hx__plan_grad(p, i, &v, &home);
        if (!on_nccl(&s->e, u->id)) continue;
        const hx_tensor *gr = u->src[1];
        if (home != HX_DEV_ACCEL) /* never: plan.c copies out only the host updates' gradients */
            st = hx__error(HX_ERR_INTERNAL, "hx_session_run: data parallel: the gradient of '%s' "
                           "is not on the device its update runs on", u->param->name);
        else st = hx__nccl_all_reduce(s->nccl, v, hx_tensor_numel(gr), gr->dtype, NULL);
        n_nccl++;
    }
    if (!st) st = hx__nccl_sync(s->nccl, NULL);
    if (!st && n_nccl != s->nccl_n) /* every rank must sum the same gradients */
        st = hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: data parallel sums every dense "
                       "gradient of the graph each training run; this run updates only some");
    return st;
}

bool hx__session_dp_on(const hx_session *s) { return s->dp[0] || s->dp[1] || s->nccl; }

size_t hx__session_dp_chunk_bytes(const hx_session *s)
{
    return (s->dp[0] ? hx__dp_chunk_bytes(s->dp[0]) : 0) + (s->dp[1] ? hx__dp_chunk_bytes(s->dp[1]) : 0);
}
