/* What the fuzz targets (tests/fuzz/fuzz_*.c, libFuzzer) and their seed
 * writer (seeds.c) share: the input as a file, for the loaders that read
 * paths, and the models whose files the seeds are, so that a seed is a
 * file hetex wrote for exactly the graph or table the target loads into. */
#ifndef HX_FUZZ_COMMON_H
#define HX_FUZZ_COMMON_H

#include "hetex.h"

#include <stddef.h>
#include <stdint.h>

/* data written to a file of this process named after `what` (in $TMPDIR,
 * else /tmp); its path, valid until the next call with the same `what`.
 * Aborts when the file cannot be written: that is the harness failing,
 * not hetex. */
const char *fuzz_file(const char *what, const uint8_t *data, size_t size);

/* The session model of fuzz_session_load and fuzz_zero_load: a two-layer
 * MLP (Adam, loss scaling) on emu with one run's feeds. */
typedef struct fuzz_session_model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *x, *labels, *loss;
    float xv[4 * 6];
    int32_t lv[4];
} fuzz_session_model;

/* Builds it (aborting on a failure: the model is fixed); free with
 * fuzz_session_model_free. comm NULL: a session of one process; else data
 * parallel over comm at ZeRO stage zero_stage (3: offload_param=cpu, as
 * stage 3 needs). One training step with its feeds: its status. */
void fuzz_session_model_make(fuzz_session_model *m, hx_comm *comm, int zero_stage);
hx_status fuzz_session_model_step(fuzz_session_model *m);
void fuzz_session_model_free(fuzz_session_model *m);

/* The tables of fuzz_table_load: kind 0 a lazy f16 ROWS table with
 * LazyAdam, 1 an f32 MODULO table with FTRL, 2 a DYNAMIC table with
 * Adagrad (min_count 2, evict when full). */
enum { FUZZ_TABLE_KINDS = 3, FUZZ_TABLE_ROWS = 16, FUZZ_TABLE_DIM = 4 };
hx_embedding_table *fuzz_table_make(int kind);

/* The table of fuzz_ssd_load: FUZZ_TABLE_ROWS x FUZZ_TABLE_DIM f32 rows with
 * LazyAdam on disk at ssd_path (a row store: created when the file is
 * empty, reused when it holds one), a cache of FUZZ_SSD_CACHE_ROWS rows, so
 * that reading more rows evicts and writes back. NULL (the status in *st) when the
 * store is refused. */
enum { FUZZ_SSD_CACHE_ROWS = 4 };
hx_embedding_table *fuzz_ssd_table_make(const char *ssd_path, hx_status *st);

/* fuzz_op_costs' machine and its i-th signature (the seeds hold 0..7). */
#define FUZZ_OP_COSTS_MACHINE 0x0123456789abcdefull
static inline uint64_t fuzz_op_costs_sig(int i) { return 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1); }

#endif
