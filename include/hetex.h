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
 * - Freeing NULL is a no-op. Strings passed in are copied; strings and
 *   pointers returned stay valid as long as the object they come from
 *   (unless their block says otherwise), and the caller never frees them.
 *
 * Contracts. Every function (or a run of functions declared together) is
 * preceded by a block: what it does, then four labelled lines.
 *   Fails:      each failure status and when; "never" for calls that cannot
 *               fail (the line then says what a NULL argument gives).
 *   On failure: what is left unchanged, and what *out holds (left out
 *               after "Fails: never").
 *   Ownership:  who owns what is passed in and what comes back.
 *   Threads:    which calls may run at the same time, on which objects.
 * "One thread per X" means: calls on one X (and on what belongs to it, such
 * as a graph's tensors) must not overlap; calls on different X may run on
 * different threads at once. Sessions and embedding tables detect a
 * breach (HX_ERR_STATE, see hx_session_run and the tables' section); for
 * other objects nothing detects it. hetex's process-wide state is the
 * thread-local error message and the count of live communicators that
 * starts and stops MPI (locked; see hx_comm_create); automatic placement's
 * op-cost cache is a file, replaced atomically. So "any thread" calls may
 * run anywhere at any time. .ci/check_contracts.sh checks that
 * every function has its block. Long explanations live in docs/
 * (docs/offload.md, docs/numerics.md); the header keeps the contract and
 * points there.
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
/* The library's version, "MAJOR.MINOR.PATCH", as built (it may differ from
 * the HX_VERSION_* of the header a program was compiled with).
 *   Fails:      never.
 *   Ownership:  a static string.
 *   Threads:    any thread.
 */
HX_API const char *hx_version(void);

/* ---- status and errors ------------------------------------------------- */

typedef enum hx_status {
    HX_OK = 0,
    HX_ERR_INVALID_ARGUMENT, /* NULL handle, bad enum, bad option */
    HX_ERR_SHAPE,            /* shapes that do not fit the op */
    HX_ERR_DTYPE,            /* dtypes that do not fit the op */
    HX_ERR_NOT_FOUND,        /* unknown name */
    HX_ERR_INDEX,            /* an id or label out of range (at run time; a padding_id
                                when the bag is added) */
    HX_ERR_OUT_OF_MEMORY,    /* host allocation failed */
    HX_ERR_DEVICE_OOM,       /* device memory cap or capacity exceeded */
    HX_ERR_NO_KERNEL,        /* op has no kernel on its target */
    HX_ERR_NUMERIC,          /* NaN/Inf where it is not allowed */
    HX_ERR_IO,               /* file or disk failure */
    HX_ERR_CORRUPT,          /* checksum or format mismatch */
    HX_ERR_STATE,            /* call not valid now (e.g. graph frozen by a session) */
    HX_ERR_UNSUPPORTED,      /* valid request this build cannot serve */
    HX_ERR_INTERNAL,
    HX_ERR_COMM              /* a collective failed: MPI's or NCCL's error, a peer that
                                did not answer within the communicator's timeout */
} hx_status;

/* The message of the last failure on this thread ("" if none yet): what
 * failed, where, and how to fix it. A later failing call on the same
 * thread replaces it; successful calls leave it as it is.
 *   Fails:      never.
 *   Ownership:  thread-local storage of hetex, valid until the next failing
 *               call on this thread; copy it to keep it.
 *   Threads:    any thread; each thread sees its own message.
 */
HX_API const char *hx_last_error(void);
/* The status of the failure whose message hx_last_error() holds (HX_OK
 * if none yet on this thread): what a call that returns NULL instead of a
 * status (an op builder, hx_graph_create) failed with. Set together with
 * the message, so the two always describe the same failure; successful
 * calls leave it as it is.
 *   Fails:      never.
 *   Ownership:  a value.
 *   Threads:    any thread; each thread sees its own status.
 */
HX_API hx_status hx_last_status(void);
/* The status's name, e.g. "HX_ERR_SHAPE"; "HX_ERR_(unknown)" for a value
 * outside the enum.
 *   Fails:      never.
 *   Ownership:  a static string.
 *   Threads:    any thread.
 */
HX_API const char *hx_status_name(hx_status st);

/* ---- dtypes, targets -------------------------------------------------- */

typedef enum hx_dtype { HX_DTYPE_F32 = 0, HX_DTYPE_F16, HX_DTYPE_BF16, HX_DTYPE_I32, HX_DTYPE_I64 } hx_dtype;
/* Bytes per element, and the name ("f32", "f16", "bf16", "i32", "i64").
 *   Fails:      never: an invalid dtype gives 0 and "(invalid dtype)".
 *   Ownership:  the name is a static string.
 *   Threads:    any thread.
 */
HX_API size_t hx_dtype_size(hx_dtype dt);
HX_API const char *hx_dtype_name(hx_dtype dt);

/* Where an op runs. DEFAULT defers to the graph's scoped default, then to
 * the op's own default (or, with hx_session_config.auto_placement, to
 * AUTO). AUTO leaves the choice to the session's placement planner, which
 * measures each op on both targets and the copies between them (see
 * "Automatic placement" below); CPU and DEVICE are binding. */
typedef enum hx_target {
    HX_TARGET_DEFAULT = 0, HX_TARGET_CPU, HX_TARGET_DEVICE, HX_TARGET_AUTO
} hx_target;
/* "default", "cpu", "device" or "auto".
 *   Fails:      never: an invalid target gives "(invalid target)".
 *   Ownership:  a static string.
 *   Threads:    any thread.
 */
HX_API const char *hx_target_name(hx_target t);

#define HX_MAX_DIMS 8
/* The most elements a tensor may hold (2^56: its bytes, and those of its
 * f32 gradient and optimizer state, stay far inside int64 and size_t).
 * A leaf, an op's output or a reshape whose shape holds more is refused
 * with HX_ERR_SHAPE where it is made. */
#define HX_MAX_ELEMENTS ((int64_t)1 << 56)

/* ---- graph and tensors ------------------------------------------------ */

typedef struct hx_graph hx_graph;   /* owns its tensors */
typedef struct hx_tensor hx_tensor; /* a value: a leaf or the output of one op */

/* A new, empty graph.
 *   Fails:      NULL with HX_ERR_OUT_OF_MEMORY.
 *   On failure: nothing was allocated.
 *   Ownership:  the caller's: free it with hx_graph_free.
 *   Threads:    any thread.
 */
HX_API hx_graph *hx_graph_create(void);
/* Frees the graph and all its tensors. The embedding tables it used are
 * not freed; they stop counting it. While sessions over g exist, the free
 * is deferred (as sqlite3_close_v2 does): the sessions keep working, and
 * the last hx_session_free frees g (only then do its tables stop counting
 * it).
 *   Fails:      never (NULL: no-op).
 *   Ownership:  g and every hx_tensor of g become invalid, except that
 *               the tensors stay valid in calls on g's remaining sessions
 *               (feeds, fetches, hx_session_read/write).
 *   Threads:    one thread per graph.
 */
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
/* Initialiser values, filled in (arguments are not checked here:
 * hx_graph_param refuses a bad one). For Xavier, fan_in/fan_out are the
 * last two dims (rows, cols) of the parameter.
 *   Fails:      never.
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API hx_init hx_init_zeros(void);
HX_API hx_init hx_init_constant(double value);
HX_API hx_init hx_init_uniform(double low, double high);
HX_API hx_init hx_init_normal(double mean, double std);
HX_API hx_init hx_init_xavier_uniform(double gain);
HX_API hx_init hx_init_xavier_normal(double gain);

/* Leaves: an input fed at each run, a parameter (f32, f16 or bf16) that a
 * session initialises with `init` and trains, and a constant holding a
 * copy of numel * dtype size bytes of data. Names must be unique in the
 * graph; shape has ndim (0..HX_MAX_DIMS) positive dims; ndim 0 is a scalar.
 *   Fails:      NULL with HX_ERR_INVALID_ARGUMENT (g NULL, name NULL, "" or
 *               taken, a bad initialiser, constant data NULL); HX_ERR_STATE
 *               (a session freezes g); HX_ERR_DTYPE (an invalid dtype, an
 *               integer parameter); HX_ERR_SHAPE (ndim outside 0..8, shape
 *               NULL with ndim > 0, a dim <= 0, more than HX_MAX_ELEMENTS
 *               elements); HX_ERR_OUT_OF_MEMORY.
 *   On failure: g is unchanged.
 *   Ownership:  name, shape and data are copied; the tensor belongs to g.
 *   Threads:    one thread per graph.
 */
HX_API hx_tensor *hx_graph_input(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                                 const int64_t *shape);
HX_API hx_tensor *hx_graph_param(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                                 const int64_t *shape, hx_init init);
HX_API hx_tensor *hx_graph_constant(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                                    const int64_t *shape, const void *data);

/* The tensor with this name (case-sensitive).
 *   Fails:      NULL with HX_ERR_INVALID_ARGUMENT (g or name NULL) or
 *               HX_ERR_NOT_FOUND (no such tensor).
 *   On failure: nothing changes.
 *   Ownership:  the tensor belongs to g.
 *   Threads:    one thread per graph; reads only, so several threads may
 *               find in a graph that nothing changes (one frozen by a
 *               session, with no hx_tensor_set_name running).
 */
HX_API hx_tensor *hx_graph_find(const hx_graph *g, const char *name);
/* The number of tensors in g, the ones hetex added (gradients, optimizer
 * state, update nodes) included.
 *   Fails:      never (NULL: 0).
 *   Ownership:  a value.
 *   Threads:    as hx_graph_find.
 */
HX_API int hx_graph_tensor_count(const hx_graph *g);

/* Op outputs get names like "matmul_7"; rename them to fetch by a name of
 * your own. Allowed while a session exists (feeds and fetches by the old
 * name then fail with HX_ERR_NOT_FOUND).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t or name NULL, name "" or taken by
 *               another tensor); HX_ERR_OUT_OF_MEMORY.
 *   On failure: t keeps its name.
 *   Ownership:  name is copied.
 *   Threads:    one thread per graph.
 */
HX_API hx_status hx_tensor_set_name(hx_tensor *t, const char *name);
/* What a tensor is: name, dtype, rank, dimension i (negative counts from
 * the end), element count, bytes (numel * dtype size), kind, and the op
 * name of the node producing it ("input", "param", "constant" for leaves).
 *   Fails:      never. A NULL t gives NULL (names), HX_DTYPE_F32, -1
 *               (ndim), 0 (numel, nbytes), HX_TENSOR_INTERMEDIATE; a dim
 *               out of range gives -1.
 *   Ownership:  strings belong to the tensor's graph: the name is valid
 *               until the tensor is renamed or the graph freed.
 *   Threads:    as hx_graph_find.
 */
HX_API const char *hx_tensor_name(const hx_tensor *t);
HX_API hx_dtype hx_tensor_dtype(const hx_tensor *t);
HX_API int hx_tensor_ndim(const hx_tensor *t);
HX_API int64_t hx_tensor_dim(const hx_tensor *t, int i);
HX_API int64_t hx_tensor_numel(const hx_tensor *t);
HX_API size_t hx_tensor_nbytes(const hx_tensor *t);
HX_API hx_tensor_kind hx_tensor_kind_of(const hx_tensor *t);
HX_API const char *hx_tensor_op_name(const hx_tensor *t);

/* ---- targets -------------------------------------------------------------- */

/* Sets the target attribute of the op producing t (or of a parameter: where
 * it lives). Placement reads it when a session is created.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t NULL, an invalid target, t an
 *               input or constant, which have no op); HX_ERR_STATE (a
 *               session freezes the graph).
 *   On failure: t is unchanged.
 *   Ownership:  nothing changes hands.
 *   Threads:    one thread per graph.
 */
HX_API hx_status hx_tensor_set_target(hx_tensor *t, hx_target target);
/* The attribute: as set on the op, else the scoped default when the op was
 * added, else DEFAULT (the op's own default applies).
 *   Fails:      never (NULL: HX_TARGET_DEFAULT).
 *   Ownership:  a value.
 *   Threads:    as hx_graph_find.
 */
HX_API hx_target hx_tensor_target(const hx_tensor *t);
/* Scoped default for ops added until the matching pop (a stack, 16 deep).
 * Embedding ops ignore it (they run where their table is, on the CPU).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (g NULL, an invalid target);
 *               HX_ERR_STATE (push on a full stack, pop on an empty one).
 *   On failure: the stack is unchanged.
 *   Ownership:  nothing changes hands.
 *   Threads:    one thread per graph.
 */
HX_API hx_status hx_graph_push_target(hx_graph *g, hx_target target);
HX_API hx_status hx_graph_pop_target(hx_graph *g);

/* ---- activation recomputation -------------------------------------------------
 * Ops added between a push and its pop form one checkpointed block. A block
 * keeps its inputs and outputs (the values ops outside it read); its other
 * values that depend on an activation (not those made from parameters,
 * constants and inputs alone, such as a weight's cast) are emitted a second
 * time by hx_graph_backward, just before the block's gradients, as ops named
 * "<name>/recompute" with the original's attributes and target. A session
 * whose offload config sets `recompute` runs them and has the gradients
 * read them, so the block's internal activations are freed once the forward
 * has read them; other sessions of the graph skip them. Dropout emitted
 * again draws the same mask (its seed and stream are the op's): results
 * are bitwise those without recomputation. Embedding ops and batchnorm
 * (its running statistics) are never recomputed: their outputs are kept.
 * Each push opens a new block; scopes do not nest.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (g NULL); HX_ERR_STATE (push with a
 *               scope open, pop with none open).
 *   On failure: nothing changes.
 *   Ownership:  nothing changes hands.
 *   Threads:    one thread per graph.
 */
HX_API hx_status hx_graph_push_recompute(hx_graph *g);
HX_API hx_status hx_graph_pop_recompute(hx_graph *g);

/* ---- ops ------------------------------------------------------------------
 * Float ops take f32, f16 or bf16: the float inputs of one op must share a
 * dtype (else HX_ERR_DTYPE naming both: hx_cast one), which is the output's
 * dtype. f16/bf16 are storage: arithmetic (and every sum) is f32, and an
 * op's result is rounded once to nearest even (reduce_mean and mse are
 * several ops). Gradients have their tensor's dtype. Shape and dtype
 * errors are reported here, when the op is added, naming the op and its
 * inputs; index errors (gather ids, labels) when a run reads them.
 *
 * What every op builder below shares, which its block calls "as every op":
 *   Fails:      NULL with HX_ERR_INVALID_ARGUMENT when g or an input is
 *               NULL (after an earlier failure the message keeps that
 *               first one's), an input belongs to another graph or is an
 *               optimizer update; HX_ERR_STATE when a session freezes g;
 *               HX_ERR_DTYPE for a float input that is not f32, f16 or
 *               bf16, or float inputs of different dtypes; HX_ERR_SHAPE
 *               for an output of more than HX_MAX_ELEMENTS elements;
 *               HX_ERR_OUT_OF_MEMORY.
 *   On failure: g is unchanged (an op built of several, such as mse, adds
 *               none of them).
 *   Ownership:  the output belongs to g; inputs are not changed.
 *   Threads:    one thread per graph. */

/* (..., M, K) x (..., K, N) -> (..., M, N); trans_a/trans_b transpose the last
 * two dims of a/b. Batch dims must be equal, or b is 2-D and shared by every
 * batch (then trans_a must be false).
 *   Fails:      as every op; HX_ERR_SHAPE when a or b has fewer than 2
 *               dims, batch dims differ (b not 2-D), trans_a with a shared
 *               b, or the inner dims differ.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_matmul(hx_graph *g, hx_tensor *a, hx_tensor *b, bool trans_a, bool trans_b);

/* a + b, a - b, a * b, a / b elementwise with numpy broadcasting.
 *   Fails:      as every op; HX_ERR_SHAPE when the shapes do not broadcast.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_add(hx_graph *g, hx_tensor *a, hx_tensor *b);
HX_API hx_tensor *hx_sub(hx_graph *g, hx_tensor *a, hx_tensor *b);
HX_API hx_tensor *hx_mul(hx_graph *g, hx_tensor *a, hx_tensor *b);
HX_API hx_tensor *hx_div(hx_graph *g, hx_tensor *a, hx_tensor *b);
/* x * s.
 *   Fails:      as every op; HX_ERR_INVALID_ARGUMENT when s is not finite.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_scale(hx_graph *g, hx_tensor *x, float s);
/* x (..., N) + b (N).
 *   Fails:      as every op; HX_ERR_SHAPE unless b is 1-D with x's last dim.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_bias_add(hx_graph *g, hx_tensor *x, hx_tensor *b);

/* Elementwise functions, same shape out. gelu is the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's); gelu_erf the
 * exact x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (BERT's, PyTorch's default).
 *   Fails:      as every op.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_relu(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_gelu(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_gelu_erf(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_sigmoid(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_tanh(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_exp(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_log(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_sqrt(hx_graph *g, hx_tensor *x);

/* Over the last axis.
 *   Fails:      as every op; HX_ERR_SHAPE when x is a scalar.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_softmax(hx_graph *g, hx_tensor *x);
HX_API hx_tensor *hx_log_softmax(hx_graph *g, hx_tensor *x);
/* Layer normalisation over the last axis: x (..., N), gamma (N), beta (N).
 *   Fails:      as every op; HX_ERR_SHAPE unless gamma and beta are 1-D with
 *               x's last dim; HX_ERR_INVALID_ARGUMENT unless eps > 0 and
 *               finite.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_layernorm(hx_graph *g, hx_tensor *x, hx_tensor *gamma, hx_tensor *beta,
                               float eps);

/* The same elements in another shape (any dtype); one dim may be -1.
 *   Fails:      as every op; HX_ERR_SHAPE when ndim is outside 0..8, shape
 *               is NULL with ndim > 0, a dim is <= 0 other than one -1, or
 *               the element counts differ.
 *   On failure: as every op.
 *   Ownership:  as every op; shape is copied.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_reshape(hx_graph *g, hx_tensor *x, int ndim, const int64_t *shape);
/* Output dim i is input dim perm[i] (any dtype; perm has ndim entries).
 *   Fails:      as every op; HX_ERR_INVALID_ARGUMENT when perm is NULL (x not
 *               a scalar); HX_ERR_SHAPE when perm is not a permutation.
 *   On failure: as every op.
 *   Ownership:  as every op; perm is copied.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_permute(hx_graph *g, hx_tensor *x, const int *perm);
/* The n tensors xs joined along axis (negative counts from the end); any
 * dtype, the same for all.
 *   Fails:      as every op; HX_ERR_INVALID_ARGUMENT when n < 1 or xs is
 *               NULL; HX_ERR_SHAPE when axis is out of range or an input
 *               differs from xs[0] in dtype, rank or a dim besides axis.
 *   On failure: as every op.
 *   Ownership:  as every op; the array xs is not kept.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_concat(hx_graph *g, int n, hx_tensor *const *xs, int axis);
/* Elements [start, end) of one axis (negative axis counts from the end;
 * start and end do not); any dtype.
 *   Fails:      as every op; HX_ERR_SHAPE unless the axis exists and
 *               0 <= start < end <= its dim.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_slice(hx_graph *g, hx_tensor *x, int axis, int64_t start, int64_t end);

/* Sum or mean over the listed axes (naxes 0: all axes; negative axes count
 * from the end); keepdims keeps them as dims of 1.
 *   Fails:      as every op; HX_ERR_INVALID_ARGUMENT when naxes < 0 or axes
 *               is NULL with naxes > 0; HX_ERR_SHAPE for an axis out of
 *               range or repeated.
 *   On failure: as every op.
 *   Ownership:  as every op; axes is copied.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_reduce_sum(hx_graph *g, hx_tensor *x, int naxes, const int *axes,
                                bool keepdims);
HX_API hx_tensor *hx_reduce_mean(hx_graph *g, hx_tensor *x, int naxes, const int *axes,
                                 bool keepdims);

/* Between f32, f16 and bf16 (round to nearest even).
 *   Fails:      as every op; HX_ERR_DTYPE when x or dt is not a float dtype.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_cast(hx_graph *g, hx_tensor *x, hx_dtype dt);

/* table (V, D) any float dtype, ids (...) i32/i64 -> (..., D). An id outside
 * [0, V) fails the run with HX_ERR_INDEX naming the id and its position.
 *   Fails:      as every op; HX_ERR_DTYPE when ids are not i32/i64;
 *               HX_ERR_SHAPE unless table is a 2-D float and ids have at
 *               most 7 dims.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_gather(hx_graph *g, hx_tensor *table, hx_tensor *ids);

/* x (..., T, T): -inf above the diagonal (attention scores before softmax).
 *   Fails:      as every op; HX_ERR_SHAPE unless x ends in two equal dims.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_causal_mask(hx_graph *g, hx_tensor *x);

/* Scalar mean losses. labels (N) i32/i64 in [0, C) for logits (N, C) (a
 * label outside fails the run with HX_ERR_INDEX); bce_with_logits and mse
 * take two tensors of one shape. The
 * loss has the logits' dtype, rounded once from f32: for a precise f16/bf16
 * model, hx_cast the logits to f32 first (hx_graph_backward needs an f32
 * loss anyway; a 16-bit loss can be cast to f32 too, at 16-bit precision).
 *   Fails:      as every op; HX_ERR_DTYPE when labels are not i32/i64;
 *               HX_ERR_SHAPE when logits are not (N, C) with labels (N), or
 *               the two tensors of bce_with_logits or mse differ in shape.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_cross_entropy(hx_graph *g, hx_tensor *logits, hx_tensor *labels);
HX_API hx_tensor *hx_bce_with_logits(hx_graph *g, hx_tensor *logits, hx_tensor *targets);
HX_API hx_tensor *hx_mse(hx_graph *g, hx_tensor *pred, hx_tensor *target);

/* Active only in HX_RUN_TRAIN runs (identity otherwise). The mask is a pure
 * function of (seed, op, step), so runs repeat bitwise. 0 <= p < 1.
 *   Fails:      as every op; HX_ERR_INVALID_ARGUMENT when p is outside
 *               [0, 1).
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_dropout(hx_graph *g, hx_tensor *x, float p, uint64_t seed);

/* ---- convolutional networks -------------------------------------------------
 * Images are NCHW: x (N, C, H, W). A window op (conv, pooling) has, per
 * spatial axis, a kernel size k, stride s >= 1, zero padding p >= 0 and
 * dilation d >= 1; its output size is (H + 2p - d(k-1) - 1) / s + 1, which
 * must be >= 1. Storage f32, f16 or bf16, arithmetic f32 (as every op). */
typedef struct hx_conv2d_params {
    int stride[2];   /* (h, w); 0 means 1 */
    int padding[2];  /* (h, w) zeros on each side */
    int dilation[2]; /* (h, w); 0 means 1 */
    int groups;      /* C and C_out divide by it; C = groups: depthwise; 0 means 1 */
} hx_conv2d_params;

/* y (N, C_out, OH, OW) = cross-correlation of x (N, C, H, W) with
 * w (C_out, C / groups, KH, KW), no bias (hx_add a (C_out, 1, 1) tensor).
 * Built as im2col (a transient (N, C*KH*KW, OH*OW) tensor in the memory
 * plan, kept for the weight gradient) and one GEMM per group and image;
 * p NULL: stride 1, no padding. Sums are f32 in OpenBLAS's order (not
 * PyTorch's: the last bits differ). On a cuda device with cuDNN 9 (found
 * at build time, opened at run time) the session runs the pair, and each
 * gradient, as one cuDNN call of x and w instead (no columns in the
 * device's memory; a workspace of at most the columns' bytes), with
 * cuDNN's heuristic choice among its deterministic algorithms: the same
 * bits run to run on one GPU and cuDNN version, not the im2col path's;
 * HX_DEBUG=placement prints each such node.
 *   Fails:      as every op; HX_ERR_SHAPE when x is not 4-D, w not 4-D,
 *               C or C_out not a multiple of groups, w's second dim not
 *               C / groups, or the output would be empty;
 *               HX_ERR_INVALID_ARGUMENT for a negative stride, padding,
 *               dilation or groups.
 *   On failure: as every op.
 *   Ownership:  as every op; p is read during the call.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_conv2d(hx_graph *g, hx_tensor *x, hx_tensor *w, const hx_conv2d_params *p);

/* Pooling over (kh, kw) windows of x (N, C, H, W), stride (sh, sw) (0:
 * the kernel size), zero padding (ph, pw) of at most half the kernel. Max
 * pooling ignores padding and passes the gradient to the first maximum of
 * a window; average pooling divides by kh * kw, padding included
 * (PyTorch's count_include_pad). Global average pooling: (N, C, H, W) ->
 * (N, C), the mean over H and W (a reduce_mean).
 *   Fails:      as every op; HX_ERR_SHAPE when x is not 4-D or the output
 *               would be empty; HX_ERR_INVALID_ARGUMENT for a kernel < 1, a
 *               negative stride, a padding past half the kernel.
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_max_pool2d(hx_graph *g, hx_tensor *x, int kh, int kw, int sh, int sw, int ph,
                                int pw);
HX_API hx_tensor *hx_avg_pool2d(hx_graph *g, hx_tensor *x, int kh, int kw, int sh, int sw, int ph,
                                int pw);
HX_API hx_tensor *hx_global_avg_pool2d(hx_graph *g, hx_tensor *x);

/* Batch normalisation of x (N, C, H, W) or (N, C) per channel, with gamma
 * and beta (C) of x's dtype. In HX_RUN_TRAIN runs it normalises with the
 * batch's mean and (biased) variance and updates the running statistics
 * (when the op runs: a run that fetches nothing it feeds leaves them):
 * running = (1 - momentum) * running + momentum * batch (the variance
 * unbiased, as PyTorch); in other runs it normalises with the running
 * statistics (inference), and gradients are those of that function. The
 * running statistics are f32 persistent state named "<gamma>/running_mean"
 * (starts at 0) and "<gamma>/running_var" (starts at 1): not trained,
 * saved in checkpoints, read and written with hx_session_read/write; they
 * live where the op runs. One batchnorm per gamma. A recompute block keeps
 * its output instead of running it twice in a step (the statistics would
 * be updated twice).
 *   Fails:      as every op; HX_ERR_SHAPE when x is not 2-D or 4-D, or gamma
 *               or beta is not (C); HX_ERR_INVALID_ARGUMENT when eps is not
 *               positive and finite, momentum outside [0, 1], or gamma
 *               already has running statistics (a second batchnorm of it).
 *   On failure: as every op.
 *   Ownership:  as every op.
 *   Threads:    as every op.
 */
HX_API hx_tensor *hx_batchnorm(hx_graph *g, hx_tensor *x, hx_tensor *gamma, hx_tensor *beta,
                               float momentum, float eps);

/* ---- autodiff and optimizers ----------------------------------------------- */

/* Adds gradient nodes of the scalar `loss` for every parameter (and
 * embedding lookup) it depends on. Gradients of a tensor with several
 * consumers are summed; a gradient node inherits the target of its forward
 * op. Once per graph.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (g or loss NULL, loss of another
 *               graph, a leaf (a parameter, input, constant) rather than
 *               an op's output, or depending on no parameter or table); HX_ERR_STATE
 *               (a session freezes g, or g has gradients already);
 *               HX_ERR_SHAPE (loss is not an f32 scalar); HX_ERR_UNSUPPORTED
 *               (an op on the path has no gradient rule);
 *               HX_ERR_OUT_OF_MEMORY.
 *   On failure: g is unchanged: no gradient node is left.
 *   Ownership:  the gradient nodes belong to g.
 *   Threads:    one thread per graph.
 */
HX_API hx_status hx_graph_backward(hx_graph *g, hx_tensor *loss);
/* d loss / d t for a parameter (or any float tensor on the loss path).
 *   Fails:      NULL with HX_ERR_INVALID_ARGUMENT (t NULL) or
 *               HX_ERR_NOT_FOUND (t has no gradient: hx_graph_backward has
 *               not run, or t does not reach the loss).
 *   On failure: nothing changes.
 *   Ownership:  the gradient belongs to t's graph.
 *   Threads:    as hx_graph_find.
 */
HX_API hx_tensor *hx_tensor_grad(const hx_tensor *t);

/* ---- numerics ---------------------------------------------------------------
 * Updates and bag modes compute in f32, one rounding per operation in a
 * fixed order, with fused multiply-adds where torch's CPU kernels fuse
 * (add_ with alpha) and nowhere else; hyper-parameter scalars are computed
 * in double and rounded to f32 once per call. Every path (scalar, AVX2,
 * AVX-512, CUDA) and thread count gives bitwise the same result. An
 * update's step t is hx_session_step() + 1, for tables too. Each formula in
 * its operation order: docs/numerics.md. Where results may differ from the
 * frameworks in the last bits, and why:
 * - Adam: torch 2.x updates the first moment by lerp (m + (1 - b1)(g - m),
 *   fused), hetex as torch 1.x did (fma(1 - b1, g, m * b1)); torch builds
 *   that fuse addcmul_ round Adam's second moment and Adagrad's accumulator
 *   once where hetex rounds twice (v * b2 + ((1 - b2) * g) * g, sum + g * g).
 *   Keras's Adam adds eps to sqrt(v) without bias correction (eps-hat):
 *   that differs by more than the last bits; hetex's eps is torch's.
 * - LazyAdam: torch.optim.SparseAdam orders its update differently
 *   (m + (g - m)(1 - b1), step * (m / den)) and counts its own steps;
 *   TF Addons computes the bias corrections in f32.
 * - EmbeddingBag MEAN multiplies the sum by f32(1 / count) where torch and
 *   TF divide by the count: at most 1 ulp apart. A weighted SUM rounds
 *   w * row before adding it; torch's FBGEMM kernel fuses the two.
 * The tests hold every optimizer to a double-precision reference within
 * stated ulp bounds and to golden values of the frameworks' formulas
 * (docs/numerics.md lists both). */

typedef enum hx_optimizer_kind {
    HX_OPTIMIZER_SGD,     /* torch.optim.SGD: momentum, dampening, Nesterov */
    HX_OPTIMIZER_ADAM,    /* torch.optim.Adam (weight_decay is L2 on the gradient) */
    HX_OPTIMIZER_ADAMW,   /* decoupled weight decay (AdamWeightDecay) */
    HX_OPTIMIZER_ADAGRAD, /* torch.optim.Adagrad */
    HX_OPTIMIZER_FTRL     /* FTRL-proximal, TensorFlow's ApplyFtrl(V2), lr_power -0.5 */
} hx_optimizer_kind;

/* Hyper-parameters are doubles, as the frameworks' Python floats are (see
 * Numerics above). Fields a kind does not use are ignored. */
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
 * TensorFlow for FTRL): lr 0.01 (Adam, AdamW, FTRL 1e-3), betas (0.9,
 * 0.999), eps 1e-8 (Adagrad 1e-10), AdamW weight_decay 0.01, FTRL
 * initial_accumulator 0.1, everything else 0.
 *   Fails:      never (an unknown kind gets SGD's values, and
 *               hx_graph_apply_optimizer refuses it).
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API hx_optimizer_config hx_optimizer_config_default(hx_optimizer_kind kind);
/* Adds an update node for `param`, or for every parameter with a gradient
 * and no update yet when param is NULL (plus one per embedding table with
 * an optimizer, see the embedding section). The optimizer's state
 * (momentum, moments, accumulators; f32, named "<param>/<state>": momentum,
 * exp_avg and exp_avg_sq, sum, accum and linear) lives where the update runs
 * (default: the CPU) and is saved and restored with the parameters. Update
 * nodes run in HX_RUN_TRAIN runs, after every use of the parameter's old
 * value. Parameters must be f32 (an f32 master; cast it for f16/bf16 use:
 * a master read only through one hx_cast to f16/bf16 gets that cast fused
 * into its update, the cast tensor becoming an HX_TENSOR_STATE that the
 * update rewrites). Needs hx_graph_backward first.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (g or cfg NULL, an unknown kind,
 *               hyper-parameters out of range: rates and decays finite and
 *               >= 0, betas in [0, 1), Nesterov with momentum 0 or
 *               dampening, FTRL with lr 0; param not a parameter of g);
 *               HX_ERR_STATE (a session freezes g, no hx_graph_backward
 *               yet, param has an optimizer already); HX_ERR_NOT_FOUND
 *               (param has no gradient; param NULL and there is nothing to
 *               add); HX_ERR_DTYPE (param, or with param NULL a parameter
 *               with a gradient, is not f32); HX_ERR_OUT_OF_MEMORY.
 *   On failure: g is unchanged.
 *   Ownership:  cfg is copied; update nodes and state belong to g.
 *   Threads:    one thread per graph.
 */
HX_API hx_status hx_graph_apply_optimizer(hx_graph *g, hx_tensor *param,
                                          const hx_optimizer_config *cfg);

/* ---- embedding tables ---------------------------------------------------------
 * Host tables of up to 10^9 rows (f32, f16 or bf16 storage), looked up by
 * graph ops on the CPU and trained sparsely: only the rows a step looked up
 * are updated, in place, by the table's own optimizer; no table-sized
 * gradient ever exists. The rest of the model may run on the device: the
 * gathered rows are copied there, never the table.
 *
 *   hx_embedding_config ec = hx_embedding_config_default();
 *   ec.name = "user"; ec.rows = 10000000; ec.dim = 64; ec.lazy_init = true;
 *   ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
 *   hx_embedding_table *user;
 *   hx_embedding_table_create(&ec, &user);
 *   hx_tensor *e = hx_embedding_bag(g, user, ids, offsets, NULL, HX_EMBEDDING_BAG_SUM, 0, 0);
 *   ...                                     // e: (bags, 64), an ordinary f32 tensor
 *   hx_graph_backward(g, loss);
 *   hx_graph_apply_optimizer(g, NULL, &opt); // dense params with opt, tables with their own
 *
 * A table belongs to the user and may be shared by several graphs and their
 * sessions; it must outlive them: hx_embedding_table_free fails with
 * HX_ERR_STATE while a graph uses it. Session checkpoints do not hold
 * tables: save them with hx_embedding_table_save.
 *
 * Threads, for every table call below: the table's own calls take a lock
 * in the table, so they may come from several threads at once, and runs
 * that only read a table (no HX_RUN_TRAIN) may overlap each other and
 * those calls. A run with HX_RUN_TRAIN, hx_embedding_table_write_rows,
 * hx_embedding_table_load and hx_embedding_table_set_optimizer hold the
 * table alone: one that starts while a run uses the table (or another of
 * them holds it) fails with HX_ERR_STATE naming the table, and so does a
 * run that starts while one of them holds it. */

typedef struct hx_embedding_table hx_embedding_table;

/* How the ids given to the ops (and to read/write rows) name rows. */
typedef enum hx_embedding_ids {
    HX_EMBEDDING_IDS_ROWS,    /* ids are rows in [0, rows); others: see out_of_range */
    HX_EMBEDDING_IDS_MODULO,  /* any id; row = id mod rows, the id read as unsigned 64 bits */
    HX_EMBEDDING_IDS_DYNAMIC  /* any id: a collisionless map gives an id its own row when a
                                 training run sees it (rows = capacity); an id without a
                                 row reads as a zero row and gets no update */
} hx_embedding_ids;

typedef enum hx_embedding_out_of_range {
    HX_EMBEDDING_OUT_OF_RANGE_ERROR, /* the run fails with HX_ERR_INDEX naming id and position */
    HX_EMBEDDING_OUT_OF_RANGE_ZERO   /* a zero row, no update, counted in the stats */
} hx_embedding_out_of_range;

/* Sparse optimizers: each touched row's gradient is summed over the step
 * first; untouched rows and their state do not change (no decay). */
typedef enum hx_embedding_optimizer_kind {
    HX_EMBEDDING_OPTIMIZER_NONE,        /* a frozen table: no update node */
    HX_EMBEDDING_OPTIMIZER_LAZY_ADAM,   /* torch SparseAdam / TF Addons LazyAdam */
    HX_EMBEDDING_OPTIMIZER_ADAGRAD,     /* torch Adagrad, per element */
    HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD, /* one accumulator per row: mean of g^2 (FBGEMM) */
    HX_EMBEDDING_OPTIMIZER_FTRL         /* TF FTRL-proximal, lr_power -0.5 */
} hx_embedding_optimizer_kind;

/* Fields a kind does not use are ignored. */
typedef struct hx_embedding_optimizer {
    hx_embedding_optimizer_kind kind;
    double lr;
    double beta1, beta2, eps;    /* LazyAdam; eps also Adagrad */
    double weight_decay;         /* LazyAdam, Adagrad: L2 on the gradient */
    double lr_decay;             /* Adagrad, row-wise Adagrad */
    double initial_accumulator;  /* Adagrad, row-wise Adagrad, FTRL */
    double l1, l2, l2_shrinkage; /* FTRL */
} hx_embedding_optimizer;
/* The frameworks' defaults: LazyAdam lr 1e-3, betas (0.9, 0.999), eps 1e-8;
 * Adagrad lr 1e-2, eps 1e-10; FTRL lr 1e-3, initial accumulator 0.1.
 *   Fails:      never (an unknown kind gets zeros, which the table refuses).
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API hx_embedding_optimizer hx_embedding_optimizer_default(hx_embedding_optimizer_kind kind);

typedef struct hx_comm hx_comm; /* a communicator: see "communicators" below */
typedef struct hx_ps hx_ps;     /* parameter servers: see "parameter servers" below */

/* How a table given a communicator (hx_embedding_config.comm) spreads over
 * its ranks. */
typedef enum hx_embedding_sharding {
    HX_EMBEDDING_SHARD_AUTO,  /* TABLE for tables whose rows take less than
                                 HX_EMBEDDING_SHARD_TABLE_BYTES, else ROWS */
    HX_EMBEDDING_SHARD_ROWS,  /* row-wise: ROWS and MODULO tables keep row r on rank
                                 r mod N; DYNAMIC tables keep id k on rank XXH3(k) mod N,
                                 each rank with its own id map of ceil(rows / N) rows
                                 (frequency filter, expiry and eviction per rank) */
    HX_EMBEDDING_SHARD_TABLE  /* the whole table on rank shard_rank */
} hx_embedding_sharding;
#define HX_EMBEDDING_SHARD_TABLE_BYTES ((size_t)16 << 20)

typedef struct hx_embedding_config {
    const char *name;         /* in messages and as the update node's name; NULL: "embedding" */
    int64_t rows, dim;        /* required: rows in [1, 2^40], dim in [1, 2^20] */
    hx_dtype dtype;           /* storage: F32, F16 or BF16; arithmetic and state are f32 */
    hx_init init;             /* ZEROS, UNIFORM or NORMAL; uniform(-0.05, 0.05) */
    uint64_t seed;            /* element (r, c) starts as a pure function of (seed, r, c) */
    bool lazy_init;           /* a row is written when first updated and reads as its
                                 initial value until then: creation costs no time */
    const char *backing_file; /* NULL: memory; else a file (created or truncated) holds the
                                 rows and state, mapped: a working store for tables larger
                                 than RAM, not a checkpoint */
    hx_embedding_ids ids;     /* ROWS */
    hx_embedding_out_of_range out_of_range; /* ROWS tables: ERROR */
    /* DYNAMIC tables */
    int64_t min_count;        /* times a training run must see an id before it gets a row;
                                 <= 1: at once */
    int64_t expire_after;     /* > 0: ids unseen for more than this many steps lose their
                                 row (checked every expire_after steps); 0: never */
    bool evict_when_full;     /* a full table frees the rows of the ids seen longest ago;
                                 false: the run fails with HX_ERR_OUT_OF_MEMORY */
    hx_embedding_optimizer optimizer; /* NONE */
    int n_threads;            /* threads that initialise the table; 0: all cores */
    /* Tables larger than host memory (README, "Tables on disk"). */
    const char *ssd_path;     /* NULL: rows live in memory (or backing_file); else a row
                                 store file (created, or reused when it holds a table of
                                 this shape, so that its checkpoints load after a crash)
                                 holds each row with its optimizer state, and a host cache
                                 of cache_bytes works on the rows in use; rows are lazy.
                                 The file stays when the table is freed. */
    size_t cache_bytes;       /* ssd_path: host memory for cached rows and their state;
                                 0: HX_EMBEDDING_CACHE_DEFAULT. One step may touch at most
                                 as many distinct rows of a table as its cache holds
                                 (else the run fails with HX_ERR_OUT_OF_MEMORY saying how
                                 much it needs); runs, reads and writes of rows may fail
                                 with HX_ERR_IO or HX_ERR_CORRUPT from the file, losing
                                 nothing */
    /* A device cache of hot rows (MindSpore's vocab_cache_size; README,
     * "Device cache"). > 0: up to this many rows of the table, with their
     * optimizer state, live in a cache in front of the host table: a
     * lookup makes the rows it needs resident (the misses copied in from
     * the host table in one batch per call, the victims, chosen by
     * frequency with aging, written back with their state) and gathers
     * from the cache; the update runs on the cached rows. Results are
     * bitwise those without the cache. Every dirty row is written back
     * by hx_embedding_table_save, _read_rows and _read_state; _write_rows,
     * _load and _set_optimizer write the cache back and empty it.
     * hx_embedding_table_prefetch copies the next batch's rows in ahead.
     * One step may touch at most this many distinct rows of the table
     * (else the run fails with HX_ERR_OUT_OF_MEMORY naming the count).
     * A session with an emulated accelerator holds the cache's rows and
     * state in its device memory (counted against max_device_memory, in
     * hx_memory_stats.device_used_bytes; hx_session_create fails with
     * HX_ERR_DEVICE_OOM naming the table when they do not fit) from its
     * creation until it is freed (the cache then returns to host memory,
     * its rows and state with it); the lookups and updates of cached rows
     * run the host's kernels on that memory, as every emulated kernel
     * does. Elsewhere (no session, or a CUDA device: the CUDA kernels
     * exist, kernels/gpu/emb_cache.cu, but are not wired) the cache is
     * host memory. Not with ssd_path (HX_ERR_UNSUPPORTED).
     * With ps (server mode) and a single worker (hx_ps_config.servers =
     * ranks - 1; ROWS or MODULO ids): the cache is on the worker, in
     * front of the servers, and owns the rows it holds (one worker: every
     * row has one writer): misses are fetched from the servers with their
     * optimizer state, the update runs on the worker, victims and dirty
     * rows go back to the servers with their state (on eviction, at
     * hx_embedding_table_save, _read_rows, _read_state, when the table is
     * freed, and at hx_ps_finish); results are bitwise those without the
     * cache, synchronous or stale, and the servers' checkpoints byte for
     * byte. What the servers hold of a row is its last write-back: a
     * worker that dies loses its dirty cached rows (the servers' tables
     * stay consistent and saveable, as of those write-backs). Such a
     * worker says it lives (a small message) when it has sent the servers
     * nothing for a quarter of hx_ps_config.timeout_s, at its next lookup
     * or update of the table, so a worker that makes neither, nor calls
     * hx_ps_finish, for timeout_s is taken for dead: hx_ps_serve fails
     * with HX_ERR_COMM naming it. With several workers, synchronous
     * (staleness 0), every worker caches the same hot rows with their
     * state (in its session's device memory as above), chosen at each
     * update from the rows every worker touched (their lists exchanged
     * over a duplicate of the workers' communicator): a cached row's
     * lookup reads the cache; its update sums the workers' gradients in
     * worker order and runs the optimizer on the rows some worker touched,
     * on every worker, as its server would (results bitwise those without
     * the cache at the same worker count, checkpoints byte for byte);
     * worker 0 writes an evicted row back before that step's push, every
     * worker fetches an admitted row after it; a save writes the saving
     * worker's changed rows back first, hx_ps_finish (or freeing the
     * table before it) worker 0's;
     * _read_rows and _read_state read cached rows from the cache. Every
     * worker must update the table every step and set its optimizer
     * alike (that writes the cache back and empties it). Each says it
     * lives as one worker does (above) while its lookups send the servers
     * nothing. A worker whose fetch or write-back failed fails its call,
     * and its next update fails on every worker at once, naming it and
     * the cause (HX_ERR_STATE; recreate the table and load a checkpoint);
     * its lookups until then ask the servers for the rows it lost. The
     * table's stats count the worker's own lookups, hits, fetches and
     * write-backs.
     * With staleness > 0 and several workers (a worker running ahead would
     * miss the others' gradients of its cached rows), and for DYNAMIC
     * tables, it is refused on every rank (HX_ERR_UNSUPPORTED);
     * hx_ps_config.cache_rows keeps pulled rows read-only instead.
     * With comm (collective mode: README, "Sharded embedding tables"),
     * the same way: every rank caches the same hot rows with their state
     * (in its session's device memory as above), chosen at each update
     * from the rows every rank touched; a cached row's lookup reads the
     * cache (no exchange for it), its update all-gathers the ranks'
     * gradients and applies them
     * in rank order on every rank, as its owner would (results bitwise
     * those without the cache at the same rank count, checkpoints byte
     * for byte); the rank that owns an evicted or changed row writes it
     * into its shard from its own copy (no message); an admitted row comes
     * from its owner with its state. Save, _read_rows and _read_state
     * write the changed rows back first; _write_rows, _load and
     * _set_optimizer also empty the cache. A rank whose fetch of
     * admitted rows failed fails its next lookup or update on every rank
     * at once, naming it, before anything changes. Every rank must create
     * the table with the same device_cache_rows (it is part of the
     * configuration compared at creation). DYNAMIC tables refuse it on
     * every rank (HX_ERR_UNSUPPORTED). 0: none. */
    int64_t device_cache_rows;
    /* Tables over several processes (README, "Sharded tables"). comm NULL:
     * the table lives in this process. Else the table is sharded over
     * comm's ranks in collective mode: every rank creates it alike (a
     * collective call), feeds its own ids to the ops, and holds its share
     * of the rows and their optimizer state. A lookup de-duplicates the
     * rank's ids, sends each owner its ids, gets their rows back and pools
     * bags here; the update sends each id's gradient, summed over this
     * rank's positions, to its owner, which sums the ranks' gradients in
     * rank order and applies the table's optimizer. The rows of a ROWS or
     * MODULO table start as they would unsharded; after training they
     * match a one-process run of the same global batch within float
     * rounding, not bitwise (the per-rank partial sums associate
     * differently), and are bitwise the same run to run and over any
     * transport at one rank count. Every op on the table, training runs
     * and hx_embedding_table_read_rows, _write_rows and _read_state are
     * then collective: every rank of comm makes the same calls in the same
     * order (each with its own ids), and an input one rank gets wrong
     * (an id outside a ROWS table) fails the call on every rank before
     * any shard changes: HX_ERR_INDEX naming the id on that rank, naming
     * that rank on the others. A DYNAMIC shard's frequency filter counts
     * every occurrence as one process would (the count travels with the
     * de-duplicated id). The table
     * keeps its own duplicate of comm (comm may be freed after); a dead
     * peer fails the call with HX_ERR_COMM after comm's timeout. Not with
     * backing_file or ssd_path. */
    hx_comm *comm;
    hx_embedding_sharding sharding; /* AUTO */
    int shard_rank;           /* SHARD_TABLE: the rank holding the table; -1: the
                                 table's name hashed (XXH3) mod the ranks */
    size_t rank_bytes;        /* comm or ps: a cap on the bytes one rank's shard of this
                                 table allocates (its rows, their optimizer state, a lazy
                                 table's ready bits, a DYNAMIC shard's id map as created),
                                 the figure hx_embedding_table_stats reports as bytes; a
                                 shard over it fails creation on every rank with
                                 HX_ERR_OUT_OF_MEMORY naming the table, the rank, its bytes
                                 and the cap (after allocating it: a cap for planning, not
                                 a guard against the allocation itself). A DYNAMIC shard
                                 under a cap (this one or hx_ps_config.rank_bytes) holds
                                 it as its keys arrive: its map keeps a queue for every
                                 row from creation (counted) and grows its key slots only
                                 within the cap; when a training lookup's new keys need
                                 more, the owner first forgets the counting keys (below
                                 min_count: no row yet) seen longest ago, then, with
                                 evict_when_full, evicts the keys with a row seen longest
                                 ago (before this step; never one of the call's), as
                                 Monolith's tables filter and expire rather than stop a
                                 job; when that is not enough (or without
                                 evict_when_full) the lookup fails on every rank with
                                 HX_ERR_OUT_OF_MEMORY naming the keys, the bytes and the
                                 cap, and the map is as before it. 0: no cap
                                 (hx_ps_config.rank_bytes caps a server's tables together) */
    /* Server mode (see "parameter servers"): the table's rows live on ps's
     * servers (sharding and shard_rank as above, over the servers; comm must
     * be NULL). Every rank creates it alike; a worker uses it as any table
     * (its creation returns once the servers have created theirs: a
     * server's refusal, such as hx_ps_config.rank_bytes, fails every
     * rank's creation at once with the server's error), a server holds
     * its shard, in memory. A
     * DYNAMIC table's keys live on server XXH3(key) mod S, in its own map;
     * the workers' k-th training lookups are answered together, their keys
     * looked up in worker order (the frequency filter counting every
     * occurrence), so keys get rows as collective mode over the workers
     * gives them; each server expires its map after the steps
     * (expire_after) as one process does. */
    hx_ps *ps;
} hx_embedding_config;
#define HX_EMBEDDING_CACHE_DEFAULT ((size_t)256 << 20)
/* Everything above at its stated default; rows and dim are 0 and must be set.
 *   Fails:      never.
 *   Ownership:  a value (its strings are NULL).
 *   Threads:    any thread.
 */
HX_API hx_embedding_config hx_embedding_config_default(void);

/* A table as cfg says: its rows initialised (at once, on n_threads
 * threads, unless lazy_init), its optimizer's state at its start value.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (cfg or out NULL, name "", an
 *               unknown enum value or initialiser kind, uniform low > high,
 *               normal std < 0, negative n_threads, min_count or
 *               expire_after, DYNAMIC-only fields on another table,
 *               optimizer hyper-parameters out of range); HX_ERR_SHAPE
 *               (rows or dim out of range); HX_ERR_DTYPE (storage not f32,
 *               f16 or bf16); HX_ERR_IO (backing_file or ssd_path cannot be
 *               created or sized); HX_ERR_OUT_OF_MEMORY. ssd_path also:
 *               HX_ERR_INVALID_ARGUMENT (cache_bytes holds no row, with
 *               backing_file, a store of another shape at ssd_path);
 *               HX_ERR_CORRUPT (ssd_path holds something else or a damaged
 *               header); HX_ERR_SHAPE (more than 2^32 - 2 rows). comm
 *               also: HX_ERR_INVALID_ARGUMENT (an unknown sharding,
 *               shard_rank outside [-1, ranks), the ranks' configurations
 *               differ: every rank fails, naming the first that differs);
 *               HX_ERR_UNSUPPORTED (with backing_file or ssd_path; a build
 *               without MPI); HX_ERR_COMM (the communicator's
 *               collectives); HX_ERR_OUT_OF_MEMORY (a shard over
 *               rank_bytes); a failure on one rank fails every rank.
 *               ps also: whatever a server's creation fails with (its
 *               shard over rank_bytes or hx_ps_config.rank_bytes:
 *               HX_ERR_OUT_OF_MEMORY), on every rank; HX_ERR_COMM (a
 *               worker's: server 0 silent for hx_ps_config.timeout_s).
 *               rank_bytes without comm or ps: HX_ERR_INVALID_ARGUMENT.
 *               device_cache_rows also: HX_ERR_INVALID_ARGUMENT (negative);
 *               HX_ERR_UNSUPPORTED (with ssd_path; with a ps at staleness
 *               > 0 and several workers, or a DYNAMIC table with comm or
 *               ps: every rank).
 *   On failure: *out is NULL (unless out is NULL) and nothing is kept.
 *   Ownership:  cfg and its strings are copied; the table is the caller's:
 *               free it with hx_embedding_table_free.
 *   Threads:    any thread; with comm, every rank of comm calls it, in the
 *               same order as its other collective calls on comm; with ps,
 *               every rank of the ps calls it, tables in the same order.
 */
HX_API hx_status hx_embedding_table_create(const hx_embedding_config *cfg,
                                           hx_embedding_table **out);
/* Frees the table, its rows and state (a backing_file or an ssd_path row
 * store stays on disk). A sharded table: every rank frees it (its
 * communicator's duplicate is freed).
 *   Fails:      HX_ERR_STATE while a graph uses t: free those graphs (and
 *               their sessions) first. NULL: no-op.
 *   On failure: t is unchanged and still the caller's.
 *   Ownership:  t is invalid afterwards.
 *   Threads:    no other call on t may overlap it.
 */
HX_API hx_status hx_embedding_table_free(hx_embedding_table *t);
/* The table's rows (a DYNAMIC table's capacity) and dim.
 *   Fails:      never (NULL: -1).
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API int64_t hx_embedding_table_rows(const hx_embedding_table *t);
HX_API int64_t hx_embedding_table_dim(const hx_embedding_table *t);
/* Sets the table's optimizer. Another kind starts its state afresh (at its
 * start values); the same kind keeps the state and takes the new
 * hyper-parameters (a learning-rate schedule). Set it before
 * hx_graph_apply_optimizer, which adds update nodes only for tables that
 * have one.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t or opt NULL, an unknown kind,
 *               hyper-parameters out of range); HX_ERR_OUT_OF_MEMORY or
 *               HX_ERR_IO (no room for another kind's state); HX_ERR_STATE
 *               (a run uses the table: see the section's header);
 *               HX_ERR_UNSUPPORTED (a table on disk given another kind:
 *               its records hold the creation kind's state).
 *   On failure: the optimizer and its state are as they were.
 *   Ownership:  opt is copied.
 *   Threads:    see the section's header.
 */
HX_API hx_status hx_embedding_table_set_optimizer(hx_embedding_table *t,
                                                  const hx_embedding_optimizer *opt);

/* Rows as f32 into rows (n, dim), named by ids as the ops name them
 * (DYNAMIC: an id without a row reads as zeros; a lazy row not yet written
 * reads as its initial value). On a sharded table (config.comm) this,
 * hx_embedding_table_write_rows and hx_embedding_table_read_state are
 * collective: every rank calls them, each with its own ids (n may be 0),
 * and a failure on one rank (HX_ERR_INDEX, HX_ERR_NOT_FOUND) fails every
 * rank; they may also fail with HX_ERR_COMM.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t NULL, n < 0, ids or rows NULL
 *               with n > 0); HX_ERR_INDEX (ROWS table: an id outside
 *               [0, rows), whatever out_of_range says, naming it and its
 *               position); HX_ERR_OUT_OF_MEMORY.
 *   On failure: rows is not written; the table never changes.
 *   Ownership:  the caller's buffers; nothing is kept.
 *   Threads:    see the section's header.
 */
HX_API hx_status hx_embedding_table_read_rows(hx_embedding_table *t, const int64_t *ids,
                                              int64_t n, float *rows);
/* Sets rows from rows (n, dim) f32, rounded to the storage dtype; their
 * optimizer state stays. An id named twice ends with its last row.
 *   Fails:      as hx_embedding_table_read_rows, and HX_ERR_NOT_FOUND
 *               (DYNAMIC: an id that holds no row); HX_ERR_STATE (a run
 *               uses the table: see the section's header).
 *   On failure: nothing was written: every id is checked first.
 *   Ownership:  the caller's buffers; nothing is kept.
 *   Threads:    see the section's header.
 */
HX_API hx_status hx_embedding_table_write_rows(hx_embedding_table *t, const int64_t *ids,
                                               int64_t n, const float *rows);

/* The optimizer state of rows named by ids as hx_embedding_table_read_rows
 * names them: array k of the table's optimizer, as f32 into out:
 *   LAZY_ADAM    0: m, 1: v                    (n, dim)
 *   ADAGRAD      0: sum                        (n, dim)
 *   ROW_ADAGRAD  0: the row's accumulator      (n)
 *   FTRL         0: accum (TF's n), 1: linear (TF's z)   (n, dim)
 * A row no update has touched reads as the start value (0; sum and accum:
 * initial_accumulator), and so does a DYNAMIC id without a row. The step t
 * of the last update is hx_embedding_stats.last_step.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t NULL, n < 0, ids or out NULL with
 *               n > 0, k not an array of the table's optimizer: NONE has
 *               none; the message lists them); HX_ERR_INDEX (ROWS table: an
 *               id outside [0, rows), naming it and its position);
 *               HX_ERR_OUT_OF_MEMORY.
 *   On failure: out is not written; the table never changes.
 *   Ownership:  the caller's buffers; nothing is kept.
 *   Threads:    see the section's header.
 */
HX_API hx_status hx_embedding_table_read_state(hx_embedding_table *t, int k, const int64_t *ids,
                                               int64_t n, float *out);

/* Rows, optimizer state, initialiser (and a DYNAMIC table's id map), in
 * blocks with XXH3 checksums, written to a stage file and renamed over
 * path as hx_session_save does (the same stage files, the same
 * HX_ERR_STATE while another saver writes path).
 * Load verifies the whole file first and then replaces the rows and state
 * (a table without an optimizer loads the rows only). A table on disk
 * (ssd_path) writes its dirty cached rows back and saves its row store's
 * index (4 bytes a row), not the rows; it loads into a table over the same
 * ssd_path (after a crash too), from either of the last two saves.
 * A sharded table (config.comm; both calls collective): every rank saves
 * its shard as above to "PATH.g<generation>.<rank>-of-<ranks>", then rank
 * 0 writes the manifest at PATH (staged: the commit of the set) with every
 * shard's rows, bytes and XXH3-64; the set before is removed after. The
 * files must be where every rank sees them. Load checks every shard file
 * it reads against the manifest, reads them all, and changes the table on
 * every rank only once every rank has: a ROWS or MODULO table saved at N
 * ranks (row-wise or table-wise) loads at any number of ranks, and into a
 * table of one process (no communicator, no MPI needed); so does a DYNAMIC
 * table (into a DYNAMIC one in memory): at another layout every saved key
 * goes to the rank that now owns it with its frequency-filter count,
 * expiry clock, row and optimizer state, its row handed out anew (in key
 * order; HX_ERR_OUT_OF_MEMORY where a rank's keys with a row outnumber its
 * rows). A shard file that does not match the
 * manifest fails the load with HX_ERR_CORRUPT naming it; a failure on one
 * rank fails every rank. A worker's server-mode table (config.ps): save
 * has the servers save it once every push this worker made is applied
 * (one worker calls it; see hx_ps), load fails with HX_ERR_UNSUPPORTED
 * (the servers load it before hx_ps_serve).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t or path NULL; load: the file has
 *               another optimizer's state than the table's, or a DYNAMIC
 *               table's map for another kind of table); HX_ERR_STATE (save:
 *               another saver is writing path now); HX_ERR_IO (the file
 *               cannot be written or read); HX_ERR_CORRUPT (load: a bad
 *               checksum, a truncated or foreign file, a count or header
 *               value the file cannot hold or a table cannot take,
 *               checksum or not); HX_ERR_SHAPE (load: another rows, dim or
 *               dtype); HX_ERR_UNSUPPORTED (load: another format version);
 *               HX_ERR_STATE (load: a run uses the table: see the
 *               section's header); HX_ERR_OUT_OF_MEMORY. A table on disk
 *               also: HX_ERR_INVALID_ARGUMENT (load: a checkpoint of
 *               another row store, or older than its last two);
 *               HX_ERR_IO, HX_ERR_CORRUPT (its row store's file).
 *   On failure: save leaves the file at path as it was (only its stage
 *               file is written, and removed); load leaves the table as it was.
 *   Ownership:  path is not kept.
 *   Threads:    see the section's header.
 */
HX_API hx_status hx_embedding_table_save(hx_embedding_table *t, const char *path);
HX_API hx_status hx_embedding_table_load(hx_embedding_table *t, const char *path);

typedef struct hx_embedding_stats {
    int64_t rows, dim;
    int64_t rows_assigned;   /* DYNAMIC: ids holding a row; lazy: rows written; else rows */
    int64_t out_of_range;    /* ids read as zero rows under OUT_OF_RANGE_ZERO */
    int64_t evictions, expirations; /* DYNAMIC: rows freed when full / by expiry */
    int64_t filtered;        /* DYNAMIC: occurrences given no row (below min_count) */
    int64_t updates;         /* sparse optimizer steps applied */
    int64_t last_step;       /* the step t of the last of them (the session's step + 1,
                                LazyAdam's bias correction, Adagrad's lr decay); 0 before
                                any */
    size_t bytes;            /* rows and state (a table on disk: those of its cache) */
    int graphs;              /* graphs using the table */
    /* A table on disk (ssd_path), totals since creation (0 for others): */
    int64_t cache_rows;      /* rows the cache holds */
    int64_t cache_lookups, cache_hits; /* distinct rows each lookup asked for (plus those an
                                          update or a read of rows found missing), and how
                                          many of them were cached */
    int64_t disk_rows_read, disk_rows_written;
    int64_t disk_rows_written_ahead; /* of those written: written while steps computed, ahead
                                        of their eviction (the eviction then writes nothing) */
    int64_t disk_bytes_read, disk_bytes_written;
    double io_wait_s;        /* time spent waiting for the disk */
    /* A table with a device cache (device_cache_rows), totals since creation: */
    int64_t device_cache_rows;                    /* rows the cache holds */
    int64_t device_cache_lookups, device_cache_hits; /* as cache_lookups, cache_hits */
    int64_t device_rows_in, device_rows_out;      /* rows (with their state) copied in from
                                                     the host table / written back to it
                                                     (server mode: fetched from / stored
                                                     on the servers) */
    int64_t device_bytes_in, device_bytes_out;
    int64_t device_rows_init;                     /* misses on lazy rows never written: the
                                                     slot takes the initial value, nothing
                                                     is copied (not in device_rows_in) */
    int64_t device_rows_prefetched;               /* of device_rows_in and _init: by _prefetch */
    int64_t device_cache_calls;                   /* lookups and updates through the cache */
    size_t device_cache_bytes;                    /* the cache's rows and their state */
    int device_cache_on_device;                   /* 1 while a session's (emulated) device
                                                     memory holds them, 0 in host memory */
} hx_embedding_stats;
/* The table's counts and sizes now. A sharded table: rows and dim are the
 * whole table's, the rest this rank's share (rows_assigned: rows it holds
 * or has written; bytes: its rows and state; updates: steps it took part
 * in).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t or out NULL).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    see the section's header.
 */
HX_API hx_status hx_embedding_table_stats(const hx_embedding_table *t, hx_embedding_stats *out);

/* Starts reading from disk the rows that ids name (as the ops name them) of
 * a table on disk (ssd_path), and returns without waiting: a reader that
 * knows the next batch hands its ids over while the current step runs, and
 * the next step finds those rows read. Ids outside the table, rows already
 * cached and (DYNAMIC) ids without a row are skipped; up to 4096 rows are
 * read ahead at a time. A table with a device cache (device_cache_rows)
 * copies the rows of ids not in the cache into a staging area now, in the
 * calling thread, so that the next step's misses on them copy nothing from
 * the table (up to device_cache_rows rows staged at a time; rows staged
 * before the previous call and not used since are dropped), and keeps the
 * rows of ids already cached from eviction until the next call (unless a
 * step needs their slots). In server mode it asks each server holding some
 * rows in one fetch and returns without waiting: the rows are taken in by
 * the first table call that needs one of them (or the next prefetch, a
 * save, a read or the table's free), and a failed fetch fails that call.
 * Other tables: nothing to do.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (t NULL, n < 0, ids NULL with n > 0);
 *               HX_ERR_OUT_OF_MEMORY; server mode with a device cache: the
 *               previous fetch's failure when this call takes it in
 *               (HX_ERR_COMM naming a silent server).
 *   On failure: the table never changes (a read-ahead that fails is read
 *               again by the step that needs the row).
 *   Ownership:  ids is the caller's; nothing is kept.
 *   Threads:    any thread; takes the table's lock (waits for an update).
 */
HX_API hx_status hx_embedding_table_prefetch(hx_embedding_table *t, const int64_t *ids, int64_t n);

/* keys[i] = XXH3-64 of strs[i] (lens[i] bytes) with seed, as i64: feature
 * strings to ids for MODULO or DYNAMIC tables.
 *   Fails:      never: with a NULL array or n <= 0 nothing is written.
 *   Ownership:  the caller's arrays; nothing is kept.
 *   Threads:    any thread.
 */
HX_API void hx_embedding_hash_strings(const char *const *strs, const size_t *lens, int64_t n,
                                      uint64_t seed, int64_t *keys);

/* ids (...) i32/i64 -> (..., dim) f32: the rows the ids name. Runs on the
 * CPU (the table's memory); the output may feed ops on either target. A bad
 * id fails the run (HX_ERR_INDEX naming it and its position) or reads as a
 * zero row, as the table's out_of_range says.
 *   Fails:      as every op (see Ops); HX_ERR_INVALID_ARGUMENT when t is
 *               NULL; HX_ERR_DTYPE when ids are not i32/i64; HX_ERR_SHAPE
 *               when ids have more than 7 dims or 2^32 elements.
 *   On failure: as every op.
 *   Ownership:  as every op; g counts t as used until g is freed (t must
 *               outlive g).
 *   Threads:    one thread per graph.
 */
HX_API hx_tensor *hx_embedding_lookup(hx_graph *g, hx_embedding_table *t, hx_tensor *ids);

typedef enum hx_embedding_bag_mode {
    HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_MEAN, HX_EMBEDDING_BAG_MAX
} hx_embedding_bag_mode;
enum {
    HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET = 1, /* offsets has bags + 1 entries, the last n */
    HX_EMBEDDING_BAG_PADDING = 2              /* padding_id is skipped: adds nothing, does
                                                 not count in a mean, gets no gradient
                                                 (see hx_embedding_bag) */
};
/* torch.nn.EmbeddingBag: ids (n) i32/i64; offsets (bags) of the same dtype,
 * bag b = ids[offsets[b] .. offsets[b + 1]) (the last bag runs to n),
 * offsets[0] = 0, not decreasing (checked at run time); per_sample_weights
 * (n) f32 or NULL, SUM only (any tensor: it gets a gradient when it depends
 * on a parameter). -> (bags, dim) f32: each bag's sum, mean or elementwise
 * max; an empty bag gives zeros. With HX_EMBEDDING_BAG_PADDING, the ids
 * equal to padding_id are skipped (without it padding_id is ignored):
 * - ROWS tables: padding_id names a row in [-rows, rows), a negative one
 *   counting from the end as torch's padding_idx does (-1: the last row);
 *   an id equal to the row it names is skipped (an id -1 itself is out of
 *   range, as out_of_range says).
 * - MODULO and DYNAMIC tables: padding_id is compared with the ids before
 *   they are mapped to rows, so it may be any id (HX_ID_MISSING, say); no
 *   row is skipped as such, since many ids share one.
 *   Fails:      as hx_embedding_lookup, and HX_ERR_INVALID_ARGUMENT for an
 *               unknown mode or flag; HX_ERR_DTYPE when offsets and ids
 *               differ in dtype; HX_ERR_SHAPE unless ids and offsets are 1-D
 *               with at least one bag, and for per_sample_weights other than
 *               f32 of ids' shape in SUM mode; HX_ERR_INDEX for a ROWS
 *               table's padding_id outside [-rows, rows) (naming the table,
 *               the id and the range).
 *   On failure: as every op.
 *   Ownership:  as hx_embedding_lookup.
 *   Threads:    one thread per graph.
 */
HX_API hx_tensor *hx_embedding_bag(hx_graph *g, hx_embedding_table *t, hx_tensor *ids,
                                   hx_tensor *offsets, hx_tensor *per_sample_weights,
                                   hx_embedding_bag_mode mode, unsigned flags,
                                   int64_t padding_id);

/* Training: hx_graph_backward gives each lookup's output an ordinary
 * gradient (its own shape), and hx_graph_apply_optimizer(g, NULL, cfg) adds,
 * besides the parameters' updates, one update node per table with an
 * optimizer (cfg does not apply to tables). It takes every lookup of that
 * table in the graph, sums each touched row's gradient over all of them,
 * and applies the table's optimizer once per HX_RUN_TRAIN run (step t = the
 * session's step + 1), after the gradient scan: a gradient holding Inf or
 * NaN fails the run with HX_ERR_NUMERIC naming the table (the update node
 * carries its name) and leaves the table as it was. Set the table's
 * optimizer before calling hx_graph_apply_optimizer. */

/* ---- communicators (data parallel over MPI) --------------------------------
 *
 * A communicator is hetex's own duplicate of an MPI communicator (Open MPI):
 * of MPI_COMM_WORLD, or of one the program made itself. This header does
 * not include mpi.h: the caller's communicator comes in by the address of
 * its MPI_Comm handle (C: &comm; mpi4py: MPI._addressof(comm)). hetex
 * initialises MPI only when the first communicator is created and MPI is
 * not yet initialised (MPI_Init_thread, MPI_THREAD_SERIALIZED asked for;
 * hetex serialises its own MPI calls), and then finalises it when the last
 * communicator is freed; MPI the program initialised is the program's to
 * finalise. MPI cannot start twice in one process: after hetex finalised
 * it, hx_comm_create fails. The collectives move data in rank order and
 * reduce in rank order, so their results do not depend on the transport
 * (shared memory or TCP). Builds without MPI (CMake found none) keep these
 * calls, which then fail with HX_ERR_UNSUPPORTED. */
typedef struct hx_comm hx_comm;

typedef struct hx_comm_config {
    const void *mpi_comm; /* address of the caller's MPI_Comm; NULL: MPI_COMM_WORLD */
    double timeout_s;     /* a collective not complete after this long fails,
                             naming the ranks it still waits for: 300 */
} hx_comm_config;
/* Every field at the default noted above.
 *   Fails:      never.
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API hx_comm_config hx_comm_config_default(void);
/* Creates a communicator over cfg->mpi_comm (MPI_Comm_dup: every rank of
 * it must call this, in the same order as its other collective calls),
 * initialising MPI first where nobody has. Its errors return to hetex
 * (MPI_ERRORS_RETURN on the duplicate). cfg NULL: the default.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (out NULL, timeout_s not finite or
 *               <= 0); HX_ERR_UNSUPPORTED (a build without MPI: the message
 *               says how to get it); HX_ERR_STATE (hetex finalised MPI in
 *               this process before); HX_ERR_COMM (MPI failed to start or to
 *               duplicate the communicator: MPI's error text);
 *               HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out is NULL (unless out is NULL); MPI started by this
 *               call is finalised again only if it got that far.
 *   Ownership:  the communicator is the caller's (hx_comm_free); the
 *               caller's MPI_Comm is not kept and may be freed after.
 *   Threads:    any thread; MPI's and hetex's calls on MPI are serialised
 *               by hetex (one process-wide lock). One thread per hx_comm.
 */
HX_API hx_status hx_comm_create(const hx_comm_config *cfg, hx_comm **out);
/* Frees the communicator; the last one freed finalises MPI if hetex
 * initialised it. Of a communicator a collective failed on (a timeout, an
 * MPI error) hetex frees its own memory but not the MPI communicator, on
 * which abandoned messages may still arrive; MPI_Finalize may then block
 * if a peer died: a program should end after such a failure (exit
 * non-zero: mpirun then ends the job).
 *   Fails:      never (NULL: no-op).
 *   Ownership:  c becomes invalid.
 *   Threads:    any thread, one thread per hx_comm.
 */
HX_API void hx_comm_free(hx_comm *c);
/* This process's rank in c and the number of ranks.
 *   Fails:      never: NULL gives -1.
 *   Ownership:  nothing changes hands.
 *   Threads:    any thread.
 */
HX_API int hx_comm_rank(const hx_comm *c);
HX_API int hx_comm_size(const hx_comm *c);
/* Bytes this rank has sent to the other ranks over c since its creation
 * (collectives started by hetex: a session's gradient sums among them).
 *   Fails:      never: NULL gives 0.
 *   Ownership:  nothing changes hands.
 *   Threads:    one thread per hx_comm.
 */
HX_API uint64_t hx_comm_bytes_sent(const hx_comm *c);

/* ---- parameter servers (server mode for embedding tables) -----------------
 *
 * MindSpore's roles over one communicator: its last `servers` ranks are
 * servers, which hold the rows of every table created with
 * hx_embedding_config.ps (spread over them as collective mode spreads rows
 * over all ranks: row r on server r mod S, or a whole table on one) with
 * their optimizer state, and answer requests in hx_ps_serve; the other
 * ranks are workers, which run the model. On a worker such a table is
 * used exactly as any other: hx_embedding_lookup/_bag and the graph's
 * updates pull the rows of a step's unique ids from their servers before
 * the step and push each unique id's gradient, summed over the worker's
 * positions, after it; a worker holds no rows beyond one step's. Each
 * server applies a step once every worker's push of it has come (the
 * workers' rows summed per id in worker order, then the table's optimizer
 * once: the sums and order of collective mode over the workers), so
 * synchronous training (staleness 0: a pull waits until every push before
 * it is applied) gives collective mode's results. staleness k > 0 lets a
 * worker pull up to k steps ahead of the steps the servers have applied
 * (bounded staleness: its rows may miss the last k steps' updates). Dense
 * parameters train data parallel among the workers: give the session
 * hx_ps_workers(). A server that stops answering fails a worker's pull
 * after timeout_s with HX_ERR_COMM naming it; a worker that stops pushing
 * while a step waits for it ends hx_ps_serve with HX_ERR_COMM naming it,
 * every step before that one applied and the incomplete one dropped, so
 * the servers' tables are consistent and can be saved. Server-held tables
 * are saved and loaded on the servers (hx_embedding_table_save/_load,
 * collective over the servers: the sharded checkpoint, loadable at any
 * number of servers or shards and into a table of one process); a save
 * may also come from one worker while the servers serve: its
 * hx_embedding_table_save returns once every server has saved the table
 * as it stands after every push that worker made (the other workers' pushes
 * of later steps wait meanwhile; the same failures as the servers' own
 * save). */
typedef struct hx_ps hx_ps;

typedef struct hx_ps_config {
    hx_comm *comm;        /* required: every rank, servers and workers */
    int servers;          /* the last `servers` ranks serve: 1; at least one worker remains */
    int staleness;        /* steps a worker may run ahead of the applied pushes: 0 */
    double timeout_s;     /* a silent server (for a worker) or worker (for a server)
                             is dead after this long: 60 */
    size_t rank_bytes;    /* a cap on one rank's table memory (a server's rows and
                             state of all tables, their DYNAMIC maps as they grow:
                             hx_embedding_config.rank_bytes says how; a worker's rows
                             of one pull); a server over it refuses the table it
                             creates, and every rank's hx_embedding_table_create
                             fails with HX_ERR_OUT_OF_MEMORY naming that server, the
                             table, the bytes and the cap; 0: none */
    int64_t cache_rows;   /* a worker keeps up to this many rows it pulled of each
                             ROWS or MODULO table (host memory, in sets of two, the
                             less used replaced), each with the servers' applied
                             steps when it came: a pull sends each kept row's
                             version and a server returns only the rows a step
                             changed since (so results are bitwise those without
                             it); with staleness k a kept row that is no more than
                             k steps behind is used without asking (as a pull
                             could answer it). Not for DYNAMIC tables. 0: none */
} hx_ps_config;
/* Every field at the default noted above (comm NULL: must be set).
 *   Fails:      never.
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API hx_ps_config hx_ps_config_default(void);
/* The roles over cfg->comm (collective: every rank calls it alike; the
 * servers' and the workers' communicators are split from it).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (cfg, comm or out NULL; servers
 *               outside [1, ranks - 1]; staleness < 0; timeout_s not
 *               finite or <= 0; cache_rows < 0); HX_ERR_UNSUPPORTED (a build without MPI);
 *               HX_ERR_COMM; HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out is NULL (unless out is NULL).
 *   Ownership:  the object is the caller's (hx_ps_free); comm is not kept.
 *   Threads:    any thread; one thread drives hx_ps_serve, workers' tables
 *               follow the tables' own rules.
 */
HX_API hx_status hx_ps_create(const hx_ps_config *cfg, hx_ps **out);
/* Whether this rank serves; its index among the servers or the workers;
 * the workers' communicator (for hx_session_config.comm; NULL on a
 * server), owned by ps.
 *   Fails:      never (NULL: false, -1, NULL).
 *   Ownership:  the communicator stays ps's: do not free it.
 *   Threads:    any thread.
 */
HX_API bool hx_ps_is_server(const hx_ps *ps);
HX_API int hx_ps_index(const hx_ps *ps);
HX_API hx_comm *hx_ps_workers(hx_ps *ps);
/* A server's loop: answers the workers' pulls and applies their pushes to
 * the tables created with this ps (create them all first, on every rank
 * in the same order), until every worker has called hx_ps_finish. It
 * drives MPI itself and sleeps briefly when idle.
 *   Fails:      HX_ERR_STATE (a worker rank, or called twice);
 *               HX_ERR_COMM (a worker silent for timeout_s while a step
 *               waits for it: the message names it; every step before
 *               that one is applied, the incomplete one dropped; a worker
 *               with a device cache (device_cache_rows) silent for
 *               timeout_s: the tables hold its last write-backs; MPI
 *               failing); HX_ERR_OUT_OF_MEMORY; an update's own failure.
 *               Workers waiting on this server are told the error.
 *   On failure: the tables hold the last whole step; save them.
 *   Ownership:  nothing changes hands.
 *   Threads:    one thread; no other call on the tables meanwhile.
 */
HX_API hx_status hx_ps_serve(hx_ps *ps);
/* A worker is done (after its last push): the servers stop waiting for it.
 * Tables with a device cache (device_cache_rows) first write their dirty
 * rows back to the servers, so that the servers' tables (and their saves
 * after hx_ps_serve) hold every step.
 *   Fails:      HX_ERR_STATE (a server rank, or called twice); HX_ERR_COMM
 *               (a server did not take the message within timeout_s,
 *               naming it; or a device cache's write-back failed).
 *   On failure: the servers may still wait for this worker: end the
 *               program (they then fail when their timeout passes).
 *   Ownership:  nothing changes hands.
 *   Threads:    no call on the ps's tables may overlap it or follow it.
 */
HX_API hx_status hx_ps_finish(hx_ps *ps);
/* Frees it; free its tables first.
 *   Fails:      never (NULL: no-op).
 *   Ownership:  ps and hx_ps_workers() become invalid.
 *   Threads:    no other call on ps may overlap it.
 */
HX_API void hx_ps_free(hx_ps *ps);

typedef struct hx_ps_stats {
    int64_t pulls, pushes;        /* worker: sent to servers; server: answered, taken */
    int64_t steps;                /* server: steps applied, all tables; worker: pushed */
    uint64_t pull_bytes, push_bytes; /* worker: bytes of pulls (ids out, rows back) and of
                                        pushes (ids and gradients); server: of replies */
    int64_t max_staleness;        /* the most steps a pull was answered ahead of the
                                     steps applied (at most staleness) */
    int64_t rows_held;            /* server: rows of its tables; worker: 0 */
    size_t bytes_held;            /* server: their rows and state; worker: 0 */
    double wait_s;                /* worker: time waiting for servers' replies */
    int64_t rows_pulled;          /* rows that came back from (worker) or went to
                                     (server) pulls of rows */
    int64_t cache_hits;           /* worker (cache_rows): rows used from its cache
                                     without asking (staleness) */
    int64_t cache_current;        /* worker: rows asked with their version that the
                                     servers found current (no row moved) */
} hx_ps_stats;
/* This rank's counts since hx_ps_create.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (ps or out NULL).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    any thread.
 */
HX_API hx_status hx_ps_stats_get(hx_ps *ps, hx_ps_stats *out);

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
/* Simulated costs of the emu accelerator, so that a plan's overlap (and
 * its absence) shows on a small machine as it would on a real device. With
 * a field set, every emu launch lasts at least launch_latency_s +
 * flops / flops_per_s and every emu copy at least launch_latency_s +
 * bytes / copy_bytes_per_s (the kernel or memcpy runs, then its stream
 * sleeps the rest without holding host cores). flops: 2*M*N*K for a
 * matmul, one per output element for any other op. 0: no floor. */
typedef struct hx_emu_cost {
    double copy_bytes_per_s;  /* host<->device bandwidth, each direction */
    double launch_latency_s;  /* per launch and per copy */
    double flops_per_s;       /* compute rate */
} hx_emu_cost;
/* The host side of the simulated machine (only with the emu accelerator):
 * every host kernel lasts at least launch_latency_s + flops / flops_per_s
 * (flops as above), and the host's kernels take their turns on one
 * simulated host (concurrent host lanes share its rate), so that a test can
 * declare, say, a device 20x faster than the host. All 0: no floor. */
typedef struct hx_emu_host_cost {
    double flops_per_s;
    double launch_latency_s;
} hx_emu_host_cost;

/* Execution. A run's plan is split into units: each CPU subgraph, each
 * device subgraph and each copy (see hx_session_placement_stats). A unit
 * starts as soon as the units it reads from are done: device subgraphs are
 * launched on the accelerator's compute stream, copies go on its copy
 * streams (one per direction) and overlap compute, CPU subgraphs run on the
 * calling thread and on host worker threads the session starts when a plan
 * first needs them. Updates run after every gradient was scanned. Results
 * are bitwise those of an all-CPU run at any thread count. The n_threads
 * host cores are shared out: when CPU work and emu work (whose kernels run
 * on host cores) can run at the same time, each runnable CPU subgraph gets
 * n_threads / (lanes) threads and the emu compute stream the rest, and no
 * more than n_threads cores compute at once (lanes wait for cores).
 *
 * Tracing: with trace_path set (or the HX_TRACE environment variable, which
 * the field overrides), every kernel and copy is recorded with its lane
 * (host threads and emu streams; CUDA work is not traced) and written as a
 * Chrome trace JSON ("traceEvents", open it in Perfetto or chrome://tracing)
 * by hx_session_trace_flush and by hx_session_free, each time atomically
 * (a temporary file renamed over the path). Each lane keeps its first
 * 262,144 events; the file's otherData.dropped_events counts the rest. */
/* Memory offload (MindSpore's offload_config keys). How each policy
 * works, the disk tier's layout and auto_offload's search are explained in
 * docs/offload.md; what a session promises is:
 * - offload_param CPU keeps every parameter, with its optimizer state and
 *   update, in host memory; each training step copies parameters to the
 *   device in chunks of about chunk_size bytes, prefetch_depth chunks
 *   ahead of the device work, so the device holds prefetch_depth + 1
 *   chunks of parameters, not all of them. DISK keeps them in a file under
 *   offload_path (an existing directory; the file is removed with the
 *   session) between calls, reading through pinned host memory at most
 *   offload_cpu_size bytes (the resident region and three chunk slots at
 *   least). offload_activations CPU copies device activations that are
 *   read again much later (the backward reading what the forward saved)
 *   to the host and back. Results are bitwise those without offload.
 * - recompute (with blocks marked by hx_graph_push_recompute) drops the
 *   blocks' internal activations after forward and recomputes them in
 *   backward; results are bitwise those without.
 * - auto_offload picks the policy (parameters, activations, recomputation
 *   of the marked blocks), chunk_size and prefetch_depth at session
 *   creation so that the device's predicted peak stays under its cap
 *   (max_device_memory, or the device's memory), taking of the policies
 *   that fit the one the cost model (hx_offload_report) says adds the
 *   least time per step; hx_session_offload_report says what it chose,
 *   why, and what it predicted.
 * - Session creation fails with HX_ERR_DEVICE_OOM (auto_offload: no policy
 *   fits; it names the smallest peak found and the cap it needs) and with
 *   HX_ERR_OUT_OF_MEMORY (offload_cpu_size holds neither the parameters and
 *   their state nor the disk tier's minimum; both needs named).
 * - A call that reads or writes the disk tier and fails (a short write or
 *   ENOSPC: HX_ERR_IO; a checksum mismatch: HX_ERR_CORRUPT) names the file
 *   and offset and applies nothing: parameters, state and step count stay
 *   as they were. DISK does not combine with delayed_param_update
 *   (HX_ERR_UNSUPPORTED). At ZeRO stages 1-3 each rank's file holds what
 *   the stage leaves that rank (its shard of the optimizer state, and
 *   what it reads of the parameters: at stage 3 its shard of them), and
 *   the ranks agree at session creation and after each training step:
 *   a rank whose disk failed fails with its own error, every other rank
 *   with the same status naming that rank, and none keeps the step.
 * - hx_offload_config_parse reads "key=value,..." with the keys below
 *   (offload_param=cpu,chunk_size=64MB,...); sizes take an optional
 *   KB/MB/GB suffix (powers of 1024), booleans true/false/1/0. A session
 *   whose config leaves offload at its default (offload_param and
 *   offload_activations NONE, auto_offload and recompute false) reads
 *   $HX_OFFLOAD in that syntax, as trace_path does $HX_TRACE. */
typedef enum hx_offload_target {
    HX_OFFLOAD_NONE, /* parameters where placement puts them */
    HX_OFFLOAD_CPU,  /* parameters, state and updates in host memory */
    HX_OFFLOAD_DISK  /* as CPU, kept in a file under offload_path between runs */
} hx_offload_target;
/* "none", "cpu" or "disk".
 *   Fails:      never: a value outside the enum gives "none".
 *   Ownership:  a static string.
 *   Threads:    any thread.
 */
HX_API const char *hx_offload_target_name(hx_offload_target t);

enum { HX_OFFLOAD_PATH_MAX = 512 };

typedef struct hx_offload_config {
    hx_offload_target offload_param;  /* "none" | "cpu" | "disk": NONE */
    char offload_path[HX_OFFLOAD_PATH_MAX]; /* directory of the disk tier's files: "./offload" */
    size_t offload_cpu_size;     /* host bytes offloaded data may use; 0: no limit */
    size_t offload_disk_size;    /* disk bytes offloaded data may use; 0: no limit */
    size_t host_mem_block_size;  /* pinned host pool block: 1 GiB */
    bool enable_aio;             /* disk tier: io_uring/libaio (else synchronous I/O): true */
    bool enable_pinned_mem;      /* copies through pinned host memory: true */
    bool auto_offload;           /* choose offload, chunk and depth from the cap: false */
    size_t chunk_size;           /* parameter bytes per transfer chunk (offload_activations:
                                    also device op output bytes per segment): 0: 32 MiB */
    int prefetch_depth;          /* chunks copied ahead of the one in use: 1 */
    hx_offload_target offload_activations; /* "none" | "cpu" (not DISK): NONE */
    bool recompute;              /* recompute the blocks the graph marks
                                    (hx_graph_push_recompute) in backward: false */
} hx_offload_config;
/* Every field at the default noted above: no offload.
 *   Fails:      never.
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API hx_offload_config hx_offload_config_default(void);
/* Sets the keys named in `spec` ("key=value,key=value"; spaces around keys
 * and values ignored; an empty spec changes nothing) over *cfg; values are
 * checked here, combinations at session creation.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (spec or cfg NULL, an unknown key, a
 *               bad value, a missing '='; the message names the key and
 *               what it takes); HX_ERR_OUT_OF_MEMORY.
 *   On failure: *cfg is unchanged.
 *   Ownership:  spec is not kept.
 *   Threads:    any thread (one thread per cfg).
 */
HX_API hx_status hx_offload_config_parse(const char *spec, hx_offload_config *cfg);

/* The offload policy in force and the device peak predicted for it (device
 * bytes reserved from the accelerator's pools, what the cap limits) beside
 * the peaks measured so far. */
typedef struct hx_offload_report {
    bool automatic;                  /* auto_offload chose the policy */
    hx_offload_target offload_param; /* in force (NONE without an accelerator) */
    size_t chunk_size;
    int prefetch_depth;
    int candidates;                  /* policies auto_offload planned */
    size_t capacity;                 /* the device cap */
    size_t margin;                   /* auto_offload's headroom under it */
    size_t predicted_no_offload;     /* auto, offload_param NONE: the peak with no offload */
    hx_offload_target offload_activations; /* in force (NONE without an accelerator) */
    int activations_offloaded;       /* tensors the training step copies out and back */
    size_t activation_bytes;         /* their bytes per training step, each way */
    size_t copy_bytes;               /* all bytes the training step copies, both ways */
    /* the training step's predicted peak (a manual policy's is planned at the
     * first call), the persistent tensors and the arena in it */
    size_t predicted_peak, predicted_persistent, predicted_arena;
    /* hx_session_pool_stats' total.peak_reserved and peak_allocated now */
    size_t measured_peak_reserved, measured_peak_allocated;
    bool recompute;                  /* in force: the marked blocks are recomputed */
    int recomputed_ops;              /* ops the training step runs again */
    double recompute_flops;          /* their work per step (2mnk per matmul, one per
                                        output element otherwise) */
    /* The cost model auto_offload ranks the policies that fit by: the
     * training step's copies at link_bytes_per_s plus its recomputed work
     * at device_flops_per_s (emu: its hx_emu_cost where set; else nominal
     * rates, 16 GB/s and 50 TFLOP/s), in seconds per step. */
    double link_bytes_per_s, device_flops_per_s, modeled_cost_s;
    char reason[512];                /* auto_offload: why it chose this policy */
} hx_offload_report;

/* Automatic placement. Ops whose target is AUTO (their attribute, a
 * scope's, or DEFAULT with auto_placement) are placed by the session at
 * creation; CPU and DEVICE attributes stay binding. Rules come first: a
 * parameter, its optimizer update and state are placed together; ops that
 * work on host tables (embedding lookups and updates) stay on the host;
 * an op with no kernel on a target never goes there. Then the planner:
 * - costs are measured: each distinct op signature (op, dtype, shapes,
 *   attributes) is run a few times per target with zeroed inputs, the
 *   fastest run kept (the emu device
 *   runs the host's kernels, so its time is the host's, raised to its
 *   simulated floor), and the link's latency and bandwidth per direction
 *   are timed with two copies. Times are cached in placement_cache, one
 *   line per (machine, signature), so a second session of the same shapes
 *   profiles nothing; the file holds at most 8192 entries (the newest)
 *   and one it cannot read in full is ignored and rewritten;
 * - a list schedule (ops in order, each where it finishes first given the
 *   copies that choice implies, the host and device lanes and a copy lane
 *   per direction running concurrently, as the executor runs them) under
 *   the device cap (parameters, state and the live device values of the
 *   step), then single moves that shorten the predicted step while any do
 *   (also from all-host and all-device, and pairs on small graphs); the
 *   mixed placement it finds is kept only when its predicted step is at
 *   least 10% under the better of all-host and all-device (the model
 *   leaves out the executor's per-unit overhead), else that side is;
 * - the device cap is max_device_memory (less 10% for the pools' rounding).
 * Results are bitwise those of any other placement. HX_DEBUG=placement
 * prints every automatic decision with its predicted time on both targets;
 * hx_session_placement_report compares the prediction with the runs. */
typedef struct hx_session_config {
    int n_threads;                /* host threads for kernels; 0: all cores */
    uint64_t seed;                /* parameter init and dropout */
    hx_accelerator accelerator;   /* AUTO */
    size_t max_device_memory;     /* accelerator memory cap in bytes; 0: 8 GiB for emu */
    hx_fallback fallback;         /* HX_FALLBACK_ERROR */
    hx_loss_scale_config loss_scale;
    hx_emu_cost emu_cost;         /* all 0: emu runs at host speed */
    const char *trace_path;       /* NULL: $HX_TRACE if set, else no trace */
    /* CUDA (accelerator CUDA, or AUTO where a GPU is usable) */
    int cuda_device;              /* device index: 0 */
    bool allow_tf32;              /* f32 matmuls may use TF32 tensor cores (10-bit
                                     mantissa products): false, full f32 */
    double clip_grad_norm;        /* 0: off; else before the updates every dense
                                     parameter's gradient is multiplied by
                                     min(1, clip_grad_norm / (norm + 1e-6)), norm the
                                     L2 norm of all of them together after loss
                                     unscaling (torch.nn.utils.clip_grad_norm_;
                                     embedding tables are not clipped) */
    /* Delayed parameter update (ZeRO-Offload's DPU): from step
     * dpu_warmup_steps on, a training run returns once its gradients are
     * scanned, and its host updates run while the next run computes, whose
     * forward and backward therefore see the parameters one step older.
     * Applies where every update is dense and on the host and the device
     * reads the parameters only through their f16/bf16 copies (an f32
     * master used through one hx_cast); other plans update in step. Reading,
     * writing, saving or loading the session waits for the update. */
    bool delayed_param_update;
    int dpu_warmup_steps;
    /* Device gradients that an update on the host reads are copied there
     * as backward makes them: the device's work is cut after every
     * grad_bucket_bytes of them (0: 4 MiB, or with data parallel the
     * chunk size its gradients are summed in where that is smaller), and
     * each bucket's copies run while backward goes on. */
    size_t grad_bucket_bytes;
    hx_offload_config offload;    /* hx_offload_config_default(): no offload; see above */
    /* Data parallel over comm's ranks (NULL: none), ZeRO stage 0 (PyTorch's
     * DDP): every rank creates its session from the same graph and seed
     * and feeds its share of the global batch (a loss that is a mean over
     * its share); before the updates every dense gradient is summed over
     * the ranks in rank order, moved in whole chunks of offload.chunk_size
     * (the same layout on every rank), and divided by the number of ranks,
     * so every rank takes the same update (and skips the same steps); bf16
     * gradients are summed in f32 and rounded once. Every rank's graph,
     * seed and chunk_size are compared at creation: a difference fails it
     * on every rank (HX_ERR_INVALID_ARGUMENT naming the first differing
     * tensor as each rank has it). The communicator stays the caller's and
     * must outlive the session. Embedding tables must be sharded over the
     * ranks (hx_embedding_config.comm): their updates go to the rows'
     * owners. Not with tables of one process, f16 gradients or CUDA
     * (HX_ERR_UNSUPPORTED). */
    hx_comm *comm;
    /* ZeRO stage with comm (0: the default above). The gradients of each
     * dtype are laid out in chunks of one size (at least the largest
     * gradient, at most offload.chunk_size where that allows, 0: 32 MiB;
     * of the sizes that cut them into k*N chunks, the one that balances
     * the ranks best), their count padded to a multiple of the N ranks;
     * each rank owns as many chunks (the fullest first, each to the least
     * loaded rank), and the parameters in them. Each rank holds and updates only its own parameters'
     * optimizer state: Adam's moments (and the like) and, for an f32
     * master used through one hx_cast (a half copy), the master itself;
     * after the updates each owner sends its updated half copies (or f32
     * parameters the graph reads) to every rank. 1: the gradients are
     * summed over the ranks as at stage 0 (all-reduce). 2: each chunk's
     * sum goes only to its owner (reduce-scatter, group by group), which
     * keeps only its own chunks; the gradient norm (clipping) and the
     * Inf/NaN check are the owners' per-parameter sums of squares gathered
     * in plan order, so stages 1 and 2 give bitwise stage 0's parameters.
     * hx_session_read of a sharded tensor works on its owner only;
     * hx_session_write of one, offload_param=disk and
     * delayed_param_update are refused (HX_ERR_UNSUPPORTED); checkpoints
     * are sharded (hx_session_save). Compared
     * over the ranks at creation with the graph. 3: summed as at 2, and
     * what every rank reads of each parameter (its half copy, else the
     * f32 parameter) is sharded too: each rank keeps only its own chunks
     * and no all-gather follows the updates; the forward and backward
     * read the others' from host buffers, one per chunk group (every
     * rank's g-th chunk), each all-gathered before the first step that
     * reads it (offload.prefetch_depth groups ahead, in the same order on
     * every rank) and freed after the last (once before the backward's
     * first step and once from it on; a group a copy to the device reads,
     * offload_param=cpu, once the copy stream has passed that copy): every
     * run of a stage-3 session is collective, inference too, so the ranks
     * make the same runs in the same order (one that does not waits for
     * the others until comm's timeout). Stage 3
     * needs those parameters in host memory: with an accelerator, set
     * offload_param=cpu (HX_ERR_UNSUPPORTED otherwise); it gives stage
     * 0's bits as well. Stages 1-3 with embedding tables are not built
     * (HX_ERR_UNSUPPORTED); without comm anything but 0 is
     * HX_ERR_INVALID_ARGUMENT. */
    int zero_stage;
    /* Data parallel at stages 0-2: false (the default) starts each chunk's
     * gradient sum (at stage 2 each group of N chunks') during the
     * backward, as soon as the steps that write its gradients have run,
     * the chunks in one order on every rank, and drives the sums in flight
     * while the backward goes on; at stages 1 and 2 it starts each group's
     * all-gather of the updated parameters during the updates, and the
     * training run returns with them in flight: the next training run
     * waits for each before the first step that reads its parameters, and
     * any other call on the session (hx_session_read, write, save, load,
     * memory_stats, a run without HX_RUN_TRAIN, ...) and hx_session_free
     * wait for all of them first; one that failed fails that call with
     * HX_ERR_COMM naming the all-gather and the ranks. true starts
     * everything after the backward and the updates and waits for it
     * before the run returns (for comparison). Same bits either way.
     * Stage 3 starts the sums after the backward (its parameter gathers
     * share the communicator). */
    bool no_comm_overlap;
    /* Host update threads pinned to cores: false (the default) leaves the
     * threads where the OS puts them. true binds each thread that runs a
     * dense optimizer update on the host (the lane's thread and its kernel
     * threads: the AVX AdamW over this rank's shard with ZeRO, every
     * parameter's without) to one core for the update, and restores its
     * mask after (other kernels and the caller's thread stay unpinned).
     * The cores are the ones the creating thread may run on
     * (sched_getaffinity at creation: taskset or mpirun's binding narrow
     * them), shared out over the ranks of comm that may run on the same
     * ones (the same hostname and mask; without comm, one rank; ranks that
     * mpirun bound to cores of their own keep them): local rank L of S
     * takes k = cores / S of them, from the L*k-th on, disjoint from the
     * other ranks', and its n_threads threads take them in order (thread
     * j: core j mod k). Where the mask is too small (fewer cores than
     * ranks: ranks share a core; fewer than n_threads per rank: threads
     * share) hetex says so once on stderr.
     * HX_DEBUG=pin prints each thread's core. Same bits pinned or not. */
    bool pin_update_threads;
    hx_emu_host_cost emu_host_cost; /* all 0: host kernels at host speed */
    /* Automatic placement (see below) */
    bool auto_placement;          /* ops and parameters left at DEFAULT are AUTO: false */
    const char *placement_cache;  /* op cost cache file; NULL: $HX_PLACEMENT_CACHE, else
                                     $HOME/.cache/hetex/op_costs; "": no cache */
    /* Host fusion: false (the default) runs bias_add(matmul(x, w), b) on the
     * host as one GEMM that adds the bias to each tile of the product while
     * it is in cache, and an activation of it (relu, gelu, gelu_erf) too
     * where nothing else reads the pre-activation (inference; in training
     * the activation's gradient reads it), for f32, f16 and bf16 nodes; and
     * layernorm(add(x, r)) (f32, no broadcast) as one pass that writes the
     * sum too, where every other reader of the sum depends on the
     * layernorm; results are bitwise those of the ops run one by one.
     * HX_DEBUG=placement names
     * each fusion and why each candidate was not fused. true: every op runs
     * as built (for comparison). */
    bool no_host_fusion;
} hx_session_config;
/* Every field at the default noted above (seed 42, all cores, the AUTO
 * accelerator, 8 GiB for emu, no loss scaling, no offload).
 *   Fails:      never.
 *   Ownership:  a value (trace_path NULL).
 *   Threads:    any thread.
 */
HX_API hx_session_config hx_session_config_default(void);

/* Places every op, creates the backends, allocates and initialises the
 * persistent tensors (parameters from the seed and their names, constants,
 * optimizer state at its start value) and, with offload, picks and sets up
 * the policy. cfg NULL means hx_session_config_default(). The graph is
 * frozen while a session exists (adding ops fails with HX_ERR_STATE); the
 * session holds it, so hx_graph_free may come first (see there).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (g or out NULL; n_threads < 0, an
 *               unknown enum value, a loss scale or clip_grad_norm out of
 *               range, an offload field out of range, a malformed
 *               $HX_OFFLOAD, emu_host_cost out of range, zero_stage
 *               out of 0..3 or not 0 without comm; data parallel: the
 *               ranks' graphs, seeds, chunk sizes, zero stages or
 *               offload_param differ);
 *               HX_ERR_UNSUPPORTED (CUDA asked for in a build
 *               or on a machine without it, the disk tier with
 *               delayed_param_update, data parallel that comm cannot
 *               serve, ZeRO stages 1-3 with
 *               delayed_param_update, stage 3 with a parameter on the
 *               accelerator: see there); HX_ERR_COMM (comm's collectives);
 *               HX_ERR_NO_KERNEL (an op without a
 *               kernel on its target under HX_FALLBACK_ERROR, naming it);
 *               HX_ERR_DEVICE_OOM (the persistent tensors placed on the
 *               device exceed its cap, or no offload policy fits: see
 *               offload above); HX_ERR_IO (the disk tier's file; at
 *               ZeRO stages 1-3 on every rank, naming the rank whose
 *               file failed);
 *               HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out is NULL (unless out is NULL); g is as before and not
 *               frozen; nothing is allocated.
 *   Ownership:  cfg and trace_path are copied (placement_cache is read
 *               during the call only); the session is the
 *               caller's (free it with hx_session_free); it holds g, and
 *               keeps pointers to the embedding tables g uses.
 *   Threads:    counts as a call on g: one thread per graph. Sessions of
 *               one graph may then be used on different threads.
 */
HX_API hx_status hx_session_create(hx_graph *g, const hx_session_config *cfg, hx_session **out);
/* Waits for a delayed update, writes the trace (a failure is printed on
 * stderr), frees the session's memory on every device, removes the disk
 * tier's file and lets go of the graph: when no other session of it is
 * left, unfreezes it, or frees it if hx_graph_free came first.
 *   Fails:      never (NULL: no-op).
 *   Ownership:  s, its hx_session_device_alloc blocks and every pointer
 *               into them become invalid.
 *   Threads:    counts as a call on s's graph and on s.
 */
HX_API void hx_session_free(hx_session *s);

/* A feed or fetch names its tensor by `tensor` or, when that is NULL, by
 * `name`. `bytes` must equal the tensor's size. A feed's data is host
 * memory, or accelerator memory of this session: a feed whose data lies in
 * a block from hx_session_device_alloc (filled with
 * hx_session_device_upload) is a device feed, and an input that only device
 * ops read then takes it in place, with no copy. A device feed for an input
 * that the run needs on the host (a CPU op reads it, or it is fetched), or
 * that straddles the end of its block, fails with HX_ERR_INVALID_ARGUMENT. */
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
 * step).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s NULL, a negative count, an array
 *               NULL with a count, unknown flags; a feed or fetch with
 *               neither tensor nor name, of another graph or with data
 *               NULL; a feed of a tensor that is not an input, or fed twice;
 *               a needed input not fed; a misused device feed; a fetch of
 *               an update; bag offsets not starting at 0 or decreasing);
 *               HX_ERR_NOT_FOUND (a name not in the graph); HX_ERR_SHAPE
 *               (bytes not the tensor's size); HX_ERR_INDEX (an id or
 *               label out of range, naming it and its position);
 *               HX_ERR_NUMERIC (an Inf or NaN gradient without loss
 *               scaling, naming the parameter or table); HX_ERR_DEVICE_OOM
 *               (this run's plan does not fit the device);
 *               HX_ERR_OUT_OF_MEMORY (host memory; a full DYNAMIC table
 *               without evict_when_full); HX_ERR_IO, HX_ERR_CORRUPT (the
 *               disk tier; at ZeRO stages 1-3 a failure after the step's
 *               collectives fails the step on every rank, the others
 *               naming the rank that failed); HX_ERR_STATE (another thread's call on s has
 *               not returned; an embedding table of the graph is held by
 *               another thread as the tables' rule below forbids);
 *               HX_ERR_COMM (data parallel: summing the gradients over the
 *               ranks failed, naming the collective and the rank).
 *   On failure: parameters, optimizer state, embedding rows and the step
 *               count are as before for every failure found before the
 *               updates run, which is all of the above but out-of-memory
 *               in the update phase itself (and a DYNAMIC table may have
 *               given new ids rows in the forward); with the disk tier
 *               nothing at all changes. Fetch buffers may be written in
 *               part. A device OOM keeps the session usable for the plans
 *               it already had.
 *   Ownership:  feeds are read during the call only (device feeds: see
 *               above); fetch buffers are the caller's.
 *   Threads:    one thread per session, enforced: hx_session_run,
 *               _save, _load, _read, _write, _memory_stats,
 *               _set_lr_scale, _device_alloc and _device_upload fail with
 *               HX_ERR_STATE, changing nothing, while another of them is
 *               in progress on the same session (the other calls on a
 *               session are not checked: keep them to one thread too).
 *               Runs of different sessions may overlap, within the
 *               embedding section's rule for tables they share, which a
 *               run checks as it starts.
 */
HX_API hx_status hx_session_run(hx_session *s, const hx_feed *feeds, int n_feeds,
                                const hx_fetch *fetches, int n_fetches, unsigned flags);

/* Accelerator memory for device feeds, allocated from the device's
 * persistent pool against its memory cap.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or out NULL, no accelerator);
 *               HX_ERR_DEVICE_OOM (past the cap); HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out is NULL (unless out is NULL); nothing is allocated.
 *   Ownership:  the block belongs to s: free it with
 *               hx_session_device_free, or it goes with the session.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_device_alloc(hx_session *s, size_t bytes, void **out);
/* Frees a block of hx_session_device_alloc.
 *   Fails:      never: NULL, or a p that is not a block of s, is ignored.
 *   Ownership:  p is invalid afterwards.
 *   Threads:    one thread per session.
 */
HX_API void hx_session_device_free(hx_session *s, void *p);
/* Copies bytes of host memory src to dst, synchronously.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s, dst or src NULL, no accelerator,
 *               [dst, dst + bytes) not inside one block of s); a device
 *               copy error.
 *   On failure: dst is not written after a failed check.
 *   Ownership:  src is read during the call only.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_device_upload(hx_session *s, void *dst, const void *src,
                                          size_t bytes);

/* Writes the trace recorded so far (see hx_session_config.trace_path) now;
 * HX_OK and nothing written when the session has no trace.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s NULL); HX_ERR_IO (the file cannot
 *               be written); HX_ERR_OUT_OF_MEMORY.
 *   On failure: the file at the path is as it was (it is replaced whole).
 *   Ownership:  nothing changes hands.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_trace_flush(hx_session *s);

/* Copies a persistent tensor's value out (read) or in (write), wherever it
 * lives (host, device or the disk tier); after a delayed update has
 * landed. Persistent tensors are:
 * - parameters (HX_TENSOR_PARAMETER). Writing one also rewrites its
 *   f16/bf16 copy, if its update has one.
 * - constants (HX_TENSOR_CONSTANT). Writing one changes this session's
 *   value only: the graph's data and other sessions keep theirs.
 * - optimizer state (HX_TENSOR_STATE): "<param>/momentum", "exp_avg",
 *   "exp_avg_sq", "sum", "accum", "linear" (find them with hx_graph_find),
 *   and the f16/bf16 copy of a master that hx_graph_apply_optimizer fused
 *   into the master's update (the hx_cast tensor). Writing state sets what
 *   the next update reads; the step count is not changed (bias correction
 *   goes on from hx_session_step). A written half copy is what the device
 *   ops read until the master's next update or write rewrites it.
 * Embedding tables are not tensors: see hx_embedding_table_read_rows.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s, t or data NULL; t of another
 *               graph; t not persistent: inputs, op outputs and updates
 *               have no value between runs, fetch them; read: t sharded
 *               at ZeRO stage 1 or 2 and held by another rank, whom the
 *               message names); HX_ERR_UNSUPPORTED (write: t sharded at
 *               ZeRO stage 1 or 2); HX_ERR_SHAPE (bytes not t's size);
 *               HX_ERR_IO, HX_ERR_CORRUPT (the disk tier); a device copy
 *               error.
 *   On failure: after a failed check nothing is read or written; a write
 *               to the disk tier applies entirely or not at all.
 *   Ownership:  data is the caller's, used during the call only.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_read(hx_session *s, const hx_tensor *t, void *data, size_t bytes);
HX_API hx_status hx_session_write(hx_session *s, const hx_tensor *t, const void *data,
                                  size_t bytes);

/* Which accelerator a session uses and why, for a program's first lines. */
typedef struct hx_accelerator_info {
    hx_accelerator in_use;   /* CUDA, EMU or NONE (AUTO resolved) */
    char device[128];        /* CUDA: the GPU's name; EMU: "emulated accelerator on the
                                host's cores"; NONE: "" */
    size_t device_memory;    /* CUDA: the GPU's memory in bytes; else 0 */
    size_t capacity;         /* the device memory cap in force (bytes); 0 for NONE */
    char why[256];           /* why this one: it was asked for, a CUDA device was
                                found, or why AUTO did not take CUDA ("no CUDA device
                                found (CUDA says: ...)", "built without CUDA") */
} hx_accelerator_info;
/* The session's accelerator, resolved at hx_session_create.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or out NULL).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_accelerator_info(const hx_session *s, hx_accelerator_info *out);

typedef struct hx_memory_stats {
    size_t persistent_bytes;       /* host: params, constants, optimizer state */
    size_t transient_planned_bytes;/* host: the arena the plan needs (largest plan so far) */
    size_t transient_tensor_bytes; /* sum of the sizes of those plans' transient tensors */
    /* the accelerator (all 0 without one) */
    size_t device_capacity;
    size_t device_persistent_bytes;
    size_t device_transient_planned_bytes;
    size_t device_used_bytes, device_peak_bytes;
    size_t dp_chunk_bytes;         /* data parallel (config.comm): the host chunks the
                                      gradients are summed in (ZeRO stage 2: this rank's
                                      own chunks and one group's send buffer); 0 without */
    /* ZeRO stage >= 1: the persistent bytes of the sharded tensors (f32
     * masters with half copies, optimizer state) this rank holds, those
     * of all ranks together, and (stage 2) the bytes of gradients this
     * rank keeps summed (its own chunks); 0 otherwise */
    size_t zero_owned_bytes, zero_sharded_bytes, zero_grad_shard_bytes;
    /* ZeRO stage 3: the host bytes of gathered parameters (transient
     * buffers, one per chunk group being read: see zero_stage) held at
     * once, the most so far in this session's runs, and the most the
     * plans predict when their steps run in plan order with the prefetch
     * depth (the host's predicted peak is persistent_bytes +
     * transient_planned_bytes + this); 0 otherwise */
    size_t zero_gather_peak_bytes, zero_gather_planned_bytes;
    /* offload_param=disk: the bytes of the parameters and optimizer state
     * the disk tier keeps (at ZeRO stages 1-3 this rank's part), none of
     * them in persistent_bytes; the file holds two copies. 0 otherwise */
    size_t disk_persistent_bytes;
} hx_memory_stats;
/* Memory now, planning the training step (all update nodes) first if no
 * run has been planned yet. The device pools in detail:
 * hx_session_pool_stats (below, with the pools).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or out NULL); planning's
 *               failures (HX_ERR_DEVICE_OOM, HX_ERR_OUT_OF_MEMORY).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_memory_stats(hx_session *s, hx_memory_stats *out);
/* The offload policy and its predicted against measured device peak (see
 * hx_offload_report, with hx_offload_config); without an accelerator only
 * the policy (NONE). A policy set by hand is planned at the first call.
 *   Fails:      as hx_session_memory_stats.
 *   On failure: as hx_session_memory_stats.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_offload_report(hx_session *s, hx_offload_report *out);

/* How the last run's plan (or, before any run, the training step's) was
 * placed and split. */
typedef struct hx_placement_stats {
    int n_ops, n_device_ops;
    int n_fallbacks;        /* ops moved to the CPU by HX_FALLBACK_CPU (whole graph) */
    int n_subgraphs, n_device_subgraphs;
    int n_copies, n_h2d, n_d2h; /* per run: one per (tensor, destination device) */
    size_t copy_bytes;      /* per run */
} hx_placement_stats;
/* The counts of that plan, planning the training step first if no run has
 * been planned yet.
 *   Fails:      as hx_session_memory_stats.
 *   On failure: as hx_session_memory_stats.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_placement_stats(hx_session *s, hx_placement_stats *out);
/* What automatic placement decided and predicted, beside what the training
 * runs measured. */
typedef struct hx_placement_report {
    int n_auto;               /* graph nodes the planner placed (0: no AUTO op) */
    int n_auto_device;        /* of them, on the device */
    int n_signatures;         /* distinct op signatures it needed costs for */
    int n_cache_hits;         /* of them, found in the cache file */
    double profile_s;         /* seconds spent measuring at creation */
    double plan_s;            /* seconds spent planning at creation */
    /* The predicted training step (seconds) of the chosen placement and of
     * the same graph with every AUTO node on the host / on the device
     * (INFINITY: it does not fit the cap or an op has no device kernel). */
    double predicted_step_s, predicted_all_host_s, predicted_all_device_s;
    double mixed_step_s;      /* the planner's mixed placement's, kept only when it is at
                                 least 10% under the better single side's */
    double h2d_latency_s, h2d_bytes_per_s, d2h_latency_s, d2h_bytes_per_s; /* the link */
    size_t device_cap;        /* what the planner kept device memory under */
    size_t predicted_device_bytes; /* its estimate for the chosen placement */
    int measured_steps;       /* training runs timed so far */
    double measured_step_s;   /* the fastest of them (wall seconds; 0: none) */
    bool off;                 /* measured_step_s is more than 20% off predicted_step_s */
} hx_placement_report;
/* The report of s (all zero but device_cap when no node was AUTO).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or out NULL).
 *   On failure: *out is unchanged.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_placement_report(const hx_session *s, hx_placement_report *out);
/* Per unit of the training step (see "Execution": each CPU subgraph, device
 * subgraph and copy of each phase), what automatic placement predicted
 * against what the runs measured. A session with AUTO nodes times its
 * first HX_PLACEMENT_TIMED_RUNS training runs unit by unit: a unit's time
 * in a run is what its steps take where they run, waits for other units
 * left out (host units: the host clock around their kernels; device
 * subgraphs and copies: the device's own clock around their work on the
 * stream: CUDA events, emu's stream threads). Predicted: the sum of its
 * kernels' profiled times on its side and of its copies' latency + bytes /
 * bandwidth. HX_DEBUG=placement prints every unit and the step once the
 * timed runs are done (or at hx_session_free if fewer ran). */
#define HX_PLACEMENT_TIMED_RUNS 10
typedef enum hx_unit_lane {
    HX_UNIT_HOST,   /* a CPU subgraph */
    HX_UNIT_DEVICE, /* a device subgraph (the accelerator's compute stream) */
    HX_UNIT_H2D,    /* copies to the device */
    HX_UNIT_D2H     /* copies to the host */
} hx_unit_lane;
typedef struct hx_placement_unit {
    int index;             /* its place in the plan's units (phase 0's first) */
    int phase;             /* 0: forward and backward; 1: optimizer updates */
    hx_unit_lane lane;
    int n_steps;           /* kernels, or copies */
    const char *first_op;  /* the node of its first and last step (a copy's: the tensor */
    const char *last_op;   /*   copied); owned by the session's graph */
    size_t copy_bytes;     /* copies: bytes per run; 0 for kernels */
    double predicted_s;    /* the model's seconds (NAN: a step has no prediction) */
    double measured_s;     /* the fastest timed run's seconds (0: not timed) */
    int runs;              /* timed runs that ran it */
    double ratio;          /* measured_s / predicted_s (0: not timed or no prediction) */
    bool off;              /* the ratio is more than 20% away from 1 (> 1.2 or < 0.8) */
} hx_placement_unit;
/* The units of the last timed training run's plan: min(cap, *n_units) of
 * them into out[0..], in plan order, and their number into *n_units (0:
 * no node was AUTO, or no training run yet). Call with cap 0 (out may be
 * NULL) for the count.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or n_units NULL, cap < 0, out
 *               NULL with cap > 0).
 *   On failure: nothing is written.
 *   Ownership:  out is the caller's; its names are the graph's (valid
 *               while the session lives).
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_placement_units(const hx_session *s, hx_placement_unit *out, int cap,
                                            int *n_units);
/* That report as text, what HX_DEBUG=placement prints: a line per unit
 * (target, steps and their first and last node, predicted and measured ms,
 * ratio, "OFF" past 20%) and last the step's line (predicted, measured,
 * ratio). worst > 0: only the `worst` units farthest from their
 * prediction (by |log ratio|, unmeasured last), in that order, and a line
 * saying how many were left out; 0: every unit in plan order. Written to
 * buf as snprintf does: at most cap bytes with the terminating NUL (buf
 * may be NULL with cap 0); *len: the length of the whole text, so a
 * caller whose buffer was too short calls again with *len + 1 bytes.
 * Without AUTO nodes or timed runs the text is one line saying so.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or len NULL, worst < 0, buf
 *               NULL with cap > 0); HX_ERR_OUT_OF_MEMORY.
 *   On failure: buf and *len are not written.
 *   Ownership:  buf is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_placement_text(const hx_session *s, int worst, char *buf, size_t cap,
                                           size_t *len);
/* Writes that plan as Graphviz DOT (ops coloured by target, clustered by
 * subgraph, copies drawn as their own nodes) / as a text summary
 * (subgraphs, ops per subgraph, copies and bytes per step) to path
 * (created or truncated).
 *   Fails:      as hx_session_memory_stats; HX_ERR_INVALID_ARGUMENT (path
 *               NULL); HX_ERR_IO (path cannot be written).
 *   On failure: the file may hold part of the output.
 *   Ownership:  path is not kept.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_dump_dot(hx_session *s, const char *path);
HX_API hx_status hx_session_dump_summary(hx_session *s, const char *path);

/* Number of HX_RUN_TRAIN runs that succeeded and were not skipped (set
 * by hx_session_load too). The next update's step t is this + 1.
 *   Fails:      never (NULL: 0).
 *   Ownership:  a value.
 *   Threads:    one thread per session.
 */
HX_API int64_t hx_session_step(const hx_session *s);

/* Multiplies the learning rate of every dense parameter's update from the
 * next run on (warmup and decay schedules: set it before each step); 1 at
 * creation. Embedding tables keep their own rates.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s NULL, scale negative or not
 *               finite).
 *   On failure: the scale is as it was.
 *   Ownership:  nothing changes hands.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_set_lr_scale(hx_session *s, double scale);

typedef struct hx_train_stats {
    int64_t step;          /* steps taken */
    int64_t skipped_steps; /* skipped for non-finite gradients (loss scaling) */
    bool last_skipped;     /* the last HX_RUN_TRAIN run skipped its update */
    double loss_scale;     /* current scale (1 when loss scaling is off) */
    double grad_norm;      /* the last HX_RUN_TRAIN run's global gradient norm (dense
                              parameters, unscaled, before clipping; Inf or NaN when
                              that step was skipped or failed) */
    double comm_wait_s;    /* data parallel: seconds the training runs so far spent, after
                              the backward and after the updates, on gradient sums and
                              parameter all-gathers (starting what was left, waiting for
                              what was in flight), and (stages 1, 2) waiting in the forward
                              and in other calls for the all-gathers the step before left
                              in flight, and (ZeRO) gathering the owners' sums of squares
                              for the gradient norm: the communication not hidden */
    double host_update_s;  /* seconds the dense optimizer updates on the host took so far,
                              each from its launch to its end (pinning included), summed
                              over the lanes that ran them, the delayed update's too */
} hx_train_stats;
/* The training counters now.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or out NULL).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_train_stats(const hx_session *s, hx_train_stats *out);

/* Checkpoints: every parameter and optimizer state tensor (the f16/bf16
 * copies of masters included), the step count and the loss scale; not
 * constants, not embedding tables (hx_embedding_table_save). Written to a
 * stage file of this save's own, "<path>.stage-<pid>-<n>", held locked,
 * synced, renamed over path, and the folder synced: a crash at any instant
 * leaves the old file or the new one at path. A save removes the stage
 * files that killed savers left beside path. Each tensor carries an XXH3
 * checksum. Loading checks the whole file against the session's graph
 * (the same set of names, dtypes, shapes, checksums) before changing
 * anything. Both wait for a delayed update first.
 * A session at zero_stage >= 1 saves a sharded checkpoint, a collective
 * over its communicator (every rank calls save with the same path): each
 * rank writes the tensors it holds alone (its masters and moments, at
 * stage 3 its parameters too; rank 0 also the replicated ones) to "<path>.g<G>.<rank>-of-<N>", a file of
 * the format above, reads it back for its size and XXH3-64, and once
 * every rank's is written rank 0 commits the set by writing the manifest
 * at path (staged as above: rank count, stage, which shard holds each
 * tensor, each shard's bytes and checksum); a kill at any instant leaves
 * the old set loadable, and the set before is removed after the commit.
 * The files must be where every rank sees them. Load takes either kind of
 * checkpoint into any session of the graph: a sharded one at any rank
 * count and stage, or in a session of one process (the full state); a
 * whole one into a ZeRO session (each rank its part). Every rank checks
 * every shard file against the manifest, and a ZeRO session's ranks agree
 * before any of them changes anything (a collective too).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or path NULL; a sharded save:
 *               a tensor name past 511 bytes); HX_ERR_STATE (save: another
 *               saver, in this process or another, is writing path now:
 *               the message names its stage file); HX_ERR_IO (the file
 *               cannot be created, written, renamed or read, or changed
 *               while it was loaded); HX_ERR_CORRUPT (load: a truncated or
 *               damaged file, one that does not fit the graph: the
 *               message names the tensor, or a header a session cannot run
 *               with, checksum or not: a count past int64, a loss scale
 *               that is not finite and > 0; a sharded one whose manifest
 *               is damaged or out of bounds, or whose shard file is
 *               missing, short or changed: the message names the file);
 *               HX_ERR_COMM (a sharded save or a ZeRO load: the ranks'
 *               collectives; a rank that fails its part fails every rank,
 *               the others naming it); HX_ERR_OUT_OF_MEMORY.
 *   On failure: save leaves the file (or set) at path as it was; load
 *               leaves the session as it was (on every rank), unless a
 *               file changed between its check and its reading (HX_ERR_IO),
 *               when tensors in memory may hold the new values in part.
 *   Ownership:  path is not kept.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_save(hx_session *s, const char *path);
HX_API hx_status hx_session_load(hx_session *s, const char *path);

/* ---- data: readers, a generator, feature columns -------------------------------
 *
 *   hx_reader_config rc = hx_reader_config_adult(false);
 *   rc.batch_size = 256;
 *   hx_reader *r;
 *   if (hx_reader_open("data/adult/adult.data", &rc, &r) != HX_OK) puts(hx_last_error());
 *   const hx_batch *b;
 *   while (hx_reader_next(r, &b) == HX_OK && b) { ... b->labels, b->numeric ... }
 *   hx_reader_rewind(r);                               // the next epoch
 *
 * A reader streams a delimited text file in blocks: one thread reads blocks
 * ending at line boundaries, n_threads threads parse them, and the caller's
 * thread receives rows in file order, so batches are the same at any thread
 * count. At most max_blocks blocks are in memory at once. Feature columns
 * (hx_features) then turn batches into what a model feeds: dense numeric
 * features, categorical ids per column, and a bag of ids for a wide (linear)
 * part. */

