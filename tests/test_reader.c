/* Readers and the Criteo-schema generator: the Adult files parse completely
 * with their quirks, malformed rows under both policies, bounded memory,
 * identical batches at any thread count, rewind, seeded shuffling, a
 * generator -> TSV -> reader round trip, Zipf frequencies and the planted
 * logistic model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "hetex.h"
#include "testutil.h"
#include "tmpdir.h"

static char adult_data[1024], adult_test[1024], tmpdir[256];

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* A digest of every batch of one epoch, and counts. */
typedef struct epoch_sum {
    uint64_t digest;
    int64_t rows, batches, last_n, positives;
    int64_t missing_cat[64], missing_num[64];
} epoch_sum;

static uint64_t batch_digest(const hx_batch *b, uint64_t seed)
{
    size_t n = (size_t)b->n, nn = (size_t)b->n_numeric, nc = (size_t)b->n_categorical;
    seed = XXH3_64bits_withSeed(b->labels, n * sizeof(float), seed);
    if (nn) {
        seed = XXH3_64bits_withSeed(b->numeric, n * nn * sizeof(float), seed);
        seed = XXH3_64bits_withSeed(b->numeric_missing, n * nn, seed);
    }
    if (nc) seed = XXH3_64bits_withSeed(b->categorical, n * nc * sizeof(int64_t), seed);
    return XXH3_64bits_withSeed(&n, sizeof n, seed);
}

static hx_status read_epoch(hx_reader *r, epoch_sum *s)
{
    memset(s, 0, sizeof *s);
    const hx_batch *b;
    hx_status st;
    while ((st = hx_reader_next(r, &b)) == HX_OK && b) {
        s->digest = batch_digest(b, s->digest);
        s->rows += b->n;
        s->batches++;
        s->last_n = b->n;
        for (int64_t i = 0; i < b->n; i++) {
            s->positives += b->labels[i] == 1.0f;
            for (int k = 0; k < b->n_categorical && k < 64; k++)
                s->missing_cat[k] += b->categorical[i * b->n_categorical + k] == HX_ID_MISSING;
            for (int k = 0; k < b->n_numeric && k < 64; k++)
                s->missing_num[k] += b->numeric_missing[i * b->n_numeric + k];
        }
    }
    return st;
}

static hx_status read_file_epoch(const char *path, const hx_reader_config *c, epoch_sum *s,
                                 hx_reader_stats *stats)
{
    hx_reader *r;
    hx_status st = hx_reader_open(path, c, &r);
    if (st) return st;
    st = read_epoch(r, s);
    if (stats) hx_reader_stats_get(r, stats);
    hx_reader_close(r);
    return st;
}

/* ---- Adult ------------------------------------------------------------------------ */

/* Sums of the numeric columns and of the XXH3 ids of the categorical ones,
 * by a plain line-by-line parse of the file: the reference. */
