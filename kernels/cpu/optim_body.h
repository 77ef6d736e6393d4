/* The optimizer loops, written once over a small vector vocabulary. Each
 * path's file (optim_scalar.c, optim_avx2.c, optim_avx512.c) defines the
 * vocabulary (the float words from vec_<path>.h, shared with vmath_*.c; the
 * rest itself) and includes this file once; everything here is static.
 *
 *   W, V                        lanes, vector of W floats
 *   V_LOAD(p) V_STORE(p, x)     f32, any alignment
 *   V_SET1(x) V_ADD V_SUB V_MUL V_DIV V_SQRT
 *   V_FMA(a, b, c)              a*b + c with one rounding
 *   V_ABS(x) V_COPYSIGN(m, s)   |x|; |m| with the sign of s
 *   V_GT_OR0(a, b, x)           a > b ? x : 0, per lane
 *   V_LOAD_F16(p) V_LOAD_BF16(p)           p: const uint16_t *, exact
 *   H                           W 16-bit values
 *   V_TO_F16(x) V_TO_BF16(x, native)
 *                               round to nearest even, NaN stays NaN;
 *                               native: the CPU has vcvtneps2bf16
 *   H_STORE(p, h) H_STREAM(p, h) H_FENCE()
 *                               store (any alignment); streaming store (p
 *                               aligned to the size of H); order the
 *                               streaming stores before what follows
 *   V_DIV_BY(x, b, rb)          x / b for a per-call constant b in
 *                               [2^-30, 2^30] with rb = RN(1/b): the same
 *                               bits as V_DIV(x, b), by whatever means is
 *                               fastest on the path
 *   max_abs                     the path's hx_optim_path.max_abs
 *   PATH_NAME                   the hx_optim_path this file defines
 *
 * The formulas are the ones written in optim.h, one vocabulary operation
 * per rounding; the including file turns off fp-contract so that the
 * compiler fuses nothing else. Tails shorter than W go through a zeroed
 * W-element staging copy, so every element of every path takes the same
 * operations. */
#include <stdint.h>
#include <string.h>

#include "optim_internal.h"

#define HX_INLINE static inline __attribute__((always_inline))

HX_INLINE V load_grad(const void *g, int64_t i, const hx_kdtype dt, V unscale, V clip)
{
    V x;
    if (dt == HX_K_F16) x = V_LOAD_F16((const uint16_t *)g + i);
    else if (dt == HX_K_BF16) x = V_LOAD_BF16((const uint16_t *)g + i);
    else x = V_LOAD((const float *)g + i);
    return V_MUL(V_MUL(x, unscale), clip);
}

HX_INLINE void store_half(void *h, int64_t i, const hx_kdtype dt, V x, const hx_optim_plan *c)
{
    if (dt == HX_K_F32) return;
    H r = dt == HX_K_F16 ? V_TO_F16(x) : V_TO_BF16(x, c->native_bf16);
    if (c->stream_half) H_STREAM((uint16_t *)h + i, r);
    else H_STORE((uint16_t *)h + i, r);
}

/* x / b for the call's constant b (fast: b in the range V_DIV_BY takes). */
HX_INLINE V div_const(V x, float b, float rb, int fast)
{
    return fast ? V_DIV_BY(x, V_SET1(b), V_SET1(rb)) : V_DIV(x, V_SET1(b));
}

/* ---- one vector of each kernel, at element i ------------------------------ */

HX_INLINE void adam_at(const hx_optim_plan *c, hx_optim_arrays a, int64_t i, const hx_kdtype gdt,
                       const hx_kdtype hdt)
{
    V g = load_grad(a.g, i, gdt, V_SET1(c->unscale), V_SET1(c->clip));
    V p = V_LOAD(a.p + i), m = V_LOAD(a.s1 + i), v = V_LOAD(a.s2 + i);
    if (c->l2) g = V_FMA(V_SET1(c->wd), p, g);
    if (c->decoupled) p = V_MUL(p, V_SET1(c->decay));
    m = V_FMA(V_SET1(c->omb1), g, V_MUL(m, V_SET1(c->b1)));
    v = V_ADD(V_MUL(v, V_SET1(c->b2)), V_MUL(V_MUL(V_SET1(c->omb2), g), g));
    V den = V_SQRT(v);
    if (c->bc2s != 1.0f) /* (LazyAdam's, and Adam's once b2^t < 2^-24); x / 1 is x */
        den = div_const(den, c->bc2s, c->rbc2s, c->bc2s_fast);
    den = V_ADD(den, V_SET1(c->eps));
    p = V_SUB(p, V_DIV(V_MUL(V_SET1(c->step_size), m), den));
    V_STORE(a.p + i, p);
    V_STORE(a.s1 + i, m);
    V_STORE(a.s2 + i, v);
    store_half(a.h, i, hdt, p, c);
}

