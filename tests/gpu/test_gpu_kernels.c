/* Every kernel of kernels/gpu against the CPU kernel of the same op, in
 * f32, f16 and bf16 storage: random seeded inputs rounded to the storage
 * dtype (both sides see the same values), outputs poisoned with NaN bytes
 * before each run, tolerance 1e-5 relative for f32 and 1e-2 for f16/bf16.
 * Where the GPU kernel promises the CPU's bits (dropout masks, scatter-add
 * sums, optimizer updates, casts) the check is bitwise, and the reductions
 * are run twice to check they repeat bitwise. */
#include "gpu_testutil.h"
#include "kernels/cpu/optim.h"

#include <math.h>

static const hx_kdtype DTS[3] = {HX_K_F32, HX_K_F16, HX_K_BF16};
static hx_gk_ctx C;
static test_rng R;

#define OK(call) CHECK((call) == HX_GK_OK, "%s: %s", #call, hx_gk_strerror(call))

static void run_ok(const char *what, hx_gk_status st)
{
    CHECK(st == HX_GK_OK, "%s: %s", what, hx_gk_strerror(st));
}

/* ---- matmul --------------------------------------------------------------------- */

static void check_gemm(void)
{
    const int64_t M = 33, N = 17, K = 29;
    for (int d = 0; d < 3; d++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int shared = 0; shared < 2; shared++) {
                    hx_kdtype dt = DTS[d];
                    int64_t batch = 3, sb = shared ? 0 : K * N;
                    float *a = gt_random(&R, batch * M * K, -1, 1);
                    float *b = gt_random(&R, batch * K * N, -1, 1);
                    float *want = malloc(sizeof *want * batch * M * N);
                    void *da = gt_upload(dt, a, batch * M * K), *db = gt_upload(dt, b, batch * K * N);
                    void *dc = gt_poisoned(dt, batch * M * N);
                    int64_t lda = ta ? M : K, ldb = tb ? K : N;
                    run_ok("gemm", hx_gk_gemm(&C, dt, ta, tb, batch, M, N, K, da, lda, M * K, db,
                                              ldb, sb, dc, N, M * N));
                    hx_k_gemm_f32(ta, tb, batch, M, N, K, 1.0f, a, lda, M * K, b, ldb, sb, 0.0f,
                                  want, N, M * N, 1);
                    float *got = gt_download(&C, dt, dc, batch * M * N);
                    char what[64];
                    snprintf(what, sizeof what, "gemm ta=%d tb=%d shared_b=%d", ta, tb, shared);
                    /* sums of K products: the f16/bf16 tolerance scales with sqrt(K) */
                    double *w = malloc(sizeof *w * batch * M * N);
                    for (int64_t i = 0; i < batch * M * N; i++) w[i] = want[i];
                    test_close_f32(what, got, w, batch * M * N, gt_rtol(dt),
                                   dt == HX_K_F32 ? 1e-5 : 2e-2 * sqrt((double)K));
                    free(w);
                    free(a), free(b), free(want), free(got);
                    cudaFree(da), cudaFree(db), cudaFree(dc);
                }
}

/* ---- elementwise ------------------------------------------------------------------ */

static void check_binary(void)
{
    /* out (2,3,4) = a (2,3,4) op b (3,1) broadcast */
    int64_t shape[3] = {2, 3, 4}, sa[3] = {12, 4, 1}, sb[3] = {0, 1, 0}, n = 24;
    for (int d = 0; d < 3; d++)
        for (int op = HX_BINARY_ADD; op <= HX_BINARY_DIV; op++) {
            hx_kdtype dt = DTS[d];
            float *a = gt_random(&R, n, -2, 2), *b = gt_random(&R, 3, 0.5, 2);
            void *da = gt_upload(dt, a, n), *db = gt_upload(dt, b, 3), *dy = gt_poisoned(dt, n);
            float want[24];
            run_ok("binary", hx_gk_binary(&C, dt, (hx_binary_op)op, dy, da, sa, db, sb, shape, 3));
            hx_k_binary_f32((hx_binary_op)op, want, a, sa, b, sb, shape, 3, 1);
            float *got = gt_download(&C, dt, dy, n);
            gt_close("binary broadcast", dt, got, want, n);
            /* the contiguous fast path */
            int64_t full[3] = {12, 4, 1};
            cudaMemset(dy, 0xFF, (size_t)n * hx_k_dtype_size(dt));
            void *db2 = gt_upload(dt, a, n);
            run_ok("binary", hx_gk_binary(&C, dt, (hx_binary_op)op, dy, da, sa, db2, full, shape, 3));
            hx_k_binary_f32((hx_binary_op)op, want, a, sa, a, full, shape, 3, 1);
            free(got);
            got = gt_download(&C, dt, dy, n);
            if (op != HX_BINARY_DIV || d == 0) gt_close("binary flat", dt, got, want, n);
            free(a), free(b), free(got);
            cudaFree(da), cudaFree(db), cudaFree(db2), cudaFree(dy);
        }
}

