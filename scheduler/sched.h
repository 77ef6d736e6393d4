/* Scheduler internals: execution plans (order + static memory plan), the
 * CPU backend's kernel launchers, and the session that owns them. */
#ifndef HX_SCHED_H
#define HX_SCHED_H

#include "graph/graph.h"

/* What a launcher may know about the run it is part of. */
typedef struct hx_exec {
    int nthreads;
    int64_t step;       /* training steps done before this run */
    bool train;
    float grad_unscale; /* 1 / loss scale, for update nodes */
} hx_exec;

/* Runs one node: out and in[] are the node's output and inputs, resolved
 * when the plan was bound. Returns HX_OK or an error with the message set. */
typedef hx_status (*hx_launch_fn)(const hx_exec *ex, const hx_tensor *node, void *out,
                                  void *const *in);

/* The CPU backend's kernel for an op (NULL: the op has no CPU kernel). */
hx_launch_fn hx__cpu_kernel(hx_op op);

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

/* A plan for one (set of fetches, train flag): the nodes to run in order and
 * where every transient tensor lives in the session's arena. */
typedef struct hx_plan {
    int *key; /* sorted unique fetch ids, then the train flag */
    int key_len;
    int n_steps;
    int first_update; /* steps from here on are optimizer updates */
    hx_step *steps;
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
} hx_plan;

typedef struct hx_backend hx_backend;
typedef struct hx_stream hx_stream;

struct hx_session {
    hx_graph *g;
    hx_session_config cfg;
    int nthreads;
    hx_backend *be[HX_NDEV]; /* be[HX_DEV_ACCEL] NULL: no accelerator */
    hx_stream *stream[HX_NDEV];
    hx_target *target;   /* per tensor id: placement */
    hx_place_why *why;
    int n_fallbacks;
    void **persist; /* per tensor id: storage of params, constants, state */
    size_t persist_bytes[HX_NDEV];
    char *arena[HX_NDEV];
    size_t arena_bytes[HX_NDEV];
    hx_plan **plans;
    int n_plans;
    const hx_plan *last_plan;
    hx_train_stats stats;
    int good_steps; /* in a row, for loss-scale growth */
};

/* Builds the plan for these fetch ids (sorted, unique) and flag. */
hx_status hx__plan_build(hx_session *s, const int *fetch_ids, int n_fetch, bool train,
                         hx_plan **out);
void hx__plan_free(hx_plan *p);
/* Resolves step pointers against the session's current arena. */
void hx__plan_bind(hx_session *s, hx_plan *p);

/* Device index of a tensor's home (where it is produced or stored). */
static inline int hx__dev_of(const hx_session *s, int id)
{
    return s->target[id] == HX_TARGET_DEVICE ? HX_DEV_ACCEL : HX_DEV_HOST;
}
/* HX_DEBUG contains `what` (e.g. "placement"). */
bool hx__debug(const char *what);
void hx__debug_placement(const hx_session *s);
void hx__debug_copies(const hx_session *s, const hx_plan *p);

/* Fills a parameter or state tensor from its initialiser. */
hx_status hx__param_init(const hx_tensor *t, void *data, uint64_t session_seed, int nthreads);

#endif
