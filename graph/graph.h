/* Graph IR internals: tensors (each one a leaf or the output of one op), the
 * op table, and helpers shared by graph/ and scheduler/. */
#ifndef HX_GRAPH_H
#define HX_GRAPH_H

#include "core/core.h"

#include <stdarg.h>
#include <stdatomic.h>

typedef enum hx_op {
    /* leaves */
    HX_OP_INPUT, HX_OP_PARAM, HX_OP_CONSTANT, HX_OP_STATE,
    /* forward ops */
    HX_OP_MATMUL, HX_OP_ADD, HX_OP_SUB, HX_OP_MUL, HX_OP_DIV, HX_OP_SCALE, HX_OP_BIAS_ADD,
    HX_OP_RELU, HX_OP_GELU, HX_OP_GELU_ERF, HX_OP_SIGMOID, HX_OP_TANH, HX_OP_EXP, HX_OP_LOG, HX_OP_SQRT,
    HX_OP_SOFTMAX, HX_OP_LOG_SOFTMAX, HX_OP_LAYERNORM,
    HX_OP_RESHAPE, HX_OP_PERMUTE, HX_OP_CONCAT, HX_OP_SLICE,
    HX_OP_REDUCE_SUM, HX_OP_CAST, HX_OP_GATHER, HX_OP_CAUSAL_MASK,
    HX_OP_CROSS_ENTROPY, HX_OP_BCE_LOGITS, HX_OP_DROPOUT,
    HX_OP_EMBEDDING_LOOKUP, HX_OP_EMBEDDING_BAG, /* host tables (tensor.table) */
    /* ops that only gradients use */
    HX_OP_RELU_BACKWARD, HX_OP_GELU_BACKWARD, HX_OP_GELU_ERF_BACKWARD, HX_OP_SIGMOID_BACKWARD, HX_OP_TANH_BACKWARD,
    HX_OP_SOFTMAX_BACKWARD, HX_OP_LOG_SOFTMAX_BACKWARD,
    HX_OP_LAYERNORM_BACKWARD_X, HX_OP_LAYERNORM_BACKWARD_GAMMA,
    HX_OP_SUM_TO, HX_OP_BROADCAST_TO, HX_OP_SLICE_BACKWARD, HX_OP_SCATTER_ADD,
    HX_OP_CROSS_ENTROPY_BACKWARD, HX_OP_BCE_LOGITS_BACKWARD,
    HX_OP_EMBEDDING_BAG_WEIGHTS_BACKWARD, /* d loss / d per-sample weights */
    /* convolutional networks (graph/ops_conv.c); attributes there */
    HX_OP_IM2COL, HX_OP_CONV_GEMM, HX_OP_MAX_POOL, HX_OP_AVG_POOL, HX_OP_BATCHNORM,
    HX_OP_COL2IM, HX_OP_CONV_GEMM_BACKWARD_W, HX_OP_CONV_GEMM_BACKWARD_COLS,
    HX_OP_MAX_POOL_BACKWARD, HX_OP_AVG_POOL_BACKWARD,
    HX_OP_BATCHNORM_BACKWARD_X, HX_OP_BATCHNORM_BACKWARD_GAMMA,
    /* optimizer updates (side effects on a parameter; tensor.optimizer) */
    HX_OP_SGD_UPDATE, HX_OP_ADAM_UPDATE, HX_OP_ADAGRAD_UPDATE, HX_OP_FTRL_UPDATE,
    HX_OP_EMBEDDING_UPDATE, /* a table's sparse update; tensor.emb_update */
    HX_OP_COUNT
} hx_op;

/* Per-op attributes; which fields mean what is stated by each builder. */
typedef struct hx_attrs {
    int64_t i[HX_MAX_DIMS + 2];
    float f[4];
    uint64_t seed, stream;
} hx_attrs;

