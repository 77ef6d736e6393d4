/* Server mode (hx_ps, hx_embedding_config.ps) under mpirun: the last S
 * ranks serve (S = 2 at 4 ranks, else 1), the W others are workers.
 *
 * train: each worker trains tests/mpi/shard_model.h's model (four tables,
 * one per sparse optimizer) on its B/W samples of a global batch of B,
 * synchronously (staleness 0), with the dense layers data parallel over
 * the workers; beside it, in the same run, the same model in collective
 * mode over the workers and the same model in one process on the whole
 * batch. After 20 steps the server-held rows and optimizer state equal
 * collective mode's bitwise (the servers sum each id's rows in worker
 * order, as collective mode's owners do) and agree with the one-process
 * run within 1e-6 relative, as do the dense parameters (not bitwise: the
 * workers' partial gradient sums associate differently from one
 * process's). The digest line (losses, rows, state, parameters) is
 * bitwise the same run to run. No pull was answered ahead of an applied
 * push. An id outside 'user' fed on the last worker fails its run with
 * HX_ERR_INDEX naming the id, and every server's rows stay as they were;
 * the next step trains as the others. Worker 0 then has the servers save
 * every table (a path they cannot write fails naming a server, and they
 * go on serving): each save loads into a table of one process equal,
 * bitwise, to the rows and state the worker reads from the servers. The
 * servers then save their tables themselves (per-server files and a
 * manifest) and the save loads into a table of one process equal to the
 * servers' rows.
 *
 * staleness: with staleness 2 and no data parallel session (so the
 * workers are not kept in step by the dense sums), worker 0 runs fast
 * while the others sleep each step: no pull is ever answered more than 2
 * steps ahead of the applied pushes (on the workers and on the servers),
 * and worker 0 reaches the bound (the instrument sees what it checks).
 * Worker 0's save right after its last push holds every step it pushed
 * applied (the servers wait for the slow workers' pushes of them): what
 * a read then returns.
 *
 * cap: a per-rank cap (hx_ps_config.rank_bytes) that the whole table
 * exceeds: two servers hold it, each under the cap, and the workers read
 * every row while holding none; one server refuses it, and every rank's
 * creation fails at once (in seconds) naming the server, the table, the
 * bytes and the cap.
 *
 * dynamic_cap: DYNAMIC shards under a cap on the servers (dyn_cap.h).
 *
 * cache: a worker's cache of pulled rows changes no bit of synchronous
 * training and moves fewer rows; with staleness it serves rows unasked.
 *
 * devcache: with one worker (the other ranks serve), a device cache of
 * 24 rows in front of each of the four tables (device_cache_rows: rows
 * and optimizer state owned by the worker, the servers its store) trains
 * bitwise as the same model without it, beside it in the same run, every
 * step's loss; rows and state read back from the servers equal, and so
 * are, byte for byte, the checkpoints the worker has the servers write
 * and the servers' own after serving (a step after the worker's save:
 * its rows are written back by hx_ps_finish). The
 * caches evict (rows written back while training), read the next batch
 * ahead, and move fewer rows than the pulls and pushes without them. An
 * id outside 'user' fails both models' step with HX_ERR_INDEX and leaves
 * the cache's counts as they were. For a DYNAMIC table the cache is
 * refused on every rank, naming why.
 *
 * devcache_workers: with two workers (3 ranks: one server; 4: two) and,
 * at 4 ranks, three workers and one server (where the order of each
 * row's sum over the workers shows: two gradients add alike either way), a
 * cache of DEV_HOT hot rows on each worker (the same rows on both,
 * replicated: embedding/ps_hot.c) in front of each of the four tables
 * (LazyAdam, Adagrad, row-wise Adagrad, FTRL), on skewed ids (row =
 * rows * u^3) so that rows come and go ('geo', a max bag, trained by
 * LazyAdam: its rows a worker touches with a zero gradient move too,
 * as the servers move them), the dense layers data parallel
 * over the workers: every step's loss on each worker, then every row and
 * state array read back, and the dense parameters, are bitwise those of
 * the same model without the cache beside it in the same run; a
 * checkpoint the last worker has the servers write mid-run, and the
 * servers' own after serving (worker 0's hx_ps_finish writes the cached
 * rows back, or at 3 workers its hx_embedding_table_free before it),
 * equal the uncached model's byte for byte. The caches hit,
 * admit rows from the servers and write evicted ones back. With
 * staleness the cache is refused on every rank, naming why.
 *
 * refusals: the roles' arguments; comm and ps together. */
#include "dist/dist.h"
#include "hetex_checks.h"
#include "mpi_world.h"
#include "testutil.h"
#include "tmpdir.h"
#include "hetex_run.h"
#include "shard_model.h"
#include "dyn_cap.h"
#include "embedding/ps_impl.h" /* hx_emb_hot_fail: a broken cache */

#include <sys/stat.h>
#include <time.h>

static hx_comm *world;

static hx_ps *make_ps(int staleness)
{
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = world;
    pc.servers = size >= 4 ? 2 : 1;
    pc.staleness = staleness;
    pc.timeout_s = 60;
    hx_ps *ps = NULL;
    OK(hx_ps_create(&pc, &ps));
    return ps;
}

/* A server: create the model's tables alike, serve, then save them and
 * load the save into a table of one process. */
static void serve_model(hx_ps *ps, const char *dir)
{
    hx_embedding_table *t[NT];
    for (int k = 0; k < NT; k++) t[k] = make_table(&specs[k], NULL, ps);
    OK(hx_ps_serve(ps));
    hx_ps_stats st;
    OK(hx_ps_stats_get(ps, &st));
    CHECK(st.max_staleness == 0, "server rank %d answered a pull %lld steps ahead at staleness 0", rank,
          (long long)st.max_staleness);
    CHECK(st.steps == (STEPS + 1) * NT, "server rank %d applied %lld steps of its tables, not %d", rank,
          (long long)st.steps, (STEPS + 1) * NT);
    for (int k = 0; k < NT && dir; k++) {
        char path[320];
        snprintf(path, sizeof path, "%s/%s", dir, specs[k].name);
        OK(hx_embedding_table_save(t[k], path));
        int64_t R = specs[k].rows, *ids = malloc(sizeof(int64_t) * (size_t)R);
        float *a = malloc(sizeof(float) * (size_t)(R * D)), *b = malloc(sizeof(float) * (size_t)(R * D));
        for (int64_t i = 0; i < R; i++) ids[i] = i;
        OK(hx_embedding_table_read_rows(t[k], ids, R, a)); /* collective over the servers */
        hx_embedding_table *lone = make_table(&specs[k], NULL, NULL);
        OK(hx_embedding_table_load(lone, path));
        OK(hx_embedding_table_read_rows(lone, ids, R, b));
        CHECK(!memcmp(a, b, sizeof(float) * (size_t)(R * D)), "table '%s' saved by the servers loads into one "
              "process otherwise", specs[k].name);
        OK(hx_embedding_table_free(lone));
        free(ids);
        free(a);
        free(b);
    }
    for (int k = 0; k < NT; k++) OK(hx_embedding_table_free(t[k]));
}

