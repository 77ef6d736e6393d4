/* Memory offload (hx_offload_config): the config and its "key=value,..."
 * syntax, and the placement it implies. The per-step copies, chunks and
 * prefetch limit live in the plan (plan.c, plan_units.c). */
#ifndef HX_OFFLOAD_H
#define HX_OFFLOAD_H

#include "scheduler/scheduler.h"

/* The session's effective offload config: cfg's, or $HX_OFFLOAD parsed over
 * the default when cfg leaves offload at its default; checked. */
hx_status hx__offload_resolve(hx_offload_config *cfg);

/* Parameters (and their optimizer state and updates) to the host when the
 * session offloads parameters; after placement. */
hx_status hx__offload_place(hx_session *s);

/* Whether the session streams parameters to the device per step. */
static inline bool hx__offload_on(const hx_session *s)
{
    return s->cfg.offload.offload_param != HX_OFFLOAD_NONE && s->be[HX_DEV_ACCEL];
}

/* Whether the session's plans copy far-read device activations to the
 * host and back (offload_activations=cpu). */
static inline bool hx__offload_activations_on(const hx_session *s)
{
    return s->cfg.offload.offload_activations != HX_OFFLOAD_NONE && s->be[HX_DEV_ACCEL];
}

/* A tensor that lives across steps on the host (param, state, constant):
 * what the offload streams to the device in chunks. */
static inline bool hx__offload_streamed(const hx_tensor *t)
{
    return t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE ||
           t->kind == HX_TENSOR_CONSTANT;
}

/* Parameters and optimizer state on the disk tier (offload_param=disk). */
#include "offload/offload_disk.h"

#endif
