/* The backend consistency suite: see backend_suite.h. */
#include "backend_suite.h"

#include "scheduler/backend.h"

#include <stdlib.h>
#include <string.h>

hx_status bsuite_poison(hx_session *s, unsigned char byte)
{
    if (!s) return HX_ERR_INVALID_ARGUMENT;
    for (int d = 0; d < HX_NDEV; d++) {
        hx_backend *b = s->be[d];
        if (!b || !s->arena[d] || !s->arena_bytes[d]) continue;
        if (d == HX_DEV_HOST) {
            memset(s->arena[d], byte, s->arena_bytes[d]);
            continue;
        }
        void *fill = malloc(s->arena_bytes[d]);
        if (!fill) return HX_ERR_OUT_OF_MEMORY;
        memset(fill, byte, s->arena_bytes[d]);
        hx_status st = b->copy_h2d(b, s->arena[d], fill, s->arena_bytes[d], s->stream[d]);
        if (!st) st = b->stream_sync(b, s->stream[d]);
        free(fill);
        if (st) return st;
    }
    return HX_OK;
}
