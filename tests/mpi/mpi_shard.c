/* Sharded embedding tables, collective mode (hx_embedding_config.comm),
 * under mpirun: N ranks each train a wide & deep-like model on their B/N
 * samples of a global batch of B, with four tables sharded over the
 * ranks (row-wise and table-wise; ROWS, MODULO; lookup and bags of sum,
 * mean with padding, max; f32 and bf16 storage; LazyAdam, Adagrad,
 * row-wise Adagrad, FTRL) and the dense layers data parallel; against the
 * same model with tables of one process on this rank training the whole
 * batch alone. After 20 steps the table rows, their optimizer state and
 * the dense parameters agree within 1e-6 relative (not bitwise: the
 * ranks' partial gradient sums associate differently). The "hx-digest"
 * line (losses, rows, state, parameters) is bitwise the same run to run
 * and over TCP (tests/mpi/same_over_tcp.sh).
 *
 * Also: an id outside a table fed on one rank fails the run on every rank
 * with HX_ERR_INDEX (the feeding rank's message names the id) and leaves
 * every shard as it was; collective reads and writes of rows; a DYNAMIC
 * table sharded by key hash; ranks that create a table differently are
 * refused; checkpoints of the tables (per-shard files and a manifest)
 * load at the same rank count, at half of it (a communicator split from
 * the world) and into a table of one process, and a corrupt shard is
 * refused everywhere, the tables as they were; a DYNAMIC table's
 * checkpoint loads at half the ranks and in one process, every key
 * re-hashed to its new owner with its row, state and filter count. */
#include "dist/dist.h"
#include "hetex_checks.h"
#include "mpi_world.h"
#include "testutil.h"
#include "tmpdir.h"
#include "hetex_run.h"
#include "shard_model.h"
#include "dyn_cap.h"
#include "embedding/shard_impl.h" /* hx_emb_hot_fail: a broken replica */

#include <mpi.h>

#include <sys/stat.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hx_comm *comm;

/* Training against the lone run; before it, the sharded tables start as
 * the lone ones (row-wise shards draw their rows as the whole table). */
static void test_train_against_alone(void)
{
    model sh, lone;
    if (build(&sh, B / size, comm, NULL) || build(&lone, B, NULL, NULL)) {
        CHECK(false, "build: %s", hx_last_error());
        return;
    }
    for (int k = 0; k < NT; k++) compare_table(&sh, &lone, k, 0, "at creation");
    hx_session_config cs = config(comm), ca = config(NULL);
    hx_session *ss = test_session_with(sh.g, &cs, "sharded"), *sa = test_session_with(lone.g, &ca, "alone");
    batch bt;
    for (int s = 0; s < STEPS && ss && sa; s++) {
        make_batch(s, &bt);
        float ls = 0, la = 0;
        OK(run(ss, &sh, &bt, rank * (B / size), &ls));
        OK(run(sa, &lone, &bt, 0, &la));
        fold(&ls, sizeof ls); /* this rank's loss over its samples */
    }
    for (int k = 0; k < NT && ss && sa; k++) compare_table(&sh, &lone, k, 1e-6, "after 20 steps");
    if (ss && sa) compare_dense(ss, &sh, sa, &lone);
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(sh.t[0], &st));
    CHECK(st.rows == specs[0].rows && st.updates == STEPS && st.last_step == STEPS,
          "stats of the sharded 'user': rows %lld, %lld updates, last step %lld", (long long)st.rows,
          (long long)st.updates, (long long)st.last_step);

    /* an id outside 'user' fed on the last rank: every rank's run fails,
     * no shard changes, and the next good step trains as the lone run */
    int64_t R = specs[0].rows, *ids = malloc(sizeof(int64_t) * (size_t)R);
    float *before = malloc(sizeof(float) * (size_t)(R * D)), *after = malloc(sizeof(float) * (size_t)(R * D));
    for (int64_t i = 0; i < R; i++) ids[i] = i;
    OK(hx_embedding_table_read_rows(sh.t[0], ids, R, before));
    make_batch(STEPS, &bt);
    int64_t good = bt.ids[0][B - 1];
    if (rank == size - 1) bt.ids[0][B - 1] = R + 5;
    float l;
    hx_status st2 = ss ? run(ss, &sh, &bt, rank * (B / size), &l) : HX_ERR_STATE;
    const char *msg = hx_last_error();
    CHECK(st2 == HX_ERR_INDEX, "rank %d: an id out of range ran with %s: %s", rank, hx_status_name(st2), msg);
    if (rank == size - 1)
        CHECK(strstr(msg, "id 102") && strstr(msg, "user"), "the feeding rank's message: %s", msg);
    else
        CHECK(strstr(msg, "rank") && strstr(msg, "user"), "the other ranks' message: %s", msg);
    OK(hx_embedding_table_read_rows(sh.t[0], ids, R, after));
    CHECK(!memcmp(before, after, sizeof(float) * (size_t)(R * D)), "a failed run changed table 'user'");
    for (int k = 1; k < NT && ss && sa; k++) compare_table(&sh, &lone, k, 1e-6, "after the failed run");
    bt.ids[0][B - 1] = good;
    if (ss && sa) {
        OK(run(ss, &sh, &bt, rank * (B / size), &l));
        OK(run(sa, &lone, &bt, 0, &l));
        for (int k = 0; k < NT; k++) compare_table(&sh, &lone, k, 1e-6, "a step after the failed run");
    }
    free(ids);
    free(before);
    free(after);
    hx_session_free(ss);
    hx_session_free(sa);
    model_free(&sh);
    model_free(&lone);
}

/* Collective reads and writes of rows: each rank writes its own ids, all
 * read them back; a bad id on one rank fails every rank, writing nothing. */