typedef struct hx_emb_update_info hx_emb_update_info;

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
    bool target_set;  /* target came from hx_tensor_set_target, not the scope */
    hx_init init;     /* parameters and state */
    /* What a node carries besides its attributes, by kind (owned; NULL in
     * every other tensor): */
    void *constant;                 /* constants: their bytes */
    hx_optimizer_config *optimizer; /* dense updates (SGD, Adam, Adagrad, FTRL) */
    hx_emb_update_info *emb_update; /* embedding updates: what they read */
    hx_tensor *grad;  /* set by hx_graph_backward */
    hx_tensor *param; /* update nodes and state: the parameter they serve (an embedding
                         update: itself, named after its table) */
    hx_embedding_table *table; /* embedding lookups and updates: their table */
    /* Activation recomputation (recompute.c): the block whose scope made
     * this op (0: none), and the op autodiff emitted again in backward to
     * recompute this value (NULL: none; readers choose by hx__src). */
    int block;
    hx_tensor *recomputed;
    hx_tensor *recompute_of; /* a recomputed op: the value it recomputes */
};

/* What an embedding update node reads: per lookup of its table, the
 * indices in the node's src[] of its ids, offsets and per-sample weights
 * (-1: none), and where its output gradient starts in src[1], the one f32
 * gradient the session scans (the lookups' gradients, flattened and
 * concatenated in this order). */
typedef struct hx_emb_update_src {
    const hx_tensor *lookup;
    int ids, offsets, weights;
    int64_t grad_offset;
} hx_emb_update_src;
struct hx_emb_update_info {
    int n;
    hx_emb_update_src src[];
};

/* A table a graph uses, and the first node that uses it (a failed build
 * rolled back past it releases the table). */
typedef struct hx_graph_table {
    hx_embedding_table *table;
    int first_id;
} hx_graph_table;

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
    int open_block; /* the open recompute scope's block (0: none) */
    int n_blocks;   /* recompute blocks so far */
    /* The user (until hx_graph_free) and each session hold the graph; a
     * session freezes it, and the last holder to let go frees it. */
    atomic_int holders;
    bool has_backward;
    hx_tensor *grad_seed; /* d loss / d loss: 1, or the loss scale */
    int next_stream; /* dropout mask streams */
    hx_graph_table *tables; /* embedding tables used, each once, holding a use count */
    int n_tables, cap_tables;
};

typedef struct hx_op_info {
    const char *name;
    hx_target default_target;
    /* Builds gradient nodes: writes d loss / d src[i] to dsrc[i] for every
     * i with needs[i] set (NULL for a source that gets no gradient). */
    hx_status (*backward)(hx_graph *g, hx_tensor *node, hx_tensor *dy, const bool *needs,
                          hx_tensor **dsrc);
    /* Kept on the host: accelerator backends offer no kernel for it (it works
     * on host state such as embedding tables), so placement puts it on the CPU
     * or reports HX_ERR_NO_KERNEL. */
    bool host_only;
} hx_op_info;

extern const hx_op_info hx__ops[HX_OP_COUNT];

/* The backward rules of the convolutional ops (graph/ops_conv.c), as
 * hx_op_info.backward. */
hx_status hx__im2col_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                              hx_tensor **dx);
hx_status hx__conv_gemm_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                                 hx_tensor **dx);
hx_status hx__pool_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                            hx_tensor **dx);
hx_status hx__batchnorm_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                                 hx_tensor **dx);

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
/* A session holds its graph from hx_session_create to hx_session_free; the
 * release that drops the last hold (hx_graph_free's or a session's) frees it. */
void hx__graph_hold(hx_graph *g);
void hx__graph_release(hx_graph *g);
/* Records that g uses table t (once per graph; the table counts its graphs)
 * from node first_id on. */
hx_status hx__graph_use_table(hx_graph *g, hx_embedding_table *t, int first_id);

/* ---- placement (placement.c) ------------------------------------------------
 * Every node gets a concrete target (CPU or DEVICE) and the reason for it. */