/* How a column of the file is read. */
typedef enum hx_column_kind {
    HX_COLUMN_IGNORE = 0,   /* skipped (still counted as a column) */
    HX_COLUMN_LABEL,        /* the target: at most one per schema */
    HX_COLUMN_NUMERIC,      /* a decimal number -> f32 */
    HX_COLUMN_CATEGORICAL   /* a category -> an i64 id (see hx_category_parse) */
} hx_column_kind;

/* How a categorical field becomes an id. Ids are >= 0; a missing field gets
 * HX_ID_MISSING. */
typedef enum hx_category_parse {
    HX_CATEGORY_HASH = 0, /* XXH3-64 of the field's bytes with hash_seed, top bit cleared */
    HX_CATEGORY_HEX       /* a hexadecimal number of 1..16 digits (Criteo), top bit cleared */
} hx_category_parse;
#define HX_ID_MISSING ((int64_t)-1)

typedef struct hx_column_spec {
    const char *name;         /* for messages and hx_reader_config_find */
    hx_column_kind kind;
    float missing_value;      /* NUMERIC: the value of a missing field (0) */
    hx_category_parse parse;  /* CATEGORICAL */
} hx_column_spec;

/* A label's text (after trimming and the suffix strip) and its value. */
typedef struct hx_label_map {
    const char *text;
    float value;
} hx_label_map;