static void test_rows_collective(void)
{
    table_spec sp = specs[0];
    hx_embedding_table *t = make_table(&sp, comm, NULL);
    if (!t) return;
    enum { N = 5 };
    int64_t ids[N];
    float rows[N * D], back[N * D];
    for (int i = 0; i < N; i++) {
        ids[i] = (rank * 13 + i * 7) % sp.rows;
        for (int c = 0; c < D; c++) rows[i * D + c] = (float)(rank * 100 + i * 10 + c);
    }
    /* ids written by two ranks end with the higher rank's row */
    OK(hx_embedding_table_write_rows(t, ids, N, rows));
    OK(hx_embedding_table_read_rows(t, ids, N, back));
    CHECK(!memcmp(rows, back, sizeof rows), "rows read back differ"); /* no rank shares an id here */
    int64_t all[N * 4];
    for (int r = 0; r < size && r < 4; r++)
        for (int i = 0; i < N; i++) all[r * N + i] = (r * 13 + i * 7) % sp.rows;
    float *got = malloc(sizeof(float) * N * 4 * D);
    int nr = size < 4 ? size : 4;
    OK(hx_embedding_table_read_rows(t, all, N * nr, got));
    for (int i = 0; i < N * nr; i++) {
        int last = -1; /* the last rank that wrote this id */
        for (int r = 0; r < nr; r++)
            for (int j = 0; j < N; j++)
                if (all[r * N + j] == all[i]) last = r * 1000 + j;
        CHECK(got[i * D] == (float)((last / 1000) * 100 + (last % 1000) * 10), "id %lld reads %g",
              (long long)all[i], (double)got[i * D]);
    }
    free(got);
    float before[N * D];
    OK(hx_embedding_table_read_rows(t, ids, N, before));
    int64_t bad[N];
    memcpy(bad, ids, sizeof bad);
    if (rank == 0) bad[N - 1] = -3;
    hx_status st = hx_embedding_table_write_rows(t, bad, N, rows);
    CHECK(st == HX_ERR_INDEX, "a bad id in a write: %s (%s)", hx_status_name(st), hx_last_error());
    OK(hx_embedding_table_read_rows(t, ids, N, back));
    CHECK(!memcmp(before, back, sizeof back), "a refused write changed rows");
    float s0[N * D];
    OK(hx_embedding_table_read_state(t, 1, ids, N, s0));
    st = hx_embedding_table_read_state(t, 2, ids, N, s0);
    CHECK(st == HX_ERR_INVALID_ARGUMENT, "state array 2 of LazyAdam: %s", hx_status_name(st));
    OK(hx_embedding_table_free(t));
}

/* rank_bytes, the per-rank cap: a shard's bytes are its rows and Adagrad
 * state as allocated (exactly rows * dim * 4 * 2 here), the figure the
 * stats report and the cap is checked against (a cap of the largest
 * shard's bytes is taken, one byte less refused on every rank naming the
 * table, the rank and its bytes); a cap of 0.6 of the whole table refuses
 * it on one rank and takes it on 2 or 4; a table of one process refuses
 * the field. */
static void test_rank_cap(void)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "capped";
    ec.rows = 1000;
    ec.dim = 16;
    ec.n_threads = 1;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    hx_embedding_table *t = NULL;
    ec.rank_bytes = 1 << 20;
    CHECK(hx_embedding_table_create(&ec, &t) == HX_ERR_INVALID_ARGUMENT && !t &&
              strstr(hx_last_error(), "rank_bytes") && strstr(hx_last_error(), "capped"),
          "rank_bytes on a table of one process: %s", hx_last_error());
    ec.rank_bytes = 0;
    OK(hx_embedding_table_create(&ec, &t));
    hx_embedding_stats es;
    OK(hx_embedding_table_stats(t, &es));
    size_t whole = es.bytes;
    hx_embedding_table_free(t);
    t = NULL;
    CHECK(whole == (size_t)1000 * 16 * 4 * 2, "one process: %zu bytes for 1000 rows of 16 with Adagrad", whole);

    ec.comm = comm;
    OK(hx_embedding_table_create(&ec, &t));
    OK(hx_embedding_table_stats(t, &es));
    size_t mine = es.bytes, rows_here = (size_t)((1000 - rank + size - 1) / size);
    unsigned long long m = mine, most = 0;
    MPI_Allreduce(&m, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    hx_embedding_table_free(t);
    t = NULL;
    CHECK(mine == rows_here * 16 * 4 * 2, "rank %d's shard: %zu bytes for %zu rows", rank, mine, rows_here);

    ec.rank_bytes = (size_t)most;
    OK(hx_embedding_table_create(&ec, &t));
    OK(hx_embedding_table_stats(t, &es));
    CHECK(es.bytes <= ec.rank_bytes && es.bytes == mine, "under a cap of the largest shard: %zu bytes", es.bytes);
    hx_embedding_table_free(t);
    t = NULL;

    ec.rank_bytes = (size_t)most - 1;
    CHECK(hx_embedding_table_create(&ec, &t) == HX_ERR_OUT_OF_MEMORY && !t && strstr(hx_last_error(), "capped"),
          "a cap one byte under the largest shard refused on rank %d: %s", rank, hx_last_error());
    if (mine == most) {
        char want[128];
        snprintf(want, sizeof want, "rank %d's shard allocates %zu bytes", rank, mine);
        CHECK(strstr(hx_last_error(), want) && strstr(hx_last_error(), "cap of"), "the message names rank, bytes "
              "and cap: %s", hx_last_error());
    }

    ec.rank_bytes = whole * 6 / 10;
    hx_status st = hx_embedding_table_create(&ec, &t);
    if (size == 1)
        CHECK(st == HX_ERR_OUT_OF_MEMORY && !t && strstr(hx_last_error(), "more ranks (at least 2)"),
              "the whole table over 0.6 of itself refused on one rank: %s", hx_last_error());
    else
        CHECK(st == HX_OK && t, "a cap of 0.6 of the table at %d ranks: %s", size, hx_last_error());
    hx_embedding_table_free(t);
}

