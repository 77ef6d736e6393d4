/* Field parsing (decimal numbers, hexadecimal ids) and the seeded random
 * numbers the generator and the shuffle use. */
#include "input/input.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

bool hx__parse_f64(const char *s, size_t n, double *out)
{
    const char *p = s, *e = s + n;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
    uint64_t m = 0;
    int sig = 0, exp10 = 0;
    bool any = false, inexact = false;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        any = true;
        int d = *p - '0';
        if (sig < 19) {
            m = m * 10 + (uint64_t)d;
            if (m) sig++;
        } else {
            exp10++;
            inexact |= d != 0;
        }
    }
    if (p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            any = true;
            int d = *p - '0';
            if (sig < 19) {
                m = m * 10 + (uint64_t)d;
                if (m) sig++;
                exp10--;
            } else {
                inexact |= d != 0;
            }
        }
    }
    if (!any) return false;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        bool eneg = false;
        if (p < e && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        if (p == e || *p < '0' || *p > '9') return false;
        int x = 0;
        for (; p < e && *p >= '0' && *p <= '9'; p++)
            if (x < 100000) x = x * 10 + (*p - '0');
        exp10 += eneg ? -x : x;
    }
    if (p != e) return false;
    double v;
    if (!inexact && m < (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        /* Both operands exact: one correctly rounded operation (Clinger's fast path). */
        v = exp10 >= 0 ? (double)m * pow10_exact[exp10] : (double)m / pow10_exact[-exp10];
    } else {
        /* Rare (long mantissas, large exponents): the C library on a copy. The
         * text is plain decimal with '.', so the C locale is assumed. */
        char buf[128];
        if (n >= sizeof buf) return false;
        memcpy(buf, s, n);
        buf[n] = 0;
        char *end;
        v = strtod(buf, &end);
        if (end != buf + n) return false;
        neg = false;
    }
    if (!isfinite(v)) return false;
    *out = neg ? -v : v;
    return true;
}

bool hx__parse_hex(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > 16) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = (int64_t)(v & (uint64_t)INT64_MAX);
    return true;
}

uint64_t hx__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double hx__uniform(uint64_t *state)
{
    *state += 0x9E3779B97F4A7C15ull;
    return (double)(hx__mix64(*state) >> 11) * 0x1.0p-53;
}

double hx__normal(uint64_t *state)
{
    double u1 = hx__uniform(state), u2 = hx__uniform(state);
    return sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2);
}
