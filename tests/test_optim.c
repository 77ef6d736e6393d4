/* Optimizer kernels (kernels/cpu/optim.h): every kernel and every ISA path
 * the CPU has against the double reference of tests/util/optim_ref.h
 * (within the error bound derived beside it, tests/util/optim_bound.h),
 * bitwise agreement between paths and thread counts, the mixed-precision
 * loads and stores, the non-finite skip, the row kernels with duplicate ids,
 * and golden values after 10 steps. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/optim.h"
#include "kernels/cpu/optim_internal.h"
#include "util/optim_bound.h"
#include "util/optim_ref.h"
#include "util/testutil.h"

#define STEPS 3

/* MID: two threads split it (HX_K_PARALLEL_MIN), 3 elements past a
 * vector; BIG: an aligned half copy is written with streaming stores
 * (HX_OPTIM_STREAM_MIN). At BIG the reference sees a million elements, but
 * only the streaming paths run beside the scalar one: its other paths are
 * MID's code, and they were most of this test's time. */
#define MID (HX_K_PARALLEL_MIN + 3)
#define BIG (HX_OPTIM_STREAM_MIN + 3)
static const int64_t SIZES[] = {1, 7, 15, 16, 17, 1023, MID, BIG};
#define NSIZES (int)(sizeof SIZES / sizeof SIZES[0])

static hx_isa best_isa;

/* ---- memory at a chosen misalignment --------------------------------------- */

typedef struct buf {
    void *base;
    void *ptr;
} buf;

static buf buf_make(size_t bytes, size_t off)
{
    buf b;
    b.base = aligned_alloc(64, (bytes + off + 127) / 64 * 64);
    b.ptr = (char *)b.base + off;
    memset(b.base, 0, (bytes + off + 127) / 64 * 64);
    return b;
}

/* ---- reference f16 / bf16 ------------------------------------------------------ */

static double ref_half_value(uint16_t h, hx_kdtype dt)
{
    if (dt == HX_K_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    double s = (h & 0x8000) ? -1.0 : 1.0;
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp(m, -24);
    return s * ldexp(1024 + m, e - 25);
}

/* Nearest f16 / bf16 to x, ties to even, by scaling to the ulp in double. */
static uint16_t ref_half_bits(float xf, hx_kdtype dt)
{
    int f16 = dt == HX_K_F16;
    int mbits = f16 ? 10 : 7, emin = f16 ? -14 : -126, bias = f16 ? 15 : 127;
    uint16_t inf = f16 ? 0x7c00 : 0x7f80;
    double maxf = f16 ? 65504.0 : ldexp(2.0 - ldexp(1.0, -7), 127);
    double x = xf, a = fabs(x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isinf(a)) return sign | inf;
    if (a == 0) return sign;
    int e;
    frexp(a, &e);
    int q = (e - 1 < emin ? emin : e - 1) - mbits;
    double r = ldexp(nearbyint(ldexp(a, -q)), q);
    if (r > maxf) return sign | inf;
    if (r < ldexp(1.0, emin)) return sign | (uint16_t)ldexp(r, mbits - emin);
    frexp(r, &e);
    int E = e - 1;
    uint16_t mant = (uint16_t)(ldexp(r, mbits - E) - ldexp(1.0, mbits));
    return (uint16_t)(sign | ((E + bias) << mbits) | mant);
}

static int half_is_nan(uint16_t h, hx_kdtype dt)
{
    return dt == HX_K_F16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff) : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

/* ---- the kernels under test and their double reference ----------------------------- */

typedef enum kern { K_ADAM, K_ADAMW, K_ADAGRAD, K_SGD, K_NESTEROV, K_FTRL, NKERN } kern;
static const char *KNAME[NKERN] = {"adam", "adamw", "adagrad", "sgd", "sgd-nesterov", "ftrl"};

static const hx_adam_hp ADAM = {0.01, 0.9, 0.999, 1e-8, 0.01, 0};
static const hx_adam_hp ADAMW = {0.01, 0.9, 0.999, 1e-8, 0.1, 1};
static const hx_adam_hp LAZY = {0.01, 0.9, 0.999, 1e-8, 0.0, 0};
static const hx_adagrad_hp ADAGRAD = {0.1, 0.01, 1e-10, 0.02};
static const hx_sgd_hp SGD = {0.05, 0.9, 0.1, 0.01, 0};
static const hx_sgd_hp NESTEROV = {0.05, 0.9, 0.0, 0.01, 1};
static const hx_ftrl_hp FTRL = {0.05, 0.001, 0.01, 0.005};

/* How far each array of each kernel came from the double reference, the
 * dense kernels then the row kernels (NKERN + k): the largest error over
 * its derived bound (must be <= 1), and the same error in ulps of f32 at
 * max(|ref|, the array's largest |ref| / 64) (ref_ulps), for the record
 * in docs/numerics.md. */
#define NRKERN 3
static double ratio_seen[NKERN + NRKERN][3], ulps_seen[NKERN + NRKERN][3];

/* got against want, element by element within its bound b: array a of
 * kernel row k (of ratio_seen). */
static void bound_check(const char *what, int k, int a, const float *got, const double *want,
                        const ref_eb *b, int64_t n)
{
    int64_t at = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = ref_eb_ratio(got[i], want[i], b[i].e);
        if (r > worst) { /* a NaN's ratio is infinite */
            worst = r;
            at = i;
        }
    }
    if (worst > ratio_seen[k][a]) ratio_seen[k][a] = worst;
    double u = ref_ulps(got, want, n, NULL);
    if (u > ulps_seen[k][a]) ulps_seen[k][a] = u;
    CHECK(worst <= 1, "%s array %d: %.9g at %lld, want %.17g: off by %.3g, %.4f times its error bound "
          "%.3g", what, a, n ? (double)got[at] : 0.0, (long long)at, n ? want[at] : 0.0,
          n ? fabs((double)got[at] - want[at]) : 0.0, worst, n ? b[at].e : 0.0);
}

static int nstate(kern k)
{
    return k == K_ADAM || k == K_ADAMW || k == K_FTRL ? 2 : 1;
}

