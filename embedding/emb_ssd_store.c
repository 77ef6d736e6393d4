/* The row store of tables larger than memory (see ssd.h). */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "embedding/embedding.h"
#include "memory/memory.h"

#define HDR_BYTES 4096
#define MAGIC "HXSSDROW"
#define VERSION 1u
#define HEAD 16 /* row, checksum */
#define STAGED (1u << 31) /* tag bit of a read-ahead request */
#define AHEAD (1u << 30)  /* tag bit of a write-ahead request */
#define MERGE 512         /* records at most in one write request */
#define STAGES_MAX 32768  /* read-ahead buffers at most */
#define GROW ((off_t)64 << 20) /* the file grows by fallocate in steps of this */

typedef struct fheader {
    char magic[8];
    uint32_t version, rec;
    int64_t rows;
    uint64_t payload, shape, file_id, gen, check;
} fheader;

typedef struct u32vec {
    uint32_t *v;
    int64_t n, cap;
} u32vec;

static bool vec_reserve(u32vec *a, int64_t n)
{
    if (n <= a->cap) return true;
    int64_t cap = a->cap ? a->cap : 1024;
    while (cap < n) cap *= 2;
    uint32_t *p = realloc(a->v, (size_t)cap * sizeof *p);
    if (!p) return false;
    a->v = p;
    a->cap = cap;
    return true;
}

typedef struct req {
    bool write;
    int64_t row;    /* the first row */
    uint32_t slot;  /* the first slot */
    char *buf;
    int count;      /* records: a write of consecutive slots is one request */
} req;

/* A read-ahead buffer: 0 free, 1 in flight, 2 read and verified, 3
 * failed, 4 waiting for room in the engine, 5 dropped while in flight or
 * waiting (free once its completion comes or its turn is passed). */
typedef struct stage {
    int64_t row;
    int state;
} stage;

/* The write-ahead in flight (hx_emb_store_write_ahead): its records'
 * rows and new slots, its requests (queued up to the engine's depth, the
 * rest as completions make room) and whom to tell. */
typedef struct ahead {
    char *buf;                          /* the caller's records */
    int64_t *rows, n, cap;
    uint32_t *slots;
    req *reqs;                          /* row: -1 once completed */
    int64_t nreq, next, left, inflight; /* requests: all, next to queue, not completed, in flight */
    hx_emb_store_ahead_fn done;
    void *ctx;
    bool crash;
    int64_t completed;
} ahead;

struct hx_emb_store {
    hx_emb_store_config cfg;
    char *path;
    int fd;
    hx_aio *io;
    size_t rec;
    uint32_t first;        /* first data slot */
    uint64_t file_id, gen;
    uint32_t *idx;         /* rows: slot + 0, 0 = no record */
    uint32_t n_slots;      /* slots [first, n_slots) exist in the file */
    off_t allocated;       /* the file's size: writes inside it do not extend it */
    bool no_fallocate;     /* the filesystem refused it: writes extend the file */
    /* Records the last two checkpoints hold are kept: a checkpoint folder
     * committed after its table (hetex's --save) may crash in between and
     * leave the one before as the last. deferred: held, replaced since the
     * last commit; older: those of the commit before, free at the next. */
    u32vec free_slots, deferred, older;
    uint64_t *ckpt;        /* bit per slot: held by one of the last two checkpoints */
    int64_t ckpt_words;
    stage *stages;
    char *stage_buf;
    int n_stages, inflight;
    int *waitq, wq_head, wq_n; /* stages waiting, in the order they were asked for */
    hx_emb_rowmap staged;  /* row -> stage */
    hx_emb_store_faults faults;
    int64_t crash_at, write_batches; /* $HX_EMB_SSD_CRASH_AT=K: SIGKILL in the K-th write-back
                                        after this store's first checkpoint (the crash test) */
    bool armed;
    ahead wa;
    hx_emb_store_stats st;
};

static uint64_t record_sum(const hx_emb_store *s, int64_t row, const char *payload)
{
    return XXH3_64bits_withSeed(payload, s->cfg.payload, (uint64_t)row ^ s->file_id);
}

static uint64_t header_sum(const fheader *h) { return XXH3_64bits(h, offsetof(fheader, check)); }

static hx_status write_header(hx_emb_store *s, hx_emb_err *err)
{
    char *buf = aligned_alloc(4096, HDR_BYTES);
    if (!buf) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory");
    memset(buf, 0, HDR_BYTES);
    fheader h = {.version = VERSION, .rec = (uint32_t)s->rec, .rows = s->cfg.rows,
                 .payload = s->cfg.payload, .shape = s->cfg.shape, .file_id = s->file_id,
                 .gen = s->gen};
    memcpy(h.magic, MAGIC, 8);
    h.check = header_sum(&h);
    memcpy(buf, &h, sizeof h);
    ssize_t k = pwrite(s->fd, buf, HDR_BYTES, 0);
    int e = errno;
    free(buf);
    if (k != HDR_BYTES || fdatasync(s->fd) != 0)
        return hx_emb_fail(err, HX_ERR_IO, "embedding store '%s': cannot write its header: %s",
                           s->path, k < 0 ? strerror(e) : k != HDR_BYTES ? "short write" : strerror(errno));
    return HX_OK;
}

