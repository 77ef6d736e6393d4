/* The model and checks that tests/mpi/mpi_shard.c (collective mode) and
 * tests/mpi/mpi_ps.c (server mode) share: a wide & deep-like model of
 * four tables (row-wise and table-wise; ROWS, MODULO; lookup and bags of
 * sum, mean with padding, max; f32 and bf16 storage; LazyAdam, Adagrad,
 * row-wise Adagrad, FTRL) and dense layers, the global batch of each
 * step, and comparisons of tables and parameters between two models
 * (folded into the digest the MPI tests print), and of checkpoints. Included once per
 * test program, after hetex_checks.h. */
#ifndef HX_TEST_SHARD_MODEL_H
#define HX_TEST_SHARD_MODEL_H

#include "hetex.h"
#include "testutil.h"
#include "hetex_run.h"

#include <dirent.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 12, F = 3, D = 4, H = 6, STEPS = 20, NT = 4 };

static int rank, size;
static uint64_t digest = 1469598103934665603ull;

static void fold(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) digest = (digest ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
}

typedef struct table_spec {
    const char *name;
    int64_t rows;
    hx_embedding_ids ids;
    hx_embedding_sharding sharding;
    hx_embedding_optimizer_kind opt;
    hx_dtype dtype;
    int mode; /* -1: lookup, else hx_embedding_bag_mode */
} table_spec;

static const table_spec specs[NT] = {
    {"user", 97, HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_SHARD_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, -1},
    {"item", 64, HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_SHARD_TABLE, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32,
     HX_EMBEDDING_BAG_SUM},
    {"tag", 53, HX_EMBEDDING_IDS_MODULO, HX_EMBEDDING_SHARD_ROWS, HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD, HX_DTYPE_F32,
     HX_EMBEDDING_BAG_MEAN},
    {"geo", 40, HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_SHARD_AUTO, HX_EMBEDDING_OPTIMIZER_FTRL, HX_DTYPE_BF16,
     HX_EMBEDDING_BAG_MAX},
};
enum { TAG_PAD = -7 }; /* the tag bag's padding id (a raw id of a MODULO table) */

typedef struct model {
    hx_embedding_table *t[NT];
    hx_graph *g;
    hx_tensor *ids[NT], *off[NT], *y, *loss, *w1, *w2;
    int b; /* samples */
} model;

/* A sharded or server-mode table's device_cache_rows (mpi_shard.c's case
 * device_cache, mpi_ps.c's devcache). */
static int64_t model_cache_rows;

static hx_embedding_table *make_table(const table_spec *sp, hx_comm *c, hx_ps *ps)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = sp->name;
    ec.rows = sp->rows;
    ec.dim = D;
    ec.dtype = sp->dtype;
    ec.ids = sp->ids;
    ec.seed = 7;
    ec.init = hx_init_uniform(-0.5, 0.5);
    ec.optimizer = hx_embedding_optimizer_default(sp->opt);
    ec.optimizer.lr = sp->opt == HX_EMBEDDING_OPTIMIZER_FTRL ? 0.2 : 0.05;
    /* Adagrad's accumulators start at TF's 0.1, not torch's 0: from 0 an
     * element whose gradients are tiny divides their rounding (which the
     * ranks' partial sums change) by their own size, and 1e-6 would test
     * that cancellation rather than the sharding */
    if (sp->opt == HX_EMBEDDING_OPTIMIZER_ADAGRAD || sp->opt == HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD)
        ec.optimizer.initial_accumulator = 0.1;
    ec.n_threads = 1;
    ec.comm = c;
    ec.ps = ps;
    ec.device_cache_rows = ps || c ? model_cache_rows : 0;
    ec.sharding = sp->sharding;
    if (sp->sharding == HX_EMBEDDING_SHARD_TABLE && c) ec.shard_rank = hx_comm_size(c) - 1;
    if (sp->sharding == HX_EMBEDDING_SHARD_TABLE && ps) ec.shard_rank = 0;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    return t;
}

