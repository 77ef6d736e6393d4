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
 * Last, bf16 storage at the GPT example's shapes on 2 threads: each
 * elementwise, softmax and layernorm kernel's *_half entry point (16-bit
 * rows widened on the fly) against the chain the CPU backend ran before
 * (f32 scratch taken per launch, inputs widened with hx_k_cast, the f32
 * kernel, the output rounded: backend_cpu_widen.c) and against the f32
 * kernel on f32 data, interleaved: "chain_over_half" is chain time / half
 * time, "f32_over_half" f32 time / half time (same bits: test_half_kernels).
 * And GELU forward + backward with the derivative kept against recomputed
 * (bench_gelu_saved).
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

enum { H_GELU, H_GELU_BWD, H_ADD, H_SOFTMAX, H_SOFTMAX_BWD, H_LN, H_LN_BWD_X, H_N };
static const char *const HNAME[H_N] = {"gelu", "gelu_backward", "add", "softmax",
                                       "softmax_backward", "layernorm", "layernorm_backward_x"};

/* Kernel f on (rows, n) in dt: the f32 kernel on f32 buffers (dt f32) or
 * the 16-bit one; x, dy, y of rows x n, g of n. */
static void run_half(int f, hx_kdtype dt, void *y, const void *x, const void *dy, const void *g,
                     int64_t rows, int64_t n, int nt)
{
    const int64_t shape[1] = {rows * n}, st[1] = {1};
    int64_t N = rows * n;
    int rc = 0;
    if (dt == HX_K_F32) {
        switch (f) {
        case H_GELU: hx_k_unary_f32(HX_UNARY_GELU, y, x, N, nt); break;
        case H_GELU_BWD: hx_k_unary_backward_f32(HX_UNARY_GELU, y, dy, x, NULL, N, nt); break;
        case H_ADD: hx_k_binary_f32(HX_BINARY_ADD, y, x, st, dy, st, shape, 1, nt); break;
        case H_SOFTMAX: hx_k_softmax_forward_f32(y, x, rows, n, nt); break;
        case H_SOFTMAX_BWD: hx_k_softmax_backward_f32(y, dy, x, rows, n, nt); break;
        case H_LN: hx_k_layernorm_forward_f32(y, x, g, g, 1e-5f, rows, n, nt); break;
        case H_LN_BWD_X: hx_k_layernorm_backward_x_f32(y, dy, x, g, 1e-5f, rows, n, nt); break;
        }
        return;
    }
    switch (f) {
    case H_GELU: hx_k_unary_half(HX_UNARY_GELU, y, x, dt, N, nt); break;
    case H_GELU_BWD: hx_k_unary_backward_half(HX_UNARY_GELU, y, dy, x, NULL, dt, N, nt); break;
    case H_ADD: hx_k_binary_half(HX_BINARY_ADD, y, x, st, dy, st, shape, 1, dt, nt); break;
    case H_SOFTMAX: rc = hx_k_softmax_forward_half(y, x, dt, rows, n, nt); break;
    case H_SOFTMAX_BWD: rc = hx_k_softmax_backward_half(y, dy, x, dt, rows, n, nt); break;
    case H_LN: rc = hx_k_layernorm_forward_half(y, x, g, g, dt, 1e-5f, rows, n, nt); break;
    case H_LN_BWD_X: rc = hx_k_layernorm_backward_x_half(y, dy, x, g, dt, 1e-5f, rows, n, nt); break;
    }
    if (rc) fprintf(stderr, "bench_vmath: %s: out of memory\n", HNAME[f]);
}

/* The chain the CPU backend ran before for a bf16 node: f32 scratch for
 * every 16-bit input and the output (taken and freed per launch), the
 * inputs widened, the f32 kernel, the output rounded. */
static void run_chain(int f, void *y, const void *x, const void *dy, const void *g, int64_t rows,
                      int64_t n, int nt)
{
    int64_t N = rows * n;
    int two = f == H_GELU_BWD || f == H_ADD || f == H_SOFTMAX_BWD || f == H_LN_BWD_X;
    int gam = f == H_LN || f == H_LN_BWD_X;
    size_t bytes = ((size_t)N * (2 + two) + (gam ? 2 * (size_t)n : 0)) * 4;
    float *w = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!w) {
        fprintf(stderr, "bench_vmath: out of memory for the chain\n");
        return;
    }
    float *wx = w, *wy = w + N, *wdy = w + 2 * N, *wg = w + (2 + two) * N;
    hx_k_cast(wx, HX_K_F32, x, HX_K_BF16, N, nt);
    if (two) hx_k_cast(wdy, HX_K_F32, dy, HX_K_BF16, N, nt);
    if (gam) hx_k_cast(wg, HX_K_F32, g, HX_K_BF16, n, nt);
    run_half(f, HX_K_F32, wy, wx, wdy, wg, rows, n, nt);
    hx_k_cast(y, HX_K_BF16, wy, HX_K_F32, N, nt);
    free(w);
}

/* bf16 kernels at the GPT example's shapes (default config: batch 32 x
 * context 64 rows; the MLP's 512 wide activations, the attention's rows of
 * 64 over 4 heads, the 128 wide residual), 2 threads. */
