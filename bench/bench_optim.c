/* Host optimizer kernels against the memory system's ceiling, measured in
 * the same run. One JSON object per line on stdout.
 *
 *   bench_optim [N ...]     sizes in params (default 67108864 4194304)
 *
 * For each size and for 1 and 2 threads:
 *   ceilings  adam-shape: read 4 f32 arrays, write 3 of them in place, one
 *             add each (28 bytes/param, the shape of fp32 Adam); the same
 *             for the other kernels' shapes; STREAM copy and triad;
 *             rows-shape: the adam-shape loop on the rows LazyAdam touches;
 *   kernels   adam, adamw, mp-bf16 and mp-f16 (the fused mixed-precision
 *             Adam step: half gradient in, unscale, clip, non-finite scan,
 *             half param out), sgd (momentum), adagrad, ftrl, lazy-adam
 *             (64-wide rows, an eighth of the table's rows, unique ids in
 *             random order).
 * Each kernel line reports ms/step (best of reps, and the median),
 * params/s, the bytes it must move per param, GB/s from those bytes,
 * `ratio` = GB/s over the adam-shape ceiling (the measure) and
 * `ratio_shape` = GB/s over the ceiling of its own shape; at 2 threads,
 * `speedup` = 1-thread ms / 2-thread ms. The path is hx_k_isa()
 * (HX_ISA=scalar|avx2|avx512 to force one). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/cpu/hx_kinternal.h"
#include "kernels/cpu/optim_internal.h"

#define ROW_DIM 64

/* ---- memory --------------------------------------------------------------- */

static void *big_alloc(size_t bytes)
{
    size_t al = (size_t)2 << 20, sz = (bytes + al - 1) / al * al;
    void *p = aligned_alloc(al, sz);
    if (!p) {
        fprintf(stderr, "bench_optim: out of memory (%zu bytes)\n", sz);
        exit(1);
    }
    madvise(p, sz, MADV_HUGEPAGE);
    return p;
}

/* ---- ceiling loops: trivial arithmetic, the kernels' memory shapes -------------- */

#define CEIL_FN __attribute__((target_clones("avx512f", "avx2", "default")))

/* p, m, v += g */
CEIL_FN static void shape_4r3w(float *restrict p, float *restrict m, float *restrict v,
                               const float *restrict g, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        p[i] += g[i];
        m[i] += g[i];
        v[i] += g[i];
    }
}

/* p, s += g */
CEIL_FN static void shape_3r2w(float *restrict p, float *restrict s, const float *restrict g,
                               int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        p[i] += g[i];
        s[i] += g[i];
    }
}

/* p, m, v += g (16-bit, as bf16); h = top half of p */
CEIL_FN static void shape_mp(float *restrict p, float *restrict m, float *restrict v,
                             const uint16_t *restrict g, uint16_t *restrict h, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)g[i] << 16;
        float x;
        memcpy(&x, &u, 4);
        p[i] += x;
        m[i] += x;
        v[i] += x;
        uint32_t b;
        memcpy(&b, &p[i], 4);
        h[i] = (uint16_t)(b >> 16);
    }
}

CEIL_FN static void stream_copy(float *restrict c, const float *restrict a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) c[i] = a[i];
}

