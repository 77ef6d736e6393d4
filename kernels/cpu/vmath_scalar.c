/* Vector math and row kernels, scalar path: one lane, for CPUs without AVX2 and for
 * HX_ISA=scalar; the same roundings as the vector paths (fmaf is one
 * rounding on any CPU). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hx_kinternal.h" /* before the vocabulary: hx_kernels.h has a field W */
#include "vec_scalar.h"

typedef int M;

static inline V pow2_scalar(V n)
{
    uint32_t u = (uint32_t)((int32_t)n + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define V_MAX(a, b) ((a) > (b) ? (a) : (b))
#define V_MIN(a, b) ((a) < (b) ? (a) : (b))
#define V_FLOOR(x) floorf(x)
#define V_RINT(x) nearbyintf(x)
#define V_POW2(n) pow2_scalar(n)
#define V_LT(a, b) ((a) < (b))
#define V_GE(a, b) ((a) >= (b))
#define V_EQ(a, b) ((a) == (b))
#define V_ISNAN(x) isnan(x)
#define V_SEL(m, a, b) ((m) ? (a) : (b))
#define PATH hx__vmath_scalar

#include "vmath_body.h"

#define ROWS_PATH hx__rows_scalar
#include "rows_body.h"
