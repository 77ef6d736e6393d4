/* The cases of the backend consistency suite: see backend_cases.h. Builders
 * use the public API; every leaf's data is drawn here so that both sessions
 * of a case see the same values. Gradient-only ops are reached through
 * hx_graph_backward of loss = sum(y * r) (r random, so the upstream gradient
 * is too), optimizer updates through hx_graph_apply_optimizer. */
#include "backend_cases.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F32 (1u << HX_DTYPE_F32)
#define HALF ((1u << HX_DTYPE_F16) | (1u << HX_DTYPE_BF16))
#define FLOATS (F32 | HALF)
#define ANY (FLOATS | (1u << HX_DTYPE_I32) | (1u << HX_DTYPE_I64))

/* ---- host values -------------------------------------------------------------------- */

static double f16_value(uint16_t h)
{
    int e = h >> 10 & 0x1f, m = h & 0x3ff;
    double s = h & 0x8000 ? -1.0 : 1.0;
    if (e == 0) return s * m * 0x1p-24;
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * (1024 + m) * ldexp(1.0, e - 25);
}

static uint16_t f16_bits(double v)
{
    float f = (float)v;
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = x >> 16 & 0x8000, man = x & 0x7fffff;
    int exp = (int)(x >> 23 & 0xff) - 127 + 15;
    if ((x >> 23 & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) return (uint16_t)sign; /* below the normal range: zero (data stays above it) */
    uint32_t h = (uint32_t)exp << 10 | man >> 13, rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static double bf16_value(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t bf16_bits(double v)
{
    float f = (float)v;
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)(x >> 16 | 0x40);
    return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

double bs_get(const void *p, hx_dtype dt, int64_t i)
{
    switch (dt) {
    case HX_DTYPE_F32: return ((const float *)p)[i];
    case HX_DTYPE_F16: return f16_value(((const uint16_t *)p)[i]);
    case HX_DTYPE_BF16: return bf16_value(((const uint16_t *)p)[i]);
    case HX_DTYPE_I32: return ((const int32_t *)p)[i];
    case HX_DTYPE_I64: return (double)((const int64_t *)p)[i];
    }
    return NAN;
}

void bs_put(void *p, hx_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case HX_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case HX_DTYPE_F16: ((uint16_t *)p)[i] = f16_bits(v); break;
    case HX_DTYPE_BF16: ((uint16_t *)p)[i] = bf16_bits(v); break;
    case HX_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case HX_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}

/* ---- leaves --------------------------------------------------------------------------- */

static void vdesc(bs_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vdesc(bs_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->variant, sizeof c->variant, fmt, ap);
    va_end(ap);
}

static double draw(bs_ctx *c, bs_dist d, int64_t i, int64_t hi)
{
    test_rng *r = &c->rng;
    switch (d) {
    case BS_UNIFORM: return test_rng_uniform(r, -1, 1);
    case BS_WIDE: return test_rng_uniform(r, -8, 8);
    case BS_POSITIVE: return test_rng_uniform(r, 0.5, 2);
    case BS_AWAY: return (test_rng_u64(r) & 1 ? 1 : -1) * test_rng_uniform(r, 0.1, 1);
    case BS_PROB: return test_rng_uniform(r, 0, 1);
    case BS_IDS: return (double)(i < hi && !(test_rng_u64(r) & 3) ? i : (int64_t)(test_rng_u64(r) % (uint64_t)hi));
    }
    return 0;
}

/* A leaf with drawn data: a parameter when `param` (floats only), else an
 * input; hi bounds ids. */
static hx_tensor *make_leaf(bs_ctx *c, bool param, hx_dtype dt, int nd, const int64_t *shape,
                            bs_dist d, int64_t hi)
{
    if (c->n_leaf == BS_MAX_LEAVES) return NULL;
    char name[16];
    snprintf(name, sizeof name, "%c%d", param ? 'p' : 'x', c->n_leaf);
    hx_tensor *t = param ? hx_graph_param(c->g, name, dt, nd, shape, hx_init_zeros())
                         : hx_graph_input(c->g, name, dt, nd, shape);
    if (!t) return NULL;
    int64_t n = hx_tensor_numel(t);
    void *data = malloc(hx_tensor_nbytes(t) ? hx_tensor_nbytes(t) : 1);
    if (!data) return NULL;
    for (int64_t i = 0; i < n; i++) bs_put(data, dt, i, draw(c, d, i, hi));
    c->leaf[c->n_leaf++] = (bs_leaf){t, data};
    return t;
}

#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
/* Data leaf: an input, or in perf mode a device-resident parameter (floats). */
#define IN(c, dt, d, ...) \
    make_leaf(c, (c)->perf && (dt) <= HX_DTYPE_BF16, dt, NDIM(__VA_ARGS__), (int64_t[]){__VA_ARGS__}, d, 0)
#define IDS(c, dt, hi, ...) make_leaf(c, false, dt, NDIM(__VA_ARGS__), (int64_t[]){__VA_ARGS__}, BS_IDS, hi)
#define PARAM(c, d, ...) make_leaf(c, true, HX_DTYPE_F32, NDIM(__VA_ARGS__), (int64_t[]){__VA_ARGS__}, d, 0)
#define SCALAR_IN(c, dt, d) make_leaf(c, (c)->perf && (dt) <= HX_DTYPE_BF16, dt, 0, NULL, d, 0)

static int64_t rows(const bs_ctx *c, int64_t n) { return n * c->scale; }

static const char *shape_str(const hx_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; t && i < hx_tensor_ndim(t) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)hx_tensor_dim(t, i));
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* d(sum(y * r)) / d wrt, r random: the gradient path of y's op. */
static hx_tensor *grad_of(bs_ctx *c, hx_tensor *y, hx_tensor *wrt)
{
    if (!y || !wrt) return NULL;
    if (hx_tensor_dtype(y) != HX_DTYPE_F32) y = hx_cast(c->g, y, HX_DTYPE_F32);
    int nd = hx_tensor_ndim(y);
    int64_t shape[HX_MAX_DIMS];
    for (int i = 0; i < nd; i++) shape[i] = hx_tensor_dim(y, i);
    hx_tensor *r = make_leaf(c, false, HX_DTYPE_F32, nd, shape, BS_UNIFORM, 0);
    hx_tensor *loss = hx_reduce_sum(c->g, hx_mul(c->g, y, r), 0, NULL, false);
    if (!loss || hx_graph_backward(c->g, loss)) return NULL;
    return hx_tensor_grad(wrt);
}

/* ---- forward ops ---------------------------------------------------------------------------- */

static hx_tensor *b_matmul(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const struct { int64_t batch, M, K, N; bool ta, tb, shared; } s[] = {
        {0, 4, 6, 5, false, false, false}, {0, 4, 6, 5, true, false, false},
        {0, 4, 6, 5, false, true, false},  {0, 4, 6, 5, true, true, false},
        {3, 4, 6, 5, false, false, false}, {3, 4, 6, 5, true, true, false},
        {3, 4, 6, 5, false, true, true},   {0, 7, 13, 9, false, false, false},
        {0, 1, 33, 1, false, false, false},
    };
    int64_t M = rows(c, s[v].M), K = s[v].K, N = s[v].N, B = s[v].batch;
    int64_t am = s[v].ta ? K : M, ak = s[v].ta ? M : K, bk = s[v].tb ? N : K, bn = s[v].tb ? K : N;
    hx_tensor *a = B ? IN(c, dt, BS_UNIFORM, B, am, ak) : IN(c, dt, BS_UNIFORM, am, ak);
    hx_tensor *b = B && !s[v].shared ? IN(c, dt, BS_UNIFORM, B, bk, bn) : IN(c, dt, BS_UNIFORM, bk, bn);
    char sa[64], sb[64];
    vdesc(c, "%s%s x %s%s%s", shape_str(a, sa, sizeof sa), s[v].ta ? "^T" : "",
          shape_str(b, sb, sizeof sb), s[v].tb ? "^T" : "", s[v].shared ? " (shared b)" : "");
    return hx_matmul(c->g, a, b, s[v].ta, s[v].tb);
}

/* Shape pairs that broadcast: equal, row, column, scalar, crossed, left. */
static const struct { int na, nb; int64_t a[4], b[4]; } bshapes[] = {
    {2, 2, {4, 5}, {4, 5}}, {2, 1, {4, 5}, {5}},       {2, 2, {4, 5}, {4, 1}},
    {2, 0, {4, 5}, {0}},    {3, 2, {3, 1, 5}, {4, 1}}, {2, 3, {1, 5}, {3, 4, 5}},
    {4, 3, {2, 3, 4, 5}, {3, 1, 5}}, {1, 1, {37}, {37}},
};

static hx_tensor *b_binary(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int64_t a[4], b[4];
    int na = bshapes[v].na, nb = bshapes[v].nb;
    memcpy(a, bshapes[v].a, sizeof a);
    memcpy(b, bshapes[v].b, sizeof b);
    /* the output's leading dim grows: in the operands that have it, unless broadcast there */
    if (na >= nb && a[0] != 1) a[0] *= c->scale;
    if (nb >= na && nb && b[0] != 1) b[0] *= c->scale;
    hx_tensor *x = make_leaf(c, c->perf, dt, na, a, BS_UNIFORM, 0);
    hx_tensor *y = make_leaf(c, c->perf, dt, nb, b, arg == 3 ? BS_POSITIVE : BS_UNIFORM, 0);
    char sa[64], sb[64];
    vdesc(c, "%s, %s", shape_str(x, sa, sizeof sa), shape_str(y, sb, sizeof sb));
    switch (arg) {
    case 0: return hx_add(c->g, x, y);
    case 1: return hx_sub(c->g, x, y);
    case 2: return hx_mul(c->g, x, y);
    default: return hx_div(c->g, x, y);
    }
}

static hx_tensor *b_scale(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = v ? IN(c, dt, BS_WIDE, rows(c, 37)) : IN(c, dt, BS_UNIFORM, rows(c, 4), 5);
    float s = v ? -3.0f : 0.5f;
    char sx[64];
    vdesc(c, "%s * %g", shape_str(x, sx, sizeof sx), (double)s);
    return hx_scale(c->g, x, s);
}

static hx_tensor *b_bias_add(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = v ? IN(c, dt, BS_UNIFORM, rows(c, 2), 3, 7) : IN(c, dt, BS_UNIFORM, rows(c, 4), 5);
    hx_tensor *b = v ? IN(c, dt, BS_UNIFORM, 7) : IN(c, dt, BS_UNIFORM, 5);
    char sx[64];
    vdesc(c, "%s + bias", shape_str(x, sx, sizeof sx));
    return hx_bias_add(c->g, x, b);
}

typedef hx_tensor *(*unary_fn)(hx_graph *, hx_tensor *);
static const unary_fn unaries[] = {hx_relu, hx_gelu, hx_sigmoid, hx_tanh, hx_exp, hx_log, hx_sqrt,
                                   hx_softmax, hx_log_softmax, hx_gelu_erf};

/* A unary (arg: index in unaries) on a few shapes, odd sizes included. */
static hx_tensor *b_unary(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    bs_dist d = arg == 5 || arg == 6 ? BS_POSITIVE : arg == 4 ? BS_UNIFORM : BS_WIDE;
    hx_tensor *x;
    switch (v) {
    case 0: x = IN(c, dt, d, rows(c, 4), 5); break;
    case 1: x = IN(c, dt, d, rows(c, 37)); break;
    case 2: x = IN(c, dt, d, rows(c, 3), 129); break;
    case 3: x = IN(c, dt, d, rows(c, 2), 1, 3, 1); break;
    default: x = IN(c, dt, d, rows(c, 2), 3, 17); break;
    }
    char sx[64];
    vdesc(c, "%s", shape_str(x, sx, sizeof sx));
    return x ? unaries[arg](c->g, x) : NULL;
}

static hx_tensor *b_layernorm(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const int64_t n[3] = {8, 1, 33};
    hx_tensor *x = v == 2 ? IN(c, dt, BS_WIDE, rows(c, 2), 3, 33) : IN(c, dt, BS_WIDE, rows(c, 4), n[v]);
    hx_tensor *gamma = make_leaf(c, c->perf, dt, 1, &n[v], BS_UNIFORM, 0);
    hx_tensor *beta = make_leaf(c, c->perf, dt, 1, &n[v], BS_UNIFORM, 0);
    char sx[64];
    vdesc(c, "%s, eps 1e-5", shape_str(x, sx, sizeof sx));
    return hx_layernorm(c->g, x, gamma, beta, 1e-5f);
}

/* Data movement: any dtype (ids stay ids). */
static hx_tensor *mover(bs_ctx *c, hx_dtype dt, int nd, const int64_t *shape)
{
    bool ints = dt == HX_DTYPE_I32 || dt == HX_DTYPE_I64;
    return make_leaf(c, c->perf && !ints, dt, nd, shape, ints ? BS_IDS : BS_UNIFORM, 1000);
}

static hx_tensor *b_reshape(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = v ? mover(c, dt, 3, (int64_t[]){rows(c, 2), 3, 4}) : mover(c, dt, 2, (int64_t[]){rows(c, 4), 6});
    int64_t to[2][3] = {{3, rows(c, 8)}, {-1}};
    char sx[64];
    vdesc(c, "%s -> %s", shape_str(x, sx, sizeof sx), v ? "[-1]" : "[3,8r]");
    return hx_reshape(c->g, x, v ? 1 : 2, to[v]);
}

static hx_tensor *b_permute(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const int perm[4][4] = {{1, 0}, {2, 0, 1}, {3, 1, 0, 2}, {1, 2, 0}};
    static const int nd[4] = {2, 3, 4, 3};
    static const int64_t sh[4][4] = {{4, 6}, {2, 3, 4}, {2, 3, 4, 5}, {5, 1, 3}};
    int64_t s[4];
    memcpy(s, sh[v], sizeof s);
    s[0] *= c->scale;
    hx_tensor *x = mover(c, dt, nd[v], s);
    char sx[64];
    vdesc(c, "%s perm (%d,%d,%d,%d)", shape_str(x, sx, sizeof sx), perm[v][0], perm[v][1],
          nd[v] > 2 ? perm[v][2] : -1, nd[v] > 3 ? perm[v][3] : -1);
    return hx_permute(c->g, x, perm[v]);
}

static hx_tensor *b_concat(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const struct { int n, nd, axis; int64_t s[3][3]; } k[4] = {
        {2, 2, 0, {{2, 5}, {3, 5}}},
        {3, 2, 1, {{4, 2}, {4, 3}, {4, 1}}},
        {2, 3, -1, {{2, 3, 4}, {2, 3, 2}}},
        {2, 3, 1, {{2, 1, 4}, {2, 3, 4}}},
    };
    hx_tensor *x[3];
    for (int i = 0; i < k[v].n; i++) {
        int64_t s[3];
        memcpy(s, k[v].s[i], sizeof s);
        if (k[v].axis != 0) s[0] *= c->scale;
        if (!(x[i] = mover(c, dt, k[v].nd, s))) return NULL;
    }
    char sx[64];
    vdesc(c, "%d parts like %s, axis %d", k[v].n, shape_str(x[1], sx, sizeof sx), k[v].axis);
    return hx_concat(c->g, k[v].n, x, k[v].axis);
}

static hx_tensor *b_slice(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const struct { int nd, axis; int64_t s[3], start, end; } k[4] = {
        {2, 0, {6, 5}, 1, 4}, {2, 1, {4, 7}, 2, 7}, {3, -1, {3, 4, 5}, 0, 1}, {3, 1, {3, 4, 5}, 1, 3},
    };
    int64_t s[3];
    memcpy(s, k[v].s, sizeof s);
    if (k[v].axis != 0) s[0] *= c->scale;
    hx_tensor *x = mover(c, dt, k[v].nd, s);
    char sx[64];
    vdesc(c, "%s axis %d [%lld, %lld)", shape_str(x, sx, sizeof sx), k[v].axis,
          (long long)k[v].start, (long long)k[v].end);
    return hx_slice(c->g, x, k[v].axis, k[v].start, k[v].end);
}

static const struct { int nd, naxes; int64_t s[3]; int axes[2]; bool keep; } reductions[] = {
    {2, 0, {4, 5}, {0}, false},      {2, 1, {4, 5}, {0}, false},  {2, 1, {4, 5}, {1}, true},
    {3, 2, {2, 3, 4}, {0, 2}, false}, {3, 1, {2, 3, 4}, {1}, true}, {3, 1, {3, 1, 5}, {-1}, false},
    {1, 1, {37}, {0}, false},
};

static hx_tensor *b_reduce(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int64_t s[3];
    memcpy(s, reductions[v].s, sizeof s);
    s[0] *= c->scale;
    hx_tensor *x = make_leaf(c, c->perf, dt, reductions[v].nd, s, BS_UNIFORM, 0);
    char sx[64];
    vdesc(c, "%s %s axes %d%s%s", arg ? "mean" : "sum", shape_str(x, sx, sizeof sx),
          reductions[v].naxes ? reductions[v].axes[0] : -99, reductions[v].naxes > 1 ? "+" : "",
          reductions[v].keep ? " keepdims" : "");
    return (arg ? hx_reduce_mean : hx_reduce_sum)(c->g, x, reductions[v].naxes, reductions[v].axes,
                                                  reductions[v].keep);
}

/* v 0: f32 -> dt; 1: dt -> f32; 2: dt -> the other 16-bit float. */
static hx_tensor *b_cast(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_dtype other = dt == HX_DTYPE_F16 ? HX_DTYPE_BF16 : HX_DTYPE_F16;
    hx_dtype from = v == 0 ? HX_DTYPE_F32 : dt, to = v == 0 ? dt : v == 1 ? HX_DTYPE_F32 : other;
    hx_tensor *x = make_leaf(c, c->perf && from <= HX_DTYPE_BF16, from, 2,
                             (int64_t[]){rows(c, 3), 129}, BS_WIDE, 0);
    vdesc(c, "[3,129] %s -> %s", hx_dtype_name(from), hx_dtype_name(to));
    if (v == 2 && dt == HX_DTYPE_F32) {
        c->skip = "f32 has no other 16-bit float";
        return NULL;
    }
    return hx_cast(c->g, x, to);
}

static hx_tensor *b_gather(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int64_t V = v == 2 ? 50 : 7, D = v == 2 ? 33 : 5;
    hx_tensor *table = make_leaf(c, c->perf, dt, 2, (int64_t[]){V, D}, BS_UNIFORM, 0);
    hx_tensor *ids = v == 1 ? IDS(c, HX_DTYPE_I64, V, rows(c, 2), 3) : IDS(c, HX_DTYPE_I32, V, rows(c, 9));
    char st[64], si[64];
    vdesc(c, "table %s, ids %s %s", shape_str(table, st, sizeof st), shape_str(ids, si, sizeof si),
          v == 1 ? "i64" : "i32");
    return hx_gather(c->g, table, ids);
}

static hx_tensor *b_causal_mask(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = v == 0 ? IN(c, dt, BS_UNIFORM, rows(c, 1), 4, 4)
                 : v == 1 ? IN(c, dt, BS_UNIFORM, rows(c, 2), 3, 5, 5)
                 : v == 2 ? IN(c, dt, BS_UNIFORM, rows(c, 3), 1, 1) : IN(c, dt, BS_UNIFORM, 6, 6);
    char sx[64];
    vdesc(c, "%s", shape_str(x, sx, sizeof sx));
    return hx_causal_mask(c->g, x);
}

static hx_tensor *b_cross_entropy(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const int64_t nc[3][2] = {{4, 5}, {3, 7}, {1, 2}};
    int64_t N = rows(c, nc[v][0]), C = nc[v][1];
    hx_tensor *x = IN(c, dt, BS_WIDE, N, C);
    hx_tensor *y = IDS(c, v == 1 ? HX_DTYPE_I64 : HX_DTYPE_I32, C, N);
    char sx[64];
    vdesc(c, "logits %s, labels %s", shape_str(x, sx, sizeof sx), v == 1 ? "i64" : "i32");
    return hx_cross_entropy(c->g, x, y);
}

static hx_tensor *b_bce(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = v ? IN(c, dt, BS_WIDE, rows(c, 37)) : IN(c, dt, BS_WIDE, rows(c, 4), 5);
    hx_tensor *t = v ? IN(c, dt, BS_PROB, rows(c, 37)) : IN(c, dt, BS_PROB, rows(c, 4), 5);
    char sx[64];
    vdesc(c, "%s", shape_str(x, sx, sizeof sx));
    return hx_bce_with_logits(c->g, x, t);
}

static hx_tensor *b_dropout(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const float p[3] = {0.1f, 0.5f, 0.0f};
    hx_tensor *x = v == 1 ? IN(c, dt, BS_UNIFORM, rows(c, 3), 129) : IN(c, dt, BS_UNIFORM, rows(c, 4), 5);
    char sx[64];
    vdesc(c, "%s p %g (training runs)", shape_str(x, sx, sizeof sx), (double)p[v]);
    return hx_dropout(c->g, x, p[v], 7 + (uint64_t)v);
}

/* ---- ops only gradients use ------------------------------------------------------------------- */

/* The graphs below differentiate f32 parameters, seen by the op in dt
 * through a cast, so that the op and its gradient ops run in dt. */
static hx_tensor *in_dt(bs_ctx *c, hx_tensor *p, hx_dtype dt)
{
    return !p || dt == HX_DTYPE_F32 ? p : hx_cast(c->g, p, dt);
}

/* relu, gelus, sigmoid, tanh, softmax, log-softmax backward (arg: unaries index). */
static hx_tensor *b_grad_unary(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = v ? PARAM(c, BS_AWAY, rows(c, 2), 3, 17) : PARAM(c, BS_AWAY, rows(c, 4), 5);
    hx_tensor *xd = in_dt(c, x, dt);
    char sx[64];
    vdesc(c, "d/dx of %s", shape_str(x, sx, sizeof sx));
    return grad_of(c, xd ? unaries[arg](c->g, xd) : NULL, x);
}

/* arg 0: d/dx (layernorm_backward_x), 1: d/dgamma (layernorm_backward_gamma) */
static hx_tensor *b_grad_layernorm(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int64_t n = v ? 33 : 8;
    hx_tensor *x = arg ? IN(c, dt, BS_WIDE, rows(c, 5), n) : PARAM(c, BS_WIDE, rows(c, 5), n);
    hx_tensor *gamma = arg ? PARAM(c, BS_UNIFORM, n) : IN(c, dt, BS_UNIFORM, n);
    hx_tensor *beta = IN(c, dt, BS_UNIFORM, n);
    char sx[64];
    vdesc(c, "d/d%s of %s", arg ? "gamma" : "x", shape_str(x, sx, sizeof sx));
    hx_tensor *y = hx_layernorm(c->g, arg ? x : in_dt(c, x, dt), arg ? in_dt(c, gamma, dt) : gamma,
                                beta, 1e-5f);
    return grad_of(c, y, arg ? gamma : x);
}

/* A broadcast operand's gradient sums over the broadcast axes. */
static hx_tensor *b_grad_sum_to(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = v ? IN(c, dt, BS_UNIFORM, 2, 3, rows(c, 4), 5) : IN(c, dt, BS_UNIFORM, rows(c, 4), 5);
    hx_tensor *b = v ? PARAM(c, BS_UNIFORM, 3, 1, 5) : PARAM(c, BS_UNIFORM, 5);
    char sx[64], sb[64];
    vdesc(c, "d/db of %s + %s", shape_str(x, sx, sizeof sx), shape_str(b, sb, sizeof sb));
    return grad_of(c, hx_add(c->g, x, in_dt(c, b, dt)), b);
}

/* A reduction's gradient broadcasts back. */
static hx_tensor *b_grad_broadcast_to(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int64_t s[3];
    memcpy(s, reductions[v].s, sizeof s);
    s[0] *= c->scale;
    hx_tensor *x = make_leaf(c, true, HX_DTYPE_F32, reductions[v].nd, s, BS_UNIFORM, 0);
    char sx[64];
    vdesc(c, "d/dx of sum %s axes %d%s", shape_str(x, sx, sizeof sx),
          reductions[v].naxes ? reductions[v].axes[0] : -99, reductions[v].naxes > 1 ? "+" : "");
    return grad_of(c, hx_reduce_sum(c->g, in_dt(c, x, dt), reductions[v].naxes, reductions[v].axes,
                                    reductions[v].keep), x);
}

/* slice's gradient in dt: an f32 parameter cast to dt, sliced. */
static hx_tensor *b_grad_slice(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    if (dt == HX_DTYPE_I32 || dt == HX_DTYPE_I64) {
        c->skip = "integers have no gradient";
        return NULL;
    }
    hx_tensor *p = v ? PARAM(c, BS_UNIFORM, rows(c, 3), 4, 5) : PARAM(c, BS_UNIFORM, rows(c, 6), 5);
    hx_tensor *x = in_dt(c, p, dt);
    char sx[64];
    vdesc(c, "d/dx of %s %s, %s", shape_str(p, sx, sizeof sx), v ? "axis 1 [1, 3)" : "axis 1 [2, 4)",
          hx_dtype_name(dt));
    return grad_of(c, hx_slice(c->g, x, 1, v ? 1 : 2, v ? 3 : 4), p);
}

/* gather's gradient: rows of the table summed over repeated ids. */
static hx_tensor *b_grad_scatter_add(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *table = PARAM(c, BS_UNIFORM, 6, v ? 33 : 4);
    hx_tensor *ids = v ? IDS(c, HX_DTYPE_I64, 6, rows(c, 4), 5) : IDS(c, HX_DTYPE_I32, 6, rows(c, 13));
    char si[64];
    vdesc(c, "d/dtable, table [6,%d], ids %s (repeats)", v ? 33 : 4, shape_str(ids, si, sizeof si));
    return grad_of(c, hx_gather(c->g, in_dt(c, table, dt), ids), table);
}

static hx_tensor *b_grad_loss(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int64_t N = rows(c, v ? 3 : 4), C = v ? 7 : 5;
    hx_tensor *x = PARAM(c, BS_WIDE, N, C), *xd = in_dt(c, x, dt);
    hx_tensor *y = arg ? IN(c, dt, BS_PROB, N, C) : IDS(c, v ? HX_DTYPE_I64 : HX_DTYPE_I32, C, N);
    char sx[64];
    vdesc(c, "d/dlogits, logits %s", shape_str(x, sx, sizeof sx));
    return grad_of(c, arg ? hx_bce_with_logits(c->g, xd, y) : hx_cross_entropy(c->g, xd, y), x);
}

/* ---- optimizer updates ---------------------------------------------------------------------------- */

/* arg: 0 SGD, 1 SGD momentum + weight decay, 2 SGD Nesterov, 3 Adam, 4 AdamW,
 * 5 Adagrad, 6 FTRL; the fetched parameter after each training run. */
static hx_tensor *b_update(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    static const hx_optimizer_kind kind[7] = {HX_OPTIMIZER_SGD, HX_OPTIMIZER_SGD, HX_OPTIMIZER_SGD,
                                              HX_OPTIMIZER_ADAM, HX_OPTIMIZER_ADAMW,
                                              HX_OPTIMIZER_ADAGRAD, HX_OPTIMIZER_FTRL};
    static const char *name[7] = {"sgd", "sgd momentum wd", "sgd nesterov", "adam", "adamw",
                                  "adagrad", "ftrl"};
    if (dt != HX_DTYPE_F32) {
        c->skip = "optimizer updates take f32 parameters (an f32 master)";
        return NULL;
    }
    hx_tensor *p = make_leaf(c, true, dt, 1, (int64_t[]){rows(c, v ? 1031 : 37)}, BS_UNIFORM, 0);
    vdesc(c, "%s, [%lld]", name[arg], (long long)rows(c, v ? 1031 : 37));
    hx_tensor *g = grad_of(c, p ? hx_tanh(c->g, p) : NULL, p);
    if (!g) return NULL;
    hx_optimizer_config oc = hx_optimizer_config_default(kind[arg]);
    oc.lr = 0.05;
    if (arg == 1) { oc.momentum = 0.9; oc.weight_decay = 0.01; oc.dampening = 0.1; }
    if (arg == 2) { oc.momentum = 0.9; oc.nesterov = true; }
    if (arg == 3) oc.weight_decay = 0.01;
    if (arg == 5) oc.lr_decay = 0.01;
    if (arg == 6) { oc.l1 = 0.001; oc.l2 = 0.01; }
    return hx_graph_apply_optimizer(c->g, p, &oc) ? NULL : p;
}

/* ---- convolutional networks ------------------------------------------------------------------------ */

static const struct {
    int64_t x[4], w[4];
    hx_conv2d_params p;
} convs[3] = {
    {{2, 3, 7, 6}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
    {{2, 4, 9, 11}, {6, 2, 3, 2}, {{2, 3}, {1, 0}, {1, 2}, 2}},
    {{1, 5, 6, 7}, {5, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 5}}, /* depthwise */
};

static void conv_desc(bs_ctx *c, int v, const char *what)
{
    const hx_conv2d_params *p = &convs[v].p;
    vdesc(c, "%sx [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] stride (%d,%d) pad (%d,%d) "
          "dilation (%d,%d) groups %d", what, (long long)rows(c, convs[v].x[0]),
          (long long)convs[v].x[1], (long long)convs[v].x[2], (long long)convs[v].x[3],
          (long long)convs[v].w[0], (long long)convs[v].w[1], (long long)convs[v].w[2],
          (long long)convs[v].w[3], p->stride[0], p->stride[1], p->padding[0], p->padding[1],
          p->dilation[0], p->dilation[1], p->groups);
}

#define CONV_X(c, v) (int64_t[]){rows(c, convs[v].x[0]), convs[v].x[1], convs[v].x[2], convs[v].x[3]}

static hx_tensor *b_conv2d(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = make_leaf(c, c->perf, dt, 4, CONV_X(c, v), BS_UNIFORM, 0);
    hx_tensor *w = make_leaf(c, c->perf, dt, 4, convs[v].w, BS_UNIFORM, 0);
    conv_desc(c, v, "");
    return hx_conv2d(c->g, x, w, &convs[v].p);
}

/* arg 0: d/dx (conv_gemm_backward_cols, col2im), 1: d/dw (conv_gemm_backward_w) */
static hx_tensor *b_grad_conv2d(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = make_leaf(c, !arg, HX_DTYPE_F32, 4, CONV_X(c, v), BS_UNIFORM, 0);
    hx_tensor *w = make_leaf(c, arg, HX_DTYPE_F32, 4, convs[v].w, BS_UNIFORM, 0);
    conv_desc(c, v, arg ? "d/dw, " : "d/dx, ");
    return grad_of(c, hx_conv2d(c->g, in_dt(c, x, dt), in_dt(c, w, dt), &convs[v].p), arg ? w : x);
}

static const struct { int64_t x[4]; int k[2], s[2], p[2]; } pools[3] = {
    {{2, 3, 6, 7}, {2, 2}, {0, 0}, {0, 0}},
    {{2, 2, 7, 8}, {3, 3}, {2, 2}, {1, 1}},
    {{1, 3, 9, 10}, {2, 3}, {3, 1}, {0, 1}}, /* stride 3 > kernel 2 */
};

/* arg 0: max, 1: average */
static hx_tensor *pool_of(bs_ctx *c, hx_tensor *x, int v, int arg)
{
    char sx[64];
    vdesc(c, "%s %s kernel (%d,%d) stride (%d,%d) pad (%d,%d)", arg ? "avg" : "max",
          shape_str(x, sx, sizeof sx), pools[v].k[0], pools[v].k[1], pools[v].s[0], pools[v].s[1],
          pools[v].p[0], pools[v].p[1]);
    return (arg ? hx_avg_pool2d : hx_max_pool2d)(c->g, x, pools[v].k[0], pools[v].k[1],
                                                 pools[v].s[0], pools[v].s[1], pools[v].p[0],
                                                 pools[v].p[1]);
}

#define POOL_X(c, v) (int64_t[]){rows(c, pools[v].x[0]), pools[v].x[1], pools[v].x[2], pools[v].x[3]}

static hx_tensor *b_pool(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = make_leaf(c, c->perf, dt, 4, POOL_X(c, v), BS_WIDE, 0);
    return x ? pool_of(c, x, v, arg) : NULL;
}

static hx_tensor *b_grad_pool(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    hx_tensor *x = make_leaf(c, true, HX_DTYPE_F32, 4, POOL_X(c, v), BS_WIDE, 0);
    hx_tensor *xd = in_dt(c, x, dt);
    return grad_of(c, xd ? pool_of(c, xd, v, arg) : NULL, x);
}

static const int64_t bn_shapes[2][4] = {{4, 3, 5, 6}, {7, 5, 0, 0}};

/* The case's train flag picks batch or running statistics. */
static hx_tensor *b_batchnorm(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int nd = bn_shapes[v][2] ? 4 : 2;
    int64_t s[4] = {rows(c, bn_shapes[v][0]), bn_shapes[v][1], bn_shapes[v][2], bn_shapes[v][3]};
    hx_tensor *x = make_leaf(c, c->perf, dt, nd, s, BS_WIDE, 0);
    hx_tensor *gamma = make_leaf(c, c->perf, dt, 1, &s[1], BS_POSITIVE, 0);
    hx_tensor *beta = make_leaf(c, c->perf, dt, 1, &s[1], BS_UNIFORM, 0);
    char sx[64];
    vdesc(c, "%s", shape_str(x, sx, sizeof sx));
    return hx_batchnorm(c->g, x, gamma, beta, 0.1f, 1e-5f);
}

/* arg 0: d/dx (batchnorm_backward_x), 1: d/dgamma (batchnorm_backward_gamma) */
static hx_tensor *b_grad_batchnorm(bs_ctx *c, hx_dtype dt, int v, int arg)
{
    int nd = bn_shapes[v][2] ? 4 : 2;
    int64_t s[4] = {rows(c, bn_shapes[v][0]), bn_shapes[v][1], bn_shapes[v][2], bn_shapes[v][3]};
    hx_tensor *x = make_leaf(c, !arg, arg ? dt : HX_DTYPE_F32, nd, s, BS_WIDE, 0);
    hx_tensor *gamma = make_leaf(c, arg, arg ? HX_DTYPE_F32 : dt, 1, &s[1], BS_POSITIVE, 0);
    hx_tensor *beta = make_leaf(c, false, dt, 1, &s[1], BS_UNIFORM, 0);
    char sx[64];
    vdesc(c, "d/d%s of %s", arg ? "gamma" : "x", shape_str(x, sx, sizeof sx));
    hx_tensor *y = hx_batchnorm(c->g, arg ? x : in_dt(c, x, dt), arg ? in_dt(c, gamma, dt) : gamma,
                                beta, 0.1f, 1e-5f);
    return grad_of(c, y, arg ? gamma : x);
}

/* ---- the table ------------------------------------------------------------------------------------- */

const bs_case bs_cases[] = {
    {"matmul", b_matmul, 0, 9, FLOATS, false},
    {"add", b_binary, 0, 8, FLOATS, false},
    {"sub", b_binary, 1, 8, FLOATS, false},
    {"mul", b_binary, 2, 8, FLOATS, false},
    {"div", b_binary, 3, 8, FLOATS, false},
    {"scale", b_scale, 0, 2, FLOATS, false},
    {"bias_add", b_bias_add, 0, 2, FLOATS, false},
    {"relu", b_unary, 0, 5, FLOATS, false},
    {"gelu", b_unary, 1, 5, FLOATS, false},
    {"gelu_erf", b_unary, 9, 5, FLOATS, false},
    {"sigmoid", b_unary, 2, 5, FLOATS, false},
    {"tanh", b_unary, 3, 5, FLOATS, false},
    {"exp", b_unary, 4, 5, FLOATS, false},
    {"log", b_unary, 5, 5, FLOATS, false},
    {"sqrt", b_unary, 6, 5, FLOATS, false},
    {"softmax", b_unary, 7, 5, FLOATS, false},
    {"log_softmax", b_unary, 8, 5, FLOATS, false},
    {"layernorm", b_layernorm, 0, 3, FLOATS, false},
    {"reshape", b_reshape, 0, 2, ANY, false},
    {"permute", b_permute, 0, 4, ANY, false},
    {"concat", b_concat, 0, 4, ANY, false},
    {"slice", b_slice, 0, 4, ANY, false},
    {"reduce_sum", b_reduce, 0, 7, FLOATS, false},
    {"reduce_sum", b_reduce, 1, 7, FLOATS, false}, /* reduce_mean: sum, then scale */
    {"cast", b_cast, 0, 3, FLOATS, false},
    {"gather", b_gather, 0, 3, FLOATS, false},
    {"causal_mask", b_causal_mask, 0, 4, FLOATS, false},
    {"cross_entropy", b_cross_entropy, 0, 3, FLOATS, false},
    {"bce_with_logits", b_bce, 0, 2, FLOATS, false},
    {"dropout", b_dropout, 0, 3, FLOATS, true},
    {"relu_backward", b_grad_unary, 0, 2, FLOATS, false},
    {"gelu_backward", b_grad_unary, 1, 2, FLOATS, false},
    {"gelu_erf_backward", b_grad_unary, 9, 2, FLOATS, false},
    {"sigmoid_backward", b_grad_unary, 2, 2, FLOATS, false},
    {"tanh_backward", b_grad_unary, 3, 2, FLOATS, false},
    {"softmax_backward", b_grad_unary, 7, 2, FLOATS, false},
    {"log_softmax_backward", b_grad_unary, 8, 2, FLOATS, false},
    {"layernorm_backward_x", b_grad_layernorm, 0, 2, FLOATS, false},
    {"layernorm_backward_gamma", b_grad_layernorm, 1, 2, FLOATS, false},
    {"sum_to", b_grad_sum_to, 0, 2, FLOATS, false},
    {"broadcast_to", b_grad_broadcast_to, 0, 7, FLOATS, false},
    {"slice_backward", b_grad_slice, 0, 2, FLOATS, false},
    {"scatter_add", b_grad_scatter_add, 0, 2, FLOATS, false},
    {"cross_entropy_backward", b_grad_loss, 0, 2, FLOATS, false},
    {"bce_with_logits_backward", b_grad_loss, 1, 2, FLOATS, false},
    {"im2col", b_conv2d, 0, 3, FLOATS, false},
    {"conv_gemm", b_conv2d, 0, 3, FLOATS, false},
    {"col2im", b_grad_conv2d, 0, 3, FLOATS, false},
    {"conv_gemm_backward_cols", b_grad_conv2d, 0, 3, FLOATS, false},
    {"conv_gemm_backward_w", b_grad_conv2d, 1, 3, FLOATS, false},
    {"max_pool", b_pool, 0, 3, FLOATS, false},
    {"avg_pool", b_pool, 1, 3, FLOATS, false},
    {"max_pool_backward", b_grad_pool, 0, 3, FLOATS, false},
    {"avg_pool_backward", b_grad_pool, 1, 3, FLOATS, false},
    {"batchnorm", b_batchnorm, 0, 2, FLOATS, true},
    {"batchnorm", b_batchnorm, 0, 2, FLOATS, false},
    {"batchnorm_backward_x", b_grad_batchnorm, 0, 2, FLOATS, true},
    {"batchnorm_backward_x", b_grad_batchnorm, 0, 2, FLOATS, false},
    {"batchnorm_backward_gamma", b_grad_batchnorm, 1, 2, FLOATS, true},
    {"batchnorm_backward_gamma", b_grad_batchnorm, 1, 2, FLOATS, false},
    {"sgd_update", b_update, 0, 2, F32, true},
    {"sgd_update", b_update, 1, 2, F32, true},
    {"sgd_update", b_update, 2, 2, F32, true},
    {"adam_update", b_update, 3, 2, F32, true},
    {"adam_update", b_update, 4, 2, F32, true},
    {"adagrad_update", b_update, 5, 2, F32, true},
    {"ftrl_update", b_update, 6, 2, F32, true},
};
const int bs_n_cases = (int)(sizeof bs_cases / sizeof bs_cases[0]);
