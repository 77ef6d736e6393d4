/* Hot rows replicated on every worker (device_cache_rows with several
 * workers, synchronous server mode): each worker keeps the same C rows,
 * with their optimizer state, in a local table of C slots (the device's
 * memory), and the servers hold the other rows.
 *
 * Every worker holds the same rows. Membership changes only inside an
 * update, from what every worker learns there: each worker's touched
 * rows are all-gathered over the workers' own communicator (a duplicate
 * of the ps's), and every worker feeds the same list to the same LFU
 * policy (cache.h's slots): the touched cached rows, then the rows some
 * worker touches a second time, another worker in this step or any in
 * the next (a row seen once is seldom worth a fetch), at most C. So the
 * workers never disagree.
 *
 * A cached row's lookup reads the slot (no pull). Its gradient: the
 * workers all-gather their touched cached rows' summed gradients and each
 * runs one backward_update of the replica over them, concatenated in
 * worker order: the servers' apply (ps_serve.c's apply_steps) concatenates
 * the workers' pushes in worker order and runs the same backward_update,
 * which sums each id's rows in position order and runs the optimizer on
 * the rows named (LazyAdam moves every row some worker touched). So the
 * replicas stay bitwise equal to each other and to the rows the servers
 * would hold without the cache. Rows not cached are pushed as always
 * (every worker pushes every step).
 *
 * Eviction: worker 0 stores the victims that changed while cached, with
 * their state, before its push of the step (a server takes a worker's
 * messages in order, so it has them before it applies the step and
 * answers any later pull); each store carries the steps its rows include,
 * and a server keeps a row's newer value (ps_devcache.c). Admission:
 * every worker fetches the admitted rows with their state from the
 * servers after its push, once they have applied the step. A save
 * stores the saving worker's changed rows first; hx_ps_finish, or the
 * table's free before it, worker 0's. */
#include "embedding/ps_impl.h"

#include <stdlib.h>
#include <string.h>

struct ps_hot {
    hx_comm *comm;            /* the workers' (a duplicate: the exchange's alone) */
    int W, w;
    hx_emb_table *rept;       /* the replica: C slots, rows and state */
    hx_emb_local *rep;
    hx_emb_slots slots;       /* row -> slot, LFU, dirty: changed since the servers had it */
    int64_t C, rows, dim;
    hx_emb_rowmap seen[2];    /* the rows some worker touched: in this step, in the last one */
    int64_t seen_cap[2];
    int cur;
    int64_t *fill_row, *fill_slot, nfill; /* admitted, to be fetched after the push */
    hx_emb_workspace *ws;
    float *tmp;
    hx_status broken;         /* a fetch failed: the slots are not the servers' rows */
    uint64_t lookups, hits, rows_in, rows_out, rows_init, bytes_in, bytes_out, evictions;
    int64_t calls;
};

static hx_status oom(hx_emb_err *err)
{
    return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "server mode (device cache of hot rows): out of memory");
}

/* Room for n rows in seen[i] (emptied); -1 when out of memory. */
static int seen_room(ps_hot *h, int i, int64_t n)
{
    if (h->seen_cap[i] >= n) return 0;
    hx_emb_rowmap_free(&h->seen[i]);
    memset(&h->seen[i], 0, sizeof h->seen[i]);
    h->seen_cap[i] = 0;
    if (hx_emb_rowmap_init(&h->seen[i], n)) return -1;
    h->seen_cap[i] = n;
    return 0;
}

void hx__ps_hot_free(hx_emb_ps *c)
{
    ps_hot *h = c->hot;
    if (!h) return;
    hx_emb_table_free(h->rept);
    hx_emb_slots_free(&h->slots);
    for (int i = 0; i < 2; i++) hx_emb_rowmap_free(&h->seen[i]);
    hx_emb_workspace_free(h->ws);
    hx_comm_free(h->comm);
    free(h->fill_row);
    free(h->fill_slot);
    free(h->tmp);
    free(h);
    c->hot = NULL;
}

