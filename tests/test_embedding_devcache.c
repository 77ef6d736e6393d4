/* test_embedding_devcache: the device cache of hot rows
 * (hx_embedding_config.device_cache_rows). Each case runs the same steps
 * with and without the cache from the same seed and compares bitwise:
 * a wide & deep model (bags on the host, the MLP on the emulated device)
 * for 50 steps per sparse optimizer and id mode with a cache far smaller
 * than the rows touched (most lookups miss and evict): losses, dense
 * parameters, every row and every state array; dirty rows written back
 * on eviction; a checkpoint after training byte for byte the one without
 * the cache; read-ahead; the hit rate on Zipf(1.05) ids against uniform
 * ids; a call that needs more rows than the cache holds; bad configs; and
 * a deliberately broken cache (one write-back skipped) that the
 * comparison catches. The model's sessions run on the emulated device,
 * which holds the cache's slots (their bytes in its memory, a cap too
 * small refused); rows moved per step are the misses plus the write-backs. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_ids.h" /* Zipf ids */
#include "embedding/embedding.h"
#include "tests/util/hetex_checks.h"
#include "tests/util/testutil.h"
#include "tests/util/tmpdir.h"

enum { B = 16, F = 3, PER = 100, ROWS = F * PER, DIM = 8, H = 12, CACHE = B * F, STEPS = 50 };

static char dir[256];
static int setup(void) { return test_make_tmpdir(dir, sizeof dir, "hx-emb-devcache") ? 0 : 1; }
static void teardown(void) { test_remove_tree(dir); }

static const hx_embedding_optimizer_kind kinds[4] = {
    HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD,
    HX_EMBEDDING_OPTIMIZER_FTRL};

static int nstate_of(hx_embedding_optimizer_kind k)
{
    return k == HX_EMBEDDING_OPTIMIZER_LAZY_ADAM || k == HX_EMBEDDING_OPTIMIZER_FTRL ? 2 : 1;
}

static hx_embedding_table *make_table(hx_embedding_ids ids, hx_embedding_optimizer_kind k, hx_dtype dt,
                                      int64_t rows, int64_t cache)
{
    hx_embedding_config c = hx_embedding_config_default();
    c.name = "items";
    c.rows = rows;
    c.dim = DIM;
    c.dtype = dt;
    c.seed = 4242;
    c.init = hx_init_normal(0.0, 0.3);
    c.lazy_init = ids != HX_EMBEDDING_IDS_MODULO; /* both kinds of host rows */
    c.ids = ids;
    c.optimizer = hx_embedding_optimizer_default(k);
    c.optimizer.lr = 0.05;
    c.n_threads = 1;
    if (ids == HX_EMBEDDING_IDS_DYNAMIC) {
        c.min_count = 2;
        c.expire_after = 10;
        c.evict_when_full = true;
    }
    c.device_cache_rows = cache;
    hx_embedding_table *t = NULL;
    hx_status st = hx_embedding_table_create(&c, &t);
    CHECK(st == HX_OK, "create (cache %lld): %s", (long long)cache, hx_last_error());
    return t;
}

/* Sample b's F ids: feature f from its own range; dynamic keys from a pool
 * larger than the table; modulo ids any i64. */
static void make_ids(hx_embedding_ids mode, test_rng *r, int64_t *ids, int64_t *off, float *y)
{
    for (int b = 0; b < B; b++) {
        off[b] = b * F;
        for (int f = 0; f < F; f++) {
            int64_t row = f * PER + (int64_t)(test_rng_u64(r) % PER);
            ids[b * F + f] = mode == HX_EMBEDDING_IDS_ROWS     ? row
                             : mode == HX_EMBEDDING_IDS_MODULO ? row + ROWS * (int64_t)(test_rng_u64(r) % 1000003) - 500
                                                               : 1000003 * (row % 120) - 77;
        }
        y[b] = (float)(ids[b * F] & 1);
    }
}

/* The model: bags of the table, an MLP on the emulated device. */
typedef struct model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *ids, *off, *y, *loss, *w1, *w2;
} model;

/* cap > 0: an emulated device of cap bytes; returns whether the session
 * was made (its status in *st when st is not NULL). */
static int model_make_cap(model *m, hx_embedding_table *t, size_t cap, hx_status *st);

static int model_make(model *m, hx_embedding_table *t) { return model_make_cap(m, t, 0, NULL); }

