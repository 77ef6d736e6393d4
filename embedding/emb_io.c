/* Save and load of a local table (and the words of a dynamic table's map).
 *
 * File: a 96-byte header, then sections. Header: magic "HXEMBTAB", version,
 * dtype, rows, dim, optimizer kind, flags (ready bitmap, extra words),
 * section count, block size, the initialiser (kind, a, b, seed: rows not yet
 * written read as its values, and a load adopts it), and the XXH3-64 of
 * the bytes before it. Each
 * section: a 32-byte header (kind, element size, element count, XXH3-64 of
 * its first 24 bytes), then its bytes in blocks of at most BLOCK bytes, each
 * followed by the XXH3-64 of the block seeded with (kind, block number).
 * Sections in order: params (rows x dim of the storage dtype, no row
 * padding), each optimizer state array (f32, rows x dim, or rows for
 * row-wise Adagrad), the ready bitmap of a lazy table (u64 words), extra i64
 * words. Values are in the machine's byte order (little-endian x86-64).
 * A save writes a staged file (core.h: its own stage, synced, renamed over
 * the path, the folder synced; a dead writer's stage removed). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/core.h"
#include "embedding/embedding.h"

#define MAGIC "HXEMBTAB"
#define VERSION 1u
#define BLOCK ((size_t)1 << 20)
#define FLAG_READY 1u
#define FLAG_EXTRA 2u

enum { SEC_PARAM = 1, SEC_STATE0 = 2, SEC_STATE1 = 3, SEC_READY = 4, SEC_EXTRA = 5 };

typedef struct fheader {
    char magic[8];
    uint32_t version, dtype;
    int64_t rows, dim;
    uint32_t optim, flags;
    uint32_t nsec, block;
    uint32_t init_kind, reserved0;
    double init_a, init_b;
    uint64_t init_seed;
    uint64_t reserved1;
    uint64_t check;
} fheader;

typedef struct sheader {
    uint32_t kind, elem;
    uint64_t count;
    uint64_t reserved;
    uint64_t check;
} sheader;

_Static_assert(sizeof(fheader) == 96, "file header is 96 bytes");
_Static_assert(sizeof(sheader) == 32, "section header is 32 bytes");

static const char *sec_name(uint32_t kind)
{
    switch (kind) {
    case SEC_PARAM: return "params";
    case SEC_STATE0: return "optimizer state 0";
    case SEC_STATE1: return "optimizer state 1";
    case SEC_READY: return "ready bitmap";
    case SEC_EXTRA: return "id map";
    }
    return "unknown";
}

static uint64_t block_seed(uint32_t kind, uint64_t block) { return (uint64_t)kind << 40 ^ block; }

/* ---- the sections of a table ------------------------------------------------------- */

typedef struct sec {
    uint32_t kind, elem;
    uint64_t count;
} sec;

/* The sections a table of this shape, optimizer and flags holds, in order. */
static int table_sections(const hx_emb_local *t, hx_emb_optim_kind optim, uint32_t flags,
                          uint64_t n_extra, sec *out)
{
    int n = 0;
    uint64_t rows = (uint64_t)t->base.rows, dim = (uint64_t)t->base.dim;
    out[n++] = (sec){SEC_PARAM, (uint32_t)t->esize, rows * dim};
    int ns = hx_emb_optim_nstate(optim);
    for (int k = 0; k < ns; k++)
        out[n++] = (sec){SEC_STATE0 + (uint32_t)k, 4, optim == HX_EMB_OPTIM_ROW_ADAGRAD ? rows : rows * dim};
    if (flags & FLAG_READY) out[n++] = (sec){SEC_READY, 8, (rows + 63) / 64};
    if (flags & FLAG_EXTRA) out[n++] = (sec){SEC_EXTRA, 8, n_extra};
    return n;
}

/* Where section bytes live in the table: rows of row_bytes at stride
 * bytes (stride == row_bytes: contiguous). */
typedef struct place {
    char *base;
    size_t row_bytes, stride;
} place;

static place sec_place(const hx_emb_local *t, uint32_t kind, void *extra)
{
    place p = {NULL, 0, 0};
    size_t dim = (size_t)t->base.dim;
    switch (kind) {
    case SEC_PARAM: p = (place){t->param, dim * t->esize, (size_t)t->stride * t->esize}; break;
    case SEC_STATE0:
    case SEC_STATE1: {
        float *s = t->state[kind - SEC_STATE0];
        if (t->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD) p = (place){(char *)s, 4, 4};
        else p = (place){(char *)s, dim * 4, (size_t)t->gstride * 4};
        break;
    }
    case SEC_READY: p = (place){(char *)t->ready, 8, 8}; break;
    case SEC_EXTRA: p = (place){extra, 8, 8}; break;
    }
    return p;
}

