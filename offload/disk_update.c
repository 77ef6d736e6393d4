/* offload_param=disk: a training run's disk I/O and its update phase
 * chunk by chunk (see offload_disk.h).
 *
 * One I/O thread per training run first reads the resident region into
 * the buffer the run's load gave it, segment batch by batch, while the
 * forward and backward run: the executor waits before each step only for
 * the segments that step reads (hx__disk_step_ready).
 *
 * The plan's update steps are grouped by the chunk holding their
 * update-only tensors (file order); steps without any run first. Chunk j
 * is updated in slot j % n_slots by the calling thread while the I/O
 * thread reads the chunks ahead and writes the updated ones back:
 *
 *   I/O thread: read 0 .. n_slots-2 (during the forward and backward; the
 *               more slots offload_cpu_size has room for, the more chunks),
 *               then for each j: once j is updated, write j, read
 *               j + n_slots - 1 and write the resident segments no later
 *               step writes into, all in flight together (hx_disk_tier_batch)
 *   caller:     for each j: once j is read, run its steps on its slot
 *
 * Each write goes to the segment's next generation and marks it pending;
 * the session commits them with the resident region, or drops them when
 * anything failed. The steps are the plan's, with the same kernels and
 * inputs (only the update-only ones point into the slot), each run through
 * hx__update_step (counted and traced as the executor's), so the results
 * are bitwise those of the executor's update phase: updates touch
 * disjoint tensors, and kernels give the same bits at any thread count.
 * As there, an update another rank owns (ZeRO: engine.update_skip) is
 * left out, and the engine's step watch hears of each step (data
 * parallel's all-gathers start as their parameters are updated). Its
 * parameter's copy here, which the all-gather writes over, lies in
 * resident segments that the I/O thread leaves to the run's store (after
 * the all-gathers), never writing them while MPI may. */
#include "offload/disk_layout.h"
#include "backend/backend.h"
#include "scheduler/scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hx_disk_update {
    hx_offload_disk *d;
    const hx_plan *p;
    const hx_step *up; /* its update steps */
    int n;          /* chunks the plan's updates read, in file order */
    int *seg;       /* per chunk: its segment */
    int *first;     /* chunk c's steps: order[first[c] .. first[c + 1]); before first[0]: no chunk */
    int *order;     /* indices into up */
    void **in;      /* a step's inputs with its chunk's tensors in the slot */
    int *res_last;  /* per resident segment: the last chunk whose steps write into it (-2: none) */
    hx_disk_op *ops; /* the I/O thread's batch */
    int *op_what;
    int n_slots;
    char **slot;    /* n_slots buffers of slot_bytes */
    pthread_t io;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int read, computed, written; /* chunks done so far by each side */
    int res_read;   /* resident segments read so far (all of them before any chunk) */
    bool stop;
    hx_status st;   /* the first failure of either side */
    char msg[1536];
    double io_s, prefetch_s, update_t0; /* update_t0: 0 until the update phase starts */
    double res_read_s, res_wait_s;      /* reading the resident region; steps waiting for it */
    uint64_t bytes_read, bytes_written, bytes_written_res;
};

/* Waits (lock held) until cond or a failure; adds the wait to *waited. */
#define WAIT_FOR(u, cond, waited)                                       \
    do {                                                                \
        double w0_ = hx__now();                                         \
        while (!(cond) && !(u)->stop) pthread_cond_wait(&(u)->cv, &(u)->mu); \
        *(waited) += hx__now() - w0_;                                   \
    } while (0)

/* Records the first failure and stops both sides (lock held). */
static void fail(hx_disk_update *u, hx_status st, const char *fmt, const char *what, int j,
                 const char *detail)
{
    if (!u->st) {
        u->st = st;
        snprintf(u->msg, sizeof u->msg, fmt, what, j, detail);
    }
    u->stop = true;
    pthread_cond_broadcast(&u->cv);
}

/* One batch of the I/O thread: reads of chunks [r0, r1), the write of
 * chunk w (-1: none) and of the resident segments chunk w is the last to
 * change, all in flight together. Counts what succeeded; false when the
 * update stops (a failure here or on the other side). */
