/* Row caches in front of a table: the residency policy they share
 * (emb_slots.c) and the device cache of hot rows (emb_devcache.c). The
 * host cache of a table on disk (ssd.h) uses the same policy. Included by
 * embedding/embedding.h.
 *
 * The policy. A cache has C slots; a call maps its row ids to slots:
 * resident rows are hits, the others misses that get free slots or the
 * slots of victims chosen by LFU with aging (4-bit counters, +1 per call
 * that uses a slot, saturating at 15; a clock hand halves the counters of
 * the slots it passes and takes the first at zero; freq_max may lower the
 * saturation). The slots a call uses are pinned until its next call, so
 * a call may touch at most C distinct rows. The resident rows the next
 * step names (hx_emb_slots_want, from the read-ahead) are spared too while
 * other slots qualify: a call that would need them unpins them all first.
 * The owner moves the data: it writes dirty victims back and fills the
 * misses' slots between hx_emb_slots_victims and hx_emb_slots_install.
 *
 * One cache is used by one thread at a time (its table's lock). */
#ifndef HX_EMBEDDING_CACHE_H
#define HX_EMBEDDING_CACHE_H

#include <stdbool.h>
#include <stdint.h>

/* LFU counters saturate here by default: a hand halves them in 4 passes. */
#define HX_EMB_FREQ_MAX 15

/* A query over the slots its rows were mapped to: ids from slots (its n
 * positions; -1 for padding), and the offsets of an i32 query's bags
 * widened to i64 into slots + n, which must hold hx_emb_slot_query_len(q)
 * values in all. The row caches run the host table's code on mq. */
int64_t hx_emb_slot_query_len(const hx_emb_query *q);
void hx_emb_slot_query(const hx_emb_query *q, int64_t *slots, hx_emb_query *mq);

typedef struct hx_emb_slots {
    int64_t C;
    uint8_t freq_max;     /* where the counters saturate (1..15; 1: a second-chance clock) */
    int64_t *slot_row;    /* row in the slot, -1: free */
    uint8_t *freq, *dirty;
    uint64_t *stamp;      /* the call that last used the slot */
    uint64_t call;
    uint64_t *want;       /* the read-ahead that named the resident row: spared while it is want_gen */
    uint64_t want_gen;
    int64_t nwant;        /* resident rows want_gen names (a spared row is never evicted) */
    int64_t nused, nwant_used; /* resident slots the call uses; of them spared */
    int64_t hand;
    int64_t *free_slots, n_free;
    hx_emb_rowmap map;    /* row -> slot */
    /* the current call's misses: rows, then (after install) their slots */
    int64_t *miss, *mslot, *victim;
    int64_t nmiss, nfree, nv;
    int64_t cap;
    hx_emb_rowmap missmap;
    int64_t missmap_cap;
    uint64_t lookups, hits, evictions, writebacks;
} hx_emb_slots;

/* C slots, all free (*s is overwritten: call it first), for rows [0,
 * rows) found through an array of rows values (rows 0: a hash map of C
 * entries); 0, or -1 when out of memory (s may then hold part of its
 * memory: hx_emb_slots_free it). */
int hx_emb_slots_init(hx_emb_slots *s, int64_t C, int64_t rows);
void hx_emb_slots_free(hx_emb_slots *s);
/* Every slot free, nothing dirty (counts kept). */
void hx_emb_slots_drop(hx_emb_slots *s);
/* Room for a call of n positions; false when out of memory. */
bool hx_emb_slots_room(hx_emb_slots *s, int64_t n);
/* Starts a call (unpins the previous one's slots). */
void hx_emb_slots_begin(hx_emb_slots *s);
/* Starts a read-ahead: the rows the previous one named are spared no more. */
void hx_emb_slots_want_begin(hx_emb_slots *s);
/* The slot of row r when resident (then spared from eviction until the
 * next hx_emb_slots_want_begin, unless a call needs its slot), else -1. */
