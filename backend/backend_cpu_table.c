/* The cpu backend: host memory, CPU kernels run on the calling thread.
 * Its streams are in-order and complete work as it is submitted, so its
 * events are complete once recorded. */
#include "backend/stream_inline.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64


typedef struct cpu_backend {
    hx_backend b;
    hx_backend_stats st;
} cpu_backend;

static hx_status cpu_alloc(hx_backend *b, size_t bytes, hx_mem_lifetime lt, const char *what,
                           void **out)
{
    *out = aligned_alloc(ALIGN, (bytes + ALIGN - 1) / ALIGN * ALIGN + ALIGN);
    if (!*out)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory for %s (%zu bytes)",
                         what, bytes);
    return HX_OK;
}

static void cpu_free(hx_backend *b, void *p) { free(p); }

static hx_status cpu_h2d(hx_backend *b, hx_stream *s, hx_h2d_copy c)
{
    memcpy(c.dev, c.host, c.bytes);
    s->submitted++;
    return HX_OK;
}

static hx_status cpu_d2h(hx_backend *b, hx_stream *s, hx_d2h_copy c)
{
    memcpy(c.host, c.dev, c.bytes);
    s->submitted++;
    return HX_OK;
}

static hx_launch_fn cpu_kernel(const hx_backend *b, hx_op op, hx_dtype dt)
{
    return (unsigned)op < HX_OP_COUNT ? hx__cpu_kernel(op) : hx__cpu_fused_kernel(op, dt);
}

static hx_status cpu_launch(hx_backend *b, hx_stream *s, hx_launch_fn fn, const hx_exec *ex,
                            const hx_tensor *node, void *out, void *const *in)
{
    /* host lanes launch concurrently: a relaxed load and store (no locked
     * add on this hot path), so a count may be lost to a concurrent launch */
    uint64_t *n = &((cpu_backend *)b)->st.launches;
    __atomic_store_n(n, __atomic_load_n(n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    s->submitted++;
    return fn(ex, node, out, in);
}

static void cpu_stats(const hx_backend *b, hx_backend_stats *out) { *out = ((const cpu_backend *)b)->st; }
static void cpu_destroy(hx_backend *b) { free(b); }

hx_status hx__backend_cpu_create(hx_backend **out)
{
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return hx__error(HX_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
    c->b = (hx_backend){
        .name = "cpu", .target = HX_TARGET_CPU,
        .alloc = cpu_alloc, .free = cpu_free,
        .stream_create = hx__inline_stream_create, .stream_destroy = hx__inline_stream_destroy,
        .stream_sync = hx__inline_stream_sync,
        .event_create = hx__inline_event_create, .event_destroy = hx__inline_event_destroy,
        .event_record = hx__inline_event_record, .stream_wait = hx__inline_stream_wait,
        .event_sync = hx__inline_event_sync, .event_query = hx__inline_event_query,
        .copy_h2d = cpu_h2d, .copy_d2h = cpu_d2h,
        .kernel = cpu_kernel, .launch = cpu_launch,
        .stats = cpu_stats, .destroy = cpu_destroy,
    };
    c->st.capacity = SIZE_MAX;
    *out = &c->b;
    return HX_OK;
}
