/* Sharded embedding tables, collective mode, at 1, 2 and 4 ranks: a 1M x 16
 * f32 table (lazy) sharded row-wise, Criteo-schema batches (a global batch
 * of 4096 samples x 26 features, one id each: 106,496 ids, each rank its
 * 4096/N samples), ids uniform or Zipf(1.05) over the rows. Per rank and
 * case, one JSON object: lookups/s of the sharded lookup (this rank's ids,
 * de-duplicated, to their owners and the rows back) against this rank's
 * lookup of the same ids in a table of its own in the same run (the
 * single-process ceiling, no messages), and the bytes this rank sent per
 * lookup with de-duplication and without (every position's id and row),
 * beside the theoretical bytes of the ids and rows that leave the rank.
 * Plus the bytes of the sparse update (each unique id's summed gradient to
 * its owner). ./build.sh bench ps runs this program, which runs itself
 * under mpirun --oversubscribe -np N. On a 2-core machine shared with other
 * work, throughput does not scale with ranks: reported, not tuned to.
 *
 * Then training steps (a training lookup, then the sparse Adagrad update
 * of its rows; 20 timed after one that warms up) on the Zipf ids, "bench": "ps_train", one line per rank:
 * collective mode at N ranks (each its 4096/N samples), and server mode
 * (hx_ps: the last rank serves, the N - 1 others each train 4096/(N - 1)
 * samples) at staleness 0 and 4, in the same job; samples/s per rank or
 * worker against the same rank's steps on a table of its own (the
 * ceiling, no messages), bytes a step (collective: what the rank sent;
 * server mode: the worker's pulls, rows back included, and pushes), and
 * the most steps a pull ran ahead of the applied pushes. Server mode runs
 * again with each worker's cache of 65536 pulled rows ("server_cache",
 * hx_ps_config.cache_rows): rows pulled a step, rows the cache served
 * unasked (staleness) or the servers found current, and the hit rate,
 * kept / (kept + pulled).
 *
 * `bench_ps devcache` (./build.sh bench ps devcache) runs instead, at 2
 * and 3 ranks, server mode with one worker (the other ranks serve) and a
 * device cache of 131072, 262144 or 524288 rows (device_cache_rows: 13%,
 * 26% or 52% of the table) in front of a second
 * table, "bench": "ps_devcache": each step a fresh global batch (4096 x 26
 * ids, uniform or Zipf(1.05)), trained on the table without the cache and
 * then on the one with it (eager tables, so that every miss moves a
 * row; interleaved, 50 steps timed after one that warms up; the cached
 * table reads the next batch's rows ahead). Per case:
 * rows moved a step without the cache (rows pulled, and as many gradient
 * rows pushed) and with it (rows fetched with their state, rows written
 * back), bytes a step both ways (the worker's messages), the hit rate, and
 * samples/s with the cache over without (same run, interleaved).
 *
 * `bench_ps devcache_workers` does the same at 3 ranks, two workers (each
 * 2048 of the 4096 samples) and one server, with the hot rows on both
 * workers (embedding/ps_hot.c) in caches of 250000 and 500000 rows (25%,
 * 50%), "bench": "ps_devcache_workers", a line per worker: rows moved
 * with the cache are the rows fetched and written back plus the rows not
 * cached, pulled and their gradients pushed; bytes a step add what the
 * worker sent the other in the exchange (rows touched, cached gradients).
 * Twenty steps warm up, not counted (a row is admitted when some worker
 * touches it a second time, in the same step or the next, so the caches
 * fill over steps).
 *
 * `bench_ps devcache_shards` does it in collective mode at 2 ranks (each
 * 2048 samples, the 1M x 16 Adagrad table sharded row-wise, eager), with
 * the hot rows on both ranks (embedding/shard_hot.c) in caches of 250000
 * and 500000 rows, "bench": "shard_devcache", a line per rank: rows moved
 * a step without the cache are the ids this rank sent other owners (a row
 * back in the lookup, a gradient row out in the update); with it, those
 * of the rows not cached plus the cached rows' gradients to the other rank
 * and the admitted rows from it (write-backs move nothing: every rank
 * holds the replica); bytes a step are what the rank sent (the cache's
 * exchange included); twenty steps warm up, not counted. */