static int bench_half(void)
{
    static const struct { int f; int64_t rows, n; } shapes[] = {
        {H_GELU, 2048, 512},     {H_GELU_BWD, 2048, 512}, {H_ADD, 2048, 128},
        {H_SOFTMAX, 8192, 64},   {H_SOFTMAX_BWD, 8192, 64}, {H_LN, 2048, 128},
        {H_LN_BWD_X, 2048, 128}};
    const int nt = 2;
    int64_t most = (int64_t)2048 * 512;
    float *x = malloc(most * 4), *dy = malloc(most * 4), *y = malloc(most * 4),
          *g = malloc(4096 * 4);
    uint16_t *hx = malloc(most * 2), *hdy = malloc(most * 2), *hy = malloc(most * 2),
             *hg = malloc(4096 * 2);
    if (!x || !dy || !y || !g || !hx || !hdy || !hy || !hg) {
        fprintf(stderr, "bench_vmath: out of memory for the bf16 kernels\n");
        return 1;
    }
    uint64_t s = 4242;
    for (int64_t i = 0; i < most; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 8.0 - 4.0);
        dy[i] = (float)((double)((s >> 8) & 0xFFFF) / 65536.0 - 0.5);
    }
    for (int i = 0; i < 4096; i++) g[i] = 1.0f + (float)i / 8192.0f;
    hx_k_cast(hx, HX_K_BF16, x, HX_K_F32, most, 1);
    hx_k_cast(hdy, HX_K_BF16, dy, HX_K_F32, most, 1);
    hx_k_cast(hg, HX_K_BF16, g, HX_K_F32, 4096, 1);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int f = shapes[k].f;
        int64_t rows = shapes[k].rows, n = shapes[k].n;
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = -1; r < 40; r++)
            for (int m = 0; m < 3; m++) {
                double t0 = now();
                if (m == 0) run_half(f, HX_K_BF16, hy, hx, hdy, hg, rows, n, nt);
                else if (m == 1) run_chain(f, hy, hx, hdy, hg, rows, n, nt);
                else run_half(f, HX_K_F32, y, x, dy, g, rows, n, nt);
                double dt = now() - t0;
                if (r >= 0 && dt < best[m]) best[m] = dt;
            }
        printf("{\"bench\":\"vmath\",\"case\":\"bf16\",\"fn\":\"%s\",\"rows\":%lld,\"n\":%lld,"
               "\"threads\":%d,\"isa\":\"%s\",\"half_ms\":%.3f,\"chain_ms\":%.3f,\"f32_ms\":%.3f,"
               "\"chain_over_half\":%.2f,\"f32_over_half\":%.2f}\n",
               HNAME[f], (long long)rows, (long long)n, nt, hx_k_isa_name(hx_k_isa()),
               best[0] * 1e3, best[1] * 1e3, best[2] * 1e3, best[1] / best[0], best[2] / best[0]);
        fflush(stdout);
    }
    free(x), free(dy), free(y), free(g), free(hx), free(hdy), free(hy), free(hg);
    return 0;
}

/* GELU's forward and backward at the GPT example's MLP activation (2048 x
 * 512), 2 threads, f32 and bf16: the forward keeping its derivative and
 * the backward multiplying by it (what a host training session runs now)
 * against gelu then gelu_backward recomputing the sigmoid from x,
 * interleaved; "recompute_over_saved" is the pair's time over the saving
 * pair's. */
static int bench_gelu_saved(void)
{
    const int64_t n = (int64_t)2048 * 512;
    const int nt = 2;
    float *x = malloc(n * 4), *dy = malloc(n * 4), *y = malloc(n * 4), *dx = malloc(n * 4),
          *d = malloc(n * 4);
    uint16_t *hx = malloc(n * 2), *hdy = malloc(n * 2);
    if (!x || !dy || !y || !dx || !d || !hx || !hdy) {
        fprintf(stderr, "bench_vmath: out of memory for the gelu pair\n");
        return 1;
    }
    uint64_t s = 99;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 8.0 - 4.0);
        dy[i] = (float)((double)((s >> 8) & 0xFFFF) / 65536.0 - 0.5);
    }
    hx_k_cast(hx, HX_K_BF16, x, HX_K_F32, n, 1);
    hx_k_cast(hdy, HX_K_BF16, dy, HX_K_F32, n, 1);
    for (int h = 0; h < 2; h++) {
        hx_kdtype dt = h ? HX_K_BF16 : HX_K_F32;
        const void *in = h ? (const void *)hx : x, *din = h ? (const void *)hdy : dy;
        double best[2] = {1e30, 1e30};
        for (int r = -1; r < 40; r++)
            for (int m = 0; m < 2; m++) {
                double t0 = now();
                if (m == 0) {
                    hx_k_gelu_save(y, d, in, dt, n, nt);
                    hx_k_gelu_backward_saved(dx, din, d, dt, n, nt);
                } else if (h) {
                    hx_k_unary_half(HX_UNARY_GELU, y, in, dt, n, nt);
                    hx_k_unary_backward_half(HX_UNARY_GELU, dx, din, in, NULL, dt, n, nt);
                } else {
                    hx_k_unary_f32(HX_UNARY_GELU, y, x, n, nt);
                    hx_k_unary_backward_f32(HX_UNARY_GELU, dx, dy, x, NULL, n, nt);
                }
                double t = now() - t0;
                if (r >= 0 && t < best[m]) best[m] = t;
            }
        printf("{\"bench\":\"vmath\",\"case\":\"gelu_saved\",\"dtype\":\"%s\",\"n\":%lld,"
               "\"threads\":%d,\"isa\":\"%s\",\"saved_ms\":%.3f,\"recompute_ms\":%.3f,"
               "\"recompute_over_saved\":%.2f}\n",
               h ? "bf16" : "f32", (long long)n, nt, hx_k_isa_name(hx_k_isa()), best[0] * 1e3,
               best[1] * 1e3, best[1] / best[0]);
        fflush(stdout);
    }
    free(x), free(dy), free(y), free(dx), free(d), free(hx), free(hdy);
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
    return bench_rows((int64_t)256 << 10) || bench_rows((int64_t)4 << 20) || bench_half() ||
           bench_gelu_saved();
}
