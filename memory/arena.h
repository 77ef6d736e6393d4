/* The allocation engine under every pool of memory/: segments obtained from
 * a memory source, carved into blocks, best fit over a size-ordered index
 * of free blocks, splitting, and coalescing with address neighbours.
 *
 * The engine never touches the memory it manages (a device pointer cannot
 * be read from the host): blocks and segments are host-side records. It
 * does not lock; its owner does. A policy (hx_arena_policy) makes the same
 * engine the device pools' persistent and transient arenas, the PyTorch-
 * style baseline, and the pinned host pool. */
#ifndef HX_MEM_ARENA_H
#define HX_MEM_ARENA_H

#include <stdbool.h>

#include "memory/mem_common.h"

/* Where a pool's memory comes from: a backend puts its raw allocator here
 * (emu: aligned host memory; cuda: cudaMalloc/cudaFree; the pinned pool:
 * mlock'ed memory or cudaHostAlloc). reserve returns HX_OK and a pointer,
 * or a failure status (the device is full: HX_ERR_DEVICE_OOM or
 * HX_ERR_OUT_OF_MEMORY); the pools then give back cached memory and retry
 * once before reporting. release gets the pointer and size reserve gave. */
typedef struct hx_mem_source {
    void *ctx;
    hx_status (*reserve)(void *ctx, size_t bytes, void **out);
    void (*release)(void *ctx, void *p, size_t bytes);
} hx_mem_source;

/* A source of distinct fake addresses that owns no memory, for replaying
 * traces of any size: pools never dereference what they manage. */
typedef struct hx_mem_virtual { uintptr_t next; } hx_mem_virtual;
hx_mem_source hx__mem_virtual_source(hx_mem_virtual *v);

typedef struct hx_arena_policy {
    size_t round;      /* requests are rounded up to a multiple of this (>= 1) */
    size_t min_split;  /* a block is split when the remainder is at least this (SIZE_MAX: never) */
    size_t max_slack;  /* an unsplit block may exceed the request by at most this */
    size_t fixed_upto; /* requests up to this size get segments of fixed_size */
    size_t fixed_size;
    size_t seg_round;  /* larger requests: a segment of the request rounded up to this */
} hx_arena_policy;

typedef struct hx_mseg hx_mseg;
typedef struct hx_arena hx_arena;

typedef struct hx_mblock {
    uintptr_t addr;
    size_t size;      /* rounded */
    size_t requested; /* what the caller asked for; 0 when free */
    bool used;
    int64_t rec;      /* the owner's note (the transient pool: the allocation's index in its cycle) */
    struct hx_mblock *prev, *next; /* address neighbours in the segment */
    hx_mseg *seg;
    hx_arena *arena;
} hx_mblock;

struct hx_mseg {
    uintptr_t base;
    size_t size;
    hx_mseg *prev, *next;
    hx_mblock *first;
};

/* Current bytes and their peaks, for an arena, a lifetime or a whole pool. */
typedef struct hx_mem_tally {
    size_t reserved, allocated, requested;
    size_t peak_reserved, peak_allocated, peak_requested;
} hx_mem_tally;
void hx__tally_peaks(hx_mem_tally *t);

struct hx_arena {
    hx_arena_policy pol;
    hx_mseg *segs;
    hx_mblock **free_idx; /* free blocks sorted by (size, addr) */
    size_t n_free, cap_free, n_blocks;
    hx_mem_tally t;
    int64_t n_segs, n_live, allocs, frees, reserves, releases;
};

void hx__arena_init(hx_arena *a, const hx_arena_policy *pol);
/* Releases every segment (live blocks included) to src. */
void hx__arena_destroy(hx_arena *a, const hx_mem_source *src);

size_t hx__arena_round(const hx_arena *a, size_t bytes);
/* The segment the policy reserves for a rounded request. */
size_t hx__arena_segment_size(const hx_arena *a, size_t rounded);

/* The smallest free block that serves a rounded request (NULL: none). */
hx_mblock *hx__arena_best_fit(const hx_arena *a, size_t rounded);
/* Adds a segment [base, base + size) as one free block. False: out of host memory. */
bool hx__arena_add_segment(hx_arena *a, void *base, size_t size);
/* Marks the free block blk used for (rounded, requested), splitting off the
 * rest when the policy says so. NULL (nothing changed): out of host memory. */
hx_mblock *hx__arena_take(hx_arena *a, hx_mblock *blk, size_t rounded, size_t requested);
/* Marks [addr, addr + rounded) of segment s used for requested bytes when
 * one free block covers that range, splitting off what lies before and
 * after it. NULL (nothing changed) when no free block covers it or out of
 * host memory. */
hx_mblock *hx__arena_take_at(hx_arena *a, hx_mseg *s, uintptr_t addr, size_t rounded,
                             size_t requested);
/* Frees a used block and coalesces it with free neighbours; returns the
 * free block that now covers it. */
hx_mblock *hx__arena_put(hx_arena *a, hx_mblock *blk);
/* Releases every segment that holds no used block; returns bytes released. */
size_t hx__arena_release_free(hx_arena *a, const hx_mem_source *src);

size_t hx__arena_largest_free(const hx_arena *a);
/* True when segment s holds no used block. */
bool hx__arena_segment_free(const hx_mseg *s);
/* The largest segment that holds no used block (NULL: none). */
hx_mseg *hx__arena_largest_free_segment(const hx_arena *a);
/* Releases segment s, which holds no used block, to src. */
void hx__arena_release_segment(hx_arena *a, hx_mseg *s, const hx_mem_source *src);

#endif