typedef enum hx_place_why {
    HX_WHY_ATTRIBUTE,     /* the op's own target attribute */
    HX_WHY_SCOPE,         /* the scoped default when the op was added */
    HX_WHY_OP_DEFAULT,    /* the op table's default target */
    HX_WHY_NO_DEVICE,     /* the session has no accelerator */
    HX_WHY_FALLBACK,      /* no kernel on its target; moved to the CPU by policy */
    HX_WHY_PARAM_ATTRIBUTE, /* a parameter's own target attribute */
    HX_WHY_PARAM_UPDATE,  /* a parameter lives where its optimizer update runs */
    HX_WHY_PARAM_USERS,   /* a parameter lives where all the ops that read it run */
    HX_WHY_PARAM_MIXED,   /* read on both targets: it stays on the host */
    HX_WHY_FOLLOWS_PARAM, /* an update (or optimizer state) runs where its parameter lives */
    HX_WHY_HOST_LEAF,     /* inputs and constants are host data */
    HX_WHY_OFFLOAD,       /* the session offloads parameters (hx_offload_config) to the host */
    HX_WHY_FOLLOWS_OP,    /* state an op updates in place (batchnorm's running statistics) */
    HX_WHY_AUTO,          /* AUTO: the planner's choice (autoplace.c) */
    HX_WHY_AUTO_HOST_ONLY,/* AUTO, but it works on a host table */
    HX_WHY_AUTO_NO_KERNEL /* AUTO, but only one target has a kernel for it */
} hx_place_why;
const char *hx__place_why_str(hx_place_why w);

/* Whether target `t` has a kernel for op on dtype dt. */
typedef bool (*hx_has_kernel_fn)(void *ctx, hx_target t, hx_op op, hx_dtype dt);
typedef struct hx_place_opts {
    bool has_device;   /* false: everything on the CPU */
    bool fallback_cpu; /* an op with no kernel on its target moves to the CPU */
    hx_has_kernel_fn has_kernel;
    void *ctx;
    bool auto_default; /* ops and parameters left at DEFAULT are AUTO */
    /* The planner's choice (CPU or DEVICE) per tensor id for the nodes it
     * places (why HX_WHY_AUTO); NULL: they are left HX_TARGET_AUTO. */
    const hx_target *decided;
} hx_place_opts;
/* Fills target[] (CPU or DEVICE, or AUTO for the planner's nodes while
 * o->decided is NULL) and why[] for every tensor of g. Fails with
 * HX_ERR_NO_KERNEL naming the op when an op has no kernel on its target
 * and the fallback is off. */
hx_status hx__place(const hx_graph *g, const hx_place_opts *o, hx_target *target,
                    hx_place_why *why);
/* Whether op node t is left to the planner (AUTO after the rules). */
bool hx__place_pending(const hx_tensor *t, const hx_place_opts *o);

/* ---- the placement planner (autoplace.c, autoplace_plan.c) --------------------
 * Its abstract problem: nodes in a topological order, each on the host (0)
 * or the device (1), fixed or by its group's decision. */
typedef struct hx_ap_node {
    double cost[2];   /* seconds on the host and on the device (INFINITY: never there) */
    int group;        /* the decision it shares; -1: fixed at `side` */
    int8_t side;
    bool leaf;        /* an input, parameter, constant or state: ready at the start, no lane */
    bool persistent;  /* a parameter, constant or state: held for the whole step */
    bool phase1;      /* an optimizer update: starts after phase 0 */
    size_t bytes;     /* its value (copies, device memory) */
    int first_src, n_src;
} hx_ap_node;
typedef struct hx_ap_problem {
    int n, n_groups;
    hx_ap_node *node;
    int *src;         /* node[i]'s sources: src[first_src .. first_src + n_src) */
    double lat[2], bw[2]; /* copies: [0] host to device, [1] device to host */
    size_t cap;       /* device bytes */
} hx_ap_problem;
typedef struct hx_ap_work hx_ap_work;
hx_status hx__ap_work_new(const hx_ap_problem *p, hx_ap_work **out);
void hx__ap_work_free(hx_ap_work *w);
/* The predicted step (seconds) with group g on side gside[g] (INFINITY: the
 * device cap is passed, or a node is where it cannot run); the device
 * bytes at the peak into *dev_bytes (NULL: not wanted). */
