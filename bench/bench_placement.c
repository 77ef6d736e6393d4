/* Automatic placement against manual ones, on emu simulating a machine.
 * One JSON object per line on stdout.
 *
 *   bench_placement [--steps N] [--quick]
 *
 * Simulated machines (hx_emu_cost and hx_emu_host_cost, so that the
 * measured step follows the simulated speeds on a small shared host): the
 * host at 0.1 GFLOP/s (2 us per launch), the device 20x (2 GFLOP/s) or 5x
 * (0.5 GFLOP/s) faster (10 us per launch), the link 8 GB/s with 10 us per
 * copy. Graphs:
 * - widedeep: the example's graph on data/adult (batch 128), placements
 *   auto (every op AUTO), host (all on the host) and expert (the example's:
 *   the MLP on the device; the lookups cannot move, so it is also
 *   all-device);
 * - gpt: the example's model (1 layer, width 64, context 32, batch 8, f32),
 *   auto, host and device (the example's own, the expert's);
 * - random DAGs of 1,000 and 10,000 ops (tests/util/ap_random.h): the
 *   planner alone, its predicted step against all-host and all-device, and
 *   its planning time (no session runs them);
 * - random training graphs of about 1,000 and 10,000 nodes
 *   (tests/util/randgraph.h: hetex's ops on small random shapes, backward
 *   and optimizer updates), run: auto (every op AUTO), host and device
 *   (every op marked so; ops without a device kernel fall back to the
 *   host), with auto's units against their predictions
 *   (hx_session_placement_units: how many are more than 20% off, and the
 *   sum of their predicted and measured times).
 * Each session case reports the median measured step over N training steps
 * after 2 warm-up steps (wall time of hx_session_run), auto's predicted step
 * and its all-host and all-device predictions, the profiling time at
 * creation with an empty op cost cache and again with the cache filled, and
 * the planning time. best_manual_ms is the fastest manual placement's
 * measured step; auto_vs_best_manual the ratio. */
#include "hetex.h"
#include "cli/cli.h"
#include "examples/widedeep/wd.h"
#include "examples/gpt/gpt.h"
#include "ap_random.h"
#include "randgraph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *cache_file;

static void die(const char *what)
{
    fprintf(stderr, "bench_placement: %s: %s\n", what, hx_last_error());
    exit(1);
}

static hx_session_config machine(double speedup)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.emu_host_cost = (hx_emu_host_cost){.flops_per_s = 1e8, .launch_latency_s = 2e-6};
    c.emu_cost = (hx_emu_cost){.copy_bytes_per_s = 8e9, .launch_latency_s = 10e-6,
                               .flops_per_s = 1e8 * speedup};
    c.placement_cache = cache_file;
    return c;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What a training loop gives the bench: one step's feeds. */
typedef struct stepper {
    void (*feeds)(void *ctx, int step, hx_feed *f, int *n);
    void *ctx;
    int max_feeds;
} stepper;

static double median_step(hx_session *s, const stepper *st, int steps)
{
    double t[256];
    if (steps > 256) steps = 256;
    hx_feed *f = malloc(sizeof *f * (size_t)st->max_feeds);
    if (!f) die("out of memory");
    for (int i = -2; i < steps; i++) {
        int n = 0;
        st->feeds(st->ctx, i + 2, f, &n);
        double t0 = cli_now();
        if (hx_session_run(s, f, n, NULL, 0, HX_RUN_TRAIN)) die("training step");
        if (i >= 0) t[i] = cli_now() - t0;
    }
    free(f);
    qsort(t, (size_t)steps, sizeof t[0], cmp_double);
    return t[steps / 2];
}

typedef struct result {
    const char *placement;
    double measured;
} result;