/* The double reference (tests/util/optim_ref.h) of a kernel's hyper-parameters. */
static ref_optim ref_adam_of(const hx_adam_hp *h, ref_optim_kind kind)
{
    return (ref_optim){.kind = kind, .lr = h->lr, .weight_decay = h->weight_decay,
                       .beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps};
}

static ref_optim ref_adagrad_of(const hx_adagrad_hp *h)
{
    return (ref_optim){.kind = REF_ADAGRAD, .lr = h->lr, .weight_decay = h->weight_decay,
                       .eps = h->eps, .lr_decay = h->lr_decay};
}

static ref_optim ref_sgd_of(const hx_sgd_hp *h)
{
    return (ref_optim){.kind = REF_SGD, .lr = h->lr, .weight_decay = h->weight_decay,
                       .momentum = h->momentum, .dampening = h->dampening,
                       .nesterov = h->nesterov};
}

static ref_optim ref_ftrl_of(const hx_ftrl_hp *h)
{
    return (ref_optim){.kind = REF_FTRL, .lr = h->lr, .l1 = h->l1, .l2 = h->l2,
                       .l2_shrinkage = h->l2_shrinkage};
}

/* Kernel k's hyper-parameters as the reference takes them. */
static ref_optim ref_of(kern k)
{
    switch (k) {
    case K_ADAM: return ref_adam_of(&ADAM, REF_ADAM);
    case K_ADAMW: return ref_adam_of(&ADAMW, REF_ADAMW);
    case K_ADAGRAD: return ref_adagrad_of(&ADAGRAD);
    case K_SGD: return ref_sgd_of(&SGD);
    case K_NESTEROV: return ref_sgd_of(&NESTEROV);
    default: return ref_ftrl_of(&FTRL);
    }
}

static int run_kernel(kern k, float *p, float *s1, float *s2, int64_t n, int64_t *step,
                      const hx_optim_io *io)
{
    switch (k) {
    case K_ADAM: return hx_optim_adam(p, s1, s2, n, step, &ADAM, io);
    case K_ADAMW: return hx_optim_adam(p, s1, s2, n, step, &ADAMW, io);
    case K_ADAGRAD: return hx_optim_adagrad(p, s1, n, step, &ADAGRAD, io);
    case K_SGD: return hx_optim_sgd(p, s1, n, step, &SGD, io);
    case K_NESTEROV: return hx_optim_sgd(p, s1, n, step, &NESTEROV, io);
    default: return hx_optim_ftrl(p, s1, s2, n, &FTRL, io);
    }
}

/* ---- dense: reference, paths, threads ---------------------------------------------- */

typedef struct dense_case {
    kern k;
    hx_kdtype gdt, hdt; /* hdt HX_K_F32: no half copy */
    float unscale, clip;
    int64_t n;
} dense_case;

/* Initial state and STEPS raw gradients. */
typedef struct dense_data {
    float *p, *s1, *s2;
    void *g[STEPS];
    int64_t step0;
} dense_data;

static size_t gsize(hx_kdtype dt) { return dt == HX_K_F32 ? 4 : 2; }

static void encode_grad(void *g, hx_kdtype dt, int64_t i, float x)
{
    if (dt == HX_K_F32) ((float *)g)[i] = x;
    else ((uint16_t *)g)[i] = ref_half_bits(x, dt);
}

static double decode_grad(const void *g, hx_kdtype dt, int64_t i)
{
    return dt == HX_K_F32 ? ((const float *)g)[i] : ref_half_value(((const uint16_t *)g)[i], dt);
}

static dense_data data_make(const dense_case *c, uint64_t seed)
{
    test_rng r = test_rng_make(seed);
    int64_t n = c->n;
    dense_data d;
    d.p = malloc(n * 4);
    d.s1 = malloc(n * 4);
    d.s2 = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) {
        d.p[i] = (float)test_rng_uniform(&r, -2.0, 2.0);
        switch (c->k) {
        case K_ADAM: case K_ADAMW:
            d.s1[i] = (float)test_rng_uniform(&r, -0.2, 0.2);
            d.s2[i] = (float)test_rng_uniform(&r, 0.0, 0.01);
            break;
        case K_ADAGRAD: d.s1[i] = (float)test_rng_uniform(&r, 0.1, 1.0); d.s2[i] = 0; break;
        case K_SGD: case K_NESTEROV: d.s1[i] = (float)test_rng_uniform(&r, -0.2, 0.2); d.s2[i] = 0; break;
        default:
            d.s1[i] = (float)test_rng_uniform(&r, 0.1, 1.0);
            d.s2[i] = (float)test_rng_uniform(&r, -0.2, 0.2);
            break;
        }
    }
    for (int s = 0; s < STEPS; s++) {
        d.g[s] = malloc(n * gsize(c->gdt));
        for (int64_t i = 0; i < n; i++) {
            /* magnitudes over 2^-8 .. 2^2 */
            /* two draws in two statements: as arguments of one call their order
             * would be the compiler's (GCC: right to left, clang: left to right),
             * and so would the data and the worst ulps measured on them */
            int e = (int)(test_rng_u64(&r) % 11) - 8;
            double x = ldexp(test_rng_uniform(&r, -1.0, 1.0), e);
            if (i % 97 == 5) x = 0.0;                      /* exact zeros */
            if (i % 89 == 7) x = ldexp(1.0, -20) * (1 + (i & 7)); /* f16 subnormals */
            encode_grad(d.g[s], c->gdt, i, (float)(x / c->unscale));
        }
    }
    /* SGD starts from step 0 so that its first step (buf = g) is covered */
    d.step0 = c->k == K_SGD || c->k == K_NESTEROV ? 0 : 4;
    return d;
}

static void data_free(dense_data *d)
{
    free(d->p);
    free(d->s1);
    free(d->s2);
    for (int s = 0; s < STEPS; s++) free(d->g[s]);
}

typedef struct dense_out {
    float *p, *s1, *s2;
    uint16_t *h;
    int64_t step;
    int status;
} dense_out;

static void out_free(dense_out *o)
{
    free(o->p);
    free(o->s1);
    free(o->s2);
    free(o->h);
}

/* Runs STEPS steps on the given path from the initial data, on buffers at
 * `off` bytes past 64-byte alignment (each array a different amount). */
