/* What the embedding benchmarks share: a seeded random stream, Zipf ids,
 * and the machine's description for the record. Header-only (static):
 * each benchmark is its own program. */
#ifndef HX_BENCH_IDS_H
#define HX_BENCH_IDS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng_state = 0x853C49E6748FEA9Bull;

static inline uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }

/* Zipf(s) over [1, n] by rejection-inversion (Hormann and Derflinger 1996). */
typedef struct zipf {
    double s, n, hx1, hn, snum;
} zipf;

static inline double helper1(double x) { return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x / 2; }
static inline double helper2(double x) { return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x / 2; }
static inline double zh(const zipf *z, double x) { return exp(-z->s * log(x)); }
static inline double zH(const zipf *z, double x)
{
    double lx = log(x);
    return helper2((1 - z->s) * lx) * lx;
}
static inline double zHinv(const zipf *z, double x)
{
    double t = x * (1 - z->s);
    if (t < -1) t = -1;
    return exp(helper1(t) * x);
}

static inline zipf zipf_make(double s, double n)
{
    zipf z = {s, n, 0, 0, 0};
    z.hx1 = zH(&z, 1.5) - 1;
    z.hn = zH(&z, n + 0.5);
    z.snum = 2 - zHinv(&z, zH(&z, 2.5) - zh(&z, 2));
    return z;
}

static inline int64_t zipf_draw(const zipf *z)
{
    for (;;) {
        double u = z->hn + rng_unit() * (z->hx1 - z->hn), x = zHinv(z, u);
        double k = floor(x + 0.5);
        if (k < 1) k = 1;
        if (k > z->n) k = z->n;
        if (k - x <= z->snum || u >= zH(z, k + 0.5) - zh(z, k)) return (int64_t)k;
    }
}

/* The CPU's model name and the 1-minute load average, for the record. */
static inline void machine(char *model, size_t len, double *load)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(model, len, "unknown");
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            snprintf(model, len, "%s", c + 2);
            model[strcspn(model, "\n\"")] = 0;
            break;
        }
    }
    if (f) fclose(f);
    *load = -1;
    f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", load) != 1) *load = -1;
    if (f) fclose(f);
}

#endif
