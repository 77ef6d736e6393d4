/* Tables larger than host memory: a row store on disk (emb_ssd_store.c)
 * with a host row cache in front of it (emb_ssd.c), checkpointed without
 * copying the rows (emb_ssd_ckpt.c). Included by embedding/embedding.h.
 *
 * The store. One file holds a 4096-byte header and then records of `rec`
 * bytes (a multiple of 512): a 16-byte head (the row, the XXH3-64 of the
 * payload seeded with the row and the file's id) and the payload: the
 * row's params in the storage dtype, then each optimizer state array of
 * the row, so one read brings a row and its state. Writes never overwrite:
 * a row goes to a free slot and the index (one u32 per row, in memory)
 * moves to it once the write succeeded, so a failed or torn write leaves
 * the previous copy. The slots of the last two checkpoints are not reused,
 * so a checkpoint is its index alone (4 bytes a row) plus the file. I/O goes through memory/'s engines (io_uring, else
 * libaio; O_DIRECT where the filesystem takes it): a batch queues all its
 * requests and submits them with one system call per queue-depth of them.
 *
 * One store and one cached table are used by one thread at a time. */
#ifndef HX_EMBEDDING_SSD_H
#define HX_EMBEDDING_SSD_H

#include <stdbool.h>
#include <stdint.h>

/* ---- a row -> slot map (open addressing, linear probing) ---------------------------- */

typedef struct hx_emb_rowmap {
    int64_t *keys; /* -1: empty */
    int32_t *vals;
    uint64_t mask;
    int64_t direct; /* > 0: keys are [0, direct) and vals[key] their values (-1: absent); no keys */
} hx_emb_rowmap;

/* The slot where key's probe starts. */
static inline uint64_t hx_emb_rowmap_home(const hx_emb_rowmap *m, int64_t key)
{
    uint64_t z = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (z ^ (z >> 29)) & m->mask;
}

/* Asks the processor for the memory where key's probe starts (a loop over
 * many keys calls it a few keys ahead). */
static inline void hx_emb_rowmap_prefetch(const hx_emb_rowmap *m, int64_t key)
{
    if (m->direct) __builtin_prefetch(m->vals + key);
    else __builtin_prefetch(m->keys + hx_emb_rowmap_home(m, key));
}

/* Room for up to n keys; 0, or -1 when out of memory. */
int hx_emb_rowmap_init(hx_emb_rowmap *m, int64_t n);
/* A map of the keys [0, n) by an array of n values (4n bytes, one memory
 * access a call); 0, or -1 when out of memory. */
int hx_emb_rowmap_init_direct(hx_emb_rowmap *m, int64_t n);
void hx_emb_rowmap_free(hx_emb_rowmap *m);
void hx_emb_rowmap_clear(hx_emb_rowmap *m);
/* The value of key (>= 0), -1 when absent. */
int32_t hx_emb_rowmap_get(const hx_emb_rowmap *m, int64_t key);
/* key must be absent, and fewer than n keys present. */
void hx_emb_rowmap_put(hx_emb_rowmap *m, int64_t key, int32_t val);
void hx_emb_rowmap_del(hx_emb_rowmap *m, int64_t key);

/* ---- the store ------------------------------------------------------------------ */

typedef struct hx_emb_store hx_emb_store;

/* Injected failures, for tests (-1: none). */
typedef struct hx_emb_store_faults {
    int64_t short_write_row; /* a write of this row comes back half done */
    int64_t flip_read_row;   /* a read of this row arrives with one bit flipped */
} hx_emb_store_faults;

typedef struct hx_emb_store_config {
    const char *path;  /* the file: created, or reused when it holds a store of this shape */
    int64_t rows;      /* [1, 2^32 - 2] */
    size_t payload;    /* bytes of a row's params and state */
    uint64_t shape;    /* what the payload means (dim, dtype, optimizer): checked on reuse */
    int queue_depth;   /* requests in flight, 1..4096 */
    bool direct;       /* try O_DIRECT */
} hx_emb_store_config;

typedef struct hx_emb_store_stats {
    const char *engine;       /* "io_uring", "libaio", "sync" */
    bool direct;
    char reason[192];         /* why not io_uring / O_DIRECT ("" when both) */
    size_t rec;               /* bytes of a record */
    int64_t rows_on_disk;     /* rows with a record */
    int64_t slots;            /* record places in the file */
    uint64_t rows_read, rows_written, bytes_read, bytes_written;
    uint64_t prefetched;      /* rows read ahead by hx_emb_store_prefetch */
    uint64_t written_ahead;   /* rows written by hx_emb_store_write_ahead (in rows_written too) */
    uint64_t ahead_failed;    /* rows whose write-ahead failed (they kept their records) */
    double io_wait_s;         /* time spent waiting for completions */
    uint64_t generation;      /* of the last checkpoint committed to the file */
} hx_emb_store_stats;

