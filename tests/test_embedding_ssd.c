/* test_embedding_ssd: tables on disk (ssd_path): a row store with a host
 * row cache in front. Each case runs the same steps on a table in memory
 * and on one on disk with the same seed and compares them bitwise: 50
 * steps per optimizer and id mode with a cache far smaller than the rows
 * touched (most lookups miss); eviction under a budget of three rows;
 * dirty rows that survive eviction; a call that needs more rows than the
 * cache holds; a short write and a corrupt record refused; checkpoints
 * that hold the index, not the rows; kill -9 during a write-back followed
 * by a load of the last checkpoint; rows written ahead of their eviction. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "embedding/embedding.h"
#include "tests/util/testutil.h"
#include "tests/util/tmpdir.h"

#define DIM 7
#define ROWS 200
#define BATCH 16
#define BAGS 4

static char dir[256];

static int setup(void) { return test_make_tmpdir(dir, sizeof dir, "hx-emb-ssd") ? 0 : 1; }
static void teardown(void) { test_remove_tree(dir); }

typedef struct spec {
    hx_embedding_ids ids;
    hx_embedding_optimizer_kind optim;
    hx_dtype dtype;
    int64_t rows;
    size_t cache_rows; /* the disk table's cache, in rows */
} spec;

static int nstate_of(hx_embedding_optimizer_kind k)
{
    return k == HX_EMBEDDING_OPTIMIZER_LAZY_ADAM || k == HX_EMBEDDING_OPTIMIZER_FTRL ? 2 : 1;
}

static hx_embedding_config config_of(const spec *s, const char *ssd_path)
{
    hx_embedding_config c = hx_embedding_config_default();
    c.rows = s->rows;
    c.dim = DIM;
    c.dtype = s->dtype;
    c.seed = 4242;
    c.init = hx_init_normal(0.0, 0.3);
    c.ids = s->ids;
    c.optimizer = hx_embedding_optimizer_default(s->optim);
    c.optimizer.lr = 0.05;
    c.n_threads = 1;
    if (s->ids == HX_EMBEDDING_IDS_DYNAMIC) {
        c.min_count = 2;
        c.expire_after = 10;
        c.evict_when_full = true;
    }
    c.ssd_path = ssd_path;
    /* A cached row: its params and state at their row strides and 48 bytes of bookkeeping. */
    int ns = nstate_of(s->optim);
    size_t state = s->optim == HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD ? 4 : (size_t)hx_emb_row_stride(DIM, HX_DTYPE_F32) * 4;
    size_t per_row = (size_t)hx_emb_row_stride(DIM, s->dtype) * (s->dtype == HX_DTYPE_F32 ? 4 : 2) + ns * state + 48;
    c.cache_bytes = s->cache_rows * per_row;
    return c;
}

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
    unlink(out);
}

static hx_embedding_table *make(const spec *s, const char *ssd_path)
{
    hx_embedding_config c = config_of(s, ssd_path);
    hx_embedding_table *t = NULL;
    hx_status st = hx_embedding_table_create(&c, &t);
    CHECK(st == HX_OK, "create (%s): %s", ssd_path ? "disk" : "memory", hx_last_error());
    return t;
}

/* The ids of step k: a query of BATCH ids in BAGS bags (SUM or MEAN). */
typedef struct batch {
    int64_t ids[BATCH], offsets[BAGS];
    float dout[BAGS * DIM];
    hx_emb_query q;
    hx_emb_grad_input gi;
} batch;