hx_status hx__ps_hot_create(hx_emb_ps *c, const hx_emb_table_config *tc, hx_emb_err *err)
{
    ps_hot *h = calloc(1, sizeof *h);
    if (!h) return oom(err);
    c->hot = h;
    hx_status st = hx__comm_dup(c->ps->role, &h->comm); /* collective over the workers */
    if (st) {
        hx__ps_hot_free(c);
        return hx_emb_fail(err, st, "server mode (device cache of hot rows): %s", hx_last_error());
    }
    h->W = hx_comm_size(h->comm);
    h->w = hx_comm_rank(h->comm);
    h->rows = tc->rows;
    h->dim = tc->dim;
    h->C = tc->device_cache_rows < tc->rows ? tc->device_cache_rows : tc->rows;
    if (h->C > INT32_MAX) h->C = INT32_MAX;
    hx_emb_table_config cc = *tc; /* the slots: eager, zeros until a row comes in */
    cc.rows = h->C;
    cc.device_cache_rows = 0;
    cc.init = (hx_emb_init){HX_EMB_INIT_ZEROS, 0, 0, 0};
    cc.lazy_init = 0;
    cc.huge_pages = 0;
    cc.backing_file = NULL;
    cc.ssd_path = NULL;
    cc.oob = HX_EMB_OOB_ZERO;
    cc.row_stride = cc.row_offset = 0;
    cc.nthreads = 1;
    if ((st = hx_emb_local_create(&cc, &h->rept, err))) {
        hx__ps_hot_free(c);
        return st;
    }
    h->rep = hx_emb_as_local(h->rept);
    h->rep->init = tc->init; /* a cold row's first value, as its server would give it */
    h->fill_row = malloc((size_t)h->C * sizeof *h->fill_row);
    h->fill_slot = malloc((size_t)h->C * sizeof *h->fill_slot);
    h->tmp = malloc((size_t)h->rep->gstride * sizeof *h->tmp);
    h->ws = hx_emb_workspace_create();
    int64_t direct = (uint64_t)h->rows <= (uint64_t)h->C * 16 ? h->rows : 0; /* as cheap as the slots */
    if (!h->fill_row || !h->fill_slot || !h->tmp || !h->ws || hx_emb_slots_init(&h->slots, h->C, direct) ||
        seen_room(h, 0, 1024) || seen_room(h, 1, 1024)) {
        hx__ps_hot_free(c);
        return oom(err);
    }
    return HX_OK;
}

int32_t hx__ps_hot_slot(const ps_hot *h, int64_t row) { return hx_emb_rowmap_get(&h->slots.map, row); }

void hx__ps_hot_read(ps_hot *h, int k, int32_t slot, float *out)
{
    if (k == HX_EMB_SHARD_ROWS) hx_emb_local_read_row(h->rep, slot, out);
    else hx_emb_local_read_state(h->rep, k, slot, out);
}

hx_status hx__ps_hot_check(const ps_hot *h, hx_emb_err *err)
{
    return h->broken ? hx_emb_fail(err, HX_ERR_STATE, "server mode: this table's device cache lost rows in a "
                                   "failed fetch from the servers (%s): recreate the table and load its last "
                                   "checkpoint", hx_status_name(h->broken))
                     : HX_OK;
}

void hx__ps_hot_count(ps_hot *h, int64_t lookups, int64_t hits)
{
    h->lookups += (uint64_t)lookups;
    h->hits += (uint64_t)hits;
    h->calls++;
}

/* The dirty rows among slots[0 .. n) (NULL: every slot) stored on the
 * servers with their state, as including `tag` steps; they are clean then. */
static hx_status store_dirty(hx_emb_ps *c, const int64_t *slots, int64_t n, int64_t tag, hx_emb_err *err)
{
    ps_hot *h = c->hot;
    size_t rec = hx__ps_record(c);
    int ns = hx_emb_optim_nstate(c->route.optim.kind);
    bool rowwise = c->route.optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    int64_t m = 0, len = slots ? n : h->C;
    int64_t *rows = malloc((size_t)(len + 1) * sizeof *rows), *at = malloc((size_t)(len + 1) * sizeof *at);
    char *recs = malloc((size_t)(len + 1) * rec);
    if (!rows || !at || !recs) {
        free(rows);
        free(at);
        free(recs);
        return oom(err);
    }
    for (int64_t i = 0; i < len; i++) {
        int64_t k = slots ? slots[i] : i;
        if (h->slots.slot_row[k] < 0 || !h->slots.dirty[k]) continue;
        hx_emb_local_pack_row(h->rep, k, ns, rowwise, recs + (size_t)m * rec);
        at[m] = k;
        rows[m++] = h->slots.slot_row[k];
    }
    hx_status st = m ? hx__ps_store_locked(c, rows, m, recs, rec, tag, err) : HX_OK;
    for (int64_t i = 0; i < m && !st; i++) h->slots.dirty[at[i]] = 0;
    if (!st) {
        h->rows_out += (uint64_t)m;
        h->bytes_out += (uint64_t)m * rec;
    }
    free(rows);
    free(at);
    free(recs);
    return st;
}

