/* The plan's transient device tensors as alloc/free events (plan_memtrace.h). */
#include "scheduler/plan_memtrace.h"
#include "scheduler/backend.h"
#include "memory/memtrace.h"

#include <stdlib.h>

typedef struct event {
    int pos;   /* unit-major position */
    int free;  /* at one position: allocations first, then frees */
    int id;
} event;

static int by_pos(const void *pa, const void *pb)
{
    const event *a = pa, *b = pb;
    if (a->pos != b->pos) return a->pos < b->pos ? -1 : 1;
    if (a->free != b->free) return a->free - b->free;
    return a->id - b->id;
}

void hx__plan_memtrace(const hx_session *s, const hx_plan *p)
{
    const hx_backend *acc = s->be[HX_DEV_ACCEL];
    hx_memtrace *t = acc ? hx_mem_pools_tensor_trace(acc->pools) : NULL;
    if (!t) return;
    int n = s->g->n;
    const int64_t *off = p->offset + (size_t)HX_DEV_ACCEL * n;
    int *first = malloc(sizeof *first * 2 * (n ? n : 1)), *last = first ? first + n : NULL;
    event *ev = malloc(sizeof *ev * 2 * (n ? n : 1));
    if (!first || !ev) goto done;
    for (int i = 0; i < n; i++) first[i] = last[i] = -1;
    for (int q = 0; q < p->n_steps; q++) {
        const hx_step *sp = &p->steps[p->unit_steps[q]];
        const hx_tensor *x = sp->node;
        if (!sp->fn) { /* a copy: produced at dev, read at src_dev */
            if (sp->dev == HX_DEV_ACCEL && first[x->id] < 0) first[x->id] = q;
            if (sp->src_dev == HX_DEV_ACCEL) last[x->id] = q;
            continue;
        }
        if (sp->dev != HX_DEV_ACCEL) continue;
        for (int j = 0; j < x->n_src; j++) last[x->src[j]->id] = q;
        if (first[x->id] < 0) first[x->id] = q;
    }
    for (int k = 0; k < p->key_len - 1; k++) /* fetches live to the end at their home */
        if (hx__dev_of(s, p->key[k]) == HX_DEV_ACCEL) last[p->key[k]] = p->n_steps;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (off[i] < 0 || first[i] < 0) continue;
        ev[m++] = (event){first[i], 0, i};
        ev[m++] = (event){last[i] > first[i] ? last[i] : first[i], 1, i};
    }
    qsort(ev, m, sizeof *ev, by_pos);
    /* Keys: the plan's offset slots, host addresses no device block has. */
    for (int k = 0; k < m; k++) {
        const void *key = &off[ev[k].id];
        if (ev[k].free) hx_memtrace_free(t, key);
        else hx_memtrace_alloc(t, key, hx_tensor_nbytes(s->g->tensors[ev[k].id]), false);
    }
done:
    free(first);
    free(ev);
}
