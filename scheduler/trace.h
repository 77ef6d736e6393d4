/* Chrome trace recording ("traceEvents" JSON with "X" complete events, one
 * tid per lane, named by thread_name metadata; opens in chrome://tracing and
 * Perfetto). A lane is one thread of execution: a host worker, an emu
 * stream. Each lane has its own event buffer and is written by one thread at
 * a time, so recording takes no lock; registering a lane and writing the
 * file do. The file is written (to "<path>.tmp", then renamed) by
 * hx__trace_write, which the session calls from hx_session_trace_flush and
 * hx_session_free, while no lane records. A lane keeps its first
 * HX_TRACE_LANE_CAP events and counts the rest as dropped. */
#ifndef HX_TRACE_H
#define HX_TRACE_H

#include "graph/graph.h"

#include <stddef.h>

#define HX_TRACE_LANE_CAP (1 << 18)

typedef struct hx_trace hx_trace;
typedef struct hx_trace_lane hx_trace_lane;

hx_status hx__trace_create(const char *path, hx_trace **out);
void hx__trace_free(hx_trace *t);
/* A new lane named `name` (copied); NULL when t is NULL or out of memory
 * (recording to a NULL lane does nothing). Thread-safe. */
hx_trace_lane *hx__trace_lane(hx_trace *t, const char *name);
/* One complete event [t0, t1] (hx__now seconds): `name` and `tensor` must
 * outlive the trace (op names, graph tensor names); tensor may be NULL;
 * bytes > 0 is shown in args. */
void hx__trace_event(hx_trace_lane *l, const char *name, const char *tensor, size_t bytes,
                     double t0, double t1);
/* A copy's event: as hx__trace_event, with role (NULL: none; a literal)
 * saying why the plan copies the tensor, shown in args. */
void hx__trace_copy(hx_trace_lane *l, const char *name, const char *tensor, const char *role,
                    size_t bytes, double t0, double t1);
/* Writes every event recorded so far; recording may go on afterwards. */
hx_status hx__trace_write(hx_trace *t);

#endif
