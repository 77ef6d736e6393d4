/* test_half_ops: every float op on f16 and bf16 tensors (storage 16-bit,
 * arithmetic f32).
 *
 * (a) forward: the op on 16-bit inputs against a scalar double reference
 *     computed from the same (16-bit rounded) values. An output is rounded
 *     once from f32, so it must be within u |want| (u = 2^-11 for f16,
 *     2^-8 for bf16) plus f32 noise scaled by the reduction length; ops
 *     built from several nodes (mean, mse) round more than once.
 * (b) gradient: the op's differentiable inputs are f32 parameters cast to
 *     16 bits, loss = sum(f32(y) * R) with R random; every gradient the
 *     16-bit graph gives is compared with a central finite difference of
 *     the same op's f32 graph at the same values (within a few u of the
 *     largest gradient), and every gradient of a 16-bit tensor is 16-bit.
 * Also: dropout's mask and scaling, mixed-dtype errors, dtypes of gradients
 * through casts, a small MLP trained in bf16 on emu next to the same MLP in
 * f32, and bf16 training bitwise equal at 1 and 2 threads. */
#include "hetex.h"
#include "backend_cases.h" /* bs_get / bs_put: host f16 and bf16 values */
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAXL 3
#define S(...) {__VA_ARGS__}

static test_rng rng;
static bool verbose;

static double unit_roundoff(hx_dtype dt) { return dt == HX_DTYPE_F16 ? 0x1p-11 : 0x1p-8; }
static size_t dsize(hx_dtype dt) { return dt == HX_DTYPE_F32 || dt == HX_DTYPE_I32 ? 4 : 2; }

/* ---- cases ------------------------------------------------------------------- */

typedef enum dist { U, W, P, A, PR } dist; /* (-1,1), (-4,4), [0.5,2), +-[0.2,1), [0,1) */

typedef struct lspec {
    int nd;
    int64_t shape[4];
    dist d;
    bool grad; /* differentiated in (b) */
} lspec;

typedef struct hcase hcase;
typedef hx_tensor *(*build_fn)(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg);
/* out: the op's output (row-major) from the leaves' values x[i] and ids. */
typedef void (*ref_fn)(const hcase *c, const double *const *x, const int32_t *ids, double *out);

struct hcase {
    const char *name;
    build_fn build;
    ref_fn ref;
    int arg;
    int n;
    lspec x[MAXL];
    int64_t n_ids, id_hi; /* an i32 input of n_ids ids in [0, id_hi) (0: none) */
    double K;             /* reduction length behind an output (0 with rounds 0: exact) */
    double rounds;        /* 16-bit roundings on the way to an output */
    double gfac;          /* gradient tolerance in u * max|gradient| */
};

static int64_t numel_of(const lspec *l)
{
    int64_t n = 1;
    for (int i = 0; i < l->nd; i++) n *= l->shape[i];
    return n;
}

static double draw(dist d)
{
    switch (d) {
    case U: return test_rng_uniform(&rng, -1, 1);
    case W: return test_rng_uniform(&rng, -4, 4);
    case P: return test_rng_uniform(&rng, 0.5, 2);
    case A: return (test_rng_u64(&rng) & 1 ? 1 : -1) * test_rng_uniform(&rng, 0.2, 1);
    case PR: return test_rng_uniform(&rng, 0, 1);
    }
    return 0;
}

/* ---- builders and references ---------------------------------------------------- */

static const struct { bool ta, tb; } mm[3] = {{false, false}, {true, true}, {false, false}};

static hx_tensor *b_matmul(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    return hx_matmul(g, x[0], x[1], mm[arg].ta, mm[arg].tb);
}

/* arg 0: a (M,K) b (K,N); 1: a (K,M)^T b (N,K)^T; 2: a (B,M,K) b (K,N) shared */
static void r_matmul(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    const lspec *a = &c->x[0], *b = &c->x[1];
    bool ta = mm[c->arg].ta, tb = mm[c->arg].tb;
    int64_t B = a->nd == 3 ? a->shape[0] : 1;
    int64_t M = a->shape[a->nd - (ta ? 1 : 2)], K = a->shape[a->nd - (ta ? 2 : 1)];
    int64_t N = b->shape[tb ? 0 : 1];
    for (int64_t q = 0; q < B; q++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += x[0][q * M * K + (ta ? k * M + i : i * K + k)] * x[1][tb ? j * K + k : k * N + j];
                out[(q * M + i) * N + j] = s;
            }
}

static hx_tensor *b_binary(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    hx_tensor *(*f[4])(hx_graph *, hx_tensor *, hx_tensor *) = {hx_add, hx_sub, hx_mul, hx_div};
    return f[arg](g, x[0], x[1]);
}

/* a (R, C) op b (C) */
static void r_binary(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    int64_t n = numel_of(&c->x[0]), C = c->x[1].shape[0];
    for (int64_t i = 0; i < n; i++) {
        double a = x[0][i], b = x[1][i % C];
        out[i] = c->arg == 0 ? a + b : c->arg == 1 ? a - b : c->arg == 2 ? a * b : a / b;
    }
}

static hx_tensor *b_scale(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    return hx_scale(g, x[0], -1.5f);
}

static void r_scale(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    for (int64_t i = 0; i < numel_of(&c->x[0]); i++) out[i] = -1.5 * x[0][i];
}

static hx_tensor *b_bias(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    return hx_bias_add(g, x[0], x[1]);
}

static hx_tensor *(*const unaries[8])(hx_graph *, hx_tensor *) = {
    hx_relu, hx_gelu, hx_sigmoid, hx_tanh, hx_exp, hx_log, hx_sqrt, hx_gelu_erf};

static hx_tensor *b_unary(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    return unaries[arg](g, x[0]);
}

static double uref(int k, double v)
{
    switch (k) {
    case 0: return v > 0 ? v : 0;
    case 1: return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case 2: return 1 / (1 + exp(-v));
    case 3: return tanh(v);
    case 4: return exp(v);
    case 5: return log(v);
    case 7: return 0.5 * v * erfc(-v / sqrt(2.0));
    default: return sqrt(v);
    }
}

static void r_unary(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    for (int64_t i = 0; i < numel_of(&c->x[0]); i++) out[i] = uref(c->arg, x[0][i]);
}

/* arg 0 softmax, 1 log_softmax, 2 causal mask then softmax */
static hx_tensor *b_softmax(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    if (arg == 2) return hx_softmax(g, hx_causal_mask(g, x[0]));
    return arg ? hx_log_softmax(g, x[0]) : hx_softmax(g, x[0]);
}

