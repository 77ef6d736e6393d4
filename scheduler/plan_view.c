/* What other folders read of a plan (scheduler/scheduler.h): its steps by
 * phase, the launch contexts of its lanes, its sizes, its units. */
#include "scheduler/plan.h"

const hx_step *hx__plan_steps(const hx_plan *p, int phase, int *n)
{
    *n = phase ? p->n_steps - p->first_update : p->first_update;
    return p->steps + (phase ? p->first_update : 0);
}

void hx__plan_contexts(const hx_plan *p, const hx_exec *run, hx_exec ex[2][2])
{
    for (int ph = 0; ph < 2; ph++)
        for (int k = 0; k < 2; k++) {
            ex[ph][k] = *run;
            ex[ph][k].nthreads = p->threads[ph][k];
        }
}

hx_plan_sizes hx__plan_sizes(const hx_plan *p)
{
    return (hx_plan_sizes){.arena_bytes = p->arena_bytes[HX_DEV_ACCEL],
                           .copy_bytes = p->copy_bytes, .n_act = p->n_act,
                           .act_bytes = p->act_bytes, .n_recomputed = p->n_recomputed,
                           .recompute_flops = p->recompute_flops,
                           .workspace_bytes = p->workspace_bytes};
}

int hx__plan_n_units(const hx_plan *p) { return p->n_units; }

hx_unit_view hx__plan_unit(const hx_plan *p, int u)
{
    static const hx_unit_lane lanes[HX_NLANES] = {
        [HX_LANE_HOST] = HX_UNIT_HOST, [HX_LANE_COMPUTE] = HX_UNIT_DEVICE,
        [HX_LANE_H2D] = HX_UNIT_H2D, [HX_LANE_D2H] = HX_UNIT_D2H};
    const hx_unit *x = &p->units[u];
    return (hx_unit_view){.lane = lanes[x->lane], .phase = x->phase, .n_steps = x->n_steps,
                          .clock = p->clock[u]};
}

const hx_step *hx__plan_unit_step(const hx_plan *p, int u, int i)
{
    return &p->steps[p->unit_steps[p->units[u].first + i]];
}