static int build(model *m, int b, hx_comm *c, hx_ps *ps)
{
    memset(m, 0, sizeof *m);
    m->b = b;
    for (int k = 0; k < NT; k++)
        if (!(m->t[k] = make_table(&specs[k], c, ps))) return -1;
    hx_graph *g = m->g = hx_graph_create();
    int64_t ys[2] = {b, 1}, w1s[2] = {D, H}, w2s[2] = {H, 1};
    hx_tensor *h = NULL;
    for (int k = 0; k < NT; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "ids_%s", specs[k].name);
        int64_t n = specs[k].mode < 0 ? b : (int64_t)b * F, nb = b;
        m->ids[k] = hx_graph_input(g, nm, HX_DTYPE_I64, 1, &n);
        hx_tensor *e;
        if (specs[k].mode < 0) {
            e = hx_embedding_lookup(g, m->t[k], m->ids[k]);
        } else {
            snprintf(nm, sizeof nm, "off_%s", specs[k].name);
            m->off[k] = hx_graph_input(g, nm, HX_DTYPE_I64, 1, &nb);
            bool pad = specs[k].mode == HX_EMBEDDING_BAG_MEAN;
            e = hx_embedding_bag(g, m->t[k], m->ids[k], m->off[k], NULL, (hx_embedding_bag_mode)specs[k].mode,
                                 pad ? HX_EMBEDDING_BAG_PADDING : 0, pad ? TAG_PAD : 0);
        }
        h = h ? hx_add(g, h, e) : e;
    }
    m->y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, ys);
    m->w1 = hx_graph_param(g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1));
    m->w2 = hx_graph_param(g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(1));
    hx_tensor *logits = hx_matmul(g, hx_relu(g, hx_matmul(g, h, m->w1, false, false)), m->w2, false, false);
    m->loss = hx_bce_with_logits(g, logits, m->y);
    if (!m->loss || hx_graph_backward(g, m->loss) != HX_OK) return -1;
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    adam.lr = 0.01;
    return hx_graph_apply_optimizer(g, NULL, &adam) == HX_OK ? 0 : -1;
}

static void model_free(model *m)
{
    hx_graph_free(m->g);
    for (int k = 0; k < NT; k++) OK(hx_embedding_table_free(m->t[k]));
}

/* The global batch of step s (the same on every rank): skewed ids, so
 * that ranks share ids and a rank repeats them. */
typedef struct batch {
    int64_t ids[NT][B * F], off[B];
    float y[B];
} batch;

static void make_batch(int s, batch *bt)
{
    test_rng g = test_rng_make(500 + (uint64_t)s);
    for (int k = 0; k < NT; k++)
        for (int i = 0; i < B * F; i++) {
            double u = test_rng_uniform(&g, 0, 1);
            int64_t id = (int64_t)(specs[k].rows * u * u * u);
            if (specs[k].ids == HX_EMBEDDING_IDS_MODULO) id = id * 1000003 + 17; /* raw ids */
            if (specs[k].mode == HX_EMBEDDING_BAG_MEAN && i % 5 == 2) id = TAG_PAD;
            bt->ids[k][i] = id;
        }
    for (int b = 0; b < B; b++) {
        bt->off[b] = (int64_t)b * F;
        bt->y[b] = (float)(test_rng_u64(&g) & 1);
    }
}

/* Runs samples [first, first + m->b) of bt on m; the loss into *loss. */
static hx_status run(hx_session *s, const model *m, const batch *bt, int first, float *loss)
{
    hx_feed f[2 * NT + 1];
    int nf = 0;
    for (int k = 0; k < NT; k++) {
        int per = specs[k].mode < 0 ? 1 : F;
        f[nf++] = (hx_feed){NULL, m->ids[k], bt->ids[k] + (int64_t)first * per, sizeof(int64_t) * (size_t)(m->b * per)};
        if (specs[k].mode >= 0) f[nf++] = (hx_feed){NULL, m->off[k], bt->off, sizeof(int64_t) * (size_t)m->b};
    }
    f[nf++] = (hx_feed){NULL, m->y, bt->y + first, sizeof(float) * (size_t)m->b};
    hx_fetch fl = {NULL, m->loss, loss, sizeof *loss};
    return hx_session_run(s, f, nf, &fl, 1, HX_RUN_TRAIN);
}

