/* Dense optimizer updates on the device: each element through
 * hx_gk_optim_elem (optim_elem.cuh: the CPU kernels' formulas, one IEEE
 * rounding per operation), with the plan the CPU path builds
 * (hx_optim_plan_*), so params and state match the CPU kernels bit for
 * bit. */
#include "kernels/gpu/optim_elem.cuh"

__device__ __forceinline__ float load_grad(const void *g, int64_t i, int dt)
{
    if (dt == HX_K_F16) return __half2float(((const __half *)g)[i]);
    if (dt == HX_K_BF16) return __bfloat162float(((const __nv_bfloat16 *)g)[i]);
    return ((const float *)g)[i];
}

__global__ void optim_kernel(hx_optim_plan c, float *pp, float *s1p, float *s2p, const void *gp,
                             void *half, int64_t n)
{
    GRID_STRIDE(i, n) {
        float g = MUL(MUL(load_grad(gp, i, c.grad_dt), c.unscale), c.clip);
        float z = 0.0f, *s1 = s1p ? s1p + i : &z, *s2 = s2p ? s2p + i : &z;
        float p = hx_gk_optim_elem(c, g, pp[i], s1, s2);
        pp[i] = p;
        if (c.half_dt == HX_K_F16) ((__half *)half)[i] = __float2half_rn(p);
        else if (c.half_dt == HX_K_BF16) ((__nv_bfloat16 *)half)[i] = __float2bfloat16_rn(p);
    }
}

hx_gk_status hx_gk_optim_update(const hx_gk_ctx *c, const hx_optim_plan *pl, float *param,
                                float *s1, float *s2, const void *grad, void *half, int64_t n)
{
    int two_states = pl->kind == HX_OPT_ADAM || pl->kind == HX_OPT_FTRL;
    int one_state = two_states || pl->kind == HX_OPT_ADAGRAD || (pl->kind == HX_OPT_SGD && pl->momentum);
    if (n < 0 || (pl->grad_dt != HX_K_F32 && pl->grad_dt != HX_K_F16 && pl->grad_dt != HX_K_BF16) ||
        (pl->half_dt != HX_K_F32 && !half) || (one_state && !s1) || (two_states && !s2))
        return HX_GK_BAD_ARG;
    if (!n) return HX_GK_OK;
    optim_kernel<<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
        *pl, param, s1, s2, grad, half, n);
    return hx_gk_launched();
}
