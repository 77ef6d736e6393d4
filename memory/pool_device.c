/* A device's pools: the config the emu and cuda backends use, and the
 * HX_MEMTRACE recorder they own (see pool.h). */
#include "memory/memtrace.h"
#include "memory/pool.h"

#include <stdlib.h>
#include <string.h>

/* The largest small segment for a cap: cap / 64 rounded down to a power of
 * 2, in [1 KiB, 2 MiB]. With 2 MiB segments a 64 KiB cap would go whole to
 * the first pool that asks, and the other pool would find nothing left.
 * Large segments are exact (the default config). */
static size_t granule(size_t capacity)
{
    size_t g = 2 * HX_MIB;
    while (g > 1024 && g > capacity / 64) g /= 2;
    return g;
}

/* HX_MEMTRACE_MODE: 0 blocks (unset, empty, "blocks"), 1 tensors, -1 anything else. */
static int trace_mode(void)
{
    const char *m = getenv("HX_MEMTRACE_MODE");
    if (!m || !m[0] || !strcmp(m, "blocks")) return 0;
    return !strcmp(m, "tensors") ? 1 : -1;
}

hx_status hx_mem_pools_open_device(const char *name, size_t capacity, hx_mem_source src,
                                   hx_mem_pools **out, hx_mem_err *err)
{
    *out = NULL;
    hx_mem_pools_config c = hx_mem_pools_config_default(name, capacity);
    size_t g = granule(capacity);
    c.small_segment = g;
    if (c.small_max > g / 2) c.small_max = g / 2 < c.align ? c.align : g / 2;
    c.source = src;
    int mode = trace_mode();
    if (mode < 0)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT,
                            "%s: HX_MEMTRACE_MODE='%s' is neither 'blocks' (every device "
                            "allocation) nor 'tensors' (the plan's tensors); unset it or use one",
                            name, getenv("HX_MEMTRACE_MODE"));
    const char *path = getenv("HX_MEMTRACE");
    hx_status st = path && path[0] ? hx_memtrace_open(path, &c.trace, err) : HX_OK;
    if (st) return st;
    c.trace_persistent_only = mode == 1 && c.trace;
    st = hx_mem_pools_create(&c, out, err);
    if (st) {
        hx_mem_err ignored;
        hx_memtrace_close(c.trace, &ignored);
    }
    return st;
}

hx_memtrace *hx_mem_pools_tensor_trace(const hx_mem_pools *p)
{
    const hx_mem_pools_config *c = p ? hx_mem_pools_config_of(p) : NULL;
    return c && c->trace_persistent_only ? c->trace : NULL;
}

hx_status hx_mem_pools_close(hx_mem_pools *p, hx_mem_err *err)
{
    if (!p) return HX_OK;
    hx_memtrace *t = hx_mem_pools_config_of(p)->trace;
    hx_mem_pools_destroy(p);
    return hx_memtrace_close(t, err);
}
