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

typedef struct hx_step {
    hx_launch_fn fn;
    const hx_tensor *node;
    void *out;
    void **in; /* node->n_src pointers */
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
    int64_t *offset;   /* per tensor id: byte offset in the arena, -1 if not transient */
    size_t arena_bytes;
    size_t transient_tensor_bytes;
    int *inputs; /* ids of the input tensors the plan reads */
    int n_inputs;
    const char *bound_to; /* arena the step pointers were resolved against */
} hx_plan;

struct hx_session {
    hx_graph *g;
    hx_session_config cfg;
    int nthreads;
    void **persist; /* per tensor id: storage of params, constants, state */
    size_t persist_bytes;
    char *arena;
    size_t arena_bytes;
    hx_plan **plans;
    int n_plans;
    hx_train_stats stats;
    int good_steps; /* in a row, for loss-scale growth */
};

/* Builds the plan for these fetch ids (sorted, unique) and flag. */
hx_status hx__plan_build(hx_session *s, const int *fetch_ids, int n_fetch, bool train,
                         hx_plan **out);
void hx__plan_free(hx_plan *p);
/* Resolves step pointers against the session's current arena. */
void hx__plan_bind(hx_session *s, hx_plan *p);

/* Fills a parameter or state tensor from its initialiser. */
hx_status hx__param_init(const hx_tensor *t, void *data, uint64_t session_seed, int nthreads);

#endif