static bool io_batch(hx_disk_update *u, int r0, int r1, int w)
{
    hx_offload_disk *d = u->d;
    hx_disk_op *ops = u->ops;
    int *what = u->op_what, n = 0; /* what: chunk (>= 0) or -1 - resident segment */
    for (int r = r0; r < r1; r++) {
        const hx_disk_seg *g = &d->segs[u->seg[r]];
        ops[n] = (hx_disk_op){.write = false, .first = hx__disk_seg_block(g, g->gen),
                              .buf = u->slot[r % u->n_slots], .bytes = g->bytes};
        what[n++] = r;
    }
    if (w >= 0) {
        const hx_disk_seg *g = &d->segs[u->seg[w]];
        ops[n] = (hx_disk_op){.write = true, .first = hx__disk_seg_block(g, hx__disk_next_gen(g)),
                              .buf = u->slot[w % u->n_slots], .bytes = g->bytes};
        what[n++] = w;
        for (int k = 0; k < d->n_res; k++) {
            if (u->res_last[k] != w && !(w == 0 && u->res_last[k] == -1)) continue;
            g = &d->segs[k];
            ops[n] = (hx_disk_op){.write = true, .first = hx__disk_seg_block(g, hx__disk_next_gen(g)),
                                  .buf = d->res + g->off, .bytes = g->bytes};
            what[n++] = -1 - k;
        }
    }
    pthread_mutex_lock(&u->mu);
    bool stop = u->stop, early = !u->update_t0;
    pthread_mutex_unlock(&u->mu);
    if (stop) return false;
    double t0 = hx__now();
    hx_disk_tier_batch(d->tier, ops, n);
    double t1 = hx__now();
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += ops[i].bytes;
    hx__trace_event(d->io_lane, w >= 0 ? "disk write+read" : "disk read", NULL, bytes, t0, t1);
    pthread_mutex_lock(&u->mu);
    u->io_s += t1 - t0;
    if (early) u->prefetch_s += t1 - t0;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        int k = what[i] >= 0 ? u->seg[what[i]] : -1 - what[i];
        if (ops[i].st) {
            fail(u, ops[i].st, ops[i].write ? "writing %s %d back failed: %s" : "reading %s %d failed: %s",
                 what[i] >= 0 ? "chunk" : "resident segment", what[i] >= 0 ? what[i] : k, ops[i].err.msg);
            ok = false;
            continue;
        }
        if (!ops[i].write) u->bytes_read += ops[i].bytes;
        else {
            d->segs[k].pending = true;
            if (what[i] >= 0) u->bytes_written += ops[i].bytes;
            else u->bytes_written_res += ops[i].bytes;
        }
    }
    if (ok) {
        if (r1 > r0) u->read = r1;
        if (w >= 0) u->written = w + 1;
        pthread_cond_broadcast(&u->cv);
    }
    stop = u->stop;
    pthread_mutex_unlock(&u->mu);
    return !stop;
}

/* Reads the first chunks, then, as each chunk j is updated, writes it back
 * together with the read of the chunk that takes the slot freed before it
 * (chunk j + n_slots - 1): while the caller updates chunk j + 1, chunk j is
 * written and chunk j + 2 read (3 slots). */
/* Reads resident segments [k0, k1) into the resident region; false when
 * the run stops. */
static bool read_resident(hx_disk_update *u, int k0, int k1)
{
    hx_offload_disk *d = u->d;
    hx_disk_op *ops = u->ops;
    for (int k = k0; k < k1; k++) {
        const hx_disk_seg *g = &d->segs[k];
        ops[k - k0] = (hx_disk_op){.write = false, .first = hx__disk_seg_block(g, g->gen),
                                   .buf = d->res + g->off, .bytes = g->bytes};
    }
    double t0 = hx__now();
    hx_disk_tier_batch(d->tier, ops, k1 - k0);
    double t1 = hx__now();
    hx__trace_event(d->io_lane, "disk read (resident)", NULL, 0, t0, t1);
    pthread_mutex_lock(&u->mu);
    u->res_read_s += t1 - t0;
    bool ok = true;
    for (int k = k0; k < k1 && ok; k++)
        if (ops[k - k0].st) {
            fail(u, ops[k - k0].st, "reading %s %d failed: %s", "resident segment", k, ops[k - k0].err.msg);
            ok = false;
        }
    if (ok) {
        u->res_read = k1;
        if (k1 == d->n_res) atomic_store(&d->res_ready, true);
    }
    pthread_cond_broadcast(&u->cv);
    bool stop = u->stop;
    pthread_mutex_unlock(&u->mu);
    return !stop;
}

/* The resident region in batches of about 8 MiB (the first one segment,
 * so that the forward can start), then the chunks. */
