/* Data parallel's communication under the computation: each unit of
 * dist/dp.c is summed over the ranks as soon as the phase-0 steps that
 * write its gradients are done, while the rest of the backward runs (a
 * chunk at stage 0, a group of neighbouring chunks with ZeRO), and at stages
 * 1 and 2 each chunk group's updated parameters go to every rank (its
 * all-gather) as soon as this rank's phase-1 steps that write or copy
 * them are done, while the other updates run.
 *
 * A plan's schedule, per phase: each item (a gradient the session sums,
 * or the parameter its update writes) has writers, the steps of the phase
 * after which it may be sent: in phase 0 the last step that makes the
 * gradient's value where the sums read it (the node itself on its home
 * device, or its copy there); in phase 1 the update (unless another rank
 * owns it) and the copies of what the ranks read of the parameter. A unit
 * is ready once every writer of its items has run (one with none is
 * ready at once; a gradient with no writer in phase 0 waits for its end).
 * The units start in one order, the same on every rank (the plans are
 * the same): by the place in the plan of their items' last writer on any
 * rank, then dtype group and unit; a unit starts once it is ready and
 * every unit before it has started (and, for a reduce-scatter, a group
 * buffer is free). The executor tells this file (scheduler/residency.h's
 * hx_step_watch) when a host step has run and when a stream step was
 * submitted: a stream writer gets an event after it, polled without
 * waiting. Progress (starting ready units, moving the collectives in
 * flight on, finishing a complete all-gather: Open MPI here has no
 * progress thread) runs after every host step, while the calling thread
 * waits for host work, and, once the phase's host steps are done, each
 * time the streams pass a writer (the thread sleeps on the writer's
 * event in between: polling there woke it 200-300 times a step, each
 * wake taken from the computation on a shared core); one thread at a
 * time drives it, the others go on. While the last step's all-gathers
 * are in flight (phase 0, below) and the ranks on this host have a core
 * each (hx__comm_own_cores), it also runs every 25 us as stream
 * steps are submitted and, instead of the sleep, while the thread waits
 * for the streams: without it the forward's submission made no MPI call
 * and the thread then slept until the backward's first writer, and a peer
 * whose reader waited for this rank's side of an all-gather (its sends
 * complete only as this rank moves them) waited until then (one session
 * alone, stage 2 at 2 ranks: a peer's reader finished 218 us after this
 * rank began its step, 13 us with the polling; session 16's trace).
 *
 * After each phase, finish starts what is left, waits for every unit and
 * writes the sums over the gradients (the all-gathers' values arrive in
 * place): bitwise what running them after the phase gives (the same
 * rank-order sums of the same bytes; only when they run moves). Its time
 * is the communication the step waits for (hx_train_stats.comm_wait_s).
 * Not at stage 3: its parameter gathers start from the executor's threads
 * on the same communicator, and the ranks must start collectives in one
 * order, so its sums start after phase 0 (and it has no all-gather after
 * the updates). hx_session_config.no_comm_overlap starts everything after
 * the phases.
 *
 * At stages 1 and 2 with the overlap on, the step does not wait for the
 * all-gathers (each in place, from the owner's values into the others':
 * dist/dp.c): the end of the updates starts those left (every collective
 * starts inside the training run, in one order on every rank, so that a
 * call of one rank alone never has to start one) and returns with them
 * in flight. The next forward finishes a group's all-gather (waits until
 * the others' values are in place) before the first step that reads one
 * of its parameters runs or is submitted to a stream (the engine's
 * hx_param_gather: each phase-0 step's groups are in the schedule), and
 * progress finishes those seen complete on the way; phase 0's end, and
 * every call but a training run (hx__session_dp_settle), finish what is
 * left first (not with offload_param=disk: its run stores the parameters
 * and gives their host copies back at its end, so share_end waits). The
 * waits count in comm_wait_s; a failure surfaces as that
 * run's or call's status. Nothing writes a group's values while its
 * all-gather is in flight: the owner's next update comes after phase 0's
 * end, and the others' copies are written only by it. */
#include "session/session.h"
#include "dist/dist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct unit {
    int grp;   /* the dp group (0: f32 gradients, 1: bf16) */
    int64_t x; /* its unit there (phase 1: its chunk group) */
    int last;  /* its items' last writer on any rank (plan order); n_steps: none */
    int writers;
} unit;

typedef struct schedule {
    const hx_plan *p;
    int phase;
    const hx_step *steps; /* the phase's */
    int n_steps, n_units;
    unit *u;              /* in start order */
    int *step_lo, *feeds; /* per step: the units it writes, feeds[step_lo[k] .. step_lo[k + 1]) */
    hx_event **ev;        /* per step on a stream that writes: its event (else NULL) */
    int *left;            /* this run, per unit: writers not seen done */
    bool *summed;         /* this run, per unit: its collective seen complete */
    int *pend, n_pend;    /* this run: stream writers submitted, not seen done */
    int *read_lo, *reads; /* phase 0, deferring: per step the chunk groups it reads (flat:
                           * the f32 ones, then the bf16 ones), reads[read_lo[k] .. read_lo[k + 1]) */
} schedule;

