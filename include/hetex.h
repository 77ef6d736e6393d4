/* hetex: train models on a CPU and an accelerator together.
 *
 * This header is the whole public API; read it top to bottom as the manual.
 *
 *   hx_graph *g = hx_graph_create();
 *   int64_t xs[2] = {32, 784}, ws[2] = {784, 10}, ls[1] = {32};
 *   hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
 *   hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_I32, 1, ls);
 *   hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1.0));
 *   hx_tensor *loss = hx_cross_entropy(g, hx_matmul(g, x, w, false, false), y);
 *   hx_graph_backward(g, loss);                         // gradient nodes
 *   hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
 *   opt.lr = 0.1f;
 *   hx_graph_apply_optimizer(g, NULL, &opt);            // an update node per param
 *
 *   hx_session *s;
 *   hx_session_config cfg = hx_session_config_default();
 *   if (hx_session_create(g, &cfg, &s) != HX_OK) puts(hx_last_error());
 *   hx_feed feeds[2] = {{"x", NULL, xbuf, sizeof xbuf}, {"y", NULL, ybuf, sizeof ybuf}};
 *   float l;
 *   hx_fetch fetch = {NULL, loss, &l, sizeof l};
 *   hx_session_run(s, feeds, 2, &fetch, 1, HX_RUN_TRAIN); // one training step
 *   hx_session_free(s);
 *   hx_graph_free(g);
 *
 * Conventions
 * - Every call that can fail returns hx_status (HX_OK = 0) or NULL, and then
 *   hx_last_error() says what went wrong, where (op, names, shapes) and how
 *   to fix it. The message is thread-local and valid until the next failing
 *   call on the same thread. Bad input never aborts and never damages what
 *   already exists: a failed op leaves the graph as it was.
 * - Op builders take the graph and tensors and return a new tensor owned by
 *   the graph. An op given a NULL input returns NULL, so an error early in a
 *   chain surfaces at the end of it with the first failure's message kept.
 * - Freeing NULL is a no-op. Strings passed in are copied.
 */
#ifndef HETEX_H
#define HETEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HX_BUILDING_LIBRARY)
#define HX_API __attribute__((visibility("default")))
#else
#define HX_API
#endif

#define HX_VERSION_MAJOR 0
#define HX_VERSION_MINOR 1
#define HX_VERSION_PATCH 0
HX_API const char *hx_version(void);

/* ---- status and errors ------------------------------------------------- */

typedef enum hx_status {
    HX_OK = 0,
    HX_ERR_INVALID_ARGUMENT, /* NULL handle, bad enum, bad option */
    HX_ERR_SHAPE,            /* shapes that do not fit the op */
    HX_ERR_DTYPE,            /* dtypes that do not fit the op */
    HX_ERR_NOT_FOUND,        /* unknown name */
    HX_ERR_INDEX,            /* an id or label out of range at run time */
    HX_ERR_OUT_OF_MEMORY,    /* host allocation failed */
    HX_ERR_DEVICE_OOM,       /* device memory cap or capacity exceeded */
    HX_ERR_NO_KERNEL,        /* op has no kernel on its target */
    HX_ERR_NUMERIC,          /* NaN/Inf where it is not allowed */
    HX_ERR_IO,               /* file or disk failure */
    HX_ERR_CORRUPT,          /* checksum or format mismatch */
    HX_ERR_STATE,            /* call not valid now (e.g. graph frozen by a session) */
    HX_ERR_UNSUPPORTED,      /* valid request this build cannot serve */
    HX_ERR_INTERNAL
} hx_status;

/* Thread-local message of the last failure on this thread ("" if none). */
HX_API const char *hx_last_error(void);
/* Short name of a status, e.g. "HX_ERR_SHAPE". */
HX_API const char *hx_status_name(hx_status st);

/* ---- dtypes, targets -------------------------------------------------- */

