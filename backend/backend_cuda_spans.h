/* Device-side timing of a cuda stream's work, for the session's trace and
 * its unit timing: each launch or copy of a traced stream, and each unit
 * bracket (backend.h: time_begin), is bracketed by two CUDA events
 * recorded in stream order; once they are done (seen at the stream's
 * synchronisations, or when the queue fills) the span goes where
 * hx__span_done sends it, with its device times on the host clock (hx__now
 * seconds). A stream neither traced nor timed has no queue (NULL), and
 * every function below then does nothing; a queue with no record function
 * (a stream timed but not traced) takes brackets only. */
#ifndef HX_BACKEND_CUDA_SPANS_H
#define HX_BACKEND_CUDA_SPANS_H
#ifdef HX_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/backend.h"

typedef struct hx_cuda_spans hx_cuda_spans;

/* A queue for stream cs whose spans go to record(lane, ...) (record NULL:
 * brackets only). */
hx_status hx__cuda_spans_create(cudaStream_t cs, void *lane,
                                void (*record)(void *lane, const hx_device_span *span),
                                hx_cuda_spans **out);
/* Records what is still queued (waiting for it) and frees the queue. */
void hx__cuda_spans_free(hx_cuda_spans *s);
/* Starts sp (its times are filled in later) before the work it times is
 * issued on the stream; the slot to end it with, -1 when not traced (and
 * sp is no bracket). */
int hx__cuda_span_begin(hx_cuda_spans *s, hx_device_span sp);
/* Ends the slot's span after its work was issued. */
void hx__cuda_span_end(hx_cuda_spans *s, int slot);
/* Sends the spans already done to the trace; idle (the stream was just
 * synchronised): all of them. */
void hx__cuda_spans_drain(hx_cuda_spans *s, bool idle);

#endif
#endif
