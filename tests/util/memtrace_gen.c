/* Synthetic allocation traces for tests and benchmarks (memtrace_gen.h). */
#include "memtrace_gen.h"

#include <stdlib.h>

typedef struct evlist {
    hx_mem_event *ev;
    size_t n, cap;
    uint64_t next_id;
    bool failed;
} evlist;

static uint64_t ev_alloc(evlist *l, size_t bytes, bool persistent)
{
    if (l->failed) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        hx_mem_event *p = realloc(l->ev, cap * sizeof *p);
        if (!p) {
            l->failed = true;
            return 0;
        }
        l->ev = p;
        l->cap = cap;
    }
    uint64_t id = ++l->next_id;
    l->ev[l->n++] = (hx_mem_event){.id = id, .bytes = bytes, .alloc = true, .persistent = persistent};
    return id;
}

static void ev_free(evlist *l, uint64_t id)
{
    if (l->failed) return;
    if (l->n == l->cap) {
        size_t cap = l->cap * 2;
        hx_mem_event *p = realloc(l->ev, cap * sizeof *p);
        if (!p) {
            l->failed = true;
            return;
        }
        l->ev = p;
        l->cap = cap;
    }
    l->ev[l->n++] = (hx_mem_event){.id = id};
}

static hx_mem_event *finish(evlist *l, size_t *n)
{
    if (l->failed) {
        free(l->ev);
        *n = 0;
        return NULL;
    }
    *n = l->n;
    return l->ev;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

hx_mem_event *hx_memtrace_gen_random(uint64_t seed, size_t n_allocs, size_t max_bytes,
                                     size_t live, size_t *n)
{
    evlist l = {0};
    uint64_t *ids = malloc((n_allocs ? n_allocs : 1) * sizeof *ids);
    size_t n_live = 0;
    if (!ids) l.failed = true;
    double lo = 4.0 /* log2 16 */, hi = 0;
    for (size_t b = max_bytes; b > 1; b >>= 1) hi += 1;
    if (hi < lo) hi = lo;
    for (size_t i = 0; i < n_allocs && !l.failed; i++) {
        size_t bytes = (size_t)(1ull << (int)(lo + (hi - lo) * unit(&seed)));
        bytes += (size_t)(unit(&seed) * bytes); /* spread within the octave */
        if (bytes > max_bytes) bytes = max_bytes;
        bool persistent = splitmix(&seed) % 10 == 0;
        uint64_t id = ev_alloc(&l, bytes, persistent);
        if (!persistent) ids[n_live++] = id;
        while (n_live > live && !l.failed) {
            for (size_t k = 0; k < n_live;) {
                if (splitmix(&seed) & 1) {
                    ev_free(&l, ids[k]);
                    ids[k] = ids[--n_live];
                } else {
                    k++;
                }
            }
        }
    }
    while (n_live && !l.failed) ev_free(&l, ids[--n_live]);
    free(ids);
    return finish(&l, n);
}

/* ---- GPT ----------------------------------------------------------------------------------- */

enum { P_LN1G, P_LN1B, P_QKV, P_QKVB, P_PROJ, P_PROJB, P_LN2G, P_LN2B, P_FC1, P_FC1B, P_FC2,
       P_FC2B, P_PER_LAYER };

hx_mem_event *hx_memtrace_gen_gpt(const hx_gpt_trace_shape *sh, size_t *n)
{
    evlist l = {0};
    const size_t f = 4; /* f32 */
    size_t H = (size_t)sh->hidden, N = (size_t)sh->seq * sh->batch, V = (size_t)sh->vocab;
    size_t att = (size_t)sh->batch * sh->heads * sh->seq * sh->seq * f;
    int L = sh->layers;
    size_t n_params = (size_t)L * P_PER_LAYER + 4;
    size_t *psize = malloc(n_params * sizeof *psize);
    uint64_t *grad = malloc(n_params * sizeof *grad);
    uint64_t *saved = malloc((size_t)L * 16 * sizeof *saved);
    if (!psize || !grad || !saved) l.failed = true;
    for (int i = 0; i < L && !l.failed; i++) {
        size_t *p = psize + (size_t)i * P_PER_LAYER;
        p[P_LN1G] = p[P_LN1B] = p[P_LN2G] = p[P_LN2B] = p[P_PROJB] = p[P_FC2B] = H * f;
        p[P_QKV] = H * 3 * H * f;
        p[P_QKVB] = 3 * H * f;
        p[P_PROJ] = H * H * f;
        p[P_FC1] = p[P_FC2] = H * 4 * H * f;
        p[P_FC1B] = 4 * H * f;
    }
    if (!l.failed) {
        size_t *p = psize + (size_t)L * P_PER_LAYER;
        p[0] = V * H * f;             /* token embedding (tied with the head) */
        p[1] = (size_t)sh->seq * H * f; /* positions */
        p[2] = p[3] = H * f;          /* final layernorm */
    }
    for (size_t i = 0; i < n_params; i++) ev_alloc(&l, psize[i], true);
    for (int step = 0; step < sh->steps && !l.failed; step++) {
        /* forward */
        uint64_t x = ev_alloc(&l, N * H * f, false); /* embeddings out */
        for (int i = 0; i < L; i++) {
            uint64_t *s = saved + (size_t)i * 16;
            int k = 0;
            s[k++] = x;                                   /* layer input (residual) */
            s[k++] = ev_alloc(&l, N * H * f, false);      /* ln1 out */
            s[k++] = ev_alloc(&l, N * 2 * f, false);      /* ln1 mean, rstd */
            s[k++] = ev_alloc(&l, N * 3 * H * f, false);  /* qkv */
            uint64_t scores = ev_alloc(&l, att, false);
            s[k++] = ev_alloc(&l, att, false);            /* softmax probs */
            ev_free(&l, scores);
            s[k++] = ev_alloc(&l, N * H * f, false);      /* attention out */
            uint64_t proj = ev_alloc(&l, N * H * f, false);
            s[k++] = ev_alloc(&l, N * H * f, false);      /* residual 1 */
            ev_free(&l, proj);
            s[k++] = ev_alloc(&l, N * H * f, false);      /* ln2 out */
            s[k++] = ev_alloc(&l, N * 2 * f, false);
            s[k++] = ev_alloc(&l, N * 4 * H * f, false);  /* fc1 */
            s[k++] = ev_alloc(&l, N * 4 * H * f, false);  /* gelu */
            uint64_t fc2 = ev_alloc(&l, N * H * f, false);
            x = ev_alloc(&l, N * H * f, false);           /* residual 2: next input */
            ev_free(&l, fc2);
            s[k] = 0;
        }
        uint64_t lnf = ev_alloc(&l, N * H * f, false);
        uint64_t logits = ev_alloc(&l, N * V * f, false);
        /* backward: loss -> logits gradient, head, final layernorm */
        uint64_t dlogits = ev_alloc(&l, N * V * f, false);
        ev_free(&l, logits);
        uint64_t dx = ev_alloc(&l, N * H * f, false);
        grad[(size_t)L * P_PER_LAYER] = ev_alloc(&l, psize[(size_t)L * P_PER_LAYER], false);
        ev_free(&l, dlogits);
        ev_free(&l, lnf);
        ev_free(&l, x);
        for (int i = L - 1; i >= 0; i--) {
            uint64_t *s = saved + (size_t)i * 16;
            for (int k = P_LN1G; k < P_PER_LAYER; k++) /* weight gradients of the layer */
                grad[(size_t)i * P_PER_LAYER + k] = ev_alloc(&l, psize[(size_t)i * P_PER_LAYER + k], false);
            uint64_t d4 = ev_alloc(&l, N * 4 * H * f, false); /* through fc2 and gelu */
            uint64_t d4b = ev_alloc(&l, N * 4 * H * f, false);
            ev_free(&l, d4);
            uint64_t d1 = ev_alloc(&l, N * H * f, false);
            ev_free(&l, d4b);
            uint64_t dqkv = ev_alloc(&l, N * 3 * H * f, false);
            uint64_t datt = ev_alloc(&l, att, false);
            ev_free(&l, datt);
            uint64_t dprev = ev_alloc(&l, N * H * f, false);
            ev_free(&l, dqkv);
            ev_free(&l, d1);
            ev_free(&l, dx);
            dx = dprev;
            for (int k = 0; s[k]; k++) ev_free(&l, s[k]);
        }
        for (int k = 1; k < 4; k++)
            grad[(size_t)L * P_PER_LAYER + k] = ev_alloc(&l, psize[(size_t)L * P_PER_LAYER + k], false);
        ev_free(&l, dx);
        /* optimizer: Adam's moments appear at the first step, then gradients go */
        for (size_t i = 0; step == 0 && i < n_params; i++) {
            ev_alloc(&l, psize[i], true);
            ev_alloc(&l, psize[i], true);
        }
        for (size_t i = 0; i < n_params; i++) ev_free(&l, grad[i]);
    }
    free(psize);
    free(grad);
    free(saved);
    return finish(&l, n);
}

/* ---- a pattern that fragments a single pool ---------------------------------------------- */

hx_mem_event *hx_memtrace_gen_fragment(uint64_t seed, int rounds, size_t *n)
{
    evlist l = {0};
    enum { PER_ROUND = 16 };
    uint64_t t[PER_ROUND];
    for (int r = 0; r < rounds && !l.failed; r++) {
        size_t big = (size_t)(12 + 2 * r) << 20; /* a sequence length that grows */
        for (int i = 0; i < PER_ROUND; i++) {
            t[i] = ev_alloc(&l, big + (splitmix(&seed) % 64) * 4096, false);
            ev_alloc(&l, (size_t)(1 + splitmix(&seed) % 3) << 19, true); /* e.g. optimizer state */
        }
        for (int i = 0; i < PER_ROUND; i++) ev_free(&l, t[i]);
    }
    return finish(&l, n);
}