/* extra: more fields, each followed by a comma ("": none). */
static void report(const char *graph, double speedup, const hx_placement_report *r,
                   double profile_cached, const result *res, int n_res, const char *extra)
{
    double best = INFINITY, mauto = NAN;
    for (int i = 0; i < n_res; i++) {
        if (!strcmp(res[i].placement, "auto")) mauto = res[i].measured;
        else best = fmin(best, res[i].measured);
    }
    printf("{\"bench\":\"placement\",\"graph\":\"%s\",%s\"device_speedup\":%g,\"link_GBps\":8,",
           graph, extra, speedup);
    for (int i = 0; i < n_res; i++) printf("\"%s_ms\":%.4f,", res[i].placement, 1e3 * res[i].measured);
    printf("\"best_manual_ms\":%.4f,\"auto_vs_best_manual\":%.4f,\"predicted_auto_ms\":%.4f,"
           "\"predicted_all_host_ms\":%.4f,\"predicted_all_device_ms\":%.4f,"
           "\"auto_measured_over_predicted\":%.4f,\"n_auto\":%d,\"n_auto_device\":%d,"
           "\"signatures\":%d,\"profile_s\":%.4f,\"profile_cached_s\":%.4f,\"plan_s\":%.5f}\n",
           1e3 * best, mauto / best, 1e3 * r->predicted_step_s, 1e3 * r->predicted_all_host_s,
           1e3 * r->predicted_all_device_s, mauto / r->predicted_step_s, r->n_auto,
           r->n_auto_device, r->n_signatures, r->profile_s, profile_cached, r->plan_s);
    fflush(stdout);
}

/* ---- wide & deep ------------------------------------------------------------------------ */

typedef struct wd_bench {
    wd_features wf;
    wd_feed fd;
    hx_reader *r;
    wd_model m;
    int64_t batch;
} wd_bench;

static void wd_step_feeds(void *ctx, int step, hx_feed *f, int *n)
{
    wd_bench *b = ctx;
    const hx_batch *batch;
    if (hx_reader_next(b->r, &batch) || !batch || batch->n < b->batch) {
        if (hx_reader_rewind(b->r) || hx_reader_next(b->r, &batch) || !batch) die("reader");
    }
    if (wd_feed_fill(&b->wf, batch, b->batch, &b->fd)) die("feed");
    wd_feeds(&b->m, &b->fd, b->batch, &b->wf, f);
    *n = WD_N_FEEDS;
}

static void bench_widedeep(const char *data, double speedup, int steps)
{
    static const struct { const char *name; hx_target t; } places[] = {
        {"auto", HX_TARGET_AUTO}, {"host", HX_TARGET_CPU}, {"expert", HX_TARGET_DEVICE}};
    wd_bench b = {.batch = 128};
    hx_reader_config rc = hx_reader_config_adult(false);
    rc.batch_size = b.batch;
    char path[1024];
    snprintf(path, sizeof path, "%s/adult.data", data);
    if (hx_reader_open(path, &rc, &b.r) || wd_features_fit(b.r, &rc, 1000, &b.wf) ||
        wd_feed_alloc(&b.wf, b.batch, &b.fd))
        die("wide & deep data");
    result res[3];
    hx_placement_report rep = {0}, first = {0};
    double cached = 0;
    for (int p = 0; p < 3; p++) {
        wd_options o = wd_options_default();
        o.batch = b.batch;
        o.threads = 2;
        o.placement = places[p].t;
        if (wd_model_build(&o, &b.wf, &b.m)) die("wide & deep graph");
        hx_session_config c = machine(speedup);
        c.auto_placement = places[p].t == HX_TARGET_AUTO;
        hx_session *s;
        if (c.auto_placement) { /* once with the cache emptied, then from it */
            remove(cache_file);
            if (hx_session_create(b.m.g, &c, &s)) die("session");
            hx_session_placement_report(s, &first);
            hx_session_free(s);
        }
        if (hx_session_create(b.m.g, &c, &s)) die("session");
        if (c.auto_placement) {
            hx_placement_report second;
            hx_session_placement_report(s, &second);
            cached = second.profile_s;
        }
        stepper st = {wd_step_feeds, &b, WD_N_FEEDS};
        res[p] = (result){places[p].name, median_step(s, &st, steps)};
        if (c.auto_placement) hx_session_placement_report(s, &rep);
        hx_session_free(s);
        wd_model_free(&b.m);
    }
    rep.profile_s = first.profile_s; /* the creation with an empty cache */
    report("widedeep", speedup, &rep, cached, res, 3, "");
    wd_feed_free(&b.fd);
    wd_features_free(&b.wf);
    hx_reader_close(b.r);
}