static void r_softmax(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    const lspec *l = &c->x[0];
    int64_t N = l->shape[l->nd - 1], rows = numel_of(l) / N;
    for (int64_t r = 0; r < rows; r++) {
        const double *v = x[0] + r * N;
        int64_t lim = c->arg == 2 ? r % N + 1 : N;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < lim; j++) m = fmax(m, v[j]);
        for (int64_t j = 0; j < lim; j++) s += exp(v[j] - m);
        for (int64_t j = 0; j < N; j++)
            out[r * N + j] = j >= lim ? 0 : c->arg == 1 ? v[j] - m - log(s) : exp(v[j] - m) / s;
    }
}

static hx_tensor *b_causal(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    return hx_causal_mask(g, x[0]);
}

static void r_causal(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    int64_t T = c->x[0].shape[c->x[0].nd - 1];
    for (int64_t i = 0; i < numel_of(&c->x[0]); i++)
        out[i] = i % T > i / T % T ? -INFINITY : x[0][i];
}

static hx_tensor *b_layernorm(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    return hx_layernorm(g, x[0], x[1], x[2], 1e-5f);
}

static void r_layernorm(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    int64_t N = c->x[1].shape[0], rows = numel_of(&c->x[0]) / N;
    for (int64_t r = 0; r < rows; r++) {
        const double *v = x[0] + r * N;
        double m = 0, var = 0;
        for (int64_t j = 0; j < N; j++) m += v[j] / N;
        for (int64_t j = 0; j < N; j++) var += (v[j] - m) * (v[j] - m) / N;
        for (int64_t j = 0; j < N; j++)
            out[r * N + j] = (v[j] - m) / sqrt(var + (double)1e-5f) * x[1][j] + x[2][j];
    }
}

/* arg 0: sum over axis 1 of (R, C); 1: sum of all; 2: mean over axis 0 */
static hx_tensor *b_reduce(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    int ax = arg == 2 ? 0 : 1;
    return (arg == 2 ? hx_reduce_mean : hx_reduce_sum)(g, x[0], arg == 1 ? 0 : 1, &ax, false);
}

static void r_reduce(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    int64_t R = c->x[0].shape[0], C = c->x[0].shape[1];
    int64_t n_out = c->arg == 0 ? R : c->arg == 1 ? 1 : C;
    for (int64_t o = 0; o < n_out; o++) out[o] = 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            double v = x[0][i * C + j];
            if (c->arg == 0) out[i] += v;
            else if (c->arg == 1) out[0] += v;
            else out[j] += v / R;
        }
}

/* arg 0 cross-entropy (logits, labels), 1 bce (logits, targets), 2 mse */
static hx_tensor *b_loss(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    if (arg == 0) return hx_cross_entropy(g, x[0], ids);
    return arg == 1 ? hx_bce_with_logits(g, x[0], x[1]) : hx_mse(g, x[0], x[1]);
}

static void r_loss(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    const lspec *l = &c->x[0];
    double s = 0;
    if (c->arg == 0) {
        int64_t N = l->shape[0], C = l->shape[1];
        for (int64_t i = 0; i < N; i++) {
            const double *v = x[0] + i * C;
            double m = -INFINITY, e = 0;
            for (int64_t j = 0; j < C; j++) m = fmax(m, v[j]);
            for (int64_t j = 0; j < C; j++) e += exp(v[j] - m);
            s += m + log(e) - v[ids[i]];
        }
        out[0] = s / N;
        return;
    }
    int64_t n = numel_of(l);
    for (int64_t i = 0; i < n; i++) {
        double v = x[0][i], t = x[1][i];
        s += c->arg == 1 ? fmax(v, 0) - v * t + log1p(exp(-fabs(v))) : (v - t) * (v - t);
    }
    out[0] = s / n;
}

/* Data movement, exact: arg 0 reshape (3,8)->(4,6), 1 permute (2,3,4) by
 * (2,0,1), 2 concat (2,3),(2,5) on axis 1, 3 slice (6,5) axis 0 [1,4), 4
 * gather rows of (7,5) by 9 ids. */
static hx_tensor *b_move(hx_graph *g, hx_tensor *const *x, hx_tensor *ids, int arg)
{
    static const int64_t to[2] = {4, 6};
    static const int perm[3] = {2, 0, 1};
    switch (arg) {
    case 0: return hx_reshape(g, x[0], 2, to);
    case 1: return hx_permute(g, x[0], perm);
    case 2: return hx_concat(g, 2, x, 1);
    case 3: return hx_slice(g, x[0], 0, 1, 4);
    default: return hx_gather(g, x[0], ids);
    }
}

static void r_move(const hcase *c, const double *const *x, const int32_t *ids, double *out)
{
    int64_t o = 0;
    switch (c->arg) {
    case 0:
        for (int64_t i = 0; i < 24; i++) out[i] = x[0][i];
        break;
    case 1: /* y[k][i][j] = x[i][j][k], x (2,3,4) */
        for (int64_t k = 0; k < 4; k++)
            for (int64_t i = 0; i < 2; i++)
                for (int64_t j = 0; j < 3; j++) out[o++] = x[0][(i * 3 + j) * 4 + k];
        break;
    case 2:
        for (int64_t r = 0; r < 2; r++) {
            for (int64_t j = 0; j < 3; j++) out[o++] = x[0][r * 3 + j];
            for (int64_t j = 0; j < 5; j++) out[o++] = x[1][r * 5 + j];
        }
        break;
    case 3:
        for (int64_t i = 5; i < 20; i++) out[o++] = x[0][i];
        break;
    default:
        for (int64_t i = 0; i < c->n_ids; i++)
            for (int64_t j = 0; j < 5; j++) out[o++] = x[0][ids[i] * 5 + j];
    }
}