#define _GNU_SOURCE
#include "bench/bench_ids.h"
#include "bench/mpi_launch.h"
#include "embedding/embedding.h"
#include "embedding/ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROWS = 1000000, DIM = 16, SAMPLES = 4096, FEATURES = 26, RUNS = 10, STEPS = 20, CACHE_ROWS = 65536,
       DEV_CACHE_ROWS = 131072 /* a step's 106,496 uniform ids touch about 101,000 rows */, DEV_STEPS = 50,
       DEV_WARM_WORKERS = 20 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The 1M x 16 table (lazy: rows written as they are first updated), of
 * comm (collective) or ps (server mode), with a device cache of
 * cache_rows (0: none). */
static hx_embedding_table *table_as(hx_comm *c, hx_ps *ps, bool lazy, int64_t cache_rows)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = cache_rows ? "criteo-cached" : "criteo";
    ec.rows = ROWS;
    ec.dim = DIM;
    ec.lazy_init = lazy;
    ec.device_cache_rows = cache_rows;
    ec.n_threads = 1;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.comm = c;
    ec.ps = ps;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    hx_embedding_table *t = NULL;
    if (hx_embedding_table_create(&ec, &t)) fprintf(stderr, "bench_ps: %s\n", hx_last_error());
    return t;
}

static hx_embedding_table *table(hx_comm *c, hx_ps *ps) { return table_as(c, ps, true, 0); }

