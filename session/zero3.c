/* ZeRO stage 3: what every rank reads of each parameter (its half copy,
 * else the f32 parameter) is sharded too (zero.c keeps only the owner's);
 * the forward and backward read the others' from transient buffers,
 * gathered chunk group by chunk group (dist/dp.c's groups: runs of
 * neighbouring chunks, at most one of each rank) as the executor reaches
 * the steps that read them
 * (scheduler/residency.h's hx_param_gather).
 *
 * A plan's schedule: a group's readers among phase 0's steps (in plan
 * order) form up to two windows, those before the backward's first step
 * and those from it on; the windows in the order of their first readers
 * are the gathers' order, the same on every rank (the ranks' plans are
 * the same). Before a step runs, the gathers up to the last window it
 * reads plus offload.prefetch_depth are started, in that order, and the
 * windows it reads are waited for; its inputs then point into their
 * buffers. A window is freed once its last reader is done: at once when
 * that was a host step; when the readers include copies to the device
 * (offload_param=cpu), once the copy stream has passed the last of them:
 * an event recorded on the stream after each such copy, queried without
 * waiting whenever a step is ready, done or queued. Before a gather would
 * hold more than the plan's prediction (planned_peak: every window freed
 * after its last reader, in plan order), the windows whose copies are
 * still in flight are waited for, oldest first; the windows a step reads
 * are gathered in any case, those prefetched beyond them only while they
 * fit, so that one host lane gathers at most the plan's peak although the
 * executor submits a stream's copies as soon as their units may go (before
 * host steps earlier in plan order; its copy units themselves go in plan
 * order: scheduler/exec.c submits every stream unit's first steps before
 * their successors). Readers of one window on two streams: freed at the
 * phase's end. No rank reads through
 * another's owner in place: the owner's own chunks are read where they are
 * kept. */
#include "session/session.h"
#include "dist/dist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct window {
    int grp;              /* the dp group (0: f32 gradients, 1: bf16) */
    int64_t g;            /* its chunk group */
    int first;            /* its first reader (phase-0 step) */
    int readers, left;    /* steps that read it; of them not run yet (this run) */
    bool stream;          /* a copy to the device reads it */
    int bind_lo, bind_hi; /* its inputs: sch->bind[bind_lo .. bind_hi) */
    size_t bytes;
    hx_event *ev;         /* stream: recorded after each copy that read it */
    char *buf;            /* this run: its buffer (NULL: not gathered or freed) */
    hx_coll *q;           /* this run: its gather in flight */
    hx_stream *on;        /* this run: the stream ev was recorded on (NULL: none) */
    bool pending;         /* this run: every reader done, copies maybe in flight */
    bool two_streams;     /* this run: read on two streams (freed at the end) */
} window;

/* Input j of step `step` reads tensor id from its window's buffer, at off. */
typedef struct binding {
    int step, j;
    size_t off;
} binding;

typedef struct schedule {
    const hx_plan *p;
    const hx_step *steps; /* phase 0's */
    int n_steps, n_win, n_bind;
    window *w;
    binding *bind;
    int *need;            /* per step: the last window it reads (-1: none) */
    int *read_lo, *reads; /* per step: the windows it reads, reads[read_lo[k] .. read_lo[k + 1]) */
    size_t planned;       /* the most bytes gathered at once in plan order */
} schedule;

enum { MAX_READS = 32 }; /* replicas one step reads */

struct hx_zero3 {
    hx_param_gather hooks; /* first: the engine's hx_param_gather is this */
    hx_session *s;
    pthread_mutex_t mu;
    schedule **sch;
    int n_sch;
    schedule *cur;  /* the run's (NULL: no run) */
    int issued;     /* this run: windows whose gathers were started */
    hx_status err;  /* this run's first failure */
    char msg[512];  /* its message */
    size_t resident, peak, planned;
};

