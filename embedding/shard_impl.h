/* The sharded table's state and its exchanges, shared by embedding/shard_*.c
 * only (the rest of the library sees embedding/shard.h). */
#ifndef HX_EMBEDDING_SHARD_IMPL_H
#define HX_EMBEDDING_SHARD_IMPL_H

#include "embedding/embedding.h"
#include "embedding/hot.h"
#include "dist/dist.h"

#include <pthread.h>

struct hx_emb_shard {
    hx_emb_table base;      /* the whole table's rows and dim */
    hx_comm *comm;          /* the shard's own duplicate */
    int rank, size;
    bool table_wise, dynamic, dedup;
    int owner;              /* table-wise */
    uint64_t owner_seed;    /* dynamic row-wise: owner of key k = XXH3(k, seed) mod size */
    hx_emb_oob oob;         /* fixed tables: ids outside [0, rows) */
    hx_emb_optim optim;
    hx_emb_table_config tc; /* the whole table's, as created */
    hx_emb_idmap_config mc;
    hx_emb_budget budget;   /* this rank's bytes, capped at rank_bytes (counted or capped
                               shards; a DYNAMIC part's map charges its growth here) */
    hx_emb_table *part;     /* this rank's rows: NULL where it holds none */
    hx_emb_local *local;    /* part's storage */
    pthread_mutex_t lock;   /* one exchange at a time (one thread per communicator) */
    hx_emb_workspace *ws;
    _Atomic int64_t oob_count;
    hx_emb_shard_stats stats;
    hx_emb_hot *hot;        /* device_cache_rows: hot rows replicated on every rank
                               (shard_hot.c), or NULL */
};

/* The kinds of exchange, checked against the peers' (a mismatch is a
 * program whose ranks call different things). */
typedef enum hx_emb_xkind {
    HX_EMB_X_LOOKUP = 1, HX_EMB_X_TRAIN_LOOKUP, HX_EMB_X_UPDATE, HX_EMB_X_READ, HX_EMB_X_WRITE, HX_EMB_X_CREATE,
    HX_EMB_X_SAVE, HX_EMB_X_LOAD
} hx_emb_xkind;

/* One call's ids routed to their owners. */
typedef struct hx_emb_route {
    int64_t n;          /* positions given */
    int64_t U;          /* ids sent (unique, unless de-dup is off) */
    int64_t *send;      /* the owners' local ids, grouped by owner in rank order */
    int64_t *first;     /* U: a position that sent id u (its first) */
    int64_t *inv;       /* n: position -> index into send; -1 padding or skipped, -2 a zero row */
    int64_t *scount, *sdispl, *rcount, *rdispl; /* per rank, ids */
    int64_t nrecv;
    int64_t *recv;      /* ids received, rank 0's first */
} hx_emb_route;

/* The placement fields of s (base rows and dim, size, layout, owner
 * seed, out-of-range rule, optimizer, configs) as cfg gives them over
 * `size` ranks: what hx__shard_place and hx__shard_route_plan read (a
 * parameter server's worker routes with such a shard, over the servers). */
void hx__shard_init_place(hx_emb_shard *s, const hx_emb_shard_config *cfg, int size);
/* What every rank must agree on in cfg, hashed. */
uint64_t hx__shard_config_hash(const hx_emb_shard_config *cfg);
/* The query's ids as i64 and what each position sends: padding nothing
 * (-1), an id outside a fixed table a zero row (+1; its out-of-range
 * verdict is the caller's). */
hx_status hx__shard_ids_of(const hx_emb_shard *s, const hx_emb_query *q, int64_t **ids, signed char **skip,
                           hx_emb_err *err);
/* out (and argmax) from the unique rows: q's positions renamed to their
 * row of `rows` (U x dim, r->send's order), pooled by the local lookup
 * over them, so a bag adds the same values in the same order as a local
 * table would. */
hx_status hx__shard_pool(const hx_emb_shard *s, const hx_emb_query *q, const hx_emb_route *r, float *rows,
                         float *out, int64_t *argmax, hx_emb_err *err);

/* The owner of (already mapped) id and its local id there. */
void hx__shard_place(const hx_emb_shard *s, int64_t id, int *owner, int64_t *local);

/* Plans the route of ids (n, i64: rows of a fixed table, keys of a dynamic
 * one). skip[i] != 0 (skip may be NULL): position i sends nothing (inv =
 * skip[i] < 0 ? -1 : -2). On failure (out of memory) the route holds
 * nothing to free beyond what hx__shard_route_free frees. */
hx_status hx__shard_route_plan(hx_emb_shard *s, const int64_t *ids, int64_t n,
                               const signed char *skip, bool dedup, hx_emb_route *r,
                               hx_emb_err *err);
void hx__shard_route_free(hx_emb_route *r);

/* The exchange's first round: counts, this rank's verdict on its input
 * (verdict != HX_OK: it failed with vmsg) and the kind; then the ids. A
 * verdict that is not HX_OK anywhere fails every rank before any id
 * moves: this rank with its own message, the others naming the first
 * rank that failed. */
hx_status hx__shard_exchange_ids(hx_emb_shard *s, hx_emb_xkind kind, hx_emb_route *r,
                                 hx_status verdict, const hx_emb_err *vmsg, hx_emb_err *err);
