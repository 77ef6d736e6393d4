/* Embedding benchmark: a 10M x 64 f32 table (2.56 GB, plus 5.1 GB of LazyAdam
 * state), batches of 4096 samples x 26 features with one id each (106,496
 * ids), ids uniform or Zipf(1.05) over the rows, at 1 and 2 threads:
 *   gather       the ceiling: a plain OpenMP loop memcpy-gathering the same
 *                rows of the same table into a (106496, 64) buffer
 *   lookup       hx_emb_table_lookup, rows mode, the same output
 *   bag          sum bags of 26 ids -> (4096, 64)
 *   backward_sort / backward_hash   hx_emb_backward of the bags to a sparse
 *                gradient, grouping by radix sort / by hash
 *   bwd_lazy_adam, bwd_adagrad, bwd_ftrl   fused backward + optimizer step
 *   bwd_lazy_adam_unfused     hx_emb_backward, then the sparse update
 *   step         bag forward + fused backward + LazyAdam: samples/s
 * One JSON object per case on stdout: median and best milliseconds per
 * batch over the runs, and the ratio to the gather ceiling of the same ids
 * and thread count, measured again just before the case (the machine is
 * shared: its load drifts during a run).
 *   bench_embedding [CASE,CASE,...] [THREADS]   only these cases (the gather
 *   always runs) and thread count; default all cases at 1 and 2 threads */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "bench/bench_ids.h"
#include "embedding/embedding.h"
#include "kernels/cpu/hx_kernels.h"

#define ROWS 10000000LL
#define DIM 64
#define SAMPLES 4096
#define FEATURES 26
#define NIDS (SAMPLES * FEATURES)
#define NBATCH 6
#define RUNS 12

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const hx_emb_err *err)
{
    fprintf(stderr, "bench_embedding: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

/* ---- ids ------------------------------------------------------------------------------ */

/* NBATCH batches of NIDS ids; Zipf ranks are scattered over the table by
 * multiplying with 7919 modulo the row count (coprime: a bijection). */
static int64_t *make_ids(int zipfian)
{
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)NIDS * NBATCH);
    zipf z = zipf_make(1.05, (double)ROWS);
    for (int64_t i = 0; i < (int64_t)NIDS * NBATCH; i++)
        ids[i] = zipfian ? (int64_t)(((__int128)(zipf_draw(&z) - 1) * 7919) % ROWS)
                         : (int64_t)(rng_next() % (uint64_t)ROWS);
    return ids;
}

/* ---- timing --------------------------------------------------------------------------------- */

typedef struct timing {
    double median, best;
} timing;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*batch_fn)(void *ctx, int batch);

/* Two runs to warm up, then RUNS timed runs, cycling through the batches. */
static timing time_it(batch_fn f, void *ctx)
{
    double t[RUNS];
    for (int r = 0; r < 2; r++) f(ctx, r % NBATCH);
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        f(ctx, r % NBATCH);
        t[r] = now() - t0;
    }
    qsort(t, RUNS, sizeof t[0], cmp_d);
    timing tm = {(t[RUNS / 2 - 1] + t[RUNS / 2]) / 2 * 1e3, t[0] * 1e3};
    return tm;
}

/* ---- the cases ---------------------------------------------------------------------------------- */

typedef struct ctx {
    hx_emb_table *t;
    const float *base; /* table rows, for the plain gather */
    int64_t *ids;      /* NBATCH x NIDS */
    int64_t *offsets;  /* SAMPLES */
    float *out, *bag_out, *dout;
    int threads;
    hx_emb_workspace *ws;
    hx_emb_sparse_grad g;
    hx_emb_dedup dedup;
    int64_t step;
} ctx;

static void plain_gather(void *vc, int b)
{
    ctx *c = vc;
    const int64_t *ids = c->ids + (int64_t)b * NIDS;
    const float *base = c->base;
    float *out = c->out;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t i = 0; i < NIDS; i++) memcpy(out + i * DIM, base + ids[i] * DIM, DIM * sizeof(float));
}

static hx_emb_query rows_query(ctx *c, int b)
{
    hx_emb_query q = hx_emb_query_rows(c->ids + (int64_t)b * NIDS, NIDS);
    q.nthreads = c->threads;
    return q;
}

static hx_emb_query bag_query(ctx *c, int b)
{
    hx_emb_query q = hx_emb_query_bags(c->ids + (int64_t)b * NIDS, NIDS, c->offsets, SAMPLES, HX_EMB_SUM);
    q.nthreads = c->threads;
    return q;
}