static int model_make_cap(model *m, hx_embedding_table *t, size_t cap, hx_status *st)
{
    memset(m, 0, sizeof *m);
    m->g = hx_graph_create();
    int64_t n = B * F, nb = B, ys[2] = {B, 1}, w1s[2] = {DIM, H}, w2s[2] = {H, 1};
    m->ids = hx_graph_input(m->g, "ids", HX_DTYPE_I64, 1, &n);
    m->off = hx_graph_input(m->g, "off", HX_DTYPE_I64, 1, &nb);
    m->y = hx_graph_input(m->g, "y", HX_DTYPE_F32, 2, ys);
    m->w1 = hx_graph_param(m->g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1));
    m->w2 = hx_graph_param(m->g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(2));
    OK(hx_tensor_set_target(m->w1, HX_TARGET_DEVICE));
    OK(hx_tensor_set_target(m->w2, HX_TARGET_DEVICE));
    hx_tensor *e = hx_embedding_bag(m->g, t, m->ids, m->off, NULL, HX_EMBEDDING_BAG_MEAN, 0, 0);
    OK(hx_graph_push_target(m->g, HX_TARGET_DEVICE));
    hx_tensor *logits = hx_matmul(m->g, hx_relu(m->g, hx_matmul(m->g, e, m->w1, false, false)), m->w2, false, false);
    m->loss = hx_bce_with_logits(m->g, logits, m->y);
    OK(hx_graph_pop_target(m->g));
    OK(hx_graph_backward(m->g, m->loss));
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    adam.lr = 0.01;
    OK(hx_graph_apply_optimizer(m->g, NULL, &adam));
    if (!cap) {
        m->s = test_session(m->g, HX_ACCELERATOR_EMU, 2);
        return m->s != NULL;
    }
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.max_device_memory = cap;
    hx_status s = hx_session_create(m->g, &c, &m->s);
    if (st) *st = s;
    return s == HX_OK;
}

static void model_free(model *m)
{
    hx_session_free(m->s);
    hx_graph_free(m->g);
}

/* Every row and state array of two tables, bitwise, over n ids. */
static int same_tables(hx_embedding_table *a, hx_embedding_table *b, const int64_t *keys, int64_t n, int ns)
{
    float *x = malloc((size_t)n * DIM * sizeof *x), *y = malloc((size_t)n * DIM * sizeof *y);
    int same = x && y && hx_embedding_table_read_rows(a, keys, n, x) == HX_OK &&
               hx_embedding_table_read_rows(b, keys, n, y) == HX_OK && !memcmp(x, y, (size_t)n * DIM * sizeof *x);
    for (int k = 0; same && k < ns; k++)
        same = hx_embedding_table_read_state(a, k, keys, n, x) == HX_OK &&
               hx_embedding_table_read_state(b, k, keys, n, y) == HX_OK &&
               !memcmp(x, y, (size_t)n * DIM * sizeof *x);
    free(x);
    free(y);
    return same;
}

/* Every id that can name a row in make_ids's mode (dynamic: the key pool). */
static int64_t all_keys(hx_embedding_ids mode, int64_t *keys)
{
    if (mode != HX_EMBEDDING_IDS_DYNAMIC) {
        for (int64_t r = 0; r < ROWS; r++) keys[r] = r;
        return ROWS;
    }
    for (int64_t u = 0; u < 120; u++) keys[u] = 1000003 * u - 77;
    return 120;
}

/* STEPS training steps of the model over table t (ids from seed 7); the
 * losses into loss[], the dense params into w[]. prefetch: each step hands
 * the next batch's ids over first. */
static int train(hx_embedding_table *t, hx_embedding_ids mode, bool prefetch, float *loss, float *w)
{
    model m;
    if (!model_make(&m, t)) {
        model_free(&m);
        return 0;
    }
    hx_embedding_stats ts;
    OK(hx_embedding_table_stats(t, &ts));
    CHECK(ts.device_cache_on_device == (ts.device_cache_rows > 0),
          "a session on the emulated device holds the cache's slots (%d, cache of %lld rows)",
          ts.device_cache_on_device, (long long)ts.device_cache_rows);
    test_rng r = test_rng_make(7);
    int64_t ids[2][B * F], off[B];
    float y[2][B];
    make_ids(mode, &r, ids[0], off, y[0]);
    int ok = 1;
    for (int k = 0; k < STEPS && ok; k++) {
        int cur = k & 1;
        make_ids(mode, &r, ids[!cur], off, y[!cur]);
        if (prefetch) ok &= hx_embedding_table_prefetch(t, ids[!cur], B * F) == HX_OK;
        hx_feed feeds[3] = {{.tensor = m.ids, .data = ids[cur], .bytes = sizeof ids[cur]},
                            {.tensor = m.off, .data = off, .bytes = sizeof off},
                            {.tensor = m.y, .data = y[cur], .bytes = sizeof y[cur]}};
        hx_fetch fl = {.tensor = m.loss, .data = &loss[k], .bytes = sizeof(float)};
        hx_status st = hx_session_run(m.s, feeds, 3, &fl, 1, HX_RUN_TRAIN);
        CHECK(st == HX_OK, "step %d: %s", k, hx_last_error());
        ok &= st == HX_OK;
    }
    ok &= hx_session_read(m.s, m.w1, w, DIM * H * sizeof(float)) == HX_OK &&
          hx_session_read(m.s, m.w2, w + DIM * H, H * sizeof(float)) == HX_OK;
    model_free(&m);
    return ok;
}

