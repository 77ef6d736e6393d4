/* Scheduler internals: execution plans (order + static memory plan) and
 * the session that owns them. What launchers are given (hx_exec,
 * hx_launch_fn) is the backend's: backend/backend.h. */
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

/* Lanes a unit runs on: host threads, or one of the accelerator's streams
 * (compute, and one copy stream per direction). */
enum { HX_LANE_HOST, HX_LANE_COMPUTE, HX_LANE_H2D, HX_LANE_D2H, HX_NLANES };

/* A unit of concurrent execution: the steps of one subgraph in one phase
 * (0: forward and backward, 1: optimizer updates), or one copy. Units are
 * numbered in a topological order of their DAG, phase 0 first. */
typedef struct hx_unit {
    int lane;               /* HX_LANE_* */
    int phase;
    int first, n_steps;     /* its steps, in order: plan->unit_steps[first ..] */
    int first_pred, n_pred; /* units of its phase it waits for: plan->links[first_pred ..] */
    int first_succ, n_succ; /* units of its phase that wait for it */
    int fed_input;          /* a copy of an input to the device: its tensor id; else -1 */
} hx_unit;

/* A plan for one (set of fetches, train flag): the nodes to run in order and
 * where every transient tensor lives in the session's arena. */
typedef struct hx_plan {
    int *key; /* sorted unique fetch ids, then the train flag */
    int key_len;
    int n_steps;
    int first_update; /* steps from here on are phase 1: optimizer updates and their copies */
    hx_step *steps;   /* op nodes in creation order, each copy before its first reader */
    void **in_pool;
    /* offset[dev * n + id]: byte offset of tensor id's value (or copy) in
     * device dev's arena, -1 if it has none there */
    int64_t *offset;
    size_t arena_bytes[HX_NDEV];
    size_t transient_tensor_bytes[HX_NDEV];
    int *inputs; /* ids of the input tensors the plan reads */
    int n_inputs;
    int n_copies, n_h2d, n_d2h;
    size_t copy_bytes; /* per run */
    hx_partition part;
    const char *bound_to[HX_NDEV]; /* arenas the step pointers were resolved against */
    unsigned bound_gen;            /* the engine's bind_gen then */

    /* concurrent execution */
    int n_units;
    hx_unit *units;
    int first_unit[3];   /* phase p's units are [first_unit[p], first_unit[p + 1]) */
    int *unit_steps;     /* step indices, unit after unit */
    int *links;          /* pred and succ lists */
    int *link_at;        /* a pred: the position in its unit of the first step that
                            needs it (preds are in that order); a succ: where this
                            unit is in the succ's preds */
    int n_links;
    hx_event **done;     /* per unit on a stream: recorded after its last step (NULL: host) */
    int host_lanes[2];   /* per phase: CPU units that may run at once (<= n_threads) */
    int threads[2][2];   /* per phase: kernel threads of a host lane [0] and of the device [1] */
    /* gradients scanned before the updates, at their home device */
    int n_scan;
    const hx_tensor **scan_update; /* per update step, in order */
    void **scan_at;                /* bound: its gradient's value at the gradient's home */
    /* device-read slots of inputs copied to the device: in_pool[dev_in_slot[i]]
     * holds input dev_in_id[i]'s device value (rebound per run for device feeds) */
    int n_dev_in;
    int *dev_in_slot, *dev_in_id;
    /* per input (as in inputs[]): its copy unit to the device (-1: none), and
     * why the host needs its value (a CPU op reading it, or the input itself
     * when it is fetched; NULL: the host does not) */
    int *input_copy_unit;
    const hx_tensor **input_host_use;
    bool *skip; /* per unit, this run: a copy a device feed made unnecessary */
    int *scan_home;      /* per scan entry: the device whose copy of the gradient is scanned */
    /* copies: where each step's inputs come from and where each copy lands
     * (a tensor may be copied to a device more than once: offload) */
    int *src_step;       /* per in_pool slot: the copy step that produced it, -1: none */
    int64_t *step_offset;/* per step: a copy's byte offset in its destination's arena */
    char *step_role;     /* per step: HX_ROLE_* (a parameter streamed in, a gradient
                            sent back as soon as it is made, other) */
    /* parameter and activation offload (hx_offload_config; NULL / 0 without them) */
    int *step_chunk;     /* per step: the chunk (segment) current when it was ordered */
    int n_chunks;
    size_t streamed_bytes; /* parameter bytes copied to the device per run */
    int n_act;           /* activations copied to the host and back per run */
    size_t act_bytes;    /* their bytes, each way */
} hx_plan;