static void test_train(void)
{
    char dir[256] = "";
    if (rank == size - 1 && !test_make_tmpdir(dir, sizeof dir, "hx-mpi-ps")) CHECK(false, "no temporary folder");
    hx_coll *q = NULL;
    OK(hx__comm_broadcast(world, dir, sizeof dir / 8, HX_DTYPE_I64, size - 1, &q)); /* the last rank's folder */
    OK(hx__coll_wait(q));
    hx_ps *ps = make_ps(0);
    if (!ps) return;
    if (hx_ps_is_server(ps)) {
        serve_model(ps, dir);
        hx_ps_free(ps);
        return;
    }
    hx_comm *wc = hx_ps_workers(ps);
    int W = hx_comm_size(wc), w = hx_ps_index(ps);
    model pm, cm, lone;
    if (build(&pm, B / W, NULL, ps) || build(&cm, B / W, wc, NULL) || build(&lone, B, NULL, NULL)) {
        CHECK(false, "build: %s", hx_last_error());
        return;
    }
    for (int k = 0; k < NT; k++) compare_table(&pm, &lone, k, 0, "at creation");
    hx_session_config cp = config(wc), cc = config(wc), ca = config(NULL);
    hx_session *sp = test_session_with(pm.g, &cp, "server mode"), *sc = test_session_with(cm.g, &cc, "collective"),
               *sa = test_session_with(lone.g, &ca, "alone");
    batch bt;
    for (int s = 0; s < STEPS && sp && sc && sa; s++) {
        make_batch(s, &bt);
        float lp = 0, lc = 0, la = 0;
        OK(run(sp, &pm, &bt, w * (B / W), &lp));
        OK(run(sc, &cm, &bt, w * (B / W), &lc));
        OK(run(sa, &lone, &bt, 0, &la));
        CHECK(lp == lc, "step %d: server mode's loss %.9g, collective mode's %.9g", s, lp, lc);
        fold(&lp, sizeof lp);
    }
    for (int k = 0; k < NT && sp && sc && sa; k++) {
        compare_table(&pm, &cm, k, 0, "against collective mode after 20 steps");
        compare_table(&pm, &lone, k, 1e-6, "against one process after 20 steps");
    }
    if (sp && sa) compare_dense(sp, &pm, sa, &lone);
    hx_ps_stats st;
    OK(hx_ps_stats_get(ps, &st));
    CHECK(st.max_staleness == 0 && st.steps == STEPS && st.pushes == STEPS * NT && st.rows_held == 0 &&
          st.bytes_held == 0, "worker stats: staleness %lld, %lld steps, %lld pushes, %lld rows held",
          (long long)st.max_staleness, (long long)st.steps, (long long)st.pushes, (long long)st.rows_held);

    /* an id outside 'user' fed on the last worker alone: it fails there,
     * and no server's rows change */
    int64_t R = specs[0].rows, *ids = malloc(sizeof(int64_t) * (size_t)R);
    float *before = malloc(sizeof(float) * (size_t)(R * D)), *after = malloc(sizeof(float) * (size_t)(R * D));
    for (int64_t i = 0; i < R; i++) ids[i] = i;
    OK(hx_embedding_table_read_rows(pm.t[0], ids, R, before));
    make_batch(STEPS, &bt);
    int64_t good = bt.ids[0][B - 1];
    if (w == W - 1) {
        bt.ids[0][B - 1] = R + 5;
        float l;
        hx_status st2 = sp ? run(sp, &pm, &bt, w * (B / W), &l) : HX_ERR_STATE;
        const char *msg = hx_last_error();
        CHECK(st2 == HX_ERR_INDEX && strstr(msg, "id 102") && strstr(msg, "user"),
              "an id out of range ran with %s: %s", hx_status_name(st2), msg);
    }
    OK(hx_embedding_table_read_rows(pm.t[0], ids, R, after));
    CHECK(!memcmp(before, after, sizeof(float) * (size_t)(R * D)), "a failed run changed the servers' 'user'");
    bt.ids[0][B - 1] = good;
    if (sp && sc && sa) {
        float l;
        OK(run(sp, &pm, &bt, w * (B / W), &l));
        OK(run(sc, &cm, &bt, w * (B / W), &l));
        OK(run(sa, &lone, &bt, 0, &l));
        for (int k = 0; k < NT; k++) compare_table(&pm, &cm, k, 0, "a step after the failed run");
    }
    /* worker 0 has the servers save every table as it stands after its
     * pushes (a path they cannot write fails on it naming a server, and
     * they go on serving); each save loads into a table of one process
     * equal to the servers' rows and state, bitwise */
    if (w == 0 && sp) {
        hx_status bad = hx_embedding_table_save(pm.t[0], "/nonexistent/x");
        CHECK(bad == HX_ERR_IO && strstr(hx_last_error(), "server rank"), "a save the servers cannot write: %s: %s",
              hx_status_name(bad), hx_last_error());
        for (int k = 0; k < NT; k++) {
            char path[320];
            snprintf(path, sizeof path, "%s/%s-mid", dir, specs[k].name);
            OK(hx_embedding_table_save(pm.t[k], path));
            model lm;
            memset(&lm, 0, sizeof lm);
            lm.t[k] = make_table(&specs[k], NULL, NULL);
            OK(hx_embedding_table_load(lm.t[k], path));
            compare_table(&pm, &lm, k, 0, "saved by the servers at worker 0's request");
            OK(hx_embedding_table_free(lm.t[k]));
        }
    }
    free(ids);
    free(before);
    free(after);
    hx_session_free(sp);
    hx_session_free(sc);
    hx_session_free(sa);
    model_free(&pm);
    model_free(&cm);
    model_free(&lone);
    OK(hx_ps_finish(ps));
    hx_ps_free(ps);
}

enum { K = 2, SSTEPS = 12 };

static void test_staleness(void)
{
    hx_ps *ps = make_ps(K);
    if (!ps) return;
    hx_embedding_table *t = make_table(&specs[0], NULL, ps);
    if (hx_ps_is_server(ps)) {
        OK(hx_ps_serve(ps));
        hx_ps_stats st;
        OK(hx_ps_stats_get(ps, &st));
        CHECK(st.max_staleness <= K, "server rank %d answered a pull %lld steps ahead (bound %d)", rank,
              (long long)st.max_staleness, K);
        OK(hx_embedding_table_free(t));
        hx_ps_free(ps);
        return;
    }
    int w = hx_ps_index(ps), W = size - (size >= 4 ? 2 : 1);
    hx_graph *g = hx_graph_create();
    int64_t n = B, xs[2] = {B, D};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n), *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_backward(g, hx_reduce_mean(g, hx_mul(g, hx_embedding_lookup(g, t, ids), x), 0, NULL, false)));
    OK(hx_graph_apply_optimizer(g, NULL, &sgd));
    hx_session_config cfg = config(NULL);
    hx_session *s = test_session_with(g, &cfg, "staleness");
    test_rng r = test_rng_make(3 + (uint64_t)w);
    int64_t iv[B];
    float xv[B * D];
    for (int step = 0; step < SSTEPS && s; step++) {
        for (int i = 0; i < B; i++) iv[i] = (int64_t)(test_rng_u64(&r) % (uint64_t)specs[0].rows);
        test_fill_uniform(&r, xv, B * D, -1, 1);
        if (w > 0) {
            struct timespec ts = {0, 100 * 1000 * 1000}; /* worker 0 does 3 steps meanwhile, even at load 20 */
            nanosleep(&ts, NULL);
        }
        hx_feed f[2] = {{NULL, ids, iv, sizeof iv}, {NULL, x, xv, sizeof xv}};
        OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
    }
    hx_ps_stats st;
    OK(hx_ps_stats_get(ps, &st));
    CHECK(st.max_staleness <= K, "worker %d was answered %lld steps ahead of the applied pushes (bound %d)", w,
          (long long)st.max_staleness, K);
    if (w == 0 && W > 1)
        CHECK(st.max_staleness == K, "the fast worker never reached the bound (%lld of %d): the test sees nothing",
              (long long)st.max_staleness, K);
    /* the fast worker's save, right after its last push: the servers save
     * once every step it pushed is applied (the slow workers' pushes of
     * those steps too), so the save holds what a read (which waits alike)
     * then reads */
    char dir[256];
    if (w == 0 && test_make_tmpdir(dir, sizeof dir, "hx-mpi-ps-stale")) {
        char path[320];
        snprintf(path, sizeof path, "%s/user", dir);
        OK(hx_embedding_table_save(t, path));
        hx_embedding_table *lone = make_table(&specs[0], NULL, NULL);
        OK(hx_embedding_table_load(lone, path));
        int64_t R = specs[0].rows, *all = malloc(sizeof(int64_t) * (size_t)R);
        float *a = malloc(sizeof(float) * (size_t)(R * D)), *b = malloc(sizeof(float) * (size_t)(R * D));
        for (int64_t i = 0; i < R; i++) all[i] = i;
        OK(hx_embedding_table_read_rows(t, all, R, a));
        OK(hx_embedding_table_read_rows(lone, all, R, b));
        CHECK(!memcmp(a, b, sizeof(float) * (size_t)(R * D)), "worker 0's save right after its last push holds "
              "other rows than it then reads from the servers");
        OK(hx_embedding_table_free(lone));
        free(all);
        free(a);
        free(b);
        test_remove_tree(dir);
    }
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
    OK(hx_ps_finish(ps));
    hx_ps_free(ps);
}