HX_INLINE void adagrad_at(const hx_optim_plan *c, hx_optim_arrays a, int64_t i,
                          const hx_kdtype gdt, const hx_kdtype hdt)
{
    V g = load_grad(a.g, i, gdt, V_SET1(c->unscale), V_SET1(c->clip));
    V p = V_LOAD(a.p + i), s = V_LOAD(a.s1 + i);
    if (c->l2) g = V_FMA(V_SET1(c->wd), p, g);
    s = V_ADD(s, V_MUL(g, g));
    V den = V_ADD(V_SQRT(s), V_SET1(c->eps));
    p = V_SUB(p, V_DIV(V_MUL(V_SET1(c->clr), g), den));
    V_STORE(a.p + i, p);
    V_STORE(a.s1 + i, s);
    store_half(a.h, i, hdt, p, c);
}

HX_INLINE void sgd_at(const hx_optim_plan *c, hx_optim_arrays a, int64_t i, const hx_kdtype gdt,
                      const hx_kdtype hdt)
{
    V g = load_grad(a.g, i, gdt, V_SET1(c->unscale), V_SET1(c->clip));
    V p = V_LOAD(a.p + i);
    if (c->l2) g = V_FMA(V_SET1(c->wd), p, g);
    V d = g;
    if (c->momentum) {
        V buf = c->first ? g : V_FMA(V_SET1(c->omd), g, V_MUL(V_LOAD(a.s1 + i), V_SET1(c->mom)));
        V_STORE(a.s1 + i, buf);
        d = c->nesterov ? V_FMA(V_SET1(c->mom), buf, g) : buf;
    }
    p = V_FMA(V_SET1(c->neg_lr), d, p);
    V_STORE(a.p + i, p);
    store_half(a.h, i, hdt, p, c);
}

HX_INLINE void ftrl_at(const hx_optim_plan *c, hx_optim_arrays a, int64_t i, const hx_kdtype gdt,
                       const hx_kdtype hdt)
{
    V g = load_grad(a.g, i, gdt, V_SET1(c->unscale), V_SET1(c->clip));
    V p = V_LOAD(a.p + i), acc = V_LOAD(a.s1 + i), lin = V_LOAD(a.s2 + i);
    V gs = c->shrink ? V_ADD(g, V_MUL(V_SET1(c->s2), p)) : g;
    V na = V_ADD(acc, V_MUL(g, g));
    V sq = V_SQRT(na);
    V sigma = div_const(V_SUB(sq, V_SQRT(acc)), c->lr, c->rlr, c->lr_fast);
    lin = V_ADD(lin, V_SUB(gs, V_MUL(sigma, p)));
    V x = V_SUB(V_COPYSIGN(V_SET1(c->l1), lin), lin);
    V y = V_ADD(div_const(sq, c->lr, c->rlr, c->lr_fast), V_SET1(c->l2x2));
    p = V_GT_OR0(V_ABS(lin), V_SET1(c->l1), V_DIV(x, y));
    V_STORE(a.p + i, p);
    V_STORE(a.s1 + i, na);
    V_STORE(a.s2 + i, lin);
    store_half(a.h, i, hdt, p, c);
}

/* ---- runs of n elements ----------------------------------------------------- */

typedef struct staged {
    float p[W], s1[W], s2[W], g[W];
    uint16_t h[W];
} staged;

