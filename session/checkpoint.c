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
 * written through its backend's copies.
 * A session that shards its state (ZeRO) saves a set of these files, one
 * per rank, each holding the tensors that rank writes, under a manifest
 * (checkpoint_set.c); the loading half here reads one file or several. */
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

bool hx__ckpt_saved(const hx_tensor *t)
{
    return t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE;
}

/* ---- saving --------------------------------------------------------------------- */

typedef struct writer {
    hx_session *s;
    const bool *keep; /* per tensor id: written (NULL: every saved tensor) */
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

/* put_entry for the tensors the writer keeps (a residency's visit). */
static hx_status put_kept(void *ctx, const hx_tensor *t, void *bytes)
{
    writer *w = ctx;
    return w->keep && !w->keep[t->id] ? HX_OK : put_entry(ctx, t, bytes);
}

/* The entries of every saved tensor the session holds in memory. */
static hx_status put_in_memory(writer *w)
{
    hx_session *s = w->s;
    hx_status st = HX_OK;
    for (int i = 0; i < s->e.g->n && !st; i++) {
        const hx_tensor *t = s->e.g->tensors[i];
        if (!hx__ckpt_saved(t) || hx__residency_holds(&s->e, i) || (w->keep && !w->keep[i])) continue;
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
    for (int i = 0; i < s->e.g->n; i++) count += hx__ckpt_saved(s->e.g->tensors[i]) && (!w->keep || w->keep[i]);
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
        st = s->e.residency->visit(s->e.residency, "hx_session_save", false, false, put_kept, w);
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

hx_status hx__ckpt_write(hx_session *s, const char *path, const bool *keep)
{
    hx_status st = hx__dpu_settle(&s->e); /* a delayed update lands first */
    if (st) return st;
    writer w = {.s = s, .keep = keep, .total = XXH3_createState()};
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

hx_status hx_session_save(hx_session *s, const char *path)
{
    if (s && !path) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_save: path is NULL");
    hx_status st = hx__session_enter(s, "hx_session_save");
    if (st) return st;
    st = s->zero_owner ? hx__ckpt_save_set(s, path) : hx__ckpt_write(s, path, NULL);
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

/* Checks every entry of file k against the graph into in (off, sum and
 * file per tensor id; a tensor found twice, here or in an earlier file, is
 * refused). A whole checkpoint holds every saved tensor; a shard of a set
 * (shard) a part of them, with the same counters as the shards before. */
static hx_status verify(const hx_session *s, hx_ckpt_in *in, int k, reader *r, bool shard)
{
    const hx_graph *g = s->e.g;
    const char *path = r->path;
    char magic[8];
    uint32_t count;
    uint64_t step, skipped, good;
    double scale;
    if (!take(r, magic, 8) || memcmp(magic, MAGIC, 8)) return corrupt(path, "bad magic");
    if (!TAKE(r, step) || !TAKE(r, skipped) || !TAKE(r, good) || !TAKE(r, scale) || !TAKE(r, count))
        return corrupt(path, "truncated header");
    /* what the session will run with, held to hx_session_create's rules */
    if (step > INT64_MAX || skipped > INT64_MAX || good > INT_MAX)
        return corrupt(path, "its step, skipped-step or good-step count is past what a session counts");
    if (!(scale > 0 && isfinite(scale)))
        return corrupt(path, "its loss scale is not finite and > 0");
    if (in->have_head && (step != in->step || skipped != in->skipped || good != in->good ||
                          memcmp(&scale, &in->scale, sizeof scale)))
        return corrupt(path, "its step count or loss scale differs from the set's other shards'");
    in->have_head = true;
    in->step = step;
    in->skipped = skipped;
    in->good = good;
    in->scale = scale;
    uint32_t expected = 0;
    for (int i = 0; i < g->n; i++) expected += hx__ckpt_saved(g->tensors[i]);
    if (shard ? count > expected : count != expected) {
        char why[96];
        snprintf(why, sizeof why, "it holds %u tensors, the graph has %u", count, expected);
        return corrupt(path, why);
    }
    for (uint32_t e = 0; e < count; e++) {
        uint32_t len, dt, nd;
        uint64_t nbytes, sum;
        int64_t shape[HX_MAX_DIMS];
        char name[512];
        if (!TAKE(r, len) || len >= sizeof name || !take(r, name, len)) return corrupt(path, "truncated entry");
        name[len] = 0;
        const hx_tensor *t = hx_graph_find(g, name);
        if (!t || !hx__ckpt_saved(t) || in->off[t->id] >= 0) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: '%s' holds '%s'%s; nothing was loaded",
                      path, name, t && hx__ckpt_saved(t) ? " twice" : ", which is not a parameter or "
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
        int64_t at = (int64_t)r->at;
        if (XXH3_64bits_reset(in->h) == XXH_ERROR || !hash_bytes(r, nbytes, in->h) || !TAKE(r, sum))
            return corrupt(path, "truncated data");
        if (XXH3_64bits_digest(in->h) != sum) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: checksum of '%s' in '%s' does not match; "
                      "nothing was loaded", name, path);
            return HX_ERR_CORRUPT;
        }
        in->off[t->id] = at;
        in->sum[t->id] = sum;
        in->file[t->id] = k;
    }
    if (r->at != r->n) return corrupt(path, "trailing bytes");
    return HX_OK;
}

hx_status hx__ckpt_in_init(hx_ckpt_in *in, const hx_session *s, int n_files)
{
    memset(in, 0, sizeof *in);
    size_t n = (size_t)(s->e.g->n ? s->e.g->n : 1);
    in->n_files = n_files;
    in->f = calloc((size_t)n_files, sizeof *in->f);
    in->path = calloc((size_t)n_files, sizeof *in->path);
    in->off = malloc(n * sizeof *in->off);
    in->sum = calloc(n, sizeof *in->sum);
    in->file = calloc(n, sizeof *in->file);
    in->h = XXH3_createState();
    in->piece = malloc(PIECE);
    if (!in->f || !in->path || !in->off || !in->sum || !in->file || !in->h || !in->piece)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
    for (size_t i = 0; i < n; i++) in->off[i] = -1;
    return HX_OK;
}

void hx__ckpt_in_free(hx_ckpt_in *in)
{
    for (int k = 0; k < in->n_files; k++) {
        if (in->f && in->f[k]) fclose(in->f[k]);
        if (in->path) free(in->path[k]);
    }
    free(in->f);
    free(in->path);
    free(in->off);
    free(in->sum);
    free(in->file);
    free(in->piece);
    XXH3_freeState(in->h);
    memset(in, 0, sizeof *in);
}

hx_status hx__ckpt_in_file(hx_ckpt_in *in, const hx_session *s, int k, const char *path, bool shard)
{
    if (!(in->path[k] = strdup(path))) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
    reader r = {.f = fopen(path, "rb"), .path = in->path[k], .piece = in->piece};
    if (!r.f) return hx__error(HX_ERR_IO, "hx_session_load: cannot open '%s': %s", path, strerror(errno));
    in->f[k] = r.f;
    long size = fseek(r.f, 0, SEEK_END) ? -1 : ftell(r.f);
    if (size < 0 || fseek(r.f, 0, SEEK_SET)) return hx__error(HX_ERR_IO, "hx_session_load: cannot size '%s'", path);
    hx_status st = check_total(&r, in->h, (uint64_t)size);
    r.at = 0;
    if (!st && fseek(r.f, 0, SEEK_SET)) st = hx__error(HX_ERR_IO, "hx_session_load: cannot seek '%s'", path);
    return st ? st : verify(s, in, k, &r, shard);
}

bool hx__ckpt_holds(const hx_session *s, int id)
{
    if (!hx__ckpt_saved(s->e.g->tensors[id])) return false;
    return !s->zero_sharded || !s->zero_sharded[id] || s->zero_owner[id] == hx_comm_rank(s->e.cfg.comm);
}

hx_status hx__ckpt_in_check(const hx_ckpt_in *in, const hx_session *s)
{
    for (int i = 0; i < s->e.g->n; i++)
        if (hx__ckpt_holds(s, i) && in->off[i] < 0)
            return hx__error(HX_ERR_CORRUPT, "hx_session_load: '%s' is in none of the checkpoint's files "
                             "read (from '%s'); nothing was loaded", s->e.g->tensors[i]->name,
                             in->n_files ? in->path[0] : "");
    return HX_OK;
}

/* Tensor t's bytes from its file into dst, checked again (the file may
 * have changed since it was verified). */
static hx_status fill(void *ctx, const hx_tensor *t, void *dst)
{
    hx_ckpt_in *in = ctx;
    size_t n = hx_tensor_nbytes(t);
    FILE *f = in->f[in->file[t->id]];
    if (fseek(f, (long)in->off[t->id], SEEK_SET) || fread(dst, 1, n, f) != n ||
        XXH3_64bits(dst, n) != in->sum[t->id])
        return hx__error(HX_ERR_IO, "hx_session_load: '%s' changed while it was loaded (reading "
                         "'%s' again gave other bytes); nothing of the disk tier was loaded",
                         in->path[in->file[t->id]], t->name);
    return HX_OK;
}

hx_status hx__ckpt_in_apply(hx_ckpt_in *in, hx_session *s)
{
    hx_status st = s->e.residency
            ? s->e.residency->visit(s->e.residency, "hx_session_load", true, true, fill, in)
            : HX_OK;
    for (int i = 0; i < s->e.g->n && !st; i++) {
        const hx_tensor *t = s->e.g->tensors[i];
        if (!hx__ckpt_holds(s, i) || hx__residency_holds(&s->e, i)) continue;
        size_t n = hx_tensor_nbytes(t);
        int d = hx__dev_of(&s->e, i);
        void *host = d == HX_DEV_HOST ? NULL : malloc(n ? n : 1);
        if (d != HX_DEV_HOST && !host)
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
        st = fill(in, t, host ? host : s->e.persist[i]);
        if (!st && host) st = hx__engine_copy_in(&s->e, d, s->e.persist[i], host, n);
        free(host);
    }
    if (!st) {
        s->stats.step = (int64_t)in->step;
        s->stats.skipped_steps = (int64_t)in->skipped;
        s->stats.loss_scale = in->scale;
        s->stats.last_skipped = false;
        s->good_steps = (int)in->good;
    }
    return st;
}

/* One whole checkpoint; into a ZeRO session each rank takes what it holds,
 * once every rank has checked the file. */
static hx_status load_file(hx_session *s, const char *path)
{
    hx_status st = hx__dpu_settle(&s->e); /* a delayed update lands first */
    if (st) return st;
    hx_ckpt_in in;
    st = hx__ckpt_in_init(&in, s, 1);
    if (!st) st = hx__ckpt_in_file(&in, s, 0, path, false);
    if (!st) st = hx__ckpt_in_check(&in, s);
    st = hx__zero_agree(s, "hx_session_load", st);
    if (!st) st = hx__ckpt_in_apply(&in, s);
    hx__ckpt_in_free(&in);
    return st;
}

hx_status hx_session_load(hx_session *s, const char *path)
{
    if (s && !path) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_load: path is NULL");
    hx_status st = hx__session_enter(s, "hx_session_load");
    if (st) return st;
    st = hx__ckpt_is_set(path) ? hx__ckpt_load_set(s, path) : load_file(s, path);
    hx__session_leave(s);
    return st;
}