/* ---- GPT -------------------------------------------------------------------------------- */

typedef struct gpt_bench {
    gpt_run *r;
    int32_t tok[8 * 32], tgt[8 * 32];
} gpt_bench;

static void gpt_step_feeds(void *ctx, int step, hx_feed *f, int *n)
{
    gpt_bench *b = ctx;
    for (int i = 0; i < 8 * 32; i++) {
        b->tok[i] = (int32_t)((i * 7 + step * 13) % 65);
        b->tgt[i] = (int32_t)((i * 11 + step * 5) % 65);
    }
    f[0] = (hx_feed){NULL, b->r->m.tokens, b->tok, sizeof b->tok};
    f[1] = (hx_feed){NULL, b->r->m.targets, b->tgt, sizeof b->tgt};
    *n = 2;
}

static void bench_gpt(double speedup, int steps)
{
    static const struct { const char *name; hx_target t; } places[] = {
        {"auto", HX_TARGET_AUTO}, {"host", HX_TARGET_CPU}, {"expert", HX_TARGET_DEVICE}};
    result res[3];
    hx_placement_report rep = {0}, first = {0};
    double cached = 0;
    for (int p = 0; p < 3; p++) {
        gpt_config m = {.vocab = 65, .layers = 1, .heads = 2, .width = 64, .context = 32,
                        .batch = 8, .seed = 1, .dtype = HX_DTYPE_F32, .placement = places[p].t};
        gpt_optim o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                       .offload = GPT_OFFLOAD_NONE};
        hx_session_config c = machine(speedup);
        c.auto_placement = places[p].t == HX_TARGET_AUTO;
        gpt_run r;
        if (c.auto_placement) {
            remove(cache_file);
            if (gpt_run_create(&m, &o, &c, &r)) die("gpt session");
            hx_session_placement_report(r.s, &first);
            gpt_run_free(&r);
        }
        if (gpt_run_create(&m, &o, &c, &r)) die("gpt session");
        if (c.auto_placement) {
            hx_placement_report second;
            hx_session_placement_report(r.s, &second);
            cached = second.profile_s;
        }
        gpt_bench b = {.r = &r};
        stepper st = {gpt_step_feeds, &b, 2};
        res[p] = (result){places[p].name, median_step(r.s, &st, steps)};
        if (c.auto_placement) hx_session_placement_report(r.s, &rep);
        gpt_run_free(&r);
    }
    rep.profile_s = first.profile_s;
    report("gpt", speedup, &rep, cached, res, 3, "");
}

/* ---- random DAGs: the planner alone --------------------------------------------------------- */

static void bench_random(int n_ops)
{
    test_rng r = test_rng_make((uint64_t)n_ops);
    hx_ap_problem p;
    test_ap_random(&r, 1 << 30, n_ops, &p);
    p.cap = (size_t)1 << 40;
    int8_t *gside = malloc((size_t)p.n_groups + 1), *all = malloc((size_t)p.n_groups + 1);
    hx_ap_work *w = NULL;
    double step;
    if (!gside || !all || hx__ap_work_new(&p, &w)) die("random problem");
    double t0 = cli_now();
    if (hx__ap_plan(&p, gside, &step)) die("plan");
    double plan_s = cli_now() - t0;
    memset(all, 0, (size_t)p.n_groups);
    double host = hx__ap_eval(&p, w, all, NULL);
    memset(all, 1, (size_t)p.n_groups);
    double dev = hx__ap_eval(&p, w, all, NULL);
    printf("{\"bench\":\"placement\",\"graph\":\"random\",\"nodes\":%d,\"groups\":%d,"
           "\"device_speedup\":\"20 (40%% of ops), 0.8-2 (the rest)\",\"link_GBps\":8,"
           "\"predicted_auto_ms\":%.4f,\"predicted_all_host_ms\":%.4f,"
           "\"predicted_all_device_ms\":%.4f,\"auto_vs_best_single_side\":%.4f,\"plan_s\":%.4f}\n",
           p.n, p.n_groups, 1e3 * step, 1e3 * host, 1e3 * dev, step / fmin(host, dev), plan_s);
    fflush(stdout);
    hx__ap_work_free(w);
    free(gside);
    free(all);
    test_ap_free(&p);
}

