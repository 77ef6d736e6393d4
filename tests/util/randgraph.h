/* randgraph: seeded random graphs over hetex's op set, built through the
 * public API (include/hetex.h) only, so that any backend can be checked
 * against the all-CPU run of the same graph.
 *
 * A graph is a random mix of every forward op (elementwise with numpy
 * broadcasting, unary ops, matmul in all its forms, reductions, softmax,
 * log-softmax, layernorm, reshape/permute/concat/slice on f32, f16, bf16 and
 * integer tensors, casts, gather, causal attention, dropout, the three
 * losses) on small random shapes, with random target attributes (CPU,
 * DEVICE, DEFAULT, scoped push/pop), reduced to a scalar loss, differentiated
 * with hx_graph_backward and optionally given optimizer updates (SGD, Adam,
 * AdamW, Adagrad, FTRL) per parameter. Values are kept finite by
 * construction: log, sqrt and division see positive transforms of their
 * inputs, exp sees bounded ones, a masked score feeds a softmax only, and a
 * running magnitude bound squashes values (tanh) before they grow large.
 *
 * The same seed and options give the same graph, names included; input data
 * is a pure function of (seed, run). Every op added is listed in the
 * description (rg_describe) with its shape and target attribute, so a
 * failing seed can be read and rebuilt. */
#ifndef HX_RANDGRAPH_H
#define HX_RANDGRAPH_H

#include "hetex.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct rg_options {
    int min_moves, max_moves; /* random op groups before the loss (each adds 1..6 ops) */
    int max_dim;              /* small dims are drawn from 1..max_dim */
    bool big;                 /* one tensor large enough (>= 32768 elements) for kernels
                                 to split their work over threads */
    bool targets;             /* random target attributes and scopes */
    bool optimizer;           /* optimizer updates on most parameters */
    bool ftrl;                /* FTRL may be among them (the emu device has no FTRL kernel) */
} rg_options;

rg_options rg_options_default(void);

typedef enum rg_data {
    RG_DATA_UNIFORM, /* floats in (-1, 1) (f16/bf16 too) */
    RG_DATA_PROB,    /* f32 in [0, 1] (binary cross-entropy targets) */
    RG_DATA_IDS      /* i32/i64 ids in [0, hi) */
} rg_data;

typedef struct rg_input {
    hx_tensor *t;
    rg_data data;
    int64_t hi;
    void *buf; /* the last rg_feeds data */
} rg_input;

typedef struct rg_graph {
    hx_graph *g;
    uint64_t seed;
    hx_tensor *loss;
    /* What a check fetches: the loss, some forward values, the gradients of
     * every parameter and of some intermediates (no duplicates). */
    hx_tensor **fetch;
    int n_fetch;
    hx_tensor **params; /* parameters with a gradient */
    int n_params;
    hx_tensor **state; /* optimizer state tensors */
    int n_state;
    rg_input *inputs;
    int n_inputs;
    int n_updates; /* optimizer update nodes */
    bool has_ftrl; /* an FTRL update is in the graph */
    char error[1024]; /* "" unless building failed */
    char *desc;
    size_t desc_len, desc_cap;
} rg_graph;

/* Builds the graph for `seed`; NULL only when host memory runs out. If a
 * hetex call failed, r->error names it with hx_last_error() (a valid
 * generator never fails: a failure is a bug here or in hetex) and the
 * description shows the graph up to that call. */
rg_graph *rg_build(uint64_t seed, const rg_options *o);
void rg_free(rg_graph *r);

/* Fills feeds[0..n_inputs) with the data of run `run` (buffers owned by r,
 * rewritten by the next call). */
void rg_feeds(rg_graph *r, uint64_t run, hx_feed *feeds);

/* One line per op and leaf: name, op, shape, dtype, target attribute,
 * operands; then the optimizers. */
const char *rg_describe(const rg_graph *r);

#endif
