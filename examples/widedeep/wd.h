/* Wide & deep on UCI Adult, built through the public API only: a wide
 * linear model over sparse categorical and crossed features trained with
 * FTRL on the host, a deep part of host embeddings (LazyAdam or Adagrad)
 * and numeric features feeding an MLP on the device trained with Adam;
 * their logits summed, sigmoid cross-entropy. Placement is by target
 * attributes (or, with placement AUTO, by the session's planner), so the
 * host and device branches run concurrently.
 * Used by `hetex widedeep` and example_widedeep. */
#ifndef HX_EXAMPLE_WD_H
#define HX_EXAMPLE_WD_H

#include "hetex.h"

typedef struct wd_options {
    const char *data;          /* a folder holding adult.data and adult.test */
    int epochs;
    int64_t batch;
    int threads;               /* session threads; 0: all cores */
    int reader_threads;
    uint64_t seed;
    hx_accelerator accelerator;
    size_t max_device_memory;  /* the accelerator's memory cap; 0: the session's default */
    /* Where the MLP and the loss run: DEVICE (the expert split, the
     * default), CPU (all on the host), or AUTO (every op and parameter
     * left to automatic placement: hx_session_config.auto_placement). */
    hx_target placement;
    int deep_dim;              /* embedding width per categorical column */
    int hidden[2];             /* MLP widths */
    double lr_dense;           /* Adam on the MLP */
    double lr_embedding;       /* the deep tables' optimizer */
    hx_embedding_optimizer_kind embedding_optimizer; /* LAZY_ADAM or ADAGRAD */
    double lr_wide, l1_wide, l2_wide; /* FTRL on the wide table */
    int64_t cross_buckets;     /* hash buckets per crossed column */
    const char *trace;         /* Chrome trace path or NULL */
    const char *save;          /* checkpoint folder replaced after every epoch, or NULL */
    const char *resume;        /* checkpoint folder to continue from, or NULL */
    const char *curve;         /* CSV of per-epoch metrics (and a PNG with gnuplot), or NULL */
    const char *metrics;       /* JSON lines: every step's loss, every epoch's metrics, or NULL */
    const char *tensorboard;   /* a folder for TensorBoard event files of the same, or NULL */
    const char *deep_on_disk;  /* the deep table's row store file (a table on disk), or NULL */
    size_t deep_cache_bytes;   /* its host cache */
    int64_t device_cache_rows; /* > 0: the deep table's hot rows in a device cache of this
                                  many rows (hx_embedding_config.device_cache_rows) */
    bool quiet;                /* no progress output */
    bool partial_batch;        /* train the short last batch of each epoch too */
    int shards;                /* > 0: tables sharded over that many MPI ranks (mpirun -np),
                                  the MLP data parallel; 0: one process */
    hx_comm *comm;             /* --shards, --servers: the world's communicator (wd_shards_start) */
    int servers;               /* > 0: server mode: the last `servers` ranks hold the tables,
                                  the others train (mpirun -np N: N - servers workers) */
    int staleness;             /* --servers: steps a worker may run ahead of the applied pushes */
    hx_ps *ps;                 /* --servers: the roles (wd_shards_start) */
    double progress_interval;  /* seconds between progress lines off a terminal */
    /* Criteo-schema input (13 integer, 26 categorical columns) in place of Adult: */
    const char *criteo;        /* a folder holding train.tsv and test.tsv (Criteo's TSV), or NULL */
    int64_t criteo_generate;   /* > 0: that many training rows (and a quarter as many test rows)
                                  from hx_generator into a temporary folder (wd_criteo_generate) */
    int64_t criteo_vocab;      /* the generator's ids per categorical column */
    double criteo_zipf;        /* the generator's Zipf exponent (0: uniform ids) */
    int64_t hash_buckets;      /* Criteo: deep and wide rows per categorical column */
    size_t table_bytes;        /* > 0: the per-rank cap on table memory (--shards: each rank's
                                  shards, hx_embedding_config.rank_bytes; --servers: each
                                  server's, hx_ps_config.rank_bytes) */
} wd_options;
wd_options wd_options_default(void);

/* The feature columns of Adult and their fitted statistics. */
typedef struct wd_features {
    hx_features *f;
    hx_features_shape shape;
    int n_deep;                /* id columns feeding the deep embedding table */
    int64_t deep_rows;         /* rows of the deep table */
    int64_t *deep_offsets;     /* [n_deep]: first row of each column's ids */
    int *deep_columns;         /* [n_deep]: their id columns in a feature batch */
} wd_features;
/* Defines the columns and fits them on one pass over `train`, which is
 * then rewound. */
hx_status wd_features_fit(hx_reader *train, const hx_reader_config *rc, int64_t cross_buckets,
                          wd_features *out);
/* The same for Criteo's columns (a reader of hx_reader_config_criteo):
 * the integers log1p-standardised, each categorical id hashed into
 * hash_buckets rows of the deep table and of the wide one. */
hx_status wd_features_fit_criteo(hx_reader *train, const hx_reader_config *rc, int64_t hash_buckets,
                                 wd_features *out);
void wd_features_free(wd_features *wf);

/* --criteo-generate: writes train.tsv (o->criteo_generate rows) and
 * test.tsv (a quarter as many, at least one --batch, the rows after the
 * training rows of the same seed) from hx_generator (--seed, --criteo-vocab,
 * --criteo-zipf) into a new folder under $TMPDIR (or /tmp), its path into
 * dir (every rank writes its own, the same rows); HX_OK, or an error with
 * msg. wd_criteo_remove removes them. */
