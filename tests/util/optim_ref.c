/* The double-precision optimizer reference of optim_ref.h. */
#include "optim_ref.h"

#include <math.h>

static void sgd(const ref_optim *o, int64_t t, double g, double *p, double *buf)
{
    g += o->weight_decay * *p;
    double d = g;
    if (o->momentum != 0) {
        *buf = t == 1 ? g : o->momentum * *buf + (1 - o->dampening) * g;
        d = o->nesterov ? g + o->momentum * *buf : *buf;
    }
    *p -= o->lr * d;
}

static void adam(const ref_optim *o, int64_t t, double g, double *p, double *m, double *v)
{
    if (o->kind == REF_ADAMW) *p *= 1 - o->lr * o->weight_decay;
    else g += o->weight_decay * *p;
    *m = o->beta1 * *m + (1 - o->beta1) * g;
    *v = o->beta2 * *v + (1 - o->beta2) * g * g;
    double bc1 = 1 - pow(o->beta1, (double)t), bc2 = 1 - pow(o->beta2, (double)t);
    if (o->kind == REF_LAZY_ADAM) *p -= o->lr * sqrt(bc2) / bc1 * *m / (sqrt(*v) + o->eps);
    else *p -= o->lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + o->eps);
}

static void adagrad(const ref_optim *o, int64_t t, double g, double *p, double *sum)
{
    g += o->weight_decay * *p;
    *sum += g * g;
    *p -= o->lr / (1 + (double)(t - 1) * o->lr_decay) * g / (sqrt(*sum) + o->eps);
}

static void ftrl(const ref_optim *o, double g, double *p, double *accum, double *linear)
{
    double gs = g + 2 * o->l2_shrinkage * *p, n = *accum + g * g;
    *linear += gs - (sqrt(n) - sqrt(*accum)) / o->lr * *p;
    *p = fabs(*linear) > o->l1
             ? (copysign(o->l1, *linear) - *linear) / (sqrt(n) / o->lr + 2 * o->l2)
             : 0.0;
    *accum = n;
}

void ref_optim_step(const ref_optim *o, int64_t t, double g, double *p, double *s1, double *s2)
{
    switch (o->kind) {
    case REF_SGD: sgd(o, t, g, p, s1); break;
    case REF_ADAM: case REF_ADAMW: case REF_LAZY_ADAM: adam(o, t, g, p, s1, s2); break;
    case REF_ADAGRAD: adagrad(o, t, g, p, s1); break;
    case REF_FTRL: ftrl(o, g, p, s1, s2); break;
    case REF_ROW_ADAGRAD: break; /* a row at a time: ref_row_adagrad_step */
    }
}

void ref_row_adagrad_step(const ref_optim *o, int64_t t, const double *g, int64_t dim, double *p,
                          double *acc)
{
    double ss = 0;
    for (int64_t k = 0; k < dim; k++) {
        double gk = g[k] + o->weight_decay * p[k];
        ss += gk * gk;
    }
    *acc += ss / (double)dim;
    double mult = o->lr / (1 + (double)(t - 1) * o->lr_decay) / (sqrt(*acc) + o->eps);
    for (int64_t k = 0; k < dim; k++) p[k] -= mult * (g[k] + o->weight_decay * p[k]);
}

double ref_ulps(const float *got, const double *want, int64_t n, int64_t *at)
{
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    if (at) *at = n ? 0 : -1;
    for (int64_t i = 0; i < n; i++) {
        double a = fmax(fabs(want[i]), scale / 64);
        int e = -149 + 24; /* a = 0: the smallest spacing */
        if (a > 0) frexp(a, &e); /* a in [2^(e-1), 2^e) */
        double ulp = ldexp(1.0, e - 24 > -149 ? e - 24 : -149);
        double d = fabs((double)got[i] - want[i]) / ulp;
        if (isnan(d)) d = INFINITY;
        if (d > worst) {
            worst = d;
            if (at) *at = i;
        }
    }
    return worst;
}