static void *io_main(void *arg)
{
    hx_disk_update *u = arg;
    hx_offload_disk *d = u->d;
    size_t per = ((size_t)8 << 20) / d->seg_bytes;
    int batch = per < 1 ? 1 : per > (size_t)d->n_res ? d->n_res : (int)per;
    for (int k = u->res_read; k < d->n_res;) {
        int k1 = k == 0 ? 1 : k + batch < d->n_res ? k + batch : d->n_res;
        if (!read_resident(u, k, k1)) return NULL;
        k = k1;
    }
    if (!u->n) return NULL;
    int first = u->n_slots > 1 ? u->n_slots - 1 : 1; /* chunks read before the first update */
    if (!io_batch(u, 0, first, -1)) return NULL;
    for (int j = 0; j < u->n; j++) {
        pthread_mutex_lock(&u->mu);
        while (u->computed <= j && !u->stop) pthread_cond_wait(&u->cv, &u->mu);
        bool stop = u->stop;
        pthread_mutex_unlock(&u->mu);
        if (stop) return NULL;
        int r = j + u->n_slots - 1;
        bool read = r >= first && r < u->n;
        if (!io_batch(u, read ? r : 0, read ? r + 1 : 0, j)) return NULL;
    }
    return NULL;
}

hx_status hx__disk_resident_wait(hx_offload_disk *d, int k)
{
    if (atomic_load(&d->res_ready) || k < 0) return HX_OK;
    hx_disk_update *u = d->upd;
    if (!u || !u->started)
        return hx__error(HX_ERR_INTERNAL, "hx_session_run: offload_param=disk: the resident region "
                         "is not being read");
    pthread_mutex_lock(&u->mu);
    double w = 0;
    WAIT_FOR(u, u->res_read > k, &w);
    u->res_wait_s += w;
    hx_status st = u->res_read > k ? HX_OK : u->st ? u->st : HX_ERR_INTERNAL;
    char msg[sizeof u->msg];
    snprintf(msg, sizeof msg, "%s", u->st ? u->msg : "the run was stopped");
    pthread_mutex_unlock(&u->mu);
    if (st)
        return hx__error(st, "hx_session_run: offload_param=disk: %s; nothing of this step was "
                         "applied: the parameters, optimizer state and step count are those from "
                         "before it", msg);
    return HX_OK;
}

hx_status hx__disk_step_ready(hx_residency *r, const hx_step *sp)
{
    hx_offload_disk *d = hx__disk(r);
    if (atomic_load(&d->res_ready)) return HX_OK;
    const hx_tensor *x = sp->node;
    int hi = -1, n = sp->fn ? hx__n_reads(d->e, x) : 1;
    for (int k = 0; k < n; k++) {
        const hx_tensor *t = sp->fn ? hx__read(d->e, x, k) : x; /* a copy reads its node's value */
        if (d->where[t->id] != -1) continue;
        size_t b = hx_tensor_nbytes(t);
        int last = (int)((d->at[t->id] + (b ? b - 1 : 0)) / d->seg_bytes);
        if (last > hi) hi = last;
    }
    return hx__disk_resident_wait(d, hi);
}

bool hx__disk_update_touched(const hx_offload_disk *d, int k)
{
    return !d->upd || d->upd->res_last[k] != -2;
}

void hx__disk_update_end(hx_offload_disk *d)
{
    hx_disk_update *u = d->upd;
    if (!u) return;
    if (u->started) {
        pthread_mutex_lock(&u->mu);
        u->stop = true;
        pthread_cond_broadcast(&u->cv);
        pthread_mutex_unlock(&u->mu);
        pthread_join(u->io, NULL);
    }
    for (int k = 0; u->slot && k < u->n_slots; k++)
        if (u->slot[k]) hx_pinned_free(d->pinned, u->slot[k], NULL);
    free(u->slot);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u->seg);
    free(u->first);
    free(u->order);
    free(u->in);
    free(u->res_last);
    free(u->ops);
    free(u->op_what);
    free(u);
    d->upd = NULL;
}

/* Update x is another rank's (ZeRO): left out here. */
static bool skipped(const hx_engine *e, const hx_tensor *x)
{
    return e->update_skip && e->update_skip[x->id];
}

/* The chunk segment step sp's inputs lie in (-1: none); -2 when in two. */
static int chunk_of(const hx_offload_disk *d, const hx_step *sp)
{
    int c = -1;
    for (int k = 0; k < sp->node->n_src; k++) {
        int w = d->where[sp->node->src[k]->id];
        if (w >= 0) c = c == -1 || c == w ? w : -2;
    }
    return c;
}

