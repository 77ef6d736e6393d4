/* The running error bound of optim_bound.h. Each helper below is one f32
 * operation of a kernel: its result's exact value and the bound on the
 * kernel's error, which is what the inputs' errors can do to the exact
 * result (propagated, first order plus the product of errors, so rigorous)
 * plus the operation's own rounding. */
#include "optim_bound.h"

#include <math.h>

#define U 0x1p-24   /* f32 round to nearest: |error| <= U * |result| */
#define ETA 0x1p-150 /* ... or half the subnormal spacing below 2^-126 */

/* A result x whose inputs' errors move it by at most prop, then rounded. */
static ref_eb rounded(double x, double prop)
{
    return (ref_eb){x, prop + U * (fabs(x) + prop) + ETA};
}

/* A hyper-parameter computed in double and rounded to f32 once. */
static ref_eb hyper(double v)
{
    return (ref_eb){v, fabs((double)(float)v - v)};
}

static ref_eb add(ref_eb a, ref_eb b) { return rounded(a.x + b.x, a.e + b.e); }
static ref_eb sub(ref_eb a, ref_eb b) { return rounded(a.x - b.x, a.e + b.e); }

static double mul_prop(ref_eb a, ref_eb b) { return fabs(a.x) * b.e + fabs(b.x) * a.e + a.e * b.e; }
static ref_eb mul(ref_eb a, ref_eb b) { return rounded(a.x * b.x, mul_prop(a, b)); }
static ref_eb fma_eb(ref_eb a, ref_eb b, ref_eb c) { return rounded(a.x * b.x + c.x, mul_prop(a, b) + c.e); }

/* |a'/b' - a/b| <= (e_a + |a/b| e_b) / (|b| - e_b) for |a' - a| <= e_a,
 * |b' - b| <= e_b < |b|; no bound where b' may be 0. */
static ref_eb div_eb(ref_eb a, ref_eb b)
{
    double room = fabs(b.x) - b.e;
    double prop = room > 0 ? (a.e + fabs(a.x / b.x) * b.e) / room : INFINITY;
    return rounded(a.x / b.x, prop);
}

/* |sqrt(a') - sqrt(a)| <= min(e / sqrt(a), sqrt(e)). */
static ref_eb sqrt_eb(ref_eb a)
{
    double x = a.x > 0 ? a.x : 0;
    double prop = x > 0 ? fmin(a.e / sqrt(x), sqrt(a.e)) : sqrt(a.e);
    return rounded(sqrt(x), prop);
}

ref_eb ref_eb_grad(double x, float unscale, float clip)
{
    ref_eb g = {x, 0};
    return mul(mul(g, (ref_eb){unscale, 0}), (ref_eb){clip, 0});
}

static void sgd(const ref_optim *o, int64_t t, ref_eb g, ref_eb *p, ref_eb *buf)
{
    if (o->weight_decay != 0) g = fma_eb(hyper(o->weight_decay), *p, g);
    ref_eb d = g;
    if (o->momentum != 0) {
        *buf = t == 1 ? g : fma_eb(hyper(1 - o->dampening), g, mul(*buf, hyper(o->momentum)));
        d = o->nesterov ? fma_eb(hyper(o->momentum), *buf, g) : *buf;
    }
    *p = fma_eb(hyper(-o->lr), d, *p);
}

/* Adam, AdamW and LazyAdam: LazyAdam folds sqrt(1 - b2^t) into the rate. */
static void adam(const ref_optim *o, int64_t t, ref_eb g, ref_eb *p, ref_eb *m, ref_eb *v)
{
    double bc1 = 1 - pow(o->beta1, (double)t), bc2 = 1 - pow(o->beta2, (double)t);
    if (o->kind == REF_ADAMW) *p = mul(*p, hyper(1 - o->lr * o->weight_decay));
    else if (o->weight_decay != 0) g = fma_eb(hyper(o->weight_decay), *p, g);
    *m = fma_eb(hyper(1 - o->beta1), g, mul(*m, hyper(o->beta1)));
    *v = add(mul(*v, hyper(o->beta2)), mul(mul(hyper(1 - o->beta2), g), g));
    ref_eb den = sqrt_eb(*v), rate;
    if (o->kind == REF_LAZY_ADAM) {
        rate = hyper(o->lr * sqrt(bc2) / bc1);
    } else {
        rate = hyper(o->lr / bc1);
        den = div_eb(den, hyper(sqrt(bc2)));
    }
    den = add(den, hyper(o->eps));
    *p = sub(*p, div_eb(mul(rate, *m), den));
}

