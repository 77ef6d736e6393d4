/* Optimizer kernels: the API of optim.h. Turns hyper-parameters into an
 * f32 plan, picks the path, and splits the work over the caller's threads. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <string.h>

#include "hx_kinternal.h"
#include "optim_internal.h"

/* Threads split dense work at multiples of this many elements: 256 bytes of
 * f32, 128 of f16, so no two threads write one cache line. */
#define DENSE_SPLIT 64

static const hx_optim_path *path_for(hx_isa isa, int *native_bf16)
{
    hx_isa best = hx_k_isa();
    if (isa > best) isa = best;
    *native_bf16 = 0;
    if (isa == HX_ISA_AVX512) {
        __builtin_cpu_init();
        *native_bf16 = __builtin_cpu_supports("avx512bf16") != 0;
        return &hx_optim_path_avx512;
    }
    return isa == HX_ISA_AVX2 ? &hx_optim_path_avx2 : &hx_optim_path_scalar;
}

/* Whether (x * unscale) * clip is finite for the x whose |x| has the bits m
 * (max_abs). Rounding is monotone, so this holds for every x of a gradient
 * exactly when it holds for its largest |x|; NaN bits sort above all. */
static int scaled_finite(uint32_t m, hx_kdtype dt, float unscale, float clip)
{
    float x;
    if (dt == HX_K_F16) x = hx_optim_f16_to_f32((uint16_t)m);
    else {
        uint32_t u = dt == HX_K_BF16 ? m << 16 : m;
        memcpy(&x, &u, 4);
    }
    return isfinite((x * unscale) * clip);
}

/* hx_optim_nonfinite on [0, n) without threads. */
static int scan_one(const hx_optim_path *path, const void *g, hx_kdtype dt, float unscale,
                    float clip, int64_t n)
{
    return n > 0 && !scaled_finite(path->max_abs(g, dt, n), dt, unscale, clip);
}

static int grad_dtype_ok(hx_kdtype dt)
{
    return dt == HX_K_F32 || dt == HX_K_F16 || dt == HX_K_BF16;
}

hx_optim_io hx_optim_io_f32(const float *grad, int nthreads)
{
    hx_optim_io io = {grad, HX_K_F32, 1.0f, 1.0f, 0, NULL, HX_K_BF16, hx_k_isa(), nthreads};
    return io;
}

static hx_optim_plan plan_for(hx_optim_kind kind, const hx_optim_io *io)
{
    hx_optim_plan pl = {0};
    pl.kind = kind;
    pl.grad_dt = io->grad_dtype;
    pl.half_dt = io->param_half ? io->param_half_dtype : HX_K_F32;
    pl.unscale = io->grad_unscale;
    pl.clip = io->grad_clip;
    return pl;
}

static int io_ok(const hx_optim_io *io)
{
    return grad_dtype_ok(io->grad_dtype) && io->nthreads >= 1 &&
           (!io->param_half || io->param_half_dtype == HX_K_F16 ||
            io->param_half_dtype == HX_K_BF16);
}

static hx_optim_arrays arrays_at(hx_optim_arrays a, int64_t i, size_t gsz)
{
    hx_optim_arrays t = {a.p + i, a.s1 ? a.s1 + i : NULL, a.s2 ? a.s2 + i : NULL,
                         (const char *)a.g + (size_t)i * gsz,
                         a.h ? (char *)a.h + (size_t)i * 2 : NULL};
    return t;
}

/* Scan (if asked), then update, each thread on its own slice; the update
 * starts only once every slice has been scanned clean. */
