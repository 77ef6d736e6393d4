/* Replays a checked trace through the pools and the baseline (see memtrace.h). */
#include "memory/caching_baseline.h"
#include "memory/memtrace.h"
#include "memory/pool.h"
#include "memory/ptrmap.h"

#include <stdlib.h>
#include <string.h>

/* One allocator under replay: ids -> its pointers. */
typedef struct replayer {
    hx_mem_pools *pools;    /* one of the two */
    hx_mem_baseline *base;
    hx_ptrmap ptr_of;       /* id + 1 -> pointer */
    int64_t oom_event;
    size_t oom_live;
} replayer;

static hx_status replay_one(replayer *r, const hx_mem_event *e, int64_t i, size_t live,
                            hx_mem_err *err)
{
    if (r->oom_event >= 0) return HX_OK; /* it stopped at its OOM */
    if (!e->alloc) {
        void *p = hx__ptrmap_del(&r->ptr_of, e->id + 1);
        return r->pools ? hx_mem_pools_free(r->pools, p, err) : hx_mem_baseline_free(r->base, p, err);
    }
    void *p = NULL;
    hx_status st = r->pools ? hx_mem_pools_alloc(r->pools, e->bytes,
                                                 e->persistent ? HX_MEM_PERSISTENT : HX_MEM_TRANSIENT,
                                                 "a trace allocation", &p, err)
                            : hx_mem_baseline_alloc(r->base, e->bytes, &p, err);
    if (st == HX_ERR_DEVICE_OOM) {
        r->oom_event = i;
        r->oom_live = live;
        return HX_OK;
    }
    if (st) return st;
    if (!hx__ptrmap_put(&r->ptr_of, e->id + 1, p))
        return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "memreplay: out of host memory");
    return HX_OK;
}

static double ratio(size_t reserved, size_t live) { return live ? (double)reserved / live : 0; }

hx_status hx_memtrace_replay(const hx_mem_event *ev, size_t n, size_t capacity,
                             hx_memreplay_report *out, hx_mem_err *err)
{
    if (!out || (!ev && n))
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_memtrace_replay: events or out is NULL");
    memset(out, 0, sizeof *out);
    hx_mem_virtual vp = {0}, vb = {0};
    hx_mem_pools_config c = hx_mem_pools_config_default("replayed device", capacity);
    c.source = hx__mem_virtual_source(&vp);
    replayer r[2] = {{.oom_event = -1}, {.oom_event = -1}};
    hx_status st = hx_mem_pools_create(&c, &r[0].pools, err);
    if (!st) st = hx_mem_baseline_create(capacity, hx__mem_virtual_source(&vb), &r[1].base, err);
    hx_ptrmap size_of = {0}; /* id + 1 -> bytes + 1 of live ids */
    size_t live = 0;
    for (size_t i = 0; i < n && !st; i++) {
        const hx_mem_event *e = &ev[i];
        if (e->alloc) {
            out->allocs++;
            live += e->bytes;
            if (live > out->peak_live) out->peak_live = live;
            if (!hx__ptrmap_put(&size_of, e->id + 1, (void *)(uintptr_t)(e->bytes + 1)))
                st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "memreplay: out of host memory");
        } else {
            out->frees++;
            live -= (uintptr_t)hx__ptrmap_del(&size_of, e->id + 1) - 1;
        }
        for (int k = 0; k < 2 && !st; k++) st = replay_one(&r[k], e, (int64_t)i, live - (e->alloc ? e->bytes : 0), err);
    }
    hx__ptrmap_free(&size_of);
    if (!st) {
        out->events = (int64_t)n;
        out->capacity = capacity;
        hx_mem_pools_stats(r[0].pools, &out->pools);
        hx_mem_baseline_stats(r[1].base, &out->baseline);
        out->pools_ratio = ratio(out->pools.total.peak_reserved, out->pools.total.peak_requested);
        out->baseline_ratio = ratio(out->baseline.peak_reserved, out->baseline.peak_requested);
        out->pools_oom_event = r[0].oom_event;
        out->pools_oom_live = r[0].oom_live;
        out->baseline_oom_event = r[1].oom_event;
        out->baseline_oom_live = r[1].oom_live;
    }
    for (int k = 0; k < 2; k++) hx__ptrmap_free(&r[k].ptr_of);
    hx_mem_pools_destroy(r[0].pools);
    hx_mem_baseline_destroy(r[1].base);
    return st;
}