/* A DYNAMIC table (min_count 2, expire_after 3, Adagrad) of name on ps or
 * over c: keys get rows on their servers or owners. */
static hx_embedding_table *dyn_table(const char *name, hx_comm *c, hx_ps *ps)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = name;
    ec.rows = 64;
    ec.dim = D;
    ec.ids = HX_EMBEDDING_IDS_DYNAMIC;
    ec.min_count = 2;
    ec.expire_after = 3;
    ec.seed = 7;
    ec.init = hx_init_uniform(-0.5, 0.5);
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.optimizer.initial_accumulator = 0.1;
    ec.n_threads = 1;
    ec.comm = c;
    ec.ps = ps;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    return t;
}

enum { DN = 5, DSTEPS = 8, DKEYS = 16 };

/* Worker w's keys at step s: one fed twice a step (a row at once), one fed
 * once every step (a row at its second), one fed once in all (counting,
 * no row), and at steps 0-1 one that then goes unseen (its row expires). */
static void dyn_keys(int w, int s, int64_t *k)
{
    k[0] = k[1] = 100 + w;
    k[2] = 200 + w;
    k[3] = 300 + 10 * w + s;
    k[4] = s < 2 ? 400 + w : 100 + w;
}

/* A lookup of DN keys over t (io: its ids, x and the loss, the sum of its
 * rows times x) and its session data parallel over the workers. */
static hx_session *dyn_session(hx_embedding_table *t, hx_comm *wc, hx_graph **g, hx_tensor *io[3])
{
    *g = hx_graph_create();
    int64_t n = DN, xs[2] = {DN, D};
    io[0] = hx_graph_input(*g, "ids", HX_DTYPE_I64, 1, &n);
    io[1] = hx_graph_input(*g, "x", HX_DTYPE_F32, 2, xs);
    io[2] = hx_reduce_sum(*g, hx_mul(*g, hx_embedding_lookup(*g, t, io[0]), io[1]), 0, NULL, false);
    OK(hx_graph_backward(*g, io[2]));
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(*g, NULL, &sgd));
    hx_session_config cfg = config(wc);
    return test_session_with(*g, &cfg, "dynamic");
}

/* DYNAMIC tables in server mode: each worker's keys (admitted by the
 * frequency filter, counted, expired) trained through the servers and, in
 * the same run, through a collective table over the workers. Where the
 * servers are as many as the workers (np 2: 1 and 1; np 4: 2 and 2) keys
 * land on the same parts in the same order, so every step's loss and
 * every key's row and state are bitwise collective mode's; at np 3 (2
 * workers, 1 server) the keys' rows start elsewhere, and the run checks
 * what the filter and expiry leave. Worker 0 then has the servers save
 * the table, which loads into a DYNAMIC table of one process with every
 * key's row and state as the servers hold them. */
static void test_dynamic(void)
{
    hx_ps *ps = make_ps(0);
    if (!ps) return;
    hx_embedding_table *tp = dyn_table("dynp", NULL, ps);
    if (hx_ps_is_server(ps)) {
        OK(hx_ps_serve(ps));
        OK(hx_embedding_table_free(tp));
        hx_ps_free(ps);
        return;
    }
    hx_comm *wc = hx_ps_workers(ps);
    int W = hx_comm_size(wc), w = hx_ps_index(ps), S = size - W;
    hx_embedding_table *tc = dyn_table("dync", wc, NULL);
    hx_graph *gp, *gc;
    hx_tensor *iop[3], *ioc[3];
    hx_session *sp = tp ? dyn_session(tp, wc, &gp, iop) : NULL, *sc = tc ? dyn_session(tc, wc, &gc, ioc) : NULL;
    float xv[DN * D];
    for (int i = 0; i < DN * D; i++) xv[i] = 0.25f * (float)(i % 7) - 0.75f;
    for (int s = 0; s < DSTEPS && sp && sc; s++) {
        int64_t k[DN];
        dyn_keys(w, s, k);
        float lp = 0, lc = 0;
        hx_feed fp[2] = {{NULL, iop[0], k, sizeof k}, {NULL, iop[1], xv, sizeof xv}};
        hx_feed fc[2] = {{NULL, ioc[0], k, sizeof k}, {NULL, ioc[1], xv, sizeof xv}};
        hx_fetch f1 = {NULL, iop[2], &lp, sizeof lp}, f2 = {NULL, ioc[2], &lc, sizeof lc};
        OK(hx_session_run(sp, fp, 2, &f1, 1, HX_RUN_TRAIN));
        OK(hx_session_run(sc, fc, 2, &f2, 1, HX_RUN_TRAIN));
        if (S == W) CHECK(lp == lc, "step %d: server mode's loss %.9g, collective mode's %.9g", s, lp, lc);
    }
    /* every worker's keys, and one never fed */
    int64_t keys[DKEYS * 4 + 1], n = 0;
    for (int v = 0; v < W; v++) {
        keys[n++] = 100 + v;
        keys[n++] = 200 + v;
        keys[n++] = 300 + 10 * v;
        keys[n++] = 400 + v;
    }
    keys[n++] = 999;
    float rp[(DKEYS * 4 + 1) * D], rc[(DKEYS * 4 + 1) * D], ap[(DKEYS * 4 + 1) * D], ac[(DKEYS * 4 + 1) * D];
    OK(hx_embedding_table_read_rows(tp, keys, n, rp));
    OK(hx_embedding_table_read_state(tp, 0, keys, n, ap));
    OK(hx_embedding_table_read_rows(tc, keys, n, rc));
    OK(hx_embedding_table_read_state(tc, 0, keys, n, ac));
    if (S == W) {
        CHECK(!memcmp(rp, rc, sizeof(float) * (size_t)(n * D)) && !memcmp(ap, ac, sizeof(float) * (size_t)(n * D)),
              "%d servers, %d workers: a DYNAMIC table's rows or state differ from collective mode's", S, W);
        fold(rp, sizeof(float) * (size_t)(n * D));
    }
    /* rows held: 100+v (twice a step), 200+v (every step); none: 300+10v
     * (fed once), 400+v (unseen since step 1: expired at step 6), 999 */
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        bool any = false;
        for (int c = 0; c < D; c++) any |= rp[i * D + c] != 0;
        ok &= any == (i < n - 1 && i % 4 < 2);
    }
    CHECK(ok, "server mode: keys fed twice a step or every step hold rows; keys fed once, expired or never "
          "fed hold none");
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(tp, &st));
    if (w == 0) { /* the servers' save loads into one process as they hold it */
        char dir[256];
        if (test_make_tmpdir(dir, sizeof dir, "hx-mpi-ps-dyn")) {
            char path[320];
            snprintf(path, sizeof path, "%s/dynp", dir);
            OK(hx_embedding_table_save(tp, path));
            hx_embedding_table *lone = dyn_table("dynp", NULL, NULL);
            OK(hx_embedding_table_load(lone, path));
            float r1[(DKEYS * 4 + 1) * D], a1[(DKEYS * 4 + 1) * D];
            OK(hx_embedding_table_read_rows(lone, keys, n, r1));
            OK(hx_embedding_table_read_state(lone, 0, keys, n, a1));
            CHECK(!memcmp(rp, r1, sizeof(float) * (size_t)(n * D)) && !memcmp(ap, a1, sizeof(float) * (size_t)(n * D)),
                  "the servers' save of a DYNAMIC table loads into one process otherwise");
            OK(hx_embedding_table_free(lone));
            test_remove_tree(dir);
        }
    }
    hx_session_free(sp);
    hx_session_free(sc);
    hx_graph_free(gp);
    hx_graph_free(gc);
    OK(hx_embedding_table_free(tp));
    OK(hx_embedding_table_free(tc));
    OK(hx_ps_finish(ps));
    hx_ps_free(ps);
}

