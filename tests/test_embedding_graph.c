/* Embedding tables through the public API and the graph: lookup and bag
 * against scalar references, gradients against finite differences and a
 * double backward, a wide & deep step with the MLP on the emulated device
 * (only gathered rows cross), the graph's sparse updates bitwise equal to
 * direct embedding/ calls, non-finite gradients, tables in use, bad ids,
 * and thread counts. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include "embedding/embedding.h"
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* backing: NULL, or a file to hold the table (removed at once: the mapping keeps it). */
static hx_embedding_table *make_table_in(const char *name, int64_t rows, int64_t dim,
                                         hx_dtype dtype, hx_embedding_optimizer_kind opt,
                                         uint64_t seed, const char *backing)
{
    hx_embedding_config c = hx_embedding_config_default();
    c.name = name;
    c.dtype = dtype;
    c.backing_file = backing;
    c.rows = rows;
    c.dim = dim;
    c.seed = seed;
    c.init = hx_init_uniform(-0.5, 0.5);
    c.optimizer = hx_embedding_optimizer_default(opt);
    c.n_threads = 1;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&c, &t));
    if (backing) unlink(backing);
    return t;
}

static hx_embedding_table *make_table(const char *name, int64_t rows, int64_t dim,
                                      hx_embedding_optimizer_kind opt, uint64_t seed)
{
    return make_table_in(name, rows, dim, HX_DTYPE_F32, opt, seed, NULL);
}

/* All rows as f32 (rows * dim). */
static float *read_all(hx_embedding_table *t)
{
    int64_t R = hx_embedding_table_rows(t), D = hx_embedding_table_dim(t);
    int64_t *ids = malloc(sizeof *ids * R);
    float *v = malloc(sizeof *v * R * D);
    for (int64_t r = 0; r < R; r++) ids[r] = r;
    OK(hx_embedding_table_read_rows(t, ids, R, v));
    free(ids);
    return v;
}

/* Whether two local tables hold the same bytes: rows and optimizer state. */
static bool same_storage(const hx_embedding_table *a, const hx_embedding_table *b)
{
    for (int i = 0; i < 3; i++) {
        const hx_emb_region *ra = &a->local->reg[i], *rb = &b->local->reg[i];
        if (ra->bytes != rb->bytes || (ra->bytes && memcmp(ra->ptr, rb->ptr, ra->bytes))) return false;
    }
    return true;
}

static hx_tensor *ids_input(hx_graph *g, const char *name, hx_dtype dt, int64_t n)
{
    return hx_graph_input(g, name, dt, 1, &n);
}

/* Values as i32 or i64 into buf (returns its byte size). */
static size_t put_ids(void *buf, hx_dtype dt, const int64_t *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (dt == HX_DTYPE_I32) ((int32_t *)buf)[i] = (int32_t)v[i];
        else ((int64_t *)buf)[i] = v[i];
    }
    return (size_t)n * hx_dtype_size(dt);
}

/* ---- scalar references ---------------------------------------------------------- */

typedef struct bag_case {
    hx_embedding_bag_mode mode;
    unsigned flags;
    bool weights;
} bag_case;

/* out (nbags, D) in double from rows T (R, D). */
static void bag_ref(const float *T, int64_t D, const int64_t *ids, int64_t n, const int64_t *off,
                    int64_t nbags, const float *w, const bag_case *c, int64_t pad, double *out)
{
    for (int64_t b = 0; b < nbags; b++) {
        int64_t lo = off[b], hi = b + 1 < nbags || (c->flags & HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET)
                                      ? off[b + 1] : n;
        for (int64_t k = 0; k < D; k++) {
            double acc = c->mode == HX_EMBEDDING_BAG_MAX ? -INFINITY : 0;
            int64_t cnt = 0;
            for (int64_t j = lo; j < hi; j++) {
                if ((c->flags & HX_EMBEDDING_BAG_PADDING) && ids[j] == pad) continue;
                double v = T[ids[j] * D + k];
                cnt++;
                if (c->mode == HX_EMBEDDING_BAG_MAX) acc = v > acc ? v : acc;
                else acc += (w ? w[j] : 1.0) * v;
            }
            if (!cnt) acc = 0;
            else if (c->mode == HX_EMBEDDING_BAG_MEAN) acc /= (double)cnt;
            out[b * D + k] = acc;
        }
    }
}

/* d loss / d table (R, D) in double from the bag's output gradient dy. */
static void bag_grad_ref(const float *T, int64_t D, const int64_t *ids, int64_t n,
                         const int64_t *off, int64_t nbags, const float *w, const bag_case *c,
                         int64_t pad, const float *dy, double *dT)
{
    for (int64_t b = 0; b < nbags; b++) {
        int64_t lo = off[b], hi = b + 1 < nbags || (c->flags & HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET)
                                      ? off[b + 1] : n;
        int64_t cnt = 0;
        for (int64_t j = lo; j < hi; j++) cnt += !((c->flags & HX_EMBEDDING_BAG_PADDING) && ids[j] == pad);
        for (int64_t k = 0; k < D; k++) {
            int64_t best = -1;
            for (int64_t j = lo; j < hi; j++) {
                if ((c->flags & HX_EMBEDDING_BAG_PADDING) && ids[j] == pad) continue;
                double g = dy[b * D + k];
                if (c->mode == HX_EMBEDDING_BAG_MAX) {
                    if (best < 0 || T[ids[j] * D + k] > T[ids[best] * D + k]) best = j;
                    continue;
                }
                dT[ids[j] * D + k] += c->mode == HX_EMBEDDING_BAG_MEAN ? g / (double)cnt
                                                                        : (w ? w[j] : 1.0) * g;
            }
            if (best >= 0) dT[ids[best] * D + k] += dy[b * D + k];
        }
    }
}

/* Random bags: sizes 0..4 (about one in five empty); offsets[nbags] = n. */
static int64_t random_bags(test_rng *r, int64_t nbags, int64_t *off)
{
    off[0] = 0;
    for (int64_t b = 0; b < nbags; b++) {
        int64_t size = test_rng_u64(r) % 5 == 0 ? 0 : 1 + (int64_t)(test_rng_u64(r) % 4);
        off[b + 1] = off[b] + size;
    }
    return off[nbags];
}

/* ---- forward ----------------------------------------------------------------------- */

enum { FR = 23, FD = 7, FBAGS = 9, FPAD = 3 };

