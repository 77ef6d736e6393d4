/* The emu backend: an emulated accelerator. Its memory is host memory
 * behind memory/'s device pools (persistent and transient), capped at the
 * session's max_device_memory (an allocation past the cap fails with
 * HX_ERR_DEVICE_OOM and the pools' report, as on a GPU), its
 * copies are real, counted memcpys, and its kernels are the CPU kernels
 * except those of host-only ops (hx_op_info.host_only).
 *
 * Streams are real: each is served by its own thread from a queue, in
 * order, so work on different streams (and on the host) overlaps. Events
 * mark a point in a stream's queue; the host (event_sync) and other streams
 * (stream_wait) can wait for them. A failed operation puts its stream in
 * error: later operations on it, and on streams that wait for its events,
 * are skipped, event waits return, and the error (status and message)
 * comes back from the next stream_sync, which clears it. Kernels and copies
 * take their host cores from the session (hx_emu_hooks: its core budget)
 * and, with simulated costs set, last at least their simulated time (the
 * rest is slept without holding cores). */
#include "backend/backend.h"
#include "core/core.h" /* HX_ASAN */
#include "kernels/cpu/hx_kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Segments are aligned as cudaMalloc's are. */
#define SEGMENT_ALIGN 256

typedef struct emu_backend {
    hx_backend b;
    hx_backend_stats st; /* counters updated atomically by stream threads */
    pthread_mutex_t mu;  /* events */
    hx_emu_options opt;
    int n_streams;
} emu_backend;

enum { OP_LAUNCH, OP_H2D, OP_D2H, OP_WAIT, OP_TIME_BEGIN, OP_TIME_END };

typedef struct emu_op {
    int kind;
    hx_launch_fn fn;
    const hx_exec *ex;
    const hx_tensor *node;
    void *out;
    void *const *in;
    const void *src;
    size_t n;
    hx_stream *wait_on; /* OP_WAIT: until wait_on has completed `until` operations */
    uint64_t until;
    hx_copy_label why; /* a copy's label in the trace */
    double *sum;       /* OP_TIME_BEGIN: where the bracket's time goes */
} emu_op;

struct hx_stream {
    emu_backend *e;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    emu_op *q; /* ring */
    size_t cap, head, count;
    uint64_t submitted, completed;
    int waiters;
    bool idle, stop;
    hx_status err;
    char msg[1024];
    void *lane; /* hx_trace_hooks.open_lane's; NULL: not traced */
    hx_device_span bracket; /* the open time_begin's (its stream thread's) */
};

struct hx_event {
    hx_stream *s; /* NULL: never recorded (complete) */
    uint64_t target;
};

/* ---- memory ------------------------------------------------------------------ */

/* The device's memory: memory/'s lifetime-segregated pools over segments of
 * host memory, capped at the session's max_device_memory. Under ASan the
 * bytes of a segment that no live block covers are poisoned, so a kernel
 * that runs past its buffer is caught although buffers share segments. */
#if defined(HX_ASAN)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static hx_status segment_reserve(void *ctx, size_t bytes, void **out)
{
    *out = aligned_alloc(SEGMENT_ALIGN, hx__mem_round(bytes, SEGMENT_ALIGN));
    if (!*out) return HX_ERR_OUT_OF_MEMORY;
    POISON(*out, bytes);
    return HX_OK;
}

static void segment_release(void *ctx, void *p, size_t bytes)
{
    UNPOISON(p, bytes);
    free(p);
}

static hx_status emu_alloc(hx_backend *b, size_t bytes, hx_mem_lifetime lt, const char *what,
                           void **out)
{
    hx_mem_err err;
    hx_status st = hx_mem_pools_alloc(b->pools, bytes, lt, what, out, &err);
    if (st) return hx__error(st, "%s", err.msg);
    UNPOISON(*out, bytes);
    return HX_OK;
}

