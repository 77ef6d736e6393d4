/* test_embedding_io: save and load of tables (f32/f16/bf16, eager and lazy,
 * each optimizer's state) round trip exactly; truncated, corrupt or
 * mismatched files are refused with the table untouched; saves are atomic
 * (no temporary left, a failed save keeps the old file); tables on a
 * backing file work as in memory. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "embedding/embedding.h"
#include "tests/util/testutil.h"
#include "tests/util/tmpdir.h"

static char dir[64];

/* A file in the test's directory: one buffer per name index. */
static const char *path_of(const char *name)
{
    static char p[8][160];
    static int next;
    char *b = p[next++ % 8];
    snprintf(b, 160, "%s/%s", dir, name);
    return b;
}

static hx_emb_table *make(int64_t rows, int64_t dim, hx_dtype dt, int lazy, hx_emb_optim_kind ok,
                                uint64_t seed, const char *backing)
{
    hx_emb_table_config c = hx_emb_table_config_default(rows, dim);
    c.dtype = dt;
    c.lazy_init = lazy;
    c.init.seed = seed;
    c.optim = hx_emb_optim_default(ok);
    c.backing_file = backing;
    hx_emb_table *t = NULL;
    hx_emb_err err;
    CHECK(hx_emb_local_create(&c, &t, &err) == HX_OK, "create: %s", err.msg);
    return t;
}

/* A few steps of updates on rows of a bag batch. */
static void train(hx_emb_table *t, int steps, uint64_t seed)
{
    test_rng r = test_rng_make(seed);
    int64_t n = 300, dim = t->dim;
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n), offs[30];
    float *dout = malloc(sizeof(float) * (size_t)(30 * dim));
    for (int s = 1; s <= steps; s++) {
        for (int64_t j = 0; j < n; j++) ids[j] = (int64_t)(test_rng_u64(&r) % (uint64_t)(t->rows / 2));
        for (int b = 0; b < 30; b++) offs[b] = b * 10;
        test_fill_uniform(&r, dout, 30 * dim, -1, 1);
        hx_emb_query q = hx_emb_query_bags(ids, n, offs, 30, HX_EMB_SUM);
        hx_emb_grad_input gi = {dout, NULL, dim, HX_EMB_DEDUP_AUTO};
        hx_emb_err err;
        CHECK(hx_emb_table_backward_update(t, &q, &gi, s, NULL, &err) == HX_OK, "train: %s", err.msg);
    }
    free(ids);
    free(dout);
}

/* Everything a load may change, as the table means it (row padding aside):
 * params as stored, state, ready bits, initialiser. */
typedef struct snap {
    void *bytes;
    size_t n;
} snap;

static snap take(hx_emb_table *tt)
{
    hx_emb_local *t = hx_emb_as_local(tt);
    int64_t rows = tt->rows, dim = tt->dim;
    int ns = hx_emb_optim_nstate(t->optim.kind), rowwise = t->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    size_t prow = (size_t)dim * t->esize, srow = rowwise ? sizeof(float) : (size_t)dim * sizeof(float);
    size_t words = t->lazy ? (size_t)(rows + 63) / 64 : 0;
    snap s = {NULL, (size_t)rows * (prow + (size_t)ns * srow) + words * 8 + 4 * sizeof(double)};
    char *p = s.bytes = malloc(s.n);
    for (int64_t r = 0; r < rows; r++, p += prow)
        memcpy(p, (const char *)t->param + (size_t)(r * t->stride) * t->esize, prow);
    for (int k = 0; k < ns; k++)
        for (int64_t r = 0; r < rows; r++, p += srow)
            memcpy(p, rowwise ? t->state[k] + r : t->state[k] + r * t->gstride, srow);
    for (size_t w = 0; w < words; w++, p += 8) {
        uint64_t v = t->ready[w];
        memcpy(p, &v, 8);
    }
    double init[4] = {(double)t->init.kind, t->init.a, t->init.b, (double)t->init.seed};
    memcpy(p, init, sizeof init);
    return s;
}

static int same_snap(snap a, snap b) { return a.n == b.n && memcmp(a.bytes, b.bytes, a.n) == 0; }