#define L1(...) 1, {__VA_ARGS__}
static const hcase cases[] = {
    {"matmul (5,16)x(16,6)", b_matmul, r_matmul, 0, 2, {{2, S(5, 16), U, true}, {2, S(16, 6), U, true}}, 0, 0, 16, 1, 16},
    {"matmul (16,5)^T x (6,16)^T", b_matmul, r_matmul, 1, 2, {{2, S(16, 5), U, true}, {2, S(6, 16), U, true}}, 0, 0, 16, 1, 16},
    {"matmul (2,4,8)x(8,3) shared b", b_matmul, r_matmul, 2, 2, {{3, S(2, 4, 8), U, true}, {2, S(8, 3), U, true}}, 0, 0, 8, 1, 16},
    {"add (4,5)+(5)", b_binary, r_binary, 0, 2, {{2, S(4, 5), U, true}, {1, S(5), U, true}}, 0, 0, 1, 1, 8},
    {"sub (4,5)-(5)", b_binary, r_binary, 1, 2, {{2, S(4, 5), U, true}, {1, S(5), U, true}}, 0, 0, 1, 1, 8},
    {"mul (4,5)*(5)", b_binary, r_binary, 2, 2, {{2, S(4, 5), U, true}, {1, S(5), U, true}}, 0, 0, 1, 1, 8},
    {"div (4,5)/(5)", b_binary, r_binary, 3, 2, {{2, S(4, 5), U, true}, {1, S(5), P, true}}, 0, 0, 1, 1, 8},
    {"scale (4,5)*-1.5", b_scale, r_scale, 0, L1({2, S(4, 5), W, true}), 0, 0, 1, 1, 4},
    {"bias_add (3,7)+(7)", b_bias, r_binary, 0, 2, {{2, S(3, 7), U, true}, {1, S(7), U, true}}, 0, 0, 1, 1, 8},
    {"relu (6,7)", b_unary, r_unary, 0, L1({2, S(6, 7), A, true}), 0, 0, 1, 1, 4},
    {"gelu (6,7)", b_unary, r_unary, 1, L1({2, S(6, 7), W, true}), 0, 0, 1, 1, 8},
    {"gelu_erf (6,7)", b_unary, r_unary, 7, L1({2, S(6, 7), W, true}), 0, 0, 1, 1, 8},
    {"sigmoid (6,7)", b_unary, r_unary, 2, L1({2, S(6, 7), W, true}), 0, 0, 1, 1, 8},
    {"tanh (6,7)", b_unary, r_unary, 3, L1({2, S(6, 7), W, true}), 0, 0, 1, 1, 8},
    {"exp (6,7)", b_unary, r_unary, 4, L1({2, S(6, 7), U, true}), 0, 0, 1, 1, 8},
    {"log (6,7)", b_unary, r_unary, 5, L1({2, S(6, 7), P, true}), 0, 0, 1, 1, 8},
    {"sqrt (6,7)", b_unary, r_unary, 6, L1({2, S(6, 7), P, true}), 0, 0, 1, 1, 8},
    {"softmax (4,33)", b_softmax, r_softmax, 0, L1({2, S(4, 33), W, true}), 0, 0, 33, 1, 16},
    {"log_softmax (4,33)", b_softmax, r_softmax, 1, L1({2, S(4, 33), W, true}), 0, 0, 33, 1, 16},
    {"causal_mask (2,5,5)", b_causal, r_causal, 0, L1({3, S(2, 5, 5), W, false}), 0, 0, 0, 0, 0},
    {"causal_mask+softmax (2,5,5)", b_softmax, r_softmax, 2, L1({3, S(2, 5, 5), W, true}), 0, 0, 5, 1, 16},
    {"layernorm (4,24)", b_layernorm, r_layernorm, 0, 3,
     {{2, S(4, 24), W, true}, {1, S(24), U, true}, {1, S(24), U, true}}, 0, 0, 24, 1, 24},
    {"reduce_sum (6,9) axis 1", b_reduce, r_reduce, 0, L1({2, S(6, 9), U, true}), 0, 0, 9, 1, 8},
    {"reduce_sum (6,9) all", b_reduce, r_reduce, 1, L1({2, S(6, 9), U, true}), 0, 0, 54, 1, 8},
    {"reduce_mean (6,9) axis 0", b_reduce, r_reduce, 2, L1({2, S(6, 9), U, true}), 0, 0, 6, 2, 8},
    {"cross_entropy (6,7)", b_loss, r_loss, 0, L1({2, S(6, 7), W, true}), 6, 7, 42, 1, 16},
    {"bce_with_logits (4,5)", b_loss, r_loss, 1, 2, {{2, S(4, 5), W, true}, {2, S(4, 5), PR, true}}, 0, 0, 20, 1, 16},
    {"mse (4,5)", b_loss, r_loss, 2, 2, {{2, S(4, 5), U, true}, {2, S(4, 5), U, true}}, 0, 0, 20, 6, 16},
    {"reshape (3,8)->(4,6)", b_move, r_move, 0, L1({2, S(3, 8), U, true}), 0, 0, 0, 0, 4},
    {"permute (2,3,4) by (2,0,1)", b_move, r_move, 1, L1({3, S(2, 3, 4), U, true}), 0, 0, 0, 0, 4},
    {"concat (2,3),(2,5) axis 1", b_move, r_move, 2, 2, {{2, S(2, 3), U, true}, {2, S(2, 5), U, true}}, 0, 0, 0, 0, 4},
    {"slice (6,5) axis 0 [1,4)", b_move, r_move, 3, L1({2, S(6, 5), U, true}), 0, 0, 0, 0, 4},
    {"gather (7,5) by 9 ids", b_move, r_move, 4, L1({2, S(7, 5), U, true}), 9, 7, 0, 0, 8},
};
static const int n_cases = (int)(sizeof cases / sizeof cases[0]);

/* ---- the harness --------------------------------------------------------------------- */

typedef struct data {
    double *q[MAXL]; /* leaf values, rounded to the case's 16-bit dtype */
    int32_t ids[16];
} data;

static void data_make(const hcase *c, hx_dtype dt, data *d)
{
    for (int i = 0; i < c->n; i++) {
        int64_t n = numel_of(&c->x[i]);
        d->q[i] = malloc(sizeof(double) * n);
        uint16_t h;
        for (int64_t k = 0; k < n; k++) {
            bs_put(&h, dt, 0, draw(c->x[i].d));
            d->q[i][k] = bs_get(&h, dt, 0);
        }
    }
    for (int64_t k = 0; k < c->n_ids; k++) /* every row at least once where it can be */
        d->ids[k] = (int32_t)(k < c->id_hi ? k : (int64_t)(test_rng_u64(&rng) % (uint64_t)c->id_hi));
}

static void data_free(const hcase *c, data *d)
{
    for (int i = 0; i < c->n; i++) free(d->q[i]);
}

/* Host bytes of leaf i in dtype dt. */
static void *leaf_bytes(const hcase *c, const data *d, int i, hx_dtype dt)
{
    int64_t n = numel_of(&c->x[i]);
    void *p = malloc(dsize(dt) * n);
    for (int64_t k = 0; k < n; k++) bs_put(p, dt, k, d->q[i][k]);
    return p;
}

static hx_session *open_session(hx_graph *g, hx_accelerator acc, int threads, const char *what)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = threads;
    cfg.accelerator = acc;
    return test_session_with(g, &cfg, what);
}

