/* Checkpoints of a table on disk: the rows stay in the row store; the
 * checkpoint holds its index (which record is each row's) and the
 * table's description, so it costs 4 bytes a row, not a copy of the table.
 *
 * Save: every dirty cached row is written back, the store's file is
 * flushed, then the file below is staged (core.h: synced, renamed over the
 * path, the folder synced), and only then does the store record the new
 * generation in its header and free the records that only the checkpoint
 * before the previous one held. A crash at any instant leaves the previous
 * checkpoint or the new one loadable, and so does a crash before a folder
 * holding the new one is committed (hetex's --save): the store never
 * reuses a record of the last two committed checkpoints, and a new process
 * over the file appends.
 *
 * File: a 128-byte header (magic "HXSSDCKP", version, dtype, rows, dim,
 * optimizer kind, initialiser, the store's file id and generation, count
 * of extra words, XXH3-64 of the bytes before it), the index (rows u32) in
 * blocks of at most 1 MiB, then the extra i64 words (a dynamic table's id
 * map) likewise; each block followed by its XXH3-64 seeded with (section,
 * block number). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/core.h"
#include "embedding/embedding.h"

#define MAGIC "HXSSDCKP"
#define VERSION 1u
#define BLOCK ((size_t)1 << 20)
#define MAX_EXTRA ((int64_t)1 << 40)

typedef struct cheader {
    char magic[8];
    uint32_t version, dtype;
    int64_t rows, dim;
    uint32_t optim, init_kind;
    double init_a, init_b;
    uint64_t init_seed, file_id, gen;
    int64_t n_extra;
    uint64_t reserved[4];
    uint64_t check;
} cheader;
_Static_assert(sizeof(cheader) == 128, "checkpoint header is 128 bytes");

static uint64_t block_seed(int sec, uint64_t b) { return (uint64_t)sec << 40 ^ b; }

static uint64_t section_bytes(uint64_t bytes) { return bytes + (bytes + BLOCK - 1) / BLOCK * 8; }

static bool write_section(FILE *f, int sec, const void *data, uint64_t bytes)
{
    const char *p = data;
    for (uint64_t b = 0, off = 0; off < bytes; b++, off += BLOCK) {
        size_t len = bytes - off < BLOCK ? (size_t)(bytes - off) : BLOCK;
        uint64_t sum = XXH3_64bits_withSeed(p + off, len, block_seed(sec, b));
        if (fwrite(p + off, 1, len, f) != len || fwrite(&sum, 8, 1, f) != 1) return false;
    }
    return true;
}

hx_status hx_emb_ssd_save_with(hx_emb_ssd *t, const char *path, const int64_t *extra, int64_t n_extra,
                               hx_emb_err *err)
{
    hx_status st = hx_emb_ssd_flush(t, err);
    const uint32_t *idx;
    uint64_t file_id, gen;
    if (!st) st = hx_emb_store_ckpt_begin(hx_emb_ssd_store(t), &idx, &file_id, &gen, err);
    if (st) return st;
    hx_emb_table *b = (hx_emb_table *)t;
    cheader h = {.version = VERSION, .rows = b->rows, .dim = b->dim, .file_id = file_id, .gen = gen,
                 .n_extra = n_extra};
    memcpy(h.magic, MAGIC, 8);
    hx_dtype dt;
    hx_emb_optim_kind ok;
    hx_emb_init in;
    hx_emb_ssd_describe(t, &dt, &ok, &in);
    h.dtype = (uint32_t)dt;
    h.optim = (uint32_t)ok;
    h.init_kind = (uint32_t)in.kind;
    h.init_a = in.a;
    h.init_b = in.b;
    h.init_seed = in.seed;
    h.check = XXH3_64bits(&h, offsetof(cheader, check));
    hx_stage stage;
    st = hx__stage_open("embedding save", path, &stage);
    if (st) return hx_emb_fail(err, st, "%s", hx_last_error());
    errno = 0;
    bool ok_w = fwrite(&h, sizeof h, 1, stage.f) == 1 &&
                write_section(stage.f, 1, idx, (uint64_t)b->rows * 4) &&
                (!n_extra || write_section(stage.f, 2, extra, (uint64_t)n_extra * 8));
    if (!ok_w) {
        st = hx_emb_fail(err, HX_ERR_IO, "embedding save: cannot write %s: %s; the file at %s is untouched",
                         stage.tmp, strerror(errno ? errno : EIO), path);
        hx__stage_abort(&stage);
        return st;
    }
    if ((st = hx__stage_commit("embedding save", &stage))) return hx_emb_fail(err, st, "%s", hx_last_error());
    return hx_emb_store_ckpt_end(hx_emb_ssd_store(t), gen, err);
}

static hx_status read_section(FILE *f, int sec, void *data, uint64_t bytes, const char *path, hx_emb_err *err)
{
    char *p = data;
    for (uint64_t b = 0, off = 0; off < bytes; b++, off += BLOCK) {
        size_t len = bytes - off < BLOCK ? (size_t)(bytes - off) : BLOCK;
        uint64_t sum;
        if (fread(p + off, 1, len, f) != len || fread(&sum, 8, 1, f) != 1)
            return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s ends inside its %s", path,
                               sec == 1 ? "index" : "id map");
        if (sum != XXH3_64bits_withSeed(p + off, len, block_seed(sec, b)))
            return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s: block %" PRIu64 " of its %s has "
                               "a bad checksum: the file is corrupt", path, b, sec == 1 ? "index" : "id map");
    }
    return HX_OK;
}

/* Checks a header against the table: HX_ERR_CORRUPT, _UNSUPPORTED, _SHAPE or
 * _INVALID_ARGUMENT as hetex.h's load says. */
