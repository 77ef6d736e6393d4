/* test_disk_tier: round trips under each engine (io_uring, libaio, sync,
 * forced; auto), aligned and unaligned buffers, partial last blocks,
 * overwrites; each injected failure (short write, ENOSPC, EIO, a flipped
 * bit) reported with the file and block and nothing applied; the buffered
 * fallback where O_DIRECT is refused; bad arguments; batches of reads and
 * writes in flight together, each with its own result. */
#include "memory/disk_tier.h"
#include "testutil.h"
#include "tmpdir.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BS (64 * 1024)

static char dir[256];

static void fill(test_rng *r, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)test_rng_u64(r);
}

static hx_disk_tier *make(const char *path, hx_disk_engine e, hx_mem_err *err)
{
    hx_disk_config c = hx_disk_config_default(path);
    c.block_size = BS;
    c.queue_depth = 8;
    c.engine = e;
    hx_disk_tier *t = NULL;
    hx_status st = hx_disk_tier_create(&c, &t, err);
    if (st == HX_ERR_UNSUPPORTED && strstr(err->msg, "not built in")) {
        test_skip(err->msg); /* a build without that library */
        return NULL;
    }
    CHECK(st == HX_OK, "create (%s): %s", hx__aio_name(e), err->msg);
    return t;
}

