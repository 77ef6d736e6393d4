/* Hot rows replicated on every rank of a group (embedding/hot.h): the
 * replica, the members' exchange and its step, the shared membership
 * policy; the owners' side (write-backs, fills) is the caller's. */
#include "embedding/hot.h"

#include <stdlib.h>
#include <string.h>

static hx_status oom(const hx_emb_hot *h, hx_emb_err *err)
{
    return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", h->what);
}

/* Room for n rows in seen[i] (emptied); -1 when out of memory. */
static int seen_room(hx_emb_hot *h, int i, int64_t n)
{
    if (h->seen_cap[i] >= n) return 0;
    hx_emb_rowmap_free(&h->seen[i]);
    memset(&h->seen[i], 0, sizeof h->seen[i]);
    h->seen_cap[i] = 0;
    if (hx_emb_rowmap_init(&h->seen[i], n)) return -1;
    h->seen_cap[i] = n;
    return 0;
}

void hx_emb_hot_free(hx_emb_hot *h)
{
    if (!h) return;
    hx_emb_table_free(h->rep ? &h->rep->base : NULL);
    hx_emb_devmem_free(&h->dm);
    hx_emb_slots_free(&h->slots);
    for (int i = 0; i < 2; i++) hx_emb_rowmap_free(&h->seen[i]);
    hx_emb_workspace_free(h->ws);
    hx_comm_free(h->comm);
    free(h->fill_row);
    free(h->fill_slot);
    free(h->tmp);
    free(h->rec);
    free(h->lost);
    free(h);
}