static void make_batch(const spec *s, test_rng *r, int64_t step, batch *b)
{
    for (int i = 0; i < BATCH; i++) {
        uint64_t u = test_rng_u64(r);
        if (s->ids == HX_EMBEDDING_IDS_ROWS) b->ids[i] = (int64_t)(u % (uint64_t)s->rows);
        else if (s->ids == HX_EMBEDDING_IDS_MODULO) b->ids[i] = (int64_t)u; /* any i64 */
        else b->ids[i] = 1000003 * (int64_t)(u % 300) - 77; /* keys of a pool larger than the table */
    }
    for (int k = 0; k < BAGS; k++) b->offsets[k] = k * BATCH / BAGS;
    test_fill_uniform(r, b->dout, BAGS * DIM, -1.0, 1.0);
    b->q = hx_emb_query_bags(b->ids, BATCH, b->offsets, BAGS, step % 2 ? HX_EMB_SUM : HX_EMB_MEAN);
    b->q.train = 1;
    b->q.step = step;
    b->q.nthreads = 1 + (int)(step % 2);
    b->gi = (hx_emb_grad_input){b->dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
}

/* One training step (lookup, then update) on t; out gets the lookup. */
static hx_status step_on(hx_embedding_table *t, batch *b, float *out)
{
    hx_status st = hx__embedding_query(t, &b->q, out, NULL, true, "test lookup");
    return st ? st : hx__embedding_update(t, &b->q, &b->gi, 1, b->q.step, "test update");
}

/* Every row and every state array of the two tables, bitwise; keys: the
 * ids to read (n of them). */
static int same_tables(hx_embedding_table *a, hx_embedding_table *b, const int64_t *keys, int64_t n, int nstate)
{
    float *x = malloc((size_t)n * DIM * sizeof *x), *y = malloc((size_t)n * DIM * sizeof *y);
    int same = hx_embedding_table_read_rows(a, keys, n, x) == HX_OK &&
               hx_embedding_table_read_rows(b, keys, n, y) == HX_OK &&
               memcmp(x, y, (size_t)n * DIM * sizeof *x) == 0;
    for (int k = 0; same && k < nstate; k++)
        same = hx_embedding_table_read_state(a, k, keys, n, x) == HX_OK &&
               hx_embedding_table_read_state(b, k, keys, n, y) == HX_OK &&
               memcmp(x, y, (size_t)n * DIM * sizeof *x) == 0;
    free(x);
    free(y);
    return same;
}

/* The ids that name every row: rows, or the dynamic pool's keys. */
static int64_t all_keys(const spec *s, int64_t *keys)
{
    if (s->ids != HX_EMBEDDING_IDS_DYNAMIC) {
        for (int64_t r = 0; r < s->rows; r++) keys[r] = r;
        return s->rows;
    }
    for (int64_t u = 0; u < 300; u++) keys[u] = 1000003 * u - 77;
    return 300;
}

/* 50 steps on both tables: lookups and then every row and state equal. */
static void run_pair(const spec *s, const char *name)
{
    char p[512];
    path_in(p, sizeof p, name);
    hx_embedding_table *mem = make(s, NULL), *disk = make(s, p);
    if (!mem || !disk) goto out;
    test_rng r = test_rng_make(99);
    int same_out = 1;
    for (int64_t step = 1; step <= 50; step++) {
        batch b;
        make_batch(s, &r, step, &b);
        float o1[BAGS * DIM], o2[BAGS * DIM];
        hx_status s1 = step_on(mem, &b, o1), s2 = step_on(disk, &b, o2);
        CHECK(s1 == HX_OK && s2 == HX_OK, "%s step %lld: %d %d %s", name, (long long)step, s1, s2, hx_last_error());
        if (s1 || s2) goto out;
        same_out &= memcmp(o1, o2, sizeof o1) == 0;
    }
    CHECK(same_out, "%s: every lookup of the 50 steps is bitwise the in-memory table's", name);
    int64_t keys[300];
    int64_t n = all_keys(s, keys);
    CHECK(same_tables(mem, disk, keys, n, nstate_of(s->optim)), "%s: rows and state bitwise equal after 50 steps",
          name);
    hx_embedding_stats st;
    CHECK(hx_embedding_table_stats(disk, &st) == HX_OK && st.cache_rows == (int64_t)s->cache_rows &&
              st.cache_hits * 2 < st.cache_lookups && st.disk_rows_written > 0 && st.disk_rows_read > 0,
          "%s: a cache of %lld rows: most lookups miss (%lld of %lld hit), rows went to disk and back (%lld "
          "written, %lld read)", name, (long long)st.cache_rows, (long long)st.cache_hits,
          (long long)st.cache_lookups, (long long)st.disk_rows_written, (long long)st.disk_rows_read);
    hx_emb_ssd_stats ss;
    hx_emb_ssd_stats_get(disk->ssd, &ss);
    CHECK(ss.store.written_ahead > 0 && ss.store.written_ahead < ss.store.rows_written,
          "%s: of the %llu rows written, %llu were written ahead of their eviction", name,
          (unsigned long long)ss.store.rows_written, (unsigned long long)ss.store.written_ahead);
out:
    hx_embedding_table_free(mem);
    hx_embedding_table_free(disk);
    unlink(p);
}

static void bitwise(hx_embedding_ids ids, const char *mode)
{
    const hx_embedding_optimizer_kind kinds[] = {HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_EMBEDDING_OPTIMIZER_ADAGRAD,
                                                 HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD, HX_EMBEDDING_OPTIMIZER_FTRL};
    for (int k = 0; k < 4; k++) {
        spec s = {ids, kinds[k], k == 3 ? HX_DTYPE_BF16 : HX_DTYPE_F32, ROWS, 20};
        if (ids == HX_EMBEDDING_IDS_DYNAMIC) s.rows = 128; /* fewer rows than keys: eviction and expiry */
        char name[64];
        snprintf(name, sizeof name, "%s-optim%d", mode, (int)kinds[k]);
        run_pair(&s, name);
    }
}

static void bitwise_rows(void) { bitwise(HX_EMBEDDING_IDS_ROWS, "rows"); }
static void bitwise_modulo(void) { bitwise(HX_EMBEDDING_IDS_MODULO, "modulo"); }
static void bitwise_dynamic(void) { bitwise(HX_EMBEDDING_IDS_DYNAMIC, "dynamic"); }

/* Three rows of cache, steps of one to three ids: every step evicts. */
static void eviction_few_rows(void)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, 50, 3};
    char p[512];
    path_in(p, sizeof p, "few");
    hx_embedding_table *mem = make(&s, NULL), *disk = make(&s, p);
    if (!mem || !disk) goto out;
    test_rng r = test_rng_make(5);
    for (int64_t step = 1; step <= 40; step++) {
        int64_t ids[3];
        int n = 1 + (int)(test_rng_u64(&r) % 3);
        for (int i = 0; i < n; i++) ids[i] = (int64_t)(test_rng_u64(&r) % 50);
        float dout[3 * DIM];
        test_fill_uniform(&r, dout, n * DIM, -1, 1);
        hx_emb_query q = hx_emb_query_rows(ids, n);
        q.train = 1;
        hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
        hx_status a = hx__embedding_update(mem, &q, &gi, 1, step, "t"), b = hx__embedding_update(disk, &q, &gi, 1, step, "t");
        if (a || b) {
            CHECK(0, "step %lld: %s", (long long)step, hx_last_error());
            goto out;
        }
        hx_emb_ssd_stats ss;
        hx_emb_ssd_stats_get(disk->ssd, &ss);
        if (ss.resident > 3) CHECK(0, "%lld rows resident in a cache of 3", (long long)ss.resident);
    }
    int64_t keys[50];
    all_keys(&s, keys);
    CHECK(same_tables(mem, disk, keys, 50, 2), "a cache of 3 rows: 40 steps bitwise equal to memory");
    hx_emb_ssd_stats ss;
    hx_emb_ssd_stats_get(disk->ssd, &ss);
    CHECK(ss.cache_rows == 3 && ss.evictions > 20 && ss.writebacks > 20,
          "evictions (%llu) and write-backs (%llu) under a budget of 3 rows", (unsigned long long)ss.evictions,
          (unsigned long long)ss.writebacks);
