/* Batch normalisation over x (N, C, S) per channel: one channel per thread,
 * its sums in double in index order. */
#include <math.h>

#include "hx_kinternal.h"

#define AT(b, n, c, s) (((n) * (b)->C + (c)) * (b)->S + (s))

// mean and biased variance of channel c of x (N, C, S), two passes
static void channel_stats(const float *x, const hx_k_bn *b, int64_t c, double *mean, double *var)
{
    double sum = 0, sq = 0, M = (double)(b->N * b->S);
    for (int64_t n = 0; n < b->N; n++)
        for (int64_t s = 0; s < b->S; s++) sum += x[AT(b, n, c, s)];
    *mean = sum / M;
    for (int64_t n = 0; n < b->N; n++)
        for (int64_t s = 0; s < b->S; s++) {
            double d = x[AT(b, n, c, s)] - *mean;
            sq += d * d;
        }
    *var = sq / M;
}

// the mean and 1/sqrt(var + eps) channel c is normalised with
static void channel_norm(const float *x, const float *rmean, const float *rvar, const hx_k_bn *b,
                         int64_t c, float *mean, float *rstd)
{
    double m = rmean[c], v = rvar[c];
    if (b->train) channel_stats(x, b, c, &m, &v);
    *mean = (float)m;
    *rstd = (float)(1.0 / sqrt(v + b->eps));
}

// y[:, c] = (x[:, c] - mean) * rstd * gamma[c] + beta[c]; in training the
// running statistics of c move toward the batch's
static void batchnorm_forward_channel(float *y, const float *x, const float *gamma,
                                      const float *beta, float *rmean, float *rvar,
                                      const hx_k_bn *b, int64_t c)
{
    double m = rmean[c], v = rvar[c], M = (double)(b->N * b->S);
    if (b->train) {
        channel_stats(x, b, c, &m, &v);
        double unbiased = M > 1 ? v * M / (M - 1) : v;
        rmean[c] = (float)((1.0 - b->momentum) * rmean[c] + b->momentum * m);
        rvar[c] = (float)((1.0 - b->momentum) * rvar[c] + b->momentum * unbiased);
    }
    float mean = (float)m, rstd = (float)(1.0 / sqrt(v + b->eps));
    float scale = rstd * gamma[c], shift = beta[c];
    for (int64_t n = 0; n < b->N; n++)
        for (int64_t s = 0; s < b->S; s++) y[AT(b, n, c, s)] = (x[AT(b, n, c, s)] - mean) * scale + shift;
}

// train: dx = gamma rstd (dy - mean(dy) - xhat mean(dy xhat)); else dy gamma rstd
static void batchnorm_backward_x_channel(float *dx, const float *dy, const float *x,
                                         const float *gamma, const float *rmean,
                                         const float *rvar, const hx_k_bn *b, int64_t c)
{
    float mean, rstd;
    channel_norm(x, rmean, rvar, b, c, &mean, &rstd);
    double sdy = 0, sdyx = 0, M = (double)(b->N * b->S);
    if (b->train)
        for (int64_t n = 0; n < b->N; n++)
            for (int64_t s = 0; s < b->S; s++) {
                int64_t k = AT(b, n, c, s);
                sdy += dy[k];
                sdyx += (double)dy[k] * ((x[k] - mean) * rstd);
            }
    float a = (float)(sdy / M), bx = (float)(sdyx / M), scale = gamma[c] * rstd;
    for (int64_t n = 0; n < b->N; n++)
        for (int64_t s = 0; s < b->S; s++) {
            int64_t k = AT(b, n, c, s);
            dx[k] = b->train ? scale * (dy[k] - a - (x[k] - mean) * rstd * bx) : scale * dy[k];
        }
}

#define PAR(b, nt) (hx_k_go_parallel((b)->N * (b)->C * (b)->S, nt) && (b)->C > 1)

void hx_k_batchnorm_forward_f32(float *y, const float *x, const float *gamma, const float *beta,
                                float *running_mean, float *running_var, const hx_k_bn *b,
                                int nthreads)
{
#pragma omp parallel for num_threads(nthreads) schedule(static) if (PAR(b, nthreads))
    for (int64_t c = 0; c < b->C; c++)
        batchnorm_forward_channel(y, x, gamma, beta, running_mean, running_var, b, c);
}

void hx_k_batchnorm_backward_x_f32(float *dx, const float *dy, const float *x,
                                   const float *gamma, const float *running_mean,
                                   const float *running_var, const hx_k_bn *b, int nthreads)
{
#pragma omp parallel for num_threads(nthreads) schedule(static) if (PAR(b, nthreads))
    for (int64_t c = 0; c < b->C; c++)
        batchnorm_backward_x_channel(dx, dy, x, gamma, running_mean, running_var, b, c);
}

void hx_k_batchnorm_backward_gamma_f32(float *dgamma, const float *dy, const float *x,
                                       const float *running_mean, const float *running_var,
                                       const hx_k_bn *b, int nthreads)
{
#pragma omp parallel for num_threads(nthreads) schedule(static) if (PAR(b, nthreads))
    for (int64_t c = 0; c < b->C; c++) {
        float mean, rstd;
        channel_norm(x, running_mean, running_var, b, c, &mean, &rstd);
        double acc = 0;
        for (int64_t n = 0; n < b->N; n++)
            for (int64_t s = 0; s < b->S; s++) {
                int64_t k = AT(b, n, c, s);
                acc += (double)dy[k] * ((x[k] - mean) * rstd);
            }
        dgamma[c] = (float)acc;
    }
}