static hx_status check_header(hx_emb_ssd *t, const cheader *h, uint64_t size, const char *path,
                              hx_emb_err *err)
{
    hx_emb_table *b = (hx_emb_table *)t;
    if (memcmp(h->magic, MAGIC, 8) || h->check != XXH3_64bits(h, offsetof(cheader, check)))
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is not a checkpoint of a table on "
                           "disk (or its header is corrupt)", path);
    if (h->version != VERSION)
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED, "embedding load: %s is format version %u, this build "
                           "reads %u", path, h->version, VERSION);
    hx_dtype dt;
    hx_emb_optim_kind ok;
    hx_emb_init in;
    hx_emb_ssd_describe(t, &dt, &ok, &in);
    if (h->rows != b->rows || h->dim != b->dim || h->dtype != (uint32_t)dt)
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding load: %s holds a %" PRId64 " x %" PRId64
                           " table of dtype %u, this one is %lld x %lld %s", path, h->rows, h->dim,
                           h->dtype, (long long)b->rows, (long long)b->dim, hx_emb_dtype_name(dt));
    if (h->optim != (uint32_t)ok)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding load: %s holds %s state, the table "
                           "keeps %s", path, h->optim <= HX_EMB_OPTIM_FTRL ?
                           hx_emb_optim_name((hx_emb_optim_kind)h->optim) : "unknown", hx_emb_optim_name(ok));
    hx_emb_init fin = {(hx_emb_init_kind)h->init_kind, h->init_a, h->init_b, h->init_seed};
    if (h->init_kind > HX_EMB_INIT_NORMAL || hx_emb_init_check(&fin, "embedding load", err))
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s: its initialiser is not valid", path);
    if (h->n_extra < 0 || h->n_extra > MAX_EXTRA)
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s: %" PRId64 " extra words", path, h->n_extra);
    uint64_t want = sizeof *h + section_bytes((uint64_t)h->rows * 4) + section_bytes((uint64_t)h->n_extra * 8);
    if (size != want)
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s has %" PRIu64 " bytes, its header "
                           "says %" PRIu64 ": it is truncated or foreign", path, size, want);
    return HX_OK;
}

hx_status hx_emb_ssd_load_with(hx_emb_ssd *t, const char *path, hx_emb_extra_check check, void *ctx,
                               hx_emb_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return hx_emb_fail(err, HX_ERR_IO, "embedding load: cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    cheader h;
    hx_status st = HX_OK;
    if (fstat(fileno(f), &sb) != 0 || fread(&h, sizeof h, 1, f) != 1)
        st = hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is shorter than a checkpoint header", path);
    if (!st) st = check_header(t, &h, (uint64_t)sb.st_size, path, err);
    uint32_t *idx = NULL;
    int64_t *extra = NULL;
    if (!st) {
        idx = malloc((size_t)h.rows * 4);
        extra = h.n_extra ? malloc((size_t)h.n_extra * 8) : NULL;
        if (!idx || (h.n_extra && !extra))
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding load: out of memory for the index");
    }
    if (!st) st = read_section(f, 1, idx, (uint64_t)h.rows * 4, path, err);
    if (!st && h.n_extra) st = read_section(f, 2, extra, (uint64_t)h.n_extra * 8, path, err);
    fclose(f);
    if (!st && check) st = check(ctx, extra, h.n_extra, err);
    if (!st && !check && h.n_extra)
        st = hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding load: %s holds a dynamic table's id map; "
                         "load it into a dynamic table", path);
    if (!st) st = hx_emb_store_adopt(hx_emb_ssd_store(t), idx, h.file_id, h.gen, err);
    if (!st) {
        hx_emb_ssd_drop_cache(t);
        hx_emb_ssd_set_init(t, &(hx_emb_init){(hx_emb_init_kind)h.init_kind, h.init_a, h.init_b, h.init_seed});
    }
    free(idx);
    free(extra);
    return st;
}