static int dense_run(hx_optim_plan *pl, hx_optim_arrays a, int64_t n, const hx_optim_io *io)
{
    const hx_optim_path *path = path_for(io->isa, &pl->native_bf16);
    pl->stream_half = a.h && (uintptr_t)a.h % 64 == 0 && n >= HX_OPTIM_STREAM_MIN;
    size_t gsz = hx_k_dtype_size(pl->grad_dt);
    if (!hx_k_go_parallel(n, io->nthreads)) {
        if (io->check_finite && scan_one(path, a.g, pl->grad_dt, pl->unscale, pl->clip, n))
            return HX_OPTIM_NONFINITE;
        path->update(pl, a, n);
        return HX_OPTIM_OK;
    }
    int bad = 0;
#pragma omp parallel num_threads(io->nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, DENSE_SPLIT, &lo, &hi);
        hx_optim_arrays t = arrays_at(a, lo, gsz);
        if (io->check_finite) {
            if (scan_one(path, t.g, pl->grad_dt, pl->unscale, pl->clip, hi - lo)) {
#pragma omp atomic write
                bad = 1;
            }
#pragma omp barrier
        }
        if (!bad && hi > lo) path->update(pl, t, hi - lo);
    }
    return bad ? HX_OPTIM_NONFINITE : HX_OPTIM_OK;
}

int hx_optim_nonfinite(const void *grad, hx_kdtype dtype, float unscale, float clip, int64_t n,
                       hx_isa isa, int nthreads)
{
    if (!grad_dtype_ok(dtype) || nthreads < 1) return HX_OPTIM_BAD_ARG;
    int native;
    const hx_optim_path *path = path_for(isa, &native);
    if (!hx_k_go_parallel(n, nthreads)) return scan_one(path, grad, dtype, unscale, clip, n);
    size_t gsz = hx_k_dtype_size(dtype);
    int bad = 0;
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, DENSE_SPLIT, &lo, &hi);
        if (scan_one(path, (const char *)grad + (size_t)lo * gsz, dtype, unscale, clip, hi - lo)) {
#pragma omp atomic write
            bad = 1;
        }
    }
    return bad;
}

/* ---- dense ------------------------------------------------------------------ */

static void adam_scalars(hx_optim_plan *pl, const hx_adam_hp *hp, int64_t t, int lazy)
{
    double bc1 = 1.0 - pow(hp->beta1, (double)t), bc2 = 1.0 - pow(hp->beta2, (double)t);
    pl->l2 = !hp->decoupled && hp->weight_decay != 0;
    pl->decoupled = hp->decoupled && hp->weight_decay != 0;
    pl->wd = (float)hp->weight_decay;
    pl->decay = (float)(1.0 - hp->lr * hp->weight_decay);
    pl->b1 = (float)hp->beta1;
    pl->omb1 = (float)(1.0 - hp->beta1);
    pl->b2 = (float)hp->beta2;
    pl->omb2 = (float)(1.0 - hp->beta2);
    pl->eps = (float)hp->eps;
    if (lazy) {
        pl->step_size = (float)(hp->lr * sqrt(bc2) / bc1);
        pl->bc2s = 1.0f;
    } else {
        pl->step_size = (float)(hp->lr / bc1);
        pl->bc2s = (float)sqrt(bc2);
    }
    pl->rbc2s = 1.0f / pl->bc2s;
    pl->bc2s_fast = hx_optim_div_fast(pl->bc2s);
}

int hx_optim_adam(float *param, float *m, float *v, int64_t n, int64_t *step,
                  const hx_adam_hp *hp, const hx_optim_io *io)
{
    if (!io_ok(io)) return HX_OPTIM_BAD_ARG;
    int64_t t = *step + 1;
    hx_optim_plan pl = plan_for(HX_OPT_ADAM, io);
    adam_scalars(&pl, hp, t, 0);
    hx_optim_arrays a = {param, m, v, io->grad, io->param_half};
    int st = dense_run(&pl, a, n, io);
    if (st == HX_OPTIM_OK) *step = t;
    return st;
}

static void adagrad_scalars(hx_optim_plan *pl, const hx_adagrad_hp *hp, int64_t t)
{
    pl->l2 = hp->weight_decay != 0;
    pl->wd = (float)hp->weight_decay;
    pl->clr = (float)(hp->lr / (1.0 + (double)(t - 1) * hp->lr_decay));
    pl->eps = (float)hp->eps;
}