static dense_out run_path(const dense_case *c, const dense_data *d, hx_isa isa, int nthreads,
                          size_t off)
{
    int64_t n = c->n;
    buf bp = buf_make(n * 4, off * 4), b1 = buf_make(n * 4, off * 8), b2 = buf_make(n * 4, off * 12);
    buf bh = buf_make(n * 2, off * 2), bg = buf_make(n * gsize(c->gdt), off * gsize(c->gdt));
    float *p = bp.ptr, *s1 = b1.ptr, *s2 = b2.ptr;
    memcpy(p, d->p, n * 4);
    memcpy(s1, d->s1, n * 4);
    memcpy(s2, d->s2, n * 4);
    dense_out o = {0};
    o.step = d->step0;
    for (int s = 0; s < STEPS; s++) {
        memcpy(bg.ptr, d->g[s], n * gsize(c->gdt));
        hx_optim_io io = {bg.ptr, c->gdt, c->unscale, c->clip, c->gdt != HX_K_F32,
                          c->hdt != HX_K_F32 ? bh.ptr : NULL, c->hdt, isa, nthreads};
        o.status |= run_kernel(c->k, p, s1, nstate(c->k) > 1 ? s2 : NULL, n, &o.step, &io);
    }
    o.p = malloc(n * 4);
    o.s1 = malloc(n * 4);
    o.s2 = malloc(n * 4);
    o.h = malloc(n * 2);
    memcpy(o.p, p, n * 4);
    memcpy(o.s1, s1, n * 4);
    memcpy(o.s2, s2, n * 4);
    memcpy(o.h, bh.ptr, n * 2);
    free(bp.base);
    free(b1.base);
    free(b2.base);
    free(bh.base);
    free(bg.base);
    return o;
}

/* The double reference's STEPS steps (p, s1, s2) and the error bound of
 * each element (bp, b1, b2). */