static void test_engine(hx_disk_engine e, uint64_t seed)
{
    hx_mem_err err;
    hx_disk_tier *t = make(dir, e, &err);
    if (!t) return;
    const char *name = hx__aio_name(e);
    hx_disk_stats s;
    hx_disk_tier_stats(t, &s);
    CHECK(!strcmp(s.engine, name) && s.direct && !s.direct_reason[0] && access(s.file, F_OK) == 0,
          "%s: engine %s, O_DIRECT %d (%s)", name, s.engine, s.direct, s.direct_reason);
    test_rng r = test_rng_make(seed);
    size_t bytes = 10 * BS + 1000; /* a partial last block */
    unsigned char *a = aligned_alloc(4096, 11 * BS), *b = aligned_alloc(4096, 11 * BS + 4096);
    unsigned char *old = malloc(bytes);
    fill(&r, a, bytes);
    CHECK(!hx_disk_tier_write(t, 0, a, bytes, &err), "%s: write: %s", name, err.msg);
    memset(b, 0, bytes);
    CHECK(!hx_disk_tier_read(t, 0, b, bytes, &err) && !memcmp(a, b, bytes), "%s: round trip: %s", name, err.msg);
    /* unaligned buffers go through the tier's own */
    CHECK(!hx_disk_tier_write(t, 20, a + 1, 3 * BS, &err), "%s: unaligned write: %s", name, err.msg);
    memset(b, 0, 3 * BS + 8);
    CHECK(!hx_disk_tier_read(t, 20, b + 3, 3 * BS, &err) && !memcmp(a + 1, b + 3, 3 * BS),
          "%s: unaligned round trip: %s", name, err.msg);
    /* overwrite: the new data is read back; old places are reused */
    memcpy(old, a, bytes);
    fill(&r, a, bytes);
    CHECK(!hx_disk_tier_write(t, 0, a, bytes, &err), "%s: overwrite: %s", name, err.msg);
    CHECK(!hx_disk_tier_read(t, 0, b, bytes, &err) && !memcmp(a, b, bytes), "%s: overwrite read: %s", name, err.msg);
    CHECK(!hx_disk_tier_write(t, 0, old, bytes, &err), "%s: %s", name, err.msg);
    hx_disk_tier_stats(t, &s);
    CHECK(s.blocks == 14 && s.slots <= 14 + 11 && s.writes == 4 && s.reads == 3 &&
          s.bytes_written == (uint64_t)(11 * 3 + 3) * BS, "%s: stats: %lld blocks, %lld slots, %llu bytes",
          name, (long long)s.blocks, (long long)s.slots, (unsigned long long)s.bytes_written);
    memcpy(a, old, bytes); /* a: what is stored now */

    /* each failure: reported, nothing applied */
    unsigned char *fresh = aligned_alloc(4096, 11 * BS);
    fill(&r, fresh, bytes);
    struct { hx_disk_faults f; bool write; hx_status st; const char *want[3]; } cases[] = {
        {{3, -1, -1, -1, false}, true, HX_ERR_IO, {"short write", "block 3", "previous copy"}},
        {{-1, 5 * BS, -1, -1, false}, true, HX_ERR_IO, {"ENOSPC", "block 5", "previous copy"}},
        {{-1, -1, 1, -1, false}, false, HX_ERR_IO, {"Input/output error", "block 1", "unchanged"}},
        {{-1, -1, -1, 7, false}, false, HX_ERR_CORRUPT, {"checksum mismatch", "block 7", "corrupt"}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        hx_disk_tier_set_faults(t, &cases[k].f);
        hx_status st = cases[k].write ? hx_disk_tier_write(t, 0, fresh, bytes, &err)
                                      : hx_disk_tier_read(t, 0, b, bytes, &err);
        bool named = strstr(err.msg, s.file) != NULL;
        for (int w = 0; w < 3; w++) named &= strstr(err.msg, cases[k].want[w]) != NULL;
        CHECK(st == cases[k].st && named, "%s: fault %zu: %s: %s", name, k, hx_status_name(st), err.msg);
        hx_disk_tier_set_faults(t, NULL);
        memset(b, 0, bytes);
        CHECK(!hx_disk_tier_read(t, 0, b, bytes, &err) && !memcmp(a, b, bytes),
              "%s: fault %zu: the stored copy is unchanged: %s", name, k, err.msg);
    }
    hx_disk_tier_stats(t, &s);
    CHECK(s.failed_writes == 2 && s.failed_reads == 2 && s.blocks == 14, "%s: failures counted", name);
    /* a real write still works after the failures, and the slots were given back */
    CHECK(!hx_disk_tier_write(t, 0, fresh, bytes, &err) && !hx_disk_tier_read(t, 0, b, bytes, &err) &&
          !memcmp(fresh, b, bytes), "%s: after the failures: %s", name, err.msg);
    hx_disk_tier_stats(t, &s);
    CHECK(s.slots <= 14 + 11, "%s: failed writes gave their places back (%lld slots)", name, (long long)s.slots);

    /* bad arguments */
    CHECK(hx_disk_tier_read(t, 50, b, BS, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "never written"),
          "%s: a block never written: %s", name, err.msg);
    CHECK(hx_disk_tier_read(t, 0, b, BS / 2, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "another size"),
          "%s: a size that differs: %s", name, err.msg);
    CHECK(hx_disk_tier_write(t, -1, a, BS, &err) == HX_ERR_INVALID_ARGUMENT, "%s: negative block", name);
    CHECK(hx_disk_tier_write(t, 0, NULL, BS, &err) == HX_ERR_INVALID_ARGUMENT, "%s: NULL buffer", name);
    char file[512];
    snprintf(file, sizeof file, "%s", s.file);
    hx_disk_tier_destroy(t);
    CHECK(access(file, F_OK) != 0, "%s: destroy removes the file", name);
    free(a);
    free(b);
    free(old);
    free(fresh);
}

static void test_fallbacks(void)
{
    hx_mem_err err;
    hx_disk_tier *t = make(dir, HX_DISK_ENGINE_AUTO, &err);
    if (t) {
        hx_disk_stats s;
        hx_disk_tier_stats(t, &s);
        CHECK((!strcmp(s.engine, "io_uring") && !s.engine_reason[0]) ||
              (strcmp(s.engine, "io_uring") && s.engine_reason[0]),
              "auto: %s, and why not io_uring when not: '%s'", s.engine, s.engine_reason);
        hx_disk_tier_destroy(t);
    }
    /* a filesystem that refuses O_DIRECT (tmpfs before Linux 6.6; injected
     * here, as /dev/shm may take it): buffered I/O, and the reason */
    hx_disk_faults f = hx_disk_faults_none();
    f.refuse_direct = true;
    hx_disk_config c = hx_disk_config_default(dir);
    c.block_size = BS;
    c.faults = &f;
    CHECK(!hx_disk_tier_create(&c, &t, &err), "%s", err.msg);
    if (t) {
        hx_disk_stats s;
        hx_disk_tier_stats(t, &s);
        unsigned char *a = aligned_alloc(4096, 2 * BS), *b = aligned_alloc(4096, 2 * BS);
        test_rng r = test_rng_make(4);
        fill(&r, a, 2 * BS);
        CHECK(!s.direct && strstr(s.direct_reason, "O_DIRECT") && strstr(s.direct_reason, "buffered"),
              "O_DIRECT refused: buffered I/O ('%s')", s.direct_reason);
        CHECK(!hx_disk_tier_write(t, 0, a + 8, 2 * BS - 8, &err) && !hx_disk_tier_read(t, 0, b, 2 * BS - 8, &err) &&
              !memcmp(a + 8, b, 2 * BS - 8), "buffered round trip: %s", err.msg);
        free(a);
        free(b);
        hx_disk_tier_destroy(t);
    }
    c = hx_disk_config_default(dir);
    c.block_size = 1000;
    CHECK(hx_disk_tier_create(&c, &t, &err) == HX_ERR_INVALID_ARGUMENT && !t && strstr(err.msg, "4096"),
          "block size must be a multiple of 4096: %s", err.msg);
    c = hx_disk_config_default("/nonexistent-offload-dir");
    CHECK(hx_disk_tier_create(&c, &t, &err) == HX_ERR_IO && strstr(err.msg, "/nonexistent-offload-dir"),
          "a missing offload path: %s", err.msg);
}

/* Batches: a write and reads in flight together, each with its own
 * result; a failing write in a batch applies nothing while the read beside
 * it succeeds; ops naming the same blocks are refused. */
static void test_batch(hx_disk_engine e, uint64_t seed)
{
    hx_mem_err err;
    hx_disk_tier *t = make(dir, e, &err);
    if (!t) return;
    const char *name = hx__aio_name(e);
    test_rng r = test_rng_make(seed);
    size_t n = 6 * BS;
    unsigned char *a = aligned_alloc(4096, n), *b = aligned_alloc(4096, n), *c = aligned_alloc(4096, n);
    unsigned char *d = aligned_alloc(4096, n);
    fill(&r, a, n);
    fill(&r, b, n);
    CHECK(!hx_disk_tier_write(t, 0, a, n, &err), "%s: write: %s", name, err.msg);
    hx_disk_op ops[2] = {{.write = true, .first = 10, .buf = b, .bytes = n},
                         {.write = false, .first = 0, .buf = c, .bytes = n}};
    CHECK(hx_disk_tier_batch(t, ops, 2) == HX_OK && !ops[0].st && !ops[1].st && !memcmp(a, c, n),
          "%s: batch of a write and a read: %s / %s", name, ops[0].err.msg, ops[1].err.msg);
    CHECK(!hx_disk_tier_read(t, 10, d, n, &err) && !memcmp(b, d, n), "%s: the batch's write: %s",
          name, err.msg);
    /* a short write in one op: that op fails and applies nothing, the read beside it succeeds */
    hx_disk_faults f = hx_disk_faults_none();
    f.short_write_block = 12;
    hx_disk_tier_set_faults(t, &f);
    fill(&r, c, n);
    memset(d, 0, n);
    ops[0] = (hx_disk_op){.write = true, .first = 10, .buf = c, .bytes = n};
    ops[1] = (hx_disk_op){.write = false, .first = 0, .buf = d, .bytes = n};
    hx_status st = hx_disk_tier_batch(t, ops, 2);
    hx_disk_tier_set_faults(t, NULL);
    CHECK(st == HX_ERR_IO && ops[0].st == HX_ERR_IO && strstr(ops[0].err.msg, "block 12") &&
              !ops[1].st && !memcmp(a, d, n),
          "%s: batch with a short write: %s, %s / %s", name, hx_status_name(st), ops[0].err.msg,
          ops[1].err.msg);
    CHECK(!hx_disk_tier_read(t, 10, d, n, &err) && !memcmp(b, d, n), "%s: a failed write in a "
          "batch changed its blocks: %s", name, err.msg);
    ops[0] = (hx_disk_op){.write = true, .first = 3, .buf = c, .bytes = n};
    ops[1] = (hx_disk_op){.write = false, .first = 0, .buf = d, .bytes = n};
    st = hx_disk_tier_batch(t, ops, 2);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(ops[1].err.msg, "same blocks"),
          "%s: overlapping ops: %s %s", name, hx_status_name(st), ops[1].err.msg);
    CHECK(!hx_disk_tier_read(t, 0, d, n, &err) && !memcmp(a, d, n), "%s: refused batch changed "
          "blocks: %s", name, err.msg);
    hx_disk_tier_destroy(t);
    free(a);
    free(b);
    free(c);
    free(d);
}

static void engine_uring(void) { test_engine(HX_DISK_ENGINE_URING, 1); }
static void engine_aio(void) { test_engine(HX_DISK_ENGINE_AIO, 2); }
static void engine_sync(void) { test_engine(HX_DISK_ENGINE_SYNC, 3); }
static void batch_uring(void) { test_batch(HX_DISK_ENGINE_URING, 4); }
static void batch_sync(void) { test_batch(HX_DISK_ENGINE_SYNC, 5); }

static int setup(void) { return test_make_tmpdir(dir, sizeof dir, "hx_test_disk") ? 0 : 1; }
static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"engine_uring", engine_uring},
    {"engine_aio", engine_aio},
    {"engine_sync", engine_sync},
    {"fallbacks", test_fallbacks},
    {"batch_uring", batch_uring},
    {"batch_sync", batch_sync},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "disk_tier", cases, TEST_COUNT(cases), &o);
}