/* Best seconds of RUNS lookups of q on t (the sharded one collective). */
static double time_lookup(hx_embedding_table *t, const hx_emb_query *q, float *out, hx_status *st)
{
    double best = 1e30;
    hx_emb_err err;
    for (int r = 0; r < RUNS && !*st; r++) {
        double t0 = now();
        *st = hx_emb_table_lookup(t->impl, q, out, NULL, &err);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    if (*st) fprintf(stderr, "bench_ps: %s\n", err.msg);
    return best;
}

/* Seconds of STEPS training steps on t: a training lookup of q, then the
 * sparse update of its rows with gradient dout. */
static double time_steps(hx_embedding_table *t, const hx_emb_query *q, float *out, const float *dout,
                         hx_status *st)
{
    hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    hx_emb_err err;
    hx_emb_query tq = *q;
    tq.train = 1;
    double t0 = now();
    for (int s = -1; s < STEPS && !*st; s++) { /* step -1 warms up (lazy rows written): not timed */
        if (s == 0) t0 = now();
        *st = hx_emb_table_lookup(t->impl, &tq, out, NULL, &err);
        if (!*st) *st = hx_emb_table_backward_update(t->impl, &tq, &gi, s + 3, NULL, &err);
    }
    if (*st) fprintf(stderr, "bench_ps: %s\n", err.msg);
    return now() - t0;
}

/* ps: a worker's server-mode stats (rows pulled and what its cache kept
 * back), NULL in collective mode. */
static void train_line(const char *mode, int n, int rank, int staleness, int64_t samples, double secs,
                       double alone_secs, double bytes, int64_t stale, const hx_ps_stats *ps, int64_t cache_rows,
                       const char *model, double load)
{
    int64_t kept = ps ? ps->cache_hits + ps->cache_current : 0, rows = ps ? ps->rows_pulled : 0;
    printf("{\"bench\": \"ps_train\", \"mode\": \"%s\", \"ranks\": %d, \"rank\": %d, \"staleness\": %d, "
           "\"ids\": \"zipf1.05\", \"samples\": %lld, \"steps\": %d, \"samples_per_s\": %.0f, "
           "\"alone_samples_per_s\": %.0f, \"ratio_to_alone\": %.3f, \"bytes_per_step\": %.0f, "
           "\"max_staleness\": %lld, \"cache_rows\": %lld, \"rows_pulled_per_step\": %.0f, "
           "\"cache_hits_per_step\": %.0f, \"cache_current_per_step\": %.0f, \"cache_hit_rate\": %.4f, "
           "\"machine\": \"%s\", \"load\": %.2f}\n",
           mode, n, rank, staleness, (long long)samples, STEPS, samples * STEPS / secs,
           samples * STEPS / alone_secs, alone_secs / secs, bytes, (long long)stale, (long long)cache_rows,
           (double)rows / (STEPS + 1), ps ? (double)ps->cache_hits / (STEPS + 1) : 0.0,
           ps ? (double)ps->cache_current / (STEPS + 1) : 0.0, kept + rows ? (double)kept / (double)(kept + rows) : 0.0,
           model, load);
    fflush(stdout);
}

/* Server mode at staleness k over comm (the last rank serves): each worker
 * trains its 4096/(N - 1) samples of the global batch ids. */
static hx_status server_mode(hx_comm *comm, int k, int64_t cache_rows, const int64_t *ids, hx_embedding_table *alone,
                             float *out, const float *dout, const char *model, double load)
{
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = comm;
    pc.staleness = k;
    pc.cache_rows = cache_rows;
    hx_ps *ps = NULL;
    hx_status st = hx_ps_create(&pc, &ps);
    hx_embedding_table *t = st ? NULL : table(NULL, ps);
    if (!st && !t) st = HX_ERR_OUT_OF_MEMORY;
    if (st) fprintf(stderr, "bench_ps: %s\n", hx_last_error());
    if (!st && hx_ps_is_server(ps)) {
        if ((st = hx_ps_serve(ps))) fprintf(stderr, "bench_ps: %s\n", hx_last_error());
    } else if (!st) {
        int n = hx_comm_size(comm), W = n - 1, w = hx_ps_index(ps);
        int64_t samples = SAMPLES / W, nid = samples * FEATURES;
        hx_emb_query q = hx_emb_query_rows(ids + w * nid, nid);
        double t_alone = time_steps(alone, &q, out, dout, &st);
        double t_ps = st ? 1 : time_steps(t, &q, out, dout, &st);
        hx_ps_stats ps_st;
        hx_ps_stats_get(ps, &ps_st);
        if (!st)
            train_line(cache_rows ? "server_cache" : "server", n, hx_comm_rank(comm), k, samples, t_ps, t_alone,
                       (double)(ps_st.pull_bytes + ps_st.push_bytes) / (STEPS + 1), ps_st.max_staleness, &ps_st,
                       cache_rows, model, load);
        hx_status f = hx_ps_finish(ps);
        if (!st) st = f;
    }
    hx_embedding_table_free(t);
    hx_ps_free(ps);
    return st;
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int rank_main(void)
{
    hx_comm *comm = NULL;
    if (hx_comm_create(NULL, &comm)) {
        fprintf(stderr, "bench_ps: %s\n", hx_last_error());
        return 1;
    }
    int rank = hx_comm_rank(comm), n = hx_comm_size(comm);
    hx_embedding_table *sh = table(comm, NULL), *alone = table(NULL, NULL);
    int64_t nid = (int64_t)SAMPLES / n * FEATURES;
    int64_t *ids = malloc(sizeof *ids * (size_t)SAMPLES * FEATURES);
    float *out = malloc(sizeof *out * (size_t)(nid * DIM)), *dout = malloc(sizeof *dout * (size_t)(nid * DIM));
    hx_status st = sh && alone && ids && out && dout ? HX_OK : HX_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < nid * DIM && !st; i++) dout[i] = 1e-3f;
    char model[128];
    double load;
    machine(model, sizeof model, &load);
    const char *dists[2] = {"uniform", "zipf1.05"};
    hx_emb_shard *s = sh ? hx_emb_as_shard(sh->impl) : NULL;
    for (int d = 0; d < 2 && !st; d++) {
        /* the global batch, the same on every rank; this rank's samples */
        rng_state = 0x853C49E6748FEA9Bull;
        zipf z = zipf_make(1.05, (double)ROWS);
        for (int64_t i = 0; i < (int64_t)SAMPLES * FEATURES; i++)
            ids[i] = d ? zipf_draw(&z) - 1 : (int64_t)(rng_next() % ROWS);
        const int64_t *mine = ids + rank * nid;
        hx_emb_query q = hx_emb_query_rows(mine, nid);
        /* unique ids and those owned elsewhere: what must leave this rank */
        int64_t uniq = 0, away = 0, away_all = 0;
        int64_t *sorted = malloc(sizeof *sorted * (size_t)nid);
        if (!sorted) st = HX_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < nid && sorted; i++) sorted[i] = mine[i];
        if (sorted) qsort(sorted, (size_t)nid, sizeof *sorted, cmp_id);
        for (int64_t i = 0; i < nid && sorted; i++) {
            bool first = i == 0 || sorted[i] != sorted[i - 1];
            uniq += first;
            away += first && sorted[i] % n != rank;
            away_all += sorted[i] % n != rank;
        }
        free(sorted);
        double t_alone = time_lookup(alone, &q, out, &st);
        hx_emb_shard_stats a, b, c, e;
        hx_emb_shard_set_dedup(s, true);
        hx_emb_shard_stats_get(s, &a);
        double t_dedup = time_lookup(sh, &q, out, &st);
        hx_emb_shard_stats_get(s, &b);
        hx_emb_shard_set_dedup(s, false);
        double t_plain = time_lookup(sh, &q, out, &st);
        hx_emb_shard_stats_get(s, &c);
        hx_emb_shard_set_dedup(s, true);
        /* one sparse update: the unique ids' summed gradients to their owners */
        hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
        hx_emb_err err;
        if (!st && (st = hx_emb_table_backward_update(sh->impl, &q, &gi, 1, NULL, &err)))
            fprintf(stderr, "bench_ps: %s\n", err.msg);
        hx_emb_shard_stats_get(s, &e);
        if (st) break;
        /* the request's share of the traffic: each id owned elsewhere goes
         * out (8 bytes) and its row comes back (64): with the ids evenly
         * spread, what a rank sends (its ids, the rows others ask of it)
         * is about this */
        double row_bytes = DIM * 4.0, id_bytes = 8.0;
        printf("{\"bench\": \"ps\", \"ranks\": %d, \"rank\": %d, \"ids\": \"%s\", \"lookup_ids\": %lld, "
               "\"unique_ids\": %lld, \"unique_ids_elsewhere\": %lld, "
               "\"lookups_per_s\": %.0f, \"alone_lookups_per_s\": %.0f, \"ratio_to_alone\": %.3f, "
               "\"lookups_per_s_no_dedup\": %.0f, "
               "\"bytes_per_lookup\": %.0f, \"bytes_per_lookup_no_dedup\": %.0f, \"dedup_saving\": %.2f, "
               "\"request_bytes_elsewhere\": %.0f, \"request_bytes_elsewhere_no_dedup\": %.0f, "
               "\"bytes_ratio_to_request\": %.3f, "
               "\"update_bytes\": %.0f, \"machine\": \"%s\", \"load\": %.2f}\n",
               n, rank, dists[d], (long long)nid, (long long)uniq, (long long)away, nid / t_dedup, nid / t_alone,
               t_alone / t_dedup, nid / t_plain, (double)(b.bytes_sent - a.bytes_sent) / RUNS,
               (double)(c.bytes_sent - b.bytes_sent) / RUNS,
               c.bytes_sent > b.bytes_sent && b.bytes_sent > a.bytes_sent
                   ? (double)(c.bytes_sent - b.bytes_sent) / (double)(b.bytes_sent - a.bytes_sent)
                   : 1.0,
               away * (id_bytes + row_bytes), away_all * (id_bytes + row_bytes),
               away ? (double)(b.bytes_sent - a.bytes_sent) / RUNS / (away * (id_bytes + row_bytes)) : 0.0,
               (double)(e.bytes_sent - c.bytes_sent), model, load);
        fflush(stdout);
    }
    /* training steps on the Zipf ids (the last global batch drawn):
     * collective mode, then server mode at staleness 0 and 4, without and
     * with the workers' caches */
    if (!st) {
        hx_emb_query q = hx_emb_query_rows(ids + rank * nid, nid);
        hx_emb_shard_stats a, b;
        hx_emb_shard_stats_get(s, &a);
        double t_coll = time_steps(sh, &q, out, dout, &st);
        hx_emb_shard_stats_get(s, &b);
        double t_alone = time_steps(alone, &q, out, dout, &st);
        if (!st)
            train_line("collective", n, rank, 0, SAMPLES / n, t_coll, t_alone,
                       (double)(b.bytes_sent - a.bytes_sent) / (STEPS + 1), 0, NULL, 0, model, load);
    }
    for (int run = 0; run < 4 && !st && n > 1; run++) {
        int k = run % 2 ? 4 : 0;
        int64_t cache = run >= 2 ? CACHE_ROWS : 0;
        float *o2 = malloc(sizeof *o2 * (size_t)(SAMPLES / (n - 1) * FEATURES * DIM));
        float *d2 = malloc(sizeof *d2 * (size_t)(SAMPLES / (n - 1) * FEATURES * DIM));
        st = o2 && d2 ? HX_OK : HX_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; d2 && i < (int64_t)SAMPLES / (n - 1) * FEATURES * DIM; i++) d2[i] = 1e-3f;
        if (!st) st = server_mode(comm, k, cache, ids, alone, o2, d2, model, load);
        free(o2);
        free(d2);
    }
    free(ids);
    free(out);
    free(dout);
    hx_embedding_table_free(alone);
    hx_embedding_table_free(sh);
    hx_comm_free(comm);
    return st ? 1 : 0;
}

