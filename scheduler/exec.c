/* The executor: runs one phase of a plan as a DAG of units (plan_units.c).
 *
 * A unit is resolved when the units after it may go ahead: a stream unit
 * (device subgraph, copy) once all its steps are submitted to its stream,
 * with an event recorded after them; a host unit (CPU subgraph) once it
 * has finished. A stream unit is submitted step by step as far as its
 * resolved preds allow (preds are ordered by the first step that needs
 * them; before that step goes a stream_wait on the pred's event when the
 * pred is on another stream), by whichever thread resolved the pred;
 * submission never blocks. A phase starts with every stream unit's steps
 * that wait for no pred, in unit order, and only then resolves those
 * units (resolving each at once submitted its successors, a later chunk's
 * copies, before the next units, an earlier chunk's; ZeRO stage 3 gathers
 * what a copy reads as it is submitted: session/zero3.c). A host unit is
 * queued for the host lanes (the calling thread and the session's worker
 * threads) once every pred is resolved; it waits (event_sync) for a pred
 * on a stream right before the first step that needs it, so its earlier
 * steps overlap that pred, and takes its cores from the budget around its
 * kernels. All scheduling state
 * is under one mutex; kernels run without it.
 *
 * The first error of any lane (its status and message, copied from the
 * thread that hit it) stops new submissions; the phase then waits for the
 * host units already running and synchronises every stream, so nothing is
 * left in flight, and returns that error. */
#include "scheduler/plan.h"
#include "scheduler/cpu_budget.h"
#include "scheduler/trace.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct run {
    hx_engine *e;
    const hx_plan *p;
    const hx_exec *ex_host, *ex_dev;
    int base;       /* first unit of the phase */
    int *remaining; /* per unit of the phase: predecessors not resolved */
    int *next_step; /* per stream unit of the phase: steps submitted */
    int *prefix;    /* per stream unit of the phase: leading preds resolved and waited
                       for; n_pred + 1 once the unit is resolved */
    bool *pred_done;/* per link: the pred is resolved */
    int *ready;     /* queued host units */
    int head, tail;
    int *work;      /* resolved units whose successors are not yet counted down */
    int n_host, host_done, running;
    hx_status err;
    char msg[1024];
} run;

typedef struct worker {
    hx_exec_state *x;
    pthread_t thread;
    hx_stream *stream; /* its host backend stream */
    hx_trace_lane *lane;
} worker;

struct hx_exec_state {
    hx_engine *e;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* work queued, a unit finished, or stop */
    worker **workers;
    int n_workers;
    bool stop;
    run *cur; /* the phase being run, or NULL */
    hx_trace_lane *caller_lane;
};

static hx_stream *lane_stream(const hx_engine *e, int lane)
{
    return lane == HX_LANE_COMPUTE ? e->stream[HX_DEV_ACCEL] : e->copy_stream[lane - HX_LANE_H2D];
}

static bool on_stream(const hx_unit *u) { return u->lane != HX_LANE_HOST; }

/* A kernel step of an update that this process leaves out (ZeRO). */
static bool skipped_update(const hx_engine *e, const hx_step *sp)
{
    return e->update_skip && sp->fn && e->update_skip[sp->node->id];
}

/* Records the first error; called with the lock held on the thread that
 * got the error (its message is thread-local). */
static void fail(run *r, hx_status st)
{
    if (r->err) return;
    r->err = st;
    snprintf(r->msg, sizeof r->msg, "%s", hx_last_error());
}

/* Submits steps [from, to) of stream unit x, timed (a bracket around
 * those it submits) while the engine times units. */
