/* randgraph: see randgraph.h. Public API only.
 *
 * The generator keeps a pool of f32 values (op outputs and some leaves),
 * each with an upper bound of its magnitude and a use count. A move picks
 * operands from the pool (recent ones more often, so chains grow deep, and
 * older ones too, so values fan out into diamonds), makes partners it needs
 * (a leaf of a shape that broadcasts, a weight of the right inner dim) and
 * adds one or a few ops. f16/bf16 and integer tensors live in short
 * excursions (cast, data movement, cast back; ids moved, then gathered)
 * where every value has one consumer. At the end every unused value feeds
 * one loss term and the terms are summed. */
#include "randgraph.h"
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* POOL_MAX: values a graph draws from, enough for bench_placement's
 * graphs of 10,000 nodes (the tests' graphs hold fewer than 100) */
enum { POOL_MAX = 4096, MAX_PARAMS = 256, MAX_SCOPES = 4 };
#define MAG_CAP 1e3 /* values bounded above this are squashed (tanh) before use */

typedef struct shp { int nd; int64_t d[HX_MAX_DIMS]; } shp;
typedef struct val { hx_tensor *t; double mag; int uses; bool op; } val;

typedef struct gen {
    rg_graph *r;
    const rg_options *o;
    test_rng rng;
    val pool[POOL_MAX];
    int n_pool;
    hx_tensor *all_params[MAX_PARAMS];
    int n_all_params;
    int n_leaves;
    int scope_left[MAX_SCOPES]; /* moves until each scope we opened closes */
    int n_scopes;
    bool failed;
} gen;

/* ---- small helpers ----------------------------------------------------------- */

static int rnd(gen *g, int n) { return n > 0 ? (int)(test_rng_u64(&g->rng) % (uint64_t)n) : 0; }
static bool chance(gen *g, double p) { return test_rng_uniform(&g->rng, 0, 1) < p; }
static int64_t small_dim(gen *g) { return chance(g, 0.2) ? 1 : 2 + rnd(g, g->o->max_dim - 1); }

static shp shape_of(const hx_tensor *t)
{
    shp s = {hx_tensor_ndim(t), {0}};
    for (int i = 0; i < s.nd; i++) s.d[i] = hx_tensor_dim(t, i);
    return s;
}

static bool shape_eq(shp a, shp b)
{
    return a.nd == b.nd && !memcmp(a.d, b.d, sizeof(int64_t) * a.nd);
}

static const char *shape_str(shp s, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s.nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)s.d[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static const char *nm(const hx_tensor *t) { return t ? hx_tensor_name(t) : "(null)"; }

static void desc_add(rg_graph *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void desc_add(rg_graph *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (r->desc_len + (size_t)n + 1 > r->desc_cap) {
        size_t cap = (r->desc_cap + (size_t)n + 1) * 2;
        char *d = realloc(r->desc, cap);
        if (!d) return;
        r->desc = d;
        r->desc_cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(r->desc + r->desc_len, r->desc_cap - r->desc_len, fmt, ap);
    va_end(ap);
    r->desc_len += (size_t)n;
}

static void fail(gen *g, const char *what)
{
    if (g->failed) return;
    g->failed = true;
    snprintf(g->r->error, sizeof g->r->error, "seed %llu: %s failed: %s",
             (unsigned long long)g->r->seed, what, hx_last_error());
}

static void status(gen *g, hx_status st, const char *what)
{
    if (st) fail(g, what);
}

static bool grow(void **arr, int n, int *cap, size_t elem)
{
    if (n < *cap) return true;
    int c = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

/* ---- the description line of a new tensor, its target, the pool -------------------- */

static void describe(gen *g, const hx_tensor *t, const char *args)
{
    char sb[96];
    static const char *tg[] = {"default", "CPU", "DEVICE"};
    desc_add(g->r, "  %-22s %-24s %-16s %-5s %-8s %s\n", nm(t), hx_tensor_op_name(t),
             shape_str(shape_of(t), sb, sizeof sb), hx_dtype_name(hx_tensor_dtype(t)),
             hx_tensor_kind_of(t) == HX_TENSOR_INPUT || hx_tensor_kind_of(t) == HX_TENSOR_CONSTANT
                 ? "host" : tg[hx_tensor_target(t)], args);
}

/* A random target attribute for an op (or parameter): CPU, DEVICE, an
 * explicit DEFAULT, or none (the scope or the op's default decides). */
static void random_target(gen *g, hx_tensor *t)
{
    if (!g->o->targets || !t) return;
    int u = rnd(g, 20);
    if (u < 13) status(g, hx_tensor_set_target(t, u < 6 ? HX_TARGET_CPU : u < 12 ? HX_TARGET_DEVICE
                                                                               : HX_TARGET_DEFAULT),
                       "hx_tensor_set_target");
}

/* Finishes a new op output: checks it, gives it a random target attribute,
 * describes it and (pool) makes it available to later moves. */
static hx_tensor *fin(gen *g, hx_tensor *t, double mag, bool pool, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static hx_tensor *fin(gen *g, hx_tensor *t, double mag, bool pool, const char *fmt, ...)
{
    char args[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (!t) {
        char what[300];
        snprintf(what, sizeof what, "building %s", args);
        fail(g, what);
        return NULL;
    }
    random_target(g, t);
    describe(g, t, args);
    if (pool && g->n_pool < POOL_MAX) g->pool[g->n_pool++] = (val){t, mag, 0, true};
    return t;
}

/* ---- leaves ------------------------------------------------------------------------- */

enum { LEAF_INPUT, LEAF_PARAM, LEAF_CONST };

static uint16_t half_bits(test_rng *r, hx_dtype dt)
{
    uint64_t u = test_rng_u64(r);
    uint16_t sign = (uint16_t)((u & 1) << 15);
    if (dt == HX_DTYPE_F16) /* exponent 11..14: |x| in [2^-4, 1) */
        return sign | (uint16_t)((11 + (u >> 1) % 4) << 10) | (uint16_t)((u >> 8) & 0x3ff);
    return sign | (uint16_t)((123 + (u >> 1) % 4) << 7) | (uint16_t)((u >> 8) & 0x7f); /* bf16 */
}

/* n values of dt drawn for `data` into buf. */
static void fill(test_rng *r, void *buf, hx_dtype dt, int64_t n, rg_data data, int64_t hi)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case HX_DTYPE_F32:
            ((float *)buf)[i] = (float)(data == RG_DATA_PROB ? test_rng_uniform(r, 0, 1)
                                                             : test_rng_uniform(r, -1, 1));
            break;
        case HX_DTYPE_F16: case HX_DTYPE_BF16: ((uint16_t *)buf)[i] = half_bits(r, dt); break;
        case HX_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)(test_rng_u64(r) % (uint64_t)hi); break;
        case HX_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)(test_rng_u64(r) % (uint64_t)hi); break;
        }
    }
}

static hx_init random_init(gen *g, shp s)
{
    switch (rnd(g, 4)) {
    case 0: return hx_init_uniform(-0.5, 0.5);
    case 1: return hx_init_normal(0.0, 0.3);
    case 2: return s.nd >= 2 ? hx_init_xavier_uniform(1.0) : hx_init_constant(0.25);
    default: return hx_init_uniform(-1.0, 1.0);
    }
}

/* A new leaf. Parameters are f32 and get a random initialiser and target;
 * constants get their data now, inputs at every run (rg_feeds). */
static hx_tensor *leaf(gen *g, int kind, hx_dtype dt, shp s, rg_data data, int64_t hi)
{
    rg_graph *r = g->r;
    char name[32], what[64];
    snprintf(name, sizeof name, "%c%d", kind == LEAF_INPUT ? 'x' : kind == LEAF_PARAM ? 'p' : 'c',
             g->n_leaves++);
    hx_tensor *t = NULL;
    if (kind == LEAF_PARAM) {
        t = hx_graph_param(r->g, name, HX_DTYPE_F32, s.nd, s.d, random_init(g, s));
        if (t && g->n_all_params < MAX_PARAMS) g->all_params[g->n_all_params++] = t;
        random_target(g, t);
    } else if (kind == LEAF_CONST) {
        int64_t n = 1;
        for (int i = 0; i < s.nd; i++) n *= s.d[i];
        void *buf = malloc((size_t)n * hx_dtype_size(dt));
        if (!buf) { fail(g, "malloc"); return NULL; }
        fill(&g->rng, buf, dt, n, data, hi);
        t = hx_graph_constant(r->g, name, dt, s.nd, s.d, buf);
        free(buf);
    } else {
        t = hx_graph_input(r->g, name, dt, s.nd, s.d);
    }
    snprintf(what, sizeof what, "leaf %s", name);
    if (!t) { fail(g, what); return NULL; }
    if (kind == LEAF_INPUT) {
        rg_input *in = realloc(r->inputs, sizeof *in * (r->n_inputs + 1));
        if (!in) { fail(g, "malloc"); return NULL; }
        r->inputs = in;
        in[r->n_inputs++] = (rg_input){t, data, hi, NULL};
    }
    char args[64] = "";
    if (data == RG_DATA_IDS) snprintf(args, sizeof args, "ids in [0, %lld)", (long long)hi);
    if (data == RG_DATA_PROB) snprintf(args, sizeof args, "probabilities");
    describe(g, t, args);
    return t;
}

static int random_leaf_kind(gen *g)
{
    int u = rnd(g, 20);
    return u < 10 ? LEAF_PARAM : u < 17 ? LEAF_INPUT : LEAF_CONST;
}

/* A new f32 leaf of shape s; sometimes also offered to later moves. */
static hx_tensor *f32_leaf(gen *g, shp s)
{
    hx_tensor *t = leaf(g, random_leaf_kind(g), HX_DTYPE_F32, s, RG_DATA_UNIFORM, 0);
    if (t && chance(g, 0.3) && g->n_pool < POOL_MAX) g->pool[g->n_pool++] = (val){t, 1.0, 0, false};
    return t;
}

/* ---- operands ---------------------------------------------------------------------- */

typedef bool (*pred_fn)(const val *v);
static bool any_val(const val *v) { (void)v; return true; }
static bool has_dims(const val *v) { return hx_tensor_ndim(v->t) >= 1; }
static bool is_matrix(const val *v) { return hx_tensor_ndim(v->t) >= 2; }
static bool is_seq(const val *v)
{
    return hx_tensor_ndim(v->t) >= 2 && hx_tensor_dim(v->t, -2) <= 64 && hx_tensor_dim(v->t, -1) <= 64;
}

/* A pool value that satisfies ok: one of the four newest such with
 * probability 0.6, else any. */
static val *pick(gen *g, pred_fn ok)
{
    int cand[POOL_MAX], n = 0;
    for (int i = 0; i < g->n_pool; i++)
        if (ok(&g->pool[i])) cand[n++] = i;
    if (!n) return NULL;
    int k = chance(g, 0.6) ? n - 1 - rnd(g, n < 4 ? n : 4) : rnd(g, n);
    return &g->pool[cand[k]];
}

/* A pool value of exactly shape s other than `not`, or NULL. */
static val *find_shape(gen *g, shp s, const val *not)
{
    int cand[POOL_MAX], n = 0;
    for (int i = 0; i < g->n_pool; i++)
        if (&g->pool[i] != not && shape_eq(shape_of(g->pool[i].t), s)) cand[n++] = i;
    return n ? &g->pool[cand[rnd(g, n)]] : NULL;
}

static hx_tensor *squash(gen *g, hx_tensor *t, double *mag)
{
    *mag = 1.0;
    return fin(g, hx_tanh(g->r->g, t), 1.0, false, "tanh(%s)  squash", nm(t));
}

/* Takes v as an operand: counts the use; squashes a large value. */
static hx_tensor *use(gen *g, val *v, double *mag)
{
    v->uses++;
    *mag = v->mag;
    return v->mag > MAG_CAP ? squash(g, v->t, mag) : v->t;
}

/* t with |t| <= limit (tanh when its bound is larger). */
static hx_tensor *bounded(gen *g, hx_tensor *t, double *mag, double limit)
{
    return *mag <= limit ? t : squash(g, t, mag);
}

/* A scalar constant. */
static hx_tensor *scalar_const(gen *g, float value)
{
    char name[32];
    snprintf(name, sizeof name, "c%d", g->n_leaves++);
    hx_tensor *t = hx_graph_constant(g->r->g, name, HX_DTYPE_F32, 0, NULL, &value);
    if (!t) fail(g, "hx_graph_constant");
    else desc_add(g->r, "  %-22s %-24s %-16s %-5s %-8s = %g\n", name, "constant", "[]", "f32", "host",
                  (double)value);
    return t;
}

/* A positive transform of t, at least 1/e: exp(tanh(t)) or sigmoid(t) + 0.5. */
static hx_tensor *positive(gen *g, hx_tensor *t)
{
    hx_graph *G = g->r->g;
    if (chance(g, 0.5)) {
        hx_tensor *b = fin(g, hx_tanh(G, t), 1, false, "tanh(%s)", nm(t));
        return fin(g, hx_exp(G, b), 2.72, false, "exp(%s)  positive", nm(b));
    }
    hx_tensor *s = fin(g, hx_sigmoid(G, t), 1, false, "sigmoid(%s)", nm(t));
    hx_tensor *c = s ? scalar_const(g, 0.5f) : NULL;
    return c ? fin(g, hx_add(G, s, c), 1.5, false, "add(%s, %s)  positive", nm(s), nm(c)) : NULL;
}

/* ---- moves ------------------------------------------------------------------------------ */

static void mv_unary(gen *g)
{
    hx_graph *G = g->r->g;
    val *v = pick(g, any_val);
    double m;
    hx_tensor *x = use(g, v, &m);
    switch (rnd(g, 8)) {
    case 0: fin(g, hx_relu(G, x), m, true, "relu(%s)", nm(x)); break;
    case 1: fin(g, hx_gelu(G, x), m + 1, true, "gelu(%s)", nm(x)); break;
    case 2: fin(g, hx_sigmoid(G, x), 1, true, "sigmoid(%s)", nm(x)); break;
    case 3: fin(g, hx_tanh(G, x), 1, true, "tanh(%s)", nm(x)); break;
    case 4: {
        hx_tensor *b = bounded(g, x, &m, 3.0);
        fin(g, hx_exp(G, b), exp(m), true, "exp(%s)", nm(b));
        break;
    }
    case 5: {
        hx_tensor *p = positive(g, x);
        fin(g, hx_log(G, p), 1.1, true, "log(%s)", nm(p));
        break;
    }
    case 6: {
        hx_tensor *p = positive(g, x);
        fin(g, hx_sqrt(G, p), 1.7, true, "sqrt(%s)", nm(p));
        break;
    }
    default: {
        float s = (float)test_rng_uniform(&g->rng, -2, 2);
        fin(g, hx_scale(G, x, s), m * fabs(s), true, "scale(%s, %g)", nm(x), (double)s);
    }
    }
}

/* A shape that broadcasts against a: equal, a suffix, 1s in places, a
 * leading 1, or crossed (a's 1s filled, others set to 1). */
static shp broadcast_partner(gen *g, shp a)
{
    shp b = a;
    switch (rnd(g, 5)) {
    case 0: break;
    case 1: { /* drop leading dims, down to a scalar */
        int k = 1 + rnd(g, a.nd + 1 > 1 ? a.nd : 1);
        if (k > a.nd) k = a.nd;
        b.nd = a.nd - k;
        memmove(b.d, a.d + k, sizeof(int64_t) * b.nd);
        break;
    }
    case 2:
        for (int i = 0; i < b.nd; i++)
            if (chance(g, 0.5)) b.d[i] = 1;
        break;
    case 3:
        if (a.nd < HX_MAX_DIMS) {
            b.nd = a.nd + 1;
            b.d[0] = 1;
            memcpy(b.d + 1, a.d, sizeof(int64_t) * a.nd);
        }
        break;
    default:
        for (int i = 0; i < b.nd; i++) b.d[i] = a.d[i] == 1 ? small_dim(g) : chance(g, 0.5) ? 1 : a.d[i];
    }
    return b;
}

static void mv_binary(gen *g)
{
    hx_graph *G = g->r->g;
    val *va = pick(g, any_val);
    double ma, mb;
    hx_tensor *a = use(g, va, &ma), *b;
    shp sb = broadcast_partner(g, shape_of(a));
    val *vb = chance(g, 0.5) ? find_shape(g, sb, va) : NULL;
    if (vb) b = use(g, vb, &mb);
    else {
        b = f32_leaf(g, sb);
        mb = 1;
    }
    if (!b) return;
    if (chance(g, 0.4)) { /* the partner first: broadcasting on the left */
        hx_tensor *t = a; a = b; b = t;
        double m = ma; ma = mb; mb = m;
    }
    switch (rnd(g, 4)) {
    case 0: fin(g, hx_add(G, a, b), ma + mb, true, "add(%s, %s)", nm(a), nm(b)); break;
    case 1: fin(g, hx_sub(G, a, b), ma + mb, true, "sub(%s, %s)", nm(a), nm(b)); break;
    case 2: fin(g, hx_mul(G, a, b), ma * mb, true, "mul(%s, %s)", nm(a), nm(b)); break;
    default: {
        hx_tensor *p = positive(g, b);
        fin(g, hx_div(G, a, p), ma * 2.8, true, "div(%s, %s)", nm(a), nm(p));
    }
    }
}

static void mv_bias_add(gen *g)
{
    val *v = pick(g, has_dims);
    if (!v) return;
    double m, mb = 1;
    hx_tensor *x = use(g, v, &m);
    shp sb = {1, {hx_tensor_dim(x, -1)}};
    val *vb = chance(g, 0.3) ? find_shape(g, sb, v) : NULL;
    hx_tensor *b = vb ? use(g, vb, &mb) : leaf(g, chance(g, 0.7) ? LEAF_PARAM : LEAF_INPUT,
                                               HX_DTYPE_F32, sb, RG_DATA_UNIFORM, 0);
    if (b) fin(g, hx_bias_add(g->r->g, x, b), m + mb, true, "bias_add(%s, %s)", nm(x), nm(b));
}

/* A 2-D or more view of v: v itself, or v reshaped to (1, n) or (n, 1). */
static hx_tensor *as_matrix(gen *g, val *v, double *mag)
{
    hx_tensor *x = use(g, v, mag);
    if (!x || hx_tensor_ndim(x) >= 2) return x;
    int64_t n = hx_tensor_numel(x), s[2] = {1, n};
    if (chance(g, 0.5)) { s[0] = n; s[1] = 1; }
    return fin(g, hx_reshape(g->r->g, x, 2, s), *mag, false, "reshape(%s, [%lld,%lld])", nm(x),
               (long long)s[0], (long long)s[1]);
}

static void mv_matmul(gen *g)
{
    val *v = pick(g, is_matrix);
    if (!v) v = pick(g, any_val);
    double ma, mb = 1;
    hx_tensor *a = as_matrix(g, v, &ma);
    if (!a) return;
    shp sa = shape_of(a);
    bool batched = sa.nd > 2, shared = batched && chance(g, 0.5);
    bool ta = !shared && chance(g, 0.4), tb = chance(g, 0.4);
    int64_t K = sa.d[sa.nd - (ta ? 2 : 1)], N = small_dim(g);
    shp sb = {2, {tb ? N : K, tb ? K : N}};
    if (batched && !shared) {
        sb.nd = sa.nd;
        memcpy(sb.d, sa.d, sizeof(int64_t) * (sa.nd - 2));
        sb.d[sa.nd - 2] = tb ? N : K;
        sb.d[sa.nd - 1] = tb ? K : N;
    }
    val *vb = chance(g, 0.2) ? find_shape(g, sb, v) : NULL;
    hx_tensor *b = vb ? use(g, vb, &mb) : leaf(g, chance(g, 0.7) ? LEAF_PARAM : random_leaf_kind(g),
                                               HX_DTYPE_F32, sb, RG_DATA_UNIFORM, 0);
    if (b)
        fin(g, hx_matmul(g->r->g, a, b, ta, tb), ma * mb * (double)K, true, "matmul(%s%s, %s%s)",
            nm(a), ta ? "^T" : "", nm(b), tb ? "^T" : "");
}

/* Causal self-attention over x (..., T, D): softmax(mask(x (x Wk)^T / sqrt(D))) x. */
static void mv_attention(gen *g)
{
    hx_graph *G = g->r->g;
    val *v = pick(g, is_seq);
    if (!v) return;
    double m;
    hx_tensor *x = use(g, v, &m);
    x = bounded(g, x, &m, 3.0);
    if (!x) return;
    shp sx = shape_of(x);
    int64_t D = sx.d[sx.nd - 1];
    shp sw = {2, {D, D}};
    hx_tensor *w = leaf(g, LEAF_PARAM, HX_DTYPE_F32, sw, RG_DATA_UNIFORM, 0);
    hx_tensor *k = w ? fin(g, hx_matmul(G, x, w, false, false), 0, false, "matmul(%s, %s)", nm(x), nm(w)) : NULL;
    hx_tensor *s = k ? fin(g, hx_matmul(G, x, k, false, true), 0, false, "matmul(%s, %s^T)", nm(x), nm(k)) : NULL;
    hx_tensor *sc = s ? fin(g, hx_scale(G, s, (float)(1.0 / sqrt((double)D))), 0, false,
                            "scale(%s, 1/sqrt(%lld))", nm(s), (long long)D) : NULL;
    hx_tensor *mk = sc ? fin(g, hx_causal_mask(G, sc), 0, false, "causal_mask(%s)", nm(sc)) : NULL;
    hx_tensor *p = mk ? fin(g, hx_softmax(G, mk), 1, false, "softmax(%s)", nm(mk)) : NULL;
    if (p) fin(g, hx_matmul(G, p, x, false, false), m, true, "matmul(%s, %s)", nm(p), nm(x));
}

static void mv_rows(gen *g)
{
    val *v = pick(g, has_dims);
    if (!v) return;
    double m;
    hx_tensor *x = use(g, v, &m);
    if (chance(g, 0.5)) fin(g, hx_softmax(g->r->g, x), 1, true, "softmax(%s)", nm(x));
    else fin(g, hx_log_softmax(g->r->g, x), 2 * m + 8, true, "log_softmax(%s)", nm(x));
}

static void mv_layernorm(gen *g)
{
    val *v = pick(g, has_dims);
    if (!v) return;
    double m;
    hx_tensor *x = use(g, v, &m);
    int64_t N = hx_tensor_dim(x, -1);
    shp sv = {1, {N}};
    hx_tensor *gamma = leaf(g, chance(g, 0.8) ? LEAF_PARAM : LEAF_INPUT, HX_DTYPE_F32, sv, RG_DATA_UNIFORM, 0);
    hx_tensor *beta = leaf(g, random_leaf_kind(g), HX_DTYPE_F32, sv, RG_DATA_UNIFORM, 0);
    static const float eps[3] = {1e-5f, 1e-3f, 0.1f};
    float e = eps[rnd(g, 3)];
    if (gamma && beta)
        fin(g, hx_layernorm(g->r->g, x, gamma, beta, e), 2 * sqrt((double)N) + 2, true,
            "layernorm(%s, %s, %s, eps %g)", nm(x), nm(gamma), nm(beta), (double)e);
}

/* A random shape with n elements, 1..4 dims, one of them sometimes -1. */
static int factor_shape(gen *g, int64_t n, int64_t *out)
{
    int64_t f[64];
    int nf = 0;
    for (int64_t p = 2; p * p <= n && nf < 63; p++)
        while (n % p == 0 && nf < 63) {
            f[nf++] = p;
            n /= p;
        }
    if (n > 1) f[nf++] = n;
    int nd = 1 + rnd(g, 4);
    for (int i = 0; i < nd; i++) out[i] = 1;
    for (int i = 0; i < nf; i++) out[rnd(g, nd)] *= f[i];
    if (chance(g, 0.3)) out[rnd(g, nd)] = -1;
    return nd;
}

static const char *dims_str(int nd, const int64_t *d, char *buf, size_t n)
{
    shp s = {nd, {0}};
    memcpy(s.d, d, sizeof(int64_t) * nd);
    return shape_str(s, buf, n);
}

/* One data-movement op on t of any dtype: reshape, permute, slice, or
 * concat. With self_val (t's pool value, f32) concat's other parts are t
 * again, pool values or new leaves; without, new inputs of t's dtype and
 * data: an f16/bf16 tensor with two consumers on the gradient path makes
 * hx_graph_backward fail (the two gradients are summed with hx_add, which is
 * f32-only), so half tensors get one consumer each. */
static hx_tensor *move(gen *g, hx_tensor *t, rg_data data, int64_t hi, val *self_val, double *mag)
{
    hx_graph *G = g->r->g;
    shp s = shape_of(t);
    char b[96];
    int k = s.nd == 0 ? 0 : rnd(g, 4);
    if (k == 1 && s.nd < 2) k = 2;
    switch (k) {
    case 0: {
        int64_t d[HX_MAX_DIMS];
        int nd = factor_shape(g, hx_tensor_numel(t), d);
        return fin(g, hx_reshape(G, t, nd, d), *mag, false, "reshape(%s, %s)", nm(t),
                   dims_str(nd, d, b, sizeof b));
    }
    case 1: {
        int perm[HX_MAX_DIMS];
        for (int i = 0; i < s.nd; i++) perm[i] = i;
        for (int i = s.nd - 1; i > 0; i--) {
            int j = rnd(g, i + 1), x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
        }
        int64_t pd[HX_MAX_DIMS];
        for (int i = 0; i < s.nd; i++) pd[i] = perm[i];
        return fin(g, hx_permute(G, t, perm), *mag, false, "permute(%s, %s)", nm(t),
                   dims_str(s.nd, pd, b, sizeof b));
    }
    case 2: {
        int ax = rnd(g, s.nd);
        for (int i = 0; i < s.nd && s.d[ax] < 2; i++) ax = (ax + 1) % s.nd;
        int64_t start = rnd(g, (int)s.d[ax]), end = start + 1 + rnd(g, (int)(s.d[ax] - start));
        int axis = chance(g, 0.3) ? ax - s.nd : ax;
        return fin(g, hx_slice(G, t, axis, start, end), *mag, false, "slice(%s, axis %d, %lld:%lld)",
                   nm(t), axis, (long long)start, (long long)end);
    }
    default: {
        int ax = rnd(g, s.nd), n = 2 + rnd(g, 2);
        hx_tensor *parts[3] = {t};
        char names[160];
        int len = snprintf(names, sizeof names, "%s", nm(t));
        for (int i = 1; i < n; i++) {
            shp sp = s;
            sp.d[ax] = small_dim(g);
            val *pv = self_val && chance(g, 0.4) ? find_shape(g, sp, NULL) : NULL;
            double pm = 1;
            if (self_val && chance(g, 0.2)) parts[i] = use(g, self_val, &pm); /* t twice */
            else if (pv) parts[i] = use(g, pv, &pm);
            else if (self_val) parts[i] = f32_leaf(g, sp);
            else parts[i] = leaf(g, LEAF_INPUT, hx_tensor_dtype(t), sp, data, hi);
            if (!parts[i]) return NULL;
            if (pm > *mag) *mag = pm;
            len += snprintf(names + len, sizeof names - (size_t)len, ", %s", nm(parts[i]));
        }
        int axis = chance(g, 0.3) ? ax - s.nd : ax;
        return fin(g, hx_concat(G, n, parts, axis), *mag, false, "concat([%s], axis %d)", names, axis);
    }
    }
}

static void mv_move(gen *g)
{
    val *v = pick(g, any_val);
    double m;
    hx_tensor *x = use(g, v, &m);
    hx_tensor *y = x ? move(g, x, RG_DATA_UNIFORM, 0, v, &m) : NULL;
    if (y && g->n_pool < POOL_MAX) g->pool[g->n_pool++] = (val){y, m, 0, true};
}

static void mv_reduce(gen *g)
{
    val *v = pick(g, any_val);
    double m;
    hx_tensor *x = use(g, v, &m);
    if (!x) return;
    int nd = hx_tensor_ndim(x), axes[HX_MAX_DIMS], na = rnd(g, nd + 1);
    double count = 1;
    int order[HX_MAX_DIMS];
    for (int i = 0; i < nd; i++) order[i] = i;
    for (int i = nd - 1; i > 0; i--) {
        int j = rnd(g, i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    char list[64] = "all";
    int len = 0;
    for (int i = 0; i < na; i++) {
        axes[i] = chance(g, 0.3) ? order[i] - nd : order[i];
        count *= (double)hx_tensor_dim(x, order[i]);
        len += snprintf(list + len, sizeof list - (size_t)len, i ? ",%d" : "%d", axes[i]);
    }
    if (!na) count = (double)hx_tensor_numel(x);
    bool keep = chance(g, 0.5);
    if (chance(g, 0.5))
        fin(g, hx_reduce_sum(g->r->g, x, na, axes, keep), m * count, true, "reduce_sum(%s, axes %s%s)",
            nm(x), list, keep ? ", keepdims" : "");
    else
        fin(g, hx_reduce_mean(g->r->g, x, na, axes, keep), m, true, "reduce_mean(%s, axes %s%s)",
            nm(x), list, keep ? ", keepdims" : "");
}

/* f32 -> f16/bf16 -> (data movement, casts between the two) -> f32. */
static void mv_half(gen *g)
{
    hx_graph *G = g->r->g;
    val *v = pick(g, any_val);
    double m;
    hx_tensor *x = use(g, v, &m);
    hx_dtype dt = chance(g, 0.5) ? HX_DTYPE_F16 : HX_DTYPE_BF16;
    hx_tensor *h = x ? fin(g, hx_cast(G, x, dt), m, false, "cast(%s, %s)", nm(x), hx_dtype_name(dt)) : NULL;
    for (int k = rnd(g, 3); h && k > 0; k--) {
        if (chance(g, 0.2)) {
            dt = dt == HX_DTYPE_F16 ? HX_DTYPE_BF16 : HX_DTYPE_F16;
            h = fin(g, hx_cast(G, h, dt), m, false, "cast(%s, %s)", nm(h), hx_dtype_name(dt));
        } else {
            h = move(g, h, RG_DATA_UNIFORM, 0, NULL, &m);
        }
    }
    if (h) fin(g, hx_cast(G, h, HX_DTYPE_F32), m, true, "cast(%s, f32)", nm(h));
}

/* table (V, D) gathered by ids (i32/i64, moved around sometimes): a trained
 * f32 table (its gradient is a scatter-add), a pool value, or an f16/bf16
 * input table (no gradient) cast back to f32. */
static void mv_gather(gen *g)
{
    hx_graph *G = g->r->g;
    hx_tensor *table = NULL;
    double m = 1;
    int kind = rnd(g, 3);
    val *tv = kind == 1 ? pick(g, is_matrix) : NULL;
    if (tv && hx_tensor_ndim(tv->t) == 2) table = use(g, tv, &m);
    hx_dtype tdt = kind == 2 ? (chance(g, 0.5) ? HX_DTYPE_F16 : HX_DTYPE_BF16) : HX_DTYPE_F32;
    if (!table) {
        shp st = {2, {1 + rnd(g, 3 * g->o->max_dim), small_dim(g)}};
        table = leaf(g, tdt == HX_DTYPE_F32 ? LEAF_PARAM : LEAF_INPUT, tdt, st, RG_DATA_UNIFORM, 0);
    }
    if (!table) return;
    int64_t V = hx_tensor_dim(table, 0);
    hx_dtype idt = chance(g, 0.5) ? HX_DTYPE_I32 : HX_DTYPE_I64;
    shp si = {1 + rnd(g, 2), {small_dim(g), small_dim(g)}};
    hx_tensor *ids = leaf(g, chance(g, 0.8) ? LEAF_INPUT : LEAF_CONST, idt, si, RG_DATA_IDS, V);
    double unused = 0;
    if (ids && chance(g, 0.5)) ids = move(g, ids, RG_DATA_IDS, V, NULL, &unused);
    hx_tensor *y = ids ? fin(g, hx_gather(G, table, ids), m, tdt == HX_DTYPE_F32, "gather(%s, %s)",
                             nm(table), nm(ids)) : NULL;
    if (y && tdt != HX_DTYPE_F32) fin(g, hx_cast(G, y, HX_DTYPE_F32), m, true, "cast(%s, f32)", nm(y));
}

static void mv_dropout(gen *g)
{
    static const float ps[3] = {0.0f, 0.1f, 0.5f};
    val *v = pick(g, any_val);
    double m;
    hx_tensor *x = use(g, v, &m);
    float p = ps[rnd(g, 3)];
    uint64_t seed = test_rng_u64(&g->rng) % 1000;
    fin(g, hx_dropout(g->r->g, x, p, seed), m / (1 - p), true, "dropout(%s, p %g, seed %llu)",
        nm(x), (double)p, (unsigned long long)seed);
}

/* ---- scopes ------------------------------------------------------------------------------- */

static void scope_open(gen *g)
{
    if (!g->o->targets || g->n_scopes == MAX_SCOPES || !chance(g, 0.12)) return;
    static const hx_target tg[3] = {HX_TARGET_CPU, HX_TARGET_DEVICE, HX_TARGET_DEFAULT};
    hx_target t = tg[rnd(g, 3)];
    status(g, hx_graph_push_target(g->r->g, t), "hx_graph_push_target");
    g->scope_left[g->n_scopes++] = 1 + rnd(g, 4);
    desc_add(g->r, "  push_target(%s)\n", hx_target_name(t));
}

static void scope_close(gen *g, bool all)
{
    while (g->n_scopes && (all || --g->scope_left[g->n_scopes - 1] <= 0)) {
        status(g, hx_graph_pop_target(g->r->g), "hx_graph_pop_target");
        g->n_scopes--;
        desc_add(g->r, "  pop_target\n");
        if (!all) break;
    }
}

/* ---- loss, gradients, optimizers --------------------------------------------------------------- */

/* A scalar loss term from v: cross-entropy, BCE with logits, mse, or a mean. */
static hx_tensor *loss_term(gen *g, val *v)
{
    hx_graph *G = g->r->g;
    double m;
    hx_tensor *x = use(g, v, &m);
    if (!x) return NULL;
    shp s = shape_of(x);
    int k = rnd(g, 5);
    if (k == 0 && s.nd >= 1 && s.d[s.nd - 1] >= 2) {
        int64_t C = s.d[s.nd - 1], N = hx_tensor_numel(x) / C, sh[2] = {N, C};
        hx_tensor *logits = s.nd == 2 ? x : fin(g, hx_reshape(G, x, 2, sh), m, false,
                                                "reshape(%s, [%lld,%lld])", nm(x), (long long)N, (long long)C);
        shp sl = {1, {N}};
        hx_tensor *labels = leaf(g, LEAF_INPUT, chance(g, 0.5) ? HX_DTYPE_I32 : HX_DTYPE_I64, sl,
                                 RG_DATA_IDS, C);
        return labels ? fin(g, hx_cross_entropy(G, logits, labels), 0, false, "cross_entropy(%s, %s)",
                            nm(logits), nm(labels)) : NULL;
    }
    if (k == 1 || k == 2) {
        val *other = chance(g, 0.3) ? find_shape(g, s, v) : NULL;
        double mo;
        hx_tensor *t = other ? use(g, other, &mo)
                             : leaf(g, LEAF_INPUT, HX_DTYPE_F32, s, k == 1 ? RG_DATA_PROB : RG_DATA_UNIFORM, 0);
        if (t && other && k == 1) t = fin(g, hx_sigmoid(G, t), 1, false, "sigmoid(%s)", nm(t));
        if (!t) return NULL;
        return k == 1 ? fin(g, hx_bce_with_logits(G, x, t), 0, false, "bce_with_logits(%s, %s)", nm(x), nm(t))
                      : fin(g, hx_mse(G, x, t), 0, false, "mse(%s, %s)", nm(x), nm(t));
    }
    return fin(g, hx_reduce_mean(G, x, 0, NULL, false), 0, false, "reduce_mean(%s)", nm(x));
}

static void build_loss(gen *g)
{
    hx_graph *G = g->r->g;
    hx_tensor *loss = NULL;
    int n_terms = 0;
    int n = g->n_pool;
    for (int i = 0; i < n && !g->failed; i++) {
        val *v = &g->pool[i];
        if (!v->op || v->uses) continue;
        hx_tensor *term = loss_term(g, v);
        if (!term) break;
        loss = loss ? fin(g, hx_add(G, loss, term), 0, false, "add(%s, %s)  loss", nm(loss), nm(term)) : term;
        n_terms++;
    }
    if (!n_terms && !g->failed) loss = loss_term(g, &g->pool[g->n_pool - 1]);
    g->r->loss = loss;
}

static void add_optimizer(gen *g, hx_tensor *p)
{
    hx_optimizer_kind kind = g->o->ftrl && chance(g, 0.3) ? HX_OPTIMIZER_FTRL
                                                          : (hx_optimizer_kind)rnd(g, 4);
    hx_optimizer_config c = hx_optimizer_config_default(kind);
    c.lr = test_rng_uniform(&g->rng, 0.001, 0.1);
    if (chance(g, 0.5)) c.weight_decay = 0.01;
    if (kind == HX_OPTIMIZER_SGD && chance(g, 0.6)) {
        c.momentum = 0.9;
        c.nesterov = chance(g, 0.5);
        if (!c.nesterov && chance(g, 0.5)) c.dampening = 0.1;
    }
    if (kind == HX_OPTIMIZER_ADAGRAD && chance(g, 0.5)) c.lr_decay = 0.01;
    if (kind == HX_OPTIMIZER_FTRL) {
        c.l1 = chance(g, 0.5) ? 0.001 : 0;
        c.l2 = chance(g, 0.5) ? 0.01 : 0;
        /* on the device half the time: no emu kernel, so the fallback moves it */
        if (g->o->targets && chance(g, 0.5)) {
            status(g, hx_tensor_set_target(p, HX_TARGET_DEVICE), "hx_tensor_set_target");
            desc_add(g->r, "  %s: target DEVICE\n", nm(p));
        }
    }
    static const char *kn[] = {"sgd", "adam", "adamw", "adagrad", "ftrl"};
    bool scoped = g->o->targets && chance(g, 0.2);
    hx_target t = chance(g, 0.5) ? HX_TARGET_DEVICE : HX_TARGET_CPU;
    if (scoped) status(g, hx_graph_push_target(g->r->g, t), "hx_graph_push_target");
    status(g, hx_graph_apply_optimizer(g->r->g, p, &c), "hx_graph_apply_optimizer");
    if (scoped) status(g, hx_graph_pop_target(g->r->g), "hx_graph_pop_target");
    desc_add(g->r, "  optimizer %s on %s (lr %g, wd %g, momentum %g, nesterov %d)%s%s\n", kn[kind],
             nm(p), c.lr, c.weight_decay, c.momentum, c.nesterov, scoped ? " in scope " : "",
             scoped ? hx_target_name(t) : "");
    g->r->n_updates++;
    g->r->has_ftrl |= kind == HX_OPTIMIZER_FTRL;
}

static bool add_unique(hx_tensor ***arr, int *n, int *cap, hx_tensor *t)
{
    for (int i = 0; i < *n; i++)
        if ((*arr)[i] == t) return true;
    if (!grow((void **)arr, *n, cap, sizeof **arr)) return false;
    (*arr)[(*n)++] = t;
    return true;
}

/* The loss, up to four forward values, every parameter's gradient and up to
 * three intermediates' gradients. */
static void choose_fetches(gen *g)
{
    rg_graph *r = g->r;
    int cap = 0;
    bool ok = add_unique(&r->fetch, &r->n_fetch, &cap, r->loss);
    for (int k = 0; k < 4 && ok && g->n_pool; k++) {
        val *v = &g->pool[rnd(g, g->n_pool)];
        if (v->op) ok = add_unique(&r->fetch, &r->n_fetch, &cap, v->t);
    }
    for (int i = 0; i < r->n_params && ok; i++)
        ok = add_unique(&r->fetch, &r->n_fetch, &cap, hx_tensor_grad(r->params[i]));
    for (int k = 0; k < 3 && ok && g->n_pool; k++) {
        val *v = &g->pool[rnd(g, g->n_pool)];
        hx_tensor *d = v->op ? hx_tensor_grad(v->t) : NULL;
        if (d) ok = add_unique(&r->fetch, &r->n_fetch, &cap, d);
    }
    if (!ok) fail(g, "malloc");
}

static void finish(gen *g)
{
    rg_graph *r = g->r;
    hx_graph *G = r->g;
    bool open_in_backward = chance(g, 0.5);
    if (!open_in_backward) scope_close(g, true);
    if (!g->failed) status(g, hx_graph_backward(G, r->loss), "hx_graph_backward");
    scope_close(g, true);
    int cap = 0;
    for (int i = 0; i < g->n_all_params && !g->failed; i++) {
        hx_tensor *p = g->all_params[i];
        if (hx_tensor_grad(p) && !add_unique(&r->params, &r->n_params, &cap, p)) fail(g, "malloc");
    }
    if (g->failed) return;
    desc_add(r, "  backward(%s)%s\n", nm(r->loss), open_in_backward ? " inside the scopes above" : "");
    for (int i = 0; i < r->n_params && g->o->optimizer && !g->failed; i++)
        if (chance(g, 0.85)) add_optimizer(g, r->params[i]);
    static const char *suffix[] = {"momentum", "exp_avg", "exp_avg_sq", "sum", "accum", "linear"};
    cap = 0;
    for (int i = 0; i < r->n_params && !g->failed; i++)
        for (int k = 0; k < 6; k++) {
            char name[256];
            snprintf(name, sizeof name, "%s/%s", nm(r->params[i]), suffix[k]);
            hx_tensor *s = hx_graph_find(G, name);
            if (s && !add_unique(&r->state, &r->n_state, &cap, s)) fail(g, "malloc");
        }
    if (!g->failed) choose_fetches(g);
}

/* ---- the generator ------------------------------------------------------------------------------- */

rg_options rg_options_default(void)
{
    return (rg_options){.min_moves = 4, .max_moves = 14, .max_dim = 5, .big = false,
                        .targets = true, .optimizer = false, .ftrl = false};
}

typedef void (*move_fn)(gen *g);
static const struct { move_fn fn; int weight; } moves[] = {
    {mv_unary, 5}, {mv_binary, 6}, {mv_bias_add, 1}, {mv_matmul, 4}, {mv_attention, 1},
    {mv_rows, 2}, {mv_layernorm, 1}, {mv_move, 4}, {mv_reduce, 2}, {mv_half, 2},
    {mv_gather, 2}, {mv_dropout, 1},
};

static void first_leaves(gen *g)
{
    shp sx, sp;
    if (g->o->big) { /* rows x cols >= 32768: kernels split over threads */
        sx = (shp){2, {48, 704 + 64 * rnd(g, 2)}};
        sp = (shp){1, {sx.d[1]}};
    } else {
        sx.nd = 1 + rnd(g, 4);
        for (int i = 0; i < sx.nd; i++) sx.d[i] = small_dim(g);
        sp = broadcast_partner(g, sx);
    }
    hx_tensor *x = leaf(g, LEAF_INPUT, HX_DTYPE_F32, sx, RG_DATA_UNIFORM, 0);
    hx_tensor *p = leaf(g, LEAF_PARAM, HX_DTYPE_F32, sp, RG_DATA_UNIFORM, 0);
    if (!x || !p) return;
    g->pool[g->n_pool++] = (val){x, 1, 1, false};
    g->pool[g->n_pool++] = (val){p, 2, 1, false};
    /* the first op reads the parameter, so the loss depends on one */
    hx_graph *G = g->r->g;
    if (g->o->big) fin(g, hx_bias_add(G, x, p), 3, true, "bias_add(%s, %s)", nm(x), nm(p));
    else if (chance(g, 0.5)) fin(g, hx_mul(G, x, p), 2, true, "mul(%s, %s)", nm(x), nm(p));
    else fin(g, hx_add(G, p, x), 3, true, "add(%s, %s)", nm(p), nm(x));
}

rg_graph *rg_build(uint64_t seed, const rg_options *o)
{
    rg_graph *r = calloc(1, sizeof *r);
    gen *g = calloc(1, sizeof *g);
    if (!r || !g || !(r->g = hx_graph_create())) {
        free(g);
        rg_free(r);
        return NULL;
    }
    r->seed = seed;
    *g = (gen){.r = r, .o = o, .rng = test_rng_make(seed * 7919 + 17)};
    desc_add(r, "random graph, seed %llu%s%s%s\n", (unsigned long long)seed, o->big ? ", big" : "",
             o->optimizer ? ", optimizer" : "", o->ftrl ? ", ftrl allowed" : "");
    first_leaves(g);
    int total = 0;
    for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) total += moves[i].weight;
    int n_moves = o->min_moves + rnd(g, o->max_moves - o->min_moves + 1);
    for (int m = 0; m < n_moves && !g->failed && g->n_pool < POOL_MAX - 16; m++) {
        scope_open(g);
        int u = rnd(g, total);
        size_t k = 0;
        while (u >= moves[k].weight) u -= moves[k++].weight;
        moves[k].fn(g);
        scope_close(g, false);
    }
    bool any_op = false;
    for (int i = 0; i < g->n_pool; i++) any_op |= g->pool[i].op;
    if (!any_op && !g->failed) mv_unary(g);
    if (!g->failed) build_loss(g);
    if (!g->failed) finish(g);
    else scope_close(g, true);
    free(g);
    return r;
}

void rg_free(rg_graph *r)
{
    if (!r) return;
    hx_graph_free(r->g);
    for (int i = 0; i < r->n_inputs; i++) free(r->inputs[i].buf);
    free(r->inputs);
    free(r->fetch);
    free(r->params);
    free(r->state);
    free(r->desc);
    free(r);
}

void rg_feeds(rg_graph *r, uint64_t run, hx_feed *feeds)
{
    for (int i = 0; i < r->n_inputs; i++) {
        rg_input *in = &r->inputs[i];
        size_t bytes = hx_tensor_nbytes(in->t);
        if (!in->buf) in->buf = malloc(bytes ? bytes : 1);
        test_rng rng = test_rng_make((r->seed * 1000003 + run) * 131 + (uint64_t)i);
        if (in->buf) fill(&rng, in->buf, hx_tensor_dtype(in->t), hx_tensor_numel(in->t), in->data, in->hi);
        feeds[i] = (hx_feed){.tensor = in->t, .data = in->buf, .bytes = bytes};
    }
}

const char *rg_describe(const rg_graph *r) { return r && r->desc ? r->desc : ""; }