/* One training step of q on t (a training lookup, then the update). */
static hx_status train_step(hx_embedding_table *t, const hx_emb_query *q, float *out, const float *dout, int64_t step)
{
    hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    hx_emb_err err;
    hx_emb_query tq = *q;
    tq.train = 1;
    hx_status st = hx_emb_table_lookup(t->impl, &tq, out, NULL, &err);
    if (!st) st = hx_emb_table_backward_update(t->impl, &tq, &gi, step, NULL, &err);
    if (st) fprintf(stderr, "bench_ps: %s\n", err.msg);
    return st;
}

/* The worker's bytes both ways so far. */
static uint64_t ps_bytes(hx_ps *ps)
{
    hx_ps_stats s;
    hx_ps_stats_get(ps, &s);
    return s.pull_bytes + s.push_bytes;
}

/* Bytes the worker's cache of hot rows (several workers) sent the other
 * workers so far; 0 for any other table. */
static uint64_t exchanged(hx_embedding_table *t)
{
    hx_emb_devcache_stats ds;
    hx_emb_ps *c = hx_emb_as_ps(t->impl);
    return c && hx__ps_device_stats(c, &ds) ? ds.bytes_exchanged : 0;
}

/* Server mode over comm, `servers` of its ranks serving and the others
 * training (each its share of the global batch): the ids of distribution
 * d, a fresh global batch a step, trained on a table without the device
 * cache and on one with it, interleaved. */
