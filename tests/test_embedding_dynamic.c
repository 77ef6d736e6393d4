/* test_embedding_dynamic: the dynamic id map (insertion, frequency filter,
 * expiry, a full table under both policies with the map unchanged by a
 * refused call, growth that keeps every row, keys near 2^63, its
 * serialisation), key hashing, and the dynamic table built on it. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embedding/embedding.h"
#include "tests/util/testutil.h"

static hx_emb_idmap *make_map(int64_t cap, int64_t min_count, int64_t expire, hx_emb_full full)
{
    hx_emb_idmap_config c = {cap, min_count, expire, full, 77};
    hx_emb_idmap *m = NULL;
    hx_emb_err err;
    CHECK(hx_emb_idmap_create(&c, &m, &err) == HX_OK, "idmap create: %s", err.msg);
    return m;
}

static int rows_are(const int64_t *got, const int64_t *want, int64_t n)
{
    return memcmp(got, want, sizeof(int64_t) * (size_t)n) == 0;
}

static void insertion(void)
{
    hx_emb_idmap *m = make_map(10, 0, 0, HX_EMB_FULL_ERROR);
    if (!m) return;
    int64_t keys[5] = {10, 20, 10, INT64_MAX, INT64_MIN}, rows[5], fresh[5], nf;
    hx_emb_err err;
    CHECK(hx_emb_idmap_map(m, keys, 5, 1, 1, rows, fresh, &nf, &err) == HX_OK, "map: %s", err.msg);
    int64_t want[5] = {0, 1, 0, 2, 3}, wf[4] = {0, 1, 2, 3};
    CHECK(rows_are(rows, want, 5) && nf == 4 && rows_are(fresh, wf, 4), "rows on first sight, in order");
    int64_t k2[3] = {20, 99, INT64_MIN}, r2[3];
    CHECK(hx_emb_idmap_map(m, k2, 3, 0, 2, r2, NULL, NULL, &err) == HX_OK && r2[0] == 1 && r2[1] == -1 && r2[2] == 3,
          "eval: known keys map, unknown give -1 and are not added");
    hx_emb_idmap_stats s;
    hx_emb_idmap_stats_get(m, &s);
    CHECK(s.keys == 4 && s.pending == 0 && s.rows_free == 6 && s.admitted == 4, "stats after insertion");
    hx_emb_idmap_free(m);
}

static void frequency(void)
{
    hx_emb_idmap *m = make_map(10, 3, 0, HX_EMB_FULL_ERROR);
    if (!m) return;
    hx_emb_err err;
    int64_t a[3] = {5, 5, 6}, ra[3], fresh[4], nf;
    CHECK(hx_emb_idmap_map(m, a, 3, 1, 1, ra, fresh, &nf, &err) == HX_OK && ra[0] == -1 && ra[2] == -1 && nf == 0,
          "below min_count: no row");
    int64_t b[2] = {5, 6}, rb[2];
    CHECK(hx_emb_idmap_map(m, b, 2, 1, 2, rb, fresh, &nf, &err) == HX_OK && rb[0] == 0 && rb[1] == -1 && nf == 1,
          "key 5 seen 3 times gets a row, key 6 (2 times) not yet");
    /* Three sightings in one call: every position gets the row. */
    int64_t c[4] = {7, 8, 7, 7}, rc[4];
    CHECK(hx_emb_idmap_map(m, c, 4, 1, 3, rc, fresh, &nf, &err) == HX_OK && rc[0] == 1 && rc[2] == 1 && rc[3] == 1 &&
              rc[1] == -1,
          "min_count reached within one call applies to all its positions");
    hx_emb_idmap_stats s;
    hx_emb_idmap_stats_get(m, &s);
    CHECK(s.keys == 2 && s.pending == 2 && s.filtered == 3 + 1 + 1, "frequency stats: %lld keys %lld pending %lld filtered",
          (long long)s.keys, (long long)s.pending, (long long)s.filtered);
    hx_emb_idmap_free(m);
}