static hx_tensor *ids_leaf(hx_graph *g, const hcase *c, const data *d, bool input)
{
    if (!c->n_ids) return NULL;
    int64_t shape[1] = {c->n_ids};
    return input ? hx_graph_input(g, "ids", HX_DTYPE_I32, 1, shape)
                 : hx_graph_constant(g, "ids", HX_DTYPE_I32, 1, shape, d->ids);
}

/* (a) forward in dt on the CPU backend. */
static void check_forward(const hcase *c, hx_dtype dt, const data *d)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s forward", c->name, hx_dtype_name(dt));
    hx_graph *g = hx_graph_create();
    hx_tensor *x[MAXL];
    hx_feed feeds[MAXL + 1];
    void *bytes[MAXL] = {0};
    for (int i = 0; i < c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        x[i] = hx_graph_input(g, name, dt, c->x[i].nd, c->x[i].shape);
        bytes[i] = leaf_bytes(c, d, i, dt);
        feeds[i] = (hx_feed){NULL, x[i], bytes[i], dsize(dt) * numel_of(&c->x[i])};
    }
    hx_tensor *ids = ids_leaf(g, c, d, true);
    int nf = c->n;
    if (ids) feeds[nf++] = (hx_feed){NULL, ids, d->ids, sizeof(int32_t) * c->n_ids};
    hx_tensor *y = c->build(g, x, ids, c->arg);
    CHECK(y != NULL, "%s: building: %s", what, hx_last_error());
    hx_session *s = NULL;
    int64_t n = y ? hx_tensor_numel(y) : 0;
    void *got = malloc(dsize(dt) * (n ? n : 1));
    double *want = malloc(sizeof(double) * (n ? n : 1));
    if (!y) goto out;
    CHECK(hx_tensor_dtype(y) == dt, "%s: output dtype %s", what, hx_dtype_name(hx_tensor_dtype(y)));
    s = open_session(g, HX_ACCELERATOR_NONE, 1, what);
    if (!s) goto out;
    hx_fetch f = {NULL, y, got, dsize(dt) * n};
    hx_status st = hx_session_run(s, feeds, nf, &f, 1, 0);
    CHECK(st == HX_OK, "%s: run: %s", what, hx_last_error());
    if (st) goto out;
    c->ref(c, (const double *const *)d->q, d->ids, want);
    double u = unit_roundoff(dt), mag = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i])) mag = fmax(mag, fabs(want[i]));
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        double gv = bs_get(got, dt, i), w = want[i];
        /* one rounding: u |w|; f32 noise: K 2^-10 u mag; f16 below 2^-14: 2^-25 */
        double tol = u * (c->rounds * fabs(w) + c->K * 0x1p-10 * mag) +
                     (c->rounds && dt == HX_DTYPE_F16 ? 0x1p-25 : 0);
        bool ok = isinf(w) ? gv == w : fabs(gv - w) <= tol;
        if (!isinf(w) && tol > 0) worst = fmax(worst, fabs(gv - w) / tol);
        if (!ok && bad < 0) bad = i;
    }
    CHECK(bad < 0, "%s: element %lld: got %.9g want %.9g (|diff| %.3g, u = %.3g)", what,
          (long long)bad, bad < 0 ? 0 : bs_get(got, dt, bad), bad < 0 ? 0 : want[bad],
          bad < 0 ? 0 : fabs(bs_get(got, dt, bad) - want[bad]), u);
    if (verbose) printf("%-44s worst error %.2f of the tolerance\n", what, worst);
out:
    hx_session_free(s);
    hx_graph_free(g);
    for (int i = 0; i < c->n; i++) free(bytes[i]);
    free(got);
    free(want);
}

/* The f32 graph of the case with leaves as inputs: y for given leaf values. */
typedef struct f32_eval {
    hx_graph *g;
    hx_session *s;
    hx_tensor *x[MAXL], *ids, *y;
    float *v[MAXL];
    float *yv;
    int64_t ny;
} f32_eval;

static bool f32_open(f32_eval *e, const hcase *c, const data *d)
{
    memset(e, 0, sizeof *e);
    e->g = hx_graph_create();
    for (int i = 0; i < c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        e->x[i] = hx_graph_input(e->g, name, HX_DTYPE_F32, c->x[i].nd, c->x[i].shape);
        e->v[i] = malloc(sizeof(float) * numel_of(&c->x[i]));
        for (int64_t k = 0; k < numel_of(&c->x[i]); k++) e->v[i][k] = (float)d->q[i][k];
    }
    e->ids = ids_leaf(e->g, c, d, false);
    e->y = c->build(e->g, e->x, e->ids, c->arg);
    CHECK(e->y != NULL, "%s f32: building: %s", c->name, hx_last_error());
    if (!e->y) return false;
    e->ny = hx_tensor_numel(e->y);
    e->yv = malloc(sizeof(float) * e->ny);
    e->s = open_session(e->g, HX_ACCELERATOR_NONE, 1, c->name);
    return e->s != NULL;
}

/* sum(y * R) in double for the current leaf values. */
static bool f32_loss(f32_eval *e, const hcase *c, const float *R, double *loss)
{
    hx_feed f[MAXL];
    for (int i = 0; i < c->n; i++)
        f[i] = (hx_feed){NULL, e->x[i], e->v[i], sizeof(float) * numel_of(&c->x[i])};
    hx_fetch out = {NULL, e->y, e->yv, sizeof(float) * e->ny};
    if (hx_session_run(e->s, f, c->n, &out, 1, 0)) return false;
    *loss = 0;
    for (int64_t k = 0; k < e->ny; k++) *loss += (double)e->yv[k] * R[k];
    return true;
}

static void f32_close(f32_eval *e, const hcase *c)
{
    hx_session_free(e->s);
    hx_graph_free(e->g);
    for (int i = 0; i < c->n; i++) free(e->v[i]);
    free(e->yv);
}