/* What a malformed row does: skipped and counted, or the reader stops with
 * HX_ERR_CORRUPT naming the file, the line and the reason. */
typedef enum hx_malformed_policy { HX_MALFORMED_SKIP = 0, HX_MALFORMED_ERROR } hx_malformed_policy;

/* Why a row was malformed (hx_reader_stats counts each). */
typedef enum hx_malformed_reason {
    HX_MALFORMED_COLUMNS = 0, /* not n_columns fields */
    HX_MALFORMED_NUMBER,      /* a numeric (or hex) field that does not parse, or is not finite */
    HX_MALFORMED_LABEL,       /* a missing label, or one not in the label map / not a number */
    HX_MALFORMED_QUOTE,       /* an unterminated quote or text after a closing quote */
    HX_MALFORMED_TOO_LONG,    /* a line longer than max_line_bytes */
    HX_MALFORMED_REASON_COUNT
} hx_malformed_reason;
/* A few words for a reason, e.g. "bad label".
 *   Fails:      never: a value outside the enum gives "(unknown reason)".
 *   Ownership:  a static string.
 *   Threads:    any thread.
 */
HX_API const char *hx_malformed_reason_name(hx_malformed_reason r);

/* Parsing rules: fields are split at `delimiter`; a line's trailing '\r' is
 * dropped (CRLF files); blank lines are skipped and not rows. With `quotes`
 * a field may be "quoted" (a delimiter inside is data, "" is one quote);
 * a quoted field cannot span lines. A field is missing when it is empty
 * or equals missing_token (after trimming). Bytes are bytes: a categorical
 * field hashes whatever it holds, UTF-8 or not. */
