/* Public calls of the memory room (include/hetex.h, "device memory pools
 * and trace replay"): the work is in memory/; this file puts its message
 * into hx_last_error() and finds a session's pools (its accelerator's). */
#include "session/session.h"
#include "backend/backend.h"
#include "memory/memory.h"
#include "scheduler/scheduler.h"

#include <stdlib.h>

hx_status hx_memreplay(const char *path, size_t capacity, hx_memreplay_report *out)
{
    if (!path || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_memreplay: %s is NULL", !path ? "path" : "out");
    hx_mem_err err;
    hx_mem_event *ev = NULL;
    size_t n = 0;
    hx_status st = hx_memtrace_load(path, &ev, &n, &err);
    if (!st) st = hx_memtrace_replay(ev, n, capacity ? capacity : SIZE_MAX, out, &err);
    free(ev);
    if (st) return hx__error(st, "hx_memreplay: %s", err.msg);
    return HX_OK;
}

hx_status hx_session_pool_stats(hx_session *s, hx_device_pools_stats *out)
{
    if (!s || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_pool_stats: %s is NULL",
                         s ? "out" : "session");
    const hx_backend *acc = s->e.be[HX_DEV_ACCEL];
    if (!acc || !acc->pools)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_pool_stats: the session has no "
                         "accelerator (HX_ACCELERATOR_NONE), so no device pools");
    hx_mem_pools_stats(acc->pools, out);
    return HX_OK;
}