static void ref_run(const dense_case *c, const dense_data *d, double *p, double *s1, double *s2,
                    ref_eb *bp, ref_eb *b1, ref_eb *b2)
{
    ref_optim o = ref_of(c->k);
    for (int64_t i = 0; i < c->n; i++) {
        p[i] = d->p[i];
        s1[i] = d->s1[i];
        s2[i] = d->s2[i];
        bp[i] = (ref_eb){p[i], 0};
        b1[i] = (ref_eb){s1[i], 0};
        b2[i] = (ref_eb){s2[i], 0};
    }
    for (int s = 0; s < STEPS; s++) {
        int64_t t = d->step0 + s + 1;
        for (int64_t i = 0; i < c->n; i++) {
            double x = decode_grad(d->g[s], c->gdt, i);
            ref_optim_step(&o, t, x * c->unscale * c->clip, &p[i], &s1[i], &s2[i]);
            ref_eb_step(&o, t, ref_eb_grad(x, c->unscale, c->clip), &bp[i], &b1[i], &b2[i]);
        }
    }
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void dense_check(const dense_case *c, uint64_t seed)
{
    int64_t n = c->n;
    char what[160];
    snprintf(what, sizeof what, "%s n=%lld grad=%d half=%d", KNAME[c->k], (long long)n,
             (int)c->gdt, (int)c->hdt);
    dense_data d = data_make(c, seed);
    double *rp = malloc(n * 8), *r1 = malloc(n * 8), *r2 = malloc(n * 8);
    ref_eb *bp = malloc(n * sizeof *bp), *b1 = malloc(n * sizeof *b1), *b2 = malloc(n * sizeof *b2);
    ref_run(c, &d, rp, r1, r2, bp, b1, b2);

    dense_out base = run_path(c, &d, HX_ISA_SCALAR, 1, 1);
    int64_t steps = c->k == K_FTRL ? 0 : STEPS; /* FTRL keeps no step count */
    CHECK(base.status == HX_OPTIM_OK && base.step == d.step0 + steps, "%s: status %d step %lld",
          what, base.status, (long long)base.step);
    /* FTRL's sqrt(na) - sqrt(accum) cancels: linear carries f32 rounding of
     * sqrt(accum) / lr * p, a few 1e-6 after three steps */
    double atol = c->k == K_FTRL ? 3e-5 : 2e-6;
    char w2[200];
    snprintf(w2, sizeof w2, "%s param", what);
    test_close_f32(w2, base.p, rp, n, 2e-5, atol);
    snprintf(w2, sizeof w2, "%s state1", what);
    test_close_f32(w2, base.s1, r1, n, 2e-5, atol);
    if (nstate(c->k) > 1) {
        snprintf(w2, sizeof w2, "%s state2", what);
        test_close_f32(w2, base.s2, r2, n, 2e-5, atol);
    }
    bound_check(what, c->k, 0, base.p, rp, bp, n);
    bound_check(what, c->k, 1, base.s1, r1, b1, n);
    if (nstate(c->k) > 1) bound_check(what, c->k, 2, base.s2, r2, b2, n);
    if (c->hdt != HX_K_F32) {
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (base.h[i] != ref_half_bits(base.p[i], c->hdt)) bad = i;
        CHECK(bad < 0, "%s: half copy at %lld: %04x for %.9g", what, (long long)bad,
              bad < 0 ? 0 : base.h[bad], bad < 0 ? 0.0 : (double)base.p[bad]);
    }

    /* every path, aligned and not, 1 and 2 threads: the scalar path's bits */
    for (int isa = HX_ISA_SCALAR; isa <= (int)best_isa; isa++) {
        for (int off = 0; off < 2; off++) {
            for (int nt = 1; nt <= 2; nt++) {
                if (isa == HX_ISA_SCALAR && off == 1 && nt == 1) continue; /* that is base */
                if (nt == 2 && n < HX_K_PARALLEL_MIN) continue;
                if (n == BIG && (off == 1 || nt == 1 || c->hdt == HX_K_F32)) continue; /* streaming */
                dense_out o = run_path(c, &d, (hx_isa)isa, nt, (size_t)off);
                int same = o.status == base.status && o.step == base.step &&
                           same_bits(o.p, base.p, n * 4) && same_bits(o.s1, base.s1, n * 4) &&
                           same_bits(o.s2, base.s2, n * 4) &&
                           (c->hdt == HX_K_F32 || same_bits(o.h, base.h, n * 2));
                CHECK(same, "%s: %s, offset %d, %d threads differs from scalar", what,
                      hx_k_isa_name((hx_isa)isa), off, nt);
                out_free(&o);
            }
        }
    }
    out_free(&base);
    free(rp);
    free(r1);
    free(r2);
    free(bp);
    free(b1);
    free(b2);
    data_free(&d);
}

static void test_dense(void)
{
    static const hx_kdtype GDT[3] = {HX_K_F32, HX_K_F16, HX_K_BF16};
    uint64_t seed = 100, mid_seed = 1000; /* MID's own: the other sizes keep their data */
    for (int si = 0; si < NSIZES; si++) {
        for (int k = 0; k < NKERN; k++) {
            for (int gi = 0; gi < 3; gi++) {
                for (int hi = 0; hi < 3; hi++) {
                    /* the big sizes: f32 in/out and the two matched mixed-precision pairs */
                    if (SIZES[si] >= MID && !(gi == hi)) continue;
                    dense_case c = {(kern)k, GDT[gi], GDT[hi], 1.0f, 1.0f, SIZES[si]};
                    if (c.gdt != HX_K_F32) {
                        c.unscale = 1.0f / 256;
                        c.clip = 0.75f;
                    }
                    dense_check(&c, SIZES[si] == MID ? mid_seed++ : seed++);
                }
            }
        }
    }
}

/* ---- the half copy of special values ------------------------------------------------ */

static void test_half_copy(void)
{
    /* SGD with lr 0 and g 0 leaves p as it is and writes its half copy */
    enum { N = 64 };
    static const uint32_t bits[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00001, 0xffa00000, 0x00000001,
        0x807fffff, 0x00400000, 0x3f808000, 0x3f818000, 0x3f808001, 0x477fe000, 0x477fefff,
        0x477ff000, 0xc77ff000, 0x38800000, 0x387fffff, 0x33800000, 0x33800001, 0x33000000,
        0x33000001, 0x33c00000, 0x7f7fffff, 0xff7f8000, 0x3f800fff, 0x3f801000, 0x3f803000,
        0x00800000, 0x0080ffff, 0x00018000, 0x7f800001};
    int nb = (int)(sizeof bits / sizeof bits[0]);
    float p0[N], g[N] = {0};
    test_rng r = test_rng_make(7);
    for (int i = 0; i < N; i++) {
        if (i < nb) memcpy(&p0[i], &bits[i], 4);
        else {
            double m = test_rng_normal(&r); /* one draw a statement, as above */
            p0[i] = (float)(m * pow(10.0, test_rng_uniform(&r, -9, 6)));
        }
    }
    hx_sgd_hp hp = {0.0, 0.0, 0.0, 0.0, 0};
    for (int dt = HX_K_F16; dt <= HX_K_BF16; dt++) {
        uint16_t first[N];
        for (int isa = HX_ISA_SCALAR; isa <= (int)best_isa; isa++) {
            float p[N];
            uint16_t h[N];
            memcpy(p, p0, sizeof p);
            int64_t step = 0;
            hx_optim_io io = hx_optim_io_f32(g, 1);
            io.param_half = h;
            io.param_half_dtype = (hx_kdtype)dt;
            io.isa = (hx_isa)isa;
            CHECK(hx_optim_sgd(p, NULL, N, &step, &hp, &io) == HX_OPTIM_OK, "half copy sgd");
            for (int i = 0; i < N; i++) {
                if (isnan(p0[i])) {
                    CHECK(half_is_nan(h[i], (hx_kdtype)dt), "%s dt %d: NaN %08x gave %04x",
                          hx_k_isa_name((hx_isa)isa), dt, bits[i], h[i]);
                } else {
                    uint16_t want = ref_half_bits(p0[i], (hx_kdtype)dt);
                    CHECK(h[i] == want, "%s dt %d: %.9g (%d) gave %04x want %04x",
                          hx_k_isa_name((hx_isa)isa), dt, (double)p0[i], i, h[i], want);
                }
            }
            if (isa == HX_ISA_SCALAR) memcpy(first, h, sizeof h);
            else CHECK(same_bits(h, first, sizeof h), "%s dt %d: half copy differs from scalar",
                       hx_k_isa_name((hx_isa)isa), dt);
        }
    }
}

/* ---- division by a per-call constant: the divider's bits -------------------------------- */

static void test_div_const(void)
{
    static const uint32_t BS[] = {0x3d4ccccd /* 0.05 */, 0x3d01866a /* sqrt(1 - 0.999) */,
                                  0x3eaaaaab, 0x3f7fffff, 0x40e00000, 0x3f800000, 0x3089705f /* 1e-9 */,
                                  0x4f32d05e /* 3e9 */, 0x4e800000 /* 2^30 */, 0x30800000 /* 2^-30 */};
    const hx_optim_path *paths[3] = {&hx_optim_path_scalar, &hx_optim_path_avx2, &hx_optim_path_avx512};
    enum { N = 1 << 20 };
    float *x = malloc(N * 4), *q = malloc(N * 4);
    test_rng r = test_rng_make(3);
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)test_rng_u64(&r);
        if (i < 64) u = (uint32_t)i * 0x02000000u + (i & 1);      /* every exponent band */
        if (i >= 64 && i < 80) u = (uint32_t)(i - 64) | (i & 1 ? 0x80000000u : 0); /* zeros, denormals */
        memcpy(&x[i], &u, 4);
    }
    for (int isa = HX_ISA_SCALAR; isa <= (int)best_isa; isa++) {
        for (size_t k = 0; k < sizeof BS / sizeof BS[0]; k++) {
            float b;
            memcpy(&b, &BS[k], 4);
            paths[isa]->div_const(q, x, N, b);
            int64_t bad = -1;
            for (int i = 0; i < N && bad < 0; i++) {
                float want = x[i] / b;
                if (!(isnan(want) && isnan(q[i])) && memcmp(&want, &q[i], 4) != 0) bad = i;
            }
            CHECK(bad < 0, "%s: x / %.9g at %lld: %a, division gives %a", hx_k_isa_name((hx_isa)isa),
                  (double)b, (long long)bad, bad < 0 ? 0.0 : (double)q[bad],
                  bad < 0 ? 0.0 : (double)(x[bad] / b));
        }
    }
    free(x);
    free(q);
}

