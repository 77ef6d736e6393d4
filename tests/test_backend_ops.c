/* test_backend_ops: the backend consistency suite (tests/util/backend_suite.h)
 * on the emu accelerator: every op, forward and gradient-only and optimizer
 * updates, in every dtype it takes, run on the device from NaN-poisoned
 * arenas and compared with the all-CPU run. emu runs the CPU kernels, so
 * outputs must match bit for bit; FTRL (kept on the host) is skipped as
 * having no kernel. Three passes: the small cases at 2 threads and at 1, and
 * the cases grown until their largest tensor holds 32768 elements (kernels
 * split their work over threads) on emu at 2 threads against the CPU at 1:
 * every kernel but GEMM must be thread-count deterministic. OpenBLAS's sgemm
 * is not: [7168,13] x [13,9] differs at 1 and 2 threads (element 10777:
 * 0.00196421146 vs 0.00196440518), so matmul sits that pass out.
 *
 * Flags: --perf (one JSON line per case with the time per run on emu and on
 * the CPU, cases scaled 64x or by --scale N), --op NAME, --dtype NAME,
 * --threads N (one pass, both sessions), --seconds S (perf time per case),
 * --verbose, --accelerator cuda|auto (by hand on a GPU machine: the
 * tolerance table instead of bitwise). */
#include "hetex.h"
#include "backend_suite.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The suite's configuration, which the flags change. */
static bsuite_config config;
static int threads, scale;

static int flag(int argc, char **argv, int i)
{
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--perf")) return config.perf = true, 1;
    if (!strcmp(a, "--verbose")) return config.verbose = true, 1;
    bool takes_value = !strcmp(a, "--scale") || !strcmp(a, "--seconds") || !strcmp(a, "--op") ||
                       !strcmp(a, "--threads") || !strcmp(a, "--accelerator") ||
                       !strcmp(a, "--dtype");
    if (!takes_value) return 0;
    if (!next) return -1;
    if (!strcmp(a, "--scale")) scale = atoi(next);
    else if (!strcmp(a, "--seconds")) config.perf_seconds = atof(next);
    else if (!strcmp(a, "--op")) config.op = next;
    else if (!strcmp(a, "--threads")) threads = atoi(next);
    else if (!strcmp(a, "--accelerator")) {
        config.accelerator = !strcmp(next, "cuda") ? HX_ACCELERATOR_CUDA
                           : !strcmp(next, "auto") ? HX_ACCELERATOR_AUTO : HX_ACCELERATOR_EMU;
        config.bitwise = config.accelerator == HX_ACCELERATOR_EMU; /* else the tolerance table */
    } else {
        config.dtypes = 0;
        for (int dt = HX_DTYPE_F32; dt <= HX_DTYPE_I64; dt++)
            if (!strcmp(next, hx_dtype_name((hx_dtype)dt))) config.dtypes = 1u << dt;
        if (!config.dtypes) return -1;
    }
    return 2;
}

/* Pass p of {threads, reference threads, minimum elements of a case's
 * largest tensor}; a flag that picks the threads, or --perf, runs pass 0
 * only. */
static void run_pass(int p)
{
    static const int passes[3][3] = {{2, 2, 0}, {1, 1, 0}, {2, 1, 32768}};
    bsuite_config c = config;
    if ((c.perf || threads) && p > 0) {
        test_skip("--perf or --threads runs one pass");
        return;
    }
    c.n_threads = threads ? threads : passes[p][0];
    c.ref_threads = threads ? threads : passes[p][1];
    c.scale = scale ? scale : c.perf ? 64 : 1;
    c.min_elements = c.perf || threads ? 0 : passes[p][2];
    static const char *const gemm[] = {"matmul", NULL};
    c.except = c.ref_threads != c.n_threads ? gemm : NULL;
    bsuite_result r;
    int bad = bsuite_run(&c, &r);
    printf("backend_ops %s, %d thread(s) vs the CPU at %d, scale %d, cases grown to %lld "
           "elements: %d cases, %d passed, %d failed, %d skipped (%d without a kernel), "
           "%d ops uncovered\n",
           c.accelerator == HX_ACCELERATOR_EMU ? "emu" : "cuda/auto", c.n_threads,
           c.ref_threads, c.scale, (long long)c.min_elements, r.cases, r.passed,
           r.failed, r.skipped,
           r.no_kernel, r.uncovered);
    CHECK(bad == 0, "%d failures in pass %d", bad, p);
    CHECK(r.cases > 0 && r.passed + r.failed == r.cases, "%d cases, %d passed, %d failed",
          r.cases, r.passed, r.failed);
}

static void two_threads(void) { run_pass(0); }
static void one_thread(void) { run_pass(1); }
static void grown_two_threads_vs_one(void) { run_pass(2); }

static const test_case cases[] = {
    {"two_threads", two_threads},
    {"one_thread", one_thread},
    {"grown_two_threads_vs_one", grown_two_threads_vs_one},
};

int main(int argc, char **argv)
{
    config = bsuite_config_default(HX_ACCELERATOR_EMU);
    config.bitwise = true;
    test_options o = {
        .flag = flag,
        .flags_help = "  --accelerator emu|cuda|auto  --perf  --scale N  --seconds S  --op NAME\n"
                      "  --dtype NAME  --threads N  --verbose   (see the comment atop "
                      "tests/test_backend_ops.c)\n",
    };
    return test_main_with(argc, argv, "backend_ops", cases, TEST_COUNT(cases), &o);
}
