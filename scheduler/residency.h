/* Where the parameters and optimizer state live: the seam between the run
 * loop (session/: creation, runs, read and write, checkpoints; the
 * executor before each step) and the tier that keeps them (offload/).
 *
 * A session without a residency (e->residency NULL) keeps every one of
 * them in e->persist for its whole life, on the device or on the host
 * (offload_param=cpu streams the host ones through the plan's copies, which
 * the plan makes: hx__offload_on): every point below is then a no-op. The
 * disk tier (offload_param=disk, offload/offload_disk.h) is the one that
 * implements it; its state begins with this table.
 *
 * The tensors a residency holds have no host copy between runs
 * (e->persist NULL). A run calls run_begin, step_ready before each step it
 * runs (from any executor thread), update for its update phase (training
 * runs), run_store then run_commit once a training run has succeeded (a
 * ZeRO session's ranks agree in between: every rank keeps the step or
 * none does), and run_end whatever happened; a run that fails applies
 * nothing of itself. */
#ifndef HX_RESIDENCY_H
#define HX_RESIDENCY_H

#include "scheduler/scheduler.h"

/* Gets each held tensor and its bytes in host memory (hx_residency.visit). */
typedef hx_status (*hx_residency_visit_fn)(void *ctx, const hx_tensor *t, void *bytes);

/* fn, where a point takes it, names the public call in messages. */
struct hx_residency {
    /* Whether it holds tensor id: the session allocates no storage for it. */
    bool (*holds)(const hx_residency *r, int id);
    /* At creation, once the session's other persistent tensors are set:
     * initialises the held ones (half copies from their masters). */
    hx_status (*init)(hx_residency *r);
    /* A run of plan p starts: e->persist points at the held tensors the
     * run reads, whose bytes are in host memory once step_ready says so
     * (train: they arrive while the run goes on). Plans may need binding
     * again afterwards. */
    hx_status (*run_begin)(hx_residency *r, const hx_plan *p, bool train);
    /* Before plan step sp runs: waits until the held tensors it reads are
     * in host memory. */
    hx_status (*step_ready)(hx_residency *r, const hx_step *sp);
    /* During a run: waits until held tensor id (id < 0: every held tensor
     * the forward and backward may read) is in host memory (ZeRO: what an
     * all-gather sends or writes over). */
    hx_status (*loaded)(hx_residency *r, int id);
    /* Runs p's update phase with ex (in place of the executor's). */
    hx_status (*update)(hx_residency *r, const hx_plan *p, const hx_exec *ex);
    /* After a training run that succeeded: writes what it changed where
     * it is kept, not yet in use (a failure drops it all) ... */
    hx_status (*run_store)(hx_residency *r);
    /* ... and then keeps what run_store wrote, all at once. */
    void (*run_commit)(hx_residency *r);
    /* The run is over: host copies are given back, anything not committed
     * is dropped. */
    void (*run_end)(hx_residency *r);
    /* Held tensor t's current bytes into dst / set from data (its half
     * copies refreshed), all or nothing. */
    hx_status (*read)(hx_residency *r, const char *fn, const hx_tensor *t, void *dst);
    hx_status (*write)(hx_residency *r, const char *fn, const hx_tensor *t, const void *data);
    /* Checkpoints: every held tensor to visit, in host memory (blank:
     * zeroed, for visit to fill every byte); with write, kept afterwards,
     * all or nothing. Returns the first failure. */
    hx_status (*visit)(hx_residency *r, const char *fn, bool blank, bool write,
                       hx_residency_visit_fn visit, void *ctx);
    void (*destroy)(hx_residency *r);
};

/* Whether the session's residency holds tensor id (none: e->persist does). */
static inline bool hx__residency_holds(const hx_engine *e, int id)
{
    return e->residency && e->residency->holds(e->residency, id);
}

/* Parameters that live on other ranks (ZeRO stage 3, session/zero3.c;
 * at stages 1 and 2 the all-gathers of the last updates, finished before
 * their first reader, session/dp_overlap.c): the executor calls ready
 * before each step it runs or submits to a stream (from any executor
 * thread, for a stream step with its lock held; it returns once the
 * gathered bytes the step reads are in place and its inputs point at
 * them), done after each host step has
 * run (from the thread that ran it) and queued after each copy step it
 * submitted to a stream s of the accelerator (with the executor's lock
 * held: it must not block), so that what the step read may be freed: at
 * once after a host step, after a copy once s has passed it (an event
 * recorded on s after the copy, queried without waiting). All three are
 * thread-safe. */
struct hx_param_gather {
    hx_status (*ready)(hx_param_gather *g, const hx_step *sp);
    void (*done)(hx_param_gather *g, const hx_step *sp);
    hx_status (*queued)(hx_param_gather *g, const hx_step *sp, hx_stream *s);
};

/* What follows a phase as it runs (data parallel: session/dp_overlap.c
 * starts each chunk's gradient sum once the steps that write its
 * gradients are done, and drives the sums in flight): the executor calls
 * submitted after it has put step sp on stream s (with its lock held: no
 * waiting; a failure fails the phase), host_done after a host step ran
 * (from the thread that ran it), progress while the calling thread has no
 * host unit to run (no lock held), and drain once every unit of the phase
 * has been run or submitted, before it synchronises the streams (returns
 * once the stream steps submitted were seen done, so that their sums are
 * under way before the phase ends). All thread-safe; failures of the last
 * three are the watcher's to report. */
struct hx_step_watch {
    hx_status (*submitted)(hx_step_watch *w, const hx_step *sp, hx_stream *s);
    void (*host_done)(hx_step_watch *w, const hx_step *sp);
    void (*progress)(hx_step_watch *w);
    void (*drain)(hx_step_watch *w);
};

/* The executor, before plan step sp: what it reads is in host memory. */
static inline hx_status hx__residency_step_ready(const hx_engine *e, const hx_step *sp)
{
    hx_status st = e->residency ? e->residency->step_ready(e->residency, sp) : HX_OK;
    return !st && e->gather ? e->gather->ready(e->gather, sp) : st;
}

/* The executor, before it submits kernel step sp to a stream. */
static inline hx_status hx__gather_step_ready(const hx_engine *e, const hx_step *sp)
{
    return e->gather ? e->gather->ready(e->gather, sp) : HX_OK;
}

/* The executor, after host step sp ran. */
static inline void hx__gather_step_done(const hx_engine *e, const hx_step *sp)
{
    if (e->gather) e->gather->done(e->gather, sp);
    if (e->watch) e->watch->host_done(e->watch, sp);
}

/* The executor, after copy step sp was submitted to the accelerator's
 * stream s (its lock held). */
static inline hx_status hx__gather_step_queued(const hx_engine *e, const hx_step *sp, hx_stream *s)
{
    return e->gather ? e->gather->queued(e->gather, sp, s) : HX_OK;
}

#endif
