/* The cuda backend's entry points in a build without CUDA (no nvcc found):
 * AUTO falls back to emu, CUDA says how to get a build with it. */
#ifndef HX_HAVE_CUDA
#include "backend/backend_cuda.h"

#include <stdio.h>

int hx__cuda_device_count(const char **why)
{
    if (why) *why = "this hetex was built without CUDA (nvcc was not found)";
    return 0;
}

hx_status hx__backend_cuda_for(const hx_session_config *cfg, hx_trace_hooks tracing,
                               hx_backend **out, hx_cuda_choice *choice)
{
    (void)tracing;
    *out = NULL;
    if (choice)
        *choice = (hx_cuda_choice){.why = "this hetex was built without CUDA (nvcc was not found)"};
    if (cfg->accelerator == HX_ACCELERATOR_CUDA)
        return hx__error(HX_ERR_UNSUPPORTED,
                         "hx_session_create: accelerator CUDA: this hetex was built without CUDA "
                         "(nvcc was not found when it was configured); install the CUDA toolkit "
                         "and rebuild, or use HX_ACCELERATOR_AUTO or HX_ACCELERATOR_EMU");
    if (cfg->accelerator == HX_ACCELERATOR_AUTO && hx__debug("placement"))
        fprintf(stderr, "hetex: accelerator AUTO: built without CUDA: using emu\n");
    return HX_OK;
}
#endif
