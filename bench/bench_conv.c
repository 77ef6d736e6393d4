/* Convolution on the host: each conv shape of `hetex resnet` (batch 128,
 * width 16) and one per ResNet-50 stage (batch 32), forward (im2col + the
 * grouped GEMMs) and backward (columns' gradient + col2im, and the weight
 * gradient), as a fraction of the OpenBLAS sgemm rate of the equivalent
 * GEMM (Cout x N*OH*OW x C*KH*KW, timed in the same run on the same
 * threads: the ceiling of an im2col convolution). One JSON object per case
 * and direction, with the machine's load average.
 *
 *   build/bench_conv [--threads N] [--reps N] [--case NAME]   (./build.sh bench conv)
 *   build/bench_conv --list   the cases: name N C H W Cout K stride pad (bench/conv_torch.py
 *                             times the same ones in PyTorch; bench/conv_vs_torch.sh
 *                             interleaves the two) */
#include "kernels/cpu/hx_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct conv_case {
    const char *name;
    int64_t N, C, H, W, Cout, K, stride, pad;
} conv_case;

static const conv_case cases[] = {
    /* hetex resnet, width 16, batch 128 (28x28 Fashion-MNIST) */
    {"resnet_stem", 128, 1, 28, 28, 16, 3, 1, 1},
    {"resnet_stage1", 128, 16, 28, 28, 16, 3, 1, 1},
    {"resnet_stage2_down", 128, 16, 28, 28, 32, 3, 2, 1},
    {"resnet_stage2_shortcut", 128, 16, 28, 28, 32, 1, 2, 0},
    {"resnet_stage2", 128, 32, 14, 14, 32, 3, 1, 1},
    {"resnet_stage3_down", 128, 32, 14, 14, 64, 3, 2, 1},
    {"resnet_stage3_shortcut", 128, 32, 14, 14, 64, 1, 2, 0},
    {"resnet_stage3", 128, 64, 7, 7, 64, 3, 1, 1},
    /* ResNet-50's bottleneck 3x3 convs per stage and conv2's 1x1 expansion, batch 32 */
    {"resnet50_conv2_3x3", 32, 64, 56, 56, 64, 3, 1, 1},
    {"resnet50_conv2_1x1", 32, 64, 56, 56, 256, 1, 1, 0},
    {"resnet50_conv3_3x3", 32, 128, 28, 28, 128, 3, 1, 1},
    {"resnet50_conv4_3x3", 32, 256, 14, 14, 256, 3, 1, 1},
    {"resnet50_conv5_3x3", 32, 512, 7, 7, 512, 3, 1, 1},
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double load1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static float *filled(int64_t n)
{
    float *p = malloc(sizeof *p * (size_t)n);
    if (!p) {
        fprintf(stderr, "bench_conv: out of memory for %lld floats\n", (long long)n);
        exit(1);
    }
    uint64_t z = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < n; i++) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        p[i] = (float)((double)(z >> 11) * 0x1p-53 - 0.5);
    }
    return p;
}

typedef struct buffers {
    float *x, *w, *y, *cols, *dy, *dcols, *dx, *dw, *gemm_out;
} buffers;

static void forward(const hx_k_window *win, const hx_k_conv_gemm *g, buffers *b, int nt)
{
    hx_k_im2col_f32(b->cols, b->x, win, nt);
    hx_k_conv_gemm_forward_f32(b->y, b->w, b->cols, g, nt);
}

static void backward(const hx_k_window *win, const hx_k_conv_gemm *g, buffers *b, int nt)
{
    hx_k_conv_gemm_backward_cols_f32(b->dcols, b->dy, b->w, g, nt);
    hx_k_col2im_f32(b->dx, b->dcols, win, nt);
    if (hx_k_conv_gemm_backward_w_f32(b->dw, b->dy, b->cols, g, nt)) {
        fprintf(stderr, "bench_conv: out of memory in the weight gradient\n");
        exit(1);
    }
}

/* The equivalent GEMM: (Cout, K) x (K, N*P). */
static void sgemm(const hx_k_conv_gemm *g, buffers *b, int nt)
{
    hx_k_gemm_f32(0, 0, 1, g->Cog, g->N * g->P, g->Kg, 1.0f, b->w, g->Kg, 0, b->cols, g->N * g->P,
                  0, 0.0f, b->gemm_out, g->N * g->P, 0, nt);
}