int hx__zero3_test_break; /* tests: 1 leaves the first window's gather out */

static hx_zero3 *of(hx_param_gather *g) { return (hx_zero3 *)g; }

static void schedule_free(schedule *c, hx_backend *acc)
{
    if (!c) return;
    for (int x = 0; x < c->n_win; x++)
        if (c->w[x].ev) acc->event_destroy(acc, c->w[x].ev);
    free(c->w);
    free(c->bind);
    free(c->need);
    free(c->read_lo);
    free(c->reads);
    free(c);
}

/* Phase 1 must not read a replica this rank does not hold. */
static hx_status check_updates(const hx_session *s, const hx_plan *p)
{
    int n;
    const hx_step *st = hx__plan_steps(p, 1, &n);
    int ids[MAX_READS], js[MAX_READS], rank = hx_comm_rank(s->e.cfg.comm);
    for (int k = 0; k < n; k++) {
        if (st[k].fn && s->zero_skip[st[k].node->id]) continue;
        int m = hx__zero_replica_reads(s, &st[k], true, ids, js, MAX_READS);
        if (m < 0)
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: ZeRO stage 3: node '%s' reads "
                             "more than %d parameters", st[k].node->name, MAX_READS);
        for (int i = 0; i < m; i++)
            if (s->zero_owner[ids[i]] != rank)
                return hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: ZeRO stage 3: the update "
                                 "phase reads '%s' (node '%s'), which rank %d holds: stage 3 "
                                 "gathers parameters for the forward and backward only; use "
                                 "zero_stage 2", s->e.g->tensors[ids[i]]->name, st[k].node->name,
                                 s->zero_owner[ids[i]]);
    }
    return HX_OK;
}

/* The most bytes gathered at once when the steps run one after another in
 * plan order with this prefetch depth. */
static size_t planned_peak(const schedule *c, int depth)
{
    size_t now = 0, peak = 0;
    int issued = 0, *left = malloc(sizeof *left * (size_t)(c->n_win ? c->n_win : 1));
    if (!left) return 0;
    for (int w = 0; w < c->n_win; w++) left[w] = c->w[w].readers;
    for (int k = 0; k < c->n_steps; k++) {
        if (c->need[k] < 0) continue;
        for (; issued < c->n_win && issued <= c->need[k] + depth; issued++) now += c->w[issued].bytes;
        if (now > peak) peak = now;
        for (int i = c->read_lo[k]; i < c->read_lo[k + 1]; i++) {
            if (!--left[c->reads[i]]) now -= c->w[c->reads[i]].bytes;
        }
    }
    free(left);
    return peak;
}

