/* The disk tier (see disk_tier.h). */
#define _GNU_SOURCE /* O_DIRECT */
#include "memory/disk_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define IO_ALIGN 4096

typedef struct blockrec {
    int64_t slot; /* place in the file (in blocks); -1: nothing stored */
    uint64_t sum; /* XXH3-64 of the block's len bytes */
    size_t len;
} blockrec;

typedef struct request {
    bool busy;
    int call;       /* which call of the batch */
    int64_t block;  /* index within the call */
    int64_t slot;
    char *io;       /* what the engine reads or writes (block_size bytes) */
    int bounce;     /* the tier buffer used, -1: the caller's memory */
    size_t len;     /* the block's bytes in the caller's buffer */
    uint64_t sum;   /* write: checksum of the caller's bytes */
} request;

struct hx_disk_tier {
    hx_disk_config cfg;
    hx_disk_faults faults;
    int fd;
    hx_aio *io;
    blockrec *map;
    int64_t n_map;
    int64_t *free_slots, n_free, cap_free, n_slots;
    char **bounce; /* queue_depth buffers of a block, each allocated at its first use */
    int *bounce_free, n_bounce_free;
    request *req;
    uint64_t written_total; /* for the injected ENOSPC */
    hx_disk_stats st;
};

hx_disk_faults hx_disk_faults_none(void) { return (hx_disk_faults){-1, -1, -1, -1, false}; }

hx_disk_config hx_disk_config_default(const char *path)
{
    return (hx_disk_config){.path = path, .block_size = HX_MIB, .queue_depth = 32,
                            .engine = HX_DISK_ENGINE_AUTO, .direct = true};
}

/* ---- create and destroy -------------------------------------------------------------- */

/* Opens the file, with O_DIRECT when asked and the filesystem takes it
 * (some refuse at open, tmpfs among them; some only at the first write). */
static hx_status open_file(hx_disk_tier *t, hx_mem_err *err)
{
    static atomic_uint counter;
    snprintf(t->st.file, sizeof t->st.file, "%s/hetex-offload-%d-%u.bin", t->cfg.path, (int)getpid(),
             atomic_fetch_add(&counter, 1));
    int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    t->fd = -1;
    if (t->cfg.direct) {
        if (t->faults.refuse_direct) errno = EINVAL;
        else t->fd = open(t->st.file, flags | O_DIRECT, 0600);
        if (t->fd < 0 && errno == EINVAL) {
            snprintf(t->st.direct_reason, sizeof t->st.direct_reason,
                     "the filesystem refused O_DIRECT at open (EINVAL%s; tmpfs before Linux 6.6 "
                     "does): buffered I/O", t->faults.refuse_direct ? ", injected" : "");
        } else if (t->fd >= 0) {
            void *probe = aligned_alloc(IO_ALIGN, IO_ALIGN);
            if (!probe) return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "disk tier: out of host memory");
            memset(probe, 0, IO_ALIGN);
            ssize_t k = pwrite(t->fd, probe, IO_ALIGN, 0);
            int e = errno;
            free(probe);
            if (k != IO_ALIGN && k < 0 && e == EINVAL) {
                close(t->fd);
                unlink(t->st.file);
                t->fd = -1;
                snprintf(t->st.direct_reason, sizeof t->st.direct_reason,
                         "the filesystem refused an O_DIRECT write (EINVAL): buffered I/O");
            } else if (ftruncate(t->fd, 0) != 0) {
                return hx__mem_fail(err, HX_ERR_IO, "disk tier: cannot truncate '%s': %s", t->st.file,
                                    strerror(errno));
            } else {
                t->st.direct = true;
            }
        }
    } else {
        snprintf(t->st.direct_reason, sizeof t->st.direct_reason, "O_DIRECT not asked for");
    }
    if (t->fd < 0 && !t->st.direct) t->fd = open(t->st.file, flags, 0600);
    if (t->fd < 0)
        return hx__mem_fail(err, HX_ERR_IO,
                            "disk tier: cannot create '%s': %s; offload_path must be an existing, "
                            "writable directory", t->st.file, strerror(errno));
    return HX_OK;
}

