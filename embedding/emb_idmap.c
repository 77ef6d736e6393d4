/* The dynamic id map: keys (any i64: raw feature ids, hashed strings) to
 * rows of a table, assigned on first sight (or after min_count sightings),
 * as Monolith's collisionless hash table. Open addressing with linear
 * probing over XXH3 of the key; deleted keys leave tombstones until the
 * next rehash. Rows freed by expiry or eviction are handed out again first,
 * in the order freed (ascending row within one expiry or eviction, so the
 * order does not depend on the slot layout). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "embedding/embedding.h"

/* slot.row values below 0 */
#define EMPTY (-3)
#define TOMB (-2)
#define PENDING (-1) /* counted, no row yet */

#define MIN_SLOTS 64

typedef struct slot {
    int64_t key, row, count, last;
} slot;

typedef struct undo {
    int64_t at;
    slot old;
} undo;

struct hx_emb_idmap {
    hx_emb_idmap_config cfg;
    slot *slots;
    int64_t nslots, live, tombs; /* live: keys with a row or pending */
    int64_t keys;                /* keys with a row */
    int64_t next_row;            /* rows [next_row, capacity) never handed out */
    int64_t *freeq;              /* freed rows: queue [fhead, ftail) */
    int64_t fhead, ftail, fcap;
    int64_t admitted, evicted, expired, filtered;
    undo *log;
    int64_t nlog, logcap;
    hx_emb_budget *budget; /* NULL: none */
    size_t charged;        /* bytes charged to it */
};

void hx_emb_hash_strings(const char *const *strs, const size_t *lens, int64_t n, uint64_t seed,
                         int64_t *keys)
{
    for (int64_t i = 0; i < n; i++) keys[i] = (int64_t)XXH3_64bits_withSeed(strs[i], lens[i], seed);
}

void hx_emb_keys_mod(const int64_t *keys, int64_t n, int64_t rows, int64_t *rows_out)
{
    for (int64_t i = 0; i < n; i++) rows_out[i] = (int64_t)((uint64_t)keys[i] % (uint64_t)rows);
}

static inline uint64_t key_hash(const hx_emb_idmap *m, int64_t key)
{
    return XXH3_64bits_withSeed(&key, sizeof key, m->cfg.seed);
}

/* The slot holding key, or -1. */
static int64_t find(const hx_emb_idmap *m, int64_t key)
{
    uint64_t mask = (uint64_t)m->nslots - 1, s = key_hash(m, key) & mask;
    for (;;) {
        const slot *sl = &m->slots[s];
        if (sl->row == EMPTY) return -1;
        if (sl->row != TOMB && sl->key == key) return (int64_t)s;
        s = (s + 1) & mask;
    }
}

/* Where key would go: its slot, or else the first tombstone or empty slot
 * on its probe path (*found says which). */
static int64_t find_or_place(const hx_emb_idmap *m, int64_t key, int *found)
{
    uint64_t mask = (uint64_t)m->nslots - 1, s = key_hash(m, key) & mask;
    int64_t tomb = -1;
    for (;;) {
        const slot *sl = &m->slots[s];
        if (sl->row == EMPTY) {
            *found = 0;
            return tomb >= 0 ? tomb : (int64_t)s;
        }
        if (sl->row == TOMB) {
            if (tomb < 0) tomb = (int64_t)s;
        } else if (sl->key == key) {
            *found = 1;
            return (int64_t)s;
        }
        s = (s + 1) & mask;
    }
}

/* Rehashes into at least `want` slots (a power of two); tombstones go. */
static int rehash(hx_emb_idmap *m, int64_t want)
{
    int64_t n = MIN_SLOTS;
    while (n < want) n *= 2;
    slot *ns = malloc((size_t)n * sizeof(slot)), *old = m->slots;
    if (!ns) return -1;
    for (int64_t i = 0; i < n; i++) ns[i].row = EMPTY;
    int64_t oldn = m->nslots;
    m->slots = ns;
    m->nslots = n;
    m->tombs = 0;
    for (int64_t i = 0; i < oldn; i++) {
        if (old[i].row == EMPTY || old[i].row == TOMB) continue;
        int found;
        ns[find_or_place(m, old[i].key, &found)] = old[i];
    }
    free(old);
    return 0;
}