/* DYNAMIC shards under a cap (tests/mpi/dyn_cap.h) in collective mode:
 * every rank trains and owns a shard. Counting keys: without the cap a
 * rank's shard grows past it, under it every shard stays under it after
 * every step and the keys with a row train bitwise as without it. New
 * keys past the map's room: without eviction a step fails on every rank
 * with HX_ERR_OUT_OF_MEMORY (the full shard's rank naming the map, the
 * cap and evict_when_full, the others naming that rank),
 * and every row read before it reads the same after; with eviction every
 * step trains, each shard under the cap, and keys were evicted. */
static void test_dynamic_cap(void)
{
    size_t cap = cap_bytes();
    cap_result free_run, capped;
    hx_embedding_table *t = cap_table(comm, NULL, size, "filter", CAP_FILTER, false);
    cap_train(t, comm, CAP_FILTER, rank, CAP_STEPS, &free_run);
    OK(hx_embedding_table_free(t));
    unsigned long long most = free_run.most, top = 0;
    MPI_Allreduce(&most, &top, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    CHECK(free_run.steps == CAP_STEPS && top > cap, "without the cap the counting keys take a shard to %llu "
          "bytes (the cap: %zu)", top, cap);

    t = cap_table(comm, NULL, size, "filter", CAP_FILTER, true);
    cap_train(t, comm, CAP_FILTER, rank, CAP_STEPS, &capped);
    OK(hx_embedding_table_free(t));
    CHECK(capped.steps == CAP_STEPS && capped.most <= cap && capped.most > 0, "under the cap: %d steps (%s), "
          "rank %d's shard at most %zu bytes of %zu", capped.steps, capped.why, rank, capped.most, cap);
    CHECK(!memcmp(capped.hot, free_run.hot, sizeof capped.hot), "the keys with a row trained as without the cap");

    cap_result err;
    t = cap_table(comm, NULL, size, "full", CAP_ERROR, true);
    cap_train(t, comm, CAP_ERROR, rank, CAP_STEPS, &err);
    OK(hx_embedding_table_free(t));
    int own = err.failed == HX_ERR_OUT_OF_MEMORY && strstr(err.why, "embedding id map") &&
              strstr(err.why, "evict_when_full") && strstr(err.why, "cap of"), owners = 0;
    MPI_Allreduce(&own, &owners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(err.failed == HX_ERR_OUT_OF_MEMORY && err.steps > 0 && owners > 0 &&
              (own || strstr(err.why, "failed its part of a training lookup (HX_ERR_OUT_OF_MEMORY")),
          "new keys past the map's room without eviction: step %d: %s (%d ranks name the map)", err.steps, err.why,
          owners);
    CHECK(err.kept && err.most <= cap, "the refused step changed no row (%d); %zu bytes", err.kept, err.most);

    cap_result ev;
    t = cap_table(comm, NULL, size, "evict", CAP_EVICT, true);
    cap_train(t, comm, CAP_EVICT, rank, CAP_STEPS, &ev);
    hx_embedding_stats es;
    OK(hx_embedding_table_stats(t, &es));
    OK(hx_embedding_table_free(t));
    CHECK(ev.steps == CAP_STEPS && ev.most <= cap && es.evictions > 0, "with eviction: %d steps (%s), %zu bytes, "
          "%lld keys evicted on rank %d", ev.steps, ev.why, ev.most, (long long)es.evictions, rank);
}

/* A DYNAMIC table sharded by key hash: keys get rows on their owners, a
 * training lookup assigns them, and ids the map has never seen read as
 * zeros; reading it is the same on every rank. */
static void test_dynamic(void)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "dyn";
    ec.rows = 64;
    ec.dim = D;
    ec.ids = HX_EMBEDDING_IDS_DYNAMIC;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.comm = comm;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    ec.n_threads = 1;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    if (!t) return;
    hx_graph *g = hx_graph_create();
    int64_t n = 6, ws[2] = {6, D};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, ws);
    hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, hx_embedding_lookup(g, t, ids), x), 0, NULL, false);
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &sgd));
    hx_session_config cfg = config(comm);
    hx_session *s = test_session_with(g, &cfg, "dynamic");
    int64_t keys[6];
    float xv[6 * D];
    for (int i = 0; i < 6 * D; i++) xv[i] = 0.25f * (float)(i % 5) - 0.5f;
    for (int step = 0; step < 4 && s; step++) {
        for (int i = 0; i < 6; i++) keys[i] = 1000003LL * ((rank + i + step) % 9) + 11; /* 9 keys in all */
        hx_feed f[2] = {{NULL, ids, keys, sizeof keys}, {NULL, x, xv, sizeof xv}};
        OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
    }
    int64_t all[10];
    for (int i = 0; i < 9; i++) all[i] = 1000003LL * i + 11;
    all[9] = 42; /* never seen */
    float rows[10 * D];
    OK(hx_embedding_table_read_rows(t, all, 10, rows));
    fold(rows, sizeof rows);
    bool zero = true, nonzero = true;
    for (int c = 0; c < D; c++) zero &= rows[9 * D + c] == 0;
    for (int i = 0; i < 9; i++) {
        bool any = false;
        for (int c = 0; c < D; c++) any |= rows[i * D + c] != 0;
        nonzero &= any;
    }
    CHECK(zero && nonzero, "keys seen read as rows (%d), a key never seen as zeros (%d)", nonzero, zero);
    hx_embedding_stats st;
    OK(hx_embedding_table_stats(t, &st));
    CHECK(st.rows_assigned >= 0 && st.rows_assigned <= 9, "this rank's shard holds %lld keys",
          (long long)st.rows_assigned);
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));

    /* a frequency filter (min_count 2) counts occurrences, not the
     * de-duplicated ids a rank sends: each rank feeds its own key twice
     * (admitted in one step) and two keys once (filtered) */
    ec.name = "dynf";
    ec.min_count = 2;
    OK(hx_embedding_table_create(&ec, &t));
    if (!t) return;
    g = hx_graph_create();
    int64_t four = 4, fs[2] = {4, D};
    ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &four);
    x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, fs);
    loss = hx_reduce_sum(g, hx_mul(g, hx_embedding_lookup(g, t, ids), x), 0, NULL, false);
    OK(hx_graph_backward(g, loss));
    OK(hx_graph_apply_optimizer(g, NULL, &sgd));
    s = test_session_with(g, &cfg, "dynamic, min_count 2");
    int64_t fk[4] = {5000 + rank, 5000 + rank, 6000 + rank, 7000 + rank};
    hx_feed f[2] = {{NULL, ids, fk, sizeof fk}, {NULL, x, xv, sizeof(float) * 4 * D}};
    if (s) OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
    float fr[4 * D];
    OK(hx_embedding_table_read_rows(t, fk, 4, fr));
    bool twice = false, once = true;
    for (int c = 0; c < D; c++) {
        twice |= fr[c] != 0;
        once &= fr[2 * D + c] == 0 && fr[3 * D + c] == 0;
    }
    CHECK(twice && once, "min_count 2: the key fed twice holds a row (%d), those fed once none (%d)", twice, once);
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
}

