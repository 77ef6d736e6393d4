/* hetex host embeddings: tables of 10^7..10^9 rows that live in host memory
 * and are looked up and updated sparsely while the dense model runs on the
 * device. Internal header: the graph's lookup/bag ops and its sparse
 * gradient path call these functions; users reach them through hetex.h.
 *
 * Pieces, bottom up:
 *   hx_emb_local_*     a local table: rows x dim storage (f32, f16, bf16;
 *                      rows 64-byte aligned; huge pages for large tables;
 *                      optionally a file mapped with mmap), seeded
 *                      initialisers (eager or lazily per row), f32 optimizer
 *                      state, checksummed save/load.
 *   hx_emb_backward    lookup/bag backward to a sparse gradient: unique ids
 *                      and their summed rows, never a table-sized gradient.
 *   hx_emb_idmap_*     a dynamic collisionless id -> row map (open
 *                      addressing, XXH3), with a frequency filter, expiry and
 *                      eviction; hx_emb_dynamic_create wraps it round a local
 *                      table.
 *   hx_emb_table_*     the interface every table implements (hx_emb_ops):
 *                      lookup rows, apply a sparse update, save, load. A
 *                      table sharded over processes implements the same
 *                      table of functions, so its callers do not change.
 *
 * Errors. Every call that can fail returns hx_status and, when err is not
 * NULL, writes a message to err->msg saying what failed, where (ids,
 * positions, shapes) and how to fix it. The graph copies it into
 * hx_last_error(). A failed call leaves every table, map and output it was
 * given as it was, unless stated otherwise.
 *
 * Threads. Every call that runs in parallel takes its thread count
 * (nthreads >= 1) from the caller. Lookups of one table may run at the same
 * time from several threads; an update (and a training lookup of a dynamic
 * table, which assigns rows) must not overlap anything else on the same
 * table. Results are bitwise the same at any thread count: every
 * output row and every updated table row is computed by one thread in a
 * fixed order of its inputs.
 */
#ifndef HX_EMBEDDING_H
#define HX_EMBEDDING_H

#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hetex.h"
#include "core/core.h" /* HX_TSAN */
#include "kernels/cpu/hx_kernels.h" /* hx_optim_plan */

/* ---- errors ---------------------------------------------------------------- */

#define HX_EMB_ERR_LEN 320

/* Functions compiled for AVX-512, AVX2 and the baseline, picked at load
 * time through an ifunc. Not under ThreadSanitizer, whose runtime is not up
 * yet when ifunc resolvers run (the process would crash at start), and not
 * under clang: clang 14 needs the attribute on every declaration, and its
 * clones gave wrong table updates (NaN adagrad rows in test_numerics). */
#if defined(HX_TSAN) || defined(__clang__)
#define HX_EMB_CLONES
#else
#define HX_EMB_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
typedef struct hx_emb_err {
    char msg[HX_EMB_ERR_LEN];
} hx_emb_err;

/* ---- ids --------------------------------------------------------------------
 * A table is indexed by row ids in [0, rows). Raw feature ids and strings
 * become row ids in one of two ways:
 *   fixed table:    key = XXH3(string, seed) or the raw i64 id, row = key mod
 *                   rows (the key read as unsigned 64 bits);
 *   dynamic table:  an hx_emb_idmap assigns a row to each key on first sight
 *                   (hx_emb_dynamic_create takes keys directly). */

/* keys[i] = XXH3_64bits_withSeed(strs[i], lens[i], seed) as i64. */
void hx_emb_hash_strings(const char *const *strs, const size_t *lens, int64_t n, uint64_t seed,
                         int64_t *keys);
/* rows_out[i] = (uint64_t)keys[i] % rows (rows >= 1). keys and rows_out may alias. */
void hx_emb_keys_mod(const int64_t *keys, int64_t n, int64_t rows, int64_t *rows_out);

/* ---- configuration ------------------------------------------------------------ */

typedef enum hx_emb_init_kind { HX_EMB_INIT_ZEROS, HX_EMB_INIT_UNIFORM, HX_EMB_INIT_NORMAL } hx_emb_init_kind;

/* Element (row, col) of a table starts as a pure function of (seed, row,
 * col): the same value eagerly or lazily, at any thread count. UNIFORM in
 * [a, b) from 24 random bits; NORMAL mean a, standard deviation b (Box-Muller
 * in double). f16/bf16 tables round the f32 value to nearest even. */
typedef struct hx_emb_init {
    hx_emb_init_kind kind;
    double a, b;
    uint64_t seed;
} hx_emb_init;

typedef enum hx_emb_optim_kind {
    HX_EMB_OPTIM_NONE,        /* no state; updates fail */
    HX_EMB_OPTIM_LAZY_ADAM,   /* torch.optim.SparseAdam / TF Addons LazyAdam: m, v */
    HX_EMB_OPTIM_ADAGRAD,     /* torch.optim.Adagrad, per element: sum */
    HX_EMB_OPTIM_ROW_ADAGRAD, /* Adagrad with one accumulator per row (FBGEMM's row-wise) */
    HX_EMB_OPTIM_FTRL         /* TF FTRL-proximal, lr_power -0.5: accum (n), linear (z) */
} hx_emb_optim_kind;

