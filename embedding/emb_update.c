/* Sparse optimizer steps on a local table: the touched rows only, in chunks
 * of CHUNK rows whose summed gradients sit in a small per-thread buffer,
 * through the row kernels of kernels/cpu/optim.h (LazyAdam, Adagrad, FTRL)
 * or the row-wise Adagrad below. Each row is updated by one thread: in the
 * fused path the thread that takes the id's share (hx_emb_group_share), in
 * the sparse-gradient path the thread a hash of the id names. One parallel
 * region per call, no barriers inside. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "embedding/embedding.h"
#include "kernels/cpu/hx_kernels.h"

/* Rows per kernel call. The kernel prefetches the rows of its call ahead;
 * prefetching them here as well, while their gradients are summed, was
 * measured slower (20.5 against 16.5 ms for the benchmark's uniform batch). */
#define CHUNK 64
/* Below this many rows an update stays on the calling thread. */
#define PARALLEL_MIN_ROWS 256

typedef struct upd {
    hx_emb_local *t;
    int64_t step;
    hx_adam_hp adam;
    hx_adagrad_hp ada;
    hx_ftrl_hp ftrl;
    float ra_clr, ra_eps, ra_wd; /* row-wise Adagrad */
    hx_isa isa;
} upd;

static upd make_upd(hx_emb_local *t, int64_t step)
{
    const hx_emb_optim *o = &t->optim;
    upd u;
    memset(&u, 0, sizeof u);
    u.t = t;
    u.step = step;
    u.adam = (hx_adam_hp){o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, 0};
    u.ada = (hx_adagrad_hp){o->lr, o->lr_decay, o->eps, o->weight_decay};
    u.ftrl = (hx_ftrl_hp){o->lr, o->l1, o->l2, o->l2_shrinkage};
    u.ra_clr = (float)(o->lr / (1.0 + (double)(step - 1) * o->lr_decay));
    u.ra_eps = (float)o->eps;
    u.ra_wd = (float)o->weight_decay;
    u.isa = hx_k_isa();
    return u;
}

hx_emb_step_plan hx_emb_step_plan_of(const hx_emb_optim *o, int64_t step)
{
    hx_emb_local t = {.optim = *o};
    upd u = make_upd(&t, step);
    hx_emb_step_plan p = {.kind = o->kind, .ra_clr = u.ra_clr, .ra_eps = u.ra_eps, .ra_wd = u.ra_wd};
    switch (o->kind) {
    case HX_EMB_OPTIM_LAZY_ADAM: p.plan = hx_optim_plan_lazy_adam_rows(&u.adam, step); break;
    case HX_EMB_OPTIM_ADAGRAD: p.plan = hx_optim_plan_adagrad_rows(&u.ada, step); break;
    case HX_EMB_OPTIM_FTRL: p.plan = hx_optim_plan_ftrl_rows(&u.ftrl); break;
    default: break;
    }
    return p;
}

/* Per-thread buffers: the chunk's gradients and ids; for f16/bf16 tables
 * f32 copies of its params and state; a row of scratch. */
typedef struct tbuf {
    float *G, *P, *S[2], *tmp;
    int64_t *ids, *iota;
} tbuf;

static size_t tbuf_bytes(const hx_emb_local *t)
{
    size_t rows = (size_t)CHUNK * (size_t)t->gstride * sizeof(float);
    size_t half = t->dtype == HX_DTYPE_F32 ? 0 : 3 * rows;
    return rows + half + (size_t)t->gstride * sizeof(float) + 2 * CHUNK * sizeof(int64_t) + 64;
}

static tbuf tbuf_at(const hx_emb_local *t, char *mem)
{
    size_t rows = (size_t)CHUNK * (size_t)t->gstride;
    tbuf b;
    float *f = (float *)mem;
    b.G = f;
    f += rows;
    if (t->dtype != HX_DTYPE_F32) {
        b.P = f;
        b.S[0] = f + rows;
        b.S[1] = f + 2 * rows;
        f += 3 * rows;
    } else {
        b.P = b.S[0] = b.S[1] = NULL;
    }
    b.tmp = f;
    f += t->gstride;
    b.ids = (int64_t *)(((uintptr_t)f + 7) & ~(uintptr_t)7);
    b.iota = b.ids + CHUNK;
    for (int i = 0; i < CHUNK; i++) b.iota[i] = i;
    return b;
}

/* ---- one chunk ------------------------------------------------------------------------ */

/* Row-wise Adagrad on rows ids[0..cnt) of p (row stride gs) with one
 * accumulator per row in acc (indexed like p), gradients G (modified). */
static void row_adagrad(const upd *u, float *p, float *acc, const int64_t *ids, int64_t cnt,
                        float *G, int64_t gs, int64_t dim)
{
    for (int64_t i = 0; i < cnt; i++) {
        float *pr = p + ids[i] * gs, *g = G + i * gs;
        if (u->ra_wd != 0.0f)
            for (int64_t k = 0; k < dim; k++) g[k] = fmaf(u->ra_wd, pr[k], g[k]);
        float ss = 0.0f;
        for (int64_t k = 0; k < dim; k++) ss += g[k] * g[k];
        float a = acc[ids[i]] + ss / (float)dim;
        acc[ids[i]] = a;
        float mult = u->ra_clr / (sqrtf(a) + u->ra_eps);
        for (int64_t k = 0; k < dim; k++) pr[k] = pr[k] - mult * g[k];
    }
}

