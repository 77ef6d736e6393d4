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
    hx_emb_table *rept;       /* the replica: C slots, rows and state */
    hx_emb_local *rep;
    hx_emb_slots slots;       /* row -> slot, LFU, dirty: changed since the owner had it */
    int64_t C, rows, dim;
    hx_emb_rowmap seen[2];    /* the rows some member touched: in this step, in the last one */
    int64_t seen_cap[2];
    int cur;
    int64_t *fill_row, *fill_slot, nfill; /* admitted, to be filled from their owners */
    hx_emb_workspace *ws;
    float *tmp;
    hx_status broken;         /* a fill failed: the slots are not the owners' rows */
    uint64_t lookups, hits, rows_in, rows_out, rows_init, bytes_in, bytes_out, evictions;
    int64_t calls;
} hx_emb_hot;

/* A cache of the rows of a table of tc (device_cache_rows of them, at
 * most its rows) over a duplicate of comm (collective over comm). what
 * and who are static strings for messages. */
hx_status hx_emb_hot_create(hx_comm *comm, const hx_emb_table_config *tc, const char *what, const char *who,
                            hx_emb_hot **out, hx_emb_err *err);
void hx_emb_hot_free(hx_emb_hot *h);
/* The slot of a row (the table's), -1 when not cached. */
int32_t hx_emb_hot_slot(const hx_emb_hot *h, int64_t row);
/* A slot's row (k HX_EMB_SHARD_ROWS, dim floats) or state array k. */
void hx_emb_hot_read(hx_emb_hot *h, int k, int32_t slot, float *out);
/* HX_ERR_STATE once a failed fill left slots without their rows. */
hx_status hx_emb_hot_check(const hx_emb_hot *h, hx_emb_err *err);
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
 * step's rows: evict(ctx, victims) before the slots change (on failure
 * they do not), the admitted rows left in fill_row / fill_slot (nfill)
 * for the caller to fill (hx_emb_hot_take) once their owners applied the
 * step. Collective over the group. */
hx_status hx_emb_hot_update(hx_emb_hot *h, const hx_emb_sparse_grad *g, int64_t counter, int64_t step,
                            const signed char *skip, hx_emb_hot_evict_fn evict, void *ctx, hx_emb_err *err);

/* The dirty rows among slots[0 .. n) (NULL: every slot) packed: their rows
 * into rows, their slots into at, their records into recs (room for n, or
 * C, of each); returns how many. */
int64_t hx_emb_hot_dirty(const hx_emb_hot *h, const int64_t *slots, int64_t n, int64_t *rows, int64_t *at,
                         char *recs);
/* Slots at[0 .. m) written back: clean, counted. */
void hx_emb_hot_cleaned(hx_emb_hot *h, const int64_t *at, int64_t m);
/* Admitted slot fill_slot[m] takes its owner's record (cold: the row was
 * never written, it takes its initial value and start state); counted. */
void hx_emb_hot_take(hx_emb_hot *h, int64_t m, const char *rec, bool cold);
/* Every slot empty (the rows written back first: the caller's). */
void hx_emb_hot_drop(hx_emb_hot *h);
/* Counts: bytes_exchanged is the group's exchange's. */
void hx_emb_hot_stats(const hx_emb_hot *h, hx_emb_devcache_stats *out);

#endif
