/* test_half_kernels: the 16-bit (f16, bf16) entry points of the CPU
 * elementwise, softmax and layernorm kernels (kernels/cpu/hx_kernels.h,
 * *_half) give bitwise what the chain they replace gives: hx_k_cast of every
 * input to f32, the f32 kernel, hx_k_cast of its output back, at 1 and 2
 * threads. Inputs are random 16-bit values, one in eight a random bit
 * pattern (NaNs with payloads, +-inf, denormals, +-0), at lengths around the
 * 512-element blocks, odd ones, and past the size where kernels go parallel.
 * The outputs are compared as bytes, NaN payloads included. GELU keeping
 * its derivative for the backward (hx_k_gelu_save, hx_k_gelu_backward_saved)
 * gives gelu's and gelu_backward's 16-bit bits. The f32 -> bf16 rounding
 * (which on a CPU with AVX512-BF16 converts with vcvtne2ps2bf16 and rounds
 * denormal blocks with integer ops) gives the scalar rounding's bits for
 * every upper half of an f32 with lower halves around the rounding point,
 * denormals in every lane of a 32-float block among normal values; its
 * widening gives u << 16, NaNs quiet, for every pattern. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/hx_kernels.h"
#include "tests/util/testutil.h"

static const hx_kdtype DTS[] = {HX_K_BF16, HX_K_F16};
static const char *const DT_NAMES[] = {"bf16", "f16"};

/* Special values one in this many elements (0: none). */
static int special = 8;

/* n random dt values: one in `special` any bit pattern, else a value in
 * (-lo_hi, lo_hi) rounded to dt; *f gets them widened. */
static uint16_t *draw(test_rng *r, hx_kdtype dt, int64_t n, double lo_hi, float **f)
{
    uint16_t *h = malloc((size_t)n * 2 + 2);
    float *v = calloc((size_t)n + 1, 4);
    for (int64_t i = 0; i < n; i++) v[i] = (float)test_rng_uniform(r, -lo_hi, lo_hi);
    hx_k_cast(h, dt, v, HX_K_F32, n, 1);
    for (int64_t i = 0; i < n; i++)
        if (special && test_rng_u64(r) % special == 0) h[i] = (uint16_t)test_rng_u64(r);
    hx_k_cast(v, HX_K_F32, h, dt, n, 1);
    *f = v;
    return h;
}

static uint16_t *round_out(hx_kdtype dt, const float *f, int64_t n)
{
    uint16_t *h = malloc((size_t)n * 2 + 2);
    hx_k_cast(h, dt, f, HX_K_F32, n, 1);
    return h;
}

static float *f32_out(int64_t n) { return malloc((size_t)n * 4 + 4); }
static uint16_t *half_out(int64_t n) { return malloc((size_t)n * 2 + 2); }

/* got and want (n 16-bit values) are the same bytes; names the first difference */
static void same(const uint16_t *got, const uint16_t *want, int64_t n, const char *what,
                 const char *dt, int64_t len, int nt)
{
    int64_t i = 0;
    while (i < n && got[i] == want[i]) i++;
    CHECK(i == n, "%s %s n=%lld threads %d: element %lld is 0x%04x, the chain gives 0x%04x", what,
          dt, (long long)len, nt, (long long)i, i < n ? got[i] : 0, i < n ? want[i] : 0);
}

static const int64_t LENS[] = {1, 7, 16, 33, 511, 512, 513, 1025, 40001};
#define N_LENS (sizeof LENS / sizeof LENS[0])

static const char *const UNARY_NAMES[] = {"relu", "gelu", "sigmoid", "tanh",
                                          "exp",  "log",  "sqrt",    "gelu_erf"};

