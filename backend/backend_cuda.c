/* The cuda backend: device memory (cudaMalloc, never managed memory),
 * streams with their cuBLAS handle and scratch, events, host<->device copies
 * through pinned staging buffers, kernel launches (backend_cuda_ops.c), and
 * the deferred bad-id checks of the kernels that read ids. */
#ifdef HX_HAVE_CUDA
#include "backend/backend_cuda.h"
#include "backend/backend_cuda_internal.h"
#include "backend/backend_cuda_spans.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pageable host memory moves through two pinned buffers of this size per
 * stream, so the host copy into one overlaps the DMA out of the other. */
#define STAGE_BYTES ((size_t)4 << 20)
/* Bad-id checks a stream holds between synchronisations; one more makes
 * the launch synchronise and check first. */
#define MAX_CHECKS 64
/* cuBLAS workspace per handle (NVIDIA's recommendation for Hopper). */
#define BLAS_WORKSPACE ((size_t)32 << 20)

typedef struct cuda_backend {
    hx_backend b;
    int device;
    bool allow_tf32;
    char name[256];
    int sm_count;
    hx_trace_hooks tracing;
    pthread_mutex_t mu; /* st, n_streams */
    hx_backend_stats st;
    int n_streams;
} cuda_backend;

typedef struct index_check {
    uint64_t seq;
    const hx_tensor *node, *ids;
    int64_t limit;
    const char *what;
} index_check;

typedef struct stage_job { void *dst; const void *src; size_t n; } stage_job;

struct hx_stream {
    cuda_backend *be;
    cudaStream_t cs;
    hx_gk_ctx ctx;
    void *blas_ws;
    char *stage[2];
    cudaEvent_t stage_free[2];
    stage_job job[2];
    int next_stage;
    pthread_mutex_t mu; /* checks, staging */
    uint64_t *slots;    /* pinned, mapped: 2 words per check */
    index_check checks[MAX_CHECKS];
    int n_checks;
    uint64_t next_seq;
    hx_cuda_spans *spans; /* NULL: neither traced nor timed yet */
    int bracket;          /* the open time_begin's span slot */
    void *dnn;            /* its cuDNN handle, made on first use (NULL: none yet) */
};

struct hx_event {
    cudaEvent_t ev;
    hx_stream *s;    /* the stream of the last record */
    uint64_t upto;   /* checks launched on s before that record */
};

static cuda_backend *cb(const hx_backend *b) { return (cuda_backend *)b; }

/* CUDA's current device is per host thread: set it for each thread that works here. */
static _Thread_local int tls_device = -1;

static hx_status on_device(const cuda_backend *c, const char *what)
{
    if (tls_device == c->device) return HX_OK;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hx__error(HX_ERR_INTERNAL, "cuda backend: %s: cudaSetDevice(%d): %s", what,
                         c->device, cudaGetErrorString(e));
    }
    tls_device = c->device;
    return HX_OK;
}