typedef struct hx_reader_config {
    const hx_column_spec *columns; /* the schema, copied at open */
    int n_columns;
    char delimiter;                /* ',' */
    bool quotes;                   /* true */
    bool trim_spaces;              /* trim ' ' and '\t' around each field (false) */
    const char *missing_token;     /* e.g. "?"; NULL: only empty fields are missing */
    int64_t skip_lines;            /* lines dropped at the start of the file (a header) */
    const char *label_suffix;      /* stripped from the end of a label if present, e.g. "." */
    const hx_label_map *labels;    /* NULL: the label is a number */
    int n_labels;
    uint64_t hash_seed;            /* HX_CATEGORY_HASH */
    hx_malformed_policy on_malformed; /* SKIP */
    int64_t batch_size;            /* rows per batch (256); the last batch may be smaller */
    int n_threads;                 /* parser threads, >= 1 (1); a reading thread besides */
    size_t block_bytes;            /* bytes per block (1 MiB) */
    int max_blocks;                /* blocks in memory at once, >= 2 (2 * n_threads + 2) */
    size_t max_line_bytes;         /* longer lines are malformed (64 KiB) */
    int64_t shuffle_rows;          /* 0: file order; else rows shuffled in a buffer of this size */
    uint64_t shuffle_seed;         /* epoch e's order depends on (shuffle_seed, e) only */
} hx_reader_config;
/* Configs: the defaults noted above with no columns; UCI Adult
 * (data/adult): 14 features (6 numeric, 8 categorical) and the income
 * label, ", "-separated, "?" missing, ">50K" -> 1, "<=50K" -> 0 (test_file:
 * skip adult.test's first line and strip its labels' "."); Criteo (Display
 * Advertising Challenge): tab-separated, a 0/1 label, 13 integer columns
 * I1..I13 (missing: 0), 26 hexadecimal categorical columns C1..C26; empty
 * fields are missing.
 *   Fails:      never.
 *   Ownership:  a value; its schema, labels and strings are static.
 *   Threads:    any thread.
 */