double hx__ap_eval(const hx_ap_problem *p, hx_ap_work *w, const int8_t *gside, size_t *dev_bytes);
/* The heuristic: the list schedule, then single moves (also from all-host
 * and all-device); the best into gside[] and *step. */
hx_status hx__ap_plan(const hx_ap_problem *p, int8_t *gside, double *step);
/* Every assignment of at most 20 groups (HX_ERR_INVALID_ARGUMENT past that). */
hx_status hx__ap_exact(const hx_ap_problem *p, int8_t *gside, double *step);

/* The problem of graph g after a first hx__place (decided NULL): nodes are
 * g's tensors, groups the AUTO nodes' decisions (a parameter with its
 * update and state, batchnorm with its statistics); cost(ctx, t, target)
 * is op t's seconds there (asked only for targets it may run on). group_of
 * gets each tensor's group (-1: fixed). */
typedef double (*hx_ap_cost_fn)(void *ctx, const hx_tensor *t, hx_target target);
hx_status hx__ap_build(const hx_graph *g, const hx_target *target, const hx_place_why *why,
                       const hx_place_opts *o, hx_ap_cost_fn cost, void *ctx,
                       hx_ap_problem *out, int *group_of);
void hx__ap_problem_free(hx_ap_problem *p);

/* ---- recompute (recompute.c) ------------------------------------------------
 * A node whose source was recomputed reads the recomputed value when it was
 * made after it (a gradient) and the session recomputes (its switch); every
 * other reader, and every session that does not, reads the original. */
static inline hx_tensor *hx__src(const hx_tensor *t, int j, bool recompute)
{
    hx_tensor *s = t->src[j];
    return recompute && s->recomputed && s->recomputed->id < t->id ? s->recomputed : s;
}
/* What autodiff keeps while it emits recomputed blocks. */
typedef struct hx_recompute hx_recompute;
/* Finds, among the first n0 tensors of g, the values of each block worth
 * recomputing: op outputs that depend on an activation (not only on
 * leaves) and that no op outside their block, nor the loss, reads. NULL
 * with the error set when out of memory. */
hx_recompute *hx__recompute_begin(const hx_graph *g, int n0, const hx_tensor *loss);
/* Before the gradient of forward node t is built: emits its block's
 * recomputed values again (once per block, in creation order, each with
 * its original's op, attributes and target, reading the block's other
 * recomputed values where its original read their originals) and sets
 * their `recomputed`. */
hx_status hx__recompute_before(hx_graph *g, hx_recompute *r, const hx_tensor *t);
/* Frees r; with failed set, also forgets every `recomputed` it set (the
 * nodes themselves are rolled back by hx__graph_truncate). */
void hx__recompute_end(hx_graph *g, hx_recompute *r, bool failed);

/* ---- lowering (lower.c) -------------------------------------------------------
 * After placement, a session may run some nodes as one kernel that reads
 * different sources than the node. On the device: a convolution's im2col +
 * conv_gemm pair as one cuDNN convolution of x and w, where the device has
 * a kernel for it. On the host (fusion): bias_add(matmul(x, w), b), and an
 * activation of that, as one GEMM whose epilogue adds the bias and applies
 * the activation to each tile while it is in cache; and layernorm(add(x,
 * r)) as one pass over rows that writes both the sum (which other nodes
 * read: the next residual, the layernorm's gradients) and the layernorm,
 * where every other reader of the sum depends on the layernorm's output
 * (so runs after the kernel wrote it); the add itself runs nothing then
 * (HX_LOWER_WRITTEN_BY_READER) and the layernorm reads the sum as its last
 * source, so the plan keeps its buffer alive and ordered. In training, a
 * host gelu whose gradient (gelu_backward(dy, x, y)) is on the host too
 * keeps its derivative behind its output, and the gradient reads dy and y
 * (not x) and multiplies: one sigmoid a step instead of two. The graph stays as
 * built (sessions share it); the session keeps, per tensor id, how it runs
 * the node (hx_lowered) and its plans read through it (hx__read_src). The
 * values the group wrote inside (the columns; the matmul's product) are
 * then read by no planned node: no plan holds them. A host matmul of 4-D
 * operands reads each that is a head-swap permute (hx__head_swap:
 * attention's heads) in place of the permute's source, and a head-swap
 * permute of such a matmul runs the GEMM writing its own output, so neither
 * permute copies (nor is planned where nothing else reads it).
 *
 * A lowered node runs as kernel HX_LOWERED_OP(kind), a code past the ops
 * (backend.h numbers the scheduler's own kernels from HX_OP_COUNT too), on
 * the node's own output, with n_read sources: path[j] = {a, b, c} reads
 * source a of the node, then (b >= 0) source b of that, then (c >= 0)
 * source c of that, each through hx__src. */