static void expiry(void)
{
    hx_emb_idmap *m = make_map(4, 0, 2, HX_EMB_FULL_ERROR);
    if (!m) return;
    hx_emb_err err;
    int64_t k1[3] = {100, 200, 300}, r[4], fresh[4], nf;
    hx_emb_idmap_map(m, k1, 3, 1, 1, r, fresh, &nf, &err);
    int64_t k3[1] = {200};
    hx_emb_idmap_map(m, k3, 1, 1, 3, r, fresh, &nf, &err);
    CHECK(hx_emb_idmap_expire(m, 3) == 0, "nothing older than 2 steps yet");
    CHECK(hx_emb_idmap_expire(m, 4) == 2, "keys 100 and 300 (step 1) expire at step 4");
    int64_t all[3] = {100, 200, 300};
    hx_emb_idmap_map(m, all, 3, 0, 4, r, NULL, NULL, &err);
    CHECK(r[0] == -1 && r[1] == 1 && r[2] == -1, "expired keys are gone, 200 stays");
    /* Freed rows are handed out first, ascending: 0 then 2, then the unused 3. */
    int64_t k5[3] = {400, 500, 600};
    CHECK(hx_emb_idmap_map(m, k5, 3, 1, 5, r, fresh, &nf, &err) == HX_OK && r[0] == 0 && r[1] == 2 && r[2] == 3 &&
              nf == 3,
          "freed rows reused: %lld %lld %lld", (long long)r[0], (long long)r[1], (long long)r[2]);
    hx_emb_idmap_stats s;
    hx_emb_idmap_stats_get(m, &s);
    CHECK(s.expired == 2 && s.keys == 4 && s.rows_free == 0, "expiry stats");
    hx_emb_idmap_free(m);
}

static void full(void)
{
    hx_emb_err err;
    hx_emb_idmap *m = make_map(4, 2, 0, HX_EMB_FULL_ERROR);
    if (!m) return;
    int64_t k1[6] = {1, 1, 2, 2, 3, 9}, r[8], fresh[8], nf;
    hx_emb_idmap_map(m, k1, 6, 1, 1, r, fresh, &nf, &err);
    int64_t serial_before = hx_emb_idmap_serial_size(m);
    int64_t *w0 = malloc(sizeof(int64_t) * (size_t)serial_before);
    hx_emb_idmap_serial_write(m, w0);
    /* Three more keys admitted at once, plus key 9 reaching min_count: 4 rows needed, 2 free. */
    int64_t k2[7] = {4, 4, 5, 5, 6, 6, 9};
    hx_status st = hx_emb_idmap_map(m, k2, 7, 1, 2, r, fresh, &nf, &err);
    CHECK(st == HX_ERR_OUT_OF_MEMORY && strstr(err.msg, "full") && strstr(err.msg, "key 6"), "full: %s", err.msg);
    int64_t *w1 = malloc(sizeof(int64_t) * (size_t)(serial_before + 64));
    CHECK(hx_emb_idmap_serial_size(m) == serial_before, "refused call left the map as it was (size)");
    hx_emb_idmap_serial_write(m, w1);
    CHECK(memcmp(w0, w1, sizeof(int64_t) * (size_t)serial_before) == 0, "refused call left the map as it was");
    /* The counts of the refused call were not kept: 4 once more is still below min_count. */
    int64_t k3[1] = {4};
    CHECK(hx_emb_idmap_map(m, k3, 1, 1, 3, r, fresh, &nf, &err) == HX_OK && r[0] == -1, "counts rolled back");
    hx_emb_idmap_free(m);
    free(w0);
    free(w1);

    /* Eviction: the keys seen longest ago go, rows ascending. */
    m = make_map(4, 0, 0, HX_EMB_FULL_EVICT);
    if (!m) return;
    int64_t a[2] = {10, 11}, b[2] = {12, 13}, c[1] = {14};
    hx_emb_idmap_map(m, a, 2, 1, 1, r, fresh, &nf, &err);
    hx_emb_idmap_map(m, b, 2, 1, 2, r, fresh, &nf, &err);
    CHECK(hx_emb_idmap_map(m, c, 1, 1, 3, r, fresh, &nf, &err) == HX_OK && r[0] == 0 && nf == 1 && fresh[0] == 0,
          "evicting: key 14 gets row 0 of key 10");
    int64_t q[5] = {10, 11, 12, 13, 14};
    hx_emb_idmap_map(m, q, 5, 0, 3, r, NULL, NULL, &err);
    CHECK(r[0] == -1 && r[1] == -1 && r[2] == 2 && r[3] == 3 && r[4] == 0, "both step-1 keys evicted");
    int64_t d[1] = {15};
    CHECK(hx_emb_idmap_map(m, d, 1, 1, 3, r, fresh, &nf, &err) == HX_OK && r[0] == 1, "key 15 gets the other freed row");
    /* Five new keys in one step cannot fit four rows: refused, map unchanged. */
    int64_t e[5] = {20, 21, 22, 23, 24};
    CHECK(hx_emb_idmap_map(m, e, 5, 1, 4, r, fresh, &nf, &err) == HX_ERR_OUT_OF_MEMORY, "evict: too many keys at once");
    hx_emb_idmap_map(m, q, 5, 0, 3, r, NULL, NULL, &err);
    CHECK(r[2] == 2 && r[3] == 3 && r[4] == 0, "refused eviction kept the keys");
    hx_emb_idmap_stats s;
    hx_emb_idmap_stats_get(m, &s);
    CHECK(s.evicted == 2 && s.keys == 4, "eviction stats: %lld evicted", (long long)s.evicted);
    hx_emb_idmap_free(m);
}