static void adagrad(const ref_optim *o, int64_t t, ref_eb g, ref_eb *p, ref_eb *sum)
{
    if (o->weight_decay != 0) g = fma_eb(hyper(o->weight_decay), *p, g);
    *sum = add(*sum, mul(g, g));
    ref_eb den = add(sqrt_eb(*sum), hyper(o->eps));
    ref_eb rate = hyper(o->lr / (1 + (double)(t - 1) * o->lr_decay));
    *p = sub(*p, div_eb(mul(rate, g), den));
}

/* FTRL's scalars are f32 as in TensorFlow: lr, l1, 2 * l2, 2 * shrinkage. */
static void ftrl(const ref_optim *o, ref_eb g, ref_eb *p, ref_eb *accum, ref_eb *linear)
{
    ref_eb lr = hyper(o->lr), l1 = hyper(o->l1), l2x2 = hyper(o->l2);
    l2x2.x *= 2;
    l2x2.e *= 2;
    ref_eb gs = g;
    if (o->l2_shrinkage != 0) {
        ref_eb s2 = hyper(o->l2_shrinkage);
        s2.x *= 2;
        s2.e *= 2;
        gs = add(g, mul(s2, *p));
    }
    ref_eb n = add(*accum, mul(g, g)), sq = sqrt_eb(n);
    ref_eb sigma = div_eb(sub(sq, sqrt_eb(*accum)), lr);
    *linear = add(*linear, sub(gs, mul(sigma, *p)));
    ref_eb signed_l1 = {copysign(l1.x, linear->x), l1.e};
    ref_eb f = div_eb(sub(signed_l1, *linear), add(div_eb(sq, lr), l2x2));
    /* |linear| > l1 decides between f and 0: where the f32 values may
     * decide otherwise than the exact ones, either can come out */
    double x = fabs(linear->x) > l1.x ? f.x : 0;
    if (fabs(fabs(linear->x) - l1.x) <= linear->e + l1.e)
        *p = (ref_eb){x, fmax(fabs(x - f.x) + f.e, fabs(x))};
    else
        *p = x != 0 ? f : (ref_eb){0, 0};
    *accum = n;
}

void ref_eb_step(const ref_optim *o, int64_t t, ref_eb g, ref_eb *p, ref_eb *s1, ref_eb *s2)
{
    switch (o->kind) {
    case REF_SGD: sgd(o, t, g, p, s1); break;
    case REF_ADAM: case REF_ADAMW: case REF_LAZY_ADAM: adam(o, t, g, p, s1, s2); break;
    case REF_ADAGRAD: adagrad(o, t, g, p, s1); break;
    case REF_FTRL: ftrl(o, g, p, s1, s2); break;
    case REF_ROW_ADAGRAD: break; /* not bounded here */
    }
}

void ref_eb_row_adagrad_step(const ref_optim *o, int64_t t, const float *g, int64_t dim, ref_eb *p,
                             ref_eb *acc)
{
    ref_eb ss = {0, 0};
    for (int64_t k = 0; k < dim; k++) {
        ref_eb gk = {g[k], 0};
        if (o->weight_decay != 0) gk = fma_eb(hyper(o->weight_decay), p[k], gk);
        ss = add(ss, mul(gk, gk));
    }
    *acc = add(*acc, div_eb(ss, (ref_eb){(double)dim, 0}));
    ref_eb rate = hyper(o->lr / (1 + (double)(t - 1) * o->lr_decay));
    ref_eb mult = div_eb(rate, add(sqrt_eb(*acc), hyper(o->eps)));
    for (int64_t k = 0; k < dim; k++) {
        ref_eb gk = {g[k], 0};
        if (o->weight_decay != 0) gk = fma_eb(hyper(o->weight_decay), p[k], gk);
        p[k] = sub(p[k], mul(mult, gk));
    }
}

double ref_eb_ratio(float got, double want, double e)
{
    double d = fabs((double)got - want);
    if (isnan(d)) return INFINITY;
    if (e == 0) return d == 0 ? 0 : INFINITY;
    return d / e;
}
