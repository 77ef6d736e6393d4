/* Server mode with a rank SIGKILLed mid-training (tests/mpi/ps_killed.sh
 * runs it under mpirun -np 3 with orte_enable_recovery): rank 2 serves one
 * table, ranks 0 and 1 train it (a lookup times an input, mean, SGD;
 * sessions of their own), the ps's timeout 2 s.
 *
 * `server`: the server SIGKILLs itself 1 s into serving; every worker's
 * next pull fails within the timeout with HX_ERR_COMM naming server rank
 * 2. Each worker prints "hx-ps-killed: worker W: <status> after <steps>
 * steps: <message>".
 *
 * `worker`: worker 1 SIGKILLs itself before its step 3 (after pushing
 * steps 0-2); the server notices within the timeout that step 3 waits for
 * it: hx_ps_serve fails with HX_ERR_COMM naming worker rank 1, with steps
 * 0-2 applied and worker 0's push of step 3 dropped; the server then saves
 * the table, and the save loads into a table of one process equal to the
 * server's rows. Worker 0's next pull fails with the server's error. The
 * server prints "hx-ps-killed: server: <status>, <steps> steps applied,
 * saved and loaded: <yes|no>: <message>". Each process exits 0 when what
 * it saw is that.
 *
 * `devcache` (mpirun -np 2: rank 1 serves, rank 0 trains): the worker's
 * table has a device cache of 8 rows (device_cache_rows). Steps 0-5 train
 * rows 0-3 only, 0.5 s apart: after step 0 the cache serves them and the
 * worker has nothing to fetch or store for 2.7 s, past the timeout, but
 * says it lives (at a quarter of the timeout), so the server goes on. It
 * has the servers save the table before step 6 and SIGKILLs itself
 * before step 9, dirty rows in its cache. The server notices the silence: hx_ps_serve fails with HX_ERR_COMM naming
 * worker rank 0 and its device cache; the server's save after it loads
 * into one process equal to its rows (what the worker last wrote back),
 * and differs from the worker's save (write-backs of evictions came
 * after it). */
#include "hetex.h"
#include "dist/dist.h"
#include "mpi_world.h"
#include "testutil.h"
#include "tmpdir.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { B = 4, D = 4, R = 50, STEPS = 40 };

static void *kill_later(void *arg)
{
    (void)arg;
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    raise(SIGKILL);
    return NULL;
}

static char worker_save[320]; /* devcache: the worker's save before step 6 */

static int serve(hx_ps *ps, hx_embedding_table *t, bool killed_server, bool devcache)
{
    if (killed_server) {
        pthread_t th;
        pthread_create(&th, NULL, kill_later, NULL);
    }
    hx_status st = hx_ps_serve(ps);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hx_last_error());
    hx_ps_stats ps_st;
    hx_ps_stats_get(ps, &ps_st);
    /* saveable and loadable: the save into a table of one process, equal */
    char dir[256], path[320];
    bool same = false;
    int64_t ids[R];
    float a[R * D], b[R * D];
    for (int i = 0; i < R; i++) ids[i] = i;
    if (test_make_tmpdir(dir, sizeof dir, "hx-ps-killed")) {
        snprintf(path, sizeof path, "%s/t", dir);
        hx_embedding_config ec = hx_embedding_config_default();
        ec.rows = R;
        ec.dim = D;
        ec.seed = 5;
        ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
        hx_embedding_table *lone = NULL;
        same = !hx_embedding_table_save(t, path) && !hx_embedding_table_read_rows(t, ids, R, a) &&
               !hx_embedding_table_create(&ec, &lone) && !hx_embedding_table_load(lone, path) &&
               !hx_embedding_table_read_rows(lone, ids, R, b) && !memcmp(a, b, sizeof a);
        if (same && devcache) /* later write-backs reached the servers after the worker's save */
            same = !hx_embedding_table_load(lone, worker_save) && !hx_embedding_table_read_rows(lone, ids, R, b) &&
                   memcmp(a, b, sizeof a) != 0;
        hx_embedding_table_free(lone);
    }
    printf("hx-ps-killed: server: %s, %lld steps applied, saved and loaded: %s: %s\n", hx_status_name(st),
           (long long)ps_st.steps, same ? "yes" : "no", msg);
    fflush(stdout);
    bool ok = devcache ? st == HX_ERR_COMM && strstr(msg, "worker rank 0 sent nothing for 2 s while its device "
                                                      "cache held rows") && ps_st.steps == 0 && same
                       : st == HX_ERR_COMM && strstr(msg, "worker rank 1 sent nothing for 2 s") && ps_st.steps == 3 &&
                             same;
    _exit(ok ? 0 : 1);
}

