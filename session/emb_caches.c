/* The device caches of a session's embedding tables (device_cache_rows:
 * one worker's, or this rank's replica of the hot rows of a server-mode
 * or sharded table): a session with an emulated accelerator puts each
 * cache's slots in its device's memory at creation (the persistent pool:
 * counted against max_device_memory and in the device's stats), and takes
 * them back to host pages when it is freed. On a CUDA device the slots stay in host
 * memory: the cache's CUDA path (kernels/gpu/emb_cache.cu) is not wired
 * into the table yet. */
#include "session/session.h"
#include "embedding/embedding.h"

#include <stdio.h>

static hx_status slots_alloc(void *ctx, size_t bytes, const char *what, void **out)
{
    hx_backend *b = ctx;
    return b->alloc(b, bytes, HX_MEM_PERSISTENT, what, out);
}

static void slots_free(void *ctx, void *p)
{
    hx_backend *b = ctx;
    b->free(b, p);
}

hx_status hx__session_bind_caches(hx_session *s)
{
    hx_backend *acc = s->e.be[HX_DEV_ACCEL];
    if (!acc || !s->e.accel_on_host) return HX_OK;
    for (int i = 0; i < s->e.g->n_tables; i++) {
        hx_embedding_table *t = s->e.g->tables[i].table;
        char what[200];
        snprintf(what, sizeof what, "the device cache of embedding table '%s'", t->name);
        hx_emb_mem mem = {acc, slots_alloc, slots_free, what};
        hx_status st = hx__embedding_cache_bind(t, &mem, s);
        if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", hx_last_error());
            return hx__error(st, "hx_session_create: %s", msg);
        }
    }
    return HX_OK;
}

void hx__session_unbind_caches(hx_session *s)
{
    for (int i = 0; s->e.g && i < s->e.g->n_tables; i++)
        hx__embedding_cache_bind(s->e.g->tables[i].table, NULL, s); /* never fails */
}