hx_status hx_disk_tier_create(const hx_disk_config *cfg, hx_disk_tier **out, hx_mem_err *err)
{
    if (!out) return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_disk_tier_create: out is NULL");
    *out = NULL;
    if (!cfg || !cfg->path || !cfg->path[0] || !cfg->block_size || cfg->block_size % IO_ALIGN ||
        cfg->block_size > ((size_t)1 << 30) || cfg->queue_depth < 1 || cfg->queue_depth > 1024 ||
        (unsigned)cfg->engine > HX_DISK_ENGINE_SYNC)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "hx_disk_tier_create: needs an offload path, a block size that is a "
                            "multiple of 4096 up to 1 GiB (got %zu), a queue depth in 1..1024 (got "
                            "%d) and an engine of hx_disk_engine", cfg ? cfg->block_size : 0,
                            cfg ? cfg->queue_depth : 0);
    struct stat sb;
    if (stat(cfg->path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return hx__mem_fail(err, HX_ERR_IO, "hx_disk_tier_create: offload path '%s' is not a directory%s%s",
                            cfg->path, errno ? ": " : "", errno ? strerror(errno) : "");
    hx_disk_tier *t = calloc(1, sizeof *t);
    if (!t) return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "disk tier: out of host memory");
    t->cfg = *cfg;
    t->faults = cfg->faults ? *cfg->faults : hx_disk_faults_none();
    t->cfg.faults = NULL;
    t->fd = -1;
    int qd = cfg->queue_depth;
    t->bounce = calloc((size_t)qd, sizeof *t->bounce);
    t->bounce_free = malloc((size_t)qd * sizeof *t->bounce_free);
    t->req = calloc((size_t)qd, sizeof *t->req);
    hx_status st = t->bounce && t->bounce_free && t->req
                       ? HX_OK : hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "disk tier: out of host memory");
    for (int i = 0; !st && i < qd; i++) t->bounce_free[t->n_bounce_free++] = i;
    if (!st) st = hx__aio_open(cfg->engine, qd, &t->io, t->st.engine_reason, sizeof t->st.engine_reason, err);
    if (!st) st = open_file(t, err);
    if (st) {
        hx_disk_tier_destroy(t);
        return st;
    }
    t->st.engine = hx__aio_name(hx__aio_kind(t->io));
    t->st.block_size = cfg->block_size;
    t->st.queue_depth = qd;
    t->cfg.path = NULL; /* not kept: the file name is */
    *out = t;
    return HX_OK;
}

void hx_disk_tier_destroy(hx_disk_tier *t)
{
    if (!t) return;
    if (t->fd >= 0) {
        close(t->fd);
        unlink(t->st.file);
    }
    hx__aio_close(t->io);
    free(t->map);
    free(t->free_slots);
    for (int i = 0; t->bounce && i < t->cfg.queue_depth; i++) free(t->bounce[i]);
    free(t->bounce);
    free(t->bounce_free);
    free(t->req);
    free(t);
}

void hx_disk_tier_stats(const hx_disk_tier *t, hx_disk_stats *out) { *out = t->st; }

void hx_disk_tier_set_faults(hx_disk_tier *t, const hx_disk_faults *f)
{
    t->faults = f ? *f : hx_disk_faults_none();
    t->written_total = 0;
}

/* ---- slots ------------------------------------------------------------------------------ */

/* Makes the free list big enough for `slots` slots, so that giving slots
 * back never fails. */
static bool slots_reserve(hx_disk_tier *t, int64_t slots)
{
    if (slots <= t->cap_free) return true;
    int64_t cap = t->cap_free ? t->cap_free : 256;
    while (cap < slots) cap *= 2;
    int64_t *p = realloc(t->free_slots, (size_t)cap * sizeof *p);
    if (!p) return false;
    t->free_slots = p;
    t->cap_free = cap;
    return true;
}

static void slot_give(hx_disk_tier *t, int64_t slot) { t->free_slots[t->n_free++] = slot; }

static int64_t slot_take(hx_disk_tier *t)
{
    return t->n_free ? t->free_slots[--t->n_free] : t->n_slots++;
}

static bool map_reserve(hx_disk_tier *t, int64_t n)
{
    if (n <= t->n_map) return true;
    int64_t cap = t->n_map ? t->n_map : 64;
    while (cap < n) cap *= 2;
    blockrec *m = realloc(t->map, (size_t)cap * sizeof *m);
    if (!m) return false;
    for (int64_t i = t->n_map; i < cap; i++) m[i] = (blockrec){.slot = -1};
    t->map = m;
    t->n_map = cap;
    return true;
}