/* Hyper-parameters; fields a kind does not use are ignored. The formulas
 * are those of kernels/cpu/optim.h (hx_optim_lazy_adam_rows,
 * hx_optim_adagrad_rows, hx_optim_ftrl_rows), applied to the touched rows
 * only with each row's gradient summed over the batch first. Row-wise
 * Adagrad, per touched row with t = step and g the summed row:
 *   wd != 0:  g = fma((f)wd, p, g)          (per element)
 *   acc = acc + (sum_k g_k * g_k) / dim      (one f32 accumulator per row,
 *                                             sum in order of k)
 *   p = p - ((f)(lr / (1 + (t - 1) * lr_decay)) / (sqrt(acc) + (f)eps)) * g */
typedef struct hx_emb_optim {
    hx_emb_optim_kind kind;
    double lr;
    double beta1, beta2, eps, weight_decay; /* LazyAdam; eps and weight_decay also Adagrad */
    double lr_decay;                        /* Adagrad, row-wise Adagrad */
    double initial_accumulator;             /* Adagrad sum, row-wise acc, FTRL accum start */
    double l1, l2, l2_shrinkage, lr_power;  /* FTRL; lr_power must be -0.5 */
} hx_emb_optim;

/* The frameworks' defaults: LazyAdam lr 1e-3, betas (0.9, 0.999), eps 1e-8;
 * Adagrad lr 1e-2, eps 1e-10, initial accumulator 0; FTRL lr 1e-3, initial
 * accumulator 0.1, l1 = l2 = 0, lr_power -0.5. */
hx_emb_optim hx_emb_optim_default(hx_emb_optim_kind kind);

/* What an id outside [0, rows) does in a fixed table. */
typedef enum hx_emb_oob {
    HX_EMB_OOB_ERROR, /* HX_ERR_INDEX naming the id and its position; nothing written */
    HX_EMB_OOB_ZERO   /* reads as a zero row, gets no update, counted in the stats */
} hx_emb_oob;

/* Memory for a local table's params and state other than host pages: an
 * emulated device's (host-addressable: the table's own code runs on it).
 * alloc returns a block of at least `bytes` or fails with its status and
 * hx_last_error() saying why (a device's cap, with its report); `what`
 * names the block in that report. what names the table's use (kept: a
 * string that outlives the table). */
typedef struct hx_emb_mem {
    void *ctx;
    hx_status (*alloc)(void *ctx, size_t bytes, const char *what, void **out);
    void (*free)(void *ctx, void *p);
    const char *what;
} hx_emb_mem;

typedef struct hx_emb_table_config {
    int64_t rows, dim;
    hx_dtype dtype;           /* HX_DTYPE_F32, F16 or BF16 (optimizer state is f32) */
    hx_emb_init init;
    int lazy_init;            /* 1: a row is written with its initial value when first
                                 updated; until then it reads as that value */
    int huge_pages;           /* -1: for tables of 32 MiB and more; 0: never; 1: always */
    const char *backing_file; /* NULL: anonymous memory; else storage and state live in
                                 this file (created or truncated; a working store that may
                                 exceed RAM, not a checkpoint: use save/load for those) */
    hx_emb_optim optim;       /* may be set later with hx_emb_local_set_optim */
    hx_emb_oob oob;
    int nthreads;             /* for eager initialisation */
    const char *ssd_path;     /* NULL: a local table; else rows and state live in this row
                                 store file behind a host cache (ssd.h; rows are lazy) */
    size_t cache_bytes;       /* the cache's budget for rows and state (ssd_path only) */
    int cache_counter_max;    /* the cache's use counters saturate here, 1..15 (0: 15): 15
                                 is LFU with aging, 1 the second-chance clock (LRU-like) */
    int no_write_ahead;       /* 1: evictions write their dirty rows themselves (to compare) */
    int64_t device_cache_rows; /* > 0: hot rows and their state in a device cache of this
                                  many rows in front of the table (cache.h; not with
                                  ssd_path) */
    const struct hx_emb_mem *mem; /* NULL: params and state in host pages; else from this
                                     allocator (a device cache's slots; not with
                                     backing_file, lazy_init or huge_pages) */
    int64_t row_stride;       /* > 0: row r starts as row r * row_stride + row_offset of a
                                 whole table (a row-wise shard's rows); 0: as row r */
    int64_t row_offset;
} hx_emb_table_config;

/* f32, uniform(-0.05, 0.05) seed 0, eager, huge pages auto, anonymous
 * memory, no optimizer, OOB_ERROR, 1 thread. */
hx_emb_table_config hx_emb_table_config_default(int64_t rows, int64_t dim);

/* Elements between the starts of two rows: dim rounded up so that a row
 * takes a multiple of 64 bytes of `dtype`. Gradient rows (f32) use
 * hx_emb_row_stride(dim, HX_DTYPE_F32); their padding is zero. */
int64_t hx_emb_row_stride(int64_t dim, hx_dtype dtype);