/* Rows (k < 0) or state array k of all `rows` rows of t, D floats a row. */
static float *read_all(hx_embedding_table *t, int k, int64_t rows)
{
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)rows);
    float *out = calloc((size_t)(rows * D), sizeof(float));
    for (int64_t i = 0; i < rows; i++) ids[i] = i;
    OK(k < 0 ? hx_embedding_table_read_rows(t, ids, rows, out) : hx_embedding_table_read_state(t, k, ids, rows, out));
    free(ids);
    return out;
}

/* Every array of table k of spec reads as ref (bitwise). */
static void same_as(hx_embedding_table *t, int k, float *const *ref, const char *when)
{
    int64_t R = specs[k].rows;
    for (int a = -1; a < nstate(specs[k].opt); a++) {
        float *got = read_all(t, a, R);
        CHECK(!memcmp(got, ref[a + 1], sizeof(float) * (size_t)(R * D)), "%s: table '%s' array %d differs from "
              "the save's (rank %d of %d)", when, specs[k].name, a, rank, size);
        free(got);
    }
}

static void barrier(void)
{
    float v = 0;
    hx_coll *q = NULL;
    OK(hx__comm_all_reduce(comm, &v, &v, 1, HX_DTYPE_F32, &q));
    OK(hx__coll_wait(q));
}

/* Checkpoints of the four tables after 3 steps, then 2 more steps, then
 * loads: at this rank count, at half of it, in one process; then a
 * damaged shard refused on every rank with the table as it was. */
static void test_checkpoint(void)
{
    model sh;
    if (build(&sh, B / size, comm, NULL)) {
        CHECK(false, "build: %s", hx_last_error());
        return;
    }
    hx_session_config cs = config(comm);
    hx_session *ss = test_session_with(sh.g, &cs, "sharded");
    char dir[256] = "", path[NT][320];
    if (rank == 0 && !test_make_tmpdir(dir, sizeof dir, "hx-mpi-shard")) CHECK(false, "no temporary folder");
    hx_coll *q = NULL;
    OK(hx__comm_broadcast(comm, dir, sizeof dir / 8, HX_DTYPE_I64, 0, &q)); /* rank 0's folder */
    OK(hx__coll_wait(q));
    batch bt;
    float l, *ref[NT][3] = {{0}};
    for (int s = 0; s < 5 && ss; s++) {
        make_batch(s, &bt);
        OK(run(ss, &sh, &bt, rank * (B / size), &l));
        for (int k = 0; k < NT && s == 2; k++) {
            snprintf(path[k], sizeof path[k], "%s/%s", dir, specs[k].name);
            OK(hx_embedding_table_save(sh.t[k], path[k]));
            OK(hx_embedding_table_save(sh.t[k], path[k])); /* a second generation replaces the first */
            for (int a = -1; a < nstate(specs[k].opt); a++) ref[k][a + 1] = read_all(sh.t[k], a, specs[k].rows);
        }
    }
    float *now = ss ? read_all(sh.t[0], -1, specs[0].rows) : NULL;
    CHECK(now && memcmp(now, ref[0][0], sizeof(float) * (size_t)(specs[0].rows * D)), "the steps after the save changed nothing");
    free(now);
    for (int k = 0; k < NT && ss; k++) {
        OK(hx_embedding_table_load(sh.t[k], path[k]));
        same_as(sh.t[k], k, ref[k], "loaded at the same ranks");
    }
    /* in one process: tables without a communicator */
    for (int k = 0; k < NT && ss; k++) {
        hx_embedding_table *t = make_table(&specs[k], NULL, NULL);
        OK(hx_embedding_table_load(t, path[k]));
        same_as(t, k, ref[k], "loaded in one process");
        OK(hx_embedding_table_free(t));
    }
    /* at half the ranks (of a world of 2 or 4; one rank: 1 again) */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    hx_comm_config hc = hx_comm_config_default();
    hc.mpi_comm = &half;
    hc.timeout_s = 60;
    hx_comm *hcomm = NULL;
    OK(hx_comm_create(&hc, &hcomm));
    for (int k = 0; k < NT && hcomm && ss; k++) {
        hx_embedding_table *t = make_table(&specs[k], hcomm, NULL);
        OK(hx_embedding_table_load(t, path[k]));
        same_as(t, k, ref[k], "loaded at half the ranks");
        OK(hx_embedding_table_free(t));
    }
    hx_comm_free(hcomm);
    MPI_Comm_free(&half);
    /* a damaged shard: refused on every rank, every table as it was */
    barrier();
    if (rank == 0 && ss) {
        char p[400];
        snprintf(p, sizeof p, "%s.g2.0-of-%d", path[0], size);
        FILE *f = fopen(p, "r+b");
        CHECK(f && fseek(f, 200, SEEK_SET) == 0 && fputc(0x5a, f) != EOF, "damaging %s", p);
        if (f) fclose(f);
    }
    barrier();
    if (ss) {
        hx_status st = hx_embedding_table_load(sh.t[0], path[0]);
        CHECK(st == HX_ERR_CORRUPT, "rank %d: a damaged shard loaded with %s: %s", rank, hx_status_name(st),
              hx_last_error());
        same_as(sh.t[0], 0, ref[0], "after a refused load");
        hx_embedding_table *t = make_table(&specs[0], NULL, NULL);
        float *before = read_all(t, -1, specs[0].rows);
        st = hx_embedding_table_load(t, path[0]);
        CHECK(st == HX_ERR_CORRUPT && strstr(hx_last_error(), "does not match the manifest"),
              "one process, a damaged shard: %s: %s", hx_status_name(st), hx_last_error());
        float *after = read_all(t, -1, specs[0].rows);
        CHECK(!memcmp(before, after, sizeof(float) * (size_t)(specs[0].rows * D)), "a refused load changed rows");
        free(before);
        free(after);
        OK(hx_embedding_table_free(t));
    }
    barrier();
    if (rank == 0 && *dir) test_remove_tree(dir);
    for (int k = 0; k < NT; k++)
        for (int a = 0; a < 3; a++) free(ref[k][a]);
    hx_session_free(ss);
    model_free(&sh);
}

