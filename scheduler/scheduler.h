/* Scheduler internals: execution plans (order + static memory plan) and
 * the engine they are built for and run on. What launchers are given
 * (hx_exec, hx_launch_fn) is the backend's: backend/backend.h. */
#ifndef HX_SCHED_H
#define HX_SCHED_H

#include "backend/backend.h"
#include "graph/graph.h"

#include <stdio.h>

/* Devices of a session: 0 the host (cpu backend), 1 the accelerator. */
enum { HX_DEV_HOST = 0, HX_DEV_ACCEL = 1, HX_NDEV = 2 };

/* A kernel launch (fn set) or a copy (fn NULL) of `node`'s value from
 * device src_dev to device dev. */
typedef struct hx_step {
    hx_launch_fn fn;
    const hx_tensor *node;
    void *out;
    void **in; /* node->n_src pointers; a copy: its source */
    int dev;
    int src_dev;
} hx_step;

/* A plan for one (set of fetches, train flag): the steps to run in order,
 * the copies between the devices, the units the executor runs them in, and
 * where every transient tensor lives in the engine's arenas. A complete
 * type only inside scheduler/ (scheduler/plan.h): other folders get plans
 * from the engine (hx__engine_plan) and read them through the functions
 * below. */
typedef struct hx_plan hx_plan;

/* A unit's times in the runs the executor timed (exec.c, while the
 * engine's time_units is set). A unit's time in a run is what its steps
 * take where they run, waits for other units left out: a host unit's
 * kernels on the host clock, a stream unit's work between brackets on its
 * stream (the backend's time_begin/time_end: device time, as the trace's
 * spans). */
typedef struct hx_unit_clock {
    double run_s;  /* the run in progress */
    double best_s; /* the fastest timed run's */
    int runs;      /* timed runs that ran the unit */
} hx_unit_clock;

typedef struct hx_exec_state hx_exec_state;
typedef struct hx_trace hx_trace;
typedef struct hx_trace_lane hx_trace_lane;
typedef struct hx_cpu_budget hx_cpu_budget;
typedef struct hx_dpu hx_dpu;
typedef struct hx_residency hx_residency;
typedef struct hx_param_gather hx_param_gather;
typedef struct hx_step_watch hx_step_watch;

/* What a session's plans are built for and run on: the placed graph, the
 * devices with their streams, the host lanes and the persistent storage.
 * The session (session/) owns one and hands it to the scheduler and the
 * offload, which never see the session itself. */
typedef struct hx_engine {
    hx_graph *g;
    hx_session_config cfg;
    int nthreads;
    hx_backend *be[HX_NDEV]; /* be[HX_DEV_ACCEL] NULL: no accelerator */
    hx_stream *stream[HX_NDEV]; /* host: the calling thread's; accel: its compute stream */
    hx_stream *copy_stream[2];  /* accel: h2d, d2h */
    bool accel_on_host;         /* the accelerator's kernels use host cores (emu) */
    hx_cpu_budget *budget;
    hx_trace *trace;
    hx_exec_state *exec; /* host worker threads and run state (exec.c) */
    hx_target *target;   /* per tensor id: placement */
    hx_lowered *lowered; /* per tensor id: how a device node runs (graph.h's lowering);
                            NULL: every node as itself */
    hx_place_why *why;
    void **persist; /* per tensor id: storage of params, constants, state */
    size_t persist_bytes[HX_NDEV];
    char *arena[HX_NDEV];
    size_t arena_bytes[HX_NDEV];
    hx_dpu *dpu;     /* the delayed update, once one ran */
    hx_offload_report offload_report; /* auto_offload's decision and prediction (offload.c) */
    unsigned bind_gen;                /* bumped when persist pointers move (the disk tier's resident
                          region): plans bound before then rebind before their next run */
    hx_residency *residency; /* where params and state live outside e->persist (NULL: nowhere);
                                offload_param=disk: the disk tier */
    hx_plan **plans; /* built so far, one per (fetch set, train flag): hx__engine_plan */
    int n_plans;
    /* the gradient scan (scan.c): per update node, its gradient's sum of
     * squares (scan_dev: written there for device gradients) */
    double *scan_dev, *scan_host;
    int n_scan;
    bool time_units; /* the executor times each unit it runs (hx_unit_clock) */
    /* emu's simulated host (hx_emu_host_cost): when it is next free */
    _Atomic double sim_host_free;
    /* seconds the dense updates on the host took (update.c; hx_train_stats) */
    _Atomic double host_update_s;
    /* per tensor id (NULL: none): an update node that phase 1 leaves out
     * (data parallel ZeRO: another rank owns its parameter); its copies
     * still run */
    const bool *update_skip;
    /* per tensor id (NULL: none): a parameter or optimizer state that
     * another data-parallel rank holds (ZeRO's shards of the others): no
     * residency keeps it, and storage for it lasts only until the shards
     * are set up (session/zero.c) */
    const bool *remote;
    /* parameters other ranks hold, gathered for the phase-0 steps that read
     * them (ZeRO stage 3: residency.h's hx_param_gather); NULL: none */
    hx_param_gather *gather;
    /* follows the phase being run step by step (data parallel's gradient
     * sums during the backward: residency.h's hx_step_watch); NULL: none */
    hx_step_watch *watch;
    /* the host update threads' cores (hx_session_config.pin_update_threads,
     * pin.c); NULL: not pinned */
    struct hx_pin *pin;
} hx_engine;