/* ---- queries: lookup and bags ------------------------------------------------
 * ROWS: out (n, dim) = row ids[i] (a padding id gives a zero row).
 * SUM, MEAN, MAX: torch.nn.EmbeddingBag. Bag b holds entries [offsets[b],
 * offsets[b + 1]) (the last bag runs to n unless include_last_offset, where
 * offsets has nbags + 1 entries and ends with n); offsets[0] must be 0 and
 * offsets must not decrease. out (nbags, dim) is the sum, the mean or the
 * per-element max of the bag's rows; an empty bag gives zeros. Per-sample
 * weights (SUM only) scale each row. The padding id is skipped: it adds
 * nothing, does not count in a mean, and gets no gradient. */
typedef enum hx_emb_mode { HX_EMB_ROWS, HX_EMB_SUM, HX_EMB_MEAN, HX_EMB_MAX } hx_emb_mode;

typedef struct hx_emb_query {
    const void *ids;     /* n ids, i32 or i64 */
    hx_dtype id_dtype;   /* HX_DTYPE_I32 or HX_DTYPE_I64 */
    int64_t n;           /* < 2^32 */
    hx_emb_mode mode;
    const void *offsets; /* bags: n_offsets values of id_dtype */
    int64_t n_offsets;
    int include_last_offset;
    const float *weights; /* NULL, or n per-sample weights (SUM) */
    int has_padding;
    int64_t padding_id;
    int train;            /* dynamic tables: 1 counts keys and assigns rows */
    int64_t step;         /* dynamic tables: the step stamped on the keys seen */
    int nthreads;
} hx_emb_query;

/* A query for ids (n, i64) in ROWS mode, no padding, eval, 1 thread. */
hx_emb_query hx_emb_query_rows(const int64_t *ids, int64_t n);
/* Bags over ids (n, i64) with offsets (n_offsets, i64) in `mode`. */
hx_emb_query hx_emb_query_bags(const int64_t *ids, int64_t n, const int64_t *offsets,
                               int64_t n_offsets, hx_emb_mode mode);
/* Rows of out: n for ROWS, else the number of bags. */
int64_t hx_emb_query_out_rows(const hx_emb_query *q);

/* ---- sparse gradients ----------------------------------------------------------- */

/* The gradient of a table as n unique ids and their summed rows (f32,
 * stride hx_emb_row_stride(dim, HX_DTYPE_F32), padding zero). Buffers grow
 * and are reused across calls; zero-initialise, free with
 * hx_emb_sparse_grad_free. */
typedef struct hx_emb_sparse_grad {
    int64_t n, dim, stride;
    int64_t *ids;
    float *rows;
    int64_t cap;
} hx_emb_sparse_grad;

void hx_emb_sparse_grad_free(hx_emb_sparse_grad *g);
/* Room for n rows of dim (contents undefined), n and dim set. */
hx_status hx_emb_sparse_grad_reserve(hx_emb_sparse_grad *g, int64_t n, int64_t dim,
                                     hx_emb_err *err);

/* How the backward finds the unique ids. Both give the same rows, each
 * row summed in order of position; they differ in the order of the ids.
 * Sorting measured faster for table rows (bench_embedding, 106,496 ids of a
 * 10M-row table, one thread: 4.7 against 6.1 ms uniform, 3.7 against 4.1
 * Zipf), so AUTO sorts unless the ids span too many bits for few passes.
 * Either takes scratch of about 70 bytes per position (HASH 140). */
typedef enum hx_emb_dedup {
    HX_EMB_DEDUP_AUTO, /* SORT, or HASH when the ids span more than 40 bits */
    HX_EMB_DEDUP_SORT, /* LSD radix sort of (id, position): ids ascending */
    HX_EMB_DEDUP_HASH  /* XXH3-keyed open addressing per share of hash values:
                          ids by share, then by first position */
} hx_emb_dedup;

/* Scratch reused across calls (one per caller running at a time); every
 * function taking one also accepts NULL and then allocates its own. */
typedef struct hx_emb_workspace hx_emb_workspace;
hx_emb_workspace *hx_emb_workspace_create(void);
void hx_emb_workspace_free(hx_emb_workspace *ws);

/* What the backward of a query needs besides the query itself. */
typedef struct hx_emb_grad_input {
    const float *dout;    /* (out rows, dim): the gradient of the query's output */
    const int64_t *argmax; /* MAX: the forward's argmax (nbags, dim) */
    int64_t dim;
    hx_emb_dedup dedup;
} hx_emb_grad_input;

/* Sparse gradient of the table for query q: for every id that gets a
 * gradient (not padding; in MAX mode, winning at least one element),
 * sum over its positions j, in order of j, of
 *   ROWS  dout[j];   SUM  w_j * dout[bag(j)] (w_j = 1 without weights);
 *   MEAN  (1 / nonpadding(bag(j))) * dout[bag(j)];
 *   MAX   dout[bag(j)][k] where argmax[bag(j)][k] == j.
 * Ids are taken as given (keys, or rows of any range). */
