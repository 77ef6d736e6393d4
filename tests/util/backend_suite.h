/* The backend consistency suite (in the spirit of ggml's test-backend-ops):
 * every op of the op table, forward ops and the ops only gradients and
 * optimizers use, built into small graphs (tests/util/backend_cases.c) in
 * several variants and dtypes, run with every op on an accelerator and
 * compared with the all-CPU run of the same graph within a per-dtype
 * tolerance. The accelerator is a parameter: emu now
 * (tests/test_backend_ops.c), CUDA later (a test in tests/gpu/ calls
 * bsuite_run with HX_ACCELERATOR_CUDA).
 *
 * Each case runs twice per session; before the second run the session's
 * transient arenas (host and device) and the fetch buffers are filled with
 * NaN bytes, so an element a kernel forgets to write, or a value read before
 * it is written, comes out NaN (or stale) where the reference has a number.
 * Training cases (dropout, updates) compare both runs: they differ by step.
 *
 * A case whose op does not take a dtype is skipped with the builder's
 * reason (f16/bf16 are storage types on the CPU today: arithmetic is f32);
 * a case the accelerator has no kernel for is skipped ("no kernel"). After
 * the cases, every op for which the accelerator offers a kernel but no case
 * ran is reported as uncovered (a failure). An accelerator that cannot be
 * opened is one failure, not one per case.
 *
 * From a GPU test:
 *   bsuite_config c = bsuite_config_default(HX_ACCELERATOR_CUDA);
 *   bsuite_result r;
 *   CHECK(bsuite_run(&c, &r) == 0, "%d failed", r.failed);
 * (tolerances per dtype in c.tol; c.perf = true for timings; c.op = "matmul"
 * for one op's cases). */
#ifndef HX_BACKEND_SUITE_H
#define HX_BACKEND_SUITE_H

#include "hetex.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct bsuite_config {
    hx_accelerator accelerator; /* the backend under test */
    int n_threads;              /* of the accelerator's session */
    int ref_threads;            /* of the all-CPU reference (0: n_threads); with bitwise,
                                   1 vs 2 checks that kernels are thread-count deterministic */
    /* Largest error allowed per output dtype (index: hx_dtype): relative to
     * max(|reference|, 1e-3 * max|reference|); integers must match. */
    double tol[5];
    bool bitwise;       /* outputs must equal the reference bit for bit (emu) */
    const char *op;     /* run only cases of ops whose name contains this (NULL: all) */
    const char *const *except; /* NULL-terminated op names whose cases are left out (NULL: none) */
    unsigned dtypes;    /* dtypes to try (bits 1u << HX_DTYPE_*) */
    bool perf;          /* also time each case: one JSON line per case on `out` */
    int scale;          /* leading dims times this (1: the small cases; perf: 64) */
    int64_t min_elements; /* scale each case up (doubling) until its largest tensor has
                           this many elements: 32768 makes kernels split their work
                           over threads (0: off) */
    double perf_seconds;/* perf: time spent per case and session, at least */
    bool verbose;       /* a line per case and dtype on `out`, skips with their reason */
    FILE *out;          /* verbose lines and JSON (NULL: stdout) */
    uint64_t seed;      /* input data */
} bsuite_config;

/* Tolerances f32 1e-5, f16/bf16 1e-2, integers exact; 2 threads; all
 * dtypes; scale 1; no perf (perf_seconds 0.05 when turned on). */
bsuite_config bsuite_config_default(hx_accelerator acc);

typedef struct bsuite_result {
    int cases;     /* (case, variant, dtype) combinations built and run */
    int passed, failed;
    int skipped;   /* the op does not take the dtype, or no kernel */
    int no_kernel; /* of those: the accelerator has no kernel */
    int uncovered; /* ops with an accelerator kernel and no case run */
} bsuite_result;

/* Runs the suite; failures go to stderr naming op, variant, dtype and the
 * worst element. Returns the number of failures (failed + uncovered). */
int bsuite_run(const bsuite_config *c, bsuite_result *r);

/* Writes hx_session_dump_summary of s to `to` (through a temporary file, so
 * that a redirected stream is appended to, not truncated). */
void bsuite_print_summary(hx_session *s, FILE *to);

/* Fills the session's transient arenas (host and accelerator) with `byte`,
 * through the backend's own copy for device memory. Arenas exist once a run
 * has planned them; parameters and optimizer state are left alone. */
hx_status bsuite_poison(hx_session *s, unsigned char byte);

#endif
