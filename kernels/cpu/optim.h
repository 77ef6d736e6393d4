/* hetex host optimizer kernels: the fp32 master weights and optimizer state
 * live in host memory and are updated here, at memory bandwidth.
 *
 * Dense kernels update n params in place from an n-element gradient:
 *   hx_optim_adam     Adam / AdamW            (torch.optim.Adam / AdamW)
 *   hx_optim_adagrad  Adagrad                 (torch.optim.Adagrad)
 *   hx_optim_sgd      SGD, momentum, Nesterov (torch.optim.SGD)
 *   hx_optim_ftrl     FTRL-proximal           (TensorFlow ApplyFtrl / ApplyFtrlV2)
 * Row kernels update only the rows of a (rows, dim) table named by ids, for
 * embeddings: hx_optim_lazy_adam_rows, hx_optim_adagrad_rows,
 * hx_optim_ftrl_rows.
 *
 * Mixed precision, fused into the update's single pass over the state
 * (hx_optim_io): the gradient may be f32, f16 or bf16 and is multiplied by an
 * unscale factor (1 / loss scale) and a clip factor; the updated param may
 * also be written as f16 or bf16 (round to nearest even, NaN stays NaN) for
 * the copy back to the device. Params, moments and accumulators are always
 * f32: a param held only in f16/bf16 is never updated here. With
 * check_finite set, the gradient is scanned first (a read-only pass over
 * it that finds the largest |x|: rounding is monotone, so g is finite
 * everywhere exactly when it is there), and if any g below is Inf or NaN
 * the call returns HX_OPTIM_NONFINITE
 * having written nothing: params, state, the half copy and the step count
 * are as they were, so the caller can skip the step and shrink its loss
 * scale.
 *
 * Numerics. Every formula below is evaluated in f32, one rounding per
 * operation, in the order written; fma(a, b, c) is a*b + c with a single
 * rounding. Hyper-parameters are doubles: the scalar terms marked (f)x are
 * computed in double, as Python computes torch's scalars, and rounded to f32
 * once per call. No other contraction or reassociation happens (the vector
 * files turn off fp-contract), so the scalar, AVX2 and AVX-512 paths give
 * bitwise the same params and state, at any thread count. (A division by a
 * per-call constant, as Adam's sqrt(1 - b2^t) and FTRL's lr, may be done
 * without the divider where that provably gives the division's bits: see
 * optim_avx512.c.) Where torch's CPU kernel uses a fused multiply-add (add_
 * with alpha) the formula does too.
 *
 * Gradient as every dense kernel sees it, from the raw value x converted
 * exactly to f32:   g = (x * unscale) * clip
 *
 * ISA: io->isa picks the path; a request above hx_k_isa() (the CPU's best,
 * lowered by HX_ISA=scalar|avx2|avx512) is lowered to it. The AVX-512 path
 * converts to bf16 with AVX512-BF16's vcvtneps2bf16 where the CPU has it
 * (with denormal inputs, which that instruction flushes, rounded in
 * integer arithmetic), f16 with AVX512F's vcvtps2ph.
 *
 * Threads: io->nthreads (>= 1) from the caller; no global state, so several
 * optimizers may run at once. Small inputs stay on the calling thread.
 * Each thread updates one contiguous slice (cut at 64-element multiples);
 * with check_finite every slice is scanned before any is updated.
 *
 * Memory: the dense loops prefetch every stream 2 KB ahead, and from 1M
 * params on write a 64-byte-aligned half copy with streaming stores; the
 * row kernels prefetch the rows of the entries ahead. Row tables should sit
 * on huge pages (madvise(MADV_HUGEPAGE)): on 4 KB pages random rows miss
 * the TLB and LazyAdam measured 0.60 instead of 0.75 of the dense stream
 * bandwidth.
 */
#ifndef HX_OPTIM_H
#define HX_OPTIM_H

#include <stdint.h>

#include "hx_kernels.h"