out:
    hx_embedding_table_free(mem);
    hx_embedding_table_free(disk);
    unlink(p);
}

/* A written row is dirty in the cache; reading other rows evicts it; it
 * reads back as written, and so does its state. */
static void dirty_rows_survive(void)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 30, 2};
    char p[512];
    path_in(p, sizeof p, "dirty");
    hx_embedding_table *disk = make(&s, p);
    if (!disk) return;
    test_rng r = test_rng_make(11);
    float row[2 * DIM], back[2 * DIM];
    test_fill_uniform(&r, row, 2 * DIM, -3, 3);
    int64_t ids[2] = {7, 19};
    CHECK(hx_embedding_table_write_rows(disk, ids, 2, row) == HX_OK, "write rows: %s", hx_last_error());
    hx_emb_ssd_stats a, b;
    hx_emb_ssd_stats_get(disk->ssd, &a);
    int64_t others[2] = {1, 2};
    float junk[2 * DIM];
    CHECK(hx_embedding_table_read_rows(disk, others, 2, junk) == HX_OK, "read others");
    hx_emb_ssd_stats_get(disk->ssd, &b);
    CHECK(a.dirty == 2 && b.dirty == 0 && b.writebacks == a.writebacks + 2 && b.store.rows_on_disk == 2,
          "both dirty rows written back on eviction (dirty %lld -> %lld, on disk %lld)", (long long)a.dirty,
          (long long)b.dirty, (long long)b.store.rows_on_disk);
    CHECK(hx_embedding_table_read_rows(disk, ids, 2, back) == HX_OK && memcmp(row, back, sizeof row) == 0,
          "evicted dirty rows read back as written");
    hx_embedding_table_free(disk);
    unlink(p);
}

/* A call that needs more distinct rows than the cache holds fails, says
 * how much cache it needs, and changes nothing. */
static void too_many_rows(void)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, 40, 4};
    char p[512];
    path_in(p, sizeof p, "many");
    hx_embedding_table *disk = make(&s, p), *mem = make(&s, NULL);
    if (!disk || !mem) goto out;
    int64_t ids[6] = {1, 2, 3, 4, 5, 1};
    float dout[6 * DIM];
    test_rng r = test_rng_make(3);
    test_fill_uniform(&r, dout, 6 * DIM, -1, 1);
    hx_emb_query q = hx_emb_query_rows(ids, 6);
    hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    hx_status st = hx__embedding_update(disk, &q, &gi, 1, 1, "t");
    CHECK(st == HX_ERR_OUT_OF_MEMORY && strstr(hx_last_error(), "5 distinct rows") &&
              strstr(hx_last_error(), "cache_bytes"), "5 rows in a cache of 4: %d %s", st, hx_last_error());
    int64_t keys[40];
    all_keys(&s, keys);
    CHECK(same_tables(mem, disk, keys, 40, 2), "the refused update changed nothing");
out:
    hx_embedding_table_free(disk);
    hx_embedding_table_free(mem);
    unlink(p);
}

/* Rows 0..7 written into a cache of 8, then rows 8..11 read: the eviction
 * writes rows 0..3 in its batch, and rows 4..7 (next in the clock's line)
 * are written ahead. fault: a short write of row 6, or -1. */
