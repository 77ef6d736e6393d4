/* The backend consistency suite (tests/util/backend_suite.h) on the cuda
 * backend: every op, gradient-only op and optimizer update, in every dtype
 * the op takes, run on the GPU from NaN-poisoned arenas and compared with
 * the all-CPU run (f32 within 1e-5 relative, f16/bf16 within 1e-2,
 * integers exact). `--perf` adds one JSON line per case. */
#include "gpu_testutil.h"
#include "backend_suite.h"

static bool perf, verbose;

static int flag(int argc, char **argv, int i)
{
    if (!strcmp(argv[i], "--perf")) return perf = true, 1;
    if (!strcmp(argv[i], "--verbose")) return verbose = true, 1;
    return 0;
}

static void test_all_ops(void)
{
    bsuite_config c = bsuite_config_default(HX_ACCELERATOR_CUDA);
    c.perf = perf;
    c.verbose = verbose;
    bsuite_result r;
    int bad = bsuite_run(&c, &r);
    printf("backend_ops cuda: %d cases, %d passed, %d failed, %d skipped (%d without a cuda "
           "kernel), %d ops uncovered\n", r.cases, r.passed, r.failed, r.skipped, r.no_kernel,
           r.uncovered);
    CHECK(bad == 0, "%d failures", bad);
    CHECK(r.cases > 0 && r.passed + r.failed == r.cases, "%d cases", r.cases);
}

static const test_case cases[] = {{"all_ops", test_all_ops}};

int main(int argc, char **argv)
{
    test_options o = {.setup = gt_require_device, .flag = flag,
                      .flags_help = "  --perf       time per case\n  --verbose    a line a case\n"};
    return test_main_with(argc, argv, "gpu_backend_ops", cases, TEST_COUNT(cases), &o);
}
