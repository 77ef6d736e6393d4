/* A rank killed mid-training with sharded tables (tests/mpi/killed_rank.sh
 * runs it as it runs mpi_killed.c): the model is a sharded table looked up
 * and trained data-parallel; the last rank SIGKILLs itself before step 2,
 * and every other rank's step fails within the table's communicator
 * timeout (2 s, from the communicator it was created over) with
 * HX_ERR_COMM naming the dead rank, at the first exchange that needs it.
 * Each survivor prints "hx-killed: rank R: <status> after <steps> steps:
 * <message>" and exits at once (0 when the failure is that one). */
#include "hetex.h"
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
    enum { B = 4, D = 4 };
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "users";
    ec.rows = 100;
    ec.dim = D;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.comm = c;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    hx_embedding_table *t = NULL;
    hx_graph *g = hx_graph_create();
    int64_t b = B, xs[2] = {B, D};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &b);
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.comm = c;
    hx_session *s = NULL;
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    if (hx_embedding_table_create(&ec, &t) ||
        hx_graph_backward(g, hx_reduce_mean(g, hx_mul(g, hx_embedding_lookup(g, t, ids), x), 0, NULL, false)) ||
        hx_graph_apply_optimizer(g, NULL, &sgd) || hx_session_create(g, &cfg, &s)) {
        fprintf(stderr, "rank %d: %s\n", rank, hx_last_error());
        return 1;
    }
    int64_t idv[B];
    float xv[B * D];
    test_rng r = test_rng_make(11 + (uint64_t)rank);
    hx_status st = HX_OK;
    for (int step = 0; step < 5 && st == HX_OK; step++) {
        if (step == 2 && rank == size - 1) raise(SIGKILL);
        for (int i = 0; i < B; i++) idv[i] = (int64_t)(test_rng_u64(&r) % 100);
        test_fill_uniform(&r, xv, B * D, -1, 1);
        hx_feed f[2] = {{NULL, ids, idv, sizeof idv}, {NULL, x, xv, sizeof xv}};
        st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
    }
    char dead[32];
    snprintf(dead, sizeof dead, "rank(s) %d ", size - 1);
    bool ok = st == HX_ERR_COMM && strstr(hx_last_error(), dead) && strstr(hx_last_error(), "timed out") &&
              strstr(hx_last_error(), "users") && hx_session_step(s) == 2;
    printf("hx-killed: rank %d: %s after %lld steps: %s\n", rank, hx_status_name(st),
           (long long)hx_session_step(s), hx_last_error());
    fflush(stdout);
    _exit(ok ? 0 : 1);
}
