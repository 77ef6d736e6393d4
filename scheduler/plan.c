/* Execution plans: which nodes a run needs, in which order, and a static
 * memory plan that lets transient tensors with disjoint lifetimes share
 * arena bytes (greedy by size, best offset first). */
#include "scheduler/backend.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

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
    hx__partition_free(&p->part);
    free(p);
}

/* Marks what the fetches (and with train, the updates) need; returns the
 * number of op nodes. */
static int mark_needed(const hx_graph *g, const int *fetch_ids, int n_fetch, bool train,
                       bool *need)
{
    for (int k = 0; k < n_fetch; k++) need[fetch_ids[k]] = true;
    for (int i = 0; train && i < g->n; i++)
        if (g->tensors[i]->kind == HX_TENSOR_UPDATE) need[i] = true;
    int n_ops = 0;
    for (int i = g->n - 1; i >= 0; i--) {
        if (!need[i]) continue;
        const hx_tensor *t = g->tensors[i];
        for (int k = 0; k < t->n_src; k++) need[t->src[k]->id] = true;
        n_ops += t->op > HX_OP_STATE;
    }
    return n_ops;
}

/* Scratch of one plan build. */
typedef struct builder {
    const hx_session *s;
    hx_plan *p;
    int n;
    int *copy_step; /* [dev * n + id]: the step copying id to dev, -1 */
    int *lt_of;     /* [dev * n + id]: its lifetime, -1 */
    lifetime *lt[HX_NDEV];
    int n_lt[HX_NDEV];
} builder;

static void add_lifetime(builder *b, int dev, int id, int first)
{
    b->lt_of[dev * b->n + id] = b->n_lt[dev];
    b->lt[dev][b->n_lt[dev]++] = (lifetime){id, first, first,
                                            align_up(hx_tensor_nbytes(b->s->g->tensors[id])), 0};
}

static void extend(builder *b, int dev, int id, int step)
{
    int l = b->lt_of[dev * b->n + id];
    if (l >= 0 && b->lt[dev][l].last < step) b->lt[dev][l].last = step;
}

/* Orders the steps: op nodes in creation order (a topological order),
 * updates last, each copy right before the first step that reads it. */
static hx_status order_steps(builder *b, const bool *need)
{
    const hx_session *s = b->s;
    const hx_graph *g = s->g;
    hx_plan *p = b->p;
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->n; i++) {
            const hx_tensor *t = g->tensors[i];
            if (!need[i] || t->op <= HX_OP_STATE || (t->kind == HX_TENSOR_UPDATE) != pass)
                continue;
            int dev = hx__dev_of(s, i);
            for (int j = 0; j < t->n_src; j++) {
                int u = t->src[j]->id, from = hx__dev_of(s, u);
                if (from == dev || b->copy_step[dev * b->n + u] >= 0) continue;
                b->copy_step[dev * b->n + u] = k;
                p->steps[k++] = (hx_step){NULL, t->src[j], NULL, NULL, dev, from};
                size_t bytes = hx_tensor_nbytes(t->src[j]);
                p->n_copies++;
                p->copy_bytes += bytes;
                if (dev == HX_DEV_ACCEL) p->n_h2d++;
                else p->n_d2h++;
            }
            hx_launch_fn fn = s->be[dev]->kernel(s->be[dev], t->op, t->dtype);
            if (!fn)
                return hx__error(HX_ERR_NO_KERNEL,
                                 "session: op '%s' (%s, %s) has no kernel on the %s backend; "
                                 "place it on the other target with hx_tensor_set_target",
                                 t->name, hx__ops[t->op].name, hx_dtype_name(t->dtype),
                                 s->be[dev]->name);
            p->steps[k++] = (hx_step){fn, t, NULL, NULL, dev, -1};
        }
    p->n_steps = k;
    p->first_update = p->n_steps;
    for (k = p->n_steps - 1; k >= 0 && p->steps[k].node->kind == HX_TENSOR_UPDATE; k--)
        p->first_update = k;
    return HX_OK;
}

/* Lifetimes of transient values per device: fed inputs and op outputs at
 * their home, copies at their destination. */
static void lifetimes(builder *b, const bool *need, const int *fetch_ids, int n_fetch)
{
    const hx_graph *g = b->s->g;
    hx_plan *p = b->p;
    for (int i = 0; i < g->n; i++)
        if (need[i] && g->tensors[i]->kind == HX_TENSOR_INPUT) {
            p->inputs[p->n_inputs++] = i;
            add_lifetime(b, HX_DEV_HOST, i, 0);
        }
    for (int k = 0; k < p->n_steps; k++) {
        const hx_step *sp = &p->steps[k];
        const hx_tensor *t = sp->node;
        if (!sp->fn) {
            add_lifetime(b, sp->dev, t->id, k);
            extend(b, sp->src_dev, t->id, k);
            continue;
        }
        for (int j = 0; j < t->n_src; j++) extend(b, sp->dev, t->src[j]->id, k);
        if (t->kind != HX_TENSOR_UPDATE) add_lifetime(b, sp->dev, t->id, k);
    }
    for (int f = 0; f < n_fetch; f++) extend(b, hx__dev_of(b->s, fetch_ids[f]), fetch_ids[f], p->n_steps);
}