CEIL_FN static void stream_triad(float *restrict a, const float *restrict b,
                                 const float *restrict c, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

CEIL_FN static void rows_shape(float *restrict p, float *restrict m, float *restrict v,
                               const float *restrict g, const int64_t *restrict ids, int64_t n,
                               int part, int nparts)
{
    for (int64_t i = 0; i < n; i++) {
        if (nparts > 1 && hx_optim_row_owner(ids[i], nparts) != part) continue;
        float *pr = p + ids[i] * ROW_DIM, *mr = m + ids[i] * ROW_DIM, *vr = v + ids[i] * ROW_DIM;
        const float *gr = g + i * ROW_DIM;
        for (int c = 0; c < ROW_DIM; c++) {
            pr[c] += gr[c];
            mr[c] += gr[c];
            vr[c] += gr[c];
        }
    }
}

/* ---- the data every case shares ------------------------------------------------- */

typedef struct data {
    int64_t n;
    float *p, *m, *v, *g;   /* n each */
    uint16_t *g16, *h16;    /* n each */
    int64_t *ids, nids;     /* lazy-adam: unique rows in random order */
} data;

typedef struct bctx {
    data *d;
    int nt;
    hx_isa isa;
    int which;
} bctx;

enum {
    C_SHAPE_ADAM, C_SHAPE_3R2W, C_SHAPE_MP, C_COPY, C_TRIAD, C_ROWS_SHAPE,
    C_ADAM, C_ADAMW, C_MP_BF16, C_MP_F16, C_SGD, C_ADAGRAD, C_FTRL, C_LAZY, NCASES
};

static const char *CASE_NAME[NCASES] = {
    "ceiling-adam-shape", "ceiling-3r2w-shape", "ceiling-mp-shape", "stream-copy",
    "stream-triad", "ceiling-rows-shape", "adam", "adamw", "mp-bf16", "mp-f16", "sgd",
    "adagrad", "ftrl", "lazy-adam"};

/* Bytes a case must move per param (per touched param for rows). */
static double case_bytes(int c)
{
    switch (c) {
    case C_SHAPE_ADAM: case C_ADAM: case C_ADAMW: case C_FTRL: return 28;
    case C_SHAPE_3R2W: case C_SGD: case C_ADAGRAD: return 20;
    case C_SHAPE_MP: return 28;
    case C_MP_BF16: case C_MP_F16: return 30; /* + the scan's read of the 2-byte gradient */
    case C_COPY: return 8;
    case C_TRIAD: return 12;
    default: return (6.0 * 4 * ROW_DIM + 4 * ROW_DIM + 8) / ROW_DIM; /* rows: p m v r+w, g, id */
    }
}

/* The ceiling each kernel's own shape is compared with. */
static int case_shape(int c)
{
    switch (c) {
    case C_SGD: case C_ADAGRAD: return C_SHAPE_3R2W;
    case C_MP_BF16: case C_MP_F16: return C_SHAPE_MP;
    case C_LAZY: return C_ROWS_SHAPE;
    default: return C_SHAPE_ADAM;
    }
}

static void run_ceiling_part(const bctx *b, int64_t lo, int64_t hi, int part, int nparts)
{
    data *d = b->d;
    int64_t k = hi - lo;
    switch (b->which) {
    case C_SHAPE_ADAM: shape_4r3w(d->p + lo, d->m + lo, d->v + lo, d->g + lo, k); break;
    case C_SHAPE_3R2W: shape_3r2w(d->p + lo, d->m + lo, d->g + lo, k); break;
    case C_SHAPE_MP: shape_mp(d->p + lo, d->m + lo, d->v + lo, d->g16 + lo, d->h16 + lo, k); break;
    case C_COPY: stream_copy(d->m + lo, d->p + lo, k); break;
    case C_TRIAD: stream_triad(d->m + lo, d->p + lo, d->v + lo, 0.5f, k); break;
    default: rows_shape(d->p, d->m, d->v, d->g, d->ids, d->nids, part, nparts); break;
    }
}

static void run_ceiling(const bctx *b)
{
    int64_t n = b->d->n;
    if (b->nt == 1) {
        run_ceiling_part(b, 0, n, 0, 1);
        return;
    }
#pragma omp parallel num_threads(b->nt)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 64, &lo, &hi);
        run_ceiling_part(b, lo, hi, omp_get_thread_num(), omp_get_num_threads());
    }
}

static const hx_adam_hp ADAM = {1e-3, 0.9, 0.999, 1e-8, 0.0, 0};
static const hx_adam_hp ADAMW = {1e-3, 0.9, 0.999, 1e-8, 0.01, 1};

static int64_t step_count;

