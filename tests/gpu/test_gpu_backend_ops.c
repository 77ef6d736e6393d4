/* The backend consistency suite (tests/util/backend_suite.h) on the cuda
 * backend: every op, gradient-only op and optimizer update, in every dtype
 * the op takes, run on the GPU from NaN-poisoned arenas and compared with
 * the all-CPU run (f32 within 1e-5 relative, f16/bf16 within 1e-2,
 * integers exact). `--perf` adds one JSON line per case. */
#include "gpu_testutil.h"
#include "backend_suite.h"

int main(int argc, char **argv)
{
    gt_require_device("gpu_backend_ops");
    bsuite_config c = bsuite_config_default(HX_ACCELERATOR_CUDA);
    c.perf = argc > 1 && !strcmp(argv[1], "--perf");
    c.verbose = argc > 1 && !strcmp(argv[1], "--verbose");
    bsuite_result r;
    int bad = bsuite_run(&c, &r);
    printf("backend_ops cuda: %d cases, %d passed, %d failed, %d skipped (%d without a cuda "
           "kernel), %d ops uncovered\n", r.cases, r.passed, r.failed, r.skipped, r.no_kernel,
           r.uncovered);
    CHECK(bad == 0, "%d failures", bad);
    CHECK(r.cases > 0 && r.passed + r.failed == r.cases, "%d cases", r.cases);
    return test_finish("gpu_backend_ops");
}