typedef enum hx_optim_status {
    HX_OPTIM_OK = 0,         /* updated */
    HX_OPTIM_NONFINITE = 1,  /* check_finite found Inf/NaN in g: nothing written */
    HX_OPTIM_BAD_ID = -1,    /* row kernels: an id outside [0, rows): nothing written */
    HX_OPTIM_BAD_ARG = -2    /* a dtype not listed below, nthreads < 1, dim < 0, or SGD
                                momentum without a buffer: nothing written */
} hx_optim_status;

/* How a dense kernel reads its gradient and writes its outputs. */
typedef struct hx_optim_io {
    const void *grad;            /* n values of grad_dtype */
    hx_kdtype grad_dtype;        /* HX_K_F32, HX_K_F16 or HX_K_BF16 */
    float grad_unscale;          /* 1 / loss scale; 1 for none */
    float grad_clip;             /* clip coefficient; 1 for none */
    int check_finite;            /* 1: skip the whole step if any g is not finite */
    void *param_half;            /* NULL, or n values receiving the updated param */
    hx_kdtype param_half_dtype;  /* HX_K_F16 or HX_K_BF16 */
    hx_isa isa;                  /* path to run, normally hx_k_isa() */
    int nthreads;
} hx_optim_io;

/* f32 gradient, no scaling, no scan, no half copy, hx_k_isa(), nthreads. */
hx_optim_io hx_optim_io_f32(const float *grad, int nthreads);

/* ---- dense ------------------------------------------------------------------
 * Each returns HX_OPTIM_OK, HX_OPTIM_NONFINITE or HX_OPTIM_BAD_ARG. `step`
 * (Adam, Adagrad, SGD) is the optimizer's step count, 0 before the first
 * step: on success it is incremented and t = the new value is the step
 * taken, as torch's state['step']. */

typedef struct hx_adam_hp {
    double lr, beta1, beta2, eps, weight_decay;
    int decoupled;  /* 0: Adam (L2 decay added to g), 1: AdamW (decoupled decay) */
} hx_adam_hp;

/* t = ++*step;
 *   Adam,  wd != 0:  g = fma((f)wd, p, g)
 *   AdamW, wd != 0:  p = p * (f)(1 - lr*wd)
 *   m = fma((f)(1 - b1), g, m * (f)b1)
 *   v = v * (f)b2 + ((f)(1 - b2) * g) * g
 *   p = p - ((f)(lr / (1 - b1^t)) * m) / (sqrt(v) / (f)sqrt(1 - b2^t) + (f)eps)
 * This is torch.optim.Adam's order with m updated as mul_(b1).add_(g,
 * alpha=1-b1) (whose vectorised add is an fma) and v as mul_(b2).addcmul_(g,
 * g, value=1-b2); torch builds that contract the addcmul into an fma differ
 * from it in the last bit of v. */
int hx_optim_adam(float *param, float *m, float *v, int64_t n, int64_t *step,
                  const hx_adam_hp *hp, const hx_optim_io *io);

typedef struct hx_adagrad_hp {
    double lr, lr_decay, eps, weight_decay;
} hx_adagrad_hp;

/* t = ++*step; sum starts at the caller's initial accumulator value.
 *   wd != 0:  g = fma((f)wd, p, g)
 *   sum = sum + g * g
 *   p = p - ((f)(lr / (1 + (t - 1) * lr_decay)) * g) / (sqrt(sum) + (f)eps)
 * With lr_decay = 0 this is also TensorFlow's ApplyAdagradV2. */
int hx_optim_adagrad(float *param, float *sum, int64_t n, int64_t *step,
                     const hx_adagrad_hp *hp, const hx_optim_io *io);

typedef struct hx_sgd_hp {
    double lr, momentum, dampening, weight_decay;
    int nesterov;
} hx_sgd_hp;

