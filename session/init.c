/* Parameter initialisers. Each element's value is a pure function of
 * (session seed, parameter name, element index), so initial values do not
 * depend on graph order or thread count. */
#include "session/session.h"
#include "scheduler/scheduler.h"
#include "kernels/cpu/hx_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1), never exactly 0 (Box-Muller takes its log). */
static double uniform01(uint64_t key, uint64_t i)
{
    return ((double)(mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull) >> 11) + 0.5) * 0x1.0p-53;
}

static double normal01(uint64_t key, uint64_t i)
{
    double u1 = uniform01(key, 2 * i), u2 = uniform01(key, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* fan_in, fan_out: the last two dims, times the product of the others. */
static void fans(const hx_tensor *t, double *fan_in, double *fan_out)
{
    if (t->ndim == 0) { *fan_in = *fan_out = 1; return; }
    if (t->ndim == 1) { *fan_in = *fan_out = (double)t->shape[0]; return; }
    double rest = (double)hx__numel(t->ndim - 2, t->shape);
    *fan_in = rest * (double)t->shape[t->ndim - 2];
    *fan_out = rest * (double)t->shape[t->ndim - 1];
}

hx_status hx__param_init(const hx_tensor *t, void *data, uint64_t session_seed, int nthreads)
{
    int64_t n = hx_tensor_numel(t);
    float *f = t->dtype == HX_DTYPE_F32 ? data : malloc(sizeof *f * (n ? n : 1));
    if (!f)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory for '%s'",
                         t->name);
    uint64_t key = mix64(session_seed ^ XXH3_64bits(t->name, strlen(t->name)));
    hx_init in = t->init;
    double fi, fo;
    fans(t, &fi, &fo);
    double xavier_u = in.a * sqrt(6.0 / (fi + fo)), xavier_n = in.a * sqrt(2.0 / (fi + fo));
    for (int64_t i = 0; i < n; i++) {
        double v = 0;
        switch (in.kind) {
        case HX_INIT_ZEROS: v = 0; break;
        case HX_INIT_CONSTANT: v = in.a; break;
        case HX_INIT_UNIFORM: v = in.a + (in.b - in.a) * uniform01(key, i); break;
        case HX_INIT_NORMAL: v = in.a + in.b * normal01(key, i); break;
        case HX_INIT_XAVIER_UNIFORM: v = xavier_u * (2 * uniform01(key, i) - 1); break;
        case HX_INIT_XAVIER_NORMAL: v = xavier_n * normal01(key, i); break;
        }
        f[i] = (float)v;
    }
    if (f != data) {
        hx_k_cast(data, (hx_kdtype)t->dtype, f, HX_K_F32, n, nthreads);
        free(f);
    }
    return HX_OK;
}
