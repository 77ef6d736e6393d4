/* Session checkpoints: parameters, optimizer state, step and loss scale.
 *
 * Layout (little-endian, as the host writes it):
 *   "HXCKPT01"  u64 step  u64 skipped  u64 good_steps  f64 loss_scale  u32 count
 *   count x { u32 name_len, name, u32 dtype, u32 ndim, i64 shape[ndim],
 *             u64 nbytes, data, u64 xxh3(data) }
 *   u64 xxh3(everything above)
 * Entries are found by name, in any order: a session writes those it holds
 * in memory in graph order, then those its residency holds (the disk tier,
 * offload_param=disk) in the residency's order. Both directions stream
 * tensor by tensor (the disk tier's segment by segment), so neither holds
 * the whole set at once.
 * Written to a stage file of its own beside path (core.h's staged files:
 * a dead writer's stage is removed by the next save, a live one's makes
 * this save fail), synced, renamed over path, the folder synced: a crash
 * never leaves a half-written checkpoint under the real name. Loading checks the
 * whole file (its checksum, then every entry against the graph) before
 * changing anything. Tensors that live on the accelerator are read and
 * written through its backend's copies. */
#include "session/session.h"
#include "scheduler/scheduler.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char MAGIC[8] = {'H', 'X', 'C', 'K', 'P', 'T', '0', '1'};

enum { PIECE = 1 << 20 }; /* bytes hashed or copied at a time */

static bool saved(const hx_tensor *t)
{
    return t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE;
}

/* ---- saving --------------------------------------------------------------------- */

typedef struct writer {
    hx_session *s;
    FILE *f;
    XXH3_state_t *total;
    size_t written;
    bool failed;
    int err; /* errno of the first failed write */
} writer;

static void put(writer *w, const void *data, size_t n)
{
    if (w->failed || !n) return;
    size_t k = fwrite(data, 1, n, w->f);
    w->written += k;
    if (k != n) {
        w->failed = true;
        w->err = errno ? errno : EIO;
        return;
    }
    XXH3_64bits_update(w->total, data, n);
}

#define PUT(w, v) put((w), &(v), sizeof(v))

/* One entry: t's header, its bytes (host memory), their checksum. */
static hx_status put_entry(void *ctx, const hx_tensor *t, void *bytes)
{
    writer *w = ctx;
    uint32_t len = (uint32_t)strlen(t->name), dt = t->dtype, nd = (uint32_t)t->ndim;
    uint64_t nbytes = hx_tensor_nbytes(t), sum = XXH3_64bits(bytes, nbytes);
    PUT(w, len);
    put(w, t->name, len);
    PUT(w, dt);
    PUT(w, nd);
    put(w, t->shape, sizeof(int64_t) * nd);
    PUT(w, nbytes);
    put(w, bytes, nbytes);
    PUT(w, sum);
    return HX_OK;
}

/* The entries of every saved tensor the session holds in memory. */
static hx_status put_in_memory(writer *w)
{
    hx_session *s = w->s;
    hx_status st = HX_OK;
    for (int i = 0; i < s->e.g->n && !st; i++) {
        const hx_tensor *t = s->e.g->tensors[i];
        if (!saved(t) || hx__residency_holds(&s->e, i)) continue;
        size_t n = hx_tensor_nbytes(t);
        int d = hx__dev_of(&s->e, i);
        void *host = d == HX_DEV_HOST ? s->e.persist[i] : malloc(n ? n : 1);
        if (!host) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_save: out of host memory");
        if (d != HX_DEV_HOST) st = hx__engine_copy_out(&s->e, d, host, s->e.persist[i], n);
        if (!st) st = put_entry(w, t, host);
        if (host != s->e.persist[i]) free(host);
    }
    return st;
}

