/* The residency policy of the row caches (cache.h): which rows hold the
 * slots, LFU with aging by a clock that halves 4-bit counters. */
#include <stdlib.h>

#include "embedding/embedding.h"


int hx_emb_slots_init(hx_emb_slots *s, int64_t C, int64_t rows)
{
    *s = (hx_emb_slots){.C = C, .freq_max = HX_EMB_FREQ_MAX};
    s->slot_row = malloc((size_t)C * sizeof *s->slot_row);
    s->freq = calloc((size_t)C, 1);
    s->dirty = calloc((size_t)C, 1);
    s->stamp = calloc((size_t)C, sizeof *s->stamp);
    s->want = calloc((size_t)C, sizeof *s->want);
    s->free_slots = malloc((size_t)C * sizeof *s->free_slots);
    if (!s->slot_row || !s->freq || !s->dirty || !s->stamp || !s->want || !s->free_slots ||
        (rows ? hx_emb_rowmap_init_direct(&s->map, rows) : hx_emb_rowmap_init(&s->map, C)))
        return -1;
    hx_emb_slots_drop(s);
    return 0;
}

void hx_emb_slots_free(hx_emb_slots *s)
{
    free(s->slot_row);
    free(s->freq);
    free(s->dirty);
    free(s->stamp);
    free(s->want);
    free(s->free_slots);
    free(s->miss);
    free(s->mslot);
    free(s->victim);
    hx_emb_rowmap_free(&s->map);
    hx_emb_rowmap_free(&s->missmap);
    *s = (hx_emb_slots){0};
}

void hx_emb_slots_drop(hx_emb_slots *s)
{
    hx_emb_rowmap_clear(&s->map);
    s->want_gen++; /* nothing spared */
    s->nwant = 0;
    s->n_free = 0;
    for (int64_t k = s->C; k-- > 0;) {
        s->slot_row[k] = -1;
        s->dirty[k] = 0;
        s->freq[k] = 0;
        s->free_slots[s->n_free++] = k;
    }
}

static bool grow(int64_t **p, int64_t n)
{
    int64_t *q = realloc(*p, (size_t)(n ? n : 1) * sizeof *q);
    if (!q) return false;
    *p = q;
    return true;
}

bool hx_emb_slots_room(hx_emb_slots *s, int64_t n)
{
    if (n > s->cap) {
        if (!grow(&s->miss, n) || !grow(&s->mslot, n) || !grow(&s->victim, n)) return false;
        s->cap = n;
    }
    if (n > s->missmap_cap) {
        hx_emb_rowmap_free(&s->missmap);
        s->missmap_cap = hx_emb_rowmap_init(&s->missmap, n) ? 0 : n;
        if (!s->missmap_cap) return false;
    }
    return true;
}

void hx_emb_slots_begin(hx_emb_slots *s)
{
    s->call++;
    s->nmiss = s->nfree = s->nv = 0;
    s->nused = s->nwant_used = 0;
}

void hx_emb_slots_want_begin(hx_emb_slots *s)
{
    s->want_gen++;
    s->nwant = 0;
}

int32_t hx_emb_slots_want(hx_emb_slots *s, int64_t r)
{
    int32_t k = hx_emb_rowmap_get(&s->map, r);
    if (k >= 0 && s->want[k] != s->want_gen) {
        s->want[k] = s->want_gen;
        s->nwant++;
    }
    return k;
}

/* Ids ahead of the one a loop maps whose memory it asks for: the map's
 * entry 2 x AHEAD ids ahead, the slot's AHEAD ahead. */
enum { AHEAD = 16 };

static inline void ask_slot(const hx_emb_slots *s, int64_t k)
{
    __builtin_prefetch(s->slot_row + k);
    __builtin_prefetch(s->stamp + k);
}

/* Asks for the memory the mapping of the id at j + AHEAD and of the one
 * at j + 2 x AHEAD will read (a guess: nothing changes). */
static inline void ask_ahead(const hx_emb_slots *s, const void *ids, hx_dtype dt, int64_t n, int64_t rows,
                             const int32_t *hint, int64_t j)
{
    int64_t a = j + AHEAD, b = j + 2 * AHEAD;
    if (a < n) {
        int64_t r = hx_emb_id_at(ids, dt, a);
        int64_t k = hint && hint[a] >= 0 ? hint[a] : s->map.direct && r >= 0 && r < rows ? s->map.vals[r] : -1;
        if (k >= 0) ask_slot(s, k);
    }
    if (b < n && !(hint && hint[b] >= 0)) {
        int64_t r = hx_emb_id_at(ids, dt, b);
        if (r >= 0 && r < rows) hx_emb_rowmap_prefetch(&s->map, r);
    }
}

/* A resident row's slot k used by this call: its first use counts. */
static inline int touch(hx_emb_slots *s, int64_t k, bool lookup)
{
    if (s->stamp[k] == s->call) return 0;
    s->stamp[k] = s->call;
    s->nused++;
    s->nwant_used += s->want[k] == s->want_gen;
    s->freq[k] += s->freq[k] < s->freq_max;
    s->hits += lookup;
    s->lookups += lookup;
    return 1;
}

/* Whether hx_emb_slots_map would write k to out[j], ids[j]'s row resident. */
static inline bool maps_to(const hx_emb_slots *s, const void *ids, hx_dtype dt, int64_t j, int has_padding,
                           int64_t padding_id, int64_t rows, int64_t k)
{
    int64_t r = hx_emb_id_at(ids, dt, j);
    if (has_padding && r == padding_id) return k == -1;
    if (r < 0 || r >= rows) return k == -2;
    return k >= 0 && s->slot_row[k] == r;
}