/* The model trained with and without a cache of CACHE rows: bitwise equal. */
static void run_model(hx_embedding_ids mode, hx_embedding_optimizer_kind k, hx_dtype dt, bool prefetch,
                      const char *name)
{
    hx_embedding_table *plain = make_table(mode, k, dt, ROWS, 0), *cached = make_table(mode, k, dt, ROWS, CACHE);
    float l1[STEPS], l2[STEPS], w1[DIM * H + H], w2[DIM * H + H];
    if (plain && cached && train(plain, mode, false, l1, w1) && train(cached, mode, prefetch, l2, w2)) {
        CHECK(!memcmp(l1, l2, sizeof l1) && !memcmp(w1, w2, sizeof w1),
              "%s: the %d losses and the dense params bitwise equal with the cache (last loss %.9g, %.9g)", name,
              STEPS, (double)l1[STEPS - 1], (double)l2[STEPS - 1]);
        int64_t keys[ROWS];
        int64_t n = all_keys(mode, keys);
        CHECK(same_tables(plain, cached, keys, n, nstate_of(k)), "%s: rows and state bitwise equal", name);
        hx_embedding_stats st;
        OK(hx_embedding_table_stats(cached, &st));
        CHECK(st.device_cache_rows == CACHE && st.device_cache_hits * 2 < st.device_cache_lookups &&
                  st.device_rows_out > 0 && st.device_rows_in + st.device_rows_init >= st.device_rows_out &&
                  (!prefetch || st.device_rows_prefetched > 0),
              "%s: a cache of %lld rows: most lookups miss (%lld of %lld hit), %lld rows in (%lld ahead), %lld "
              "written back", name, (long long)st.device_cache_rows, (long long)st.device_cache_hits,
              (long long)st.device_cache_lookups, (long long)st.device_rows_in, (long long)st.device_rows_prefetched,
              (long long)st.device_rows_out);
    }
    hx_embedding_table_free(plain);
    hx_embedding_table_free(cached);
}

static void model_mode(hx_embedding_ids mode, const char *mname)
{
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s-optim%d", mname, (int)kinds[i]);
        run_model(mode, kinds[i], i == 3 ? HX_DTYPE_BF16 : HX_DTYPE_F32, i == 1, name);
    }
}

static void model_rows(void) { model_mode(HX_EMBEDDING_IDS_ROWS, "rows"); }
static void model_modulo(void) { model_mode(HX_EMBEDDING_IDS_MODULO, "modulo"); }
static void model_dynamic(void) { model_mode(HX_EMBEDDING_IDS_DYNAMIC, "dynamic"); }

/* ---- the table alone ------------------------------------------------------------------------- */

/* One sparse step (lookup of ids as rows, then update) on t. */
static hx_status table_step(hx_embedding_table *t, const int64_t *ids, int n, int64_t step, test_rng *r)
{
    float out[64 * DIM], dout[64 * DIM];
    test_fill_uniform(r, dout, n * DIM, -1, 1);
    hx_emb_query q = hx_emb_query_rows(ids, n);
    q.train = 1;
    q.step = step;
    hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    hx_status st = hx__embedding_query(t, &q, out, NULL, true, "test lookup");
    return st ? st : hx__embedding_update(t, &q, &gi, 1, step, "test update");
}

/* 40 steps of 1-3 rows over 50 on a table with and without a cache of 3
 * rows; skip: a write-back the broken cache drops (-1: none). Returns
 * whether they ended bitwise equal. */
