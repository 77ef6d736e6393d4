/* Session checkpoints: parameters, optimizer state, step and loss scale.
 *
 * Layout (little-endian, as the host writes it):
 *   "HXCKPT01"  u64 step  u64 skipped  u64 good_steps  f64 loss_scale  u32 count
 *   count x { u32 name_len, name, u32 dtype, u32 ndim, i64 shape[ndim],
 *             u64 nbytes, data, u64 xxh3(data) }
 *   u64 xxh3(everything above)
 * Written to "<path>.tmp", synced, then renamed over path, so a crash never
 * leaves a half-written checkpoint under the real name. Tensors that live on
 * the accelerator are read and written through its backend's copies. */
#include "scheduler/sched.h"
#include "scheduler/offload_disk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static const char MAGIC[8] = {'H', 'X', 'C', 'K', 'P', 'T', '0', '1'};

static bool saved(const hx_tensor *t)
{
    return t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE;
}

/* A growable byte buffer: the file is built in memory, checksummed, then
 * written with one call, so every short write is caught in one place. */
typedef struct buf { char *p; size_t n, cap; bool oom; } buf;

/* n more bytes at the end of b (NULL when out of memory). */
static char *append(buf *b, size_t n)
{
    if (b->oom) return NULL;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return NULL; }
        b->p = p;
        b->cap = cap;
    }
    b->n += n;
    return b->p + b->n - n;
}

static void put(buf *b, const void *data, size_t n)
{
    char *at = append(b, n);
    if (at) memcpy(at, data, n);
}

#define PUT(b, v) put((b), &(v), sizeof(v))

hx_status hx_session_save(hx_session *s, const char *path)
{
    if (!s || !path)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_save: %s is NULL",
                         s ? "path" : "session");
    hx_status settled = hx__dpu_settle(s); /* a delayed update lands first */
    if (!settled) settled = hx__disk_load(s, "hx_session_save");
    if (settled) return settled;
    const hx_graph *g = s->g;
    buf b = {0};
    uint32_t count = 0;
    for (int i = 0; i < g->n; i++) count += saved(g->tensors[i]);
    uint64_t step = (uint64_t)s->stats.step, skipped = (uint64_t)s->stats.skipped_steps;
    uint64_t good = (uint64_t)s->good_steps;
    put(&b, MAGIC, sizeof MAGIC);
    PUT(&b, step);
    PUT(&b, skipped);
    PUT(&b, good);
    PUT(&b, s->stats.loss_scale);
    PUT(&b, count);
    hx_status st = HX_OK;
    for (int i = 0; i < g->n && !st; i++) {
        const hx_tensor *t = g->tensors[i];
        if (!saved(t)) continue;
        uint32_t len = (uint32_t)strlen(t->name), dt = t->dtype, nd = (uint32_t)t->ndim;
        uint64_t nbytes = hx_tensor_nbytes(t);
        PUT(&b, len);
        put(&b, t->name, len);
        PUT(&b, dt);
        PUT(&b, nd);
        put(&b, t->shape, sizeof(int64_t) * nd);
        PUT(&b, nbytes);
        char *at = append(&b, nbytes);
        if (!at) break;
        st = hx__session_copy_out(s, hx__dev_of(s, i), at, s->persist[i], nbytes);
        uint64_t sum = XXH3_64bits(at, nbytes);
        PUT(&b, sum);
    }
    hx__disk_evict(s);
    if (st) {
        free(b.p);
        return st;
    }
    uint64_t total = b.oom ? 0 : XXH3_64bits(b.p, b.n);
    PUT(&b, total);
    if (b.oom) {
        free(b.p);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_save: out of host memory");
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        free(b.p);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_save: out of host memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = hx__error(HX_ERR_IO, "hx_session_save: cannot create '%s': %s", tmp, strerror(errno));
    } else {
        size_t w = fwrite(b.p, 1, b.n, f);
        int flush_err = fflush(f) || fsync(fileno(f));
        int err = errno;
        if (fclose(f) || w != b.n || flush_err)
            st = hx__error(HX_ERR_IO,
                           "hx_session_save: writing '%s' failed after %zu of %zu bytes: %s "
                           "(disk full?); the previous checkpoint at '%s' is untouched", tmp, w,
                           b.n, strerror(err ? err : EIO), path);
        else if (rename(tmp, path))
            st = hx__error(HX_ERR_IO, "hx_session_save: cannot rename '%s' to '%s': %s", tmp,
                           path, strerror(errno));
        if (st) remove(tmp);
    }
    free(tmp);
    free(b.p);
    return st;
}