typedef enum hx_lower_kind {
    HX_LOWER_NONE,
    HX_LOWER_CONV2D,                 /* conv_gemm(im2col(x), w): in x, w */
    HX_LOWER_CONV2D_BACKWARD_DATA,   /* col2im(conv_gemm_backward_cols(dy, w)): in dy, w */
    HX_LOWER_CONV2D_BACKWARD_FILTER, /* conv_gemm_backward_w(dy, im2col(x)): in dy, x */
    HX_LOWER_MATMUL_BIAS,            /* host: bias_add(matmul(x, w), b): in x, w, b */
    HX_LOWER_MATMUL_BIAS_RELU,       /* host: relu(bias_add(matmul(x, w), b)): in x, w, b */
    HX_LOWER_MATMUL_BIAS_GELU,       /* host: gelu (tanh form) of the same */
    HX_LOWER_MATMUL_BIAS_GELU_ERF,   /* host: gelu_erf of the same */
    HX_LOWER_ADD_LAYERNORM,          /* host: layernorm(s = add(x, r), gamma, beta): in x, r,
                                        gamma, beta, and s, which the kernel writes */
    HX_LOWER_WRITTEN_BY_READER,      /* host: the add s above: runs nothing (in its
                                        own sources); its reader's kernel writes it */
    HX_LOWER_GELU_SAVE,              /* host, training: gelu(x) whose gradient reads it:
                                        in x; writes its derivative (f32) behind its
                                        values (hx__gelu_saved_at) */
    HX_LOWER_GELU_BACKWARD_SAVED,    /* host: gelu_backward(dy, x, y) of such a gelu:
                                        in dy, y; dx = dy times the saved derivative */
    HX_LOWER_MATMUL_PERMUTED,        /* host: a 4-D matmul(a, b) with a head-swap
                                        permute (hx__head_swap) among a and b: in a, b,
                                        each read in place of its permute's source */
    HX_LOWER_MATMUL_PERMUTED_OUT,    /* host: head-swap permute(matmul(a, b)), 4-D: the
                                        GEMM writes the permute's output; in a, b as
                                        above */
    HX_LOWER_COUNT
} hx_lower_kind;
#define HX_LOWERED_OP(kind) ((hx_op)(HX_OP_COUNT + (int)(kind)))
#define HX_LOWER_MAX_READ 5
typedef struct hx_lowered {
    int8_t kind;   /* hx_lower_kind */
    int8_t n_read; /* sources read (1 to 5) */
    int8_t path[HX_LOWER_MAX_READ][3]; /* see above */
} hx_lowered;
/* Source j of node t as a plan reads it: through the lowering `low` (per
 * tensor id; NULL: nothing lowered) and the recompute switch (hx__src). */
