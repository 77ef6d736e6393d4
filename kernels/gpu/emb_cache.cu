/* A device cache of embedding rows (embedding/cache.h) on the GPU: the
 * host table's lookup/bag (embedding/emb_lookup.c), gradient sums
 * (emb_backward.c's hx_emb_group_sum) and sparse optimizer steps
 * (emb_update.c) over the cache's slots, bit for bit. Every output
 * element is computed by one thread in the host's order of positions, one
 * IEEE rounding per operation (the _rn intrinsics: nothing contracts), and
 * rows round to their storage dtype to nearest even, as the host's casts
 * do. */
#include "kernels/gpu/optim_elem.cuh"

template <typename T>
__global__ void emb_bag_kernel(const T *param, int64_t pstride, int64_t dim, const int64_t *slots,
                               int64_t n, int mode, const int64_t *bounds, int64_t nbags,
                               const float *weights, int has_padding, float *out, int64_t *argmax)
{
    int64_t items = (mode == HX_GK_EMB_ROWS ? n : nbags) * dim;
    GRID_STRIDE(i, items) {
        int64_t b = i / dim, k = i % dim;
        if (mode == HX_GK_EMB_ROWS) {
            int64_t s = slots[b];
            out[i] = s >= 0 ? ld(param + s * pstride + k) : 0.0f;
            continue;
        }
        float o = 0.0f;
        int64_t am = -1, cnt = 0;
        for (int64_t j = bounds[b]; j < bounds[b + 1]; j++) {
            int64_t s = slots[j];
            if (has_padding && s == -1) continue; /* the padding id: skipped */
            float r = s >= 0 ? ld(param + s * pstride + k) : 0.0f; /* < 0: a zero row */
            if (mode == HX_GK_EMB_MAX) {
                if (cnt == 0 || r > o) {
                    o = r;
                    am = j;
                }
                cnt++;
                continue;
            }
            cnt++;
            if (s < 0) continue;
            o = ADD(o, weights ? MUL(weights[j], r) : r);
        }
        if (mode == HX_GK_EMB_MEAN && cnt > 0) o = MUL(o, DIV(1.0f, (float)cnt));
        out[i] = o;
        if (mode == HX_GK_EMB_MAX && argmax) argmax[i] = am;
    }
}

hx_gk_status hx_gk_emb_bag(const hx_gk_ctx *c, hx_kdtype dt, const void *param, int64_t pstride,
                           int64_t dim, const int64_t *slots, int64_t n, int mode,
                           const int64_t *bounds, int64_t nbags, const float *weights,
                           int has_padding, float *out, int64_t *argmax)
{
    if (dim < 1 || pstride < dim || n < 0 || nbags < 0 || mode < HX_GK_EMB_ROWS || mode > HX_GK_EMB_MAX ||
        (mode != HX_GK_EMB_ROWS && !bounds) || (weights && mode != HX_GK_EMB_SUM))
        return HX_GK_BAD_ARG;
    int64_t items = (mode == HX_GK_EMB_ROWS ? n : nbags) * dim;
    if (!items) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        emb_bag_kernel<T><<<hx_gk_blocks(items, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (const T *)param, pstride, dim, slots, n, mode, bounds, nbags, weights, has_padding, out,
            argmax));
    return hx_gk_launched();
}

__global__ void emb_grad_sum_kernel(int mode, const float *dout, const int64_t *argmax, int64_t dim,
                                    const int64_t *start, int64_t U, const uint32_t *pos,
                                    const int64_t *bag_of, const float *scale, float *G)
{
    GRID_STRIDE(i, U * dim) {
        int64_t u = i / dim, k = i % dim;
        float acc = 0.0f;
        for (int64_t p = start[u]; p < start[u + 1]; p++) {
            int64_t j = pos[p], b = bag_of[j];
            float d = dout[b * dim + k];
            if (mode == HX_GK_EMB_MAX) {
                if (argmax[b * dim + k] == j) acc = ADD(acc, d);
            } else {
                acc = ADD(acc, MUL(scale[j], d));
            }
        }
        G[i] = acc;
    }
}