static void unary(void)
{
    test_rng r = test_rng_make(211);
    for (int d = 0; d < 2; d++)
        for (size_t l = 0; l < N_LENS; l++) {
            int64_t n = LENS[l];
            hx_kdtype dt = DTS[d];
            float *xf, *dyf, *y = f32_out(n);
            uint16_t *x = draw(&r, dt, n, 6.0, &xf), *dy = draw(&r, dt, n, 2.0, &dyf);
            uint16_t *got = half_out(n);
            for (int op = HX_UNARY_RELU; op <= HX_UNARY_GELU_ERF; op++)
                for (int nt = 1; nt <= 2; nt++) {
                    hx_k_unary_f32((hx_unary_op)op, y, xf, n, nt);
                    uint16_t *want = round_out(dt, y, n);
                    hx_k_unary_half((hx_unary_op)op, got, x, dt, n, nt);
                    same(got, want, n, UNARY_NAMES[op], DT_NAMES[d], n, nt);
                    free(want);
                    if (op == HX_UNARY_EXP || op == HX_UNARY_LOG || op == HX_UNARY_SQRT) continue;
                    /* the backward reads x (relu, gelus) or y (sigmoid, tanh): x plays y */
                    bool uses_x = op == HX_UNARY_RELU || op == HX_UNARY_GELU ||
                                  op == HX_UNARY_GELU_ERF;
                    hx_k_unary_backward_f32((hx_unary_op)op, y, dyf, uses_x ? xf : NULL,
                                            uses_x ? NULL : xf, n, nt);
                    want = round_out(dt, y, n);
                    hx_k_unary_backward_half((hx_unary_op)op, got, dy, uses_x ? x : NULL,
                                             uses_x ? NULL : x, dt, n, nt);
                    char what[64];
                    snprintf(what, sizeof what, "%s backward", UNARY_NAMES[op]);
                    same(got, want, n, what, DT_NAMES[d], n, nt);
                    free(want);
                }
            /* gelu keeping its derivative: gelu's bits, then gelu_backward's */
            float *saved = f32_out(n);
            uint16_t *want = half_out(n);
            for (int nt = 1; nt <= 2; nt++) {
                hx_k_unary_half(HX_UNARY_GELU, want, x, dt, n, nt);
                hx_k_gelu_save(got, saved, x, dt, n, nt);
                same(got, want, n, "gelu_save", DT_NAMES[d], n, nt);
                hx_k_unary_backward_half(HX_UNARY_GELU, want, dy, x, NULL, dt, n, nt);
                hx_k_gelu_backward_saved(got, dy, saved, dt, n, nt);
                same(got, want, n, "gelu_backward_saved", DT_NAMES[d], n, nt);
            }
            free(saved), free(want);
            for (int nt = 1; nt <= 2; nt++) {
                hx_k_scale_f32(y, xf, -0.37f, n, nt);
                uint16_t *want = round_out(dt, y, n);
                hx_k_scale_half(got, x, -0.37f, dt, n, nt);
                same(got, want, n, "scale", DT_NAMES[d], n, nt);
                free(want);
            }
            free(xf), free(dyf), free(y), free(x), free(dy), free(got);
        }
}

/* Binary ops over shapes with broadcasting (stride 0), a transposed operand
 * (a stride that is neither 0 nor 1) and a contiguous pair; bias_add. */
static void binary(void)
{
    static const struct {
        int nd;
        int64_t shape[3], as[3], bs[3];
    } shapes[] = {
        {1, {40001}, {1}, {1}},                   /* contiguous, parallel */
        {2, {37, 1031}, {1031, 1}, {0, 1}},       /* b a row broadcast over rows */
        {2, {301, 129}, {129, 1}, {1, 0}},        /* b a column broadcast over columns */
        {2, {517, 67}, {1, 517}, {67, 1}},        /* a read transposed */
        {3, {3, 5, 7}, {0, 7, 1}, {35, 0, 1}},    /* both broadcast somewhere */
        {1, {9}, {0}, {1}},                       /* a one value */
    };
    test_rng r = test_rng_make(223);
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            hx_kdtype dt = DTS[d];
            int nd = shapes[s].nd;
            int64_t n = 1, na = 1, nb = 1;
            for (int k = 0; k < nd; k++) {
                n *= shapes[s].shape[k];
                na += (shapes[s].shape[k] - 1) * shapes[s].as[k];
                nb += (shapes[s].shape[k] - 1) * shapes[s].bs[k];
            }
            float *af, *bf, *y = f32_out(n);
            uint16_t *a = draw(&r, dt, na, 4.0, &af), *b = draw(&r, dt, nb, 4.0, &bf);
            uint16_t *got = half_out(n);
            for (int op = HX_BINARY_ADD; op <= HX_BINARY_DIV; op++)
                for (int nt = 1; nt <= 2; nt++) {
                    hx_k_binary_f32((hx_binary_op)op, y, af, shapes[s].as, bf, shapes[s].bs,
                                    shapes[s].shape, nd, nt);
                    uint16_t *want = round_out(dt, y, n);
                    hx_k_binary_half((hx_binary_op)op, got, a, shapes[s].as, b, shapes[s].bs,
                                     shapes[s].shape, nd, dt, nt);
                    char what[64];
                    snprintf(what, sizeof what, "binary op %d, shape %zu", op, s);
                    same(got, want, n, what, DT_NAMES[d], n, nt);
                    free(want);
                }
            if (nd == 2 && shapes[s].bs[0] == 0)
                for (int nt = 1; nt <= 2; nt++) {
                    int64_t rows = shapes[s].shape[0], cols = shapes[s].shape[1];
                    hx_k_bias_add_f32(y, af, bf, rows, cols, nt);
                    uint16_t *want = round_out(dt, y, n);
                    hx_k_bias_add_half(got, a, b, dt, rows, cols, nt);
                    same(got, want, n, "bias_add", DT_NAMES[d], n, nt);
                    free(want);
                }
            free(af), free(bf), free(y), free(a), free(b), free(got);
        }
}