/* (b) gradients of the dt graph against finite differences of the f32 one. */
static void check_grad(const hcase *c, hx_dtype dt, const data *d)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s gradient", c->name, hx_dtype_name(dt));
    hx_graph *g = hx_graph_create();
    hx_tensor *p[MAXL] = {0}, *x[MAXL], *gr[MAXL] = {0};
    void *bytes[MAXL] = {0};
    float *an[MAXL] = {0}, *R = NULL;
    hx_session *s = NULL;
    f32_eval e = {0};
    for (int i = 0; i < c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        if (c->x[i].grad) {
            p[i] = hx_graph_param(g, name, HX_DTYPE_F32, c->x[i].nd, c->x[i].shape, hx_init_zeros());
            x[i] = hx_cast(g, p[i], dt);
        } else {
            bytes[i] = leaf_bytes(c, d, i, dt);
            x[i] = hx_graph_constant(g, name, dt, c->x[i].nd, c->x[i].shape, bytes[i]);
        }
    }
    hx_tensor *y = c->build(g, x, ids_leaf(g, c, d, false), c->arg);
    CHECK(y != NULL, "%s: building: %s", what, hx_last_error());
    if (!y) goto out;
    int ynd = hx_tensor_ndim(y);
    int64_t ysh[HX_MAX_DIMS], ny = hx_tensor_numel(y);
    for (int k = 0; k < ynd; k++) ysh[k] = hx_tensor_dim(y, k);
    R = malloc(sizeof(float) * ny);
    test_fill_uniform(&rng, R, ny, -1, 1);
    hx_tensor *prod = hx_mul(g, hx_cast(g, y, HX_DTYPE_F32), hx_graph_constant(g, "R", HX_DTYPE_F32, ynd, ysh, R));
    hx_tensor *loss = ynd == 0 ? prod : hx_reduce_sum(g, prod, 0, NULL, false);
    hx_status st = loss ? hx_graph_backward(g, loss) : HX_ERR_INTERNAL;
    CHECK(st == HX_OK, "%s: backward: %s", what, hx_last_error());
    if (st) goto out;
    hx_fetch fetch[MAXL];
    int nf = 0;
    for (int i = 0; i < c->n; i++) {
        if (!p[i]) continue;
        hx_tensor *gx = hx_tensor_grad(x[i]);
        CHECK(gx && hx_tensor_dtype(gx) == dt, "%s: the gradient of the %s input %d is %s", what,
              hx_dtype_name(dt), i, gx ? hx_dtype_name(hx_tensor_dtype(gx)) : "missing");
        gr[i] = hx_tensor_grad(p[i]);
        CHECK(gr[i] && hx_tensor_dtype(gr[i]) == HX_DTYPE_F32, "%s: no f32 gradient of x%d", what, i);
        if (!gr[i]) goto out;
        an[i] = malloc(sizeof(float) * numel_of(&c->x[i]));
        fetch[nf++] = (hx_fetch){NULL, gr[i], an[i], sizeof(float) * numel_of(&c->x[i])};
    }
    s = open_session(g, HX_ACCELERATOR_NONE, 1, what);
    if (!s) goto out;
    for (int i = 0; i < c->n; i++) {
        if (!p[i]) continue;
        float *v = malloc(sizeof(float) * numel_of(&c->x[i]));
        for (int64_t k = 0; k < numel_of(&c->x[i]); k++) v[k] = (float)d->q[i][k];
        st = hx_session_write(s, p[i], v, sizeof(float) * numel_of(&c->x[i]));
        free(v);
        CHECK(st == HX_OK, "%s: write x%d: %s", what, i, hx_last_error());
    }
    st = hx_session_run(s, NULL, 0, fetch, nf, 0);
    CHECK(st == HX_OK, "%s: run: %s", what, hx_last_error());
    if (st || !f32_open(&e, c, d)) goto out;
    double u = unit_roundoff(dt);
    for (int i = 0; i < c->n; i++) {
        if (!p[i]) continue;
        int64_t m = numel_of(&c->x[i]);
        double *fd = malloc(sizeof(double) * m), mag = 0, worst = 0;
        bool ok = true;
        for (int64_t k = 0; k < m && ok; k++) {
            float orig = e.v[i][k];
            double h = 1e-2 * fmax(1.0, fabs(orig)), l[2];
            float pv[2] = {(float)(orig + h), (float)(orig - h)};
            for (int sg = 0; sg < 2 && ok; sg++) {
                e.v[i][k] = pv[sg];
                ok = f32_loss(&e, c, R, &l[sg]);
            }
            e.v[i][k] = orig;
            fd[k] = (l[0] - l[1]) / ((double)pv[0] - pv[1]);
            mag = fmax(mag, fabs(fd[k]));
        }
        CHECK(ok, "%s: f32 run: %s", what, hx_last_error());
        int64_t bad = -1;
        for (int64_t k = 0; k < m && ok; k++) {
            /* 16-bit roundings of values and gradients: gfac u of the largest
             * gradient; the finite difference itself: 1e-4 (1 + |fd|) */
            double tol = c->gfac * u * mag + 1e-4 * (1 + fabs(fd[k]));
            double err = fabs(an[i][k] - fd[k]);
            worst = fmax(worst, err / tol);
            if (err > tol && bad < 0) bad = k;
        }
        CHECK(bad < 0, "%s: d loss / d x%d element %lld: %s gradient %.7g, f32 finite "
              "difference %.7g (largest %.3g, u = %.3g)", what, i, (long long)bad,
              hx_dtype_name(dt), bad < 0 ? 0 : an[i][bad], bad < 0 ? 0 : fd[bad], mag, u);
        if (verbose) printf("%-44s x%d worst error %.2f of the tolerance\n", what, i, worst);
        free(fd);
    }
out:
    f32_close(&e, c);
    hx_session_free(s);
    hx_graph_free(g);
    for (int i = 0; i < c->n; i++) {
        free(bytes[i]);
        free(an[i]);
    }
    free(R);
}

static void test_ops(void)
{
    static const hx_dtype dts[2] = {HX_DTYPE_F16, HX_DTYPE_BF16};
    for (int k = 0; k < n_cases; k++)
        for (int t = 0; t < 2; t++) {
            const hcase *c = &cases[k];
            data d;
            data_make(c, dts[t], &d);
            check_forward(c, dts[t], &d);
            bool grad = false;
            for (int i = 0; i < c->n; i++) grad |= c->x[i].grad;
            if (grad) check_grad(c, dts[t], &d);
            data_free(c, &d);
        }
}

/* ---- dropout --------------------------------------------------------------------------- */

/* The 16-bit mask is the f32 graph's, and kept values are the f32 values
 * rounded; the gradient is R / (1 - p) where kept, 0 elsewhere. */