/* Copies r < W elements from i into the zeroed staging arrays. */
HX_INLINE hx_optim_arrays stage_in(staged *s, hx_optim_arrays a, int64_t i, int64_t r,
                                   const hx_kdtype gdt)
{
    size_t gsz = gdt == HX_K_F32 ? 4 : 2;
    memset(s, 0, sizeof *s);
    memcpy(s->p, a.p + i, (size_t)r * 4);
    if (a.s1) memcpy(s->s1, a.s1 + i, (size_t)r * 4);
    if (a.s2) memcpy(s->s2, a.s2 + i, (size_t)r * 4);
    memcpy(s->g, (const char *)a.g + (size_t)i * gsz, (size_t)r * gsz);
    hx_optim_arrays t = {s->p, a.s1 ? s->s1 : NULL, a.s2 ? s->s2 : NULL, s->g,
                         a.h ? s->h : NULL};
    return t;
}

HX_INLINE void stage_out(const staged *s, hx_optim_arrays a, int64_t i, int64_t r)
{
    memcpy(a.p + i, s->p, (size_t)r * 4);
    if (a.s1) memcpy(a.s1 + i, s->s1, (size_t)r * 4);
    if (a.s2) memcpy(a.s2 + i, s->s2, (size_t)r * 4);
    if (a.h) memcpy((uint16_t *)a.h + i, s->h, (size_t)r * 2);
}

#define DEFINE_RUN(kind)                                                                   \
    HX_INLINE void kind##_run(const hx_optim_plan *c, hx_optim_arrays a, int64_t n,       \
                              const hx_kdtype gdt, const hx_kdtype hdt, const int pf)     \
    {                                                                                      \
        int64_t i = 0;                                                                     \
        for (; i + W <= n; i += W) {                                                       \
            if (pf && i + HX_OPTIM_PF_DIST < n) {                                          \
                int64_t f = i + HX_OPTIM_PF_DIST;                                          \
                __builtin_prefetch(a.p + f, 1, 3);                                         \
                if (a.s1) __builtin_prefetch(a.s1 + f, 1, 3);                              \
                if (a.s2) __builtin_prefetch(a.s2 + f, 1, 3);                              \
                __builtin_prefetch((const char *)a.g + f * (gdt == HX_K_F32 ? 4 : 2), 0, 3);  \
            }                                                                              \
            kind##_at(c, a, i, gdt, hdt);                                                  \
        }                                                                                  \
        if (i < n) {                                                                       \
            staged s;                                                                      \
            kind##_at(c, stage_in(&s, a, i, n - i, gdt), 0, gdt, hdt);                     \
            stage_out(&s, a, i, n - i);                                                    \
        }                                                                                  \
    }

DEFINE_RUN(adam)
DEFINE_RUN(adagrad)
DEFINE_RUN(sgd)
DEFINE_RUN(ftrl)

/* One loop per (grad dtype, half dtype), each with its loads and stores
 * fixed at compile time. */
#define DISPATCH_DTYPES(run, c, a, n)                                      \
    switch ((c)->grad_dt * 3 + (c)->half_dt) {                             \
    case HX_K_F32 * 3 + HX_K_F32: run(c, a, n, HX_K_F32, HX_K_F32, 1); break;   \
    case HX_K_F32 * 3 + HX_K_F16: run(c, a, n, HX_K_F32, HX_K_F16, 1); break;   \
    case HX_K_F32 * 3 + HX_K_BF16: run(c, a, n, HX_K_F32, HX_K_BF16, 1); break; \
    case HX_K_F16 * 3 + HX_K_F32: run(c, a, n, HX_K_F16, HX_K_F32, 1); break;   \
    case HX_K_F16 * 3 + HX_K_F16: run(c, a, n, HX_K_F16, HX_K_F16, 1); break;   \
    case HX_K_F16 * 3 + HX_K_BF16: run(c, a, n, HX_K_F16, HX_K_BF16, 1); break; \
    case HX_K_BF16 * 3 + HX_K_F32: run(c, a, n, HX_K_BF16, HX_K_F32, 1); break; \
    case HX_K_BF16 * 3 + HX_K_F16: run(c, a, n, HX_K_BF16, HX_K_F16, 1); break; \
    default: run(c, a, n, HX_K_BF16, HX_K_BF16, 1); break;                  \
    }

static void body_update(const hx_optim_plan *pl, hx_optim_arrays a, int64_t n)
{
    const hx_optim_plan c = *pl;
    switch (c.kind) {
    case HX_OPT_ADAM: DISPATCH_DTYPES(adam_run, &c, a, n); break;
    case HX_OPT_ADAGRAD: DISPATCH_DTYPES(adagrad_run, &c, a, n); break;
    case HX_OPT_SGD: DISPATCH_DTYPES(sgd_run, &c, a, n); break;
    case HX_OPT_FTRL: DISPATCH_DTYPES(ftrl_run, &c, a, n); break;
    }
    if (c.stream_half) H_FENCE();
}