static long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static void round_trips(void)
{
    const struct {
        hx_dtype dt;
        int lazy;
        hx_emb_optim_kind ok;
        int64_t dim;
    } cases[] = {{HX_DTYPE_F32, 0, HX_EMB_OPTIM_LAZY_ADAM, 19}, {HX_DTYPE_F16, 1, HX_EMB_OPTIM_FTRL, 40},
                 {HX_DTYPE_BF16, 0, HX_EMB_OPTIM_ROW_ADAGRAD, 8}, {HX_DTYPE_F32, 1, HX_EMB_OPTIM_ADAGRAD, 64}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hx_emb_table *a = make(1000, cases[i].dim, cases[i].dt, cases[i].lazy, cases[i].ok, 1, NULL);
        hx_emb_table *b = make(1000, cases[i].dim, cases[i].dt, cases[i].lazy, cases[i].ok, 2, NULL);
        if (!a || !b) return;
        train(a, 3, 10 + i);
        const char *p = path_of("rt.bin");
        hx_emb_err err;
        CHECK(hx_emb_table_save(a, p, &err) == HX_OK, "save: %s", err.msg);
        CHECK(hx_emb_table_load(b, p, &err) == HX_OK, "load: %s", err.msg);
        snap sa = take(a), sb = take(b);
        CHECK(same_snap(sa, sb), "case %zu: loaded table equals the saved one", i);
        /* And they go on identically. */
        train(a, 2, 50);
        train(b, 2, 50);
        free(sa.bytes);
        free(sb.bytes);
        sa = take(a);
        sb = take(b);
        CHECK(same_snap(sa, sb), "case %zu: loaded table trains identically", i);
        free(sa.bytes);
        free(sb.bytes);
        CHECK(test_stage_files_in(dir) == 0, "no stage file left after a save (in %s)", dir);
        hx_emb_table_free(a);
        hx_emb_table_free(b);
    }
    /* A lazy file into an eager table: rows not written get their initial values. */
    hx_emb_table *lz = make(500, 16, HX_DTYPE_F32, 1, HX_EMB_OPTIM_ADAGRAD, 3, NULL);
    hx_emb_table *eg = make(500, 16, HX_DTYPE_F32, 0, HX_EMB_OPTIM_ADAGRAD, 4, NULL);
    if (!lz || !eg) return;
    train(lz, 2, 7);
    hx_emb_err err;
    CHECK(hx_emb_table_save(lz, path_of("lz.bin"), &err) == HX_OK && hx_emb_table_load(eg, path_of("lz.bin"), &err) == HX_OK,
          "lazy to eager: %s", err.msg);
    float r1[16], r2[16];
    int ok = 1;
    for (int64_t r = 0; r < 500; r++) {
        hx_emb_local_read_row(hx_emb_as_local(lz), r, r1);
        hx_emb_local_read_row(hx_emb_as_local(eg), r, r2);
        ok &= memcmp(r1, r2, sizeof r1) == 0;
    }
    CHECK(ok, "lazy file into an eager table reads the same");
    CHECK(hx_emb_as_local(eg)->state[0][499 * 16] == 0.0f, "unwritten rows get their start state");
    /* A table without an optimizer loads the params only. */
    hx_emb_table *none = make(500, 16, HX_DTYPE_F32, 0, HX_EMB_OPTIM_NONE, 5, NULL);
    CHECK(none && hx_emb_table_load(none, path_of("lz.bin"), &err) == HX_OK, "params only: %s", err.msg);
    hx_emb_local_read_row(hx_emb_as_local(none), 3, r2);
    hx_emb_local_read_row(hx_emb_as_local(lz), 3, r1);
    CHECK(memcmp(r1, r2, sizeof r1) == 0, "params only: the params");
    hx_emb_table_free(none);
    hx_emb_table_free(lz);
    hx_emb_table_free(eg);
}

static unsigned char *slurp(const char *p, long *n)
{
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, long n)
{
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fwrite(b, 1, (size_t)n, f);
    fclose(f);
}

