/* Device-side timing of a traced cuda stream's work: see backend_cuda_spans.h. */
#ifdef HX_HAVE_CUDA
#include "backend/backend_cuda_spans.h"

#include <pthread.h>
#include <stdlib.h>

/* Spans waiting for their events, a ring (a slot keeps its index until it
 * is recorded); a full ring first records, waiting for them if need be,
 * its older half. */
#define QUEUE 2048

typedef struct pending {
    hx_device_span sp;
    cudaEvent_t ev[2]; /* start, end: recorded in stream order */
    bool closed;       /* the end event is recorded */
} pending;

struct hx_cuda_spans {
    cudaStream_t cs;
    void *lane;
    void (*record)(void *lane, const hx_device_span *span);
    pthread_mutex_t mu;
    pending q[QUEUE];
    int head, n; /* the oldest slot, and how many are in use */
    /* Event times are relative to ref, which completed at host time ref_host
     * (hx__now seconds); refreshed whenever the stream is idle, so that the
     * float milliseconds of cudaEventElapsedTime stay fine-grained. */
    cudaEvent_t ref;
    double ref_host;
};

static void rebase(hx_cuda_spans *s)
{
    if (cudaEventRecord(s->ref, s->cs) == cudaSuccess && cudaEventSynchronize(s->ref) == cudaSuccess)
        s->ref_host = hx__now();
    cudaGetLastError();
}

static double host_time(const hx_cuda_spans *s, cudaEvent_t ev)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, s->ref, ev) != cudaSuccess) cudaGetLastError();
    return s->ref_host + 1e-3 * ms;
}

hx_status hx__cuda_spans_create(cudaStream_t cs, void *lane,
                                void (*record)(void *lane, const hx_device_span *span),
                                hx_cuda_spans **out)
{
    *out = NULL;
    hx_cuda_spans *s = calloc(1, sizeof *s);
    if (!s) return hx__error(HX_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory for a trace");
    s->cs = cs;
    s->lane = lane;
    s->record = record;
    pthread_mutex_init(&s->mu, NULL);
    cudaError_t e = cudaEventCreate(&s->ref);
    for (int i = 0; i < QUEUE && e == cudaSuccess; i++)
        for (int k = 0; k < 2 && e == cudaSuccess; k++) e = cudaEventCreate(&s->q[i].ev[k]);
    if (e != cudaSuccess) {
        cudaGetLastError();
        hx__cuda_spans_free(s);
        return hx__error(HX_ERR_INTERNAL, "cuda backend: cudaEventCreate (trace): %s",
                         cudaGetErrorString(e));
    }
    rebase(s);
    *out = s;
    return HX_OK;
}

/* Records the first spans whose events are done: all of the first `wait`
 * (waiting for them), then on while they are done. Caller holds s->mu. */
static void drain(hx_cuda_spans *s, int wait)
{
    int k = 0;
    for (; k < s->n; k++) {
        pending *p = &s->q[(s->head + k) % QUEUE];
        if (!p->closed) break;
        if (k < wait) cudaEventSynchronize(p->ev[1]);
        else if (cudaEventQuery(p->ev[1]) != cudaSuccess) break;
        p->sp.t0 = host_time(s, p->ev[0]);
        p->sp.t1 = host_time(s, p->ev[1]);
        hx__span_done(s->record, s->lane, &p->sp);
    }
    cudaGetLastError();
    s->head = (s->head + k) % QUEUE;
    s->n -= k;
}

int hx__cuda_span_begin(hx_cuda_spans *s, hx_device_span sp)
{
    if (!s || (!sp.sum && !s->record)) return -1; /* an op's span on an untraced stream */
    pthread_mutex_lock(&s->mu);
    if (s->n == QUEUE) drain(s, QUEUE / 2);
    int slot = -1; /* stays -1 only if the older spans were never closed */
    if (s->n < QUEUE) slot = (s->head + s->n++) % QUEUE;
    if (slot >= 0) {
        s->q[slot].sp = sp;
        s->q[slot].closed = false;
        cudaEventRecord(s->q[slot].ev[0], s->cs);
        cudaGetLastError();
    }
    pthread_mutex_unlock(&s->mu);
    return slot;
}

void hx__cuda_span_end(hx_cuda_spans *s, int slot)
{
    if (!s || slot < 0) return;
    pthread_mutex_lock(&s->mu);
    cudaEventRecord(s->q[slot].ev[1], s->cs);
    cudaGetLastError();
    s->q[slot].closed = true;
    pthread_mutex_unlock(&s->mu);
}

void hx__cuda_spans_drain(hx_cuda_spans *s, bool idle)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    drain(s, idle ? s->n : 0);
    if (idle && !s->n) rebase(s);
    pthread_mutex_unlock(&s->mu);
}

void hx__cuda_spans_free(hx_cuda_spans *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    drain(s, s->n);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < QUEUE; i++)
        for (int k = 0; k < 2; k++)
            if (s->q[i].ev[k]) cudaEventDestroy(s->q[i].ev[k]);
    if (s->ref) cudaEventDestroy(s->ref);
    cudaGetLastError();
    pthread_mutex_destroy(&s->mu);
    free(s);
}
#endif