static hx_status submit_steps(run *r, const hx_unit *x, hx_stream *st_, int from, int to)
{
    const hx_plan *p = r->p;
    hx_backend *acc = r->e->be[HX_DEV_ACCEL];
    hx_status st = HX_OK;
    bool timing = false;
    for (int i = from; i < to && !st; i++) {
        int k = p->unit_steps[x->first + i];
        const hx_step *sp = &p->steps[k];
        if (skipped_update(r->e, sp)) continue; /* another rank's parameter */
        if (!timing && r->e->time_units) {
            if ((st = acc->time_begin(acc, st_, &p->clock[x - p->units].run_s))) break;
            timing = true;
        }
        if (sp->fn) {
            if (!(st = hx__gather_step_ready(r->e, sp))) /* what it reads is in place */
                st = acc->launch(acc, st_, sp->fn, r->ex_dev, sp->node, sp->out, sp->in);
        } else if (!(st = hx__residency_step_ready(r->e, sp))) { /* its source in host memory */
            hx_copy_label why = {sp->node->name, hx__copy_role_name(p->step_role[k])};
            size_t n = hx_tensor_nbytes(sp->node);
            st = x->lane == HX_LANE_H2D
                     ? acc->copy_h2d(acc, st_, (hx_h2d_copy){.dev = sp->out, .host = sp->in[0],
                                                             .bytes = n, .why = why})
                     : acc->copy_d2h(acc, st_, (hx_d2h_copy){.host = sp->out, .dev = sp->in[0],
                                                             .bytes = n, .why = why});
            if (!st) st = hx__gather_step_queued(r->e, sp, st_); /* what it read may go once copied */
        }
        if (!st && r->e->watch) st = r->e->watch->submitted(r->e->watch, sp, st_);
    }
    if (timing) {
        hx_status end = acc->time_end(acc, st_);
        if (!st) st = end;
    }
    return st;
}

/* Submits as much of stream unit u as its resolved preds allow; *done when
 * this call submitted the rest of it and recorded its event (lock held). */
static hx_status advance(run *r, int u, bool *done)
{
    const hx_plan *p = r->p;
    const hx_unit *x = &p->units[u];
    hx_backend *acc = r->e->be[HX_DEV_ACCEL];
    hx_stream *st_ = lane_stream(r->e, x->lane);
    int *next = &r->next_step[u - r->base], *pre = &r->prefix[u - r->base];
    hx_status st = HX_OK;
    *done = false;
    if (*pre > x->n_pred) return HX_OK; /* resolved already */
    if (r->p->skip[u]) {
        *pre = x->n_pred + 1;
        *done = true;
        return HX_OK;
    }
    while (!st && *pre < x->n_pred && r->pred_done[x->first_pred + *pre]) {
        int li = x->first_pred + *pre, w = p->links[li];
        st = submit_steps(r, x, st_, *next, p->link_at[li]);
        if (p->link_at[li] > *next) *next = p->link_at[li];
        if (!st && on_stream(&p->units[w]) && p->units[w].lane != x->lane &&
            !r->p->skip[w])
            st = acc->stream_wait(acc, st_, p->done[w]);
        ++*pre;
    }
    int to = *pre < x->n_pred ? p->link_at[x->first_pred + *pre] : x->n_steps;
    if (!st && to > *next) {
        st = submit_steps(r, x, st_, *next, to);
        *next = to;
    }
    if (st || *pre < x->n_pred) return st;
    *pre = x->n_pred + 1;
    *done = true;
    return acc->event_record(acc, p->done[u], st_);
}

/* Unit u is resolved: tells its successors, submitting or queueing those
 * that can go ahead (lock held). */
static void resolved(hx_exec_state *x, run *r, int u)
{
    const hx_plan *p = r->p;
    int n_work = 0;
    r->work[n_work++] = u;
    while (n_work) {
        const hx_unit *a = &p->units[r->work[--n_work]];
        for (int i = 0; i < a->n_succ; i++) {
            int v = p->links[a->first_succ + i];
            const hx_unit *b = &p->units[v];
            r->pred_done[b->first_pred + p->link_at[a->first_succ + i]] = true;
            if (!on_stream(b)) {
                if (!--r->remaining[v - r->base]) {
                    r->ready[r->tail++] = v;
                    pthread_cond_broadcast(&x->wake);
                }
            } else if (!r->err) {
                bool done;
                hx_status st = advance(r, v, &done);
                if (st) fail(r, st);
                else if (done) r->work[n_work++] = v;
            }
        }
    }
}

