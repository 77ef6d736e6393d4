/* The backend interface: what the executor needs from a piece of hardware.
 * A backend is a table of functions: memory, async copies host<->device on
 * a stream, streams and events, kernel lookup by (op, dtype), statistics.
 * cpu (backend_cpu_table.c), emu (backend_emu.c) and cuda (backend_cuda.c)
 * fill it, by field name. Pointers a backend hands out are its own memory:
 * only its own functions (copies, launches) may touch them. */
#ifndef HX_BACKEND_H
#define HX_BACKEND_H

#include "backend/launch.h"
#include "memory/memory.h"

typedef struct hx_stream hx_stream; /* defined by each backend */
typedef struct hx_event hx_event;

typedef struct hx_backend_stats {
    size_t capacity;          /* SIZE_MAX where there is no cap */
    size_t used, peak;        /* bytes allocated now, at most so far */
    uint64_t h2d_copies, h2d_bytes, d2h_copies, d2h_bytes;
    uint64_t launches;
} hx_backend_stats;

typedef struct hx_backend hx_backend;
/* What a copy moves and why (the scheduler names the role), for the trace; either
 * may be NULL (a zeroed label: none). Both must outlive the copy (tensor
 * names and role names do). */
typedef struct hx_copy_label {
    const char *tensor, *role;
} hx_copy_label;

/* A copy from the host into a backend's memory, and one back. Two types,
 * so that neither direction's function or arguments compile in the
 * other's place (the build makes incompatible pointer types errors). */
typedef struct hx_h2d_copy {
    void *dev;        /* the backend's memory */
    const void *host;
    size_t bytes;
    hx_copy_label why; /* only labels the copy in the trace */
} hx_h2d_copy;
typedef struct hx_d2h_copy {
    void *host;
    const void *dev;  /* the backend's memory */
    size_t bytes;
    hx_copy_label why;
} hx_d2h_copy;

struct hx_backend {
    const char *name;  /* "cpu", "emu", "cuda" */
    hx_target target;  /* where its kernels run */
    /* lt: what lives across steps (params, optimizer state, device feeds)
     * is HX_MEM_PERSISTENT, the plans' arenas and workspaces
     * HX_MEM_TRANSIENT; an accelerator keeps them in separate pools. `what`
     * names the allocation in an out-of-memory report. */
    hx_status (*alloc)(hx_backend *b, size_t bytes, hx_mem_lifetime lt, const char *what,
                       void **out);
    void (*free)(hx_backend *b, void *p);
    hx_status (*stream_create)(hx_backend *b, hx_stream **out);
    void (*stream_destroy)(hx_backend *b, hx_stream *s);
    hx_status (*stream_sync)(hx_backend *b, hx_stream *s); /* host waits for all work on s */
    hx_status (*event_create)(hx_backend *b, hx_event **out);
    void (*event_destroy)(hx_backend *b, hx_event *e);
    hx_status (*event_record)(hx_backend *b, hx_event *e, hx_stream *s);
    hx_status (*stream_wait)(hx_backend *b, hx_stream *s, hx_event *e); /* s waits for e */
    hx_status (*event_sync)(hx_backend *b, hx_event *e);                 /* host waits for e */
    /* Without waiting: *done is whether the work on e's stream before its
     * last record has completed (an event never recorded: true). Any
     * thread; an error is the backend's (a failed stream's own error comes
     * from its next sync). */
    hx_status (*event_query)(hx_backend *b, hx_event *e, bool *done);
    /* Copies ordered on stream s; the host buffer must stay valid until s
     * has passed the copy. */
    hx_status (*copy_h2d)(hx_backend *b, hx_stream *s, hx_h2d_copy c);
    hx_status (*copy_d2h)(hx_backend *b, hx_stream *s, hx_d2h_copy c);
    /* NULL: no kernel for op on this dtype (the node's output dtype). */
    hx_launch_fn (*kernel)(const hx_backend *b, hx_op op, hx_dtype dt);
    /* Runs fn on stream s; out/in are this backend's memory and, with ex
     * and node, stay valid until s has passed the launch. */
    hx_status (*launch)(hx_backend *b, hx_stream *s, hx_launch_fn fn, const hx_exec *ex,
                        const hx_tensor *node, void *out, void *const *in);
    void (*stats)(const hx_backend *b, hx_backend_stats *out);
    void (*destroy)(hx_backend *b);
    /* An accelerator's unit timing (NULL for the host): the device time of
     * the work issued on s between time_begin and time_end (a span, timed
     * as the trace's are) is added to *sum once the stream has run it,
     * which it has when a stream_sync of s returns. Brackets on one stream
     * do not nest; *sum stays valid until then. */
    hx_status (*time_begin)(hx_backend *b, hx_stream *s, double *sum);
    hx_status (*time_end)(hx_backend *b, hx_stream *s);
    /* An accelerator's device pools (memory/pool.h: statistics, the
     * HX_MEMTRACE recorder); NULL for the host. */
    hx_mem_pools *pools;
};

