/* Hot rows replicated on every rank of a collective sharded table
 * (device_cache_rows with comm): embedding/hot.h's cache over a duplicate
 * of the shard's communicator, every rank a member and the owner of its
 * rows.
 *
 * A cached row's lookup reads the replica (no exchange for it). Its
 * gradient goes to every rank (hx_emb_hot_update) instead of its owner;
 * the owner's update (shard_table.c) concatenates what it receives in
 * rank order and runs one backward_update, as the replica does. The
 * other rows go to their owners as always, and their update is applied
 * before the cache's exchange, so a failed input fails every rank before
 * anything changes.
 *
 * A failed fill breaks this rank's cache (hot.h's Faults): its next
 * lookup or update fails every rank at once, naming it (the verdict every
 * exchange of ids carries), before anything changes. Write-backs move
 * nothing between ranks and take no memory: they cannot fail.
 *
 * Every rank holds the same rows and dirty flags, so write-backs move
 * nothing: each rank stores the changed rows it owns from its own
 * replica into its part (eviction, and a flush before a save, a read or
 * a write of rows, a load or a change of optimizer). Admission: the
 * owners of the admitted rows send them with their state to every rank
 * (one all-gather), after the step's update. */
#include "embedding/shard_impl.h"

#include <stdlib.h>
#include <string.h>

static const char what[] = "sharded embedding (device cache of hot rows)";

static hx_status oom(hx_emb_err *err) { return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "%s: out of memory", what); }