int hx_optim_adagrad(float *param, float *sum, int64_t n, int64_t *step,
                     const hx_adagrad_hp *hp, const hx_optim_io *io)
{
    if (!io_ok(io)) return HX_OPTIM_BAD_ARG;
    int64_t t = *step + 1;
    hx_optim_plan pl = plan_for(HX_OPT_ADAGRAD, io);
    adagrad_scalars(&pl, hp, t);
    hx_optim_arrays a = {param, sum, NULL, io->grad, io->param_half};
    int st = dense_run(&pl, a, n, io);
    if (st == HX_OPTIM_OK) *step = t;
    return st;
}

static void sgd_scalars(hx_optim_plan *pl, const hx_sgd_hp *hp, int first)
{
    pl->l2 = hp->weight_decay != 0;
    pl->wd = (float)hp->weight_decay;
    pl->momentum = hp->momentum != 0;
    pl->nesterov = hp->nesterov != 0;
    pl->first = first;
    pl->mom = (float)hp->momentum;
    pl->omd = (float)(1.0 - hp->dampening);
    pl->neg_lr = -(float)hp->lr;
}

int hx_optim_sgd(float *param, float *buf, int64_t n, int64_t *step, const hx_sgd_hp *hp,
                 const hx_optim_io *io)
{
    if (!io_ok(io) || (hp->momentum != 0 && !buf)) return HX_OPTIM_BAD_ARG;
    int64_t t = *step + 1;
    hx_optim_plan pl = plan_for(HX_OPT_SGD, io);
    sgd_scalars(&pl, hp, t == 1);
    hx_optim_arrays a = {param, hp->momentum != 0 ? buf : NULL, NULL, io->grad, io->param_half};
    int st = dense_run(&pl, a, n, io);
    if (st == HX_OPTIM_OK) *step = t;
    return st;
}

void hx_k_sgd_f32(float *param, const float *grad, float *momentum_buf, float lr, float momentum,
                  float dampening, float weight_decay, int nesterov, int64_t n, int nthreads)
{
    hx_sgd_hp hp = {lr, momentum, dampening, weight_decay, nesterov};
    hx_optim_io io = hx_optim_io_f32(grad, nthreads);
    hx_optim_plan pl = plan_for(HX_OPT_SGD, &io);
    sgd_scalars(&pl, &hp, 0);
    hx_optim_arrays a = {param, momentum != 0 ? momentum_buf : NULL, NULL, grad, NULL};
    dense_run(&pl, a, n, &io);
}

static void ftrl_scalars(hx_optim_plan *pl, const hx_ftrl_hp *hp)
{
    pl->lr = (float)hp->lr;
    pl->rlr = 1.0f / pl->lr;
    pl->lr_fast = hx_optim_div_fast(pl->lr);
    pl->l1 = (float)hp->l1;
    pl->l2x2 = 2.0f * (float)hp->l2;
    pl->shrink = hp->l2_shrinkage != 0;
    pl->s2 = 2.0f * (float)hp->l2_shrinkage;
}

int hx_optim_ftrl(float *param, float *accum, float *linear, int64_t n, const hx_ftrl_hp *hp,
                  const hx_optim_io *io)
{
    if (!io_ok(io)) return HX_OPTIM_BAD_ARG;
    hx_optim_plan pl = plan_for(HX_OPT_FTRL, io);
    ftrl_scalars(&pl, hp);
    hx_optim_arrays a = {param, accum, linear, io->grad, io->param_half};
    return dense_run(&pl, a, n, io);
}

hx_optim_plan hx_optim_plan_adam(const hx_adam_hp *hp, int64_t t, const hx_optim_io *io)
{
    hx_optim_plan pl = plan_for(HX_OPT_ADAM, io);
    adam_scalars(&pl, hp, t, 0);
    return pl;
}

hx_optim_plan hx_optim_plan_adagrad(const hx_adagrad_hp *hp, int64_t t, const hx_optim_io *io)
{
    hx_optim_plan pl = plan_for(HX_OPT_ADAGRAD, io);
    adagrad_scalars(&pl, hp, t);
    return pl;
}

hx_optim_plan hx_optim_plan_sgd(const hx_sgd_hp *hp, int64_t t, const hx_optim_io *io)
{
    hx_optim_plan pl = plan_for(HX_OPT_SGD, io);
    sgd_scalars(&pl, hp, t == 1);
    return pl;
}