static hx_status write_all(writer *w)
{
    hx_session *s = w->s;
    uint32_t count = 0;
    for (int i = 0; i < s->e.g->n; i++) count += saved(s->e.g->tensors[i]);
    uint64_t step = (uint64_t)s->stats.step, skipped = (uint64_t)s->stats.skipped_steps;
    uint64_t good = (uint64_t)s->good_steps;
    put(w, MAGIC, sizeof MAGIC);
    PUT(w, step);
    PUT(w, skipped);
    PUT(w, good);
    PUT(w, s->stats.loss_scale);
    PUT(w, count);
    hx_status st = put_in_memory(w);
    if (!st && s->e.residency)
        st = s->e.residency->visit(s->e.residency, "hx_session_save", false, false, put_entry, w);
    uint64_t total = XXH3_64bits_digest(w->total);
    if (!w->failed) { /* the total is not part of what it sums */
        size_t k = fwrite(&total, 1, sizeof total, w->f);
        w->written += k;
        if (k != sizeof total) {
            w->failed = true;
            w->err = errno ? errno : EIO;
        }
    }
    return st;
}

static hx_status save_held(hx_session *s, const char *path)
{
    hx_status st = hx__dpu_settle(&s->e); /* a delayed update lands first */
    if (st) return st;
    writer w = {.s = s, .total = XXH3_createState()};
    if (!w.total || XXH3_64bits_reset(w.total) == XXH_ERROR) {
        XXH3_freeState(w.total);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_save: out of host memory");
    }
    hx_stage stage;
    st = hx__stage_open("hx_session_save", path, &stage);
    if (!st) {
        w.f = stage.f;
        st = write_all(&w);
        if (!st && w.failed) {
            st = hx__error(HX_ERR_IO,
                           "hx_session_save: writing '%s' failed after %zu bytes: %s (disk "
                           "full?); the previous checkpoint at '%s' is untouched", stage.tmp,
                           w.written, strerror(w.err), path);
        }
        if (st) hx__stage_abort(&stage);
        else st = hx__stage_commit("hx_session_save", &stage);
    }
    XXH3_freeState(w.total);
    return st;
}

/* Checkpoints of sharded state (each rank its shard) are not built. */
static hx_status zero_refused(const char *fn)
{
    return hx__error(HX_ERR_UNSUPPORTED, "%s: the session shards its optimizer state over the "
                     "ranks (ZeRO stage 1 or 2) and sharded checkpoints are not built yet: save "
                     "and load at zero_stage 0", fn);
}

hx_status hx_session_save(hx_session *s, const char *path)
{
    if (s && !path) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_save: path is NULL");
    hx_status st = hx__session_enter(s, "hx_session_save");
    if (st) return st;
    st = s->zero_owner ? zero_refused("hx_session_save") : save_held(s, path);
    hx__session_leave(s);
    return st;
}

/* ---- loading ------------------------------------------------------------------ */

typedef struct reader {
    FILE *f;
    const char *path;
    uint64_t at, n;  /* position; bytes before the total checksum */
    char *piece;     /* PIECE bytes of scratch */
} reader;

static bool take(reader *r, void *out, size_t n)
{
    if (r->n - r->at < n || fread(out, 1, n, r->f) != n) return false;
    r->at += n;
    return true;
}

#define TAKE(r, v) take((r), &(v), sizeof(v))

static hx_status corrupt(const char *path, const char *what)
{
    return hx__error(HX_ERR_CORRUPT,
                     "hx_session_load: '%s' is not a valid checkpoint for this graph: %s; "
                     "nothing was loaded", path, what);
}

/* Hashes n bytes from the reader's position (into sum when not NULL). */
static bool hash_bytes(reader *r, uint64_t n, XXH3_state_t *sum)
{
    while (n) {
        size_t k = n < PIECE ? (size_t)n : PIECE;
        if (!take(r, r->piece, k)) return false;
        XXH3_64bits_update(sum, r->piece, k);
        n -= k;
    }
    return true;
}