static void bad_files(void)
{
    hx_emb_table *a = make(3000, 100, HX_DTYPE_F32, 0, HX_EMB_OPTIM_LAZY_ADAM, 1, NULL);
    hx_emb_table *b = make(3000, 100, HX_DTYPE_F32, 0, HX_EMB_OPTIM_LAZY_ADAM, 2, NULL);
    if (!a || !b) return;
    train(a, 1, 3);
    const char *good = path_of("good.bin");
    hx_emb_err err;
    CHECK(hx_emb_table_save(a, good, &err) == HX_OK, "save: %s", err.msg);
    long n = 0;
    unsigned char *bytes = slurp(good, &n);
    /* Params 1.2 MB and state: more than one block per section. */
    CHECK(bytes && n > 3 * (1 << 20), "file size %ld", n);
    if (!bytes) return;
    snap before = take(b);
    const char *bad = path_of("bad.bin");
    /* Truncations: inside the header, at section boundaries, inside blocks, one byte short. */
    const long cuts[] = {0, 10, 95, 96, 100, 128, 1000, (1 << 20) + 96 + 32, n / 2, n - 8, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(bad, bytes, cuts[i]);
        hx_status st = hx_emb_table_load(b, bad, &err);
        CHECK(st == HX_ERR_CORRUPT && strstr(err.msg, "truncated"), "truncated at %ld: %d %s", cuts[i], (int)st,
              err.msg);
    }
    /* Flipped bytes: header, section header, data, a block checksum, the last byte. */
    const long flips[] = {3, 20, 60, 100, 96 + 40, 5000, (1 << 20) + 96 + 32 + 3, n / 2, n - 1};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        bytes[flips[i]] ^= 0x10;
        spit(bad, bytes, n);
        bytes[flips[i]] ^= 0x10;
        hx_status st = hx_emb_table_load(b, bad, &err);
        CHECK(st == HX_ERR_CORRUPT || st == HX_ERR_SHAPE, "flip at %ld: %d %s", flips[i], (int)st, err.msg);
    }
    /* Trailing bytes. */
    unsigned char *longer = malloc((size_t)n + 4);
    memcpy(longer, bytes, (size_t)n);
    memset(longer + n, 0, 4);
    spit(bad, longer, n + 4);
    CHECK(hx_emb_table_load(b, bad, &err) == HX_ERR_CORRUPT && strstr(err.msg, "after the last"), "trailing: %s",
          err.msg);
    free(longer);
    /* Not our file; a missing file. */
    spit(bad, (const unsigned char *)"hello world, this is not a table at all, not even close to one....."
                                     "..............................",
         96);
    CHECK(hx_emb_table_load(b, bad, &err) == HX_ERR_CORRUPT && strstr(err.msg, "magic"), "bad magic: %s", err.msg);
    CHECK(hx_emb_table_load(b, path_of("missing.bin"), &err) == HX_ERR_IO, "missing file");
    snap after = take(b);
    CHECK(same_snap(before, after), "refused loads left the table untouched");
    free(after.bytes);
    /* Mismatches. */
    hx_emb_table *wide = make(3000, 101, HX_DTYPE_F32, 0, HX_EMB_OPTIM_LAZY_ADAM, 1, NULL);
    hx_emb_table *half = make(3000, 100, HX_DTYPE_BF16, 0, HX_EMB_OPTIM_LAZY_ADAM, 1, NULL);
    hx_emb_table *other = make(3000, 100, HX_DTYPE_F32, 0, HX_EMB_OPTIM_FTRL, 1, NULL);
    CHECK(hx_emb_table_load(wide, good, &err) == HX_ERR_SHAPE && strstr(err.msg, "3000 x 100"), "other dim: %s",
          err.msg);
    CHECK(hx_emb_table_load(half, good, &err) == HX_ERR_SHAPE && strstr(err.msg, "bf16"), "other dtype: %s", err.msg);
    CHECK(hx_emb_table_load(other, good, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "LazyAdam"),
          "other optimizer: %s", err.msg);
    /* A save that cannot be written keeps the old file. */
    CHECK(hx_emb_table_save(a, path_of("no/such/dir.bin"), &err) == HX_ERR_IO, "save into a missing dir: %s", err.msg);
    long n2;
    unsigned char *again = slurp(good, &n2);
    CHECK(again && n2 == n && memcmp(again, bytes, (size_t)n) == 0, "the good file is untouched");
    free(again);
    free(before.bytes);
    free(bytes);
    remove(bad);
    remove(good);
    hx_emb_table_free(a);
    hx_emb_table_free(b);
    hx_emb_table_free(wide);
    hx_emb_table_free(half);
    hx_emb_table_free(other);
}