/* ---- rows ------------------------------------------------------------------------ */

/* Prefetches each 64-byte line of [x, x + nbytes) once (a 64-float row on
 * aligned lines: 4, where stepping from x and adding the last byte took 5). */
HX_INLINE void prefetch_span(const void *x, int64_t nbytes)
{
    if (nbytes <= 0) return;
    uintptr_t b = (uintptr_t)x & ~(uintptr_t)63, e = (uintptr_t)x + (uintptr_t)nbytes;
    for (; b < e; b += 64) __builtin_prefetch((const void *)b, 1, HX_OPTIM_ROW_HINT);
}

/* Prefetches the rows of the first entry at or after j that `part` owns;
 * returns the position after it. */
HX_INLINE int64_t prefetch_next(hx_optim_arrays a, const int64_t *ids, int64_t j, int64_t n,
                                int64_t dim, int part, int nparts)
{
    while (j < n && nparts > 1 && hx_optim_row_owner(ids[j], nparts) != part) j++;
    if (j >= n) return n;
    int64_t off = ids[j] * dim, bytes = dim * 4;
    prefetch_span(a.p + off, bytes);
    if (a.s1) prefetch_span(a.s1 + off, bytes);
    if (a.s2) prefetch_span(a.s2 + off, bytes);
    prefetch_span((const float *)a.g + j * dim, bytes);
    return j + 1;
}

HX_INLINE void rows_loop(const hx_optim_plan *c, hx_optim_arrays a, const int64_t *ids, int64_t n,
                         int64_t dim, int part, int nparts, const hx_optim_kind kind)
{
    int64_t ahead = 0;
    for (int k = 0; k < HX_OPTIM_ROW_AHEAD; k++)
        ahead = prefetch_next(a, ids, ahead, n, dim, part, nparts);
    for (int64_t i = 0; i < n; i++) {
        if (nparts > 1 && hx_optim_row_owner(ids[i], nparts) != part) continue;
        ahead = prefetch_next(a, ids, ahead, n, dim, part, nparts);
        int64_t off = ids[i] * dim;
        hx_optim_arrays t = {a.p + off, a.s1 ? a.s1 + off : NULL, a.s2 ? a.s2 + off : NULL,
                             (const float *)a.g + i * dim, NULL};
        if (kind == HX_OPT_ADAM) adam_run(c, t, dim, HX_K_F32, HX_K_F32, 0);
        else if (kind == HX_OPT_ADAGRAD) adagrad_run(c, t, dim, HX_K_F32, HX_K_F32, 0);
        else ftrl_run(c, t, dim, HX_K_F32, HX_K_F32, 0);
    }
}

/* Row kernels are Adam (LazyAdam), Adagrad and FTRL. */
static void body_update_rows(const hx_optim_plan *pl, hx_optim_arrays a, const int64_t *ids,
                             int64_t n, int64_t dim, int part, int nparts)
{
    const hx_optim_plan c = *pl;
    if (c.kind == HX_OPT_ADAM) rows_loop(&c, a, ids, n, dim, part, nparts, HX_OPT_ADAM);
    else if (c.kind == HX_OPT_ADAGRAD) rows_loop(&c, a, ids, n, dim, part, nparts, HX_OPT_ADAGRAD);
    else rows_loop(&c, a, ids, n, dim, part, nparts, HX_OPT_FTRL);
}

static void body_div_const(float *q, const float *x, int64_t n, float b)
{
    float rb = 1.0f / b;
    int fast = hx_optim_div_fast(b);
    int64_t i = 0;
    for (; i + W <= n; i += W) V_STORE(q + i, div_const(V_LOAD(x + i), b, rb, fast));
    if (i < n) {
        float t[W];
        memset(t, 0, sizeof t);
        memcpy(t, x + i, (size_t)(n - i) * 4);
        V_STORE(t, div_const(V_LOAD(t), b, rb, fast));
        memcpy(q + i, t, (size_t)(n - i) * 4);
    }
}

const hx_optim_path PATH_NAME = {body_update, body_update_rows, max_abs, body_div_const};
