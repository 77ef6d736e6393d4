/* A bound on the f32 optimizer kernels' error, derived instead of measured:
 * each kernel written out in double in the order docs/numerics.md gives
 * for f32, every quantity carried with a bound on how far the kernel's f32
 * value of it can be from its exact value (running error analysis: each
 * operation adds its inputs' errors, scaled by how the operation amplifies
 * them, and its own rounding, 2^-24 of its result plus 2^-150 below the
 * normal range; every hyper-parameter rounded to f32 once carries its
 * rounding). The bounds hold for any data and any seed, where a bound in
 * ulps measured on some data does not: a moment that cancels, then a small
 * sqrt(v) dividing it, can put the parameter a hundred ulps from the
 * reference on data the measurement never saw, and the bound then grows
 * with it. A kernel that computes something else (another order, a wrong
 * constant, a missing term) is off by far more than its bound. */
#ifndef HX_TEST_OPTIM_BOUND_H
#define HX_TEST_OPTIM_BOUND_H

#include <stdint.h>

#include "optim_ref.h"

/* A quantity: its exact value and a bound on |f32 value - x|. */
typedef struct ref_eb {
    double x, e;
} ref_eb;

/* The gradient the kernels see, (x * unscale) * clip in f32, x the raw
 * gradient converted exactly to f32 (docs/numerics.md). */
ref_eb ref_eb_grad(double x, float unscale, float clip);

/* One step t >= 1 of one element, as ref_optim_step (the same kinds but
 * ROW_ADAGRAD: ref_eb_row_adagrad_step), on the values and bounds of p and the state s1, s2. */
void ref_eb_step(const ref_optim *o, int64_t t, ref_eb g, ref_eb *p, ref_eb *s1, ref_eb *s2);

/* One step t of row-wise Adagrad on a row of dim elements, as
 * ref_row_adagrad_step: p and g (its f32 gradient, exact) have dim
 * elements, acc is the row's accumulator. */
void ref_eb_row_adagrad_step(const ref_optim *o, int64_t t, const float *g, int64_t dim, ref_eb *p,
                             ref_eb *acc);

/* How far got is from want (the double reference) in units of the bound
 * e: <= 1 when the kernel is within it (a bound of 0 asks for equality,
 * with the double reference's own rounding allowed). */
double ref_eb_ratio(float got, double want, double e);

#endif