/* A per-rank cap of 400 KiB and a table of 3000 x 32 f32 rows with
 * Adagrad's state (768000 bytes): at 4 ranks each of the 2 servers holds half
 * (384000 bytes, under the cap) and the workers read every row while holding
 * none; with one server the table is refused on every rank at creation
 * (the workers within seconds, not at a pull's timeout: the servers'
 * verdict comes with the creation), naming the server, the table, the
 * bytes and the cap. */
static void test_cap(void)
{
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = world;
    pc.servers = size >= 4 ? 2 : 1;
    pc.rank_bytes = 400 << 10;
    pc.timeout_s = 30;
    hx_ps *ps = NULL;
    OK(hx_ps_create(&pc, &ps));
    if (!ps) return;
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "big";
    ec.rows = 3000;
    ec.dim = 32;
    ec.n_threads = 1;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    ec.ps = ps;
    hx_embedding_table *t = NULL;
    bool server = hx_ps_is_server(ps);
    if (pc.servers == 1) {
        char want[160];
        snprintf(want, sizeof want, "server rank %d would hold 768000 bytes of tables (table 'big''s rows and "
                 "state: 768000), over the per-rank cap of 409600", size - 1);
        double t0 = hx__now();
        hx_status st = hx_embedding_table_create(&ec, &t);
        double took = hx__now() - t0;
        CHECK(st == HX_ERR_OUT_OF_MEMORY && !t && strstr(hx_last_error(), want) && strstr(hx_last_error(), "add servers"),
              "one server over the cap, rank %d: %s", rank, hx_last_error());
        CHECK(took < 10, "rank %d learnt of the refusal after %.1f s", rank, took);
    } else {
        OK(hx_embedding_table_create(&ec, &t));
    }
    if (server) {
        hx_ps_stats st;
        OK(hx_ps_stats_get(ps, &st));
        if (t)
            CHECK(st.bytes_held <= pc.rank_bytes && 2 * st.bytes_held > pc.rank_bytes && st.rows_held == 1500,
                  "server rank %d holds %zu bytes (%lld rows) under a cap of %zu", rank, st.bytes_held,
                  (long long)st.rows_held, pc.rank_bytes);
        OK(hx_ps_serve(ps));
    } else if (t) {
        int64_t *ids = malloc(sizeof(int64_t) * 3000);
        float *rows = malloc(sizeof(float) * 3000 * 32);
        for (int i = 0; i < 3000; i++) ids[i] = i;
        OK(hx_embedding_table_read_rows(t, ids, 3000, rows));
        hx_embedding_stats es;
        hx_ps_stats st;
        OK(hx_embedding_table_stats(t, &es));
        OK(hx_ps_stats_get(ps, &st));
        CHECK(es.bytes == 0 && st.bytes_held == 0 && rows[0] != 0, "a worker holds %zu bytes of the table",
              es.bytes);
        free(ids);
        free(rows);
    }
    OK(hx_embedding_table_free(t));
    if (!server) OK(hx_ps_finish(ps));
    hx_ps_free(ps);
}

/* DYNAMIC shards under a cap (tests/mpi/dyn_cap.h) on the servers: the
 * workers train, the servers hold the maps. Counting keys: without the
 * cap a server's shard grows past it; under it every server's stays under
 * it and the keys with a row train bitwise as without it. New keys past
 * the map's room: without eviction a step fails on every worker with
 * HX_ERR_OUT_OF_MEMORY naming the map, the cap and evict_when_full (the
 * servers go on serving), and every row reads as before it; with eviction
 * every step trains, the servers under the cap, and keys were evicted;
 * likewise under the server's own cap (hx_ps_config.rank_bytes), which
 * counts the map's growth in bytes_held. */
static void test_dynamic_cap(void)
{
    hx_ps *ps = make_ps(0);
    if (!ps) return;
    int S = size >= 4 ? 2 : 1;
    size_t cap = cap_bytes();
    hx_embedding_table *t[4] = {cap_table(NULL, ps, S, "filter_free", CAP_FILTER, false),
                                cap_table(NULL, ps, S, "filter", CAP_FILTER, true),
                                cap_table(NULL, ps, S, "full", CAP_ERROR, true),
                                cap_table(NULL, ps, S, "evict", CAP_EVICT, true)};
    if (hx_ps_is_server(ps)) {
        OK(hx_ps_serve(ps));
        hx_embedding_stats es[4];
        for (int i = 0; i < 4; i++) OK(hx_embedding_table_stats(t[i], &es[i]));
        CHECK(es[0].bytes > cap, "server rank %d: without the cap the counting keys took %zu bytes (the cap: %zu)",
              rank, es[0].bytes, cap);
        CHECK(es[1].bytes <= cap && es[2].bytes <= cap && es[3].bytes <= cap && es[3].evictions > 0,
              "server rank %d under the cap: %zu, %zu, %zu bytes of %zu; %lld keys evicted", rank, es[1].bytes,
              es[2].bytes, es[3].bytes, cap, (long long)es[3].evictions);
    } else {
        hx_comm *wc = hx_ps_workers(ps);
        int w = hx_ps_index(ps);
        cap_result r[4];
        cap_train(t[0], wc, CAP_FILTER, w, CAP_STEPS, &r[0]);
        cap_train(t[1], wc, CAP_FILTER, w, CAP_STEPS, &r[1]);
        CHECK(r[0].steps == CAP_STEPS && r[1].steps == CAP_STEPS && !memcmp(r[0].hot, r[1].hot, sizeof r[0].hot),
              "counting keys under the cap: %d steps (%s); the keys with a row trained as without it", r[1].steps,
              r[1].why);
        cap_train(t[2], wc, CAP_ERROR, w, CAP_STEPS, &r[2]);
        CHECK(r[2].failed == HX_ERR_OUT_OF_MEMORY && r[2].steps > 0 && strstr(r[2].why, "embedding id map") &&
                  strstr(r[2].why, "evict_when_full") && strstr(r[2].why, "cap of") && r[2].kept,
              "new keys past the map's room without eviction: step %d: %s; rows as before: %d", r[2].steps,
              r[2].why, r[2].kept);
        cap_train(t[3], wc, CAP_EVICT, w, CAP_STEPS, &r[3]);
        CHECK(r[3].steps == CAP_STEPS, "with eviction: %d steps (%s)", r[3].steps, r[3].why);
    }
    for (int i = 0; i < 4; i++) OK(hx_embedding_table_free(t[i]));
    if (!hx_ps_is_server(ps)) OK(hx_ps_finish(ps));
    hx_ps_free(ps);

    /* the server's own cap (hx_ps_config.rank_bytes) over an uncapped
     * table: the map grows within it, counted in bytes_held */
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = world;
    pc.servers = S;
    pc.rank_bytes = cap;
    OK(hx_ps_create(&pc, &ps));
    if (!ps) return;
    hx_embedding_table *e = cap_table(NULL, ps, S, "evict_server_cap", CAP_EVICT, false);
    if (hx_ps_is_server(ps)) {
        OK(hx_ps_serve(ps));
        hx_embedding_stats es;
        hx_ps_stats st;
        OK(hx_embedding_table_stats(e, &es));
        OK(hx_ps_stats_get(ps, &st));
        CHECK(es.bytes <= cap && st.bytes_held == es.bytes && es.evictions > 0, "server rank %d under its own cap: "
              "%zu bytes (%zu held) of %zu, %lld keys evicted", rank, es.bytes, st.bytes_held, cap,
              (long long)es.evictions);
    } else {
        cap_result r;
        cap_train(e, hx_ps_workers(ps), CAP_EVICT, hx_ps_index(ps), CAP_STEPS, &r);
        CHECK(r.steps == CAP_STEPS, "with eviction under the server's cap: %d steps (%s)", r.steps, r.why);
    }
    OK(hx_embedding_table_free(e));
    if (!hx_ps_is_server(ps)) OK(hx_ps_finish(ps));
    hx_ps_free(ps);
}