static void check_unary(void)
{
    const int64_t n = 1000;
    for (int d = 0; d < 3; d++)
        for (int op = HX_UNARY_RELU; op <= HX_UNARY_GELU_ERF; op++) {
            hx_kdtype dt = DTS[d];
            bool positive = op == HX_UNARY_LOG || op == HX_UNARY_SQRT;
            float *x = gt_random(&R, n, positive ? 0.1 : -3, 3), *dy = gt_random(&R, n, -1, 1);
            void *dx_ = gt_upload(dt, x, n), *ddy = gt_upload(dt, dy, n), *dout = gt_poisoned(dt, n);
            float *want = malloc(sizeof *want * n), *wgrad = malloc(sizeof *wgrad * n);
            run_ok("unary", hx_gk_unary(&C, dt, (hx_unary_op)op, dout, dx_, n));
            hx_k_unary_f32((hx_unary_op)op, want, x, n, 1);
            float *got = gt_download(&C, dt, dout, n);
            gt_close("unary", dt, got, want, n);
            /* backward reads x (relu, gelus, log) or y = f(x) as stored */
            bool reads_x = op == HX_UNARY_RELU || op == HX_UNARY_GELU || op == HX_UNARY_GELU_ERF ||
                           op == HX_UNARY_LOG;
            float *yv = got; /* y rounded to dt, as the device holds it */
            void *dyv = gt_upload(dt, yv, n), *dgrad = gt_poisoned(dt, n);
            run_ok("unary_backward", hx_gk_unary_backward(&C, dt, (hx_unary_op)op, dgrad, ddy,
                                                          reads_x ? dx_ : NULL, reads_x ? NULL : dyv, n));
            hx_k_unary_backward_f32((hx_unary_op)op, wgrad, dy, reads_x ? x : NULL, reads_x ? NULL : yv, n, 1);
            float *ggot = gt_download(&C, dt, dgrad, n);
            gt_close("unary backward", dt, ggot, wgrad, n);
            free(x), free(dy), free(want), free(wgrad), free(got), free(ggot);
            cudaFree(dx_), cudaFree(ddy), cudaFree(dout), cudaFree(dyv), cudaFree(dgrad);
        }
}

static void check_scale_bias_mask(void)
{
    const int64_t rows = 7, n = 13, T = 6, B = 3;
    for (int d = 0; d < 3; d++) {
        hx_kdtype dt = DTS[d];
        float *x = gt_random(&R, rows * n, -2, 2), *b = gt_random(&R, n, -1, 1);
        float want[7 * 13];
        void *dx_ = gt_upload(dt, x, rows * n), *db = gt_upload(dt, b, n), *dy = gt_poisoned(dt, rows * n);
        run_ok("scale", hx_gk_scale(&C, dt, dy, dx_, -1.5f, rows * n));
        hx_k_scale_f32(want, x, -1.5f, rows * n, 1);
        float *got = gt_download(&C, dt, dy, rows * n);
        gt_close("scale", dt, got, want, rows * n);
        free(got);
        cudaMemset(dy, 0xFF, (size_t)rows * n * hx_k_dtype_size(dt));
        run_ok("bias_add", hx_gk_bias_add(&C, dt, dy, dx_, db, rows, n));
        hx_k_bias_add_f32(want, x, b, rows, n, 1);
        got = gt_download(&C, dt, dy, rows * n);
        gt_close("bias_add", dt, got, want, rows * n);
        free(got), free(x), free(b);
        cudaFree(dx_), cudaFree(db), cudaFree(dy);

        float *m = gt_random(&R, B * T * T, -2, 2), mwant[3 * 6 * 6];
        void *dm = gt_upload(dt, m, B * T * T), *dmy = gt_poisoned(dt, B * T * T);
        run_ok("causal_mask", hx_gk_causal_mask(&C, dt, dmy, dm, B, T, -1e4f));
        hx_k_causal_mask_f32(mwant, m, B, T, -1e4f, 1);
        got = gt_download(&C, dt, dmy, B * T * T);
        gt_close("causal_mask", dt, got, mwant, B * T * T);
        free(got), free(m);
        cudaFree(dm), cudaFree(dmy);
    }
}

/* Casts round once (nearest even), as the CPU's: bitwise. */
static void check_cast(void)
{
    const int64_t n = 4096;
    float *x = gt_random(&R, n, -70000, 70000);
    x[0] = NAN, x[1] = INFINITY, x[2] = 1e-40f, x[3] = -0.0f, x[4] = 65520.0f;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            hx_kdtype xdt = DTS[a], ydt = DTS[b];
            float *xs = malloc(sizeof *xs * n);
            memcpy(xs, x, sizeof *xs * n);
            void *dx_ = gt_upload(xdt, xs, n), *dy = gt_poisoned(ydt, n);
            run_ok("cast", hx_gk_cast(&C, dy, ydt, dx_, xdt, n));
            size_t es = hx_k_dtype_size(ydt);
            char *got = malloc(n * es), *want = malloc(n * es), *hx = malloc(n * hx_k_dtype_size(xdt));
            GT_CUDA(cudaStreamSynchronize(C.stream));
            GT_CUDA(cudaMemcpy(got, dy, n * es, cudaMemcpyDeviceToHost));
            GT_CUDA(cudaMemcpy(hx, dx_, n * hx_k_dtype_size(xdt), cudaMemcpyDeviceToHost));
            hx_k_cast(want, ydt, hx, xdt, n, 1);
            int64_t diff = -1;
            for (int64_t i = 0; i < n && diff < 0; i++) {
                bool nan_both = isnan(((float *)xs)[i]); /* NaN payloads may differ */
                if (!nan_both && memcmp(got + i * es, want + i * es, es)) diff = i;
            }
            CHECK(diff < 0, "cast %d -> %d differs from the CPU's at %lld", a, b, (long long)diff);
            free(xs), free(got), free(want), free(hx);
            cudaFree(dx_), cudaFree(dy);
        }
    free(x);
}