/* Reads and checks the header of a reused file. */
static hx_status read_header(hx_emb_store *s, hx_emb_err *err)
{
    char *buf = aligned_alloc(4096, HDR_BYTES);
    if (!buf) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory");
    ssize_t k = pread(s->fd, buf, HDR_BYTES, 0);
    fheader h;
    memcpy(&h, buf, sizeof h);
    free(buf);
    if (k != HDR_BYTES || memcmp(h.magic, MAGIC, 8) || h.check != header_sum(&h))
        return hx_emb_fail(err, HX_ERR_CORRUPT,
                           "embedding store '%s': the file exists and is not a row store (or its "
                           "header is corrupt); remove it or name another ssd_path", s->path);
    if (h.version != VERSION)
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED, "embedding store '%s': format version %u, this "
                           "build reads %u", s->path, h.version, VERSION);
    if (h.rec != s->rec || h.rows != s->cfg.rows || h.payload != s->cfg.payload || h.shape != s->cfg.shape)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding store '%s': the file holds a table of %" PRId64 " rows with "
                           "%" PRIu64 "-byte rows of another dim, dtype or optimizer than this "
                           "one (%" PRId64 " rows, %zu bytes); remove it or name another ssd_path",
                           s->path, h.rows, h.payload, s->cfg.rows, s->cfg.payload);
    s->file_id = h.file_id;
    s->gen = h.gen;
    return HX_OK;
}

/* Opens the file (O_DIRECT when asked and taken: tried with a record-sized
 * write at the end, truncated away after) and reads or writes its header. */
static hx_status open_file(hx_emb_store *s, hx_emb_err *err)
{
    bool direct = s->cfg.direct;
    for (;;) {
        s->fd = open(s->path, O_RDWR | O_CREAT | O_CLOEXEC | (direct ? O_DIRECT : 0), 0600);
        if (s->fd < 0 && direct && errno == EINVAL) {
            snprintf(s->st.reason, sizeof s->st.reason, "O_DIRECT refused at open: buffered I/O");
            direct = false;
            continue;
        }
        if (s->fd < 0)
            return hx_emb_fail(err, HX_ERR_IO, "embedding store: cannot open '%s': %s; ssd_path must "
                               "name a file in an existing, writable directory", s->path, strerror(errno));
        struct stat sb;
        if (fstat(s->fd, &sb) != 0)
            return hx_emb_fail(err, HX_ERR_IO, "embedding store '%s': %s", s->path, strerror(errno));
        hx_status st = sb.st_size > 0 ? read_header(s, err) : write_header(s, err);
        if (st) return st;
        off_t size = sb.st_size > HDR_BYTES ? sb.st_size : HDR_BYTES;
        uint64_t n = (uint64_t)size / s->rec;
        if (n < s->first) n = s->first;
        if (n > UINT32_MAX - 1)
            return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding store '%s': %" PRIu64 " records is "
                               "more than a store holds", s->path, n);
        s->n_slots = (uint32_t)n;
        s->allocated = size;
        if (!direct) break;
        char *probe = aligned_alloc(4096, hx__mem_round(s->rec, 4096));
        if (!probe) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory");
        memset(probe, 0, s->rec);
        ssize_t k = pwrite(s->fd, probe, s->rec, (off_t)s->n_slots * (off_t)s->rec);
        int e = errno;
        free(probe);
        if (ftruncate(s->fd, size) != 0)
            return hx_emb_fail(err, HX_ERR_IO, "embedding store '%s': %s", s->path, strerror(errno));
        if (k == (ssize_t)s->rec) break;
        if (k >= 0 || e != EINVAL)
            return hx_emb_fail(err, HX_ERR_IO, "embedding store '%s': a test write failed: %s", s->path,
                               k < 0 ? strerror(e) : "short write");
        snprintf(s->st.reason, sizeof s->st.reason, "O_DIRECT refused a %zu-byte record write "
                 "(EINVAL): buffered I/O", s->rec);
        close(s->fd);
        direct = false;
    }
    s->st.direct = direct;
    return HX_OK;
}