hx_status hx_emb_backward(const hx_emb_query *q, const hx_emb_grad_input *gi,
                          hx_emb_workspace *ws, hx_emb_sparse_grad *out, hx_emb_err *err);

/* ---- the table interface (item 7: what a parameter-server table implements) ----- */

typedef struct hx_emb_table hx_emb_table;

typedef struct hx_emb_ops {
    const char *kind; /* "local", "dynamic", ... */
    /* out (hx_emb_query_out_rows(q), dim) f32; argmax (nbags, dim) in MAX mode
     * (the winning position, -1 for none), may be NULL. */
    hx_status (*lookup_rows)(hx_emb_table *t, const hx_emb_query *q, float *out,
                             int64_t *argmax, hx_emb_err *err);
    /* One optimizer step t = step >= 1 on the rows named by g (ids unique or
     * not: repeats are applied in order as separate updates). */
    hx_status (*apply_sparse_update)(hx_emb_table *t, const hx_emb_sparse_grad *g,
                                     int64_t step, int nthreads, hx_emb_err *err);
    /* hx_emb_backward and apply_sparse_update in one pass: each touched row is
     * summed into a small buffer and updated at once, so the summed gradient
     * is never written out and read back. The table is as after the two
     * calls. */
    hx_status (*backward_update)(hx_emb_table *t, const hx_emb_query *q,
                                 const hx_emb_grad_input *gi, int64_t step,
                                 hx_emb_workspace *ws, hx_emb_err *err);
    hx_status (*save)(hx_emb_table *t, const char *path, hx_emb_err *err);
    hx_status (*load)(hx_emb_table *t, const char *path, hx_emb_err *err);
    void (*free)(hx_emb_table *t);
} hx_emb_ops;

/* The head of every table implementation. */
struct hx_emb_table {
    const hx_emb_ops *ops;
    int64_t rows, dim;
};

/* Calls through the interface (free accepts NULL). */
hx_status hx_emb_table_lookup(hx_emb_table *t, const hx_emb_query *q, float *out,
                              int64_t *argmax, hx_emb_err *err);
hx_status hx_emb_table_apply(hx_emb_table *t, const hx_emb_sparse_grad *g, int64_t step,
                             int nthreads, hx_emb_err *err);
hx_status hx_emb_table_backward_update(hx_emb_table *t, const hx_emb_query *q,
                                       const hx_emb_grad_input *gi, int64_t step,
                                       hx_emb_workspace *ws, hx_emb_err *err);
/* Several queries of one table as one optimizer step (a graph that looks a
 * table up more than once): each query's sparse gradient (hx_emb_backward
 * with gis[k]), their rows summed per id in query order, then one fused
 * backward_update over them. One query: hx_emb_table_backward_update. */
hx_status hx_emb_table_backward_update_many(hx_emb_table *t, const hx_emb_query *qs,
                                            const hx_emb_grad_input *gis, int nq, int64_t step,
                                            hx_emb_workspace *ws, hx_emb_err *err);
/* Save: a header (magic, version, dtype, rows, dim, optimizer and its state,
 * initialiser) and sections of data in blocks of 1 MiB, each with an XXH3-64 checksum,
 * written to PATH.tmp.PID, flushed and renamed over path. Load: the whole
 * file is verified before anything is copied, so a truncated or corrupt file
 * (HX_ERR_CORRUPT) or one that does not fit the table (HX_ERR_SHAPE,
 * HX_ERR_INVALID_ARGUMENT) leaves the table as it was. A loaded table takes
 * the file's initialiser (for its rows not yet written). */
hx_status hx_emb_table_save(hx_emb_table *t, const char *path, hx_emb_err *err);
hx_status hx_emb_table_load(hx_emb_table *t, const char *path, hx_emb_err *err);
void hx_emb_table_free(hx_emb_table *t);

/* ---- the local table --------------------------------------------------------- */

hx_status hx_emb_local_create(const hx_emb_table_config *cfg, hx_emb_table **out,
                              hx_emb_err *err);
/* Sets the optimizer. Another kind replaces the state (freed, then
 * allocated and filled with its start values, lazily on lazy tables); the
 * same kind only changes the hyper-parameters (a learning-rate schedule). */
hx_status hx_emb_local_set_optim(hx_emb_table *t, const hx_emb_optim *optim, int nthreads,
                                 hx_emb_err *err);
/* Puts rows back to their initial value and their optimizer state to its
 * start value (on a lazy table: marks them not yet initialised). Rows
 * outside [0, rows) are skipped. */
void hx_emb_local_reset_rows(hx_emb_table *t, const int64_t *rows, int64_t n);

typedef struct hx_emb_local_stats {
    int64_t oob_ids;      /* ids looked up as zero rows under HX_EMB_OOB_ZERO */
    int64_t rows_ready;   /* lazy tables: rows initialised so far; else rows */
    size_t bytes;         /* storage and state, including padding */
    int huge_pages;       /* 1 if huge pages were requested */
} hx_emb_local_stats;
hx_status hx_emb_local_stats_get(const hx_emb_table *t, hx_emb_local_stats *s,
                                 hx_emb_err *err);