int32_t hx_emb_slots_want(hx_emb_slots *s, int64_t r);
/* Maps n ids (after begin, with room for n): out[j] = the slot of a
 * resident row (hint, when not NULL, guesses it: hint[j] is taken when
 * that slot holds ids[j]'s row, else the row is looked up), -1 for the padding id (when has_padding), -2 for ids
 * outside [0, rows), -3 - m for the call's m-th miss (rows in miss[m]).
 * lookup = true counts every distinct row of the call and its hits;
 * otherwise only the misses count as lookups. Returns the distinct rows
 * the call touches: more than C, and the caller must fail (after
 * hx_emb_slots_begin again, which unpins them). */
int64_t hx_emb_slots_map(hx_emb_slots *s, const void *ids, hx_dtype dt, int64_t n, int has_padding,
                         int64_t padding_id, int64_t rows, bool lookup, const int32_t *hint, int64_t *out);
/* As hx_emb_slots_map when out (n slots, from the previous call's map)
 * still holds the slots of these ids, every row resident: counts the call
 * as that would (frequencies, hits) without hashing an id, and returns
 * true; false, and nothing changed, when an id differs or its row has left
 * its slot (then map them). */
bool hx_emb_slots_remap(hx_emb_slots *s, const void *ids, hx_dtype dt, int64_t n, int has_padding,
                        int64_t padding_id, int64_t rows, bool lookup, const int64_t *out);
/* Chooses the slots for the misses: free ones first (nfree), then victims
 * (victim[0 .. nv), still resident: write the dirty ones back now). */
void hx_emb_slots_victims(hx_emb_slots *s);
/* After a failed write-back or read: the victims stay resident as they were. */
void hx_emb_slots_cancel(hx_emb_slots *s);
/* Evicts the victims and gives each miss m its slot mslot[m] (frequency 1,
 * clean, pinned): fill them now. */
void hx_emb_slots_install(hx_emb_slots *s);
/* The misses of out (from hx_emb_slots_map) to their slots. */
void hx_emb_slots_resolve(const hx_emb_slots *s, int64_t *out, int64_t n);

/* ---- the device cache of hot rows ------------------------------------------------------
 * A table (hx_emb_ops "devcache") in front of a backing store: its hot
 * rows and their optimizer state live in a cache of C slots (a local table
 * of C rows: the device's memory; the emulated device runs the host
 * kernels on it), and every call makes the rows it touches resident, then
 * runs the local table's own lookup or update on the slot ids, so its
 * results are bitwise those of the table behind it. The store is a host
 * local table (hx_emb_devcache_create) or, for a server-mode table with a
 * single worker, the servers (embedding/ps_devcache.c: the worker owns its
 * cached rows, the servers hold them between stays). The slots are host
 * pages until a session binds them to its emulated device's memory
 * (hx_emb_devcache_bind), where they count against the device's cap. Misses are read from
 * the store in one batch per call (params and state: a lazy row not
 * yet written comes in as its initial value and start state), dirty
 * victims written back to it with their state in the same batch. Save
 * writes every dirty row back and saves the store; load, a new
 * optimizer and writes of rows drop the cache after writing it back. */

/* A device cache's backing store. Records are rows as
 * hx_emb_local_pack_row lays them out (ns state arrays of the store's
 * optimizer; one float each for row-wise Adagrad), `stride` bytes apart;
 * rows are the table's (global) rows. */
typedef struct hx_emb_devstore_ops {
    bool persistent; /* rows outlive the cache (the servers): written back when it is freed */
    /* Records of rows[0 .. n) into recs, row i's at index at[i] (at NULL:
     * i), and at the same index of cold a 1 for a lazy row never written
     * (nothing copied: its slot takes the row's initial value and start
     * state). On failure nothing of the cache changed. */
    hx_status (*read)(hx_emb_table *back, const int64_t *rows, int64_t n, const int32_t *at, char *recs,
                      size_t stride, uint8_t *cold, hx_emb_err *err);
    /* read in two halves (NULL: none; the read-ahead then reads at once):
     * start asks for rows[0 .. n) and sets *pending; finish takes the
     * records as read does and frees pending, also on failure. Between
     * them the cache makes no other call of the store but write. */
    hx_status (*read_start)(hx_emb_table *back, const int64_t *rows, int64_t n, void **pending, hx_emb_err *err);
    hx_status (*read_finish)(hx_emb_table *back, void *pending, const int32_t *at, char *recs, size_t stride,
                             uint8_t *cold, hx_emb_err *err);
    /* The records of rows[0 .. n) stored. */
    hx_status (*write)(hx_emb_table *back, const int64_t *rows, int64_t n, const char *recs, size_t stride,
                       hx_emb_err *err);
    hx_status (*save)(hx_emb_table *back, const char *path, hx_emb_err *err);
    hx_status (*load)(hx_emb_table *back, const char *path, hx_emb_err *err);
    hx_status (*set_optim)(hx_emb_table *back, const hx_emb_optim *optim, int nthreads, hx_emb_err *err);
    /* Called by every lookup and update through the cache (NULL: nothing
     * to do): the servers hear that the worker lives, even while its
     * cache serves every row. */
    void (*touch)(hx_emb_table *back);
} hx_emb_devstore_ops;