static int few_rows(int64_t skip, hx_embedding_stats *st)
{
    hx_embedding_table *a = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, 50, 0),
                       *b = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, 50, 3);
    int same = 0;
    if (!a || !b) goto out;
    hx_emb_devcache_set_faults(b->dev, &(hx_emb_devcache_faults){skip});
    test_rng r = test_rng_make(5), ra = test_rng_make(6), rb = test_rng_make(6);
    for (int64_t step = 1; step <= 40; step++) {
        int64_t ids[3];
        int n = 1 + (int)(test_rng_u64(&r) % 3);
        for (int i = 0; i < n; i++) ids[i] = (int64_t)(test_rng_u64(&r) % 50);
        hx_status sa = table_step(a, ids, n, step, &ra), sb = table_step(b, ids, n, step, &rb);
        if (sa || sb) {
            CHECK(0, "step %lld: %s", (long long)step, hx_last_error());
            goto out;
        }
        hx_emb_devcache_stats ds;
        hx_emb_devcache_stats_get(b->dev, &ds);
        if (ds.resident > 3) CHECK(0, "%lld rows resident in a cache of 3", (long long)ds.resident);
    }
    int64_t keys[50];
    for (int i = 0; i < 50; i++) keys[i] = i;
    OK(hx_embedding_table_stats(b, st));
    same = same_tables(a, b, keys, 50, 2);
out:
    hx_embedding_table_free(a);
    hx_embedding_table_free(b);
    return same;
}

static void eviction_and_break(void)
{
    hx_embedding_stats st;
    CHECK(few_rows(-1, &st), "a cache of 3 rows: 40 steps bitwise equal to no cache");
    CHECK(st.device_cache_rows == 3 && st.device_rows_out > 20 && st.device_rows_in + st.device_rows_init > 20,
          "rows in (%lld) and written back (%lld) under a budget of 3 rows", (long long)st.device_rows_in,
          (long long)st.device_rows_out);
    /* The same run with one write-back dropped (row 0 is written back: every row is touched and
     * evicted many times in 40 steps) must not compare equal. */
    CHECK(!few_rows(0, &st), "a cache that skips one write-back is caught by the comparison");
}

/* An update reuses the slots of the call before it when they still hold
 * its ids: the same ids (reused), other ids of the same count, and the
 * same ids after a lookup that evicted them (both mapped again), on a
 * cache of 3 rows against no cache, bitwise: outputs and rows. */
static void slots_reused(void)
{
    hx_embedding_table *a = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 20, 0),
                       *b = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 20, 3);
    if (!a || !b) goto out;
    test_rng r = test_rng_make(11);
    int differ = 0;
    for (int64_t step = 1; step <= 60 && !differ; step++) {
        int64_t ids[3], other[3], evict[3] = {17, 18, 19};
        float dout[3 * DIM], oa[3 * DIM], ob[3 * DIM];
        int n = 1 + (int)(test_rng_u64(&r) % 3);
        for (int i = 0; i < n; i++) {
            ids[i] = (int64_t)(test_rng_u64(&r) % 17);
            other[i] = (ids[i] + 1 + (int64_t)(test_rng_u64(&r) % 16)) % 17;
        }
        test_fill_uniform(&r, dout, n * DIM, -1, 1);
        hx_emb_query q = hx_emb_query_rows(ids, n), qo = hx_emb_query_rows(other, n), qe = hx_emb_query_rows(evict, 3);
        q.train = qo.train = qe.train = 1;
        q.step = qo.step = qe.step = step;
        hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
        hx_embedding_table *t[2] = {a, b};
        float *o[2] = {oa, ob};
        for (int k = 0; k < 2; k++) {
            float tmp[3 * DIM];
            OK(hx__embedding_query(t[k], &q, o[k], NULL, true, "test lookup"));
            if (step % 3 == 2) OK(hx__embedding_query(t[k], &qe, tmp, NULL, true, "test lookup"));
            OK(hx__embedding_update(t[k], step % 3 == 1 ? &qo : &q, &gi, 1, step, "test update"));
        }
        differ = memcmp(oa, ob, (size_t)n * DIM * sizeof *oa) != 0;
        CHECK(!differ, "step %lld: lookups differ", (long long)step);
    }
    int64_t keys[20];
    for (int i = 0; i < 20; i++) keys[i] = i;
    CHECK(same_tables(a, b, keys, 20, 1), "60 steps (update of the lookup's ids, of others, after an eviction) "
          "bitwise equal to no cache");
out:
    hx_embedding_table_free(a);
    hx_embedding_table_free(b);
}

/* Lookups of ids[0 .. n) on a and b (b cached), outputs compared bitwise. */
static int same_lookup(hx_embedding_table *a, hx_embedding_table *b, const int64_t *ids, int n)
{
    float oa[8 * DIM], ob[8 * DIM];
    hx_emb_query q = hx_emb_query_rows(ids, n);
    OK(hx__embedding_query(a, &q, oa, NULL, true, "test lookup"));
    OK(hx__embedding_query(b, &q, ob, NULL, true, "test lookup"));
    return memcmp(oa, ob, (size_t)n * DIM * sizeof *oa) == 0;
}