/* t = ++*step; buf may be NULL when momentum == 0.
 *   wd != 0:  g = fma((f)wd, p, g)
 *   momentum != 0:
 *     buf = t == 1 ? g : fma((f)(1 - dampening), g, buf * (f)momentum)
 *     d = nesterov ? fma((f)momentum, buf, g) : buf
 *   else d = g
 *   p = fma(-(f)lr, d, p)
 * exactly torch.optim.SGD, whose first step sets buf = g. */
int hx_optim_sgd(float *param, float *buf, int64_t n, int64_t *step, const hx_sgd_hp *hp,
                 const hx_optim_io *io);

/* The graph's SGD node: f32 gradient, path hx_k_isa(), no step count. The
 * caller zero-initialises momentum_buf (NULL when momentum == 0) and every
 * call applies buf = fma((f)(1 - dampening), g, buf * (f)momentum), which is
 * torch's step from the second step on and, with dampening = 0, also at the
 * first (buf = g). Other terms as hx_optim_sgd. */
void hx_k_sgd_f32(float *param, const float *grad, float *momentum_buf, float lr, float momentum,
                  float dampening, float weight_decay, int nesterov, int64_t n, int nthreads);

typedef struct hx_ftrl_hp {
    double lr, l1, l2, l2_shrinkage;  /* l1, l2, l2_shrinkage >= 0; lr_power is -0.5 */
} hx_ftrl_hp;

/* FTRL-proximal with learning-rate power -1/2, as TensorFlow's ApplyFtrlV2
 * (ApplyFtrl when l2_shrinkage = 0); accum starts at the caller's initial
 * accumulator value (>= 0), linear at 0. Scalars are f32 as in TF:
 * lr = (f)lr, l1 = (f)l1, l2x2 = 2 * (f)l2, s2 = 2 * (f)l2_shrinkage.
 *   gs = l2_shrinkage != 0 ? g + s2 * p : g
 *   na = accum + g * g
 *   linear = linear + (gs - ((sqrt(na) - sqrt(accum)) / lr) * p)
 *   p = |linear| > l1 ? (copysign(l1, linear) - linear) / (sqrt(na) / lr + l2x2) : 0
 *   accum = na
 * (copysign(l1, linear) is TF's l1 * sign(linear) wherever it is used.) */
int hx_optim_ftrl(float *param, float *accum, float *linear, int64_t n, const hx_ftrl_hp *hp,
                  const hx_optim_io *io);

/* Whether any g = (x * unscale) * clip over grad (n values of dtype: F32,
 * F16 or BF16) is Inf or NaN: the scan check_finite runs, for callers that
 * scan once for several kernels. Returns 1 if so, 0 if not, HX_OPTIM_BAD_ARG
 * for another dtype or nthreads < 1. */
int hx_optim_nonfinite(const void *grad, hx_kdtype dtype, float unscale, float clip, int64_t n,
                       hx_isa isa, int nthreads);

/* ---- rows (embeddings) --------------------------------------------------------
 * The table is (rows, dim) f32 params with state of the same shape; ids (n,
 * i64) name the rows to update and grad (n, dim, f32) their gradients. Rows
 * not named are not touched at all (their state stays frozen). An id may
 * repeat: its occurrences are applied one after another, each as a full
 * update with the same step, in the order of ids; the result is the same at
 * any thread count (a row's updates all run on one thread, in order). Each
 * element of a named row gets exactly the dense kernel's formula with g the
 * gradient of that occurrence (unscale = clip = 1). step is the global step
 * t >= 1 (not incremented here).
 * Returns HX_OPTIM_OK, or HX_OPTIM_BAD_ID with *bad_pos = the first position
 * whose id is outside [0, rows), in which case nothing was written. */
typedef struct hx_optim_rows {
    const int64_t *ids;
    int64_t n;
    const float *grad;
    int64_t rows, dim;
    hx_isa isa;
    int nthreads;
} hx_optim_rows;

/* LazyAdam (TensorFlow Addons): moments of the named rows only, bias
 * correction from the global step folded into the rate, eps not corrected:
 *   m, v and the decay as hx_optim_adam
 *   p = p - ((f)(lr * sqrt(1 - b2^t) / (1 - b1^t)) * m) / (sqrt(v) + (f)eps)
 * weight_decay (normally 0) decays the named rows only. */