static void test_forward(hx_dtype idt, hx_dtype storage)
{
    test_rng r = test_rng_make(11 + idt + 7 * storage);
    hx_embedding_config c = hx_embedding_config_default();
    c.name = "fwd";
    c.rows = FR;
    c.dim = FD;
    c.dtype = storage;
    c.init = hx_init_normal(0, 1);
    c.lazy_init = storage == HX_DTYPE_BF16;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&c, &t));
    if (!t) return;
    float *T = read_all(t);

    static const bag_case cases[] = {
        {HX_EMBEDDING_BAG_SUM, 0, false},
        {HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, true},
        {HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET, true},
        {HX_EMBEDDING_BAG_MEAN, 0, false},
        {HX_EMBEDDING_BAG_MEAN, HX_EMBEDDING_BAG_PADDING | HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET, false},
        {HX_EMBEDDING_BAG_MAX, 0, false},
        {HX_EMBEDDING_BAG_MAX, HX_EMBEDDING_BAG_PADDING, false},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    int64_t off[NC][FBAGS + 1], n[NC], ids[NC][4 * FBAGS + 1];
    float w[NC][4 * FBAGS + 1];
    hx_graph *g = hx_graph_create();
    hx_tensor *outs[NC + 1];
    char name[64];
    for (int k = 0; k < NC; k++) {
        n[k] = random_bags(&r, FBAGS, off[k]);
        if (!n[k]) n[k] = off[k][FBAGS] = 1; /* inputs need n >= 1: the last bag gets one id */
        for (int64_t j = 0; j < n[k]; j++) {
            ids[k][j] = j % 3 == 0 ? FPAD : (int64_t)(test_rng_u64(&r) % FR); /* repeats, padding */
            w[k][j] = (float)test_rng_uniform(&r, -2, 2);
        }
        bool last = cases[k].flags & HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET;
        snprintf(name, sizeof name, "ids%d", k);
        hx_tensor *ti = ids_input(g, name, idt, n[k]);
        snprintf(name, sizeof name, "off%d", k);
        hx_tensor *to = ids_input(g, name, idt, FBAGS + last);
        snprintf(name, sizeof name, "w%d", k);
        hx_tensor *tw = cases[k].weights ? hx_graph_input(g, name, HX_DTYPE_F32, 1, &n[k]) : NULL;
        outs[k] = hx_embedding_bag(g, t, ti, to, tw, cases[k].mode, cases[k].flags, FPAD);
        CHECK(outs[k] && hx_tensor_dim(outs[k], 0) == FBAGS && hx_tensor_dim(outs[k], 1) == FD,
              "bag %d: %s", k, hx_last_error());
    }
    int64_t lshape[2] = {4, 6}, lids[24];
    hx_tensor *li = hx_graph_input(g, "lookup_ids", idt, 2, lshape);
    outs[NC] = hx_embedding_lookup(g, t, li);
    CHECK(outs[NC] && hx_tensor_ndim(outs[NC]) == 3 && hx_tensor_dim(outs[NC], 2) == FD, "lookup shape");
    for (int i = 0; i < 24; i++) lids[i] = (int64_t)(test_rng_u64(&r) % 5); /* duplicates */

    hx_session *s = test_session(g, HX_ACCELERATOR_NONE, 2);
    if (s) {
        char idbuf[NC][2][(4 * FBAGS + 1) * 8], lbuf[24 * 8];
        hx_feed feeds[3 * NC + 1];
        int nf = 0;
        for (int k = 0; k < NC; k++) {
            bool last = cases[k].flags & HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET;
            feeds[nf++] = (hx_feed){.tensor = outs[k]->src[0], .data = idbuf[k][0],
                                    .bytes = put_ids(idbuf[k][0], idt, ids[k], n[k])};
            feeds[nf++] = (hx_feed){.tensor = outs[k]->src[1], .data = idbuf[k][1],
                                    .bytes = put_ids(idbuf[k][1], idt, off[k], FBAGS + last)};
            if (cases[k].weights)
                feeds[nf++] = (hx_feed){.tensor = outs[k]->src[2], .data = w[k],
                                        .bytes = sizeof(float) * n[k]};
        }
        feeds[nf++] = (hx_feed){.tensor = li, .data = lbuf, .bytes = put_ids(lbuf, idt, lids, 24)};
        float got[NC][FBAGS * FD], lgot[24 * FD];
        hx_fetch fetches[NC + 1];
        for (int k = 0; k < NC; k++) fetches[k] = (hx_fetch){.tensor = outs[k], .data = got[k], .bytes = sizeof got[k]};
        fetches[NC] = (hx_fetch){.tensor = outs[NC], .data = lgot, .bytes = sizeof lgot};
        OK(hx_session_run(s, feeds, nf, fetches, NC + 1, 0));
        for (int k = 0; k < NC; k++) {
            double want[FBAGS * FD];
            bag_ref(T, FD, ids[k], n[k], off[k], FBAGS, cases[k].weights ? w[k] : NULL, &cases[k],
                    FPAD, want);
            snprintf(name, sizeof name, "bag case %d (%s ids, %s table)", k, hx_dtype_name(idt),
                     hx_dtype_name(storage));
            CHECK(test_close_f32(name, got[k], want, FBAGS * FD, 1e-5, 1e-6), "%s", name);
        }
        bool exact = true;
        for (int i = 0; i < 24; i++) exact &= !memcmp(lgot + i * FD, T + lids[i] * FD, sizeof(float) * FD);
        CHECK(exact, "lookup rows equal the rows read back (%s ids)", hx_dtype_name(idt));
    }
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
    free(T);
}

/* ---- gradients ------------------------------------------------------------------------ */

enum { GR = 12, GD = 5, GBAGS = 6 };

/* An Adagrad whose step is -g: accumulator 1e12 (g^2 vanishes next to it in
 * f32), lr = sqrt(1e12), eps 0. */
static hx_embedding_optimizer gradient_reader(void)
{
    hx_embedding_optimizer o = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    o.lr = 1e6;
    o.initial_accumulator = 1e12;
    o.eps = 0;
    return o;
}