enum { LOG_CAP = 4096, MAX_WRITERS = 8, MAX_READS = 256 };
#define POLL_S 25e-6 /* poll_deferred: the interval */

/* The engine's hx_param_gather while the all-gathers are deferred. */
typedef struct reader {
    hx_param_gather hooks; /* first */
    struct hx_dp_overlap *o;
} reader;

struct hx_dp_overlap {
    hx_step_watch hooks; /* first: the engine's watch is this */
    hx_session *s;
    pthread_mutex_t mu;   /* the marks: left, pend, the logs */
    pthread_mutex_t prog; /* the collectives: one thread drives them at a time */
    schedule **sch;
    int n_sch;
    schedule *cur;        /* the phase's (NULL: none) */
    void **at[2];         /* this run: per dp group, each gradient's value */
    void **vals[2];       /* ... and what the ranks read of its parameter */
    size_t *val_bytes[2];
    int next;             /* this phase: units started, in order */
    hx_status err;        /* this phase's first failure in progress */
    char msg[1024];
    hx_dp_event log[2][LOG_CAP]; /* the last run's, per phase, for tests */
    int n_log[2];
    bool defer;           /* stages 1, 2 with the overlap: the all-gathers end in the next forward */
    reader rd;            /* ... the readers' waits */
    int64_t g0;           /* the f32 chunk groups (the bf16 ones' flat numbers follow) */
    int deferred;         /* all-gathers in flight after the last step (prog held) */
    double polled;        /* poll_deferred's last drive (prog held) */
    bool own_cores;       /* the ranks on this host have a core each: poll (else it would take
                           * the core from the rank it waits for) */
};

/* tests: 1, neither the readers nor progress finish the deferred all-gathers
 * (phase 0's end does); 2, progress does not (the readers must); 3, this
 * rank starts none of the all-gathers after the updates (a rank stopped
 * there: the others' deferred ones cannot finish) */
int hx__dp_defer_test;

static void schedule_free(const hx_session *s, schedule *c)
{
    if (!c) return;
    hx_backend *acc = s->e.be[HX_DEV_ACCEL];
    for (int k = 0; c->ev && k < c->n_steps; k++)
        if (c->ev[k]) acc->event_destroy(acc, c->ev[k]);
    free(c->ev);
    free(c->u);
    free(c->step_lo);
    free(c->feeds);
    free(c->left);
    free(c->summed);
    free(c->pend);
    free(c->read_lo);
    free(c->reads);
    free(c);
}

static int by_start(const void *a, const void *b)
{
    const unit *x = a, *y = b;
    if (x->last != y->last) return x->last < y->last ? -1 : 1;
    if (x->grp != y->grp) return x->grp < y->grp ? -1 : 1;
    return x->x < y->x ? -1 : x->x > y->x;
}

