/* A GPT-2-style character-level language model built through the public
 * API only: token and position embeddings, pre-LayerNorm blocks of causal
 * self-attention and a GELU MLP, a final LayerNorm and a head tied to the
 * token embedding. Used by `hetex gpt` and by example_gpt. */
#ifndef HX_EXAMPLE_GPT_H
#define HX_EXAMPLE_GPT_H

#include "hetex.h"

typedef struct gpt_config {
    int vocab;       /* distinct characters */
    int layers, heads, width;
    int context;     /* T */
    int batch;       /* B */
    float dropout;   /* after attention and MLP outputs; 0: none */
    uint64_t seed;   /* dropout masks */
    hx_dtype dtype;  /* params (as used) and activations: F32, or BF16/F16 copies of
                        f32 masters (mixed precision; the loss is computed in f32) */
    bool recompute;  /* mark each block for recomputation (hx_graph_push_recompute): a
                        session whose offload config sets recompute (`--recompute`), or
                        whose auto_offload picks it, keeps only the blocks' inputs from
                        forward and recomputes attention and MLP in backward */
    hx_target placement; /* every op and parameter's target: DEVICE (DEFAULT means it), AUTO
                            (placed by the session's planner) or CPU */
} gpt_config;

/* The graph's handles a training loop needs. */
typedef struct gpt_model {
    hx_tensor *tokens;  /* input (B, T) i32 */
    hx_tensor *targets; /* input (B*T) i32: the next character of each position */
    hx_tensor *loss;    /* mean cross-entropy, a scalar */
    hx_tensor *logits;  /* (B*T, V) f32: the next character's scores at each position */
    hx_tensor **params; /* every parameter, in creation order */
    int n_tensors;
    int64_t n_params;   /* scalars */
} gpt_model;

/* Adds the model to g (empty; c valid: width a multiple of heads). HX_OK,
 * or an error with hx_last_error() saying which op failed. */
hx_status gpt_build(hx_graph *g, const gpt_config *c, gpt_model *m);
void gpt_model_free(gpt_model *m); /* the params array; the graph owns the rest */

/* True for parameters of 2 or more dims (weights and embedding tables): they
 * get weight decay, as in nanoGPT; biases and LayerNorm gains do not. */
bool gpt_param_decays(const hx_tensor *param);

/* The corpus as token ids with its vocabulary (sorted distinct bytes). */
typedef struct gpt_text {
    int32_t *ids;
    int64_t n, n_train; /* the first n_train ids train, the rest validate */
    int vocab;
    unsigned char chars[256]; /* id -> byte */
} gpt_text;

/* Reads path; n_train = 90% of it. HX_OK or HX_ERR_IO/HX_ERR_INVALID_ARGUMENT
 * with a message in msg. */
hx_status gpt_text_load(const char *path, gpt_text *t, char *msg, size_t msg_len);
void gpt_text_free(gpt_text *t);

/* Fills B windows of T+1 ids drawn at random (seeded state *rng) from the
 * train (val = false) or validation split: tokens (B,T), targets (B*T). */
void gpt_text_batch(const gpt_text *t, bool val, int batch, int context, uint64_t *rng,
                    int32_t *tokens, int32_t *targets);

/* Where the optimizer runs: on the device with everything else, or on the
 * host (AdamW on an fp32 master and moments; ZeRO-Offload's split). */
typedef enum gpt_offload { GPT_OFFLOAD_NONE, GPT_OFFLOAD_OPTIMIZER } gpt_offload;

typedef struct gpt_optim {
    double lr, beta1, beta2, weight_decay;
    gpt_offload offload;
    int warmup;          /* steps of linear warmup */
    double min_lr_ratio; /* cosine decay to lr * this at the last step */
} gpt_optim;

/* The learning-rate multiplier of step (0-based) of `steps`: linear warmup,
 * then cosine decay to min_lr_ratio. */
double gpt_lr_scale(const gpt_optim *o, int step, int steps);

/* A model ready to train: its graph (ops on the DEVICE target, AdamW updates
 * per o->offload) and a session over it. */
typedef struct gpt_run {
    hx_graph *g;
    gpt_model m;
    hx_session *s;
} gpt_run;

/* HX_OK, or an error with hx_last_error() set; r is then empty. */
hx_status gpt_run_create(const gpt_config *c, const gpt_optim *o, const hx_session_config *sc,
                         gpt_run *r);
void gpt_run_free(gpt_run *r);

/* The model's size knobs the planner searches over. */
typedef enum gpt_knob { GPT_KNOB_LAYERS, GPT_KNOB_WIDTH, GPT_KNOB_CONTEXT } gpt_knob;