/* Copies bytes [off, off + len) of a section's stream to or from its place. */
static void place_copy(const place *p, uint64_t off, char *buf, size_t len, int to_table)
{
    while (len > 0) {
        uint64_t r = off / p->row_bytes, in = off % p->row_bytes;
        size_t take = p->row_bytes - (size_t)in;
        if (take > len) take = len;
        char *at = p->base + r * p->stride + in;
        if (to_table) memcpy(at, buf, take);
        else memcpy(buf, at, take);
        off += take;
        buf += take;
        len -= take;
    }
}

/* ---- save ------------------------------------------------------------------------------- */

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

hx_status hx_emb_local_save_with(hx_emb_local *t, const char *path, const int64_t *extra,
                                 int64_t n_extra, hx_emb_err *err)
{
    char *buf = malloc(BLOCK);
    if (!buf) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding save: out of memory");
    hx_stage stage;
    hx_status st = hx__stage_open("embedding save", path, &stage);
    if (st) {
        free(buf);
        return hx_emb_fail(err, st, "%s", hx_last_error());
    }
    FILE *f = stage.f;
    uint32_t flags = (t->lazy ? FLAG_READY : 0) | (extra ? FLAG_EXTRA : 0);
    sec secs[6];
    int nsec = table_sections(t, t->optim.kind, flags, (uint64_t)n_extra, secs);
    fheader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, 8);
    h.version = VERSION;
    h.dtype = (uint32_t)t->dtype;
    h.rows = t->base.rows;
    h.dim = t->base.dim;
    h.optim = (uint32_t)t->optim.kind;
    h.flags = flags;
    h.nsec = (uint32_t)nsec;
    h.block = (uint32_t)BLOCK;
    h.init_kind = (uint32_t)t->init.kind;
    h.init_a = t->init.a;
    h.init_b = t->init.b;
    h.init_seed = t->init.seed;
    h.check = XXH3_64bits(&h, offsetof(fheader, check));
    int ok = write_all(f, &h, sizeof h);
    for (int s = 0; s < nsec && ok; s++) {
        sheader sh = {secs[s].kind, secs[s].elem, secs[s].count, 0, 0};
        sh.check = XXH3_64bits(&sh, offsetof(sheader, check));
        ok = write_all(f, &sh, sizeof sh);
        place p = sec_place(t, secs[s].kind, (void *)extra);
        uint64_t total = secs[s].count * secs[s].elem, off = 0, block = 0;
        while (ok && off < total) {
            size_t len = total - off < BLOCK ? (size_t)(total - off) : BLOCK;
            place_copy(&p, off, buf, len, 0);
            uint64_t c = XXH3_64bits_withSeed(buf, len, block_seed(secs[s].kind, block));
            ok = write_all(f, buf, len) && write_all(f, &c, sizeof c);
            off += len;
            block++;
        }
    }
    if (!ok) {
        st = hx_emb_fail(err, HX_ERR_IO, "embedding save: writing %s failed: %s; the previous "
                         "file at %s is untouched", stage.tmp, strerror(errno ? errno : EIO), path);
        hx__stage_abort(&stage);
    } else if ((st = hx__stage_commit("embedding save", &stage))) {
        hx_emb_fail(err, st, "%s", hx_last_error());
    }
    free(buf);
    return st;
}

/* ---- load ------------------------------------------------------------------------------- */

typedef struct reader {
    FILE *f;
    const char *path;
    char *buf;
    uint64_t size; /* the file's bytes */
} reader;

/* Reads the header of the next section and checks it against `want`
 * (count taken from the file for SEC_EXTRA), then that the file holds
 * the section's bytes and block checksums: every count is bounded by the
 * bytes left before anything is allocated or read for it. *count: the
 * section's element count. */