/* The read-ahead spares the resident rows of the next step: on a cache of
 * 8 rows holding rows 0-7 (0-3 used twice), the next step's rows 4 and 5
 * resident when read ahead, a call on rows 10 and 11 evicts two others
 * (LFU's clock alone takes 4 and 5, the least used rows the hand meets
 * first), so the next step finds both (2 hits, nothing read). When the
 * spared rows are all the call could evict (every row named ahead, then a
 * call on 4 rows not staged), they are given up and the call succeeds. Lookups
 * bitwise equal to no cache throughout. */
static void next_rows_spared(void)
{
    hx_embedding_table *a = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 100, 0),
                       *b = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 100, 8);
    if (!a || !b) goto out;
    static const int64_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7}, next[2] = {4, 5}, other[2] = {10, 11},
                         four[4] = {20, 21, 22, 23};
    CHECK(same_lookup(a, b, all, 8) && same_lookup(a, b, all, 4), "filling the cache");
    OK(hx_embedding_table_prefetch(b, next, 2));
    CHECK(same_lookup(a, b, other, 2), "a call that evicts 2 rows");
    hx_embedding_stats s0, s1;
    OK(hx_embedding_table_stats(b, &s0));
    CHECK(same_lookup(a, b, next, 2), "the step read ahead");
    OK(hx_embedding_table_stats(b, &s1));
    CHECK(s1.device_cache_hits - s0.device_cache_hits == 2 && s1.device_cache_lookups - s0.device_cache_lookups == 2 &&
              s1.device_rows_in + s1.device_rows_init == s0.device_rows_in + s0.device_rows_init,
          "rows 4 and 5, resident when read ahead, stayed: %lld hits of %lld lookups, %lld rows read",
          (long long)(s1.device_cache_hits - s0.device_cache_hits),
          (long long)(s1.device_cache_lookups - s0.device_cache_lookups),
          (long long)(s1.device_rows_in + s1.device_rows_init - s0.device_rows_in - s0.device_rows_init));
    int64_t every[100];
    for (int i = 0; i < 100; i++) every[i] = i;
    OK(hx_embedding_table_prefetch(b, every, 100)); /* spares all 8 resident rows */
    CHECK(same_lookup(a, b, four, 4), "a call that needs the spared rows' slots: %s", hx_last_error());
out:
    hx_embedding_table_free(a);
    hx_embedding_table_free(b);
}

/* Updated rows are dirty in the cache and reach the host table when they
 * are evicted, with their state, before any save or flush. */
static void dirty_rows_survive(void)
{
    hx_embedding_table *a = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 30, 0),
                       *b = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 30, 2);
    if (!a || !b) goto out;
    test_rng ra = test_rng_make(11), rb = test_rng_make(11);
    int64_t hot[2] = {7, 19}, others[2] = {1, 2};
    OK(table_step(a, hot, 2, 1, &ra));
    OK(table_step(b, hot, 2, 1, &rb));
    hx_emb_devcache_stats s1, s2;
    hx_emb_devcache_stats_get(b->dev, &s1);
    float host[DIM], want[DIM], tmp[64];
    hx_emb_local_read_row(b->local, 7, tmp);
    memcpy(host, tmp, sizeof host);
    hx_emb_local_read_row(a->local, 7, tmp);
    memcpy(want, tmp, sizeof want);
    CHECK(s1.dirty == 2 && memcmp(host, want, sizeof host) != 0, "after the update: 2 dirty rows, the host row "
          "still the old one");
    float out[2 * DIM];
    hx_emb_query q = hx_emb_query_rows(others, 2);
    OK(hx__embedding_query(b, &q, out, NULL, true, "t")); /* evicts both */
    hx_emb_devcache_stats_get(b->dev, &s2);
    hx_emb_local_read_row(b->local, 7, tmp);
    float st1[DIM], st2[DIM];
    hx_emb_local_read_state(b->local, 0, 19, st1);
    hx_emb_local_read_state(a->local, 0, 19, st2);
    CHECK(s2.dirty == 0 && s2.rows_out == s1.rows_out + 2 && !memcmp(tmp, want, sizeof want) &&
              !memcmp(st1, st2, sizeof st1),
          "evicted dirty rows written back with their state (dirty %lld -> %lld, written %llu -> %llu)",
          (long long)s1.dirty, (long long)s2.dirty, (unsigned long long)s1.rows_out,
          (unsigned long long)s2.rows_out);
out:
    hx_embedding_table_free(a);
    hx_embedding_table_free(b);
}