hx_status hx_emb_store_open(const hx_emb_store_config *cfg, hx_emb_store **out, hx_emb_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->path || !cfg->path[0] || cfg->rows < 1 || cfg->rows > (int64_t)UINT32_MAX - 2 ||
        !cfg->payload || cfg->payload > ((size_t)1 << 30) || cfg->queue_depth < 1 || cfg->queue_depth > 4096)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding store: needs a path, rows in [1, 2^32 - 2] (got %lld), a row "
                           "payload up to 1 GiB and a queue depth in 1..4096",
                           cfg ? (long long)cfg->rows : 0LL);
    hx_emb_store *s = calloc(1, sizeof *s);
    if (!s) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory");
    s->cfg = *cfg;
    s->fd = -1;
    s->faults = (hx_emb_store_faults){-1, -1};
    s->rec = hx__mem_round(HEAD + cfg->payload, 512);
    s->first = (uint32_t)((HDR_BYTES + s->rec - 1) / s->rec);
    s->path = strdup(cfg->path);
    s->cfg.path = s->path;
    /* Read-ahead room for a step's misses beyond the engine's depth (they
     * wait their turn): up to 16 MiB of buffers. */
    size_t room = ((size_t)16 << 20) / s->rec;
    s->n_stages = room > STAGES_MAX ? STAGES_MAX : (int)room;
    if (s->n_stages < cfg->queue_depth) s->n_stages = cfg->queue_depth;
    s->idx = calloc((size_t)cfg->rows, sizeof *s->idx);
    s->stages = calloc((size_t)s->n_stages, sizeof *s->stages);
    s->waitq = malloc((size_t)s->n_stages * sizeof *s->waitq);
    s->stage_buf = aligned_alloc(4096, hx__mem_round((size_t)s->n_stages * s->rec, 4096));
    const char *crash = getenv("HX_EMB_SSD_CRASH_AT");
    s->crash_at = crash ? strtoll(crash, NULL, 10) : 0;
    uint64_t seed[3] = {(uint64_t)time(NULL), (uint64_t)getpid(), (uint64_t)(uintptr_t)s};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed[0] ^= (uint64_t)ts.tv_nsec << 20;
    s->file_id = XXH3_64bits(seed, sizeof seed);
    hx_status st = s->path && s->idx && s->stages && s->waitq && s->stage_buf && !hx_emb_rowmap_init(&s->staged, s->n_stages)
                       ? HX_OK : hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory "
                                             "for the index of %lld rows", (long long)cfg->rows);
    if (!st) {
        hx_mem_err me;
        char why[192];
        if (hx__aio_open(HX_DISK_ENGINE_AUTO, cfg->queue_depth, &s->io, why, sizeof why, &me))
            st = hx_emb_fail(err, HX_ERR_IO, "embedding store: %s", me.msg);
        else if (why[0])
            snprintf(s->st.reason, sizeof s->st.reason, "%s", why);
    }
    if (!st) st = open_file(s, err);
    if (st) {
        hx_emb_store_close(s);
        return st;
    }
    s->st.engine = hx__aio_name(hx__aio_kind(s->io));
    s->st.rec = s->rec;
    *out = s;
    return HX_OK;
}

/* Waits for every read-ahead in flight (verifying what arrived). */
static void drain(hx_emb_store *s);

void hx_emb_store_close(hx_emb_store *s)
{
    if (!s) return;
    if (s->io && s->fd >= 0) drain(s);
    if (s->fd >= 0) close(s->fd);
    hx__aio_close(s->io);
    free(s->idx);
    free(s->free_slots.v);
    free(s->deferred.v);
    free(s->older.v);
    free(s->ckpt);
    free(s->stages);
    free(s->waitq);
    free(s->stage_buf);
    free(s->wa.rows);
    free(s->wa.slots);
    free(s->wa.reqs);
    hx_emb_rowmap_free(&s->staged);
    free(s->path);
    free(s);
}

size_t hx_emb_store_rec(const hx_emb_store *s) { return s->rec; }
bool hx_emb_store_has(const hx_emb_store *s, int64_t row) { return s->idx[row] != 0; }
const char *hx_emb_store_path(const hx_emb_store *s) { return s->path; }
int64_t hx_emb_store_offset(const hx_emb_store *s, int64_t row)
{
    return s->idx[row] ? (int64_t)s->idx[row] * (int64_t)s->rec : -1;
}
void hx_emb_store_set_faults(hx_emb_store *s, const hx_emb_store_faults *f)
{
    s->faults = f ? *f : (hx_emb_store_faults){-1, -1};
}

void hx_emb_store_stats_get(const hx_emb_store *s, hx_emb_store_stats *out)
{
    *out = s->st;
    out->slots = s->n_slots - s->first;
    out->generation = s->gen;
}

static bool ckpt_holds(const hx_emb_store *s, uint32_t slot)
{
    int64_t w = slot >> 6;
    return w < s->ckpt_words && (s->ckpt[w] >> (slot & 63) & 1);
}

/* Row r's record moved (or went): its old slot is free, or waits for the next checkpoint. */
static void release_slot(hx_emb_store *s, uint32_t old)
{
    if (!old) return;
    u32vec *to = ckpt_holds(s, old) ? &s->deferred : &s->free_slots;
    to->v[to->n++] = old;
}

