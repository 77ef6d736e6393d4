/* The backend consistency suite (in the spirit of ggml's test-backend-ops):
 * every op of the op table, forward ops and the ops only gradients and
 * optimizers use, built into small graphs, run on an accelerator and
 * compared with the all-CPU run of the same graph within a per-dtype
 * tolerance. The accelerator is a parameter: emu now (tests/test_backend_ops.c),
 * CUDA later (tests/gpu/ calls bsuite_run with HX_ACCELERATOR_CUDA).
 *
 * Unwritten output elements are caught by poisoning: before a checked run
 * both the session's transient arenas (host and device) and the fetch
 * buffers are filled with NaN bytes, so an element a kernel forgets to
 * write comes out NaN where the reference has a number. */
#ifndef HX_BACKEND_SUITE_H
#define HX_BACKEND_SUITE_H

#include "hetex.h"

#include <stdbool.h>
#include <stdio.h>

/* Fills the session's transient arenas (host and accelerator) with `byte`,
 * through the backend's own copy for device memory. Arenas exist once a run
 * has planned them; parameters and optimizer state are left alone. */
hx_status bsuite_poison(hx_session *s, unsigned char byte);

#endif
