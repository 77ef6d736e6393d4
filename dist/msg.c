/* dist/dist.h's point-to-point messages over a duplicate communicator, sends
 * as MPI_Isend of a private copy kept until MPI_Test says it left,
 * receives as MPI_Iprobe then MPI_Recv of the probed size. */
#include "dist/dist.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void hx__msg_idle(long idle)
{
    long us = idle < 50 ? 20 : idle < 500 ? 200 : 1000;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

#ifdef HX_HAVE_MPI
#include "dist/comm_state.h"

#include <limits.h>
#include <pthread.h>

typedef struct pending {
    MPI_Request req;
    int dst;
    void *buf;
} pending;

struct hx_mailbox {
    hx_comm *c;
    pthread_mutex_t lock;
    pending *out;
    int n_out, cap_out;
};

static hx_status mpi_fail(hx_mailbox *m, int rc, const char *what, int peer)
{
    char buf[MPI_MAX_ERROR_STRING];
    return hx__error(HX_ERR_COMM, "hetex dist: %s rank %d (this rank %d of %d) failed: %s", what, peer,
                     m->c->rank, m->c->size, hx__mpi_error_text(rc, buf, sizeof buf));
}

hx_status hx__mailbox_create(const hx_comm *c, hx_mailbox **out)
{
    *out = NULL;
    hx_mailbox *m = calloc(1, sizeof *m);
    if (!m) return hx__error(HX_ERR_OUT_OF_MEMORY, "hetex dist: out of host memory for a mailbox");
    hx_status st = hx__comm_dup(c, &m->c);
    if (st) {
        free(m);
        return st;
    }
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return HX_OK;
}

/* Sends that left are freed (m locked). */
static void reap(hx_mailbox *m)
{
    int k = 0;
    hx__mpi_lock();
    for (int i = 0; i < m->n_out; i++) {
        int done = 0;
        if (MPI_Test(&m->out[i].req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
        if (done) free(m->out[i].buf);
        else m->out[k++] = m->out[i];
    }
    hx__mpi_unlock();
    m->n_out = k;
}

bool hx__msg_flush(hx_mailbox *m, double timeout_s, int *peer)
{
    double t0 = hx__now();
    pthread_mutex_lock(&m->lock);
    for (long idle = 0;; idle++) {
        reap(m);
        if (!m->n_out || hx__now() - t0 > timeout_s) break;
        pthread_mutex_unlock(&m->lock);
        hx__msg_idle(idle);
        pthread_mutex_lock(&m->lock);
    }
    bool ok = m->n_out == 0;
    if (!ok && peer) *peer = m->out[0].dst;
    pthread_mutex_unlock(&m->lock);
    return ok;
}

void hx__mailbox_free(hx_mailbox *m)
{
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    reap(m);
    if (m->n_out) { /* a dead peer's: MPI may still read them, so they stay */
        hx__mpi_lock();
        for (int i = 0; i < m->n_out; i++) MPI_Request_free(&m->out[i].req);
        hx__mpi_unlock();
        m->c->broken = true;
    }
    pthread_mutex_unlock(&m->lock);
    free(m->out);
    hx_comm_free(m->c);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

int hx__mailbox_rank(const hx_mailbox *m) { return m->c->rank; }
int hx__mailbox_size(const hx_mailbox *m) { return m->c->size; }
uint64_t hx__mailbox_bytes_sent(const hx_mailbox *m) { return m->c->bytes_sent; }

hx_status hx__msg_send(hx_mailbox *m, int dst, int tag, const void *buf, size_t n)
{
    if (n > INT_MAX)
        return hx__error(HX_ERR_SHAPE, "hetex dist: a message of %zu bytes to rank %d: at most 2^31 - 1", n, dst);
    void *copy = malloc(n ? n : 1);
    if (!copy) return hx__error(HX_ERR_OUT_OF_MEMORY, "hetex dist: out of host memory for a message of %zu bytes", n);
    if (n) memcpy(copy, buf, n);
    pthread_mutex_lock(&m->lock);
    reap(m);
    if (m->n_out == m->cap_out) {
        int cap = m->cap_out ? 2 * m->cap_out : 16;
        pending *p = realloc(m->out, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&m->lock);
            free(copy);
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hetex dist: out of host memory for a message");
        }
        m->out = p;
        m->cap_out = cap;
    }
    pending *p = &m->out[m->n_out];
    hx__mpi_lock();
    int rc = MPI_Isend(copy, (int)n, MPI_BYTE, dst, tag, m->c->comm, &p->req);
    hx__mpi_unlock();
    hx_status st = HX_OK;
    if (rc != MPI_SUCCESS) {
        free(copy);
        st = mpi_fail(m, rc, "MPI_Isend to", dst);
    } else {
        p->dst = dst;
        p->buf = copy;
        m->n_out++;
        m->c->bytes_sent += n;
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}

hx_status hx__msg_poll(hx_mailbox *m, int src, int tag, hx_msg *out, bool *got)
{
    *got = false;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->lock);
    reap(m);
    int flag = 0, count = 0;
    MPI_Status ps;
    hx__mpi_lock();
    int rc = MPI_Iprobe(src < 0 ? MPI_ANY_SOURCE : src, tag < 0 ? MPI_ANY_TAG : tag, m->c->comm, &flag, &ps);
    if (rc == MPI_SUCCESS && flag) rc = MPI_Get_count(&ps, MPI_BYTE, &count);
    void *data = rc == MPI_SUCCESS && flag ? malloc(count ? (size_t)count : 1) : NULL;
    if (rc == MPI_SUCCESS && flag && data)
        rc = MPI_Recv(data, count, MPI_BYTE, ps.MPI_SOURCE, ps.MPI_TAG, m->c->comm, MPI_STATUS_IGNORE);
    hx__mpi_unlock();
    pthread_mutex_unlock(&m->lock);
    if (rc != MPI_SUCCESS) {
        free(data);
        return mpi_fail(m, rc, "receiving from", src < 0 && flag ? ps.MPI_SOURCE : src);
    }
    if (!flag) return HX_OK;
    if (!data) return hx__error(HX_ERR_OUT_OF_MEMORY, "hetex dist: out of host memory for a message of %d bytes", count);
    *out = (hx_msg){ps.MPI_SOURCE, ps.MPI_TAG, data, (size_t)count};
    *got = true;
    return HX_OK;
}

hx_status hx__comm_split(const hx_comm *c, int color, hx_comm **out)
{
    *out = NULL;
    MPI_Comm part = MPI_COMM_NULL;
    hx__mpi_lock();
    int rc = MPI_Comm_split(c->comm, color, c->rank, &part);
    hx__mpi_unlock();
    if (rc != MPI_SUCCESS) {
        char buf[MPI_MAX_ERROR_STRING];
        return hx__error(HX_ERR_COMM, "hetex dist: splitting a communicator of %d ranks failed: %s", c->size,
                         hx__mpi_error_text(rc, buf, sizeof buf));
    }
    hx_comm_config cfg = {.mpi_comm = &part, .timeout_s = c->timeout_s};
    hx_status st = hx_comm_create(&cfg, out);
    hx__mpi_lock();
    MPI_Comm_free(&part);
    hx__mpi_unlock();
    return st;
}
#else
#define NO_MPI "this hetex was built without MPI: install Open MPI (apt-get install openmpi-bin " \
               "libopenmpi-dev) and build again"

hx_status hx__mailbox_create(const hx_comm *c, hx_mailbox **out)
{
    (void)c;
    *out = NULL;
    return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: messages: %s", NO_MPI);
}
/* No mailbox exists in this build: the calls below never get one. */
void hx__mailbox_free(hx_mailbox *m) { (void)m; }
int hx__mailbox_rank(const hx_mailbox *m) { return -1; }
int hx__mailbox_size(const hx_mailbox *m) { return -1; }
uint64_t hx__mailbox_bytes_sent(const hx_mailbox *m) { return 0; }
hx_status hx__msg_send(hx_mailbox *m, int dst, int tag, const void *buf, size_t n)
{
    return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: messages: %s", NO_MPI);
}
hx_status hx__msg_poll(hx_mailbox *m, int src, int tag, hx_msg *out, bool *got)
{
    *got = false;
    return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: messages: %s", NO_MPI);
}
bool hx__msg_flush(hx_mailbox *m, double timeout_s, int *peer) { return true; }
hx_status hx__comm_split(const hx_comm *c, int color, hx_comm **out)
{
    *out = NULL;
    return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: split: %s", NO_MPI);
}
#endif
