/* Zipf draws by rejection-inversion (W. Hoermann, G. Derflinger, "Rejection-
 * inversion to generate variates from monotone discrete distributions",
 * 1996): invert the integral H of the hat h(x) = x^-e, round to the nearest
 * rank and accept unless the draw fell in the part of the hat above the
 * rank's mass. O(1) per draw for any vocabulary size. */
#include "input/input.h"

#include <math.h>

/* log1p(x)/x and expm1(x)/x, accurate near 0. */
static double log1p_over(double x)
{
    return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
static double expm1_over(double x)
{
    return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

static double hat(const hx__zipf *z, double x) { return exp(-z->exponent * log(x)); }

/* H(x) = (x^(1-e) - 1) / (1-e), log(x) at e = 1. */
static double hat_integral(const hx__zipf *z, double x)
{
    double lx = log(x);
    return expm1_over((1.0 - z->exponent) * lx) * lx;
}

static double hat_integral_inverse(const hx__zipf *z, double y)
{
    double t = y * (1.0 - z->exponent);
    if (t < -1.0) t = -1.0;
    return exp(log1p_over(t) * y);
}

void hx__zipf_init(hx__zipf *z, double exponent, int64_t n)
{
    z->exponent = exponent;
    z->n = (double)n;
    z->h_x1 = hat_integral(z, 1.5) - 1.0;
    z->h_n = hat_integral(z, z->n + 0.5);
    z->s = 2.0 - hat_integral_inverse(z, hat_integral(z, 2.5) - hat(z, 2.0));
}

int64_t hx__zipf_draw(const hx__zipf *z, uint64_t *state)
{
    for (;;) {
        double u = z->h_n + hx__uniform(state) * (z->h_x1 - z->h_n);
        double x = hat_integral_inverse(z, u);
        double k = floor(x + 0.5);
        if (k < 1.0) k = 1.0;
        else if (k > z->n) k = z->n;
        if (k - x <= z->s || u >= hat_integral(z, k + 0.5) - hat(z, k)) return (int64_t)k;
    }
}
