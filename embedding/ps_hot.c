/* Hot rows replicated on every worker (device_cache_rows with several
 * workers, synchronous server mode): embedding/hot.h's cache over the
 * workers' communicator, the servers as the rows' owners.
 *
 * Rows not cached are pushed as always (every worker pushes every step);
 * the replicas apply the cached rows' gradients in worker order, as the
 * servers' apply (ps_serve.c's apply_steps) concatenates the workers'
 * pushes in worker order and runs the same backward_update.
 *
 * Eviction: worker 0 stores the victims that changed while cached, with
 * their state, before its push of the step (a server takes a worker's
 * messages in order, so it has them before it applies the step and
 * answers any later pull); each store carries the steps its rows include,
 * and a server keeps a row's newer value (ps_devcache.c). Admission:
 * every worker fetches the admitted rows with their state from the
 * servers after its push, once they have applied the step. A save
 * stores the saving worker's changed rows first; hx_ps_finish, or the
 * table's free before it, worker 0's.
 *
 * A failed fetch breaks the worker's cache (hot.h's Faults): the rows it
 * lost are pulled from the servers (which hold them: admitted rows are
 * not written before the next update), so its lookups go on and its next
 * update fails every worker at once, naming it. So does a failed store of
 * worker 0's, whose push still goes (push in ps_client.c). */
#include "embedding/ps_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char what[] = "server mode (device cache of hot rows)";

static hx_status oom(hx_emb_err *err) { return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", what); }

void hx__ps_hot_free(hx_emb_ps *c)
{
    hx_emb_hot_free(c->hot);
    c->hot = NULL;
}

hx_status hx__ps_hot_create(hx_emb_ps *c, const hx_emb_table_config *tc, hx_emb_err *err)
{
    return hx_emb_hot_create(c->ps->role, tc, what, "worker", &c->hot, err);
}

hx_status hx__ps_hot_bind(hx_emb_ps *c, const hx_emb_mem *mem, hx_emb_err *err)
{
    pthread_mutex_lock(&c->lock);
    hx_status st = c->hot ? hx_emb_hot_bind(c->hot, mem, err) : HX_OK;
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* The dirty rows among slots[0 .. n) (NULL: every slot) stored on the
 * servers with their state, as including `tag` steps; they are clean then. */
static hx_status store_dirty(hx_emb_ps *c, const int64_t *slots, int64_t n, int64_t tag, hx_emb_err *err)
{
    hx_emb_hot *h = c->hot;
    size_t rec = hx_emb_hot_record(h);
    int64_t len = slots ? n : h->C;
    int64_t *rows = malloc((size_t)(len + 1) * sizeof *rows), *at = malloc((size_t)(len + 1) * sizeof *at);
    char *recs = malloc((size_t)(len + 1) * rec);
    hx_status st = rows && at && recs ? HX_OK : oom(err);
    int64_t m = st ? 0 : hx_emb_hot_dirty(h, slots, n, rows, at, recs);
    if (m) st = hx__ps_store_locked(c, rows, m, recs, rec, tag, err);
    if (!st) hx_emb_hot_cleaned(h, at, m);
    free(rows);
    free(at);
    free(recs);
    return st;
}

/* Worker 0 stores the changed victims, as including the step being
 * pushed (hx_emb_hot_evict_fn). */
static hx_status evict(void *ctx, const int64_t *slots, int64_t n, hx_emb_err *err)
{
    hx_emb_ps *c = ctx;
    return c->hot->w == 0 ? store_dirty(c, slots, n, c->pushes + 1, err) : HX_OK;
}

hx_status hx__ps_hot_update(hx_emb_ps *c, const hx_emb_sparse_grad *g, int64_t step, signed char *skip,
                            hx_emb_err *err)
{
    hx_emb_hot_mark(c->hot, g, skip);
    return hx_emb_hot_update(c->hot, g, c->pushes, step, skip, evict, c, err);
}

hx_status hx__ps_hot_fill(hx_emb_ps *c, hx_status pushed, hx_emb_err *err)
{
    hx_emb_hot *h = c->hot;
    if (!h->nfill || pushed) { /* a failed push: the admitted slots stay empty */
        if (h->nfill) hx_emb_hot_fail(h, pushed, "its push failed before the admitted rows' fetch");
        h->nfill = 0;
        return pushed;
    }
    size_t rec = hx_emb_hot_record(h);
    char *recs = malloc((size_t)h->nfill * rec);
    uint8_t *cold = malloc((size_t)h->nfill);
    hx_status st = recs && cold ? hx__ps_fetch_locked(c, h->fill_row, h->nfill, recs, rec, cold, err) : oom(err);
    for (int64_t m = 0; m < h->nfill && !st; m++) hx_emb_hot_take(h, m, recs + (size_t)m * rec, cold[m]);
    if (st) {
        char why[HX_EMB_ERR_LEN + 64];
        snprintf(why, sizeof why, "fetching the admitted rows from the servers: %s", err->msg);
        hx_emb_hot_fail(h, st, why);
    }
    h->nfill = 0;
    free(recs);
    free(cold);
    return st;
}

hx_status hx__ps_hot_flush(hx_emb_ps *c, hx_emb_err *err)
{
    hx_status st = hx_emb_hot_check(c->hot, err);
    return st ? st : store_dirty(c, NULL, 0, c->pushes, err);
}

hx_status hx__ps_hot_set_optim(hx_emb_ps *c, const hx_emb_optim *o, hx_emb_err *err)
{
    hx_emb_hot *h = c->hot;
    hx_status st = h->w == 0 ? hx__ps_hot_flush(c, err) : hx_emb_hot_check(h, err);
    if (!st) st = hx_emb_hot_set_optim(h, o, err);
    if (!st) hx_emb_hot_drop(h);
    return st;
}