typedef enum hx_dtype { HX_DTYPE_F32 = 0, HX_DTYPE_F16, HX_DTYPE_BF16, HX_DTYPE_I32, HX_DTYPE_I64 } hx_dtype;
HX_API size_t hx_dtype_size(hx_dtype dt);     /* 0 for an invalid dtype */
HX_API const char *hx_dtype_name(hx_dtype dt); /* "f32", "f16", ... */

/* Where an op runs. DEFAULT defers to the graph's scoped default, then to
 * the op's own default. */
typedef enum hx_target { HX_TARGET_DEFAULT = 0, HX_TARGET_CPU, HX_TARGET_DEVICE } hx_target;
HX_API const char *hx_target_name(hx_target t);

#define HX_MAX_DIMS 8

/* ---- graph and tensors ------------------------------------------------ */

typedef struct hx_graph hx_graph;   /* owns its tensors */
typedef struct hx_tensor hx_tensor; /* a value: a leaf or the output of one op */

HX_API hx_graph *hx_graph_create(void);
/* Frees the graph and all its tensors. Sessions over it must be freed first. */
HX_API void hx_graph_free(hx_graph *g);

typedef enum hx_tensor_kind {
    HX_TENSOR_INPUT,        /* fed at each run */
    HX_TENSOR_PARAMETER,    /* trained, persistent in the session */
    HX_TENSOR_CONSTANT,     /* fixed data given at creation */
    HX_TENSOR_INTERMEDIATE, /* the output of an op */
    HX_TENSOR_UPDATE,       /* an optimizer update: a side effect, no value */
    HX_TENSOR_STATE         /* optimizer state (momentum, moments): persistent */
} hx_tensor_kind;

/* Parameter initialisers. Seeded from the session seed and the parameter's
 * name, so a parameter's initial value does not depend on graph order. */
typedef enum hx_init_kind {
    HX_INIT_ZEROS, HX_INIT_CONSTANT, HX_INIT_UNIFORM, HX_INIT_NORMAL,
    HX_INIT_XAVIER_UNIFORM, HX_INIT_XAVIER_NORMAL
} hx_init_kind;
typedef struct hx_init {
    hx_init_kind kind;
    double a; /* CONSTANT: value; UNIFORM: low; NORMAL: mean; XAVIER: gain */
    double b; /* UNIFORM: high; NORMAL: standard deviation */
} hx_init;
HX_API hx_init hx_init_zeros(void);
HX_API hx_init hx_init_constant(double value);
HX_API hx_init hx_init_uniform(double low, double high);
HX_API hx_init hx_init_normal(double mean, double std);
/* fan_in/fan_out are the last two dims (rows, cols) of the parameter. */
HX_API hx_init hx_init_xavier_uniform(double gain);
HX_API hx_init hx_init_xavier_normal(double gain);

/* Leaves. Names must be unique in the graph (NULL or "" is an error); shape
 * has ndim (0..HX_MAX_DIMS) positive dims; ndim 0 is a scalar. */
HX_API hx_tensor *hx_graph_input(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                                 const int64_t *shape);
HX_API hx_tensor *hx_graph_param(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                                 const int64_t *shape, hx_init init);
/* Copies numel * dtype size bytes from data. */
HX_API hx_tensor *hx_graph_constant(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                                    const int64_t *shape, const void *data);

/* The tensor with this name, or NULL (HX_ERR_NOT_FOUND). */
HX_API hx_tensor *hx_graph_find(const hx_graph *g, const char *name);
HX_API int hx_graph_tensor_count(const hx_graph *g);

/* Op outputs get names like "matmul_7"; rename them to fetch by a name of
 * your own. Fails on a duplicate name. */
