/* The plan's transient device tensors as alloc/free events (plan_memtrace.h). */
#include "scheduler/plan_memtrace.h"
#include "scheduler/plan.h"
#include "memory/memory.h"

#include <stdlib.h>

typedef struct event {
    int pos;   /* unit-major position */
    int free;  /* at one position: allocations first, then frees */
    int id;    /* the value (hx__plan_memtrace) */
} event;

static int by_pos(const void *pa, const void *pb)
{
    const event *a = pa, *b = pb;
    if (a->pos != b->pos) return a->pos < b->pos ? -1 : 1;
    if (a->free != b->free) return a->free - b->free;
    return a->id - b->id;
}

void hx__plan_memtrace(const hx_engine *e, const hx_plan *p)
{
    const hx_backend *acc = e->be[HX_DEV_ACCEL];
    hx_memtrace *t = acc ? hx_mem_pools_tensor_trace(acc->pools) : NULL;
    if (!t) return;
    /* values: 0..n-1 a tensor at home on the device, n + k the copy made
     * by step k (a tensor may be copied to the device more than once) */
    int n = e->g->n, nv = n + p->n_steps;
    const int64_t *off = p->offset + (size_t)HX_DEV_ACCEL * n;
    int *first = malloc(sizeof *first * 2 * (nv ? nv : 1)), *last = first ? first + nv : NULL;
    event *ev = malloc(sizeof *ev * 2 * (nv ? nv : 1));
    if (!first || !ev) goto done;
    for (int v = 0; v < nv; v++) first[v] = last[v] = -1;
    for (int q = 0; q < p->n_steps; q++) {
        int k = p->unit_steps[q];
        const hx_step *sp = &p->steps[k];
        const hx_tensor *x = sp->node;
        if (!sp->fn) { /* a copy: made at dev, read from the home at src_dev */
            if (sp->dev == HX_DEV_ACCEL) first[n + k] = q;
            if (sp->src_dev == HX_DEV_ACCEL) last[x->id] = q;
            continue;
        }
        if (sp->dev != HX_DEV_ACCEL) continue;
        const int *from = p->src_step + (sp->in - p->in_pool); /* bound: its input slots */
        for (int j = 0; j < hx__n_reads(e, x); j++) last[from[j] >= 0 ? n + from[j] : hx__read(e, x, j)->id] = q;
        if (first[x->id] < 0) first[x->id] = q;
    }
    for (int k = 0; k < p->key_len - 1; k++) /* fetches live to the end at their home */
        if (hx__dev_of(e, p->key[k]) == HX_DEV_ACCEL) last[p->key[k]] = p->n_steps;
    int m = 0;
    for (int v = 0; v < nv; v++) {
        if (first[v] < 0 || (v < n && off[v] < 0)) continue;
        ev[m++] = (event){first[v], 0, v};
        ev[m++] = (event){last[v] > first[v] ? last[v] : first[v], 1, v};
    }
    qsort(ev, m, sizeof *ev, by_pos);
    /* Keys: the plan's offset slots, host addresses no device block has. */
    for (int k = 0; k < m; k++) {
        int v = ev[k].id;
        const void *key = v < n ? (const void *)&off[v] : (const void *)&p->step_offset[v - n];
        if (ev[k].free) hx_memtrace_free(t, key);
        else
            hx_memtrace_alloc(t, key,
                              hx_tensor_nbytes(v < n ? e->g->tensors[v] : p->steps[v - n].node),
                              false);
    }
done:
    free(first);
    free(ev);
}