/* The CPU's mask bit for bit. */
static void check_dropout(void)
{
    const int64_t n = 100003;
    float *x = gt_random(&R, n, -1, 1), *want = malloc(sizeof *want * n);
    void *dx_ = gt_upload(HX_K_F32, x, n), *dy = gt_poisoned(HX_K_F32, n);
    run_ok("dropout", hx_gk_dropout(&C, HX_K_F32, dy, dx_, 0.3f, 1234, 7, n));
    hx_k_dropout_f32(want, x, 0.3f, 1234, 7, n, 1);
    float *got = gt_download(&C, HX_K_F32, dy, n);
    CHECK(!memcmp(got, want, sizeof *got * n), "dropout differs from the CPU's mask or scale");
    free(x), free(want), free(got);
    cudaFree(dx_), cudaFree(dy);
}

/* ---- rows --------------------------------------------------------------------------- */

static void check_rows(int64_t rows, int64_t n)
{
    int64_t t = rows * n;
    for (int d = 0; d < 3; d++) {
        hx_kdtype dt = DTS[d];
        float *x = gt_random(&R, t, -4, 4), *dy = gt_random(&R, t, -1, 1);
        float *g = gt_random(&R, n, 0.5, 1.5), *be = gt_random(&R, n, -1, 1);
        float *want = malloc(sizeof *want * t), *ywant = malloc(sizeof *ywant * t);
        void *dx_ = gt_upload(dt, x, t), *ddy = gt_upload(dt, dy, t);
        void *dg = gt_upload(dt, g, n), *dbe = gt_upload(dt, be, n), *out = gt_poisoned(dt, t);
        float *got;
        for (int log_ = 0; log_ < 2; log_++) {
            cudaMemset(out, 0xFF, (size_t)t * hx_k_dtype_size(dt));
            run_ok("softmax", log_ ? hx_gk_log_softmax(&C, dt, out, dx_, rows, n)
                                   : hx_gk_softmax(&C, dt, out, dx_, rows, n));
            if (log_) hx_k_log_softmax_forward_f32(ywant, x, rows, n, 1);
            else hx_k_softmax_forward_f32(ywant, x, rows, n, 1);
            got = gt_download(&C, dt, out, t);
            gt_close(log_ ? "log_softmax" : "softmax", dt, got, ywant, t);
            /* backward from y as the device holds it */
            void *dyv = gt_upload(dt, got, t);
            cudaMemset(out, 0xFF, (size_t)t * hx_k_dtype_size(dt));
            run_ok("softmax_backward", log_ ? hx_gk_log_softmax_backward(&C, dt, out, ddy, dyv, rows, n)
                                            : hx_gk_softmax_backward(&C, dt, out, ddy, dyv, rows, n));
            if (log_) hx_k_log_softmax_backward_f32(want, dy, got, rows, n, 1);
            else hx_k_softmax_backward_f32(want, dy, got, rows, n, 1);
            free(got);
            got = gt_download(&C, dt, out, t);
            gt_close(log_ ? "log_softmax_backward" : "softmax_backward", dt, got, want, t);
            free(got);
            cudaFree(dyv);
        }
        cudaMemset(out, 0xFF, (size_t)t * hx_k_dtype_size(dt));
        run_ok("layernorm", hx_gk_layernorm(&C, dt, out, dx_, dg, dbe, 1e-5f, rows, n));
        hx_k_layernorm_forward_f32(want, x, g, be, 1e-5f, rows, n, 1);
        got = gt_download(&C, dt, out, t);
        gt_close("layernorm", dt, got, want, t);
        free(got);
        cudaMemset(out, 0xFF, (size_t)t * hx_k_dtype_size(dt));
        run_ok("layernorm_backward_x", hx_gk_layernorm_backward_x(&C, dt, out, ddy, dx_, dg, 1e-5f, rows, n));
        hx_k_layernorm_backward_x_f32(want, dy, x, g, 1e-5f, rows, n, 1);
        got = gt_download(&C, dt, out, t);
        gt_close("layernorm_backward_x", dt, got, want, t);
        free(got);
        void *dgam = gt_poisoned(dt, n);
        run_ok("layernorm_backward_gamma",
               hx_gk_layernorm_backward_gamma(&C, dt, dgam, ddy, dx_, 1e-5f, rows, n));
        hx_k_layernorm_backward_gamma_f32(want, dy, x, 1e-5f, rows, n, 1);
        got = gt_download(&C, dt, dgam, n);
        double *w = malloc(sizeof *w * n);
        for (int64_t i = 0; i < n; i++) w[i] = want[i];
        test_close_f32("layernorm_backward_gamma", got, w, n, gt_rtol(dt),
                       gt_atol(dt) * sqrt((double)rows));
        float *again;
        run_ok("layernorm_backward_gamma",
               hx_gk_layernorm_backward_gamma(&C, dt, dgam, ddy, dx_, 1e-5f, rows, n));
        again = gt_download(&C, dt, dgam, n);
        CHECK(!memcmp(got, again, sizeof *got * n), "layernorm_backward_gamma repeats bitwise");
        free(w), free(got), free(again);
        free(x), free(dy), free(g), free(be), free(want), free(ywant);
        cudaFree(dx_), cudaFree(ddy), cudaFree(dg), cudaFree(dbe), cudaFree(out), cudaFree(dgam);
    }
}

