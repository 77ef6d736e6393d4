/* Memory offload (hx_offload_config): the config and its "key=value,..."
 * syntax, and the placement it implies. The per-step copies, chunks and
 * prefetch limit live in the plan (scheduler/plan.c, plan_units.c; whether
 * a plan makes them: hx__offload_on and hx__offload_activations_on in
 * scheduler/scheduler.h). */
#ifndef HX_OFFLOAD_H
#define HX_OFFLOAD_H

#include "scheduler/scheduler.h"

/* The session's effective offload config: cfg's, or $HX_OFFLOAD parsed over
 * the default when cfg leaves offload at its default; checked. */
hx_status hx__offload_resolve(hx_offload_config *cfg);

/* hx_session_offload_report of the session running on e (out not NULL). */
hx_status hx__offload_report(hx_engine *e, hx_offload_report *out);

/* Parameters (and their optimizer state and updates) to the host when the
 * session offloads parameters; after placement. */
hx_status hx__offload_place(hx_engine *e);

/* dpu.c: the delayed parameter update (hx_session_config.delayed_param_update). */
/* p's updates may run behind the next run: all dense, on the host, alone in
 * phase 1, and p qualifies for hx__dpu_reads_no_master. */
bool hx__dpu_plan_ok(const hx_plan *p);
/* No step of p before its updates reads a parameter or optimizer state
 * (half copies excepted): p may run while a delayed update does. */
bool hx__dpu_reads_no_master(const hx_plan *p);
/* Starts p's phase 1 on the delayed update's thread with ex (settled before). */
hx_status hx__dpu_launch(hx_engine *e, const hx_plan *p, const hx_exec *ex);
/* Waits for the delayed update, if one runs, and publishes its half copies. */
hx_status hx__dpu_settle(hx_engine *e);
void hx__dpu_free(hx_engine *e);

/* half_copy.c: f16/bf16 copies of f32 masters that their updates write. */
bool hx__is_half_copy(const hx_tensor *t);
/* Sets the half copies of master (NULL: of every parameter) from it. */
hx_status hx__half_copies_refresh(hx_engine *e, const hx_tensor *master);

/* Parameters and optimizer state on the disk tier (offload_param=disk). */
#include "offload/offload_disk.h"

#endif
