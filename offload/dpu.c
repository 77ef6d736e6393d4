/* Delayed parameter update (ZeRO-Offload's DPU): after its warm-up steps,
 * the host optimizer step of run N runs on a thread of its own while run
 * N+1 computes its forward and backward, which therefore use the
 * parameters of step N-1.
 *
 * What keeps the two apart: the update reads its gradients from a staging
 * copy (run N+1 overwrites the arena) and writes each half copy into a
 * staging buffer of its own (run N+1 reads the half copies); the staged
 * half copies are published, and the next update may start, once run N+1's
 * forward and backward are done (hx__dpu_settle). A plan qualifies when its
 * updates are all dense and on the host, with nothing else in phase 1 (the
 * plan copies device gradients to the host as backward makes them), and
 * when no step before them reads a parameter or optimizer state that an
 * update writes, other than through a half copy: otherwise the run settles
 * first and updates in step. The thread runs each update step through
 * hx__update_step (scheduler/update.c) on a host stream and a trace lane of
 * its own. */
#include "backend/backend.h"
#include "offload/offload.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct staged { /* a buffer the delayed update uses in place of the plan's */
    void *buf, *home;
    size_t bytes;
} staged;

struct hx_dpu {
    const hx_plan *plan;   /* the staging below is laid out for it */
    const hx_step *up;     /* its phase-1 steps, n_up of them */
    int n_up;
    staged *grads, *halves; /* per phase-1 step: its gradient, its half copy (buf NULL: none) */
    void ***in;            /* per phase-1 step: its inputs with the staged ones swapped in */
    hx_exec ex;
    pthread_t thread;
    bool running;
    hx_status st;
    char msg[512];
    int64_t step;          /* the step being updated, for messages */
    hx_stream *stream;     /* its host stream and trace lane (hx__update_step) */
    hx_trace_lane *lane;
};

/* Written by an update of the graph, other than a half copy. */
static bool written_by_update(const hx_tensor *t)
{
    return (t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE) &&
           !hx__is_half_copy(t);
}

bool hx__dpu_plan_ok(const hx_plan *p)
{
    int n;
    const hx_step *up = hx__plan_steps(p, 1, &n);
    for (int i = 0; i < n; i++)
        if (!up[i].fn || up[i].dev != HX_DEV_HOST || !hx__is_dense_update(up[i].node)) return false;
    return hx__dpu_reads_no_master(p);
}

bool hx__dpu_reads_no_master(const hx_plan *p)
{
    int n;
    const hx_step *sp = hx__plan_steps(p, 0, &n);
    for (int i = 0; i < n; i++) {
        const hx_tensor *t = sp[i].node;
        if (!sp[i].fn) { /* a copy of t */
            if (written_by_update(t)) return false;
            continue;
        }
        for (int k = 0; k < t->n_src; k++)
            if (written_by_update(t->src[k])) return false;
    }
    return true;
}

static void free_staging(hx_dpu *d)
{
    int n = d->plan && d->grads && d->halves && d->in ? d->n_up : 0;
    for (int i = 0; i < n; i++) {
        free(d->grads[i].buf);
        free(d->halves[i].buf);
        free(d->in[i]);
    }
    free(d->grads);
    free(d->halves);
    free(d->in);
    d->grads = d->halves = NULL;
    d->in = NULL;
    d->plan = NULL;
}