static hx_session_config config(hx_comm *c)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.comm = c;
    return cfg;
}

/* config(c) with the emulated accelerator (cap: max_device_memory, 0 its
 * default): the session holds its tables' device caches (this rank's
 * replica of the hot rows) in its device's memory. */
static hx_session_config config_emu(hx_comm *c, size_t cap)
{
    hx_session_config cfg = config(c);
    cfg.accelerator = HX_ACCELERATOR_EMU;
    cfg.max_device_memory = cap;
    return cfg;
}

/* The device caches of m's tables in session s's device memory: each
 * there, and s's device holding their bytes beside what session p's (the
 * same model without caches, the same config) holds. */
static void caches_on_device(hx_session *s, const model *m, hx_session *p, const char *when)
{
    size_t want = 0;
    for (int k = 0; k < NT; k++) {
        hx_embedding_stats es;
        OK(hx_embedding_table_stats(m->t[k], &es));
        CHECK(es.device_cache_on_device && es.device_cache_bytes > 0, "%s: table '%s''s device cache (%zu bytes) "
              "is not in the session's device memory (rank %d)", when, specs[k].name, es.device_cache_bytes, rank);
        want += es.device_cache_bytes;
    }
    hx_memory_stats a, b;
    OK(hx_session_memory_stats(p, &a));
    OK(hx_session_memory_stats(s, &b));
    size_t diff = b.device_used_bytes - a.device_used_bytes;
    if (rank == 0)
        printf("%s: device memory %zu bytes without the caches, %zu with (the caches' %zu)\n", when,
               a.device_used_bytes, b.device_used_bytes, want);
    CHECK(b.device_used_bytes >= a.device_used_bytes + want && diff <= want + 3 * NT * 256,
          "%s: the device holds %zu bytes more with the caches than without, they take %zu (rank %d)", when, diff,
          want, rank);
}

enum { BIG_ROWS = 100000, BIG_CACHE = 50000 };

/* Table 'big' (BIG_ROWS rows of dim D, LazyAdam) sharded over c or served
 * by ps's servers, with a device cache of BIG_CACHE rows: this rank's
 * replica takes 9.6 MB (64-byte rows and two state arrays). Collective. */
static hx_embedding_table *big_cached_table(hx_comm *c, hx_ps *ps)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "big";
    ec.rows = BIG_ROWS;
    ec.dim = D;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
    ec.comm = c;
    ec.ps = ps;
    ec.device_cache_rows = BIG_CACHE;
    ec.n_threads = 1;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    return t;
}

/* A session (data parallel over dp, or none) of a lookup of big_cached_table
 * t on an emulated device of 4 MiB is refused on this rank, naming the
 * table, the replica's bytes and max_device_memory; the replica stays in
 * host memory. */
static void refused_on_small_device(hx_embedding_table *t, hx_comm *dp)
{
    hx_graph *g = hx_graph_create();
    int64_t n = 4;
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    OK(hx_graph_backward(g, hx_reduce_sum(g, hx_embedding_lookup(g, t, ids), 0, NULL, false)));
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &sgd));
    hx_session_config cfg = config_emu(dp, (size_t)4 << 20);
    hx_session *s = NULL;
    hx_status st = hx_session_create(g, &cfg, &s);
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%zu bytes", (size_t)BIG_CACHE * 3 * 64);
    CHECK(st == HX_ERR_DEVICE_OOM && !s && strstr(hx_last_error(), "'big'") && strstr(hx_last_error(), bytes) &&
              strstr(hx_last_error(), "max_device_memory"),
          "a replica of hot rows larger than the device (rank %d): %s: %s", rank, hx_status_name(st),
          hx_last_error());
    hx_embedding_stats es;
    OK(hx_embedding_table_stats(t, &es));
    CHECK(!es.device_cache_on_device, "the refused session left the replica in host memory (rank %d)", rank);
    hx_session_free(s);
    hx_graph_free(g);
}

