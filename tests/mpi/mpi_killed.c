/* A rank killed mid-training (tests/mpi/killed_rank.sh runs it under
 * mpirun with orte_enable_recovery, so that mpirun does not end the job
 * itself): the last rank SIGKILLs itself before step 2 of a data-parallel
 * run; every other rank's step then fails within the communicator's
 * timeout (2 s) with HX_ERR_COMM naming the dead rank. Each survivor
 * prints "hx-killed: rank R: <status>: <message>" and exits 0 when the
 * failure is that one, 1 otherwise, at once (_exit: as hx_comm_free's
 * contract says, after a failure a program ends; MPI_Finalize may wait
 * for the dead rank). The script checks the lines. No test harness: a
 * rank that dies cannot report its checks.
 *
 * Mode "deferred": ZeRO stage 2 with the overlap (a 1 s timeout), whose
 * training run returns with the all-gathers of its updates in flight. The last rank
 * stops before starting any of step 2's (hx__dp_defer_test 3) and
 * sleeps; every other rank's step 2 succeeds, and its next call
 * (hx_session_read) fails within the timeout with HX_ERR_COMM naming the
 * all-gather, its chunk group and that rank; the session then still reads
 * (its parameters as they are) and refuses a training run with
 * HX_ERR_STATE (the communicator takes no more), the step count
 * unchanged. Each survivor prints "hx-deferred: rank R: ..." lines (the
 * read's failure, the read after, the run) and "as expected" when all
 * are so, which killed_rank.sh's deferred mode checks.
 *
 * Mode "midstep": ZeRO stage 2 with the overlap, a 1 s timeout. In step 2
 * the last rank SIGKILLs itself inside the backward, right after it has
 * posted the step's first reduce-scatter (a chunk's gradient sums, started
 * as soon as the backward completes that chunk; the parameters are in
 * chunks of their own, so the backward has more to do): this program's
 * hook on the library's hx__comm_reduce_scatter_v (linked with
 * -Wl,--wrap, cmake/hetex_mpi_tests.cmake) posts it, prints
 * "hx-midstep: rank R: SIGKILL ..." and raises the signal. Every other
 * rank's step 2 must fail within the timeout with HX_ERR_COMM naming a
 * reduce-scatter and the dead rank, the step count 2: the "hx-killed"
 * lines as above. */
#include "dist/dist.h"
#include "session/session.h"
#include "deep_mlp.h"
#include "mpi_world.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { B = 4, W = 8 };

/* Mode "midstep": armed, the next reduce-scatter this rank posts is its last act. */
static bool kill_after_reduce_scatter;

hx_status __real_hx__comm_reduce_scatter_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                           hx_dtype dt, hx_coll **out);
hx_status __wrap_hx__comm_reduce_scatter_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                           hx_dtype dt, hx_coll **out);
hx_status __wrap_hx__comm_reduce_scatter_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                           hx_dtype dt, hx_coll **out)
{
    hx_status st = __real_hx__comm_reduce_scatter_v(c, send, recv, counts, dt, out);
    if (kill_after_reduce_scatter) {
        printf("hx-midstep: rank %d: SIGKILL in step 2 after posting its first reduce-scatter (%s)\n",
               hx_comm_rank(c), hx_status_name(st));
        fflush(stdout);
        raise(SIGKILL);
    }
    return st;
}

/* Mode "deferred" (see the top): s at stage 2, trained one step. */
static int deferred(hx_session *s, const deep_mlp *m, int rank, int size)
{
    float x[B * W], y[B * W], w[W * W];
    test_rng g = test_rng_make(7 + (uint64_t)rank);
    test_fill_uniform(&g, x, B * W, -1, 1);
    test_fill_uniform(&g, y, B * W, -1, 1);
    hx_feed f[2] = {{NULL, m->x, x, sizeof x}, {NULL, m->y, y, sizeof y}};
    if (rank == size - 1) hx__dp_defer_test = 3; /* stops before its all-gathers */
    hx_status st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
    if (rank == size - 1) {
        sleep(3); /* the others' wait (1 s) ends meanwhile; then as if dead */
        _exit(st == HX_OK ? 0 : 1);
    }
    bool ok = st == HX_OK;
    printf("hx-deferred: rank %d: step 2: %s\n", rank, hx_status_name(st));
    st = hx_session_read(s, m->w[0], w, sizeof w);
    char who[32];
    snprintf(who, sizeof who, "rank(s) %d ", size - 1);
    ok = ok && st == HX_ERR_COMM && strstr(hx_last_error(), "hx_session_read: ZeRO stage 2: the all-gather of chunk group") &&
         strstr(hx_last_error(), who) && strstr(hx_last_error(), "timed out");
    printf("hx-deferred: rank %d: read: %s: %s\n", rank, hx_status_name(st), hx_last_error());
    st = hx_session_read(s, m->w[0], w, sizeof w);
    ok = ok && st == HX_OK;
    printf("hx-deferred: rank %d: read again: %s\n", rank, hx_status_name(st));
    st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
    ok = ok && st == HX_ERR_STATE && strstr(hx_last_error(), "takes no more") && hx_session_step(s) == 2;
    printf("hx-deferred: rank %d: run: %s after %lld steps: %s\n", rank, hx_status_name(st),
           (long long)hx_session_step(s), hx_last_error());
    printf("hx-deferred: rank %d: %s\n", rank, ok ? "as expected" : "NOT as expected");
    fflush(stdout);
    _exit(ok ? 0 : 1);
}

int main(int argc, char **argv)
{
    int rank, size;
    bool defer = argc > 1 && !strcmp(argv[1], "deferred"), midstep = argc > 1 && !strcmp(argv[1], "midstep");
    hx_comm *c = mpi_world_open(defer || midstep ? 1 : 2, &rank, &size);
    if (!c) return 1;
    deep_mlp m;
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.comm = c;
    cfg.zero_stage = defer || midstep ? 2 : 0;
    if (defer || midstep) cfg.offload.chunk_size = 200; /* a chunk per parameter: every rank owns some */
    hx_session *s = NULL;
    if (deep_mlp_build(B, W, 2, &m) || hx_session_create(m.g, &cfg, &s)) {
        fprintf(stderr, "rank %d: %s\n", rank, hx_last_error());
        return 1;
    }
    float x[B * W], y[B * W];
    test_rng g = test_rng_make(7 + (uint64_t)rank);
    hx_status st = HX_OK;
    for (int step = 0; step < 5 && st == HX_OK; step++) {
        if (step == 1 && defer) return deferred(s, &m, rank, size);
        if (step == 2 && rank == size - 1 && midstep) kill_after_reduce_scatter = true;
        else if (step == 2 && rank == size - 1) raise(SIGKILL);
        test_fill_uniform(&g, x, B * W, -1, 1);
        test_fill_uniform(&g, y, B * W, -1, 1);
        hx_feed f[2] = {{NULL, m.x, x, sizeof x}, {NULL, m.y, y, sizeof y}};
        st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
    }
    char dead[32];
    snprintf(dead, sizeof dead, "rank(s) %d ", size - 1);
    bool ok = st == HX_ERR_COMM && strstr(hx_last_error(), dead) && strstr(hx_last_error(), "timed out") &&
              hx_session_step(s) == 2 && (!midstep || strstr(hx_last_error(), "reduce_scatter"));
    printf("hx-killed: rank %d: %s after %lld steps: %s\n", rank, hx_status_name(st),
           (long long)hx_session_step(s), hx_last_error());
    fflush(stdout);
    _exit(ok ? 0 : 1);
}