hx_status wd_criteo_generate(const wd_options *o, char *dir, size_t dir_len, char *msg, size_t msg_len);
void wd_criteo_remove(const char *dir);

/* One batch as the graph feeds it, for a fixed batch size B. */
typedef struct wd_feed {
    int64_t n;                 /* real rows (<= B); rows n..B-1 repeat row 0 and are left out
                                  of metrics; a short batch trains its n rows alone */
    float *dense;              /* (B, dense_dim) */
    int64_t *deep_ids;         /* (B, n_deep) rows of the deep table */
    int64_t *wide_ids;         /* (B * n_wide) */
    int64_t *wide_offsets;     /* (B) */
    float *labels;             /* (B) */
    hx_feature_batch fb;
} wd_feed;
hx_status wd_feed_alloc(const wd_features *wf, int64_t batch, wd_feed *out);
void wd_feed_free(wd_feed *fd);
/* Transforms a reader batch (<= B rows) into fd. */
hx_status wd_feed_fill(const wd_features *wf, const hx_batch *b, int64_t batch, wd_feed *fd);

typedef struct wd_model {
    hx_graph *g;
    hx_embedding_table *deep, *wide;
    hx_tensor *dense, *deep_ids, *wide_ids, *wide_offsets, *labels;
    hx_tensor *loss;           /* mean sigmoid cross-entropy */
    hx_tensor *prob;           /* (B) predicted probabilities */
    bool borrowed;             /* the tables are another model's (a twin) */
} wd_model;
hx_status wd_model_build(const wd_options *o, const wd_features *wf, wd_model *m);
/* The same graph at another batch over the tables of model `of`, which
 * must outlive m (--partial-batch: the short last batch's model). */
hx_status wd_model_build_twin(const wd_options *o, const wd_features *wf, const wd_model *of,
                              int64_t batch, wd_model *m);
void wd_model_free(wd_model *m);

/* The feeds of one batch for m. */
enum { WD_N_FEEDS = 5 };
void wd_feeds(const wd_model *m, const wd_feed *fd, int64_t batch, const wd_features *wf,
              hx_feed feeds[WD_N_FEEDS]);

/* What one pass over an input file found. */
typedef struct wd_input {
    int64_t rows, positives, malformed;
    char malformed_text[512]; /* the malformed rows per reason and the first one; "" if none */
} wd_input;
/* Reads r once (then rewinds it): HX_OK, or HX_ERR_INVALID_ARGUMENT with a
 * message in msg when the file at path cannot train (test false: no good
 * row, fewer than `batch` unless partial) or be scored (test: no row,
 * labels of one class), or the reader's error. */
hx_status wd_input_check(hx_reader *r, const char *path, int64_t batch, bool partial, bool test,
                         wd_input *out, char *msg, size_t msg_len);

/* Metrics over scored examples. */
typedef struct wd_metrics {
    double auc, accuracy, log_loss;
    int64_t n;
} wd_metrics;
/* Exact ROC AUC (ties count one half), accuracy at 0.5 and mean log loss of
 * probabilities p for 0/1 labels y. Sorts a copy; HX_ERR_OUT_OF_MEMORY or
 * HX_OK. With only one class present the AUC is NaN. */
hx_status wd_metrics_compute(const float *p, const float *y, int64_t n, wd_metrics *out);

/* --shards, --servers: the communicator into o->comm (and --servers the
 * roles into o->ps; rank 0 and the servers keep stdout, the others print
 * nothing), and *rank (--servers: the index among the workers or servers); HX_OK without --shards. msg gets the
 * example's own errors. */
hx_status wd_shards_start(wd_options *o, int *rank, char *msg, size_t len);
void wd_shards_stop(wd_options *o);
/* The ranks that feed slices of each batch: --shards, or the workers of
 * --servers; 1 for one process. */
int wd_slices(const wd_options *o);
/* --servers on a server rank: says its role and rows, serves the workers
 * until they finish, says what it served; 0, or 1 with the error said. */
int wd_serve(wd_options *o);
/* --servers on worker 0: what it pulled and pushed over `steps` steps. */
void wd_worker_stats(const wd_options *o);
/* The feeds of slice `slice` (rows [slice * batch, (slice + 1) * batch)) of
 * fd for a model of `batch` rows. */
void wd_feeds_slice(const wd_model *m, const wd_feed *fd, int64_t batch, int slice,
                    const wd_features *wf, hx_feed feeds[WD_N_FEEDS]);

/* --save, --resume (wd_ckpt.c): a checkpoint folder of the session, both
 * tables and meta (the epochs done, --seed, --batch). save: after epoch
 * epochs_done, on every rank (--shards: collective; --servers: worker 0
 * asks the servers to save the tables; the servers do not call it); the
 * error is said on stderr. check: false after saying why when --save
 * names a folder that is not a checkpoint's (--shards, --servers: before
 * any rank writes; one process: cli_ckpt_begin checks). resume: the
 * session into s (NULL on a server) and the tables (not on a worker of
 * --servers), *epochs the epochs done; a checkpoint taken at any number
 * of ranks or servers, or (without --shards, --servers) by one process;
 * msg gets the example's own errors. */
hx_status wd_ckpt_save(const wd_options *o, hx_session *s, const wd_model *m, int epochs_done);
bool wd_ckpt_check(const wd_options *o);
hx_status wd_ckpt_resume(const wd_options *o, hx_session *s, const wd_model *m, int *epochs, char *msg,
                         size_t len);

/* `hetex widedeep ...` */
int wd_main(int argc, char **argv);

#endif