/* The local table's storage, for the code in embedding/ and for tests:
 * row r of the params is at param + r * stride elements of dtype; state
 * arrays are f32 with row stride gstride (row-wise Adagrad: one float per
 * row). ready: lazy tables, bit r set once row r holds its values. */
typedef struct hx_emb_region {
    void *ptr;    /* start of the data */
    void *map;    /* what mmap returned (NULL: none) */
    size_t len;   /* mapped length */
    size_t bytes; /* data length */
} hx_emb_region;

typedef struct hx_emb_local {
    hx_emb_table base;
    hx_dtype dtype;
    int64_t stride;        /* param row stride in elements of dtype */
    int64_t gstride;       /* f32 row stride: gradients and state */
    size_t esize;
    hx_emb_init init;
    hx_emb_oob oob;
    hx_emb_optim optim;
    int lazy;
    int huge;
    void *param;
    float *state[2];
    _Atomic uint64_t *ready;
    hx_emb_region reg[4];  /* params, state 0, state 1, ready bitmap */
    hx_emb_mem mem;        /* the config's (alloc NULL: host pages) */
    int backing_fd;        /* -1 for anonymous memory */
    char *backing_path;
    _Atomic int64_t oob_count;
    int64_t row_stride, row_offset; /* the config's */
} hx_emb_local;

/* The row of the whole table whose initial value row r of t takes. */
static inline int64_t hx_emb_local_init_of(const hx_emb_local *t, int64_t r)
{
    return t->row_stride > 0 ? r * t->row_stride + t->row_offset : r;
}

extern const hx_emb_ops hx_emb_local_ops;

/* NULL unless t is a local table. */
hx_emb_local *hx_emb_as_local(hx_emb_table *t);

/* ---- the dynamic id map -------------------------------------------------------- */

typedef enum hx_emb_full {
    HX_EMB_FULL_ERROR, /* a key that needs a row when none is free fails the call */
    HX_EMB_FULL_EVICT  /* evicts the keys seen longest ago (before this step) */
} hx_emb_full;

typedef struct hx_emb_idmap_config {
    int64_t capacity;      /* rows to hand out: [0, capacity) */
    int64_t min_count;     /* occurrences (over training calls) before a key gets a
                              row; <= 1: on first sight */
    int64_t expire_after;  /* > 0: hx_emb_idmap_expire frees keys unseen for more than
                              this many steps; 0: never */
    hx_emb_full on_full;
    uint64_t seed;         /* of the XXH3 slot hash */
} hx_emb_idmap_config;

typedef struct hx_emb_idmap hx_emb_idmap;

/* A cap on the bytes a sharded table's rank holds (hetex.h's rank_bytes):
 * used counts what is charged; a charge must fit here and in every parent
 * (a server's cap over its tables). cap 0: counted, not capped. */
typedef struct hx_emb_budget {
    size_t cap;
    _Atomic size_t used;
    struct hx_emb_budget *parent;
} hx_emb_budget;
/* Charges n bytes to b and its parents: NULL, or the first one that it
 * would take over its cap (nothing is charged then). */
hx_emb_budget *hx_emb_budget_take(hx_emb_budget *b, size_t n);
void hx_emb_budget_give(hx_emb_budget *b, size_t n);

hx_status hx_emb_idmap_create(const hx_emb_idmap_config *cfg, hx_emb_idmap **out,
                              hx_emb_err *err);
void hx_emb_idmap_free(hx_emb_idmap *m);

/* rows_out[i] = the row of keys[i], or -1 when it has none. train = 1:
 * counts each key's occurrences, gives a row to every key of the call whose
 * count reaches min_count (rows freed by expiry or eviction first, in the
 * order freed, then unused rows in ascending order; keys in order of first
 * position), and stamps every key with `step`. The rows given out are listed
 * in fresh[0 .. *n_fresh) (at most n; fresh may be NULL when train = 0): the
 * table must reset them (hx_emb_local_reset_rows) before use. On failure
 * (HX_ERR_OUT_OF_MEMORY when full under HX_EMB_FULL_ERROR) the map is as
 * before the call. train = 0 changes nothing. Keys may be any i64. */
hx_status hx_emb_idmap_map(hx_emb_idmap *m, const int64_t *keys, int64_t n, int train,
                           int64_t step, int64_t *rows_out, int64_t *fresh, int64_t *n_fresh,
                           hx_emb_err *err);
/* Puts m's bytes under budget b from now on (NULL: none): its free-row
 * queue is sized for every row at once, its undo log is freed after each
 * call, and its slots grow only as b allows. A training call whose new
 * keys need more slots than b allows first forgets the counting (pending)
 * keys seen longest ago (they hold no row: a frequency filter's
 * candidates, whose counts start again), then, under HX_EMB_FULL_EVICT,
 * evicts the keys with a row seen longest ago (before this step), never a
 * key of the call; when that is not enough the call fails with
 * HX_ERR_OUT_OF_MEMORY naming the keys, the bytes and the cap, and the map
 * is as before it. Fails (HX_ERR_OUT_OF_MEMORY) when m's bytes do not fit
 * b; m is then not under b. */