/* One all-gather of n elements of dt per worker (counts: every worker's)
 * into out, blocks in worker order. */
static hx_status gather(ps_hot *h, const void *send, void *out, const int64_t *counts, hx_dtype dt, hx_emb_err *err)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather_v(h->comm, send, out, counts, dt, &q);
    if (!st) st = hx__coll_wait(q);
    return st ? hx_emb_fail(err, st, "server mode (device cache of hot rows): the workers' exchange: %s",
                            hx_last_error())
              : HX_OK;
}

/* The rows every worker touched (ids: worker w's block holds its cached
 * rows, ncached[w], then its others) into the policy: the cached ones,
 * then those seen a second time (in two workers' blocks, or in the last
 * step's too), at most C; the admitted rows
 * get slots (to fill after the push), worker 0 stores the changed victims
 * (tag: the steps they include). */
static hx_status admit(hx_emb_ps *c, const int64_t *ids, const int64_t *cnt, const int64_t *ncached, int64_t tag,
                       hx_emb_err *err)
{
    ps_hot *h = c->hot;
    int64_t total = 0;
    for (int w = 0; w < h->W; w++) total += cnt[w];
    if (seen_room(h, h->cur, total + 1)) return oom(err);
    hx_emb_rowmap *now = &h->seen[h->cur], *before = &h->seen[!h->cur];
    hx_emb_rowmap_clear(now);
    int64_t *list = malloc((size_t)(total + 1) * sizeof *list), *out = malloc((size_t)(total + 1) * sizeof *out);
    if (!list || !out || !hx_emb_slots_room(&h->slots, total)) {
        free(list);
        free(out);
        return oom(err);
    }
    int64_t n = 0, at = 0;
    for (int pass = 0; pass < 2; pass++) { /* cached rows first: they stay and count */
        at = 0;
        for (int w = 0; w < h->W; w++) {
            for (int64_t i = 0; i < cnt[w]; i++) {
                int64_t r = ids[at + i];
                bool cached = i < ncached[w];
                int32_t v = hx_emb_rowmap_get(now, r); /* -1 not seen, 0 seen once, 1 listed */
                if (pass == 0 && cached && v < 0) {
                    hx_emb_rowmap_put(now, r, 1);
                    list[n++] = r;
                } else if (pass == 1 && !cached && v < 1) { /* listed when seen again: by a second
                                                              worker now, or in the last step */
                    bool again = n < h->C && (v == 0 || hx_emb_rowmap_get(before, r) >= 0);
                    if (v == 0) hx_emb_rowmap_del(now, r);
                    hx_emb_rowmap_put(now, r, again);
                    if (again) list[n++] = r;
                }
            }
            at += cnt[w];
        }
    }
    h->cur = !h->cur;
    hx_emb_slots_begin(&h->slots);
    hx_emb_slots_map(&h->slots, list, HX_DTYPE_I64, n, 0, 0, h->rows, false, NULL, out);
    free(list);
    free(out);
    hx_emb_slots_victims(&h->slots);
    hx_status st = HX_OK;
    if (h->w == 0) st = store_dirty(c, h->slots.victim, h->slots.nv, tag, err);
    if (st) {
        hx_emb_slots_cancel(&h->slots);
        return st;
    }
    h->evictions += (uint64_t)h->slots.nv;
    hx_emb_slots_install(&h->slots);
    h->nfill = h->slots.nmiss;
    for (int64_t m = 0; m < h->nfill; m++) {
        h->fill_row[m] = h->slots.miss[m];
        h->fill_slot[m] = h->slots.mslot[m];
    }
    return HX_OK;
}

/* The workers' exchange: every worker's step, optimizer t and counts
 * (meta: 4 per worker), then the rows (ids) and the cached rows'
 * gradients (grads), blocks in worker order. */