HX_API hx_reader_config hx_reader_config_default(void);
HX_API hx_reader_config hx_reader_config_adult(bool test_file);
HX_API hx_reader_config hx_reader_config_criteo(void);
/* The index of column `name` among the batch's numeric (or categorical)
 * columns, i.e. its rank among the schema's columns of its kind.
 *   Fails:      never: -1 when cfg, its columns or name is NULL, or no
 *               numeric or categorical column has that name.
 *   Ownership:  nothing is kept.
 *   Threads:    any thread.
 */
HX_API int hx_reader_config_find(const hx_reader_config *cfg, const char *name);

/* Rows as a struct of arrays, row-major per array. Owned by whoever
 * returned it and valid until its next call. */
typedef struct hx_batch {
    int64_t n;                       /* rows */
    int n_numeric, n_categorical;    /* columns of each kind, in schema order */
    const float *labels;             /* [n] (0 without a label column) */
    const float *numeric;            /* [n, n_numeric] */
    const uint8_t *numeric_missing;  /* [n, n_numeric]: 1 where the field was missing */
    const int64_t *categorical;      /* [n, n_categorical]: ids or HX_ID_MISSING */
} hx_batch;

typedef struct hx_reader hx_reader;

/* Opens `path` and starts reading ahead on a reading thread and
 * n_threads parser threads.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (path, cfg or out NULL; a bad
 *               config: no columns, two labels, a label map without a label
 *               column, sizes or counts out of range, ...; the message
 *               names the field); HX_ERR_IO (the file cannot be opened);
 *               HX_ERR_OUT_OF_MEMORY; HX_ERR_INTERNAL (a thread cannot be
 *               started).
 *   On failure: *out is NULL (unless out is NULL); nothing is kept.
 *   Ownership:  path and the config (schema, labels, strings) are copied;
 *               the reader is the caller's: close it with hx_reader_close.
 *   Threads:    any thread.
 */