static hx_embedding_table *ahead_setup(const char *p, const float *rows8, int64_t fault)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 40, 8};
    hx_embedding_table *t = make(&s, p);
    int64_t first[8] = {0, 1, 2, 3, 4, 5, 6, 7}, next[4] = {8, 9, 10, 11};
    float junk[4 * DIM];
    if (!t) return NULL;
    CHECK(hx_embedding_table_write_rows(t, first, 8, rows8) == HX_OK, "write rows 0..7: %s", hx_last_error());
    hx_emb_store_set_faults(hx_emb_ssd_store(t->ssd), &(hx_emb_store_faults){fault, -1});
    CHECK(hx_embedding_table_read_rows(t, next, 4, junk) == HX_OK, "read rows 8..11: %s", hx_last_error());
    return t;
}

/* Writing ahead: the dirty rows next in line for eviction are written
 * while the step goes on and stay resident; the eviction that comes finds
 * them clean and writes nothing; they read back as written. A failed
 * write-ahead leaves its rows dirty, and the eviction's own write reports
 * the failure. A row changed while its write-ahead is in flight stays
 * dirty and reaches the disk with its new value. */
static void write_ahead(void)
{
    char p[512];
    path_in(p, sizeof p, "ahead");
    test_rng r = test_rng_make(17);
    float rows8[8 * DIM], back[8 * DIM], junk[4 * DIM], five[DIM];
    test_fill_uniform(&r, rows8, 8 * DIM, -2, 2);
    test_fill_uniform(&r, five, DIM, -2, 2);
    int64_t first[8] = {0, 1, 2, 3, 4, 5, 6, 7}, last[4] = {12, 13, 14, 15}, id5 = 5;
    hx_emb_ssd_stats a, b;

    hx_embedding_table *t = ahead_setup(p, rows8, -1);
    if (!t) return;
    hx_emb_store *store = hx_emb_ssd_store(t->ssd);
    hx_emb_store_settle(store);
    hx_emb_ssd_stats_get(t->ssd, &a);
    CHECK(a.dirty == 0 && a.store.rows_written == 8 && a.store.written_ahead == 4 && a.writebacks == 8 &&
              a.resident == 8, "4 rows written by the eviction, 4 ahead; none dirty (dirty %lld, written %llu, "
              "ahead %llu)", (long long)a.dirty, (unsigned long long)a.store.rows_written,
              (unsigned long long)a.store.written_ahead);
    CHECK(hx_embedding_table_read_rows(t, last, 4, junk) == HX_OK, "read rows 12..15: %s", hx_last_error());
    hx_emb_ssd_stats_get(t->ssd, &b);
    CHECK(b.evictions == a.evictions + 4 && b.store.rows_written == 8,
          "the next eviction (%llu rows) found them clean and wrote nothing (%llu rows written)",
          (unsigned long long)(b.evictions - a.evictions), (unsigned long long)b.store.rows_written);
    CHECK(hx_embedding_table_read_rows(t, first, 8, back) == HX_OK && memcmp(back, rows8, sizeof back) == 0,
          "rows 0..7 read back from disk as written");
    hx_embedding_table_free(t);
    unlink(p);

    t = ahead_setup(p, rows8, 6);
    if (!t) return;
    store = hx_emb_ssd_store(t->ssd);
    hx_emb_store_settle(store);
    hx_emb_ssd_stats_get(t->ssd, &a);
    CHECK(a.dirty == 4 && a.store.written_ahead == 0 && a.store.ahead_failed == 4 && !hx_emb_store_has(store, 6),
          "a failed write-ahead (one request: rows 4..7) leaves its rows dirty (%lld dirty, %llu failed)",
          (long long)a.dirty, (unsigned long long)a.store.ahead_failed);
    hx_status st = hx_embedding_table_read_rows(t, last, 4, junk);
    CHECK(st == HX_ERR_IO && strstr(hx_last_error(), "short write") && strstr(hx_last_error(), "row"),
          "the eviction's write reports it: %d %s", st, hx_last_error());
    hx_emb_ssd_stats_get(t->ssd, &b);
    CHECK(b.dirty == 4 && b.resident == 8, "and the rows stay dirty in the cache (%lld)", (long long)b.dirty);
    hx_emb_store_set_faults(store, NULL);
    CHECK(hx_embedding_table_read_rows(t, last, 4, junk) == HX_OK, "without the fault: %s", hx_last_error());
    CHECK(hx_embedding_table_read_rows(t, first, 8, back) == HX_OK && memcmp(back, rows8, sizeof back) == 0,
          "rows 0..7 read back as written");
    hx_embedding_table_free(t);
    unlink(p);

    t = ahead_setup(p, rows8, -1);
    if (!t) return;
    store = hx_emb_ssd_store(t->ssd);
    CHECK(hx_embedding_table_write_rows(t, &id5, 1, five) == HX_OK, "write row 5 again: %s", hx_last_error());
    hx_emb_store_settle(store);
    hx_emb_ssd_stats_get(t->ssd, &a);
    CHECK(a.dirty == 1, "row 5, changed while written ahead, is dirty (%lld dirty)", (long long)a.dirty);
    CHECK(hx_embedding_table_read_rows(t, last, 4, junk) == HX_OK, "evict rows 4..7: %s", hx_last_error());
    memcpy(rows8 + 5 * DIM, five, sizeof five);
    CHECK(hx_embedding_table_read_rows(t, first, 8, back) == HX_OK && memcmp(back, rows8, sizeof back) == 0,
          "row 5 reads back with its new value, the others as written");
    hx_embedding_table_free(t);
    unlink(p);
}