/* What a step is to the offload: a parameter (state, constant) copied to
 * the device in a chunk, a gradient copied back to the host as soon as it
 * is complete, an activation copied to the host after it is made because a
 * device op reads it again much later, and that activation copied back. */
enum { HX_ROLE_OTHER, HX_ROLE_STREAM_IN, HX_ROLE_GRAD_OUT, HX_ROLE_ACT_OUT, HX_ROLE_ACT_IN };
/* The role's name for people ("activation out"; NULL: HX_ROLE_OTHER). */
const char *hx__copy_role_name(char role);

typedef struct hx_exec_state hx_exec_state;
typedef struct hx_trace hx_trace;
typedef struct hx_trace_lane hx_trace_lane;
typedef struct hx_cpu_budget hx_cpu_budget;
typedef struct hx_dpu hx_dpu;
typedef struct hx_residency hx_residency;

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
} hx_engine;

/* Builds the plan for these fetch ids (sorted, unique) and flag. */
hx_status hx__plan_build(hx_engine *e, const int *fetch_ids, int n_fetch, bool train,
                         hx_plan **out);
void hx__plan_free(const hx_engine *e, hx_plan *p);
/* Resolves step pointers against the session's current arena. */
void hx__plan_bind(hx_engine *e, hx_plan *p);

/* plan_units.c: groups the steps into units, orders them, links them, and
 * fills *reach (n_units rows of hx__reach_words(n_units) words): bit v of
 * row u is set when v == u or v finishes only after u has finished
 * (through the unit DAG or the barrier between the phases). A unit's steps
 * before the first one that reads a pred's output may run before that
 * pred finishes. Also sets the lanes' thread counts. */
hx_status hx__plan_units(const hx_engine *e, hx_plan *p, uint64_t **reach);
static inline int hx__reach_words(int n_units) { return (n_units + 63) / 64; }
/* The first position of unit U's steps that run only after unit u has
 * finished (U's n_steps: none do). */
int hx__unit_after(const hx_plan *p, const uint64_t *reach, int U, int u);
static inline bool hx__reaches(const uint64_t *reach, int words, int u, int v)
{
    return reach[(size_t)u * words + v / 64] >> (v % 64) & 1;
}

/* exec.c: runs phase `phase` of plan p (steps bound) with these launch
 * contexts (kernels give the same bits at any thread count, so a lane's
 * share of the threads changes no result); skip_unit (NULL: none) marks
 * copy units not to run this time (device feeds). Returns the first error
 * of any lane with its message, after every lane has stopped and every
 * stream is synchronised. */
hx_status hx__exec_phase(hx_engine *e, const hx_plan *p, int phase, const hx_exec *ex_host,
                         const hx_exec *ex_dev, const bool *skip_unit);
/* Makes sure `lanes` host lanes exist (the calling thread is one). */
hx_status hx__exec_reserve(hx_engine *e, int lanes);
hx_status hx__exec_create(hx_engine *e);
void hx__exec_free(hx_engine *e);
/* The calling thread's trace lane (NULL: no trace). */
hx_trace_lane *hx__exec_lane(const hx_engine *e);

/* update.c: runs plan step sp (a host kernel) with inputs in (sp->in, or
 * the caller's in their place) on the calling thread, through the host
 * backend's launch on stream (counted in its launches), recorded on lane
 * (NULL: not traced) with its op and node name. */
hx_status hx__host_launch(hx_engine *e, hx_stream *stream, hx_trace_lane *lane, const hx_exec *ex,
                          const hx_step *sp, void *const *in);
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
/* plan_report.c: a plan described to people (target: placement per
 * tensor id; dev_name: the devices' names by HX_DEV_* index). */
void hx__plan_debug_copies(const hx_plan *p, const hx_target *target, const char *const *dev_name);
void hx__plan_stats(const hx_plan *p, hx_placement_stats *out); /* all but n_fallbacks */
void hx__plan_write_dot(FILE *f, const hx_plan *p, const hx_graph *g, const hx_target *target,
                        const char *const *dev_name);
void hx__plan_write_summary(FILE *f, const hx_plan *p, const hx_graph *g,
                            const char *const *dev_name);

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