/* ---- the I/O pipeline -------------------------------------------------------------------- */

typedef struct call {
    bool write;
    int64_t first;  /* logical block of the call's block 0 */
    char *buf;
    size_t bytes;
    int64_t n;      /* blocks */
    int64_t next;   /* blocks started */
    int inflight;
    int64_t *slots; /* per block: where it goes (write) or lies (read) */
    uint64_t *sums; /* write: per block checksum */
    hx_status st;   /* the first failure */
    hx_mem_err *err;
} call;

static void fail(hx_disk_tier *t, call *c, hx_status st, int64_t i, const char *what)
{
    if (c->st) return;
    c->st = hx__mem_fail(c->err, st, "disk tier '%s': %s of block %" PRId64 " (file offset %" PRId64
                         ", %zu bytes) failed: %s%s", t->st.file, c->write ? "write" : "read",
                         c->first + i, c->slots[i] * (int64_t)t->cfg.block_size, t->cfg.block_size, what,
                         c->write ? "; nothing of this write is applied: the previous copy of each "
                                    "of its blocks is kept"
                                  : "; the stored copy is unchanged, the destination must not be used");
}

/* Starts block i of call ci; false when it could not start (the call
 * has failed). A free request and buffer exist: at most queue_depth
 * blocks are in flight, each holding one of each. */
static bool submit(hx_disk_tier *t, call *c, int ci, int64_t i)
{
    size_t bs = t->cfg.block_size;
    int r = 0;
    while (t->req[r].busy) r++;
    request *q = &t->req[r];
    char *mine = c->buf + (size_t)i * bs;
    *q = (request){.busy = true, .call = ci, .block = i, .slot = c->slots[i], .io = mine, .bounce = -1};
    q->len = (size_t)i == (size_t)(c->n - 1) ? c->bytes - (size_t)i * bs : bs;
    bool aligned = (uintptr_t)mine % IO_ALIGN == 0 || !t->st.direct;
    if (q->len != bs || !aligned) {
        q->bounce = t->bounce_free[--t->n_bounce_free];
        if (!t->bounce[q->bounce]) {
            t->bounce[q->bounce] = aligned_alloc(IO_ALIGN, bs);
            if (!t->bounce[q->bounce]) {
                fail(t, c, HX_ERR_OUT_OF_MEMORY, i, "out of host memory for a bounce buffer");
                goto release;
            }
            t->st.bounce_bytes += bs;
        }
        q->io = t->bounce[q->bounce];
        if (c->write) {
            memcpy(q->io, mine, q->len);
            memset(q->io + q->len, 0, bs - q->len);
        }
    }
    if (c->write) {
        c->sums[i] = XXH3_64bits(mine, q->len);
        if (t->faults.enospc_after_bytes >= 0 &&
            t->written_total + bs > (uint64_t)t->faults.enospc_after_bytes) {
            fail(t, c, HX_ERR_IO, i, "No space left on device (ENOSPC, injected); free space under "
                                     "offload_path or lower offload_disk_size");
            goto release;
        }
        t->written_total += bs;
    }
    int e = hx__aio_submit(t->io, t->fd, c->write, q->io, bs, (off_t)(q->slot * (int64_t)bs), (unsigned)r);
    if (e) {
        fail(t, c, HX_ERR_IO, i, strerror(-e));
        goto release;
    }
    c->inflight++;
    return true;
release:
    if (q->bounce >= 0) t->bounce_free[t->n_bounce_free++] = q->bounce;
    q->busy = false;
    return false;
}