hx_status hx_emb_shard_hot_create(hx_emb_shard *s, hx_emb_err *err)
{
    if (s->dynamic) /* the same on every rank (the configurations agree) */
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED, "sharded embedding: device_cache_rows with DYNAMIC ids is "
                           "not built (a training lookup gives new keys their rows at the owners); use ROWS or "
                           "MODULO ids or leave device_cache_rows 0");
    hx_emb_err mine;
    pthread_mutex_lock(&s->lock);
    hx_status own = hx_emb_hot_create(s->comm, &s->tc, what, "rank", &s->hot, &mine);
    hx_status st = own == HX_ERR_COMM ? hx_emb_fail(err, own, "%s", mine.msg)
                                      : hx__shard_agree(s, HX_EMB_X_CREATE, own, &mine, err);
    if (st) {
        hx_emb_hot_free(s->hot);
        s->hot = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

hx_status hx_emb_shard_hot_bind(hx_emb_shard *s, const hx_emb_mem *mem, hx_emb_err *err)
{
    pthread_mutex_lock(&s->lock);
    hx_status st = s->hot ? hx_emb_hot_bind(s->hot, mem, err) : HX_OK;
    pthread_mutex_unlock(&s->lock);
    return st;
}

bool hx_emb_shard_hot_stats(hx_emb_shard *s, hx_emb_devcache_stats *out)
{
    pthread_mutex_lock(&s->lock);
    bool on = s->hot;
    if (on) hx_emb_hot_stats(s->hot, out);
    pthread_mutex_unlock(&s->lock);
    return on;
}

/* A changed row stored into this rank's part, if it owns it. */
static void put_owned(void *ctx, int64_t row, const char *rec)
{
    hx_emb_shard *s = ctx;
    int owner;
    int64_t loc;
    hx__shard_place(s, row, &owner, &loc);
    if (owner != s->rank) return;
    hx_emb_local_materialise(s->local, loc, s->hot->tmp);
    hx_emb_local_unpack_row(s->local, loc, hx_emb_optim_nstate(s->optim.kind),
                            s->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD, rec);
}

/* The changed rows among slots[0 .. n) (NULL: every slot) stored into the
 * parts of their owners, on each rank those it owns (hx_emb_hot_evict_fn);
 * clean on every rank. */
static hx_status write_back(void *ctx, const int64_t *slots, int64_t n, hx_emb_err *err)
{
    (void)err;
    hx_emb_shard *s = ctx;
    hx_emb_hot_write_each(s->hot, slots, n, put_owned, s);
    return HX_OK;
}

/* The admitted rows from their owners: each owner's block holds, per
 * admitted row it owns in admission order, a cold flag and the row's
 * record, in i64 words; one all-gather to every rank. */
static hx_status fill(hx_emb_shard *s, hx_emb_err *err)
{
    hx_emb_hot *h = s->hot;
    int N = s->size;
    size_t rec = hx_emb_hot_record(h);
    int64_t words = 1 + (int64_t)((rec + 7) / 8), nf = h->nfill;
    int64_t *count = calloc((size_t)N, sizeof *count), *mine = NULL, *all = NULL;
    int *owner = malloc((size_t)(nf + 1) * sizeof *owner);
    int64_t *loc = malloc((size_t)(nf + 1) * sizeof *loc);
    hx_status st = count && owner && loc ? HX_OK : oom(err);
    for (int64_t m = 0; m < nf && !st; m++) {
        hx__shard_place(s, h->fill_row[m], &owner[m], &loc[m]);
        count[owner[m]] += words;
    }
    if (!st && (!(mine = calloc((size_t)(count[s->rank] + 1), sizeof *mine)) ||
                !(all = malloc((size_t)(nf * words + 1) * sizeof *all))))
        st = oom(err);
    int ns = hx_emb_optim_nstate(s->optim.kind);
    bool rowwise = s->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    for (int64_t m = 0, k = 0; m < nf && !st; m++) {
        if (owner[m] != s->rank) continue;
        int64_t *w = mine + k++ * words;
        w[0] = hx_emb_local_is_cold(s->local, loc[m]);
        if (!w[0]) hx_emb_local_pack_row(s->local, loc[m], ns, rowwise, (char *)(w + 1));
    }
    hx_coll *q = NULL; /* (out of memory above leaves the peers waiting: they fail when the
                          communicator's timeout passes) */
    if (!st && nf && !(st = hx__comm_all_gather_v(h->comm, mine, all, count, HX_DTYPE_I64, &q)))
        st = hx__coll_wait(q);
    if (st && st != HX_ERR_OUT_OF_MEMORY)
        st = hx_emb_fail(err, st, "%s: the admitted rows from their owners: %s", what, hx_last_error());
    int64_t *next = calloc((size_t)N, sizeof *next); /* each owner's next record in all */
    if (!st && !next) st = oom(err);
    for (int j = 1; j < N && !st; j++) next[j] = next[j - 1] + count[j - 1];
    for (int64_t m = 0; m < nf && !st; m++) {
        const int64_t *w = all + next[owner[m]];
        next[owner[m]] += words;
        hx_emb_hot_take(h, m, (const char *)(w + 1), w[0]);
        s->stats.hot_rows += owner[m] != s->rank && !w[0];
    }
    if (st) hx_emb_hot_fail(h, st, err->msg);
    free(next);
    free(mine);
    free(all);
    free(owner);
    free(loc);
    free(count);
    h->nfill = 0;
    return st;
}

hx_status hx__shard_hot_step(hx_emb_shard *s, const hx_emb_sparse_grad *g, int64_t step, const signed char *skip,
                             hx_emb_err *err)
{
    hx_status st = hx_emb_hot_update(s->hot, g, s->stats.exchanges, step, skip, write_back, s, err);
    for (int64_t i = 0; i < g->n && !st; i++) s->stats.hot_rows += skip[i] < 0 ? s->size - 1 : 0;
    return st ? st : fill(s, err);
}

hx_status hx__shard_hot_flush(hx_emb_shard *s, bool drop, hx_emb_err *err)
{
    hx_status st = hx_emb_hot_check(s->hot, err);
    if (!st) st = write_back(s, NULL, 0, err);
    if (!st && drop) hx_emb_hot_drop(s->hot);
    return st;
}

void hx__shard_hot_before(hx_emb_shard *s, bool drop, hx_status *verdict, hx_emb_err *mine)
{
    if (!s->hot) return;
    hx_emb_err e;
    hx_status st = hx__shard_hot_flush(s, drop, &e);
    if (st && !*verdict) {
        *verdict = st;
        *mine = e;
    }
}

hx_status hx__shard_hot_split(hx_emb_shard *s, const int64_t *ids, int64_t n, signed char *skip,
                              hx_emb_shard_hits *hits, hx_emb_err *err)
{
    hx_emb_hot *h = s->hot;
    memset(hits, 0, sizeof *hits);
    hx_status st = hx_emb_hot_check(h, err);
    if (st) return st;
    hx_emb_rowmap seen;
    memset(&seen, 0, sizeof seen);
    hits->at = malloc((size_t)(n + 1) * sizeof *hits->at);
    hits->slot = malloc((size_t)(n + 1) * sizeof *hits->slot);
    if (!hits->at || !hits->slot || hx_emb_rowmap_init(&seen, n + 1)) {
        hx_emb_rowmap_free(&seen);
        return oom(err);
    }
    for (int64_t i = 0; i < n; i++) {
        int32_t k = skip[i] ? -1 : hx_emb_hot_slot(h, ids[i]);
        hits->at[i] = -1;
        if (k < 0) continue;
        skip[i] = -1; /* the route sends nothing for it */
        int32_t u = hx_emb_rowmap_get(&seen, ids[i]);
        if (u < 0) {
            u = (int32_t)hits->H;
            hits->slot[hits->H++] = k;
            hx_emb_rowmap_put(&seen, ids[i], u);
        }
        hits->at[i] = u;
    }
    hx_emb_rowmap_free(&seen);
    return HX_OK;
}

hx_status hx__shard_hot_rows(hx_emb_shard *s, const hx_emb_shard_hits *hits, hx_emb_route *r, float **rows,
                             hx_emb_err *err)
{
    hx_emb_hot *h = s->hot;
    int64_t dim = s->base.dim, U = r->U;
    hx_emb_hot_count(h, U + hits->H, hits->H);
    if (!hits->H) return HX_OK;
    float *all = realloc(*rows, (size_t)((U + hits->H) * dim + 1) * sizeof *all);
    float *tmp = malloc((size_t)h->rep->gstride * sizeof *tmp);
    if (!all || !tmp) {
        if (all) *rows = all;
        free(tmp);
        return oom(err);
    }
    *rows = all;
    for (int64_t u = 0; u < hits->H; u++) {
        hx_emb_hot_read(h, HX_EMB_SHARD_ROWS, hits->slot[u], tmp);
        memcpy(all + (U + u) * dim, tmp, (size_t)dim * sizeof *all);
    }
    for (int64_t i = 0; i < r->n; i++)
        if (hits->at[i] >= 0) r->inv[i] = U + hits->at[i];
    r->U = U + hits->H;
    free(tmp);
    return HX_OK;
}

void hx__shard_hits_free(hx_emb_shard_hits *hits)
{
    free(hits->at);
    free(hits->slot);
}
