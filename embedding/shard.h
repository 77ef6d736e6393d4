/* Tables sharded over the ranks of a communicator (hetex.h's
 * hx_embedding_config.comm), collective mode: every rank is a worker and
 * an owner (TorchRec, HugeCTR). Included by embedding/embedding.h.
 *
 * Where an id lives. A fixed table (ROWS, MODULO: ids already mapped to
 * rows r) sharded row-wise keeps row r on rank r mod N as its local row
 * r div N, and that local row starts as global row r would (the
 * initialiser's row_stride/row_offset); a DYNAMIC table keeps key k on
 * rank XXH3(k) mod N, in that rank's own id map (capacity ceil(rows / N),
 * frequency filter and expiry per shard; its checkpoint loads at another
 * layout with every key re-hashed to its new owner). Table-wise, the whole table is
 * one local table on one rank. A rank may hold no rows of a table.
 *
 * A lookup (the table's lookup_rows): the caller's ids, de-duplicated
 * (first position first), grouped by owner; an exchange of counts and of
 * each rank's verdict on its own input (an id outside a ROWS table under
 * OUT_OF_RANGE_ERROR fails every rank before anything moves: HX_ERR_INDEX
 * naming the id on the rank that fed it, naming that rank on the others);
 * an all-to-all-v of the unique ids; the owners read the rows with the
 * local table's lookup (a DYNAMIC training lookup assigns rows there); an
 * all-gather of the owners' statuses, then an all-to-all-v of the rows
 * back; the rows pooled here by the local lookup code over the unique rows, so bags
 * come out as a local table's would. The sparse update: each unique id's
 * summed gradient (hx_emb_backward) to its owner, which sums the ranks'
 * rows per id in rank order and applies the table's optimizer once (the
 * local fused backward_update over a ROWS query of what arrived), then a
 * status exchange. Every rank must call the same table's exchanges in the
 * same order; a call that meets another kind of call on a peer fails with
 * HX_ERR_STATE naming both. Each table has its own duplicate of the
 * communicator, so tables never wait for one another.
 *
 * Threads: a shard's calls take its lock; its exchanges run on the
 * calling thread. */
#ifndef HX_EMBEDDING_SHARD_H
#define HX_EMBEDDING_SHARD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct hx_emb_shard hx_emb_shard;

typedef struct hx_emb_shard_config {
    hx_comm *comm;          /* the caller's; the shard makes its own duplicate */
    bool table_wise;        /* false: row-wise */
    int owner;              /* table-wise: the rank that holds the table */
    bool dynamic;           /* ids are keys (a DYNAMIC table), else rows */
    hx_emb_table_config tc; /* the whole table's: rows is every shard's together */
    hx_emb_idmap_config mc; /* dynamic: the whole table's map (capacity = tc.rows) */
    size_t rank_bytes;      /* > 0: creation fails on every rank when a rank's part
                               allocates more (hx_emb_shard_bytes), and a DYNAMIC
                               part's map grows only within it */
    bool counted;           /* count the part's bytes (hx_emb_shard_budget) even
                               without rank_bytes: a parent cap is linked later */
} hx_emb_shard_config;

/* A sharded table: collective over cfg->comm (every rank calls it with the
 * same configuration; a rank whose configuration differs fails every rank
 * with HX_ERR_INVALID_ARGUMENT naming the first rank that differs). */
hx_status hx_emb_shard_create(const hx_emb_shard_config *cfg, hx_emb_table **out,
                              hx_emb_err *err);
/* NULL unless t is a sharded table. */
hx_emb_shard *hx_emb_as_shard(hx_emb_table *t);
/* This rank's part: a local or dynamic table, NULL where it holds no rows. */
hx_emb_table *hx_emb_shard_part(hx_emb_shard *s);
/* The local table holding this rank's rows and state (a dynamic part's
 * storage), NULL where it holds none. */
hx_emb_local *hx_emb_shard_local(hx_emb_shard *s);
/* The bytes this rank's part has allocated: its rows and optimizer state
 * (a lazy table's ready bits) and a DYNAMIC part's id map (as it is now:
 * it grows with the keys, within rank_bytes where the shard is capped:
 * embedding.h's hx_emb_idmap_set_budget); 0 where it holds none. */
size_t hx_emb_shard_bytes(hx_emb_shard *s);
/* Puts the shard's counted bytes (rank_bytes or counted) under parent as
 * well, which has been charged them (hx_emb_shard_bytes); from then on a
 * DYNAMIC map grows only within both, and freeing the shard gives them
 * back to parent. */
