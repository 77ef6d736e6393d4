/* Streams and events for backends whose work completes on the calling
 * thread as it is submitted (cpu, and emu until its streams get threads):
 * a stream counts submissions, an event remembers the count, and every wait
 * or sync has nothing left to wait for. */
#ifndef HX_STREAM_INLINE_H
#define HX_STREAM_INLINE_H

#include "backend/backend.h"

struct hx_stream { uint64_t submitted; };
struct hx_event { uint64_t recorded; };

hx_status hx__inline_stream_create(hx_backend *b, hx_stream **out);
void hx__inline_stream_destroy(hx_backend *b, hx_stream *s);
hx_status hx__inline_stream_sync(hx_backend *b, hx_stream *s);
hx_status hx__inline_event_create(hx_backend *b, hx_event **out);
void hx__inline_event_destroy(hx_backend *b, hx_event *e);
hx_status hx__inline_event_record(hx_backend *b, hx_event *e, hx_stream *s);
hx_status hx__inline_stream_wait(hx_backend *b, hx_stream *s, hx_event *e);
hx_status hx__inline_event_sync(hx_backend *b, hx_event *e);
hx_status hx__inline_event_query(hx_backend *b, hx_event *e, bool *done);

#endif