static hx_status cuda_err(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return HX_OK;
    cudaGetLastError(); /* not sticky: the next call starts clean */
    return hx__error(e == cudaErrorMemoryAllocation ? HX_ERR_DEVICE_OOM : HX_ERR_INTERNAL,
                     "cuda backend: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ---- memory: the one place device memory is taken and given back ----------------- */

/* Segments of memory/'s device pools (persistent and transient, capped at
 * max_device_memory): cudaMalloc and cudaFree run only when a pool grows
 * or gives cached segments back. */
static hx_status segment_reserve(void *ctx, size_t bytes, void **out)
{
    cudaError_t e = cudaMalloc(out, bytes);
    if (e == cudaSuccess) return HX_OK;
    cudaGetLastError();
    *out = NULL;
    return e == cudaErrorMemoryAllocation ? HX_ERR_DEVICE_OOM : HX_ERR_INTERNAL;
}

static void segment_release(void *ctx, void *p, size_t bytes)
{
    cudaFree(p);
    cudaGetLastError();
}

static hx_status cuda_alloc(hx_backend *b, size_t bytes, hx_mem_lifetime lt, const char *what,
                            void **out)
{
    cuda_backend *c = cb(b);
    *out = NULL;
    hx_status st = on_device(c, "alloc");
    if (st) return st;
    hx_mem_err err;
    st = hx_mem_pools_alloc(b->pools, bytes, lt, what, out, &err);
    if (st != HX_ERR_DEVICE_OOM) return st ? hx__error(st, "%s", err.msg) : HX_OK;
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    cudaGetLastError();
    return hx__error(st, "%s (cudaMemGetInfo: %zu of %zu bytes free on the device)", err.msg,
                     free_b, total);
}

/* A block goes back to its pool for the next allocation at once, so free
 * waits for the device's work first, as cudaFree did. */
static void cuda_free(hx_backend *b, void *p)
{
    cuda_backend *c = cb(b);
    if (!p || on_device(c, "free")) return;
    cudaDeviceSynchronize();
    cudaGetLastError();
    hx_mem_err err;
    if (hx_mem_pools_free(b->pools, p, &err)) fprintf(stderr, "hetex: %s\n", err.msg);
}

/* ---- bad-id checks ------------------------------------------------------------------- */

/* Reads the slots of the checks before seq `upto` (their kernels are done)
 * and drops them; the first bad one becomes the error. Caller holds s->mu. */
static hx_status run_checks(hx_stream *s, uint64_t upto)
{
    hx_status st = HX_OK;
    int kept = 0;
    for (int k = 0; k < s->n_checks; k++) {
        index_check *ck = &s->checks[k];
        if (ck->seq >= upto) {
            s->checks[kept++] = *ck;
            continue;
        }
        uint64_t *slot = s->slots + 2 * (ck->seq % MAX_CHECKS);
        if (!st && slot[0] != UINT64_MAX)
            st = hx__error(HX_ERR_INDEX, "%s '%s': %s %lld at position %lld of '%s' is outside "
                           "[0, %lld)", hx__ops[ck->node->op].name, ck->node->name, ck->what,
                           (long long)(int64_t)slot[1], (long long)slot[0], ck->ids->name,
                           (long long)ck->limit);
    }
    s->n_checks = kept;
    return st;
}

/* ---- streams ------------------------------------------------------------------------- */

/* A traced session's stream gets a lane of its own, "cuda stream N", and
 * its work timed on the device (backend_cuda_spans.h). */
static hx_status open_lane(cuda_backend *c, hx_stream *s)
{
    const hx_trace_hooks *h = &c->tracing;
    if (!h->open_lane) return HX_OK;
    pthread_mutex_lock(&c->mu);
    int k = ++c->n_streams;
    pthread_mutex_unlock(&c->mu);
    char name[48];
    snprintf(name, sizeof name, "cuda stream %d", k);
    void *lane = h->open_lane(h->trace, name);
    return lane ? hx__cuda_spans_create(s->cs, lane, h->record, &s->spans) : HX_OK;
}

static void stream_free(hx_stream *s)
{
    cuda_backend *c = s->be;
    if (s->cs) cudaStreamSynchronize(s->cs);
    hx__cuda_spans_free(s->spans);
    if (s->ctx.blas) cublasDestroy(s->ctx.blas);
#ifdef HX_HAVE_CUDNN
    hx_gk_cudnn_destroy(s->dnn);
#endif
    for (int k = 0; k < 2; k++) {
        if (s->stage_free[k]) cudaEventDestroy(s->stage_free[k]);
        if (s->stage[k]) cudaFreeHost(s->stage[k]);
    }
    if (s->slots) cudaFreeHost(s->slots);
    if (s->cs) cudaStreamDestroy(s->cs);
    cuda_free(&c->b, s->blas_ws);
    cuda_free(&c->b, s->ctx.scratch);
    cudaGetLastError();
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static hx_status blas_err(cublasStatus_t e, const char *what)
{
    return e == CUBLAS_STATUS_SUCCESS ? HX_OK
                                      : hx__error(e == CUBLAS_STATUS_ALLOC_FAILED ? HX_ERR_DEVICE_OOM
                                                                                 : HX_ERR_INTERNAL,
                                                  "cuda backend: %s: %s", what,
                                                  cublasGetStatusString(e));
}

/* A stream, its cuBLAS handle (own workspace: results do not depend on
 * other streams; atomics off: deterministic), staging buffers and check
 * slots. */
static hx_status cuda_stream_create(hx_backend *b, hx_stream **out)
{
    cuda_backend *c = cb(b);
    *out = NULL;
    hx_status st = on_device(c, "stream_create");
    if (st) return st;
    hx_stream *s = calloc(1, sizeof *s);
    if (!s) return hx__error(HX_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory for a stream");
    s->be = c;
    pthread_mutex_init(&s->mu, NULL);
    st = cuda_err(cudaStreamCreateWithFlags(&s->cs, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int k = 0; k < 2 && !st; k++) {
        st = cuda_err(cudaHostAlloc((void **)&s->stage[k], STAGE_BYTES, cudaHostAllocDefault),
                      "cudaHostAlloc (staging buffer)");
        if (!st) st = cuda_err(cudaEventCreateWithFlags(&s->stage_free[k], cudaEventDisableTiming),
                               "cudaEventCreate");
    }
    if (!st) st = cuda_err(cudaHostAlloc((void **)&s->slots, 2 * MAX_CHECKS * sizeof(uint64_t),
                                         cudaHostAllocMapped), "cudaHostAlloc (id check slots)");
    if (!st) st = blas_err(cublasCreate(&s->ctx.blas), "cublasCreate");
    if (!st) st = blas_err(cublasSetStream(s->ctx.blas, s->cs), "cublasSetStream");
    if (!st) st = cuda_alloc(b, BLAS_WORKSPACE, HX_MEM_PERSISTENT, "a cuBLAS workspace", &s->blas_ws);
    if (!st) st = blas_err(cublasSetWorkspace(s->ctx.blas, s->blas_ws, BLAS_WORKSPACE), "cublasSetWorkspace");
    if (!st) st = blas_err(cublasSetAtomicsMode(s->ctx.blas, CUBLAS_ATOMICS_NOT_ALLOWED),
                           "cublasSetAtomicsMode");
    if (!st) st = blas_err(cublasSetMathMode(s->ctx.blas,
                                             c->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                           : CUBLAS_DEFAULT_MATH |
                                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
                           "cublasSetMathMode");
    if (!st) st = open_lane(c, s);
    if (st) {
        stream_free(s);
        return st;
    }
    s->ctx.stream = s->cs;
    s->ctx.allow_tf32 = c->allow_tf32;
    *out = s;
    return HX_OK;
}

static void cuda_stream_destroy(hx_backend *b, hx_stream *s)
{
    if (s && !on_device(cb(b), "stream_destroy")) stream_free(s);
}

static hx_status cuda_stream_sync(hx_backend *b, hx_stream *s)
{
    hx_status st = on_device(cb(b), "stream_sync");
    if (!st) st = cuda_err(cudaStreamSynchronize(s->cs), "cudaStreamSynchronize");
    if (!st) hx__cuda_spans_drain(s->spans, true);
    pthread_mutex_lock(&s->mu);
    hx_status ck = run_checks(s, st ? 0 : s->next_seq);
    pthread_mutex_unlock(&s->mu);
    return st ? st : ck;
}

/* ---- events --------------------------------------------------------------------------- */

static hx_status cuda_event_create(hx_backend *b, hx_event **out)
{
    *out = NULL;
    hx_status st = on_device(cb(b), "event_create");
    if (st) return st;
    hx_event *e = calloc(1, sizeof *e);
    if (!e) return hx__error(HX_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory for an event");
    st = cuda_err(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming), "cudaEventCreate");
    if (st) {
        free(e);
        return st;
    }
    *out = e;
    return HX_OK;
}

static void cuda_event_destroy(hx_backend *b, hx_event *e)
{
    if (!e) return;
    if (!on_device(cb(b), "event_destroy")) cudaEventDestroy(e->ev);
    free(e);
}

static hx_status cuda_event_record(hx_backend *b, hx_event *e, hx_stream *s)
{
    hx_status st = on_device(cb(b), "event_record");
    if (st) return st;
    pthread_mutex_lock(&s->mu);
    e->s = s;
    e->upto = s->next_seq;
    st = cuda_err(cudaEventRecord(e->ev, s->cs), "cudaEventRecord");
    pthread_mutex_unlock(&s->mu);
    return st;
}

static hx_status cuda_stream_wait(hx_backend *b, hx_stream *s, hx_event *e)
{
    hx_status st = on_device(cb(b), "stream_wait");
    return st ? st : cuda_err(cudaStreamWaitEvent(s->cs, e->ev, 0), "cudaStreamWaitEvent");
}

static hx_status cuda_event_sync(hx_backend *b, hx_event *e)
{
    hx_status st = on_device(cb(b), "event_sync");
    if (!st) st = cuda_err(cudaEventSynchronize(e->ev), "cudaEventSynchronize");
    if (st || !e->s) return st;
    hx__cuda_spans_drain(e->s->spans, false);
    pthread_mutex_lock(&e->s->mu);
    st = run_checks(e->s, e->upto);
    pthread_mutex_unlock(&e->s->mu);
    return st;
}

/* cudaEventQuery: cudaErrorNotReady is "not yet", not an error. */
static hx_status cuda_event_query(hx_backend *b, hx_event *e, bool *done)
{
    *done = false;
    hx_status st = on_device(cb(b), "event_query");
    if (st) return st;
    cudaError_t r = cudaEventQuery(e->ev);
    if (r == cudaErrorNotReady) {
        cudaGetLastError(); /* not left as the next call's error */
        return HX_OK;
    }
    *done = r == cudaSuccess;
    return cuda_err(r, "cudaEventQuery");
}

/* ---- copies ----------------------------------------------------------------------------- */

static bool is_pinned(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Runs on CUDA's callback thread once the D2H into the staging buffer is done. */
static void CUDART_CB unstage(void *arg)
{
    stage_job *j = arg;
    memcpy(j->dst, j->src, j->n);
}

static void count_copy(cuda_backend *c, bool h2d, size_t n)
{
    pthread_mutex_lock(&c->mu);
    if (h2d) {
        c->st.h2d_copies++;
        c->st.h2d_bytes += n;
    } else {
        c->st.d2h_copies++;
        c->st.d2h_bytes += n;
    }
    pthread_mutex_unlock(&c->mu);
}

/* Pageable host memory moves in chunks through the stream's two staging
 * buffers: H2D copies into a free buffer on this thread (so src may be
 * reused at once), D2H copies out of it on CUDA's callback thread in
 * stream order. */
static hx_status staged_copy(void *dst, const void *src, size_t n, hx_stream *s, bool h2d)
{
    hx_status st = HX_OK;
    enum cudaMemcpyKind kind = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    pthread_mutex_lock(&s->mu);
    for (size_t off = 0; off < n && !st; off += STAGE_BYTES) {
        size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        int k = s->next_stage;
        s->next_stage ^= 1;
        st = cuda_err(cudaEventSynchronize(s->stage_free[k]), "cudaEventSynchronize (staging)");
        if (st) break;
        if (h2d) {
            memcpy(s->stage[k], (const char *)src + off, len);
            st = cuda_err(cudaMemcpyAsync((char *)dst + off, s->stage[k], len, kind, s->cs),
                          "cudaMemcpyAsync");
        } else {
            s->job[k] = (stage_job){(char *)dst + off, s->stage[k], len};
            st = cuda_err(cudaMemcpyAsync(s->stage[k], (const char *)src + off, len, kind, s->cs),
                          "cudaMemcpyAsync");
            if (!st) st = cuda_err(cudaLaunchHostFunc(s->cs, unstage, &s->job[k]), "cudaLaunchHostFunc");
        }
        if (!st) st = cuda_err(cudaEventRecord(s->stage_free[k], s->cs), "cudaEventRecord");
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Pinned host memory goes straight to the DMA engine, pageable memory
 * through staged_copy; a traced stream times the whole copy. */
static hx_status copy(hx_backend *b, void *dst, const void *src, size_t n, hx_stream *s, bool h2d,
                      hx_copy_label why)
{
    cuda_backend *c = cb(b);
    hx_status st = on_device(c, h2d ? "copy_h2d" : "copy_d2h");
    if (st || !n) return st;
    count_copy(c, h2d, n);
    int span = hx__cuda_span_begin(s->spans, (hx_device_span){.name = h2d ? "copy h2d" : "copy d2h",
                                                              .tensor = why.tensor,
                                                              .role = why.role, .bytes = n});
    if (is_pinned(h2d ? src : dst))
        st = cuda_err(cudaMemcpyAsync(dst, src, n, h2d ? cudaMemcpyHostToDevice
                                                       : cudaMemcpyDeviceToHost, s->cs),
                      "cudaMemcpyAsync");
    else
        st = staged_copy(dst, src, n, s, h2d);
    hx__cuda_span_end(s->spans, span);
    return st;
}

static hx_status cuda_h2d(hx_backend *b, hx_stream *s, hx_h2d_copy c)
{
    return copy(b, c.dev, c.host, c.bytes, s, true, c.why);
}

static hx_status cuda_d2h(hx_backend *b, hx_stream *s, hx_d2h_copy c)
{
    return copy(b, c.host, c.dev, c.bytes, s, false, c.why);
}

/* ---- launches ------------------------------------------------------------------------------- */

static _Thread_local hx_stream *tls_stream; /* the stream of the launch in progress */

const hx_gk_ctx *hx__cuda_ctx(void) { return &tls_stream->ctx; }

hx_status hx__cuda_fail(const hx_tensor *node, hx_gk_status st)
{
    return hx__error(hx_gk_is_oom(st) ? HX_ERR_DEVICE_OOM
                     : st == HX_GK_BAD_ARG ? HX_ERR_UNSUPPORTED : HX_ERR_INTERNAL,
                     "cuda backend: %s '%s' (%s): %s", hx__ops[node->op].name, node->name,
                     hx_dtype_name(node->dtype), hx_gk_strerror(st));
}

hx_status hx__cuda_scratch(const hx_tensor *node, size_t bytes)
{
    hx_stream *s = tls_stream;
    if (bytes <= s->ctx.scratch_bytes) return HX_OK;
    /* The old buffer may still be in use by this stream's queued kernels. */
    hx_status st = cuda_err(cudaStreamSynchronize(s->cs), "cudaStreamSynchronize (scratch)");
    if (st) return st;
    cuda_free(&s->be->b, s->ctx.scratch);
    s->ctx.scratch = NULL;
    s->ctx.scratch_bytes = 0;
    char what[160];
    snprintf(what, sizeof what, "scratch of %s '%s'", hx__ops[node->op].name, node->name);
    size_t grown = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes;
    st = cuda_alloc(&s->be->b, grown, HX_MEM_TRANSIENT, what, &s->ctx.scratch);
    if (!st) s->ctx.scratch_bytes = grown;
    return st;
}

#ifdef HX_HAVE_CUDNN
hx_status hx__cuda_dnn(const hx_tensor *node, void **handle)
{
    hx_stream *s = tls_stream;
    if (!s->dnn) {
        hx_gk_status st = hx_gk_cudnn_create(s->cs, &s->dnn);
        if (st)
            return hx__error(hx_gk_cudnn_is_oom(st) ? HX_ERR_DEVICE_OOM : HX_ERR_INTERNAL,
                             "cuda backend: %s '%s': cudnnCreate: %s", hx__ops[node->op].name,
                             node->name, hx_gk_cudnn_strerror(st));
        if (hx__debug("placement")) {
            const char *lib = NULL;
            hx_gk_cudnn_load(&lib);
            fprintf(stderr, "hetex: cuDNN %zu from %s (built against %zu) for a stream of cuda "
                    "device %d\n", hx_gk_cudnn_version(), lib, hx_gk_cudnn_built_version(),
                    s->be->device);
        }
    }
    *handle = s->dnn;
    return HX_OK;
}
#endif

hx_status hx__cuda_index_check(const hx_tensor *node, const hx_tensor *ids, int64_t limit,
                               const char *what, uint64_t **slot)
{
    hx_stream *s = tls_stream;
    hx_status st = HX_OK;
    if (s->n_checks == MAX_CHECKS) /* every slot in use: wait for their kernels */
        st = cuda_err(cudaStreamSynchronize(s->cs), "cudaStreamSynchronize (id checks)");
    pthread_mutex_lock(&s->mu);
    if (!st && s->n_checks == MAX_CHECKS) st = run_checks(s, s->next_seq);
    if (!st) {
        uint64_t seq = s->next_seq++;
        s->checks[s->n_checks++] = (index_check){seq, node, ids, limit, what};
        *slot = s->slots + 2 * (seq % MAX_CHECKS);
        (*slot)[0] = UINT64_MAX;
        (*slot)[1] = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

static hx_launch_fn cuda_kernel(const hx_backend *b, hx_op op, hx_dtype dt)
{
    return hx__cuda_kernel(op, dt);
}

static hx_status cuda_launch(hx_backend *b, hx_stream *s, hx_launch_fn fn, const hx_exec *ex,
                             const hx_tensor *node, void *out, void *const *in)
{
    cuda_backend *c = cb(b);
    hx_status st = on_device(c, "launch");
    if (st) return st;
    pthread_mutex_lock(&c->mu);
    c->st.launches++;
    pthread_mutex_unlock(&c->mu);
    int span = hx__cuda_span_begin(s->spans, (hx_device_span){.name = hx__ops[node->op].name,
                                                              .tensor = node->name});
    tls_stream = s;
    st = fn(ex, node, out, in);
    tls_stream = NULL;
    hx__cuda_span_end(s->spans, span);
    return st;
}

/* Unit timing: a bracket span (the stream's queue made on first use when
 * it is not traced). */
static hx_status cuda_time_begin(hx_backend *b, hx_stream *s, double *sum)
{
    hx_status st = on_device(cb(b), "time_begin");
    if (!st && !s->spans) st = hx__cuda_spans_create(s->cs, NULL, NULL, &s->spans);
    if (!st) s->bracket = hx__cuda_span_begin(s->spans, (hx_device_span){.name = "unit", .sum = sum});
    return st;
}

static hx_status cuda_time_end(hx_backend *b, hx_stream *s)
{
    hx_status st = on_device(cb(b), "time_end");
    if (!st) hx__cuda_span_end(s->spans, s->bracket);
    return st;
}

static void cuda_stats(const hx_backend *b, hx_backend_stats *out)
{
    cuda_backend *c = cb(b);
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
    hx_device_pools_stats ps;
    hx_mem_pools_stats(b->pools, &ps);
    out->used = ps.total.allocated;
    out->peak = ps.total.peak_allocated;
}

static void cuda_destroy(hx_backend *b)
{
    cuda_backend *c = cb(b);
    hx_mem_err err;
    if (c->b.pools && !on_device(c, "destroy") && hx_mem_pools_close(c->b.pools, &err))
        fprintf(stderr, "hetex: the memory trace (HX_MEMTRACE) was not written: %s\n", err.msg);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- creation --------------------------------------------------------------------------------- */

int hx__cuda_device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (why) *why = cudaGetErrorString(e);
        return 0;
    }
    if (!n && why) *why = "cudaGetDeviceCount found no device";
    return n;
}

static hx_status create(const hx_session_config *cfg, hx_trace_hooks tracing, int n_devices,
                        hx_backend **out, hx_cuda_choice *choice)
{
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return hx__error(HX_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
    c->device = cfg->cuda_device;
    c->allow_tf32 = cfg->allow_tf32;
    c->tracing = tracing;
    pthread_mutex_init(&c->mu, NULL);
    struct cudaDeviceProp prop;
    size_t free_b = 0, total = 0;
    hx_status st = on_device(c, "create");
    if (!st) st = cuda_err(cudaGetDeviceProperties(&prop, c->device), "cudaGetDeviceProperties");
    if (!st) st = cuda_err(cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo");
    if (st) {
        cuda_destroy(&c->b);
        return st;
    }
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    if (choice) {
        snprintf(choice->device, sizeof choice->device, "%.127s", prop.name);
        choice->memory = total;
    }
    c->sm_count = prop.multiProcessorCount;
    c->st.capacity = cfg->max_device_memory && cfg->max_device_memory < total
                         ? cfg->max_device_memory : total;
    c->b = (hx_backend){
        .name = "cuda", .target = HX_TARGET_DEVICE,
        .alloc = cuda_alloc, .free = cuda_free,
        .stream_create = cuda_stream_create, .stream_destroy = cuda_stream_destroy,
        .stream_sync = cuda_stream_sync,
        .event_create = cuda_event_create, .event_destroy = cuda_event_destroy,
        .event_record = cuda_event_record, .stream_wait = cuda_stream_wait,
        .event_sync = cuda_event_sync, .event_query = cuda_event_query,
        .copy_h2d = cuda_h2d, .copy_d2h = cuda_d2h,
        .kernel = cuda_kernel, .launch = cuda_launch,
        .stats = cuda_stats, .destroy = cuda_destroy,
        .time_begin = cuda_time_begin, .time_end = cuda_time_end,
    };
    char pname[300];
    snprintf(pname, sizeof pname, "cuda device %d (%s)", c->device, c->name);
    hx_mem_err err;
    st = hx_mem_pools_open_device(pname, c->st.capacity, (hx_mem_source){c, segment_reserve,
                                  segment_release}, &c->b.pools, &err);
    if (st) {
        cuda_destroy(&c->b);
        return hx__error(st, "hx_session_create: %s", err.msg);
    }
    if (hx__debug("placement"))
        fprintf(stderr, "hetex: accelerator: cuda device %d of %d: %s, %d SMs, %zu MiB (%zu free), "
                "capacity %zu MiB, TF32 %s\n", c->device, n_devices, c->name, c->sm_count,
                total >> 20, free_b >> 20, c->st.capacity >> 20, c->allow_tf32 ? "on" : "off");
    *out = &c->b;
    return HX_OK;
}

hx_status hx__backend_cuda_for(const hx_session_config *cfg, hx_trace_hooks tracing,
                               hx_backend **out, hx_cuda_choice *choice)
{
    *out = NULL;
    hx_cuda_choice none;
    if (!choice) choice = &none;
    memset(choice, 0, sizeof *choice);
    if (cfg->accelerator != HX_ACCELERATOR_CUDA && cfg->accelerator != HX_ACCELERATOR_AUTO)
        return HX_OK;
    bool auto_ = cfg->accelerator == HX_ACCELERATOR_AUTO;
    if (cfg->cuda_device < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: cuda_device %d is negative",
                         cfg->cuda_device);
    const char *why = NULL;
    int n = hx__cuda_device_count(&why);
    if (n == 0) {
        snprintf(choice->why, sizeof choice->why, "no CUDA device found (CUDA says: %s)", why);
        if (auto_) {
            if (hx__debug("placement"))
                fprintf(stderr, "hetex: accelerator AUTO: no CUDA device (%s): using emu\n", why);
            return HX_OK;
        }
        return hx__error(HX_ERR_UNSUPPORTED,
                         "hx_session_create: accelerator CUDA: no CUDA device (%s); use "
                         "HX_ACCELERATOR_AUTO or HX_ACCELERATOR_EMU to run without a GPU", why);
    }
    if (cfg->cuda_device >= n)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_session_create: cuda_device %d, but this machine has %d CUDA "
                         "device%s (0..%d)", cfg->cuda_device, n, n == 1 ? "" : "s", n - 1);
    hx_status st = create(cfg, tracing, n, out, choice);
    if (!st)
        snprintf(choice->why, sizeof choice->why, "%s: CUDA device %d of %d",
                 auto_ ? "a CUDA device was found" : "asked for", cfg->cuda_device, n);
    if (st && auto_) {
        snprintf(choice->why, sizeof choice->why, "CUDA device %d is unusable (%.120s)",
                 cfg->cuda_device, hx_last_error());
        if (hx__debug("placement"))
            fprintf(stderr, "hetex: accelerator AUTO: cuda device %d unusable (%s): using emu\n",
                    cfg->cuda_device, hx_last_error());
        hx__clear_error();
        return HX_OK;
    }
    return st;
}
#endif