/* The dense parameters of two sessions bitwise. */
static void same_dense(hx_session *sa, const model *a, hx_session *sb, const model *b, const char *when)
{
    const hx_tensor *ta[2] = {a->w1, a->w2}, *tb[2] = {b->w1, b->w2};
    for (int j = 0; j < 2; j++) {
        int64_t n = hx_tensor_numel(ta[j]);
        float *p = malloc(sizeof(float) * (size_t)n), *q = malloc(sizeof(float) * (size_t)n);
        OK(hx_session_read(sa, ta[j], p, sizeof(float) * (size_t)n));
        OK(hx_session_read(sb, tb[j], q, sizeof(float) * (size_t)n));
        CHECK(!memcmp(p, q, sizeof(float) * (size_t)n), "%s: parameter '%s' differs with the device cache (rank "
              "%d of %d)", when, hx_tensor_name(ta[j]), rank, size);
        free(p);
        free(q);
    }
}

enum { HOT_ROWS = 8, HOT_STEPS = 30, HOT_SAVE = 12 };

/* The sharded table broken on the last rank (a fill that failed there,
 * as hx_emb_hot_fail records it): the next step fails on every rank at
 * once (in seconds, not the communicator's timeout), naming that rank,
 * the last one with its cause. */
static void broken_replica(hx_session *s, model *m)
{
    if (rank == size - 1) hx_emb_hot_fail(m->t[0]->shard->hot, HX_ERR_OUT_OF_MEMORY, "a fill failed (test)");
    batch bt;
    make_batch(HOT_STEPS + 1, &bt);
    float loss;
    double t0 = hx__now();
    hx_status st = run(s, m, &bt, rank * (B / size), &loss);
    double dt = hx__now() - t0;
    char who[32];
    snprintf(who, sizeof who, "rank %d", size - 1);
    const char *e = hx_last_error();
    if (rank == 0) printf("a replica broken on rank %d: rank 0's step failed after %.3f s\n", size - 1, dt);
    CHECK(st == HX_ERR_STATE && dt < 10 &&
              (rank == size - 1 ? strstr(e, "a fill failed (test)") && strstr(e, "HX_ERR_OUT_OF_MEMORY")
                                : strstr(e, who) != NULL),
          "a replica broken on rank %d: rank %d's step %s after %.1f s: %s", size - 1, rank, hx_status_name(st), dt,
          e);
}

/* A device cache of hot rows (device_cache_rows = 8 of each table's
 * 40-97 rows) on the four tables (LazyAdam, Adagrad table-wise, row-wise
 * Adagrad, FTRL in bf16): HOT_STEPS steps of the skewed batches, so rows
 * come and go, against the same model without it: every loss, and at the
 * end every row, state array and dense parameter, bitwise; a checkpoint
 * taken mid-run byte-equal to the uncached one's; both loaded back and
 * trained 3 more steps, still bitwise; the cache's hit rate reported and
 * its write-backs counted. Both sessions have the emulated device, whose
 * memory holds each rank's replica (the stats say so, and count its bytes
 * beside the model's) until the session is freed; one whose device is too
 * small for it is refused. A replica broken on one rank fails the next
 * step on every rank. A DYNAMIC table's cache is refused on every rank,
 * saying why. */