/* ---- non-finite gradients: skip the step, touch nothing ------------------------------ */

static void nonfinite_case(hx_kdtype gdt, int64_t n, int64_t pos, int nan, hx_isa isa, int nt)
{
    test_rng r = test_rng_make(11 + (uint64_t)pos);
    float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    float *p0 = malloc(n * 4), *m0 = malloc(n * 4), *v0 = malloc(n * 4);
    uint16_t *h = malloc(n * 2), *h0 = malloc(n * 2);
    void *g = malloc(n * gsize(gdt));
    test_fill_uniform(&r, p, n, -1, 1);
    test_fill_uniform(&r, m, n, -0.1, 0.1);
    test_fill_uniform(&r, v, n, 0, 0.01);
    for (int64_t i = 0; i < n; i++) {
        h[i] = (uint16_t)(i * 2654435761u);
        encode_grad(g, gdt, i, (float)test_rng_uniform(&r, -1, 1));
    }
    float bad = nan ? NAN : (pos & 1 ? -INFINITY : INFINITY);
    if (gdt == HX_K_F32) ((float *)g)[pos] = bad;
    else ((uint16_t *)g)[pos] = gdt == HX_K_F16 ? (nan ? 0x7e00 : 0x7c00) : (nan ? 0x7fc0 : 0xff80);
    memcpy(p0, p, n * 4);
    memcpy(m0, m, n * 4);
    memcpy(v0, v, n * 4);
    memcpy(h0, h, n * 2);
    int64_t step = 9;
    hx_optim_io io = {g, gdt, 1.0f / 128, 0.5f, 1, h, HX_K_BF16, isa, nt};
    int st = hx_optim_adam(p, m, v, n, &step, &ADAMW, &io);
    CHECK(st == HX_OPTIM_NONFINITE && step == 9, "nonfinite %s n=%lld pos=%lld dt=%d: status %d step %lld",
          hx_k_isa_name(isa), (long long)n, (long long)pos, (int)gdt, st, (long long)step);
    CHECK(same_bits(p, p0, n * 4) && same_bits(m, m0, n * 4) && same_bits(v, v0, n * 4) &&
              same_bits(h, h0, n * 2),
          "nonfinite %s n=%lld pos=%lld: state written", hx_k_isa_name(isa), (long long)n,
          (long long)pos);
    CHECK(hx_optim_nonfinite(g, gdt, 1.0f, 1.0f, n, isa, nt) == 1, "hx_optim_nonfinite missed it");
    /* the same gradient made finite: the step happens */
    encode_grad(g, gdt, pos, 0.5f);
    CHECK(hx_optim_nonfinite(g, gdt, 1.0f, 1.0f, n, isa, nt) == 0, "hx_optim_nonfinite false alarm");
    st = hx_optim_adam(p, m, v, n, &step, &ADAMW, &io);
    CHECK(st == HX_OPTIM_OK && step == 10 && !same_bits(p, p0, n * 4), "finite step skipped");
    free(p); free(m); free(v); free(p0); free(m0); free(v0); free(h); free(h0); free(g);
}

static void test_nonfinite(void)
{
    static const hx_kdtype GDT[3] = {HX_K_F32, HX_K_F16, HX_K_BF16};
    for (int isa = HX_ISA_SCALAR; isa <= (int)best_isa; isa++) {
        for (int gi = 0; gi < 3; gi++) {
            nonfinite_case(GDT[gi], 1, 0, 0, (hx_isa)isa, 1);
            nonfinite_case(GDT[gi], 17, 16, 0, (hx_isa)isa, 1);
            nonfinite_case(GDT[gi], 1023, 500, 1, (hx_isa)isa, 1);
            nonfinite_case(GDT[gi], MID, MID - 1, 0, (hx_isa)isa, 2); /* in thread 1's half */
            nonfinite_case(GDT[gi], MID, 12345, 1, (hx_isa)isa, 2);   /* in thread 0's */
        }
    }
    /* a finite f16 gradient that the unscale factor overflows */
    uint16_t g[3] = {0x3c00, 0x7bff, 0x3c00};
    float p[3] = {1, 2, 3}, m[3] = {0}, v[3] = {0};
    int64_t step = 0;
    hx_optim_io io = {g, HX_K_F16, 1e35f, 1.0f, 1, NULL, HX_K_BF16, best_isa, 1};
    CHECK(hx_optim_adam(p, m, v, 3, &step, &ADAM, &io) == HX_OPTIM_NONFINITE && step == 0 &&
              p[0] == 1 && p[1] == 2 && p[2] == 3,
          "overflow from the unscale factor not caught");
    /* zeros times an infinite factor are NaN */
    uint16_t z[40] = {0};
    for (int isa = HX_ISA_SCALAR; isa <= (int)best_isa; isa++)
        CHECK(hx_optim_nonfinite(z, HX_K_BF16, INFINITY, 1.0f, 40, (hx_isa)isa, 1) == 1 &&
                  hx_optim_nonfinite(z, HX_K_BF16, 1.0f, 1.0f, 40, (hx_isa)isa, 1) == 0,
              "%s: 0 * Inf", hx_k_isa_name((hx_isa)isa));
}

/* ---- bad arguments ---------------------------------------------------------------- */