static void adult_reference(const char *path, int skip, double *num_sum, uint64_t *cat_sum,
                            int64_t *rows)
{
    FILE *f = fopen(path, "rb");
    char line[4096];
    *rows = 0;
    memset(num_sum, 0, 6 * sizeof *num_sum);
    memset(cat_sum, 0, 8 * sizeof *cat_sum);
    for (int ln = 0; f && fgets(line, sizeof line, f); ln++) {
        if (ln < skip || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = 0;
        int col = 0, nn = 0, nc = 0;
        for (char *tok = line, *end;; tok = end + 2) {
            end = strstr(tok, ", ");
            size_t len = end ? (size_t)(end - tok) : strlen(tok);
            if (col == 0 || col == 2 || col == 4 || col == 10 || col == 11 || col == 12) {
                num_sum[nn++] += strtod(tok, NULL);
            } else if (col != 14) {
                uint64_t h = len == 1 && tok[0] == '?' ? (uint64_t)-1
                             : XXH3_64bits_withSeed(tok, len, 0) & (uint64_t)INT64_MAX;
                cat_sum[nc++] += h;
            }
            col++;
            if (!end) break;
        }
        ++*rows;
    }
    if (f) fclose(f);
}

static void test_adult(void)
{
    /* figures from data/adult/README.md */
    struct { const char *path; bool test; int64_t rows, pos, lines, miss[3]; } files[2] = {
        {adult_data, false, 32561, 7841, 32562, {1836, 1843, 583}},
        {adult_test, true, 16281, 3846, 16283, {963, 966, 274}}};
    for (int k = 0; k < 2; k++) {
        hx_reader_config c = hx_reader_config_adult(files[k].test);
        c.n_threads = 2;
        CHECK(c.n_columns == 15, "adult schema has %d columns", c.n_columns);
        epoch_sum s;
        hx_reader_stats st;
        hx_status rc = read_file_epoch(files[k].path, &c, &s, &st);
        CHECK(rc == HX_OK, "%s: %s", files[k].path, hx_last_error());
        CHECK(s.rows == files[k].rows, "%s: %lld rows, want %lld", files[k].path, (long long)s.rows,
              (long long)files[k].rows);
        CHECK(s.positives == files[k].pos, "%s: %lld positives", files[k].path, (long long)s.positives);
        CHECK(st.malformed == 0, "%s: %lld malformed: %s", files[k].path, (long long)st.malformed,
              st.first_malformed);
        CHECK(st.lines == files[k].lines, "%s: %lld lines", files[k].path, (long long)st.lines);
        CHECK(st.rows == files[k].rows, "stats rows %lld", (long long)st.rows);
        int wc = hx_reader_config_find(&c, "workclass"), oc = hx_reader_config_find(&c, "occupation"),
            nc = hx_reader_config_find(&c, "native_country");
        CHECK(wc == 0 && oc == 3 && nc == 7, "find: %d %d %d", wc, oc, nc);
        CHECK(s.missing_cat[wc] == files[k].miss[0] && s.missing_cat[oc] == files[k].miss[1] &&
              s.missing_cat[nc] == files[k].miss[2], "%s: missing %lld %lld %lld", files[k].path,
              (long long)s.missing_cat[wc], (long long)s.missing_cat[oc], (long long)s.missing_cat[nc]);
        int64_t other = 0;
        for (int j = 0; j < 8; j++) other += j == wc || j == oc || j == nc ? 0 : s.missing_cat[j];
        for (int j = 0; j < 6; j++) other += s.missing_num[j];
        CHECK(other == 0, "missing values in other columns: %lld", (long long)other);
        CHECK(s.last_n == files[k].rows % 256, "last batch %lld", (long long)s.last_n);

        /* every value against a plain parse */
        double ref_num[6], got_num[6] = {0};
        uint64_t ref_cat[8], got_cat[8] = {0};
        int64_t ref_rows;
        adult_reference(files[k].path, files[k].test, ref_num, ref_cat, &ref_rows);
        CHECK(ref_rows == files[k].rows, "reference rows %lld", (long long)ref_rows);
        hx_reader *r;
        if (hx_reader_open(files[k].path, &c, &r) == HX_OK) {
            const hx_batch *b;
            while (hx_reader_next(r, &b) == HX_OK && b)
                for (int64_t i = 0; i < b->n; i++) {
                    for (int j = 0; j < 6; j++) got_num[j] += b->numeric[i * 6 + j];
                    for (int j = 0; j < 8; j++) got_cat[j] += (uint64_t)b->categorical[i * 8 + j];
                }
            hx_reader_close(r);
        }
        for (int j = 0; j < 6; j++)
            CHECK(got_num[j] == ref_num[j], "numeric column %d sum %.17g want %.17g", j, got_num[j], ref_num[j]);
        for (int j = 0; j < 8; j++) CHECK(got_cat[j] == ref_cat[j], "categorical column %d ids differ", j);
    }
    /* the quirks are needed: adult.test read with the training-file config */
    hx_reader_config c = hx_reader_config_adult(false);
    epoch_sum s;
    hx_reader_stats st;
    CHECK(read_file_epoch(adult_test, &c, &s, &st) == HX_OK, "%s", hx_last_error());
    CHECK(s.rows == 0 && st.malformed == 16282 && st.malformed_by_reason[HX_MALFORMED_LABEL] == 16281 &&
              st.malformed_by_reason[HX_MALFORMED_COLUMNS] == 1 && st.first_malformed_line == 1,
          "without the test quirks: %lld rows, %lld malformed (%s)", (long long)s.rows,
          (long long)st.malformed, st.first_malformed);
    /* without trimming, " State-gov" is a different category and " 39" not a number */
    c = hx_reader_config_adult(false);
    c.trim_spaces = false;
    CHECK(read_file_epoch(adult_data, &c, &s, &st) == HX_OK, "%s", hx_last_error());
    CHECK(s.rows == 0 && st.malformed_by_reason[HX_MALFORMED_NUMBER] == 32561, "untrimmed: %lld rows",
          (long long)s.rows);
}

/* ---- malformed rows ------------------------------------------------------------------- */

static const char *bad_csv =
    "1,2.5,x,3\n"                       /* 1 good */
    "0,1,y\n"                           /* 2 columns */
    "1,abc,z,4\n"                       /* 3 number */
    "q,1,z,4\n"                         /* 4 label */
    "1,\"unterminated,z,4\n"            /* 5 quote */
    "\n"                                /* 6 blank */
    "1,2,\"a,b\",5\n"                   /* 7 good: a quoted delimiter */
    "1,2,\"he said \"\"hi\"\"\",5\n"    /* 8 good: escaped quotes */
    "1,2,z,5,6\n"                       /* 9 columns */
    "1,2,zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"
    "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz,1\n" /* 10 too long */
    "0,,w,\r\n"                         /* 11 good: CRLF, missing numerics */
    "1,1e3,\xc3\xa9t\xc3\xa9,-2.5\n"    /* 12 good: UTF-8 category */
    "1,1\xc3\xa9,q,1\n"                 /* 13 number: non-ASCII */
    "1,\"2\"x,q,1\n"                    /* 14 quote: text after the closing quote */
    "1,7,last,8";                       /* 15 good: no final newline */

static const hx_column_spec small_schema[4] = {
    {"y", HX_COLUMN_LABEL, 0, 0}, {"a", HX_COLUMN_NUMERIC, -1.0f, 0},
    {"b", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH}, {"c", HX_COLUMN_NUMERIC, 0, 0}};

static hx_reader_config small_config(void)
{
    hx_reader_config c = hx_reader_config_default();
    c.columns = small_schema;
    c.n_columns = 4;
    c.max_line_bytes = 64;
    c.hash_seed = 99;
    return c;
}

static int64_t h99(const char *s) { return (int64_t)(XXH3_64bits_withSeed(s, strlen(s), 99) & (uint64_t)INT64_MAX); }

static void test_malformed(void)
{
    char path[512];
    tmp_path(path, sizeof path, "bad.csv");
    write_file(path, bad_csv, strlen(bad_csv));
    /* whole-file blocks, and 64-byte blocks that cut every line (the long
     * line then never fits a block), at 1 and 3 threads */
    size_t blocks[2] = {1 << 20, 64};
    for (int v = 0; v < 4; v++) {
        hx_reader_config c = small_config();
        c.block_bytes = blocks[v & 1];
        c.n_threads = v < 2 ? 1 : 3;
        c.max_blocks = v < 2 ? 2 : 5;
        c.batch_size = 4;
        hx_reader *r;
        CHECK(hx_reader_open(path, &c, &r) == HX_OK, "%s", hx_last_error());
        float labels[16], a[16], cc[16];
        uint8_t ma[16], mc[16];
        int64_t ids[16];
        int n = 0;
        const hx_batch *b;
        while (hx_reader_next(r, &b) == HX_OK && b)
            for (int64_t i = 0; i < b->n && n < 16; i++, n++) {
                labels[n] = b->labels[i];
                a[n] = b->numeric[2 * i];
                cc[n] = b->numeric[2 * i + 1];
                ma[n] = b->numeric_missing[2 * i];
                mc[n] = b->numeric_missing[2 * i + 1];
                ids[n] = b->categorical[i];
            }
        hx_reader_stats st;
        hx_reader_stats_get(r, &st);
        hx_reader_close(r);
        CHECK(n == 6, "variant %d: %d good rows", v, n);
        if (n != 6) continue;
        CHECK(st.malformed == 8 && st.malformed_by_reason[HX_MALFORMED_COLUMNS] == 2 &&
                  st.malformed_by_reason[HX_MALFORMED_NUMBER] == 2 &&
                  st.malformed_by_reason[HX_MALFORMED_LABEL] == 1 &&
                  st.malformed_by_reason[HX_MALFORMED_QUOTE] == 2 &&
                  st.malformed_by_reason[HX_MALFORMED_TOO_LONG] == 1,
              "variant %d: malformed %lld: columns %lld number %lld label %lld quote %lld long %lld", v,
              (long long)st.malformed, (long long)st.malformed_by_reason[0], (long long)st.malformed_by_reason[1],
              (long long)st.malformed_by_reason[2], (long long)st.malformed_by_reason[3],
              (long long)st.malformed_by_reason[4]);
        CHECK(st.first_malformed_line == 2 && strstr(st.first_malformed, "line 2"), "first: %lld %s",
              (long long)st.first_malformed_line, st.first_malformed);
        CHECK(st.lines == 15 && st.rows == 6, "lines %lld rows %lld", (long long)st.lines, (long long)st.rows);
        CHECK(labels[0] == 1 && a[0] == 2.5f && cc[0] == 3 && ids[0] == h99("x") && !ma[0] && !mc[0], "row 1");
        CHECK(ids[1] == h99("a,b") && a[1] == 2 && cc[1] == 5, "row 7: quoted delimiter");
        CHECK(ids[2] == h99("he said \"hi\""), "row 8: escaped quotes");
        CHECK(labels[3] == 0 && a[3] == -1.0f && ma[3] == 1 && cc[3] == 0 && mc[3] == 1 && ids[3] == h99("w"),
              "row 11: CRLF and missing values (a %g %d, c %g %d)", a[3], ma[3], cc[3], mc[3]);
        CHECK(a[4] == 1000 && cc[4] == -2.5f && ids[4] == h99("\xc3\xa9t\xc3\xa9"), "row 12: UTF-8");
        CHECK(a[5] == 7 && cc[5] == 8 && ids[5] == h99("last"), "row 15: no final newline");
    }
    /* HX_MALFORMED_ERROR: stops at line 2, then at line 3 with a header skipped */
    for (int skip = 0; skip < 3; skip += 2) {
        hx_reader_config c = small_config();
        c.on_malformed = HX_MALFORMED_ERROR;
        c.skip_lines = skip;
        c.batch_size = 1;
        hx_reader *r;
        CHECK(hx_reader_open(path, &c, &r) == HX_OK, "%s", hx_last_error());
        const hx_batch *b;
        hx_status st;
        int good = 0;
        while ((st = hx_reader_next(r, &b)) == HX_OK && b) good++;
        const char *want = skip ? "line 3, column 2 (a): 'abc'" : "line 2: 3 fields, the schema has 4";
        CHECK(st == HX_ERR_CORRUPT && strstr(hx_last_error(), want) && strstr(hx_last_error(), "bad.csv"),
              "skip %d: status %s: %s", skip, hx_status_name(st), hx_last_error());
        CHECK(good == (skip ? 0 : 1), "skip %d: %d rows before the error", skip, good);
        CHECK(hx_reader_next(r, &b) == HX_ERR_CORRUPT && !b, "the error sticks");
        CHECK(hx_reader_rewind(r) == HX_OK, "%s", hx_last_error());
        CHECK(hx_reader_next(r, &b) == (skip ? HX_ERR_CORRUPT : HX_OK), "rewind starts over");
        hx_reader_close(r);
    }
    /* a file cut in the middle of a row */
    write_file(path, "1,2,a,3\n1,2", 11);
    hx_reader_config c = small_config();
    epoch_sum s;
    hx_reader_stats st;
    CHECK(read_file_epoch(path, &c, &s, &st) == HX_OK, "%s", hx_last_error());
    CHECK(s.rows == 1 && st.malformed_by_reason[HX_MALFORMED_COLUMNS] == 1 && st.first_malformed_line == 2,
          "truncated: %lld rows, %s", (long long)s.rows, st.first_malformed);
    remove(path);
}

/* ---- threads, memory, rewind, shuffle -------------------------------------------------------- */

static void test_threads_memory_rewind(void)
{
    hx_reader_config c = hx_reader_config_adult(false);
    c.batch_size = 1000;
    epoch_sum ref;
    CHECK(read_file_epoch(adult_data, &c, &ref, NULL) == HX_OK, "%s", hx_last_error());
    int threads[3] = {1, 2, 4};
    for (int t = 0; t < 3; t++) {
        c.n_threads = threads[t];
        c.block_bytes = 4096; /* ~1000 blocks */
        c.max_blocks = 4;
        c.max_line_bytes = 1024;
        hx_reader *r;
        CHECK(hx_reader_open(adult_data, &c, &r) == HX_OK, "%s", hx_last_error());
        for (int epoch = 0; epoch < 2; epoch++) {
            epoch_sum s;
            CHECK(read_epoch(r, &s) == HX_OK, "%s", hx_last_error());
            CHECK(s.digest == ref.digest && s.rows == 32561 && s.batches == 33 && s.last_n == 561,
                  "%d threads, epoch %d: digest differs (%lld rows, %lld batches)", threads[t], epoch,
                  (long long)s.rows, (long long)s.batches);
            hx_reader_stats st;
            hx_reader_stats_get(r, &st);
            CHECK(st.epoch == epoch && st.bytes == 3974305, "epoch %lld bytes %lld", (long long)st.epoch,
                  (long long)st.bytes);
            /* a 4 MB file through 4 blocks of 5 KB: far less than the file */
            CHECK(st.buffer_bytes < 160 * 1024, "%d threads: %zu bytes held", threads[t], st.buffer_bytes);
            const hx_batch *b;
            CHECK(hx_reader_next(r, &b) == HX_OK && !b, "after the end: no batch");
            CHECK(hx_reader_rewind(r) == HX_OK, "%s", hx_last_error());
        }
        hx_reader_close(r);
    }
    /* closing mid-epoch, with threads waiting for free blocks */
    hx_reader *r;
    c.n_threads = 2;
    CHECK(hx_reader_open(adult_data, &c, &r) == HX_OK, "%s", hx_last_error());
    const hx_batch *b;
    CHECK(hx_reader_next(r, &b) == HX_OK && b && b->n == 1000, "first batch");
    hx_reader_close(r);
}

/* A file whose numeric column is the row index. */
static void test_shuffle(void)
{
    const int N = 5000, S = 300;
    char path[512];
    tmp_path(path, sizeof path, "index.csv");
    char *text = malloc((size_t)N * 16);
    size_t k = 0;
    for (int i = 0; i < N; i++) k += (size_t)sprintf(text + k, "%d,%d\n", i % 2, i);
    write_file(path, text, k);
    free(text);
    static const hx_column_spec cols[2] = {{"y", HX_COLUMN_LABEL, 0, 0}, {"i", HX_COLUMN_NUMERIC, 0, 0}};
    int *order[4];
    for (int v = 0; v < 4; v++) {
        hx_reader_config c = hx_reader_config_default();
        c.columns = cols;
        c.n_columns = 2;
        c.batch_size = 64;
        c.block_bytes = 512;
        c.shuffle_rows = S;
        c.shuffle_seed = v == 2 ? 8 : 7;
        c.n_threads = v == 1 ? 3 : 1;
        order[v] = calloc((size_t)N, sizeof(int));
        hx_reader *r;
        CHECK(hx_reader_open(path, &c, &r) == HX_OK, "%s", hx_last_error());
        if (v == 3) hx_reader_rewind(r); /* epoch 1 */
        const hx_batch *b;
        int n = 0, ok = 1;
        char *seen = calloc((size_t)N, 1);
        while (hx_reader_next(r, &b) == HX_OK && b)
            for (int64_t i = 0; i < b->n; i++, n++) {
                int idx = (int)b->numeric[i];
                ok &= idx >= 0 && idx < N && !seen[idx] && n < N && b->labels[i] == (float)(idx % 2);
                if (ok) seen[idx] = 1, order[v][n] = idx;
                /* row idx entered the buffer after idx - S rows were emitted */
                ok &= n >= idx - S;
            }
        CHECK(ok && n == N, "shuffle %d: a permutation of the rows, each within the buffer's reach (%d rows)", v, n);
        free(seen);
        hx_reader_close(r);
    }
    int fixed = 0;
    for (int i = 0; i < N; i++) fixed += order[0][i] == i;
    CHECK(fixed < N / 20, "shuffled: %d rows in place", fixed);
    CHECK(memcmp(order[0], order[1], (size_t)N * sizeof(int)) == 0, "1 and 3 threads: same order");
    CHECK(memcmp(order[0], order[2], (size_t)N * sizeof(int)) != 0, "another seed: another order");
    CHECK(memcmp(order[0], order[3], (size_t)N * sizeof(int)) != 0, "epoch 1: another order");
    /* epoch 1 is the same in another reader */
    hx_reader_config c = hx_reader_config_default();
    c.columns = cols;
    c.n_columns = 2;
    c.batch_size = 64;
    c.shuffle_rows = S;
    c.shuffle_seed = 7;
    hx_reader *r;
    CHECK(hx_reader_open(path, &c, &r) == HX_OK, "%s", hx_last_error());
    epoch_sum e0, e1;
    read_epoch(r, &e0);
    hx_reader_rewind(r);
    read_epoch(r, &e1);
    hx_reader_close(r);
    int same = 1, n = 0;
    CHECK(hx_reader_open(path, &c, &r) == HX_OK, "%s", hx_last_error());
    hx_reader_rewind(r);
    const hx_batch *b;
    while (hx_reader_next(r, &b) == HX_OK && b)
        for (int64_t i = 0; i < b->n; i++, n++) same &= (int)b->numeric[i] == order[3][n];
    hx_reader_close(r);
    CHECK(same && n == N && e0.digest != e1.digest, "epoch orders are reproducible");
    for (int v = 0; v < 4; v++) free(order[v]);
    remove(path);
}

/* ---- generator ------------------------------------------------------------------------------- */

static void test_criteo_round_trip(void)
{
    char path[512];
    tmp_path(path, sizeof path, "criteo.tsv");
    hx_generator_config g = hx_generator_config_default();
    g.seed = 11;
    g.n_rows = 6000;
    g.batch_size = 512;
    g.vocab_size = 5000;
    g.missing_rate = 0.1;
    g.n_threads = 2;
    CHECK(hx_generator_write_tsv(&g, path) == HX_OK, "%s", hx_last_error());
    hx_generator *gen;
    CHECK(hx_generator_create(&g, &gen) == HX_OK, "%s", hx_last_error());
    hx_reader_config c = hx_reader_config_criteo();
    c.batch_size = 512;
    c.n_threads = 2;
    c.block_bytes = 64 << 10;
    hx_reader *r;
    CHECK(hx_reader_open(path, &c, &r) == HX_OK, "%s", hx_last_error());
    const hx_batch *a, *b;
    int64_t rows = 0, missing = 0;
    int same = 1;
    for (;;) {
        hx_generator_next(gen, &a);
        hx_reader_next(r, &b);
        if (!a || !b) {
            same &= !a && !b;
            break;
        }
        same &= a->n == b->n && a->n_numeric == 13 && b->n_numeric == 13 && a->n_categorical == 26 &&
                b->n_categorical == 26 && batch_digest(a, 0) == batch_digest(b, 0);
        for (int64_t i = 0; i < a->n * 26; i++) missing += a->categorical[i] == HX_ID_MISSING;
        rows += a->n;
    }
    CHECK(same && rows == 6000, "generator -> TSV -> reader: identical batches (%lld rows)", (long long)rows);
    CHECK(fabs((double)missing / (6000.0 * 26) - 0.1) < 0.01, "missing rate %g", (double)missing / (6000.0 * 26));
    hx_reader_stats st;
    hx_reader_stats_get(r, &st);
    CHECK(st.malformed == 0, "%s", st.first_malformed);
    hx_reader_close(r);
    /* batches do not depend on the batch size or threads */
    hx_generator_config g2 = g;
    g2.batch_size = 6000;
    g2.n_threads = 1;
    hx_generator *gen2;
    CHECK(hx_generator_create(&g2, &gen2) == HX_OK, "%s", hx_last_error());
    hx_generator_rewind(gen);
    hx_generator_next(gen2, &b);
    int64_t at = 0;
    same = b && b->n == 6000;
    while (same && hx_generator_next(gen, &a) == HX_OK && a) {
        same &= memcmp(a->categorical, b->categorical + at * 26, (size_t)a->n * 26 * 8) == 0 &&
                memcmp(a->numeric, b->numeric + at * 13, (size_t)a->n * 13 * 4) == 0 &&
                memcmp(a->labels, b->labels + at, (size_t)a->n * 4) == 0;
        at += a->n;
    }
    CHECK(same && at == 6000, "rows do not depend on the batch size");
    /* first_row k: the rows from k on of the same seed (a held-out set) */
    hx_generator_config g3 = g;
    g3.first_row = 1000;
    g3.n_rows = 5000;
    hx_generator *gen3;
    CHECK(hx_generator_create(&g3, &gen3) == HX_OK, "%s", hx_last_error());
    at = 1000;
    same = 1;
    while (same && hx_generator_next(gen3, &a) == HX_OK && a) {
        same &= memcmp(a->categorical, b->categorical + at * 26, (size_t)a->n * 26 * 8) == 0 &&
                memcmp(a->numeric, b->numeric + at * 13, (size_t)a->n * 13 * 4) == 0 &&
                memcmp(a->labels, b->labels + at, (size_t)a->n * 4) == 0;
        at += a->n;
    }
    CHECK(same && at == 6000, "first_row 1000: rows 1000.. of the same seed (to row %lld)", (long long)at);
    hx_generator_free(gen3);
    hx_generator_free(gen);
    hx_generator_free(gen2);
    remove(path);
}

static void test_zipf_and_planted_model(void)
{
    double exps[2] = {0.8, 1.2};
    for (int e = 0; e < 2; e++) {
        hx_generator_config g = hx_generator_config_default();
        g.seed = 5;
        g.n_rows = 200000;
        g.batch_size = 50000;
        g.n_numeric = 0;
        g.n_categorical = 1;
        g.vocab_size = 100000;
        g.zipf_exponent = exps[e];
        hx_generator *gen;
        CHECK(hx_generator_create(&g, &gen) == HX_OK, "%s", hx_last_error());
        int64_t *count = calloc(100000, sizeof *count);
        const hx_batch *b;
        int in_range = 1;
        while (hx_generator_next(gen, &b) == HX_OK && b)
            for (int64_t i = 0; i < b->n; i++) {
                int64_t id = b->categorical[i];
                in_range &= id >= 0 && id < 100000;
                if (id >= 0 && id < 100000) count[id]++;
            }
        CHECK(in_range, "ids in [0, vocab)");
        /* least squares of log count on log rank over ranks 1..20: slope -exponent */
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        int m = 20;
        for (int k = 0; k < m; k++) {
            double x = log(k + 1.0), y = log((double)count[k] + 0.5);
            sx += x, sy += y, sxx += x * x, sxy += x * y;
        }
        double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
        CHECK(fabs(slope + exps[e]) < 0.08, "exponent %g: fitted slope %g", exps[e], slope);
        /* P(0) against the exact normaliser */
        double z = 0;
        for (int k = 1; k <= 100000; k++) z += pow(k, -exps[e]);
        double p0 = 1 / z, got = count[0] / 200000.0;
        CHECK(fabs(got - p0) < 4 * sqrt(p0 * (1 - p0) / 200000.0), "P(id 0) %g want %g", got, p0);
        free(count);
        hx_generator_free(gen);
    }
    /* labels follow the planted logits: calibration per logit decile */
    hx_generator_config g = hx_generator_config_default();
    g.seed = 3;
    g.n_rows = 40000;
    g.batch_size = 40000;
    g.vocab_size = 1000;
    hx_generator *gen;
    CHECK(hx_generator_create(&g, &gen) == HX_OK, "%s", hx_last_error());
    CHECK(hx_generator_logits(gen) == NULL, "no logits before a batch");
    const hx_batch *b;
    hx_generator_next(gen, &b);
    const float *logit = hx_generator_logits(gen);
    double sum_p[10] = {0}, sum_y[10] = {0}, cnt[10] = {0}, lo = -4, hi = 4;
    double mean_l = 0, mean_y = 0, cov = 0, var_l = 0, var_y = 0;
    for (int64_t i = 0; i < b->n; i++) {
        double l = logit[i];
        int bin = l <= lo ? 0 : l >= hi ? 9 : (int)((l - lo) / (hi - lo) * 10);
        if (bin > 9) bin = 9;
        sum_p[bin] += 1 / (1 + exp(-l));
        sum_y[bin] += b->labels[i];
        cnt[bin]++;
        mean_l += l, mean_y += b->labels[i];
    }
    mean_l /= (double)b->n, mean_y /= (double)b->n;
    for (int64_t i = 0; i < b->n; i++) {
        double dl = logit[i] - mean_l, dy = b->labels[i] - mean_y;
        cov += dl * dy, var_l += dl * dl, var_y += dy * dy;
    }
    double corr = cov / sqrt(var_l * var_y);
    CHECK(corr > 0.4, "label-logit correlation %g", corr);
    for (int k = 0; k < 10; k++) {
        if (cnt[k] < 200) continue;
        double p = sum_p[k] / cnt[k], y = sum_y[k] / cnt[k];
        CHECK(fabs(y - p) < 4 * sqrt(p * (1 - p) / cnt[k]) + 0.005, "bin %d: label rate %g, mean p %g (%g rows)",
              k, y, p, cnt[k]);
    }
    hx_generator_free(gen);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors(void)
{
    hx_reader *r = (hx_reader *)1;
    hx_reader_config c = hx_reader_config_adult(false);
    CHECK(hx_reader_open("/nonexistent/adult.data", &c, &r) == HX_ERR_IO && r == NULL &&
              strstr(hx_last_error(), "/nonexistent/adult.data"), "missing file: %s", hx_last_error());
    CHECK(hx_reader_open(adult_data, NULL, &r) == HX_ERR_INVALID_ARGUMENT, "NULL config");
    CHECK(hx_reader_open(NULL, &c, &r) == HX_ERR_INVALID_ARGUMENT, "NULL path");
    hx_reader_config bad = hx_reader_config_default();
    CHECK(hx_reader_open(adult_data, &bad, &r) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "no columns"),
          "no columns: %s", hx_last_error());
    static const hx_column_spec two_labels[2] = {{"a", HX_COLUMN_LABEL, 0, 0}, {"b", HX_COLUMN_LABEL, 0, 0}};
    bad.columns = two_labels;
    bad.n_columns = 2;
    CHECK(hx_reader_open(adult_data, &bad, &r) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "label"),
          "two labels: %s", hx_last_error());
    bad = c;
    bad.n_threads = 0;
    CHECK(hx_reader_open(adult_data, &bad, &r) == HX_ERR_INVALID_ARGUMENT, "0 threads");
    bad = c;
    bad.delimiter = '\n';
    CHECK(hx_reader_open(adult_data, &bad, &r) == HX_ERR_INVALID_ARGUMENT, "newline delimiter");
    bad = c;
    bad.batch_size = 0;
    CHECK(hx_reader_open(adult_data, &bad, &r) == HX_ERR_INVALID_ARGUMENT, "batch 0");
    bad = hx_reader_config_criteo();
    bad.trim_spaces = true;
    CHECK(hx_reader_open(adult_data, &bad, &r) == HX_ERR_INVALID_ARGUMENT, "trimming the tab delimiter");
    const hx_batch *b = (const hx_batch *)1;
    CHECK(hx_reader_next(NULL, &b) == HX_ERR_INVALID_ARGUMENT && b == NULL, "next(NULL)");
    CHECK(hx_reader_rewind(NULL) == HX_ERR_INVALID_ARGUMENT, "rewind(NULL)");
    hx_reader_close(NULL);
    CHECK(hx_reader_config_find(&c, "income") == -1 && hx_reader_config_find(&c, "nope") == -1 &&
              hx_reader_config_find(&c, "age") == 0 && hx_reader_config_find(&c, "hours_per_week") == 5,
          "find");
    CHECK(strcmp(hx_malformed_reason_name(HX_MALFORMED_QUOTE), "bad quoting") == 0, "reason names");

    hx_generator *g = (hx_generator *)1;
    hx_generator_config gc = hx_generator_config_default();
    gc.zipf_exponent = -1;
    CHECK(hx_generator_create(&gc, &g) == HX_ERR_INVALID_ARGUMENT && g == NULL, "negative exponent");
    gc = hx_generator_config_default();
    gc.vocab_size = ((int64_t)1 << 32) + 1;
    CHECK(hx_generator_create(&gc, &g) == HX_ERR_INVALID_ARGUMENT, "vocabulary past 2^32");
    gc = hx_generator_config_default();
    gc.missing_rate = 1.5;
    CHECK(hx_generator_create(&gc, &g) == HX_ERR_INVALID_ARGUMENT, "missing rate 1.5");
    gc = hx_generator_config_default();
    gc.first_row = -1;
    CHECK(hx_generator_create(&gc, &g) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "first_row"),
          "first_row -1: %s", hx_last_error());
    gc = hx_generator_config_default();
    gc.n_rows = 10;
    CHECK(hx_generator_write_tsv(&gc, "/nonexistent/dir/x.tsv") == HX_ERR_IO, "unwritable path: %s",
          hx_last_error());
}

