/* I/O engines of the disk tier (see disk_io.h). */
#include "memory/disk_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef HX_HAVE_LIBURING
#include <liburing.h>
#endif
#ifdef HX_HAVE_LIBAIO
#include <libaio.h>
#endif

struct hx_aio {
    hx_disk_engine kind;
    int depth;
#ifdef HX_HAVE_LIBURING
    struct io_uring ring;
#endif
#ifdef HX_HAVE_LIBAIO
    io_context_t ctx;
    struct iocb *cbs;  /* depth control blocks */
    int *free_cb, n_free_cb;
    struct iocb **queued; /* queued, not yet submitted */
    int n_queued;
#endif
    /* sync: completions done at submit time, waiting to be collected */
    unsigned *done_tag;
    long *done_res;
    int n_done;
};

const char *hx__aio_name(hx_disk_engine e)
{
    switch (e) {
    case HX_DISK_ENGINE_URING: return "io_uring";
    case HX_DISK_ENGINE_AIO: return "libaio";
    case HX_DISK_ENGINE_SYNC: return "sync";
    default: return "auto";
    }
}

hx_disk_engine hx__aio_kind(const hx_aio *a) { return a->kind; }

/* Starts one engine: 0 or -errno (-ENOSYS: not built in). */
static int start(hx_aio *a, hx_disk_engine e)
{
    a->kind = e;
    switch (e) {
    case HX_DISK_ENGINE_URING:
#ifdef HX_HAVE_LIBURING
        return io_uring_queue_init((unsigned)a->depth, &a->ring, 0);
#else
        return -ENOSYS;
#endif
    case HX_DISK_ENGINE_AIO: {
#ifdef HX_HAVE_LIBAIO
        a->cbs = calloc((size_t)a->depth, sizeof *a->cbs);
        a->free_cb = malloc((size_t)a->depth * sizeof *a->free_cb);
        a->queued = malloc((size_t)a->depth * sizeof *a->queued);
        if (!a->cbs || !a->free_cb || !a->queued) return -ENOMEM;
        for (int i = 0; i < a->depth; i++) a->free_cb[i] = i;
        a->n_free_cb = a->depth;
        a->ctx = 0;
        return io_setup(a->depth, &a->ctx);
#else
        return -ENOSYS;
#endif
    }
    case HX_DISK_ENGINE_SYNC:
        a->done_tag = malloc((size_t)a->depth * sizeof *a->done_tag);
        a->done_res = malloc((size_t)a->depth * sizeof *a->done_res);
        return a->done_tag && a->done_res ? 0 : -ENOMEM;
    default:
        return -EINVAL;
    }
}

static const char *why(int e)
{
    return e == -ENOSYS ? "not built in (its library was missing at configure time)" : strerror(-e);
}

hx_status hx__aio_open(hx_disk_engine want, int depth, hx_aio **out, char *reason,
                       size_t reason_len, hx_mem_err *err)
{
    *out = NULL;
    reason[0] = 0;
    hx_aio *a = calloc(1, sizeof *a);
    if (!a) return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "disk tier: out of host memory");
    a->depth = depth;
    if (want != HX_DISK_ENGINE_AUTO) {
        int e = start(a, want);
        if (e) {
            hx__aio_close(a);
            return hx__mem_fail(err, HX_ERR_UNSUPPORTED, "disk tier: the %s engine cannot start: %s%s",
                                hx__aio_name(want), why(e),
                                want == HX_DISK_ENGINE_SYNC ? "" : "; use engine auto to fall back");
        }
        *out = a;
        return HX_OK;
    }
    int eu = start(a, HX_DISK_ENGINE_URING);
    if (!eu) {
        *out = a;
        return HX_OK;
    }
    int ea = start(a, HX_DISK_ENGINE_AIO);
    if (!ea) {
        snprintf(reason, reason_len, "io_uring: %s; using libaio", why(eu));
        *out = a;
        return HX_OK;
    }
    snprintf(reason, reason_len, "io_uring: %s; libaio: %s; using synchronous pread/pwrite",
             why(eu), why(ea));
    int es = start(a, HX_DISK_ENGINE_SYNC);
    if (es) {
        hx__aio_close(a);
        return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "disk tier: out of host memory");
    }
    *out = a;
    return HX_OK;
}

void hx__aio_close(hx_aio *a)
{
    if (!a) return;
#ifdef HX_HAVE_LIBURING
    if (a->kind == HX_DISK_ENGINE_URING && a->ring.ring_fd > 0) io_uring_queue_exit(&a->ring);
#endif
#ifdef HX_HAVE_LIBAIO
    if (a->ctx) io_destroy(a->ctx);
    free(a->cbs);
    free(a->free_cb);
    free(a->queued);
#endif
    free(a->done_tag);
    free(a->done_res);
    free(a);
}