#define BEST(expr, reps, out)                                  \
    do {                                                       \
        expr; /* warm-up */                                    \
        out = 1e30;                                            \
        for (int r_ = 0; r_ < (reps); r_++) {                  \
            double t0_ = now();                                \
            expr;                                              \
            double t_ = now() - t0_;                           \
            if (t_ < out) out = t_;                            \
        }                                                      \
    } while (0)

static void run_case(const conv_case *c, int nt, int reps)
{
    int64_t OH = (c->H + 2 * c->pad - c->K) / c->stride + 1;
    int64_t OW = (c->W + 2 * c->pad - c->K) / c->stride + 1;
    hx_k_window win = {c->N, c->C, c->H, c->W, OH, OW, c->K, c->K, c->stride, c->stride,
                       c->pad, c->pad, 1, 1};
    hx_k_conv_gemm g = {c->N, 1, c->Cout, c->C * c->K * c->K, OH * OW};
    int64_t nx = c->N * c->C * c->H * c->W, nw = c->Cout * g.Kg, ny = c->N * c->Cout * g.P;
    int64_t ncols = c->N * g.Kg * g.P;
    buffers b = {filled(nx), filled(nw), filled(ny), filled(ncols), filled(ny), filled(ncols),
                 filled(nx), filled(nw), filled(ny)};
    double t_gemm, t_fwd, t_bwd;
    BEST(sgemm(&g, &b, nt), reps, t_gemm);
    BEST(forward(&win, &g, &b, nt), reps, t_fwd);
    BEST(backward(&win, &g, &b, nt), reps, t_bwd);
    double flop = 2.0 * (double)c->Cout * (double)g.Kg * (double)(c->N * g.P);
    double gemm_rate = flop / t_gemm;
    char shape[160];
    snprintf(shape, sizeof shape, "N%lld C%lld %lldx%lld -> C%lld %lldx%lld, k%lld s%lld p%lld",
             (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W,
             (long long)c->Cout, (long long)OH, (long long)OW, (long long)c->K,
             (long long)c->stride, (long long)c->pad);
    const char *dir[2] = {"forward", "backward"};
    double t[2] = {t_fwd, t_bwd}, f[2] = {flop, 2 * flop};
    for (int d = 0; d < 2; d++)
        printf("{\"bench\": \"conv\", \"case\": \"%s\", \"direction\": \"%s\", \"shape\": \"%s\", "
               "\"threads\": %d, \"gflop\": %.4f, \"ms\": %.3f, \"gflops\": %.2f, "
               "\"sgemm_gflops\": %.2f, \"fraction_of_sgemm\": %.3f, \"load1\": %.2f}\n",
               c->name, dir[d], shape, nt, f[d] * 1e-9, t[d] * 1e3, f[d] / t[d] * 1e-9,
               gemm_rate * 1e-9, f[d] / t[d] / gemm_rate, load1());
    fflush(stdout);
    free(b.x), free(b.w), free(b.y), free(b.cols), free(b.dy), free(b.dcols), free(b.dx);
    free(b.dw), free(b.gemm_out);
}

int main(int argc, char **argv)
{
    int nt = 2, reps = 3;
    const char *only = NULL;
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            printf("%s %lld %lld %lld %lld %lld %lld %lld %lld\n", cases[k].name,
                   (long long)cases[k].N, (long long)cases[k].C, (long long)cases[k].H,
                   (long long)cases[k].W, (long long)cases[k].Cout, (long long)cases[k].K,
                   (long long)cases[k].stride, (long long)cases[k].pad);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(argv[i], "--threads") && v) nt = (int)strtol(v, &end, 10);
        else if (!strcmp(argv[i], "--reps") && v) reps = (int)strtol(v, &end, 10);
        else if (!strcmp(argv[i], "--case") && v) only = v;
        else {
            fprintf(stderr, "usage: bench_conv [--threads N (2)] [--reps N (3)] [--case NAME] | --list\n");
            return 2;
        }
        if (end && (*end || nt < 1 || nt > 1024 || reps < 1 || reps > 1000)) {
            fprintf(stderr, "bench_conv: %s '%s': want a whole number (threads 1..1024, reps "
                    "1..1000)\n", argv[i], v);
            return 2;
        }
        i++;
    }
    int ran = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (!only || !strcmp(only, cases[k].name)) {
            run_case(&cases[k], nt, reps);
            ran++;
        }
    if (!ran) {
        fprintf(stderr, "bench_conv: no case '%s'\n", only);
        return 2;
    }
    return 0;
}