static void test_device_cache(void)
{
    model plain, hot;
    model_cache_rows = HOT_ROWS;
    int bad = build(&hot, B / size, comm, NULL);
    model_cache_rows = 0;
    if (bad || build(&plain, B / size, comm, NULL)) {
        CHECK(false, "build: %s", hx_last_error());
        return;
    }
    hx_session_config cs = config_emu(comm, 0);
    hx_session *sp = test_session_with(plain.g, &cs, "plain"), *sh = test_session_with(hot.g, &cs, "cached");
    if (sp && sh) caches_on_device(sh, &hot, sp, "sharded tables");
    char dir[256] = "", pp[NT][400], ph[NT][400];
    if (rank == 0 && !test_make_tmpdir(dir, sizeof dir, "hx-mpi-hot")) CHECK(false, "no temporary folder");
    hx_coll *q = NULL;
    OK(hx__comm_broadcast(comm, dir, sizeof dir / 8, HX_DTYPE_I64, 0, &q));
    OK(hx__coll_wait(q));
    if (rank == 0) {
        snprintf(pp[0], sizeof pp[0], "%s/p", dir);
        snprintf(ph[0], sizeof ph[0], "%s/h", dir);
        CHECK(!mkdir(pp[0], 0700) && !mkdir(ph[0], 0700), "folders in %s", dir);
    }
    for (int k = 0; k < NT; k++) {
        snprintf(pp[k], sizeof pp[k], "%s/p/%s", dir, specs[k].name);
        snprintf(ph[k], sizeof ph[k], "%s/h/%s", dir, specs[k].name);
    }
    barrier();
    batch bt;
    for (int s = 0; s < HOT_STEPS && sp && sh; s++) {
        make_batch(s, &bt);
        float lp = 0, lh = 0;
        OK(run(sp, &plain, &bt, rank * (B / size), &lp));
        OK(run(sh, &hot, &bt, rank * (B / size), &lh));
        CHECK(!memcmp(&lp, &lh, sizeof lp), "step %d: loss %.9g with the device cache, %.9g without (rank %d)", s,
              lh, lp, rank);
        fold(&lh, sizeof lh);
        for (int k = 0; k < NT && s == HOT_SAVE; k++) {
            OK(hx_embedding_table_save(plain.t[k], pp[k]));
            OK(hx_embedding_table_save(hot.t[k], ph[k]));
        }
    }
    for (int k = 0; k < NT && sp && sh; k++) compare_table(&hot, &plain, k, 0, "device cache, after 30 steps");
    if (sp && sh) same_dense(sh, &hot, sp, &plain, "after 30 steps");
    barrier();
    if (rank == 0) same_files(dir, "p", "h");
    hx_embedding_stats st;
    for (int k = 0; k < NT; k++) {
        OK(hx_embedding_table_stats(hot.t[k], &st));
        CHECK(st.device_cache_rows == HOT_ROWS && st.device_cache_hits > 0 &&
                  st.device_cache_hits < st.device_cache_lookups && st.device_rows_out > 0 &&
                  st.device_rows_in + st.device_rows_init > HOT_ROWS,
              "table '%s': %lld rows, %lld hits of %lld lookups, %lld rows in, %lld initialised, %lld written back",
              specs[k].name, (long long)st.device_cache_rows, (long long)st.device_cache_hits,
              (long long)st.device_cache_lookups, (long long)st.device_rows_in, (long long)st.device_rows_init,
              (long long)st.device_rows_out);
        if (rank == 0)
            printf("table '%s' at %d ranks: device cache hit rate %.3f (%lld of %lld distinct rows a lookup), %lld "
                   "rows in, %lld written back\n", specs[k].name, size,
                   (double)st.device_cache_hits / (double)st.device_cache_lookups, (long long)st.device_cache_hits,
                   (long long)st.device_cache_lookups, (long long)st.device_rows_in, (long long)st.device_rows_out);
    }
    /* both back to the mid-run checkpoint (the cache emptied), 3 more steps */
    for (int k = 0; k < NT && sp && sh; k++) {
        OK(hx_embedding_table_load(plain.t[k], pp[k]));
        OK(hx_embedding_table_load(hot.t[k], pp[k]));
    }
    for (int s = 0; s < 3 && sp && sh; s++) {
        make_batch(HOT_SAVE + 1 + s, &bt);
        float lp = 0, lh = 0;
        OK(run(sp, &plain, &bt, rank * (B / size), &lp));
        OK(run(sh, &hot, &bt, rank * (B / size), &lh));
        CHECK(!memcmp(&lp, &lh, sizeof lp), "after the load, step %d: loss %.9g cached, %.9g not", s, lh, lp);
    }
    for (int k = 0; k < NT && sp && sh; k++) compare_table(&hot, &plain, k, 0, "device cache, after a load");
    barrier();
    if (rank == 0 && *dir) test_remove_tree(dir);
    if (sp && sh) broken_replica(sh, &hot);
    hx_session_free(sp);
    hx_session_free(sh);
    caches_on_host(&hot, "sharded tables, the session freed");
    model_free(&plain);
    model_free(&hot);
    hx_embedding_table *big = big_cached_table(comm, NULL); /* collective */
    if (big) refused_on_small_device(big, comm);
    OK(hx_embedding_table_free(big));

    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "cached";
    ec.rows = 64;
    ec.dim = D;
    ec.ids = HX_EMBEDDING_IDS_DYNAMIC;
    ec.comm = comm;
    ec.device_cache_rows = 8;
    hx_embedding_table *t = NULL;
    CHECK(hx_embedding_table_create(&ec, &t) == HX_ERR_UNSUPPORTED && !t && strstr(hx_last_error(), "DYNAMIC") &&
              strstr(hx_last_error(), "device_cache_rows") && strstr(hx_last_error(), "cached"),
          "device cache of a DYNAMIC sharded table refused: %s", hx_last_error());
    hx_embedding_table_free(t);
}

/* A lookup graph of n keys over DYNAMIC table t and its session (c: data
 * parallel over c, or one process). */
static hx_session *dyn_session(hx_embedding_table *t, int64_t n, hx_comm *c, hx_graph **g, hx_tensor **ids,
                               hx_tensor **x)
{
    *g = hx_graph_create();
    int64_t xs[2] = {n, D};
    *ids = hx_graph_input(*g, "ids", HX_DTYPE_I64, 1, &n);
    *x = hx_graph_input(*g, "x", HX_DTYPE_F32, 2, xs);
    OK(hx_graph_backward(*g, hx_reduce_sum(*g, hx_mul(*g, hx_embedding_lookup(*g, t, *ids), *x), 0, NULL, false)));
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(*g, NULL, &sgd));
    hx_session_config cfg = config(c);
    return test_session_with(*g, &cfg, "dynamic reshard");
}

/* The keys every rank fed (those of a world of `size` ranks) and one never
 * seen; their rows and Adagrad state (as read on any rank) into rows, st. */