static hx_status devcache_mode(hx_comm *comm, int d, int64_t cache_rows, int servers, const char *model,
                               double load)
{
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = comm;
    pc.servers = servers;
    hx_ps *ps = NULL;
    hx_status st = hx_ps_create(&pc, &ps);
    /* eager rows: every miss moves a row, as on a trained table (a lazy
     * row never written would come in as a flag) */
    hx_embedding_table *plain = st ? NULL : table_as(NULL, ps, false, 0);
    hx_embedding_table *cached = st ? NULL : table_as(NULL, ps, false, cache_rows);
    if (!st && (!plain || !cached)) st = HX_ERR_OUT_OF_MEMORY;
    if (!st && hx_ps_is_server(ps)) {
        if ((st = hx_ps_serve(ps))) fprintf(stderr, "bench_ps: %s\n", hx_last_error());
    } else if (!st) {
        int W = hx_comm_size(comm) - servers, w = hx_ps_index(ps);
        int64_t nid = (int64_t)SAMPLES * FEATURES, mine = nid / W;
        int64_t *ids = malloc(sizeof *ids * (size_t)(2 * nid));
        float *out = malloc(sizeof *out * (size_t)(nid * DIM)), *dout = malloc(sizeof *dout * (size_t)(nid * DIM));
        if (!ids || !out || !dout) st = HX_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < nid * DIM && !st; i++) dout[i] = 1e-3f;
        rng_state = 0x853C49E6748FEA9Bull + (uint64_t)d;
        zipf z = zipf_make(1.05, (double)ROWS);
        int64_t *cur = ids, *next = ids + nid;
        for (int64_t i = 0; i < nid && !st; i++) next[i] = d ? zipf_draw(&z) - 1 : (int64_t)(rng_next() % ROWS);
        double t_plain = 0, t_cached = 0;
        uint64_t b_plain = 0, b_cached = 0;
        int64_t r_plain = 0, r_pulled = 0;
        hx_ps_stats p0, p1, p2;
        hx_embedding_stats c0 = {0}, c1 = {0};
        /* steps before 0 warm up, not counted: one, or with several workers 20 (their caches admit a row
           the second time they see it, so they fill over steps) */
        for (int s = W > 1 ? -DEV_WARM_WORKERS : -1; s < DEV_STEPS && !st; s++) {
            int64_t *tmp = cur;
            cur = next;
            next = tmp;
            for (int64_t i = 0; i < nid; i++) next[i] = d ? zipf_draw(&z) - 1 : (int64_t)(rng_next() % ROWS);
            hx_emb_query q = hx_emb_query_rows(cur + w * mine, mine); /* this worker's samples */
            if (s == 0 && (st = hx_embedding_table_stats(cached, &c0))) break;
            uint64_t b = ps_bytes(ps);
            hx_ps_stats_get(ps, &p0);
            double t0 = now();
            st = train_step(plain, &q, out, dout, s + 3 + DEV_WARM_WORKERS);
            double t1 = now();
            hx_ps_stats_get(ps, &p1);
            uint64_t b1 = ps_bytes(ps);
            uint64_t x1 = exchanged(cached);
            if (!st && (st = hx_embedding_table_prefetch(cached, next + w * mine, mine))) /* the next rows ahead */
                fprintf(stderr, "bench_ps: %s\n", hx_last_error());
            if (!st) st = train_step(cached, &q, out, dout, s + 3 + DEV_WARM_WORKERS);
            double t2 = now();
            hx_ps_stats_get(ps, &p2);
            if (s < 0) continue;
            t_plain += t1 - t0;
            t_cached += t2 - t1;
            b_plain += b1 - b;
            b_cached += ps_bytes(ps) - b1 + exchanged(cached) - x1;
            r_plain += 2 * (p1.rows_pulled - p0.rows_pulled); /* pulled, and each one's gradient pushed */
            r_pulled += p2.rows_pulled - p1.rows_pulled;      /* the cached table's: fetched and pulled */
        }
        if (!st) st = hx_embedding_table_stats(cached, &c1);
        int64_t lookups = c1.device_cache_lookups - c0.device_cache_lookups;
        int64_t in = c1.device_rows_in - c0.device_rows_in;
        /* with several workers the rows not cached are still pulled, and their gradients pushed */
        int64_t moved = in + c1.device_rows_out - c0.device_rows_out + (W > 1 ? 2 * (r_pulled - in) : 0);
        if (!st)
            printf("{\"bench\": \"%s\", \"ranks\": %d, \"servers\": %d, \"worker\": %d, \"ids\": \"%s\", "
                   "\"samples\": %d, "
                   "\"steps\": %d, \"cache_rows\": %d, \"rows_moved_per_step\": %.0f, "
                   "\"rows_moved_per_step_no_cache\": %.0f, \"moved_over_no_cache\": %.4f, "
                   "\"rows_in_per_step\": %.0f, \"rows_out_per_step\": %.0f, \"rows_ahead_per_step\": %.0f, "
                   "\"hit_rate\": %.4f, \"bytes_per_step\": %.0f, \"bytes_per_step_no_cache\": %.0f, "
                   "\"bytes_over_no_cache\": %.4f, \"samples_per_s\": %.0f, \"samples_per_s_no_cache\": %.0f, "
                   "\"time_over_no_cache\": %.3f, \"machine\": \"%s\", \"load\": %.2f}\n",
                   W > 1 ? "ps_devcache_workers" : "ps_devcache", hx_comm_size(comm), pc.servers, w,
                   d ? "zipf1.05" : "uniform", SAMPLES, DEV_STEPS, (int)cache_rows,
                   (double)moved / DEV_STEPS, (double)r_plain / DEV_STEPS, r_plain ? (double)moved / (double)r_plain : 0.0,
                   (double)(c1.device_rows_in - c0.device_rows_in) / DEV_STEPS,
                   (double)(c1.device_rows_out - c0.device_rows_out) / DEV_STEPS,
                   (double)(c1.device_rows_prefetched - c0.device_rows_prefetched) / DEV_STEPS,
                   lookups ? (double)(c1.device_cache_hits - c0.device_cache_hits) / (double)lookups : 0.0,
                   (double)b_cached / DEV_STEPS, (double)b_plain / DEV_STEPS, b_plain ? (double)b_cached / (double)b_plain : 0.0,
                   SAMPLES * DEV_STEPS / t_cached, SAMPLES * DEV_STEPS / t_plain, t_cached / t_plain, model, load);
        fflush(stdout);
        free(ids);
        free(out);
        free(dout);
        hx_status f = hx_ps_finish(ps);
        if (!st) st = f;
    }
    hx_embedding_table_free(cached);
    hx_embedding_table_free(plain);
    hx_ps_free(ps);
    return st;
}

