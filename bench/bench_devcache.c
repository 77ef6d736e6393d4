/* The device cache of hot rows (hx_embedding_config.device_cache_rows):
 * how many rows it moves between the host table and the device, against
 * none. A LazyAdam table of dim 32 (f32), lazy, trained with bags of 26
 * ids for 4096 samples a step (Criteo's shape: bag-sum lookup, fused
 * backward and update), ids Zipf(1.05) or uniform over the rows, the next
 * step's ids handed over (prefetch) before each step:
 * a table without the cache and one with it take the same steps in turn
 * (interleaved, so that both see the same load), per distribution and
 * cache size (5%, 10%, 25% and 50% of the rows), after warm-up steps that
 * fill the cache:
 *   no_cache  the table alone: every step moves each distinct row it looks
 *             up to the device and its gradient back (2 rows a distinct id,
 *             HET's measure of a worker's traffic; the state stays on the
 *             host: dim floats each way); its step time beside that cache
 *   cache     the hit rate, rows moved (misses copied in, dirty victims
 *             written back, each with its state: 3 x dim floats for
 *             LazyAdam; a miss on a lazy row never written copies nothing,
 *             its slot takes the initial value: counted apart as rows_init)
 *             a step over no_cache's, the misses plus write-backs over
 *             no_cache's (every miss counted as moved), bytes likewise, and
 *             the step time (the read-ahead included) over no_cache's in
 *             the same run (the cost of the cache's bookkeeping on the
 *             host, where emu runs it; emu's copies are memcpys, and the
 *             table without the cache moves nothing at all here); also
 *             the rows moved against a step that moves every id's row and
 *             gradient (2 x 106,496, no de-duplication), and the ceiling of
 *             the hit rate (ideal_hit_rate: the best static cache of that
 *             size, computed from the id distribution)
 * One JSON object per case.
 *   bench_devcache [--rows N (4000000)] [--steps N (20)] [--warmup N (10)]
 *                  [--eager 1: rows written at creation, so that every miss
 *                   copies a row, as in a long run's steady state]
 *                  [--fraction F: only caches of F of the rows] */
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
    double phase[3]; /* ms a step in the read-ahead, the lookup, the update */
} result;

static bool eager; /* --eager: every row written at creation (no lazy rows: every miss copies) */

static hx_embedding_table *make(int64_t rows, int64_t cache_rows)
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
        return NULL;
    }
    return t;
}

/* One training step of t on ids (bag-sum lookup, fused update); the
 * cached table first reads the next step's rows ahead. Adds the seconds of
 * each phase to ph[3] (read-ahead, lookup, update). */