/* Plan p's schedule (see the top). */
static hx_status build(hx_zero3 *z, const hx_plan *p, schedule **out)
{
    hx_session *s = z->s;
    const hx_graph *g = s->e.g;
    int rank = hx_comm_rank(s->e.cfg.comm), n;
    const hx_step *steps = hx__plan_steps(p, 0, &n);
    hx_status st = check_updates(s, p);
    if (st) return st;
    int64_t groups[2] = {s->dp[0] ? hx__dp_groups(s->dp[0]) : 0, s->dp[1] ? hx__dp_groups(s->dp[1]) : 0};
    size_t keys = (size_t)(2 * (groups[0] + groups[1]) + 1), nn = (size_t)(n ? n : 1);
    int *win_of = malloc(sizeof *win_of * keys); /* per (group, chunk group, part): its window */
    int *step_win = malloc(sizeof *step_win * nn * MAX_READS); /* per step: each read's window */
    schedule *c = calloc(1, sizeof *c);
    if (c) {
        c->p = p;
        c->steps = steps;
        c->n_steps = n;
        c->need = malloc(sizeof *c->need * nn);
        c->read_lo = calloc(nn + 1, sizeof *c->read_lo);
        c->w = calloc(keys, sizeof *c->w);
    }
    if (!win_of || !step_win || !c || !c->need || !c->read_lo || !c->w) {
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
        goto out;
    }
    for (size_t i = 0; i < keys; i++) win_of[i] = -1;
    /* the backward begins at the first step of a node made after the loss's seed */
    int backward = n;
    for (int k = 0; k < n && g->grad_seed && backward == n; k++)
        if (steps[k].fn && steps[k].node->id > g->grad_seed->id) backward = k;
    int ids[MAX_READS], js[MAX_READS], n_reads = 0, n_bind = 0;
    /* the windows in order of their first readers; each step's (once each) */
    for (int k = 0; k < n && !st; k++) {
        int m = hx__zero_replica_reads(s, &steps[k], true, ids, js, MAX_READS);
        int *xs = step_win + (size_t)k * MAX_READS;
        if (m < 0) {
            st = hx__error(HX_ERR_UNSUPPORTED, "hx_session_run: ZeRO stage 3: node '%s' reads more "
                           "than %d parameters", steps[k].node->name, MAX_READS);
            break;
        }
        c->need[k] = -1;
        for (int i = 0; i < m; i++) {
            int key = s->zero_key[ids[i]], grp = key % 2;
            int64_t cg = hx__dp_group_of(s->dp[grp], key / 2);
            size_t slot = (size_t)(2 * (grp ? groups[0] + cg : cg) + (k >= backward));
            if (win_of[slot] < 0)
                c->w[win_of[slot] = c->n_win++] = (window){
                    .grp = grp, .g = cg, .first = k, .bytes = hx__dp_group_bytes(s->dp[grp], cg)};
            int x = win_of[slot];
            window *w = &c->w[x];
            w->stream |= steps[k].dev == HX_DEV_ACCEL; /* a copy to the device */
            if (x > c->need[k]) c->need[k] = x;
            xs[i] = x;
            n_bind += s->zero_owner[ids[i]] != rank;
            bool again = false; /* a step reading two tensors of one window counts once */
            for (int q = 0; q < i && !again; q++) again = xs[q] == x;
            if (!again) {
                w->readers++;
                c->read_lo[k + 1]++;
                n_reads++;
            }
        }
    }
    for (int k = 0; k < n && !st; k++) c->read_lo[k + 1] += c->read_lo[k];
    c->reads = malloc(sizeof *c->reads * (size_t)(n_reads ? n_reads : 1));
    c->bind = malloc(sizeof *c->bind * (size_t)(n_bind ? n_bind : 1));
    int *fill = calloc((size_t)c->n_win + 1, sizeof *fill);
    if (!st && (!c->reads || !c->bind || !fill))
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    /* each step's windows, each window's inputs (counted, then placed) */
    for (int pass = 0; pass < 2 && !st; pass++) {
        for (int k = 0; k < n; k++) {
            int m = hx__zero_replica_reads(s, &steps[k], true, ids, js, MAX_READS), r = c->read_lo[k];
            const int *xs = step_win + (size_t)k * MAX_READS;
            for (int i = 0; i < m; i++) {
                int key = s->zero_key[ids[i]], x = xs[i];
                bool again = false;
                for (int q = c->read_lo[k]; q < r && !again; q++) again = c->reads[q] == x;
                if (pass == 0 && !again) c->reads[r++] = x;
                if (s->zero_owner[ids[i]] == rank) continue; /* read where it is kept */
                if (pass == 0) fill[x + 1]++;
                else c->bind[fill[x]++] = (binding){.step = k, .j = js[i],
                                                    .off = hx__dp_in_group(s->dp[key % 2], key / 2)};
            }
        }
        if (pass == 0) {
            for (int x = 0; x < c->n_win; x++) fill[x + 1] += fill[x];
            for (int x = 0; x < c->n_win; x++) c->w[x].bind_lo = fill[x], c->w[x].bind_hi = fill[x + 1];
        }
    }
    free(fill);
    hx_backend *acc = s->e.be[HX_DEV_ACCEL];
    for (int x = 0; x < c->n_win && !st; x++)
        if (c->w[x].stream) st = acc->event_create(acc, &c->w[x].ev);
    if (st) goto out;
    c->n_bind = n_bind;
    c->planned = planned_peak(c, s->e.cfg.offload.prefetch_depth);
    if (hx__debug("zero"))
        fprintf(stderr, "hetex zero: rank %d: stage 3: a plan of %d steps reads %d gathered windows "
                "(the backward from step %d), prefetch depth %d: at most %zu bytes gathered at once "
                "in plan order\n", rank, n, c->n_win, backward, s->e.cfg.offload.prefetch_depth,
                c->planned);
out:
    free(win_of);
    free(step_win);
    if (st) schedule_free(c, s->e.be[HX_DEV_ACCEL]);
    else *out = c;
    return st;
}