static void test_gradients(void)
{
    test_rng r = test_rng_make(5);
    hx_embedding_table *t = make_table("grad", GR, GD, HX_EMBEDDING_OPTIMIZER_NONE, 3);
    if (!t) return;
    hx_embedding_optimizer o = gradient_reader();
    OK(hx_embedding_table_set_optimizer(t, &o));
    static const bag_case cases[] = {{HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, true},
                                     {HX_EMBEDDING_BAG_MEAN, 0, false},
                                     {HX_EMBEDDING_BAG_MAX, 0, false}};
    enum { NC = 3 };
    int64_t off[NC][GBAGS + 1], n[NC], ids[NC][4 * GBAGS + 1], lids[8];
    float w[NC][4 * GBAGS + 1], C[NC + 1][8 * GD];
    hx_graph *g = hx_graph_create();
    hx_tensor *outs[NC + 1], *loss = NULL;
    char name[64];
    for (int k = 0; k < NC; k++) {
        n[k] = random_bags(&r, GBAGS, off[k]);
        if (!n[k]) n[k] = off[k][GBAGS] = 1;
        for (int64_t j = 0; j < n[k]; j++) {
            ids[k][j] = (int64_t)(test_rng_u64(&r) % (GR - 1)); /* row GR - 1 stays untouched */
            w[k][j] = (float)test_rng_uniform(&r, -1, 1);
        }
        snprintf(name, sizeof name, "ids%d", k);
        hx_tensor *ti = ids_input(g, name, HX_DTYPE_I64, n[k]);
        snprintf(name, sizeof name, "off%d", k);
        hx_tensor *to = ids_input(g, name, HX_DTYPE_I64, GBAGS);
        snprintf(name, sizeof name, "w%d", k);
        /* the weights are a parameter: they get a gradient too */
        hx_tensor *tw = cases[k].weights ? hx_graph_param(g, name, HX_DTYPE_F32, 1, &n[k], hx_init_uniform(-1, 1)) : NULL;
        outs[k] = hx_embedding_bag(g, t, ti, to, tw, cases[k].mode, cases[k].flags, ids[k][0]);
    }
    for (int i = 0; i < 8; i++) lids[i] = (int64_t)(test_rng_u64(&r) % 4);
    outs[NC] = hx_embedding_lookup(g, t, ids_input(g, "lids", HX_DTYPE_I64, 8));
    for (int k = 0; k <= NC; k++) {
        int64_t rows = k < NC ? GBAGS : 8, shape[2] = {rows, GD};
        test_fill_uniform(&r, C[k], rows * GD, -1, 1);
        snprintf(name, sizeof name, "C%d", k);
        hx_tensor *y = k < NC ? outs[k] : hx_tanh(g, outs[k]); /* one non-linear consumer */
        hx_tensor *term = hx_reduce_sum(g, hx_mul(g, y, hx_graph_constant(g, name, HX_DTYPE_F32, 2, shape, C[k])), 0, NULL, false);
        loss = loss ? hx_add(g, loss, term) : term;
    }
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config dense = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &dense));
    hx_session *s = test_session(g, HX_ACCELERATOR_NONE, 1);
    if (!s) goto out;
    hx_feed feeds[3 * NC + 1];
    int nf = 0;
    for (int k = 0; k < NC; k++) {
        feeds[nf++] = (hx_feed){.tensor = outs[k]->src[0], .data = ids[k], .bytes = 8 * n[k]};
        feeds[nf++] = (hx_feed){.tensor = outs[k]->src[1], .data = off[k], .bytes = 8 * GBAGS};
        if (cases[k].weights) OK(hx_session_read(s, outs[k]->src[2], w[k], 4 * n[k]));
    }
    feeds[nf++] = (hx_feed){.tensor = outs[NC]->src[0], .data = lids, .bytes = sizeof lids};

    /* Finite differences of the loss over some elements, before training. */
    float *T = read_all(t);
    enum { NPROBE = 14 };
    int64_t probe[NPROBE];
    double fd[NPROBE];
    for (int i = 0; i < NPROBE; i++) {
        probe[i] = i == 0 ? (GR - 1) * GD + 2 : (int64_t)(test_rng_u64(&r) % ((GR - 1) * GD));
        int64_t row = probe[i] / GD;
        float v[GD], l[2];
        for (int side = 0; side < 2; side++) {
            memcpy(v, T + row * GD, sizeof v);
            v[probe[i] % GD] += side ? -1e-3f : 1e-3f;
            OK(hx_embedding_table_write_rows(t, &row, 1, v));
            hx_fetch f = {.tensor = loss, .data = &l[side], .bytes = 4};
            OK(hx_session_run(s, feeds, nf, &f, 1, 0));
        }
        OK(hx_embedding_table_write_rows(t, &row, 1, T + row * GD));
        /* the step taken by the rows written back is exactly the +-h */
        fd[i] = ((double)l[0] - (double)l[1]) / 2e-3;
    }
    /* One training step reads the gradient out (-g per element), and the
     * outputs' gradients give the double reference. */
    float dy[NC + 1][GBAGS * GD * 2], dw[4 * GBAGS + 1];
    hx_fetch fetches[NC + 2];
    for (int k = 0; k <= NC; k++)
        fetches[k] = (hx_fetch){.tensor = hx_tensor_grad(outs[k]), .data = dy[k],
                                .bytes = hx_tensor_nbytes(outs[k])};
    fetches[NC + 1] = (hx_fetch){.tensor = hx_tensor_grad(outs[0]->src[2]), .data = dw, .bytes = 4 * n[0]};
    OK(hx_session_run(s, feeds, nf, fetches, NC + 2, HX_RUN_TRAIN));
    float *after = read_all(t);
    double ref[GR * GD] = {0};
    for (int k = 0; k < NC; k++)
        bag_grad_ref(T, GD, ids[k], n[k], off[k], GBAGS, cases[k].weights ? w[k] : NULL, &cases[k],
                     ids[k][0], dy[k], ref);
    for (int i = 0; i < 8; i++)
        for (int c = 0; c < GD; c++) ref[lids[i] * GD + c] += dy[NC][i * GD + c];
    float step[GR * GD];
    for (int i = 0; i < GR * GD; i++) step[i] = T[i] - after[i];
    CHECK(test_close_f32("table gradient vs double backward", step, ref, GR * GD, 1e-5, 2e-7),
          "sparse gradient through the graph");
    for (int i = 0; i < NPROBE; i++)
        CHECK(fabs(step[probe[i]] - fd[i]) <= 2e-3 + 2e-3 * fabs(fd[i]),
              "element %lld: step %g, finite difference %g", (long long)probe[i],
              (double)step[probe[i]], fd[i]);
    CHECK(!memcmp(T + (GR - 1) * GD, after + (GR - 1) * GD, sizeof(float) * GD),
          "an untouched row changed");
    /* d loss / d w_j = row(ids[j]) . dy[bag(j)], 0 for padding */
    double dw_ref[4 * GBAGS + 1];
    for (int64_t b = 0; b < GBAGS; b++)
        for (int64_t j = off[0][b]; j < (b + 1 < GBAGS ? off[0][b + 1] : n[0]); j++) {
            dw_ref[j] = 0;
            for (int c = 0; c < GD && ids[0][j] != ids[0][0]; c++)
                dw_ref[j] += (double)T[ids[0][j] * GD + c] * dy[0][b * GD + c];
        }
    CHECK(test_close_f32("per-sample weights' gradient", dw, dw_ref, n[0], 1e-5, 1e-6),
          "d loss / d per-sample weights");
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(t, &st));
    CHECK(st.updates == 1, "4 lookups of one table: one update per step, got %lld",
          (long long)st.updates);
    free(T);
    free(after);
