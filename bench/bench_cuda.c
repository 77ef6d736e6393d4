/* CUDA kernels against their ceilings, measured in the same run: GEMM
 * through hx_gk_gemm vs a bare cublasGemmEx of the same shape; memory-bound
 * kernels (elementwise, rows, reductions, optimizer) vs a device-to-device
 * cudaMemcpy of the same bytes; host<->device copies through the backend
 * (pinned and pageable) vs the best bare cudaMemcpyAsync from pinned memory;
 * with cuDNN, the ResNet-20 example's convolutions (Fashion-MNIST, batch
 * 128) through cuDNN (what a session on the device runs) against hetex's
 * im2col + cuBLAS path (what runs without cuDNN), forward, backward data
 * and backward filter, as cuDNN's speedup.
 * One JSON object per case on stdout. Without CUDA or a device it prints
 * one object saying why it skipped, and exits 0.
 *   bench_cuda [--quick] */
#include "backend/backend_cuda.h"

#include <stdio.h>
#include <string.h>

#ifndef HX_HAVE_CUDA
int main(void)
{
    printf("{\"bench\":\"cuda\",\"skipped\":true,\"why\":\"built without CUDA (nvcc not found)\"}\n");
    return 0;
}
#else
#include "kernels/gpu/hx_gpu_kernels.h"

#include <stdlib.h>
#include <time.h>

static cudaEvent_t ev0, ev1;
static hx_gk_ctx C;
static int REPS = 20;

