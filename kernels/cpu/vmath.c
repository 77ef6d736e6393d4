/* Picks the vector-math and row-kernel paths for the CPU hx_k_isa()
 * reports; the blocked sum of exponentials that cross-entropy uses. */
#include "hx_kernels.h"
#include "rows_path.h"
#include "vmath.h"

/* indexed by hx_isa: scalar 0, AVX2 1, AVX-512 2 */
const hx_vmath_path *hx__vmath(void)
{
    static const hx_vmath_path *const paths[] = {&hx__vmath_scalar, &hx__vmath_avx2,
                                                  &hx__vmath_avx512};
    return paths[hx_k_isa()];
}

const hx_rows_path *hx__rows(void)
{
    static const hx_rows_path *const paths[] = {&hx__rows_scalar, &hx__rows_avx2,
                                                 &hx__rows_avx512};
    return paths[hx_k_isa()];
}

float hx__vmath_sum_exp(const float *x, float shift, int64_t n)
{
    const hx_vmath_path *p = hx__vmath();
    float sum = 0.0f, e[HX_VMATH_BLOCK];
    for (int64_t i = 0; i < n; i += HX_VMATH_BLOCK)
        sum += p->exp_shift_sum(e, x + i, shift, n - i < HX_VMATH_BLOCK ? n - i : HX_VMATH_BLOCK);
    return sum;
}