static void emu_free(hx_backend *b, void *p)
{
    if (!p) return;
    size_t n = hx_mem_pools_size_of(b->pools, p);
    POISON(p, hx__mem_round(n ? n : 1, hx_mem_pools_config_of(b->pools)->align));
    hx_mem_err err;
    if (hx_mem_pools_free(b->pools, p, &err)) /* a pointer of no allocation: a bug of ours */
        fprintf(stderr, "hetex: %s\n", err.msg);
}

/* ---- simulated cost ------------------------------------------------------------ */

/* Sleeps until t0 + want (hx__now seconds); returns the end time. */
static double hold_until(double t0, double want)
{
    return want <= 0 ? hx__now() : hx__sleep_until(t0 + want);
}

/* ---- the gradient scan kernel ---------------------------------------------------- */

/* HX_KERNEL_SUMSQ: out (a double) = the sum of the squares of the gradient
 * in[0] (node's dtype and size). */
static hx_status scan_sumsq(const hx_exec *ex, const hx_tensor *node, void *out,
                            void *const *in)
{
    *(double *)out = hx_k_sumsq(in[0], (hx_kdtype)node->dtype, hx_tensor_numel(node),
                                ex->nthreads);
    return HX_OK;
}

/* ---- the session's hooks ------------------------------------------------------------ */

static int take_cores(const emu_backend *e, int n)
{
    const hx_emu_hooks *h = &e->opt.hooks;
    return h->take_cores ? h->take_cores(h->cores, n) : 0;
}

static void give_cores(const emu_backend *e, int taken)
{
    const hx_emu_hooks *h = &e->opt.hooks;
    if (h->give_cores) h->give_cores(h->cores, taken);
}

static void record(const emu_backend *e, void *lane, hx_device_span span)
{
    hx__span_done(e->opt.hooks.tracing.record, lane, &span);
}

/* ---- stream threads ---------------------------------------------------------------- */