#define TRY(call)                                                                        \
    do {                                                                                 \
        int e_ = (int)(call);                                                            \
        if (e_) {                                                                        \
            printf("{\"bench\":\"cuda\",\"error\":\"%s failed (%d) at line %d\"}\n", #call, e_, \
                   __LINE__);                                                            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* Seconds per call of `body`, the median of REPS timed calls after 3 warm-ups. */
#define TIME(out, body)                                                                  \
    do {                                                                                 \
        double ts_[64];                                                                  \
        for (int w_ = 0; w_ < 3; w_++) { body; }                                         \
        for (int r_ = 0; r_ < REPS; r_++) {                                              \
            cudaEventRecord(ev0, C.stream);                                              \
            body;                                                                        \
            cudaEventRecord(ev1, C.stream);                                              \
            cudaEventSynchronize(ev1);                                                   \
            float ms_;                                                                   \
            cudaEventElapsedTime(&ms_, ev0, ev1);                                        \
            ts_[r_] = ms_ * 1e-3;                                                        \
        }                                                                                \
        for (int i_ = 1; i_ < REPS; i_++)                                                \
            for (int j_ = i_; j_ > 0 && ts_[j_] < ts_[j_ - 1]; j_--) {                   \
                double t_ = ts_[j_]; ts_[j_] = ts_[j_ - 1]; ts_[j_ - 1] = t_;            \
            }                                                                            \
        out = ts_[REPS / 2];                                                             \
    } while (0)

static const char *dname(hx_kdtype dt) { return dt == HX_K_F32 ? "f32" : dt == HX_K_F16 ? "f16" : "bf16"; }

static void *dev(size_t bytes)
{
    void *p;
    TRY(cudaMalloc(&p, bytes));
    TRY(cudaMemset(p, 0, bytes));
    return p;
}

static void gemm_case(hx_kdtype dt, int64_t M, int64_t N, int64_t K)
{
    size_t es = hx_k_dtype_size(dt);
    void *a = dev(M * K * es), *b = dev(K * N * es), *c = dev(M * N * es);
    cudaDataType_t ty = dt == HX_K_F16 ? CUDA_R_16F : dt == HX_K_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    float one = 1, zero = 0;
    double t_hx, t_blas;
    TIME(t_hx, TRY(hx_gk_gemm(&C, dt, 0, 0, 1, M, N, K, a, K, 0, b, N, 0, c, N, 0)));
    TIME(t_blas, TRY(cublasGemmEx(C.blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, b,
                                  ty, (int)N, a, ty, (int)K, &zero, c, ty, (int)N,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)));
    double flops = 2.0 * M * N * K;
    printf("{\"bench\":\"cuda\",\"case\":\"gemm\",\"dtype\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
           "\"hx_s\":%.6e,\"cublas_s\":%.6e,\"hx_tflops\":%.1f,\"ratio_to_cublas\":%.3f}\n",
           dname(dt), (long long)M, (long long)N, (long long)K, t_hx, t_blas, flops / t_hx / 1e12,
           t_blas / t_hx);
    cudaFree(a), cudaFree(b), cudaFree(c);
}

/* A memory-bound kernel moving `bytes` (read + written) vs a D2D copy of the same. */
static void report_bw(const char *name, hx_kdtype dt, int64_t n, size_t bytes, double t)
{
    static void *s, *d;
    static size_t have;
    if (have < bytes / 2) {
        cudaFree(s), cudaFree(d);
        have = bytes / 2;
        s = dev(have), d = dev(have);
    }
    double t_copy;
    TIME(t_copy, TRY(cudaMemcpyAsync(d, s, bytes / 2, cudaMemcpyDeviceToDevice, C.stream)));
    printf("{\"bench\":\"cuda\",\"case\":\"%s\",\"dtype\":\"%s\",\"n\":%lld,\"s\":%.6e,"
           "\"gb_per_s\":%.1f,\"memcpy_gb_per_s\":%.1f,\"ratio_to_memcpy\":%.3f}\n",
           name, dname(dt), (long long)n, t, bytes / t / 1e9, bytes / t_copy / 1e9, t_copy / t);
}

/* The row kernels at the GPT example's shapes (6 heads, context 256, batch
 * 64, width 384): attention softmax rows of 256, layernorm rows of 384,
 * where a warp holds each row. */
static void gpt_row_cases(hx_kdtype dt)
{
    const int64_t att_rows = 64 * 6 * 256, att_n = 256, ln_rows = 64 * 256, ln_n = 384;
    size_t es = hx_k_dtype_size(dt);
    int64_t n = att_rows * att_n;
    void *x = dev(n * es), *y = dev(n * es), *z = dev(n * es), *g = dev(ln_n * es);
    double t;
    TIME(t, TRY(hx_gk_softmax(&C, dt, y, x, att_rows, att_n)));
    report_bw("softmax rows of 256 (GPT attention)", dt, n, 2 * n * es, t);
    TIME(t, TRY(hx_gk_softmax_backward(&C, dt, y, z, x, att_rows, att_n)));
    report_bw("softmax_backward rows of 256 (GPT attention)", dt, n, 3 * n * es, t);
    n = ln_rows * ln_n;
    TIME(t, TRY(hx_gk_layernorm(&C, dt, y, x, g, g, 1e-5f, ln_rows, ln_n)));
    report_bw("layernorm rows of 384 (GPT)", dt, n, 2 * n * es, t);
    TIME(t, TRY(hx_gk_layernorm_backward_x(&C, dt, y, z, x, g, 1e-5f, ln_rows, ln_n)));
    report_bw("layernorm_backward_x rows of 384 (GPT)", dt, n, 3 * n * es, t);
    cudaFree(x), cudaFree(y), cudaFree(z), cudaFree(g);
}

static void memory_cases(hx_kdtype dt, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    size_t es = hx_k_dtype_size(dt);
    void *x = dev(n * es), *y = dev(n * es), *z = dev(n * es), *g = dev(cols * es);
    double t;
    TIME(t, TRY(hx_gk_unary(&C, dt, HX_UNARY_GELU, y, x, n)));
    report_bw("gelu", dt, n, 2 * n * es, t);
    int64_t sh[2] = {rows, cols}, st[2] = {cols, 1}, sb[2] = {0, 1};
    TIME(t, TRY(hx_gk_binary(&C, dt, HX_BINARY_ADD, y, x, st, z, st, sh, 2)));
    report_bw("add", dt, n, 3 * n * es, t);
    TIME(t, TRY(hx_gk_binary(&C, dt, HX_BINARY_MUL, y, x, st, g, sb, sh, 2)));
    report_bw("mul_broadcast_row", dt, n, 2 * n * es, t);
    TIME(t, TRY(hx_gk_bias_add(&C, dt, y, x, g, rows, cols)));
    report_bw("bias_add", dt, n, 2 * n * es, t);
    TIME(t, TRY(hx_gk_softmax(&C, dt, y, x, rows, cols)));
    report_bw("softmax", dt, n, 2 * n * es, t);
    TIME(t, TRY(hx_gk_layernorm(&C, dt, y, x, g, g, 1e-5f, rows, cols)));
    report_bw("layernorm", dt, n, 2 * n * es, t);
    TIME(t, TRY(hx_gk_layernorm_backward_x(&C, dt, y, z, x, g, 1e-5f, rows, cols)));
    report_bw("layernorm_backward_x", dt, n, 3 * n * es, t);
    uint8_t red[2] = {1, 0};
    TIME(t, TRY(hx_gk_reduce_sum(&C, dt, g, x, sh, 2, red)));
    report_bw("reduce_rows_to_bias_grad", dt, n, n * es, t);
    int64_t ps[2] = {cols, rows}, pst[2] = {1, cols}, pos[2] = {rows, 1};
    TIME(t, TRY(hx_gk_copy_strided(&C, y, pos, x, pst, ps, 2, es)));
    report_bw("transpose", dt, n, 2 * n * es, t);
    cudaFree(x), cudaFree(y), cudaFree(z), cudaFree(g);
}

static void optim_case(int64_t n)
{
    float *p = dev(n * 4), *m = dev(n * 4), *v = dev(n * 4), *g = dev(n * 4);
    hx_optim_io io = hx_optim_io_f32(NULL, 1);
    hx_adam_hp hp = {1e-3, 0.9, 0.999, 1e-8, 0, 0};
    hx_optim_plan pl = hx_optim_plan_adam(&hp, 10, &io);
    double t;
    TIME(t, TRY(hx_gk_optim_update(&C, &pl, p, m, v, g, NULL, n)));
    report_bw("adam_update", HX_K_F32, n, 7 * n * 4, t);
    cudaFree(p), cudaFree(m), cudaFree(v), cudaFree(g);
}

static double wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Copies through the backend (pinned: straight; pageable: staged) vs the
 * best bare cudaMemcpyAsync from pinned memory, each direction. */
static void copy_cases(size_t n)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_CUDA;
    hx_backend *b;
    hx_stream *s;
    TRY(hx__backend_cuda_for(&cfg, (hx_trace_hooks){0}, &b, NULL));
    TRY(b->stream_create(b, &s));
    void *d, *pinned, *pageable = malloc(n);
    TRY(b->alloc(b, n, HX_MEM_TRANSIENT, "bench", &d));
    TRY(cudaHostAlloc(&pinned, n, cudaHostAllocDefault));
    memset(pageable, 1, n);
    for (int h2d = 1; h2d >= 0; h2d--) {
        double best_raw = 1e30, best_pin = 1e30, best_page = 1e30;
        for (int r = 0; r < 5; r++) {
            double t0 = wall();
            TRY(cudaMemcpyAsync(h2d ? d : pinned, h2d ? pinned : d, n,
                                h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, C.stream));
            TRY(cudaStreamSynchronize(C.stream));
            double t1 = wall();
            TRY(h2d ? b->copy_h2d(b, s, (hx_h2d_copy){.dev = d, .host = pinned, .bytes = n})
                    : b->copy_d2h(b, s, (hx_d2h_copy){.host = pinned, .dev = d, .bytes = n}));
            TRY(b->stream_sync(b, s));
            double t2 = wall();
            TRY(h2d ? b->copy_h2d(b, s, (hx_h2d_copy){.dev = d, .host = pageable, .bytes = n})
                    : b->copy_d2h(b, s, (hx_d2h_copy){.host = pageable, .dev = d, .bytes = n}));
            TRY(b->stream_sync(b, s));
            double t3 = wall();
            if (t1 - t0 < best_raw) best_raw = t1 - t0;
            if (t2 - t1 < best_pin) best_pin = t2 - t1;
            if (t3 - t2 < best_page) best_page = t3 - t2;
        }
        printf("{\"bench\":\"cuda\",\"case\":\"copy_%s\",\"bytes\":%zu,\"raw_pinned_gb_per_s\":%.2f,"
               "\"backend_pinned_gb_per_s\":%.2f,\"backend_pageable_gb_per_s\":%.2f,"
               "\"pinned_ratio\":%.3f,\"pageable_ratio\":%.3f}\n",
               h2d ? "h2d" : "d2h", n, n / best_raw / 1e9, n / best_pin / 1e9, n / best_page / 1e9,
               best_raw / best_pin, best_raw / best_page);
    }
    b->free(b, d);
    cudaFreeHost(pinned);
    free(pageable);
    b->stream_destroy(b, s);
    b->destroy(b);
}

#ifdef HX_HAVE_CUDNN
/* One conv of the ResNet-20 example in three directions: cuDNN (its
 * workspace at most the columns' bytes, as in a session) against im2col +
 * conv_gemm (forward), conv_gemm_backward_cols + col2im (data) and
 * conv_gemm_backward_w on the forward's columns (filter). */
static void conv_case(void *dnn, hx_kdtype dt, int64_t N, int64_t Ci, int64_t HW, int64_t Co,
                      int64_t k, int64_t s)
{
    int64_t p = k / 2, OHW = (HW + 2 * p - k) / s + 1;
    hx_k_window w = {N, Ci, HW, HW, OHW, OHW, k, k, s, s, p, p, 1, 1};
    hx_k_conv_gemm g = {N, 1, Co, Ci * k * k, OHW * OHW};
    hx_gk_conv cv = {w, Co, 1};
    size_t es = hx_k_dtype_size(dt), cols_b = (size_t)(N * Ci * k * k * OHW * OHW) * es;
    void *x = dev(N * Ci * HW * HW * es), *wt = dev(Co * Ci * k * k * es),
         *y = dev(N * Co * OHW * OHW * es), *cols = dev(cols_b);
    static const char *dirs[] = {"forward", "backward_data", "backward_filter"};
    for (int d = HX_GK_CONV_FORWARD; d <= HX_GK_CONV_BACKWARD_FILTER; d++) {
        size_t limit = cols_b < C.scratch_bytes ? cols_b : C.scratch_bytes, ws;
        int algo;
        TRY(hx_gk_conv_cudnn_algo(dnn, &C, dt, d, &cv, limit, &algo, &ws));
        double t_dnn, t_hx;
        void *out = d == HX_GK_CONV_FORWARD ? y : d == HX_GK_CONV_BACKWARD_DATA ? x : wt;
        const void *a = d == HX_GK_CONV_FORWARD ? x : y, *b = d == HX_GK_CONV_BACKWARD_FILTER ? x : wt;
        TIME(t_dnn, TRY(hx_gk_conv_cudnn(dnn, &C, dt, d, &cv, algo, ws, out, a, b)));
        if (d == HX_GK_CONV_FORWARD)
            TIME(t_hx, TRY(hx_gk_im2col(&C, dt, cols, x, &w)); TRY(hx_gk_conv_gemm(&C, dt, y, wt, cols, &g)));
        else if (d == HX_GK_CONV_BACKWARD_DATA)
            TIME(t_hx, TRY(hx_gk_conv_gemm_backward_cols(&C, dt, cols, y, wt, &g));
                 TRY(hx_gk_col2im(&C, dt, x, cols, &w)));
        else
            TIME(t_hx, TRY(hx_gk_conv_gemm_backward_w(&C, dt, wt, y, cols, &g)));
        printf("{\"bench\":\"cuda\",\"case\":\"conv_%s\",\"dtype\":\"%s\",\"N\":%lld,\"C\":%lld,"
               "\"HW\":%lld,\"C_out\":%lld,\"k\":%lld,\"stride\":%lld,\"cudnn_algo\":%d,"
               "\"cudnn_ws_bytes\":%zu,\"cudnn_s\":%.6e,\"im2col_cublas_s\":%.6e,"
               "\"cudnn_speedup\":%.3f,\"cudnn_gflops\":%.1f}\n", dirs[d], dname(dt), (long long)N,
               (long long)Ci, (long long)HW, (long long)Co, (long long)k, (long long)s, algo & 0xff,
               ws, t_dnn, t_hx, t_hx / t_dnn, 2.0 * N * Co * OHW * OHW * Ci * k * k / t_dnn / 1e9);
    }
    cudaFree(x), cudaFree(wt), cudaFree(y), cudaFree(cols);
}

/* The ResNet-20 example's conv shapes (examples/resnet: widths 16, 32, 64 on
 * 28 x 28 images; 1x1 stride-2 shortcuts), batch 128. */
static void conv_cases(void)
{
    const char *lib;
    void *dnn = NULL;
    if (!hx_gk_cudnn_load(&lib) || hx_gk_cudnn_create(C.stream, &dnn)) {
        printf("{\"bench\":\"cuda\",\"case\":\"conv\",\"skipped\":true,\"why\":\"cuDNN: %s\"}\n", lib);
        return;
    }
    printf("{\"bench\":\"cuda\",\"case\":\"cudnn\",\"library\":\"%s\",\"version\":%zu}\n", lib,
           hx_gk_cudnn_version());
    static const int64_t shapes[][5] = {/* C, HW, C_out, k, stride */
        {1, 28, 16, 3, 1}, {16, 28, 16, 3, 1}, {16, 28, 32, 3, 2}, {16, 28, 32, 1, 2},
        {32, 14, 32, 3, 1}, {32, 14, 64, 3, 2}, {32, 14, 64, 1, 2}, {64, 7, 64, 3, 1}};
    hx_kdtype dts[2] = {HX_K_F32, HX_K_BF16};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            conv_case(dnn, dts[d], 128, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                      shapes[i][4]);
    hx_gk_cudnn_destroy(dnn);
}
#endif

int main(int argc, char **argv)
{
    const char *why = NULL;
    if (hx__cuda_device_count(&why) == 0) {
        printf("{\"bench\":\"cuda\",\"skipped\":true,\"why\":\"no CUDA device: %s\"}\n", why);
        return 0;
    }
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    if (quick) REPS = 5;
    struct cudaDeviceProp prop;
    TRY(cudaGetDeviceProperties(&prop, 0));
    printf("{\"bench\":\"cuda\",\"device\":\"%s\",\"sm_count\":%d,\"memory_bytes\":%zu,"
           "\"cc\":\"%d.%d\"}\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem,
           prop.major, prop.minor);
    TRY(cudaStreamCreate(&C.stream));
    TRY(cublasCreate(&C.blas));
    TRY(cublasSetStream(C.blas, C.stream));
    TRY(cudaEventCreate(&ev0));
    TRY(cudaEventCreate(&ev1));
    C.scratch_bytes = (size_t)64 << 20;
    C.scratch = dev(C.scratch_bytes);
    hx_kdtype dts[3] = {HX_K_BF16, HX_K_F16, HX_K_F32};
    for (int d = 0; d < 3; d++) gemm_case(dts[d], 4096, 4096, 4096);
    gemm_case(HX_K_BF16, 8192, 1024, 4096);
    for (int d = 0; d < 3; d++) memory_cases(dts[d], 8192, quick ? 1024 : 4096);
    gpt_row_cases(HX_K_BF16);
    optim_case(quick ? (1 << 22) : (1 << 26));
    copy_cases(quick ? (64 << 20) : (256 << 20));
#ifdef HX_HAVE_CUDNN
    conv_cases();
#endif
    return 0;
}
#endif