enum { CR = 300, CDIM = 8, CN = 24, CSTEPS = 10 };

/* Worker w's ids at step s: a few hot ids most of the time, a tail that
 * moves with the step, all below row 280; s < 0: rows 280.. (never
 * trained: evaluated only). */
static void cache_ids(int w, int s, int64_t *id)
{
    for (int i = 0; i < CN; i++)
        id[i] = s < 0 ? 280 + (i + w) % 20 : i % 3 ? (i * 7 + w) % 12 : (s * 37 + i * 11 + w * 5) % 280;
}

/* CSTEPS training steps of a ROWS table (Adagrad) on ps (cache_rows and
 * staleness as given), the loss the sum of the squared rows times x (so
 * that each step's update depends on the rows pulled); then an
 * evaluation of rows never trained, one more training step and the same
 * evaluation again. A worker returns the CSTEPS + 3 losses, the rows at
 * the end (read past the cache) and its stats. */
static void cache_run(int64_t cache_rows, int staleness, float *loss, float *rows, hx_ps_stats *st)
{
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = world;
    pc.servers = size >= 4 ? 2 : 1;
    pc.staleness = staleness;
    pc.cache_rows = cache_rows;
    hx_ps *ps = NULL;
    OK(hx_ps_create(&pc, &ps));
    if (!ps) return;
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "cached";
    ec.rows = CR;
    ec.dim = CDIM;
    ec.init = hx_init_uniform(-0.5, 0.5);
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.optimizer.lr = 0.1;
    ec.n_threads = 1;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    ec.ps = ps;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    if (hx_ps_is_server(ps)) {
        OK(hx_ps_serve(ps));
    } else if (t) {
        hx_graph *g = hx_graph_create();
        int64_t n = CN, xs[2] = {CN, CDIM};
        hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
        hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
        hx_tensor *e = hx_embedding_lookup(g, t, ids);
        hx_tensor *l = hx_reduce_sum(g, hx_mul(g, hx_mul(g, e, e), x), 0, NULL, false);
        OK(hx_graph_backward(g, l));
        hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
        OK(hx_graph_apply_optimizer(g, NULL, &sgd));
        hx_session_config cfg = config(hx_ps_workers(ps));
        hx_session *s = test_session_with(g, &cfg, "a cached server-mode table");
        float xv[CN * CDIM];
        for (int i = 0; i < CN * CDIM; i++) xv[i] = 0.125f * (float)(i % 7) - 0.25f;
        for (int k = 0; k < CSTEPS + 3 && s; k++) {
            bool eval = k == CSTEPS || k == CSTEPS + 2;
            int64_t id[CN];
            cache_ids(hx_ps_index(ps), eval ? -1 : k < CSTEPS ? k : CSTEPS, id);
            hx_feed f[2] = {{NULL, ids, id, sizeof id}, {NULL, x, xv, sizeof xv}};
            hx_fetch fl = {NULL, l, &loss[k], sizeof(float)};
            OK(hx_session_run(s, f, 2, &fl, 1, eval ? 0 : HX_RUN_TRAIN));
        }
        int64_t all[CR];
        for (int i = 0; i < CR; i++) all[i] = i;
        OK(hx_embedding_table_read_rows(t, all, CR, rows));
        OK(hx_ps_stats_get(ps, st));
        hx_session_free(s);
        hx_graph_free(g);
    }
    OK(hx_embedding_table_free(t));
    if (!hx_ps_is_server(ps)) OK(hx_ps_finish(ps));
    hx_ps_free(ps);
}

/* A worker's cache of pulled rows (hx_ps_config.cache_rows): synchronous,
 * every loss and every row at the end are bitwise those without the
 * cache; a training step's rows all changed (each worker pushes every row
 * it pulled), but the evaluated rows, never trained, are found current by
 * the servers the second time (a step was pushed between, so they are
 * asked with their versions) and fewer rows come back by just those; with
 * staleness 2 cached rows are used without asking, never more than 2
 * steps behind, and training runs. */
static void test_cache(void)
{
    static float loss[3][CSTEPS + 3], rows[3][CR * CDIM];
    hx_ps_stats st[3];
    memset(st, 0, sizeof st);
    cache_run(0, 0, loss[0], rows[0], &st[0]);
    cache_run(64, 0, loss[1], rows[1], &st[1]);
    cache_run(64, 2, loss[2], rows[2], &st[2]);
    int servers = size >= 4 ? 2 : 1;
    if (rank >= size - servers) return;
    CHECK(!memcmp(loss[0], loss[1], sizeof loss[0]) && !memcmp(rows[0], rows[1], sizeof rows[0]),
          "worker %d: with the cache the losses and rows are bitwise those without it", rank);
    CHECK(st[0].cache_current == 0 && st[0].cache_hits == 0 && st[1].cache_current > 0 &&
              st[1].rows_pulled + st[1].cache_current + st[1].cache_hits == st[0].rows_pulled,
          "worker %d: rows pulled %lld without the cache; with it %lld, %lld found current, %lld unasked", rank,
          (long long)st[0].rows_pulled, (long long)st[1].rows_pulled, (long long)st[1].cache_current,
          (long long)st[1].cache_hits);
    CHECK(st[2].cache_hits > 0 && st[2].max_staleness <= 2, "worker %d at staleness 2: %lld rows from the cache "
          "unasked, at most %lld steps behind", rank, (long long)st[2].cache_hits, (long long)st[2].max_staleness);
}

/* ---- a device cache with one worker ---------------------------------------------------- */

enum { DEV_ROWS = 24, DEV_BAD_STEP = 7 };