/* The file's checksum against its last 8 bytes. */
static hx_status check_total(reader *r, XXH3_state_t *h, uint64_t size)
{
    uint64_t total = 0;
    if (size < sizeof MAGIC + 8) return corrupt(r->path, "the file checksum does not match (truncated or damaged)");
    r->n = size - 8;
    if (XXH3_64bits_reset(h) == XXH_ERROR || !hash_bytes(r, r->n, h) || fread(&total, 1, 8, r->f) != 8 ||
        XXH3_64bits_digest(h) != total)
        return corrupt(r->path, "the file checksum does not match (truncated or damaged)");
    return HX_OK;
}

typedef struct header { uint64_t step, skipped, good; double scale; } header;

/* Checks every entry against the graph; off[id] and sum[id]: where tensor
 * id's bytes are in the file and their checksum (off -1: not in it). */
static hx_status verify(const hx_session *s, reader *r, XXH3_state_t *h, int64_t *off,
                        uint64_t *sums, header *hd)
{
    const hx_graph *g = s->e.g;
    const char *path = r->path;
    char magic[8];
    uint32_t count;
    if (!take(r, magic, 8) || memcmp(magic, MAGIC, 8)) return corrupt(path, "bad magic");
    if (!TAKE(r, hd->step) || !TAKE(r, hd->skipped) || !TAKE(r, hd->good) || !TAKE(r, hd->scale) ||
        !TAKE(r, count))
        return corrupt(path, "truncated header");
    /* what the session will run with, held to hx_session_create's rules */
    if (hd->step > INT64_MAX || hd->skipped > INT64_MAX || hd->good > INT_MAX)
        return corrupt(path, "its step, skipped-step or good-step count is past what a session counts");
    if (!(hd->scale > 0 && isfinite(hd->scale)))
        return corrupt(path, "its loss scale is not finite and > 0");
    uint32_t expected = 0;
    for (int i = 0; i < g->n; i++) expected += saved(g->tensors[i]);
    if (count != expected) {
        char why[96];
        snprintf(why, sizeof why, "it holds %u tensors, the graph has %u", count, expected);
        return corrupt(path, why);
    }
    for (uint32_t k = 0; k < count; k++) {
        uint32_t len, dt, nd;
        uint64_t nbytes, sum;
        int64_t shape[HX_MAX_DIMS];
        char name[512];
        if (!TAKE(r, len) || len >= sizeof name || !take(r, name, len)) return corrupt(path, "truncated entry");
        name[len] = 0;
        const hx_tensor *t = hx_graph_find(g, name);
        if (!t || !saved(t) || off[t->id] >= 0) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: '%s' holds '%s'%s; nothing was loaded",
                      path, name, t && saved(t) ? " twice" : ", which is not a parameter or "
                      "optimizer state of this graph");
            return HX_ERR_CORRUPT;
        }
        if (!TAKE(r, dt) || !TAKE(r, nd) || nd > HX_MAX_DIMS ||
            !take(r, shape, sizeof(int64_t) * nd) || !TAKE(r, nbytes))
            return corrupt(path, "truncated entry");
        if (dt != (uint32_t)t->dtype || nd != (uint32_t)t->ndim ||
            memcmp(shape, t->shape, sizeof(int64_t) * nd) || nbytes != hx_tensor_nbytes(t)) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: '%s' in '%s' has another dtype or shape "
                      "than in this graph; nothing was loaded", name, path);
            return HX_ERR_CORRUPT;
        }
        off[t->id] = (int64_t)r->at;
        if (XXH3_64bits_reset(h) == XXH_ERROR || !hash_bytes(r, nbytes, h) || !TAKE(r, sum))
            return corrupt(path, "truncated data");
        if (XXH3_64bits_digest(h) != sum) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: checksum of '%s' in '%s' does not match; "
                      "nothing was loaded", name, path);
            return HX_ERR_CORRUPT;
        }
        sums[t->id] = sum;
    }
    if (r->at != r->n) return corrupt(path, "trailing bytes");
    return HX_OK;
}

