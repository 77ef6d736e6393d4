/* Hot rows replicated on every rank of a group (device_cache_rows where
 * several ranks train one table: server mode's workers, ps_hot.c, and a
 * collective sharded table's ranks, shard_hot.c). Each member keeps the
 * same C rows, with their optimizer state, in a local table of C slots
 * (the device's memory); the rows' owners (servers, or the shards) hold
 * the rest and a stale copy of the cached rows.
 *
 * Every member holds the same rows. Membership changes only inside an
 * update, from what every member learns there: each member's touched
 * rows are all-gathered over the group's own communicator (a duplicate),
 * and every member feeds the same list to the same LFU policy (cache.h's
 * slots): the touched cached rows, then the rows some member touches a
 * second time, another member in this step or any in the next (a row
 * seen once is seldom worth a fetch), at most C. So the members never
 * disagree.
 *
 * A cached row's lookup reads the slot. Its gradient: the members
 * all-gather their touched cached rows' gradients and each runs one
 * backward_update of the replica over them, concatenated in member order:
 * what the owners do with the gradients they receive (ps_serve.c's
 * apply_steps, shard_table.c's update: the senders' rows concatenated in
 * rank order and one backward_update, which sums each id's rows in
 * position order and runs the optimizer on the rows named). So the
 * replicas stay bitwise equal to each other and to the rows the owners
 * would hold without the cache. The caller sends the other rows to their
 * owners as always; it writes the evicted rows that changed back to their
 * owners (hx_emb_hot_update's evict) and fills the admitted slots from
 * their owners once these have applied the step (hx_emb_hot_take).
 *
 * The replica's slots are host pages until a session binds them to its
 * emulated device's memory (hx_emb_hot_bind, as the one-worker cache's:
 * cache.h's hx_emb_devmem).
 *
 * Faults. A member whose fill or write-back failed (hx_emb_hot_fail) is
 * broken: the rows it lost are no longer cached there (a lookup asks
 * their owners, which hold them), and its next update still takes part
 * in the exchange's first round, carrying its status, so that every
 * member fails that update at once naming it and the cause, none waiting
 * for a timeout. A broken cache stays broken: recreate the table and
 * load its last checkpoint.
 *
 * Threads: none of its own; the caller serialises the calls (its lock). */
#ifndef HX_EMBEDDING_HOT_H
#define HX_EMBEDDING_HOT_H

#include "embedding/embedding.h"
#include "embedding/cache.h"
#include "dist/dist.h"

typedef struct hx_emb_hot {
    hx_comm *comm;            /* the group's (a duplicate: the exchange's alone) */
    int W, w;
    const char *what;         /* names the cache in messages */
    const char *who;          /* a member, in messages: "worker", "rank" */
    hx_emb_local *rep;        /* the replica: C slots, rows and state */
    hx_emb_devmem dm;         /* where rep lives (a device's memory: bound) */
    hx_emb_slots slots;       /* row -> slot, LFU, dirty: changed since the owner had it */
    int64_t C, rows, dim;
    hx_emb_rowmap seen[2];    /* the rows some member touched: in this step, in the last one */
    int64_t seen_cap[2];
    int cur;
    int64_t *fill_row, *fill_slot, nfill; /* admitted, to be filled from their owners */
    hx_emb_workspace *ws;
    float *tmp;
    char *rec;                /* one row's record (any optimizer's) */
    hx_status broken;         /* a fill or write-back failed: the slots are not the owners' rows */
    char why[200];            /* how (broken) */
    uint8_t *lost;            /* per slot: its row never came in (broken) */
    bool torn;                /* broken in the replica's own step: its rows are not to be read */
    uint64_t lookups, hits, rows_in, rows_out, rows_init, bytes_in, bytes_out, evictions;
    int64_t calls;
} hx_emb_hot;

/* A cache of the rows of a table of tc (device_cache_rows of them, at
 * most its rows) over a duplicate of comm (collective over comm). what
 * and who are static strings for messages. */
hx_status hx_emb_hot_create(hx_comm *comm, const hx_emb_table_config *tc, const char *what, const char *who,
                            hx_emb_hot **out, hx_emb_err *err);