out:
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
}

/* ---- wide & deep: the table on the CPU, the MLP on the emulated device ---------------- */

enum { WB = 64, WF = 3, WR = 60, WD = 8, WH = 16 };

/* Sample b: WF ids, one per feature range; its label is the parity of the first. */
static void wd_batch(test_rng *r, int64_t *ids, int64_t *off, float *y)
{
    for (int b = 0; b < WB; b++) {
        off[b] = b * WF;
        for (int f = 0; f < WF; f++) ids[b * WF + f] = f * (WR / WF) + (int64_t)(test_rng_u64(r) % (WR / WF));
        y[b] = (float)(ids[b * WF] & 1);
    }
}

static void test_wide_deep(void)
{
    test_rng r = test_rng_make(21);
    hx_embedding_table *t = make_table("items", WR, WD, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, 9);
    if (!t) return;
    hx_embedding_optimizer o = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
    o.lr = 0.05;
    OK(hx_embedding_table_set_optimizer(t, &o));
    hx_graph *g = hx_graph_create();
    int64_t n = WB * WF, nb = WB, ys[2] = {WB, 1}, w1s[2] = {WD, WH}, w2s[2] = {WH, 1};
    hx_tensor *ids = ids_input(g, "ids", HX_DTYPE_I64, n), *off = ids_input(g, "off", HX_DTYPE_I64, nb);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, ys);
    hx_tensor *w1 = hx_graph_param(g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1));
    hx_tensor *w2 = hx_graph_param(g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(1));
    OK(hx_tensor_set_target(w1, HX_TARGET_DEVICE)); /* dense params live on the device */
    OK(hx_tensor_set_target(w2, HX_TARGET_DEVICE));
    hx_tensor *e = hx_embedding_bag(g, t, ids, off, NULL, HX_EMBEDDING_BAG_SUM, 0, 0);
    OK(hx_graph_push_target(g, HX_TARGET_DEVICE));
    hx_tensor *logits = hx_matmul(g, hx_relu(g, hx_matmul(g, e, w1, false, false)), w2, false, false);
    hx_tensor *loss = hx_bce_with_logits(g, logits, y);
    OK(hx_graph_pop_target(g));
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    adam.lr = 0.01;
    OK(hx_graph_apply_optimizer(g, NULL, &adam));
    hx_session *s = test_session(g, HX_ACCELERATOR_EMU, 2);
    if (!s) goto out;
    int64_t idv[WB * WF], offv[WB];
    float yv[WB], l, first = 0, last = 0;
    hx_feed feeds[3] = {{.tensor = ids, .data = idv, .bytes = sizeof idv},
                        {.tensor = off, .data = offv, .bytes = sizeof offv},
                        {.tensor = y, .data = yv, .bytes = sizeof yv}};
    hx_fetch fl = {.tensor = loss, .data = &l, .bytes = sizeof l};
    enum { STEPS = 120 };
    for (int k = 0; k < STEPS; k++) {
        wd_batch(&r, idv, offv, yv);
        OK(hx_session_run(s, feeds, 3, &fl, 1, HX_RUN_TRAIN));
        if (k < 10) first += l / 10;
        if (k >= STEPS - 10) last += l / 10;
    }
    CHECK(last < 0.5f * first, "loss fell from %g to %g", (double)first, (double)last);
    hx_placement_stats ps;
    OK(hx_session_placement_stats(s, &ps));
    size_t rows = sizeof(float) * WB * WD;
    /* Per step: the gathered rows to the device and their gradient back; else
     * only the labels and the loss's gradient seed (4 bytes) cross. */
    CHECK(ps.n_device_ops > 0 && ps.n_d2h == 1 && ps.copy_bytes >= 2 * rows &&
          ps.copy_bytes - 2 * rows <= sizeof yv + sizeof(float),
          "training copies: %d h2d, %d d2h, %zu bytes (want the rows both ways, %zu, plus the "
          "labels and the seed)", ps.n_h2d, ps.n_d2h, ps.copy_bytes, 2 * rows);
    float lg[WB];
    hx_fetch fg = {.tensor = logits, .data = lg, .bytes = sizeof lg};
    OK(hx_session_run(s, feeds, 2, &fg, 1, 0));
    OK(hx_session_placement_stats(s, &ps));
    CHECK(ps.n_copies == 1 && ps.copy_bytes == rows,
          "inference copies the gathered rows only: %d copies, %zu bytes (want %zu = n * dim * 4)",
          ps.n_copies, ps.copy_bytes, rows);
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(t, &st));
    CHECK(st.updates == STEPS && st.graphs == 1, "updates %lld, graphs %d", (long long)st.updates,
          st.graphs);
out:
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
}

/* ---- the graph's updates equal direct embedding/ calls ------------------------------------ */

enum { BR = 40, BD = 9, BN = 30, BBAGS = 8, BSTEPS = 3 };