HX_API hx_status hx_reader_open(const char *path, const hx_reader_config *cfg, hx_reader **out);
/* Stops the reader's threads and frees it.
 *   Fails:      never (NULL: no-op).
 *   Ownership:  r and its batches are invalid afterwards.
 *   Threads:    one thread per reader.
 */
HX_API void hx_reader_close(hx_reader *r);
/* The next batch of this epoch in *out, or *out = NULL at its end. Under
 * HX_MALFORMED_ERROR a malformed row ends the batch: the rows before it
 * come as a batch, and the next call fails.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (r or out NULL); HX_ERR_CORRUPT (a
 *               malformed row under HX_MALFORMED_ERROR, naming the file,
 *               the line and the reason); HX_ERR_IO (a read failed). After
 *               either, every call fails the same way until a rewind.
 *   On failure: *out is NULL (unless out is NULL).
 *   Ownership:  the batch belongs to r and is valid until r's next call.
 *   Threads:    one thread per reader.
 */
HX_API hx_status hx_reader_next(hx_reader *r, const hx_batch **out);
/* Starts the next epoch from the top of the file (clearing a failure).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (r NULL); HX_ERR_IO (the file cannot
 *               be read again); HX_ERR_INTERNAL (a thread cannot start).
 *   On failure: r can only be closed.
 *   Ownership:  the last batch is invalid afterwards.
 *   Threads:    one thread per reader.
 */