/* One optimizer step on rows ids[0..cnt) (distinct when the table is
 * f16/bf16) with f32 gradients G (cnt rows of gstride). */
static int update_chunk(const upd *u, tbuf *b, const int64_t *ids, int64_t cnt, float *G)
{
    hx_emb_local *t = u->t;
    int64_t gs = t->gstride, dim = t->base.dim;
    int rowwise = t->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    int ns = hx_emb_optim_nstate(t->optim.kind);
    if (t->lazy)
        for (int64_t i = 0; i < cnt; i++) hx_emb_local_materialise(t, ids[i], b->tmp);
    float *p, *s0, *s1;
    const int64_t *kid;
    int64_t krows;
    if (t->dtype == HX_DTYPE_F32) {
        p = t->param;
        s0 = t->state[0];
        s1 = t->state[1];
        kid = ids;
        krows = t->base.rows;
    } else {
        for (int64_t i = 0; i < cnt; i++) {
            float *pr = b->P + i * gs;
            hx_emb_local_read_row(t, ids[i], pr);
            memset(pr + dim, 0, (size_t)(gs - dim) * sizeof(float));
            for (int k = 0; k < ns; k++) {
                if (rowwise) b->S[k][i] = t->state[k][ids[i]];
                else memcpy(b->S[k] + i * gs, t->state[k] + ids[i] * gs, (size_t)gs * sizeof(float));
            }
        }
        p = b->P;
        s0 = b->S[0];
        s1 = b->S[1];
        kid = b->iota;
        krows = cnt;
    }
    hx_optim_rows r = {kid, cnt, G, krows, gs, u->isa, 1};
    int64_t bad = 0;
    int rc = HX_OPTIM_OK;
    switch (t->optim.kind) {
    case HX_EMB_OPTIM_LAZY_ADAM: rc = hx_optim_lazy_adam_rows(p, s0, s1, u->step, &u->adam, &r, &bad); break;
    case HX_EMB_OPTIM_ADAGRAD: rc = hx_optim_adagrad_rows(p, s0, u->step, &u->ada, &r, &bad); break;
    case HX_EMB_OPTIM_FTRL: rc = hx_optim_ftrl_rows(p, s0, s1, &u->ftrl, &r, &bad); break;
    case HX_EMB_OPTIM_ROW_ADAGRAD: row_adagrad(u, p, s0, kid, cnt, G, gs, dim); break;
    case HX_EMB_OPTIM_NONE: break;
    }
    if (t->dtype != HX_DTYPE_F32) {
        for (int64_t i = 0; i < cnt; i++) {
            char *dst = (char *)t->param + (size_t)ids[i] * (size_t)t->stride * t->esize;
            hx_k_cast(dst, (hx_kdtype)t->dtype, b->P + i * gs, HX_K_F32, dim, 1);
            for (int k = 0; k < ns; k++) {
                if (rowwise) t->state[k][ids[i]] = b->S[k][i];
                else memcpy(t->state[k] + ids[i] * gs, b->S[k] + i * gs, (size_t)gs * sizeof(float));
            }
        }
    }
    return rc;
}

static hx_status check_update(const hx_emb_local *t, int64_t step, const char *op, hx_emb_err *err)
{
    if (t->optim.kind == HX_EMB_OPTIM_NONE)
        return hx_emb_fail(err, HX_ERR_STATE,
                           "embedding %s: the table has no optimizer; set one (hx_embedding_table_set_optimizer)", op);
    if (step < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding %s: step %lld < 1 (the first step is 1)", op,
                           (long long)step);
    return HX_OK;
}

/* ---- fused backward and update ---------------------------------------------------------- */