hx_gk_status hx_gk_emb_grad_sum(const hx_gk_ctx *c, int mode, const float *dout,
                                const int64_t *argmax, int64_t dim, const int64_t *start,
                                int64_t U, const uint32_t *pos, const int64_t *bag_of,
                                const float *scale, float *G)
{
    if (dim < 1 || U < 0 || mode < HX_GK_EMB_ROWS || mode > HX_GK_EMB_MAX ||
        (mode == HX_GK_EMB_MAX ? !argmax : !scale))
        return HX_GK_BAD_ARG;
    if (!U) return HX_GK_OK;
    emb_grad_sum_kernel<<<hx_gk_blocks(U * dim, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
        mode, dout, argmax, dim, start, U, pos, bag_of, scale, G);
    return hx_gk_launched();
}

template <typename T>
__global__ void emb_rows_update_kernel(hx_optim_plan pl, T *param, int64_t pstride, float *s0,
                                       float *s1, int64_t sstride, const int64_t *slots, int64_t U,
                                       const float *G, int64_t dim)
{
    GRID_STRIDE(i, U * dim) {
        int64_t u = i / dim, k = i % dim, s = slots[u];
        T *p = param + s * pstride + k;
        float z = 0.0f, *a = s0 ? s0 + s * sstride + k : &z, *b = s1 ? s1 + s * sstride + k : &z;
        st(p, hx_gk_optim_elem(pl, G[i], ld(p), a, b));
    }
}

hx_gk_status hx_gk_emb_rows_update(const hx_gk_ctx *c, const hx_optim_plan *pl, hx_kdtype dt,
                                   void *param, int64_t pstride, float *s0, float *s1,
                                   int64_t sstride, const int64_t *slots, int64_t U,
                                   const float *G, int64_t dim)
{
    int two = pl->kind == HX_OPT_ADAM || pl->kind == HX_OPT_FTRL;
    if (dim < 1 || pstride < dim || sstride < dim || U < 0 || pl->kind == HX_OPT_SGD ||
        pl->grad_dt != HX_K_F32 || pl->half_dt != HX_K_F32 || pl->unscale != 1.0f || pl->clip != 1.0f ||
        !s0 || (two && !s1))
        return HX_GK_BAD_ARG;
    if (!U) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        emb_rows_update_kernel<T><<<hx_gk_blocks(U * dim, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            *pl, (T *)param, pstride, s0, s1, sstride, slots, U, G, dim));
    return hx_gk_launched();
}

/* One thread per row: the mean of g^2 is summed in order of k, as on the host. */
template <typename T>
__global__ void emb_row_adagrad_kernel(float clr, float eps, float wd, T *param, int64_t pstride,
                                       float *acc, const int64_t *slots, int64_t U, const float *G,
                                       int64_t dim)
{
    GRID_STRIDE(u, U) {
        int64_t s = slots[u];
        T *p = param + s * pstride;
        const float *g = G + u * dim;
        float ss = 0.0f;
        for (int64_t k = 0; k < dim; k++) {
            float gk = wd != 0.0f ? FMA(wd, ld(p + k), g[k]) : g[k];
            ss = ADD(ss, MUL(gk, gk));
        }
        float a = ADD(acc[s], DIV(ss, (float)dim));
        acc[s] = a;
        float mult = DIV(clr, ADD(SQRT(a), eps));
        for (int64_t k = 0; k < dim; k++) {
            float pk = ld(p + k);
            float gk = wd != 0.0f ? FMA(wd, pk, g[k]) : g[k];
            st(p + k, SUB(pk, MUL(mult, gk)));
        }
    }
}

hx_gk_status hx_gk_emb_rows_row_adagrad(const hx_gk_ctx *c, float clr, float eps, float wd,
                                        hx_kdtype dt, void *param, int64_t pstride, float *acc,
                                        const int64_t *slots, int64_t U, const float *G,
                                        int64_t dim)
{
    if (dim < 1 || pstride < dim || U < 0 || !acc) return HX_GK_BAD_ARG;
    if (!U) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        emb_row_adagrad_kernel<T><<<hx_gk_blocks(U, 128), 128, 0, c->stream>>>(
            clr, eps, wd, (T *)param, pstride, acc, slots, U, G, dim));
    return hx_gk_launched();
}