/* 'geo' (a max bag: a row of a bag whose maximum no element of it holds
 * gets a zero gradient) trained by LazyAdam, which moves such a row. */
static void set_lazy(hx_embedding_table *geo)
{
    hx_embedding_optimizer o = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
    o.lr = 0.05;
    OK(hx_embedding_table_set_optimizer(geo, &o));
}

/* The servers of case devcache: the two models' tables (without, then
 * with the cache: created alike), served, then saved into dir/sn and
 * dir/sc. */
static void serve_devcache(hx_ps *ps, const char *dir, int64_t cache_rows, bool lazy_geo)
{
    hx_embedding_table *t[2][NT];
    for (int m = 0; m < 2; m++) {
        model_cache_rows = m ? cache_rows : 0;
        for (int k = 0; k < NT; k++) t[m][k] = make_table(&specs[k], NULL, ps);
        if (lazy_geo) set_lazy(t[m][NT - 1]);
    }
    model_cache_rows = 0;
    OK(hx_ps_serve(ps));
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < NT; k++) {
            char path[400];
            snprintf(path, sizeof path, "%s/s%c/%s", dir, m ? 'c' : 'n', specs[k].name);
            OK(hx_embedding_table_save(t[m][k], path));
            OK(hx_embedding_table_free(t[m][k]));
        }
}

/* Every rank here (an all-reduce: none leaves before all came). */
static void barrier(void)
{
    float x = 0;
    hx_coll *q = NULL;
    OK(hx__comm_all_reduce(world, &x, &x, 1, HX_DTYPE_F32, &q));
    OK(hx__coll_wait(q));
}

/* Every worker here. */
static void barrier_workers(hx_comm *wc)
{
    float x = 0;
    hx_coll *q = NULL;
    OK(hx__comm_all_reduce(wc, &x, &x, 1, HX_DTYPE_F32, &q));
    OK(hx__coll_wait(q));
}

/* dir/<sub> for every sub, made by the last rank, its name on every rank. */
static void shared_dirs(char *dir, size_t n, const char *what, const char *const *sub, int nsub)
{
    if (rank == size - 1 && test_make_tmpdir(dir, n, what)) {
        for (int i = 0; i < nsub; i++) {
            char p[300];
            snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
            CHECK(mkdir(p, 0700) == 0, "mkdir %s", p);
        }
    } else if (rank == size - 1) {
        CHECK(false, "no temporary folder");
    }
    hx_coll *q = NULL;
    OK(hx__comm_broadcast(world, dir, (int64_t)(n / 8), HX_DTYPE_I64, size - 1, &q));
    OK(hx__coll_wait(q));
}

/* Both models' tables k saved into dir/n and dir/c. */
static void save_both(const model *pm, const model *dm, const char *dir)
{
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < NT; k++) {
            char path[400];
            snprintf(path, sizeof path, "%s/%c/%s", dir, m ? 'c' : 'n', specs[k].name);
            OK(hx_embedding_table_save(m ? dm->t[k] : pm->t[k], path));
        }
}

static int64_t rows_moved(const hx_embedding_stats *s) { return s->device_rows_in + s->device_rows_out; }

static void test_devcache(void)
{
    char dir[256] = "";
    const char *sub[4] = {"n", "c", "sn", "sc"};
    shared_dirs(dir, sizeof dir, "hx-mpi-ps-dev", sub, 4);
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = world;
    pc.servers = size - 1; /* one worker */
    hx_ps *ps = NULL;
    OK(hx_ps_create(&pc, &ps));
    if (!ps) return;
    {
        hx_embedding_config ec = hx_embedding_config_default();
        ec.name = "keys";
        ec.rows = 10;
        ec.dim = 2;
        ec.ids = HX_EMBEDDING_IDS_DYNAMIC;
        ec.ps = ps;
        ec.device_cache_rows = 4;
        hx_embedding_table *t = NULL;
        CHECK(hx_embedding_table_create(&ec, &t) == HX_ERR_UNSUPPORTED && !t && strstr(hx_last_error(), "DYNAMIC"),
              "a device cache of a DYNAMIC server-mode table: %s", hx_last_error());
    }
    if (hx_ps_is_server(ps)) {
        serve_devcache(ps, dir, DEV_ROWS, false);
        hx_ps_free(ps);
        barrier(); /* saved */
        barrier(); /* the worker has compared the files */
        if (rank == size - 1) test_remove_tree(dir);
        return;
    }
    model pm, dm;
    model_cache_rows = 0;
    int bad = build(&pm, B, NULL, ps);
    model_cache_rows = DEV_ROWS;
    bad = bad || build(&dm, B, NULL, ps);
    model_cache_rows = 0;
    if (bad) {
        CHECK(false, "build: %s", hx_last_error());
        return;
    }
    hx_session_config cp = config(NULL), cd = config(NULL);
    hx_session *sp = test_session_with(pm.g, &cp, "no cache"), *sd = test_session_with(dm.g, &cd, "device cache");
    hx_embedding_stats mid[NT];
    batch bt, next;
    make_batch(0, &next);
    for (int s = 0; s < STEPS && sp && sd; s++) {
        bt = next;
        make_batch(s + 1, &next);
        for (int k = 0; k < NT; k++) /* the next step's rows read ahead, as a data loader would */
            OK(hx_embedding_table_prefetch(dm.t[k], next.ids[k], specs[k].mode < 0 ? B : B * F));
        if (s == DEV_BAD_STEP) { /* an id outside 'user' */
            hx_embedding_stats before, after;
            OK(hx_embedding_table_stats(dm.t[0], &before));
            batch oob = bt;
            oob.ids[0][B - 1] = specs[0].rows;
            float lp, ld;
            CHECK(run(sp, &pm, &oob, 0, &lp) == HX_ERR_INDEX && run(sd, &dm, &oob, 0, &ld) == HX_ERR_INDEX &&
                      strstr(hx_last_error(), "97"),
                  "an id outside 'user' fails both runs: %s", hx_last_error());
            OK(hx_embedding_table_stats(dm.t[0], &after));
            CHECK(after.device_cache_lookups == before.device_cache_lookups &&
                      after.device_rows_in == before.device_rows_in &&
                      after.device_rows_out == before.device_rows_out,
                  "the failed step moved rows through the cache (%lld lookups, %lld in, %lld out before; %lld, %lld, "
                  "%lld after)", (long long)before.device_cache_lookups, (long long)before.device_rows_in,
                  (long long)before.device_rows_out, (long long)after.device_cache_lookups,
                  (long long)after.device_rows_in, (long long)after.device_rows_out);
        }
        float lp = 0, ld = 0;
        OK(run(sp, &pm, &bt, 0, &lp));
        OK(run(sd, &dm, &bt, 0, &ld));
        CHECK(!memcmp(&lp, &ld, sizeof lp), "step %d: loss %.9g with the device cache, %.9g without", s, ld, lp);
        fold(&ld, sizeof ld);
    }
    for (int k = 0; k < NT; k++) OK(hx_embedding_table_stats(dm.t[k], &mid[k])); /* before any flush */
    hx_ps_stats before;
    OK(hx_ps_stats_get(ps, &before));
    for (int k = 0; k < NT && sp && sd; k++) compare_table(&dm, &pm, k, 0, "after training (device cache)");
    save_both(&pm, &dm, dir);
    same_files(dir, "n", "c");
    /* what moved: rows pulled and gradient rows pushed without the cache
     * (the same ids, the same steps), rows in and out with it */
    int64_t with = 0, evicted = 0, ahead = 0, hits = 0;
    for (int k = 0; k < NT; k++) {
        with += rows_moved(&mid[k]);
        evicted += mid[k].device_rows_out;
        ahead += mid[k].device_rows_prefetched;
        hits += mid[k].device_cache_hits;
    }
    CHECK(evicted > 0 && ahead > 0 && hits > 0, "the caches wrote back %lld rows while training, read %lld ahead, "
          "hit %lld", (long long)evicted, (long long)ahead, (long long)hits);
    CHECK(with < before.rows_pulled, "rows moved with the device caches %lld, rows pulled alone without %lld", (long long)with,
          (long long)before.rows_pulled);
    /* one more step: its rows are dirty in the caches until hx_ps_finish writes them back */
    make_batch(STEPS, &bt);
    float lp = 0, ld = 0;
    if (sp && sd) OK(run(sp, &pm, &bt, 0, &lp));
    if (sp && sd) OK(run(sd, &dm, &bt, 0, &ld));
    CHECK(!memcmp(&lp, &ld, sizeof lp), "the last step: loss %.9g with the device cache, %.9g without", ld, lp);
    OK(hx_ps_finish(ps));
    hx_session_free(sp);
    hx_session_free(sd);
    model_free(&pm);
    model_free(&dm);
    hx_ps_free(ps);
    barrier(); /* the servers have saved */
    same_files(dir, "sn", "sc");
    barrier();
}