/* A dynamic table's file whose id-map section is rewritten with every
 * checksum recomputed (a checksum is not a bounds check): a count larger
 * than the bytes left is refused before anything is allocated for it, and
 * an entry count that wraps 4 x count is refused by the map. */
enum { FILE_HEADER = 96, SECTION_HEADER = 32, EXTRA_KIND = 5 };

static void reseal_section_header(unsigned char *sh)
{
    uint64_t check = XXH3_64bits(sh, 24);
    memcpy(sh + 24, &check, 8);
}

static void hostile_counts(void)
{
    hx_emb_table_config c = hx_emb_table_config_default(64, 4);
    c.optim = hx_emb_optim_default(HX_EMB_OPTIM_ADAGRAD);
    hx_emb_idmap_config mc = {64, 0, 0, HX_EMB_FULL_ERROR, 3};
    hx_emb_table *t = NULL, *u = NULL;
    hx_emb_err err;
    CHECK(hx_emb_dynamic_create(&c, &mc, &t, &err) == HX_OK && hx_emb_dynamic_create(&c, &mc, &u, &err) == HX_OK,
          "dynamic tables: %s", err.msg);
    if (!t || !u) return;
    int64_t keys[5] = {11, -7, 1000003, INT64_MAX, 11};
    hx_emb_query q = hx_emb_query_rows(keys, 5);
    q.train = 1;
    q.step = 1;
    float out[5 * 4];
    CHECK(hx_emb_table_lookup(t, &q, out, NULL, &err) == HX_OK, "lookup: %s", err.msg);
    const char *good = path_of("dyn_good.bin"), *bad = path_of("dyn_bad.bin");
    CHECK(hx_emb_table_save(t, good, &err) == HX_OK, "save: %s", err.msg);
    long n = 0;
    unsigned char *bytes = slurp(good, &n);
    if (!bytes || n < FILE_HEADER + SECTION_HEADER + 16) return;
    /* The id map is the last section: its header, count x 8 bytes, one block checksum. */
    uint64_t count = 0;
    long at = -1;
    for (long p = n - 8 - SECTION_HEADER - 8; p >= FILE_HEADER; p -= 8) {
        uint32_t kind;
        memcpy(&kind, bytes + p, 4);
        memcpy(&count, bytes + p + 8, 8);
        if (kind == EXTRA_KIND && p + SECTION_HEADER + (long)count * 8 + 8 == n) {
            at = p;
            break;
        }
    }
    CHECK(at > 0, "found the id map section");
    if (at <= 0) return;
    float before[5 * 4];
    q.train = 0;
    CHECK(hx_emb_table_lookup(u, &q, before, NULL, &err) == HX_OK, "lookup: %s", err.msg);

    /* Counts the file cannot hold: 2^36 words (512 GiB), 2^40 (the old limit), just one too many. */
    const uint64_t too_many[] = {(uint64_t)1 << 36, (uint64_t)1 << 40, count + 1, UINT64_MAX / 8 + 2};
    for (size_t i = 0; i < sizeof too_many / sizeof *too_many; i++) {
        memcpy(bytes + at + 8, &too_many[i], 8);
        reseal_section_header(bytes + at);
        spit(bad, bytes, n);
        hx_status st = hx_emb_table_load(u, bad, &err);
        CHECK(st == HX_ERR_CORRUPT && strstr(err.msg, "bytes left"), "id map of %llu words: %d %s",
              (unsigned long long)too_many[i], (int)st, err.msg);
    }
    memcpy(bytes + at + 8, &count, 8);
    reseal_section_header(bytes + at);

    /* The map's entry count (word 3 with no free rows) wrapped by 2^62: 4 x count == the words left. */
    int64_t *w = malloc(count * 8);
    memcpy(w, bytes + at + SECTION_HEADER, count * 8);
    CHECK(w[1] == 0 && w[2] == 4 && (int64_t)count == 3 + 4 * w[2], "the map: %lld free, %lld keys",
          (long long)w[1], (long long)w[2]);
    w[2] += (int64_t)1 << 62;
    memcpy(bytes + at + SECTION_HEADER, w, count * 8);
    uint64_t block = XXH3_64bits_withSeed(w, count * 8, (uint64_t)EXTRA_KIND << 40);
    memcpy(bytes + at + SECTION_HEADER + count * 8, &block, 8);
    spit(bad, bytes, n);
    hx_status st = hx_emb_table_load(u, bad, &err);
    CHECK(st == HX_ERR_CORRUPT && strstr(err.msg, "entry count"), "entry count + 2^62: %d %s", (int)st, err.msg);
    free(w);

    float after[5 * 4];
    CHECK(hx_emb_table_lookup(u, &q, after, NULL, &err) == HX_OK && !memcmp(before, after, sizeof after),
          "refused loads left the table as it was");
    CHECK(hx_emb_table_load(u, good, &err) == HX_OK, "the good file loads: %s", err.msg);
    CHECK(hx_emb_table_lookup(t, &q, before, NULL, &err) == HX_OK &&
              hx_emb_table_lookup(u, &q, after, NULL, &err) == HX_OK && !memcmp(before, after, sizeof after),
          "and looks up as the saved table");
    free(bytes);
    remove(good);
    remove(bad);
    hx_emb_table_free(t);
    hx_emb_table_free(u);
}

