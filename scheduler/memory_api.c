/* Public calls of the memory room (include/hetex.h, "device memory pools
 * and trace replay"): the work is in memory/; this file puts its message
 * into hx_last_error(). */
#include "graph/graph.h"
#include "memory/memtrace.h"

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
