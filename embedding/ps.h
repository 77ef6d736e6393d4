/* Server mode (hetex.h's hx_ps, hx_embedding_config.ps): what the rest of
 * the library sees of it (embedding/table.c's hooks). On a worker a table
 * is an hx_emb_ps (the table interface: pulls and pushes to the servers);
 * on a server it is the sharded table (embedding/shard.h) over the
 * servers' communicator, which hx_ps_serve works on. */
#ifndef HX_EMBEDDING_PS_H
#define HX_EMBEDDING_PS_H

typedef struct hx_emb_ps hx_emb_ps; /* before the include: embedding.h's headers reach table.h */

#include "embedding/embedding.h"

/* The table cfg asks for of cfg->ps (tc, mc: its embedding/ configs):
 * registered with the ps in creation order; a server's is a shard over
 * the servers (collective over them, under the server's cap), a
 * worker's an hx_emb_ps; every rank returns the servers' verdict (server
 * 0 tells each worker), so a refusal fails every rank at once. Errors
 * through hx__error. */
hx_status hx__ps_table_create(const hx_embedding_config *cfg, const hx_emb_table_config *tc,
                              const hx_emb_idmap_config *mc, hx_emb_table **out);
/* The table impl (either role) is being freed: the ps forgets it. */
void hx__ps_forget(hx_ps *ps, hx_emb_table *impl);
/* NULL unless t is a worker's server-mode table. */
hx_emb_ps *hx_emb_as_ps(hx_emb_table *t);
/* Rows (k HX_EMB_SHARD_ROWS, dim floats each) or optimizer state array k
 * of ids (as the ops name them, already mapped) from the servers, once
 * every push this worker made is applied. */
hx_status hx__ps_read(hx_emb_ps *c, int k, const int64_t *ids, int64_t n, float *out, hx_emb_err *err);
/* The optimizer the worker names in its pushes (the servers apply theirs
 * and refuse a push naming another kind); a cache of hot rows (several
 * workers) is written back and emptied first (call it on every worker). */
const hx_emb_optim *hx__ps_optim(const hx_emb_ps *c);
hx_status hx__ps_set_optim(hx_emb_ps *c, const hx_emb_optim *o, hx_emb_err *err);
/* The counts of c's cache of hot rows (device_cache_rows with several
 * workers) into *out; false when it has none. */
bool hx__ps_device_stats(hx_emb_ps *c, hx_emb_devcache_stats *out);
/* Its replica's slots into mem's memory, or (mem NULL) back to host pages
 * (hx_emb_hot_bind; embedding/ps_hot.c); none: nothing. */
hx_status hx__ps_hot_bind(hx_emb_ps *c, const hx_emb_mem *mem, hx_emb_err *err);

#endif
