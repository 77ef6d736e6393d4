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

/* The session model of fuzz_session_load: a two-layer MLP (Adam, loss
 * scaling) on emu with one run's feeds. */
typedef struct fuzz_session_model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *x, *labels, *loss;
    float xv[4 * 6];
    int32_t lv[4];
} fuzz_session_model;

/* Builds it (aborting on a failure: the model is fixed); free with
 * fuzz_session_model_free. One training step with its feeds: its status. */
void fuzz_session_model_make(fuzz_session_model *m);
hx_status fuzz_session_model_step(fuzz_session_model *m);
void fuzz_session_model_free(fuzz_session_model *m);

/* The tables of fuzz_table_load: kind 0 a lazy f16 ROWS table with
 * LazyAdam, 1 an f32 MODULO table with FTRL, 2 a DYNAMIC table with
 * Adagrad (min_count 2, evict when full). */
enum { FUZZ_TABLE_KINDS = 3, FUZZ_TABLE_ROWS = 16, FUZZ_TABLE_DIM = 4 };
hx_embedding_table *fuzz_table_make(int kind);

#endif
