/* The run loop's plan work on the engine (the session's hx_session_run
 * and its reports call it): the plan cache, keyed by the fetch ids and the
 * train flag, with the arenas grown to every plan it holds; a plan readied
 * for a run with its feeds; the memory the plans take. */
#include "scheduler/plan.h"

#include <stdlib.h>
#include <string.h>

hx_status hx__engine_device_report(const hx_engine *e, const char *fn, hx_status st, bool activations)
{
    if (st != HX_ERR_DEVICE_OOM) return st;
    char msg[768];
    snprintf(msg, sizeof msg, "%s", hx_last_error());
    char *advice = strstr(msg, HX_MEM_OOM_ADVICE);
    if (advice) *advice = 0; /* the pools' facts; the advice is ours */
    const hx_offload_config *o = &e->cfg.offload;
    size_t params = e->persist_bytes[HX_DEV_ACCEL];
    bool acts = activations || e->arena_bytes[HX_DEV_ACCEL] > 0;
    return hx__error(st,
                     "%s: %s (the device holds %zu bytes of parameters and optimizer state and "
                     "a %zu-byte activation arena)" HX_MEM_OOM_ADVICE "%s%s%s%sa larger cap "
                     "(max_device_memory)",
                     fn, msg, params, e->arena_bytes[HX_DEV_ACCEL],
                     params && o->offload_param == HX_OFFLOAD_NONE
                         ? "parameters and optimizer state on the host (offload_param=cpu), " : "",
                     acts && o->offload_activations == HX_OFFLOAD_NONE
                         ? "activations on the host (offload_activations=cpu), " : "",
                     acts ? "a smaller batch, " : "",
                     o->auto_offload ? "" : "auto_offload=true (offload planned to fit the cap), ");
}

/* Grows device d's transient arena to `bytes` (plans rebind lazily). The
 * old arena is given back first so that a capped device can hold the new
 * one; if the new one does not fit, the old size is taken again and the
 * session stays usable for the plans it already had. */
static hx_status grow_arena(hx_engine *e, int d, size_t bytes, const char *fn)
{
    if (bytes <= e->arena_bytes[d]) return HX_OK;
    hx_backend *b = e->be[d];
    size_t old = e->arena_bytes[d];
    if (e->arena[d]) b->free(b, e->arena[d]);
    e->arena[d] = NULL;
    e->arena_bytes[d] = 0;
    void *mem = NULL;
    hx_status st = b->alloc(b, bytes, HX_MEM_TRANSIENT, "the transient (activation) arena", &mem);
    if (!st) {
        e->arena[d] = mem;
        e->arena_bytes[d] = bytes;
        return HX_OK;
    }
    st = hx__engine_device_report(e, fn, st, true);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hx_last_error());
    if (old && !b->alloc(b, old, HX_MEM_TRANSIENT, "the transient (activation) arena", &mem)) {
        e->arena[d] = mem;
        e->arena_bytes[d] = old;
    }
    return hx__error(st, "%s", msg);
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

hx_status hx__engine_plan(hx_engine *e, int *ids, int n, bool train, const char *fn, hx_plan **out)
{
    qsort(ids, n, sizeof *ids, cmp_int);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!m || ids[m - 1] != ids[i]) ids[m++] = ids[i];
    for (int i = 0; i < e->n_plans; i++) {
        hx_plan *p = e->plans[i];
        if (p->key_len == m + 1 && p->key[m] == train && !memcmp(p->key, ids, sizeof *ids * m)) {
            *out = p;
            return HX_OK;
        }
    }
    hx_plan *p;
    hx_status st = hx__plan_build(e, ids, m, train, &p);
    if (st) return st;
    for (int d = 0; d < HX_NDEV && !st; d++) st = grow_arena(e, d, p->arena_bytes[d], fn);
    for (int ph = 0; ph < 2 && !st; ph++) st = hx__exec_reserve(e, p->host_lanes[ph]);
    hx_plan **plans = st ? NULL : realloc(e->plans, sizeof *plans * (e->n_plans + 1));
    if (!plans) {
        hx__plan_free(e, p);
        return st ? st : hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    e->plans = plans;
    e->plans[e->n_plans++] = p;
    if (hx__debug("placement")) hx__plan_debug_copies(e, p);
    *out = p;
    return HX_OK;
}