/* Runs host unit u on the calling thread (no lock held). */
static hx_status run_host(run *r, int u, hx_stream *stream, hx_trace_lane *lane)
{
    hx_engine *e = r->e;
    const hx_plan *p = r->p;
    const hx_unit *x = &p->units[u];
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    hx_status st = HX_OK;
    int cores = hx__budget_take(e->budget, r->ex_host->nthreads);
    for (int i = 0, j = 0; i < x->n_steps && !st; i++) {
        for (; j < x->n_pred && p->link_at[x->first_pred + j] <= i && !st; j++) {
            int w = p->links[x->first_pred + j];
            if (!on_stream(&p->units[w]) || r->p->skip[w]) continue;
            hx__budget_give(e->budget, cores); /* no cores held while waiting */
            st = acc->event_sync(acc, p->done[w]);
            cores = hx__budget_take(e->budget, r->ex_host->nthreads);
        }
        if (st) break;
        const hx_step *sp = &p->steps[p->unit_steps[x->first + i]];
        if (skipped_update(e, sp)) continue; /* another rank's parameter */
        if ((st = hx__residency_step_ready(e, sp))) break; /* its inputs in host memory */
        double t0 = e->time_units ? hx__now() : 0;
        st = hx__host_launch(e, stream, lane, r->ex_host, sp, sp->in, &cores);
        if (!st) hx__gather_step_done(e, sp); /* what it read may go */
        if (e->time_units) p->clock[u].run_s += hx__now() - t0;
    }
    hx__budget_give(e->budget, cores);
    return st;
}

/* Takes a queued host unit and runs it (lock held on entry and exit). */
static void take_and_run(hx_exec_state *x, run *r, hx_stream *stream, hx_trace_lane *lane)
{
    int u = r->ready[r->head++];
    r->running++;
    pthread_mutex_unlock(&x->mu);
    hx_status st = run_host(r, u, stream, lane);
    pthread_mutex_lock(&x->mu);
    r->running--;
    if (st) fail(r, st);
    else {
        r->host_done++;
        resolved(x, r, u);
    }
    pthread_cond_broadcast(&x->wake);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    hx_exec_state *x = w->x;
    pthread_mutex_lock(&x->mu);
    while (!x->stop) {
        run *r = x->cur;
        if (r && !r->err && r->head < r->tail) take_and_run(x, r, w->stream, w->lane);
        else pthread_cond_wait(&x->wake, &x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

hx_status hx__exec_create(hx_engine *e)
{
    hx_exec_state *x = calloc(1, sizeof *x);
    if (!x) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    x->e = e;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->wake, NULL);
    x->caller_lane = hx__trace_lane(e->trace, "host (calling thread)");
    e->exec = x;
    return HX_OK;
}

hx_trace_lane *hx__exec_lane(const hx_engine *e) { return e->exec->caller_lane; }

void hx__exec_free(hx_engine *e)
{
    hx_exec_state *x = e->exec;
    if (!x) return;
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    pthread_cond_broadcast(&x->wake);
    pthread_mutex_unlock(&x->mu);
    for (int i = 0; i < x->n_workers; i++) {
        pthread_join(x->workers[i]->thread, NULL);
        e->be[HX_DEV_HOST]->stream_destroy(e->be[HX_DEV_HOST], x->workers[i]->stream);
        free(x->workers[i]);
    }
    free(x->workers);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->wake);
    free(x);
    e->exec = NULL;
}

hx_status hx__exec_reserve(hx_engine *e, int lanes)
{
    hx_exec_state *x = e->exec;
    int need = lanes - 1;
    if (need <= x->n_workers) return HX_OK;
    worker **ws = realloc(x->workers, sizeof *ws * need);
    if (!ws) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    x->workers = ws;
    hx_backend *host = e->be[HX_DEV_HOST];
    while (x->n_workers < need) {
        worker *w = calloc(1, sizeof *w);
        if (!w) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
        w->x = x;
        hx_status st = host->stream_create(host, &w->stream);
        if (st) {
            free(w);
            return st;
        }
        char name[48];
        snprintf(name, sizeof name, "host worker %d", x->n_workers + 1);
        w->lane = hx__trace_lane(e->trace, name);
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc) {
            host->stream_destroy(host, w->stream);
            free(w);
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: cannot start a host worker "
                             "thread: %s", strerror(rc));
        }
        x->workers[x->n_workers++] = w;
    }
    return HX_OK;
}