enum { RK = 5 };
static int64_t reshard_keys(int64_t *k)
{
    int64_t n = 0;
    for (int r = 0; r < size; r++) {
        k[n++] = 1000 + r;                                   /* twice a step: a row at step 0 */
        k[n++] = 3000 + r;                                   /* once a step: a row at step 1 */
        for (int s = 0; s < 3; s++) k[n++] = 2000 + 7 * r + s; /* once in all: counted, no row */
    }
    k[n++] = 42;
    return n;
}

static void read_keys(hx_embedding_table *t, const int64_t *k, int64_t n, float *rows, float *st)
{
    OK(hx_embedding_table_read_rows(t, k, n, rows));
    OK(hx_embedding_table_read_state(t, 0, k, n, st));
}

/* A DYNAMIC table's checkpoint at another layout: saved at this rank count
 * after 3 steps (min_count 2: keys fed twice a step or once every step
 * hold rows, keys fed once are still counting), it loads at half the
 * ranks and in one process with every key's row and state bitwise as
 * saved; a key counted once gets its row when fed once more (its count
 * moved with it), and one never seen reads as zeros. */
static void test_dynamic_reshard(void)
{
    char dir[256] = "", path[320];
    if (rank == 0 && !test_make_tmpdir(dir, sizeof dir, "hx-mpi-dyn")) CHECK(false, "no temporary folder");
    hx_coll *q = NULL;
    OK(hx__comm_broadcast(comm, dir, sizeof dir / 8, HX_DTYPE_I64, 0, &q));
    OK(hx__coll_wait(q));
    snprintf(path, sizeof path, "%s/dynr", dir);
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "dynr";
    ec.rows = 64;
    ec.dim = D;
    ec.ids = HX_EMBEDDING_IDS_DYNAMIC;
    ec.min_count = 2;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.comm = comm;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    ec.n_threads = 1;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    if (!t) return;
    hx_graph *g;
    hx_tensor *ids, *x;
    hx_session *s = dyn_session(t, 4, comm, &g, &ids, &x);
    float xv[4 * D];
    for (int i = 0; i < 4 * D; i++) xv[i] = 0.25f * (float)(i % 5) - 0.5f;
    for (int step = 0; step < 3 && s; step++) {
        int64_t k[4] = {1000 + rank, 1000 + rank, 3000 + rank, 2000 + 7 * rank + step};
        hx_feed f[2] = {{NULL, ids, k, sizeof k}, {NULL, x, xv, sizeof xv}};
        OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
    }
    int64_t keys[4 * RK + 1];
    int64_t n = reshard_keys(keys);
    float ref[2][(4 * RK + 1) * D] = {{0}}, got[2][(4 * RK + 1) * D] = {{0}}; /* past n keys: zeros */
    read_keys(t, keys, n, ref[0], ref[1]);
    fold(ref, sizeof ref);
    bool held = true;
    for (int64_t i = 0; i < n; i++) {
        bool any = false;
        for (int c = 0; c < D; c++) any |= ref[0][i * D + c] != 0;
        held &= any == (i < n - 1 && i % RK < 2);
    }
    CHECK(held, "before the save: the keys fed twice a step or every step hold rows, the others none");
    OK(hx_embedding_table_save(t, path));
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
    /* at half the ranks (of a world of 2 or 4; one rank: the same layout) */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    hx_comm_config hc = hx_comm_config_default();
    hc.mpi_comm = &half;
    hc.timeout_s = 60;
    hx_comm *hcomm = NULL;
    OK(hx_comm_create(&hc, &hcomm));
    ec.comm = hcomm;
    t = NULL;
    if (hcomm) OK(hx_embedding_table_create(&ec, &t));
    if (t) {
        OK(hx_embedding_table_load(t, path));
        read_keys(t, keys, n, got[0], got[1]);
        CHECK(!memcmp(ref, got, sizeof ref), "loaded at %d of %d ranks: a key's row or state differs from the "
              "save's", hx_comm_size(hcomm), size);
        OK(hx_embedding_table_free(t));
    }
    hx_comm_free(hcomm);
    MPI_Comm_free(&half);
    /* in one process: then each key counted once is fed once more */
    ec.comm = NULL;
    t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    if (t) {
        OK(hx_embedding_table_load(t, path));
        read_keys(t, keys, n, got[0], got[1]);
        CHECK(!memcmp(ref, got, sizeof ref), "loaded in one process: a key's row or state differs from the save's");
        s = dyn_session(t, 4, NULL, &g, &ids, &x);
        int64_t k[4] = {2000, 2005, 2002, 2000 + 7 * (size - 1) + 1};
        hx_feed f[2] = {{NULL, ids, k, sizeof k}, {NULL, x, xv, sizeof xv}};
        if (s) OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
        float r[4 * D];
        OK(hx_embedding_table_read_rows(t, k, 4, r));
        bool rows = true;
        for (int i = 0; i < 4; i++) {
            bool any = false;
            for (int c = 0; c < D; c++) any |= r[i * D + c] != 0;
            rows &= any == (i != 1); /* 2005 was never fed */
        }
        CHECK(rows, "keys counted once before the save hold rows when fed once more; a key never fed none");
        hx_session_free(s);
        hx_graph_free(g);
        OK(hx_embedding_table_free(t));
    }
    barrier();
    if (rank == 0 && *dir) test_remove_tree(dir);
}

/* A model of tables alone (no dense parameter): the ranks' gradients are
 * averaged all the same, so the table trains as one process would. The
 * Adagrad table ('item', accumulators from 0.1) with small gradients: its
 * steps grow with the gradient (LazyAdam's would not show a sum that is N
 * times too large). */