static void test_bad_args(void)
{
    float p[4] = {1, 2, 3, 4}, s[4] = {0}, g[4] = {1, 1, 1, 1};
    int64_t step = 3;
    hx_optim_io io = hx_optim_io_f32(g, 1);
    io.grad_dtype = HX_K_I32;
    CHECK(hx_optim_adagrad(p, s, 4, &step, &ADAGRAD, &io) == HX_OPTIM_BAD_ARG && step == 3 &&
              p[0] == 1 && s[0] == 0,
          "i32 gradient accepted");
    io = hx_optim_io_f32(g, 0);
    CHECK(hx_optim_ftrl(p, s, s, 4, &FTRL, &io) == HX_OPTIM_BAD_ARG, "0 threads accepted");
    io = hx_optim_io_f32(g, 1);
    io.param_half = s;
    io.param_half_dtype = HX_K_F32;
    CHECK(hx_optim_adagrad(p, s, 4, &step, &ADAGRAD, &io) == HX_OPTIM_BAD_ARG, "f32 half copy accepted");
    io = hx_optim_io_f32(g, 1);
    CHECK(hx_optim_sgd(p, NULL, 4, &step, &SGD, &io) == HX_OPTIM_BAD_ARG && step == 3,
          "momentum without a buffer accepted");
    CHECK(hx_optim_nonfinite(g, HX_K_I64, 1.0f, 1.0f, 4, best_isa, 1) == HX_OPTIM_BAD_ARG,
          "i64 scan accepted");
    hx_optim_rows rr = {NULL, 0, NULL, 1, -1, best_isa, 1};
    int64_t bad = -1;
    CHECK(hx_optim_ftrl_rows(p, s, s, &FTRL, &rr, &bad) == HX_OPTIM_BAD_ARG, "dim -1 accepted");
}

/* ---- the graph's SGD entry point ----------------------------------------------------------- */

static void test_sgd_entry(void)
{
    enum { N = 40000 };
    float *p1 = malloc(N * 4), *p2 = malloc(N * 4), *b1 = calloc(N, 4), *b2 = calloc(N, 4);
    float *g = malloc(N * 4);
    test_rng r = test_rng_make(5);
    test_fill_uniform(&r, p1, N, -1, 1);
    memcpy(p2, p1, N * 4);
    hx_sgd_hp hp = {0.05, 0.9, 0.0, 0.01, 1}; /* dampening 0: the first step matches torch too */
    int64_t step = 0;
    for (int s = 0; s < 3; s++) {
        test_fill_uniform(&r, g, N, -1, 1);
        hx_optim_io io = hx_optim_io_f32(g, 2);
        hx_optim_sgd(p1, b1, N, &step, &hp, &io);
        hx_k_sgd_f32(p2, g, b2, 0.05f, 0.9f, 0.0f, 0.01f, 1, N, 2);
    }
    CHECK(same_bits(p1, p2, N * 4) && same_bits(b1, b2, N * 4), "hx_k_sgd_f32 differs from hx_optim_sgd");
    /* no momentum: no buffer */
    hx_k_sgd_f32(p2, g, NULL, 0.1f, 0.0f, 0.0f, 0.0f, 0, N, 1);
    CHECK(p2[0] == (float)fma(-0.1f, g[0], p1[0]), "plain SGD step");
    free(p1); free(p2); free(b1); free(b2); free(g);
}

/* ---- rows -------------------------------------------------------------------------------- */

typedef enum rkern { R_LAZY, R_ADAGRAD, R_FTRL } rkern;
static const char *RNAME[3] = {"lazy-adam", "adagrad-rows", "ftrl-rows"};

static int run_rows(rkern k, float *p, float *s1, float *s2, int64_t t, const hx_optim_rows *r,
                    int64_t *bad)
{
    switch (k) {
    case R_LAZY: return hx_optim_lazy_adam_rows(p, s1, s2, t, &LAZY, r, bad);
    case R_ADAGRAD: return hx_optim_adagrad_rows(p, s1, t, &ADAGRAD, r, bad);
    default: return hx_optim_ftrl_rows(p, s1, s2, &FTRL, r, bad);
    }
}

/* The reference of row kernel k: its hyper-parameters. */
static ref_optim ref_row_of(rkern k)
{
    return k == R_LAZY ? ref_adam_of(&LAZY, REF_LAZY_ADAM)
           : k == R_ADAGRAD ? ref_adagrad_of(&ADAGRAD) : ref_ftrl_of(&FTRL);
}