/* Handles one completion: checks it (and the checksum of a read). */
static void complete(hx_disk_tier *t, call *calls, unsigned r, long res)
{
    request *q = &t->req[r];
    call *c = &calls[q->call];
    size_t bs = t->cfg.block_size;
    int64_t logical = c->first + q->block;
    if (c->write && logical == t->faults.short_write_block && res == (long)bs) res = (long)bs / 2;
    if (!c->write && logical == t->faults.eio_read_block) res = -EIO;
    if (!c->write && logical == t->faults.flip_read_block && res == (long)bs) q->io[q->len / 2] ^= 0x10;
    char what[160];
    if (res < 0) {
        snprintf(what, sizeof what, "%s%s", strerror((int)-res),
                 res == -ENOSPC ? " (ENOSPC); free space under offload_path or lower offload_disk_size" : "");
        fail(t, c, HX_ERR_IO, q->block, what);
    } else if ((size_t)res < bs) {
        snprintf(what, sizeof what, "short %s: %ld of %zu bytes", c->write ? "write" : "read", res, bs);
        fail(t, c, HX_ERR_IO, q->block, what);
    } else if (c->write) {
        t->st.bytes_written += bs;
    } else {
        t->st.bytes_read += bs;
        char *mine = c->buf + (size_t)q->block * bs;
        if (q->bounce >= 0) memcpy(mine, q->io, q->len);
        uint64_t sum = XXH3_64bits(mine, q->len);
        if (sum != t->map[logical].sum) {
            snprintf(what, sizeof what, "checksum mismatch (stored %016" PRIx64 ", read %016" PRIx64
                     "): the data on disk is corrupt", t->map[logical].sum, sum);
            fail(t, c, HX_ERR_CORRUPT, q->block, what);
        }
    }
    if (q->bounce >= 0) t->bounce_free[t->n_bounce_free++] = q->bounce;
    q->busy = false;
    c->inflight--;
}

/* Runs every block of the calls with up to queue_depth in flight, taking
 * blocks from the calls in turn so that all of them progress together;
 * after a call's failure no new block of it starts, and those in flight
 * are waited for. */
static void run(hx_disk_tier *t, call *calls, int n)
{
    int inflight = 0;
    for (;;) {
        for (bool more = true; more && inflight < t->cfg.queue_depth;) {
            more = false;
            for (int k = 0; k < n && inflight < t->cfg.queue_depth; k++) {
                call *c = &calls[k];
                if (c->next >= c->n || c->st) continue;
                inflight += submit(t, c, k, c->next++);
                more = true;
            }
        }
        if (!inflight) break;
        unsigned r;
        long res;
        int e = hx__aio_wait(t->io, &r, &res);
        if (e) { /* the engine itself failed: nothing more can be collected */
            for (int k = 0; k < n; k++)
                if (calls[k].inflight || calls[k].next < calls[k].n)
                    fail(t, &calls[k], HX_ERR_IO, calls[k].next ? calls[k].next - 1 : 0, strerror(-e));
            for (int k = 0; k < t->cfg.queue_depth; k++) t->req[k].busy = false;
            t->n_bounce_free = 0;
            for (int k = 0; k < t->cfg.queue_depth; k++) t->bounce_free[t->n_bounce_free++] = k;
            break;
        }
        complete(t, calls, r, res);
        inflight--;
    }
}

/* Checks op and sets up its call (slots to write to, or where its blocks lie). */
static hx_status prepare(hx_disk_tier *t, hx_disk_op *op, call *c)
{
    const char *fn = op->write ? "hx_disk_tier_write" : "hx_disk_tier_read";
    hx_mem_err *err = &op->err;
    *c = (call){.write = op->write, .first = op->first, .buf = op->buf, .bytes = op->bytes, .err = err};
    if (!t || !op->buf || !op->bytes || op->first < 0 || op->first > ((int64_t)1 << 40) ||
        op->bytes / t->cfg.block_size > ((size_t)1 << 30))
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "%s: needs a tier, a buffer, bytes > 0 and a first block in [0, 2^40] "
                            "(got first %" PRId64 ", %zu bytes)", fn, op->first, op->bytes);
    size_t bs = t->cfg.block_size;
    c->n = (int64_t)((op->bytes + bs - 1) / bs);
    for (int64_t i = 0; !op->write && i < c->n; i++) {
        size_t len = i == c->n - 1 ? op->bytes - (size_t)i * bs : bs;
        const blockrec *b = op->first + i < t->n_map ? &t->map[op->first + i] : NULL;
        if (!b || b->slot < 0 || b->len != len)
            return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                                "hx_disk_tier_read: block %" PRId64 " %s; a read must name the "
                                "blocks and size of a write", op->first + i,
                                !b || b->slot < 0 ? "was never written" : "holds another size");
    }
    c->slots = malloc((size_t)c->n * sizeof *c->slots);
    c->sums = op->write ? malloc((size_t)c->n * sizeof *c->sums) : NULL;
    if (!c->slots || (op->write && (!c->sums || !map_reserve(t, op->first + c->n) ||
                                    !slots_reserve(t, t->n_slots + c->n)))) {
        free(c->slots);
        free(c->sums);
        c->slots = NULL;
        c->sums = NULL;
        return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "disk tier: out of host memory");
    }
    for (int64_t i = 0; i < c->n; i++) c->slots[i] = op->write ? slot_take(t) : t->map[op->first + i].slot;
    return HX_OK;
}