static void backing_file(void)
{
    const char *bp = path_of("backing.dat");
    hx_emb_table *f = make(2000, 24, HX_DTYPE_F16, 0, HX_EMB_OPTIM_LAZY_ADAM, 8, bp);
    hx_emb_table *m = make(2000, 24, HX_DTYPE_F16, 0, HX_EMB_OPTIM_LAZY_ADAM, 8, NULL);
    if (!f || !m) return;
    CHECK(file_size(bp) > 2000 * 32 * 2, "backing file sized: %ld", file_size(bp));
    train(f, 3, 4);
    train(m, 3, 4);
    snap sf = take(f), sm = take(m);
    CHECK(same_snap(sf, sm), "a table on a backing file trains as one in memory");
    free(sf.bytes);
    free(sm.bytes);
    hx_emb_optim ftrl = hx_emb_optim_default(HX_EMB_OPTIM_FTRL);
    hx_emb_err err;
    CHECK(hx_emb_local_set_optim(f, &ftrl, 2, &err) == HX_OK && hx_emb_local_set_optim(m, &ftrl, 2, &err) == HX_OK,
          "switch optimizer on a backing file: %s", err.msg);
    train(f, 2, 5);
    train(m, 2, 5);
    sf = take(f);
    sm = take(m);
    CHECK(same_snap(sf, sm), "after switching the optimizer too");
    free(sf.bytes);
    free(sm.bytes);
    hx_emb_local_stats s;
    hx_emb_local_stats_get(f, &s, &err);
    CHECK(!s.huge_pages, "no huge pages on a file");
    hx_emb_table_free(f);
    hx_emb_table_free(m);
    remove(bp);
    hx_emb_table_config c = hx_emb_table_config_default(10, 4);
    c.backing_file = path_of("no/such/dir/x.dat");
    hx_emb_table *t = NULL;
    CHECK(hx_emb_local_create(&c, &t, &err) == HX_ERR_IO && !t, "backing file in a missing dir: %s", err.msg);
}

static int setup(void) { return test_make_tmpdir(dir, sizeof dir, "hx_emb_io") ? 0 : 1; }
static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"round_trips", round_trips},
    {"bad_files", bad_files},
    {"hostile_counts", hostile_counts},
    {"backing_file", backing_file},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "embedding_io", cases, TEST_COUNT(cases), &o);
}