static hx_status run_op(hx_stream *s, const emu_op *op)
{
    emu_backend *e = s->e;
    const hx_emu_cost *c = &e->opt.cost;
    bool timed = s->lane || c->launch_latency_s > 0 || c->flops_per_s > 0 || c->copy_bytes_per_s > 0;
    if (op->kind == OP_TIME_BEGIN) { /* a unit's bracket, on the stream's clock */
        s->bracket = (hx_device_span){.name = "unit", .sum = op->sum, .t0 = hx__now()};
        return HX_OK;
    }
    if (op->kind == OP_TIME_END) {
        s->bracket.t1 = hx__now();
        record(e, s->lane, s->bracket);
        return HX_OK;
    }
    if (op->kind == OP_LAUNCH) {
        int cores = take_cores(e, op->ex->nthreads);
        double t0 = timed ? hx__now() : 0;
        hx_status st = op->fn(op->ex, op->node, op->out, op->in);
        give_cores(e, cores);
        double want = c->launch_latency_s + (c->flops_per_s > 0 ? hx__op_flops(op->node) / c->flops_per_s : 0);
        double t1 = timed ? hold_until(t0, want) : 0;
        record(e, s->lane, (hx_device_span){.name = op->fn == scan_sumsq ? "gradient_scan"
                                                                      : hx__ops[op->node->op].name,
                                         .tensor = op->node->name, .t0 = t0, .t1 = t1});
        __atomic_fetch_add(&e->st.launches, 1, __ATOMIC_RELAXED);
        return st;
    }
    int cores = take_cores(e, 1);
    double t0 = timed ? hx__now() : 0;
    memcpy(op->out, op->src, op->n);
    give_cores(e, cores);
    double want = c->launch_latency_s + (c->copy_bytes_per_s > 0 ? (double)op->n / c->copy_bytes_per_s : 0);
    double t1 = timed ? hold_until(t0, want) : 0;
    bool h2d = op->kind == OP_H2D;
    record(e, s->lane, (hx_device_span){.name = h2d ? "copy h2d" : "copy d2h",
                                     .tensor = op->why.tensor, .role = op->why.role,
                                     .bytes = op->n, .t0 = t0, .t1 = t1});
    __atomic_fetch_add(h2d ? &e->st.h2d_copies : &e->st.d2h_copies, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(h2d ? &e->st.h2d_bytes : &e->st.d2h_bytes, op->n, __ATOMIC_RELAXED);
    return HX_OK;
}

/* Waits until stream w has completed `until` operations; returns w's error
 * then (its message in msg). */
static hx_status wait_stream(hx_stream *w, uint64_t until, char *msg, size_t n)
{
    pthread_mutex_lock(&w->mu);
    __atomic_add_fetch(&w->waiters, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&w->completed, __ATOMIC_SEQ_CST) < until)
        pthread_cond_wait(&w->done, &w->mu);
    __atomic_sub_fetch(&w->waiters, 1, __ATOMIC_SEQ_CST);
    hx_status st = w->err;
    if (st) snprintf(msg, n, "%s", w->msg);
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* Serves the queue: takes up to BATCH operations at a time (one lock per
 * batch) and runs them in order, counting each completed as it ends, with
 * a lock only when someone waits: a copy waiting for one gradient must not
 * wait for the rest of the batch (the whole of backward), and streams
 * waiting on each other must see what the other ran before it blocked. The
 * counter and the waiter count are sequentially consistent atomics, so a
 * waiter that registers after the stream looked sees the new count instead
 * of sleeping. */
enum { BATCH = 64 };

static void *stream_main(void *arg)
{
    hx_stream *s = arg;
    char msg[sizeof s->msg];
    emu_op batch[BATCH];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->count && !s->stop) {
            s->idle = true;
            pthread_cond_wait(&s->work, &s->mu);
            s->idle = false;
        }
        if (!s->count) break;
        int n = 0;
        for (; n < BATCH && s->count; n++) {
            batch[n] = s->q[s->head];
            s->head = (s->head + 1) % s->cap;
            s->count--;
        }
        hx_status err = s->err;
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n; i++) {
            hx_status st = HX_OK;
            if (batch[i].kind == OP_WAIT) st = wait_stream(batch[i].wait_on, batch[i].until, msg, sizeof msg);
            else if (!err && (st = run_op(s, &batch[i]))) snprintf(msg, sizeof msg, "%s", hx_last_error());
            if (st && !err) { /* later operations are skipped */
                err = st;
                pthread_mutex_lock(&s->mu);
                if (!s->err) {
                    s->err = st;
                    memcpy(s->msg, msg, sizeof msg);
                }
                pthread_mutex_unlock(&s->mu);
            }
            __atomic_add_fetch(&s->completed, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&s->waiters, __ATOMIC_SEQ_CST)) {
                pthread_mutex_lock(&s->mu);
                pthread_cond_broadcast(&s->done);
                pthread_mutex_unlock(&s->mu);
            }
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static hx_status enqueue(hx_stream *s, const emu_op *op)
{
    pthread_mutex_lock(&s->mu);
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        emu_op *q = malloc(sizeof *q * cap);
        if (!q) {
            pthread_mutex_unlock(&s->mu);
            return hx__error(HX_ERR_OUT_OF_MEMORY, "emu device: out of host memory for a stream queue");
        }
        for (size_t i = 0; i < s->count; i++) q[i] = s->q[(s->head + i) % s->cap];
        free(s->q);
        s->q = q;
        s->cap = cap;
        s->head = 0;
    }
    s->q[(s->head + s->count) % s->cap] = *op;
    s->count++;
    s->submitted++;
    if (s->idle) pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return HX_OK;
}