/* Trains both tables with a batch; on a refused disk step the same step is
 * run again once the fault is gone. */
static void train_both(hx_embedding_table *mem, hx_embedding_table *disk, const spec *s, test_rng *r, int64_t from,
                       int64_t to)
{
    for (int64_t step = from; step <= to; step++) {
        batch b;
        make_batch(s, r, step, &b);
        float o[BAGS * DIM];
        if (mem && step_on(mem, &b, o)) CHECK(0, "memory step %lld: %s", (long long)step, hx_last_error());
        if (disk && step_on(disk, &b, o)) CHECK(0, "disk step %lld: %s", (long long)step, hx_last_error());
    }
}

/* A short write of a write-back is refused (HX_ERR_IO) and keeps the dirty
 * row; a flipped bit in a read and a record overwritten on disk are
 * refused (HX_ERR_CORRUPT); the table stays equal to memory. */
static void short_write_and_corrupt(void)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_FTRL, HX_DTYPE_F32, 60, 2};
    char p[512];
    path_in(p, sizeof p, "faults");
    hx_embedding_table *disk = make(&s, p), *mem = make(&s, NULL);
    if (!disk || !mem) goto out;
    test_rng r = test_rng_make(8);
    float row[DIM], junk[2 * DIM];
    test_fill_uniform(&r, row, DIM, -1, 1);
    int64_t id = 9, two[2] = {10, 11};
    CHECK(hx_embedding_table_write_rows(disk, &id, 1, row) == HX_OK &&
              hx_embedding_table_write_rows(mem, &id, 1, row) == HX_OK, "write row 9");
    hx_emb_store *store = hx_emb_ssd_store(disk->ssd);
    hx_emb_store_set_faults(store, &(hx_emb_store_faults){9, -1});
    hx_status st = hx_embedding_table_read_rows(disk, two, 2, junk);
    CHECK(st == HX_ERR_IO && strstr(hx_last_error(), "short write") && strstr(hx_last_error(), "row 9"),
          "a short write-back of row 9 is refused: %d %s", st, hx_last_error());
    hx_emb_ssd_stats ss;
    hx_emb_ssd_stats_get(disk->ssd, &ss);
    CHECK(ss.dirty == 1 && !hx_emb_store_has(store, 9), "row 9 is still dirty in the cache, not on disk");
    hx_emb_store_set_faults(store, NULL);
    CHECK(hx_embedding_table_read_rows(disk, two, 2, junk) == HX_OK && hx_emb_store_has(store, 9),
          "without the fault the write-back goes through");
    hx_emb_store_set_faults(store, &(hx_emb_store_faults){-1, 9});
    st = hx_embedding_table_read_rows(disk, &id, 1, junk);
    CHECK(st == HX_ERR_CORRUPT && strstr(hx_last_error(), "row 9"), "a flipped bit in row 9's read: %d %s", st,
          hx_last_error());
    hx_emb_store_set_faults(store, NULL);
    int64_t keys[60];
    all_keys(&s, keys);
    CHECK(same_tables(mem, disk, keys, 60, 2), "after the refused calls the table equals memory");
    /* Overwrite row 9's record on disk (evicted first), through another descriptor. */
    CHECK(hx_embedding_table_read_rows(disk, two, 2, junk) == HX_OK, "evict row 9");
    int64_t off = hx_emb_store_offset(store, 9);
    int fd = open(p, O_WRONLY);
    char bad[8] = "garbage!";
    CHECK(fd >= 0 && off > 0 && pwrite(fd, bad, 8, off + 20) == 8, "corrupt row 9's record at %lld",
          (long long)off);
    if (fd >= 0) close(fd);
    st = hx_embedding_table_read_rows(disk, &id, 1, junk);
    CHECK(st == HX_ERR_CORRUPT && strstr(hx_last_error(), "corrupt"), "a record corrupt on disk is refused: %d %s",
          st, hx_last_error());
out:
    hx_embedding_table_free(disk);
    hx_embedding_table_free(mem);
    unlink(p);
}

static off_t size_of(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size : -1;
}

/* A checkpoint holds the index, not the rows; a load after more steps
 * brings back exactly the checkpointed table. */
