/* A rank killed mid-training (tests/mpi/killed_rank.sh runs it under
 * mpirun with orte_enable_recovery, so that mpirun does not end the job
 * itself): the last rank SIGKILLs itself before step 2 of a data-parallel
 * run; every other rank's step then fails within the communicator's
 * timeout (2 s) with HX_ERR_COMM naming the dead rank. Each survivor
 * prints "hx-killed: rank R: <status>: <message>" and exits 0 when the
 * failure is that one, 1 otherwise, at once (_exit: as hx_comm_free's
 * contract says, after a failure a program ends; MPI_Finalize may wait
 * for the dead rank). The script checks the lines. No test harness: a
 * rank that dies cannot report its checks. */
#include "dist/dist.h"
#include "deep_mlp.h"
#include "mpi_world.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    int rank, size;
    hx_comm *c = mpi_world_open(2, &rank, &size);
    if (!c) return 1;
    enum { B = 4, W = 8 };
    deep_mlp m;
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.comm = c;
    hx_session *s = NULL;
    if (deep_mlp_build(B, W, 2, &m) || hx_session_create(m.g, &cfg, &s)) {
        fprintf(stderr, "rank %d: %s\n", rank, hx_last_error());
        return 1;
    }
    float x[B * W], y[B * W];
    test_rng g = test_rng_make(7 + (uint64_t)rank);
    hx_status st = HX_OK;
    for (int step = 0; step < 5 && st == HX_OK; step++) {
        if (step == 2 && rank == size - 1) raise(SIGKILL);
        test_fill_uniform(&g, x, B * W, -1, 1);
        test_fill_uniform(&g, y, B * W, -1, 1);
        hx_feed f[2] = {{NULL, m.x, x, sizeof x}, {NULL, m.y, y, sizeof y}};
        st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
    }
    char dead[32];
    snprintf(dead, sizeof dead, "rank(s) %d ", size - 1);
    bool ok = st == HX_ERR_COMM && strstr(hx_last_error(), dead) && strstr(hx_last_error(), "timed out") &&
              hx_session_step(s) == 2;
    printf("hx-killed: rank %d: %s after %lld steps: %s\n", rank, hx_status_name(st),
           (long long)hx_session_step(s), hx_last_error());
    fflush(stdout);
    _exit(ok ? 0 : 1);
}