hx_status hx_emb_store_open(const hx_emb_store_config *cfg, hx_emb_store **out, hx_emb_err *err);
/* Closes the file (it stays: checkpoints name it). */
void hx_emb_store_close(hx_emb_store *s);
size_t hx_emb_store_rec(const hx_emb_store *s);
bool hx_emb_store_has(const hx_emb_store *s, int64_t row);
/* Writes nw records and reads nr in one batch. wbuf, rbuf: buffers of nw,
 * nr records (rec bytes each, 4096-aligned); a record's payload starts
 * 16 bytes in (the store writes the head). Rows to read must have a
 * record (hx_emb_store_has) and differ from the rows written. On failure
 * (HX_ERR_IO naming the file, row, slot and offset; HX_ERR_CORRUPT for a
 * record whose checksum or row does not match) no write is applied (every
 * row keeps its previous record) and rbuf must not be used. */
hx_status hx_emb_store_batch(hx_emb_store *s, const int64_t *wrows, char *wbuf, int64_t nw,
                             const int64_t *rrows, char *rbuf, int64_t nr, hx_emb_err *err);
/* Starts reading rows (those with a record, not already read ahead) into
 * the store's read-ahead buffers and returns without waiting; a later
 * batch takes them from there. Up to the queue depth; the rest are skipped. */
void hx_emb_store_prefetch(hx_emb_store *s, const int64_t *rows, int64_t n);
/* Writing ahead: the cache writes rows it expects to evict soon while the
 * step computes, and they stay resident. write_ahead starts writing n
 * records (rows distinct, each with its record in buf as for a batch;
 * buf 4096-aligned and left alone until the last done) into fresh slots
 * and returns at once; it returns n, or 0 when it took nothing (a
 * write-ahead still in flight, out of memory, the file full). As each
 * write completes, the row's index moves to the new record and
 * done(ctx, row, true) is called; a failed write leaves the row's
 * previous record and calls done(ctx, row, false) (the cache keeps the row
 * dirty: its eviction writes it again, reporting any error then). The
 * completions are collected by poll (never waiting: call it between
 * steps), settle (waiting for all) and every other call of the store
 * (each settles first). */
typedef void (*hx_emb_store_ahead_fn)(void *ctx, int64_t row, bool ok);
int64_t hx_emb_store_write_ahead(hx_emb_store *s, const int64_t *rows, char *buf, int64_t n,
                                 hx_emb_store_ahead_fn done, void *ctx);
void hx_emb_store_poll(hx_emb_store *s);
void hx_emb_store_settle(hx_emb_store *s);
bool hx_emb_store_ahead_busy(const hx_emb_store *s);
/* Forgets rows: they read as never written (their slots are freed). */
void hx_emb_store_forget(hx_emb_store *s, const int64_t *rows, int64_t n);
void hx_emb_store_stats_get(const hx_emb_store *s, hx_emb_store_stats *out);
void hx_emb_store_set_faults(hx_emb_store *s, const hx_emb_store_faults *f);
/* Tests: the file's path and the byte offset of row's record (-1: none). */
const char *hx_emb_store_path(const hx_emb_store *s);
int64_t hx_emb_store_offset(const hx_emb_store *s, int64_t row);

/* Checkpoints. begin: flushes the file's data to disk and gives the index
 * to save (rows u32 slots, 0: no record), the file's id and the next
 * generation. end: after the checkpoint file is in place, records its
 * generation in the file's header and frees the slots that only the
 * checkpoint before the previous one held. adopt: takes a verified
 * checkpoint's index (HX_ERR_CORRUPT if it names slots the file does not
 * hold or one slot twice; HX_ERR_INVALID_ARGUMENT if it belongs to another
 * file or is older than the last two committed to it); nothing changes on
 * failure. */
hx_status hx_emb_store_ckpt_begin(hx_emb_store *s, const uint32_t **idx, uint64_t *file_id,
                                  uint64_t *gen, hx_emb_err *err);
hx_status hx_emb_store_ckpt_end(hx_emb_store *s, uint64_t gen, hx_emb_err *err);
hx_status hx_emb_store_adopt(hx_emb_store *s, const uint32_t *idx, uint64_t file_id, uint64_t gen,
                             hx_emb_err *err);

/* ---- the cached table ---------------------------------------------------------------
 * A table (hx_emb_ops "ssd") whose rows and optimizer state live in a
 * store and are worked on in a host cache: a local table of cache slots.
 * Every call first makes the rows it touches resident (misses read in one
 * batch, victims chosen by LFU with aging: a clock whose hand halves the
 * 4-bit counters of the slots it passes; dirty victims written back in the
 * same batch), then runs the local table's own code on slot ids, so
 * results are bitwise those of a local table. A call may touch at most
 * as many distinct rows as the cache holds. */

