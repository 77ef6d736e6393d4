/* The public embedding table (hetex.h's hx_embedding_table): an embedding/
 * table (local or dynamic) with its name, id mapping, the graphs using it,
 * and the lock and scratch of its updates. The graph's ops keep a pointer to
 * it; the CPU launchers (backend/backend_cpu_embedding.c) query and update
 * it through the functions below, which also turn hx_emb_err messages into
 * hx_last_error(). */
#ifndef HX_EMBEDDING_TABLE_H
#define HX_EMBEDDING_TABLE_H

#include "embedding/embedding.h"
#include "embedding/ps.h"
#include "core/core.h"

#include <pthread.h>

struct hx_embedding_table {
    hx_emb_table *impl;   /* what lookups and updates call: local or dynamic */
    hx_emb_local *local;  /* its storage (a DYNAMIC table's map: hx_emb_dynamic_idmap);
                             NULL for a table on disk: */
    hx_emb_ssd *ssd;      /* a table on disk (ssd_path), else NULL */
    hx_emb_devcache *dev; /* a device cache in front of the table (device_cache_rows; local
                             is then its host table), else NULL */
    const void *dev_owner; /* the session whose device holds the cache's slots, else NULL */
    hx_emb_shard *shard;  /* a sharded table (config.comm; impl is it, local NULL), else NULL */
    hx_ps *ps;            /* server mode (config.ps): the servers' shard is `shard` on a
                             server; on a worker `client` (impl is it, local NULL) */
    hx_emb_ps *client;
    char *name;
    hx_embedding_ids ids;
    int64_t expire_after;
    _Atomic int graphs;   /* graphs using the table */
    _Atomic int users;    /* runs reading it (> 0), or -1: one call holds it alone */
    _Atomic int64_t updates;
    _Atomic int64_t last_step; /* t of the last update applied; 0 before any */
    /* Held by updates and by training lookups of a DYNAMIC table (they assign
     * rows): neither may overlap anything else on the table. */
    pthread_mutex_t lock;
    hx_emb_workspace *ws; /* the updates' scratch, used under the lock */
};

/* Copies e's message into hx_last_error() after "<where>: " and returns st:
 * every embedding/ error reaches the user through here. */
hx_status hx__emb_error(hx_status st, const hx_emb_err *e, const char *where_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The padding id of a bag over t as its queries compare ids: a ROWS table
 * takes padding_id in [-rows, rows), a negative one counting from the end
 * (torch's padding_idx), as a row; MODULO and DYNAMIC tables compare raw
 * ids, so theirs is any id, as given. HX_ERR_INDEX naming the table, the id
 * and the range otherwise; op names the caller in the message. */
hx_status hx__embedding_padding(const hx_embedding_table *t, int64_t padding_id, const char *op,
                                int64_t *out);

/* The table's optimizer kind (a table on disk: its cache's). */
hx_emb_optim_kind hx__embedding_optim_kind(const hx_embedding_table *t);

/* Whether t is sharded over a communicator (config.comm), or held by
 * parameter servers (config.ps). */
bool hx__embedding_sharded(const hx_embedding_table *t);

/* The sharded table cfg->comm asks for, from the embedding/ configs of cfg
 * (embedding/table_shard.c): sharding and owner decided, collective. */
hx_status hx__embedding_shard_create(const hx_embedding_config *cfg, const hx_emb_table_config *tc,
                                     const hx_emb_idmap_config *mc, hx_emb_table **out);
/* The shard configuration of cfg over N ranks (row-wise or table-wise,
 * the owner), checked: HX_ERR_INVALID_ARGUMENT, HX_ERR_UNSUPPORTED. */
hx_status hx__embedding_shard_config(const hx_embedding_config *cfg, const hx_emb_table_config *tc,
                                     const hx_emb_idmap_config *mc, int N, hx_emb_shard_config *sc);
/* read_rows (k HX_EMB_SHARD_ROWS, into out), read_state (state array k, into out) and
 * write_rows (from in) of a sharded table, collective; fn names the call. */
hx_status hx__embedding_shard_rows(hx_embedding_table *t, const char *fn, int k, const int64_t *ids,
                                   int64_t n, float *out, const float *in);
/* Stats of this rank's share, rows and dim the whole table's. */
hx_status hx__embedding_shard_stats(const hx_embedding_table *t, hx_embedding_stats *out);
/* The id map's counts (rows assigned, evictions, expirations, filtered) of
 * a DYNAMIC table into *out, read under t's lock; map NULL: nothing. */
void hx__embedding_idmap_stats(const hx_embedding_table *t, const hx_emb_idmap *map,
                               hx_embedding_stats *out);

/* A session puts the device cache of t (device_cache_rows: one worker's,
 * or the hot rows that server mode's workers or a sharded table's ranks
 * replicate, this rank's replica) in its device's memory (mem), or (mem
 * NULL) takes it back to host pages: only the session that put it there
 * takes it back, and a cache another session's device holds stays there.
 * Under the table's lock; the slots move with their rows and state
 * (cache.h's hx_emb_devmem_move): nothing is written back, and no other
 * rank takes part. Tables without a device cache: nothing. Fails as the
 * allocator does (the device's cap), with hx_last_error() naming the
 * table, the bytes and what to change; the cache then stays where it
 * was. */
hx_status hx__embedding_cache_bind(hx_embedding_table *t, const hx_emb_mem *mem, const void *owner);

/* A graph starts (+1) or stops (-1) using t. */
void hx__embedding_use(hx_embedding_table *t, int delta);

/* The rule for a table shared by sessions (hetex.h, the tables' Threads):
 * runs that only read it share it; a training run, a write of rows, a load
 * or a new optimizer holds it alone. hold fails with HX_ERR_STATE, naming
 * fn and the table, when the table is held in a way that excludes this
 * use; release ends a hold that succeeded. */
hx_status hx__embedding_hold(hx_embedding_table *t, bool alone, const char *fn);
void hx__embedding_release(hx_embedding_table *t, bool alone);

/* Rows of query q into out (hx_emb_query_out_rows(q), dim), and in MAX mode
 * the argmax (may be NULL): ids are mapped as the table says (MODULO), a
 * training query of a DYNAMIC table takes the lock. forward = false: the
 * backward reading the rows again (out-of-range ids are not counted twice).
 * `where` names the op in messages. */
hx_status hx__embedding_query(hx_embedding_table *t, const hx_emb_query *q, float *out,
                              int64_t *argmax, bool forward, const char *where);

/* One optimizer step t = step on the rows the nq queries touched, their
 * gradients summed over all of them (gis[k] for qs[k]); then DYNAMIC
 * tables expire ids every expire_after steps. Takes the lock. */
hx_status hx__embedding_update(hx_embedding_table *t, const hx_emb_query *qs,
                               const hx_emb_grad_input *gis, int nq, int64_t step,
                               const char *where);

#endif
