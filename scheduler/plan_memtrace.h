/* HX_MEMTRACE_MODE=tensors: a run's transient device tensors, one
 * allocation each, into the device pools' trace (memory/pool.h). */
#ifndef HX_PLAN_MEMTRACE_H
#define HX_PLAN_MEMTRACE_H

#include "scheduler/scheduler.h"

/* Records plan p's transient tensors on the accelerator as a per-tensor
 * allocator would see them in one sequential run: each allocated at the
 * step that produces it, each copy to the device at its step (a tensor
 * copied there again, offload's parameters and activations back, is one
 * allocation per copy), and freed after the last step that reads that
 * value there (fetches: at the end), steps in the plan's unit-major order. Nothing without an accelerator or when the
 * mode is off. Out of host memory: nothing recorded for this run. */
void hx__plan_memtrace(const hx_engine *e, const hx_plan *p);

#endif