static void checkpoint(void)
{
    spec s = {HX_EMBEDDING_IDS_DYNAMIC, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, 128, 20};
    char p[512], ck[512], mck[512];
    path_in(p, sizeof p, "ck-rows");
    path_in(ck, sizeof ck, "ck-disk.ckpt");
    path_in(mck, sizeof mck, "ck-mem.ckpt");
    hx_embedding_table *disk = make(&s, p), *mem = make(&s, NULL);
    if (!disk || !mem) goto out;
    test_rng r = test_rng_make(21);
    train_both(mem, disk, &s, &r, 1, 15);
    CHECK(hx_embedding_table_save(disk, ck) == HX_OK && hx_embedding_table_save(mem, mck) == HX_OK, "save: %s",
          hx_last_error());
    off_t ck_bytes = size_of(ck), rows_bytes = size_of(p);
    CHECK(ck_bytes > 0 && ck_bytes < 128 + 128 * 4 + 64 + 300 * 40, "the checkpoint is the index and map (%lld "
          "bytes), the rows stay in the store (%lld bytes)", (long long)ck_bytes, (long long)rows_bytes);
    train_both(mem, disk, &s, &r, 16, 30);
    off_t after = size_of(p);
    CHECK(hx_embedding_table_load(disk, ck) == HX_OK && hx_embedding_table_load(mem, mck) == HX_OK, "load: %s",
          hx_last_error());
    int64_t keys[300];
    CHECK(same_tables(mem, disk, keys, all_keys(&s, keys), 2), "the loaded checkpoint equals memory's at step 15");
    train_both(mem, disk, &s, &r, 31, 45);
    CHECK(same_tables(mem, disk, keys, all_keys(&s, keys), 2), "and trains on equal to it");
    CHECK(hx_embedding_table_save(disk, ck) == HX_OK, "save again: %s", hx_last_error());
    train_both(mem, disk, &s, &r, 46, 60);
    /* Records are reused once a newer checkpoint is committed: 60 steps of
     * rewrites do not grow the store past the rows it holds twice over
     * (the live rows and those the last two checkpoints hold). */
    off_t end = size_of(p);
    hx_emb_ssd_stats ss;
    hx_emb_ssd_stats_get(disk->ssd, &ss);
    CHECK(ss.store.slots <= 3 * 128 + 2 * BATCH && end <= ((off_t)2 << 20),
          "the store stays small: %lld records (file %lld -> %lld -> %lld bytes)", (long long)ss.store.slots,
          (long long)rows_bytes, (long long)after, (long long)end);
    /* Of two later checkpoints the older one loads too (a folder committed
     * after its table's save may leave it the last); three back is refused. */
    char ck2[512], mck2[512], ck3[512];
    path_in(ck2, sizeof ck2, "ck2-disk.ckpt");
    path_in(mck2, sizeof mck2, "ck2-mem.ckpt");
    path_in(ck3, sizeof ck3, "ck3-disk.ckpt");
    CHECK(hx_embedding_table_save(disk, ck2) == HX_OK && hx_embedding_table_save(mem, mck2) == HX_OK, "save 2");
    train_both(mem, disk, &s, &r, 61, 75);
    CHECK(hx_embedding_table_save(disk, ck3) == HX_OK, "save 3");
    train_both(mem, disk, &s, &r, 76, 90);
    CHECK(hx_embedding_table_load(disk, ck2) == HX_OK && hx_embedding_table_load(mem, mck2) == HX_OK,
          "load the one before the last: %s", hx_last_error());
    CHECK(same_tables(mem, disk, keys, all_keys(&s, keys), 2), "it equals memory's at step 60");
    hx_status old = hx_embedding_table_load(disk, ck);
    CHECK(old == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "last two"), "three back is refused: %d %s",
          old, hx_last_error());
    CHECK(same_tables(mem, disk, keys, all_keys(&s, keys), 2), "and the refused load changed nothing");
    unlink(ck2);
    unlink(mck2);
    unlink(ck3);
    /* A checkpoint from another store is refused. */
    spec s2 = s;
    char p2[512];
    path_in(p2, sizeof p2, "ck-other");
    hx_embedding_table *other = make(&s2, p2);
    hx_status st = other ? hx_embedding_table_load(other, ck) : HX_ERR_INTERNAL;
    CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "another row store"),
          "a checkpoint of another store: %d %s", st, hx_last_error());
    hx_embedding_table_free(other);
    unlink(p2);
out:
    hx_embedding_table_free(disk);
    hx_embedding_table_free(mem);
    unlink(p);
    unlink(ck);
    unlink(mck);
}

/* The child: a table over path, 10 steps, a checkpoint, then steps until
 * $HX_EMB_SSD_CRASH_AT kills it in its second write-back. */
static void crash_child(const spec *s, const char *path, const char *ck)
{
    setenv("HX_EMB_SSD_CRASH_AT", "2", 1);
    hx_embedding_config c = config_of(s, path);
    hx_embedding_table *t = NULL;
    if (hx_embedding_table_create(&c, &t)) _exit(3);
    test_rng r = test_rng_make(31);
    for (int64_t step = 1; step <= 40; step++) {
        batch b;
        make_batch(s, &r, step, &b);
        float o[BAGS * DIM];
        if (step_on(t, &b, o)) _exit(4);
        if (step == 10 && hx_embedding_table_save(t, ck)) _exit(5);
    }
    _exit(6); /* the hook did not fire */
}

