/* Host kernel launches, and the update steps that run outside the
 * executor's unit DAG: the delayed update (offload/dpu.c, on a thread of
 * its own) and the disk tier's update phase (offload/disk_update.c, chunk
 * by chunk on the calling thread) run each of the plan's update steps
 * through hx__update_step. Like the executor's host lanes (exec.c), which
 * run every other host step and the synchronous update phase, each launch
 * goes through the host backend (counted in hx_backend_stats.launches)
 * and into the trace with its op and node name, on the lane of the thread
 * that runs it; device steps go through the accelerator's backend, which
 * traces its own. So every optimizer launch of a run, synchronous, delayed
 * or disk-streamed, is counted and traced, and returns its status. With
 * emu's simulated host costs (hx_emu_host_cost) set, each host launch lasts its floor.
 * A dense update runs on threads pinned to cores where the session pins
 * them (pin.c), and its time adds to the engine's host_update_s. */
#include "scheduler/scheduler.h"

double hx__sim_host_floor(const hx_engine *e, const hx_tensor *node)
{
    const hx_emu_host_cost *c = &e->cfg.emu_host_cost;
    if (!e->accel_on_host) return 0;
    return c->launch_latency_s + (c->flops_per_s > 0 ? hx__run_flops(node, e->lowered) / c->flops_per_s : 0);
}

/* emu's simulated host: a kernel that began at t0 ends no earlier than its
 * floor after the later of t0 and the end of the simulated host's previous
 * kernel (one host, whichever lane runs it); sleeps the rest without the
 * caller's *cores (handed back to the budget meanwhile, as emu's streams
 * sleep theirs). */
static void sim_host_hold(hx_engine *e, const hx_tensor *node, double t0, int nthreads, int *cores)
{
    double want = hx__sim_host_floor(e, node);
    if (want <= 0) return;
    double free_at = atomic_load(&e->sim_host_free), end;
    do end = (free_at > t0 ? free_at : t0) + want;
    while (!atomic_compare_exchange_weak(&e->sim_host_free, &free_at, end));
    if (hx__now() >= end) return;
    hx__budget_give(e->budget, *cores);
    hx__sleep_until(end);
    *cores = hx__budget_take(e->budget, nthreads);
}

hx_status hx__host_launch(hx_engine *e, hx_stream *stream, hx_trace_lane *lane, const hx_exec *ex,
                          const hx_step *sp, void *const *in, int *cores)
{
    hx_backend *host = e->be[HX_DEV_HOST];
    double t0 = hx__now();
    bool update = hx__is_dense_update(sp->node), pin = e->pin && update;
    if (pin) hx__pin_enter(e->pin, ex->nthreads);
    hx_status st = host->launch(host, stream, sp->fn, ex, sp->node, sp->out, in);
    if (pin) hx__pin_leave(e->pin, ex->nthreads);
    if (update) {
        double took = hx__now() - t0, was = atomic_load(&e->host_update_s);
        while (!atomic_compare_exchange_weak(&e->host_update_s, &was, was + took)) {}
    }
    if (!st) sim_host_hold(e, sp->node, t0, ex->nthreads, cores);
    int8_t kind = e->lowered ? e->lowered[sp->node->id].kind : HX_LOWER_NONE;
    if (lane) /* a fused node by its fusion's name: its time is the whole group's */
        hx__trace_event(lane, kind ? hx__lower_name((hx_lower_kind)kind) : hx__ops[sp->node->op].name,
                        sp->node->name, 0, t0, hx__now());
    return st;
}

hx_status hx__update_step(hx_engine *e, hx_stream *stream, hx_trace_lane *lane, const hx_exec *ex,
                          const hx_step *sp, void *const *in)
{
    int cores = hx__budget_take(e->budget, ex->nthreads);
    hx_status st = hx__host_launch(e, stream, lane, ex, sp, in, &cores);
    hx__budget_give(e->budget, cores);
    return st;
}