static void step(hx_embedding_table *t, const int64_t *ids, const int64_t *next, const int64_t *off, float *outv,
                 const float *dout, int k, double *ph, int *rc)
{
    double t0 = now();
    if (next && hx_embedding_table_prefetch(t, next, N)) *rc = 1;
    double t1 = now();
    hx_emb_query q = hx_emb_query_bags(ids, N, off, SAMPLES, HX_EMB_SUM);
    q.train = 1;
    q.step = k + 1;
    hx_emb_grad_input gi = {dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    if (!*rc && hx__embedding_query(t, &q, outv, NULL, true, "bench lookup")) *rc = 1;
    double t2 = now();
    if (!*rc && hx__embedding_update(t, &q, &gi, 1, k + 1, "bench update")) *rc = 1;
    double t3 = now();
    if (*rc) fprintf(stderr, "bench_devcache: %s\n", hx_last_error());
    ph[0] += t1 - t0;
    ph[1] += t2 - t1;
    ph[2] += t3 - t2;
}

/* warmup + steps steps on a table without a cache and one with a cache of
 * cache_rows, interleaved (the same ids); the measured steps' figures of
 * each. */
static int run(bool zipfian, int64_t rows, int64_t cache_rows, int warmup, int steps, result *plain, result *out)
{
    hx_embedding_table *tp = make(rows, 0), *t = tp ? make(rows, cache_rows) : NULL;
    if (!t) {
        hx_embedding_table_free(tp);
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
    double ph_plain[3] = {0}, ph[3] = {0}, skip[3] = {0}, looked = 0; /* skip: the warm-up's */
    int rc = 0;
    draw(zipfian, &z, rows, ids[0]);
    for (int k = 0; k < warmup + steps && !rc; k++) {
        if (k == warmup) hx_embedding_table_stats(t, &a);
        int cur = k & 1;
        if (k >= warmup) /* distinct rows of the step */
            for (int64_t i = 0; i < N; i++) looked += seen[ids[cur][i]] != (uint32_t)k + 1, seen[ids[cur][i]] = (uint32_t)k + 1;
        draw(zipfian, &z, rows, ids[!cur]);
        step(tp, ids[cur], NULL, off, outv, dout, k, k >= warmup ? ph_plain : skip, &rc);
        step(t, ids[cur], ids[!cur], off, outv, dout, k, k >= warmup ? ph : skip, &rc);
    }
    looked /= steps;
    free(seen);
    hx_embedding_table_stats(t, &b);
    double moved = (double)(b.device_rows_in - a.device_rows_in + b.device_rows_out - a.device_rows_out) / steps;
    double bytes = (double)(b.device_bytes_in - a.device_bytes_in + b.device_bytes_out - a.device_bytes_out) / steps;
    int64_t lk = b.device_cache_lookups - a.device_cache_lookups;
    double init = (double)(b.device_rows_init - a.device_rows_init) / steps;
    /* without the cache each distinct row goes in and its gradient out: no state moves */
    *plain = (result){.ms = (ph_plain[0] + ph_plain[1] + ph_plain[2]) / steps * 1e3, .looked_up = looked,
                      .moved = 2 * looked, .bytes = 2 * looked * DIM * 4};
    uint64_t hits = b.device_cache_hits - a.device_cache_hits;
    *out = (result){.ms = (ph[0] + ph[1] + ph[2]) / steps * 1e3, .hit_rate = lk ? (double)hits / (double)lk : 0,
                    .looked_up = looked, .moved = moved, .bytes = bytes,
                    .ahead = (double)(b.device_rows_prefetched - a.device_rows_prefetched) / steps, .init = init,
                    .misses = (double)(lk - hits) / steps,
                    .writebacks = (double)(b.device_rows_out - a.device_rows_out) / steps};
    for (int i = 0; i < 3; i++) {
        plain->phase[i] = ph_plain[i] / steps * 1e3;
        out->phase[i] = ph[i] / steps * 1e3;
    }
    free(ids[0]);
    free(ids[1]);
    free(outv);
    free(dout);
    hx_embedding_table_free(t);
    hx_embedding_table_free(tp);
    return rc;
}

int main(int argc, char **argv)
{
    int64_t rows = 4000000;
    int steps = 20, warmup = 10;
    double only = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--eager")) eager = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "--fraction")) only = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_devcache [--rows N] [--steps N] [--warmup N] [--eager 0|1] [--fraction F]\n");
            return 2;
        }
    }
    if (rows < 1 || steps < 1 || warmup < 0 || only < 0 || only > 1) {
        fprintf(stderr, "bench_devcache: --rows and --steps must be >= 1, --warmup >= 0, --fraction in (0, 1]\n");
        return 2;
    }
    char model[128];
    double load;
    machine(model, sizeof model, &load);
    printf("{\"bench\":\"devcache\",\"case\":\"setup\",\"cpu\":\"%s\",\"load_1min\":%.2f,\"rows\":%lld,\"dim\":%d,"
           "\"samples\":%d,\"bag\":%d,\"optimizer\":\"lazy_adam\",\"steps\":%d,\"warmup\":%d,\"lazy\":%d}\n",
           model, load, (long long)rows, DIM, SAMPLES, BAG, steps, warmup, !eager);
    const double fractions[] = {only ? only : 0.05, 0.1, 0.25, 0.5};
    int nf = only ? 1 : 4, rc = 0;
    for (int zf = 1; zf >= 0 && !rc; zf--) {
        const char *idn = zf ? "zipf1.05" : "uniform";
        for (int f = 0; f < nf && !rc; f++) {
            int64_t cr = (int64_t)(fractions[f] * (double)rows);
            result base, r;
            if ((rc = run(zf, rows, cr, warmup, steps, &base, &r))) break;
            printf("{\"bench\":\"devcache\",\"case\":\"no_cache\",\"ids\":\"%s\",\"rows\":%lld,\"beside_cache_rows\":%lld,"
                   "\"ms_per_step\":%.2f,\"ms_lookup\":%.2f,\"ms_update\":%.2f,\"rows_looked_up_per_step\":%.0f,"
                   "\"rows_moved_per_step\":%.0f,\"bytes_moved_per_step\":%.0f}\n",
                   idn, (long long)rows, (long long)cr, base.ms, base.phase[1], base.phase[2], base.looked_up,
                   base.moved, base.bytes);
            printf("{\"bench\":\"devcache\",\"case\":\"cache\",\"ids\":\"%s\",\"rows\":%lld,\"cache_rows\":%lld,"
                   "\"cache_fraction\":%.2f,\"ms_per_step\":%.2f,\"ms_read_ahead\":%.2f,\"ms_lookup\":%.2f,"
                   "\"ms_update\":%.2f,\"ms_per_step_no_cache\":%.2f,\"hit_rate\":%.4f,"
                   "\"rows_looked_up_per_step\":%.0f,"
                   "\"rows_moved_per_step\":%.0f,\"rows_ahead_per_step\":%.0f,\"bytes_moved_per_step\":%.0f,"
                   "\"misses_per_step\":%.0f,\"rows_init_per_step\":%.0f,\"writebacks_per_step\":%.0f,"
                   "\"moved_over_no_cache\":%.4f,\"fewer_rows_moved\":%.4f,"
                   "\"fewer_misses_plus_writebacks\":%.4f,\"fewer_rows_moved_than_every_id\":%.4f,"
                   "\"ideal_hit_rate\":%.4f,\"bytes_over_no_cache\":%.4f,"
                   "\"time_over_no_cache\":%.3f}\n",
                   idn, (long long)rows, (long long)cr, fractions[f], r.ms, r.phase[0], r.phase[1], r.phase[2], base.ms, r.hit_rate, r.looked_up, r.moved,
                   r.ahead, r.bytes, r.misses, r.init, r.writebacks, r.moved / base.moved, 1 - r.moved / base.moved,
                   1 - (r.misses + r.writebacks) / base.moved, 1 - r.moved / (2.0 * N),
                   ideal_hit_rate(zf, rows, cr), r.bytes / base.bytes, r.ms / base.ms);
            fflush(stdout);
        }
    }
    return rc;
}