/* res_last: per resident segment, the last chunk whose steps write into it
 * (a step writes every input but its gradient, src 1), -1 for the steps
 * without a chunk, -2 when none does, u->n (after every chunk: the run's
 * store) where an update another rank owns reads it (ZeRO's all-gather
 * writes that parameter after the updates). */
static hx_status last_writers(hx_disk_update *u, const hx_offload_disk *d)
{
    /* a batch: the first chunks read, or a chunk read and one written with resident segments */
    size_t n_ops = (size_t)d->n_res + (size_t)d->n_slots + 2;
    u->ops = malloc(sizeof *u->ops * n_ops);
    u->op_what = malloc(sizeof *u->op_what * n_ops);
    if (!(u->res_last = malloc(sizeof *u->res_last * (d->n_res + 1))) || !u->ops || !u->op_what)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    for (int k = 0; k < d->n_res; k++) u->res_last[k] = -2;
    for (int c = -1; c < u->n; c++)
        for (int i = c < 0 ? 0 : u->first[c]; i < u->first[c + 1]; i++) {
            const hx_tensor *x = u->up[u->order[i]].node;
            int last = skipped(d->e, x) ? u->n : c;
            for (int k = 0; k < x->n_src; k++) {
                const hx_tensor *t = x->src[k];
                if (k == 1 || d->where[t->id] != -1) continue;
                size_t n = hx_tensor_nbytes(t);
                int lo = (int)(d->at[t->id] / d->seg_bytes);
                int hi = (int)((d->at[t->id] + (n ? n - 1 : 0)) / d->seg_bytes);
                for (int g = lo; g <= hi; g++)
                    if (u->res_last[g] < last) u->res_last[g] = last;
            }
        }
    return HX_OK;
}

/* Groups the plan's update steps by chunk (a counting sort on the segment). */
static hx_status group_steps(hx_disk_update *u, const hx_offload_disk *d)
{
    int n_steps, max_src = 1;
    u->up = hx__plan_steps(u->p, 1, &n_steps);
    int *count = calloc((size_t)d->n_seg + 1, sizeof *count), *cof = malloc(sizeof *cof * (n_steps + 1));
    u->seg = malloc(sizeof *u->seg * (d->n_seg + 1));
    u->first = malloc(sizeof *u->first * (d->n_seg + 2));
    u->order = malloc(sizeof *u->order * (n_steps + 1));
    hx_status st = count && cof && u->seg && u->first && u->order
                       ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    for (int i = 0; i < n_steps && !st; i++) {
        const hx_step *sp = &u->up[i];
        if (!sp->fn || sp->dev != HX_DEV_HOST)
            st = hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: offload_param=disk runs the "
                           "optimizer updates on the host chunk by chunk, but this plan's update "
                           "phase also holds %s of '%s'; use offload_param=cpu for this graph",
                           sp->fn ? "a device kernel" : "a copy", sp->node->name);
        else if ((cof[i] = chunk_of(d, sp)) == -2)
            st = hx__error(HX_ERR_INTERNAL, "hx_session_run: offload_param=disk: update '%s' "
                           "reads state from two chunks", sp->node->name);
        else count[cof[i] < 0 ? d->n_seg : cof[i]]++;
        if (sp->node->n_src > max_src) max_src = sp->node->n_src;
    }
    if (!st && !(u->in = malloc(sizeof *u->in * max_src)))
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    if (!st) {
        /* chunk index per segment, in file order; the no-chunk steps first */
        int at = count[d->n_seg];
        for (int k = 0; k < d->n_seg; k++)
            if (count[k]) {
                u->seg[u->n] = k;
                u->first[u->n++] = at;
                at += count[k];
                count[k] = u->first[u->n - 1]; /* now: the next place for chunk k's steps */
            }
        u->first[u->n] = at;
        int none = 0;
        for (int i = 0; i < n_steps; i++)
            u->order[cof[i] < 0 ? none++ : count[cof[i]]++] = i;
        st = last_writers(u, d);
    }
    free(count);
    free(cof);
    return st;
}