void hx_emb_hot_free(hx_emb_hot *h);
/* The slot of a row (the table's), -1 when not cached (or lost). */
int32_t hx_emb_hot_slot(const hx_emb_hot *h, int64_t row);
/* A slot's row (k HX_EMB_SHARD_ROWS, dim floats) or state array k. */
void hx_emb_hot_read(hx_emb_hot *h, int k, int32_t slot, float *out);
/* HX_ERR_STATE once a failed fill or write-back broke the cache. */
hx_status hx_emb_hot_check(const hx_emb_hot *h, hx_emb_err *err);
/* HX_ERR_STATE when the replica's rows cannot be read (broken in its own
 * step); a cache broken otherwise still serves the rows it holds. */
hx_status hx_emb_hot_readable(const hx_emb_hot *h, hx_emb_err *err);
/* This member's cache breaks (st, why: how): the admitted rows not yet
 * filled are lost (fill_row/fill_slot; nfill 0 after); its next update
 * fails every member (hot.h's Faults). */
void hx_emb_hot_fail(hx_emb_hot *h, hx_status st, const char *why);
/* The replica's slots into mem's memory, or (mem NULL) back to host
 * pages (hx_emb_devmem_move: their rows and state go with them). */
hx_status hx_emb_hot_bind(hx_emb_hot *h, const hx_emb_mem *mem, hx_emb_err *err);
/* The replica's optimizer (the caller empties it: hx_emb_hot_drop). */
hx_status hx_emb_hot_set_optim(hx_emb_hot *h, const hx_emb_optim *o, hx_emb_err *err);
/* A lookup's distinct rows and the cached ones among them. */
void hx_emb_hot_count(hx_emb_hot *h, int64_t lookups, int64_t hits);
/* Bytes of a row's record (hx_emb_local_pack_row's: params and state). */
size_t hx_emb_hot_record(const hx_emb_hot *h);

/* Writes the changed rows of slots[0 .. n) back to their owners (as the
 * caller does it); they are clean once it returns HX_OK. */
typedef hx_status (*hx_emb_hot_evict_fn)(void *ctx, const int64_t *slots, int64_t n, hx_emb_err *err);

/* Entries of g whose row is cached (skip[i] == 0: sent to its owner)
 * marked skip[i] = -1: their gradients go to the group instead. */
void hx_emb_hot_mark(const hx_emb_hot *h, const hx_emb_sparse_grad *g, signed char *skip);
/* Update number `counter` (every member's must agree; so must step, the
 * optimizer's t) of gradient g, marked (hx_emb_hot_mark: skip[i] < 0 the
 * cached rows' entries, 0 the others, which the caller sends to their
 * owners): the members' exchange, the replica's step; then the next
 * step's rows: evict(ctx, victims) before the slots change, the
 * admitted rows left in fill_row / fill_slot (nfill) for the caller to
 * fill (hx_emb_hot_take) once their owners applied the step. A failure
 * after the exchange (a write-back's) breaks this member's cache; a
 * broken member fails every member in the exchange's first round, before
 * anything changes. Collective over the group. */
hx_status hx_emb_hot_update(hx_emb_hot *h, const hx_emb_sparse_grad *g, int64_t counter, int64_t step,
                            const signed char *skip, hx_emb_hot_evict_fn evict, void *ctx, hx_emb_err *err);

/* The dirty rows among slots[0 .. n) (NULL: every slot) packed: their rows
 * into rows, their slots into at, their records into recs (room for n, or
 * C, of each); returns how many. */
int64_t hx_emb_hot_dirty(const hx_emb_hot *h, const int64_t *slots, int64_t n, int64_t *rows, int64_t *at,
                         char *recs);
/* Slots at[0 .. m) written back: clean, counted. */
void hx_emb_hot_cleaned(hx_emb_hot *h, const int64_t *at, int64_t m);
/* Each dirty row among slots[0 .. n) (NULL: every slot) to put(ctx, row,
 * its record), one at a time, then clean and counted: no memory taken, so
 * it cannot fail. */
void hx_emb_hot_write_each(hx_emb_hot *h, const int64_t *slots, int64_t n,
                           void (*put)(void *ctx, int64_t row, const char *rec), void *ctx);
/* Admitted slot fill_slot[m] takes its owner's record (cold: the row was
 * never written, it takes its initial value and start state); counted. */
void hx_emb_hot_take(hx_emb_hot *h, int64_t m, const char *rec, bool cold);
/* Every slot empty (the rows written back first: the caller's). */
void hx_emb_hot_drop(hx_emb_hot *h);
/* Counts: bytes_exchanged is the group's exchange's. */
void hx_emb_hot_stats(const hx_emb_hot *h, hx_emb_devcache_stats *out);

#endif
