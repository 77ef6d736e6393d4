/* Optimizer updates on the device: the formulas of kernels/cpu/optim.h
 * (optim_body.h's order), each operation one IEEE rounding through the _rn
 * intrinsics, which nvcc never contracts. The per-call scalars come in the
 * plan the CPU path builds (hx_optim_plan_*), so params and state match the
 * CPU kernels bit for bit. Division by a per-call constant is a true
 * division here, whose bits the CPU's fast form reproduces. */
#include "kernels/gpu/gk_common.cuh"

__device__ __forceinline__ float load_grad(const void *g, int64_t i, int dt)
{
    if (dt == HX_K_F16) return __half2float(((const __half *)g)[i]);
    if (dt == HX_K_BF16) return __bfloat162float(((const __nv_bfloat16 *)g)[i]);
    return ((const float *)g)[i];
}

#define MUL __fmul_rn
#define ADD __fadd_rn
#define SUB __fsub_rn
#define DIV __fdiv_rn
#define FMA __fmaf_rn
#define SQRT __fsqrt_rn

__global__ void optim_kernel(hx_optim_plan c, float *pp, float *s1p, float *s2p, const void *gp,
                             void *half, int64_t n)
{
    GRID_STRIDE(i, n) {
        float g = MUL(MUL(load_grad(gp, i, c.grad_dt), c.unscale), c.clip);
        float p = pp[i];
        switch (c.kind) {
        case HX_OPT_ADAM: {
            float m = s1p[i], v = s2p[i];
            if (c.l2) g = FMA(c.wd, p, g);
            if (c.decoupled) p = MUL(p, c.decay);
            m = FMA(c.omb1, g, MUL(m, c.b1));
            v = ADD(MUL(v, c.b2), MUL(MUL(c.omb2, g), g));
            float den = SQRT(v);
            if (c.bc2s != 1.0f) den = DIV(den, c.bc2s);
            den = ADD(den, c.eps);
            p = SUB(p, DIV(MUL(c.step_size, m), den));
            s1p[i] = m;
            s2p[i] = v;
            break;
        }
        case HX_OPT_ADAGRAD: {
            float s = s1p[i];
            if (c.l2) g = FMA(c.wd, p, g);
            s = ADD(s, MUL(g, g));
            p = SUB(p, DIV(MUL(c.clr, g), ADD(SQRT(s), c.eps)));
            s1p[i] = s;
            break;
        }
        case HX_OPT_SGD: {
            if (c.l2) g = FMA(c.wd, p, g);
            float d = g;
            if (c.momentum) {
                float buf = c.first ? g : FMA(c.omd, g, MUL(s1p[i], c.mom));
                s1p[i] = buf;
                d = c.nesterov ? FMA(c.mom, buf, g) : buf;
            }
            p = FMA(c.neg_lr, d, p);
            break;
        }
        default: { /* FTRL */
            float acc = s1p[i], lin = s2p[i];
            float gs = c.shrink ? ADD(g, MUL(c.s2, p)) : g;
            float na = ADD(acc, MUL(g, g));
            float sq = SQRT(na);
            float sigma = DIV(SUB(sq, SQRT(acc)), c.lr);
            lin = ADD(lin, SUB(gs, MUL(sigma, p)));
            float x = SUB(copysignf(c.l1, lin), lin);
            float y = ADD(DIV(sq, c.lr), c.l2x2);
            p = fabsf(lin) > c.l1 ? DIV(x, y) : 0.0f;
            s1p[i] = na;
            s2p[i] = lin;
            break;
        }
        }
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