hx_status hx__disk_update_begin(hx_offload_disk *d, const hx_plan *p)
{
    hx__disk_update_end(d);
    hx_disk_update *u = calloc(1, sizeof *u);
    if (!u) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    u->d = d;
    u->p = p;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    d->upd = u;
    hx_status st = group_steps(u, d);
    if (st) {
        hx__disk_update_end(d);
        return st;
    }
    u->n_slots = u->n < d->n_slots ? u->n : d->n_slots;
    size_t n_slots = u->n_slots > 0 ? (size_t)u->n_slots : 0;
    if (!(u->slot = calloc(n_slots + 1, sizeof *u->slot)))
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    hx_mem_err err;
    for (int k = 0; k < u->n_slots && !st; k++) {
        void *m = NULL;
        st = hx_pinned_alloc(d->pinned, d->slot_bytes, &m, &err);
        u->slot[k] = m;
        if (st)
            st = hx__error(st, "hx_session_run: offload_param=disk: no host memory for chunk slot "
                           "%d (%zu bytes): %s; raise offload_cpu_size", k, d->slot_bytes, err.msg);
    }
    if (!st && (u->n || !atomic_load(&d->res_ready))) {
        int rc = pthread_create(&u->io, NULL, io_main, u);
        if (rc) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: cannot start the disk "
                               "tier's I/O thread: %s", strerror(rc));
        u->started = !rc;
    }
    if (st) hx__disk_update_end(d);
    return st;
}

/* Runs update step i with the chunk tensors of its inputs in slot (NULL:
 * none), unless another rank owns it. */
static hx_status run_step(hx_disk_update *u, const hx_exec *ex, int i, const char *slot)
{
    hx_engine *e = u->d->e;
    const hx_offload_disk *d = u->d;
    const hx_step *sp = &u->up[i];
    const hx_tensor *x = sp->node;
    if (skipped(e, x)) return HX_OK;
    for (int k = 0; k < x->n_src; k++) {
        int id = x->src[k]->id;
        u->in[k] = slot && d->where[id] >= 0 ? (void *)(slot + d->at[id]) : sp->in[k];
    }
    hx_status st = hx__update_step(e, e->stream[HX_DEV_HOST], hx__exec_lane(e), ex, sp, u->in);
    if (!st) hx__gather_step_done(e, sp);
    return st;
}

hx_status hx__disk_update_run(hx_residency *r, const hx_plan *p, const hx_exec *ex_in)
{
    hx_offload_disk *d = hx__disk(r);
    hx_engine *e = d->e;
    hx_disk_update *u = d->upd;
    if (!u || u->p != p)
        return hx__error(HX_ERR_INTERNAL, "hx_session_run: offload_param=disk: the update phase "
                         "was not prepared for this plan");
    hx_exec ex = *ex_in;
    ex.nthreads = e->nthreads; /* one update at a time: all the session's threads */
    double t0 = hx__now(), waited = 0;
    pthread_mutex_lock(&u->mu);
    u->update_t0 = t0;
    pthread_mutex_unlock(&u->mu);
    d->res_dirty = true;
    hx_status st = hx__disk_resident_wait(d, d->n_res - 1);
    for (int i = 0; i < u->first[0] && !st; i++) st = run_step(u, &ex, u->order[i], NULL);
    for (int j = 0; j < u->n && !st; j++) {
        pthread_mutex_lock(&u->mu);
        WAIT_FOR(u, u->read > j, &waited);
        bool stop = u->stop;
        pthread_mutex_unlock(&u->mu);
        if (stop) break;
        for (int i = u->first[j]; i < u->first[j + 1] && !st; i++)
            st = run_step(u, &ex, u->order[i], u->slot[j % u->n_slots]);
        pthread_mutex_lock(&u->mu);
        if (st) fail(u, st, "%s %d: %s", "updating chunk", j, hx_last_error());
        else u->computed = j + 1;
        pthread_cond_broadcast(&u->cv);
        pthread_mutex_unlock(&u->mu);
    }
    pthread_mutex_lock(&u->mu);
    WAIT_FOR(u, u->written == u->n, &waited);
    pthread_mutex_unlock(&u->mu);
    if (u->started) pthread_join(u->io, NULL);
    u->started = false;
    for (int k = 0; k < u->n_slots; k++) { /* given back before the fetches read chunks */
        hx_pinned_free(d->pinned, u->slot[k], NULL);
        u->slot[k] = NULL;
    }
    d->last.update_s = hx__now() - t0;
    d->last.update_wait_s = waited;
    d->last.io_s = u->io_s;
    d->last.prefetch_s = u->prefetch_s;
    d->last.chunk_bytes_read = u->bytes_read;
    d->last.chunk_bytes_written = u->bytes_written;
    d->last.resident_bytes_written = u->bytes_written_res;
    d->last.chunks = u->n;
    d->last.resident_read_s = u->res_read_s;
    d->last.resident_wait_s = u->res_wait_s;
    if (u->st)
        return hx__error(u->st, "hx_session_run: offload_param=disk: %s; nothing of this step was "
                         "applied: the parameters, optimizer state and step count are those from "
                         "before it", u->msg);
    return HX_OK;
}