static void unstage(hx_emb_store *s, int64_t row)
{
    int32_t k = hx_emb_rowmap_get(&s->staged, row);
    if (k < 0) return;
    stage *g = &s->stages[k]; /* one in flight or waiting is freed when its turn comes */
    g->state = g->state == 1 || g->state == 4 ? 5 : 0;
    hx_emb_rowmap_del(&s->staged, row);
}

void hx_emb_store_forget(hx_emb_store *s, const int64_t *rows, int64_t n)
{
    drain(s);
    if (!vec_reserve(&s->free_slots, s->free_slots.n + n) || !vec_reserve(&s->deferred, s->deferred.n + n))
        return; /* out of memory: the records stay (they are only read again if still indexed) */
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows[i];
        if (r < 0 || r >= s->cfg.rows || !s->idx[r]) continue;
        unstage(s, r);
        release_slot(s, s->idx[r]);
        s->idx[r] = 0;
        s->st.rows_on_disk--;
    }
}

/* Checks a record that arrived for row: its head names the row and its checksum matches. */
static bool record_ok(const hx_emb_store *s, int64_t row, const char *recbuf)
{
    uint64_t head[2];
    memcpy(head, recbuf, sizeof head);
    return head[0] == (uint64_t)row && head[1] == record_sum(s, row, recbuf + HEAD);
}

static void maybe_flip(const hx_emb_store *s, int64_t row, char *recbuf)
{
    if (row == s->faults.flip_read_row) recbuf[HEAD + s->cfg.payload / 2] ^= 0x10;
}

static int wait_one(hx_emb_store *s, unsigned *tag, long *res)
{
    double t0 = hx__now();
    int e = hx__aio_wait(s->io, tag, res);
    s->st.io_wait_s += hx__now() - t0;
    return e;
}

/* A read-ahead completion. */
static void staged_done(hx_emb_store *s, unsigned k, long res)
{
    stage *g = &s->stages[k];
    s->inflight--;
    if (g->state != 1) { /* dropped while in flight */
        g->state = 0;
        return;
    }
    char *b = s->stage_buf + (size_t)k * s->rec;
    if (res == (long)s->rec) maybe_flip(s, g->row, b);
    g->state = res == (long)s->rec && record_ok(s, g->row, b) ? 2 : 3;
    if (g->state == 2) {
        s->st.bytes_read += s->rec;
        s->st.prefetched++;
    }
}

/* A write-ahead request's completion: its rows move to their new records
 * or, when it failed, keep their previous ones (the slots go back). */
static void ahead_done(hx_emb_store *s, int64_t i, long res)
{
    ahead *a = &s->wa;
    req *q = &a->reqs[i];
    q->row = -1; /* completed */
    a->inflight--;
    a->left--;
    long len = (long)((size_t)q->count * s->rec);
    int64_t j0 = (int64_t)((q->buf - a->buf) / (ptrdiff_t)s->rec);
    for (int c = 0; c < q->count && res == len; c++) /* the injected short write */
        if (a->rows[j0 + c] == s->faults.short_write_row) res = len / 2;
    bool ok = res == len;
    if (ok && a->crash && ++a->completed * 2 >= a->nreq) raise(SIGKILL); /* the crash test */
    for (int c = 0; c < q->count; c++) {
        int64_t r = a->rows[j0 + c];
        if (ok) {
            unstage(s, r); /* a read ahead of the old record is stale now */
            if (!s->idx[r]) s->st.rows_on_disk++;
            release_slot(s, s->idx[r]);
            s->idx[r] = a->slots[j0 + c];
            s->st.rows_written++;
            s->st.bytes_written += s->rec;
            s->st.written_ahead++;
        } else {
            s->free_slots.v[s->free_slots.n++] = a->slots[j0 + c];
            s->st.ahead_failed++;
        }
        a->done(a->ctx, r, ok);
    }
}

/* Queues the write-ahead's next requests while the engine has room. A
 * request the engine refuses with nothing in flight fails, so that a
 * write-ahead always ends. */
