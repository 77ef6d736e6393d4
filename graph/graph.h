/* Graph IR internals: tensors (each one a leaf or the output of one op), the
 * op table, and helpers shared by graph/ and scheduler/. */
#ifndef HX_GRAPH_H
#define HX_GRAPH_H

#include "hetex.h"

#include <stdarg.h>

typedef enum hx_op {
    /* leaves */
    HX_OP_INPUT, HX_OP_PARAM, HX_OP_CONSTANT, HX_OP_STATE,
    /* forward ops */
    HX_OP_MATMUL, HX_OP_ADD, HX_OP_SUB, HX_OP_MUL, HX_OP_DIV, HX_OP_SCALE, HX_OP_BIAS_ADD,
    HX_OP_RELU, HX_OP_GELU, HX_OP_SIGMOID, HX_OP_TANH, HX_OP_EXP, HX_OP_LOG, HX_OP_SQRT,
    HX_OP_SOFTMAX, HX_OP_LOG_SOFTMAX, HX_OP_LAYERNORM,
    HX_OP_RESHAPE, HX_OP_PERMUTE, HX_OP_CONCAT, HX_OP_SLICE,
    HX_OP_REDUCE_SUM, HX_OP_CAST, HX_OP_GATHER, HX_OP_CAUSAL_MASK,
    HX_OP_CROSS_ENTROPY, HX_OP_BCE_LOGITS, HX_OP_DROPOUT,
    /* ops that only gradients use */
    HX_OP_RELU_BACKWARD, HX_OP_GELU_BACKWARD, HX_OP_SIGMOID_BACKWARD, HX_OP_TANH_BACKWARD,
    HX_OP_SOFTMAX_BACKWARD, HX_OP_LOG_SOFTMAX_BACKWARD,
    HX_OP_LAYERNORM_BACKWARD_X, HX_OP_LAYERNORM_BACKWARD_GAMMA,
    HX_OP_SUM_TO, HX_OP_BROADCAST_TO, HX_OP_SLICE_BACKWARD, HX_OP_SCATTER_ADD,
    HX_OP_CROSS_ENTROPY_BACKWARD, HX_OP_BCE_LOGITS_BACKWARD,
    /* optimizer updates (side effects on a parameter; data: the config) */
    HX_OP_SGD_UPDATE, HX_OP_ADAM_UPDATE, HX_OP_ADAGRAD_UPDATE, HX_OP_FTRL_UPDATE,
    HX_OP_COUNT
} hx_op;

/* Per-op attributes; which fields mean what is stated by each builder. */
typedef struct hx_attrs {
    int64_t i[HX_MAX_DIMS + 2];
    float f[4];
    uint64_t seed, stream;
} hx_attrs;

struct hx_tensor {
    hx_graph *graph;
    int id;            /* index in graph->tensors: creation order is a topological order */
    char *name;
    hx_dtype dtype;
    int ndim;
    int64_t shape[HX_MAX_DIMS];
    hx_tensor_kind kind;
    hx_op op;
    int n_src;
    hx_tensor **src;
    hx_attrs attr;
    hx_target target; /* attribute: set explicitly or by the scope at creation */
    hx_init init;     /* parameters and state */
    void *data;       /* constants: their value; updates: their hx_optimizer_config */
    hx_tensor *grad;  /* set by hx_graph_backward */
    hx_tensor *param; /* update nodes and state: the parameter they serve */
};

typedef struct hx_name_map { /* open addressing: name -> tensor */
    hx_tensor **slots;
    size_t cap, count;
} hx_name_map;

struct hx_graph {
    hx_tensor **tensors;
    int n, cap;
    hx_name_map names;
    hx_target target_stack[16];
    int target_depth;
    int n_sessions; /* > 0 freezes the graph */
    bool has_backward;
    hx_tensor *grad_seed; /* d loss / d loss: 1, or the loss scale */
    int next_stream; /* dropout mask streams */
};

typedef struct hx_op_info {
    const char *name;
    hx_target default_target;
    /* Builds gradient nodes: writes d loss / d src[i] to dsrc[i] for every
     * i with needs[i] set (NULL for a source that gets no gradient). */
    hx_status (*backward)(hx_graph *g, hx_tensor *node, hx_tensor *dy, const bool *needs,
                          hx_tensor **dsrc);
} hx_op_info;

extern const hx_op_info hx__ops[HX_OP_COUNT];

/* Errors: set the thread-local message; return the status (or NULL). */
hx_status hx__error(hx_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hx__clear_error(void);
/* "[32,64]" into buf; returns buf. */
const char *hx__shape_str(const hx_tensor *t, char *buf, size_t n);
#define HX_SHAPE_STR_LEN 96

/* Builders shared by op constructors and autodiff. `srcs` are checked for
 * NULL, graph membership and the frozen state; the new node gets the
 * current scoped target. Returns NULL with the error set. */
hx_tensor *hx__node_new(hx_graph *g, hx_op op, int n_src, hx_tensor *const *srcs,
                        hx_dtype dt, int ndim, const int64_t *shape, const hx_attrs *attr);
hx_status hx__check_srcs(hx_graph *g, const char *opname, int n, hx_tensor *const *srcs);
/* Optimizer state leaf (f32, the param's shape) named "<param>/<suffix>". */
hx_tensor *hx__state_new(hx_graph *g, hx_tensor *param, const char *suffix, hx_init init);
/* Frees tensors created after the first `n` (rolls back a failed build). */
void hx__graph_truncate(hx_graph *g, int n);


int64_t hx__numel(int ndim, const int64_t *shape);
bool hx__is_float(hx_dtype dt);
bool hx__same_shape(const hx_tensor *a, const hx_tensor *b);
/* Right-aligned numpy broadcast of two shapes; false if incompatible. */
bool hx__broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                         int64_t *out);

#endif
