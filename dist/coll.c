/* The non-blocking collectives of dist/dist.h, as point-to-point messages
 * between every pair of ranks (MPI_Isend/MPI_Irecv) driven by
 * MPI_Testsome. A reduction is an exchange (rank j gets every rank's block
 * j), a local sum in rank order, and for an all-reduce a second exchange
 * that gathers the summed blocks. */
#ifdef HX_HAVE_MPI
#include "dist/comm_state.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* hx__coll_wait, where the ranks on this host have a core each, polls
 * without sleeping for the wait's first WAIT_SPIN_S (elsewhere it sleeps
 * after 100 polls, so that ranks sharing a core leave it to the rank they
 * wait for: spinning 300 us made bench zero's step at 4 ranks on 2 cores
 * 1.2x slower, 1.4x without the overlap). A sleeping waiter woke 100-250
 * us after its message came on the loaded 2-core machine (the scheduler's
 * wake-up): the first rank at a blocking collective, the gradient norm's
 * all-gather, left it last and the others then waited for it at the next
 * one (bench zero, one session, stage 2 at 2 ranks, load 13-15: the
 * step's data-parallel wait 749 -> 179 us with the overlap, 1809 -> 740
 * without; step 14.5 -> 12.7 ms; session 16). Yielding the core between
 * polls (sched_yield) lost whole time slices to other programs' load
 * instead: 25 ms waits. */
#define WAIT_SPIN_S 300e-6

enum coll_kind { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL_V, BROADCAST, ALL_GATHER_SEG };
static const char *const kind_name[] = {"all_reduce", "reduce_scatter", "all_gather",
                                        "all_to_all_v", "broadcast", "all_gather (in place)"};

struct hx_coll {
    hx_comm *c;
    enum coll_kind kind;
    hx_dtype dt;
    size_t esz;
    MPI_Datatype mt;
    int64_t count;
    uint64_t seq;
    int phase;         /* 0: the exchange; 1: an all-reduce's gather; 2: done; 3: failed */
    MPI_Request *reqs; /* this phase's messages: peer[i], recv[i] */
    int *peer;
    bool *recv;
    int n, cap;
    const char *send;
    char *out;
    void *tmp;         /* a reduction's received blocks, one slot per rank */
    int64_t *lo;       /* an all-reduce's block bounds (size+1) */
    char **seg;        /* ALL_GATHER_SEG (bytes): rank j's block is segments lo[j] .. lo[j+1] */
    int64_t *seg_n;    /* ... of these lengths */
};

/* ---- bf16 <-> f32 (round to nearest even; NaN stays NaN) ---- */
static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static MPI_Datatype mpi_type(hx_dtype dt)
{
    switch (dt) {
    case HX_DTYPE_F32: return MPI_FLOAT;
    case HX_DTYPE_F16: case HX_DTYPE_BF16: return MPI_UINT16_T;
    case HX_DTYPE_I32: return MPI_INT32_T;
    case HX_DTYPE_I64: return MPI_INT64_T;
    }
    return MPI_DATATYPE_NULL;
}