static void pump(hx_emb_store *s)
{
    ahead *a = &s->wa;
    int64_t queued = 0;
    int reads = 0, head0 = s->wq_head, popped = 0;
    while (s->wq_n > 0 && s->inflight + a->inflight < s->cfg.queue_depth) {
        int k = s->waitq[s->wq_head];
        stage *g = &s->stages[k];
        if (g->state == 4) {
            if (hx__aio_queue(s->io, s->fd, false, s->stage_buf + (size_t)k * s->rec, s->rec,
                              (off_t)s->idx[g->row] * (off_t)s->rec, STAGED | (unsigned)k))
                break; /* the engine is full: with the next completion */
            g->state = 1;
            s->inflight++;
            reads++;
        } else {
            g->state = 0; /* dropped while it waited */
        }
        s->wq_head = (s->wq_head + 1) % s->n_stages;
        s->wq_n--;
        popped++;
    }
    if (reads && hx__aio_flush(s->io)) /* none of those started: forget them */
        for (int i = 0; i < popped; i++) {
            stage *g = &s->stages[s->waitq[(head0 + i) % s->n_stages]];
            if (g->state != 1) continue;
            hx_emb_rowmap_del(&s->staged, g->row);
            g->state = 0;
            s->inflight--;
        }
    while (a->next < a->nreq && s->inflight + a->inflight < s->cfg.queue_depth) {
        req *q = &a->reqs[a->next];
        int e = hx__aio_queue(s->io, s->fd, true, q->buf, (size_t)q->count * s->rec,
                              (off_t)q->slot * (off_t)s->rec, AHEAD | (unsigned)a->next);
        if (e && s->inflight + a->inflight > 0) break; /* room comes with a completion */
        a->inflight++;
        if (e) ahead_done(s, a->next, e);
        else queued++;
        a->next++;
    }
    if (queued && hx__aio_flush(s->io)) /* none of them started */
        for (int64_t i = a->next - queued; i < a->next; i++) ahead_done(s, i, -EIO);
}

static void complete(hx_emb_store *s, unsigned tag, long res)
{
    if (tag & STAGED) staged_done(s, tag & ~STAGED, res);
    else ahead_done(s, (int64_t)(tag & ~AHEAD), res);
}

/* Waits for every read-ahead (verifying what arrived) and for the
 * write-ahead. If the engine fails, the read-aheads are forgotten and the
 * write-ahead's rows keep their previous records (its slots are not
 * reused: a write may still land there). */
static void drop_waiting(hx_emb_store *s)
{
    for (; s->wq_n > 0; s->wq_n--, s->wq_head = (s->wq_head + 1) % s->n_stages) {
        stage *g = &s->stages[s->waitq[s->wq_head]];
        if (g->state == 4) hx_emb_rowmap_del(&s->staged, g->row);
        g->state = 0;
    }
}

static void drain(hx_emb_store *s)
{
    ahead *a = &s->wa;
    while (s->inflight > 0 || s->wq_n > 0 || a->left > 0) {
        pump(s);
        if (!s->inflight && !a->inflight) { /* the engine took nothing with nothing in flight */
            drop_waiting(s);
            continue;
        }
        unsigned tag;
        long res;
        if (wait_one(s, &tag, &res)) {
            for (int k = 0; k < s->n_stages; k++) s->stages[k].state = 0;
            hx_emb_rowmap_clear(&s->staged);
            s->inflight = s->wq_n = 0;
            for (int64_t i = 0; i < a->nreq; i++) {
                const req *q = &a->reqs[i];
                int64_t j0 = (int64_t)((q->buf - a->buf) / (ptrdiff_t)s->rec);
                if (q->row >= 0) /* not completed */
                    for (int c = 0; c < q->count; c++) a->done(a->ctx, a->rows[j0 + c], false);
            }
            a->left = a->inflight = 0;
            return;
        }
        complete(s, tag, res);
    }
}

void hx_emb_store_poll(hx_emb_store *s)
{
    unsigned tag;
    long res;
    while ((s->inflight > 0 || s->wa.inflight > 0) && hx__aio_poll(s->io, &tag, &res) == 0)
        complete(s, tag, res);
    pump(s);
}

void hx_emb_store_settle(hx_emb_store *s) { drain(s); }

bool hx_emb_store_ahead_busy(const hx_emb_store *s) { return s->wa.left > 0; }

void hx_emb_store_prefetch(hx_emb_store *s, const int64_t *rows, int64_t n)
{
    hx_emb_store_poll(s);
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows[i];
        if (r < 0 || r >= s->cfg.rows || !s->idx[r] || hx_emb_rowmap_get(&s->staged, r) >= 0) continue;
        while (k < s->n_stages && s->stages[k].state != 0) k++;
        if (k == s->n_stages) break;
        s->stages[k] = (stage){r, 4};
        hx_emb_rowmap_put(&s->staged, r, k);
        s->waitq[(s->wq_head + s->wq_n++) % s->n_stages] = k;
    }
    pump(s);
}

/* ---- batches ---------------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Makes the file hold slots below `end` before they are written: writes
 * that extend a file are synchronous under O_DIRECT (ext4, xfs), writes
 * into allocated space are not. */
static void allocate(hx_emb_store *s, uint32_t end)
{
    off_t need = (off_t)end * (off_t)s->rec;
    if (s->no_fallocate || need <= s->allocated) return;
    off_t step = (off_t)s->cfg.rows * (off_t)s->rec / 64; /* a 64th of the table, 1-64 MiB */
    step = step < ((off_t)1 << 20) ? (off_t)1 << 20 : step > GROW ? GROW : step;
    off_t len = need - s->allocated < step ? step : need - s->allocated;
    if (fallocate(s->fd, 0, s->allocated, len) == 0) s->allocated += len;
    else s->no_fallocate = true;
}