/* The graph trains table a (bf16: in a file), embedding/ trains b directly. */
static void test_bitwise(hx_embedding_optimizer_kind kind, bool twice, hx_dtype dtype)
{
    test_rng r = test_rng_make(31 + kind);
    char path[64];
    snprintf(path, sizeof path, "/tmp/hx_emb_graph_a_%d.tbl", (int)getpid());
    hx_embedding_table *a = make_table_in("a", BR, BD, dtype, kind, 4, dtype == HX_DTYPE_F32 ? NULL : path);
    hx_embedding_table *b = make_table_in("b", BR, BD, dtype, kind, 4, NULL);
    if (!a || !b) return;
    hx_graph *g = hx_graph_create();
    int64_t n = BN, shape[2] = {BBAGS, BD}, lshape[2] = {BN, BD};
    hx_tensor *ids = ids_input(g, "ids", HX_DTYPE_I64, n), *off = ids_input(g, "off", HX_DTYPE_I64, BBAGS);
    hx_tensor *w = hx_graph_input(g, "w", HX_DTYPE_F32, 1, &n);
    float C[BBAGS * BD], C2[BN * BD];
    test_fill_uniform(&r, C, BBAGS * BD, -1, 1);
    test_fill_uniform(&r, C2, BN * BD, -1, 1);
    hx_tensor *e = hx_embedding_bag(g, a, ids, off, w, HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, 5);
    hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, e, hx_graph_constant(g, "C", HX_DTYPE_F32, 2, shape, C)), 0, NULL, false);
    if (twice) {
        hx_tensor *l2 = hx_embedding_lookup(g, a, ids);
        loss = hx_add(g, loss, hx_reduce_sum(g, hx_mul(g, l2, hx_graph_constant(g, "C2", HX_DTYPE_F32, 2, lshape, C2)), 0, NULL, false));
    }
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config dense = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &dense));
    hx_session *s = test_session(g, HX_ACCELERATOR_NONE, 2);
    if (!s) goto out;
    for (int step = 1; step <= BSTEPS; step++) {
        int64_t idv[BN], offv[BBAGS + 1];
        float wv[BN];
        random_bags(&r, BBAGS, offv);
        for (int j = 0; j < BN; j++) {
            idv[j] = (int64_t)(test_rng_u64(&r) % 12); /* heavy repeats, padding id 5 among them */
            wv[j] = (float)test_rng_uniform(&r, -1, 1);
        }
        for (int k = 0; k < BBAGS; k++) offv[k] = offv[k] < BN ? offv[k] : BN;
        hx_feed feeds[3] = {{.tensor = ids, .data = idv, .bytes = sizeof idv},
                            {.tensor = off, .data = offv, .bytes = 8 * BBAGS},
                            {.tensor = w, .data = wv, .bytes = sizeof wv}};
        OK(hx_session_run(s, feeds, 3, NULL, 0, HX_RUN_TRAIN));
        /* The same step, called directly. */
        hx_emb_query q[2] = {hx_emb_query_bags(idv, BN, offv, BBAGS, HX_EMB_SUM), hx_emb_query_rows(idv, BN)};
        q[0].weights = wv;
        q[0].has_padding = 1;
        q[0].padding_id = 5;
        hx_emb_grad_input gi[2] = {{C, NULL, BD, HX_EMB_DEDUP_AUTO}, {C2, NULL, BD, HX_EMB_DEDUP_AUTO}};
        hx_emb_err err;
        CHECK(hx_emb_table_backward_update_many(b->impl, q, gi, twice ? 2 : 1, step, NULL, &err) == HX_OK,
              "%s", err.msg);
    }
    CHECK(same_storage(a, b), "%s%s, %s: the graph's table differs from direct calls after %d steps",
          hx_emb_optim_name((hx_emb_optim_kind)kind), twice ? " (two lookups)" : "",
          hx_dtype_name(dtype), BSTEPS);
    float *va = read_all(a), *v0 = NULL;
    hx_embedding_table *fresh = make_table_in("fresh", BR, BD, dtype, kind, 4, NULL);
    if (fresh) v0 = read_all(fresh);
    CHECK(v0 && memcmp(va, v0, sizeof(float) * BR * BD), "the table did not train");
    free(va);
    free(v0);
    OK(hx_embedding_table_free(fresh));
out:
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(a));
    OK(hx_embedding_table_free(b));
}

/* ---- non-finite gradients and loss scaling ------------------------------------------------ */

enum { NR = 16, ND = 4, NN = 6 };

/* A session training table t: loss = sum(lookup(ids) * x). */
static hx_session *scaled_session(hx_embedding_table *t, hx_graph **g, bool scaling)
{
    *g = hx_graph_create();
    int64_t n = NN, xs[2] = {NN, ND};
    hx_tensor *ids = ids_input(*g, "ids", HX_DTYPE_I64, n);
    hx_tensor *x = hx_graph_input(*g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *loss = hx_reduce_sum(*g, hx_mul(*g, hx_embedding_lookup(*g, t, ids), x), 0, NULL, false);
    OK(hx_graph_backward(*g, loss));
    hx_optimizer_config dense = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(*g, NULL, &dense));
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.n_threads = 1;
    cfg.loss_scale.enabled = scaling;
    hx_session *s = NULL;
    OK(hx_session_create(*g, &cfg, &s));
    return s;
}

static hx_status train_step(hx_session *s, const int64_t *ids, const float *x)
{
    hx_feed f[2] = {{.name = "ids", .data = ids, .bytes = 8 * NN},
                    {.name = "x", .data = x, .bytes = 4 * NN * ND}};
    return hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
}

static void test_nonfinite(void)
{
    hx_embedding_table *t = make_table("user_emb", NR, ND, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, 2);
    hx_embedding_table *u = make_table("other", NR, ND, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, 2);
    if (!t || !u) return;
    test_rng r = test_rng_make(8);
    int64_t ids[NN] = {1, 3, 3, 7, 1, 15};
    float x[NN * ND];
    test_fill_uniform(&r, x, NN * ND, -1, 1);
    hx_graph *g, *h;
    hx_session *s = scaled_session(t, &g, false), *ss = scaled_session(u, &h, true);
    if (!s || !ss) goto out;
    /* Loss scaling divides the (power of two) scale out exactly: the same steps. */
    OK(train_step(s, ids, x));
    OK(train_step(ss, ids, x));
    CHECK(same_storage(t, u), "a loss-scaled step differs from an unscaled one");
    hx_embedding_table *before = make_table("copy", NR, ND, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, 2);
    float *v0 = read_all(t);
    x[5] = NAN;
    hx_status st = train_step(s, ids, x);
    CHECK(st == HX_ERR_NUMERIC && strstr(hx_last_error(), "user_emb"),
          "a NaN gradient: %s, message '%s' should name the table", hx_status_name(st), hx_last_error());
    float *v1 = read_all(t);
    CHECK(!memcmp(v0, v1, sizeof(float) * NR * ND), "a failed step changed the table");
    hx_embedding_stats es;
    OK(hx_embedding_table_stats(t, &es));
    CHECK(es.updates == 1, "updates %lld after a failed step", (long long)es.updates);
    /* With loss scaling the step is skipped: the table stays, the run succeeds. */
    float *u0 = read_all(u);
    OK(train_step(ss, ids, x));
    hx_train_stats ts;
    OK(hx_session_train_stats(ss, &ts));
    float *u1 = read_all(u);
    CHECK(ts.last_skipped && !memcmp(u0, u1, sizeof(float) * NR * ND), "the skipped step changed the table");
    free(v0);
    free(v1);
    free(u0);
    free(u1);
    OK(hx_embedding_table_free(before));
out:
    hx_session_free(s);
    hx_session_free(ss);
    hx_graph_free(g);
    hx_graph_free(h);
    OK(hx_embedding_table_free(t));
    OK(hx_embedding_table_free(u));
}