void hx_emb_shard_budget_under(hx_emb_shard *s, hx_emb_budget *parent);
int hx_emb_shard_rank(const hx_emb_shard *s);
int hx_emb_shard_size(const hx_emb_shard *s);
bool hx_emb_shard_table_wise(const hx_emb_shard *s);
/* The optimizer every shard applies (also where this rank holds none). */
const hx_emb_optim *hx_emb_shard_optim(const hx_emb_shard *s);
/* Sets it on every shard (each rank calls it: a local change, no
 * exchange). */
hx_status hx_emb_shard_set_optim(hx_emb_shard *s, const hx_emb_optim *o, int nthreads,
                                 hx_emb_err *err);

/* A device cache of s's hot rows (its configuration's device_cache_rows;
 * embedding/shard_hot.c): the same rows, with their optimizer state, on
 * every rank, whose lookups read them there and whose updates apply every
 * rank's gradients to them in rank order, as their owners would, so
 * results are bitwise those without it. Collective (every rank's
 * verdict); HX_ERR_UNSUPPORTED for a DYNAMIC table. */
hx_status hx_emb_shard_hot_create(hx_emb_shard *s, hx_emb_err *err);
/* Its counts; false where s has none. */
bool hx_emb_shard_hot_stats(hx_emb_shard *s, hx_emb_devcache_stats *out);
/* Its replica's slots into mem's memory, or (mem NULL) back to host pages
 * (hx_emb_hot_bind; this rank's alone); none: nothing. */
hx_status hx_emb_shard_hot_bind(hx_emb_shard *s, const hx_emb_mem *mem, hx_emb_err *err);

/* Collective reads and writes of rows named as the ops name them (each
 * rank its own ids; DYNAMIC: keys). read: k HX_EMB_SHARD_ROWS the rows
 * (dim floats each), else optimizer state array k (width floats each: dim, or 1 for
 * row-wise Adagrad); an id outside a ROWS table fails every rank
 * (HX_ERR_INDEX). write: sets rows (dim floats each, the last write of an
 * id wins, rank order across ranks); a DYNAMIC key without a row fails
 * every rank with HX_ERR_NOT_FOUND before anything is written. */
#define HX_EMB_SHARD_ROWS (-0x7fffffff)
hx_status hx_emb_shard_read(hx_emb_shard *s, int k, const int64_t *ids, int64_t n, float *out,
                            hx_emb_err *err);
hx_status hx_emb_shard_write(hx_emb_shard *s, const int64_t *ids, int64_t n, const float *rows,
                             hx_emb_err *err);

/* Whether path holds a sharded table's checkpoint manifest. */
bool hx_emb_shard_is_manifest(const char *path);
/* A fixed table of one process loads a sharded checkpoint (any number of
 * shards, row-wise or table-wise): every shard file checked against the
 * manifest and read first; dst changes only once all of them were. */
hx_status hx_emb_shard_load_local(hx_emb_local *dst, const char *path, hx_emb_err *err);
/* A DYNAMIC table of one process (rows in memory) loads a DYNAMIC table's
 * sharded checkpoint (any number of shards, either layout): every key of
 * every shard with its count, clock, row and state, rows handed out anew
 * in key order; dst changes only once every shard was read and the keys
 * with a row fit its rows (else HX_ERR_OUT_OF_MEMORY). */
hx_status hx_emb_shard_load_dynamic(hx_emb_table *dst, const char *path, hx_emb_err *err);

/* What the exchanges moved, this rank, since creation. */
typedef struct hx_emb_shard_stats {
    int64_t exchanges;        /* started: lookups, updates, reads and writes of rows */
    int64_t ids_in;           /* positions the callers gave */
    int64_t ids_sent;         /* ids sent to owners (unique per call unless de-dup is off) */
    int64_t ids_remote;       /* of those, to other ranks: each a row back (lookups) or a
                                 gradient row out (updates) */
    int64_t hot_rows;         /* a device cache's rows to or from other ranks: its cached rows'
                                 gradients to every other rank, admitted rows from their owners */
    uint64_t bytes_sent;      /* to other ranks, all messages */
    int64_t out_of_range;     /* ids this rank fed outside a fixed table (OOB_ZERO) */
} hx_emb_shard_stats;
void hx_emb_shard_stats_get(const hx_emb_shard *s, hx_emb_shard_stats *out);
/* Benchmarks: de-dup off makes a lookup send every position's id (and get
 * its row back); updates send each id's summed gradient either way. */
void hx_emb_shard_set_dedup(hx_emb_shard *s, bool on);

#endif