/* The calling thread has nothing to run: the watch's progress (lock
 * released), then a wait for work (lock held on entry and exit) of 50 us,
 * doubling to 800 us the longer it idles (idle: such waits in a row), so
 * that an idle rank leaves the cores to the streams and the other ranks. */
static void idle_progress(hx_exec_state *x, hx_step_watch *w, long idle)
{
    pthread_mutex_unlock(&x->mu);
    w->progress(w);
    pthread_mutex_lock(&x->mu);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += (50L << (idle < 4 ? idle : 4)) * 1000; /* 50 us .. 800 us */
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&x->wake, &x->mu, &t);
}

hx_status hx__exec_phase(hx_engine *e, const hx_plan *p, int phase, const hx_exec *ex_host,
                         const hx_exec *ex_dev)
{
    hx_exec_state *x = e->exec;
    int base = p->first_unit[phase], n = p->first_unit[phase + 1] - base;
    if (!n) return HX_OK;
    int *mem = calloc(6 * (size_t)n, sizeof *mem);
    bool *pred_done = calloc(p->n_links ? p->n_links : 1, sizeof *pred_done);
    if (!mem || !pred_done) {
        free(mem);
        free(pred_done);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    }
    run r = {.e = e,
             .p = p,
             .ex_host = ex_host,
             .ex_dev = ex_dev,
             .base = base,
             .remaining = mem,
             .ready = mem + n,
             .work = mem + 2 * n,
             .next_step = mem + 3 * n,
             .prefix = mem + 4 * n,
             .pred_done = pred_done};
    for (int u = base; u < base + n; u++) {
        r.remaining[u - base] = p->units[u].n_pred;
        r.n_host += !on_stream(&p->units[u]);
        p->clock[u].run_s = 0;
    }
    pthread_mutex_lock(&x->mu);
    x->cur = &r;
    /* the stream units' first steps, then what they resolve (at once, a
     * unit's successors, a later chunk's copies, went before the units
     * after it, an earlier chunk's) */
    int n_first = 0, *first = mem + 5 * n;
    for (int u = base; u < base + n && !r.err; u++) {
        if (!on_stream(&p->units[u])) {
            if (!p->units[u].n_pred) r.ready[r.tail++] = u;
            continue;
        }
        bool done;
        hx_status st = advance(&r, u, &done);
        if (st) fail(&r, st);
        else if (done) first[n_first++] = u;
    }
    for (int i = 0; i < n_first && !r.err; i++) resolved(x, &r, first[i]);
    pthread_cond_broadcast(&x->wake);
    for (long idle = 0; r.err ? r.running : r.host_done < r.n_host;) {
        if (!r.err && r.head < r.tail) take_and_run(x, &r, e->stream[HX_DEV_HOST], x->caller_lane), idle = 0;
        else if (e->watch && !r.err) idle_progress(x, e->watch, idle++);
        else pthread_cond_wait(&x->wake, &x->mu);
    }
    x->cur = NULL;
    pthread_mutex_unlock(&x->mu);
    if (e->watch && !r.err) e->watch->drain(e->watch);
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    hx_stream *streams[3] = {e->stream[HX_DEV_ACCEL], e->copy_stream[0], e->copy_stream[1]};
    for (int i = 0; acc && i < 3; i++) {
        hx_status st = acc->stream_sync(acc, streams[i]);
        if (st && !r.err) fail(&r, st);
    }
    for (int u = base; e->time_units && !r.err && u < base + n; u++) {
        hx_unit_clock *c = &p->clock[u];
        if (p->skip[u] || !(c->run_s > 0)) continue; /* it ran nothing */
        c->best_s = c->runs++ ? fmin(c->best_s, c->run_s) : c->run_s;
    }
    free(mem);
    free(pred_done);
    return r.err ? hx__error(r.err, "%s", r.msg) : HX_OK;
}