static void test_dropout(hx_dtype dt)
{
    enum { N = 8, D = 64 };
    const float p = 0.25f;
    int64_t shape[2] = {N, D};
    float xv[N * D], R[N * D], y32[N * D], grad[N * D];
    uint16_t xh[N * D], yh[N * D];
    for (int i = 0; i < N * D; i++) {
        bs_put(xh, dt, i, test_rng_uniform(&rng, -1, 1));
        xv[i] = (float)bs_get(xh, dt, i);
    }
    test_fill_uniform(&rng, R, N * D, -1, 1);

    hx_graph *g32 = hx_graph_create();
    hx_tensor *x32 = hx_graph_input(g32, "x", HX_DTYPE_F32, 2, shape);
    hx_tensor *d32 = hx_dropout(g32, x32, p, 11);
    hx_graph *g = hx_graph_create();
    hx_tensor *w = hx_graph_param(g, "x", HX_DTYPE_F32, 2, shape, hx_init_zeros());
    hx_tensor *dh = hx_dropout(g, hx_cast(g, w, dt), p, 11);
    hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, hx_cast(g, dh, HX_DTYPE_F32),
                                               hx_graph_constant(g, "R", HX_DTYPE_F32, 2, shape, R)),
                                    0, NULL, false);
    CHECK(d32 && dh && loss && hx_graph_backward(g, loss) == HX_OK, "dropout %s: graph: %s",
          hx_dtype_name(dt), hx_last_error());
    hx_session *s32 = open_session(g32, HX_ACCELERATOR_NONE, 1, "dropout f32");
    hx_session *s = open_session(g, HX_ACCELERATOR_NONE, 1, "dropout 16-bit");
    hx_feed f = {NULL, x32, xv, sizeof xv};
    hx_fetch f32 = {NULL, d32, y32, sizeof y32};
    hx_fetch fh[2] = {{NULL, dh, yh, sizeof yh}, {NULL, hx_tensor_grad(w), grad, sizeof grad}};
    bool ok = s32 && s && hx_session_write(s, w, xv, sizeof xv) == HX_OK &&
              hx_session_run(s32, &f, 1, &f32, 1, HX_RUN_TRAIN) == HX_OK &&
              hx_session_run(s, NULL, 0, fh, 2, HX_RUN_TRAIN) == HX_OK;
    CHECK(ok, "dropout %s: runs: %s", hx_dtype_name(dt), hx_last_error());
    int kept = 0, bad_y = -1, bad_g = -1;
    double u = unit_roundoff(dt), scale = 1.0 / (1 - p);
    for (int i = 0; ok && i < N * D; i++) {
        uint16_t want;
        bs_put(&want, dt, 0, y32[i]);
        if (yh[i] != want && bad_y < 0) bad_y = i;
        kept += y32[i] != 0;
        double gw = y32[i] != 0 ? R[i] * scale : 0;
        if (fabs(grad[i] - gw) > 2 * u * fabs(gw) && bad_g < 0) bad_g = i;
    }
    CHECK(bad_y < 0, "dropout %s: element %d: %g, the f32 graph's %g rounded is %g",
          hx_dtype_name(dt), bad_y, bad_y < 0 ? 0 : bs_get(yh, dt, bad_y),
          bad_y < 0 ? 0 : y32[bad_y], bad_y < 0 ? 0 : (double)(float)y32[bad_y]);
    CHECK(bad_g < 0, "dropout %s: gradient element %d: %g, want %g", hx_dtype_name(dt), bad_g,
          bad_g < 0 ? 0 : grad[bad_g], bad_g < 0 ? 0 : (y32[bad_g] != 0 ? R[bad_g] * scale : 0));
    CHECK(!ok || (kept > 0.65 * N * D && kept < 0.85 * N * D), "dropout %s: kept %d of %d at p %g",
          hx_dtype_name(dt), kept, N * D, (double)p);
    hx_session_free(s32);
    hx_session_free(s);
    hx_graph_free(g32);
    hx_graph_free(g);
}

/* ---- dtype rules ------------------------------------------------------------------------- */

static void expect_refused(hx_tensor *y, const char *what, const char *n1, const char *n2)
{
    const char *m = hx_last_error();
    CHECK(y == NULL, "%s: mixed dtypes were accepted", what);
    CHECK(strstr(m, n1) && (!n2 || strstr(m, n2)), "%s: the message does not name '%s' and '%s': %s",
          what, n1, n2 ? n2 : "", m);
}

static void test_mixed_dtypes(void)
{
    hx_graph *g = hx_graph_create();
    int64_t s45[2] = {4, 5}, s54[2] = {5, 4}, s5[1] = {5};
    hx_tensor *a32 = hx_graph_input(g, "a32", HX_DTYPE_F32, 2, s45);
    hx_tensor *b16 = hx_graph_input(g, "b16", HX_DTYPE_BF16, 2, s45);
    hx_tensor *h16 = hx_graph_input(g, "h16", HX_DTYPE_F16, 2, s45);
    hx_tensor *m16 = hx_graph_input(g, "m16", HX_DTYPE_BF16, 2, s54);
    hx_tensor *v32 = hx_graph_input(g, "v32", HX_DTYPE_F32, 1, s5);
    hx_tensor *v16 = hx_graph_input(g, "v16", HX_DTYPE_BF16, 1, s5);
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I32, 2, s45);
    expect_refused(hx_add(g, a32, b16), "add f32 + bf16", "a32", "b16");
    expect_refused(hx_sub(g, b16, h16), "sub bf16 - f16", "b16", "h16");
    expect_refused(hx_mul(g, h16, a32), "mul f16 * f32", "h16", "a32");
    expect_refused(hx_div(g, a32, b16), "div f32 / bf16", "a32", "b16");
    CHECK(strstr(hx_last_error(), "hx_cast") != NULL, "the message does not say to hx_cast: %s",
          hx_last_error());
    expect_refused(hx_matmul(g, a32, m16, false, false), "matmul f32 x bf16", "a32", "m16");
    expect_refused(hx_bias_add(g, b16, v32), "bias_add bf16 + f32", "b16", "v32");
    expect_refused(hx_layernorm(g, a32, v32, v16, 1e-5f), "layernorm beta bf16", "a32", "v16");
    expect_refused(hx_bce_with_logits(g, a32, b16), "bce f32 vs bf16", "a32", "b16");
    expect_refused(hx_mse(g, b16, h16), "mse bf16 vs f16", "b16", "h16");
    expect_refused(hx_relu(g, ids), "relu of i32", "ids", NULL);
    CHECK(strstr(hx_last_error(), "f16") != NULL, "the message does not list the float dtypes: %s",
          hx_last_error());
    /* the graph is unchanged and takes 16-bit ops of one dtype */
    hx_tensor *y = hx_bias_add(g, hx_add(g, b16, b16), v16);
    CHECK(y && hx_tensor_dtype(y) == HX_DTYPE_BF16, "bf16 ops after refusals: %s", hx_last_error());
    hx_tensor *l = hx_cross_entropy(g, hx_matmul(g, h16, hx_cast(g, m16, HX_DTYPE_F16), false, false),
                                    hx_graph_input(g, "lab", HX_DTYPE_I32, 1, (int64_t[]){4}));
    CHECK(l && hx_tensor_dtype(l) == HX_DTYPE_F16, "an f16 loss of f16 logits: %s", hx_last_error());
    hx_graph_free(g);
}

