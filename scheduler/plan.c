/* Execution plans: which nodes a run needs, in which order, and a static
 * memory plan that lets transient tensors with disjoint lifetimes share
 * arena bytes (greedy by size, best offset first). */
#include "scheduler/sched.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

static bool is_persistent(const hx_tensor *t)
{
    return t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_CONSTANT ||
           t->kind == HX_TENSOR_STATE;
}

typedef struct lifetime {
    int id;
    int first, last; /* step indices; inputs are live from step 0 */
    size_t bytes;
    int64_t offset;
} lifetime;

static int by_size_desc(const void *pa, const void *pb)
{
    const lifetime *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    return a->id - b->id;
}

static int by_offset(const void *pa, const void *pb)
{
    const lifetime *a = *(const lifetime *const *)pa, *b = *(const lifetime *const *)pb;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* Places each buffer, largest first, at the lowest offset that does not
 * overlap a placed buffer whose lifetime overlaps its own. */
static size_t assign_offsets(lifetime *lt, int n)
{
    qsort(lt, n, sizeof *lt, by_size_desc);
    lifetime **live = malloc(sizeof *live * (n ? n : 1));
    if (!live) return SIZE_MAX;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int m = 0;
        for (int j = 0; j < i; j++)
            if (lt[j].first <= lt[i].last && lt[i].first <= lt[j].last) live[m++] = &lt[j];
        qsort(live, m, sizeof *live, by_offset);
        size_t off = 0;
        for (int j = 0; j < m; j++) {
            if ((size_t)live[j]->offset >= off + lt[i].bytes) break;
            size_t end = live[j]->offset + live[j]->bytes;
            if (end > off) off = end;
        }
        lt[i].offset = (int64_t)off;
        if (off + lt[i].bytes > total) total = off + lt[i].bytes;
    }
    free(live);
    return total;
}

void hx__plan_free(hx_plan *p)
{
    if (!p) return;
    free(p->key);
    free(p->steps);
    free(p->in_pool);
    free(p->offset);
    free(p->inputs);
    free(p);
}

/* Marks what the fetches (and with train, the updates) need. */
static int mark_needed(const hx_graph *g, const int *fetch_ids, int n_fetch, bool train,
                       bool *need)
{
    for (int k = 0; k < n_fetch; k++) need[fetch_ids[k]] = true;
    for (int i = 0; train && i < g->n; i++)
        if (g->tensors[i]->kind == HX_TENSOR_UPDATE) need[i] = true;
    int n_steps = 0;
    for (int i = g->n - 1; i >= 0; i--) {
        if (!need[i]) continue;
        const hx_tensor *t = g->tensors[i];
        for (int k = 0; k < t->n_src; k++) need[t->src[k]->id] = true;
        n_steps += t->op > HX_OP_STATE;
    }
    return n_steps;
}