/* ---- hot rows on every worker (several workers) ------------------------------------ */

enum { DEV_HOT = 10 };

/* The two models over S servers (every other rank a worker), compared;
 * free_first: the workers free the tables before hx_ps_finish. */
static void hot_run(int S, bool free_first)
{
    char dir[256] = "";
    const char *sub[4] = {"n", "c", "sn", "sc"};
    shared_dirs(dir, sizeof dir, "hx-mpi-ps-hot", sub, 4);
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = world;
    pc.servers = S;
    hx_ps *ps = NULL;
    OK(hx_ps_create(&pc, &ps));
    if (!ps) return;
    if (hx_ps_is_server(ps)) {
        serve_devcache(ps, dir, DEV_HOT, true);
        hx_ps_free(ps);
        barrier(); /* saved */
        barrier(); /* the workers have compared the files */
        if (rank == size - 1) test_remove_tree(dir);
        return;
    }
    hx_comm *wc = hx_ps_workers(ps);
    int W = hx_comm_size(wc), w = hx_ps_index(ps);
    model pm, dm;
    model_cache_rows = 0;
    int bad = build(&pm, B / W, NULL, ps);
    model_cache_rows = DEV_HOT;
    bad = bad || build(&dm, B / W, NULL, ps);
    model_cache_rows = 0;
    if (bad) {
        CHECK(false, "build: %s", hx_last_error());
        return;
    }
    set_lazy(pm.t[NT - 1]);
    set_lazy(dm.t[NT - 1]);
    hx_session_config cp = config_emu(wc, 0), cd = config_emu(wc, 0);
    hx_session *sp = test_session_with(pm.g, &cp, "no cache"), *sd = test_session_with(dm.g, &cd, "hot rows");
    if (sp && sd) caches_on_device(sd, &dm, sp, "server mode, several workers");
    batch bt;
    for (int s = 0; s < STEPS && sp && sd; s++) {
        make_batch(s, &bt);
        float lp = 0, ld = 0;
        OK(run(sp, &pm, &bt, w * (B / W), &lp));
        OK(run(sd, &dm, &bt, w * (B / W), &ld));
        CHECK(!memcmp(&lp, &ld, sizeof lp), "worker %d, step %d: loss %.9g with the hot rows, %.9g without", w, s,
              ld, lp);
        fold(&ld, sizeof ld);
        if (s == STEPS / 2 && w == W - 1) save_both(&pm, &dm, dir); /* mid-run, by a worker other than 0 */
    }
    for (int k = 0; k < NT && sp && sd; k++) compare_table(&dm, &pm, k, 0, "after training (hot rows)");
    const hx_tensor *tp[2] = {pm.w1, pm.w2}, *td[2] = {dm.w1, dm.w2};
    for (int j = 0; j < 2 && sp && sd; j++) {
        int64_t n = hx_tensor_numel(tp[j]);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        OK(hx_session_read(sp, tp[j], a, sizeof(float) * (size_t)n));
        OK(hx_session_read(sd, td[j], b, sizeof(float) * (size_t)n));
        CHECK(!memcmp(a, b, sizeof(float) * (size_t)n), "worker %d: parameter '%s' differs with the hot rows", w,
              hx_tensor_name(tp[j]));
        free(a);
        free(b);
    }
    int64_t hits = 0, in = 0, out = 0, lookups = 0;
    for (int k = 0; k < NT; k++) {
        hx_embedding_stats es;
        OK(hx_embedding_table_stats(dm.t[k], &es));
        CHECK(es.device_cache_rows == DEV_HOT, "table '%s': %lld cached rows", specs[k].name,
              (long long)es.device_cache_rows);
        hits += es.device_cache_hits;
        lookups += es.device_cache_lookups;
        in += es.device_rows_in + es.device_rows_init;
        out += es.device_rows_out;
    }
    CHECK(hits > 0 && hits < lookups && in > 4 * DEV_HOT && (w != 0 || out > 0),
          "worker %d: %lld hits of %lld lookups, %lld rows admitted, %lld written back: the rows do not come and go",
          w, (long long)hits, (long long)lookups, (long long)in, (long long)out);
    barrier_workers(wc); /* the mid-run checkpoint is written */
    same_files(dir, "n", "c");
    if (!free_first) OK(hx_ps_finish(ps)); /* worker 0 writes the cached rows back */
    hx_session_free(sp);
    hx_session_free(sd);
    caches_on_host(&dm, "server mode, several workers, the session freed");
    model_free(&pm);
    model_free(&dm); /* else as it frees them */
    if (free_first) OK(hx_ps_finish(ps));
    hx_ps_free(ps);
    barrier(); /* the servers have saved */
    same_files(dir, "sn", "sc");
    barrier();
}

static void test_devcache_workers(void)
{
    if (size < 3) {
        test_skip("2 ranks: one worker (case devcache)");
        return;
    }
    { /* a worker may not run ahead of the others' gradients of its cached rows */
        hx_ps *ps = make_ps(1);
        hx_embedding_table *t = NULL;
        hx_embedding_config ec = hx_embedding_config_default();
        ec.name = "cached";
        ec.rows = 10;
        ec.dim = 2;
        ec.ps = ps;
        ec.device_cache_rows = 4;
        CHECK(ps && hx_embedding_table_create(&ec, &t) == HX_ERR_UNSUPPORTED && !t &&
                  strstr(hx_last_error(), "staleness 0"),
              "a device cache with several workers at staleness 1: %s", hx_last_error());
        if (ps && hx_ps_is_server(ps)) OK(hx_ps_serve(ps));
        else if (ps) OK(hx_ps_finish(ps));
        hx_ps_free(ps);
    }
    hot_run(size >= 4 ? 2 : 1, false); /* two workers */
    if (size >= 4) hot_run(1, true);   /* three: their sums' order shows (two gradients add alike either way) */
}

/* hot_alive: server mode with two workers (3 ranks; 4: two servers), a
 * timeout of 1 s, a table of 8 rows whose cache holds them all. Two
 * training steps on rows 0-3 admit them; then for 1.5 s each worker's
 * lookups of them (no training) all hit, sending the servers nothing,
 * but the workers say they live, so the servers go on; a training step
 * after it succeeds and the servers' serve ends well. Then the last
 * worker's cache breaks (a fill that failed, as hx_emb_hot_fail records
 * it): the next step fails on every worker at once (in seconds, not the
 * workers' communicator's 60 s), naming that worker, the last one with
 * its cause; the servers' tables stay consistent (every worker's push of
 * that step withheld) and hx_ps_finish ends serving. Before that, a table
 * whose replica (9.6 MB) does not fit an emulated device of 4 MiB refuses
 * a worker's session, naming it, its bytes and max_device_memory. */
