/* The device cache of hot rows (hx_embedding_config.device_cache_rows):
 * how many rows it moves between the host table and the device, against
 * none. A LazyAdam table of dim 32 (f32), lazy, trained with bags of 26
 * ids for 4096 samples a step (Criteo's shape: bag-sum lookup, fused
 * backward and update), ids Zipf(1.05) or uniform over the rows, the next
 * step's ids handed over (prefetch) before each step:
 *   no_cache  the table alone: every step moves each distinct row it looks
 *             up to the device and its gradient back (2 rows a distinct id,
 *             HET's measure of a worker's traffic; the state stays on the
 *             host: dim floats each way); its step time
 *   cache     the same steps with caches of several fractions of the table,
 *             after warm-up steps that fill them: the hit rate, rows moved
 *             (misses copied in, dirty victims written back, each with its
 *             state: 3 x dim floats for LazyAdam; a miss on a lazy row never
 *             written copies nothing, its slot takes the initial value:
 *             counted apart as rows_init) a step over no_cache's, the misses
 *             plus write-backs over no_cache's (every miss counted as moved),
 *             bytes likewise, and the step time over no_cache's (the cost of
 *             the cache's bookkeeping on the host, where emu runs it); also
 *             the rows moved against a step that moves every id's row and
 *             gradient (2 x 106,496, no de-duplication), and the ceiling of
 *             the hit rate (ideal_hit_rate: the best static cache of that
 *             size, computed from the id distribution)
 * One JSON object per case.
 *   bench_devcache [--rows N (4000000)] [--steps N (20)] [--warmup N (10)]
 *                  [--eager 1: rows written at creation, so that every miss
 *                   copies a row, as in a long run's steady state] */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_ids.h"
#include "embedding/embedding.h"