bool hx_emb_slots_remap(hx_emb_slots *s, const void *ids, hx_dtype dt, int64_t n, int has_padding,
                        int64_t padding_id, int64_t rows, bool lookup, const int64_t *out)
{
    for (int64_t j = 0; j < n; j++) {
        if (j + AHEAD < n && out[j + AHEAD] >= 0) ask_slot(s, out[j + AHEAD]);
        if (!maps_to(s, ids, dt, j, has_padding, padding_id, rows, out[j])) return false;
    }
    for (int64_t j = 0; j < n; j++)
        if (out[j] >= 0) touch(s, out[j], lookup);
    return true;
}

int64_t hx_emb_slots_map(hx_emb_slots *s, const void *ids, hx_dtype dt, int64_t n, int has_padding,
                         int64_t padding_id, int64_t rows, bool lookup, const int32_t *hint, int64_t *out)
{
    hx_emb_rowmap_clear(&s->missmap);
    int64_t used = 0;
    for (int64_t j = 0; j < n; j++) {
        ask_ahead(s, ids, dt, n, rows, hint, j);
        int64_t r = hx_emb_id_at(ids, dt, j);
        if (has_padding && r == padding_id) {
            out[j] = -1;
            continue;
        }
        if (r < 0 || r >= rows) {
            out[j] = -2;
            continue;
        }
        int32_t k = hint ? hint[j] : -1;
        if (k < 0 || s->slot_row[k] != r) k = hx_emb_rowmap_get(&s->map, r);
        if (k >= 0) {
            used += touch(s, k, lookup);
            out[j] = k;
            continue;
        }
        int32_t m = hx_emb_rowmap_get(&s->missmap, r);
        if (m < 0) {
            m = (int32_t)s->nmiss;
            s->miss[s->nmiss++] = r;
            hx_emb_rowmap_put(&s->missmap, r, m);
            s->lookups++;
        }
        out[j] = -3 - m;
    }
    return used + s->nmiss;
}

/* A slot to evict: not used by this call, not spared; the hand halves the
 * counters it passes and takes the first at zero. One qualifies (the call
 * touches at most C rows, and hx_emb_slots_victims spares none when the
 * others would not do). */
static int64_t clock_victim(hx_emb_slots *s)
{
    for (;;) {
        int64_t k = s->hand;
        s->hand = s->hand + 1 == s->C ? 0 : s->hand + 1;
        if (s->stamp[k] == s->call || s->slot_row[k] < 0 || s->want[k] == s->want_gen) continue;
        if (s->freq[k]) {
            s->freq[k] >>= 1;
            continue;
        }
        s->stamp[k] = s->call; /* chosen: not chosen twice */
        return k;
    }
}

void hx_emb_slots_victims(hx_emb_slots *s)
{
    s->nfree = s->nmiss < s->n_free ? s->nmiss : s->n_free;
    s->nv = s->nmiss - s->nfree;
    int64_t spare = s->C - s->n_free - s->nused - (s->nwant - s->nwant_used); /* resident, unused, not spared */
    if (s->nv > spare) hx_emb_slots_want_begin(s); /* the call needs them: spared no more */
    for (int64_t i = 0; i < s->nv; i++) s->victim[i] = clock_victim(s);
}

void hx_emb_slots_cancel(hx_emb_slots *s)
{
    for (int64_t i = 0; i < s->nv; i++) s->stamp[s->victim[i]] = 0;
}

void hx_emb_slots_install(hx_emb_slots *s)
{
    for (int64_t i = 0; i < s->nv; i++) {
        int64_t k = s->victim[i];
        s->writebacks += s->dirty[k];
        s->evictions++;
        hx_emb_rowmap_del(&s->map, s->slot_row[k]);
        s->dirty[k] = 0;
        s->slot_row[k] = -1;
    }
    for (int64_t m = 0; m < s->nmiss; m++) {
        int64_t k = m < s->nfree ? s->free_slots[--s->n_free] : s->victim[m - s->nfree];
        s->slot_row[k] = s->miss[m];
        s->freq[k] = 1;
        s->stamp[k] = s->call;
        s->dirty[k] = 0;
        hx_emb_rowmap_put(&s->map, s->miss[m], (int32_t)k);
        s->mslot[m] = k;
    }
}

void hx_emb_slots_resolve(const hx_emb_slots *s, int64_t *out, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (out[j] <= -3) out[j] = s->mslot[-3 - out[j]];
}

/* i32 ids come with i32 offsets; the slots are i64, so their offsets must be too. */
static bool widen_offsets(const hx_emb_query *q) { return q->mode != HX_EMB_ROWS && q->id_dtype == HX_DTYPE_I32; }

int64_t hx_emb_slot_query_len(const hx_emb_query *q)
{
    return q->n + (widen_offsets(q) ? q->n + q->n_offsets : 0);
}

void hx_emb_slot_query(const hx_emb_query *q, int64_t *slots, hx_emb_query *mq)
{
    *mq = *q;
    mq->ids = slots;
    mq->padding_id = -1;
    if (widen_offsets(q)) {
        int64_t *off = slots + q->n;
        for (int64_t b = 0; b < q->n_offsets; b++) off[b] = hx_emb_id_at(q->offsets, HX_DTYPE_I32, b);
        mq->offsets = off;
    }
    mq->id_dtype = HX_DTYPE_I64;
}