/* Owners -> requesters: every owner's status st (msg its message) first,
 * as hx__shard_agree; then owned (nrecv x width floats, in r->recv's
 * order) goes back to the ranks that asked: out gets U x width floats in
 * r->send's order. */
hx_status hx__shard_reply(hx_emb_shard *s, hx_emb_xkind kind, const hx_emb_route *r, const float *owned,
                          int64_t width, hx_status st, const hx_emb_err *msg, float *out, hx_emb_err *err);
/* Requesters -> owners: rows (U x width floats in r->send's order) to the
 * owners, recv_rows (nrecv x width) in r->recv's order. */
hx_status hx__shard_push(hx_emb_shard *s, const hx_emb_route *r, const float *rows, int64_t width,
                         float *recv_rows, hx_emb_err *err);
/* Requesters -> owners: one i64 per id sent (cnt, in r->send's order),
 * recv (nrecv) in r->recv's order. */
hx_status hx__shard_push_counts(hx_emb_shard *s, const hx_emb_route *r, const int64_t *cnt, int64_t *recv,
                                hx_emb_err *err);
/* Every rank's status after the owners' work of exchange `kind` (st, msg
 * this rank's): the first failure fails every rank. */
hx_status hx__shard_agree(hx_emb_shard *s, hx_emb_xkind kind, hx_status st, const hx_emb_err *msg,
                          hx_emb_err *err);

/* A part for this rank as s->tc/s->mc place it (*part NULL where it holds
 * no rows); *storage: its local table (a dynamic part's storage). */
hx_status hx__shard_make_part(hx_emb_shard *s, hx_emb_table **part, hx_emb_table **storage, hx_emb_err *err);
/* Checkpoints (embedding/shard_ckpt.c): the table interface's save and load. */
hx_status hx__shard_save(hx_emb_table *t, const char *path, hx_emb_err *err);
hx_status hx__shard_load(hx_emb_table *t, const char *path, hx_emb_err *err);

/* The keys of a DYNAMIC table's saved shards src[0 .. nsrc) (dynamic
 * tables as loaded; NULL: a shard of no rows) that mine(ctx, key) picks,
 * with their counts, clocks, rows and state, into dynamic table dst, whose
 * map they replace (embedding/shard_rekey.c); dst is unchanged on failure
 * (HX_ERR_OUT_OF_MEMORY: more keys with a row than dst has rows, or out of
 * memory; HX_ERR_UNSUPPORTED: dst's rows are not a table in memory). */
hx_status hx__shard_rekey(hx_emb_table *const *src, int64_t nsrc, bool (*mine)(const void *ctx, int64_t key),
                          const void *ctx, hx_emb_table *dst, hx_emb_err *err);

/* A sparse gradient (ids as the ops give them, rows) applied by the
 * owners as one optimizer step. */
hx_status hx__shard_update(hx_emb_shard *s, const hx_emb_sparse_grad *g, int64_t step,
                           int nthreads, hx_emb_err *err);

/* ---- hot rows replicated on every rank (embedding/shard_hot.c) ---------------------------
 * device_cache_rows on a fixed table: every call under s's lock, on every
 * rank alike. */
/* After the owners applied update g (its cached rows' entries marked
 * skip < 0 by hx_emb_hot_mark, not sent): the cache's exchange and step,
 * the victims written back, the admitted rows from their owners. */
hx_status hx__shard_hot_step(hx_emb_shard *s, const hx_emb_sparse_grad *g, int64_t step, const signed char *skip,
                             hx_emb_err *err);
/* The changed cached rows written back to their owners' parts (a local
 * copy on every rank); drop: the cache emptied then. */
hx_status hx__shard_hot_flush(hx_emb_shard *s, bool drop, hx_emb_err *err);
/* Before an exchange that reads the owners' rows (drop: or writes them):
 * the flush on every rank, whatever its verdict (no-op without a cache);
 * its failure becomes the verdict where there was none. */
void hx__shard_hot_before(hx_emb_shard *s, bool drop, hx_status *verdict, hx_emb_err *mine);
/* A lookup's positions whose row is cached: at[i] the index of its
 * distinct cached row (slot[at[i]]), -1 for the others. */
typedef struct hx_emb_shard_hits {
    int64_t *at, H;
    int32_t *slot;
} hx_emb_shard_hits;
/* ids[0 .. n): the cached positions (skip[i] == 0) get skip -1 (the route
 * sends nothing for them) and their rows named in *hits (freed by
 * hx__shard_hits_free, also on failure). */
hx_status hx__shard_hot_split(hx_emb_shard *s, const int64_t *ids, int64_t n, signed char *skip,
                              hx_emb_shard_hits *hits, hx_emb_err *err);
/* After the reply (*rows: r->U rows): the cached rows appended from the
 * replica, r's inv and U renamed to take them (for hx__shard_pool);
 * counted as the cache's lookups and hits. */
hx_status hx__shard_hot_rows(hx_emb_shard *s, const hx_emb_shard_hits *hits, hx_emb_route *r, float **rows,
                             hx_emb_err *err);
void hx__shard_hits_free(hx_emb_shard_hits *hits);

#endif