static hx_status emu_stream_create(hx_backend *b, hx_stream **out)
{
    emu_backend *e = (emu_backend *)b;
    hx_stream *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) return hx__error(HX_ERR_OUT_OF_MEMORY, "emu device: out of host memory for a stream");
    s->e = e;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    pthread_mutex_lock(&e->mu);
    int k = ++e->n_streams;
    pthread_mutex_unlock(&e->mu);
    char name[48];
    snprintf(name, sizeof name, "emu stream %d", k);
    const hx_trace_hooks *h = &e->opt.hooks.tracing;
    s->lane = h->open_lane ? h->open_lane(h->trace, name) : NULL;
    int rc = pthread_create(&s->thread, NULL, stream_main, s);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->done);
        free(s);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "emu device: cannot start a stream thread: %s",
                         strerror(rc));
    }
    *out = s;
    return HX_OK;
}

static void emu_stream_destroy(hx_backend *b, hx_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    free(s->q);
    free(s);
}

static hx_status emu_stream_sync(hx_backend *b, hx_stream *s)
{
    char msg[sizeof s->msg];
    pthread_mutex_lock(&s->mu);
    uint64_t until = s->submitted;
    pthread_mutex_unlock(&s->mu);
    hx_status st = wait_stream(s, until, msg, sizeof msg);
    if (!st) return HX_OK;
    pthread_mutex_lock(&s->mu);
    s->err = HX_OK; /* reported: the stream is usable again */
    pthread_mutex_unlock(&s->mu);
    return hx__error(st, "%s", msg);
}

static hx_status emu_event_create(hx_backend *b, hx_event **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "emu device: out of host memory for an event");
}

static void emu_event_destroy(hx_backend *b, hx_event *ev) { free(ev); }

static hx_status emu_event_record(hx_backend *b, hx_event *ev, hx_stream *s)
{
    emu_backend *e = (emu_backend *)b;
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->submitted;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&e->mu);
    ev->s = s;
    ev->target = target;
    pthread_mutex_unlock(&e->mu);
    return HX_OK;
}

static void event_point(emu_backend *e, const hx_event *ev, hx_stream **s, uint64_t *target)
{
    pthread_mutex_lock(&e->mu);
    *s = ev->s;
    *target = ev->target;
    pthread_mutex_unlock(&e->mu);
}

static hx_status emu_stream_wait(hx_backend *b, hx_stream *s, hx_event *ev)
{
    hx_stream *w;
    uint64_t until;
    event_point((emu_backend *)b, ev, &w, &until);
    if (!w || w == s) return HX_OK; /* never recorded, or in order already */
    return enqueue(s, &(emu_op){.kind = OP_WAIT, .wait_on = w, .until = until});
}

static hx_status emu_event_sync(hx_backend *b, hx_event *ev)
{
    hx_stream *w;
    uint64_t until;
    char msg[sizeof w->msg];
    event_point((emu_backend *)b, ev, &w, &until);
    if (!w) return HX_OK;
    hx_status st = wait_stream(w, until, msg, sizeof msg);
    return st ? hx__error(st, "%s", msg) : HX_OK;
}

static hx_status emu_event_query(hx_backend *b, hx_event *ev, bool *done)
{
    hx_stream *w;
    uint64_t until;
    event_point((emu_backend *)b, ev, &w, &until);
    *done = !w || __atomic_load_n(&w->completed, __ATOMIC_SEQ_CST) >= until;
    return HX_OK;
}

static hx_status emu_h2d(hx_backend *b, hx_stream *s, hx_h2d_copy c)
{
    return enqueue(s, &(emu_op){.kind = OP_H2D, .out = c.dev, .src = c.host, .n = c.bytes,
                                .why = c.why});
}

static hx_status emu_d2h(hx_backend *b, hx_stream *s, hx_d2h_copy c)
{
    return enqueue(s, &(emu_op){.kind = OP_D2H, .out = c.host, .src = c.dev, .n = c.bytes,
                                .why = c.why});
}