/* ---- random training graphs: sessions ---------------------------------------------------- */

static void rg_step_feeds(void *ctx, int step, hx_feed *f, int *n)
{
    rg_graph *r = ctx;
    rg_feeds(r, (uint64_t)step, f);
    *n = r->n_inputs;
}

/* Every op node of g marked t (DEFAULT: left to auto_placement). */
static void mark_ops(hx_graph *g, hx_target t)
{
    for (int i = 0; i < g->n; i++)
        if (g->tensors[i]->op > HX_OP_STATE && hx_tensor_set_target(g->tensors[i], t))
            die("set_target");
}

static void bench_random_sessions(int moves, double speedup, int steps)
{
    rg_options o = rg_options_default();
    o.min_moves = o.max_moves = moves;
    o.targets = false;
    o.optimizer = true;
    rg_graph *r = rg_build(1000 + (uint64_t)moves, &o);
    if (!r || r->error[0]) die(r ? r->error : "random graph");
    static const struct { const char *name; hx_target t; } places[] = {
        {"auto", HX_TARGET_DEFAULT}, {"host", HX_TARGET_CPU}, {"device", HX_TARGET_DEVICE}};
    result res[3];
    hx_placement_report rep = {0}, first = {0};
    double cached = 0, unit_pred = 0, unit_meas = 0;
    int n_units = 0, n_off = 0;
    for (int p = 0; p < 3; p++) {
        mark_ops(r->g, places[p].t);
        hx_session_config c = machine(speedup);
        c.fallback = HX_FALLBACK_CPU;
        c.auto_placement = p == 0;
        hx_session *s;
        if (c.auto_placement) {
            remove(cache_file);
            if (hx_session_create(r->g, &c, &s)) die("random graph session");
            hx_session_placement_report(s, &first);
            hx_session_free(s);
        }
        if (hx_session_create(r->g, &c, &s)) die("random graph session");
        if (c.auto_placement) {
            hx_placement_report second;
            hx_session_placement_report(s, &second);
            cached = second.profile_s;
        }
        stepper st = {rg_step_feeds, r, r->n_inputs};
        res[p] = (result){places[p].name, median_step(s, &st, steps)};
        if (c.auto_placement) {
            hx_session_placement_report(s, &rep);
            hx_placement_unit *u = NULL;
            if (hx_session_placement_units(s, NULL, 0, &n_units) ||
                !(u = malloc(sizeof *u * (size_t)(n_units + 1))) ||
                hx_session_placement_units(s, u, n_units, &n_units))
                die("placement units");
            for (int i = 0; i < n_units; i++) {
                n_off += u[i].off;
                unit_pred += u[i].predicted_s;
                unit_meas += u[i].measured_s;
            }
            free(u);
        }
        hx_session_free(s);
    }
    rep.profile_s = first.profile_s;
    char extra[256];
    snprintf(extra, sizeof extra, "\"nodes\":%d,\"units\":%d,\"units_off_20pct\":%d,"
             "\"units_predicted_ms\":%.4f,\"units_measured_ms\":%.4f,",
             hx_graph_tensor_count(r->g), n_units, n_off, 1e3 * unit_pred, 1e3 * unit_meas);
    report("random_training", speedup, &rep, cached, res, 3, extra);
    rg_free(r);
}

int main(int argc, char **argv)
{
    int steps = 7;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "usage: bench_placement [--steps N] [--quick]\n");
            return 2;
        }
    }
    if (steps < 1) steps = 1;
    static char cache[64];
    snprintf(cache, sizeof cache, "/tmp/hx_bench_placement_%ld", (long)getpid());
    cache_file = cache;
    static char data[4096];
    const char *d = cli_data_path("data/adult", data, sizeof data);
    bench_random(1000);
    bench_random(10000);
    bench_random_sessions(122, 20, steps);   /* about 1,000 nodes */
    bench_random_sessions(1370, 20, steps);  /* about 10,000 */
    double speeds[2] = {20, 5};
    for (int k = 0; k < (quick ? 1 : 2); k++) {
        bench_widedeep(d, speeds[k], steps);
        bench_gpt(speeds[k], steps);
    }
    remove(cache_file);
    return 0;
}