enum { SOFTMAX, SOFTMAX_BWD, LOG_SOFTMAX, LOG_SOFTMAX_BWD, LN, LN_BWD_X, LN_BWD_GAMMA, N_ROWK };
static const char *const ROWK_NAMES[] = {"softmax",   "softmax_backward",     "log_softmax",
                                         "log_softmax_backward", "layernorm",
                                         "layernorm_backward_x", "layernorm_backward_gamma"};

/* The f32 kernel k into y (rows, n; n for the gamma backward). */
static void rowk_f32(int k, float *y, const float *x, const float *dy, const float *g,
                     const float *b, int64_t rows, int64_t n, int nt)
{
    const float eps = 1e-5f;
    switch (k) {
    case SOFTMAX: hx_k_softmax_forward_f32(y, x, rows, n, nt); break;
    case SOFTMAX_BWD: hx_k_softmax_backward_f32(y, dy, x, rows, n, nt); break;
    case LOG_SOFTMAX: hx_k_log_softmax_forward_f32(y, x, rows, n, nt); break;
    case LOG_SOFTMAX_BWD: hx_k_log_softmax_backward_f32(y, dy, x, rows, n, nt); break;
    case LN: hx_k_layernorm_forward_f32(y, x, g, b, eps, rows, n, nt); break;
    case LN_BWD_X: hx_k_layernorm_backward_x_f32(y, dy, x, g, eps, rows, n, nt); break;
    case LN_BWD_GAMMA: hx_k_layernorm_backward_gamma_f32(y, dy, x, eps, rows, n, nt); break;
    }
}

/* The 16-bit kernel k; its return value (0, or -1 out of memory). */
static int rowk_half(int k, void *y, const void *x, const void *dy, const void *g,
                     const void *b, hx_kdtype dt, int64_t rows, int64_t n, int nt)
{
    const float eps = 1e-5f;
    switch (k) {
    case SOFTMAX: return hx_k_softmax_forward_half(y, x, dt, rows, n, nt);
    case SOFTMAX_BWD: return hx_k_softmax_backward_half(y, dy, x, dt, rows, n, nt);
    case LOG_SOFTMAX: return hx_k_log_softmax_forward_half(y, x, dt, rows, n, nt);
    case LOG_SOFTMAX_BWD: return hx_k_log_softmax_backward_half(y, dy, x, dt, rows, n, nt);
    case LN: return hx_k_layernorm_forward_half(y, x, g, b, dt, eps, rows, n, nt);
    case LN_BWD_X: return hx_k_layernorm_backward_x_half(y, dy, x, g, dt, eps, rows, n, nt);
    case LN_BWD_GAMMA: return hx_k_layernorm_backward_gamma_half(y, dy, x, dt, eps, rows, n, nt);
    }
    return -1;
}

/* Every row kernel on R rows of n, f32 chain against the 16-bit kernel. */
static void rows_case(test_rng *r, hx_kdtype dt, const char *dt_name, int64_t R, int64_t n)
{
    int64_t N = R * n;
    float *xf, *dyf, *gf, *bf, *y = f32_out(N);
    uint16_t *x = draw(r, dt, N, 5.0, &xf), *dy = draw(r, dt, N, 1.0, &dyf);
    uint16_t *g = draw(r, dt, n, 1.5, &gf), *b = draw(r, dt, n, 0.5, &bf);
    uint16_t *got = half_out(N);
    for (int k = 0; k < N_ROWK; k++)
        for (int nt = 1; nt <= 2; nt++) {
            int64_t out_n = k == LN_BWD_GAMMA ? n : N;
            rowk_f32(k, y, xf, dyf, gf, bf, R, n, nt);
            uint16_t *want = round_out(dt, y, out_n);
            CHECK(rowk_half(k, got, x, dy, g, b, dt, R, n, nt) == 0, "%s: returned -1",
                  ROWK_NAMES[k]);
            char what[80];
            snprintf(what, sizeof what, "%s (%s)", ROWK_NAMES[k],
                     special ? "special values" : "finite");
            same(got, want, out_n, what, dt_name, N, nt);
            free(want);
        }
    free(xf), free(dyf), free(gf), free(bf), free(y);
    free(x), free(dy), free(g), free(b), free(got);
}

/* Twice: with one element in eight any bit pattern (most rows, and every
 * column of the gamma backward, then hold a NaN or an inf), and with
 * finite values only; the widths cross the 16-lane sums and the parallel
 * threshold. */