static hx_status read_section_header(reader *rd, const sec *want, uint64_t *count, hx_emb_err *err)
{
    sheader sh;
    const char *name = sec_name(want->kind);
    if (fread(&sh, 1, sizeof sh, rd->f) != sizeof sh)
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is truncated: the %s section header is missing",
                           rd->path, name);
    if (sh.check != XXH3_64bits(&sh, offsetof(sheader, check)))
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is corrupt: bad checksum of the %s section header",
                           rd->path, name);
    if (sh.kind != want->kind || sh.elem != want->elem || (want->kind != SEC_EXTRA && sh.count != want->count))
        return hx_emb_fail(err, HX_ERR_CORRUPT,
                           "embedding load: %s is corrupt: found section %u (%s) of %llu x %u bytes where %s of "
                           "%llu x %u bytes was expected",
                           rd->path, sh.kind, sec_name(sh.kind), (unsigned long long)sh.count, sh.elem, name,
                           (unsigned long long)want->count, want->elem);
    long at = ftell(rd->f);
    uint64_t left = at >= 0 && (uint64_t)at <= rd->size ? rd->size - (uint64_t)at : 0;
    /* count x elem bytes in blocks of BLOCK, each followed by its 8-byte checksum */
    if (sh.count > left / sh.elem || sh.count * sh.elem + 8 * ((sh.count * sh.elem + BLOCK - 1) / BLOCK) > left)
        return hx_emb_fail(err, HX_ERR_CORRUPT,
                           "embedding load: %s is truncated or corrupt: its %s section of %llu x %u bytes does "
                           "not fit in the %llu bytes left",
                           rd->path, name, (unsigned long long)sh.count, sh.elem, (unsigned long long)left);
    *count = sh.count;
    return HX_OK;
}

/* Reads the count elements of a section whose header was read, checking
 * every block's checksum. With `to` set, copies the bytes there; `again`
 * marks the second pass, where a mismatch means the file changed under us. */
static hx_status read_section_body(reader *rd, const sec *want, uint64_t count, const place *to, int again,
                                   hx_emb_err *err)
{
    const char *name = sec_name(want->kind);
    uint64_t total = count * want->elem, off = 0, block = 0;
    while (off < total) {
        size_t len = total - off < BLOCK ? (size_t)(total - off) : BLOCK;
        uint64_t c;
        if (fread(rd->buf, 1, len, rd->f) != len || fread(&c, 1, sizeof c, rd->f) != sizeof c)
            return hx_emb_fail(err, again ? HX_ERR_IO : HX_ERR_CORRUPT,
                               "embedding load: %s is truncated in the %s section (block %llu of %llu bytes)%s",
                               rd->path, name, (unsigned long long)block, (unsigned long long)total,
                               again ? "; it changed while loading and the table is partially loaded" : "");
        if (c != XXH3_64bits_withSeed(rd->buf, len, block_seed(want->kind, block)))
            return hx_emb_fail(err, again ? HX_ERR_IO : HX_ERR_CORRUPT,
                               "embedding load: %s is corrupt: checksum mismatch in the %s section, block %llu "
                               "(bytes %llu..%llu)%s",
                               rd->path, name, (unsigned long long)block, (unsigned long long)off,
                               (unsigned long long)(off + len),
                               again ? "; it changed while loading and the table is partially loaded" : "");
        if (to) place_copy(to, off, rd->buf, len, 1);
        off += len;
        block++;
    }
    return HX_OK;
}

static hx_status read_section(reader *rd, const sec *want, const place *to, int again, hx_emb_err *err)
{
    uint64_t count;
    hx_status st = read_section_header(rd, want, &count, err);
    return st ? st : read_section_body(rd, want, count, to, again, err);
}

static hx_status check_header(const hx_emb_local *t, const fheader *h, const char *path,
                              int has_check, hx_emb_err *err)
{
    if (memcmp(h->magic, MAGIC, 8) != 0)
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is not a hetex embedding table (bad magic)", path);
    if (h->check != XXH3_64bits(h, offsetof(fheader, check)))
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is corrupt: bad header checksum", path);
    if (h->version != VERSION)
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED, "embedding load: %s has format version %u; this build reads %u",
                           path, h->version, VERSION);
    if (h->block != BLOCK || h->optim > HX_EMB_OPTIM_FTRL || (h->flags & ~(FLAG_READY | FLAG_EXTRA)) ||
        h->init_kind > HX_EMB_INIT_NORMAL)
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is corrupt: bad header fields", path);
    /* the initialiser a load adopts passes the check a table's config passes */
    hx_emb_init init = {(hx_emb_init_kind)h->init_kind, h->init_a, h->init_b, h->init_seed};
    hx_emb_err why;
    if (hx_emb_init_check(&init, "the header's initialiser", &why))
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is corrupt: %s", path, why.msg);
    if (h->dtype != (uint32_t)t->dtype || h->rows != t->base.rows || h->dim != t->base.dim)
        return hx_emb_fail(err, HX_ERR_SHAPE, "embedding load: %s holds a %lld x %lld %s table; this table is %lld x %lld %s",
                           path, (long long)h->rows, (long long)h->dim,
                           hx_emb_dtype_name((hx_dtype)h->dtype),
                           (long long)t->base.rows, (long long)t->base.dim, hx_emb_dtype_name(t->dtype));
    if (t->optim.kind != HX_EMB_OPTIM_NONE && h->optim != (uint32_t)t->optim.kind)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding load: %s holds %s optimizer state; the table has %s: set the same optimizer "
                           "before loading (or none, to load the params only)",
                           path, hx_emb_optim_name((hx_emb_optim_kind)h->optim), hx_emb_optim_name(t->optim.kind));
    if ((h->flags & FLAG_EXTRA) && !has_check)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding load: %s holds a dynamic table (with its id map); load it into a dynamic table",
                           path);
    return HX_OK;
}