hx_status hx_emb_local_backward_update(hx_emb_local *t, const hx_emb_query *q,
                                       const hx_emb_grad_input *gi, int64_t step,
                                       hx_emb_oob oob, hx_emb_workspace *ws, hx_emb_err *err)
{
    hx_status st = check_update(t, step, "backward_update", err);
    if (st) return st;
    if (!gi) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding backward_update: gradient input is NULL");
    if (gi->dim != t->base.dim)
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding backward_update: gradient rows have dim %lld, the table %lld",
                           (long long)gi->dim, (long long)t->base.dim);
    int64_t nbags;
    st = hx_emb_query_check(q, &nbags, err);
    if (st) return st;
    st = hx_emb_check_ids(q, t->base.rows, oob, NULL, "backward_update", err);
    if (st) return st;
    hx_emb_workspace *own = NULL;
    if (!ws && !(ws = own = hx_emb_workspace_create()))
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward_update: out of memory");
    hx_emb_gplan plan;
    st = hx_emb_group_plan(q, gi, t->base.rows, ws, &plan, err);
    int nt = plan.nthreads;
    size_t tb = (tbuf_bytes(t) + 63) / 64 * 64;
    char *mem = st ? NULL : hx_emb_ws_get(ws, HX_EMB_WS_CHUNK, tb * (size_t)nt + 64);
    if (!st && !mem) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding backward_update: out of memory");
    int bad = 0;
    if (!st) {
        upd u = make_upd(t, step);
        char *base = (char *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
        int64_t gs = t->gstride;
        /* Threads take shares of the ids as they come free, group them and
         * update their rows: each row by the one thread holding its share. */
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : bad)
        {
            tbuf b = tbuf_at(t, base + tb * (size_t)omp_get_thread_num());
#pragma omp for schedule(dynamic, 1) nowait
            for (int si = 0; si < plan.nshares; si++) {
                hx_emb_groups gr;
                hx_emb_group_share(&plan, si, &gr);
                for (int64_t c = 0; c < gr.U; c += CHUNK) {
                    int64_t cnt = gr.U - c < CHUNK ? gr.U - c : CHUNK;
                    for (int64_t i = 0; i < cnt; i++) hx_emb_group_sum(q, gi, &gr, c + i, gs, b.G + i * gs);
                    bad |= update_chunk(&u, &b, gr.uniq + c, cnt, b.G) != HX_OPTIM_OK;
                }
            }
        }
    }
    hx_emb_workspace_free(own);
    if (!st && bad)
        st = hx_emb_fail(err, HX_ERR_INTERNAL, "embedding backward_update: the optimizer kernel refused its rows");
    return st;
}

/* ---- a sparse gradient ---------------------------------------------------------------------- */

static inline int owner(int64_t id, int nparts)
{
    uint64_t h = ((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 32;
    return (int)((h * (uint64_t)nparts) >> 32);
}

/* Whether id is among the chunk's first cnt ids (f16/bf16 chunks take an id once). */
static int in_chunk(const int64_t *ids, int64_t cnt, int64_t id)
{
    for (int64_t i = 0; i < cnt; i++)
        if (ids[i] == id) return 1;
    return 0;
}

hx_status hx_emb_local_apply(hx_emb_local *t, const hx_emb_sparse_grad *g, int64_t step,
                             int nthreads, hx_emb_oob oob, hx_emb_err *err)
{
    hx_status st = check_update(t, step, "update", err);
    if (st) return st;
    if (!g) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding update: gradient is NULL");
    if (nthreads < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding update: nthreads %d < 1", nthreads);
    if (g->n < 0 || (g->n > 0 && (!g->ids || !g->rows)))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding update: gradient of %lld rows without data",
                           (long long)g->n);
    if (g->n > 0 && (g->dim != t->base.dim || g->stride != t->gstride))
        return hx_emb_fail(err, HX_ERR_SHAPE,
                           "embedding update: gradient rows of dim %lld (stride %lld), the table %lld (stride %lld); "
                           "size gradients with hx_emb_sparse_grad_reserve",
                           (long long)g->dim, (long long)g->stride, (long long)t->base.dim, (long long)t->gstride);
    int64_t n = g->n, rows = t->base.rows;
    if (oob == HX_EMB_OOB_ERROR) {
        for (int64_t i = 0; i < n; i++)
            if (g->ids[i] < 0 || g->ids[i] >= rows)
                return hx_emb_fail(err, HX_ERR_INDEX,
                                   "embedding update: id %lld at position %lld is outside the table's rows [0, %lld)",
                                   (long long)g->ids[i], (long long)i, (long long)rows);
    }
    int nt = n >= PARALLEL_MIN_ROWS ? nthreads : 1;
    size_t tb = (tbuf_bytes(t) + 63) / 64 * 64;
    char *mem = malloc(tb * (size_t)nt + 64);
    if (!mem) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding update: out of memory");
    char *base = (char *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    upd u = make_upd(t, step);
    int64_t gs = t->gstride;
    int half = t->dtype != HX_DTYPE_F32, bad = 0;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : bad)
    {
        int tid = omp_get_thread_num(), T = omp_get_num_threads();
        tbuf b = tbuf_at(t, base + tb * (size_t)tid);
        int64_t cnt = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t id = g->ids[i];
            if ((T > 1 && owner(id, T) != tid) || id < 0 || id >= rows) continue;
            if (cnt == CHUNK || (half && in_chunk(b.ids, cnt, id))) {
                bad |= update_chunk(&u, &b, b.ids, cnt, b.G) != HX_OPTIM_OK;
                cnt = 0;
            }
            b.ids[cnt] = id;
            memcpy(b.G + cnt * gs, g->rows + i * gs, (size_t)gs * sizeof(float));
            cnt++;
        }
        if (cnt) bad |= update_chunk(&u, &b, b.ids, cnt, b.G) != HX_OPTIM_OK;
    }
    free(mem);
    if (bad) return hx_emb_fail(err, HX_ERR_INTERNAL, "embedding update: the optimizer kernel refused its rows");
    return HX_OK;
}