typedef struct hx_emb_devcache hx_emb_devcache;

typedef struct hx_emb_devcache_stats {
    int64_t cache_rows, resident, dirty;
    uint64_t lookups, hits;      /* as hx_emb_ssd_stats */
    uint64_t rows_in, rows_out;  /* rows (with state) read from / written back to the store */
    uint64_t rows_init;          /* misses on lazy rows never written: initialised in the slot,
                                    nothing copied */
    uint64_t bytes_in, bytes_out;
    uint64_t bytes_exchanged;    /* several workers (ps_hot.c): bytes this worker sent the others
                                    (rows touched, the cached ones' gradients) */
    uint64_t prefetched;         /* rows copied in ahead by hx_emb_devcache_prefetch */
    uint64_t evictions;
    int64_t calls;               /* calls that made rows resident */
    size_t bytes;                /* the slots: rows and their state */
    int on_device;               /* 1: the slots are in a device's memory (bound) */
} hx_emb_devcache_stats;

/* ---- a cache's slots in a device's memory (emb_devmem.c) ------------------------------
 * The slots of a cache (a local table of C rows: rows and optimizer
 * state) live in host pages until a session moves them into its emulated
 * device's memory (hx_emb_mem: counted against the device's cap, named in
 * its report), and back when the session is freed. The one-worker cache
 * (hx_emb_devcache_bind) and the hot rows several ranks replicate
 * (hot.h's hx_emb_hot_bind) both move theirs with these. */
typedef struct hx_emb_devmem {
    hx_emb_local *spare; /* in a device's memory: the host-page slots, kept so that taking the
                            slots back cannot fail; else NULL */
    char what[200];      /* names the slots in the device's report */
} hx_emb_devmem;

/* Moves *slots into mem's memory (mem->what names them there), rows,
 * state and the initial value cold rows take copied: nothing in the cache
 * changes but where its slots live. mem NULL takes them back to host
 * pages (never fails). On failure (the allocator's status: a device's
 * cap; HX_ERR_STATE when already moved) *slots is as it was. */
hx_status hx_emb_devmem_move(hx_emb_local **slots, hx_emb_devmem *m, const hx_emb_mem *mem, hx_emb_err *err);
/* The slots' optimizer (as hx_emb_local_set_optim), and their host-page
 * copy's while they are in a device's memory. */
hx_status hx_emb_devmem_set_optim(hx_emb_local *slots, hx_emb_devmem *m, const hx_emb_optim *o, hx_emb_err *err);
/* Frees the host-page copy (the slots themselves are the caller's). */
void hx_emb_devmem_free(hx_emb_devmem *m);

/* Tests: write-backs to skip (a broken cache that must fail them). */
typedef struct hx_emb_devcache_faults {
    int64_t skip_writeback_row; /* a write-back of this row is dropped; -1: none */
} hx_emb_devcache_faults;

/* A host local table as cfg says (cfg->device_cache_rows > 0) with a cache
 * of min(device_cache_rows, rows) slots in front. */
hx_status hx_emb_devcache_create(const hx_emb_table_config *cfg, hx_emb_table **out,
                                 hx_emb_err *err);