static void rows(void)
{
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 33}, {2, 513}, {300, 129}, {64, 520}};
    test_rng r = test_rng_make(227);
    for (int pass = 0; pass < 2; pass++, special = 8) {
        special = pass ? 0 : 8;
        for (int d = 0; d < 2; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                rows_case(&r, DTS[d], DT_NAMES[d], shapes[s][0], shapes[s][1]);
    }
}

/* f32 bits u rounded to bf16: nearest, ties to even; a NaN keeps its upper
 * half, made quiet. */
static uint16_t bf16_ref(uint32_t u)
{
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x40);
    uint32_t hi = u >> 16, lo = u & 0xFFFF;
    return (uint16_t)(hi + (lo > 0x8000 || (lo == 0x8000 && (hi & 1))));
}

/* Every upper half with each of these lower halves, in runs of 4099 floats
 * (blocks of 32 and 16, and tails), denormals scattered among normal values. */
static void bf16_rounding(void)
{
    static const uint16_t LOW[] = {0x0000, 0x0001, 0x3FFF, 0x7FFF, 0x8000,
                                   0x8001, 0xBFFF, 0xFFFE, 0xFFFF};
    enum { N_LOW = sizeof LOW / sizeof LOW[0], RUN = 4099 };
    const int64_t n = (int64_t)N_LOW << 16;
    uint32_t *u = malloc((size_t)n * 4);
    uint16_t *got = half_out(n), *want = half_out(n);
    int64_t k = 0;
    for (int l = 0; l < N_LOW; l++)
        for (uint32_t hi = 0; hi < 0x10000; hi++) u[k++] = hi << 16 | LOW[l];
    /* shuffle so that denormal and NaN lanes sit inside blocks of normal ones */
    test_rng r = test_rng_make(307);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(test_rng_u64(&r) % (uint64_t)(i + 1));
        uint32_t t = u[i];
        u[i] = u[j], u[j] = t;
    }
    for (int64_t i = 0; i < n; i++) want[i] = bf16_ref(u[i]);
    float *f = malloc((size_t)n * 4);
    memcpy(f, u, (size_t)n * 4);
    for (int64_t i = 0; i < n; i += RUN)
        hx_k_cast(got + i, HX_K_BF16, f + i, HX_K_F32, n - i < RUN ? n - i : RUN, 1);
    same(got, want, n, "f32 -> bf16 cast", "bf16", n, 1);
    /* one denormal in each lane of a block of 32 normal values */
    for (int lane = 0; lane < 32; lane++) {
        uint32_t blk[32];
        uint16_t g[32], w[32];
        for (int j = 0; j < 32; j++) blk[j] = 0x3F800000u + (uint32_t)j * 0x9001u;
        blk[lane] = 0x80000000u | (0x00400000u + (uint32_t)lane * 0x1357u);
        for (int j = 0; j < 32; j++) w[j] = bf16_ref(blk[j]);
        memcpy(f, blk, sizeof blk);
        hx_k_cast(g, HX_K_BF16, f, HX_K_F32, 32, 1);
        same(g, w, 32, "f32 -> bf16, a denormal at lane n of 32:", "bf16", lane, 1);
    }
    free(u), free(f), free(got), free(want);
}

/* Every bf16 pattern, shuffled (NaNs inside blocks of 32 others), widened by
 * hx_k_cast: u << 16, NaN made quiet. */
static void bf16_widening(void)
{
    enum { N = 0x10000, RUN = 1031 };
    uint16_t *h = half_out(N);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    test_rng r = test_rng_make(401);
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(test_rng_u64(&r) % (uint64_t)(i + 1));
        uint16_t t = h[i];
        h[i] = h[j], h[j] = t;
    }
    float *f = f32_out(N);
    for (int i = 0; i < N; i += RUN) hx_k_cast(f + i, HX_K_F32, h + i, HX_K_BF16, N - i < RUN ? N - i : RUN, 1);
    int i = 0;
    uint32_t got = 0, want = 0;
    for (; i < N; i++) {
        want = (uint32_t)h[i] << 16;
        if ((want & 0x7FFFFFFF) > 0x7F800000) want |= 0x400000;
        memcpy(&got, f + i, 4);
        if (got != want) break;
    }
    CHECK(i == N, "bf16 -> f32: 0x%04x gives 0x%08x, want 0x%08x", i < N ? h[i] : 0, got, want);
    free(h), free(f);
}

int main(int argc, char **argv)
{
    static const test_case cases[] = {
        {"unary", unary},
        {"binary", binary},
        {"rows", rows},
        {"bf16_rounding", bf16_rounding},
        {"bf16_widening", bf16_widening},
    };
    return test_main(argc, argv, "test_half_kernels", cases, TEST_COUNT(cases));
}
