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
 * work, throughput does not scale with ranks: reported, not tuned to. */
#define _GNU_SOURCE
#include "bench/bench_ids.h"
#include "bench/mpi_launch.h"
#include "embedding/embedding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROWS = 1000000, DIM = 16, SAMPLES = 4096, FEATURES = 26, RUNS = 10 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static hx_embedding_table *table(hx_comm *c)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "criteo";
    ec.rows = ROWS;
    ec.dim = DIM;
    ec.lazy_init = true;
    ec.n_threads = 1;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.comm = c;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    hx_embedding_table *t = NULL;
    if (hx_embedding_table_create(&ec, &t)) fprintf(stderr, "bench_ps: %s\n", hx_last_error());
    return t;
}

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
    hx_embedding_table *sh = table(comm), *alone = table(NULL);
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
    free(ids);
    free(out);
    free(dout);
    hx_embedding_table_free(alone);
    hx_embedding_table_free(sh);
    hx_comm_free(comm);
    return st ? 1 : 0;
}

int main(int argc, char **argv) { return bench_mpi_main("bench_ps", argc, argv, rank_main); }
