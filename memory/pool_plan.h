/* The transient pool's step plan: what one cycle of the transient pool
 * asked for (from empty back to empty: a training or eval step), and an
 * offline layout of it, so that the next cycles that ask the same get the
 * same offsets in one segment instead of a best fit among many.
 *
 * An online best fit cannot know which free block a later, larger request
 * will need, so each step of a model leaves some free blocks idle at its
 * peak (5-15% on our GPT traces) and the cached segments of the last step
 * rarely match the next one's order of requests. Once a whole cycle is
 * known, lifetimes are intervals and placing them is the arena problem the
 * plans solve: largest first, each at the lowest offset free over its whole
 * lifetime, which lands within a few percent of the cycle's peak live
 * bytes. */
#ifndef HX_MEM_POOL_PLAN_H
#define HX_MEM_POOL_PLAN_H

#include <stdbool.h>

#include "memory/mem_common.h"

/* Cycles longer than this are not planned (the layout is quadratic). */
#define HX_POOL_CYCLE_MAX 8192

typedef struct hx_pool_cycle {
    size_t n, cap;     /* allocations recorded */
    size_t *size;      /* rounded */
    int64_t *t0, *t1;  /* clock at the allocation and at the free (INT64_MAX: live) */
    int64_t clock;
    bool overflow;     /* more than HX_POOL_CYCLE_MAX, or out of host memory */
} hx_pool_cycle;

/* Records an allocation; its index for hx__cycle_free, -1 when not recorded. */
int64_t hx__cycle_alloc(hx_pool_cycle *c, size_t rounded);
void hx__cycle_free(hx_pool_cycle *c, int64_t i);
void hx__cycle_reset(hx_pool_cycle *c);
void hx__cycle_destroy(hx_pool_cycle *c);

typedef struct hx_pool_plan {
    size_t n;
    size_t *size, *offset; /* by allocation index in the cycle */
    bool *taken;           /* the entries a cycle following the plan has used (the owner's) */
    size_t bytes;          /* the layout's extent */
} hx_pool_plan;

/* Lays out a finished cycle (every allocation freed): each block at the
 * lowest offset, in multiples of align, where it overlaps no block placed
 * before it that is live at the same time, largest blocks first. False
 * (out unchanged) when out of host memory or the cycle is empty or
 * overflowed. */
bool hx__pool_plan_layout(const hx_pool_cycle *c, size_t align, hx_pool_plan *out);
void hx__pool_plan_free(hx_pool_plan *p);

#endif
