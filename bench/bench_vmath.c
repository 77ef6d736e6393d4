/* Vector transcendentals (kernels/cpu/vmath.h) against libm's loops, one
 * thread: the vmath kernels against the scalar libm loops they replaced
 * (tanhf / expf per element, the formulas the kernels had before; for the
 * erf-form GELU, which had no kernel before, libm's erfcf) and
 * against a copy of the same bytes (read x, write y: the ceiling of any
 * elementwise op), timed interleaved so that all three meet the same
 * background load. One JSON object per function and size; "speedup" is
 * libm time / vmath time, "ratio_to_copy" vmath's bytes/s over the copy's.
 * Then the row kernels (kernels/cpu/rows_body.h) at the GPT example's
 * shapes, on this CPU's path against the scalar path (the same source
 * compiled without vector ISA: the same bits) and the copy of the same
 * bytes: "speedup" is scalar time / path time.
 *
 *   bench_vmath [N...]     element counts (default 65536 and 16M) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/hx_kernels.h"
#include "kernels/cpu/rows_path.h"
#include "kernels/cpu/vmath.h"
#include "cpu_model.h"

#define GELU_C 0.7978845608028654f

/* The pre-vmath kernels, as they were in elementwise.c. */
static void libm_exp(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}
static void libm_tanh(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}
static void libm_sigmoid(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
}
static void libm_gelu(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i], cube = 0.044715f * xi * xi * xi;
        y[i] = 0.5f * xi * (1.0f + tanhf(GELU_C * (xi + cube)));
    }
}
static void libm_gelu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i], cube = 0.044715f * xi * xi * xi;
        float t = tanhf(GELU_C * (xi + cube)), sech2 = 1.0f - t * t;
        float g = 0.5f * (1.0f + t) + 0.5f * xi * sech2 * GELU_C * (1.0f + 3.0f * 0.044715f * xi * xi);
        dx[i] = dy[i] * g;
    }
}

static void libm_gelu_erf(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * erfcf(-x[i] * 0.70710678f);
}
static void libm_gelu_erf_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i];
        dx[i] = dy[i] * (0.5f * erfcf(-xi * 0.70710678f) + xi * expf(-0.5f * xi * xi) * 0.39894228f);
    }
}

enum { F_EXP, F_TANH, F_SIGMOID, F_GELU, F_GELU_BWD, F_GELU_ERF, F_GELU_ERF_BWD, F_N };
static const char *const NAME[F_N] = {"exp", "tanh", "sigmoid", "gelu", "gelu_backward",
                                      "gelu_erf", "gelu_erf_backward"};

static void run(int f, int use_vmath, float *y, const float *x, const float *dy, int64_t n)
{
    const hx_vmath_path *p = hx__vmath();
    switch (f) {
    case F_EXP: use_vmath ? p->exp(y, x, n) : libm_exp(y, x, n); break;
    case F_TANH: use_vmath ? p->tanh(y, x, n) : libm_tanh(y, x, n); break;
    case F_SIGMOID: use_vmath ? p->sigmoid(y, x, n) : libm_sigmoid(y, x, n); break;
    case F_GELU: use_vmath ? p->gelu(y, x, n) : libm_gelu(y, x, n); break;
    case F_GELU_BWD: use_vmath ? p->gelu_backward(y, dy, x, n) : libm_gelu_backward(y, dy, x, n); break;
    case F_GELU_ERF: use_vmath ? p->gelu_erf(y, x, n) : libm_gelu_erf(y, x, n); break;
    case F_GELU_ERF_BWD:
        use_vmath ? p->gelu_erf_backward(y, dy, x, n) : libm_gelu_erf_backward(y, dy, x, n);
        break;
    }
}

static void copy_same_bytes(int f, float *y, const float *x, const float *dy, int64_t n)
{
    if (f == F_GELU_BWD || f == F_GELU_ERF_BWD) { /* reads two arrays */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] + dy[i];
    } else {
        memcpy(y, x, (size_t)n * sizeof(float));
    }
}

static double now(void) { return omp_get_wtime(); }

static void print_machine(void)
{
    char model[128];
    bench_cpu_model(model, sizeof model);
    double load[1] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf", &load[0]) != 1) load[0] = -1;
        fclose(la);
    }
    printf("{\"bench\":\"vmath\",\"case\":\"machine\",\"cpu\":\"%s\",\"isa\":\"%s\",\"load1\":%.2f}\n",
           model, hx_k_isa_name(hx_k_isa()), load[0]);
}

enum { R_SOFTMAX, R_SOFTMAX_BWD, R_LN, R_LN_BWD_X, R_N };
static const char *const RNAME[R_N] = {"softmax", "softmax_backward", "layernorm",
                                       "layernorm_backward_x"};
static const int RARRAYS[R_N] = {2, 3, 2, 3}; /* arrays of rows x n read or written */

static void run_rows(const hx_rows_path *p, int f, float *y, const float *x, const float *dy,
                     const float *g, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * n;
        const float *xr = x + r * n, *dyr = dy + r * n;
        switch (f) {
        case R_SOFTMAX: p->softmax_forward(yr, xr, n); break;
        case R_SOFTMAX_BWD: p->softmax_backward(yr, dyr, xr, n); break;
        case R_LN: p->layernorm_forward(yr, xr, g, g, 1e-5f, n); break;
        case R_LN_BWD_X: p->layernorm_backward_x(yr, dyr, xr, g, 1e-5f, n); break;
        }
    }
}