hx_optim_plan hx_optim_plan_ftrl(const hx_ftrl_hp *hp, const hx_optim_io *io)
{
    hx_optim_plan pl = plan_for(HX_OPT_FTRL, io);
    ftrl_scalars(&pl, hp);
    return pl;
}

/* ---- rows ---------------------------------------------------------------------- */

/* Checks every id, then updates; each thread checks a slice of the ids and
 * then updates the rows it owns (hx_optim_row_owner). */
static int rows_run(hx_optim_plan *pl, float *p, float *s1, float *s2, const hx_optim_rows *r,
                    int64_t *bad_pos)
{
    if (r->nthreads < 1 || r->dim < 0 || r->n < 0) return HX_OPTIM_BAD_ARG;
    const hx_optim_path *path = path_for(r->isa, &pl->native_bf16);
    hx_optim_arrays a = {p, s1, s2, r->grad, NULL};
    const int64_t *ids = r->ids;
    int64_t n = r->n, rows = r->rows;
    if (!hx_k_go_parallel(n * r->dim, r->nthreads)) {
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= rows) {
                *bad_pos = i;
                return HX_OPTIM_BAD_ID;
            }
        }
        path->update_rows(pl, a, ids, n, r->dim, 0, 1);
        return HX_OPTIM_OK;
    }
    int64_t first_bad = n;
#pragma omp parallel num_threads(r->nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 1, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) {
            if (ids[i] < 0 || ids[i] >= rows) {
#pragma omp critical(hx_optim_bad_id)
                if (i < first_bad) first_bad = i;
                break;
            }
        }
#pragma omp barrier
        if (first_bad == n)
            path->update_rows(pl, a, ids, n, r->dim, omp_get_thread_num(), omp_get_num_threads());
    }
    if (first_bad < n) {
        *bad_pos = first_bad;
        return HX_OPTIM_BAD_ID;
    }
    return HX_OPTIM_OK;
}

static hx_optim_plan rows_plan(hx_optim_kind kind)
{
    hx_optim_plan pl = {0};
    pl.kind = kind;
    pl.grad_dt = HX_K_F32;
    pl.half_dt = HX_K_F32;
    pl.unscale = 1.0f;
    pl.clip = 1.0f;
    return pl;
}

hx_optim_plan hx_optim_plan_lazy_adam_rows(const hx_adam_hp *hp, int64_t step)
{
    hx_optim_plan pl = rows_plan(HX_OPT_ADAM);
    adam_scalars(&pl, hp, step, 1);
    return pl;
}

hx_optim_plan hx_optim_plan_adagrad_rows(const hx_adagrad_hp *hp, int64_t step)
{
    hx_optim_plan pl = rows_plan(HX_OPT_ADAGRAD);
    adagrad_scalars(&pl, hp, step);
    return pl;
}

hx_optim_plan hx_optim_plan_ftrl_rows(const hx_ftrl_hp *hp)
{
    hx_optim_plan pl = rows_plan(HX_OPT_FTRL);
    ftrl_scalars(&pl, hp);
    return pl;
}

int hx_optim_lazy_adam_rows(float *param, float *m, float *v, int64_t step, const hx_adam_hp *hp,
                            const hx_optim_rows *r, int64_t *bad_pos)
{
    hx_optim_plan pl = hx_optim_plan_lazy_adam_rows(hp, step);
    return rows_run(&pl, param, m, v, r, bad_pos);
}

int hx_optim_adagrad_rows(float *param, float *sum, int64_t step, const hx_adagrad_hp *hp,
                          const hx_optim_rows *r, int64_t *bad_pos)
{
    hx_optim_plan pl = hx_optim_plan_adagrad_rows(hp, step);
    return rows_run(&pl, param, sum, NULL, r, bad_pos);
}

int hx_optim_ftrl_rows(float *param, float *accum, float *linear, const hx_ftrl_hp *hp,
                       const hx_optim_rows *r, int64_t *bad_pos)
{
    hx_optim_plan pl = hx_optim_plan_ftrl_rows(hp);
    return rows_run(&pl, param, accum, linear, r, bad_pos);
}
