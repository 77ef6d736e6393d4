/* The cases of the backend consistency suite (backend_suite.c runs them):
 * per op, a builder of small graphs in a few variants (shapes, broadcasts,
 * transposes, axes, ...) with the op's main data in a given dtype. */
#ifndef HX_BACKEND_CASES_H
#define HX_BACKEND_CASES_H

#include "hetex.h"
#include "testutil.h"

#include <stdbool.h>

typedef enum bs_dist {
    BS_UNIFORM,  /* (-1, 1) */
    BS_WIDE,     /* (-8, 8) */
    BS_POSITIVE, /* [0.5, 2) */
    BS_AWAY,     /* +-[0.1, 1): away from kinks at 0 */
    BS_PROB,     /* [0, 1) */
    BS_IDS       /* integers in [0, hi), every value at least once where n >= hi */
} bs_dist;

enum { BS_MAX_LEAVES = 16 };

typedef struct bs_leaf {
    hx_tensor *t;
    void *data; /* host value: fed (inputs) or written (parameters) at every session */
} bs_leaf;

typedef struct bs_ctx {
    hx_graph *g;
    test_rng rng;
    int64_t scale; /* leading dims are multiplied by it (perf mode) */
    bool perf;     /* float leaves become device-resident parameters */
    bs_leaf leaf[BS_MAX_LEAVES];
    int n_leaf;
    char variant[160]; /* shapes and attributes of this variant */
    const char *skip;  /* set by a builder that returns NULL: why the case does not apply */
} bs_ctx;

/* Builds variant v of a case with its main data in dt; returns the tensor
 * to fetch, or NULL: with c->skip set the case does not apply to dt, else a
 * hetex call failed (the op does not take dt, or a bug). */
typedef hx_tensor *(*bs_build_fn)(bs_ctx *c, hx_dtype dt, int v, int arg);

typedef struct bs_case {
    const char *op;   /* op-table name of the op under test */
    bs_build_fn build;
    int arg;          /* which op of a family, optimizer flavour */
    int n_variants;
    unsigned dtypes;  /* dtypes the op takes (bit 1u << HX_DTYPE_*) */
    bool train;       /* runs with HX_RUN_TRAIN */
} bs_case;

extern const bs_case bs_cases[];
extern const int bs_n_cases;

/* Host values of any dtype as doubles, and back (f16/bf16 round to
 * nearest even; values stay in the normal range here). */
double bs_get(const void *p, hx_dtype dt, int64_t i);
void bs_put(void *p, hx_dtype dt, int64_t i, double v);

#endif