static void run_kernel(const bctx *b)
{
    data *d = b->d;
    int64_t n = d->n;
    hx_optim_io io = hx_optim_io_f32(d->g, b->nt);
    io.isa = b->isa;
    int st = HX_OPTIM_OK;
    switch (b->which) {
    case C_ADAM: st = hx_optim_adam(d->p, d->m, d->v, n, &step_count, &ADAM, &io); break;
    case C_ADAMW: st = hx_optim_adam(d->p, d->m, d->v, n, &step_count, &ADAMW, &io); break;
    case C_MP_BF16:
    case C_MP_F16: {
        hx_kdtype dt = b->which == C_MP_BF16 ? HX_K_BF16 : HX_K_F16;
        hx_optim_io mp = {d->g16, dt, 1.0f / 1024, 0.8f, 1, d->h16, dt, b->isa, b->nt};
        st = hx_optim_adam(d->p, d->m, d->v, n, &step_count, &ADAMW, &mp);
        break;
    }
    case C_SGD: {
        hx_sgd_hp hp = {1e-3, 0.9, 0.0, 0.0, 0};
        st = hx_optim_sgd(d->p, d->m, n, &step_count, &hp, &io);
        break;
    }
    case C_ADAGRAD: {
        hx_adagrad_hp hp = {1e-2, 0.0, 1e-10, 0.0};
        st = hx_optim_adagrad(d->p, d->m, n, &step_count, &hp, &io);
        break;
    }
    case C_FTRL: {
        hx_ftrl_hp hp = {0.05, 1e-3, 1e-3, 0.0};
        st = hx_optim_ftrl(d->p, d->m, d->v, n, &hp, &io);
        break;
    }
    default: {
        hx_optim_rows r = {d->ids, d->nids, d->g, n / ROW_DIM, ROW_DIM, b->isa, b->nt};
        int64_t bad;
        st = hx_optim_lazy_adam_rows(d->p, d->m, d->v, ++step_count, &ADAM, &r, &bad);
        break;
    }
    }
    if (st != HX_OPTIM_OK) {
        fprintf(stderr, "bench_optim: %s returned %d\n", CASE_NAME[b->which], st);
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Best and median seconds over reps runs after one warm-up. */
static void time_case(const bctx *b, int reps, double *best, double *median)
{
    double t[64];
    for (int r = -1; r < reps; r++) {
        double t0 = omp_get_wtime();
        if (b->which < C_ADAM) run_ceiling(b);
        else run_kernel(b);
        double dt = omp_get_wtime() - t0;
        if (r >= 0) t[r] = dt;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    *best = t[0];
    *median = t[reps / 2];
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Fresh values for the arrays (so that no case sees another's leftovers
 * drift toward denormals), first-touched by the threads that use them. */
static void data_fill(data *d)
{
    int64_t n = d->n;
#pragma omp parallel num_threads(2)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 64, &lo, &hi);
        uint64_t s = 0x1234 + (uint64_t)lo;
        for (int64_t i = lo; i < hi; i++) {
            uint64_t r = mix(&s);
            float x = (float)((double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0);
            d->p[i] = x;
            d->m[i] = 0.1f * x;
            d->v[i] = 0.01f * x * x + 0.1f;
            d->g[i] = 0.5f * x + 0.25f;
            uint32_t u;
            memcpy(&u, &d->g[i], 4);
            d->g16[i] = (uint16_t)(u >> 16);
            d->h16[i] = 0;
        }
    }
}

int main(int argc, char **argv)
{
    int64_t sizes[8] = {(int64_t)64 << 20, (int64_t)4 << 20};
    int nsizes = 2;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 8; i++) sizes[nsizes++] = atoll(argv[i]);
    }
    hx_isa isa = hx_k_isa();
    for (int si = 0; si < nsizes; si++) {
        data d = {0};
        d.n = sizes[si] / ROW_DIM * ROW_DIM;
        int64_t n = d.n;
        d.p = big_alloc(n * 4);
        d.m = big_alloc(n * 4);
        d.v = big_alloc(n * 4);
        d.g = big_alloc(n * 4);
        d.g16 = big_alloc(n * 2);
        d.h16 = big_alloc(n * 2);
        /* lazy-adam: an eighth of the table's rows, each once, in random order */
        int64_t rows = n / ROW_DIM;
        int64_t *perm = malloc(rows * 8);
        uint64_t s = 99;
        for (int64_t i = 0; i < rows; i++) perm[i] = i;
        for (int64_t i = rows - 1; i > 0; i--) {
            int64_t j = (int64_t)(mix(&s) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        d.nids = rows / 8;
        d.ids = perm;
        int reps = n >= ((int64_t)32 << 20) ? 5 : 20;
        double ms1[NCASES] = {0};
        for (int nt = 1; nt <= 2; nt++) {
            double ceil_gbps[NCASES] = {0};
            for (int c = 0; c < NCASES; c++) {
                data_fill(&d);
                step_count = 0;
                bctx b = {&d, nt, isa, c};
                double best, med;
                time_case(&b, reps, &best, &med);
                double params = c == C_LAZY || c == C_ROWS_SHAPE ? (double)d.nids * ROW_DIM : (double)n;
                double gbps = params * case_bytes(c) / best * 1e-9;
                if (c < C_ADAM) ceil_gbps[c] = gbps;
                printf("{\"bench\":\"optim\",\"case\":\"%s\",\"n\":%lld,\"threads\":%d,\"isa\":\"%s\","
                       "\"reps\":%d,\"ms\":%.3f,\"ms_median\":%.3f,\"params_per_s\":%.4g,"
                       "\"bytes_per_param\":%.3f,\"gbps\":%.2f",
                       CASE_NAME[c], (long long)n, nt, c < C_ADAM ? "auto" : hx_k_isa_name(isa),
                       reps, best * 1e3, med * 1e3, params / best, case_bytes(c), gbps);
                if (c >= C_ADAM) {
                    printf(",\"ceiling_gbps\":%.2f,\"ratio\":%.3f,\"ratio_shape\":%.3f",
                           ceil_gbps[C_SHAPE_ADAM], gbps / ceil_gbps[C_SHAPE_ADAM],
                           gbps / ceil_gbps[case_shape(c)]);
                }
                if (nt == 1) ms1[c] = best;
                else printf(",\"speedup\":%.2f", ms1[c] / best);
                printf("}\n");
                fflush(stdout);
            }
        }
        free(d.p);
        free(d.m);
        free(d.v);
        free(d.g);
        free(d.g16);
        free(d.h16);
        free(perm);
    }
    return 0;
}