/* ---- loading ------------------------------------------------------------------ */

typedef struct reader { const char *p; size_t n, at; } reader;

static bool take(reader *r, void *out, size_t n)
{
    if (r->n - r->at < n) return false;
    if (out) memcpy(out, r->p + r->at, n);
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

static hx_status read_file(const char *path, char **data, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return hx__error(HX_ERR_IO, "hx_session_load: cannot open '%s': %s", path, strerror(errno));
    long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        return hx__error(HX_ERR_IO, "hx_session_load: cannot size '%s'", path);
    }
    *data = malloc((size_t)size + 1);
    if (!*data) {
        fclose(f);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory for '%s'", path);
    }
    *n = fread(*data, 1, (size_t)size, f);
    fclose(f);
    if (*n != (size_t)size) {
        free(*data);
        return hx__error(HX_ERR_IO, "hx_session_load: short read of '%s'", path);
    }
    return HX_OK;
}

static const hx_tensor *find_saved(const hx_graph *g, const char *name)
{
    const hx_tensor *t = hx_graph_find(g, name);
    return t && saved(t) ? t : NULL;
}

typedef struct header { uint64_t step, skipped, good; double scale; } header;

/* Checks every entry against the graph; fills src[i] with where tensor i's
 * bytes are in the file. */
static hx_status verify(const hx_session *s, const char *path, reader *r, const char **src,
                        header *h)
{
    const hx_graph *g = s->g;
    char magic[8];
    uint32_t count;
    uint64_t total = 0;
    if (r->n >= sizeof MAGIC + 8) memcpy(&total, r->p + r->n - 8, 8);
    if (r->n < sizeof MAGIC + 8 || XXH3_64bits(r->p, r->n - 8) != total)
        return corrupt(path, "the file checksum does not match (truncated or damaged)");
    r->n -= 8;
    if (!take(r, magic, 8) || memcmp(magic, MAGIC, 8)) return corrupt(path, "bad magic");
    if (!TAKE(r, h->step) || !TAKE(r, h->skipped) || !TAKE(r, h->good) || !TAKE(r, h->scale) ||
        !TAKE(r, count))
        return corrupt(path, "truncated header");
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
        const hx_tensor *t = find_saved(g, name);
        if (!t) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: '%s' holds '%s', which is not a "
                      "parameter or optimizer state of this graph; nothing was loaded", path, name);
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
        src[t->id] = r->p + r->at;
        if (!take(r, NULL, nbytes) || !TAKE(r, sum)) return corrupt(path, "truncated data");
        if (XXH3_64bits(src[t->id], nbytes) != sum) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: checksum of '%s' in '%s' does not match; "
                      "nothing was loaded", name, path);
            return HX_ERR_CORRUPT;
        }
    }
    if (r->at != r->n) return corrupt(path, "trailing bytes");
    return HX_OK;
}

hx_status hx_session_load(hx_session *s, const char *path)
{
    if (!s || !path)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_load: %s is NULL",
                         s ? "path" : "session");
    hx_status settled = hx__dpu_settle(s); /* a delayed update lands first */
    if (!settled) settled = hx__disk_load(s, "hx_session_load");
    if (settled) return settled;
    char *data = NULL;
    size_t n = 0;
    hx_status st = read_file(path, &data, &n);
    const char **src = st ? NULL : calloc(s->g->n ? s->g->n : 1, sizeof *src);
    if (!src) {
        free(data);
        hx__disk_evict(s);
        if (st) return st;
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
    }
    reader r = {data, n, 0};
    header h = {0};
    st = verify(s, path, &r, src, &h);
    if (!st) { /* everything checked: now apply */
        for (int i = 0; i < s->g->n && !st; i++)
            if (src[i])
                st = hx__session_copy_in(s, hx__dev_of(s, i), s->persist[i], src[i],
                                         hx_tensor_nbytes(s->g->tensors[i]));
    }
    if (!st) st = hx__disk_store(s, "hx_session_load");
    hx__disk_evict(s);
    if (!st) {
        s->stats.step = (int64_t)h.step;
        s->stats.skipped_steps = (int64_t)h.skipped;
        s->stats.loss_scale = h.scale;
        s->stats.last_skipped = false;
        s->good_steps = (int)h.good;
    }
    free(src);
    free(data);
    return st;
}
