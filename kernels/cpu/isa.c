/* CPU feature detection and dtype sizes. */
#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hx_kernels.h"

size_t hx_k_dtype_size(hx_kdtype dt)
{
    switch (dt) {
    case HX_K_F32: return 4;
    case HX_K_F16: return 2;
    case HX_K_BF16: return 2;
    case HX_K_I32: return 4;
    case HX_K_I64: return 8;
    }
    return 0;
}

/* F16C from CPUID leaf 1 (not every compiler's __builtin_cpu_supports
 * knows it); its register state is that of AVX, checked with AVX2. */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* What the CPU and OS support. __builtin_cpu_supports also checks, through
 * XGETBV, that the OS saves the AVX / AVX-512 register state. */
static hx_isa isa_detect(void)
{
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    return avx512 ? HX_ISA_AVX512 : avx2 ? HX_ISA_AVX2 : HX_ISA_SCALAR;
}

/* HX_ISA=scalar|avx2|avx512 lowers the detected ISA; it never raises it. */
static hx_isa isa_apply_env(hx_isa best)
{
    const char *env = getenv("HX_ISA");
    if (!env) return best;
    hx_isa want = best;
    if (strcmp(env, "scalar") == 0) want = HX_ISA_SCALAR;
    else if (strcmp(env, "avx2") == 0) want = HX_ISA_AVX2;
    else if (strcmp(env, "avx512") == 0) want = HX_ISA_AVX512;
    return want < best ? want : best;
}

/* -1 until the first call; every thread computes the same value, so a race
 * between first callers only stores it twice. */
static atomic_int isa_cached = -1;

hx_isa hx_k_isa(void)
{
    int v = atomic_load_explicit(&isa_cached, memory_order_acquire);
    if (v < 0) {
        v = (int)isa_apply_env(isa_detect());
        atomic_store_explicit(&isa_cached, v, memory_order_release);
    }
    return (hx_isa)v;
}

const char *hx_k_isa_name(hx_isa isa)
{
    switch (isa) {
    case HX_ISA_SCALAR: return "scalar";
    case HX_ISA_AVX2: return "avx2";
    case HX_ISA_AVX512: return "avx512";
    }
    return "unknown";
}
