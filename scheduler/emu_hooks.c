/* The session's host core budget and trace as the hooks of its emu device
 * (backend.h: hx_emu_hooks), so that the backend needs neither. */
#include "scheduler/scheduler.h"

static int take_cores(void *budget, int n) { return hx__budget_take(budget, n); }
static void give_cores(void *budget, int taken) { hx__budget_give(budget, taken); }
static void *open_lane(void *trace, const char *name) { return hx__trace_lane(trace, name); }

static void record(void *lane, const hx_emu_span *sp)
{
    hx__trace_copy(lane, sp->name, sp->tensor, sp->role, sp->bytes, sp->t0, sp->t1);
}

hx_emu_hooks hx__emu_hooks(hx_cpu_budget *budget, hx_trace *trace)
{
    hx_emu_hooks h = {.cores = budget, .trace = trace};
    if (budget) {
        h.take_cores = take_cores;
        h.give_cores = give_cores;
    }
    if (trace) {
        h.open_lane = open_lane;
        h.record = record;
    }
    return h;
}