/* The largest multiple v of step in [step, limit] at which c with knob k set
 * to v fits a device capped at sc->max_device_memory: its session can be
 * created and its training step planned. 0 if none; *n_params gets the
 * fitting model's parameter count. */
int gpt_plan_largest(const gpt_config *c, gpt_knob k, int step, int limit, const gpt_optim *o,
                     const hx_session_config *sc, int64_t *n_params);

/* With the device capped at sc->max_device_memory, prints for each offload
 * mode, with activations kept and with every block recomputed, the largest
 * model that fits with its parameters on the device: the most layers at
 * c's width, the widest at c's layers (widths in steps of 8 * heads) and
 * the longest context at c's size (steps of 8), without training. sc must not offload parameters (nor leave
 * $HX_OFFLOAD to do it): every size would "fit" until the host ran out, and
 * the doubling would build models of thousands of layers. */
void gpt_plan_report(const gpt_config *c, const gpt_optim *o, const hx_session_config *sc);

/* The settings that would make c fit a device capped at
 * sc->max_device_memory when o and sc do not: offload optimizer,
 * auto_offload, parameters on the host (each tried by creating its session
 * and planning its step). Writes them as CLI flags into out ("; "
 * between), returns how many fit. */
int gpt_plan_alternatives(const gpt_config *c, const gpt_optim *o, const hx_session_config *sc,
                          char *out, size_t n);

/* gpt_zero.c, `--zero S` under mpirun: the communicator over every rank
 * and this rank's share of global_batch (0; else the exit code, with the
 * reason printed: a batch the ranks do not divide, no MPI); this rank's
 * model-state memory against the ZeRO formula; the bytes it sent over `steps` steps against the minimum
 * (stages 0-2 a ring all-reduce's of the gradients, 3 one and a half of
 * those). */
int gpt_zero_start(int stage, int global_batch, hx_comm **comm, int *local_batch);
void gpt_zero_print_memory(hx_session *s, const gpt_model *m, hx_comm *comm, int stage, hx_dtype dt);
void gpt_zero_print_comm(const gpt_model *m, hx_comm *comm, hx_dtype dt, int stage, uint64_t sent,
                         int steps);
/* Stage 3, after the runs: the most bytes of gathered parameters this rank
 * held at once, and the plans' prediction. */
void gpt_zero_print_gathered(hx_session *s, hx_comm *comm);

/* gpt_checkpoint.c: `--save DIR` / `--resume DIR` checkpoint folders (the
 * session and where the run is, committed as a set). What a resumed run
 * needs besides the session: */
typedef struct gpt_resume {
    int step;        /* steps done */
    uint64_t rng;    /* the state of the corpus draws after them */
    double window;   /* train loss summed since the last evaluation */
    int in_window;   /* steps in it */
    double last_val; /* the last validation loss (NaN: none yet) */
} gpt_resume;
/* What shapes a run's numbers: recorded in the checkpoint; resume refuses
 * a checkpoint of another (naming the flag). */
typedef struct gpt_identity {
    const gpt_config *model;
    const gpt_optim *optim;
    double clip;
    int dpu, steps;
    int64_t data_n;     /* the corpus's characters */
    uint64_t data_hash; /* gpt_text_hash */
    hx_comm *comm;      /* --zero: the ranks (NULL: one process) */
    int zero;           /* their ZeRO stage: >= 1 saves the session sharded */
} gpt_identity;
uint64_t gpt_text_hash(const gpt_text *t);
/* Each prints why on failure (naming the flag and file) and returns false;
 * a failed save leaves the previous checkpoint as it was, a failed load
 * leaves s as it was (a sharded checkpoint's state is read after its
 * session: a failure there leaves s loaded, and the run ends). With
 * id->zero >= 1 both are collectives over id->comm. */
bool gpt_checkpoint_save(const char *dir, hx_session *s, const gpt_identity *id,
                         const gpt_resume *r);
bool gpt_checkpoint_load(const char *dir, hx_session *s, const gpt_identity *id, gpt_resume *r);

/* gpt_sample.c: n characters generated by the model after a newline,
 * drawn from its softmax with a generator seeded by seed; out gets n + 1
 * bytes. Runs forward only (the session's state does not change). */
hx_status gpt_sample(hx_session *s, const gpt_model *m, const gpt_config *c, const gpt_text *t,
                     int n, uint64_t seed, char *out);

/* `hetex gpt ...` */
int gpt_main(int argc, char **argv);

#endif