/* The shard's counts of t (collective) and its cache's bytes sent. */
static void shard_counts(hx_embedding_table *t, hx_emb_shard_stats *ss, uint64_t *hot_bytes)
{
    hx_emb_shard *s = hx_emb_as_shard(t->impl);
    hx_emb_devcache_stats ds = {0};
    hx_emb_shard_stats_get(s, ss);
    *hot_bytes = hx_emb_shard_hot_stats(s, &ds) ? ds.bytes_exchanged : 0;
}

/* Collective mode over comm, every rank its share of the global batch:
 * the ids of distribution d, a fresh global batch a step, trained on a
 * table without the device cache and on one with it, interleaved. */
static hx_status shards_mode(hx_comm *comm, int d, int64_t cache_rows, const char *model, double load)
{
    int N = hx_comm_size(comm), rank = hx_comm_rank(comm);
    hx_embedding_table *plain = table_as(comm, NULL, false, 0), *cached = table_as(comm, NULL, false, cache_rows);
    int64_t nid = (int64_t)SAMPLES * FEATURES, mine = nid / N;
    int64_t *ids = malloc(sizeof *ids * (size_t)(2 * nid));
    float *out = malloc(sizeof *out * (size_t)(nid * DIM)), *dout = malloc(sizeof *dout * (size_t)(nid * DIM));
    hx_status st = plain && cached && ids && out && dout ? HX_OK : HX_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < nid * DIM && !st; i++) dout[i] = 1e-3f;
    rng_state = 0x853C49E6748FEA9Bull + (uint64_t)d;
    zipf z = zipf_make(1.05, (double)ROWS);
    double t_plain = 0, t_cached = 0;
    int64_t r_plain = 0, r_cached = 0;
    uint64_t b_plain = 0, b_cached = 0, hits = 0, lookups = 0;
    for (int s = -DEV_WARM_WORKERS; s < DEV_STEPS && !st; s++) {
        for (int64_t i = 0; i < nid; i++) ids[i] = d ? zipf_draw(&z) - 1 : (int64_t)(rng_next() % ROWS);
        hx_emb_query q = hx_emb_query_rows(ids + rank * mine, mine); /* this rank's samples */
        hx_emb_shard_stats p0, p1, c0, c1;
        uint64_t h0, h1, hb;
        hx_emb_devcache_stats d0 = {0}, d1 = {0};
        hx_emb_shard *cs = hx_emb_as_shard(cached->impl);
        shard_counts(plain, &p0, &hb);
        shard_counts(cached, &c0, &h0);
        hx_emb_shard_hot_stats(cs, &d0);
        double t0 = now();
        st = train_step(plain, &q, out, dout, s + 1 + DEV_WARM_WORKERS);
        double t1 = now();
        if (!st) st = train_step(cached, &q, out, dout, s + 1 + DEV_WARM_WORKERS);
        double t2 = now();
        shard_counts(plain, &p1, &hb);
        shard_counts(cached, &c1, &h1);
        hx_emb_shard_hot_stats(cs, &d1);
        if (s < 0) continue;
        t_plain += t1 - t0;
        t_cached += t2 - t1;
        r_plain += p1.ids_remote - p0.ids_remote;
        r_cached += c1.ids_remote - c0.ids_remote + c1.hot_rows - c0.hot_rows;
        b_plain += p1.bytes_sent - p0.bytes_sent;
        b_cached += c1.bytes_sent - c0.bytes_sent + h1 - h0;
        hits += d1.hits - d0.hits;
        lookups += d1.lookups - d0.lookups;
    }
    if (!st)
        printf("{\"bench\": \"shard_devcache\", \"ranks\": %d, \"rank\": %d, \"ids\": \"%s\", \"samples\": %d, "
               "\"steps\": %d, \"cache_rows\": %d, \"rows_moved_per_step\": %.0f, "
               "\"rows_moved_per_step_no_cache\": %.0f, \"moved_over_no_cache\": %.4f, \"hit_rate\": %.4f, "
               "\"bytes_per_step\": %.0f, \"bytes_per_step_no_cache\": %.0f, \"bytes_over_no_cache\": %.4f, "
               "\"samples_per_s\": %.0f, \"samples_per_s_no_cache\": %.0f, \"time_over_no_cache\": %.3f, "
               "\"machine\": \"%s\", \"load\": %.2f}\n",
               N, rank, d ? "zipf1.05" : "uniform", SAMPLES, DEV_STEPS, (int)cache_rows, (double)r_cached / DEV_STEPS,
               (double)r_plain / DEV_STEPS, r_plain ? (double)r_cached / (double)r_plain : 0.0,
               lookups ? (double)hits / (double)lookups : 0.0, (double)b_cached / DEV_STEPS,
               (double)b_plain / DEV_STEPS, b_plain ? (double)b_cached / (double)b_plain : 0.0,
               SAMPLES * DEV_STEPS / t_cached, SAMPLES * DEV_STEPS / t_plain, t_cached / t_plain, model, load);
    fflush(stdout);
    free(ids);
    free(out);
    free(dout);
    hx_embedding_table_free(cached);
    hx_embedding_table_free(plain);
    return st;
}