/* Records the run's first failure (lock held). */
static void fail(hx_zero3 *z, hx_status st)
{
    if (z->err || !st) return;
    z->err = st;
    snprintf(z->msg, sizeof z->msg, "%s", hx_last_error());
}

/* Tensor i is a parameter of window w's group that this rank holds. */
static bool owned_in(const hx_session *s, const window *w, int i, int rank)
{
    int key = s->zero_key[i];
    return key >= 0 && key % 2 == w->grp && s->zero_owner[i] == rank &&
            hx__dp_group_of(s->dp[w->grp], key / 2) == w->g;
}

/* Starts window x's gather (lock held): this rank's parameters into its
 * block (with the disk tier, once they are read), the others' from their
 * owners; the readers' inputs point into it. */
static void issue(hx_zero3 *z, int x)
{
    hx_session *s = z->s;
    window *w = &z->cur->w[x];
    int rank = hx_comm_rank(s->e.cfg.comm);
    for (int i = 0; i < s->e.g->n && s->e.residency; i++) /* the disk tier: this rank's read */
        if (owned_in(s, w, i, rank) && !z->err) fail(z, s->e.residency->loaded(s->e.residency, i));
    if (z->err) return;
    w->buf = calloc(1, w->bytes ? w->bytes : 1);
    if (!w->buf) {
        fail(z, hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: ZeRO stage 3: out of host memory "
                          "for %zu bytes of gathered parameters", w->bytes));
        return;
    }
    z->resident += w->bytes;
    if (z->resident > z->peak) z->peak = z->resident;
    for (int i = 0; i < s->e.g->n; i++) { /* this rank's parameters of the group */
        if (!owned_in(s, w, i, rank)) continue;
        int key = s->zero_key[i];
        memcpy(w->buf + hx__dp_in_group(s->dp[w->grp], key / 2), s->e.persist[i],
               hx_tensor_nbytes(s->e.g->tensors[i]));
    }
    for (int b = w->bind_lo; b < w->bind_hi; b++) {
        const binding *d = &z->cur->bind[b];
        z->cur->steps[d->step].in[d->j] = w->buf + d->off;
    }
    if (hx__zero3_test_break == 1 && x == 0) return; /* the break the tests show failing */
    fail(z, hx__dp_gather_start(s->dp[w->grp], w->g, w->buf, &w->q));
}

/* Frees window x's buffer (lock held; its gather waited for). */
static void release(hx_zero3 *z, int x)
{
    window *w = &z->cur->w[x];
    if (!w->buf) return;
    for (int b = w->bind_lo; b < w->bind_hi; b++) {
        const binding *d = &z->cur->bind[b];
        z->cur->steps[d->step].in[d->j] = NULL;
    }
    free(w->buf);
    w->buf = NULL;
    w->pending = false;
    z->resident -= w->bytes;
}

/* Window x's readers are all done (lock held): freed now when none was a
 * copy, else once its event says the copies are (reclaim). */