static void growth(void)
{
    int64_t n = 60000, batch = 5000;
    hx_emb_idmap *m = make_map(n, 0, 0, HX_EMB_FULL_ERROR);
    if (!m) return;
    test_rng r = test_rng_make(9);
    int64_t *keys = malloc(sizeof(int64_t) * (size_t)n), *rows = malloc(sizeof(int64_t) * (size_t)n);
    int64_t *fresh = malloc(sizeof(int64_t) * (size_t)batch), nf;
    for (int64_t i = 0; i < n; i++) keys[i] = (int64_t)test_rng_u64(&r); /* any i64, near 2^63 too */
    keys[0] = INT64_MAX;
    keys[1] = INT64_MIN;
    hx_emb_err err;
    int64_t slots0 = 0;
    for (int64_t b = 0; b < n; b += batch) {
        CHECK(hx_emb_idmap_map(m, keys + b, batch, 1, b / batch, rows + b, fresh, &nf, &err) == HX_OK, "growth: %s",
              err.msg);
        hx_emb_idmap_stats s;
        hx_emb_idmap_stats_get(m, &s);
        if (b == 0) slots0 = s.slots;
    }
    hx_emb_idmap_stats s;
    hx_emb_idmap_stats_get(m, &s);
    CHECK(s.slots >= 4 * slots0 && s.keys == n, "the map grew (%lld -> %lld slots)", (long long)slots0,
          (long long)s.slots);
    int64_t *again = malloc(sizeof(int64_t) * (size_t)n);
    hx_emb_idmap_map(m, keys, n, 0, 99, again, NULL, NULL, &err);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= again[i] == rows[i] && rows[i] == i;
    CHECK(ok, "every key kept its row through growth");
    /* Serialisation round trip: the same rows, and the same next rows. */
    int64_t nw = hx_emb_idmap_serial_size(m);
    int64_t *w = malloc(sizeof(int64_t) * (size_t)nw);
    hx_emb_idmap_serial_write(m, w);
    hx_emb_idmap_config cfg = {n, 0, 0, HX_EMB_FULL_ERROR, 77};
    hx_emb_idmap *m2 = NULL;
    CHECK(hx_emb_idmap_serial_read(&cfg, w, nw, &m2, &err) == HX_OK, "serial read: %s", err.msg);
    if (m2) {
        hx_emb_idmap_map(m2, keys, n, 0, 99, again, NULL, NULL, &err);
        CHECK(rows_are(again, rows, n), "deserialised map keeps every row");
        hx_emb_idmap_free(m2);
    }
    w[1] = 5; /* a free-row count that does not add up */
    CHECK(hx_emb_idmap_serial_read(&cfg, w, nw, &m2, &err) == HX_ERR_CORRUPT, "corrupt words refused: %s", err.msg);
    free(w);
    free(keys);
    free(rows);
    free(fresh);
    free(again);
    hx_emb_idmap_free(m);
}

static void hashing(void)
{
    const char *s[3] = {"user:42", "item:7", "user:42"};
    size_t len[3] = {7, 6, 7};
    int64_t k[3], k2[3], r[3];
    hx_emb_hash_strings(s, len, 3, 1, k);
    hx_emb_hash_strings(s, len, 3, 2, k2);
    CHECK(k[0] == k[2] && k[0] != k[1] && k[0] != k2[0], "string keys: seeded, equal strings equal");
    int64_t raw[3] = {-1, INT64_MAX, 12};
    hx_emb_keys_mod(raw, 3, 10, r);
    CHECK(r[0] == (int64_t)(UINT64_MAX % 10) && r[1] == INT64_MAX % 10 && r[2] == 2, "keys mod rows (unsigned)");
}

/* ---- the dynamic table ------------------------------------------------------------------------ */