hx_status hx_emb_idmap_set_budget(hx_emb_idmap *m, hx_emb_budget *b, hx_emb_err *err);
/* Whether m can take the place of old under old's budget (sizes m's queue
 * as set_budget does; HX_ERR_OUT_OF_MEMORY naming the bytes and the cap
 * when not); then hx_emb_idmap_replace moves old's charge to m. */
hx_status hx_emb_idmap_fits(hx_emb_idmap *m, const hx_emb_idmap *old, hx_emb_err *err);
void hx_emb_idmap_replace(hx_emb_idmap *m, hx_emb_idmap *old);
/* Forgets every key last seen before step - expire_after (and counting
 * keys without a row likewise); their rows become free. Returns how many
 * keys held a row. */
int64_t hx_emb_idmap_expire(hx_emb_idmap *m, int64_t step);

typedef struct hx_emb_idmap_stats {
    int64_t keys;       /* keys holding a row */
    int64_t pending;    /* keys counted, below min_count */
    int64_t rows_free;  /* rows not held by a key */
    int64_t slots;      /* slots of the hash table */
    int64_t admitted, evicted, expired, filtered; /* totals; filtered: occurrences given no row */
} hx_emb_idmap_stats;
void hx_emb_idmap_stats_get(const hx_emb_idmap *m, hx_emb_idmap_stats *s);
/* The bytes the map has allocated now (itself, its slots, free queue and
 * undo log); it grows as keys arrive (up to its budget's cap). */
size_t hx_emb_idmap_bytes(const hx_emb_idmap *m);

/* The map as i64 words, for save files: [next_row, n_free, free rows...,
 * n_entries, (key, row, count, last_seen) per entry]. size returns the
 * number of words; write fills `words` (size of them). */
int64_t hx_emb_idmap_serial_size(const hx_emb_idmap *m);
void hx_emb_idmap_serial_write(const hx_emb_idmap *m, int64_t *words);
/* A new map with cfg from serialised words; HX_ERR_CORRUPT if they do not
 * describe a valid map of cfg->capacity rows. */
hx_status hx_emb_idmap_serial_read(const hx_emb_idmap_config *cfg, const int64_t *words,
                                   int64_t nwords, hx_emb_idmap **out, hx_emb_err *err);

/* ---- the dynamic table ------------------------------------------------------------
 * A local table of cfg->rows rows (= the map's capacity) behind an id map:
 * its queries and sparse gradients carry keys, not rows. A training lookup
 * (q->train = 1) admits keys as the map says and resets the rows it hands
 * out; a key without a row reads as a zero row (it counts in a mean), and
 * its gradient is dropped. Save/load include the map. */
hx_status hx_emb_dynamic_create(const hx_emb_table_config *cfg,
                                const hx_emb_idmap_config *mcfg, hx_emb_table **out,
                                hx_emb_err *err);
/* The parts of a dynamic table (NULL unless t is one). */
hx_emb_idmap *hx_emb_dynamic_idmap(hx_emb_table *t);
hx_emb_table *hx_emb_dynamic_local(hx_emb_table *t);
/* A map of t's configuration from serialised words (hx_emb_idmap_serial_*),
 * and the map that replaces t's (the old one freed): a checkpoint's keys
 * moved to the table that now holds them (embedding/shard_rekey.c). */
hx_status hx_emb_dynamic_map_from(hx_emb_table *t, const int64_t *words, int64_t n, hx_emb_idmap **out,
                                  hx_emb_err *err);
void hx_emb_dynamic_set_map(hx_emb_table *t, hx_emb_idmap *m);

/* ---- shared inside embedding/ --------------------------------------------------------- */

/* "f32", "f16", ... (embedding/ does not call into graph/, where
 * hx_dtype_name lives). */
const char *hx_emb_dtype_name(hx_dtype dt);

