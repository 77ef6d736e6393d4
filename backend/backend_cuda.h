/* The cuda backend (backend/backend_cuda.c): CUDA Runtime memory,
 * streams, events and copies, and the kernels of kernels/gpu. Built when
 * nvcc is found (HX_HAVE_CUDA); without it the functions below still
 * exist and say why there is no CUDA. */
#ifndef HX_BACKEND_CUDA_H
#define HX_BACKEND_CUDA_H

#include "backend/backend.h"

/* What hx__backend_cuda_for found: the device it opened, or why AUTO
 * did not take one (for the session's accelerator report). */
typedef struct hx_cuda_choice {
    char device[128];   /* the GPU's name ("" when none was opened) */
    size_t memory;      /* its memory in bytes */
    char why[192];      /* why cuda, or why not ("no CUDA device found: ...") */
} hx_cuda_choice;

/* The accelerator backend a session's config asks for, when it is cuda,
 * with its streams' kernels and copies timed into tracing's lanes:
 * - CUDA: the cuda backend on cfg->cuda_device, or an error saying why not
 *   (HX_ERR_UNSUPPORTED: built without CUDA, or no CUDA device; 
 *   HX_ERR_INVALID_ARGUMENT: no such device index);
 * - AUTO: the cuda backend where a device is usable, else HX_OK with *out
 *   NULL (the caller takes emu; HX_DEBUG=placement prints why);
 * - EMU, NONE: HX_OK with *out NULL.
 * *choice says what was found (choice may be NULL). */
hx_status hx__backend_cuda_for(const hx_session_config *cfg, hx_trace_hooks tracing,
                               hx_backend **out, hx_cuda_choice *choice);

/* Number of usable CUDA devices (0 without CUDA or without a device); when
 * 0 and why is not NULL, *why says why (static text). */
int hx__cuda_device_count(const char **why);

#endif
