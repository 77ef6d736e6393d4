/* Device memory pools segregated by lifetime.
 *
 * One hx_mem_pools per device manages everything the device hands out, in
 * two pools that never share a segment:
 *   persistent  params, master copies, optimizer state, whatever lives
 *               across steps;
 *   transient   activations, gradients, workspaces within a step.
 * So transient churn never splits, pins or fragments long-lived memory. In
 * each pool a block is the request's exact size (rounded to align), taken
 * best fit from a size-ordered index of free blocks, split off, and
 * coalesced with its address neighbours when freed. Requests up to
 * small_max share small segments (small_segment / 32 at first, persistent
 * / 128, doubled while under 1/64 of the pool, at most small_segment); a
 * larger one that no free block serves gets a segment of its own size
 * (persistent: exact; transient: rounded up to segment_round), and large
 * blocks are split only for large requests, so small tensors never pin a
 * large segment.
 *
 * The transient pool learns the step (pool_plan.h). A cycle runs from the
 * transient pool empty to empty again: a training or eval step. In the
 * first one a large request takes a cached block only when it is at most
 * 1/8 larger (else a segment of its own). When a cycle ends, the first one
 * and any that had to reserve memory is laid out offline (every block at an
 * offset free over its whole lifetime, within a few percent of the cycle's
 * peak live bytes); that layout becomes the plan in one segment, which
 * replaces the cycle's cached segments. The next cycles get the plan's
 * offsets while they ask for the same sizes in the same order (a request
 * may find its entry up to 8 ahead, when its place is free); from the
 * first request that finds none they take best fit, the plan's segment
 * first.
 * In steady state nothing is reserved or released.
 *
 * Memory comes from the backend through hx_mem_source and counts against a
 * cap. Before the pools reserve a segment they give back cached segments
 * of that lifetime that hold nothing, largest first, as long as the
 * reservation would otherwise raise the peak (below the peak, keeping them
 * costs nothing and saves the next step a reservation); when the cap (or
 * the device) refuses, they give back every entirely free segment and try
 * once more. Then the allocation fails with HX_ERR_DEVICE_OOM and a
 * report: the request, the cap, reserved and in-use bytes per pool, free
 * bytes, the largest free block, fragmentation, and what to try.
 *
 * Fragmentation is 1 - largest free block / free bytes (0 with nothing
 * free): the share of free memory that a request as large as all of it
 * could not use. All calls are thread-safe (one mutex per hx_mem_pools).
 *
 * The emu and cuda backends create theirs with hx_mem_pools_open_device
 * (below); the backend's alloc takes the lifetime (session.c: params,
 * state, scan sums and device feeds persistent, the plans' arena
 * transient), its stats come from hx_mem_pools_stats, and
 * hx_session_pool_stats hands them to users.
 * hx_mem_pools_trim gives cached segments back (after an offload). */
#ifndef HX_MEM_POOL_H
#define HX_MEM_POOL_H

#include "memory/arena.h"

typedef struct hx_memtrace hx_memtrace;

typedef enum hx_mem_lifetime { HX_MEM_PERSISTENT = 0, HX_MEM_TRANSIENT = 1 } hx_mem_lifetime;

typedef struct hx_mem_pools_config {
    const char *name;      /* the device, in messages ("emu device") */
    size_t capacity;       /* bytes the pools may reserve in all; SIZE_MAX: no cap */
    hx_mem_source source;
    size_t align;          /* block alignment and request rounding: 64 or a larger power of 2 */
    size_t small_max;      /* requests up to this are small */
    size_t small_segment;  /* the largest segment of small requests (>= small_max) */
    size_t segment_round;  /* large transient segments are rounded up to this (>= align) */
    hx_memtrace *trace;    /* when set, every alloc and free is recorded (not owned) */
    bool trace_persistent_only; /* record only the persistent pool's events */
} hx_mem_pools_config;

/* align 256, small_max 256 KiB, small_segment 2 MiB, segment_round 4 KiB
 * (a page: large transient segments, the plan's included, are the request
 * to the page); no source, no trace. */
hx_mem_pools_config hx_mem_pools_config_default(const char *name, size_t capacity);