static void finished(hx_zero3 *z, int x)
{
    window *w = &z->cur->w[x];
    if (!w->on) release(z, x);
    else if (!w->two_streams) w->pending = true;
}

/* Frees the pending windows whose copies the stream has passed (lock held). */
static void reclaim(hx_zero3 *z)
{
    hx_backend *acc = z->s->e.be[HX_DEV_ACCEL];
    for (int x = 0; x < z->issued && !z->err; x++) {
        window *w = &z->cur->w[x];
        bool copied = false;
        if (!w->pending) continue;
        fail(z, acc->event_query(acc, w->ev, &copied));
        if (copied && !z->err) release(z, x);
    }
}

/* Room for `bytes` more within the plan's peak (lock held): the pending
 * windows waited for, oldest first, while they are needed for it. */
static void make_room(hx_zero3 *z, size_t bytes)
{
    hx_backend *acc = z->s->e.be[HX_DEV_ACCEL];
    reclaim(z);
    for (int x = 0; x < z->issued && !z->err && z->resident + bytes > z->cur->planned; x++) {
        window *w = &z->cur->w[x];
        if (!w->pending) continue;
        fail(z, acc->event_sync(acc, w->ev));
        if (!z->err) release(z, x);
    }
}

static hx_status ready(hx_param_gather *g, const hx_step *sp)
{
    hx_zero3 *z = of(g);
    pthread_mutex_lock(&z->mu);
    schedule *c = z->cur;
    int k = c ? (int)(sp - c->steps) : -1;
    if (!c || k < 0 || k >= c->n_steps || c->need[k] < 0) {
        pthread_mutex_unlock(&z->mu);
        return HX_OK;
    }
    /* the windows it reads, and (prefetch) the next ones while they fit the
     * plan's peak: a stream's copies may be submitted before host steps
     * that come earlier in plan order, whose windows are still held */
    int depth = z->s->e.cfg.offload.prefetch_depth;
    for (; !z->err && z->issued < c->n_win && z->issued <= c->need[k] + depth; z->issued++) {
        size_t bytes = c->w[z->issued].bytes;
        make_room(z, bytes);
        if (z->issued > c->need[k] && z->resident + bytes > c->planned) break;
        if (!z->err) issue(z, z->issued);
    }
    for (int i = c->read_lo[k]; i < c->read_lo[k + 1] && !z->err; i++) {
        window *w = &c->w[c->reads[i]];
        hx_status st = hx__coll_wait(w->q);
        w->q = NULL;
        fail(z, st);
    }
    hx_status st = z->err;
    if (st) hx__error(st, "%s", z->msg);
    pthread_mutex_unlock(&z->mu);
    return st;
}

static void done(hx_param_gather *g, const hx_step *sp)
{
    hx_zero3 *z = of(g);
    pthread_mutex_lock(&z->mu);
    schedule *c = z->cur;
    int k = c ? (int)(sp - c->steps) : -1;
    for (int i = c && k >= 0 && k < c->n_steps ? c->read_lo[k] : 0;
         c && k >= 0 && k < c->n_steps && i < c->read_lo[k + 1]; i++) {
        window *w = &c->w[c->reads[i]];
        if (!--w->left) finished(z, c->reads[i]);
    }
    if (c) reclaim(z);
    pthread_mutex_unlock(&z->mu);
}

static hx_status queued(hx_param_gather *g, const hx_step *sp, hx_stream *s)
{
    hx_zero3 *z = of(g);
    hx_backend *acc = z->s->e.be[HX_DEV_ACCEL];
    pthread_mutex_lock(&z->mu);
    schedule *c = z->cur;
    int k = c ? (int)(sp - c->steps) : -1;
    if (c && k >= 0 && k < c->n_steps) {
        for (int i = c->read_lo[k]; i < c->read_lo[k + 1] && !z->err; i++) {
            window *w = &c->w[c->reads[i]];
            if (w->on && w->on != s) w->two_streams = true;
            w->on = s;
            fail(z, acc->event_record(acc, w->ev, s));
            if (!--w->left) finished(z, c->reads[i]);
        }
        reclaim(z);
    }
    hx_status st = z->err;
    if (st) hx__error(st, "%s", z->msg);
    pthread_mutex_unlock(&z->mu);
    return st;
}

