/* The sharded table's exchanges: ids de-duplicated and grouped by owner,
 * then all-to-all-v rounds over the shard's communicator, each rank's
 * status carried with them so that a failure anywhere fails every rank
 * at the same round (and none waits for a peer that gave up). */
#include "embedding/shard_impl.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void hx__shard_place(const hx_emb_shard *s, int64_t id, int *owner, int64_t *local)
{
    if (s->table_wise) {
        *owner = s->owner;
        *local = id;
    } else if (s->dynamic) {
        *owner = (int)(XXH3_64bits_withSeed(&id, sizeof id, s->owner_seed) % (uint64_t)s->size);
        *local = id;
    } else {
        *owner = (int)(id % s->size);
        *local = id / s->size;
    }
}

void hx__shard_route_free(hx_emb_route *r)
{
    free(r->send);
    free(r->first);
    free(r->inv);
    free(r->scount);
    free(r->recv);
    memset(r, 0, sizeof *r);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

hx_status hx__shard_route_plan(hx_emb_shard *s, const int64_t *ids, int64_t n,
                               const signed char *skip, bool dedup, hx_emb_route *r,
                               hx_emb_err *err)
{
    memset(r, 0, sizeof *r);
    int N = s->size;
    r->n = n;
    size_t nn = (size_t)(n ? n : 1);
    uint64_t cap = 2;
    while (dedup && cap < 2 * (uint64_t)nn) cap <<= 1;
    /* per unique id (first-position order): its id, owner, local id */
    int64_t *uid = malloc(nn * sizeof *uid), *ulocal = malloc(nn * sizeof *ulocal);
    int *uown = malloc(nn * sizeof *uown);
    int64_t *slot = dedup ? malloc(cap * sizeof *slot) : NULL; /* index into uid, -1 empty */
    r->inv = malloc(nn * sizeof *r->inv);
    r->first = malloc(nn * sizeof *r->first);
    r->send = malloc(nn * sizeof *r->send);
    r->scount = calloc((size_t)N * 4, sizeof *r->scount);
    hx_status st = HX_OK;
    if (!uid || !ulocal || !uown || (dedup && !slot) || !r->inv || !r->first || !r->send || !r->scount) {
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory routing %lld ids",
                         (long long)n);
        goto out;
    }
    r->sdispl = r->scount + N;
    r->rcount = r->scount + 2 * N;
    r->rdispl = r->scount + 3 * N;
    if (dedup) memset(slot, 0xff, cap * sizeof *slot);
    int64_t U = 0;
    for (int64_t i = 0; i < n; i++) {
        if (skip && skip[i]) {
            r->inv[i] = skip[i] < 0 ? -1 : -2;
            continue;
        }
        int64_t id = ids[i], u = -1;
        if (dedup) {
            uint64_t h = mix((uint64_t)id) & (cap - 1);
            while (slot[h] >= 0 && uid[slot[h]] != id) h = (h + 1) & (cap - 1);
            if (slot[h] >= 0) u = slot[h];
            else slot[h] = U;
        }
        if (u < 0) {
            u = U++;
            uid[u] = id;
            r->first[u] = i;
            hx__shard_place(s, id, &uown[u], &ulocal[u]);
            r->scount[uown[u]]++;
        }
        r->inv[i] = u;
    }
    r->U = U;
    /* group by owner (stable): position of unique u in the send order */
    for (int j = 1; j < N; j++) r->sdispl[j] = r->sdispl[j - 1] + r->scount[j - 1];
    int64_t *at = uid; /* uid is no longer needed: reuse it as the order */
    int64_t *next = malloc((size_t)N * sizeof *next), *first = malloc(nn * sizeof *first);
    if (!next || !first) {
        free(next);
        free(first);
        st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory routing %lld ids",
                         (long long)n);
        goto out;
    }
    memcpy(next, r->sdispl, (size_t)N * sizeof *next);
    for (int64_t u = 0; u < U; u++) {
        int64_t k = next[uown[u]]++;
        at[u] = k;
        r->send[k] = ulocal[u];
        first[k] = r->first[u];
    }
    memcpy(r->first, first, (size_t)U * sizeof *first);
    free(first);
    free(next);
    for (int64_t i = 0; i < n; i++)
        if (r->inv[i] >= 0) r->inv[i] = at[r->inv[i]];
