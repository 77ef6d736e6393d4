/* Asynchronous file I/O engines for the disk tier: io_uring (liburing),
 * Linux AIO (libaio), or plain pread/pwrite, behind one small interface.
 * Each request carries a tag that comes back with its completion. Not
 * thread-safe: one disk tier drives one engine. */
#ifndef HX_MEM_DISK_IO_H
#define HX_MEM_DISK_IO_H

#include <stdbool.h>
#include <sys/types.h>

#include "memory/mem_common.h"

typedef enum hx_disk_engine {
    HX_DISK_ENGINE_AUTO,  /* io_uring, else libaio, else sync (the reason is kept) */
    HX_DISK_ENGINE_URING,
    HX_DISK_ENGINE_AIO,
    HX_DISK_ENGINE_SYNC
} hx_disk_engine;

typedef struct hx_aio hx_aio;

/* Opens an engine for up to depth requests in flight. AUTO falls back and
 * writes why to reason (reason_len bytes; "" when the first choice
 * worked); a named engine that cannot start is HX_ERR_UNSUPPORTED. */
hx_status hx__aio_open(hx_disk_engine want, int depth, hx_aio **out, char *reason,
                       size_t reason_len, hx_mem_err *err);
void hx__aio_close(hx_aio *a);
hx_disk_engine hx__aio_kind(const hx_aio *a);
const char *hx__aio_name(hx_disk_engine e);
/* Queues one read or write of len bytes at off and submits it; 0 or -errno. */
int hx__aio_submit(hx_aio *a, int fd, bool write, void *buf, size_t len, off_t off, unsigned tag);
/* Queues one request without submitting it (the sync engine does it at
 * once); hx__aio_flush submits every queued request in one system call
 * (io_uring_submit, io_submit). At most depth requests queued or in
 * flight. 0 or -errno (the failed request is not queued; after a failed
 * flush none of the queued requests are in flight). */
int hx__aio_queue(hx_aio *a, int fd, bool write, void *buf, size_t len, off_t off, unsigned tag);
int hx__aio_flush(hx_aio *a);
/* Waits for one completion: its tag, and bytes done or -errno. 0 or -errno. */
int hx__aio_wait(hx_aio *a, unsigned *tag, long *res);
/* As hx__aio_wait without waiting: -EAGAIN when no completion is there yet. */
int hx__aio_poll(hx_aio *a, unsigned *tag, long *res);

#endif