/* Pinning the host update threads (pin.c). Slot j of a session's n_threads
 * is bound to core hx__pin_core(p, j): the cores sched_getaffinity allows,
 * local_rank's share of them over the local_size ranks on this host (rank:
 * for messages). Fails: HX_ERR_OUT_OF_MEMORY. */
typedef struct hx_pin hx_pin;
hx_status hx__pin_create(int nthreads, int local_rank, int local_size, int rank, hx_pin **out);
void hx__pin_free(hx_pin *p);
int hx__pin_slots(const hx_pin *p);
int hx__pin_core(const hx_pin *p, int slot);
/* Around a host update launched with nthreads kernel threads, from the
 * thread that launches it: enter binds each thread of the team to a
 * free slot's core; leave records what each saw and restores its mask. */
void hx__pin_enter(hx_pin *p, int nthreads);
void hx__pin_leave(hx_pin *p, int nthreads);
/* What the last thread that held slot j saw just after its update's
 * kernel (tests): the core it ran on (sched_getcpu; -1 before any),
 * its affinity mask's lowest core and size, and how many updates ran
 * on the slot. */
typedef struct hx_pin_seen {
    _Atomic int cpu, mask_first, mask_count;
    _Atomic long runs;
} hx_pin_seen;
const hx_pin_seen *hx__pin_seen(const hx_pin *p, int slot);

/* Builds the plan for these fetch ids (sorted, unique) and flag. */
hx_status hx__plan_build(hx_engine *e, const int *fetch_ids, int n_fetch, bool train,
                         hx_plan **out);
void hx__plan_free(const hx_engine *e, hx_plan *p);
/* Plan p's steps of phase 0 (forward and backward) or 1 (the updates and
 * their copies), in order: *n of them; their in and out are set once p has
 * been readied for a run (hx__engine_feed). */
const hx_step *hx__plan_steps(const hx_plan *p, int phase, int *n);
/* The launch contexts of p's phases: run's, with the kernel threads of
 * phase ph's host lanes in ex[ph][0] and of the device in ex[ph][1]. */
void hx__plan_contexts(const hx_plan *p, const hx_exec *run, hx_exec ex[2][2]);
/* Where tensor id's value is on device dev in a run of p: in dev's arena,
 * else its persistent storage (NULL: held by the residency). */
void *hx__plan_locate(const hx_engine *e, const hx_plan *p, int dev, int id);
/* What a run of p holds and moves on the accelerator (offload's
 * predictions). */
typedef struct hx_plan_sizes {
    size_t arena_bytes; /* its transient arena */
    size_t copy_bytes;  /* every copy, per run */
    int n_act;          /* activations copied to the host and back per run */
    size_t act_bytes;   /* their bytes, each way */
    int n_recomputed;   /* recomputed ops it runs (offload.recompute) */
    double recompute_flops; /* their work (hx__op_flops), per run */
    size_t workspace_bytes; /* the most scratch one lowered node takes (graph.h's
                               hx__lowered_workspace): the accelerator's stream
                               scratch grows to it on the node's first run */
} hx_plan_sizes;
hx_plan_sizes hx__plan_sizes(const hx_plan *p);
/* p's units, in order (phase 0's first), as reports see them, and unit
 * u's step i (i < its n_steps). */