int main(int argc, char **argv)
{
    bool killed_server = argc > 1 && !strcmp(argv[1], "server");
    bool devcache = argc > 1 && !strcmp(argv[1], "devcache");
    int rank, size;
    hx_comm *c = mpi_world_open(30, &rank, &size);
    if (!c || size != (devcache ? 2 : 3)) return 1;
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = c;
    pc.timeout_s = 2;
    hx_ps *ps = NULL;
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "users";
    ec.rows = R;
    ec.dim = D;
    ec.seed = 5;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    ec.device_cache_rows = devcache ? 8 : 0;
    hx_embedding_table *t = NULL;
    char dir[256] = "";
    if (devcache && rank == 0 && test_make_tmpdir(dir, sizeof dir, "hx-ps-killed-dev"))
        snprintf(worker_save, sizeof worker_save, "%s/w", dir);
    hx_coll *q = NULL; /* the worker's path, for the server's comparison */
    if (devcache && (hx__comm_broadcast(c, worker_save, sizeof worker_save / 8, HX_DTYPE_I64, 0, &q) ||
                     hx__coll_wait(q)))
        return 1;
    if (hx_ps_create(&pc, &ps) || (ec.ps = ps, hx_embedding_table_create(&ec, &t))) {
        fprintf(stderr, "rank %d: %s\n", rank, hx_last_error());
        return 1;
    }
    if (hx_ps_is_server(ps)) return serve(ps, t, killed_server, devcache);
    int w = hx_ps_index(ps);
    hx_graph *g = hx_graph_create();
    int64_t b = B, xs[2] = {B, D};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &b), *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = HX_ACCELERATOR_NONE;
    hx_session *s = NULL;
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    if (hx_graph_backward(g, hx_reduce_mean(g, hx_mul(g, hx_embedding_lookup(g, t, ids), x), 0, NULL, false)) ||
        hx_graph_apply_optimizer(g, NULL, &sgd) || hx_session_create(g, &cfg, &s)) {
        fprintf(stderr, "worker %d: %s\n", w, hx_last_error());
        return 1;
    }
    test_rng r = test_rng_make(11 + (uint64_t)w);
    int64_t iv[B];
    float xv[B * D];
    hx_status st = HX_OK;
    for (int step = 0; step < STEPS && st == HX_OK; step++) {
        if (!killed_server && !devcache && step == 3 && w == 1) raise(SIGKILL);
        if (devcache && step == 6 && hx_embedding_table_save(t, worker_save)) break;
        if (devcache && step == 9) raise(SIGKILL); /* dirty rows in its cache */
        for (int i = 0; i < B; i++) iv[i] = (int64_t)(test_rng_u64(&r) % R);
        if (devcache && step < 6) { /* 2.7 s on rows 0-3, resident after step 0: nothing to fetch or store */
            for (int i = 0; i < B; i++) iv[i] = i;
            struct timespec ts = {0, 450 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        test_fill_uniform(&r, xv, B * D, -1, 1);
        hx_feed f[2] = {{NULL, ids, iv, sizeof iv}, {NULL, x, xv, sizeof xv}};
        st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
        struct timespec ts = {0, 50 * 1000 * 1000}; /* 40 steps: 2 s at least, past the server's kill */
        nanosleep(&ts, NULL);
    }
    const char *msg = hx_last_error();
    bool ok = st == HX_ERR_COMM &&
              (killed_server ? strstr(msg, "parameter server rank 2 (server 0 of 1) did not answer within 2 s") != NULL
                             : strstr(msg, "worker rank 1") != NULL && hx_session_step(s) == 4);
    printf("hx-ps-killed: worker %d: %s after %lld steps: %s\n", w, hx_status_name(st),
           (long long)hx_session_step(s), msg);
    fflush(stdout);
    _exit(ok ? 0 : 1);
}