hx_status hx_emb_idmap_create(const hx_emb_idmap_config *cfg, hx_emb_idmap **out,
                              hx_emb_err *err)
{
    if (!out) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding id map: out is NULL");
    *out = NULL;
    if (!cfg) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding id map: config is NULL");
    if (cfg->capacity < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding id map: capacity %lld < 1",
                           (long long)cfg->capacity);
    if (cfg->expire_after < 0)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding id map: expire_after %lld < 0",
                           (long long)cfg->expire_after);
    if (cfg->on_full != HX_EMB_FULL_ERROR && cfg->on_full != HX_EMB_FULL_EVICT)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding id map: unknown full policy %d",
                           (int)cfg->on_full);
    hx_emb_idmap *m = calloc(1, sizeof *m);
    if (!m || rehash(m, MIN_SLOTS)) {
        free(m);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory");
    }
    m->cfg = *cfg;
    *out = m;
    return HX_OK;
}

void hx_emb_idmap_free(hx_emb_idmap *m)
{
    if (!m) return;
    if (m->budget) hx_emb_budget_give(m->budget, m->charged);
    free(m->slots);
    free(m->freeq);
    free(m->log);
    free(m);
}

/* ---- the free queue ------------------------------------------------------------------- */

static int freeq_push(hx_emb_idmap *m, int64_t row)
{
    if (m->ftail == m->fcap) {
        int64_t cap = m->fcap ? m->fcap * 2 : 64;
        int64_t *q = realloc(m->freeq, (size_t)cap * sizeof(int64_t));
        if (!q) return -1;
        m->freeq = q;
        m->fcap = cap;
    }
    m->freeq[m->ftail++] = row;
    return 0;
}