static void dynamic_table(void)
{
    int64_t cap = 64, dim = 8;
    hx_emb_table_config c = hx_emb_table_config_default(cap, dim);
    c.lazy_init = 1;
    c.init.seed = 5;
    c.optim = hx_emb_optim_default(HX_EMB_OPTIM_LAZY_ADAM);
    c.optim.lr = 0.1;
    hx_emb_idmap_config mc = {cap, 2, 0, HX_EMB_FULL_EVICT, 3};
    hx_emb_table *t = NULL;
    hx_emb_err err;
    CHECK(hx_emb_dynamic_create(&c, &mc, &t, &err) == HX_OK, "dynamic create: %s", err.msg);
    mc.capacity = cap + 1;
    hx_emb_table *bad = NULL;
    CHECK(hx_emb_dynamic_create(&c, &mc, &bad, &err) == HX_ERR_INVALID_ARGUMENT, "capacity != rows");
    if (!t) return;
    hx_emb_table *loc = hx_emb_dynamic_local(t);
    hx_emb_idmap *map = hx_emb_dynamic_idmap(t);
    CHECK(loc && map && !hx_emb_dynamic_idmap(loc) && hx_emb_as_local(t) == NULL, "dynamic parts");
    /* Keys from strings; one key seen twice reaches min_count 2. */
    const char *s[4] = {"a", "b", "a", "pad"};
    size_t len[4] = {1, 1, 1, 3};
    int64_t keys[4];
    hx_emb_hash_strings(s, len, 4, 0, keys);
    int64_t offs[2] = {0, 2};
    hx_emb_query q = hx_emb_query_bags(keys, 4, offs, 2, HX_EMB_MEAN);
    q.has_padding = 1;
    q.padding_id = keys[3];
    q.train = 1;
    q.step = 1;
    float out[16];
    CHECK(hx_emb_table_lookup(t, &q, out, NULL, &err) == HX_OK, "dynamic lookup: %s", err.msg);
    /* Key "a" got row 0; "b" is filtered (zero row, counted in the mean); "pad" skipped. */
    float row0[16];
    hx_emb_local_read_row(hx_emb_as_local(loc), 0, row0);
    int ok = 1;
    for (int k = 0; k < dim; k++) ok &= out[k] == row0[k] * 0.5f && out[dim + k] == row0[k];
    CHECK(ok, "dynamic mean bag: filtered key is a zero row, padding skipped");
    /* Backward + update touches row 0 only. */
    float dout[16];
    for (int i = 0; i < 16; i++) dout[i] = 1.0f;
    hx_emb_grad_input gi = {dout, NULL, dim, HX_EMB_DEDUP_AUTO};
    CHECK(hx_emb_table_backward_update(t, &q, &gi, 1, NULL, &err) == HX_OK, "dynamic backward_update: %s", err.msg);
    float after[16];
    hx_emb_local_read_row(hx_emb_as_local(loc), 0, after);
    hx_emb_local_stats st;
    hx_emb_local_stats_get(loc, &st, &err);
    CHECK(after[0] != row0[0] && st.rows_ready == 1, "row of key a updated, nothing else written");
    /* A sparse gradient keyed by keys: unknown keys are dropped. */
    hx_emb_sparse_grad g;
    memset(&g, 0, sizeof g);
    hx_emb_sparse_grad_reserve(&g, 2, dim, &err);
    memset(g.rows, 0, sizeof(float) * (size_t)(2 * g.stride));
    g.ids[0] = keys[0];
    g.ids[1] = 123456789;
    for (int k = 0; k < dim; k++) g.rows[k] = g.rows[g.stride + k] = 1.0f;
    CHECK(hx_emb_table_apply(t, &g, 2, 1, &err) == HX_OK, "dynamic apply: %s", err.msg);
    hx_emb_local_stats_get(loc, &st, &err);
    CHECK(st.rows_ready == 1, "unknown key dropped");
    /* Save and load into a twin: same lookups afterwards, map included. */
    char path[64];
    snprintf(path, sizeof path, "/tmp/hx_emb_dyn_%d.bin", (int)getpid());
    CHECK(hx_emb_table_save(t, path, &err) == HX_OK, "dynamic save: %s", err.msg);
    hx_emb_table *t2 = NULL;
    mc.capacity = cap;
    c.init.seed = 6;
    CHECK(hx_emb_dynamic_create(&c, &mc, &t2, &err) == HX_OK, "twin: %s", err.msg);
    CHECK(hx_emb_table_load(t2, path, &err) == HX_OK, "dynamic load: %s", err.msg);
    q.train = 0;
    float o1[16], o2[16];
    CHECK(hx_emb_table_lookup(t, &q, o1, NULL, &err) == HX_OK && hx_emb_table_lookup(t2, &q, o2, NULL, &err) == HX_OK &&
              memcmp(o1, o2, sizeof o1) == 0,
          "loaded dynamic table looks up the same");
    hx_emb_idmap_stats s1, s2;
    hx_emb_idmap_stats_get(hx_emb_dynamic_idmap(t), &s1);
    hx_emb_idmap_stats_get(hx_emb_dynamic_idmap(t2), &s2);
    CHECK(s1.keys == s2.keys && s1.pending == s2.pending, "loaded map: %lld keys, %lld pending", (long long)s2.keys,
          (long long)s2.pending);
    /* Rows not yet written read as the saved table's initial values (the file keeps its initialiser). */
    float u1[16], u2[16];
    hx_emb_local_read_row(hx_emb_as_local(loc), 10, u1);
    hx_emb_local_read_row(hx_emb_as_local(hx_emb_dynamic_local(t2)), 10, u2);
    CHECK(memcmp(u1, u2, sizeof(float) * (size_t)dim) == 0, "loaded lazy rows keep the saved initialiser");
    /* A dynamic file does not load into a fixed table, nor the reverse. */
    hx_emb_table *fixed = NULL;
    CHECK(hx_emb_local_create(&c, &fixed, &err) == HX_OK, "fixed: %s", err.msg);
    CHECK(hx_emb_table_load(fixed, path, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "dynamic"),
          "dynamic file into a fixed table: %s", err.msg);
    CHECK(hx_emb_table_save(fixed, path, &err) == HX_OK, "fixed save: %s", err.msg);
    CHECK(hx_emb_table_load(t2, path, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "fixed"),
          "fixed file into a dynamic table: %s", err.msg);
    remove(path);
    /* Eviction resets the row handed out again. */
    hx_emb_idmap_stats_get(map, &s1);
    int64_t many[200];
    for (int i = 0; i < 200; i++) many[i] = 1000 + i / 2; /* 100 keys, twice each */
    hx_emb_query qm = hx_emb_query_rows(many, 128);
    qm.train = 1;
    qm.step = 5;
    float *om = malloc(sizeof(float) * 200 * 16);
    CHECK(hx_emb_table_lookup(t, &qm, om, NULL, &err) == HX_OK, "64 new keys at step 5: %s", err.msg);
    hx_emb_local_read_row(hx_emb_as_local(loc), 0, after);
    hx_emb_init init = hx_emb_as_local(loc)->init;
    float fresh_row[16];
    hx_emb_init_row(&init, 0, dim, 16, fresh_row);
    CHECK(memcmp(after, fresh_row, sizeof(float) * (size_t)dim) == 0, "row 0, evicted and reassigned, is reset");
    qm.n = 200;
    CHECK(hx_emb_table_lookup(t, &qm, om, NULL, &err) == HX_ERR_OUT_OF_MEMORY, "100 keys at one step: full: %s",
          err.msg);
    free(om);
    hx_emb_sparse_grad_free(&g);
    hx_emb_table_free(t);
    hx_emb_table_free(t2);
    hx_emb_table_free(fixed);
}