/* Row kernels, one thread: rows of the GPT example's widths (384 for
 * layernorm, context 256 for the attention softmax), total elements each
 * (1 MiB per array stays in cache, 16 MiB does not). */
static int bench_rows(int64_t total)
{
    static const struct { int f; int64_t n; } shapes[] = {
        {R_SOFTMAX, 256}, {R_SOFTMAX_BWD, 256}, {R_LN, 384}, {R_LN_BWD_X, 384}};
    float *x = malloc(total * 4), *dy = malloc(total * 4), *y = malloc(total * 4),
          *g = malloc(4096 * 4);
    if (!x || !dy || !y || !g) {
        fprintf(stderr, "bench_vmath: out of memory for the row kernels\n");
        return 1;
    }
    uint64_t s = 777;
    for (int64_t i = 0; i < total; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 8.0 - 4.0);
        dy[i] = (float)((double)((s >> 8) & 0xFFFF) / 65536.0 - 0.5);
    }
    for (int i = 0; i < 4096; i++) g[i] = 1.0f + (float)i / 8192.0f;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int f = shapes[k].f;
        int64_t n = shapes[k].n, rows = total / n;
        double best[3] = {1e30, 1e30, 1e30};
        int reps = (int)(((int64_t)64 << 20) / total);
        for (int r = -1; r < reps; r++)
            for (int m = 0; m < 3; m++) {
                double t0 = now();
                if (m == 2) memcpy(y, x, (size_t)total * 4);
                else run_rows(m == 0 ? hx__rows() : &hx__rows_scalar, f, y, x, dy, g, rows, n);
                double dt = now() - t0;
                if (r >= 0 && dt < best[m]) best[m] = dt;
            }
        double bytes = (double)total * 4 * RARRAYS[f], copy_bytes = (double)total * 4 * 2;
        printf("{\"bench\":\"vmath\",\"fn\":\"%s\",\"rows\":%lld,\"n\":%lld,\"threads\":1,"
               "\"isa\":\"%s\",\"path_gbps\":%.2f,\"scalar_path_gbps\":%.2f,\"speedup\":%.2f,"
               "\"copy_gbps\":%.2f,\"ratio_to_copy\":%.3f}\n",
               RNAME[f], (long long)rows, (long long)n, hx_k_isa_name(hx_k_isa()),
               bytes / best[0] / 1e9, bytes / best[1] / 1e9, best[1] / best[0],
               copy_bytes / best[2] / 1e9, (bytes / best[0]) / (copy_bytes / best[2]));
        fflush(stdout);
    }
    free(x);
    free(dy);
    free(y);
    free(g);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t sizes[8] = {65536, (int64_t)16 << 20};
    int nsizes = 2;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 8; i++) sizes[nsizes++] = atoll(argv[i]);
    }
    print_machine();
    for (int si = 0; si < nsizes; si++) {
        int64_t n = sizes[si];
        if (n <= 0) {
            fprintf(stderr, "bench_vmath: size %s is not a positive count\n", argv[si + 1]);
            return 2;
        }
        float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        if (!x || !dy || !y) {
            fprintf(stderr, "bench_vmath: out of memory for %lld elements\n", (long long)n);
            return 1;
        }
        uint64_t s = 12345;
        for (int64_t i = 0; i < n; i++) { /* activations-like: normal-ish in [-6, 6] */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 12.0 - 6.0);
            dy[i] = (float)((double)((s >> 8) & 0xFFFF) / 65536.0 - 0.5);
        }
        /* repetitions: about 0.2 s of vmath work per function */
        int reps = (int)(((int64_t)64 << 20) / n);
        reps = reps < 5 ? 5 : reps > 2000 ? 2000 : reps;
        for (int f = 0; f < F_N; f++) {
            double best[3] = {1e30, 1e30, 1e30};
            for (int r = -1; r < reps; r++) {
                for (int k = 0; k < 3; k++) {
                    double t0 = now();
                    if (k == 2) copy_same_bytes(f, y, x, dy, n);
                    else run(f, k == 0, y, x, dy, n);
                    double dt = now() - t0;
                    if (r >= 0 && dt < best[k]) best[k] = dt;
                }
            }
            double bytes = (double)n * 4 * (f == F_GELU_BWD || f == F_GELU_ERF_BWD ? 3 : 2);
            printf("{\"bench\":\"vmath\",\"fn\":\"%s\",\"n\":%lld,\"threads\":1,\"isa\":\"%s\","
                   "\"reps\":%d,\"vmath_gelem_s\":%.3f,\"libm_gelem_s\":%.3f,\"speedup\":%.2f,"
                   "\"copy_gbps\":%.2f,\"vmath_gbps\":%.2f,\"ratio_to_copy\":%.3f}\n",
                   NAME[f], (long long)n, hx_k_isa_name(hx_k_isa()), reps, n / best[0] / 1e9,
                   n / best[1] / 1e9, best[1] / best[0], bytes / best[2] / 1e9,
                   bytes / best[0] / 1e9, best[2] / best[0]);
            fflush(stdout);
        }
        free(x);
        free(dy);
        free(y);
    }
    return bench_rows((int64_t)256 << 10) || bench_rows((int64_t)4 << 20);
}