static void freeq_compact(hx_emb_idmap *m)
{
    if (m->fhead == 0) return;
    memmove(m->freeq, m->freeq + m->fhead, (size_t)(m->ftail - m->fhead) * sizeof(int64_t));
    m->ftail -= m->fhead;
    m->fhead = 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* ---- the undo log of one call ------------------------------------------------------------- */

static int log_slot(hx_emb_idmap *m, int64_t at)
{
    if (m->nlog == m->logcap) {
        int64_t cap = m->logcap ? m->logcap * 2 : 256;
        undo *l = realloc(m->log, (size_t)cap * sizeof(undo));
        if (!l) return -1;
        m->log = l;
        m->logcap = cap;
    }
    m->log[m->nlog].at = at;
    m->log[m->nlog++].old = m->slots[at];
    return 0;
}

typedef struct saved {
    int64_t live, tombs, keys, next_row, fhead, ftail, admitted, evicted, filtered;
} saved;

static saved save_counts(const hx_emb_idmap *m)
{
    return (saved){m->live, m->tombs, m->keys, m->next_row, m->fhead, m->ftail,
                   m->admitted, m->evicted, m->filtered};
}

static void rollback(hx_emb_idmap *m, const saved *s)
{
    for (int64_t i = m->nlog - 1; i >= 0; i--) m->slots[m->log[i].at] = m->log[i].old;
    m->nlog = 0;
    m->live = s->live;
    m->tombs = s->tombs;
    m->keys = s->keys;
    m->next_row = s->next_row;
    m->fhead = s->fhead;
    m->ftail = s->ftail;
    m->admitted = s->admitted;
    m->evicted = s->evicted;
    m->filtered = s->filtered;
}

/* ---- eviction and expiry ------------------------------------------------------------------ */

/* Frees the rows of the keys in slots where pred holds (pending keys are
 * forgotten too, when forget_pending); freed rows join the queue in
 * ascending order. Logs the slots when `logged`. Returns rows freed, or -1
 * when out of memory. */
static int64_t drop_where(hx_emb_idmap *m, int64_t last_below, int64_t last_equal, int forget_pending,
                          int logged)
{
    int64_t first = m->ftail, freed = 0;
    for (int64_t s = 0; s < m->nslots; s++) {
        slot *sl = &m->slots[s];
        if (sl->row == EMPTY || sl->row == TOMB) continue;
        int hit = last_equal != INT64_MIN ? sl->last == last_equal : sl->last < last_below;
        if (!hit || (sl->row == PENDING && !forget_pending)) continue;
        if (logged && log_slot(m, s)) return -1;
        if (sl->row >= 0) {
            if (freeq_push(m, sl->row)) return -1;
            freed++;
            m->keys--;
        }
        sl->row = TOMB;
        m->live--;
        m->tombs++;
    }
    if (m->ftail > first) qsort(m->freeq + first, (size_t)(m->ftail - first), sizeof(int64_t), cmp_i64);
    return freed;
}

/* Evicts the keys (with rows) seen longest ago, all of that step, if it is
 * before `step`. Returns rows freed (0: nothing to evict), -1 out of memory. */
static int64_t evict_oldest(hx_emb_idmap *m, int64_t step)
{
    int64_t oldest = INT64_MAX;
    for (int64_t s = 0; s < m->nslots; s++)
        if (m->slots[s].row >= 0 && m->slots[s].last < oldest) oldest = m->slots[s].last;
    if (oldest == INT64_MAX || oldest >= step) return 0;
    int64_t freed = drop_where(m, 0, oldest, 0, 1);
    if (freed > 0) m->evicted += freed;
    return freed;
}

int64_t hx_emb_idmap_expire(hx_emb_idmap *m, int64_t step)
{
    if (!m || m->cfg.expire_after <= 0) return 0;
    freeq_compact(m);
    int64_t freed = drop_where(m, step - m->cfg.expire_after, INT64_MIN, 1, 0);
    if (freed < 0) return 0;
    m->expired += freed;
    return freed;
}

/* ---- the byte budget ---------------------------------------------------------------------- */

hx_emb_budget *hx_emb_budget_take(hx_emb_budget *b, size_t n)
{
    for (hx_emb_budget *p = b; p; p = p->parent) {
        size_t was = atomic_fetch_add(&p->used, n);
        if (p->cap && was + n > p->cap) {
            for (hx_emb_budget *q = b; q != p->parent; q = q->parent) atomic_fetch_sub(&q->used, n);
            return p;
        }
    }
    return NULL;
}

void hx_emb_budget_give(hx_emb_budget *b, size_t n)
{
    for (hx_emb_budget *p = b; p; p = p->parent) atomic_fetch_sub(&p->used, n);
}

/* The free-row queue sized for every row (under a budget it never grows). */
static hx_status reserve_freeq(hx_emb_idmap *m, hx_emb_err *err)
{
    if (m->fcap >= m->cfg.capacity) return HX_OK;
    int64_t *q = realloc(m->freeq, (size_t)m->cfg.capacity * sizeof(int64_t));
    if (!q) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory");
    m->freeq = q;
    m->fcap = m->cfg.capacity;
    return HX_OK;
}

/* Under a budget the undo log lives for one call. */
static void drop_log(hx_emb_idmap *m)
{
    if (!m->budget) return;
    free(m->log);
    m->log = NULL;
    m->logcap = 0;
}

hx_status hx_emb_idmap_set_budget(hx_emb_idmap *m, hx_emb_budget *b, hx_emb_err *err)
{
    if (m->budget) hx_emb_budget_give(m->budget, m->charged);
    m->budget = NULL;
    m->charged = 0;
    if (!b) return HX_OK;
    hx_status st = reserve_freeq(m, err);
    if (st) return st;
    free(m->log);
    m->log = NULL;
    m->logcap = 0;
    size_t bytes = hx_emb_idmap_bytes(m);
    hx_emb_budget *full = hx_emb_budget_take(b, bytes);
    if (full)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: its %zu bytes (slots for %lld keys, a "
                           "queue for its %lld rows) are over the cap of %zu bytes (%zu charged before it)",
                           bytes, (long long)m->nslots / 2, (long long)m->cfg.capacity, full->cap,
                           (size_t)atomic_load(&full->used));
    m->budget = b;
    m->charged = bytes;
    return HX_OK;
}

hx_status hx_emb_idmap_fits(hx_emb_idmap *m, const hx_emb_idmap *old, hx_emb_err *err)
{
    if (!old->budget) return HX_OK;
    hx_status st = reserve_freeq(m, err);
    if (st) return st;
    size_t bytes = sizeof *m + (size_t)m->nslots * sizeof(slot) + (size_t)m->fcap * sizeof(int64_t);
    for (const hx_emb_budget *p = old->budget; p; p = p->parent)
        if (p->cap && atomic_load(&p->used) - old->charged + bytes > p->cap)
            return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: the loaded map's %zu bytes (%lld "
                               "keys) do not fit the cap of %zu bytes in place of the map's %zu", bytes,
                               (long long)m->live, p->cap, old->charged);
    return HX_OK;
}