static hx_status req_fail(hx_emb_store *s, const req *q, hx_status st, const char *what, hx_emb_err *err)
{
    return hx_emb_fail(err, st, "embedding store '%s': %s of row %" PRId64 "%s (slot %" PRIu32 ", file "
                       "offset %" PRId64 ", %zu bytes) failed: %s; %s", s->path,
                       q->write ? "write" : "read", q->row, q->count > 1 ? " and the next records" : "",
                       q->slot, (int64_t)q->slot * (int64_t)s->rec, (size_t)q->count * s->rec, what,
                       q->write ? "nothing of this batch is applied: each row keeps its previous record"
                                : "the stored record is unchanged");
}

hx_status hx_emb_store_batch(hx_emb_store *s, const int64_t *wrows, char *wbuf, int64_t nw,
                             const int64_t *rrows, char *rbuf, int64_t nr, hx_emb_err *err)
{
    drain(s);
    int64_t n = nw + nr;
    if (!n) return HX_OK;
    if ((uint64_t)s->n_slots + (uint64_t)nw > UINT32_MAX - 1)
        return hx_emb_fail(err, HX_ERR_IO, "embedding store '%s': the file holds the most records a "
                           "store can (2^32 - 2 slots); checkpoint to free the replaced ones", s->path);
    req *qs = malloc((size_t)n * sizeof *qs);
    if (!qs || !vec_reserve(&s->free_slots, s->free_slots.n + nw) ||
        !vec_reserve(&s->deferred, s->deferred.n + nw)) {
        free(qs);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory for a batch of "
                           "%" PRId64 " records", n);
    }
    int64_t m = 0;
    uint32_t n_slots0 = s->n_slots;
    int64_t free0 = s->free_slots.n;
    /* Fresh slots in ascending order, so that writes of consecutive slots
     * (the file's tail above all) go out as one request. */
    uint32_t *slots = nw ? malloc((size_t)nw * sizeof *slots) : NULL;
    if (nw && !slots) {
        free(qs);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory");
    }
    for (int64_t i = 0; i < nw; i++) slots[i] = s->free_slots.n ? s->free_slots.v[--s->free_slots.n] : s->n_slots++;
    if (nw) qsort(slots, (size_t)nw, sizeof *slots, cmp_u32);
    allocate(s, s->n_slots);
    for (int64_t i = 0; i < nw; i++) {
        char *b = wbuf + (size_t)i * s->rec;
        uint64_t head[2] = {(uint64_t)wrows[i], record_sum(s, wrows[i], b + HEAD)};
        memcpy(b, head, sizeof head);
        unstage(s, wrows[i]);
        req *last = m ? &qs[m - 1] : NULL;
        if (last && last->slot + (uint32_t)last->count == slots[i] && last->count < MERGE) last->count++;
        else qs[m++] = (req){true, wrows[i], slots[i], b, 1};
    }
    int64_t nwreq = m;
    int64_t nread = 0;
    for (int64_t i = 0; i < nr; i++) {
        char *b = rbuf + (size_t)i * s->rec;
        int32_t k = hx_emb_rowmap_get(&s->staged, rrows[i]);
        if (k >= 0 && s->stages[k].state == 2) { /* read ahead: no I/O */
            memcpy(b, s->stage_buf + (size_t)k * s->rec, s->rec);
            unstage(s, rrows[i]);
            s->st.rows_read++;
            continue;
        }
        if (k >= 0) unstage(s, rrows[i]);
        qs[m++] = (req){false, rrows[i], s->idx[rrows[i]], b, 1};
        nread++;
    }
    bool crash = nw > 0 && s->armed && ++s->write_batches == s->crash_at;
    hx_status st = HX_OK;
    int64_t next = 0, done = 0, wdone = 0, inflight = 0;
    int depth = s->cfg.queue_depth;
    while (done < m) {
        int64_t queued = 0;
        while (!st && next < m && inflight < depth) {
            req *q = &qs[next];
            int e = hx__aio_queue(s->io, s->fd, q->write, q->buf, (size_t)q->count * s->rec,
                                  (off_t)q->slot * (off_t)s->rec, (unsigned)next);
            if (e) {
                st = req_fail(s, q, HX_ERR_IO, strerror(-e), err);
                break;
            }
            next++;
            inflight++;
            queued++;
        }
        if (queued) {
            int e = hx__aio_flush(s->io);
            if (e) { /* none of those started */
                inflight -= queued;
                done += queued;
                if (!st) st = req_fail(s, &qs[next - 1], HX_ERR_IO, strerror(-e), err);
            }
        }
        if (st && !inflight) break;
        if (!inflight) continue;
        unsigned tag;
        long res;
        int e = wait_one(s, &tag, &res);
        if (e) {
            st = st ? st : hx_emb_fail(err, HX_ERR_IO, "embedding store '%s': waiting for I/O failed: "
                                       "%s; nothing of this batch is applied", s->path, strerror(-e));
            break; /* the engine cannot give back the rest */
        }
        inflight--;
        done++;
        req *q = &qs[tag];
        long len = (long)((size_t)q->count * s->rec);
        for (int c = 0; q->write && c < q->count && res == len; c++) /* the injected short write */
            if (wrows[(q->buf - wbuf) / (ptrdiff_t)s->rec + c] == s->faults.short_write_row) res = len / 2;
        if (!q->write && res == (long)s->rec) maybe_flip(s, q->row, q->buf);
        char what[160];
        if (res < 0) {
            if (!st) st = req_fail(s, q, HX_ERR_IO, strerror((int)-res), err);
        } else if (res < len) {
            snprintf(what, sizeof what, "short %s: %ld of %ld bytes", q->write ? "write" : "read", res, len);
            if (!st) st = req_fail(s, q, HX_ERR_IO, what, err);
        } else if (!q->write && !record_ok(s, q->row, q->buf)) {
            if (!st) st = req_fail(s, q, HX_ERR_CORRUPT, "the record's checksum or row does not match: "
                                   "the data on disk is corrupt", err);
        } else if (q->write && crash && ++wdone * 2 >= nwreq) {
            raise(SIGKILL); /* the crash test: half of this write-back is on disk */
        }
    }
    if (st) { /* the new slots go back; the index is as it was */
        s->free_slots.n = free0; /* the slots taken are still there, above n */
        s->n_slots = n_slots0;
        free(qs);
        free(slots);
        return st;
    }
    for (int64_t i = 0; i < nw; i++) {
        int64_t r = wrows[i];
        if (!s->idx[r]) s->st.rows_on_disk++;
        release_slot(s, s->idx[r]);
        s->idx[r] = slots[i];
    }
    free(slots);
    s->st.rows_written += (uint64_t)nw;
    s->st.bytes_written += (uint64_t)nw * s->rec;
    s->st.rows_read += (uint64_t)nread;
    s->st.bytes_read += (uint64_t)nread * s->rec;
    free(qs);
    return HX_OK;
}