/* Staging laid out for plan p, per update step. */
static hx_status stage_for(hx_dpu *d, const hx_plan *p)
{
    if (d->plan == p) return HX_OK;
    free_staging(d);
    d->up = hx__plan_steps(p, 1, &d->n_up);
    int n = d->n_up;
    d->grads = calloc(n ? n : 1, sizeof *d->grads);
    d->halves = calloc(n ? n : 1, sizeof *d->halves);
    d->in = calloc(n ? n : 1, sizeof *d->in);
    bool ok = d->grads && d->halves && d->in;
    d->plan = p;
    for (int i = 0; i < n && ok; i++) {
        const hx_tensor *u = d->up[i].node;
        int half = (int)u->attr.i[0];
        d->grads[i].bytes = hx_tensor_nbytes(u->src[1]);
        d->halves[i].bytes = half ? hx_tensor_nbytes(u->src[half]) : 0;
        ok = (d->in[i] = malloc(sizeof(void *) * u->n_src)) &&
             (d->grads[i].buf = malloc(d->grads[i].bytes + 1)) &&
             (!half || (d->halves[i].buf = malloc(d->halves[i].bytes + 1)));
    }
    if (!ok) {
        free_staging(d);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory for the "
                         "delayed update's staging buffers (turn delayed_param_update off)");
    }
    return HX_OK;
}

/* Points update step i's inputs at the staging (the plan's pointers may
 * have moved since the last run: a grown arena rebinds them) and stages
 * its gradient. */
static void stage_step(hx_dpu *d, int i)
{
    const hx_step *sp = &d->up[i];
    const hx_tensor *u = sp->node;
    int half = (int)u->attr.i[0];
    memcpy(d->in[i], sp->in, sizeof(void *) * u->n_src);
    d->grads[i].home = sp->in[1];
    memcpy(d->grads[i].buf, d->grads[i].home, d->grads[i].bytes);
    d->in[i][1] = d->grads[i].buf;
    if (half) {
        d->halves[i].home = sp->in[half];
        d->in[i][half] = d->halves[i].buf;
    }
}

static void *update_main(void *arg)
{
    hx_engine *e = arg;
    hx_dpu *d = e->dpu;
    for (int i = 0; i < d->n_up && !d->st; i++) {
        d->st = hx__update_step(e, d->stream, d->lane, &d->ex, &d->up[i], d->in[i]);
        if (d->st) snprintf(d->msg, sizeof d->msg, "%s", hx_last_error());
    }
    return NULL;
}

hx_status hx__dpu_launch(hx_engine *e, const hx_plan *p, const hx_exec *ex)
{
    if (!e->dpu) {
        hx_backend *host = e->be[HX_DEV_HOST];
        hx_dpu *d = calloc(1, sizeof *d);
        if (!d) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
        hx_status st = host->stream_create(host, &d->stream);
        if (st) {
            free(d);
            return st;
        }
        d->lane = hx__trace_lane(e->trace, "host (delayed update)");
        e->dpu = d;
    }
    hx_dpu *d = e->dpu;
    hx_status st = stage_for(d, p);
    if (st) return st;
    for (int i = 0; i < d->n_up; i++) stage_step(d, i);
    d->ex = *ex;
    d->st = HX_OK;
    d->step = ex->step + 1;
    int rc = pthread_create(&d->thread, NULL, update_main, e);
    if (rc) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: cannot start the delayed "
                             "update's thread: %s", strerror(rc));
    d->running = true;
    return HX_OK;
}

hx_status hx__dpu_settle(hx_engine *e)
{
    hx_dpu *d = e->dpu;
    if (!d || !d->running) return HX_OK;
    pthread_join(d->thread, NULL);
    d->running = false;
    if (d->st)
        return hx__error(d->st, "the delayed update of step %lld failed: %s (its parameters may "
                         "be partly updated)", (long long)d->step, d->msg);
    for (int i = 0; i < d->n_up; i++)
        if (d->halves[i].buf) memcpy(d->halves[i].home, d->halves[i].buf, d->halves[i].bytes);
    return HX_OK;
}

void hx__dpu_free(hx_engine *e)
{
    if (!e->dpu) return;
    hx__dpu_settle(e);
    free_staging(e->dpu);
    e->be[HX_DEV_HOST]->stream_destroy(e->be[HX_DEV_HOST], e->dpu->stream);
    free(e->dpu);
    e->dpu = NULL;
}