HX_API hx_status hx_reader_rewind(hx_reader *r);

typedef struct hx_reader_stats {
    int64_t epoch;          /* 0 for the first pass, +1 per rewind */
    int64_t rows;           /* rows delivered this epoch */
    int64_t lines;          /* lines read this epoch (skipped, blank and malformed ones too) */
    int64_t bytes;          /* bytes read this epoch */
    int64_t malformed;      /* rows skipped as malformed this epoch */
    int64_t malformed_by_reason[HX_MALFORMED_REASON_COUNT];
    int64_t first_malformed_line; /* 1-based; 0 if none */
    char first_malformed[192];    /* what was wrong with it */
    size_t buffer_bytes;    /* bytes the reader holds for blocks, rows and batches */
} hx_reader_stats;
/* The reader's counts for this epoch.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (r or out NULL).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per reader.
 */
HX_API hx_status hx_reader_stats_get(const hx_reader *r, hx_reader_stats *out);

/* ---- a generator of Criteo-schema rows for scale tests ------------------------
 * Row i is a pure function of (seed, i): integer features (log-normal
 * counts), categorical ids drawn from a Zipf law (id 0 the most frequent:
 * P(id = k) ~ (k + 1)^-zipf_exponent over [0, vocab)), and a label drawn
 * from a planted logistic model: logit = bias + sum_j w_j * z_j + sum_c
 * u_c(id_c), where z_j is feature j's log1p, centred and scaled by its
 * generating law, w_j ~ N(0, weight_scale) and u_c(id) ~ N(0, weight_scale)
 * a hash of (seed, c, id); missing fields add nothing. Missing numeric
 * fields read 0 (as hx_reader_config_criteo reads them). */