HX_API hx_status hx_tensor_set_name(hx_tensor *t, const char *name);
HX_API const char *hx_tensor_name(const hx_tensor *t);
HX_API hx_dtype hx_tensor_dtype(const hx_tensor *t);
HX_API int hx_tensor_ndim(const hx_tensor *t);
/* Dimension i (negative counts from the end); -1 if out of range. */
HX_API int64_t hx_tensor_dim(const hx_tensor *t, int i);
HX_API int64_t hx_tensor_numel(const hx_tensor *t);
HX_API size_t hx_tensor_nbytes(const hx_tensor *t);
HX_API hx_tensor_kind hx_tensor_kind_of(const hx_tensor *t);
/* Op name of the node producing t ("input", "param", "constant" for leaves). */
HX_API const char *hx_tensor_op_name(const hx_tensor *t);

/* ---- targets -------------------------------------------------------------- */

/* Sets the target attribute of the op producing t (or of a parameter: where
 * it lives). Fails on inputs and constants. */
HX_API hx_status hx_tensor_set_target(hx_tensor *t, hx_target target);
/* The attribute: as set on the op, else the scoped default when the op was
 * added, else DEFAULT (the op's own default applies). */
HX_API hx_target hx_tensor_target(const hx_tensor *t);
/* Scoped default for ops added until the matching pop (a stack, 16 deep). */
HX_API hx_status hx_graph_push_target(hx_graph *g, hx_target target);
HX_API hx_status hx_graph_pop_target(hx_graph *g);

/* ---- ops ------------------------------------------------------------------
 * Arithmetic is f32 unless stated. Shape and dtype errors are reported here,
 * when the op is added, naming the op and its inputs. */

/* (..., M, K) x (..., K, N) -> (..., M, N); trans_a/trans_b transpose the last
 * two dims of a/b. Batch dims must be equal, or b is 2-D and shared by every
 * batch (then trans_a must be false). */
HX_API hx_tensor *hx_matmul(hx_graph *g, hx_tensor *a, hx_tensor *b, bool trans_a, bool trans_b);

/* Elementwise with numpy broadcasting. */
HX_API hx_tensor *hx_add(hx_graph *g, hx_tensor *a, hx_tensor *b);
HX_API hx_tensor *hx_sub(hx_graph *g, hx_tensor *a, hx_tensor *b);
HX_API hx_tensor *hx_mul(hx_graph *g, hx_tensor *a, hx_tensor *b);
HX_API hx_tensor *hx_div(hx_graph *g, hx_tensor *a, hx_tensor *b);
HX_API hx_tensor *hx_scale(hx_graph *g, hx_tensor *x, float s);
/* x (..., N) + b (N) */
HX_API hx_tensor *hx_bias_add(hx_graph *g, hx_tensor *x, hx_tensor *b);