static inline hx_tensor *hx__read_src(const hx_tensor *t, int j, bool recompute,
                                      const hx_lowered *low)
{
    if (!low || !low[t->id].kind) return hx__src(t, j, recompute);
    const int8_t *a = low[t->id].path[j];
    hx_tensor *s = hx__src(t, a[0], recompute);
    for (int h = 1; h < 3 && a[h] >= 0; h++) s = hx__src(s, a[h], recompute);
    return s;
}
/* How many sources node t reads as a plan runs it. */
static inline int hx__n_read(const hx_tensor *t, const hx_lowered *low)
{
    return low && low[t->id].kind ? low[t->id].n_read : t->n_src;
}
/* The kernel op node t runs as (its own op unless lowered). */
static inline hx_op hx__run_op(const hx_tensor *t, const hx_lowered *low)
{
    return low && low[t->id].kind ? HX_LOWERED_OP(low[t->id].kind) : t->op;
}
/* Whether kind is a host fusion (else a device library call). */
static inline bool hx__lower_on_host(hx_lower_kind kind)
{
    return kind >= HX_LOWER_MATMUL_BIAS && kind < HX_LOWER_COUNT;
}
/* Whether kind is a host GEMM with an epilogue (its group: the node, then
 * down its source 0 to the matmul, whose nodes no plan runs). */
static inline bool hx__lower_fuses_matmul(hx_lower_kind kind)
{
    return kind >= HX_LOWER_MATMUL_BIAS && kind <= HX_LOWER_MATMUL_BIAS_GELU_ERF;
}
/* Whether t is a permute that swaps axes 1 and 2 of a 4-D tensor only:
 * (B,T,H,D) -> (B,H,T,D), attention's split heads and its inverse. Read as
 * B x H matrices of T rows of D, its source is strided: rows H*D apart,
 * heads D apart, so a GEMM reads or writes it in place
 * (HX_LOWER_MATMUL_PERMUTED*, graph/lower_permuted.c); which operands a
 * lowered matmul reads through their permutes is this test of its nodes. */
static inline bool hx__head_swap(const hx_tensor *t)
{
    return t->op == HX_OP_PERMUTE && t->ndim == 4 && t->attr.i[0] == 0 && t->attr.i[1] == 2 &&
           t->attr.i[2] == 1 && t->attr.i[3] == 3;
}
/* Lowers what it can of g: a node whose group has a kernel on its target
 * (target[] after placement; has_kernel(ctx, target, HX_LOWERED_OP(kind),
 * dtype)): device groups, and host groups when host_fusion is set, where
 * every node of the group is on the host and each value inside it is read
 * by the next node of the group only (hx__src with the recompute switch
 * decides who reads what). *out: per tensor id (NULL when no node is
 * lowered), *n_lowered how many; the caller frees *out. Fails only when
 * out of host memory. */
hx_status hx__lower(const hx_graph *g, const hx_target *target, hx_has_kernel_fn has_kernel,
                    void *ctx, bool host_fusion, bool recompute, hx_lowered **out,
                    int *n_lowered);
/* A gelu lowered HX_LOWER_GELU_SAVE keeps its derivative (numel f32) in
 * its own buffer, this many bytes in (its values, rounded up to 64 bytes);
 * hx__lowered_out_bytes is that buffer's size. The host is where the
 * memory is: the derivative is a planned activation like the gelu's
 * output, freed after the backward, and the gelu's input is then freed
 * after the forward (the gradient no longer reads it). */
static inline size_t hx__gelu_saved_at(const hx_tensor *y)
{
    return (hx_tensor_nbytes(y) + 63) / 64 * 64;
}
/* The bytes of the buffer holding node t's output as a plan runs it:
 * hx_tensor_nbytes, and a saving gelu's derivative (low: per tensor id,
 * NULL: nothing lowered). */
static inline size_t hx__lowered_out_bytes(const hx_tensor *t, const hx_lowered *low)
{
    if (!low || low[t->id].kind != HX_LOWER_GELU_SAVE) return hx_tensor_nbytes(t);
    return hx__gelu_saved_at(t) + (size_t)hx_tensor_numel(t) * sizeof(float);
}