static void kill_during_writeback(void)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD, HX_DTYPE_F32, ROWS, 20};
    char p[512], ck[512];
    path_in(p, sizeof p, "crash-rows");
    path_in(ck, sizeof ck, "crash.ckpt");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) crash_child(&s, p, ck);
    int ws = 0;
    CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
          "the child was killed (SIGKILL) during a write-back after its checkpoint (status %d)", ws);
    /* A new process's table over the same file loads the checkpoint: equal to memory after 10 steps. */
    hx_embedding_table *disk = make(&s, p), *mem = make(&s, NULL);
    if (!disk || !mem) goto out;
    hx_status st = hx_embedding_table_load(disk, ck);
    CHECK(st == HX_OK, "load the last checkpoint after kill -9: %s", hx_last_error());
    test_rng r = test_rng_make(31);
    train_both(mem, NULL, &s, &r, 1, 10);
    int64_t keys[ROWS];
    CHECK(!st && same_tables(mem, disk, keys, all_keys(&s, keys), 1), "it holds the table of step 10 bitwise");
    train_both(mem, disk, &s, &r, 11, 20);
    CHECK(same_tables(mem, disk, keys, all_keys(&s, keys), 1), "and trains on from there equal to memory");
out:
    hx_embedding_table_free(disk);
    hx_embedding_table_free(mem);
    unlink(p);
    unlink(ck);
}

/* Bad configurations are refused with a message, and prefetch checks its input. */
static void bad_input(void)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 10, 4};
    char p[512];
    path_in(p, sizeof p, "bad");
    hx_embedding_config c = config_of(&s, p);
    c.cache_bytes = 8;
    hx_embedding_table *t = NULL;
    hx_status st = hx_embedding_table_create(&c, &t);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !t && strstr(hx_last_error(), "cache_bytes"), "a cache of 8 bytes: %s",
          hx_last_error());
    c = config_of(&s, p);
    c.backing_file = "x";
    st = hx_embedding_table_create(&c, &t);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !t, "backing_file with ssd_path: %s", hx_last_error());
    c = config_of(&s, "/nonexistent-dir/rows");
    st = hx_embedding_table_create(&c, &t);
    CHECK(st == HX_ERR_IO && !t && strstr(hx_last_error(), "/nonexistent-dir/rows"), "a path that cannot be "
          "created: %s", hx_last_error());
    /* A file of another shape is not reused. */
    t = make(&s, p);
    hx_embedding_table_free(t);
    spec s2 = s;
    s2.rows = 11;
    c = config_of(&s2, p);
    t = NULL;
    st = hx_embedding_table_create(&c, &t);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !t && strstr(hx_last_error(), "another ssd_path"),
          "a store of another shape: %s", hx_last_error());
    t = make(&s, p);
    int64_t ids[3] = {1, -5, 400};
    CHECK(t && hx_embedding_table_prefetch(t, ids, 3) == HX_OK, "prefetch skips ids outside the table");
    CHECK(hx_embedding_table_prefetch(t, NULL, 3) == HX_ERR_INVALID_ARGUMENT &&
              hx_embedding_table_prefetch(NULL, ids, 3) == HX_ERR_INVALID_ARGUMENT,
          "prefetch: NULL ids or table");
    hx_embedding_optimizer o = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_FTRL);
    CHECK(hx_embedding_table_set_optimizer(t, &o) == HX_ERR_UNSUPPORTED, "another optimizer kind: %s",
          hx_last_error());
    hx_embedding_table_free(t);
    unlink(p);
}

/* Rows read ahead are taken by the next step without I/O, and equal. */
static void prefetch(void)
{
    spec s = {HX_EMBEDDING_IDS_MODULO, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, HX_DTYPE_F32, ROWS, 20};
    char p[512];
    path_in(p, sizeof p, "ahead");
    hx_embedding_table *disk = make(&s, p), *mem = make(&s, NULL);
    if (!disk || !mem) goto out;
    test_rng r = test_rng_make(77);
    batch next;
    make_batch(&s, &r, 1, &next);
    for (int64_t step = 1; step <= 30; step++) {
        batch b = next;
        b.q.ids = b.ids;
        b.q.offsets = b.offsets;
        b.gi.dout = b.dout;
        make_batch(&s, &r, step + 1, &next);
        CHECK(hx_embedding_table_prefetch(disk, next.ids, BATCH) == HX_OK, "prefetch");
        float o1[BAGS * DIM], o2[BAGS * DIM];
        if (step_on(mem, &b, o1) || step_on(disk, &b, o2) || memcmp(o1, o2, sizeof o1)) {
            CHECK(0, "step %lld: %s", (long long)step, hx_last_error());
            goto out;
        }
    }
    int64_t keys[ROWS];
    CHECK(same_tables(mem, disk, keys, all_keys(&s, keys), 2), "with read-ahead: bitwise equal to memory");
    hx_emb_ssd_stats ss;
    hx_emb_ssd_stats_get(disk->ssd, &ss);
    CHECK(ss.store.prefetched > 0, "rows were read ahead (%llu)", (unsigned long long)ss.store.prefetched);
out:
    hx_embedding_table_free(disk);
    hx_embedding_table_free(mem);
    unlink(p);
}

/* Read-ahead of more rows than the engine has requests (4096): the rest
 * wait their turn and are read as earlier ones complete; all arrive, and
 * read back equal to what was written. */