hx_status hx_emb_hot_create(hx_comm *comm, const hx_emb_table_config *tc, const char *what, const char *who,
                            hx_emb_hot **out, hx_emb_err *err)
{
    *out = NULL;
    hx_emb_hot *h = calloc(1, sizeof *h);
    if (!h) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    h->what = what;
    h->who = who;
    hx_status st = hx__comm_dup(comm, &h->comm); /* collective over the group */
    if (st) {
        hx_emb_hot_free(h);
        return hx_emb_fail(err, st, "%s: %s", what, hx_last_error());
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
    hx_emb_table *rep;
    if ((st = hx_emb_local_create(&cc, &rep, err))) {
        hx_emb_hot_free(h);
        return st;
    }
    h->rep = hx_emb_as_local(rep);
    h->rep->init = tc->init; /* a cold row's first value, as its owner would give it */
    h->fill_row = malloc((size_t)h->C * sizeof *h->fill_row);
    h->fill_slot = malloc((size_t)h->C * sizeof *h->fill_slot);
    h->tmp = malloc((size_t)h->rep->gstride * sizeof *h->tmp);
    h->rec = malloc((size_t)h->dim * (h->rep->esize + 2 * sizeof(float))); /* two state arrays at most */
    h->lost = calloc((size_t)h->C, 1);
    h->ws = hx_emb_workspace_create();
    int64_t direct = (uint64_t)h->rows <= (uint64_t)h->C * 16 ? h->rows : 0; /* as cheap as the slots */
    if (!h->fill_row || !h->fill_slot || !h->tmp || !h->rec || !h->lost || !h->ws ||
        hx_emb_slots_init(&h->slots, h->C, direct) ||
        seen_room(h, 0, 1024) || seen_room(h, 1, 1024)) {
        hx_emb_hot_free(h);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    }
    *out = h;
    return HX_OK;
}

int32_t hx_emb_hot_slot(const hx_emb_hot *h, int64_t row)
{
    int32_t k = hx_emb_rowmap_get(&h->slots.map, row);
    return h->broken && k >= 0 && h->lost[k] ? -1 : k;
}

void hx_emb_hot_read(hx_emb_hot *h, int k, int32_t slot, float *out)
{
    if (k == HX_EMB_SHARD_ROWS) hx_emb_local_read_row(h->rep, slot, out);
    else hx_emb_local_read_state(h->rep, k, slot, out);
}

hx_status hx_emb_hot_check(const hx_emb_hot *h, hx_emb_err *err)
{
    return h->broken ? hx_emb_fail(err, HX_ERR_STATE, "%s: this %s's device cache of the table broke: %s (%s); "
                                   "recreate the table and load its last checkpoint", h->what, h->who, h->why,
                                   hx_status_name(h->broken))
                     : HX_OK;
}

hx_status hx_emb_hot_readable(const hx_emb_hot *h, hx_emb_err *err)
{
    return h->torn ? hx_emb_hot_check(h, err) : HX_OK;
}

void hx_emb_hot_fail(hx_emb_hot *h, hx_status st, const char *why)
{
    if (!h->broken) { /* its first failure (a long message cut) */
        size_t n = strnlen(why, sizeof h->why - 1);
        h->broken = st;
        memcpy(h->why, why, n);
        h->why[n] = 0;
    }
    for (int64_t m = 0; m < h->nfill; m++) h->lost[h->fill_slot[m]] = 1;
    h->nfill = 0;
}

hx_status hx_emb_hot_bind(hx_emb_hot *h, const hx_emb_mem *mem, hx_emb_err *err)
{
    return hx_emb_devmem_move(&h->rep, &h->dm, mem, err);
}

hx_status hx_emb_hot_set_optim(hx_emb_hot *h, const hx_emb_optim *o, hx_emb_err *err)
{
    return hx_emb_devmem_set_optim(h->rep, &h->dm, o, err);
}

void hx_emb_hot_count(hx_emb_hot *h, int64_t lookups, int64_t hits)
{
    h->lookups += (uint64_t)lookups;
    h->hits += (uint64_t)hits;
    h->calls++;
}

size_t hx_emb_hot_record(const hx_emb_hot *h)
{
    int ns = hx_emb_optim_nstate(h->rep->optim.kind);
    size_t sf = h->rep->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD ? 1 : (size_t)h->dim;
    return (size_t)h->dim * h->rep->esize + (size_t)ns * sf * sizeof(float);
}

int64_t hx_emb_hot_dirty(const hx_emb_hot *h, const int64_t *slots, int64_t n, int64_t *rows, int64_t *at,
                         char *recs)
{
    size_t rec = hx_emb_hot_record(h);
    int ns = hx_emb_optim_nstate(h->rep->optim.kind);
    bool rowwise = h->rep->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    int64_t m = 0, len = slots ? n : h->C;
    for (int64_t i = 0; i < len; i++) {
        int64_t k = slots ? slots[i] : i;
        if (h->slots.slot_row[k] < 0 || !h->slots.dirty[k]) continue;
        hx_emb_local_pack_row(h->rep, k, ns, rowwise, recs + (size_t)m * rec);
        at[m] = k;
        rows[m++] = h->slots.slot_row[k];
    }
    return m;
}

void hx_emb_hot_cleaned(hx_emb_hot *h, const int64_t *at, int64_t m)
{
    for (int64_t i = 0; i < m; i++) h->slots.dirty[at[i]] = 0;
    h->rows_out += (uint64_t)m;
    h->bytes_out += (uint64_t)m * hx_emb_hot_record(h);
}

void hx_emb_hot_write_each(hx_emb_hot *h, const int64_t *slots, int64_t n,
                           void (*put)(void *ctx, int64_t row, const char *rec), void *ctx)
{
    int ns = hx_emb_optim_nstate(h->rep->optim.kind);
    bool rowwise = h->rep->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    for (int64_t i = 0, len = slots ? n : h->C; i < len; i++) {
        int64_t k = slots ? slots[i] : i;
        if (h->slots.slot_row[k] < 0 || !h->slots.dirty[k]) continue;
        hx_emb_local_pack_row(h->rep, k, ns, rowwise, h->rec);
        put(ctx, h->slots.slot_row[k], h->rec);
        hx_emb_hot_cleaned(h, &k, 1);
    }
}

void hx_emb_hot_take(hx_emb_hot *h, int64_t m, const char *rec, bool cold)
{
    if (cold) hx_emb_local_init_row_as(h->rep, h->fill_slot[m], h->fill_row[m], h->tmp);
    else
        hx_emb_local_unpack_row(h->rep, h->fill_slot[m], hx_emb_optim_nstate(h->rep->optim.kind),
                                h->rep->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD, rec);
    h->rows_init += cold;
    h->rows_in += !cold;
    h->bytes_in += cold ? 0 : hx_emb_hot_record(h);
}

void hx_emb_hot_drop(hx_emb_hot *h) { hx_emb_slots_drop(&h->slots); }

/* One all-gather of n elements of dt per member (counts: every member's)
 * into out, blocks in member order. */
static hx_status gather(hx_emb_hot *h, const void *send, void *out, const int64_t *counts, hx_dtype dt,
                        hx_emb_err *err)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather_v(h->comm, send, out, counts, dt, &q);
    if (!st) st = hx__coll_wait(q);
    return st ? hx_emb_fail(err, st, "%s: the %ss' exchange: %s", h->what, h->who, hx_last_error()) : HX_OK;
}