static hx_status failv(hx_coll *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends q with HX_ERR_COMM: the communicator is broken, the messages still
 * open are cancelled (receives; a send cannot be) and left to MPI. A
 * receive that a cancel cannot stop within 0.2 s (its message is arriving)
 * may still write q's buffer, which then stays with the communicator. */
static hx_status failv(hx_coll *q, const char *fmt, ...)
{
    char what[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    hx_comm *c = q->c;
    c->broken = true;
    q->phase = 3; /* failed: tests and waits touch its buffers no more */
    hx__mpi_lock();
    for (int i = 0; i < q->n; i++)
        if (q->reqs[i] != MPI_REQUEST_NULL && q->recv[i]) MPI_Cancel(&q->reqs[i]);
    bool receiving = true;
    for (double t0 = hx__now(); receiving && hx__now() - t0 < 0.2;) {
        receiving = false;
        for (int i = 0; i < q->n; i++) {
            int done = 0;
            if (q->reqs[i] != MPI_REQUEST_NULL && q->recv[i] &&
                MPI_Test(&q->reqs[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
                receiving = true;
        }
    }
    for (int i = 0; i < q->n; i++)
        if (q->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&q->reqs[i]);
    hx__mpi_unlock();
    void **qa = receiving && q->tmp ? realloc(c->quarantine, (size_t)(c->n_quarantine + 1) * sizeof *qa) : NULL;
    if (qa) {
        c->quarantine = qa;
        c->quarantine[c->n_quarantine++] = q->tmp;
        q->tmp = NULL;
    }
    return hx__error(HX_ERR_COMM, "hetex dist: %s #%llu (%lld %s) on rank %d of %d: %s",
                     kind_name[q->kind], (unsigned long long)q->seq, (long long)q->count,
                     q->kind == ALL_GATHER_SEG ? "bytes" : hx_dtype_name(q->dt), c->rank, c->size, what);
}

/* One message of `elems` elements at buf to or from peer, in pieces of at
 * most max_msg elements. */
static hx_status post(hx_coll *q, bool recv, int peer, const void *buf, int64_t elems)
{
    hx_comm *c = q->c;
    int tag = (int)((q->seq % 16384) * 2 + (uint64_t)q->phase);
    for (int64_t off = 0; off < elems; off += c->max_msg) {
        int64_t n = elems - off < c->max_msg ? elems - off : c->max_msg;
        if (q->n == q->cap) {
            int cap = q->cap ? 2 * q->cap : 16;
            MPI_Request *r = realloc(q->reqs, (size_t)cap * sizeof *r);
            if (r) q->reqs = r;
            int *p = r ? realloc(q->peer, (size_t)cap * sizeof *p) : NULL;
            if (p) q->peer = p;
            bool *v = p ? realloc(q->recv, (size_t)cap * sizeof *v) : NULL;
            if (!v) return failv(q, "out of host memory for its messages");
            q->recv = v;
            q->cap = cap;
        }
        char *at = (char *)buf + (size_t)off * q->esz;
        int rc = recv ? MPI_Irecv(at, (int)n, q->mt, peer, tag, c->comm, &q->reqs[q->n])
                      : MPI_Isend(at, (int)n, q->mt, peer, tag, c->comm, &q->reqs[q->n]);
        if (rc != MPI_SUCCESS) {
            char buf_[MPI_MAX_ERROR_STRING];
            return failv(q, "%s rank %d failed: %s", recv ? "MPI_Irecv from" : "MPI_Isend to", peer,
                         hx__mpi_error_text(rc, buf_, sizeof buf_));
        }
        q->peer[q->n] = peer;
        q->recv[q->n] = recv;
        q->n++;
        if (!recv) c->bytes_sent += (uint64_t)n * q->esz;
    }
    return HX_OK;
}

static int64_t block_lo(const hx_coll *q, int j) { return q->lo[j]; }
static int64_t block_n(const hx_coll *q, int j) { return q->lo[j + 1] - q->lo[j]; }

/* Posts phase `phase`'s messages (mpi lock held). */
static hx_status post_phase(hx_coll *q)
{
    hx_comm *c = q->c;
    int r = c->rank;
    hx_status st = HX_OK;
    q->n = 0;
    for (int j = 0; j < c->size && st == HX_OK; j++) {
        if (j == r) continue;
        switch (q->kind) {
        case REDUCE_SCATTER: /* as an all-reduce's exchange */
        case ALL_REDUCE:
            if (q->phase == 0) { /* every rank's block r to my slot for it; my block j to j */
                st = post(q, true, j, (char *)q->tmp + (size_t)j * (size_t)block_n(q, r) * q->esz,
                          block_n(q, r));
                if (st == HX_OK) st = post(q, false, j, q->send + (size_t)block_lo(q, j) * q->esz, block_n(q, j));
            } else {
                st = post(q, true, j, q->out + (size_t)block_lo(q, j) * q->esz, block_n(q, j));
                if (st == HX_OK) st = post(q, false, j, q->out + (size_t)block_lo(q, r) * q->esz, block_n(q, r));
            }
            break;
        case ALL_GATHER:
            st = post(q, true, j, q->out + (size_t)block_lo(q, j) * q->esz, block_n(q, j));
            if (st == HX_OK) st = post(q, false, j, q->send, block_n(q, r));
            break;
        case ALL_TO_ALL_V: { /* lo: send counts, displs, recv counts, displs */
            const int64_t *sc = q->lo, *sd = sc + c->size, *rc = sd + c->size, *rd = rc + c->size;
            if (rc[j]) st = post(q, true, j, q->out + (size_t)rd[j] * q->esz, rc[j]);
            if (st == HX_OK && sc[j]) st = post(q, false, j, q->send + (size_t)sd[j] * q->esz, sc[j]);
            break;
        }
        case BROADCAST: /* q->lo[0]: the root */
            if (r == (int)q->lo[0]) st = post(q, false, j, q->out, q->count);
            else if (j == (int)q->lo[0]) st = post(q, true, j, q->out, q->count);
            break;
        case ALL_GATHER_SEG: /* a pair's messages of one tag arrive in the order sent */
            for (int64_t k = q->lo[j]; k < q->lo[j + 1] && st == HX_OK; k++)
                st = post(q, true, j, q->seg[k], q->seg_n[k]);
            for (int64_t k = q->lo[r]; k < q->lo[r + 1] && st == HX_OK; k++)
                st = post(q, false, j, q->seg[k], q->seg_n[k]);
            break;
        }
    }
    return st;
}

/* The rank-order sum of the n-element sources src[0..size-1] into out
 * (out may be one of them). */
static void sum_blocks(const hx_coll *q, const char *const *src, char *out, int64_t n)
{
    int size = q->c->size;
    if (q->dt == HX_DTYPE_F32) {
        for (int64_t k = 0; k < n; k++) {
            float acc = ((const float *)src[0])[k];
            for (int i = 1; i < size; i++) acc += ((const float *)src[i])[k];
            ((float *)out)[k] = acc;
        }
    } else {
        for (int64_t k = 0; k < n; k++) {
            float acc = bf16_to_f32(((const uint16_t *)src[0])[k]);
            for (int i = 1; i < size; i++) acc += bf16_to_f32(((const uint16_t *)src[i])[k]);
            ((uint16_t *)out)[k] = f32_to_bf16(acc);
        }
    }
}

/* After the exchange: the local part (sums, own block copies). */
static hx_status local_step(hx_coll *q)
{
    hx_comm *c = q->c;
    int r = c->rank;
    if (q->kind == REDUCE_SCATTER || q->kind == ALL_REDUCE) {
        const char **src = malloc((size_t)c->size * sizeof *src);
        if (!src) return failv(q, "out of host memory for its sum");
        int64_t n = block_n(q, r), lo = block_lo(q, r);
        for (int i = 0; i < c->size; i++)
            src[i] = i == r ? q->send + (size_t)lo * q->esz : (char *)q->tmp + (size_t)i * (size_t)n * q->esz;
        sum_blocks(q, src, q->out + (size_t)(q->kind == ALL_REDUCE ? lo : 0) * q->esz, n);
        free(src);
    } else if (q->kind == ALL_GATHER) {
        char *mine = q->out + (size_t)block_lo(q, r) * q->esz;
        if (mine != q->send) memmove(mine, q->send, (size_t)block_n(q, r) * q->esz);
    } else if (q->kind == ALL_TO_ALL_V) {
        const int64_t *sc = q->lo, *sd = sc + c->size, *rd = sd + 2 * c->size;
        if (sc[r] && q->out + (size_t)rd[r] * q->esz != q->send + (size_t)sd[r] * q->esz)
            memmove(q->out + (size_t)rd[r] * q->esz, q->send + (size_t)sd[r] * q->esz, (size_t)sc[r] * q->esz);
    }
    return HX_OK;
}

hx_status hx__coll_test(hx_coll *q, bool *done)
{
    *done = false;
    if (q->phase == 3)
        return hx__error(HX_ERR_COMM, "hetex dist: %s #%llu on rank %d: it failed before (its first "
                         "error said why)", kind_name[q->kind], (unsigned long long)q->seq, q->c->rank);
    if (q->phase == 2) {
        *done = true;
        return HX_OK;
    }
    if (q->n > 0) {
        int outcount = 0;
        int *idx = malloc((size_t)q->n * sizeof *idx);
        MPI_Status *sts = malloc((size_t)q->n * sizeof *sts);
        if (!idx || !sts) {
            free(idx);
            free(sts);
            return failv(q, "out of host memory to test its messages");
        }
        hx__mpi_lock();
        int rc = MPI_Testsome(q->n, q->reqs, &outcount, idx, sts);
        hx__mpi_unlock();
        hx_status st = HX_OK;
        if (rc != MPI_SUCCESS) {
            int bad = -1, err = rc;
            for (int i = 0; rc == MPI_ERR_IN_STATUS && i < outcount && bad < 0; i++)
                if (sts[i].MPI_ERROR != MPI_SUCCESS) {
                    bad = idx[i];
                    err = sts[i].MPI_ERROR;
                }
            char buf[MPI_MAX_ERROR_STRING];
            hx__mpi_error_text(err, buf, sizeof buf);
            st = bad >= 0 ? failv(q, "the message %s rank %d failed: %s", q->recv[bad] ? "from" : "to",
                                  q->peer[bad], buf)
                          : failv(q, "MPI_Testsome failed: %s", buf);
        }
        free(idx);
        free(sts);
        if (st != HX_OK) return st;
        for (int i = 0; i < q->n; i++)
            if (q->reqs[i] != MPI_REQUEST_NULL) return HX_OK; /* still open */
    }
    hx_status st = HX_OK;
    if (q->phase == 0) st = local_step(q);
    if (st == HX_OK && q->kind == ALL_REDUCE && q->phase == 0 && q->c->size > 1) {
        q->phase = 1;
        hx__mpi_lock();
        st = post_phase(q);
        hx__mpi_unlock();
        return st;
    }
    if (st == HX_OK) {
        q->phase = 2;
        *done = true;
    }
    return st;
}

static void coll_free(hx_coll *q)
{
    free(q->reqs);
    free(q->peer);
    free(q->recv);
    free(q->tmp);
    free(q->lo);
    free(q->seg);
    free(q->seg_n);
    free(q);
}

/* The ranks q still waits for (or sends to), as "2, 3" into buf. */
static const char *open_peers(const hx_coll *q, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    int size = q->c->size, listed = 0;
    for (int j = 0; j < size; j++) {
        bool open = false;
        for (int i = 0; i < q->n && !open; i++) open = q->peer[i] == j && q->reqs[i] != MPI_REQUEST_NULL;
        if (!open || used + 16 > len) continue;
        used += (size_t)snprintf(buf + used, len - used, "%s%d", listed++ ? ", " : "", j);
    }
    return buf;
}

hx_status hx__coll_wait(hx_coll *q)
{
    if (!q) return HX_OK;
    double t0 = hx__now();
    bool done = false;
    hx_status st = HX_OK;
    for (long spins = 0; st == HX_OK; spins++) {
        st = hx__coll_test(q, &done);
        if (st != HX_OK || done) break;
        if (hx__now() - t0 > q->c->timeout_s) {
            char peers[256];
            st = failv(q, "timed out after %g s waiting for rank(s) %s (one died, hangs, or did not "
                       "start this collective: every rank must start the same collectives in the "
                       "same order; hx_comm_config.timeout_s sets the limit)",
                       q->c->timeout_s, open_peers(q, peers, sizeof peers));
            break;
        }
        /* a peer is late: give the cores to it */
        if (spins > 100 && (!q->c->own_cores || hx__now() - t0 >= WAIT_SPIN_S)) {
            struct timespec ts = {0, 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    coll_free(q);
    return st;
}

/* A collective of kind on c with count elements of dt (checked), not yet
 * posted. */
static hx_status coll_new(hx_comm *c, enum coll_kind kind, const void *send, void *out, int64_t count,
                          hx_dtype dt, bool reduce, hx_coll **qp)
{
    const char *name = kind_name[kind];
    if (!qp) return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: %s: out is NULL", name);
    *qp = NULL;
    if (!c) return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: %s: the communicator is NULL", name);
    if (c->broken)
        return hx__error(HX_ERR_STATE, "hetex dist: %s on rank %d: an earlier collective on this "
                         "communicator failed (its error said why); it takes no more", name, c->rank);
    size_t esz = hx_dtype_size(dt);
    if (!esz) return hx__error(HX_ERR_DTYPE, "hetex dist: %s: invalid dtype %d", name, (int)dt);
    if (reduce && dt != HX_DTYPE_F32 && dt != HX_DTYPE_BF16)
        return hx__error(HX_ERR_DTYPE, "hetex dist: %s sums f32 or bf16, not %s", name, hx_dtype_name(dt));
    if (count < 0 || (uint64_t)count > (uint64_t)INT64_MAX / esz / (uint64_t)c->size)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: %s: count %lld out of range", name,
                         (long long)count);
    if (count > 0 && (!out || (kind != BROADCAST && !send)))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: %s: a NULL buffer for %lld elements",
                         name, (long long)count);
    hx_coll *q = calloc(1, sizeof *q);
    if (!q) return hx__error(HX_ERR_OUT_OF_MEMORY, "hetex dist: %s: out of host memory", name);
    q->c = c;
    q->kind = kind;
    q->dt = dt;
    q->esz = esz;
    q->mt = mpi_type(dt);
    q->count = count;
    q->send = send;
    q->out = out;
    *qp = q;
    return HX_OK;
}

/* Takes q's sequence number and posts its first phase. */
static hx_status coll_start(hx_coll *q, hx_coll **out)
{
    q->seq = q->c->seq++;
    hx__mpi_lock();
    hx_status st = post_phase(q);
    hx__mpi_unlock();
    if (st != HX_OK) {
        coll_free(q);
        return st;
    }
    *out = q;
    return HX_OK;
}

static hx_status alloc_or_fail(hx_coll *q, void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (*p) return HX_OK;
    hx_status st = hx__error(HX_ERR_OUT_OF_MEMORY, "hetex dist: %s of %lld %s: out of host memory "
                             "(%zu bytes)", kind_name[q->kind], (long long)q->count,
                             hx_dtype_name(q->dt), bytes);
    coll_free(q);
    return st;
}

hx_status hx__comm_all_reduce(hx_comm *c, const void *send, void *recv, int64_t count, hx_dtype dt,
                              hx_coll **out)
{
    hx_coll *q;
    hx_status st = coll_new(c, ALL_REDUCE, send, recv, count, dt, true, &q);
    if (st != HX_OK) return st;
    if ((st = alloc_or_fail(q, (void **)&q->lo, (size_t)(c->size + 1) * sizeof *q->lo))) return st;
    int64_t base = count / c->size, extra = count % c->size;
    for (int j = 0; j <= c->size; j++) q->lo[j] = base * j + (j < extra ? j : extra);
    if ((st = alloc_or_fail(q, &q->tmp, (size_t)c->size * (size_t)block_n(q, c->rank) * q->esz))) return st;
    return coll_start(q, out);
}

/* q's block bounds (size+1 elements): block j is counts[j] long (counts
 * NULL: every block `each`), back to back; refuses a negative count. */
static hx_status block_bounds(hx_coll *q, const int64_t *counts, int64_t each)
{
    int size = q->c->size;
    hx_status st = alloc_or_fail(q, (void **)&q->lo, (size_t)(size + 1) * sizeof *q->lo);
    if (st != HX_OK) return st;
    q->lo[0] = 0;
    for (int j = 0; j < size; j++) q->lo[j + 1] = q->lo[j] + (counts ? counts[j] : each);
    return HX_OK;
}

/* The total of counts[0..size-1] into *total, or an error naming the bad one. */
static hx_status count_total(const hx_comm *c, const char *name, const int64_t *counts, int64_t *total)
{
    *total = 0;
    if (!c) return HX_OK; /* coll_new refuses it */
    if (!counts) return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: %s: the counts are NULL", name);
    for (int j = 0; j < c->size; j++) {
        if (counts[j] < 0 || counts[j] > INT64_MAX / 16 / c->size)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: %s: rank %d's count is %lld (give "
                             "each rank's block length, 0 or more)", name, j, (long long)counts[j]);
        *total += counts[j];
    }
    return HX_OK;
}

/* A reduce-scatter of blocks counts[j] long (counts NULL: `count` each). */
static hx_status reduce_scatter(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                int64_t count, hx_dtype dt, hx_coll **out)
{
    hx_coll *q;
    hx_status st = coll_new(c, REDUCE_SCATTER, send, recv, count, dt, true, &q);
    if (st != HX_OK || (st = block_bounds(q, counts, count))) return st;
    if ((st = alloc_or_fail(q, &q->tmp, (size_t)c->size * (size_t)block_n(q, c->rank) * q->esz))) return st;
    return coll_start(q, out);
}

hx_status hx__comm_reduce_scatter(hx_comm *c, const void *send, void *recv, int64_t count,
                                  hx_dtype dt, hx_coll **out)
{
    return reduce_scatter(c, send, recv, NULL, count, dt, out);
}

hx_status hx__comm_reduce_scatter_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                    hx_dtype dt, hx_coll **out)
{
    int64_t total;
    hx_status st = count_total(c, "reduce_scatter", counts, &total);
    return st ? st : reduce_scatter(c, send, recv, counts, total, dt, out);
}

/* An all-gather of blocks counts[j] long (counts NULL: `count` each). */
static hx_status all_gather(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                            int64_t count, hx_dtype dt, hx_coll **out)
{
    hx_coll *q;
    hx_status st = coll_new(c, ALL_GATHER, send, recv, count, dt, false, &q);
    if (st != HX_OK || (st = block_bounds(q, counts, count))) return st;
    return coll_start(q, out);
}

hx_status hx__comm_all_gather(hx_comm *c, const void *send, void *recv, int64_t count, hx_dtype dt,
                              hx_coll **out)
{
    return all_gather(c, send, recv, NULL, count, dt, out);
}

hx_status hx__comm_all_gather_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                hx_dtype dt, hx_coll **out)
{
    int64_t total;
    hx_status st = count_total(c, "all_gather", counts, &total);
    return st ? st : all_gather(c, send, recv, counts, total, dt, out);
}

hx_status hx__comm_all_gather_segments(hx_comm *c, void *const *seg, const int64_t *seg_bytes,
                                       const int64_t *seg_lo, hx_coll **out)
{
    if (!seg_lo) return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: all_gather (in place): "
                                  "the blocks' bounds are NULL");
    int64_t n = c ? seg_lo[c->size] : 0, total = 0;
    for (int j = 0; c && j < c->size; j++)
        if (seg_lo[j] < 0 || seg_lo[j + 1] < seg_lo[j])
            return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: all_gather (in place): rank %d's "
                             "segments %lld..%lld are not in order", j, (long long)seg_lo[j],
                             (long long)seg_lo[j + 1]);
    for (int64_t k = 0; k < n; k++) {
        if (seg_bytes[k] < 0 || (seg_bytes[k] && !seg[k]))
            return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: all_gather (in place): segment "
                             "%lld is %lld bytes at %p", (long long)k, (long long)seg_bytes[k], seg[k]);
        total += seg_bytes[k];
    }
    hx_coll *q;
    hx_status st = coll_new(c, ALL_GATHER_SEG, NULL, NULL, 0, HX_DTYPE_I32, false, &q);
    if (st != HX_OK) return st;
    q->mt = MPI_BYTE;
    q->esz = 1;
    q->count = total;
    size_t size = (size_t)c->size + 1;
    if ((st = alloc_or_fail(q, (void **)&q->lo, size * sizeof *q->lo)) ||
        (st = alloc_or_fail(q, (void **)&q->seg, (size_t)n * sizeof *q->seg)) ||
        (st = alloc_or_fail(q, (void **)&q->seg_n, (size_t)n * sizeof *q->seg_n)))
        return st;
    memcpy(q->lo, seg_lo, size * sizeof *q->lo);
    memcpy(q->seg, seg, (size_t)n * sizeof *q->seg);
    memcpy(q->seg_n, seg_bytes, (size_t)n * sizeof *q->seg_n);
    return coll_start(q, out);
}