static int by_pair(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Scan entry i's writers among the phase's n steps into w (at most
 * MAX_WRITERS; returns how many, this rank's) and the last writer on any
 * rank into *last (-1: none). */
static int writers(const hx_session *s, const schedule *c, int i, int *w, int *last)
{
    void *at;
    int home, m = 0;
    const hx_tensor *u = hx__plan_grad(c->p, i, &at, &home);
    *last = -1;
    if (c->phase == 0) { /* the gradient's value where the sums read it */
        for (int k = c->n_steps - 1; k >= 0 && *last < 0; k--)
            if (c->steps[k].node == u->src[1] && c->steps[k].dev == home) *last = k;
        if (*last >= 0) w[m++] = *last;
        return m;
    }
    const hx_tensor *r = hx__zero_replica(u); /* the update; copies of what is sent */
    for (int k = 0; k < c->n_steps; k++) {
        const hx_step *sp = &c->steps[k];
        if (!(sp->fn ? sp->node == u : sp->node == r)) continue;
        *last = k;
        if ((!sp->fn || !s->zero_skip[u->id]) && m < MAX_WRITERS) w[m++] = k;
    }
    return m;
}

/* The chunk groups step sp reads (flat numbers, each once) into xs;
 * returns how many (-1: more than MAX_READS replicas). */
static int step_groups(const hx_dp_overlap *o, const hx_step *sp, int *xs)
{
    const hx_session *s = o->s;
    int ids[MAX_READS], js[MAX_READS], n = 0;
    int m = hx__zero_replica_reads(s, sp, false, ids, js, MAX_READS);
    for (int i = 0; i < m; i++) {
        int key = s->zero_key[ids[i]], grp = key % 2;
        int x = (int)((grp ? o->g0 : 0) + hx__dp_group_of(s->dp[grp], key / 2));
        bool again = false;
        for (int q = 0; q < n && !again; q++) again = xs[q] == x;
        if (!again) xs[n++] = x;
    }
    return m < 0 ? -1 : n;
}

/* Phase 0 of a session that defers the all-gathers: the groups each step
 * reads (c->read_lo, c->reads). */
static hx_status build_reads(const hx_dp_overlap *o, schedule *c)
{
    int xs[MAX_READS], n_reads = 0;
    c->read_lo = calloc((size_t)c->n_steps + 1, sizeof *c->read_lo);
    for (int pass = 0; pass < 2 && c->read_lo; pass++) { /* counted, then placed */
        for (int k = 0; k < c->n_steps; k++) {
            int m = step_groups(o, &c->steps[k], xs);
            if (m < 0)
                return hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: ZeRO stage %d: node '%s' "
                                 "reads more than %d parameters", o->s->e.cfg.zero_stage,
                                 c->steps[k].node->name, MAX_READS);
            if (pass) memcpy(c->reads + c->read_lo[k], xs, sizeof *xs * (size_t)m);
            else c->read_lo[k + 1] = n_reads += m;
        }
        if (!pass) c->reads = malloc(sizeof *c->reads * (size_t)(n_reads ? n_reads : 1));
        if (!c->reads) break;
    }
    return c->read_lo && c->reads ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
}

/* Plan p's schedule of phase `phase` (see the top). */
static hx_status build(hx_dp_overlap *o, const hx_plan *p, int phase, schedule **out)
{
    hx_session *s = o->s;
    int n, n_scan = hx__plan_grad_count(p);
    const hx_step *steps = hx__plan_steps(p, phase, &n);
    int64_t units[2];
    for (int grp = 0; grp < 2; grp++)
        units[grp] = !s->dp[grp] ? 0 : phase ? hx__dp_groups(s->dp[grp]) : hx__dp_units(s->dp[grp]);
    size_t nu = (size_t)(units[0] + units[1]), nn = (size_t)n + 1;
    size_t np_ = (size_t)(n_scan ? n_scan : 1) * MAX_WRITERS;
    schedule *c = calloc(1, sizeof *c);
    int *pairs = malloc(sizeof *pairs * 2 * np_);        /* (writer step, unit): each a unit's writer */
    int *pos = malloc(sizeof *pos * (nu ? nu : 1));      /* per (group, unit): its place in u */
    int *item = malloc(sizeof *item * (size_t)(n_scan ? n_scan : 1)); /* per scan entry: its unit */
    if (c) {
        *c = (schedule){.p = p, .phase = phase, .steps = steps, .n_steps = n, .n_units = (int)nu};
        c->u = calloc(nu ? nu : 1, sizeof *c->u);
        c->left = calloc(nu ? nu : 1, sizeof *c->left);
        c->summed = calloc(nu ? nu : 1, sizeof *c->summed);
        c->step_lo = calloc(nn, sizeof *c->step_lo);
        c->ev = calloc(nn, sizeof *c->ev);
        c->pend = malloc(sizeof *c->pend * nn);
    }
    hx_status st = HX_OK;
    if (!c || !pairs || !pos || !item || !c->u || !c->left || !c->summed || !c->step_lo || !c->ev ||
        !c->pend) {
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
        goto out;
    }
    for (int grp = 0, j = 0; grp < 2; grp++)
        for (int64_t x = 0; x < units[grp]; x++) c->u[j++] = (unit){.grp = grp, .x = x, .last = -1};
    int n_pairs = 0, w[MAX_WRITERS];
    for (int i = 0; i < n_scan; i++) { /* each unit's last writer; the pairs (by unit number for now) */
        void *at;
        int home, last;
        int k = s->dp_index[hx__plan_grad(p, i, &at, &home)->id];
        item[i] = -1;
        if (k < 0) continue;
        const hx_dp *d = s->dp[k % 2];
        item[i] = (int)((k % 2 ? units[0] : 0) + (phase ? hx__dp_group_of(d, k / 2) : hx__dp_unit_of(d, k / 2)));
        int m = writers(s, c, i, w, &last);
        unit *x = &c->u[item[i]];
        if (phase == 0 && last < 0) last = n; /* not made in phase 0: at its end */
        if (last > x->last) x->last = last;
        for (int q = 0; q < m; q++) pairs[2 * n_pairs] = w[q], pairs[2 * n_pairs++ + 1] = item[i];
    }
    for (size_t j = 0; j < nu; j++)
        if (c->u[j].last < 0) c->u[j].last = phase ? -1 : n; /* phase 0: no gradient, at the end */
    qsort(c->u, nu, sizeof *c->u, by_start);
    for (size_t j = 0; j < nu; j++) pos[(c->u[j].grp ? units[0] : 0) + c->u[j].x] = (int)j;
    for (int q = 0; q < n_pairs; q++) pairs[2 * q + 1] = pos[pairs[2 * q + 1]];
    qsort(pairs, (size_t)n_pairs, 2 * sizeof *pairs, by_pair);
    int kept = 0; /* each (step, unit) once */
    for (int q = 0; q < n_pairs; q++)
        if (!kept || pairs[2 * q] != pairs[2 * kept - 2] || pairs[2 * q + 1] != pairs[2 * kept - 1]) {
            pairs[2 * kept] = pairs[2 * q], pairs[2 * kept + 1] = pairs[2 * q + 1];
            kept++;
        }
    c->feeds = malloc(sizeof *c->feeds * (size_t)(kept ? kept : 1));
    if (!c->feeds) {
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
        goto out;
    }
    for (int q = 0; q < kept; q++) {
        c->step_lo[pairs[2 * q] + 1]++;
        c->feeds[q] = pairs[2 * q + 1];
        c->u[pairs[2 * q + 1]].writers++;
    }
    for (int k = 0; k < n; k++) c->step_lo[k + 1] += c->step_lo[k];
    hx_backend *acc = s->e.be[HX_DEV_ACCEL];
    for (int k = 0; k < n && !st; k++) /* a stream step (a copy, a device kernel) that writes: an event */
        if (c->step_lo[k + 1] > c->step_lo[k] && (!steps[k].fn || steps[k].dev == HX_DEV_ACCEL))
            st = acc->event_create(acc, &c->ev[k]);
    if (!st && o->defer && phase == 0) st = build_reads(o, c);
out:
    free(pairs);
    free(pos);
    free(item);
    if (st) schedule_free(s, c);
    else *out = c;
    return st;
}

static hx_status schedule_of(hx_dp_overlap *o, const hx_plan *p, int phase, schedule **out)
{
    for (int i = 0; i < o->n_sch; i++)
        if (o->sch[i]->p == p && o->sch[i]->phase == phase) {
            *out = o->sch[i];
            return HX_OK;
        }
    schedule **grown = realloc(o->sch, sizeof *grown * (size_t)(o->n_sch + 1));
    if (!grown) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    o->sch = grown;
    hx_status st = build(o, p, phase, out);
    if (!st) o->sch[o->n_sch++] = *out;
    return st;
}

/* One entry of the phase's log (mu held). */
static void note(hx_dp_overlap *o, char kind, int v)
{
    int ph = o->cur->phase;
    if (o->n_log[ph] < LOG_CAP) o->log[ph][o->n_log[ph]++] = (hx_dp_event){kind, v};
}

/* Step k has run: its units have one writer fewer (mu held). */
static void written(hx_dp_overlap *o, int k)
{
    schedule *c = o->cur;
    for (int q = c->step_lo[k]; q < c->step_lo[k + 1]; q++)
        if (!--c->left[c->feeds[q]]) note(o, 'R', c->feeds[q]);
}

/* Records the first failure of progress (prog held). */
static void fail(hx_dp_overlap *o, hx_status st)
{
    if (o->err || !st) return;
    o->err = st;
    snprintf(o->msg, sizeof o->msg, "%s", hx_last_error());
}

/* Starts unit j of the phase (prog held). */
static hx_status start(hx_dp_overlap *o, int j)
{
    const unit *x = &o->cur->u[j];
    hx_dp *d = o->s->dp[x->grp];
    if (o->cur->phase && hx__dp_defer_test == 3) return HX_OK;
    return o->cur->phase ? hx__dp_share_start(d, x->x, o->vals[x->grp], o->val_bytes[x->grp])
                         : hx__dp_start(d, x->x, o->at[x->grp]);
}

/* Finishes unit j of the phase, its sums written (`write`) or dropped;
 * an all-gather's values are in place as it completes (prog held). */
static hx_status finish(hx_dp_overlap *o, int j, bool write)
{
    const unit *x = &o->cur->u[j];
    hx_dp *d = o->s->dp[x->grp];
    return o->cur->phase ? hx__dp_share_finish(d, x->x)
                         : hx__dp_finish(d, x->x, write ? o->at[x->grp] : NULL);
}

/* The chunk groups, flat: the f32 ones, then the bf16 ones. */
static int64_t flat_groups(const hx_dp_overlap *o)
{
    return o->g0 + (o->s->dp[1] ? hx__dp_groups(o->s->dp[1]) : 0);
}

/* Flat group x's dp group's chunks, its group there into *g. */
static hx_dp *flat_group(const hx_dp_overlap *o, int64_t x, int64_t *g)
{
    int grp = x >= o->g0;
    *g = x - (grp ? o->g0 : 0);
    return o->s->dp[grp];
}

/* Finishes flat group x's all-gather if it is deferred (prog held): waits
 * until the others' values are in place ('G' in phase 0's log). fn names
 * the call that fails. */
static hx_status settle(hx_dp_overlap *o, int x, const char *fn)
{
    int64_t g;
    hx_dp *d = flat_group(o, x, &g);
    if (!hx__dp_sharing(d, g)) return HX_OK;
    o->deferred--;
    hx_status st = hx__dp_share_finish(d, g);
    if (o->cur && !o->cur->phase) {
        pthread_mutex_lock(&o->mu);
        note(o, 'G', x);
        pthread_mutex_unlock(&o->mu);
    }
    if (!st) return HX_OK;
    char why[HX_ERROR_LEN]; /* hx__error writes where hx_last_error reads */
    snprintf(why, sizeof why, "%s", hx_last_error());
    return hx__error(st, "%s: ZeRO stage %d: the all-gather of chunk group %lld's parameters after "
                     "the last training step (finished before their next reader): %s", fn,
                     o->s->e.cfg.zero_stage, (long long)g, why);
}

/* Every deferred all-gather finished (prog held); the first failure. */
static hx_status settle_all(hx_dp_overlap *o, const char *fn)
{
    hx_status st = HX_OK;
    for (int64_t x = 0; x < flat_groups(o) && o->deferred; x++) {
        hx_status f = settle(o, (int)x, fn);
        if (!st) st = f;
    }
    return st;
}

/* Phase 0: the deferred all-gathers seen complete, finished (prog held). */
static void settle_done(hx_dp_overlap *o)
{
    for (int64_t x = 0; x < flat_groups(o) && o->deferred && !o->err && !hx__dp_defer_test; x++) {
        int64_t g;
        hx_dp *d = flat_group(o, x, &g);
        bool done;
        if (!hx__dp_sharing(d, g)) continue;
        hx_status st = hx__dp_share_test(d, g, &done);
        if (st) { /* dropped: the run fails with it */
            fail(o, st);
            o->deferred--;
            hx__dp_share_finish(d, g);
        } else if (done) {
            fail(o, settle(o, (int)x, "hx_session_run"));
        }
    }
}

/* Moves the collectives in flight on (an all-gather that is done is
 * finished; phase 0: also the last step's deferred ones), then starts the ready
 * units in order (prog held). */
static void drive(hx_dp_overlap *o)
{
    schedule *c = o->cur;
    hx_session *s = o->s;
    if (!c->phase) settle_done(o);
    pthread_mutex_lock(&o->mu);
    for (int j = 0; j < o->next && !o->err; j++) {
        if (c->summed[j]) continue;
        bool done;
        hx_dp *d = s->dp[c->u[j].grp];
        fail(o, c->phase ? hx__dp_share_test(d, c->u[j].x, &done) : hx__dp_test(d, c->u[j].x, &done));
        if (done && c->phase) fail(o, finish(o, j, true));
        if (done) note(o, 'F', j);
        c->summed[j] = done;
    }
    for (int i = 0; i < c->n_pend;) { /* stream writers the streams have passed */
        hx_backend *acc = s->e.be[HX_DEV_ACCEL];
        int k = c->pend[i];
        bool passed;
        hx_status st = acc->event_query(acc, c->ev[k], &passed);
        if (st) fail(o, st), passed = true; /* the backend's error, reported after the phase */
        if (!passed) {
            i++;
            continue;
        }
        written(o, k);
        c->pend[i] = c->pend[--c->n_pend];
    }
    while (!o->err && o->next < c->n_units && !c->left[o->next]) {
        if (!hx__dp_can_start(s->dp[c->u[o->next].grp])) break;
        note(o, 'S', o->next);
        fail(o, start(o, o->next));
        o->next++;
    }
    pthread_mutex_unlock(&o->mu);
}

static void progress(hx_step_watch *w)
{
    hx_dp_overlap *o = (hx_dp_overlap *)w;
    if (pthread_mutex_trylock(&o->prog)) return; /* another thread drives them */
    drive(o);
    pthread_mutex_unlock(&o->prog);
}

/* Phase 0 while the last step's all-gathers are in flight: progress at
 * most every POLL_S (prog free), so that they move on while the thread
 * submits the forward's stream steps and while it waits for the streams
 * (it would sleep there, and a peer whose reader waits for this rank's
 * messages would wait with it). Returns whether some are in flight. */
static bool poll_deferred(hx_dp_overlap *o)
{
    if (!o->own_cores || hx__dp_defer_test) return false;
    if (pthread_mutex_trylock(&o->prog)) return true; /* another thread drives them */
    bool flight = o->deferred > 0 && o->cur && !o->cur->phase;
    double now = flight ? hx__now() : 0;
    if (flight && now - o->polled >= POLL_S) {
        o->polled = now;
        drive(o);
        flight = o->deferred > 0;
    }
    pthread_mutex_unlock(&o->prog);
    return flight;
}

/* Step sp's place in the phase (-1: not one of its steps). */
static int step_of(const schedule *c, const hx_step *sp)
{
    return sp >= c->steps && sp < c->steps + c->n_steps ? (int)(sp - c->steps) : -1;
}

static void host_done(hx_step_watch *w, const hx_step *sp)
{
    hx_dp_overlap *o = (hx_dp_overlap *)w;
    int k = step_of(o->cur, sp);
    if (k < 0) return;
    pthread_mutex_lock(&o->mu);
    note(o, 'D', k);
    written(o, k);
    pthread_mutex_unlock(&o->mu);
    progress(w);
}

static hx_status submitted(hx_step_watch *w, const hx_step *sp, hx_stream *s)
{
    hx_dp_overlap *o = (hx_dp_overlap *)w;
    schedule *c = o->cur;
    int k = step_of(c, sp);
    poll_deferred(o);
    if (k < 0 || !c->ev[k]) return HX_OK;
    hx_backend *acc = o->s->e.be[HX_DEV_ACCEL];
    hx_status st = acc->event_record(acc, c->ev[k], s);
    if (st) return st;
    pthread_mutex_lock(&o->mu);
    c->pend[c->n_pend++] = k;
    pthread_mutex_unlock(&o->mu);
    return HX_OK;
}

/* After the phase's host steps, until the streams have passed every
 * writer: sleeps on the earliest pending writer's event (the thread wakes
 * when its stream gets there, and takes no core meanwhile), then drives
 * progress (which sees every writer passed by then). While the last
 * step's all-gathers are in flight it polls instead (poll_deferred). */
static void drain(hx_step_watch *w)
{
    hx_dp_overlap *o = (hx_dp_overlap *)w;
    hx_backend *acc = o->s->e.be[HX_DEV_ACCEL];
    for (int noted = -1;;) {
        pthread_mutex_lock(&o->mu);
        schedule *c = o->cur;
        int k = -1;
        for (int i = 0; i < c->n_pend; i++)
            if (k < 0 || c->pend[i] < k) k = c->pend[i];
        if (k >= 0 && k != noted) note(o, 'W', k), noted = k;
        pthread_mutex_unlock(&o->mu);
        if (k < 0) return;
        bool passed = false;
        hx_status st = HX_OK;
        while (!st && !passed && poll_deferred(o)) {
            st = acc->event_query(acc, c->ev[k], &passed);
            if (!st && !passed) hx__sleep_until(hx__now() + POLL_S);
        }
        if (!st && !passed) st = acc->event_sync(acc, c->ev[k]);
        if (st) { /* the backend's error, reported after the phase */
            pthread_mutex_lock(&o->prog);
            fail(o, st);
            pthread_mutex_unlock(&o->prog);
            return;
        }
        progress(w);
    }
}

/* Every gradient's value in this run of p, per dp group (gradient order);
 * HX_ERR_UNSUPPORTED when the run does not update them all. */
static hx_status values(hx_session *s, const hx_plan *p, void **at[2])
{
    for (int grp = 0; grp < 2; grp++)
        for (int64_t k = 0; k < s->dp_n[grp]; k++) at[grp][k] = NULL;
    for (int i = 0; i < hx__plan_grad_count(p); i++) {
        void *v;
        int home;
        const hx_tensor *u = hx__plan_grad(p, i, &v, &home);
        int k = s->dp_index[u->id];
        if (k >= 0) at[k % 2][k / 2] = v;
    }
    for (int grp = 0; grp < 2; grp++)
        for (int64_t k = 0; k < s->dp_n[grp]; k++)
            if (!at[grp][k]) /* every rank must sum the same chunks */
                return hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: data parallel sums every dense "
                                 "gradient of the graph each training run; this run updates only some");
    return HX_OK;
}