typedef struct hx_mem_pools hx_mem_pools;

hx_status hx_mem_pools_create(const hx_mem_pools_config *cfg, hx_mem_pools **out,
                              hx_mem_err *err);
/* Gives every segment back to the source (blocks still allocated too). */
void hx_mem_pools_destroy(hx_mem_pools *p);

/* bytes may be 0 (a distinct block of `align` bytes). `what` names the
 * allocation in the OOM report (may be NULL). The report ends with
 * HX_MEM_OOM_ADVICE and the options that would lower what the pools hold
 * (by lifetime: persistent bytes are parameters and optimizer state,
 * transient ones activations); a caller that knows what the bytes are
 * (a session: hx__engine_device_report) puts its own after the marker. */
#define HX_MEM_OOM_ADVICE "; try: "
hx_status hx_mem_pools_alloc(hx_mem_pools *p, size_t bytes, hx_mem_lifetime lt,
                             const char *what, void **out, hx_mem_err *err);
/* Freeing NULL does nothing; a pointer the pools did not hand out is
 * HX_ERR_INVALID_ARGUMENT (nothing changes). */
hx_status hx_mem_pools_free(hx_mem_pools *p, void *ptr, hx_mem_err *err);
/* Gives back every entirely free segment (the plan's too, and the plan
 * with it); returns the bytes released. */
size_t hx_mem_pools_trim(hx_mem_pools *p);
void hx_mem_pools_stats(hx_mem_pools *p, hx_device_pools_stats *out);

/* The transient pool's step plan (pool_plan.h): layouts adopted, the
 * transient allocations it served and those it did not, and the size of
 * its segment now (0: no plan). */
typedef struct hx_mem_plan_stats {
    int64_t plans, planned, unplanned;
    size_t plan_bytes;
} hx_mem_plan_stats;
void hx_mem_pools_plan_stats(hx_mem_pools *p, hx_mem_plan_stats *out);

/* The requested size of a live block handed out at ptr; 0 when none is. */
size_t hx_mem_pools_size_of(hx_mem_pools *p, const void *ptr);
const hx_mem_pools_config *hx_mem_pools_config_of(const hx_mem_pools *p);
/* Writes up to max segments of pool lt as [base, base + size) and returns
 * how many it has (tests check that the pools never share one). */
int hx_mem_pools_segments(hx_mem_pools *p, hx_mem_lifetime lt, uintptr_t *base, size_t *size,
                          int max);

/* ---- a device's pools (pool_device.c) ------------------------------------------------
 * What the emu and cuda backends create: the default config with its
 * small segments bounded by the cap (at most cap / 64 rounded down to a
 * power of 2, between 1 KiB and 2 MiB, and small_max at most half that, so
 * that a small cap is not taken by one pool's first segment), memory from
 * src, and the HX_MEMTRACE recorder:
 *   HX_MEMTRACE=path                 every allocation of the device's pools
 *                                    (the plan's transient arena is one);
 *   HX_MEMTRACE_MODE=tensors         the persistent pool's allocations, and
 *                                    the session adds each transient device
 *                                    tensor of every run (alloc at its
 *                                    production, free after its last use, in
 *                                    plan order): what a per-tensor allocator
 *                                    would be asked for (hx__plan_memtrace).
 * A process that opens several devices (sessions) writes the file once per
 * device, at close; the last one closed stays. */
hx_status hx_mem_pools_open_device(const char *name, size_t capacity, hx_mem_source src,
                                   hx_mem_pools **out, hx_mem_err *err);
/* The recorder the session adds the plan's tensors to (HX_MEMTRACE_MODE=
 * tensors), else NULL. */
hx_memtrace *hx_mem_pools_tensor_trace(const hx_mem_pools *p);
/* Destroys the pools, then writes and frees their recorder: the status of
 * writing the trace (HX_OK without one). NULL: HX_OK. */
hx_status hx_mem_pools_close(hx_mem_pools *p, hx_mem_err *err);

/* Fills a public hx_pool_stats from a tally and the arenas behind it. */
void hx__pool_stats_fill(hx_pool_stats *out, const hx_mem_tally *t, hx_arena *const *arenas,
                         int n, int64_t ooms);

#endif
