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
 * or disk-streamed, is counted and traced, and returns its status. */
#include "scheduler/scheduler.h"

hx_status hx__host_launch(hx_engine *e, hx_stream *stream, hx_trace_lane *lane, const hx_exec *ex,
                          const hx_step *sp, void *const *in)
{
    hx_backend *host = e->be[HX_DEV_HOST];
    double t0 = lane ? hx__now() : 0;
    hx_status st = host->launch(host, stream, sp->fn, ex, sp->node, sp->out, in);
    if (lane) hx__trace_event(lane, hx__ops[sp->node->op].name, sp->node->name, 0, t0, hx__now());
    return st;
}

hx_status hx__update_step(hx_engine *e, hx_stream *stream, hx_trace_lane *lane, const hx_exec *ex,
                          const hx_step *sp, void *const *in)
{
    int cores = hx__budget_take(e->budget, ex->nthreads);
    hx_status st = hx__host_launch(e, stream, lane, ex, sp, in);
    hx__budget_give(e->budget, cores);
    return st;
}