/* A cache of min(cfg->device_cache_rows, rows) slots in front of `back`
 * (cfg: its rows, dim, dtype, initialiser, optimizer, oob), which the
 * cache owns once this succeeds (on failure the caller keeps it);
 * oob_count counts the lookups' ids outside the table. */
hx_status hx_emb_devcache_create_over(const hx_emb_table_config *cfg, hx_emb_table *back,
                                      const hx_emb_devstore_ops *ops, _Atomic int64_t *oob_count,
                                      hx_emb_table **out, hx_emb_err *err);
/* NULL unless t is a device-cached table. */
hx_emb_devcache *hx_emb_as_devcache(hx_emb_table *t);
/* The host table behind the cache (rows as of the last write-back); NULL
 * when the store is not a host table. */
hx_emb_local *hx_emb_devcache_host(hx_emb_devcache *t);
/* The table behind the cache (its store's). */
hx_emb_table *hx_emb_devcache_back(hx_emb_devcache *t);
/* As hx_emb_local_lookup / _backward_update / _apply / _reset_rows. */
hx_status hx_emb_devcache_lookup(hx_emb_devcache *t, const hx_emb_query *q, hx_emb_oob oob,
                                 _Atomic int64_t *oob_count, float *out, int64_t *argmax,
                                 hx_emb_err *err);
hx_status hx_emb_devcache_backward_update(hx_emb_devcache *t, const hx_emb_query *q,
                                          const hx_emb_grad_input *gi, int64_t step,
                                          hx_emb_oob oob, hx_emb_workspace *ws, hx_emb_err *err);
hx_status hx_emb_devcache_apply(hx_emb_devcache *t, const hx_emb_sparse_grad *g, int64_t step,
                                int nthreads, hx_emb_oob oob, hx_emb_err *err);
void hx_emb_devcache_reset_rows(hx_emb_devcache *t, const int64_t *rows, int64_t n);
/* Reads the stored rows of the next step (the step after the one that
 * runs now; rows outside [0, rows) skipped) into a staging area now, in
 * one batch, so that the next step's misses on them are copies within the
 * device. Rows already resident are not read: they are spared from
 * eviction until the next read-ahead (unless a call needs their slots),
 * and their slots kept for the next step's mapping to try first. Up to C
 * rows are staged at a time (the rest skipped); rows staged by the
 * read-ahead before the previous one and not named or used since are
 * dropped (their step has run). On a failed read (the servers) nothing
 * more is staged. A store that reads in two halves (the servers) is only
 * asked now: the rows are taken in when a call needs one of them or must
 * read others, by the next read-ahead, or before a flush (and so a save,
 * drop or free), and a failed read fails that call. */
hx_status hx_emb_devcache_prefetch(hx_emb_devcache *t, const int64_t *rows, int64_t n, hx_emb_err *err);
/* Takes in the read-ahead under way, then writes every dirty row back to
 * the store in one batch (they stay, clean); on failure they stay dirty. */
hx_status hx_emb_devcache_flush(hx_emb_devcache *t, hx_emb_err *err);
/* Writes every dirty row back and empties the cache (on a failed
 * write-back the cache is emptied all the same: those rows are lost, the
 * store holding their last write-back). */
hx_status hx_emb_devcache_drop(hx_emb_devcache *t, hx_emb_err *err);
/* Writes the cache back, empties it, then sets the optimizer of the store
 * and the cache (as hx_emb_local_set_optim). */
hx_status hx_emb_devcache_set_optim(hx_emb_devcache *t, const hx_emb_optim *optim, int nthreads,
                                    hx_emb_err *err);
void hx_emb_devcache_stats_get(const hx_emb_devcache *t, hx_emb_devcache_stats *out);
/* Moves the slots into mem's memory, or (mem NULL) back to host pages
 * (hx_emb_devmem_move: their rows and state go with them, so nothing is
 * written back or read again). */
hx_status hx_emb_devcache_bind(hx_emb_devcache *t, const hx_emb_mem *mem, hx_emb_err *err);
/* Bytes of the slots (rows and optimizer state). */
size_t hx_emb_devcache_bytes(const hx_emb_devcache *t);
void hx_emb_devcache_set_faults(hx_emb_devcache *t, const hx_emb_devcache_faults *f);

#endif