typedef struct hx_unit_view {
    hx_unit_lane lane;
    int phase, n_steps;
    hx_unit_clock clock;
} hx_unit_view;
int hx__plan_n_units(const hx_plan *p);
hx_unit_view hx__plan_unit(const hx_plan *p, int u);
const hx_step *hx__plan_unit_step(const hx_plan *p, int u, int i);

/* run.c: the run loop's plan work on the engine. The cached plan for these
 * fetch ids (sorted and made unique in place) and flag, built on first use,
 * with the arenas grown to it and its host lanes reserved; fn names the
 * public call in a device OOM's report. */
hx_status hx__engine_plan(hx_engine *e, int *ids, int n, bool train, const char *fn, hx_plan **out);
/* Readies plan p for a run: binds it again if the arenas or the persistent
 * storage moved since, then puts every input where p reads it: a host feed
 * into the host arena (a copy unit takes it to the device if device ops
 * read it), a device feed (on_dev[j]: feed j, of tensor feed_t[j], is
 * device memory) straight into the device ops' input slots, its copy
 * skipped. Checks every feed before changing anything. */
hx_status hx__engine_feed(hx_engine *e, hx_plan *p, const hx_feed *feeds,
                          const hx_tensor *const *feed_t, const bool *on_dev, int n_feeds);
/* hx_session_memory_stats of the engine's storage, plans and device. */
void hx__engine_memory_stats(const hx_engine *e, hx_memory_stats *out);
void hx__engine_free_plans(hx_engine *e);
/* A device OOM (other statuses pass through) reported with where it
 * happened (fn), the device's persistent/transient split, and in place of
 * the pools' generic advice the options that would lower what occupies
 * this session's device and are not on yet: parameter offload when
 * parameters or optimizer state live there, activation offload and a
 * smaller batch when activations do (activations: the failed request was
 * one, the arena), auto_offload, a larger cap. */
hx_status hx__engine_device_report(const hx_engine *e, const char *fn, hx_status st, bool activations);

/* scan.c: the gradient scan between the phases. Its sums, one per update
 * node, on the host and, for device gradients, on the device. */
hx_status hx__scan_alloc(hx_engine *e);
void hx__scan_free(hx_engine *e);
/* The gradients p's updates read, one per scan entry (plan order, i <
 * hx__plan_grad_count): the update node, and where the gradient's value is
 * (*at, on device *home), which data parallel sums over the ranks before
 * the scan. */
int hx__plan_grad_count(const hx_plan *p);
const hx_tensor *hx__plan_grad(const hx_plan *p, int i, void **at, int *home);
/* Scan entry i's sum of squares in the last hx__scan_grads of p. */
double hx__scan_sum(const hx_engine *e, const hx_plan *p, int i);
/* Scans the gradient of every update of p (plan order) in one pass: its
 * sum of squares, device gradients on the device by HX_KERNEL_SUMSQ (the
 * sums copied back) while host gradients are summed here, with ex, phase
 * 1's launch contexts (host lanes, device). *bad: the first update whose
 * gradient holds an Inf or NaN (NULL if none); *sumsq: the sum over the
 * dense parameters' gradients (embedding tables are left out of the norm,
 * as sparse gradients are in the frameworks), in plan order. */
hx_status hx__scan_grads(hx_engine *e, const hx_plan *p, const hx_exec ex[2],
                         const hx_tensor **bad, double *sumsq);

/* exec.c: runs phase `phase` of plan p (readied: hx__engine_feed) with
 * these launch contexts (kernels give the same bits at any thread count,
 * so a lane's share of the threads changes no result), leaving out the
 * copy units its device feeds made unnecessary. Returns the first error of
 * any lane with its message, after every lane has stopped and every stream
 * is synchronised. */
hx_status hx__exec_phase(hx_engine *e, const hx_plan *p, int phase, const hx_exec *ex_host,
                         const hx_exec *ex_dev);
/* Makes sure `lanes` host lanes exist (the calling thread is one). */
hx_status hx__exec_reserve(hx_engine *e, int lanes);
hx_status hx__exec_create(hx_engine *e);
void hx__exec_free(hx_engine *e);
/* The calling thread's trace lane (NULL: no trace). */
hx_trace_lane *hx__exec_lane(const hx_engine *e);