void hx__engine_free_plans(hx_engine *e)
{
    for (int i = 0; i < e->n_plans; i++) hx__plan_free(e, e->plans[i]);
    free(e->plans);
    e->plans = NULL;
    e->n_plans = 0;
}

hx_status hx__engine_feed(hx_engine *e, hx_plan *p, const hx_feed *feeds,
                          const hx_tensor *const *feed_t, const bool *on_dev, int n_feeds)
{
    if (p->bound_to[0] != e->arena[0] || p->bound_to[1] != e->arena[1] ||
        p->bound_gen != e->bind_gen)
        hx__plan_bind(e, p);
    for (int k = 0; k < p->n_inputs; k++) {
        const hx_tensor *in = e->g->tensors[p->inputs[k]];
        int j = 0;
        while (j < n_feeds && feed_t[j] != in) j++;
        if (j == n_feeds)
            return hx__error(HX_ERR_INVALID_ARGUMENT,
                             "hx_session_run: input '%s' is needed by this run but not fed",
                             in->name);
        const hx_tensor *use = p->input_host_use[k];
        if (on_dev[j] && (use || p->input_copy_unit[k] < 0))
            return hx__error(HX_ERR_INVALID_ARGUMENT,
                             "hx_session_run: feed %d ('%s') is device memory, but this run "
                             "keeps input '%s' on the host (placed on the cpu%s%s%s); feed it "
                             "host memory", j, in->name, in->name,
                             use == in ? ": it is fetched" : use ? ": cpu op '" : "",
                             use && use != in ? use->name : "",
                             use && use != in ? "' reads it" : "");
    }
    for (int k = 0; k < p->n_inputs; k++) {
        const hx_tensor *in = e->g->tensors[p->inputs[k]];
        int j = 0;
        while (feed_t[j] != in) j++;
        if (p->input_copy_unit[k] >= 0) p->skip[p->input_copy_unit[k]] = on_dev[j];
        if (!on_dev[j])
            memcpy(e->arena[HX_DEV_HOST] + p->offset[in->id], feeds[j].data, feeds[j].bytes);
    }
    for (int i = 0; i < p->n_dev_in; i++) { /* device ops read device feeds in place */
        int id = p->dev_in_id[i];
        void *at = e->arena[HX_DEV_ACCEL] + p->offset[HX_DEV_ACCEL * e->g->n + id];
        for (int j = 0; j < n_feeds; j++)
            if (feed_t[j]->id == id && on_dev[j]) at = (void *)feeds[j].data;
        p->in_pool[p->dev_in_slot[i]] = at;
    }
    return HX_OK;
}

void hx__engine_memory_stats(const hx_engine *e, hx_memory_stats *out)
{
    *out = (hx_memory_stats){.persistent_bytes = e->persist_bytes[HX_DEV_HOST],
                             .device_persistent_bytes = e->persist_bytes[HX_DEV_ACCEL]};
    for (int i = 0; i < e->n_plans; i++) {
        const hx_plan *p = e->plans[i];
        if (p->arena_bytes[HX_DEV_HOST] > out->transient_planned_bytes) {
            out->transient_planned_bytes = p->arena_bytes[HX_DEV_HOST];
            out->transient_tensor_bytes = p->transient_tensor_bytes[HX_DEV_HOST];
        }
        if (p->arena_bytes[HX_DEV_ACCEL] > out->device_transient_planned_bytes)
            out->device_transient_planned_bytes = p->arena_bytes[HX_DEV_ACCEL];
    }
    if (e->be[HX_DEV_ACCEL]) {
        hx_backend_stats bs;
        e->be[HX_DEV_ACCEL]->stats(e->be[HX_DEV_ACCEL], &bs);
        out->device_capacity = bs.capacity;
        out->device_used_bytes = bs.used;
        out->device_peak_bytes = bs.peak;
    }
}