static int same_files(const char *p, const char *q)
{
    FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
    int same = a && b;
    while (same) {
        int x = fgetc(a), y = fgetc(b);
        same = x == y;
        if (x == EOF || y == EOF) break;
    }
    if (a) fclose(a);
    if (b) fclose(b);
    return same;
}

/* A checkpoint after training with the cache is byte for byte the one
 * without; it loads into a table with a cache, which then trains on as the
 * one without. */
static void checkpoint(void)
{
    hx_embedding_table *a = make_table(HX_EMBEDDING_IDS_DYNAMIC, HX_EMBEDDING_OPTIMIZER_FTRL, HX_DTYPE_F32, ROWS, 0),
                       *b = make_table(HX_EMBEDDING_IDS_DYNAMIC, HX_EMBEDDING_OPTIMIZER_FTRL, HX_DTYPE_F32, ROWS, CACHE);
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/plain.emb", dir);
    snprintf(pb, sizeof pb, "%s/cached.emb", dir);
    float l1[STEPS], l2[STEPS], w1[DIM * H + H], w2[DIM * H + H];
    if (!a || !b || !train(a, HX_EMBEDDING_IDS_DYNAMIC, false, l1, w1) || !train(b, HX_EMBEDDING_IDS_DYNAMIC, true, l2, w2))
        goto out;
    /* The freed session took the cache back to host memory, its rows with
     * it (evictions wrote some back while training); one more step on the
     * tables alone leaves dirty rows for the save to write. */
    hx_embedding_stats s0, s1, s2;
    OK(hx_embedding_table_stats(b, &s0));
    CHECK(!s0.device_cache_on_device && s0.device_rows_out > 0, "the freed session took the cache back (evictions "
          "wrote rows back)");
    int64_t keys[ROWS];
    all_keys(HX_EMBEDDING_IDS_DYNAMIC, keys); /* steps on the pool's first 8 keys */
    test_rng ra = test_rng_make(12), rb = test_rng_make(12);
    OK(table_step(a, keys, 8, STEPS + 1, &ra));
    OK(table_step(b, keys, 8, STEPS + 1, &rb));
    /* a session takes the cache, dirty rows and all, into its device and
     * back: they move with it (nothing read in or written back) */
    hx_embedding_stats m0, m1;
    OK(hx_embedding_table_stats(b, &m0));
    model mv;
    if (model_make(&mv, b)) {
        OK(hx_embedding_table_stats(b, &m1));
        CHECK(m1.device_cache_on_device && m1.device_rows_in == m0.device_rows_in &&
                  m1.device_rows_out == m0.device_rows_out,
              "a session's device took the cache with its rows (%lld in, %lld out before; %lld, %lld after)",
              (long long)m0.device_rows_in, (long long)m0.device_rows_out, (long long)m1.device_rows_in,
              (long long)m1.device_rows_out);
    }
    model_free(&mv);
    OK(hx_embedding_table_stats(b, &s1));
    CHECK(!s1.device_cache_on_device && s1.device_rows_in == m0.device_rows_in &&
              s1.device_rows_out == m0.device_rows_out,
          "the cache came back from the device with its rows");
    OK(hx_embedding_table_save(a, pa));
    OK(hx_embedding_table_save(b, pb));
    OK(hx_embedding_table_stats(b, &s2));
    CHECK(same_files(pa, pb), "the checkpoint with the cache is byte for byte the one without");
    CHECK(s2.device_rows_out > s1.device_rows_out, "save wrote the dirty rows back (%lld -> %lld)",
          (long long)s1.device_rows_out, (long long)s2.device_rows_out);
    /* train both on, b from its own checkpoint */
    OK(hx_embedding_table_load(b, pb));
    if (train(a, HX_EMBEDDING_IDS_DYNAMIC, false, l1, w1) && train(b, HX_EMBEDDING_IDS_DYNAMIC, false, l2, w2)) {
        int64_t keys[ROWS];
        int64_t n = all_keys(HX_EMBEDDING_IDS_DYNAMIC, keys);
        CHECK(same_tables(a, b, keys, n, 2), "loaded, trained on: bitwise equal");
    }
out:
    hx_embedding_table_free(a);
    hx_embedding_table_free(b);
    unlink(pa);
    unlink(pb);
}

