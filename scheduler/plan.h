/* scheduler/'s plan: struct hx_plan is a complete type only here. Other
 * folders hold an hx_plan * and ask scheduler/scheduler.h's functions
 * (the engine's plan cache, feeds, gradient scan; read-only accessors of
 * a plan's steps and sizes); docs/arrows.txt keeps this header to the
 * files of scheduler/ (tests may include it). */
#ifndef HX_PLAN_H
#define HX_PLAN_H

#include "scheduler/scheduler.h"

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
struct hx_plan {
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
    hx_unit_clock *clock;/* per unit: its times in the runs exec.c timed (e->time_units) */
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
    int n_recomputed;    /* steps that run a recomputed op (offload.recompute) */
    double recompute_flops; /* their work (hx__op_flops) */
    size_t workspace_bytes; /* the largest workspace of a lowered device step */
};

/* What a step is to the offload: a parameter (state, constant) copied to
 * the device in a chunk, a gradient copied back to the host as soon as it
 * is complete, an activation copied to the host after it is made because a
 * device op reads it again much later, and that activation copied back. */
enum { HX_ROLE_OTHER, HX_ROLE_STREAM_IN, HX_ROLE_GRAD_OUT, HX_ROLE_ACT_OUT, HX_ROLE_ACT_IN };
/* The role's name for people ("activation out"; NULL: HX_ROLE_OTHER). */
const char *hx__copy_role_name(char role);

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

/* plan_report.c: HX_DEBUG=placement lines, one per copy of p. */
void hx__plan_debug_copies(const hx_engine *e, const hx_plan *p);

#endif