enum { ALIVE_ROWS = 8, ALIVE_N = 4 };

static hx_session *alive_session(hx_embedding_table *t, hx_graph **g, hx_tensor **ids, hx_tensor **x,
                                 hx_tensor **loss)
{
    *g = hx_graph_create();
    int64_t n = ALIVE_N, xs[2] = {ALIVE_N, D};
    *ids = hx_graph_input(*g, "ids", HX_DTYPE_I64, 1, &n);
    *x = hx_graph_input(*g, "x", HX_DTYPE_F32, 2, xs);
    *loss = hx_reduce_sum(*g, hx_mul(*g, hx_embedding_lookup(*g, t, *ids), *x), 0, NULL, false);
    OK(hx_graph_backward(*g, *loss));
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(*g, NULL, &sgd));
    hx_session_config cfg = config(NULL);
    return test_session_with(*g, &cfg, "hot rows, heartbeat");
}

static void test_hot_alive(void)
{
    if (size < 3) {
        test_skip("2 ranks: one worker (mpi_ps_killed's devcache case says it lives)");
        return;
    }
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = world;
    pc.servers = size - 2; /* two workers */
    pc.timeout_s = 1;
    hx_ps *ps = NULL;
    OK(hx_ps_create(&pc, &ps));
    if (!ps) return;
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "alive";
    ec.rows = ALIVE_ROWS;
    ec.dim = D;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.ps = ps;
    ec.device_cache_rows = ALIVE_ROWS;
    ec.n_threads = 1;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    hx_embedding_table *big = big_cached_table(NULL, ps);
    if (hx_ps_is_server(ps)) {
        double t0 = hx__now();
        hx_status st = hx_ps_serve(ps);
        CHECK(st == HX_OK && hx__now() - t0 > 1.5, "server rank %d: serving through the workers' lookups of "
              "cached rows ended after %.1f s: %s: %s", rank, hx__now() - t0, hx_status_name(st), hx_last_error());
        OK(hx_embedding_table_free(big));
        OK(hx_embedding_table_free(t));
        hx_ps_free(ps);
        return;
    }
    int w = hx_ps_index(ps);
    if (big) refused_on_small_device(big, NULL);
    OK(hx_embedding_table_free(big));
    hx_graph *g = NULL;
    hx_tensor *ids = NULL, *x = NULL, *loss = NULL;
    hx_session *s = t ? alive_session(t, &g, &ids, &x, &loss) : NULL;
    int64_t k[ALIVE_N] = {0, 1, 2, 3};
    float xv[ALIVE_N * D];
    for (int i = 0; i < ALIVE_N * D; i++) xv[i] = 0.1f * (float)(i % 7) - 0.3f;
    hx_feed f[2] = {{NULL, ids, k, sizeof k}, {NULL, x, xv, sizeof xv}};
    float l;
    hx_fetch fl = {NULL, loss, &l, sizeof l};
    for (int step = 0; step < 2 && s; step++) OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
    hx_embedding_stats a, b;
    OK(hx_embedding_table_stats(t, &a));
    double t0 = hx__now();
    int runs = 0;
    while (s && hx__now() - t0 < 1.5) {
        OK(hx_session_run(s, f, 2, &fl, 1, 0)); /* the lookups alone */
        runs++;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    OK(hx_embedding_table_stats(t, &b));
    CHECK(runs > 10 && b.device_cache_lookups - a.device_cache_lookups == (int64_t)runs * ALIVE_N &&
              b.device_cache_hits - a.device_cache_hits == (int64_t)runs * ALIVE_N,
          "worker %d: %d lookups of the cached rows: %lld of %lld rows hit", w, runs,
          (long long)(b.device_cache_hits - a.device_cache_hits),
          (long long)(b.device_cache_lookups - a.device_cache_lookups));
    if (s) OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN)); /* the servers still serve */
    /* the last worker's cache breaks */
    if (t && w == 1) hx_emb_hot_fail(t->client->hot, HX_ERR_OUT_OF_MEMORY, "a fill failed (test)");
    t0 = hx__now();
    hx_status st = s ? hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN) : HX_ERR_STATE;
    double dt = hx__now() - t0;
    const char *e = hx_last_error();
    if (w == 0) printf("a cache broken on worker 1: worker 0's step failed after %.3f s\n", dt);
    CHECK(st == HX_ERR_STATE && dt < 10 &&
              (w == 1 ? strstr(e, "a fill failed (test)") && strstr(e, "HX_ERR_OUT_OF_MEMORY")
                      : strstr(e, "worker 1's device cache") && strstr(e, "a fill failed (test)")),
          "a cache broken on worker 1: worker %d's step %s after %.1f s: %s", w, hx_status_name(st), dt, e);
    OK(hx_ps_finish(ps));
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
    hx_ps_free(ps);
}

static void test_refusals(void)
{
    hx_ps_config pc = hx_ps_config_default();
    hx_ps *ps = NULL;
    pc.comm = world;
    pc.servers = size;
    CHECK(hx_ps_create(&pc, &ps) == HX_ERR_INVALID_ARGUMENT && !ps && strstr(hx_last_error(), "worker"),
          "every rank a server: %s", hx_last_error());
    pc.servers = 1;
    pc.staleness = -1;
    CHECK(hx_ps_create(&pc, &ps) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "staleness"),
          "staleness -1: %s", hx_last_error());
    ps = make_ps(0);
    if (!ps) return;
    hx_embedding_config ec = hx_embedding_config_default();
    ec.rows = 10;
    ec.dim = 2;
    ec.ps = ps;
    hx_embedding_table *t = NULL;
    ec.comm = world;
    CHECK(hx_embedding_table_create(&ec, &t) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "not both"),
          "comm and ps: %s", hx_last_error());
    if (hx_ps_is_server(ps)) {
        CHECK(hx_ps_finish(ps) == HX_ERR_STATE, "a server's finish");
        OK(hx_ps_serve(ps)); /* no tables: until the workers finish */
    } else {
        CHECK(hx_ps_serve(ps) == HX_ERR_STATE, "a worker's serve");
        OK(hx_ps_finish(ps));
        CHECK(hx_ps_finish(ps) == HX_ERR_STATE, "finish twice");
    }
    hx_ps_free(ps);
}

static int setup(void)
{
    if (!(world = mpi_world_open(60, &rank, &size))) return 1;
    int W = size - (size >= 4 ? 2 : 1);
    if (size < 2 || B % W) {
        fprintf(stderr, "mpi_ps: %d ranks: give 2 to 4 (the workers must divide the batch of %d)\n", size, B);
        return 1;
    }
    return 0;
}

static void teardown(void) { mpi_world_close_with_digest(world, rank, size, digest); }

int main(int argc, char **argv)
{
    static const test_case cases[] = {
        {"train", test_train},
        {"staleness", test_staleness},
        {"dynamic", test_dynamic},
        {"cap", test_cap},
        {"dynamic_cap", test_dynamic_cap},
        {"cache", test_cache},
        {"devcache", test_devcache},
        {"devcache_workers", test_devcache_workers},
        {"hot_alive", test_hot_alive},
        {"refusals", test_refusals},
    };
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "mpi_ps", cases, TEST_COUNT(cases), &o);
}