/* ---- tables in use, errors, save and load ------------------------------------------------------ */

static void test_lifetime_and_errors(void)
{
    hx_embedding_config c = hx_embedding_config_default();
    hx_embedding_table *t = NULL;
    c.name = "big";
    CHECK(hx_embedding_table_create(&c, &t) == HX_ERR_SHAPE && !t &&
              strstr(hx_last_error(), "hx_embedding_table_create 'big'") &&
              strstr(hx_last_error(), "0 x 0"),
          "rows 0: embedding/'s message routed with where: %s", hx_last_error());
    c.rows = 10;
    c.dim = 4;
    c.init = hx_init_xavier_uniform(1);
    CHECK(hx_embedding_table_create(&c, &t) == HX_ERR_INVALID_ARGUMENT, "xavier init refused");
    c.init = hx_init_uniform(-1, 1);
    c.optimizer.kind = HX_EMBEDDING_OPTIMIZER_FTRL;
    c.optimizer.lr = 0;
    CHECK(hx_embedding_table_create(&c, &t) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "FTRL") && strstr(hx_last_error(), "lr"),
          "FTRL lr 0: %s", hx_last_error());
    c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_FTRL);
    c.min_count = 3;
    CHECK(hx_embedding_table_create(&c, &t) == HX_ERR_INVALID_ARGUMENT, "min_count on a ROWS table");
    c.min_count = 0;
    OK(hx_embedding_table_create(&c, &t));
    if (!t) return;

    hx_graph *g = hx_graph_create();
    int64_t n = 4;
    hx_tensor *ids = ids_input(g, "ids", HX_DTYPE_I64, n);
    hx_tensor *fids = hx_graph_input(g, "fids", HX_DTYPE_F32, 1, &n);
    CHECK(!hx_embedding_lookup(g, t, fids) && strstr(hx_last_error(), "i32 or i64"), "f32 ids refused");
    CHECK(!hx_embedding_lookup(g, NULL, ids), "NULL table refused");
    hx_tensor *off32 = hx_graph_input(g, "off32", HX_DTYPE_I32, 1, &n);
    int before = hx_graph_tensor_count(g);
    CHECK(!hx_embedding_bag(g, t, ids, off32, NULL, HX_EMBEDDING_BAG_SUM, 0, 0) &&
              hx_graph_tensor_count(g) == before,
          "offsets of another dtype refused, graph unchanged");
    CHECK(!hx_embedding_bag(g, t, ids, ids, fids, HX_EMBEDDING_BAG_MEAN, 0, 0), "weights need SUM");
    CHECK(!hx_embedding_bag(g, t, ids, ids, NULL, HX_EMBEDDING_BAG_SUM, 8, 0), "unknown flag");
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(t, &st));
    CHECK(st.graphs == 0, "failed builds hold the table: %d", st.graphs);
    hx_tensor *e = hx_embedding_lookup(g, t, ids);
    hx_embedding_lookup(g, t, ids);
    OK(hx_embedding_table_stats(t, &st));
    CHECK(e && st.graphs == 1, "a graph counts once: %d", st.graphs);
    CHECK(hx_embedding_table_free(t) == HX_ERR_STATE && strstr(hx_last_error(), "'big'"),
          "freeing a table in use: %s", hx_last_error());
    hx_graph *g2 = hx_graph_create();
    hx_embedding_lookup(g2, t, ids_input(g2, "ids", HX_DTYPE_I32, n));
    OK(hx_embedding_table_stats(t, &st));
    CHECK(st.graphs == 2, "two graphs: %d", st.graphs);
    hx_graph_free(g2);

    /* save, change, load back; a corrupt file changes nothing */
    char path[64];
    snprintf(path, sizeof path, "/tmp/hx_emb_graph_%d.tbl", (int)getpid());
    float *v0 = read_all(t), row[4] = {1, 2, 3, 4};
    int64_t r3 = 3;
    OK(hx_embedding_table_save(t, path));
    OK(hx_embedding_table_write_rows(t, &r3, 1, row));
    float *v1 = read_all(t);
    CHECK(!memcmp(v1 + 12, row, sizeof row), "write_rows");
    FILE *f = fopen(path, "r+b");
    if (f) {
        fseek(f, -9, SEEK_END);
        fputc(0x5a, f);
        fclose(f);
    }
    CHECK(hx_embedding_table_load(t, path) == HX_ERR_CORRUPT && strstr(hx_last_error(), "'big'"),
          "corrupt file: %s", hx_last_error());
    float *v2 = read_all(t);
    CHECK(!memcmp(v1, v2, sizeof(float) * 40), "a failed load changed the table");
    OK(hx_embedding_table_save(t, path));
    OK(hx_embedding_table_write_rows(t, &r3, 1, v0 + 12));
    OK(hx_embedding_table_load(t, path));
    float *v3 = read_all(t);
    CHECK(!memcmp(v1, v3, sizeof(float) * 40), "load restores the saved rows");
    int64_t bad = 10;
    CHECK(hx_embedding_table_read_rows(t, &bad, 1, row) == HX_ERR_INDEX, "read_rows of row 10");
    unlink(path);
    free(v0);
    free(v1);
    free(v2);
    free(v3);

    hx_graph_free(g);
    OK(hx_embedding_table_stats(t, &st));
    CHECK(st.graphs == 0, "graphs freed: %d", st.graphs);
    OK(hx_embedding_table_free(t));
    OK(hx_embedding_table_free(NULL));
}

/* ---- bad ids and id mappings ------------------------------------------------------------------ */

enum { IR = 10, ID = 3, IN = 5 };

/* Runs lookup(ids) on t (train or not); out (IN, ID). */
static hx_status lookup_run(hx_embedding_table *t, const int64_t *ids, bool train, float *out)
{
    hx_graph *g = hx_graph_create();
    int64_t n = IN;
    hx_tensor *x = ids_input(g, "ids", HX_DTYPE_I64, n);
    hx_tensor *e = hx_embedding_lookup(g, t, x);
    hx_tensor *loss = hx_reduce_sum(g, e, 0, NULL, false);
    if (train) {
        OK(hx_graph_backward(g, loss));
        hx_optimizer_config dense = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
        OK(hx_graph_apply_optimizer(g, NULL, &dense));
    }
    hx_session *s = test_session(g, HX_ACCELERATOR_NONE, 1);
    hx_feed f = {.tensor = x, .data = ids, .bytes = 8 * IN};
    hx_fetch o = {.tensor = e, .data = out, .bytes = 4 * IN * ID};
    hx_status st = s ? hx_session_run(s, &f, 1, &o, 1, train ? HX_RUN_TRAIN : 0) : HX_ERR_INTERNAL;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hx_last_error());
    hx_session_free(s);
    hx_graph_free(g);
    hx__error(st, "%s", msg);
    return st;
}

