/* Picks the vector-math path for the CPU hx_k_isa() reports. */
#include "hx_kernels.h"
#include "vmath.h"

const hx_vmath_path *hx__vmath(void)
{
    switch (hx_k_isa()) {
    case HX_ISA_AVX512: return &hx__vmath_avx512;
    case HX_ISA_AVX2: return &hx__vmath_avx2;
    case HX_ISA_SCALAR: break;
    }
    return &hx__vmath_scalar;
}