/* Readies phase `phase` of p: its schedule, the run's state, the
 * engine's watch (unless the overlap is off). */
static hx_status begin(hx_dp_overlap *o, const hx_plan *p, int phase)
{
    hx_session *s = o->s;
    schedule *c = NULL;
    hx_status st = schedule_of(o, p, phase, &c);
    if (st) return st;
    for (int j = 0; j < c->n_units; j++) c->left[j] = c->u[j].writers, c->summed[j] = false;
    c->n_pend = 0;
    o->next = 0;
    o->err = HX_OK;
    o->n_log[phase] = 0;
    o->cur = c;
    for (int j = 0; j < c->n_units; j++)
        if (!c->left[j]) note(o, 'R', j);
    if (s->e.cfg.no_comm_overlap || s->e.cfg.zero_stage == 3) return HX_OK;
    s->e.watch = &o->hooks;
    progress(&o->hooks); /* the units ready at once (a group of only others' chunks) go first */
    return HX_OK;
}

/* After the phase: starts the units left, in order (each when a buffer
 * is free), finishes every unit (results written), and counts the time
 * in comm_wait_s. */
static hx_status end(hx_dp_overlap *o)
{
    hx_session *s = o->s;
    s->e.watch = NULL;
    double t0 = hx__now();
    pthread_mutex_lock(&o->prog);
    hx_status st = o->err ? hx__error(o->err, "%s", o->msg) : HX_OK;
    schedule *c = o->cur;
    if (hx__debug("zero"))
        fprintf(stderr, "hetex zero: rank %d: %d of %d %s started during the %s\n",
                hx_comm_rank(s->e.cfg.comm), o->next, c->n_units,
                c->phase ? "all-gathers" : "gradient sums", c->phase ? "updates" : "backward");
    pthread_mutex_lock(&o->mu);
    note(o, 'E', 0);
    pthread_mutex_unlock(&o->mu);
    if (!c->phase) { /* the last step's all-gathers no reader finished, before the updates */
        hx_status f = settle_all(o, "hx_session_run");
        if (!st) st = f;
    }
    for (int done = 0; o->next < c->n_units && !st;) {
        if (!hx__dp_can_start(s->dp[c->u[o->next].grp])) { /* the oldest frees its buffer */
            if (!c->summed[done]) st = finish(o, done, true);
            c->summed[done++] = true;
            continue;
        }
        pthread_mutex_lock(&o->mu);
        note(o, 'S', o->next);
        pthread_mutex_unlock(&o->mu);
        if (!(st = start(o, o->next))) o->next++;
    }
    for (int j = 0; j < o->next; j++) { /* the rest: written, or (after a failure) dropped */
        if (c->phase && o->defer && !st && !c->summed[j]) { /* or left to the next forward */
            o->deferred++;
            continue;
        }
        hx_status w = c->summed[j] && (c->phase || st) ? HX_OK : finish(o, j, !st);
        if (!st) st = w;
    }
    o->cur = NULL;
    pthread_mutex_unlock(&o->prog);
    s->stats.comm_wait_s += hx__now() - t0;
    return st;
}

