/* The session's trace and host core budget as the hooks of its devices
 * (backend.h: hx_trace_hooks, hx_emu_hooks), so that the backends need
 * neither. */
#include "scheduler/scheduler.h"

static int take_cores(void *budget, int n) { return hx__budget_take(budget, n); }
static void give_cores(void *budget, int taken) { hx__budget_give(budget, taken); }
static void *open_lane(void *trace, const char *name) { return hx__trace_lane(trace, name); }

static void record(void *lane, const hx_device_span *sp)
{
    hx__trace_copy(lane, sp->name, sp->tensor, sp->role, sp->bytes, sp->t0, sp->t1);
}

hx_trace_hooks hx__trace_hooks(hx_trace *trace)
{
    hx_trace_hooks h = {.trace = trace};
    if (trace) {
        h.open_lane = open_lane;
        h.record = record;
    }
    return h;
}

hx_emu_hooks hx__emu_hooks(hx_cpu_budget *budget, hx_trace *trace)
{
    hx_emu_hooks h = {.cores = budget, .tracing = hx__trace_hooks(trace)};
    if (budget) {
        h.take_cores = take_cores;
        h.give_cores = give_cores;
    }
    return h;
}