/* Random bytes drawn from the characters that matter: no crash, every line
 * accounted for, and the same result for any block size and thread count. */
static void test_fuzz(void)
{
    static const char alphabet[] = ",,,,\"\"\n\n\r 0123456789.-eE?xyz\t\xc3\xa9";
    char path[512];
    tmp_path(path, sizeof path, "fuzz.csv");
    test_rng rng = test_rng_make(2024);
    int ok = 1;
    for (int file = 0; file < 40; file++) {
        char text[3000];
        size_t n = 1 + test_rng_u64(&rng) % sizeof text;
        for (size_t i = 0; i < n; i++) text[i] = alphabet[test_rng_u64(&rng) % (sizeof alphabet - 1)];
        /* a few long lines for the max_line_bytes paths */
        if (file % 3 == 0)
            for (size_t i = 0; i < n / 2; i++)
                if (text[i] == '\n') text[i] = '7';
        write_file(path, text, n);
        uint64_t digest[3];
        int64_t counts[3][HX_MALFORMED_REASON_COUNT + 2];
        for (int v = 0; v < 3; v++) {
            hx_reader_config c = small_config();
            c.block_bytes = v == 0 ? 1 << 20 : 64 + 37 * v;
            c.n_threads = 1 + v;
            c.quotes = file % 2 == 0;
            c.missing_token = "?";
            c.skip_lines = file % 4 == 1;
            c.batch_size = 7;
            epoch_sum es;
            hx_reader_stats st;
            ok &= read_file_epoch(path, &c, &es, &st) == HX_OK;
            digest[v] = es.digest;
            memcpy(counts[v], st.malformed_by_reason, sizeof st.malformed_by_reason);
            counts[v][HX_MALFORMED_REASON_COUNT] = st.lines;
            counts[v][HX_MALFORMED_REASON_COUNT + 1] = st.rows;
            ok &= st.rows + st.malformed <= st.lines && st.rows == es.rows && st.bytes == (int64_t)n;
        }
        bool same = digest[0] == digest[1] && digest[0] == digest[2] &&
                    memcmp(counts[0], counts[1], sizeof counts[0]) == 0 &&
                    memcmp(counts[0], counts[2], sizeof counts[0]) == 0;
        if (!same || !ok) {
            for (int v = 0; v < 3; v++)
                fprintf(stderr, "fuzz file %d variant %d: %016llx lines %lld rows %lld by reason %lld %lld %lld %lld %lld\n",
                        file, v, (unsigned long long)digest[v], (long long)counts[v][5], (long long)counts[v][6],
                        (long long)counts[v][0], (long long)counts[v][1], (long long)counts[v][2],
                        (long long)counts[v][3], (long long)counts[v][4]);
            ok = 0;
            break;
        }
    }
    CHECK(ok, "random files: every line accounted for, same rows and counts at any block size and thread count");
    remove(path);
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    snprintf(adult_data, sizeof adult_data, "%s/data/adult/adult.data", src ? src : ".");
    snprintf(adult_test, sizeof adult_test, "%s/data/adult/adult.test", src ? src : ".");
    return test_make_tmpdir(tmpdir, sizeof tmpdir, "hx_test_reader") ? 0 : 1;
}

static void teardown(void) { test_remove_tree(tmpdir); }

static const test_case cases[] = {
    {"adult", test_adult},
    {"malformed", test_malformed},
    {"threads_memory_rewind", test_threads_memory_rewind},
    {"shuffle", test_shuffle},
    {"fuzz", test_fuzz},
    {"criteo_round_trip", test_criteo_round_trip},
    {"zipf_and_planted_model", test_zipf_and_planted_model},
    {"errors", test_errors},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "reader", cases, TEST_COUNT(cases), &o);
}