/* Kernels the scheduler launches that are no graph op, looked up with
 * kernel() like ops (the dtype argument is the node's dtype). An
 * accelerator backend provides each of them:
 * HX_KERNEL_SUMSQ: node is a gradient, in[0] its value on this device;
 *   writes to out (a double on this device) the sum of its squared
 *   elements, in an order that does not change between runs: finite
 *   exactly when every element is. The session scans device gradients with
 *   it before updates (Inf/NaN, and the global norm for clipping). */
#define HX_KERNEL_SUMSQ ((hx_op)HX_OP_COUNT)
/* HX_LOWERED_OP(kind) (graph.h, HX_OP_COUNT + 1 on): a lowered node, e.g.
 * a convolution's im2col + conv_gemm as one cuDNN call. node is the
 * lowered node as built (its attributes, and its sources' in the graph:
 * the convolution's window is its im2col's), in[] its two lowered sources.
 * A backend that has no such kernel returns NULL and the session runs the
 * nodes as built. */

hx_status hx__backend_cpu_create(hx_backend **out);

/* Rounds n f32 values in host memory to dt (f16 or bf16: to nearest even;
 * f32: a copy) with nthreads threads, as the cpu backend's kernels round
 * their results: for values kept beside an f32 master outside a plan (the
 * offload's half copies). */
void hx__host_round(void *dst, hx_dtype dt, const float *src, int64_t n, int nthreads);

/* One span of a device stream's work, for the session's trace: a kernel
 * (name: its op, or "gradient_scan") or a copy ("copy h2d", "copy d2h",
 * with the copy's label and bytes), from t0 to t1 (hx__now seconds). The
 * strings outlive the trace (op and tensor names, literals). */
typedef struct hx_device_span {
    const char *name, *tensor, *role;
    size_t bytes;
    double t0, t1;
    double *sum; /* a unit's bracket (time_begin): t1 - t0 is added here, not traced */
} hx_device_span;

/* Where a device's streams put their spans: the session's trace, as
 * closures (scheduler/device_hooks.c); NULL functions: not traced.
 * - open_lane(trace, name): where a new stream's spans go (NULL: nowhere),
 *   called by stream_create;
 * - record(lane, span): one span, called for one lane by one thread at a
 *   time. */
typedef struct hx_trace_hooks {
    void *trace;
    void *(*open_lane)(void *trace, const char *name);
    void (*record)(void *lane, const hx_device_span *span);
} hx_trace_hooks;

/* Where a finished span goes: a unit bracket's time to its sum, else the
 * trace (record on lane, when both are set). */
static inline void hx__span_done(void (*record)(void *lane, const hx_device_span *span), void *lane,
                                 const hx_device_span *sp)
{
    if (sp->sum) *sp->sum += sp->t1 - sp->t0;
    else if (record && lane) record(lane, sp);
}

/* What an emu device asks of the session that owns it, as closures (the
 * session's core budget: scheduler/device_hooks.c); NULL functions mean the
 * session has no such thing:
 * - take_cores(cores, n): host cores for one kernel (n: its threads) or
 *   copy (1), waiting until they are free; returns how many it took, which
 *   give_cores(cores, taken) hands back. Any stream's thread calls them;
 * - tracing: as for every device. */
typedef struct hx_emu_hooks {
    void *cores;
    int (*take_cores)(void *cores, int n);
    void (*give_cores)(void *cores, int taken);
    hx_trace_hooks tracing;
} hx_emu_hooks;

typedef struct hx_emu_options {
    hx_emu_hooks hooks;
    hx_emu_cost cost; /* simulated costs */
} hx_emu_options;

/* capacity: the device memory cap in bytes. */
hx_status hx__backend_emu_create(size_t capacity, const hx_emu_options *opt, hx_backend **out);

/* The cuda backend's entry points (present or not: backend_cuda_none.c). */
#include "backend/backend_cuda.h"

#endif