typedef struct hx_emb_ssd_stats {
    uint64_t lookups, hits;        /* rows asked for (distinct per lookup; an update or a
                                      read of rows adds only the rows it misses), found */
    uint64_t cold;                 /* misses of rows without a record: initialised, no I/O */
    uint64_t evictions, writebacks;
    int64_t cache_rows, resident, dirty;
    hx_emb_store_stats store;
} hx_emb_ssd_stats;

hx_status hx_emb_ssd_create(const hx_emb_table_config *cfg, hx_emb_table **out, hx_emb_err *err);
/* NULL unless t is a cached table. */
typedef struct hx_emb_ssd hx_emb_ssd;
hx_emb_ssd *hx_emb_as_ssd(hx_emb_table *t);
/* A local table, a cached one when cfg->ssd_path is set, or one behind a
 * device cache when cfg->device_cache_rows > 0 (cache.h). */
hx_status hx_emb_fixed_create(const hx_emb_table_config *cfg, hx_emb_table **out, hx_emb_err *err);

/* As hx_emb_local_lookup / _backward_update / _apply / _reset_rows. */
hx_status hx_emb_ssd_lookup(hx_emb_ssd *t, const hx_emb_query *q, hx_emb_oob oob,
                            _Atomic int64_t *oob_count, float *out, int64_t *argmax,
                            hx_emb_err *err);
hx_status hx_emb_ssd_backward_update(hx_emb_ssd *t, const hx_emb_query *q,
                                     const hx_emb_grad_input *gi, int64_t step, hx_emb_oob oob,
                                     hx_emb_workspace *ws, hx_emb_err *err);
hx_status hx_emb_ssd_apply(hx_emb_ssd *t, const hx_emb_sparse_grad *g, int64_t step, int nthreads,
                           hx_emb_oob oob, hx_emb_err *err);
void hx_emb_ssd_reset_rows(hx_emb_ssd *t, const int64_t *rows, int64_t n);
/* Rows in [0, rows) (-1: zero row / start state) as f32: params (n, dim),
 * state array k (n, dim or n); write sets params. */
hx_status hx_emb_ssd_read_rows(hx_emb_ssd *t, const int64_t *rows, int64_t n, float *out,
                               hx_emb_err *err);
hx_status hx_emb_ssd_read_state(hx_emb_ssd *t, int k, const int64_t *rows, int64_t n, float *out,
                                hx_emb_err *err);
hx_status hx_emb_ssd_write_rows(hx_emb_ssd *t, const int64_t *rows, int64_t n, const float *src,
                                hx_emb_err *err);
/* The same optimizer kind with new hyper-parameters; another kind is
 * HX_ERR_UNSUPPORTED (the records hold the creation kind's state). */
hx_status hx_emb_ssd_set_optim(hx_emb_ssd *t, const hx_emb_optim *optim, hx_emb_err *err);
/* Starts reading the rows of the next step ahead (rows outside [0, rows)
 * and rows already resident are skipped). */
void hx_emb_ssd_prefetch(hx_emb_ssd *t, const int64_t *rows, int64_t n);
/* Writes every dirty row back (they stay resident, clean). */
hx_status hx_emb_ssd_flush(hx_emb_ssd *t, hx_emb_err *err);
void hx_emb_ssd_stats_get(const hx_emb_ssd *t, hx_emb_ssd_stats *out);
hx_emb_local *hx_emb_ssd_cache(hx_emb_ssd *t);
hx_emb_store *hx_emb_ssd_store(hx_emb_ssd *t);
_Atomic int64_t *hx_emb_ssd_oob_counter(hx_emb_ssd *t);

/* Checkpoint of a cached table (dirty rows flushed, then the store's
 * index) with optional extra words (a dynamic table's map), and its load:
 * as hx_emb_local_save_with / _load_with, see emb_ssd_ckpt.c. */
hx_status hx_emb_ssd_save_with(hx_emb_ssd *t, const char *path, const int64_t *extra,
                               int64_t n_extra, hx_emb_err *err);
hx_status hx_emb_ssd_load_with(hx_emb_ssd *t, const char *path, hx_emb_extra_check check,
                               void *ctx, hx_emb_err *err);
/* Drops every cached row without writing it back (a load replaces them). */
void hx_emb_ssd_drop_cache(hx_emb_ssd *t);
/* A loaded checkpoint's initialiser, for rows without a record. */
void hx_emb_ssd_set_init(hx_emb_ssd *t, const hx_emb_init *init);
/* The table's description for its checkpoint header. */
void hx_emb_ssd_describe(const hx_emb_ssd *t, hx_dtype *dtype, hx_emb_optim_kind *optim,
                         hx_emb_init *init);

#endif
