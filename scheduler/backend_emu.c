/* The emu backend: an emulated accelerator. Its memory is a separate pool
 * of host memory capped at the session's max_device_memory (an allocation
 * past the cap fails with HX_ERR_DEVICE_OOM and a report, as on a GPU), its
 * copies are real, counted memcpys, and its kernels are the CPU kernels
 * except those of host-only ops (hx_op_info.host_only). Its streams are
 * in-order and complete work as it is submitted, on the submitting thread. */
#include "scheduler/stream_inline.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64

typedef struct emu_backend {
    hx_backend b;
    hx_backend_stats st;
} emu_backend;

/* Every block starts with a header holding its size, so free can count. */
typedef struct block_header { size_t bytes; char pad[ALIGN - sizeof(size_t)]; } block_header;

static size_t rounded(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static hx_status emu_alloc(hx_backend *b, size_t bytes, const char *what, void **out)
{
    emu_backend *e = (emu_backend *)b;
    size_t need = rounded(bytes ? bytes : 1);
    *out = NULL;
    if (need > e->st.capacity - e->st.used)
        return hx__error(HX_ERR_DEVICE_OOM,
                         "emu device: out of memory allocating %zu bytes for %s: capacity %zu "
                         "bytes, %zu in use (peak %zu); raise max_device_memory, place fewer "
                         "ops or parameters on the device, or use smaller batches",
                         bytes, what, e->st.capacity, e->st.used, e->st.peak);
    block_header *h = aligned_alloc(ALIGN, sizeof *h + need);
    if (!h)
        return hx__error(HX_ERR_OUT_OF_MEMORY,
                         "emu device: host memory behind the emulated device ran out allocating "
                         "%zu bytes for %s", bytes, what);
    h->bytes = need;
    e->st.used += need;
    if (e->st.used > e->st.peak) e->st.peak = e->st.used;
    *out = h + 1;
    return HX_OK;
}

static void emu_free(hx_backend *b, void *p)
{
    if (!p) return;
    block_header *h = (block_header *)p - 1;
    ((emu_backend *)b)->st.used -= h->bytes;
    free(h);
}

static hx_status emu_h2d(hx_backend *b, void *dst, const void *src, size_t n, hx_stream *s)
{
    emu_backend *e = (emu_backend *)b;
    memcpy(dst, src, n);
    e->st.h2d_copies++;
    e->st.h2d_bytes += n;
    s->submitted++;
    return HX_OK;
}

static hx_status emu_d2h(hx_backend *b, void *dst, const void *src, size_t n, hx_stream *s)
{
    emu_backend *e = (emu_backend *)b;
    memcpy(dst, src, n);
    e->st.d2h_copies++;
    e->st.d2h_bytes += n;
    s->submitted++;
    return HX_OK;
}

/* The CPU kernels, less the ops the op table keeps on the host. */
static hx_launch_fn emu_kernel(const hx_backend *b, hx_op op, hx_dtype dt)
{
    return hx__ops[op].host_only ? NULL : hx__cpu_kernel(op);
}

static hx_status emu_launch(hx_backend *b, hx_stream *s, hx_launch_fn fn, const hx_exec *ex,
                            const hx_tensor *node, void *out, void *const *in)
{
    ((emu_backend *)b)->st.launches++;
    s->submitted++;
    return fn(ex, node, out, in);
}

static void emu_stats(const hx_backend *b, hx_backend_stats *out) { *out = ((const emu_backend *)b)->st; }
static void emu_destroy(hx_backend *b) { free(b); }

hx_status hx__backend_emu_create(size_t capacity, hx_backend **out)
{
    emu_backend *e = calloc(1, sizeof *e);
    if (!e) return hx__error(HX_ERR_OUT_OF_MEMORY, "emu device: out of host memory");
    e->b = (hx_backend){"emu", HX_TARGET_DEVICE, emu_alloc, emu_free, hx__inline_stream_create,
                        hx__inline_stream_destroy, hx__inline_stream_sync, hx__inline_event_create, hx__inline_event_destroy,
                        hx__inline_event_record, hx__inline_stream_wait, hx__inline_event_sync, emu_h2d, emu_d2h,
                        emu_kernel, emu_launch, emu_stats, emu_destroy};
    e->st.capacity = capacity;
    *out = &e->b;
    return HX_OK;
}