hx_status hx__plan_build(hx_session *s, const int *fetch_ids, int n_fetch, bool train,
                         hx_plan **out)
{
    const hx_graph *g = s->g;
    int n = g->n;
    hx_plan *p = calloc(1, sizeof *p);
    bool *need = calloc(n ? n : 1, sizeof *need);
    builder b = {s, p, n, malloc(sizeof(int) * HX_NDEV * (n ? n : 1)),
                 malloc(sizeof(int) * HX_NDEV * (n ? n : 1)), {NULL}, {0}};
    hx_status st = HX_OK;
    if (!p || !need || !b.copy_step || !b.lt_of) goto oom;
    for (int i = 0; i < HX_NDEV * n; i++) b.copy_step[i] = b.lt_of[i] = -1;

    p->key_len = n_fetch + 1;
    p->key = malloc(sizeof *p->key * p->key_len);
    if (!p->key) goto oom;
    memcpy(p->key, fetch_ids, sizeof *p->key * n_fetch);
    p->key[n_fetch] = train;

    int n_ops = mark_needed(g, fetch_ids, n_fetch, train, need);
    size_t n_in = 0;
    for (int i = 0; i < n; i++)
        if (need[i]) n_in += g->tensors[i]->n_src;
    int max_steps = n_ops + (int)n_in; /* at most one copy per input edge */
    p->steps = calloc(max_steps ? max_steps : 1, sizeof *p->steps);
    p->offset = malloc(sizeof *p->offset * HX_NDEV * (n ? n : 1));
    p->inputs = malloc(sizeof *p->inputs * (n ? n : 1));
    p->in_pool = malloc(sizeof *p->in_pool * (n_in + max_steps + 1));
    for (int d = 0; d < HX_NDEV; d++) b.lt[d] = malloc(sizeof *b.lt[d] * (max_steps + n + 1));
    if (!p->steps || !p->offset || !p->inputs || !p->in_pool || !b.lt[0] || !b.lt[1]) goto oom;

    if ((st = order_steps(&b, need))) goto fail;
    lifetimes(&b, need, fetch_ids, n_fetch);
    for (int i = 0; i < HX_NDEV * n; i++) p->offset[i] = -1;
    for (int d = 0; d < HX_NDEV; d++) {
        for (int l = 0; l < b.n_lt[d]; l++)
            p->transient_tensor_bytes[d] += hx_tensor_nbytes(g->tensors[b.lt[d][l].id]);
        p->arena_bytes[d] = assign_offsets(b.lt[d], b.n_lt[d]);
        if (p->arena_bytes[d] == SIZE_MAX) goto oom;
        for (int l = 0; l < b.n_lt[d]; l++) p->offset[d * n + b.lt[d][l].id] = b.lt[d][l].offset;
    }
    bool *ops = need; /* the partition covers the plan's op nodes */
    for (int i = 0; i < n; i++) ops[i] = need[i] && g->tensors[i]->op > HX_OP_STATE;
    if ((st = hx__partition(g, ops, s->target, &p->part))) goto fail;
    goto done;
oom:
    st = hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
fail:
    hx__plan_free(p);
    p = NULL;
done:
    free(need);
    free(b.copy_step);
    free(b.lt_of);
    for (int d = 0; d < HX_NDEV; d++) free(b.lt[d]);
    *out = p;
    return st;
}

/* Where tensor id's value is on device dev. */
static void *locate(const hx_session *s, const hx_plan *p, int dev, int id)
{
    int64_t off = p->offset[dev * s->g->n + id];
    return off >= 0 ? s->arena[dev] + off : s->persist[id];
}

void hx__plan_bind(hx_session *s, hx_plan *p)
{
    void **pool = p->in_pool;
    for (int k = 0; k < p->n_steps; k++) {
        hx_step *st = &p->steps[k];
        const hx_tensor *t = st->node;
        st->in = pool;
        if (!st->fn) {
            st->out = locate(s, p, st->dev, t->id);
            *pool++ = locate(s, p, st->src_dev, t->id);
            continue;
        }
        st->out = t->kind == HX_TENSOR_UPDATE ? NULL : locate(s, p, st->dev, t->id);
        for (int j = 0; j < t->n_src; j++) *pool++ = locate(s, p, st->dev, t->src[j]->id);
    }
    for (int d = 0; d < HX_NDEV; d++) p->bound_to[d] = s->arena[d];
}