typedef struct applier {
    reader *r;
    const int64_t *off;
    const uint64_t *sums;
} applier;

/* Tensor t's bytes from the file into dst, checked again (the file may
 * have changed since it was verified). */
static hx_status fill(void *ctx, const hx_tensor *t, void *dst)
{
    applier *a = ctx;
    size_t n = hx_tensor_nbytes(t);
    if (fseek(a->r->f, (long)a->off[t->id], SEEK_SET) || fread(dst, 1, n, a->r->f) != n ||
        XXH3_64bits(dst, n) != a->sums[t->id])
        return hx__error(HX_ERR_IO, "hx_session_load: '%s' changed while it was loaded (reading "
                         "'%s' again gave other bytes); nothing of the disk tier was loaded",
                         a->r->path, t->name);
    return HX_OK;
}

/* Everything checked: the residency's tensors (all or nothing), then those in memory. */
static hx_status apply(hx_session *s, applier *a)
{
    hx_status st = s->e.residency
            ? s->e.residency->visit(s->e.residency, "hx_session_load", true, true, fill, a)
            : HX_OK;
    for (int i = 0; i < s->e.g->n && !st; i++) {
        const hx_tensor *t = s->e.g->tensors[i];
        if (!saved(t) || hx__residency_holds(&s->e, i)) continue;
        size_t n = hx_tensor_nbytes(t);
        int d = hx__dev_of(&s->e, i);
        void *host = d == HX_DEV_HOST ? NULL : malloc(n ? n : 1);
        if (d != HX_DEV_HOST && !host)
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
        st = fill(a, t, host ? host : s->e.persist[i]);
        if (!st && host) st = hx__engine_copy_in(&s->e, d, s->e.persist[i], host, n);
        free(host);
    }
    return st;
}

static hx_status load_held(hx_session *s, const char *path)
{
    hx_status st = hx__dpu_settle(&s->e); /* a delayed update lands first */
    if (st) return st;
    reader r = {.f = fopen(path, "rb"), .path = path};
    if (!r.f) return hx__error(HX_ERR_IO, "hx_session_load: cannot open '%s': %s", path, strerror(errno));
    int n = s->e.g->n ? s->e.g->n : 1;
    int64_t *off = malloc(sizeof *off * n);
    uint64_t *sums = malloc(sizeof *sums * n);
    XXH3_state_t *h = XXH3_createState();
    r.piece = malloc(PIECE);
    long size = fseek(r.f, 0, SEEK_END) ? -1 : ftell(r.f);
    if (!off || !sums || !h || !r.piece) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
    else if (size < 0 || fseek(r.f, 0, SEEK_SET))
        st = hx__error(HX_ERR_IO, "hx_session_load: cannot size '%s'", path);
    for (int i = 0; off && i < n; i++) off[i] = -1;
    header hd = {0};
    if (!st) st = check_total(&r, h, (uint64_t)size);
    if (!st) {
        r.at = 0;
        if (fseek(r.f, 0, SEEK_SET)) st = hx__error(HX_ERR_IO, "hx_session_load: cannot seek '%s'", path);
    }
    if (!st) st = verify(s, &r, h, off, sums, &hd);
    applier a = {&r, off, sums};
    if (!st) st = apply(s, &a);
    if (!st) {
        s->stats.step = (int64_t)hd.step;
        s->stats.skipped_steps = (int64_t)hd.skipped;
        s->stats.loss_scale = hd.scale;
        s->stats.last_skipped = false;
        s->good_steps = (int)hd.good;
    }
    fclose(r.f);
    free(off);
    free(sums);
    free(r.piece);
    XXH3_freeState(h);
    return st;
}

hx_status hx_session_load(hx_session *s, const char *path)
{
    if (s && !path) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_load: path is NULL");
    hx_status st = hx__session_enter(s, "hx_session_load");
    if (st) return st;
    st = s->zero_owner ? zero_refused("hx_session_load") : load_held(s, path);
    hx__session_leave(s);
    return st;
}