/* which: "devcache" (one worker), "devcache_workers" or "devcache_shards". */
static int devcache_main(const char *which)
{
    hx_comm *comm = NULL;
    if (hx_comm_create(NULL, &comm)) {
        fprintf(stderr, "bench_ps: %s\n", hx_last_error());
        return 1;
    }
    char model[128];
    double load;
    machine(model, sizeof model, &load);
    bool workers = !strcmp(which, "devcache_workers"), shards = !strcmp(which, "devcache_shards");
    hx_status st = HX_OK;
    for (int c = 0; c < (workers || shards ? 2 : 3); c++)
        for (int d = 0; d < 2; d++) { /* all on every rank: the ps of each is collective */
            hx_status s = shards    ? shards_mode(comm, d, ROWS / 4 << c, model, load) /* 25%, 50% */
                          : workers ? devcache_mode(comm, d, ROWS / 4 << c, 1, model, load)
                                    : devcache_mode(comm, d, DEV_CACHE_ROWS << c, hx_comm_size(comm) - 1, model, load);
            if (!st) st = s;
        }
    hx_comm_free(comm);
    return st ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "devcache")) { /* at 2 and 3 ranks: one worker */
        static const int ranks[2] = {2, 3};
        return bench_mpi_main_at("bench_ps", argc, argv, rank_main, ranks, 2, "-x BENCH_PS_CASE=devcache");
    }
    if (argc > 1 && !strcmp(argv[1], "devcache_workers")) { /* at 3 ranks: two workers, one server */
        static const int ranks[1] = {3};
        return bench_mpi_main_at("bench_ps", argc, argv, rank_main, ranks, 1, "-x BENCH_PS_CASE=devcache_workers");
    }
    if (argc > 1 && !strcmp(argv[1], "devcache_shards")) { /* at 2 ranks, collective */
        static const int ranks[1] = {2};
        return bench_mpi_main_at("bench_ps", argc, argv, rank_main, ranks, 1, "-x BENCH_PS_CASE=devcache_shards");
    }
    const char *which = getenv("BENCH_PS_CASE");
    if (argc > 1 && !strcmp(argv[1], "--rank") && which && !strncmp(which, "devcache", 8))
        return devcache_main(which);
    return bench_mpi_main("bench_ps", argc, argv, rank_main);
}