hx_status hx_emb_local_load_with(hx_emb_local *t, const char *path, hx_emb_extra_check check,
                                 void *ctx, hx_emb_err *err)
{
    reader rd = {fopen(path, "rb"), path, malloc(BLOCK), 0};
    struct stat fs;
    if (!rd.f || !rd.buf || fstat(fileno(rd.f), &fs) != 0) {
        hx_status st = !rd.buf ? hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding load: out of memory")
                               : hx_emb_fail(err, HX_ERR_IO, "embedding load: cannot open %s: %s", path, strerror(errno));
        if (rd.f) fclose(rd.f);
        free(rd.buf);
        return st;
    }
    rd.size = (uint64_t)fs.st_size;
    fheader h;
    hx_status st = HX_OK;
    int64_t *extra = NULL;
    uint64_t n_extra = 0, words = (uint64_t)(t->base.rows + 63) / 64;
    uint64_t *ready = NULL;
    sec secs[6];
    int nsec = 0;
    if (fread(&h, 1, sizeof h, rd.f) != sizeof h)
        st = hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is truncated: no complete header", path);
    if (!st) st = check_header(t, &h, path, check != NULL, err);
    if (!st) {
        nsec = table_sections(t, (hx_emb_optim_kind)h.optim, h.flags, 0, secs);
        if (h.nsec != (uint32_t)nsec)
            st = hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is corrupt: %u sections where %d were expected",
                             path, h.nsec, nsec);
    }
    /* Pass 1: verify everything, keep the extra words. */
    for (int s = 0; s < nsec && !st; s++) {
        if (secs[s].kind != SEC_EXTRA) {
            st = read_section(&rd, &secs[s], NULL, 0, err);
            continue;
        }
        st = read_section_header(&rd, &secs[s], &n_extra, err); /* n_extra: within the file */
        if (!st && !(extra = malloc((size_t)(n_extra ? n_extra : 1) * 8)))
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding load: out of memory for the id map");
        place p = {(char *)extra, 8, 8};
        if (!st) st = read_section_body(&rd, &secs[s], n_extra, &p, 0, err);
    }
    if (!st && fgetc(rd.f) != EOF)
        st = hx_emb_fail(err, HX_ERR_CORRUPT, "embedding load: %s is corrupt: bytes after the last section", path);
    if (!st && check) st = check(ctx, extra, (int64_t)n_extra, err);
    if (!st && (h.flags & FLAG_READY) && !(ready = malloc((size_t)words * 8)))
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding load: out of memory");
    /* Pass 2: copy. Nothing of the table changes before this point. */
    if (!st && fseek(rd.f, (long)sizeof h, SEEK_SET) != 0)
        st = hx_emb_fail(err, HX_ERR_IO, "embedding load: cannot seek in %s: %s", path, strerror(errno));
    for (int s = 0; s < nsec && !st; s++) {
        place p = {NULL, 0, 0};
        const place *to = NULL;
        if (secs[s].kind == SEC_PARAM || ((secs[s].kind == SEC_STATE0 || secs[s].kind == SEC_STATE1) &&
                                          t->optim.kind != HX_EMB_OPTIM_NONE)) {
            p = sec_place(t, secs[s].kind, NULL);
            to = &p;
        } else if (secs[s].kind == SEC_READY) {
            p = (place){(char *)ready, 8, 8};
            to = &p;
        }
        st = read_section(&rd, &secs[s], to, 1, err);
    }
    if (!st) {
        t->init = (hx_emb_init){(hx_emb_init_kind)h.init_kind, h.init_a, h.init_b, h.init_seed};
        if (ready && (t->base.rows & 63)) ready[words - 1] &= (1ull << (t->base.rows & 63)) - 1;
        if (t->lazy) {
            for (uint64_t w = 0; w < words; w++) {
                uint64_t v = ready ? ready[w] : ~0ull;
                if (!ready && w == words - 1 && (t->base.rows & 63)) v = (1ull << (t->base.rows & 63)) - 1;
                atomic_store_explicit(&t->ready[w], v, memory_order_relaxed);
            }
        } else if (ready) {
            hx_emb_local_init_unready(t, ready, 1);
        }
    }
    fclose(rd.f);
    free(rd.buf);
    free(extra);
    free(ready);
    return st;
}