void hx_emb_idmap_replace(hx_emb_idmap *m, hx_emb_idmap *old)
{
    hx_emb_budget *b = old->budget;
    if (!b) return;
    hx_emb_budget_give(b, old->charged);
    old->budget = NULL;
    old->charged = 0;
    free(m->log);
    m->log = NULL;
    m->logcap = 0;
    m->charged = hx_emb_idmap_bytes(m);
    m->budget = b;
    /* checked by hx_emb_idmap_fits: charged even where a peer took the room since */
    for (hx_emb_budget *p = b; p; p = p->parent) atomic_fetch_add(&p->used, m->charged);
}

static bool in_sorted(const int64_t *u, int64_t n, int64_t key)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (u[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && u[lo] == key;
}

/* Whether slot sl may make room for a call of the keys u (sorted, nu) at
 * step: a key not of the call, seen before it, pending (rows 0) or with a
 * row (rows 1). */
static bool may_go(const slot *sl, int rows, int64_t step, const int64_t *u, int64_t nu)
{
    if (sl->row == EMPTY || sl->row == TOMB || (rows ? sl->row < 0 : sl->row != PENDING)) return false;
    return sl->last < step && !in_sorted(u, nu, sl->key);
}

/* Forgets the keys of may_go(rows) seen longest ago, all of that step
 * (rows freed to the queue in ascending order). Returns keys forgotten. */
static int64_t forget_oldest(hx_emb_idmap *m, int rows, int64_t step, const int64_t *u, int64_t nu)
{
    int64_t oldest = INT64_MAX, gone = 0, first = m->ftail;
    for (int64_t s = 0; s < m->nslots; s++)
        if (may_go(&m->slots[s], rows, step, u, nu) && m->slots[s].last < oldest) oldest = m->slots[s].last;
    for (int64_t s = 0; s < m->nslots && oldest != INT64_MAX; s++) {
        slot *sl = &m->slots[s];
        if (sl->last != oldest || !may_go(sl, rows, step, u, nu)) continue;
        if (sl->row >= 0) {
            m->freeq[m->ftail++] = sl->row; /* sized for every row */
            m->keys--;
            m->evicted++;
        }
        sl->row = TOMB;
        m->live--;
        m->tombs++;
        gone++;
    }
    if (m->ftail > first) qsort(m->freeq + first, (size_t)(m->ftail - first), sizeof(int64_t), cmp_i64);
    return gone;
}

/* Under a budget: slots for the call's new keys at a load of at most one
 * half, grown as the budget allows, else made by forgetting keys
 * (hx_emb_idmap_set_budget); the map is unchanged on failure. */
static hx_status room_within(hx_emb_idmap *m, const int64_t *keys, int64_t n, int64_t step, hx_emb_err *err)
{
    int64_t *u = malloc((size_t)(n ? n : 1) * sizeof *u), nu = 0, fresh = 0;
    if (!u) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory");
    memcpy(u, keys, (size_t)n * sizeof *u);
    qsort(u, (size_t)n, sizeof *u, cmp_i64);
    for (int64_t i = 0; i < n; i++)
        if (!nu || u[nu - 1] != u[i]) u[nu++] = u[i];
    for (int64_t i = 0; i < nu; i++) fresh += find(m, u[i]) < 0;
    hx_status st = HX_OK;
    int64_t want = MIN_SLOTS;
    while (want < 2 * (m->live + fresh)) want *= 2;
    hx_emb_budget *full = want > m->nslots ? hx_emb_budget_take(m->budget, (size_t)(want - m->nslots) * sizeof(slot))
                                           : NULL;
    if (want > m->nslots && !full) {
        size_t add = (size_t)(want - m->nslots) * sizeof(slot);
        if (rehash(m, want)) {
            hx_emb_budget_give(m->budget, add);
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory growing to %lld keys",
                             (long long)(m->live + fresh));
        } else {
            m->charged += add;
        }
    } else if (2 * (m->live + m->tombs + fresh) > m->nslots) { /* room within the slots it has */
        int64_t drop = m->live + fresh - m->nslots / 2, pending = 0, held = 0;
        bool evict = m->cfg.on_full == HX_EMB_FULL_EVICT;
        for (int64_t s = 0; s < m->nslots && drop > 0; s++) {
            pending += may_go(&m->slots[s], 0, step, u, nu);
            held += evict && may_go(&m->slots[s], 1, step, u, nu);
        }
        if (drop > pending + held)
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: %lld keys held and %lld new ones of "
                             "this call need %lld slots (%zu bytes), over what the cap of %zu bytes leaves; "
                             "%lld keys could make room%s: raise the cap, shard over more ranks, %s",
                             (long long)m->live, (long long)fresh, (long long)want,
                             (size_t)want * sizeof(slot), full->cap, (long long)(pending + held),
                             evict ? "" : " without evicting keys that hold a row",
                             evict ? "or give smaller calls" : "or let the table evict (evict_when_full)");
        while (!st && drop > 0) {
            int64_t gone = forget_oldest(m, 0, step, u, nu);
            if (!gone) gone = forget_oldest(m, 1, step, u, nu);
            drop -= gone;
        }
        if (!st && rehash(m, m->nslots)) /* the tombstones go */
            st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory");
    }
    free(u);
    return st;
}