/* The workspace bound of lowered node t of this kind: the bytes of the
 * columns the lowering left out (the im2col output it no longer reads, or
 * the column gradient). A lowered kernel takes at most this much scratch,
 * so a device holds no more per convolution than the unlowered pair did. */
size_t hx__lowered_workspace(const hx_tensor *t, hx_lower_kind kind);
/* "cuDNN convolution forward" etc. */
const char *hx__lower_name(hx_lower_kind kind);
/* Why device node t (a convolution's im2col, conv_gemm, its backward or
 * col2im) is not lowered, or host node t (a bias_add of a matmul, an
 * activation of that) is not fused, or NULL when t is no such node (or
 * host_fusion is off): for HX_DEBUG=placement. readers: hx__lower_readers'. */
const char *hx__lower_why_not(const hx_tensor *t, const hx_target *target, const hx_lowered *low,
                              hx_has_kernel_fn has_kernel, void *ctx, bool host_fusion,
                              bool recompute, const int *readers);
/* Host node t as a matmul reading and writing through head-swap permutes
 * (graph/lower_permuted.c): HX_LOWER_NONE when t is no candidate; else
 * HX_LOWER_MATMUL_PERMUTED for a 4-D matmul of 4-D a and b at least one of
 * which is a head-swap permute, HX_LOWER_MATMUL_PERMUTED_OUT for a head-swap
 * permute of a 4-D matmul of 4-D a and b, with *why NULL and *entry its
 * lowering when it can run so (every node of its group on the host, the
 * permuted product read by the permute only, a kernel for the dtype), else
 * *why the reason. readers: hx__lower_readers'. */
hx_lower_kind hx__lower_permuted(const hx_tensor *t, const hx_target *target, const int *readers,
                                 hx_has_kernel_fn has_kernel, void *ctx, bool recompute,
                                 hx_lowered *entry, const char **why);
/* readers[id]: how many sources of g's nodes are tensor id, as a session's
 * plans read them before any lowering (hx__src with the recompute
 * switch); the caller frees it. NULL when out of memory. */
int *hx__lower_readers(const hx_graph *g, bool recompute);

/* ---- partition (partition.c) ------------------------------------------------
 * Maximal same-target subgraphs of a set of op nodes whose subgraph DAG has
 * no cycle (greedy in topological order). */
typedef struct hx_partition {
    int n_sub;
    int *sub_of;          /* per tensor id: its subgraph, -1 for leaves and nodes left out */
    hx_target *sub_target;/* per subgraph */
    int *sub_ops;         /* per subgraph: number of ops */
    bool *dep;            /* n_sub * n_sub: dep[a * n_sub + b]: a reads an output of b */
} hx_partition;
/* in_set: per tensor id, the op nodes to partition; recompute and low: how
 * the session's plans read sources (hx__read_src). */
hx_status hx__partition(const hx_graph *g, const bool *in_set, const hx_target *target,
                        bool recompute, const hx_lowered *low, hx_partition *out);
void hx__partition_free(hx_partition *p);

/* Floating-point work of op node y (flops.c): 2mnk for a matmul, one per
 * output element otherwise. */
double hx__op_flops(const hx_tensor *y);
/* The work of node y as a plan runs it: a host fusion's (lowered through
 * low, which may be NULL) is its whole group's, matmul included. */
double hx__run_flops(const hx_tensor *y, const hx_lowered *low);

int64_t hx__numel(int ndim, const int64_t *shape);
/* The element count of ndim positive dims into *out; false (and *out
 * unset) when it passes HX_MAX_ELEMENTS. The one check of a shape's size:
 * every tensor's shape passes it where the tensor is made. */
bool hx__numel_checked(int ndim, const int64_t *shape, int64_t *out);
/* An optimizer update of a dense parameter (not an embedding table's). */
bool hx__is_dense_update(const hx_tensor *t);
bool hx__same_shape(const hx_tensor *a, const hx_tensor *b);
/* Right-aligned numpy broadcast of two shapes; false if incompatible. */
bool hx__broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                         int64_t *out);

#endif