/* Gradients through casts have their tensor's dtype; a 16-bit tensor read
 * three times gets its gradients summed (in f32, rounded once). */
static void test_cast_chain(void)
{
    enum { N = 24 };
    int64_t shape[1] = {N};
    float pv[N], R[N], grad[N];
    uint16_t ah[N];
    for (int i = 0; i < N; i++) {
        bs_put(ah, HX_DTYPE_F16, i, test_rng_uniform(&rng, -1, 1));
        pv[i] = (float)bs_get(ah, HX_DTYPE_F16, i);
    }
    test_fill_uniform(&rng, R, N, -1, 1);
    hx_graph *g = hx_graph_create();
    hx_tensor *p = hx_graph_param(g, "p", HX_DTYPE_F32, 1, shape, hx_init_zeros());
    hx_tensor *a = hx_cast(g, p, HX_DTYPE_F16), *b = hx_cast(g, a, HX_DTYPE_BF16);
    hx_tensor *z = hx_add(g, hx_add(g, hx_mul(g, a, a), a), hx_exp(g, a));
    hx_tensor *y = hx_add(g, hx_cast(g, z, HX_DTYPE_F32), hx_cast(g, hx_tanh(g, b), HX_DTYPE_F32));
    hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, y, hx_graph_constant(g, "R", HX_DTYPE_F32, 1, shape, R)),
                                    0, NULL, false);
    hx_status st = loss ? hx_graph_backward(g, loss) : HX_ERR_INTERNAL;
    CHECK(st == HX_OK, "cast chain: %s", hx_last_error());
    if (st) {
        hx_graph_free(g);
        return;
    }
    hx_tensor *ga = hx_tensor_grad(a), *gb = hx_tensor_grad(b), *gp = hx_tensor_grad(p);
    CHECK(ga && hx_tensor_dtype(ga) == HX_DTYPE_F16, "d/da of an f16 tensor is %s",
          ga ? hx_dtype_name(hx_tensor_dtype(ga)) : "missing");
    CHECK(gb && hx_tensor_dtype(gb) == HX_DTYPE_BF16, "d/db of a bf16 tensor is %s",
          gb ? hx_dtype_name(hx_tensor_dtype(gb)) : "missing");
    CHECK(gp && hx_tensor_dtype(gp) == HX_DTYPE_F32, "d/dp of the f32 parameter is %s",
          gp ? hx_dtype_name(hx_tensor_dtype(gp)) : "missing");
    hx_session *s = open_session(g, HX_ACCELERATOR_AUTO, 1, "cast chain");
    hx_fetch f = {NULL, gp, grad, sizeof grad};
    bool ok = s && hx_session_write(s, p, pv, sizeof pv) == HX_OK &&
              hx_session_run(s, NULL, 0, &f, 1, 0) == HX_OK;
    CHECK(ok, "cast chain: run: %s", hx_last_error());
    double mag = 0, want[N];
    for (int i = 0; i < N; i++) {
        uint16_t bh;
        bs_put(&bh, HX_DTYPE_BF16, 0, pv[i]);
        double t = tanh(bs_get(&bh, HX_DTYPE_BF16, 0));
        want[i] = R[i] * (2 * pv[i] + 1 + exp(pv[i])) + R[i] * (1 - t * t);
        mag = fmax(mag, fabs(want[i]));
    }
    int bad = -1;
    for (int i = 0; ok && i < N; i++) /* bf16 path's rounding dominates: 8 bf16 u */
        if (fabs(grad[i] - want[i]) > 8 * 0x1p-8 * mag && bad < 0) bad = i;
    CHECK(bad < 0, "cast chain: d/dp element %d: %.7g, want %.7g", bad, bad < 0 ? 0 : grad[bad],
          bad < 0 ? 0 : want[bad]);
    hx_session_free(s);
    hx_graph_free(g);
}

/* ---- training ----------------------------------------------------------------------------- */

typedef struct mlp_cfg {
    int64_t N, D, H, C;
    int steps, threads;
    hx_dtype dt; /* activations and the params' working copies; masters f32 */
} mlp_cfg;

/* Trains gelu(x W1 + b1) W2 + b2 with Adam on emu; the logits go to the
 * loss in f32. losses[step]; params: W1 and W2 after training (f32). */