/* ---- mapping ---------------------------------------------------------------------------------- */

hx_status hx_emb_idmap_map(hx_emb_idmap *m, const int64_t *keys, int64_t n, int train,
                           int64_t step, int64_t *rows_out, int64_t *fresh, int64_t *n_fresh,
                           hx_emb_err *err)
{
    if (!m || n < 0 || (n > 0 && (!keys || !rows_out)) || (train && n > 0 && !fresh))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding id map: bad arguments");
    if (n_fresh) *n_fresh = 0;
    if (!train) {
        for (int64_t i = 0; i < n; i++) {
            int64_t s = find(m, keys[i]);
            rows_out[i] = s >= 0 && m->slots[s].row >= 0 ? m->slots[s].row : -1;
        }
        return HX_OK;
    }
    /* Room for every key of the call at a load of at most one half, so no
     * rehash happens below and the undo log stays valid. */
    freeq_compact(m);
    if (2 * (m->live + m->tombs + n) > m->nslots) {
        hx_status st = m->budget ? room_within(m, keys, n, step, err)
                       : rehash(m, 2 * (m->live + n))
                           ? hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory growing "
                                         "to %lld keys", (long long)(m->live + n))
                           : HX_OK;
        if (st) return st;
    }
    m->nlog = 0;
    saved sv = save_counts(m);
    int64_t nf = 0, need = m->cfg.min_count > 1 ? m->cfg.min_count : 1;
    /* Pass 1: count and stamp every key; rows_out holds its slot for now. */
    for (int64_t i = 0; i < n; i++) {
        int found;
        int64_t s = find_or_place(m, keys[i], &found);
        if (log_slot(m, s)) goto oom;
        slot *sl = &m->slots[s];
        if (!found) {
            if (sl->row == TOMB) m->tombs--;
            *sl = (slot){keys[i], PENDING, 0, step};
            m->live++;
        }
        sl->count++;
        sl->last = step;
        rows_out[i] = s;
    }
    /* Pass 2: rows for the keys that reached min_count, in order of first position. */
    for (int64_t i = 0; i < n; i++) {
        slot *sl = &m->slots[rows_out[i]];
        if (sl->row == PENDING && sl->count >= need) {
            int64_t row = -1;
            if (m->fhead == m->ftail && m->next_row == m->cfg.capacity &&
                m->cfg.on_full == HX_EMB_FULL_EVICT) {
                if (evict_oldest(m, step) < 0) goto oom;
            }
            if (m->fhead < m->ftail) row = m->freeq[m->fhead++];
            else if (m->next_row < m->cfg.capacity) row = m->next_row++;
            if (row < 0) {
                int64_t key = sl->key;
                rollback(m, &sv);
                drop_log(m);
                return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                                   "embedding id map: full: all %lld rows are held%s; key %lld at position %lld "
                                   "needs one. Raise the capacity, expire keys, or evict (evict_when_full)",
                                   (long long)m->cfg.capacity,
                                   m->cfg.on_full == HX_EMB_FULL_EVICT ? " by keys of this step" : "",
                                   (long long)key, (long long)i);
            }
            if (log_slot(m, rows_out[i])) goto oom;
            sl = &m->slots[rows_out[i]];
            sl->row = row;
            m->keys++;
            m->admitted++;
            fresh[nf++] = row;
        }
        rows_out[i] = sl->row >= 0 ? sl->row : -1;
        m->filtered += sl->row < 0;
    }
    m->nlog = 0;
    drop_log(m);
    if (n_fresh) *n_fresh = nf;
    return HX_OK;
oom:
    rollback(m, &sv);
    drop_log(m);
    return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory");
}

