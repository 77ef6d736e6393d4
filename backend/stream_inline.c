/* In-order streams and events: see stream_inline.h. */
#include "backend/stream_inline.h"

#include <stdlib.h>

hx_status hx__inline_stream_create(hx_backend *b, hx_stream **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? HX_OK
                : hx__error(HX_ERR_OUT_OF_MEMORY, "%s backend: out of host memory for a stream",
                            b->name);
}

void hx__inline_stream_destroy(hx_backend *b, hx_stream *s) { free(s); }
hx_status hx__inline_stream_sync(hx_backend *b, hx_stream *s) { return HX_OK; }

hx_status hx__inline_event_create(hx_backend *b, hx_event **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? HX_OK
                : hx__error(HX_ERR_OUT_OF_MEMORY, "%s backend: out of host memory for an event",
                            b->name);
}

void hx__inline_event_destroy(hx_backend *b, hx_event *e) { free(e); }

hx_status hx__inline_event_record(hx_backend *b, hx_event *e, hx_stream *s)
{
    e->recorded = s->submitted;
    return HX_OK;
}

hx_status hx__inline_stream_wait(hx_backend *b, hx_stream *s, hx_event *e) { return HX_OK; }
hx_status hx__inline_event_sync(hx_backend *b, hx_event *e) { return HX_OK; }

hx_status hx__inline_event_query(hx_backend *b, hx_event *e, bool *done)
{
    *done = true; /* the work completed on the calling thread when it was submitted */
    return HX_OK;
}