/* The phase failed: the collectives in flight, waited for and dropped. */
static void abort_phase(hx_dp_overlap *o)
{
    o->s->e.watch = NULL;
    if (!o->cur) return;
    pthread_mutex_lock(&o->prog);
    for (int j = 0; j < o->next; j++)
        if (!o->cur->summed[j] || !o->cur->phase) finish(o, j, false);
    o->cur = NULL;
    pthread_mutex_unlock(&o->prog);
}

/* Before phase-0 step sp runs or is submitted: the deferred all-gathers
 * of the groups it reads finished, the time in comm_wait_s. */
static hx_status reader_ready(hx_param_gather *g, const hx_step *sp)
{
    hx_dp_overlap *o = ((reader *)g)->o;
    pthread_mutex_lock(&o->prog);
    schedule *c = o->cur;
    int k = c && !c->phase && o->deferred && hx__dp_defer_test != 1 ? step_of(c, sp) : -1;
    hx_status st = HX_OK;
    if (k >= 0 && c->read_lo[k + 1] > c->read_lo[k]) {
        double t0 = hx__now();
        for (int i = c->read_lo[k]; i < c->read_lo[k + 1] && !st; i++)
            st = settle(o, c->reads[i], "hx_session_run");
        o->s->stats.comm_wait_s += hx__now() - t0;
    }
    pthread_mutex_unlock(&o->prog);
    return st;
}

