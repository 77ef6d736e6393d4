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

/* Parameters and optimizer state on the disk tier (offload_param=disk). */
#include "offload/offload_disk.h"

#endif