static void prefetch_beyond_depth(void)
{
    enum { N = 6000 };
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, N, 64};
    char p[512];
    path_in(p, sizeof p, "deep");
    hx_embedding_table *disk = make(&s, p);
    int64_t *ids = malloc(N * sizeof *ids);
    float *rows = malloc((size_t)N * DIM * sizeof *rows), *back = malloc((size_t)N * DIM * sizeof *back);
    if (!disk || !ids || !rows || !back) goto out;
    test_rng r = test_rng_make(123);
    test_fill_uniform(&r, rows, N * DIM, -1, 1);
    for (int i = 0; i < N; i++) ids[i] = (int64_t)i * 5761 % N; /* a permutation, scattered */
    CHECK(hx_embedding_table_write_rows(disk, ids, N, rows) == HX_OK, "write %d rows: %s", N, hx_last_error());
    float junk[64 * DIM];
    int64_t other[64];
    for (int i = 0; i < 64; i++) other[i] = ids[i];
    CHECK(hx_embedding_table_read_rows(disk, other, 64, junk) == HX_OK, "and evict the rest");
    hx_emb_ssd_stats a, b;
    hx_emb_ssd_stats_get(disk->ssd, &a);
    CHECK(hx_embedding_table_prefetch(disk, ids + 64, N - 64) == HX_OK, "prefetch %d rows", N - 64);
    CHECK(hx_embedding_table_read_rows(disk, ids + 64, N - 64, back) == HX_OK &&
              memcmp(back, rows + 64 * DIM, (size_t)(N - 64) * DIM * sizeof *back) == 0,
          "the rows read back as written");
    hx_emb_ssd_stats_get(disk->ssd, &b);
    CHECK(b.store.prefetched - a.store.prefetched == N - 64 && b.store.rows_read - a.store.rows_read == N - 64,
          "all %d read ahead (%llu), beyond the engine's 4096 requests", N - 64,
          (unsigned long long)(b.store.prefetched - a.store.prefetched));
out:
    hx_embedding_table_free(disk);
    free(ids);
    free(rows);
    free(back);
    unlink(p);
}

/* Hit counting: a lookup counts its distinct rows; the update after it
 * finds them cached and adds nothing; a row read back after eviction is a
 * miss read from disk, one never written a cold miss (no I/O). */
static void hit_counting(void)
{
    spec s = {HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, HX_DTYPE_F32, 30, 3};
    char p[512];
    path_in(p, sizeof p, "hits");
    hx_embedding_table *t = make(&s, p);
    if (!t) return;
    int64_t ids[4] = {4, 5, 4, 6};
    float out[4 * DIM], dout[4 * DIM];
    test_rng r = test_rng_make(2);
    test_fill_uniform(&r, dout, 4 * DIM, -1, 1);
    hx_emb_query q = hx_emb_query_rows(ids, 4);
    q.train = 1;
    hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    hx_emb_ssd_stats a, b, c;
    CHECK(hx__embedding_query(t, &q, out, NULL, true, "t") == HX_OK && hx__embedding_update(t, &q, &gi, 1, 1, "t") == HX_OK,
          "a step: %s", hx_last_error());
    hx_emb_ssd_stats_get(t->ssd, &a);
    CHECK(a.lookups == 3 && a.hits == 0 && a.cold == 3, "3 distinct rows, all cold misses (%llu %llu %llu)",
          (unsigned long long)a.lookups, (unsigned long long)a.hits, (unsigned long long)a.cold);
    int64_t other[3] = {7, 8, 9};
    hx_emb_query q2 = hx_emb_query_rows(other, 3);
    CHECK(hx__embedding_query(t, &q2, out, NULL, true, "t") == HX_OK, "evict them");
    CHECK(hx__embedding_query(t, &q, out, NULL, true, "t") == HX_OK, "look them up again");
    hx_emb_ssd_stats_get(t->ssd, &b);
    CHECK(b.lookups == 9 && b.hits == 0 && b.cold == 6 && b.store.rows_read == 3,
          "read back from disk: 3 misses with I/O (%llu lookups, %llu cold, %llu read)", (unsigned long long)b.lookups,
          (unsigned long long)b.cold, (unsigned long long)b.store.rows_read);
    CHECK(hx__embedding_query(t, &q, out, NULL, true, "t") == HX_OK, "and once more");
    hx_emb_ssd_stats_get(t->ssd, &c);
    CHECK(c.lookups == 12 && c.hits == 3, "now cached: 3 hits");
    hx_embedding_table_free(t);
    unlink(p);
}

static const test_case cases[] = {
    {"hit_counting", hit_counting},
    {"bitwise_rows", bitwise_rows},
    {"bitwise_modulo", bitwise_modulo},
    {"bitwise_dynamic", bitwise_dynamic},
    {"eviction_few_rows", eviction_few_rows},
    {"dirty_rows_survive", dirty_rows_survive},
    {"too_many_rows", too_many_rows},
    {"short_write_and_corrupt", short_write_and_corrupt},
    {"write_ahead", write_ahead},
    {"checkpoint", checkpoint},
    {"kill_during_writeback", kill_during_writeback},
    {"bad_input", bad_input},
    {"prefetch", prefetch},
    {"prefetch_beyond_depth", prefetch_beyond_depth},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "embedding_ssd", cases, TEST_COUNT(cases), &o);
}