static void run_lookup(void *vc, int b)
{
    ctx *c = vc;
    hx_emb_query q = rows_query(c, b);
    hx_emb_err err;
    if (hx_emb_table_lookup(c->t, &q, c->out, NULL, &err)) die("lookup", &err);
}

static void run_bag(void *vc, int b)
{
    ctx *c = vc;
    hx_emb_query q = bag_query(c, b);
    hx_emb_err err;
    if (hx_emb_table_lookup(c->t, &q, c->bag_out, NULL, &err)) die("bag", &err);
}

static void run_dedup(void *vc, int b)
{
    ctx *c = vc;
    hx_emb_query q = bag_query(c, b);
    hx_emb_grad_input gi = {c->dout, NULL, DIM, c->dedup};
    hx_emb_err err;
    if (hx_emb_backward(&q, &gi, c->ws, &c->g, &err)) die("backward", &err);
}

static void run_bwd_update(void *vc, int b)
{
    ctx *c = vc;
    hx_emb_query q = bag_query(c, b);
    hx_emb_grad_input gi = {c->dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    hx_emb_err err;
    if (hx_emb_table_backward_update(c->t, &q, &gi, ++c->step, c->ws, &err)) die("backward_update", &err);
}

static void run_bwd_unfused(void *vc, int b)
{
    ctx *c = vc;
    hx_emb_query q = bag_query(c, b);
    hx_emb_grad_input gi = {c->dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    hx_emb_err err;
    if (hx_emb_backward(&q, &gi, c->ws, &c->g, &err)) die("backward", &err);
    if (hx_emb_table_apply(c->t, &c->g, ++c->step, c->threads, &err)) die("apply", &err);
}

static void run_step(void *vc, int b)
{
    run_bag(vc, b);
    run_bwd_update(vc, b);
}

static const char *only; /* comma-separated case names, or NULL for all */

static int wanted(const char *name)
{
    if (!only) return 1;
    size_t len = strlen(name);
    for (const char *p = only; (p = strstr(p, name)); p += len)
        if ((p == only || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return 1;
    return 0;
}

static void emit(const char *name, const char *dist, int threads, timing tm, double ceiling_ms,
                 int64_t unique);

/* Times f, with the gather ceiling timed just before it, and prints the case. */
static void run_case(const char *name, const char *dist, ctx *c, batch_fn f, int show_unique)
{
    timing g = time_it(plain_gather, c);
    timing tm = time_it(f, c);
    emit(name, dist, c->threads, tm, g.median, show_unique ? c->g.n : -1);
}

static void emit(const char *name, const char *dist, int threads, timing tm, double ceiling_ms,
                 int64_t unique)
{
    printf("{\"bench\":\"embedding\",\"case\":\"%s\",\"ids\":\"%s\",\"threads\":%d,\"rows\":%lld,\"dim\":%d,"
           "\"batch\":%d,\"ids_per_batch\":%d,\"ms\":%.3f,\"best_ms\":%.3f",
           name, dist, threads, (long long)ROWS, DIM, SAMPLES, NIDS, tm.median, tm.best);
    if (ceiling_ms > 0) printf(",\"gather_ms\":%.3f,\"x_gather\":%.3f", ceiling_ms, tm.median / ceiling_ms);
    if (unique >= 0) printf(",\"unique_ids\":%lld", (long long)unique);
    printf(",\"samples_per_s\":%.0f}\n", SAMPLES / (tm.median * 1e-3));
    fflush(stdout);
}

static long anon_huge_kb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    double t0 = now();
    only = argc > 1 && strcmp(argv[1], "all") != 0 ? argv[1] : NULL;
    int th_lo = 1, th_hi = 2;
    if (argc > 2) th_lo = th_hi = atoi(argv[2]) == 1 ? 1 : 2;
    hx_emb_table_config cfg = hx_emb_table_config_default(ROWS, DIM);
    cfg.init.kind = HX_EMB_INIT_UNIFORM;
    cfg.init.a = -0.01;
    cfg.init.b = 0.01;
    cfg.init.seed = 1;
    cfg.nthreads = 2;
    hx_emb_table *t;
    hx_emb_err err;
    if (hx_emb_local_create(&cfg, &t, &err)) die("create", &err);
    hx_emb_local *lt = hx_emb_as_local(t);
    int64_t *uni = make_ids(0), *zip = make_ids(1);
    ctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.base = lt->param;
    c.offsets = malloc(sizeof(int64_t) * SAMPLES);
    for (int s = 0; s < SAMPLES; s++) c.offsets[s] = (int64_t)s * FEATURES;
    c.out = aligned_alloc(64, sizeof(float) * (size_t)NIDS * DIM);
    c.bag_out = aligned_alloc(64, sizeof(float) * SAMPLES * DIM);
    c.dout = malloc(sizeof(float) * SAMPLES * DIM);
    for (int i = 0; i < SAMPLES * DIM; i++) c.dout[i] = (float)((rng_unit() - 0.5) * 1e-3);
    c.ws = hx_emb_workspace_create();
    hx_emb_local_stats st;
    hx_emb_local_stats_get(t, &st, &err);
    char model[128];
    double load;
    machine(model, sizeof model, &load);
    printf("{\"bench\":\"embedding\",\"case\":\"setup\",\"cpu\":\"%s\",\"cores\":%d,\"isa\":\"%s\","
           "\"load_1min\":%.2f,\"rows\":%lld,\"dim\":%d,\"table_bytes\":%zu,"
           "\"huge_pages_requested\":%d,\"anon_huge_kb\":%ld,\"setup_s\":%.2f}\n",
           model, omp_get_num_procs(), hx_k_isa_name(hx_k_isa()), load, (long long)ROWS, DIM, st.bytes,
           st.huge_pages, anon_huge_kb(), now() - t0);
    fflush(stdout);

    const char *dists[2] = {"uniform", "zipf1.05"};
    int64_t *idsets[2] = {uni, zip};
    /* Forward and dedup: no optimizer state needed. */
    for (int d = 0; d < 2; d++)
        for (int th = th_lo; th <= th_hi; th++) {
            c.ids = idsets[d];
            c.threads = th;
            emit("gather", dists[d], th, time_it(plain_gather, &c), 0, -1);
            if (wanted("lookup")) run_case("lookup", dists[d], &c, run_lookup, 0);
            if (wanted("bag")) run_case("bag", dists[d], &c, run_bag, 0);
            c.dedup = HX_EMB_DEDUP_SORT;
            if (wanted("backward_sort")) run_case("backward_sort", dists[d], &c, run_dedup, 1);
            c.dedup = HX_EMB_DEDUP_HASH;
            if (wanted("backward_hash")) run_case("backward_hash", dists[d], &c, run_dedup, 1);
        }
    /* Updates, one optimizer at a time (state dropped in between to keep memory at 7.7 GB). */
    const struct {
        const char *name;
        hx_emb_optim_kind kind;
    } opts[3] = {{"bwd_lazy_adam", HX_EMB_OPTIM_LAZY_ADAM}, {"bwd_adagrad", HX_EMB_OPTIM_ADAGRAD},
                 {"bwd_ftrl", HX_EMB_OPTIM_FTRL}};
    hx_emb_optim none = hx_emb_optim_default(HX_EMB_OPTIM_NONE);
    for (int o = 0; o < 3; o++) {
        int lazy_adam = opts[o].kind == HX_EMB_OPTIM_LAZY_ADAM;
        if (!wanted(opts[o].name) && !(lazy_adam && (wanted("bwd_lazy_adam_unfused") || wanted("step")))) continue;
        hx_emb_optim opt = hx_emb_optim_default(opts[o].kind);
        if (hx_emb_local_set_optim(t, &none, 2, &err) || hx_emb_local_set_optim(t, &opt, 2, &err))
            die("set_optim", &err);
        c.step = 0;
        for (int d = 0; d < 2; d++)
            for (int th = th_lo; th <= th_hi; th++) {
                c.ids = idsets[d];
                c.threads = th;
                if (wanted(opts[o].name)) run_case(opts[o].name, dists[d], &c, run_bwd_update, 0);
                if (!lazy_adam) continue;
                if (wanted("bwd_lazy_adam_unfused"))
                    run_case("bwd_lazy_adam_unfused", dists[d], &c, run_bwd_unfused, 0);
                if (wanted("step")) run_case("step", dists[d], &c, run_step, 0);
            }
    }
    machine(model, sizeof model, &load);
    printf("{\"bench\":\"embedding\",\"case\":\"total\",\"load_1min\":%.2f,\"anon_huge_kb\":%ld,\"total_s\":%.1f}\n",
           load, anon_huge_kb(), now() - t0);
    hx_emb_sparse_grad_free(&c.g);
    hx_emb_workspace_free(c.ws);
    hx_emb_table_free(t);
    free(uni);
    free(zip);
    free(c.offsets);
    free(c.out);
    free(c.bag_out);
    free(c.dout);
    return 0;
}