/* m's tables' device caches back in host memory (their session freed). */
static void caches_on_host(const model *m, const char *when)
{
    for (int k = 0; k < NT; k++) {
        hx_embedding_stats es;
        OK(hx_embedding_table_stats(m->t[k], &es));
        CHECK(!es.device_cache_on_device && es.device_cache_bytes > 0, "%s: table '%s''s device cache is not back "
              "in host memory (rank %d)", when, specs[k].name, rank);
    }
}

static int nstate(hx_embedding_optimizer_kind k)
{
    return k == HX_EMBEDDING_OPTIMIZER_LAZY_ADAM || k == HX_EMBEDDING_OPTIMIZER_FTRL ? 2 : 1;
}

/* Every row and state array of table k of both models (collective on the
 * sharded one): within tol relative (tol 0: bitwise); folded into the
 * digest. */
static void compare_table(const model *sh, const model *lone, int k, double tol, const char *when)
{
    int64_t R = specs[k].rows, n = R * D;
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)R);
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < R; i++) ids[i] = i;
    for (int arr = -1; arr < nstate(specs[k].opt); arr++) {
        int64_t w = arr >= 0 && specs[k].opt == HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD ? 1 : D;
        if (arr < 0) {
            OK(hx_embedding_table_read_rows(sh->t[k], ids, R, a));
            OK(hx_embedding_table_read_rows(lone->t[k], ids, R, b));
        } else {
            OK(hx_embedding_table_read_state(sh->t[k], arr, ids, R, a));
            OK(hx_embedding_table_read_state(lone->t[k], arr, ids, R, b));
        }
        fold(a, sizeof(float) * (size_t)(R * w));
        double e = test_max_rel_f32(a, b, R * w);
        CHECK(tol ? e <= tol : !memcmp(a, b, sizeof(float) * (size_t)(R * w)),
              "%s: table '%s' %s%s is %.3g off the lone run's (rank %d of %d)", when, specs[k].name,
              arr < 0 ? "rows" : "state array ", arr < 0 ? "" : (arr ? "1" : "0"), e, rank, size);
    }
    free(ids);
    free(a);
    free(b);
}

static void compare_dense(hx_session *ss, const model *sh, hx_session *sa, const model *lone)
{
    const hx_tensor *ts[2] = {sh->w1, sh->w2}, *ta[2] = {lone->w1, lone->w2};
    for (int j = 0; j < 2; j++) {
        int64_t n = hx_tensor_numel(ts[j]);
        float *p = malloc(sizeof(float) * (size_t)n), *q = malloc(sizeof(float) * (size_t)n);
        OK(hx_session_read(ss, ts[j], p, sizeof(float) * (size_t)n));
        OK(hx_session_read(sa, ta[j], q, sizeof(float) * (size_t)n));
        fold(p, sizeof(float) * (size_t)n);
        double e = test_max_rel_f32(p, q, n);
        CHECK(e <= 1e-6, "parameter '%s' after %d steps is %.3g off the lone run's", hx_tensor_name(ts[j]), STEPS, e);
        free(p);
        free(q);
    }
}

/* The checkpoint files of dir/a and dir/b byte for byte (manifests and
 * shards): at least a manifest and a shard per table. */
static void same_files(const char *dir, const char *a, const char *b)
{
    char da[320], pa[640], pb[640];
    snprintf(da, sizeof da, "%s/%s", dir, a);
    DIR *d = opendir(da);
    CHECK(d != NULL, "no folder %s", da);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(pa, sizeof pa, "%s/%s", da, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s/%s", dir, b, e->d_name);
        CHECK(test_same_file(pa, pb), "the checkpoint file %s differs from %s (or is missing there)", pa, pb);
        files++;
    }
    if (d) closedir(d);
    CHECK(files >= 2 * NT, "%d files in %s: a checkpoint of %d tables has more", files, da, NT);
}

#endif