HX_API hx_tensor *hx_relu(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_gelu(hx_graph *g, hx_tensor *x); /* tanh approximation */
HX_API hx_tensor *hx_sigmoid(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_tanh(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_exp(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_log(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_sqrt(hx_graph *g, hx_tensor *x);

/* Over the last axis. */
HX_API hx_tensor *hx_softmax(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_log_softmax(hx_graph *g, hx_tensor *x);
/* x (..., N), gamma (N), beta (N). */
HX_API hx_tensor *hx_layernorm(hx_graph *g, hx_tensor *x, hx_tensor *gamma, hx_tensor *beta,
                               float eps);

/* Any dtype. reshape: one dim may be -1. */
HX_API hx_tensor *hx_reshape(hx_graph *g, hx_tensor *x, int ndim, const int64_t *shape);
/* Output dim i is input dim perm[i]. */
HX_API hx_tensor *hx_permute(hx_graph *g, hx_tensor *x, const int *perm);
HX_API hx_tensor *hx_concat(hx_graph *g, int n, hx_tensor *const *xs, int axis);
/* Elements [start, end) of one axis (negative axis counts from the end). */
HX_API hx_tensor *hx_slice(hx_graph *g, hx_tensor *x, int axis, int64_t start, int64_t end);

/* Over the listed axes (naxes 0: all axes). */
HX_API hx_tensor *hx_reduce_sum(hx_graph *g, hx_tensor *x, int naxes, const int *axes,
                                bool keepdims);
HX_API hx_tensor *hx_reduce_mean(hx_graph *g, hx_tensor *x, int naxes, const int *axes,
                                 bool keepdims);

/* Between f32, f16 and bf16 (round to nearest even). */
HX_API hx_tensor *hx_cast(hx_graph *g, hx_tensor *x, hx_dtype dt);

/* table (V, D) any float dtype, ids (...) i32/i64 -> (..., D). An id outside
 * [0, V) fails the run with HX_ERR_INDEX naming the id and its position. */
HX_API hx_tensor *hx_gather(hx_graph *g, hx_tensor *table, hx_tensor *ids);

/* x (..., T, T): -inf above the diagonal (attention scores before softmax). */
HX_API hx_tensor *hx_causal_mask(hx_graph *g, hx_tensor *x);

/* Scalar mean losses. labels (N) i32/i64 in [0, C) for logits (N, C). */
HX_API hx_tensor *hx_cross_entropy(hx_graph *g, hx_tensor *logits, hx_tensor *labels);
HX_API hx_tensor *hx_bce_with_logits(hx_graph *g, hx_tensor *logits, hx_tensor *targets);
HX_API hx_tensor *hx_mse(hx_graph *g, hx_tensor *pred, hx_tensor *target);

/* Active only in HX_RUN_TRAIN runs (identity otherwise). The mask is a pure
 * function of (seed, op, step), so runs repeat bitwise. 0 <= p < 1. */
HX_API hx_tensor *hx_dropout(hx_graph *g, hx_tensor *x, float p, uint64_t seed);

/* ---- autodiff and optimizers ----------------------------------------------- */

/* Adds gradient nodes of the scalar `loss` for every parameter it depends
 * on. Gradients of a tensor with several consumers are summed; a gradient
 * node inherits the target of its forward op. Once per graph. */
HX_API hx_status hx_graph_backward(hx_graph *g, hx_tensor *loss);
/* d loss / d t for a parameter (or any tensor on the loss path); NULL with
 * HX_ERR_NOT_FOUND if t has none (it does not reach the loss). */
HX_API hx_tensor *hx_tensor_grad(const hx_tensor *t);

typedef enum hx_optimizer_kind {
    HX_OPTIMIZER_SGD,     /* torch.optim.SGD: momentum, dampening, Nesterov */
    HX_OPTIMIZER_ADAM,    /* torch.optim.Adam (weight_decay is L2 on the gradient) */
    HX_OPTIMIZER_ADAMW,   /* decoupled weight decay (AdamWeightDecay) */
    HX_OPTIMIZER_ADAGRAD, /* torch.optim.Adagrad */
    HX_OPTIMIZER_FTRL     /* FTRL-proximal, TensorFlow's ApplyFtrl(V2), lr_power -0.5 */
} hx_optimizer_kind;

/* Hyper-parameters are doubles, as in the frameworks hetex matches bit for
 * bit. Fields a kind does not use are ignored. */
typedef struct hx_optimizer_config {
    hx_optimizer_kind kind;
    double lr;
    double weight_decay;          /* SGD/Adam/Adagrad: L2 on the gradient; AdamW: decoupled */
    double momentum, dampening;   /* SGD */
    bool nesterov;                /* SGD */
    double beta1, beta2, eps;     /* Adam, AdamW; eps also Adagrad */
    double lr_decay;              /* Adagrad */
    double initial_accumulator;   /* Adagrad, FTRL */
    double l1, l2, l2_shrinkage;  /* FTRL */
} hx_optimizer_config;
/* The frameworks' defaults for `kind` (torch for SGD/Adam/AdamW/Adagrad,
 * TensorFlow for FTRL). */
HX_API hx_optimizer_config hx_optimizer_config_default(hx_optimizer_kind kind);
/* Adds an update node for `param`, or for every parameter with a gradient
 * when param is NULL. The optimizer's state (momentum, moments,
 * accumulators; f32, named "<param>/<state>") lives where the update runs
 * (default: the CPU) and is saved and restored with the parameters. Update
 * nodes run in HX_RUN_TRAIN runs, after every use of the parameter's old
 * value. Parameters must be f32 (an f32 master; cast it for f16/bf16 use).
 * Needs hx_graph_backward first. */
HX_API hx_status hx_graph_apply_optimizer(hx_graph *g, hx_tensor *param,
                                          const hx_optimizer_config *cfg);

/* ---- sessions -------------------------------------------------------------- */

typedef struct hx_session hx_session;

typedef enum hx_accelerator {
    HX_ACCELERATOR_AUTO, HX_ACCELERATOR_CUDA, HX_ACCELERATOR_EMU, HX_ACCELERATOR_NONE
} hx_accelerator;

/* Dynamic loss scaling (for f16 training): the loss gradient is seeded with
 * `scale` instead of 1, updates divide it out, and a step whose gradients
 * hold an Inf or NaN is skipped (nothing changes but the scale, which is
 * multiplied by backoff_factor); after growth_interval good steps in a row
 * the scale is multiplied by growth_factor. */
typedef struct hx_loss_scale_config {
    bool enabled;
    double initial_scale;   /* 65536 */
    int growth_interval;    /* 2000 */
    double growth_factor;   /* 2 */
    double backoff_factor;  /* 0.5 */
} hx_loss_scale_config;

/* What placement does with an op that has no kernel on its target. */
typedef enum hx_fallback {
    HX_FALLBACK_ERROR, /* hx_session_create fails with HX_ERR_NO_KERNEL naming the op */
    HX_FALLBACK_CPU    /* the op moves to the CPU; HX_DEBUG=placement lists each move */
} hx_fallback;

/* The accelerator: AUTO is cuda where a GPU is usable, else emu (an
 * emulated accelerator: separate capped memory, counted copies, the CPU
 * kernels); CUDA fails with HX_ERR_UNSUPPORTED in builds without it; NONE
 * runs every op on the CPU with no copies. Ops marked DEVICE (or whose op
 * defaults to it) run on the accelerator, copies are inserted where a value
 * crosses devices, one per (tensor, destination). A parameter lives where
 * its optimizer update runs, else where the ops that read it run.
 * Set HX_DEBUG=placement to print each op's target and why, and each copy. */
typedef struct hx_session_config {
    int n_threads;                /* host threads for kernels; 0: all cores */
    uint64_t seed;                /* parameter init and dropout */
    hx_accelerator accelerator;   /* AUTO */
    size_t max_device_memory;     /* accelerator memory cap in bytes; 0: 8 GiB for emu */
    hx_fallback fallback;         /* HX_FALLBACK_ERROR */
    hx_loss_scale_config loss_scale;
    /* CUDA (accelerator CUDA, or AUTO where a GPU is usable) */
    int cuda_device;              /* device index: 0 */
    bool allow_tf32;              /* f32 matmuls may use TF32 tensor cores (10-bit
                                     mantissa products): false, full f32 */
} hx_session_config;
HX_API hx_session_config hx_session_config_default(void);

/* Plans memory and initialises parameters. The graph is frozen while a
 * session exists (adding ops fails with HX_ERR_STATE) and must outlive it. */
HX_API hx_status hx_session_create(hx_graph *g, const hx_session_config *cfg, hx_session **out);
HX_API void hx_session_free(hx_session *s);

/* A feed or fetch names its tensor by `tensor` or, when that is NULL, by
 * `name`. `bytes` must equal the tensor's size. */
typedef struct hx_feed {
    const char *name;
    const hx_tensor *tensor;
    const void *data;
    size_t bytes;
} hx_feed;
typedef struct hx_fetch {
    const char *name;
    const hx_tensor *tensor;
    void *data; /* receives the value */
    size_t bytes;
} hx_fetch;

enum { HX_RUN_TRAIN = 1 }; /* run optimizer updates; dropout active */

/* Runs what the fetches need (plus, with HX_RUN_TRAIN, every update node)
 * and copies the fetched values out (a fetched parameter shows its value
 * after the step). Every input that is needed must be fed. Before any
 * update runs, every gradient is scanned: an Inf or NaN fails the run with
 * HX_ERR_NUMERIC naming the parameter (or, with loss scaling, skips the
 * step). On failure, parameters and optimizer state are unchanged. */
HX_API hx_status hx_session_run(hx_session *s, const hx_feed *feeds, int n_feeds,
                                const hx_fetch *fetches, int n_fetches, unsigned flags);

/* Copies a parameter's value (or constant's) out / in. */
HX_API hx_status hx_session_read(hx_session *s, const hx_tensor *t, void *data, size_t bytes);
HX_API hx_status hx_session_write(hx_session *s, const hx_tensor *t, const void *data,
                                  size_t bytes);

typedef struct hx_memory_stats {
    size_t persistent_bytes;       /* host: params, constants, optimizer state */
    size_t transient_planned_bytes;/* host: the arena the plan needs (largest plan so far) */
    size_t transient_tensor_bytes; /* sum of the sizes of those plans' transient tensors */
    /* the accelerator (all 0 without one) */
    size_t device_capacity;
    size_t device_persistent_bytes;
    size_t device_transient_planned_bytes;
    size_t device_used_bytes, device_peak_bytes;
} hx_memory_stats;
/* Plans the training step (all update nodes) if it has not run yet. */
HX_API hx_status hx_session_memory_stats(hx_session *s, hx_memory_stats *out);

/* How the last run's plan (or, before any run, the training step's) was
 * placed and split. */
typedef struct hx_placement_stats {
    int n_ops, n_device_ops;
    int n_fallbacks;        /* ops moved to the CPU by HX_FALLBACK_CPU (whole graph) */
    int n_subgraphs, n_device_subgraphs;
    int n_copies, n_h2d, n_d2h; /* per run: one per (tensor, destination device) */
    size_t copy_bytes;      /* per run */
} hx_placement_stats;
HX_API hx_status hx_session_placement_stats(hx_session *s, hx_placement_stats *out);
/* Writes that plan as Graphviz DOT (ops coloured by target, clustered by
 * subgraph, copies drawn as their own nodes) / as a text summary
 * (subgraphs, ops per subgraph, copies and bytes per step). */
HX_API hx_status hx_session_dump_dot(hx_session *s, const char *path);
HX_API hx_status hx_session_dump_summary(hx_session *s, const char *path);

/* Number of HX_RUN_TRAIN runs that succeeded and were not skipped. */
HX_API int64_t hx_session_step(const hx_session *s);

typedef struct hx_train_stats {
    int64_t step;          /* steps taken */
    int64_t skipped_steps; /* skipped for non-finite gradients (loss scaling) */
    bool last_skipped;     /* the last HX_RUN_TRAIN run skipped its update */
    double loss_scale;     /* current scale (1 when loss scaling is off) */
} hx_train_stats;
HX_API hx_status hx_session_train_stats(const hx_session *s, hx_train_stats *out);

/* Checkpoints: every parameter and optimizer state tensor, the step count
 * and the loss scale. Written to a temporary file and renamed into place
 * (atomic); each tensor carries an XXH3 checksum. Loading checks the whole
 * file against the session's graph (names, dtypes, shapes, checksums) before
 * changing anything: a truncated or corrupt file fails with HX_ERR_CORRUPT
 * and leaves the session as it was. */
HX_API hx_status hx_session_save(hx_session *s, const char *path);
HX_API hx_status hx_session_load(hx_session *s, const char *path);

#ifdef __cplusplus
}
#endif
#endif