/* ---- reductions, copies ------------------------------------------------------------------ */

/* The scalar-double reference: w[kept index of i] += x[i] for every i. An
 * f32 reference (the CPU kernel's serial sum of 100000 terms) carries more
 * rounding error than the device's chunked sum it would judge. */
static void reduce_sum_f64(double *w, const float *x, const int64_t *shape, int ndim,
                           const uint8_t *red, int64_t nx, int64_t nout)
{
    memset(w, 0, sizeof *w * nout);
    for (int64_t i = 0; i < nx; i++) {
        int64_t rest = i, o = 0, ostride = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            int64_t c = rest % shape[d];
            rest /= shape[d];
            if (!red[d]) {
                o += c * ostride;
                ostride *= shape[d];
            }
        }
        w[o] += x[i];
    }
}

static void check_reduce(const int64_t *shape, int ndim, unsigned mask)
{
    int64_t nx = 1, nout = 1;
    uint8_t red[HX_K_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        red[d] = mask >> d & 1;
        nx *= shape[d];
        if (!red[d]) nout *= shape[d];
    }
    for (int d = 0; d < 3; d++) {
        hx_kdtype dt = DTS[d];
        float *x = gt_random(&R, nx, -1, 1); /* rounded to dt by the upload */
        void *dx_ = gt_upload(dt, x, nx), *out = gt_poisoned(dt, nout);
        CHECK(hx_gk_reduce_sum_scratch_bytes(shape, ndim, red) <= C.scratch_bytes, "scratch");
        run_ok("reduce_sum", hx_gk_reduce_sum(&C, dt, out, dx_, shape, ndim, red));
        float *got = gt_download(&C, dt, out, nout);
        double *w = malloc(sizeof *w * nout);
        reduce_sum_f64(w, x, shape, ndim, red, nx, nout);
        char what[64];
        snprintf(what, sizeof what, "reduce_sum mask %#x of %lld", mask, (long long)nx);
        double per = sqrt((double)(nx / (nout ? nout : 1)));
        test_close_f32(what, got, w, nout, gt_rtol(dt), (dt == HX_K_F32 ? 1e-6 : 1e-2) * per);
        run_ok("reduce_sum", hx_gk_reduce_sum(&C, dt, out, dx_, shape, ndim, red));
        float *again = gt_download(&C, dt, out, nout);
        CHECK(!memcmp(got, again, sizeof *got * nout), "%s repeats bitwise", what);
        free(x), free(got), free(again), free(w);
        cudaFree(dx_), cudaFree(out);
    }
}

/* Elements a strided view over shape reaches: its largest offset + 1. */
static int64_t span_of(const int64_t *shape, const int64_t *strides, int ndim)
{
    int64_t last = 0;
    for (int d = 0; d < ndim; d++) last += (shape[d] - 1) * strides[d];
    return last + 1;
}

/* out (strides os) = x (strides xs, from element xoff of its buffer) over
 * shape, for every element size, on the device and by the CPU kernel: the
 * same bytes, untouched ones included. */