void hx_emb_idmap_stats_get(const hx_emb_idmap *m, hx_emb_idmap_stats *s)
{
    s->keys = m->keys;
    s->pending = m->live - m->keys;
    s->rows_free = m->cfg.capacity - m->keys;
    s->slots = m->nslots;
    s->admitted = m->admitted;
    s->evicted = m->evicted;
    s->expired = m->expired;
    s->filtered = m->filtered;
}

size_t hx_emb_idmap_bytes(const hx_emb_idmap *m)
{
    return sizeof *m + (size_t)m->nslots * sizeof(slot) + (size_t)m->fcap * sizeof(int64_t) +
           (size_t)m->logcap * sizeof(undo);
}

/* ---- serialisation ---------------------------------------------------------------------------- */

int64_t hx_emb_idmap_serial_size(const hx_emb_idmap *m)
{
    return 3 + (m->ftail - m->fhead) + 4 * m->live;
}

void hx_emb_idmap_serial_write(const hx_emb_idmap *m, int64_t *w)
{
    int64_t k = 0;
    w[k++] = m->next_row;
    w[k++] = m->ftail - m->fhead;
    for (int64_t i = m->fhead; i < m->ftail; i++) w[k++] = m->freeq[i];
    w[k++] = m->live;
    int64_t *entries = w + k;
    for (int64_t s = 0; s < m->nslots; s++) {
        const slot *sl = &m->slots[s];
        if (sl->row == EMPTY || sl->row == TOMB) continue;
        w[k++] = sl->key;
        w[k++] = sl->row;
        w[k++] = sl->count;
        w[k++] = sl->last;
    }
    /* By key, so that the file does not depend on the slot layout. */
    if (m->live > 0) qsort(entries, (size_t)m->live, 4 * sizeof(int64_t), cmp_i64);
}

hx_status hx_emb_idmap_serial_read(const hx_emb_idmap_config *cfg, const int64_t *w,
                                   int64_t nw, hx_emb_idmap **out, hx_emb_err *err)
{
    hx_emb_idmap *m;
    hx_status st = hx_emb_idmap_create(cfg, &m, err);
    if (st) return st;
    const char *bad = NULL;
    uint8_t *used = NULL;
    int64_t k = 0, cap = cfg->capacity;
    if (nw < 3) bad = "too short";
    int64_t next = bad ? 0 : w[k++], nfree = bad ? 0 : w[k++];
    if (!bad && (next < 0 || next > cap)) bad = "next row outside the capacity";
    if (!bad && (nfree < 0 || nfree > next || nw - k < nfree + 1)) bad = "bad free-row count";
    if (!bad && !(used = calloc((size_t)(next / 8 + 1), 1))) {
        hx_emb_idmap_free(m);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding id map: out of memory");
    }
    for (int64_t i = 0; i < nfree && !bad; i++) {
        int64_t r = w[k++];
        if (r < 0 || r >= next || (used[r / 8] >> (r % 8) & 1)) bad = "bad free row";
        else if (freeq_push(m, r)) bad = "out of memory";
        else used[r / 8] |= (uint8_t)(1u << (r % 8));
    }
    int64_t ne = bad ? 0 : w[k++];
    if (!bad && (ne < 0 || ne > (nw - k) / 4 || (nw - k) != 4 * ne)) bad = "bad entry count";
    if (!bad && rehash(m, 2 * ne + MIN_SLOTS)) bad = "out of memory";
    for (int64_t e = 0; e < ne && !bad; e++, k += 4) {
        int64_t key = w[k], row = w[k + 1], count = w[k + 2], last = w[k + 3];
        if (row < PENDING || row >= next || count < 0) {
            bad = "bad entry";
            break;
        }
        if (row >= 0) {
            if (used[row / 8] >> (row % 8) & 1) {
                bad = "a row held twice";
                break;
            }
            used[row / 8] |= (uint8_t)(1u << (row % 8));
            m->keys++;
        }
        int found;
        int64_t s = find_or_place(m, key, &found);
        if (found) {
            bad = "a key held twice";
            break;
        }
        m->slots[s] = (slot){key, row, count, last};
        m->live++;
    }
    if (!bad && m->keys + nfree != next) bad = "rows neither held nor free";
    free(used);
    if (bad) {
        hx_emb_idmap_free(m);
        return hx_emb_fail(err, HX_ERR_CORRUPT, "embedding id map: the saved map is not valid: %s", bad);
    }
    m->next_row = next;
    *out = m;
    return HX_OK;
}