static void reader_done(hx_param_gather *g, const hx_step *sp) { (void)g, (void)sp; }

static hx_status reader_queued(hx_param_gather *g, const hx_step *sp, hx_stream *s)
{
    (void)g, (void)sp, (void)s;
    return HX_OK;
}

hx_status hx__session_dp_settle(hx_session *s, const char *fn)
{
    hx_dp_overlap *o = s->dp_overlap;
    if (!o || !o->defer) return HX_OK;
    pthread_mutex_lock(&o->prog);
    double t0 = hx__now();
    hx_status st = settle_all(o, fn);
    s->stats.comm_wait_s += hx__now() - t0;
    pthread_mutex_unlock(&o->prog);
    return st;
}

hx_status hx__session_dp_begin(hx_session *s, const hx_plan *p)
{
    hx_dp_overlap *o = s->dp_overlap;
    hx_status st = values(s, p, o->at);
    return st ? st : begin(o, p, 0);
}

hx_status hx__session_dp_grads(hx_session *s) { return end(s->dp_overlap); }

hx_status hx__session_dp_share_begin(hx_session *s, const hx_plan *p)
{
    hx_dp_overlap *o = s->dp_overlap;
    for (int grp = 0; grp < 2; grp++)
        if (s->dp[grp]) hx__session_zero_replicas(s, grp, o->vals[grp], o->val_bytes[grp]);
    return begin(o, p, 1);
}

