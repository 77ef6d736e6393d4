/* One element of an optimizer update on the device: the formulas of
 * kernels/cpu/optim.h in optim_body.h's order, each operation one IEEE
 * rounding through the _rn intrinsics, which nvcc never contracts. The
 * per-call scalars come in the plan the CPU path builds, so params and
 * state match the CPU kernels bit for bit. Division by a per-call constant
 * is a true division here, whose bits the CPU's fast form reproduces.
 * Shared by the dense update (optim.cu) and the row updates of a device
 * cache (emb_cache.cu). */
#ifndef HX_GK_OPTIM_ELEM_CUH
#define HX_GK_OPTIM_ELEM_CUH

#include "kernels/gpu/gk_common.cuh"

#define MUL __fmul_rn
#define ADD __fadd_rn
#define SUB __fsub_rn
#define DIV __fdiv_rn
#define FMA __fmaf_rn
#define SQRT __fsqrt_rn

/* The new value of param p under gradient g (already unscaled and
 * clipped); s1, s2 the element's state (read and written as the kind
 * needs: Adam m, v; Adagrad sum; SGD momentum buffer; FTRL accum, linear). */
__device__ __forceinline__ float hx_gk_optim_elem(const hx_optim_plan &c, float g, float p, float *s1,
                                                  float *s2)
{
    switch (c.kind) {
    case HX_OPT_ADAM: {
        float m = *s1, v = *s2;
        if (c.l2) g = FMA(c.wd, p, g);
        if (c.decoupled) p = MUL(p, c.decay);
        m = FMA(c.omb1, g, MUL(m, c.b1));
        v = ADD(MUL(v, c.b2), MUL(MUL(c.omb2, g), g));
        float den = SQRT(v);
        if (c.bc2s != 1.0f) den = DIV(den, c.bc2s);
        den = ADD(den, c.eps);
        p = SUB(p, DIV(MUL(c.step_size, m), den));
        *s1 = m;
        *s2 = v;
        return p;
    }
    case HX_OPT_ADAGRAD: {
        float s = *s1;
        if (c.l2) g = FMA(c.wd, p, g);
        s = ADD(s, MUL(g, g));
        p = SUB(p, DIV(MUL(c.clr, g), ADD(SQRT(s), c.eps)));
        *s1 = s;
        return p;
    }
    case HX_OPT_SGD: {
        if (c.l2) g = FMA(c.wd, p, g);
        float d = g;
        if (c.momentum) {
            float buf = c.first ? g : FMA(c.omd, g, MUL(*s1, c.mom));
            *s1 = buf;
            d = c.nesterov ? FMA(c.mom, buf, g) : buf;
        }
        return FMA(c.neg_lr, d, p);
    }
    default: { /* FTRL */
        float acc = *s1, lin = *s2;
        float gs = c.shrink ? ADD(g, MUL(c.s2, p)) : g;
        float na = ADD(acc, MUL(g, g));
        float sq = SQRT(na);
        float sigma = DIV(SUB(sq, SQRT(acc)), c.lr);
        lin = ADD(lin, SUB(gs, MUL(sigma, p)));
        float x = SUB(copysignf(c.l1, lin), lin);
        float y = ADD(DIV(sq, c.lr), c.l2x2);
        p = fabsf(lin) > c.l1 ? DIV(x, y) : 0.0f;
        *s1 = na;
        *s2 = lin;
        return p;
    }
    }
}

#endif