hx_status hx__comm_all_to_all_v(hx_comm *c, const void *send, const int64_t *send_counts,
                                const int64_t *send_displs, void *recv,
                                const int64_t *recv_counts, const int64_t *recv_displs,
                                hx_dtype dt, hx_coll **out)
{
    if (!send_counts || !send_displs || !recv_counts || !recv_displs)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: all_to_all_v: a NULL count or "
                         "displacement array");
    int64_t total = 0;
    for (int j = 0; c && j < c->size; j++) {
        const int64_t v[4] = {send_counts[j], send_displs[j], recv_counts[j], recv_displs[j]};
        for (int k = 0; k < 4; k++)
            if (v[k] < 0 || v[k] > INT64_MAX / 16)
                return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: all_to_all_v: rank %d's %s %s "
                                 "is %lld", j, k < 2 ? "send" : "recv", k % 2 ? "displacement" : "count",
                                 (long long)v[k]);
        total += send_counts[j] + recv_counts[j];
    }
    if (c && send_counts[c->rank] != recv_counts[c->rank])
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: all_to_all_v: rank %d sends itself "
                         "%lld elements but receives %lld", c->rank, (long long)send_counts[c->rank],
                         (long long)recv_counts[c->rank]);
    hx_coll *q;
    hx_status st = coll_new(c, ALL_TO_ALL_V, send, recv, total, dt, false, &q);
    if (st != HX_OK) return st;
    if (total > 0 && (!send || !recv)) {
        coll_free(q);
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: all_to_all_v: a NULL buffer");
    }
    if ((st = alloc_or_fail(q, (void **)&q->lo, 4 * (size_t)c->size * sizeof *q->lo))) return st;
    const int64_t *arr[4] = {send_counts, send_displs, recv_counts, recv_displs};
    for (int k = 0; k < 4; k++) memcpy(q->lo + (size_t)k * (size_t)c->size, arr[k], (size_t)c->size * sizeof *q->lo);
    return coll_start(q, out);
}

hx_status hx__comm_broadcast(hx_comm *c, void *buf, int64_t count, hx_dtype dt, int root, hx_coll **out)
{
    if (c && (root < 0 || root >= c->size))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: broadcast: root %d is not a rank "
                         "(0..%d)", root, c->size - 1);
    hx_coll *q;
    hx_status st = coll_new(c, BROADCAST, buf, buf, count, dt, false, &q);
    if (st != HX_OK) return st;
    if ((st = alloc_or_fail(q, (void **)&q->lo, sizeof *q->lo))) return st;
    q->lo[0] = root;
    return coll_start(q, out);
}
#endif