static hx_embedding_table *id_table(hx_embedding_ids ids, hx_embedding_out_of_range oob)
{
    hx_embedding_config c = hx_embedding_config_default();
    c.name = "ids";
    c.rows = IR;
    c.dim = ID;
    c.ids = ids;
    c.out_of_range = oob;
    c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&c, &t));
    return t;
}

static void test_ids(void)
{
    int64_t bad[IN] = {1, 2, 99, 4, -3};
    float out[IN * ID];
    hx_embedding_table *t = id_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OUT_OF_RANGE_ERROR);
    if (!t) return;
    float *v0 = read_all(t);
    for (int train = 0; train < 2; train++) {
        hx_status st = lookup_run(t, bad, train, out);
        CHECK(st == HX_ERR_INDEX && strstr(hx_last_error(), "id 99 at position 2") &&
                  strstr(hx_last_error(), "table 'ids'") && strstr(hx_last_error(), "HX_EMBEDDING_IDS_MODULO"),
              "a bad id (train %d): %s: %s", train, hx_status_name(st), hx_last_error());
    }
    float *v1 = read_all(t);
    CHECK(!memcmp(v0, v1, sizeof(float) * IR * ID), "a failed run changed the table");
    free(v1);
    OK(hx_embedding_table_free(t));

    t = id_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OUT_OF_RANGE_ZERO);
    if (!t) goto out;
    OK(lookup_run(t, bad, false, out));
    bool ok = true;
    for (int i = 0; i < IN; i++)
        for (int k = 0; k < ID; k++)
            ok &= out[i * ID + k] == (bad[i] < 0 || bad[i] >= IR ? 0.0f : v0[bad[i] * ID + k]);
    CHECK(ok, "out-of-range ids read as zero rows");
    OK(lookup_run(t, bad, true, out));
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(t, &st));
    CHECK(st.out_of_range == 4 && st.updates == 1, "out_of_range %lld (want 2 per run), updates %lld",
          (long long)st.out_of_range, (long long)st.updates);
    v1 = read_all(t);
    for (int r = 0; r < IR; r++) {
        bool touched = r == 1 || r == 2 || r == 4;
        CHECK(touched == !!memcmp(v0 + r * ID, v1 + r * ID, sizeof(float) * ID),
              "row %d %s", r, touched ? "not updated" : "updated");
    }
    free(v1);
    OK(hx_embedding_table_free(t));

    t = id_table(HX_EMBEDDING_IDS_MODULO, HX_EMBEDDING_OUT_OF_RANGE_ERROR);
    if (!t) goto out;
    int64_t keys[IN] = {-1, ((int64_t)1 << 40) + 3, INT64_MIN, 7, INT64_MAX};
    OK(lookup_run(t, keys, false, out));
    ok = true;
    for (int i = 0; i < IN; i++)
        ok &= !memcmp(out + i * ID, v0 + (int64_t)((uint64_t)keys[i] % IR) * ID, sizeof(float) * ID);
    CHECK(ok, "MODULO: row = (uint64) id mod rows");
    OK(hx_embedding_table_free(t));

    t = id_table(HX_EMBEDDING_IDS_DYNAMIC, HX_EMBEDDING_OUT_OF_RANGE_ERROR);
    if (!t) goto out;
    int64_t dk[IN] = {1000, -5, 1000, 77, ((int64_t)1 << 62)};
    OK(lookup_run(t, dk, false, out));
    ok = true;
    for (int i = 0; i < IN * ID; i++) ok &= out[i] == 0;
    OK(hx_embedding_table_stats(t, &st));
    CHECK(ok && st.rows_assigned == 0, "DYNAMIC: unseen ids read as zeros, get no row outside training");
    OK(lookup_run(t, dk, true, out));
    OK(hx_embedding_table_stats(t, &st));
    float back[IN * ID];
    OK(hx_embedding_table_read_rows(t, dk, IN, back));
    ok = out[0] != 0 && !memcmp(out, out + 2 * ID, sizeof(float) * ID); /* id 1000 twice */
    for (int i = 0; i < IN; i++) ok &= memcmp(back + i * ID, out + i * ID, sizeof(float) * ID) != 0;
    CHECK(st.rows_assigned == 4 && st.updates == 1 && ok,
          "DYNAMIC: a training run gives each new id a row (%lld) and updates it",
          (long long)st.rows_assigned);
    int64_t unseen = 31337;
    CHECK(hx_embedding_table_write_rows(t, &unseen, 1, back) == HX_ERR_NOT_FOUND, "write to an id without a row");
    OK(hx_embedding_table_free(t));
out:
    free(v0);
}

/* A DYNAMIC table trained by one session: min_count and expiry by step. */
static void test_dynamic_training(void)
{
    hx_embedding_config c = hx_embedding_config_default();
    c.name = "dyn";
    c.rows = 4;
    c.dim = 2;
    c.ids = HX_EMBEDDING_IDS_DYNAMIC;
    c.min_count = 2;
    c.expire_after = 2;
    c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&c, &t));
    if (!t) return;
    hx_graph *g = hx_graph_create();
    int64_t n = 2;
    hx_tensor *ids = ids_input(g, "ids", HX_DTYPE_I64, n);
    OK(hx_graph_backward(g, hx_reduce_sum(g, hx_embedding_lookup(g, t, ids), 0, NULL, false)));
    hx_optimizer_config dense = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &dense));
    hx_session *s = test_session(g, HX_ACCELERATOR_NONE, 1);
    /* step 1: id 500 seen twice (min_count 2: it gets a row); steps 2..4: id 9 */
    int64_t batches[4][2] = {{500, 500}, {9, -1}, {9, -1}, {9, -1}}, rows_after[4];
    hx_embedding_stats st;
    for (int k = 0; s && k < 4; k++) {
        hx_feed f = {.tensor = ids, .data = batches[k], .bytes = sizeof batches[k]};
        OK(hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN));
        OK(hx_embedding_table_stats(t, &st));
        rows_after[k] = st.rows_assigned;
    }
    /* 9 and -1 reach min_count at step 3; at step 4, a multiple
     * of expire_after, 500 (last seen at step 1 < 4 - 2) loses its row. */
    CHECK(rows_after[0] == 1 && rows_after[1] == 1 && rows_after[2] == 3 && rows_after[3] == 2 &&
              st.expirations == 1 && st.filtered > 0,
          "dynamic rows by step: %lld %lld %lld %lld, expirations %lld, filtered %lld",
          (long long)rows_after[0], (long long)rows_after[1], (long long)rows_after[2],
          (long long)rows_after[3], (long long)st.expirations, (long long)st.filtered);
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
}

