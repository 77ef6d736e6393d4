/* test_backend_ops: the backend consistency suite (tests/util/backend_suite.h)
 * on the emu accelerator, at 2 threads and at 1: every op, forward and
 * gradient-only and optimizer updates, in every dtype it takes, run on the
 * device from NaN-poisoned arenas and compared with the all-CPU run. emu runs
 * the CPU kernels, so outputs must match bit for bit; FTRL (kept on the
 * host) is skipped as having no kernel.
 *
 * Flags: --perf (one JSON line per case with the time per run on emu and on
 * the CPU; cases scaled up by --scale N), --op NAME, --dtype NAME,
 * --threads N, --seconds S (perf time per case), --verbose. */
#include "hetex.h"
#include "backend_suite.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--perf] [--scale N] [--seconds S] [--op NAME] [--dtype NAME] "
                    "[--threads N] [--verbose]\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    bsuite_config c = bsuite_config_default(HX_ACCELERATOR_EMU);
    c.bitwise = true;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--perf")) c.perf = true;
        else if (!strcmp(a, "--verbose")) c.verbose = true;
        else if (!strcmp(a, "--scale") && next) c.perf_scale = atoi(argv[++i]);
        else if (!strcmp(a, "--seconds") && next) c.perf_seconds = atof(argv[++i]);
        else if (!strcmp(a, "--op") && next) c.op = argv[++i];
        else if (!strcmp(a, "--threads") && next) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--dtype") && next) {
            c.dtypes = 0;
            for (int dt = HX_DTYPE_F32; dt <= HX_DTYPE_I64; dt++)
                if (!strcmp(next, hx_dtype_name((hx_dtype)dt))) c.dtypes = 1u << dt;
            if (!c.dtypes) return usage(argv[0]);
            i++;
        } else return usage(argv[0]);
    }
    for (int t = 2; t >= 1; t--) {
        if (threads && t != threads) continue;
        c.n_threads = t;
        bsuite_result r;
        int bad = bsuite_run(&c, &r);
        printf("backend_ops emu, %d thread(s): %d cases, %d passed, %d failed, %d skipped "
               "(%d without an emu kernel), %d ops uncovered\n",
               t, r.cases, r.passed, r.failed, r.skipped, r.no_kernel, r.uncovered);
        CHECK(bad == 0, "%d failures at %d thread(s)", bad, t);
        CHECK(r.cases > 0 && r.passed + r.failed == r.cases, "%d cases, %d passed, %d failed",
              r.cases, r.passed, r.failed);
    }
    return test_finish("backend_ops");
}