static void test_tables_only(void)
{
    const table_spec *sp = &specs[1];
    hx_embedding_table *t[2] = {make_table(sp, comm, NULL), make_table(sp, NULL, NULL)};
    hx_graph *g[2] = {NULL, NULL};
    hx_tensor *ids[2], *x[2];
    hx_session *s[2] = {NULL, NULL};
    for (int k = 0; k < 2 && t[0] && t[1]; k++) {
        int64_t b = k ? B : B / size, xs[2] = {b, D};
        g[k] = hx_graph_create();
        ids[k] = hx_graph_input(g[k], "ids", HX_DTYPE_I64, 1, &b);
        x[k] = hx_graph_input(g[k], "x", HX_DTYPE_F32, 2, xs);
        hx_tensor *loss = hx_reduce_mean(g[k], hx_mul(g[k], hx_embedding_lookup(g[k], t[k], ids[k]), x[k]), 0, NULL, false);
        OK(hx_graph_backward(g[k], loss));
        hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
        OK(hx_graph_apply_optimizer(g[k], NULL, &sgd));
        hx_session_config cfg = config(k ? NULL : comm);
        s[k] = test_session_with(g[k], &cfg, k ? "alone" : "sharded");
    }
    batch bt;
    float xv[B * D];
    for (int step = 0; step < 5 && s[0] && s[1]; step++) {
        make_batch(step, &bt);
        for (int i = 0; i < B * D; i++) xv[i] = 0.01f * (float)((i * 7 + step) % 11 - 5);
        int first = rank * (B / size);
        hx_feed fs[2] = {{NULL, ids[0], bt.ids[1] + first, sizeof(int64_t) * (size_t)(B / size)},
                         {NULL, x[0], xv + first * D, sizeof(float) * (size_t)(B / size * D)}};
        hx_feed fa[2] = {{NULL, ids[1], bt.ids[1], sizeof(int64_t) * B}, {NULL, x[1], xv, sizeof xv}};
        OK(hx_session_run(s[0], fs, 2, NULL, 0, HX_RUN_TRAIN));
        OK(hx_session_run(s[1], fa, 2, NULL, 0, HX_RUN_TRAIN));
    }
    if (s[0] && s[1]) {
        float *a = read_all(t[0], -1, sp->rows), *b = read_all(t[1], -1, sp->rows);
        double e = test_max_rel_f32(a, b, sp->rows * D);
        CHECK(e <= 1e-6, "a model of tables alone: the sharded table is %.3g off the lone one's", e);
        free(a);
        free(b);
    }
    for (int k = 0; k < 2; k++) {
        hx_session_free(s[k]);
        hx_graph_free(g[k]);
        OK(hx_embedding_table_free(t[k]));
    }
}

/* Ranks that create a table differently are all refused. */
static void test_mismatch(void)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "odd";
    ec.rows = 10;
    ec.dim = rank == size - 1 && size > 1 ? 5 : 4;
    ec.comm = comm;
    hx_embedding_table *t = NULL;
    hx_status st = hx_embedding_table_create(&ec, &t);
    if (size == 1) {
        CHECK(st == HX_OK, "one rank: %s", hx_last_error());
    } else {
        CHECK(st == HX_ERR_INVALID_ARGUMENT && !t && strstr(hx_last_error(), "differs"), "rank %d: %s: %s",
              rank, hx_status_name(st), hx_last_error());
    }
    OK(hx_embedding_table_free(t));
    ec.dim = 4;
    ec.shard_rank = size;
    ec.sharding = HX_EMBEDDING_SHARD_TABLE;
    st = hx_embedding_table_create(&ec, &t);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !t, "shard_rank %d of %d ranks: %s", size, size, hx_status_name(st));
    /* a table of one process in a data-parallel session is refused */
    ec.comm = NULL;
    ec.shard_rank = -1;
    OK(hx_embedding_table_create(&ec, &t));
    hx_graph *g = hx_graph_create();
    int64_t n = 2;
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *loss = hx_reduce_sum(g, hx_embedding_lookup(g, t, ids), 0, NULL, false);
    hx_embedding_optimizer o = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    OK(hx_embedding_table_set_optimizer(t, &o));
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &sgd));
    hx_session_config cfg = config(comm);
    hx_session *s = NULL;
    st = hx_session_create(g, &cfg, &s);
    CHECK(st == HX_ERR_UNSUPPORTED && strstr(hx_last_error(), "'odd'"), "a local table, data parallel: %s: %s",
          hx_status_name(st), hx_last_error());
    hx_session_free(s);
    /* ZeRO stages 1-2 take no tables yet */
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
    ec.comm = comm;
    OK(hx_embedding_table_create(&ec, &t));
    g = hx_graph_create();
    ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    int64_t ws[2] = {2, 4};
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
    loss = hx_reduce_sum(g, hx_mul(g, hx_embedding_lookup(g, t, ids), w), 0, NULL, false);
    OK(hx_graph_backward(g, loss));
    OK(hx_graph_apply_optimizer(g, NULL, &sgd));
    cfg.zero_stage = 1;
    s = NULL;
    st = hx_session_create(g, &cfg, &s);
    CHECK(st == HX_ERR_UNSUPPORTED && strstr(hx_last_error(), "ZeRO stage 1 with embedding tables"),
          "ZeRO stage 1 with a sharded table: %s: %s", hx_status_name(st), hx_last_error());
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
}

static int setup(void)
{
    if (!(comm = mpi_world_open(60, &rank, &size))) return 1;
    if (B % size) {
        fprintf(stderr, "mpi_shard: %d ranks do not divide the batch of %d\n", size, B);
        return 1;
    }
    return 0;
}

static void teardown(void) { mpi_world_close_with_digest(comm, rank, size, digest); }

int main(int argc, char **argv)
{
    static const test_case cases[] = {
        {"train_against_alone", test_train_against_alone},
        {"rows_collective", test_rows_collective},
        {"dynamic", test_dynamic},
        {"mismatch", test_mismatch},
        {"checkpoint", test_checkpoint},
        {"dynamic_reshard", test_dynamic_reshard},
        {"tables_only", test_tables_only},
        {"device_cache", test_device_cache},
        {"rank_cap", test_rank_cap},
        {"dynamic_cap", test_dynamic_cap},
    };
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "mpi_shard", cases, TEST_COUNT(cases), &o);
}