int hx__aio_queue(hx_aio *a, int fd, bool write, void *buf, size_t len, off_t off, unsigned tag)
{
    switch (a->kind) {
#ifdef HX_HAVE_LIBURING
    case HX_DISK_ENGINE_URING: {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring);
        if (!sqe) return -EBUSY;
        if (write) io_uring_prep_write(sqe, fd, buf, (unsigned)len, (uint64_t)off);
        else io_uring_prep_read(sqe, fd, buf, (unsigned)len, (uint64_t)off);
        io_uring_sqe_set_data64(sqe, tag);
        return 0;
    }
#endif
#ifdef HX_HAVE_LIBAIO
    case HX_DISK_ENGINE_AIO: {
        if (!a->n_free_cb) return -EBUSY;
        int k = a->free_cb[--a->n_free_cb];
        struct iocb *cb = &a->cbs[k];
        if (write) io_prep_pwrite(cb, fd, buf, len, off);
        else io_prep_pread(cb, fd, buf, len, off);
        cb->data = (void *)(uintptr_t)tag;
        a->queued[a->n_queued++] = cb;
        return 0;
    }
#endif
    default: {
        if (a->n_done == a->depth) return -EBUSY;
        size_t done = 0;
        long res = 0;
        while (done < len) { /* a short transfer is retried; 0 bytes ends it */
            ssize_t k = write ? pwrite(fd, (char *)buf + done, len - done, off + (off_t)done)
                              : pread(fd, (char *)buf + done, len - done, off + (off_t)done);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) {
                res = -errno;
                break;
            }
            if (k == 0) break;
            done += (size_t)k;
        }
        a->done_tag[a->n_done] = tag;
        a->done_res[a->n_done++] = res ? res : (long)done;
        return 0;
    }
    }
}

int hx__aio_flush(hx_aio *a)
{
    switch (a->kind) {
#ifdef HX_HAVE_LIBURING
    case HX_DISK_ENGINE_URING: {
        int r = io_uring_submit(&a->ring);
        return r < 0 ? r : 0;
    }
#endif
#ifdef HX_HAVE_LIBAIO
    case HX_DISK_ENGINE_AIO: {
        int done = 0;
        while (done < a->n_queued) {
            int r = io_submit(a->ctx, a->n_queued - done, a->queued + done);
            if (r <= 0) { /* the rest never started: their control blocks are free again */
                for (int i = done; i < a->n_queued; i++)
                    a->free_cb[a->n_free_cb++] = (int)(a->queued[i] - a->cbs);
                a->n_queued = 0;
                return r < 0 ? r : -EAGAIN;
            }
            done += r;
        }
        a->n_queued = 0;
        return 0;
    }
#endif
    default:
        return 0;
    }
}

int hx__aio_submit(hx_aio *a, int fd, bool write, void *buf, size_t len, off_t off, unsigned tag)
{
    int e = hx__aio_queue(a, fd, write, buf, len, off, tag);
    return e ? e : hx__aio_flush(a);
}

/* One completion; with block false -EAGAIN when none has arrived yet. */
static int reap(hx_aio *a, unsigned *tag, long *res, bool block)
{
    switch (a->kind) {
#ifdef HX_HAVE_LIBURING
    case HX_DISK_ENGINE_URING: {
        struct io_uring_cqe *cqe;
        int r;
        if (block)
            while ((r = io_uring_wait_cqe(&a->ring, &cqe)) == -EINTR) {}
        else
            r = io_uring_peek_cqe(&a->ring, &cqe);
        if (r < 0) return r;
        *tag = (unsigned)io_uring_cqe_get_data64(cqe);
        *res = cqe->res;
        io_uring_cqe_seen(&a->ring, cqe);
        return 0;
    }
#endif
#ifdef HX_HAVE_LIBAIO
    case HX_DISK_ENGINE_AIO: {
        struct io_event ev;
        struct timespec now = {0, 0};
        int r;
        while ((r = io_getevents(a->ctx, block ? 1 : 0, 1, &ev, block ? NULL : &now)) == -EINTR) {}
        if (!block && r == 0) return -EAGAIN;
        if (r != 1) return r < 0 ? r : -EIO;
        *tag = (unsigned)(uintptr_t)ev.data;
        *res = (long)ev.res;
        a->free_cb[a->n_free_cb++] = (int)(ev.obj - a->cbs);
        return 0;
    }
#endif
    default:
        if (!a->n_done) return block ? -EINVAL : -EAGAIN;
        *tag = a->done_tag[0];
        *res = a->done_res[0];
        a->n_done--;
        memmove(a->done_tag, a->done_tag + 1, (size_t)a->n_done * sizeof *a->done_tag);
        memmove(a->done_res, a->done_res + 1, (size_t)a->n_done * sizeof *a->done_res);
        return 0;
    }
}

int hx__aio_wait(hx_aio *a, unsigned *tag, long *res) { return reap(a, tag, res, true); }
int hx__aio_poll(hx_aio *a, unsigned *tag, long *res) { return reap(a, tag, res, false); }