typedef struct hx_generator_config {
    uint64_t seed;
    int64_t n_rows;            /* rows per epoch (1 << 20) */
    int64_t first_row;         /* the index of the epoch's first row, >= 0 (0): a held-out
                                  set of the same law is rows [n_rows, ...) of the training
                                  set's seed (first_row = its n_rows) */
    int64_t batch_size;        /* 4096 */
    int n_numeric;             /* 13 */
    int n_categorical;         /* 26 */
    int64_t vocab_size;        /* ids per categorical column, 1 .. 2^32 (1 << 20) */
    const int64_t *vocab_sizes;/* per column; NULL: vocab_size for all */
    double zipf_exponent;      /* >= 0 (1.05) */
    double missing_rate;       /* probability that a feature field is missing (0) */
    double bias;               /* planted intercept (-1) */
    double weight_scale;       /* planted weights' standard deviation (0.5) */
    int n_threads;             /* threads generating a batch (1) */
} hx_generator_config;
/* The defaults noted above.
 *   Fails:      never.
 *   Ownership:  a value (vocab_sizes NULL).
 *   Threads:    any thread.
 */
HX_API hx_generator_config hx_generator_config_default(void);

typedef struct hx_generator hx_generator;
/* A generator at row 0.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (cfg or out NULL, a field out of the
 *               range noted above); HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out is NULL (unless out is NULL).
 *   Ownership:  cfg and vocab_sizes are copied; the generator is the
 *               caller's: free it with hx_generator_free.
 *   Threads:    any thread.
 */
HX_API hx_status hx_generator_create(const hx_generator_config *cfg, hx_generator **out);
/* Frees the generator.
 *   Fails:      never (NULL: no-op).
 *   Ownership:  g, its batches and logits are invalid afterwards.
 *   Threads:    one thread per generator.
 */
HX_API void hx_generator_free(hx_generator *g);
/* The next batch (rows in order), or *out = NULL at the end of the epoch.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (g or out NULL).
 *   On failure: *out is NULL (unless out is NULL).
 *   Ownership:  the batch belongs to g and is valid until g's next call.
 *   Threads:    one thread per generator.
 */
HX_API hx_status hx_generator_next(hx_generator *g, const hx_batch **out);
/* The planted logits of the last batch's rows ([n]).
 *   Fails:      never: NULL for a NULL g or before the first batch.
 *   Ownership:  belongs to g, valid until g's next call.
 *   Threads:    one thread per generator.
 */
HX_API const float *hx_generator_logits(const hx_generator *g);
/* Back to row 0: every epoch holds the same rows.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (g NULL).
 *   On failure: nothing changes.
 *   Ownership:  the last batch stays valid until the next hx_generator_next.
 *   Threads:    one thread per generator.
 */
HX_API hx_status hx_generator_rewind(hx_generator *g);
/* Writes cfg's n_rows rows as a Criteo TSV file (label, %d integers, %08x
 * ids, empty when missing) that hx_reader_config_criteo reads back to the
 * same batches. Written to a temporary file and renamed into place.
 *   Fails:      as hx_generator_create, and HX_ERR_INVALID_ARGUMENT (path
 *               NULL); HX_ERR_IO (the file cannot be written or renamed).
 *   On failure: the file at path is as it was.
 *   Ownership:  nothing is kept.
 *   Threads:    any thread.
 */
HX_API hx_status hx_generator_write_tsv(const hx_generator_config *cfg, const char *path);

/* ---- feature columns -----------------------------------------------------------
 * A feature column reads one column of a batch (or, crossed, other feature
 * columns) and yields either dense values (NUMERIC) or ids in [0,
 * cardinality) (all others). Columns that need training statistics
 * (standardisation, quantile boundaries, vocabularies) get them from one
 * pass over the training set: hx_features_fit. */
typedef enum hx_feature_kind {
    HX_FEATURE_NUMERIC = 0, /* dense: x (or its log1p), optionally (x - mean) / std */
    HX_FEATURE_BUCKETIZED,  /* ids: the number of boundaries <= x */
    HX_FEATURE_VOCABULARY,  /* ids: a vocabulary of the training set's values */
    HX_FEATURE_HASHED,      /* ids: XXH3-64(id as 8 little-endian bytes, hash_seed) % hash_buckets */
    HX_FEATURE_CROSSED      /* ids: XXH3-64(the sources' ids, 8 bytes each, hash_seed) % hash_buckets */
} hx_feature_kind;

typedef struct hx_feature_column {
    const char *name;
    hx_feature_kind kind;
    int source;             /* NUMERIC, BUCKETIZED: a numeric column of the batch;
                             * VOCABULARY, HASHED: a categorical column of the batch */
    bool log1p;             /* NUMERIC, BUCKETIZED: x -> sign(x) * log1p(|x|) first */
    bool standardize;       /* NUMERIC: mean and (population) std of the training
                             * set (Welford); a std of 0 divides by 1 */
    const double *boundaries; /* BUCKETIZED: ascending, copied; NULL: quantiles */
    int n_boundaries;
    int n_quantiles;        /* BUCKETIZED without boundaries: boundaries at the
                             * training set's i/n_quantiles quantiles (duplicates
                             * dropped), exact up to 2^17 rows, else of a seeded
                             * sample of that size */
    int64_t min_count;      /* VOCABULARY: values seen fewer times are out of vocabulary (1) */
    int64_t oov_buckets;    /* VOCABULARY: >= 1; an out-of-vocabulary value goes to
                             * vocab + XXH3-64(id, 0) % oov_buckets (1) */
    int64_t hash_buckets;   /* HASHED, CROSSED (1000) */
    uint64_t hash_seed;     /* HASHED, CROSSED */
    int crossed[3];         /* CROSSED: 2 or 3 id-valued feature columns listed earlier */
    int n_crossed;
    bool wide;              /* id-valued columns: part of the wide bag */
} hx_feature_column;
/* A column of `kind` reading batch column `source`, the other fields at the
 * defaults noted above. A missing categorical value (HX_ID_MISSING) is a
 * value like any other: it has its own vocabulary entry if frequent
 * enough, and its own hash.
 *   Fails:      never (hx_features_create checks the column).
 *   Ownership:  a value holding the name pointer as given.
 *   Threads:    any thread.
 */
HX_API hx_feature_column hx_feature_column_default(hx_feature_kind kind, const char *name,
                                                   int source);

/* Which id-valued feature columns feed one embedding table: the table has
 * the sum of their cardinalities as rows (column k's ids start at the sum
 * of the earlier ones') and `dim` columns. For the model code. */
typedef struct hx_embedding_column {
    const char *name;
    const int *columns;     /* copied */
    int n_columns;
    int dim;
} hx_embedding_column;

typedef struct hx_features_config {
    const hx_feature_column *columns; /* copied */
    int n_columns;
    const hx_embedding_column *embeddings; /* copied */
    int n_embeddings;
    int n_numeric, n_categorical;   /* the batches' columns, checked against sources */
} hx_features_config;
/* No columns, no embeddings, no batch columns.
 *   Fails:      never.
 *   Ownership:  a value.
 *   Threads:    any thread.
 */
HX_API hx_features_config hx_features_config_default(void);

typedef struct hx_features hx_features;
/* Feature columns as cfg says, waiting for their training statistics.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (cfg or out NULL, no columns, a
 *               column or embedding that does not fit the batches'
 *               columns or the rules above; the message names it);
 *               HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out is NULL (unless out is NULL).
 *   Ownership:  cfg, its arrays, boundaries and names are copied; the
 *               features are the caller's: free them with hx_features_free.
 *   Threads:    any thread.
 */
HX_API hx_status hx_features_create(const hx_features_config *cfg, hx_features **out);
/* Frees the features.
 *   Fails:      never (NULL: no-op).
 *   Ownership:  f and what hx_features_info returned are invalid afterwards.
 *   Threads:    one thread per features object.
 */
HX_API void hx_features_free(hx_features *f);
/* Training statistics: fit_batch for each training batch, then
 * fit_finish; or hx_features_fit, which reads the reader's epoch to its end,
 * finishes and rewinds the reader. A config that needs no statistics is
 * finished at create.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (f, b or r NULL); HX_ERR_STATE (f is
 *               finished already); HX_ERR_SHAPE (a batch with other column
 *               counts than the config's); the reader's failures
 *               (HX_ERR_CORRUPT, HX_ERR_IO); HX_ERR_OUT_OF_MEMORY.
 *   On failure: f keeps the statistics of the batches before; a batch
 *               refused by a check adds nothing. hx_features_fit leaves the
 *               reader where it failed.
 *   Ownership:  batches are read during the call only.
 *   Threads:    one thread per features object (and per reader).
 */
HX_API hx_status hx_features_fit_batch(hx_features *f, const hx_batch *b);
HX_API hx_status hx_features_fit_finish(hx_features *f);
HX_API hx_status hx_features_fit(hx_features *f, hx_reader *r);

/* What a feature column became after fitting. */
typedef struct hx_feature_info {
    bool dense;             /* NUMERIC */
    int index;              /* dense: its position in the dense vector; else its id column */
    int64_t cardinality;    /* id-valued: ids are in [0, cardinality) */
    int64_t wide_offset;    /* wide columns: where its ids start in the wide bag's id space */
    double mean, std;       /* NUMERIC with standardize */
    int64_t vocab_size;     /* VOCABULARY: in-vocabulary values */
    const double *boundaries; /* BUCKETIZED: the boundaries used (owned by f) */
    int n_boundaries;
} hx_feature_info;
/* What column `column` of the config became.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (f or out NULL, column out of
 *               range); HX_ERR_STATE (f not finished).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's; its boundaries belong to f.
 *   Threads:    once f is finished it is only read: any number of threads
 *               may call this, lookup, shape_get, embedding,
 *               feature_batch_alloc and transform with it at once.
 */
HX_API hx_status hx_features_info(const hx_features *f, int column, hx_feature_info *out);
/* The vocabulary index of a raw id (a value of the batch's categorical
 * column), or its OOV bucket.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (f or out NULL, column not a
 *               VOCABULARY column); HX_ERR_STATE (f not finished).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    as hx_features_info.
 */
HX_API hx_status hx_features_lookup(const hx_features *f, int column, int64_t raw_id,
                                    int64_t *out);
typedef struct hx_features_shape {
    int dense_dim;          /* dense values per row */
    int n_id_columns;       /* id-valued columns */
    int n_wide;             /* wide columns: ids per row in the wide bag */
    int64_t wide_dim;       /* the wide bag's id space (sum of wide cardinalities) */
} hx_features_shape;
/* The sizes of what hx_features_transform writes per row.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (f or out NULL); HX_ERR_STATE (f not
 *               finished).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    as hx_features_info.
 */
HX_API hx_status hx_features_shape_get(const hx_features *f, hx_features_shape *out);
/* Embedding table e: rows and the first row of each of its columns' ids
 * (offsets must hold n_columns values; may be NULL).
 *   Fails:      HX_ERR_INVALID_ARGUMENT (f or rows NULL, e out of range);
 *               HX_ERR_STATE (f not finished).
 *   On failure: *rows and offsets are not written.
 *   Ownership:  the caller's buffers.
 *   Threads:    as hx_features_info.
 */
HX_API hx_status hx_features_embedding(const hx_features *f, int e, int64_t *rows,
                                       int64_t *offsets);

/* What a model feeds, caller-owned (hx_feature_batch_alloc/free). */
typedef struct hx_feature_batch {
    int64_t n, capacity;
    float *labels;          /* [n] */
    float *dense;           /* [n, dense_dim] */
    int64_t *ids;           /* [n_id_columns, n]: id column c is ids + c * n */
    int64_t *wide_ids;      /* [n * n_wide]: row r's ids are wide_ids[wide_offsets[r]..[r+1]) */
    int64_t *wide_offsets;  /* [n + 1] */
} hx_feature_batch;
/* Buffers for capacity rows of f's features.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (f or out NULL, capacity < 1);
 *               HX_ERR_STATE (f not finished); HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out is zeroed (unless out is NULL): freeing it is a no-op.
 *   Ownership:  the buffers are the caller's: free them with
 *               hx_feature_batch_free; they do not refer to f.
 *   Threads:    as hx_features_info.
 */
HX_API hx_status hx_feature_batch_alloc(const hx_features *f, int64_t capacity,
                                        hx_feature_batch *out);
/* Frees fb's buffers and zeroes *fb.
 *   Fails:      never (NULL, or a zeroed fb: no-op).
 *   Ownership:  fb's arrays are invalid afterwards.
 *   Threads:    one thread per feature batch.
 */
HX_API void hx_feature_batch_free(hx_feature_batch *fb);
/* Transforms b (at most fb->capacity rows) into fb.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (f or b NULL); HX_ERR_STATE (f not
 *               finished); HX_ERR_SHAPE (b's column counts differ from the
 *               config's, fb NULL or unallocated, more rows than
 *               fb->capacity).
 *   On failure: fb is not written.
 *   Ownership:  b is read during the call only; fb is the caller's.
 *   Threads:    as hx_features_info (f is only read), one thread per fb.
 */
HX_API hx_status hx_features_transform(const hx_features *f, const hx_batch *b,
                                       hx_feature_batch *fb);

/* ---- device memory pools and trace replay -----------------------------------
 * Device memory is managed in two pools that never share a segment: a
 * persistent pool (parameters, master copies, optimizer state) and a
 * transient pool (activations, gradients, workspaces within a step). In
 * each, blocks of the exact size are taken best fit, split off and
 * coalesced on free; short-lived churn never fragments long-lived memory.
 * A device OOM (HX_ERR_DEVICE_OOM) says what was requested, the cap,
 * reserved and in-use bytes per pool, free bytes, the largest free block,
 * fragmentation, and what to try. */

/* One pool (or the sum of both). Bytes are device bytes. */
typedef struct hx_pool_stats {
    size_t reserved;        /* obtained from the device (segments) */
    size_t allocated;       /* in live blocks (sizes rounded to the alignment) */
    size_t requested;       /* what the live allocations asked for */
    size_t peak_reserved, peak_allocated, peak_requested;
    size_t free_bytes;      /* reserved - allocated */
    size_t largest_free;    /* the largest free block */
    double fragmentation;   /* 1 - largest_free / free_bytes; 0 when nothing is free */
    int64_t segments, live_blocks, free_blocks;
    int64_t allocs, frees, reserves, releases, ooms; /* counts so far */
} hx_pool_stats;

typedef struct hx_device_pools_stats {
    size_t capacity;        /* the cap (SIZE_MAX: none) */
    hx_pool_stats persistent, transient;
    hx_pool_stats total;    /* both: its peaks are peaks of the sum */
} hx_device_pools_stats;

/* The pools of the session's accelerator (emu or cuda) now: what its
 * persistent pool holds (parameters, optimizer state and other persistent
 * tensors placed on the device, the gradient scan's sums, hx_session_device_alloc
 * buffers, per-stream library workspaces) and its transient pool (the
 * plans' activation arena, kernel scratch), their sum, and the cap
 * (max_device_memory, or the device's memory). allocated <= reserved <=
 * capacity; peaks never go down; hx_memory_stats.device_used_bytes and
 * device_peak_bytes are total.allocated and total.peak_allocated.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (s or out NULL, no accelerator).
 *   On failure: *out is not written.
 *   Ownership:  *out is the caller's.
 *   Threads:    one thread per session.
 */
HX_API hx_status hx_session_pool_stats(hx_session *s, hx_device_pools_stats *out);

/* Replays an allocation trace through hetex's pools and through a
 * single-pool best-fit caching allocator in the style of PyTorch's CUDA
 * allocator (512-byte rounding; 2 MiB segments for requests up to 1 MiB,
 * 20 MiB for those under 10 MiB, larger ones rounded up to 2 MiB; blocks
 * split and coalesced; nothing given back to the device until it runs
 * out). Neither touches real memory: traces of any size replay.
 *
 * A trace is text, one event a line ('#' comments):
 *   hxmemtrace 1                 header
 *   a <id> <bytes> [p|t]         allocation, persistent or transient (t if left out)
 *   f <id>                       free
 * hetex writes one when HX_MEMTRACE=path is set: every allocation of a
 * session's accelerator (the plan's transient arena is one block), written
 * when the session is freed; with HX_MEMTRACE_MODE=tensors also, instead of
 * the arena, every transient device tensor of every run (allocated when
 * produced, freed after its last reader, in plan order), as a per-tensor
 * allocator would see the run. */
typedef struct hx_memreplay_report {
    int64_t events, allocs, frees;
    size_t peak_live;            /* most bytes live at once, as requested */
    size_t capacity;             /* the cap replayed under (SIZE_MAX: none) */
    hx_device_pools_stats pools; /* hetex's pools at the end */
    hx_pool_stats baseline;      /* the baseline at the end */
    /* peak reserved / peak live of what each served (0 with nothing live) */
    double pools_ratio, baseline_ratio;
    /* the first allocation each could not serve under the cap: its event
     * (0-based, in file order) and the bytes live then; -1 and 0: none */
    int64_t pools_oom_event, baseline_oom_event;
    size_t pools_oom_live, baseline_oom_live;
} hx_memreplay_report;
/* Replays the trace at path with capacity the bytes either may reserve (0:
 * no cap); an allocation past the cap is recorded in *out, not an error.
 *   Fails:      HX_ERR_INVALID_ARGUMENT (path or out NULL); HX_ERR_IO (the
 *               file cannot be read); HX_ERR_CORRUPT (naming the line of a
 *               malformed event or an inconsistent one: an id allocated
 *               twice, a free of an id not live); HX_ERR_OUT_OF_MEMORY.
 *   On failure: *out may be written in part.
 *   Ownership:  *out is the caller's; path is not kept.
 *   Threads:    any thread.
 */
HX_API hx_status hx_memreplay(const char *path, size_t capacity, hx_memreplay_report *out);

#ifdef __cplusplus
}
#endif
#endif