typedef struct exchange {
    int64_t *meta, *ncached, *cnt, *gcount, *ids;
    float *grads;
    int64_t total, totalc;
} exchange;

static void exchange_free(exchange *x)
{
    free(x->meta);
    free(x->ids);
    free(x->grads);
}

static hx_status exchange_rows(hx_emb_ps *c, const int64_t *mine, int64_t n, int64_t nc, const float *grad,
                               int64_t step, exchange *x, hx_emb_err *err)
{
    ps_hot *h = c->hot;
    int W = h->W;
    memset(x, 0, sizeof *x);
    if (!(x->meta = malloc((size_t)(8 * W + 4) * sizeof *x->meta))) return oom(err);
    int64_t *all = x->meta + 4, *fours = all + 4 * W;
    x->ncached = fours + W;
    x->cnt = x->ncached + W;
    x->gcount = x->cnt + W;
    int64_t head[4] = {c->pushes, step, nc, n};
    for (int w = 0; w < W; w++) fours[w] = 4;
    memcpy(x->meta, head, sizeof head);
    hx_status st = gather(h, x->meta, all, fours, HX_DTYPE_I64, err);
    for (int w = 0; w < W && !st; w++) {
        if (all[4 * w] != c->pushes || all[4 * w + 1] != step)
            st = hx_emb_fail(err, HX_ERR_STATE, "server mode (device cache of hot rows): worker %d updates the "
                             "table as its step %lld (optimizer t %lld), worker %d as %lld (t %lld): every worker "
                             "updates every step once, in order", w, (long long)all[4 * w],
                             (long long)all[4 * w + 1], h->w, (long long)c->pushes, (long long)step);
        x->ncached[w] = all[4 * w + 2];
        x->cnt[w] = all[4 * w + 3];
        x->gcount[w] = x->ncached[w] * h->dim;
        x->total += x->cnt[w];
        x->totalc += x->ncached[w];
    }
    if (!st && (!(x->ids = malloc((size_t)(x->total + 1) * sizeof *x->ids)) ||
                !(x->grads = malloc((size_t)(x->totalc * h->dim + 1) * sizeof *x->grads))))
        st = oom(err);
    if (!st && x->total) st = gather(h, mine, x->ids, x->cnt, HX_DTYPE_I64, err);
    if (!st && x->totalc) st = gather(h, grad, x->grads, x->gcount, HX_DTYPE_F32, err);
    return st;
}

/* The replica's step: the cached rows' gradients in worker order, as the
 * servers would apply them; the rows changed. */
static hx_status replica_step(ps_hot *h, const exchange *x, int64_t step, hx_emb_err *err)
{
    if (!x->totalc) return HX_OK;
    int64_t *slot = malloc((size_t)x->totalc * sizeof *slot), k = 0, at = 0;
    if (!slot) return oom(err);
    hx_status st = HX_OK;
    for (int w = 0; w < h->W && !st; w++) {
        for (int64_t i = 0; i < x->ncached[w] && !st; i++) {
            int32_t s = hx__ps_hot_slot(h, x->ids[at + i]);
            if (s < 0)
                st = hx_emb_fail(err, HX_ERR_STATE, "server mode (device cache of hot rows): worker %d holds row "
                                 "%lld, worker %d does not: the workers' caches differ", w,
                                 (long long)x->ids[at + i], h->w);
            slot[k++] = s;
        }
        at += x->cnt[w];
    }
    if (!st) {
        hx_emb_query q = hx_emb_query_rows(slot, x->totalc);
        hx_emb_grad_input gi = {x->grads, NULL, h->dim, HX_EMB_DEDUP_AUTO};
        st = hx_emb_table_backward_update(h->rept, &q, &gi, step, h->ws, err);
    }
    for (int64_t i = 0; i < x->totalc && !st; i++) h->slots.dirty[slot[i]] = 1;
    free(slot);
    return st;
}