/* ---- threads, placement ------------------------------------------------------------------------ */

enum { TR = 20000, TD = 24, TN = 4096, TB = 512 };

static hx_embedding_table *train_threads(int threads)
{
    hx_embedding_table *t = make_table("thr", TR, TD, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, 6);
    test_rng r = test_rng_make(77);
    hx_graph *g = hx_graph_create();
    int64_t n = TN, nb = TB;
    hx_tensor *ids = ids_input(g, "ids", HX_DTYPE_I64, n), *off = ids_input(g, "off", HX_DTYPE_I64, nb);
    hx_tensor *e = hx_embedding_bag(g, t, ids, off, NULL, HX_EMBEDDING_BAG_MEAN, 0, 0);
    OK(hx_graph_backward(g, hx_reduce_sum(g, hx_mul(g, e, e), 0, NULL, false)));
    hx_optimizer_config dense = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &dense));
    hx_session *s = test_session(g, HX_ACCELERATOR_NONE, threads);
    static int64_t idv[TN], offv[TB];
    for (int step = 0; s && step < 3; step++) {
        for (int j = 0; j < TN; j++) idv[j] = (int64_t)(test_rng_u64(&r) % (j % 2 ? 300 : TR));
        for (int b = 0; b < TB; b++) offv[b] = (int64_t)b * (TN / TB);
        hx_feed f[2] = {{.tensor = ids, .data = idv, .bytes = sizeof idv},
                        {.tensor = off, .data = offv, .bytes = sizeof offv}};
        OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
    }
    hx_session_free(s);
    hx_graph_free(g);
    return t;
}

static void test_threads(void)
{
    hx_embedding_table *a = train_threads(1), *b = train_threads(2);
    CHECK(a && b && same_storage(a, b), "1 and 2 threads give different tables");
    OK(hx_embedding_table_free(a));
    OK(hx_embedding_table_free(b));
}

static void test_placement(void)
{
    hx_embedding_table *t = make_table("place", 8, 4, HX_EMBEDDING_OPTIMIZER_NONE, 1);
    hx_graph *g = hx_graph_create();
    int64_t n = 3;
    hx_tensor *ids = ids_input(g, "ids", HX_DTYPE_I32, n);
    OK(hx_graph_push_target(g, HX_TARGET_DEVICE));
    hx_tensor *e = hx_embedding_lookup(g, t, ids); /* the scope does not move it off the host */
    hx_tensor *y = hx_relu(g, e);
    OK(hx_graph_pop_target(g));
    hx_session *s = test_session(g, HX_ACCELERATOR_EMU, 1);
    hx_placement_stats ps;
    if (s) {
        int32_t iv[3] = {7, 0, 7};
        float out[12], rows[12];
        hx_feed f = {.tensor = ids, .data = iv, .bytes = sizeof iv};
        hx_fetch o = {.tensor = y, .data = out, .bytes = sizeof out};
        OK(hx_session_run(s, &f, 1, &o, 1, 0));
        OK(hx_session_placement_stats(s, &ps));
        int64_t lv[3] = {7, 0, 7};
        OK(hx_embedding_table_read_rows(t, lv, 3, rows));
        bool ok = true;
        for (int i = 0; i < 12; i++) ok &= out[i] == (rows[i] > 0 ? rows[i] : 0);
        CHECK(ok && ps.n_device_ops == 1 && ps.n_copies == 1 && ps.copy_bytes == sizeof rows,
              "lookup on the host, relu on the device: %d device ops, %zu bytes copied",
              ps.n_device_ops, ps.copy_bytes);
    }
    hx_session_free(s);
    OK(hx_tensor_set_target(e, HX_TARGET_DEVICE));
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_EMU;
    s = NULL;
    CHECK(hx_session_create(g, &cfg, &s) == HX_ERR_NO_KERNEL && strstr(hx_last_error(), "embedding_lookup"),
          "a lookup set on the device has no kernel there: %s", hx_last_error());
    cfg.fallback = HX_FALLBACK_CPU;
    OK(hx_session_create(g, &cfg, &s));
    OK(hx_session_placement_stats(s, &ps));
    CHECK(ps.n_fallbacks == 1, "the lookup falls back to the CPU");
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
}

static void forward_i32_f32(void) { test_forward(HX_DTYPE_I32, HX_DTYPE_F32); }
static void forward_i64_f32(void) { test_forward(HX_DTYPE_I64, HX_DTYPE_F32); }
static void forward_i64_bf16(void) { test_forward(HX_DTYPE_I64, HX_DTYPE_BF16); }

/* One optimizer: once, twice, and twice in bf16. */
static void bitwise(hx_embedding_optimizer_kind kind)
{
    test_bitwise(kind, false, HX_DTYPE_F32);
    test_bitwise(kind, true, HX_DTYPE_F32);
    test_bitwise(kind, true, HX_DTYPE_BF16);
}

static void bitwise_lazy_adam(void) { bitwise(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM); }
static void bitwise_adagrad(void) { bitwise(HX_EMBEDDING_OPTIMIZER_ADAGRAD); }
static void bitwise_row_adagrad(void) { bitwise(HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD); }
static void bitwise_ftrl(void) { bitwise(HX_EMBEDDING_OPTIMIZER_FTRL); }

static const test_case cases[] = {
    {"forward_i32_f32", forward_i32_f32},
    {"forward_i64_f32", forward_i64_f32},
    {"forward_i64_bf16", forward_i64_bf16},
    {"gradients", test_gradients},
    {"wide_deep", test_wide_deep},
    {"bitwise_lazy_adam", bitwise_lazy_adam},
    {"bitwise_adagrad", bitwise_adagrad},
    {"bitwise_row_adagrad", bitwise_row_adagrad},
    {"bitwise_ftrl", bitwise_ftrl},
    {"nonfinite", test_nonfinite},
    {"lifetime_and_errors", test_lifetime_and_errors},
    {"ids", test_ids},
    {"dynamic_training", test_dynamic_training},
    {"threads", test_threads},
    {"placement", test_placement},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "embedding_graph", cases, TEST_COUNT(cases));
}