out:
    free(uid);
    free(ulocal);
    free(uown);
    free(slot);
    if (st) hx__shard_route_free(r);
    return st;
}

/* One all-to-all-v on the shard's communicator, waited for. */
static hx_status a2av(hx_emb_shard *s, const void *send, const int64_t *sc, const int64_t *sd, void *recv,
                      const int64_t *rc, const int64_t *rd, hx_dtype dt, hx_emb_err *err)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_to_all_v(s->comm, send, sc, sd, recv, rc, rd, dt, &q);
    if (!st) st = hx__coll_wait(q);
    return st ? hx_emb_fail(err, st, "sharded embedding: %s", hx_last_error()) : HX_OK;
}

static const char *kind_name(int64_t k)
{
    switch (k) {
    case HX_EMB_X_LOOKUP: return "a lookup";
    case HX_EMB_X_TRAIN_LOOKUP: return "a training lookup";
    case HX_EMB_X_UPDATE: return "an update";
    case HX_EMB_X_READ: return "a read of rows";
    case HX_EMB_X_WRITE: return "a write of rows";
    case HX_EMB_X_CREATE: return "the table's creation";
    case HX_EMB_X_SAVE: return "a save";
    case HX_EMB_X_LOAD: return "a load";
    }
    return "an unknown exchange";
}

/* every rank's (status, kind) in all[2 * j]: this rank's verdict first,
 * then the first failing rank's, then kinds that differ */
static hx_status judge(hx_emb_shard *s, const int64_t *all, int64_t kind, hx_status mine,
                       const hx_emb_err *msg, hx_emb_err *err)
{
    if (mine) {
        if (err && msg && err != msg) *err = *msg;
        return mine;
    }
    for (int j = 0; j < s->size; j++)
        if (all[2 * j])
            return hx_emb_fail(err, (hx_status)all[2 * j],
                               "sharded embedding: rank %d failed its part of %s (%s; its own error "
                               "names the cause), so this rank fails it too and no shard changed",
                               j, kind_name(kind), hx_status_name((hx_status)all[2 * j]));
    for (int j = 0; j < s->size; j++)
        if (all[2 * j + 1] != kind)
            return hx_emb_fail(err, HX_ERR_STATE,
                               "sharded embedding: this rank (%d) started %s while rank %d started %s: "
                               "every rank must make the same calls on a sharded table in the same "
                               "order (the same graph, runs and reads)", s->rank, kind_name(kind), j,
                               kind_name(all[2 * j + 1]));
    return HX_OK;
}

hx_status hx__shard_exchange_ids(hx_emb_shard *s, hx_emb_xkind kind, hx_emb_route *r,
                                 hx_status verdict, const hx_emb_err *vmsg, hx_emb_err *err)
{
    int N = s->size;
    s->stats.exchanges++;
    s->stats.ids_in += r->n;
    s->stats.ids_sent += r->U;
    s->stats.ids_remote += r->scount ? r->U - r->scount[s->rank] : 0;
    /* round 1: (count, status, kind) to every rank */
    int64_t *hs = calloc((size_t)N * 3 * 2, sizeof *hs), *c3 = calloc((size_t)N * 2, sizeof *c3);
    int64_t *all = calloc((size_t)N * 2, sizeof *all);
    if (!hs || !c3 || !all) {
        free(hs);
        free(c3);
        free(all);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    }
    int64_t *hr = hs + 3 * N, *cd = c3 + N;
    for (int j = 0; j < N; j++) {
        hs[3 * j] = verdict ? 0 : r->scount[j];
        hs[3 * j + 1] = verdict;
        hs[3 * j + 2] = kind;
        c3[j] = 3;
        cd[j] = 3 * j;
    }
    hx_status st = a2av(s, hs, c3, cd, hr, c3, cd, HX_DTYPE_I64, err);
    for (int j = 0; j < N && !st; j++) {
        all[2 * j] = hr[3 * j + 1];
        all[2 * j + 1] = hr[3 * j + 2];
    }
    if (!st) st = judge(s, all, kind, verdict, vmsg, err);
    for (int j = 0; j < N && !st; j++) r->rcount[j] = hr[3 * j];
    free(hs);
    free(c3);
    free(all);
    if (st) return st;
    /* round 2: the ids */
    r->nrecv = 0;
    for (int j = 0; j < N; j++) {
        r->rdispl[j] = r->nrecv;
        r->nrecv += r->rcount[j];
    }
    r->recv = malloc((size_t)(r->nrecv ? r->nrecv : 1) * sizeof *r->recv);
    if (!r->recv) /* the peers then wait, and fail when the timeout passes naming this rank */ return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    return a2av(s, r->send, r->scount, r->sdispl, r->recv, r->rcount, r->rdispl, HX_DTYPE_I64, err);
}

