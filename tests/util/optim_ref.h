/* The optimizers of hetex written out in double, one element (or one row)
 * at a time, from the frameworks' published algorithms and independent of
 * the kernels (docs/numerics.md gives the f32 order the kernels follow):
 *   SGD      torch.optim.SGD: L2 decay, momentum (the first step sets the
 *            buffer to g), dampening, Nesterov
 *   ADAM     torch.optim.Adam (L2 decay on the gradient); ADAMW decoupled
 *   ADAGRAD  torch.optim.Adagrad (L2 decay, lr_decay)
 *   FTRL     TensorFlow ApplyFtrlV2, lr_power -1/2 (l2_shrinkage 0: ApplyFtrl)
 *   LAZY_ADAM  TF Addons LazyAdam: the bias correction folded into the
 *            rate, eps not corrected (L2 decay as hetex's tables allow)
 *   ROW_ADAGRAD  FBGEMM's row-wise Adagrad: one accumulator per row, the
 *            mean of g^2 added to it
 * And ref_ulps, the error measure the tests state their bounds in. */
#ifndef HX_TEST_OPTIM_REF_H
#define HX_TEST_OPTIM_REF_H

#include <stdint.h>

typedef enum ref_optim_kind {
    REF_SGD, REF_ADAM, REF_ADAMW, REF_ADAGRAD, REF_FTRL, REF_LAZY_ADAM, REF_ROW_ADAGRAD
} ref_optim_kind;

/* Hyper-parameters; fields a kind does not use are ignored. */
typedef struct ref_optim {
    ref_optim_kind kind;
    double lr, weight_decay;
    double momentum, dampening;
    int nesterov;
    double beta1, beta2, eps;
    double lr_decay;
    double l1, l2, l2_shrinkage;
} ref_optim;

/* One step t >= 1 of one element with gradient g: p the parameter; s1, s2
 * its state (SGD: momentum buffer; Adam, AdamW, LazyAdam: m, v; Adagrad:
 * sum; FTRL: accum, linear). Not for ROW_ADAGRAD. */
void ref_optim_step(const ref_optim *o, int64_t t, double g, double *p, double *s1, double *s2);

/* One step t of row-wise Adagrad on a row: p and g have dim elements, acc
 * is the row's accumulator. */
void ref_row_adagrad_step(const ref_optim *o, int64_t t, const double *g, int64_t dim, double *p,
                          double *acc);

/* The error the tests bound: the largest |got - want| over n elements, in
 * ulps of f32 at max(|want_i|, W / 64), W the largest |want_j| of the
 * array. Elements within 1/64 of the array's scale are measured against
 * their own ulp; smaller ones (where a subtraction may cancel to near
 * zero) against the ulp of W / 64. A NaN counts as Inf. *at receives the
 * worst index (may be NULL). */
double ref_ulps(const float *got, const double *want, int64_t n, int64_t *at);

#endif