static void rows_check(rkern k, int64_t rows, int64_t dim, int64_t n, uint64_t seed)
{
    test_rng r = test_rng_make(seed);
    int64_t tot = rows * dim;
    float *p0 = malloc(tot * 4), *a0 = malloc(tot * 4), *b0 = malloc(tot * 4);
    for (int64_t i = 0; i < tot; i++) {
        p0[i] = (float)test_rng_normal(&r);
        a0[i] = k == R_LAZY ? (float)(0.1 * test_rng_normal(&r)) : (float)test_rng_uniform(&r, 0.1, 1);
        b0[i] = k == R_LAZY ? (float)test_rng_uniform(&r, 0, 0.01) : (float)(0.1 * test_rng_normal(&r));
    }
    int64_t *ids[STEPS];
    float *g[STEPS];
    uint8_t *touched = calloc(rows, 1);
    for (int s = 0; s < STEPS; s++) {
        ids[s] = malloc(n * 8);
        g[s] = malloc(n * dim * 4);
        for (int64_t i = 0; i < n; i++) {
            /* a quarter of the entries repeat an earlier id of the same step */
            ids[s][i] = (i > 0 && test_rng_u64(&r) % 4 == 0) ? ids[s][test_rng_u64(&r) % i]
                                                             : (int64_t)(test_rng_u64(&r) % rows);
            touched[ids[s][i]] = 1;
        }
        test_fill_uniform(&r, g[s], n * dim, -1, 1);
    }
    /* reference: entries in order, duplicates one after another */
    double *rp = malloc(tot * 8), *ra = malloc(tot * 8), *rb = malloc(tot * 8);
    ref_eb *ep = malloc(tot * sizeof *ep), *ea = malloc(tot * sizeof *ea), *eb = malloc(tot * sizeof *eb);
    for (int64_t i = 0; i < tot; i++) {
        rp[i] = p0[i];
        ra[i] = a0[i];
        rb[i] = b0[i];
        ep[i] = (ref_eb){rp[i], 0};
        ea[i] = (ref_eb){ra[i], 0};
        eb[i] = (ref_eb){rb[i], 0};
    }
    ref_optim o = ref_row_of(k);
    for (int s = 0; s < STEPS; s++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < dim; c++) {
                int64_t e = ids[s][i] * dim + c;
                double gk = g[s][i * dim + c];
                ref_optim_step(&o, 7 + s, gk, &rp[e], &ra[e], &rb[e]);
                ref_eb_step(&o, 7 + s, (ref_eb){gk, 0}, &ep[e], &ea[e], &eb[e]);
            }
    char what[120];
    snprintf(what, sizeof what, "%s rows=%lld dim=%lld n=%lld", RNAME[k], (long long)rows,
             (long long)dim, (long long)n);
    float *first_p = NULL, *first_a = NULL, *first_b = NULL;
    for (int isa = HX_ISA_SCALAR; isa <= (int)best_isa; isa++) {
        for (int nt = 1; nt <= 2; nt++) {
            if (nt == 2 && n * dim < HX_K_PARALLEL_MIN) continue;
            buf bp = buf_make(tot * 4, 4), ba = buf_make(tot * 4, 8), bb = buf_make(tot * 4, 12);
            float *p = bp.ptr, *a = ba.ptr, *b = bb.ptr;
            memcpy(p, p0, tot * 4);
            memcpy(a, a0, tot * 4);
            memcpy(b, b0, tot * 4);
            int st = 0;
            for (int s = 0; s < STEPS; s++) {
                hx_optim_rows rr = {ids[s], n, g[s], rows, dim, (hx_isa)isa, nt};
                int64_t bad = -1;
                st |= run_rows(k, p, a, k == R_ADAGRAD ? NULL : b, 7 + s, &rr, &bad);
            }
            CHECK(st == HX_OPTIM_OK, "%s: status %d", what, st);
            if (!first_p) {
                char w2[160];
                double atol = k == R_FTRL ? 3e-5 : 2e-6; /* as in dense_check */
                snprintf(w2, sizeof w2, "%s param", what);
                test_close_f32(w2, p, rp, tot, 2e-5, atol);
                snprintf(w2, sizeof w2, "%s state", what);
                test_close_f32(w2, a, ra, tot, 2e-5, atol);
                if (k != R_ADAGRAD) test_close_f32(w2, b, rb, tot, 2e-5, atol);
                bound_check(what, NKERN + k, 0, p, rp, ep, tot);
                bound_check(what, NKERN + k, 1, a, ra, ea, tot);
                if (k != R_ADAGRAD) bound_check(what, NKERN + k, 2, b, rb, eb, tot);
                int64_t moved = -1;
                for (int64_t row = 0; row < rows && moved < 0; row++)
                    if (!touched[row] &&
                        (!same_bits(p + row * dim, p0 + row * dim, dim * 4) ||
                         !same_bits(a + row * dim, a0 + row * dim, dim * 4) ||
                         !same_bits(b + row * dim, b0 + row * dim, dim * 4)))
                        moved = row;
                CHECK(moved < 0, "%s: untouched row %lld changed", what, (long long)moved);
                first_p = malloc(tot * 4);
                first_a = malloc(tot * 4);
                first_b = malloc(tot * 4);
                memcpy(first_p, p, tot * 4);
                memcpy(first_a, a, tot * 4);
                memcpy(first_b, b, tot * 4);
            } else {
                CHECK(same_bits(p, first_p, tot * 4) && same_bits(a, first_a, tot * 4) &&
                          same_bits(b, first_b, tot * 4),
                      "%s: %s %d threads differs from scalar", what, hx_k_isa_name((hx_isa)isa), nt);
            }
            free(bp.base);
            free(ba.base);
            free(bb.base);
        }
    }
    for (int s = 0; s < STEPS; s++) {
        free(ids[s]);
        free(g[s]);
    }
    free(p0); free(a0); free(b0); free(rp); free(ra); free(rb); free(ep); free(ea); free(eb);
    free(first_p); free(first_a); free(first_b); free(touched);
}

static void test_rows(void)
{
    static const int64_t DIMS[] = {1, 7, 16, 17, 64};
    uint64_t seed = 900;
    for (int k = 0; k < 3; k++) {
        for (int di = 0; di < 5; di++) rows_check((rkern)k, 300, DIMS[di], 200, seed++);
        rows_check((rkern)k, 20000, 64, 3000, seed++); /* big enough for 2 threads */
    }
    /* bad ids: reported at their first position, nothing written */
    for (int nt = 1; nt <= 2; nt++) {
        int64_t rows = 1000, dim = 64, n = 1000;
        float *p = calloc(rows * dim, 4), *m = calloc(rows * dim, 4), *v = calloc(rows * dim, 4);
        float *g = malloc(n * dim * 4);
        int64_t *ids = malloc(n * 8);
        for (int64_t i = 0; i < n; i++) ids[i] = i % rows;
        for (int64_t i = 0; i < n * dim; i++) g[i] = 1.0f;
        ids[700] = rows;
        ids[600] = -3;
        hx_optim_rows rr = {ids, n, g, rows, dim, best_isa, nt};
        int64_t bad = -1;
        int st = hx_optim_lazy_adam_rows(p, m, v, 1, &LAZY, &rr, &bad);
        int clean = 1;
        for (int64_t i = 0; i < rows * dim; i++) clean &= p[i] == 0 && m[i] == 0 && v[i] == 0;
        CHECK(st == HX_OPTIM_BAD_ID && bad == 600 && clean, "bad id (%d threads): status %d pos %lld clean %d",
              nt, st, (long long)bad, clean);
        free(p); free(m); free(v); free(g); free(ids);
    }
}

/* ---- golden values after 10 steps ---------------------------------------------------------
 * From the formulas of optim.h evaluated in double (Python floats), with
 * p0 = {0.5, -1.25, 2.0, -0.375} and at step k the gradient of element j
 * (column c for rows) g = (((3k + 5j + 2c) mod 7) - 3) * 0.25 + 0.125 j.
 * Hyper-parameters as ADAM, ADAMW, ADAGRAD (sum0 0.1), NESTEROV-style SGD
 * with dampening 0.1 (buf0 = g), FTRL (accum0 0.1, linear0 0, with and
 * without l2_shrinkage 0.005), LazyAdam on a 6x3 table with p0[r][c] =
 * 0.25 (r+1) (-1)^r + 0.0625 c and ids {k mod 5, 1, k mod 5, 3} at global
 * step k, rows named twice updated twice. */