static bool mlp_train(const mlp_cfg *m, const float *X, const int32_t *lab, double *losses,
                      float *w1_out, float *w2_out, int *device_ops)
{
    hx_graph *g = hx_graph_create();
    int64_t xs[2] = {m->N, m->D}, ls[1] = {m->N}, w1s[2] = {m->D, m->H}, w2s[2] = {m->H, m->C};
    hx_tensor *x = hx_graph_input(g, "x", m->dt, 2, xs);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_I32, 1, ls);
    hx_tensor *W1 = hx_graph_param(g, "W1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1.0));
    hx_tensor *b1 = hx_graph_param(g, "b1", HX_DTYPE_F32, 1, &m->H, hx_init_zeros());
    hx_tensor *W2 = hx_graph_param(g, "W2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(1.0));
    hx_tensor *b2 = hx_graph_param(g, "b2", HX_DTYPE_F32, 1, &m->C, hx_init_zeros());
    hx_tensor *w[4] = {W1, b1, W2, b2};
    for (int i = 0; i < 4 && m->dt != HX_DTYPE_F32; i++) w[i] = hx_cast(g, w[i], m->dt);
    hx_tensor *h = hx_gelu(g, hx_bias_add(g, hx_matmul(g, x, w[0], false, false), w[1]));
    hx_tensor *logits = hx_bias_add(g, hx_matmul(g, h, w[2], false, false), w[3]);
    if (logits && m->dt != HX_DTYPE_F32) logits = hx_cast(g, logits, HX_DTYPE_F32);
    hx_tensor *loss = hx_cross_entropy(g, logits, y);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    oc.lr = 1e-2;
    bool ok = loss && hx_graph_backward(g, loss) == HX_OK &&
              hx_graph_apply_optimizer(g, NULL, &oc) == HX_OK;
    CHECK(ok, "mlp %s: graph: %s", hx_dtype_name(m->dt), hx_last_error());
    hx_session_config sc = hx_session_config_default();
    sc.accelerator = HX_ACCELERATOR_EMU;
    sc.n_threads = m->threads;
    sc.seed = 5;
    hx_session *s = NULL;
    if (ok) ok = hx_session_create(g, &sc, &s) == HX_OK;
    CHECK(ok, "mlp %s: session: %s", hx_dtype_name(m->dt), hx_last_error());
    void *xb = malloc(dsize(m->dt) * m->N * m->D);
    for (int64_t i = 0; i < m->N * m->D; i++) bs_put(xb, m->dt, i, X[i]);
    hx_feed feeds[2] = {{NULL, x, xb, dsize(m->dt) * m->N * m->D}, {NULL, y, lab, sizeof(int32_t) * m->N}};
    for (int k = 0; ok && k < m->steps; k++) {
        float l;
        hx_fetch f = {NULL, loss, &l, sizeof l};
        ok = hx_session_run(s, feeds, 2, &f, 1, HX_RUN_TRAIN) == HX_OK;
        losses[k] = l;
    }
    CHECK(ok, "mlp %s: training: %s", hx_dtype_name(m->dt), hx_last_error());
    hx_placement_stats ps = {0};
    if (ok) ok = hx_session_read(s, W1, w1_out, sizeof(float) * m->D * m->H) == HX_OK &&
                 hx_session_read(s, W2, w2_out, sizeof(float) * m->H * m->C) == HX_OK &&
                 hx_session_placement_stats(s, &ps) == HX_OK;
    *device_ops = ps.n_device_ops;
    free(xb);
    hx_session_free(s);
    hx_graph_free(g);
    return ok;
}

/* Data of a teacher: label = argmax of x T. X is bf16-exact, so the f32 and
 * bf16 models see the same inputs. */
static void teacher_data(int64_t N, int64_t D, int64_t C, float *X, int32_t *lab)
{
    float *T = malloc(sizeof(float) * D * C);
    test_fill_uniform(&rng, T, D * C, -1, 1);
    for (int64_t i = 0; i < N * D; i++) {
        uint16_t b;
        bs_put(&b, HX_DTYPE_BF16, 0, test_rng_uniform(&rng, -1, 1));
        X[i] = (float)bs_get(&b, HX_DTYPE_BF16, 0);
    }
    for (int64_t i = 0; i < N; i++) {
        int best = 0;
        double bv = -INFINITY;
        for (int64_t c = 0; c < C; c++) {
            double v = 0;
            for (int64_t d = 0; d < D; d++) v += (double)X[i * D + d] * T[d * C + c];
            if (v > bv) bv = v, best = (int)c;
        }
        lab[i] = best;
    }
    free(T);
}

static void test_mlp_bf16_vs_f32(void)
{
    enum { STEPS = 60 };
    mlp_cfg m = {64, 16, 32, 4, STEPS, 2, HX_DTYPE_F32};
    float X[64 * 16], w1[2][16 * 32], w2[2][32 * 4];
    int32_t lab[64];
    double l[2][STEPS];
    int dev[2];
    teacher_data(m.N, m.D, m.C, X, lab);
    bool ok = mlp_train(&m, X, lab, l[0], w1[0], w2[0], &dev[0]);
    m.dt = HX_DTYPE_BF16;
    ok = mlp_train(&m, X, lab, l[1], w1[1], w2[1], &dev[1]) && ok;
    if (!ok) return;
    double worst = 0;
    for (int k = 0; k < STEPS; k++) worst = fmax(worst, fabs(l[1][k] - l[0][k]));
    printf("mlp on emu, 60 Adam steps: loss f32 %.4f -> %.4f, bf16 %.4f -> %.4f, largest "
           "difference %.4f; %d / %d ops on the device\n", l[0][0], l[0][STEPS - 1], l[1][0],
           l[1][STEPS - 1], worst, dev[0], dev[1]);
    CHECK(dev[1] > 0 && dev[1] >= dev[0], "bf16 mlp: %d ops on emu (f32: %d)", dev[1], dev[0]);
    CHECK(l[0][STEPS - 1] < 0.5 * l[0][0] && l[1][STEPS - 1] < 0.5 * l[1][0],
          "the losses did not halve: f32 %g -> %g, bf16 %g -> %g", l[0][0], l[0][STEPS - 1],
          l[1][0], l[1][STEPS - 1]);
    CHECK(fabs(l[1][0] - l[0][0]) <= 0.01 * l[0][0], "first losses: bf16 %g, f32 %g", l[1][0], l[0][0]);
    CHECK(worst <= 0.05 * l[0][0], "bf16 and f32 loss curves differ by %g (first loss %g)", worst,
          l[0][0]);
}

/* bf16 training on emu gives the same bits at 1 and 2 threads; the tensors
 * are large enough for the kernels and conversions to split their work. */
static void test_bf16_threads(void)
{
    enum { N = 256, D = 64, H = 256, C = 8, STEPS = 4 };
    float *X = malloc(sizeof(float) * N * D), *w1[2], *w2[2];
    int32_t lab[N];
    double l[2][STEPS];
    int dev;
    teacher_data(N, D, C, X, lab);
    bool ok = true;
    for (int t = 0; t < 2; t++) {
        w1[t] = malloc(sizeof(float) * D * H);
        w2[t] = malloc(sizeof(float) * H * C);
        mlp_cfg m = {N, D, H, C, STEPS, t + 1, HX_DTYPE_BF16};
        ok = mlp_train(&m, X, lab, l[t], w1[t], w2[t], &dev) && ok;
    }
    CHECK(!ok || !memcmp(l[0], l[1], sizeof l[0]), "bf16 losses differ at 1 and 2 threads: "
          "%.9g vs %.9g at the last step", l[0][STEPS - 1], l[1][STEPS - 1]);
    CHECK(!ok || (!memcmp(w1[0], w1[1], sizeof(float) * D * H) &&
                  !memcmp(w2[0], w2[1], sizeof(float) * H * C)),
          "bf16-trained parameters differ at 1 and 2 threads");
    for (int t = 0; t < 2; t++) {
        free(w1[t]);
        free(w2[t]);
    }
    free(X);
}

static void dropout_f16(void) { test_dropout(HX_DTYPE_F16); }
static void dropout_bf16(void) { test_dropout(HX_DTYPE_BF16); }

static int flag(int argc, char **argv, int i)
{
    return !strcmp(argv[i], "--verbose") ? (verbose = true, 1) : 0;
}

static const test_case named_cases[] = {
    {"ops", test_ops},
    {"dropout_f16", dropout_f16},
    {"dropout_bf16", dropout_bf16},
    {"mixed_dtypes", test_mixed_dtypes},
    {"cast_chain", test_cast_chain},
    {"mlp_bf16_vs_f32", test_mlp_bf16_vs_f32},
    {"bf16_threads", test_bf16_threads},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(20261122);
    test_options o = {.flag = flag,
                      .flags_help = "  --verbose    each op's worst error against its tolerance\n"};
    return test_main_with(argc, argv, "half_ops", named_cases, TEST_COUNT(named_cases), &o);
}
