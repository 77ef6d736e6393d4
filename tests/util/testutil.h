/* Small helpers shared by the ctest programs: checks that count instead of
 * aborting, a seeded random source, and tolerance comparisons; the runner of
 * named cases (test_main.h) comes with them. */
#ifndef HX_TESTUTIL_H
#define HX_TESTUTIL_H

#include "test_main.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

extern int hx_test_failures;
extern int hx_test_checks;

/* Records a failure with file:line and a printf-style message; never aborts. */
#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        hx_test_checks++;                                                       \
        if (!(cond)) {                                                          \
            hx_test_failures++;                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

/* CHECK for a test's own checking helpers, which take their caller's line:
 * counts one check and, when !ok, prints the failure as CHECK does. Returns ok. */
bool test_vcheck(bool ok, const char *file, int line, const char *fmt, va_list ap);

/* Deterministic random numbers (splitmix64). */
typedef struct test_rng { uint64_t s; } test_rng;
test_rng test_rng_make(uint64_t seed);
uint64_t test_rng_u64(test_rng *r);
double test_rng_uniform(test_rng *r, double lo, double hi);
double test_rng_normal(test_rng *r);
void test_fill_uniform(test_rng *r, float *x, int64_t n, double lo, double hi);

/* |a-b| <= atol + rtol*|b| elementwise (an infinite b wants exactly b);
 * prints the first mismatch under `what`. */
int test_close_f32(const char *what, const float *got, const double *want, int64_t n,
                   double rtol, double atol);
/* Largest relative error max|a-b| / max(|b|, floor). */
double test_max_rel_err(const float *got, const double *want, int64_t n, double floor);
/* The same against f32 values (two runs' parameters): max|a-b| / max(|b|, 1e-12). */
double test_max_rel_f32(const float *got, const float *want, int64_t n);

#endif
