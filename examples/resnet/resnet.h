/* hetex resnet: a small residual network (ResNet-20 style: three stages of
 * basic blocks, widths w, 2w, 4w) on Fashion-MNIST, through the public API
 * only. */
#ifndef HX_EXAMPLE_RESNET_H
#define HX_EXAMPLE_RESNET_H

#include "hetex.h"

#include <stddef.h>
#include <stdint.h>

/* ---- data: IDX files (resnet_data.c) ------------------------------------------ */

enum { RESNET_SIDE = 28, RESNET_PIXELS = RESNET_SIDE * RESNET_SIDE, RESNET_CLASSES = 10 };

/* Images (n, 28, 28) u8 and labels (n) in [0, 10). */
typedef struct resnet_set {
    int64_t n;
    uint8_t *pixels, *labels;
} resnet_set;

/* Reads an IDX image file (magic 0x00000803, n x 28 x 28 u8) and its IDX
 * label file (magic 0x00000801, n u8 labels < 10). Every header number is
 * checked against the file's size and the expected shape before use; the
 * first `limit` images are read and kept (0: all). Returns 0, or -1 with msg saying
 * which file and what is wrong. */
int resnet_set_load(const char *images, const char *labels, int64_t limit, resnet_set *out,
                    char *msg, size_t msg_len);
void resnet_set_free(resnet_set *s);
/* Batch of B images in `order` from position `start` (wrapping), normalised
 * with Fashion-MNIST's mean and std into x (B, 1, 28, 28) f32, labels into
 * y; flip_seed != 0 mirrors about half of them left-right (augmentation). */
void resnet_batch(const resnet_set *s, const int64_t *order, int64_t start, int B,
                  uint64_t flip_seed, float *x, int32_t *y);

/* ---- the model (resnet_model.c) ----------------------------------------------- */

typedef struct resnet_config {
    int width;      /* channels of the first stage (16) */
    int blocks;     /* basic blocks per stage (3: ResNet-20) */
    int batch;
    hx_dtype dtype; /* activations and the parameters' copies: F32, BF16 or F16 */
} resnet_config;

typedef struct resnet_model {
    hx_tensor *images; /* input (B, 1, 28, 28) f32 */
    hx_tensor *labels; /* input (B) i32 */
    hx_tensor *logits; /* (B, 10) f32 */
    hx_tensor *loss;   /* mean cross-entropy */
    hx_tensor **weights; /* conv and linear weights: weight decay applies */
    hx_tensor **others;  /* batch-norm scales and shifts, the linear bias */
    int n_weights, n_others;
    int64_t n_params;
} resnet_model;

/* Builds the model into g; HX_OK, or an error (hx_last_error) and m empty. */
hx_status resnet_build(hx_graph *g, const resnet_config *c, resnet_model *m);
void resnet_model_free(resnet_model *m);

/* ---- training (resnet_run.c) -------------------------------------------------- */

typedef struct resnet_optim {
    double lr, momentum, weight_decay;
    int warmup; /* steps of linear warmup, then cosine decay to 0 */
} resnet_optim;

/* The learning rate's multiplier at step (0-based) of total. */
double resnet_lr_scale(const resnet_optim *o, int64_t step, int64_t total);

typedef struct resnet_run {
    hx_graph *g;
    resnet_model m;
    hx_session *s;
} resnet_run;

/* The model, its gradients, SGD with Nesterov momentum on the device (the
 * parameters live there unless the session's offload config moves them)
 * and a session. HX_OK, or an error with hx_last_error() set; r is then empty. */
hx_status resnet_run_create(const resnet_config *c, const resnet_optim *o,
                            const hx_session_config *sc, resnet_run *r);
/* The same without the session (r->s NULL): --partial-batch's model at the
 * short batch, whose session cli_partial_open makes. */
hx_status resnet_run_graph(const resnet_config *c, const resnet_optim *o, resnet_run *r);
void resnet_run_free(resnet_run *r);
/* Top-1 accuracy on the first `n` images of s (n <= s->n; the last batch is
 * padded and its padding not counted). x and y hold one batch. */
hx_status resnet_accuracy(resnet_run *r, int B, const resnet_set *s, int64_t n, float *x,
                          int32_t *y, double *acc);

/* ---- checkpoints (resnet_checkpoint.c): `--save DIR` / `--resume DIR` ------------- */

/* Where a run is, besides its session. */
typedef struct resnet_resume {
    int epoch;       /* the epoch in progress (1-based; epochs + 1: all done) */
    int64_t done;    /* its steps done */
    int64_t step;    /* steps done in all */
    double loss_sum; /* the epoch's train loss summed over its steps done */
} resnet_resume;
/* What shapes a run's numbers: recorded, and compared on resume. */
typedef struct resnet_identity {
    const resnet_config *model;
    const resnet_optim *optim;
    int epochs;
    bool flip;
    bool partial;        /* --partial-batch: the short last batch is a step of each epoch */
    uint64_t seed;
    int64_t train_n;     /* training images used */
    uint64_t train_hash; /* XXH3 of their pixels and labels */
} resnet_identity;
uint64_t resnet_set_hash(const resnet_set *s);
/* A checkpoint folder (cli/cli.h, committed as a set): the session and a
 * `state` file. Each prints why on failure (naming the flag and file) and
 * returns false; a failed save leaves the previous checkpoint as it was,
 * a failed load leaves s as it was. */
bool resnet_checkpoint_save(const char *dir, hx_session *s, const resnet_identity *id,
                            const resnet_resume *r);
bool resnet_checkpoint_load(const char *dir, hx_session *s, const resnet_identity *id,
                            resnet_resume *r);

int resnet_main(int argc, char **argv);

#endif
