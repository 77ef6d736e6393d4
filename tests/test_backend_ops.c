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

#include <stdlib.h>
#include <string.h>

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--accelerator emu|cuda|auto] [--perf] [--scale N] [--seconds S] "
                    "[--op NAME] [--dtype NAME] [--threads N] [--verbose]\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    bsuite_config c = bsuite_config_default(HX_ACCELERATOR_EMU);
    c.bitwise = true;
    int threads = 0, scale = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--perf")) c.perf = true;
        else if (!strcmp(a, "--verbose")) c.verbose = true;
        else if (!strcmp(a, "--scale") && next) scale = atoi(argv[++i]);
        else if (!strcmp(a, "--seconds") && next) c.perf_seconds = atof(argv[++i]);
        else if (!strcmp(a, "--op") && next) c.op = argv[++i];
        else if (!strcmp(a, "--threads") && next) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--accelerator") && next) {
            i++;
            c.accelerator = !strcmp(next, "cuda") ? HX_ACCELERATOR_CUDA
                          : !strcmp(next, "auto") ? HX_ACCELERATOR_AUTO : HX_ACCELERATOR_EMU;
            c.bitwise = c.accelerator == HX_ACCELERATOR_EMU; /* else the tolerance table */
        }
        else if (!strcmp(a, "--dtype") && next) {
            c.dtypes = 0;
            for (int dt = HX_DTYPE_F32; dt <= HX_DTYPE_I64; dt++)
                if (!strcmp(next, hx_dtype_name((hx_dtype)dt))) c.dtypes = 1u << dt;
            if (!c.dtypes) return usage(argv[0]);
            i++;
        } else return usage(argv[0]);
    }
    /* {threads, reference threads, minimum elements of a case's largest tensor} */
    static const int passes[3][3] = {{2, 2, 0}, {1, 1, 0}, {2, 1, 32768}};
    int n_passes = c.perf || threads ? 1 : 3; /* a flag picks one pass */
    for (int p = 0; p < n_passes; p++) {
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
    return test_finish("backend_ops");
}