int hx_optim_lazy_adam_rows(float *param, float *m, float *v, int64_t step, const hx_adam_hp *hp,
                            const hx_optim_rows *r, int64_t *bad_pos);

/* hx_optim_adagrad on the named rows, with t = step. */
int hx_optim_adagrad_rows(float *param, float *sum, int64_t step, const hx_adagrad_hp *hp,
                          const hx_optim_rows *r, int64_t *bad_pos);

/* hx_optim_ftrl on the named rows (TensorFlow's SparseApplyFtrl). */
int hx_optim_ftrl_rows(float *param, float *accum, float *linear, const hx_ftrl_hp *hp,
                       const hx_optim_rows *r, int64_t *bad_pos);

/* ---- the plan of one update: what a path runs, shared with kernels/gpu ---- */

typedef enum hx_optim_kind { HX_OPT_ADAM, HX_OPT_ADAGRAD, HX_OPT_SGD, HX_OPT_FTRL } hx_optim_kind;

/* One call's update, its scalars already rounded to f32 (see optim.h). */
typedef struct hx_optim_plan {
    hx_optim_kind kind;
    hx_kdtype grad_dt;  /* F32, F16 or BF16 */
    hx_kdtype half_dt;  /* F16 or BF16; F32 means no half copy */
    int native_bf16;    /* AVX-512 path: the CPU has vcvtneps2bf16 */
    int stream_half;    /* write the half copy with streaming stores */
    float unscale, clip;
    /* options, each 0 or 1 */
    int l2;             /* g = fma(wd, p, g) */
    int decoupled;      /* Adam: p = p * decay */
    int momentum;       /* SGD: a momentum buffer */
    int nesterov;       /* SGD */
    int first;          /* SGD: first step, buf = g */
    int shrink;         /* FTRL: l2 shrinkage */
    /* scalars */
    float wd;
    float b1, omb1, b2, omb2, decay, step_size, bc2s, eps;  /* Adam */
    float clr;                                              /* Adagrad (with eps) */
    float mom, omd, neg_lr;                                 /* SGD */
    float lr, l1, l2x2, s2;                                 /* FTRL */
    /* the divisions by a per-call constant: 1/b, and whether b is in the
     * range of the division without the divider (hx_optim_div_fast) */
    float rbc2s, rlr;
    int bc2s_fast, lr_fast;
} hx_optim_plan;

/* The plan of one dense update at step t (SGD: t == 1 is its first step),
 * built exactly as hx_optim_adam, _adagrad, _sgd and _ftrl build theirs:
 * for kernels that apply the same formulas elsewhere (kernels/gpu). */
hx_optim_plan hx_optim_plan_adam(const hx_adam_hp *hp, int64_t t, const hx_optim_io *io);
hx_optim_plan hx_optim_plan_adagrad(const hx_adagrad_hp *hp, int64_t t, const hx_optim_io *io);
hx_optim_plan hx_optim_plan_sgd(const hx_sgd_hp *hp, int64_t t, const hx_optim_io *io);
hx_optim_plan hx_optim_plan_ftrl(const hx_ftrl_hp *hp, const hx_optim_io *io);
/* The plans the row kernels (hx_optim_lazy_adam_rows, _adagrad_rows,
 * _ftrl_rows) run at step `step`: f32 gradients, unscale = clip = 1. */
hx_optim_plan hx_optim_plan_lazy_adam_rows(const hx_adam_hp *hp, int64_t step);
hx_optim_plan hx_optim_plan_adagrad_rows(const hx_adagrad_hp *hp, int64_t step);
hx_optim_plan hx_optim_plan_ftrl_rows(const hx_ftrl_hp *hp);

/* Whether x / b may take the multiply-and-correct form (optim_body.h). */
static inline int hx_optim_div_fast(float b)
{
    return b >= 0x1p-30f && b <= 0x1p30f;
}

#endif