hx_status hx__ps_hot_update(hx_emb_ps *c, const hx_emb_sparse_grad *g, int64_t step, signed char *skip,
                            hx_emb_err *err)
{
    ps_hot *h = c->hot;
    hx_status st = hx__ps_hot_check(h, err);
    if (st) return st;
    int64_t dim = h->dim, nc = 0, n = 0;
    /* this worker's rows: the cached ones first (their gradients go to the workers), then the others */
    int64_t *mine = malloc((size_t)(g->n + 1) * sizeof *mine);
    float *grad = malloc((size_t)(g->n * dim + 1) * sizeof *grad);
    if (!mine || !grad) {
        free(mine);
        free(grad);
        return oom(err);
    }
    for (int64_t i = 0; i < g->n; i++)
        if (!skip[i] && hx__ps_hot_slot(h, g->ids[i]) >= 0) {
            memcpy(grad + nc * dim, g->rows + i * g->stride, (size_t)dim * sizeof *grad);
            mine[nc++] = g->ids[i];
            skip[i] = -1; /* not pushed */
        }
    n = nc;
    for (int64_t i = 0; i < g->n; i++)
        if (!skip[i]) mine[n++] = g->ids[i];
    exchange x;
    st = exchange_rows(c, mine, n, nc, grad, step, &x, err);
    if (!st) st = replica_step(h, &x, step, err);
    if (!st) h->calls++;
    /* membership for the next step; the victims' write-backs go before this step's push */
    if (!st) st = admit(c, x.ids, x.cnt, x.ncached, c->pushes + 1, err);
    exchange_free(&x);
    free(mine);
    free(grad);
    return st;
}

hx_status hx__ps_hot_fill(hx_emb_ps *c, hx_status pushed, hx_emb_err *err)
{
    ps_hot *h = c->hot;
    if (!h->nfill || pushed) { /* a failed push: the admitted slots stay empty */
        if (h->nfill) h->broken = pushed;
        h->nfill = 0;
        return pushed;
    }
    size_t rec = hx__ps_record(c);
    int ns = hx_emb_optim_nstate(c->route.optim.kind);
    bool rowwise = c->route.optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    char *recs = malloc((size_t)h->nfill * rec);
    uint8_t *cold = malloc((size_t)h->nfill);
    hx_status st = recs && cold ? hx__ps_fetch_locked(c, h->fill_row, h->nfill, recs, rec, cold, err) : oom(err);
    for (int64_t m = 0; m < h->nfill && !st; m++) {
        if (cold[m]) hx_emb_local_init_row_as(h->rep, h->fill_slot[m], h->fill_row[m], h->tmp);
        else hx_emb_local_unpack_row(h->rep, h->fill_slot[m], ns, rowwise, recs + (size_t)m * rec);
        h->rows_init += cold[m];
        h->rows_in += !cold[m];
        h->bytes_in += cold[m] ? 0 : rec;
    }
    if (st) h->broken = st;
    h->nfill = 0;
    free(recs);
    free(cold);
    return st;
}

hx_status hx__ps_hot_flush(hx_emb_ps *c, hx_emb_err *err)
{
    hx_status st = hx__ps_hot_check(c->hot, err);
    return st ? st : store_dirty(c, NULL, 0, c->pushes, err);
}

hx_status hx__ps_hot_set_optim(hx_emb_ps *c, const hx_emb_optim *o, hx_emb_err *err)
{
    ps_hot *h = c->hot;
    hx_status st = h->w == 0 ? hx__ps_hot_flush(c, err) : hx__ps_hot_check(h, err);
    if (!st) st = hx_emb_local_set_optim(h->rept, o, 1, err);
    if (!st) hx_emb_slots_drop(&h->slots);
    return st;
}

void hx__ps_hot_stats(const ps_hot *h, hx_emb_devcache_stats *out)
{
    int64_t resident = 0, dirty = 0;
    for (int64_t k = 0; k < h->C; k++) {
        resident += h->slots.slot_row[k] >= 0;
        dirty += h->slots.slot_row[k] >= 0 && h->slots.dirty[k];
    }
    *out = (hx_emb_devcache_stats){.cache_rows = h->C, .resident = resident, .dirty = dirty, .lookups = h->lookups,
                                   .hits = h->hits, .rows_in = h->rows_in, .rows_out = h->rows_out,
                                   .rows_init = h->rows_init, .bytes_in = h->bytes_in, .bytes_out = h->bytes_out,
                                   .bytes_exchanged = hx__comm_bytes_sent(h->comm),
                                   .evictions = h->evictions, .calls = h->calls,
                                   .bytes = h->rep->reg[0].bytes + h->rep->reg[1].bytes + h->rep->reg[2].bytes};
}