enum { SAMPLES = 4096, BAG = 26, N = SAMPLES * BAG, DIM = 32 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void draw(bool zipfian, const zipf *z, int64_t rows, int64_t *ids)
{
    for (int64_t i = 0; i < N; i++) ids[i] = zipfian ? zipf_draw(z) - 1 : (int64_t)(rng_next() % (uint64_t)rows);
}

/* The hit rate over a step's distinct rows of the best cache of C rows
 * that never changes (the C most likely rows: the oracle static cache): a
 * row of probability q appears in a step of N ids with probability
 * 1 - (1 - q)^N. Uniform ids: C / rows. No policy that holds C rows beats
 * it by much on independent steps. */
static double ideal_hit_rate(bool zipfian, int64_t rows, int64_t C)
{
    if (!zipfian) return (double)C / (double)rows;
    double z = 0, in = 0, all = 0;
    for (int64_t k = 1; k <= rows; k++) z += pow((double)k, -1.05);
    for (int64_t k = 1; k <= rows; k++) {
        double p = -expm1((double)N * log1p(-pow((double)k, -1.05) / z));
        all += p;
        if (k <= C) in += p;
    }
    return in / all;
}

typedef struct result {
    double ms, hit_rate, looked_up, moved, bytes, ahead, init, misses, writebacks;
} result;

/* warmup + steps steps on a new table with a cache of cache_rows (0: none);
 * the measured steps' figures. */
static bool eager; /* --eager: every row written at creation (no lazy rows: every miss copies) */

static int run(bool zipfian, int64_t rows, int64_t cache_rows, int warmup, int steps, result *out)
{
    hx_embedding_config c = hx_embedding_config_default();
    c.rows = rows;
    c.dim = DIM;
    c.lazy_init = !eager;
    c.seed = 1;
    c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
    c.n_threads = 1;
    c.device_cache_rows = cache_rows;
    hx_embedding_table *t;
    if (hx_embedding_table_create(&c, &t)) {
        fprintf(stderr, "bench_devcache: %s\n", hx_last_error());
        return 1;
    }
    zipf z = zipf_make(1.05, (double)rows);
    rng_state = 0x853C49E6748FEA9Bull;
    int64_t *ids[2] = {malloc(N * sizeof(int64_t)), malloc(N * sizeof(int64_t))}, off[SAMPLES];
    float *outv = malloc((size_t)SAMPLES * DIM * sizeof *outv), *dout = malloc((size_t)SAMPLES * DIM * sizeof *dout);
    for (int64_t i = 0; i < (int64_t)SAMPLES * DIM; i++) dout[i] = (float)((i % 13) - 6) * 1e-3f;
    for (int b = 0; b < SAMPLES; b++) off[b] = (int64_t)b * BAG;
    hx_embedding_stats a, b;
    uint32_t *seen = calloc((size_t)rows, sizeof *seen); /* the step that last saw a row */
    double t0 = 0, looked = 0, counting = 0;
    int rc = 0;
    draw(zipfian, &z, rows, ids[0]);
    for (int k = 0; k < warmup + steps && !rc; k++) {
        if (k == warmup) {
            hx_embedding_table_stats(t, &a);
            t0 = now();
        }
        int cur = k & 1;
        if (k >= warmup) { /* distinct rows of the step (outside the timed work's share: cheap) */
            double c0 = now();
            for (int64_t i = 0; i < N; i++) looked += seen[ids[cur][i]] != (uint32_t)k + 1, seen[ids[cur][i]] = (uint32_t)k + 1;
            counting += now() - c0;
        }
        draw(zipfian, &z, rows, ids[!cur]);
        hx_embedding_table_prefetch(t, ids[!cur], N);
        hx_emb_query q = hx_emb_query_bags(ids[cur], N, off, SAMPLES, HX_EMB_SUM);
        q.train = 1;
        q.step = k + 1;
        hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
        if (hx__embedding_query(t, &q, outv, NULL, true, "bench lookup") ||
            hx__embedding_update(t, &q, &gi, 1, k + 1, "bench update")) {
            fprintf(stderr, "bench_devcache: %s\n", hx_last_error());
            rc = 1;
        }
    }
    double dt = now() - t0 - counting;
    looked /= steps;
    free(seen);
    hx_embedding_table_stats(t, &b);
    double moved = cache_rows ? (double)(b.device_rows_in - a.device_rows_in + b.device_rows_out - a.device_rows_out) / steps
                              : 2 * looked;
    double bytes = cache_rows ? (double)(b.device_bytes_in - a.device_bytes_in + b.device_bytes_out - a.device_bytes_out) / steps
                              : moved * DIM * 4; /* a row in, its gradient out: no state moves */
    int64_t lk = b.device_cache_lookups - a.device_cache_lookups;
    double init = (double)(b.device_rows_init - a.device_rows_init) / steps;
    *out = (result){dt / steps * 1e3, lk ? (double)(b.device_cache_hits - a.device_cache_hits) / (double)lk : 0, looked,
                    moved, bytes, (double)(b.device_rows_prefetched - a.device_rows_prefetched) / steps, init,
                    (double)(lk - (b.device_cache_hits - a.device_cache_hits)) / steps,
                    (double)(b.device_rows_out - a.device_rows_out) / steps};
    free(ids[0]);
    free(ids[1]);
    free(outv);
    free(dout);
    hx_embedding_table_free(t);
    return rc;
}

int main(int argc, char **argv)
{
    int64_t rows = 4000000;
    int steps = 20, warmup = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--eager")) eager = atoi(argv[i + 1]) != 0;
        else {
            fprintf(stderr, "usage: bench_devcache [--rows N] [--steps N] [--warmup N] [--eager 0|1]\n");
            return 2;
        }
    }
    if (rows < 1 || steps < 1 || warmup < 0) {
        fprintf(stderr, "bench_devcache: --rows and --steps must be >= 1, --warmup >= 0\n");
        return 2;
    }
    char model[128];
    double load;
    machine(model, sizeof model, &load);
    printf("{\"bench\":\"devcache\",\"case\":\"setup\",\"cpu\":\"%s\",\"load_1min\":%.2f,\"rows\":%lld,\"dim\":%d,"
           "\"samples\":%d,\"bag\":%d,\"optimizer\":\"lazy_adam\",\"steps\":%d,\"warmup\":%d,\"lazy\":%d}\n",
           model, load, (long long)rows, DIM, SAMPLES, BAG, steps, warmup, !eager);
    static const double fractions[] = {0.05, 0.1};
    int rc = 0;
    for (int zf = 1; zf >= 0 && !rc; zf--) {
        const char *idn = zf ? "zipf1.05" : "uniform";
        result base;
        if ((rc = run(zf, rows, 0, warmup, steps, &base))) break;
        printf("{\"bench\":\"devcache\",\"case\":\"no_cache\",\"ids\":\"%s\",\"rows\":%lld,\"ms_per_step\":%.2f,"
               "\"rows_looked_up_per_step\":%.0f,\"rows_moved_per_step\":%.0f,\"bytes_moved_per_step\":%.0f}\n",
               idn, (long long)rows, base.ms, base.looked_up, base.moved, base.bytes);
        fflush(stdout);
        for (int f = 0; f < 2 && !rc; f++) {
            int64_t cr = (int64_t)(fractions[f] * (double)rows);
            result r;
            if ((rc = run(zf, rows, cr, warmup, steps, &r))) break;
            printf("{\"bench\":\"devcache\",\"case\":\"cache\",\"ids\":\"%s\",\"rows\":%lld,\"cache_rows\":%lld,"
                   "\"cache_fraction\":%.2f,\"ms_per_step\":%.2f,\"hit_rate\":%.4f,\"rows_looked_up_per_step\":%.0f,"
                   "\"rows_moved_per_step\":%.0f,\"rows_ahead_per_step\":%.0f,\"bytes_moved_per_step\":%.0f,"
                   "\"misses_per_step\":%.0f,\"rows_init_per_step\":%.0f,\"writebacks_per_step\":%.0f,"
                   "\"moved_over_no_cache\":%.4f,\"fewer_rows_moved\":%.4f,"
                   "\"fewer_misses_plus_writebacks\":%.4f,\"fewer_rows_moved_than_every_id\":%.4f,"
                   "\"ideal_hit_rate\":%.4f,\"bytes_over_no_cache\":%.4f,"
                   "\"time_over_no_cache\":%.3f}\n",
                   idn, (long long)rows, (long long)cr, fractions[f], r.ms, r.hit_rate, r.looked_up, r.moved,
                   r.ahead, r.bytes, r.misses, r.init, r.writebacks, r.moved / base.moved, 1 - r.moved / base.moved,
                   1 - (r.misses + r.writebacks) / base.moved, 1 - r.moved / (2.0 * N),
                   ideal_hit_rate(zf, rows, cr), r.bytes / base.bytes, r.ms / base.ms);
            fflush(stdout);
        }
    }
    return rc;
}
