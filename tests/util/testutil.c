#include "testutil.h"

#include <math.h>

int hx_test_failures = 0;
int hx_test_checks = 0;

bool test_vcheck(bool ok, const char *file, int line, const char *fmt, va_list ap)
{
    hx_test_checks++;
    if (ok) return true;
    hx_test_failures++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    return false;
}

test_rng test_rng_make(uint64_t seed) { test_rng r = {seed * 0x9E3779B97F4A7C15ull + 1}; return r; }

uint64_t test_rng_u64(test_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double test_rng_uniform(test_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(test_rng_u64(r) >> 11) * 0x1.0p-53);
}

double test_rng_normal(test_rng *r)
{
    double u1 = test_rng_uniform(r, 1e-300, 1.0), u2 = test_rng_uniform(r, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void test_fill_uniform(test_rng *r, float *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)test_rng_uniform(r, lo, hi);
}

int test_close_f32(const char *what, const float *got, const double *want, int64_t n,
                   double rtol, double atol)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        bool ok = isinf(want[i]) ? (double)got[i] == want[i] : d <= atol + rtol * fabs(want[i]);
        if (!ok) {
            hx_test_checks++;
            hx_test_failures++;
            fprintf(stderr, "FAIL %s: element %lld: got %.9g want %.9g (|diff| %.3g)\n", what,
                    (long long)i, (double)got[i], want[i], d);
            return 0;
        }
    }
    hx_test_checks++;
    return 1;
}

double test_max_rel_f32(const float *got, const float *want, int64_t n)
{
    double num = 0, den = 1e-12;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs((double)want[i]) > den) den = fabs((double)want[i]);
    }
    return num / den;
}

double test_max_rel_err(const float *got, const double *want, int64_t n, double floor)
{
    double num = 0, den = floor;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > den) den = fabs(want[i]);
    }
    return num / den;
}