static const double G_ADAM[4] = {0.46857695516718523, -1.2424916964741337, 1.9392611624975993, -0.4334573832317688};
static const double G_ADAMW[4] = {0.47452398497298642, -1.2323829491913225, 1.9215233042869577, -0.42987064646499412};
static const double G_ADAGRAD[4] = {0.42431035989946514, -1.2222926439278103, 1.7457083442247427, -0.61355655413083987};
static const double G_SGD[4] = {0.34194803091403575, -1.2955984784754258, 1.1864316066649216, -1.1452559301708385};
static const double G_FTRL[4] = {-0.033660191261627996, -0.43958461768361795, 1.2724699186493893, -0.33089018054796476};
static const double G_FTRL_SHR[4] = {-0.034224412937729924, -0.43657735753546223, 1.2674614471081915, -0.32970845438707408};
static const double G_LAZY[18] = {
    0.25380978863296255, 0.2993740127262875, 0.35843679495574526, -0.52601832563717021,
    -0.51712147952680332, -0.37130687878557772, 0.7359724260514412, 0.81809870063334234,
    0.8595399348703936, -1.0786943748713369, -1.0139518391770583, -0.9333602770745445,
    1.2328710488812906, 1.3274081044175363, 1.3685624300921329, -1.5, -1.4375, -1.375};

static float golden_g(int k, int j, int c)
{
    return (float)((((3 * k + 5 * j + 2 * c) % 7) - 3) * 0.25 + 0.125 * j);
}

static void golden_check(const char *what, const float *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        CHECK(fabs(got[i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-12, "golden %s[%d]: %.9g want %.17g",
              what, i, (double)got[i], want[i]);
}

static void test_golden(void)
{
    static const float P0[4] = {0.5f, -1.25f, 2.0f, -0.375f};
    const hx_sgd_hp sgd = {0.05, 0.9, 0.1, 0.01, 1};
    const hx_ftrl_hp ftrl0 = {0.05, 0.001, 0.01, 0.0};
    for (int isa = HX_ISA_SCALAR; isa <= (int)best_isa; isa++) {
        float pa[4], ma[4] = {0}, va[4] = {0}, pw[4], mw[4] = {0}, vw[4] = {0};
        float pg[4], sg[4] = {0.1f, 0.1f, 0.1f, 0.1f}, ps[4], bs[4] = {0};
        float pf[4], af[4] = {0.1f, 0.1f, 0.1f, 0.1f}, lf[4] = {0};
        float pf2[4], af2[4] = {0.1f, 0.1f, 0.1f, 0.1f}, lf2[4] = {0};
        memcpy(pa, P0, 16); memcpy(pw, P0, 16); memcpy(pg, P0, 16); memcpy(ps, P0, 16);
        memcpy(pf, P0, 16); memcpy(pf2, P0, 16);
        int64_t sa = 0, sw = 0, sgs = 0, ss = 0;
        for (int k = 1; k <= 10; k++) {
            float g[4];
            for (int j = 0; j < 4; j++) g[j] = golden_g(k, j, 0);
            hx_optim_io io = hx_optim_io_f32(g, 1);
            io.isa = (hx_isa)isa;
            hx_optim_adam(pa, ma, va, 4, &sa, &ADAM, &io);
            hx_optim_adam(pw, mw, vw, 4, &sw, &ADAMW, &io);
            hx_optim_adagrad(pg, sg, 4, &sgs, &ADAGRAD, &io);
            hx_optim_sgd(ps, bs, 4, &ss, &sgd, &io);
            hx_optim_ftrl(pf, af, lf, 4, &ftrl0, &io);
            hx_optim_ftrl(pf2, af2, lf2, 4, &FTRL, &io);
        }
        CHECK(sa == 10 && sw == 10 && sgs == 10 && ss == 10, "golden step counts");
        golden_check("adam", pa, G_ADAM, 4);
        golden_check("adamw", pw, G_ADAMW, 4);
        golden_check("adagrad", pg, G_ADAGRAD, 4);
        golden_check("sgd", ps, G_SGD, 4);
        golden_check("ftrl", pf, G_FTRL, 4);
        golden_check("ftrl-shrinkage", pf2, G_FTRL_SHR, 4);

        float tp[18], tm[18] = {0}, tv[18] = {0};
        for (int r = 0; r < 6; r++)
            for (int c = 0; c < 3; c++) tp[r * 3 + c] = (float)(0.25 * (r + 1) * (r % 2 ? -1 : 1) + 0.0625 * c);
        for (int k = 1; k <= 10; k++) {
            int64_t ids[4] = {k % 5, 1, k % 5, 3};
            float g[12];
            for (int i = 0; i < 4; i++)
                for (int c = 0; c < 3; c++) g[i * 3 + c] = golden_g(k, i, c);
            hx_optim_rows rr = {ids, 4, g, 6, 3, (hx_isa)isa, 1};
            int64_t bad;
            hx_optim_lazy_adam_rows(tp, tm, tv, k, &LAZY, &rr, &bad);
        }
        golden_check("lazy-adam", tp, G_LAZY, 18);
    }
}

static int setup(void)
{
    best_isa = hx_k_isa();
    fprintf(stderr, "test_optim: paths up to %s\n", hx_k_isa_name(best_isa));
    return 0;
}

/* The worst error of each kernel's arrays over its bound, and in ulps. */
static void report_errors(void)
{
    for (int k = 0; k < NKERN + NRKERN; k++)
        fprintf(stderr, "test_optim: %s: worst error %.3f/%.3f/%.3f of its bound, %.1f/%.1f/%.1f ulps\n",
                k < NKERN ? KNAME[k] : RNAME[k - NKERN], ratio_seen[k][0], ratio_seen[k][1],
                ratio_seen[k][2], ulps_seen[k][0], ulps_seen[k][1], ulps_seen[k][2]);
}

static const test_case cases[] = {
    {"golden", test_golden},
    {"half_copy", test_half_copy},
    {"div_const", test_div_const},
    {"bad_args", test_bad_args},
    {"sgd_entry", test_sgd_entry},
    {"nonfinite", test_nonfinite},
    {"rows", test_rows},
    {"dense", test_dense},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = report_errors};
    return test_main_with(argc, argv, "optim", cases, TEST_COUNT(cases), &o);
}
