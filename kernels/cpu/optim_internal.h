/* Private to the optimizer kernels: what the API layer (optim_api.c) hands
 * to a path (optim_scalar.c, optim_avx2.c, optim_avx512.c). */
#ifndef HX_OPTIM_INTERNAL_H
#define HX_OPTIM_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "optim.h"

/* Prefetching, measured with bench_optim on a 2-core Sapphire-Rapids-class
 * VM at 64M params: dense loops prefetch each stream this many elements
 * ahead (the hardware prefetcher alone left Adam at about 0.88 of the
 * plain-loop ceiling, this at about 1.0; 128 to 1024 measured alike); row
 * updates prefetch the rows of the entries this far ahead into L2
 * (prefetcht1: LazyAdam at 0.75 of the dense ceiling, prefetcht0: 0.59;
 * 16 to 64 entries ahead measured alike). */
#define HX_OPTIM_PF_DIST 512
#define HX_OPTIM_ROW_AHEAD 32
#define HX_OPTIM_ROW_HINT 2

/* The half copy is written with streaming stores from this many elements
 * on (it goes to DRAM anyway, and the stores skip reading its lines first:
 * about 5% on the 64M-param mixed-precision step; no difference at 4M). */
#define HX_OPTIM_STREAM_MIN ((int64_t)1 << 20)

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

/* Whether x / b may take the multiply-and-correct form (optim_body.h). */
static inline int hx_optim_div_fast(float b)
{
    return b >= 0x1p-30f && b <= 0x1p30f;
}

/* The arrays of an update, each at the first element to update: param,
 * state (Adam m, v; Adagrad sum; SGD buf; FTRL accum, linear; NULL where
 * unused), gradient, half copy (NULL for none). */
typedef struct hx_optim_arrays {
    float *p, *s1, *s2;
    const void *g;
    void *h;
} hx_optim_arrays;

typedef struct hx_optim_path {
    /* Updates n consecutive elements. */
    void (*update)(const hx_optim_plan *pl, hx_optim_arrays a, int64_t n);
    /* Updates the rows named by ids (n) whose owner (hx_optim_row_owner)
     * among nparts is `part`, each entry i from the f32 gradient row
     * a.g + i*dim, in order of i. a.p, a.s1, a.s2 are the tables. */
    void (*update_rows)(const hx_optim_plan *pl, hx_optim_arrays a, const int64_t *ids,
                        int64_t n, int64_t dim, int part, int nparts);
    /* The largest |x| over n values of g, as x's bits with the sign
     * cleared (f16 and bf16 in their own 16-bit encoding): NaN patterns
     * sort above Inf, Inf above every finite value (the scan's measure). */
    uint32_t (*max_abs)(const void *g, hx_kdtype dt, int64_t n);
    /* q = x / b over n values, as the kernels divide by a per-call
     * constant (the tests hold it to the division's bits). */
    void (*div_const)(float *q, const float *x, int64_t n, float b);
} hx_optim_path;

extern const hx_optim_path hx_optim_path_scalar;
extern const hx_optim_path hx_optim_path_avx2;
extern const hx_optim_path hx_optim_path_avx512;

/* f16 bits to f32, exactly; a NaN keeps its payload and becomes quiet, as
 * vcvtph2ps does. */
static inline float hx_optim_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) u = sign | 0x7f800000 | (m << 13) | (m ? 0x400000 : 0);
    else if (e == 0) {
        float f = (float)m * 0x1p-24f;
        memcpy(&u, &f, 4);
        u |= sign;
    } else u = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Which of nparts threads updates a row: a multiplicative hash, so that
 * rows spread evenly whatever the ids' pattern, and every occurrence of an
 * id lands on the same thread. */
static inline int hx_optim_row_owner(int64_t id, int nparts)
{
    uint64_t h = ((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 32;
    return (int)((h * (uint64_t)nparts) >> 32);
}

#endif