/* Lookups only: the hit rate on Zipf(1.05) ids well above uniform ids'. */
static double hit_rate(bool zipfian)
{
    enum { R = 20000, N = 512, C = 2000 };
    hx_embedding_table *t = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, R, C);
    if (!t) return -1;
    zipf z = zipf_make(1.05, R);
    rng_state = 12345;
    int64_t *ids = malloc(N * sizeof *ids);
    float *out = malloc((size_t)N * DIM * sizeof *out);
    for (int k = 0; k < 60 && ids && out; k++) {
        for (int i = 0; i < N; i++) ids[i] = zipfian ? zipf_draw(&z) - 1 : (int64_t)(rng_next() % R);
        hx_emb_query q = hx_emb_query_rows(ids, N);
        OK(hx__embedding_query(t, &q, out, NULL, true, "t"));
    }
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(t, &st));
    free(ids);
    free(out);
    hx_embedding_table_free(t);
    return st.device_cache_lookups ? (double)st.device_cache_hits / (double)st.device_cache_lookups : -1;
}

static void zipf_hit_rate(void)
{
    double z = hit_rate(true), u = hit_rate(false);
    printf("# hit rate, cache of 10%% of 20000 rows, 512 ids a step: Zipf(1.05) %.3f, uniform %.3f\n", z, u);
    CHECK(z > 0.5 && u < 0.2 && z > 3 * u, "hit rate on Zipf(1.05) ids %.3f, on uniform ids %.3f", z, u);
}

/* A call that needs more distinct rows than the cache holds fails, says
 * how many, and changes nothing; bad configs are refused. */
static void limits(void)
{
    hx_embedding_table *a = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, 40, 0),
                       *b = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, 40, 4);
    if (!a || !b) goto out;
    int64_t ids[6] = {1, 2, 3, 4, 5, 1};
    test_rng r = test_rng_make(3);
    hx_status st = table_step(b, ids, 6, 1, &r);
    CHECK(st == HX_ERR_OUT_OF_MEMORY && strstr(hx_last_error(), "5 distinct rows") &&
              strstr(hx_last_error(), "device_cache_rows"), "5 rows in a cache of 4: %d %s", st, hx_last_error());
    int64_t keys[40];
    for (int i = 0; i < 40; i++) keys[i] = i;
    CHECK(same_tables(a, b, keys, 40, 2), "the refused step changed nothing");
    hx_embedding_config c = hx_embedding_config_default();
    c.rows = 10;
    c.dim = 4;
    c.device_cache_rows = -1;
    hx_embedding_table *t = NULL;
    CHECK(hx_embedding_table_create(&c, &t) == HX_ERR_INVALID_ARGUMENT && !t &&
              strstr(hx_last_error(), "device_cache_rows"), "negative device_cache_rows: %s", hx_last_error());
    c.device_cache_rows = 4;
    c.ssd_path = "/nonexistent/never-created";
    CHECK(hx_embedding_table_create(&c, &t) == HX_ERR_UNSUPPORTED && !t && strstr(hx_last_error(), "ssd_path"),
          "with ssd_path: %s", hx_last_error());
    c.ssd_path = NULL;
    c.device_cache_rows = 1000; /* more than the rows: the cache holds them all */
    OK(hx_embedding_table_create(&c, &t));
    hx_embedding_stats s;
    if (t) {
        OK(hx_embedding_table_stats(t, &s));
        CHECK(s.device_cache_rows == 10, "a cache larger than the table holds its %lld rows", (long long)s.device_cache_rows);
    }
    hx_embedding_table_free(t);
out:
    hx_embedding_table_free(a);
    hx_embedding_table_free(b);
}

/* The slots in the emulated device's memory: the table's stats give their
 * bytes (rows and LazyAdam's two state arrays), the session's device
 * memory holds them beside the model's (against the same model without a
 * cache), and they go back to host memory, rows and state with them, with
 * the session. A device that holds the model but not the cache refuses the
 * session, naming the table and what to change. */