hx_status hx__shard_reply(hx_emb_shard *s, hx_emb_xkind kind, const hx_emb_route *r, const float *owned,
                          int64_t width, hx_status st, const hx_emb_err *msg, float *out, hx_emb_err *err)
{
    /* every owner's status first: a failed owner sends no rows */
    hx_status x = hx__shard_agree(s, kind, st, msg, err);
    if (x) return x;
    int N = s->size;
    int64_t *cnt = malloc((size_t)N * 4 * sizeof *cnt);
    if (!cnt) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    for (int j = 0; j < N; j++) {
        cnt[j] = r->rcount[j] * width;
        cnt[N + j] = r->rdispl[j] * width;
        cnt[2 * N + j] = r->scount[j] * width;
        cnt[3 * N + j] = r->sdispl[j] * width;
    }
    x = a2av(s, owned, cnt, cnt + N, out, cnt + 2 * N, cnt + 3 * N, HX_DTYPE_F32, err);
    free(cnt);
    return x;
}

hx_status hx__shard_push(hx_emb_shard *s, const hx_emb_route *r, const float *rows, int64_t width,
                         float *recv_rows, hx_emb_err *err)
{
    int N = s->size;
    int64_t *cnt = malloc((size_t)N * 4 * sizeof *cnt);
    if (!cnt) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    for (int j = 0; j < N; j++) {
        cnt[j] = r->scount[j] * width;
        cnt[N + j] = r->sdispl[j] * width;
        cnt[2 * N + j] = r->rcount[j] * width;
        cnt[3 * N + j] = r->rdispl[j] * width;
    }
    hx_status st = a2av(s, rows, cnt, cnt + N, recv_rows, cnt + 2 * N, cnt + 3 * N, HX_DTYPE_F32, err);
    free(cnt);
    return st;
}

hx_status hx__shard_push_counts(hx_emb_shard *s, const hx_emb_route *r, const int64_t *cnt, int64_t *recv,
                                hx_emb_err *err)
{
    return a2av(s, cnt, r->scount, r->sdispl, recv, r->rcount, r->rdispl, HX_DTYPE_I64, err);
}

hx_status hx__shard_agree(hx_emb_shard *s, hx_emb_xkind kind, hx_status st, const hx_emb_err *msg,
                          hx_emb_err *err)
{
    int N = s->size;
    int64_t *v = malloc((size_t)N * 3 * sizeof *v);
    if (!v) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "sharded embedding: out of memory");
    int64_t mine = st;
    hx_coll *q = NULL;
    hx_status x = hx__comm_all_gather(s->comm, &mine, v, 1, HX_DTYPE_I64, &q);
    if (!x) x = hx__coll_wait(q);
    if (x) x = hx_emb_fail(err, x, "sharded embedding: %s", hx_last_error());
    int64_t *all = v + N;
    for (int j = 0; j < N && !x; j++) {
        all[2 * j] = v[j];
        all[2 * j + 1] = kind;
    }
    if (!x) x = judge(s, all, kind, st, msg, err);
    free(v);
    return x;
}