/* update.c: runs plan step sp (a host kernel) with inputs in (sp->in, or
 * the caller's in their place) on the calling thread, through the host
 * backend's launch on stream (counted in its launches), recorded on lane
 * (NULL: not traced) with its op and node name. *cores: what the caller
 * took from the budget (hx__budget_take); with emu's simulated host costs
 * they are handed back while the kernel sleeps the rest of its floor, and
 * *cores is what was taken again after. */
hx_status hx__host_launch(hx_engine *e, hx_stream *stream, hx_trace_lane *lane, const hx_exec *ex,
                          const hx_step *sp, void *const *in, int *cores);
/* The simulated host time of node under emu's hx_emu_host_cost (0: none). */
double hx__sim_host_floor(const hx_engine *e, const hx_tensor *node);
/* An update step outside the executor (the delayed update, the disk
 * tier's): hx__host_launch with ex->nthreads cores taken from the
 * session's budget around it. */
hx_status hx__update_step(hx_engine *e, hx_stream *stream, hx_trace_lane *lane, const hx_exec *ex,
                          const hx_step *sp, void *const *in);

/* Copies between a device's memory and the host through its backend,
 * synchronously (host memory: memcpy). */
hx_status hx__engine_copy_out(hx_engine *e, int dev, void *dst, const void *src, size_t n);
hx_status hx__engine_copy_in(hx_engine *e, int dev, void *dst, const void *src, size_t n);

/* Gradient copies to the host per bucket when hx_session_config leaves
 * grad_bucket_bytes 0. */
#define HX_GRAD_BUCKET_BYTES ((size_t)4 << 20)

/* Device index of a tensor's home (where it is produced or stored). */
static inline int hx__dev_of(const hx_engine *e, int id)
{
    return e->target[id] == HX_TARGET_DEVICE ? HX_DEV_ACCEL : HX_DEV_HOST;
}
/* plan_report.c: a plan of e described to people. */
void hx__plan_stats(const hx_plan *p, hx_placement_stats *out); /* all but n_fallbacks */
void hx__plan_write_dot(FILE *f, const hx_engine *e, const hx_plan *p);
void hx__plan_write_summary(FILE *f, const hx_engine *e, const hx_plan *p);

/* Whether the session's plans stream host parameters to the device per
 * step (offload_param cpu or disk, with an accelerator). */
static inline bool hx__offload_on(const hx_engine *e)
{
    return e->cfg.offload.offload_param != HX_OFFLOAD_NONE && e->be[HX_DEV_ACCEL];
}

/* Whether the session's plans copy far-read device activations to the
 * host and back (offload_activations=cpu). */
static inline bool hx__offload_activations_on(const hx_engine *e)
{
    return e->cfg.offload.offload_activations != HX_OFFLOAD_NONE && e->be[HX_DEV_ACCEL];
}

/* Whether the session's plans recompute the blocks the graph marks
 * (offload.recompute): gradients then read the recomputed values. */
static inline bool hx__recompute_on(const hx_engine *e) { return e->cfg.offload.recompute; }
/* The value node t reads as its source j in this session's plans, of
 * hx__n_read(e, t) sources, running as kernel op hx__run_op(e, t): the
 * recompute switch and the lowering decide (graph.h). */
static inline const hx_tensor *hx__read(const hx_engine *e, const hx_tensor *t, int j)
{
    return hx__read_src(t, j, hx__recompute_on(e), e->lowered);
}
static inline int hx__n_reads(const hx_engine *e, const hx_tensor *t)
{
    return hx__n_read(t, e->lowered);
}

/* A tensor that lives across steps on the host (param, state, constant):
 * what the offload streams to the device in chunks. */
static inline bool hx__offload_streamed(const hx_tensor *t)
{
    return t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE ||
           t->kind == HX_TENSOR_CONSTANT;
}

/* Fills a parameter or state tensor from its initialiser. */
hx_status hx__param_init(const hx_tensor *t, void *data, uint64_t session_seed, int nthreads);

/* The rest of scheduler/ that other folders use: the host core budget,
 * the trace, the memory trace of a plan, and where parameters live. */
#include "scheduler/cpu_budget.h"
#include "scheduler/plan_memtrace.h"
#include "scheduler/residency.h"
#include "scheduler/trace.h"

/* device_hooks.c: the trace (NULL: none) as a device's tracing hooks, and
 * with the core budget (NULL: none) as an emu device's hooks. */
hx_trace_hooks hx__trace_hooks(hx_trace *trace);
hx_emu_hooks hx__emu_hooks(hx_cpu_budget *budget, hx_trace *trace);

#endif