int64_t hx_emb_store_write_ahead(hx_emb_store *s, const int64_t *rows, char *buf, int64_t n,
                                 hx_emb_store_ahead_fn done, void *ctx)
{
    ahead *a = &s->wa;
    hx_emb_store_poll(s);
    if (n <= 0 || a->left > 0 || (uint64_t)s->n_slots + (uint64_t)n > UINT32_MAX - 1) return 0;
    if (n > a->cap) {
        int64_t *r = realloc(a->rows, (size_t)n * sizeof *r);
        if (r) a->rows = r;
        uint32_t *sl = r ? realloc(a->slots, (size_t)n * sizeof *sl) : NULL;
        if (sl) a->slots = sl;
        req *q = sl ? realloc(a->reqs, (size_t)n * sizeof *q) : NULL;
        if (!q) return 0;
        a->reqs = q;
        a->cap = n;
    }
    if (!vec_reserve(&s->free_slots, s->free_slots.n + n) || !vec_reserve(&s->deferred, s->deferred.n + n))
        return 0;
    for (int64_t i = 0; i < n; i++)
        a->slots[i] = s->free_slots.n ? s->free_slots.v[--s->free_slots.n] : s->n_slots++;
    qsort(a->slots, (size_t)n, sizeof *a->slots, cmp_u32);
    allocate(s, s->n_slots);
    a->buf = buf;
    a->nreq = 0;
    for (int64_t i = 0; i < n; i++) {
        char *b = buf + (size_t)i * s->rec;
        a->rows[i] = rows[i];
        uint64_t head[2] = {(uint64_t)rows[i], record_sum(s, rows[i], b + HEAD)};
        memcpy(b, head, sizeof head);
        req *last = a->nreq ? &a->reqs[a->nreq - 1] : NULL;
        if (last && last->slot + (uint32_t)last->count == a->slots[i] && last->count < MERGE) last->count++;
        else a->reqs[a->nreq++] = (req){true, rows[i], a->slots[i], b, 1};
    }
    a->n = n;
    a->next = a->inflight = a->completed = 0;
    a->left = a->nreq;
    a->done = done;
    a->ctx = ctx;
    a->crash = s->armed && ++s->write_batches == s->crash_at;
    pump(s);
    return n;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

hx_status hx_emb_store_ckpt_begin(hx_emb_store *s, const uint32_t **idx, uint64_t *file_id,
                                  uint64_t *gen, hx_emb_err *err)
{
    drain(s);
    if (fdatasync(s->fd) != 0)
        return hx_emb_fail(err, HX_ERR_IO, "embedding store '%s': cannot flush it to disk: %s", s->path,
                           strerror(errno));
    *idx = s->idx;
    *file_id = s->file_id;
    *gen = s->gen + 1;
    return HX_OK;
}

/* A bitmap of n_slots bits: the slots idx holds (check: each in the file
 * and held once, else HX_ERR_CORRUPT) and those of list. */
static hx_status held_bits(hx_emb_store *s, const uint32_t *idx, const u32vec *list, bool check,
                           uint64_t **out, hx_emb_err *err)
{
    int64_t words = ((int64_t)s->n_slots + 63) / 64;
    uint64_t *bits = calloc((size_t)words, sizeof *bits);
    if (!bits) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory");
    for (int64_t r = 0; r < s->cfg.rows; r++) {
        uint32_t v = idx[r];
        if (!v) continue;
        if (check && (v < s->first || v >= s->n_slots || (bits[v >> 6] >> (v & 63) & 1))) {
            free(bits);
            return hx_emb_fail(err, HX_ERR_CORRUPT,
                               "embedding store '%s': the checkpoint gives row %" PRId64 " slot %" PRIu32
                               ", %s", s->path, r, v,
                               v < s->first || v >= s->n_slots ? "which the file does not hold"
                                                                : "which another row holds too");
        }
        bits[v >> 6] |= 1ull << (v & 63);
    }
    for (int64_t i = 0; list && i < list->n; i++) bits[list->v[i] >> 6] |= 1ull << (list->v[i] & 63);
    *out = bits;
    return HX_OK;
}

static void set_held(hx_emb_store *s, uint64_t *bits)
{
    free(s->ckpt);
    s->ckpt = bits;
    s->ckpt_words = ((int64_t)s->n_slots + 63) / 64;
}

hx_status hx_emb_store_ckpt_end(hx_emb_store *s, uint64_t gen, hx_emb_err *err)
{
    uint64_t old = s->gen;
    s->gen = gen;
    hx_status st = write_header(s, err);
    if (st) {
        s->gen = old;
        return st;
    }
    s->armed = s->crash_at > 0;
    /* Now held: this checkpoint's records and those only the previous one
     * holds (deferred); the ones only the checkpoint before held are free.
     * Out of memory: the old marks stay and nothing is freed. */
    uint64_t *bits;
    if (!vec_reserve(&s->free_slots, s->free_slots.n + s->older.n) ||
        held_bits(s, s->idx, &s->deferred, false, &bits, NULL))
        return HX_OK;
    set_held(s, bits);
    for (int64_t i = 0; i < s->older.n; i++) s->free_slots.v[s->free_slots.n++] = s->older.v[i];
    u32vec t = s->older;
    s->older = s->deferred;
    s->deferred = t;
    s->deferred.n = 0;
    return HX_OK;
}

/* Drops the slots of bits from list. */
static void drop_held(u32vec *list, const uint64_t *bits)
{
    int64_t k = 0;
    for (int64_t i = 0; i < list->n; i++)
        if (!(bits[list->v[i] >> 6] >> (list->v[i] & 63) & 1)) list->v[k++] = list->v[i];
    list->n = k;
}

hx_status hx_emb_store_adopt(hx_emb_store *s, const uint32_t *idx, uint64_t file_id, uint64_t gen,
                             hx_emb_err *err)
{
    drain(s);
    if (file_id != s->file_id)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding store '%s': the checkpoint belongs to another row store "
                           "(file id %016" PRIx64 ", this one %016" PRIx64 "); load it into a table "
                           "over the ssd_path it was saved from", s->path, file_id, s->file_id);
    if (gen + 1 < s->gen)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT,
                           "embedding store '%s': the checkpoint is generation %" PRIu64 " but %" PRIu64
                           " were committed since, which reuse its records; load one of the last two",
                           s->path, gen, s->gen - gen);
    uint64_t *mine;
    hx_status st = held_bits(s, idx, NULL, true, &mine, err);
    if (!st && !vec_reserve(&s->free_slots, s->free_slots.n + s->cfg.rows)) {
        free(mine);
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding store: out of memory");
    }
    if (st) return st;
    /* Live records no checkpoint holds are free; the records of the other
     * checkpoints stay held; the adopted ones are never freed by a commit. */
    for (int64_t r = 0; r < s->cfg.rows; r++) {
        uint32_t v = s->idx[r];
        if (v && !ckpt_holds(s, v) && !(mine[v >> 6] >> (v & 63) & 1)) s->free_slots.v[s->free_slots.n++] = v;
    }
    drop_held(&s->deferred, mine);
    drop_held(&s->older, mine);
    for (int64_t w = 0; w < s->ckpt_words; w++) mine[w] |= s->ckpt[w];
    set_held(s, mine);
    memcpy(s->idx, idx, (size_t)s->cfg.rows * sizeof *idx);
    int64_t on = 0;
    for (int64_t r = 0; r < s->cfg.rows; r++) on += idx[r] != 0;
    s->st.rows_on_disk = on;
    for (int k = 0; k < s->n_stages; k++) s->stages[k].state = 0;
    hx_emb_rowmap_clear(&s->staged);
    if (gen > s->gen) s->gen = gen;
    return HX_OK;
}