/* The rows every member touched (ids: member w's block holds its cached
 * rows, ncached[w], then its others) into the policy: the cached ones,
 * then those seen a second time (in two members' blocks, or in the last
 * step's too), at most C; evict(ctx) writes the changed victims back
 * before the admitted rows get their slots (filled by the caller). */
static hx_status admit(hx_emb_hot *h, const int64_t *ids, const int64_t *cnt, const int64_t *ncached,
                       hx_emb_hot_evict_fn evict, void *ctx, hx_emb_err *err)
{
    int64_t total = 0;
    for (int w = 0; w < h->W; w++) total += cnt[w];
    if (seen_room(h, h->cur, total + 1)) return oom(h, err);
    hx_emb_rowmap *now = &h->seen[h->cur], *before = &h->seen[!h->cur];
    hx_emb_rowmap_clear(now);
    int64_t *list = malloc((size_t)(total + 1) * sizeof *list), *out = malloc((size_t)(total + 1) * sizeof *out);
    if (!list || !out || !hx_emb_slots_room(&h->slots, total)) {
        free(list);
        free(out);
        return oom(h, err);
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
                                                              member now, or in the last step */
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
    hx_status st = evict ? evict(ctx, h->slots.victim, h->slots.nv, err) : HX_OK;
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

/* The members' exchange: every member's update counter, optimizer t,
 * counts and status (meta: META per member), then the rows (ids) and the
 * cached rows' gradients (grads), blocks in member order. */
enum { META = 5, WHY_WORDS = 200 / 8 };
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

/* Member `bad`, the first whose status in the exchange is not HX_OK
 * (st), broke its cache: every member learns how (one more round, the
 * members' `why`) and fails naming it. */
static hx_status member_broke(hx_emb_hot *h, int bad, hx_status st, hx_emb_err *err)
{
    int64_t *why = calloc((size_t)(h->W + 1) * WHY_WORDS + h->W, sizeof *why), *counts = why + (h->W + 1) * WHY_WORDS;
    if (!why) return oom(h, err); /* (the others wait in the round below until the timeout) */
    memcpy(why, h->why, sizeof h->why);
    for (int w = 0; w < h->W; w++) counts[w] = WHY_WORDS;
    hx_status x = gather(h, why, why + WHY_WORDS, counts, HX_DTYPE_I64, err);
    const char *text = (const char *)(why + (1 + bad) * WHY_WORDS);
    if (!x)
        x = bad == h->w ? hx_emb_hot_check(h, err)
                        : hx_emb_fail(err, HX_ERR_STATE, "%s: %s %d's device cache of the table broke: %.*s (%s); so "
                                      "every %s fails this update: recreate the table and load its last checkpoint",
                                      h->what, h->who, bad, (int)sizeof h->why - 1, text, hx_status_name(st),
                                      h->who);
    free(why);
    return x;
}

static hx_status exchange_rows(hx_emb_hot *h, const int64_t *mine, int64_t n, int64_t nc, const float *grad,
                               int64_t counter, int64_t step, exchange *x, hx_emb_err *err)
{
    int W = h->W;
    memset(x, 0, sizeof *x);
    if (!(x->meta = malloc((size_t)((META + 4) * W + META) * sizeof *x->meta))) return oom(h, err);
    int64_t *all = x->meta + META, *sizes = all + META * W;
    x->ncached = sizes + W;
    x->cnt = x->ncached + W;
    x->gcount = x->cnt + W;
    int64_t head[META] = {counter, step, nc, n, h->broken};
    for (int w = 0; w < W; w++) sizes[w] = META;
    memcpy(x->meta, head, sizeof head);
    hx_status st = gather(h, x->meta, all, sizes, HX_DTYPE_I64, err);
    for (int w = 0; w < W && !st; w++)
        if (all[META * w + 4]) st = member_broke(h, w, (hx_status)all[META * w + 4], err);
    for (int w = 0; w < W && !st; w++) {
        const int64_t *m = all + META * w;
        if (m[0] != counter || m[1] != step)
            st = hx_emb_fail(err, HX_ERR_STATE, "%s: %s %d updates the table as its update %lld (optimizer t "
                             "%lld), %s %d as %lld (t %lld): every %s updates every step once, in order",
                             h->what, h->who, w, (long long)m[0], (long long)m[1], h->who, h->w,
                             (long long)counter, (long long)step, h->who);
        x->ncached[w] = m[2];
        x->cnt[w] = m[3];
        x->gcount[w] = x->ncached[w] * h->dim;
        x->total += x->cnt[w];
        x->totalc += x->ncached[w];
    }
    if (!st && (!(x->ids = malloc((size_t)(x->total + 1) * sizeof *x->ids)) ||
                !(x->grads = malloc((size_t)(x->totalc * h->dim + 1) * sizeof *x->grads))))
        st = oom(h, err);
    if (!st && x->total) st = gather(h, mine, x->ids, x->cnt, HX_DTYPE_I64, err);
    if (!st && x->totalc) st = gather(h, grad, x->grads, x->gcount, HX_DTYPE_F32, err);
    return st;
}

/* The replica's step: the cached rows' gradients in member order, as the
 * owners would apply them; the rows changed. */
static hx_status replica_step(hx_emb_hot *h, const exchange *x, int64_t step, hx_emb_err *err)
{
    if (!x->totalc) return HX_OK;
    int64_t *slot = malloc((size_t)x->totalc * sizeof *slot), k = 0, at = 0;
    if (!slot) return oom(h, err);
    hx_status st = HX_OK;
    for (int w = 0; w < h->W && !st; w++) {
        for (int64_t i = 0; i < x->ncached[w] && !st; i++) {
            int32_t s = hx_emb_hot_slot(h, x->ids[at + i]);
            if (s < 0)
                st = hx_emb_fail(err, HX_ERR_STATE, "%s: %s %d holds row %lld, %s %d does not: the %ss' caches "
                                 "differ", h->what, h->who, w, (long long)x->ids[at + i], h->who, h->w, h->who);
            slot[k++] = s;
        }
        at += x->cnt[w];
    }
    if (!st) {
        hx_emb_query q = hx_emb_query_rows(slot, x->totalc);
        hx_emb_grad_input gi = {x->grads, NULL, h->dim, HX_EMB_DEDUP_AUTO};
        st = hx_emb_table_backward_update(&h->rep->base, &q, &gi, step, h->ws, err);
    }
    for (int64_t i = 0; i < x->totalc && !st; i++) h->slots.dirty[slot[i]] = 1;
    free(slot);
    return st;
}

void hx_emb_hot_mark(const hx_emb_hot *h, const hx_emb_sparse_grad *g, signed char *skip)
{
    for (int64_t i = 0; i < g->n; i++)
        if (!skip[i] && hx_emb_hot_slot(h, g->ids[i]) >= 0) skip[i] = -1;
}

hx_status hx_emb_hot_update(hx_emb_hot *h, const hx_emb_sparse_grad *g, int64_t counter, int64_t step,
                            const signed char *skip, hx_emb_hot_evict_fn evict, void *ctx, hx_emb_err *err)
{
    int64_t dim = h->dim, nc = 0, n = 0, gn = h->broken ? 0 : g->n; /* broken: its status alone (exchange_rows) */
    /* this member's rows: the cached ones first (their gradients go to the members), then the others */
    int64_t *mine = malloc((size_t)(gn + 1) * sizeof *mine);
    float *grad = malloc((size_t)(gn * dim + 1) * sizeof *grad);
    if (!mine || !grad) {
        free(mine);
        free(grad);
        return oom(h, err);
    }
    for (int64_t i = 0; i < gn; i++)
        if (skip[i] < 0) {
            memcpy(grad + nc * dim, g->rows + i * g->stride, (size_t)dim * sizeof *grad);
            mine[nc++] = g->ids[i];
        }
    n = nc;
    for (int64_t i = 0; i < gn; i++)
        if (!skip[i]) mine[n++] = g->ids[i];
    exchange x;
    hx_status st = exchange_rows(h, mine, n, nc, grad, counter, step, &x, err);
    bool exchanged = !st;
    if (!st && (st = replica_step(h, &x, step, err))) h->torn = true;
    if (!st) h->calls++;
    /* membership for the next step; the victims' write-backs go before the admitted rows' fills */
    if (!st) st = admit(h, x.ids, x.cnt, x.ncached, evict, ctx, err);
    if (st && exchanged) /* this member's replica or rows may now differ from the others' */
        hx_emb_hot_fail(h, st, err ? err->msg : hx_status_name(st));
    exchange_free(&x);
    free(mine);
    free(grad);
    return st;
}

void hx_emb_hot_stats(const hx_emb_hot *h, hx_emb_devcache_stats *out)
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
                                   .bytes = h->rep->reg[0].bytes + h->rep->reg[1].bytes + h->rep->reg[2].bytes,
                                   .on_device = h->rep->mem.alloc != NULL};
}