/* Writes "fmt..." to err (if any) and returns st. */
hx_status hx_emb_fail(hx_emb_err *err, hx_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The initial value of row r (dim floats; dst has room for `stride`
 * floats, padding set to zero). */
void hx_emb_init_row(const hx_emb_init *in, int64_t r, int64_t dim, int64_t stride, float *dst);
/* HX_ERR_INVALID_ARGUMENT unless in is a valid initialiser (a known kind,
 * uniform a <= b, normal std b >= 0): a table's config and a loaded file's
 * header pass the same check. who starts the message. */
hx_status hx_emb_init_check(const hx_emb_init *in, const char *who, hx_emb_err *err);

/* Row r of t as one record, as stored (no lazy initial values): its params
 * (dim elements of the storage dtype), then its first ns optimizer state
 * arrays (one float each when rowwise, else dim). pack writes the record
 * to rec, unpack stores it back. The row caches move rows this way. */
void hx_emb_local_pack_row(const hx_emb_local *t, int64_t r, int ns, bool rowwise, char *rec);
void hx_emb_local_unpack_row(hx_emb_local *t, int64_t r, int ns, bool rowwise, const char *rec);

/* Reads a table row as f32 into dst (dim floats): storage, or the initial
 * value of a lazy row not yet written (dst then needs gstride floats). */
void hx_emb_local_read_row(const hx_emb_local *t, int64_t r, float *dst);
/* State array k (0 <= k < hx_emb_optim_nstate) of row r as f32 into dst
 * (dim floats; one for row-wise Adagrad): as stored, or its start value for
 * a lazy row not yet written and for r = -1 (a dynamic key without a row). */
void hx_emb_local_read_state(const hx_emb_local *t, int k, int64_t r, float *dst);
/* Whether row r is a lazy row not yet written (its values are its initial
 * value and start state, not in storage). */
bool hx_emb_local_is_cold(const hx_emb_local *t, int64_t r);
/* A lazy row not yet written gets its initial value and start state and is
 * marked ready (tmp: gstride floats). Rows of one call's threads must differ. */
void hx_emb_local_materialise(hx_emb_local *t, int64_t r, float *tmp);
/* Sets row r's params from dim f32 values (rounded to the storage dtype);
 * a lazy row not yet written gets its start state first (tmp: gstride
 * floats). */
void hx_emb_local_write_row(hx_emb_local *t, int64_t r, const float *src, float *tmp);
/* Row r gets the initial value of row as_row (rounded to the storage
 * dtype) and the optimizer's start state (tmp: gstride floats): the row
 * cache puts row as_row of a larger table into slot r. */
void hx_emb_local_init_row_as(hx_emb_local *t, int64_t r, int64_t as_row, float *tmp);
/* After a load into an eager table: rows whose bit is clear in the file's
 * ready bitmap get their initial value and start state. */
void hx_emb_local_init_unready(hx_emb_local *t, const uint64_t *file_ready, int nthreads);
/* The scalars of one sparse step t = step of optimizer o, as the local
 * table's update uses them, for kernels that apply the same update
 * elsewhere (kernels/gpu, over a device cache's rows): LazyAdam, Adagrad
 * and FTRL run plan (kernels/cpu/optim.h's row kernels' plan); row-wise
 * Adagrad (embedding.h's formula) runs clr = (f)(lr / (1 + (t - 1) *
 * lr_decay)), eps and wd as f32. */
typedef struct hx_emb_step_plan {
    hx_emb_optim_kind kind;
    hx_optim_plan plan;
    float ra_clr, ra_eps, ra_wd;
} hx_emb_step_plan;
hx_emb_step_plan hx_emb_step_plan_of(const hx_emb_optim *o, int64_t step);
/* Number of optimizer state arrays of a kind (0, 1 or 2), and whether one
 * array holds a float per row (row-wise Adagrad) instead of a row. */
int hx_emb_optim_nstate(hx_emb_optim_kind kind);
const char *hx_emb_optim_name(hx_emb_optim_kind kind);

/* Lookup on a local table with an explicit out-of-range policy and
 * counter (NULL: not counted): the local table's lookup_rows passes its own;
 * the dynamic table passes OOB_ZERO for the keys that have no row. */
hx_status hx_emb_local_lookup(hx_emb_local *t, const hx_emb_query *q, hx_emb_oob oob,
                              _Atomic int64_t *oob_count, float *out, int64_t *argmax,
                              hx_emb_err *err);
/* Fused backward and update on a local table, under the same policy:
 * positions whose id is outside [0, rows) are dropped (OOB_ZERO) or fail
 * the call before anything is written (OOB_ERROR). */
hx_status hx_emb_local_backward_update(hx_emb_local *t, const hx_emb_query *q,
                                       const hx_emb_grad_input *gi, int64_t step,
                                       hx_emb_oob oob, hx_emb_workspace *ws, hx_emb_err *err);
/* apply_sparse_update with an explicit policy for ids outside [0, rows). */
hx_status hx_emb_local_apply(hx_emb_local *t, const hx_emb_sparse_grad *g, int64_t step,
                             int nthreads, hx_emb_oob oob, hx_emb_err *err);

/* Id i of an i32 or i64 id array. */
static inline int64_t hx_emb_id_at(const void *ids, hx_dtype dt, int64_t i)
{
    return dt == HX_DTYPE_I32 ? ((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}
/* Checks the query's dtypes, sizes, offsets and weights; *nbags = out rows. */
hx_status hx_emb_query_check(const hx_emb_query *q, int64_t *nbags, hx_emb_err *err);
/* Bag bound b (0 <= b <= nbags) of a checked query: n at b = nbags. */
static inline int64_t hx_emb_bag_bound(const hx_emb_query *q, int64_t b)
{
    if (q->mode == HX_EMB_ROWS) return b;
    return b < q->n_offsets ? hx_emb_id_at(q->offsets, q->id_dtype, b) : q->n;
}
/* Checks the ids of a checked query against [0, rows) (padding excepted):
 * under OOB_ERROR the first bad one fails with HX_ERR_INDEX naming it and
 * its position; under OOB_ZERO they are added to *oob_count (if not NULL).
 * op names the caller in the message. */
hx_status hx_emb_check_ids(const hx_emb_query *q, int64_t rows, hx_emb_oob oob,
                           _Atomic int64_t *oob_count, const char *op, hx_emb_err *err);

/* Save/load of a local table with an optional extra section of i64 words
 * (the dynamic table's map). load_extra receives the verified words (NULL,
 * 0 when the file has none) before anything is copied and may refuse them. */
typedef hx_status (*hx_emb_extra_check)(void *ctx, const int64_t *words, int64_t nwords,
                                        hx_emb_err *err);
hx_status hx_emb_local_save_with(hx_emb_local *t, const char *path, const int64_t *extra,
                                 int64_t n_extra, hx_emb_err *err);
hx_status hx_emb_local_load_with(hx_emb_local *t, const char *path, hx_emb_extra_check check,
                                 void *ctx, hx_emb_err *err);

/* Grouping of the positions that get a gradient by id, the common step of
 * hx_emb_backward and the fused update. The plan, on the calling thread,
 * checks the input, finds each position's bag and factor, and buckets the
 * positions into shares: equal spans of the id range (SORT; share order is
 * ascending id order) or ranges of XXH3 hash bits (HASH). Then any thread
 * groups a share (hx_emb_group_share) with no synchronisation, so threads
 * take shares as they come free (a thread preempted on a busy machine
 * holds up one share, not half the work). Shares depend on the input only:
 * each id's row is summed by one thread in ascending position order at any
 * thread count. */
#define HX_EMB_MAX_SHARES 64

typedef struct hx_emb_hslot {
    int64_t key;
    int64_t idx; /* local unique index, -1: empty */
} hx_emb_hslot;

typedef struct hx_emb_gplan {
    const hx_emb_query *q;
    const hx_emb_grad_input *gi;
    hx_emb_dedup method; /* SORT or HASH */
    int64_t mn;          /* smallest id that may get a gradient */
    int shift;           /* SORT: the share of id is (id - mn) >> shift */
    int pb;              /* bits of a position */
    int nshares;
    int64_t m;           /* positions that get a gradient */
    int64_t bucket[HX_EMB_MAX_SHARES + 1]; /* share s: list[bucket[s] .. bucket[s + 1]) */
    int64_t tab_off[HX_EMB_MAX_SHARES + 1]; /* HASH: share s's table slots */
    uint32_t *list;      /* positions by share, ascending within one */
    uint64_t *lhash;     /* HASH: hash of list[i]'s id */
    int64_t *bag_of;     /* bag of each position */
    float *scale;        /* factor of each position (SUM, MEAN, ROWS) */
    /* scratch of the shares, indexed like list (start: + share) */
    uint64_t *ka, *kb;
    uint32_t *va, *vb;
    int64_t *uniq, *start, *ucnt;
    uint32_t *pos;
    hx_emb_hslot *tab;
    int nthreads;        /* threads worth using */
} hx_emb_gplan;

/* The groups of one share: ids uniq[0..U), positions of id u pos[start[u]
 * .. start[u + 1]) ascending. */
typedef struct hx_emb_groups {
    int64_t U;
    const int64_t *uniq;
    const int64_t *start;
    const uint32_t *pos;
    const int64_t *bag_of;
    const float *scale;
} hx_emb_groups;

/* Plans the grouping of the positions of q that get a gradient; limit > 0
 * also drops positions whose id is outside [0, limit) (the caller has
 * checked them). Memory comes from ws. */
hx_status hx_emb_group_plan(const hx_emb_query *q, const hx_emb_grad_input *gi, int64_t limit,
                            hx_emb_workspace *ws, hx_emb_gplan *p, hx_emb_err *err);
/* The groups of share s (0 <= s < p->nshares), in that share's memory. */
void hx_emb_group_share(const hx_emb_gplan *p, int s, hx_emb_groups *g);
/* dst (gstride floats, padding zero) = the summed gradient of group u. */
void hx_emb_group_sum(const hx_emb_query *q, const hx_emb_grad_input *gi,
                      const hx_emb_groups *gr, int64_t u, int64_t gstride, float *dst);

/* The workspace's grow-only buffers, by use. */
enum {
    HX_EMB_WS_BAG, HX_EMB_WS_SCALE, /* per position */
    HX_EMB_WS_SHARE,                /* per position: share and hash */
    HX_EMB_WS_GROUP,                /* grouping scratch, per position that gets a gradient */
    HX_EMB_WS_CHUNK,                /* per-thread update chunks */
    HX_EMB_WS_XIDS, HX_EMB_WS_XOFF, /* dynamic table: mapped ids and offsets */
    HX_EMB_WS_SLOTS
};
/* Buffer `slot` with room for `bytes` (its contents are kept only while
 * it does not grow), NULL if out of memory. */
void *hx_emb_ws_get(hx_emb_workspace *ws, int slot, size_t bytes);

/* Tables larger than memory: a row store with a host cache. */
#include "embedding/ssd.h"

/* Row caches: the policy they share, and the device cache of hot rows. */
#include "embedding/cache.h"

/* Tables sharded over the ranks of a communicator. */
#include "embedding/shard.h"

/* The public table object over these (hetex.h's hx_embedding_table). */
#include "embedding/table.h"

#endif