hx_status hx__plan_build(hx_session *s, const int *fetch_ids, int n_fetch, bool train,
                         hx_plan **out)
{
    const hx_graph *g = s->g;
    hx_plan *p = calloc(1, sizeof *p);
    bool *need = calloc(g->n, sizeof *need);
    int *step_of = malloc(sizeof *step_of * g->n); /* producing step; -1 for leaves */
    lifetime *lt = malloc(sizeof *lt * g->n);
    int *lt_of = malloc(sizeof *lt_of * g->n);
    hx_status st = HX_OK;
    if (!p || !need || !step_of || !lt || !lt_of) goto oom;

    p->key_len = n_fetch + 1;
    p->key = malloc(sizeof *p->key * p->key_len);
    if (!p->key) goto oom;
    memcpy(p->key, fetch_ids, sizeof *p->key * n_fetch);
    p->key[n_fetch] = train;

    /* Order: nodes in creation order (a topological order), updates last so
     * that every reader of a parameter sees its value from before the step. */
    p->n_steps = mark_needed(g, fetch_ids, n_fetch, train, need);
    p->steps = calloc(p->n_steps ? p->n_steps : 1, sizeof *p->steps);
    p->offset = malloc(sizeof *p->offset * g->n);
    p->inputs = malloc(sizeof *p->inputs * g->n);
    size_t n_in = 0;
    for (int i = 0; i < g->n; i++)
        if (need[i]) n_in += g->tensors[i]->n_src;
    p->in_pool = malloc(sizeof *p->in_pool * (n_in ? n_in : 1));
    if (!p->steps || !p->offset || !p->inputs || !p->in_pool) goto oom;

    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->n; i++) {
            const hx_tensor *t = g->tensors[i];
            step_of[i] = -1;
            if (!need[i] || t->op <= HX_OP_STATE || (t->kind == HX_TENSOR_UPDATE) != pass)
                continue;
            p->steps[k].node = t;
            p->steps[k].fn = hx__cpu_kernel(t->op);
            if (!p->steps[k].fn) {
                st = hx__error(HX_ERR_NO_KERNEL, "session: op '%s' (%s) has no CPU kernel",
                               t->name, hx__ops[t->op].name);
                goto fail;
            }
            k++;
        }
    p->first_update = p->n_steps;
    for (k = p->n_steps - 1; k >= 0 && p->steps[k].node->kind == HX_TENSOR_UPDATE; k--)
        p->first_update = k;
    for (k = 0; k < p->n_steps; k++) step_of[p->steps[k].node->id] = k;

    /* Lifetimes of transient tensors: fed inputs and op outputs. */
    int n_lt = 0;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        lt_of[i] = -1;
        p->offset[i] = -1;
        if (!need[i] || is_persistent(t) || t->kind == HX_TENSOR_UPDATE) continue;
        if (t->kind == HX_TENSOR_INPUT) p->inputs[p->n_inputs++] = i;
        lt_of[i] = n_lt;
        lt[n_lt++] = (lifetime){i, t->kind == HX_TENSOR_INPUT ? 0 : step_of[i], step_of[i],
                                align_up(hx_tensor_nbytes(t)), 0};
    }
    for (k = 0; k < p->n_steps; k++) {
        const hx_tensor *t = p->steps[k].node;
        for (int j = 0; j < t->n_src; j++) {
            int l = lt_of[t->src[j]->id];
            if (l >= 0 && lt[l].last < k) lt[l].last = k;
        }
    }
    for (int f = 0; f < n_fetch; f++)
        if (lt_of[fetch_ids[f]] >= 0) lt[lt_of[fetch_ids[f]]].last = p->n_steps;
    for (int l = 0; l < n_lt; l++) {
        p->transient_tensor_bytes += hx_tensor_nbytes(g->tensors[lt[l].id]);
        if (lt[l].last < lt[l].first) lt[l].last = lt[l].first;
    }

    p->arena_bytes = assign_offsets(lt, n_lt);
    if (p->arena_bytes == SIZE_MAX) goto oom;
    for (int l = 0; l < n_lt; l++) p->offset[lt[l].id] = lt[l].offset;
    goto done;
oom:
    st = hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
fail:
    hx__plan_free(p);
    p = NULL;
done:
    free(need);
    free(step_of);
    free(lt);
    free(lt_of);
    *out = p;
    return st;
}

static void *locate(const hx_session *s, const hx_plan *p, int id)
{
    return p->offset[id] >= 0 ? s->arena + p->offset[id] : s->persist[id];
}

void hx__plan_bind(hx_session *s, hx_plan *p)
{
    void **pool = p->in_pool;
    for (int k = 0; k < p->n_steps; k++) {
        hx_step *st = &p->steps[k];
        const hx_tensor *t = st->node;
        st->out = t->kind == HX_TENSOR_UPDATE ? NULL : locate(s, p, t->id);
        st->in = pool;
        for (int j = 0; j < t->n_src; j++) *pool++ = locate(s, p, t->src[j]->id);
    }
    p->bound_to = s->arena;
}