/* The CPU kernels, less the ops the op table keeps on the host. */
static hx_launch_fn emu_kernel(const hx_backend *b, hx_op op, hx_dtype dt)
{
    if (op == HX_KERNEL_SUMSQ) return scan_sumsq;
    if ((unsigned)op >= HX_OP_COUNT) return NULL; /* no lowered kernels (graph.h) */
    return hx__ops[op].host_only ? NULL : hx__cpu_kernel(op);
}

static hx_status emu_launch(hx_backend *b, hx_stream *s, hx_launch_fn fn, const hx_exec *ex,
                            const hx_tensor *node, void *out, void *const *in)
{
    return enqueue(s, &(emu_op){.kind = OP_LAUNCH, .fn = fn, .ex = ex, .node = node, .out = out,
                                .in = in});
}

static hx_status emu_time_begin(hx_backend *b, hx_stream *s, double *sum)
{
    return enqueue(s, &(emu_op){.kind = OP_TIME_BEGIN, .sum = sum});
}

static hx_status emu_time_end(hx_backend *b, hx_stream *s)
{
    return enqueue(s, &(emu_op){.kind = OP_TIME_END});
}

static void emu_stats(const hx_backend *b, hx_backend_stats *out)
{
    emu_backend *e = (emu_backend *)b;
    hx_device_pools_stats ps;
    hx_mem_pools_stats(b->pools, &ps);
    *out = (hx_backend_stats){.capacity = ps.capacity, .used = ps.total.allocated,
                              .peak = ps.total.peak_allocated};
    out->launches = __atomic_load_n(&e->st.launches, __ATOMIC_RELAXED);
    out->h2d_copies = __atomic_load_n(&e->st.h2d_copies, __ATOMIC_RELAXED);
    out->h2d_bytes = __atomic_load_n(&e->st.h2d_bytes, __ATOMIC_RELAXED);
    out->d2h_copies = __atomic_load_n(&e->st.d2h_copies, __ATOMIC_RELAXED);
    out->d2h_bytes = __atomic_load_n(&e->st.d2h_bytes, __ATOMIC_RELAXED);
}

static void emu_destroy(hx_backend *b)
{
    emu_backend *e = (emu_backend *)b;
    hx_mem_err err;
    if (hx_mem_pools_close(b->pools, &err))
        fprintf(stderr, "hetex: the memory trace (HX_MEMTRACE) was not written: %s\n", err.msg);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

hx_status hx__backend_emu_create(size_t capacity, const hx_emu_options *opt, hx_backend **out)
{
    emu_backend *e = calloc(1, sizeof *e);
    if (!e) return hx__error(HX_ERR_OUT_OF_MEMORY, "emu device: out of host memory");
    e->b = (hx_backend){
        .name = "emu", .target = HX_TARGET_DEVICE,
        .alloc = emu_alloc, .free = emu_free,
        .stream_create = emu_stream_create, .stream_destroy = emu_stream_destroy,
        .stream_sync = emu_stream_sync,
        .event_create = emu_event_create, .event_destroy = emu_event_destroy,
        .event_record = emu_event_record, .stream_wait = emu_stream_wait,
        .event_sync = emu_event_sync, .event_query = emu_event_query,
        .copy_h2d = emu_h2d, .copy_d2h = emu_d2h,
        .kernel = emu_kernel, .launch = emu_launch,
        .stats = emu_stats, .destroy = emu_destroy,
        .time_begin = emu_time_begin, .time_end = emu_time_end,
    };
    hx_mem_err err;
    hx_mem_source src = {NULL, segment_reserve, segment_release};
    hx_status st = hx_mem_pools_open_device("emu device", capacity, src, &e->b.pools, &err);
    if (st) {
        free(e);
        return hx__error(st, "hx_session_create: %s", err.msg);
    }
    if (opt) e->opt = *opt;
    pthread_mutex_init(&e->mu, NULL);
    *out = &e->b;
    return HX_OK;
}
