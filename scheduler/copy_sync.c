/* Synchronous copies between a device's memory and the host through the
 * device's copy streams (host memory: memcpy), for what runs outside a
 * plan: initialisation, hx_session_read/write, half copies, the disk tier. */
#include "scheduler/scheduler.h"

#include <string.h>

hx_status hx__engine_copy_out(hx_engine *e, int d, void *dst, const void *src, size_t n)
{
    if (d == HX_DEV_HOST) {
        memcpy(dst, src, n);
        return HX_OK;
    }
    hx_backend *b = e->be[d];
    hx_status st =
            b->copy_d2h(b, e->copy_stream[1], (hx_d2h_copy){.host = dst, .dev = src, .bytes = n});
    hx_status sync = b->stream_sync(b, e->copy_stream[1]);
    return st ? st : sync;
}

hx_status hx__engine_copy_in(hx_engine *e, int d, void *dst, const void *src, size_t n)
{
    if (d == HX_DEV_HOST) {
        memcpy(dst, src, n);
        return HX_OK;
    }
    hx_backend *b = e->be[d];
    hx_status st =
            b->copy_h2d(b, e->copy_stream[0], (hx_h2d_copy){.dev = dst, .host = src, .bytes = n});
    hx_status sync = b->stream_sync(b, e->copy_stream[0]);
    return st ? st : sync;
}