hx_status hx__session_dp_share_end(hx_session *s) { return end(s->dp_overlap); }

void hx__session_dp_abort(hx_session *s) { abort_phase(s->dp_overlap); }

/* The device's gradient copies to the host leave bucket by bucket
 * (grad_bucket_bytes, plan_units.c): where the config leaves the size to
 * hetex (0), a bucket is at most the chunk the gradients are summed in,
 * so that a unit's gradients reach the host as the backward makes them.
 * With 4 MiB buckets a model of less than that copied every gradient
 * after its whole backward, and every unit was ready only then (bench
 * zero at 2 ranks, session 14: every group at the backward's end). Set
 * before any plan is made (hx_session_create plans after dp_setup). */
static void buckets(hx_session *s)
{
    size_t b = HX_GRAD_BUCKET_BYTES;
    if (s->e.cfg.grad_bucket_bytes) return;
    for (int grp = 0; grp < 2; grp++)
        if (s->dp[grp] && hx__dp_chunk_size(s->dp[grp]) < b) b = hx__dp_chunk_size(s->dp[grp]);
    if (b == HX_GRAD_BUCKET_BYTES) return;
    s->e.cfg.grad_bucket_bytes = b;
}

hx_status hx__session_dp_overlap_create(hx_session *s)
{
    hx_dp_overlap *o = calloc(1, sizeof *o);
    bool ok = o != NULL;
    for (int grp = 0; grp < 2 && ok; grp++) {
        size_t n = (size_t)s->dp_n[grp] + 1;
        o->at[grp] = calloc(n, sizeof(void *));
        o->vals[grp] = calloc(n, sizeof(void *));
        o->val_bytes[grp] = calloc(n, sizeof(size_t));
        ok = o->at[grp] && o->vals[grp] && o->val_bytes[grp];
    }
    if (ok && pthread_mutex_init(&o->mu, NULL)) ok = false;
    else if (ok && pthread_mutex_init(&o->prog, NULL)) {
        pthread_mutex_destroy(&o->mu);
        ok = false;
    }
    if (!ok) {
        for (int grp = 0; o && grp < 2; grp++) free(o->at[grp]), free(o->vals[grp]), free(o->val_bytes[grp]);
        free(o);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    o->hooks = (hx_step_watch){.submitted = submitted, .host_done = host_done, .progress = progress,
                               .drain = drain};
    buckets(s);
    o->s = s;
    o->g0 = s->dp[0] ? hx__dp_groups(s->dp[0]) : 0;
    o->own_cores = hx__comm_own_cores(s->e.cfg.comm);
    /* not with the disk tier: the run stores the all-gathered parameters and gives their host
     * copies back at its end */
    o->defer = (s->e.cfg.zero_stage == 1 || s->e.cfg.zero_stage == 2) && !s->e.cfg.no_comm_overlap &&
            s->e.cfg.offload.offload_param != HX_OFFLOAD_DISK;
    if (o->defer) { /* the readers of the next forward wait for the all-gathers */
        o->rd = (reader){.hooks = {.ready = reader_ready, .done = reader_done, .queued = reader_queued},
                         .o = o};
        s->e.gather = &o->rd.hooks;
    }
    s->dp_overlap = o;
    return HX_OK;
}

void hx__session_dp_overlap_free(hx_session *s)
{
    hx_dp_overlap *o = s->dp_overlap;
    if (!o) return;
    hx__session_dp_settle(s, "hx_session_free"); /* the buffers MPI writes into: waited for */
    if (o->defer) s->e.gather = NULL;
    for (int i = 0; i < o->n_sch; i++) schedule_free(s, o->sch[i]);
    free(o->sch);
    for (int grp = 0; grp < 2; grp++) free(o->at[grp]), free(o->vals[grp]), free(o->val_bytes[grp]);
    pthread_mutex_destroy(&o->mu);
    pthread_mutex_destroy(&o->prog);
    free(o);
    s->dp_overlap = NULL;
}

const hx_dp_event *hx__session_dp_log(const hx_session *s, int phase, int *n)
{
    *n = s->dp_overlap ? s->dp_overlap->n_log[phase] : 0;
    return s->dp_overlap ? s->dp_overlap->log[phase] : NULL;
}