/* After run: a write that succeeded takes its new slots (its blocks' old
 * ones are free), a failed one gives them back; statistics. */
static void finish(hx_disk_tier *t, call *c)
{
    size_t bs = t->cfg.block_size;
    if (c->write && c->st) {
        for (int64_t i = c->n - 1; i >= 0; i--) slot_give(t, c->slots[i]);
        t->st.failed_writes++;
    } else if (c->write) {
        for (int64_t i = 0; i < c->n; i++) {
            blockrec *b = &t->map[c->first + i];
            if (b->slot >= 0) slot_give(t, b->slot);
            else t->st.blocks++;
            *b = (blockrec){.slot = c->slots[i], .sum = c->sums[i],
                            .len = i == c->n - 1 ? c->bytes - (size_t)i * bs : bs};
        }
        t->st.writes++;
    } else if (c->st) {
        t->st.failed_reads++;
    } else {
        t->st.reads++;
    }
    t->st.slots = t->n_slots;
    free(c->slots);
    free(c->sums);
}

hx_status hx_disk_tier_batch(hx_disk_tier *t, hx_disk_op *ops, int n)
{
    if (!t || n < 0 || (n && !ops)) return HX_ERR_INVALID_ARGUMENT;
    size_t bs = t->cfg.block_size;
    for (int k = 0; k < n; k++) /* the blocks of two ops must not meet: then nothing runs */
        for (int j = 0; j < k; j++) {
            int64_t a0 = ops[j].first, a1 = a0 + (int64_t)((ops[j].bytes + bs - 1) / bs);
            int64_t b0 = ops[k].first, b1 = b0 + (int64_t)((ops[k].bytes + bs - 1) / bs);
            if (a0 >= b1 || b0 >= a1) continue;
            for (int i = 0; i < n; i++)
                ops[i].st = hx__mem_fail(&ops[i].err, HX_ERR_INVALID_ARGUMENT, "hx_disk_tier_batch: "
                                         "ops %d and %d name the same blocks; nothing ran", j, k);
            return HX_ERR_INVALID_ARGUMENT;
        }
    call *calls = calloc(n ? (size_t)n : 1, sizeof *calls);
    hx_status first = calls ? HX_OK : HX_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < n; k++)
        ops[k].st = calls ? HX_OK : hx__mem_fail(&ops[k].err, HX_ERR_OUT_OF_MEMORY,
                                                 "disk tier: out of host memory");
    for (int k = 0; calls && k < n; k++) {
        if (!ops[k].st) ops[k].st = prepare(t, &ops[k], &calls[k]);
        if (ops[k].st) calls[k].n = 0; /* nothing to run: finish() skips it below */
    }
    if (calls) run(t, calls, n);
    for (int k = 0; calls && k < n; k++) {
        if (calls[k].slots) {
            finish(t, &calls[k]);
            ops[k].st = calls[k].st;
        }
        if (ops[k].st && !first) first = ops[k].st;
    }
    free(calls);
    return first;
}

hx_status hx_disk_tier_write(hx_disk_tier *t, int64_t first, const void *buf, size_t bytes,
                             hx_mem_err *err)
{
    hx_disk_op op = {.write = true, .first = first, .buf = (void *)buf, .bytes = bytes};
    hx_status st = t ? hx_disk_tier_batch(t, &op, 1)
                     : hx__mem_fail(&op.err, HX_ERR_INVALID_ARGUMENT, "hx_disk_tier_write: tier is NULL");
    if (st && err) *err = op.err;
    return st;
}

hx_status hx_disk_tier_read(hx_disk_tier *t, int64_t first, void *buf, size_t bytes, hx_mem_err *err)
{
    hx_disk_op op = {.write = false, .first = first, .buf = buf, .bytes = bytes};
    hx_status st = t ? hx_disk_tier_batch(t, &op, 1)
                     : hx__mem_fail(&op.err, HX_ERR_INVALID_ARGUMENT, "hx_disk_tier_read: tier is NULL");
    if (st && err) *err = op.err;
    return st;
}