/* Plan p's schedule, built on first use. */
static hx_status schedule_of(hx_zero3 *z, const hx_plan *p, schedule **out)
{
    for (int i = 0; i < z->n_sch; i++)
        if (z->sch[i]->p == p) {
            *out = z->sch[i];
            return HX_OK;
        }
    schedule **grown = realloc(z->sch, sizeof *grown * (size_t)(z->n_sch + 1));
    if (!grown) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    z->sch = grown;
    hx_status st = build(z, p, out);
    if (st) return st;
    z->sch[z->n_sch++] = *out;
    if ((*out)->planned > z->planned) z->planned = (*out)->planned;
    return HX_OK;
}

hx_status hx__session_zero3_plans(hx_session *s)
{
    schedule *c;
    hx_status st = HX_OK;
    for (int i = 0; s->zero3 && i < s->e.n_plans && !st; i++) st = schedule_of(s->zero3, s->e.plans[i], &c);
    return st;
}

hx_status hx__session_zero3_begin(hx_session *s, const hx_plan *p)
{
    hx_zero3 *z = s->zero3;
    if (!z) return HX_OK;
    schedule *c = NULL;
    hx_status st = schedule_of(z, p, &c);
    if (st) return st;
    for (int x = 0; x < c->n_win; x++) {
        window *w = &c->w[x];
        w->left = w->readers;
        w->on = NULL;
        w->pending = w->two_streams = false;
    }
    z->issued = 0;
    z->err = HX_OK;
    z->cur = c;
    return HX_OK;
}

hx_status hx__session_zero3_end(hx_session *s)
{
    hx_zero3 *z = s->zero3;
    if (!z || !z->cur) return HX_OK;
    pthread_mutex_lock(&z->mu);
    for (int x = 0; x < z->issued; x++) { /* a failed run may leave gathers in flight */
        hx_status st = hx__coll_wait(z->cur->w[x].q);
        z->cur->w[x].q = NULL;
        fail(z, st);
        release(z, x);
    }
    if (!z->err && z->issued < z->cur->n_win)
        fail(z, hx__error(HX_ERR_INTERNAL, "hx_session_run: ZeRO stage 3: %d of %d windows "
                          "were gathered", z->issued, z->cur->n_win));
    hx_status st = z->err;
    if (st) hx__error(st, "%s", z->msg);
    z->cur = NULL;
    pthread_mutex_unlock(&z->mu);
    return st;
}

hx_status hx__session_zero3_create(hx_session *s)
{
    hx_zero3 *z = calloc(1, sizeof *z);
    if (!z || pthread_mutex_init(&z->mu, NULL)) {
        free(z);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    z->hooks = (hx_param_gather){.ready = ready, .done = done, .queued = queued};
    z->s = s;
    s->zero3 = z;
    s->e.gather = &z->hooks;
    return HX_OK;
}

void hx__session_zero3_free(hx_session *s)
{
    hx_zero3 *z = s->zero3;
    if (!z) return;
    for (int i = 0; i < z->n_sch; i++) schedule_free(z->sch[i], s->e.be[HX_DEV_ACCEL]);
    free(z->sch);
    pthread_mutex_destroy(&z->mu);
    free(z);
    s->zero3 = NULL;
    s->e.gather = NULL;
}

void hx__session_zero3_stats(const hx_session *s, size_t *peak, size_t *planned)
{
    const hx_zero3 *z = s->zero3;
    *peak = z ? z->peak : 0;
    *planned = z ? z->planned : 0;
}