static void device_memory(void)
{
    enum { BIG = 100000, BIGCACHE = 50000 };
    hx_embedding_table *plain = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, BIG, 0),
                       *cached = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, BIG,
                                            BIGCACHE);
    model a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    size_t row = (size_t)hx_emb_row_stride(DIM, HX_DTYPE_F32) * sizeof(float), want = (size_t)BIGCACHE * 3 * row;
    hx_embedding_stats st;
    if (!plain || !cached) goto out;
    OK(hx_embedding_table_stats(cached, &st));
    CHECK(!st.device_cache_on_device && st.device_cache_bytes == want, "no session: host memory, %zu bytes (want %zu)",
          st.device_cache_bytes, want);
    if (!model_make(&a, plain) || !model_make(&b, cached)) goto out;
    OK(hx_embedding_table_stats(cached, &st));
    CHECK(st.device_cache_on_device && st.device_cache_bytes == want, "the session's device holds the slots (%d, %zu bytes)",
          st.device_cache_on_device, st.device_cache_bytes);
    hx_memory_stats ma, mb;
    OK(hx_session_memory_stats(a.s, &ma));
    OK(hx_session_memory_stats(b.s, &mb));
    size_t diff = mb.device_used_bytes - ma.device_used_bytes;
    printf("# device memory: %zu bytes without the cache, %zu with (cache %zu)\n", ma.device_used_bytes,
           mb.device_used_bytes, want);
    CHECK(mb.device_used_bytes >= ma.device_used_bytes + want && diff <= want + 4096,
          "the device holds the cache's %zu bytes beside the model: %zu more than without", want, diff);
    model_free(&b);
    memset(&b, 0, sizeof b);
    OK(hx_embedding_table_stats(cached, &st));
    CHECK(!st.device_cache_on_device && st.device_cache_bytes == want, "back in host memory with the session");
    /* 4 MiB holds the model, not the 9.6 MB cache */
    model c;
    hx_status cs = HX_OK;
    CHECK(model_make_cap(&c, plain, (size_t)4 << 20, &cs), "the model alone fits 4 MiB: %s", hx_last_error());
    model_free(&c);
    CHECK(!model_make_cap(&c, cached, (size_t)4 << 20, &cs) && cs == HX_ERR_DEVICE_OOM &&
              strstr(hx_last_error(), "'items'") && strstr(hx_last_error(), "device_cache_rows") &&
              strstr(hx_last_error(), "max_device_memory"),
          "a cache larger than the device: %d %s", cs, hx_last_error());
    model_free(&c);
    OK(hx_embedding_table_stats(cached, &st));
    CHECK(!st.device_cache_on_device, "the refused session left the cache in host memory");
out:
    model_free(&a);
    model_free(&b);
    hx_embedding_table_free(plain);
    hx_embedding_table_free(cached);
}

/* Rows moved per step are the misses (copied in, or initialised in the
 * slot for lazy rows never written) plus the write-backs (every victim of
 * a training step is dirty): the counts of data moved against the
 * policy's own counts, step by step, on Zipf(1.05) ids over a lazy table. */
static void rows_moved(void)
{
    enum { R = 5000, N = 64, C = 400 };
    hx_embedding_table *t = make_table(HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, R, C);
    if (!t) return;
    zipf z = zipf_make(1.05, R);
    rng_state = 99;
    test_rng r = test_rng_make(8);
    hx_emb_devcache_stats a, b;
    uint64_t moved = 0, lookups = 0, bad = 0;
    for (int64_t step = 1; step <= 60; step++) {
        int64_t ids[N];
        for (int i = 0; i < N; i++) ids[i] = zipf_draw(&z) - 1;
        hx_emb_devcache_stats_get(t->dev, &a);
        if (table_step(t, ids, N, step, &r)) {
            CHECK(0, "step %lld: %s", (long long)step, hx_last_error());
            break;
        }
        hx_emb_devcache_stats_get(t->dev, &b);
        uint64_t in = b.rows_in + b.rows_init - a.rows_in - a.rows_init, out = b.rows_out - a.rows_out;
        uint64_t misses = (b.lookups - b.hits) - (a.lookups - a.hits), evicted = b.evictions - a.evictions;
        bad += in != misses || out != evicted;
        moved += in + out;
        lookups += b.lookups - a.lookups;
    }
    CHECK(!bad, "%llu of 60 steps moved other than their misses and write-backs", (unsigned long long)bad);
    CHECK(b.evictions > 0 && b.rows_init > 0 && b.rows_in > 0,
          "the run evicted (%llu), initialised cold rows (%llu) and copied rows in (%llu)",
          (unsigned long long)b.evictions, (unsigned long long)b.rows_init, (unsigned long long)b.rows_in);
    printf("# %llu rows moved in 60 steps against %llu without the cache (each distinct row in, its gradient out)\n",
           (unsigned long long)moved, (unsigned long long)(2 * lookups));
    hx_embedding_table_free(t);
}

static const test_case cases[] = {
    {"model_rows", model_rows},
    {"model_modulo", model_modulo},
    {"model_dynamic", model_dynamic},
    {"eviction_and_break", eviction_and_break},
    {"slots_reused", slots_reused},
    {"next_rows_spared", next_rows_spared},
    {"dirty_rows_survive", dirty_rows_survive},
    {"checkpoint", checkpoint},
    {"zipf_hit_rate", zipf_hit_rate},
    {"limits", limits},
    {"device_memory", device_memory},
    {"rows_moved", rows_moved},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "embedding_devcache", cases, TEST_COUNT(cases), &o);
}