/* Saved words whose entry count is crafted so that 4 x count wraps to the
 * words that follow: refused by the count, never read past the words. */
static void serial_hostile_counts(void)
{
    hx_emb_idmap_config c = {8, 0, 0, HX_EMB_FULL_ERROR, 77};
    /* next row 1, no free rows, then count, then one entry of 4 words */
    int64_t w[8] = {1, 0, 1, 42, 0, 1, 1};
    hx_emb_idmap *m = NULL;
    hx_emb_err err;
    CHECK(hx_emb_idmap_serial_read(&c, w, 7, &m, &err) == HX_OK && m, "one valid entry: %s", err.msg);
    hx_emb_idmap_free(m);
    const int64_t counts[] = {((int64_t)1 << 62) + 1, INT64_MAX, ((int64_t)1 << 61) + 1, -1, 2};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        w[2] = counts[i];
        m = NULL;
        hx_status st = hx_emb_idmap_serial_read(&c, w, 7, &m, &err);
        CHECK(st == HX_ERR_CORRUPT && !m && strstr(err.msg, "entry count"), "entry count %lld: %d %s",
              (long long)counts[i], (int)st, err.msg);
    }
    /* free-row counts near the limits */
    int64_t f[4] = {2, INT64_MAX, 0, 0};
    m = NULL;
    CHECK(hx_emb_idmap_serial_read(&c, f, 4, &m, &err) == HX_ERR_CORRUPT && !m, "free count INT64_MAX: %s", err.msg);
}

static const test_case cases[] = {
    {"insertion", insertion},
    {"frequency", frequency},
    {"expiry", expiry},
    {"full", full},
    {"growth", growth},
    {"hashing", hashing},
    {"dynamic_table", dynamic_table},
    {"serial_hostile_counts", serial_hostile_counts},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "embedding_dynamic", cases, TEST_COUNT(cases));
}