static void check_copy_strided_case(const char *what, const int64_t *shape, const int64_t *os,
                                    const int64_t *xs, int ndim, int64_t xoff)
{
    int64_t on = span_of(shape, os, ndim), xn = xoff + span_of(shape, xs, ndim);
    size_t sizes[4] = {1, 2, 4, 8};
    for (int s = 0; s < 4; s++) {
        size_t es = sizes[s];
        unsigned char *x = malloc(xn * es), *want = malloc(on * es), *got = malloc(on * es);
        for (size_t i = 0; i < xn * es; i++) x[i] = (unsigned char)test_rng_u64(&R);
        memset(want, 0xFF, on * es);
        void *dx_ = gt_upload_raw(x, xn * es), *dy;
        GT_CUDA(cudaMalloc(&dy, on * es));
        GT_CUDA(cudaMemset(dy, 0xFF, on * es));
        run_ok("copy_strided", hx_gk_copy_strided(&C, dy, os, (char *)dx_ + xoff * es, xs, shape,
                                                  ndim, es));
        hx_k_copy_strided(want, os, x + xoff * es, xs, shape, ndim, es, 1);
        GT_CUDA(cudaStreamSynchronize(C.stream));
        GT_CUDA(cudaMemcpy(got, dy, on * es, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(got, want, on * es), "copy_strided %s with %zu-byte elements", what, es);
        free(x), free(want), free(got);
        cudaFree(dx_), cudaFree(dy);
    }
}

static void check_copy_strided(void)
{
    /* permute (2,3,4) -> (4,2,3): out[i][j][k] = x[j][k][i] */
    int64_t shape[3] = {4, 2, 3}, os[3] = {6, 3, 1}, xs[3] = {1, 12, 4};
    check_copy_strided_case("transpose-like", shape, os, xs, 3, 0);
    /* attention heads (B,T,H,D) -> (B,H,T,D): D contiguous in both, moved
     * in words of up to 16 bytes; D = 6 allows only some widths */
    for (int64_t D = 6; D <= 16; D += 10) {
        int64_t B = 2, T = 5, H = 3;
        int64_t hs[4] = {B, H, T, D}, hos[4] = {H * T * D, T * D, D, 1},
                hxs[4] = {T * H * D, D, H * D, 1};
        check_copy_strided_case(D == 6 ? "heads, D 6" : "heads, D 16", hs, hos, hxs, 4, 0);
    }
    /* rows of 9 into rows of 8 (a slice), from one element in: no base or
     * row stride is a multiple of 16 bytes for most element sizes */
    int64_t ss[2] = {3, 8}, sos[2] = {8, 1}, sxs[2] = {9, 1};
    check_copy_strided_case("slice of rows", ss, sos, sxs, 2, 1);
    /* a dim of size 1 with an odd stride does not stop the widening */
    int64_t us[3] = {2, 1, 16}, uos[3] = {16, 16, 1}, uxs[3] = {32, 7, 1};
    check_copy_strided_case("size-1 dim", us, uos, uxs, 3, 0);
}

/* ---- ids ------------------------------------------------------------------------------------ */

static uint64_t *bad_slot(void)
{
    uint64_t *b;
    GT_CUDA(cudaHostAlloc((void **)&b, 2 * sizeof *b, cudaHostAllocMapped));
    b[0] = UINT64_MAX;
    b[1] = 0;
    return b;
}

static void *ids_of(const int64_t *ids, int64_t n, hx_kdtype dt)
{
    void *h = malloc(n * 8);
    for (int64_t i = 0; i < n; i++) {
        if (dt == HX_K_I64) ((int64_t *)h)[i] = ids[i];
        else ((int32_t *)h)[i] = (int32_t)ids[i];
    }
    void *d = gt_upload_raw(h, n * hx_k_dtype_size(dt));
    free(h);
    return d;
}

static void check_gather_scatter(void)
{
    const int64_t rows = 20, dim = 5, n = 64;
    int64_t ids[64];
    for (int64_t i = 0; i < n; i++) ids[i] = (int64_t)(test_rng_u64(&R) % rows);
    for (int idt = HX_K_I32; idt <= HX_K_I64; idt++) {
        void *dids = ids_of(ids, n, (hx_kdtype)idt);
        void *hids = malloc(n * 8);
        GT_CUDA(cudaMemcpy(hids, dids, n * hx_k_dtype_size((hx_kdtype)idt), cudaMemcpyDeviceToHost));
        for (int d = 0; d < 3; d++) {
            hx_kdtype dt = DTS[d];
            float *table = gt_random(&R, rows * dim, -1, 1), *want = malloc(sizeof *want * n * dim);
            void *dt_ = gt_upload(dt, table, rows * dim), *out = gt_poisoned(dt, n * dim);
            uint64_t *bad = bad_slot();
            run_ok("gather", hx_gk_gather_rows(&C, out, dt_, rows, dim * hx_k_dtype_size(dt), dids,
                                               (hx_kdtype)idt, n, bad));
            int64_t bp;
            hx_k_gather_rows(want, table, rows, dim * sizeof(float), hids, (hx_kdtype)idt, n, 1, &bp);
            float *got = gt_download(&C, dt, out, n * dim);
            gt_close("gather", dt, got, want, n * dim);
            CHECK(bad[0] == UINT64_MAX, "no bad id reported");
            free(table), free(want), free(got);
            cudaFree(dt_), cudaFree(out), cudaFreeHost(bad);
        }
        /* scatter-add: the CPU's f32 sums bit for bit, rounded once to dt */
        for (int d = 0; d < 3; d++) {
            hx_kdtype dt = DTS[d];
            float *dy = gt_random(&R, n * dim, -1, 1), *want = malloc(sizeof *want * rows * dim);
            void *ddy = gt_upload(dt, dy, n * dim), *out = gt_poisoned(dt, rows * dim);
            uint64_t *bad = bad_slot();
            CHECK(hx_gk_scatter_add_scratch_bytes(n, rows) <= C.scratch_bytes, "scratch");
            run_ok("scatter_add", hx_gk_scatter_add_rows(&C, dt, out, rows, dim, ddy, dids,
                                                         (hx_kdtype)idt, n, bad));
            int64_t bp;
            hx_k_scatter_add_rows_f32(want, rows, dim, dy, hids, (hx_kdtype)idt, n, 1, &bp);
            void *rounded = gt_upload(dt, want, rows * dim); /* rounds want to dt in place */
            float *got = gt_download(&C, dt, out, rows * dim);
            CHECK(!memcmp(got, want, sizeof *got * rows * dim),
                  "scatter_add (dtype %d) equals the CPU's sums bitwise", (int)dt);
            free(dy), free(want), free(got);
            cudaFree(ddy), cudaFree(out), cudaFree(rounded), cudaFreeHost(bad);
        }
        free(hids);
        cudaFree(dids);
    }
    /* bad ids: the smallest bad position and its id, the row left zero */
    int64_t bad_ids[6] = {3, 25, 1, -4, 99, 0};
    void *dids = ids_of(bad_ids, 6, HX_K_I64);
    float *table = gt_random(&R, rows * dim, -1, 1);
    void *dt_ = gt_upload(HX_K_F32, table, rows * dim), *out = gt_poisoned(HX_K_F32, 6 * dim);
    uint64_t *bad = bad_slot();
    run_ok("gather", hx_gk_gather_rows(&C, out, dt_, rows, dim * 4, dids, HX_K_I64, 6, bad));
    float *got = gt_download(&C, HX_K_F32, out, 6 * dim);
    CHECK(bad[0] == 1 && (int64_t)bad[1] == 25, "bad id at %llu (%lld), want 1 (25)",
          (unsigned long long)bad[0], (long long)(int64_t)bad[1]);
    CHECK(got[dim] == 0.0f && got[3 * dim] == 0.0f && got[0] == table[3 * dim], "bad rows zero");
    free(table), free(got);
    cudaFree(dids), cudaFree(dt_), cudaFree(out), cudaFreeHost(bad);
}

/* Long runs of one id (a text's space: a sixth of all tokens), past the
 * scatter kernel's eight-row unroll and its tail: still the CPU's sums bit
 * for bit, in every dtype. */
static void check_scatter_add_long_runs(void)
{
    const int64_t rows = 7, dim = 37, n = 1003;
    int64_t ids[1003];
    for (int64_t i = 0; i < n; i++)
        ids[i] = test_rng_u64(&R) % 10 < 6 ? 3 : (int64_t)(test_rng_u64(&R) % rows);
    void *dids = ids_of(ids, n, HX_K_I64);
    for (int d = 0; d < 3; d++) {
        hx_kdtype dt = DTS[d];
        float *dy = gt_random(&R, n * dim, -1, 1), *want = malloc(sizeof *want * rows * dim);
        void *ddy = gt_upload(dt, dy, n * dim), *out = gt_poisoned(dt, rows * dim);
        uint64_t *bad = bad_slot();
        CHECK(hx_gk_scatter_add_scratch_bytes(n, rows) <= C.scratch_bytes, "scratch");
        run_ok("scatter_add", hx_gk_scatter_add_rows(&C, dt, out, rows, dim, ddy, dids, HX_K_I64,
                                                     n, bad));
        int64_t bp;
        hx_k_scatter_add_rows_f32(want, rows, dim, dy, ids, HX_K_I64, n, 1, &bp);
        void *rounded = gt_upload(dt, want, rows * dim); /* rounds want to dt in place */
        float *got = gt_download(&C, dt, out, rows * dim);
        CHECK(!memcmp(got, want, sizeof *got * rows * dim),
              "scatter_add of runs up to %lld rows (dtype %d) equals the CPU's sums bitwise",
              (long long)n, (int)dt);
        free(dy), free(want), free(got);
        cudaFree(ddy), cudaFree(out), cudaFree(rounded), cudaFreeHost(bad);
    }
    cudaFree(dids);
}

/* ---- losses --------------------------------------------------------------------------------- */

static void check_losses(void)
{
    const int64_t N = 37, Cn = 11;
    int64_t labels[37];
    for (int64_t i = 0; i < N; i++) labels[i] = (int64_t)(test_rng_u64(&R) % Cn);
    for (int d = 0; d < 3; d++) {
        hx_kdtype dt = DTS[d];
        void *dl = ids_of(labels, N, HX_K_I64);
        float *x = gt_random(&R, N * Cn, -3, 3), want, *gwant = malloc(sizeof *gwant * N * Cn);
        float dloss = 0.7f;
        void *dx_ = gt_upload(dt, x, N * Cn), *ddl = gt_upload(HX_K_F32, &dloss, 1);
        float *dlossv;
        GT_CUDA(cudaMalloc((void **)&dlossv, 4));
        GT_CUDA(cudaMemset(dlossv, 0xFF, 4));
        uint64_t *bad = bad_slot();
        run_ok("cross_entropy", hx_gk_cross_entropy(&C, dt, dlossv, dx_, dl, HX_K_I64, N, Cn, bad));
        int64_t bp;
        hx_k_cross_entropy_forward_f32(&want, x, labels, HX_K_I64, N, Cn, 1, &bp);
        float *got = gt_download(&C, HX_K_F32, dlossv, 1);
        gt_close("cross_entropy", HX_K_F32, got, &want, 1);
        free(got);
        void *dg = gt_poisoned(dt, N * Cn);
        run_ok("cross_entropy_backward",
               hx_gk_cross_entropy_backward(&C, dt, dg, ddl, dx_, dl, HX_K_I64, N, Cn, bad));
        hx_k_cross_entropy_backward_f32(gwant, &dloss, x, labels, HX_K_I64, N, Cn, 1, &bp);
        got = gt_download(&C, dt, dg, N * Cn);
        gt_close("cross_entropy_backward", dt, got, gwant, N * Cn);
        CHECK(bad[0] == UINT64_MAX, "no bad label");
        free(got);

        float *t = gt_random(&R, N * Cn, 0, 1);
        void *dt_ = gt_upload(dt, t, N * Cn);
        run_ok("bce", hx_gk_bce_logits(&C, dt, dlossv, dx_, dt_, N * Cn));
        hx_k_bce_logits_forward_f32(&want, x, t, N * Cn, 1);
        got = gt_download(&C, HX_K_F32, dlossv, 1);
        gt_close("bce_with_logits", HX_K_F32, got, &want, 1);
        free(got);
        cudaMemset(dg, 0xFF, (size_t)N * Cn * hx_k_dtype_size(dt));
        run_ok("bce_backward", hx_gk_bce_logits_backward(&C, dt, dg, ddl, dx_, dt_, N * Cn));
        hx_k_bce_logits_backward_f32(gwant, &dloss, x, t, N * Cn, 1);
        got = gt_download(&C, dt, dg, N * Cn);
        gt_close("bce_with_logits_backward", dt, got, gwant, N * Cn);
        free(got), free(x), free(t), free(gwant);
        cudaFree(dl), cudaFree(dx_), cudaFree(ddl), cudaFree(dlossv), cudaFree(dg), cudaFree(dt_);
        cudaFreeHost(bad);
    }
    /* a bad label: position and value reported */
    labels[5] = Cn;
    labels[9] = -1;
    void *dl = ids_of(labels, N, HX_K_I64);
    float *x = gt_random(&R, N * Cn, -3, 3), *dlossv;
    void *dx_ = gt_upload(HX_K_F32, x, N * Cn);
    GT_CUDA(cudaMalloc((void **)&dlossv, 4));
    uint64_t *bad = bad_slot();
    run_ok("cross_entropy", hx_gk_cross_entropy(&C, HX_K_F32, dlossv, dx_, dl, HX_K_I64, N, Cn, bad));
    GT_CUDA(cudaStreamSynchronize(C.stream));
    CHECK(bad[0] == 5 && (int64_t)bad[1] == Cn, "bad label at %llu", (unsigned long long)bad[0]);
    free(x);
    cudaFree(dl), cudaFree(dx_), cudaFree(dlossv), cudaFreeHost(bad);
}

/* ---- optimizer updates: the CPU kernels' bits ------------------------------------------------------ */

static void check_optim_case(const char *what, hx_optim_plan pl, int states, int64_t n,
                             hx_kdtype gdt, hx_kdtype hdt,
                             int (*cpu)(float *, float *, float *, const hx_optim_io *, void *),
                             void *hp)
{
    float *p = gt_random(&R, n, -1, 1), *s1 = gt_random(&R, n, 0, 0.1), *s2 = gt_random(&R, n, 0, 0.1);
    float *g = gt_random(&R, n, -1, 1);
    void *hg = malloc(n * 4), *hh = calloc(n, 2), *gh = calloc(n, 2);
    hx_k_cast(hg, gdt, g, HX_K_F32, n, 1);
    void *dp = gt_upload_raw(p, n * 4), *ds1 = gt_upload_raw(s1, n * 4), *ds2 = gt_upload_raw(s2, n * 4);
    void *dg = gt_upload_raw(hg, n * hx_k_dtype_size(gdt)), *dh = gt_poisoned(HX_K_F16, n);
    run_ok(what, hx_gk_optim_update(&C, &pl, dp, states ? ds1 : NULL, states > 1 ? ds2 : NULL, dg,
                                    hdt != HX_K_F32 ? dh : NULL, n));
    hx_optim_io io = hx_optim_io_f32(NULL, 1);
    io.grad = hg;
    io.grad_dtype = gdt;
    io.grad_unscale = pl.unscale;
    io.param_half = hdt != HX_K_F32 ? hh : NULL;
    io.param_half_dtype = hdt;
    cpu(p, s1, s2, &io, hp);
    float *gp = malloc(n * 4), *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    GT_CUDA(cudaStreamSynchronize(C.stream));
    GT_CUDA(cudaMemcpy(gp, dp, n * 4, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(g1, ds1, n * 4, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(g2, ds2, n * 4, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(gh, dh, n * 2, cudaMemcpyDeviceToHost));
    CHECK(!memcmp(gp, p, n * 4), "%s: params differ from the CPU's bits", what);
    CHECK(!states || !memcmp(g1, s1, n * 4), "%s: state 1 differs", what);
    CHECK(states < 2 || !memcmp(g2, s2, n * 4), "%s: state 2 differs", what);
    CHECK(hdt == HX_K_F32 || !memcmp(gh, hh, n * 2), "%s: half copy differs", what);
    free(p), free(s1), free(s2), free(g), free(hg), free(hh), free(gh), free(gp), free(g1), free(g2);
    cudaFree(dp), cudaFree(ds1), cudaFree(ds2), cudaFree(dg), cudaFree(dh);
}

static int64_t STEP;
static int cpu_adam(float *p, float *s1, float *s2, const hx_optim_io *io, void *hp)
{
    int64_t t = STEP - 1;
    return hx_optim_adam(p, s1, s2, 1000, &t, hp, io);
}
static int cpu_adagrad(float *p, float *s1, float *s2, const hx_optim_io *io, void *hp)
{
    int64_t t = STEP - 1;
    return hx_optim_adagrad(p, s1, 1000, &t, hp, io);
}
static int cpu_sgd(float *p, float *s1, float *s2, const hx_optim_io *io, void *hp)
{
    int64_t t = STEP - 1;
    return hx_optim_sgd(p, s1, 1000, &t, hp, io);
}
static int cpu_ftrl(float *p, float *s1, float *s2, const hx_optim_io *io, void *hp)
{
    return hx_optim_ftrl(p, s1, s2, 1000, hp, io);
}

static void check_optim(void)
{
    for (int g = 0; g < 3; g++) {
        hx_kdtype gdt = DTS[g], hdt = g == 0 ? HX_K_F32 : g == 1 ? HX_K_BF16 : HX_K_F16;
        for (STEP = 1; STEP <= 3; STEP += 2) {
            hx_optim_io io = hx_optim_io_f32(NULL, 1);
            io.grad_dtype = gdt;
            io.grad_unscale = 0.5f;
            io.param_half = hdt != HX_K_F32 ? (void *)1 : NULL;
            io.param_half_dtype = hdt;
            hx_adam_hp adam = {1e-3, 0.9, 0.999, 1e-8, 0.01, 0};
            hx_adam_hp adamw = {1e-3, 0.9, 0.999, 1e-8, 0.01, 1};
            hx_adagrad_hp ada = {1e-2, 0.01, 1e-10, 0.001};
            hx_sgd_hp sgd = {0.1, 0.9, 0.1, 0.001, 1};
            hx_ftrl_hp ftrl = {0.05, 0.01, 0.02, 0.001};
            check_optim_case("adam", hx_optim_plan_adam(&adam, STEP, &io), 2, 1000, gdt, hdt, cpu_adam, &adam);
            check_optim_case("adamw", hx_optim_plan_adam(&adamw, STEP, &io), 2, 1000, gdt, hdt, cpu_adam, &adamw);
            check_optim_case("adagrad", hx_optim_plan_adagrad(&ada, STEP, &io), 1, 1000, gdt, hdt, cpu_adagrad, &ada);
            check_optim_case("sgd", hx_optim_plan_sgd(&sgd, STEP, &io), 1, 1000, gdt, hdt, cpu_sgd, &sgd);
            check_optim_case("ftrl", hx_optim_plan_ftrl(&ftrl, &io), 2, 1000, gdt, hdt, cpu_ftrl, &ftrl);
        }
    }
}

/* The gradient scan: the sum of squares in double, finite exactly when x is. */
static void check_sumsq(void)
{
    enum { N = 100003 }; /* more than one pass of the grid */
    float *x = malloc(sizeof *x * N);
    for (int i = 0; i < N; i++) x[i] = (float)((i * 7919) % 201 - 100) / 8.0f; /* 7 bits: exact in bf16 */
    for (int d = 0; d < 3; d++) {
        double *out, h = -1, h2 = -2;
        GT_CUDA(cudaMalloc((void **)&out, sizeof *out));
        void *dx_ = gt_upload(DTS[d], x, N);
        run_ok("sumsq", hx_gk_sumsq(&C, DTS[d], out, dx_, N));
        GT_CUDA(cudaStreamSynchronize(C.stream));
        GT_CUDA(cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost));
        double ref = hx_k_sumsq(x, HX_K_F32, N, 1);
        CHECK(fabs(h - ref) <= 1e-12 * ref, "sumsq %.17g, reference %.17g", h, ref);
        run_ok("sumsq", hx_gk_sumsq(&C, DTS[d], out, dx_, N));
        GT_CUDA(cudaStreamSynchronize(C.stream));
        GT_CUDA(cudaMemcpy(&h2, out, sizeof h2, cudaMemcpyDeviceToHost));
        CHECK(h == h2, "sumsq differs between two runs: %.17g and %.17g", h, h2);
        float y[100];
        memcpy(y, x, sizeof y);
        y[77] = d == 1 ? INFINITY : NAN;
        void *dy = gt_upload(DTS[d], y, 100);
        run_ok("sumsq", hx_gk_sumsq(&C, DTS[d], out, dy, 100));
        GT_CUDA(cudaStreamSynchronize(C.stream));
        GT_CUDA(cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(!isfinite(h), "a non-finite value summed to %g", h);
        cudaFree(out), cudaFree(dx_), cudaFree(dy);
    }
    free(x);
}

static int setup(void)
{
    int skip = gt_require_device();
    if (skip) return skip;
    R = test_rng_make(20261121);
    C = gt_ctx((size_t)64 << 20);
    return 0;
}

static void teardown(void)
{
    GT_CUDA(cudaStreamSynchronize(C.stream));
    gt_ctx_free(&C);
}

static void rows(void)
{
    /* a warp per row up to 1024 (each values-per-lane width and its
     * boundaries), a block per row beyond */
    check_rows(37, 1000);
    check_rows(300, 7);
    check_rows(9, 33);
    check_rows(130, 256);
    check_rows(5, 384);
    check_rows(6, 513);
    check_rows(3, 1024);
    check_rows(4, 1025);
    check_rows(2, 5000);
}

static void reduce(void)
{
    int64_t s4[4] = {3, 5, 7, 2}, wide[2] = {4, 100000}, tall[2] = {100000, 4};
    unsigned masks[6] = {0x1, 0x2, 0x8, 0x5, 0xA, 0xF};
    for (int m = 0; m < 6; m++) check_reduce(s4, 4, masks[m]);
    check_reduce(wide, 2, 0x2); /* few outputs, long rows: chunked, warp per output */
    check_reduce(tall, 2, 0x1); /* few outputs, long columns: chunked, thread per output */
    check_reduce(wide, 2, 0x3); /* everything to one value */
    int64_t bias[2] = {2048, 384};
    check_reduce(bias, 2, 0x1); /* a bias gradient: many short chunks per output */
}

static const test_case cases[] = {
    {"gemm", check_gemm},
    {"binary", check_binary},
    {"unary", check_unary},
    {"scale_bias_mask", check_scale_bias_mask},
    {"cast", check_cast},
    {"dropout", check_dropout},
    {"rows", rows},
    {"reduce", reduce},
    {"copy_strided", check_copy_strided},
    {"gather_scatter", check_gather_scatter},
    {"scatter_add_long_runs", check_scatter_add_long_runs},
    {"losses", check_losses},
    {"optim", check_optim},
    {"sumsq", check_sumsq},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "gpu_kernels", cases, TEST_COUNT(cases), &o);
}
