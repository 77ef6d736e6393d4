/* The concurrent executor: a CPU branch and an emu branch of equal cost
 * overlap (read back from the trace), errors on one lane while the other
 * runs stop the run cleanly and leave the session usable, device OOM, the
 * thread budget, bitwise equality of mixed placements at 1 and 2 threads
 * with the all-CPU run (training with Adam, loss scaling and device
 * gradients, checkpoints across sessions), device feeds, and hundreds of
 * small runs to shake out races. */
#include "hetex.h"
#include "kernels/cpu/hx_kernels.h"
#include "session/session.h"
#include "scheduler/plan.h" /* the plan's fields */
#include "scheduler/scheduler.h"
#include "testutil.h"
#include "hetex_checks.h"
#include "trace_read.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hx_tensor *on(hx_tensor *t, hx_target tg)
{
    hx_tensor_set_target(t, tg);
    return t;
}

static hx_session *open_session(hx_graph *g, hx_accelerator acc, int threads, hx_emu_cost cost,
                                const char *trace)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = acc;
    c.n_threads = threads;
    c.emu_cost = cost;
    c.trace_path = trace;
    return test_session_with(g, &c, "session");
}

static const hx_emu_cost no_cost = {0, 0, 0};

/* ---- two branches: a CPU chain and a device chain, joined on the CPU -------------- */

enum { BR = 192, BK = 256, N_CPU = 16, N_DEV = 6 };

typedef struct branches {
    hx_graph *g;
    hx_tensor *x, *h, *d, *y;
} branches;

static branches build_branches(void)
{
    branches b = {hx_graph_create(), NULL, NULL, NULL, NULL};
    int64_t xs[2] = {BR, BK}, ws[2] = {BK, BK};
    b.x = hx_graph_input(b.g, "x", HX_DTYPE_F32, 2, xs);
    b.d = b.x;
    for (int i = 0; i < N_DEV / 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "wd%d", i);
        hx_tensor *w = hx_graph_param(b.g, name, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
        b.d = on(hx_relu(b.g, on(hx_matmul(b.g, b.d, w, false, false), HX_TARGET_DEVICE)),
                 HX_TARGET_DEVICE);
    }
    b.h = b.x;
    for (int i = 0; i < N_CPU / 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "wc%d", i);
        hx_tensor *w = hx_graph_param(b.g, name, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
        b.h = on(hx_tanh(b.g, on(hx_matmul(b.g, b.h, w, false, false), HX_TARGET_CPU)),
                 HX_TARGET_CPU);
    }
    b.y = on(hx_add(b.g, b.h, b.d), HX_TARGET_CPU);
    return b;
}

static void run_branches(hx_session *s, const branches *b, const float *x, float *y, int times)
{
    hx_feed f = {NULL, b->x, x, sizeof(float) * BR * BK};
    hx_fetch o = {NULL, b->y, y, sizeof(float) * BR * BK};
    for (int i = 0; i < times; i++) OK(hx_session_run(s, &f, 1, &o, 1, 0));
}

static int by_ts(const void *pa, const void *pb)
{
    const tr_event *a = pa, *b = pb;
    return a->ts < b->ts ? -1 : a->ts > b->ts;
}

/* The lane's name starts with prefix. */
static int lane_is(const tr_trace *t, int tid, const char *prefix)
{
    return tid >= 0 && tid < 64 && !strncmp(t->lane[tid], prefix, strlen(prefix));
}

/* Span [t0, t1] of the events in [from, to) on lanes named `prefix` whose
 * name is not `skip`. */
static void span(const tr_trace *t, int from, int to, const char *prefix, const char *skip,
                 double *t0, double *t1)
{
    *t0 = 1e300;
    *t1 = -1e300;
    for (int i = from; i < to; i++) {
        const tr_event *e = &t->ev[i];
        if (!lane_is(t, e->tid, prefix) || (skip && !strcmp(e->name, skip))) continue;
        if (e->ts < *t0) *t0 = e->ts;
        if (e->ts + e->dur > *t1) *t1 = e->ts + e->dur;
    }
}

/* The time in [from, to) during which both an event of the CPU chain
 * (host lanes, `add` aside) and an event on the emu lane were running,
 * and each side's busy time: the events are sorted by start, and each
 * side's events are merged into disjoint intervals as they come. */
typedef struct busy_sides {
    double cpu, dev, both;
} busy_sides;

static busy_sides busy_overlap(const tr_trace *t, int from, int to)
{
    enum { N = 4096 };
    static double lo[2][N], hi[2][N];
    int n[2] = {0, 0};
    busy_sides b = {0, 0, 0};
    for (int i = from; i < to; i++) {
        const tr_event *e = &t->ev[i];
        int side = lane_is(t, e->tid, "emu") ? 1
                   : lane_is(t, e->tid, "host") && strcmp(e->name, "add") ? 0 : -1;
        if (side < 0) continue;
        double a = e->ts, z = e->ts + e->dur;
        int k = n[side];
        if (k > 0 && a <= hi[side][k - 1]) {
            if (z > hi[side][k - 1]) hi[side][k - 1] = z;
        } else {
            CHECK(k < N, "more than %d separate busy intervals on one side", N);
            if (k == N) continue;
            lo[side][k] = a;
            hi[side][k] = z;
            n[side]++;
        }
    }
    for (int k = 0; k < n[0]; k++) b.cpu += hi[0][k] - lo[0][k];
    for (int k = 0; k < n[1]; k++) b.dev += hi[1][k] - lo[1][k];
    for (int i = 0, j = 0; i < n[0] && j < n[1];) {
        double a = lo[0][i] > lo[1][j] ? lo[0][i] : lo[1][j];
        double z = hi[0][i] < hi[1][j] ? hi[0][i] : hi[1][j];
        if (z > a) b.both += z - a;
        if (hi[0][i] < hi[1][j]) i++;
        else j++;
    }
    return b;
}

/* The host copy of the device branch's output d is made while the CPU
 * chain runs: in sequential order it comes after most of the chain's
 * values, but it must share bytes with none of them. */
static void check_copy_not_shared(const hx_session *s, const hx_plan *p, const hx_tensor *d)
{
    const hx_graph *g = s->e.g;
    int64_t at = p->offset[HX_DEV_HOST * g->n + d->id];
    CHECK(at >= 0, "d has a host copy in the arena");
    int64_t end = at + (int64_t)hx_tensor_nbytes(d);
    int shared = 0, chain = 0;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t == d || s->e.target[i] != HX_TARGET_CPU || t->op <= HX_OP_STATE) continue;
        int64_t o = p->offset[HX_DEV_HOST * g->n + i];
        if (o < 0) continue;
        chain++;
        shared += o < end && at < o + (int64_t)hx_tensor_nbytes(t);
    }
    CHECK(chain >= N_CPU && shared == 0, "%d of %d CPU chain values share bytes with the host "
          "copy of the device output", shared, chain);
}

/* The CPU chain and the device chain cost about the same (the device's by
 * its simulated launch latency, set from the CPU chain's time in a first
 * session); their events must run at the same time for half the shorter
 * chain's busy time. Times come from the trace of the last run. */
static void test_overlap(void)
{
    branches b = build_branches();
    float *x = malloc(sizeof *x * BR * BK), *y = malloc(sizeof *y * BR * BK);
    test_rng r = test_rng_make(5);
    test_fill_uniform(&r, x, BR * BK, -1, 1);
    char path[] = "/tmp/hx_overlap_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);

    /* calibrate: the CPU chain's kernel time at 1 thread */
    hx_session *s = open_session(b.g, HX_ACCELERATOR_EMU, 2, no_cost, path);
    run_branches(s, &b, x, y, 3);
    hx_session_free(s); /* writes the trace */
    tr_trace t;
    CHECK(tr_read(path, &t) == 0, "cannot read the trace %s", path);
    qsort(t.ev, t.n, sizeof *t.ev, by_ts);
    double cpu = 0; /* the last run's (runs do not overlap) */
    int n_dev = 0;  /* its device launches and copies */
    for (int i = 2 * t.n / 3; i < t.n; i++) {
        if (lane_is(&t, t.ev[i].tid, "host") && strcmp(t.ev[i].name, "add")) cpu += t.ev[i].dur;
        n_dev += lane_is(&t, t.ev[i].tid, "emu");
    }
    tr_free(&t);

    hx_emu_cost cost = {0, cpu * 1e-6 / n_dev, 0};
    /* the lanes can overlap; whether the OS lets them in one given run is
     * up to the load (ctest -j2, sanitizers, other jobs: at load 11 on 2
     * cores a third of the tries showed no overlap, the emu thread waiting
     * for a core through the whole CPU branch), so one of up to 20 tries
     * must show it; a schedule that serialises the lanes fails all of them.
     * The plan's checks hold in every try */
    enum { TRIES = 20 };
    bool overlapped = false;
    for (int attempt = 0; attempt < TRIES && !overlapped; attempt++) {
        s = open_session(b.g, HX_ACCELERATOR_EMU, 2, cost, path);
        run_branches(s, &b, x, y, 2);
        const hx_plan *p = s->last_plan;
        check_copy_not_shared(s, p, b.d);
        CHECK(p->threads[0][0] == 1 && p->threads[0][1] == 1 && p->host_lanes[0] == 1,
              "2 threads: a host lane and the emu lane get 1 each (got host %d x %d, device %d)",
              p->host_lanes[0], p->threads[0][0], p->threads[0][1]);
        hx_session_free(s);
        CHECK(tr_read(path, &t) == 0, "cannot read the trace %s", path);
        qsort(t.ev, t.n, sizeof *t.ev, by_ts);
        int from = t.n / 2; /* the second run: runs do not overlap */
        double c0, c1, d0, d1, a0, a1;
        span(&t, from, t.n, "host", "add", &c0, &c1);
        span(&t, from, t.n, "emu", NULL, &d0, &d1);
        span(&t, from, t.n, "", NULL, &a0, &a1);
        double lc = c1 - c0, ld = d1 - d0, step = a1 - a0, longer = lc > ld ? lc : ld;
        busy_sides busy = busy_overlap(&t, from, t.n);
        double shorter = busy.cpu < busy.dev ? busy.cpu : busy.dev;
        printf("overlap (try %d): cpu branch %.2f ms (busy %.2f), device branch %.2f ms "
               "(busy %.2f), both busy %.2f ms, step %.2f ms (%.2fx the longer)\n",
               attempt + 1, lc * 1e-3, busy.cpu * 1e-3, ld * 1e-3, busy.dev * 1e-3,
               busy.both * 1e-3, step * 1e-3, step / longer);
        /* how close the step comes to the longer lane is the overlap
         * benchmark's figure. Here the two lanes must run events at the same
         * time for half the shorter lane's busy time. The step as a whole is
         * no measure: its serial parts (feeds, the final add) stretch with
         * the load, by 11 ms under TSan in a CI run where the branches
         * overlapped fully */
        overlapped = shorter > 0 && busy.both > 0.5 * shorter;
        tr_free(&t);
    }
    CHECK(overlapped, "in %d tries the CPU and device branches never overlapped by half the "
          "shorter one (see the lines above)", TRIES);
    if (!getenv("HX_TEST_KEEP")) remove(path); else printf("trace kept: %s\n", path);
    free(x);
    free(y);
    hx_graph_free(b.g);
}

/* ---- errors on one lane while the other runs -------------------------------------- */

enum { EV = 50, EN = 64, ED = 32 };

/* table (EV, ED) gathered by ids on `gather_on`, a CPU chain and a device
 * chain beside it, all summed into one (EN, ED) output on the CPU. */
static hx_tensor *build_gather_graph(hx_graph *g, hx_target gather_on, hx_tensor **ids,
                                     hx_tensor **x)
{
    int64_t ts[2] = {EV, ED}, is[1] = {EN}, xs[2] = {EN, ED}, ws[2] = {ED, ED};
    hx_tensor *table = hx_graph_param(g, "table", HX_DTYPE_F32, 2, ts, hx_init_uniform(-1, 1));
    hx_tensor_set_target(table, gather_on);
    *ids = hx_graph_input(g, "ids", HX_DTYPE_I32, 1, is);
    *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
    hx_tensor *dev = *x, *cpu = *x;
    for (int i = 0; i < 4; i++) {
        dev = on(hx_tanh(g, on(hx_matmul(g, dev, w, false, false), HX_TARGET_DEVICE)), HX_TARGET_DEVICE);
        cpu = on(hx_sigmoid(g, cpu), HX_TARGET_CPU);
    }
    hx_tensor *e = on(hx_gather(g, table, *ids), gather_on);
    return on(hx_add(g, on(hx_add(g, cpu, dev), HX_TARGET_CPU), e), HX_TARGET_CPU);
}

static void test_lane_errors(void)
{
    for (int side = 0; side < 2; side++) {
        hx_target where = side ? HX_TARGET_CPU : HX_TARGET_DEVICE;
        hx_graph *g = hx_graph_create();
        hx_tensor *ids, *x;
        hx_tensor *y = build_gather_graph(g, where, &ids, &x);
        hx_emu_cost slow = {0, 2e-3, 0}; /* the device lane takes a while */
        hx_session *s = open_session(g, HX_ACCELERATOR_EMU, 2, slow, NULL);
        hx_session *ref = open_session(g, HX_ACCELERATOR_NONE, 2, no_cost, NULL);
        int32_t iv[EN];
        float xv[EN * ED], out[EN * ED], want[EN * ED];
        test_rng r = test_rng_make(17 + side);
        test_fill_uniform(&r, xv, EN * ED, -1, 1);
        for (int rep = 0; rep < 3; rep++) {
            for (int i = 0; i < EN; i++) iv[i] = (int32_t)(test_rng_u64(&r) % EV);
            iv[EN / 2] = rep == 1 ? EV + 7 : iv[EN / 2]; /* the middle run has a bad id */
            hx_feed f[2] = {{NULL, ids, iv, sizeof iv}, {NULL, x, xv, sizeof xv}};
            hx_fetch o = {NULL, y, out, sizeof out};
            hx_status st = hx_session_run(s, f, 2, &o, 1, 0);
            if (rep == 1) {
                CHECK(st == HX_ERR_INDEX && strstr(hx_last_error(), "gather") &&
                          strstr(hx_last_error(), "57 at position 32") &&
                          strstr(hx_last_error(), "outside [0, 50)"),
                      "bad id on the %s lane: %s: %s", side ? "host" : "device",
                      hx_status_name(st), hx_last_error());
                continue;
            }
            CHECK(st == HX_OK, "run %d (%s gather): %s", rep, side ? "cpu" : "device", hx_last_error());
            hx_fetch w = {NULL, y, want, sizeof want};
            OK(hx_session_run(ref, f, 2, &w, 1, 0));
            CHECK(!memcmp(out, want, sizeof out), "run %d after the error differs from all-CPU", rep);
        }
        hx_session_free(s);
        hx_session_free(ref);
        hx_graph_free(g);
    }
}

/* A plan that does not fit the device cap fails with HX_ERR_DEVICE_OOM; the
 * session then serves a smaller plan, and device allocations past the cap
 * fail the same way. */
static void test_device_oom(void)
{
    hx_graph *g = hx_graph_create();
    int64_t big[2] = {256, 256}, small[2] = {4, 4};
    hx_tensor *xb = hx_graph_input(g, "xb", HX_DTYPE_F32, 2, big);
    hx_tensor *xs = hx_graph_input(g, "xs", HX_DTYPE_F32, 2, small);
    hx_tensor *yb = on(hx_exp(g, on(hx_relu(g, xb), HX_TARGET_CPU)), HX_TARGET_DEVICE);
    hx_tensor *ys = on(hx_exp(g, on(hx_relu(g, xs), HX_TARGET_CPU)), HX_TARGET_DEVICE);
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.max_device_memory = 64 * 1024;
    c.n_threads = 2;
    hx_session *s = NULL;
    OK(hx_session_create(g, &c, &s));
    float *buf = calloc(256 * 256, sizeof *buf);
    hx_feed fb = {NULL, xb, buf, hx_tensor_nbytes(xb)};
    hx_fetch ob = {NULL, yb, buf, hx_tensor_nbytes(yb)};
    hx_status st = hx_session_run(s, &fb, 1, &ob, 1, 0);
    CHECK(st == HX_ERR_DEVICE_OOM && strstr(hx_last_error(), "capacity 65536"), "%s: %s",
          hx_status_name(st), hx_last_error());
    void *p = NULL;
    st = hx_session_device_alloc(s, 1 << 20, &p);
    CHECK(st == HX_ERR_DEVICE_OOM && !p, "device alloc past the cap: %s", hx_status_name(st));
    for (int rep = 0; rep < 20; rep++) {
        float sv[16], so[16];
        for (int i = 0; i < 16; i++) sv[i] = (float)(i - 8 + rep) / 4;
        hx_feed fs = {NULL, xs, sv, sizeof sv};
        hx_fetch os = {NULL, ys, so, sizeof so};
        OK(hx_session_run(s, &fs, 1, &os, 1, 0));
        float want[16]; /* the CPU kernel's exp of relu(sv), bit for bit */
        for (int i = 0; i < 16; i++) want[i] = sv[i] > 0 ? sv[i] : 0;
        hx_k_unary_f32(HX_UNARY_EXP, want, want, 16, 1);
        for (int i = 0; i < 16; i++)
            CHECK(memcmp(&so[i], &want[i], 4) == 0, "after OOM, element %d: %g, expected %g", i,
                  so[i], want[i]);
    }
    free(buf);
    hx_session_free(s);
    hx_graph_free(g);
}

/* ---- bitwise equality of mixed placements ------------------------------------------- */

enum { MB = 32, MI = 24, MH = 48, MC = 5, EMB_V = 40, EMB_D = 16 };

/* A wide & deep shaped model: embedding rows gathered and summed on the
 * CPU, a dense MLP on the device, joined on the CPU; Adam, the first layer's
 * update on the device (its gradient too), the rest on the host. */
static hx_tensor *build_model(hx_graph *g, hx_tensor **x, hx_tensor **ids, hx_tensor **labels)
{
    int64_t xs[2] = {MB, MI}, is[2] = {MB, 3}, ls[1] = {MB}, es[2] = {EMB_V, EMB_D};
    int64_t w1s[2] = {MI, MH}, b1s[1] = {MH}, w2s[2] = {MH, EMB_D}, wos[2] = {EMB_D, MC};
    *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    *ids = hx_graph_input(g, "ids", HX_DTYPE_I32, 2, is);
    *labels = hx_graph_input(g, "labels", HX_DTYPE_I32, 1, ls);
    hx_tensor *emb = hx_graph_param(g, "emb", HX_DTYPE_F32, 2, es, hx_init_normal(0, 0.3));
    hx_tensor *w1 = hx_graph_param(g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1));
    hx_tensor *b1 = hx_graph_param(g, "b1", HX_DTYPE_F32, 1, b1s, hx_init_zeros());
    hx_tensor *w2 = hx_graph_param(g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(1));
    hx_tensor *wo = hx_graph_param(g, "wo", HX_DTYPE_F32, 2, wos, hx_init_xavier_normal(1));
    hx_tensor_set_target(w1, HX_TARGET_DEVICE);
    hx_tensor_set_target(emb, HX_TARGET_CPU);
    hx_tensor_set_target(wo, HX_TARGET_CPU);
    hx_graph_push_target(g, HX_TARGET_DEVICE);
    hx_tensor *h = hx_gelu(g, hx_bias_add(g, hx_matmul(g, *x, w1, false, false), b1));
    h = hx_layernorm(g, hx_matmul(g, h, w2, false, false),
                     on(hx_graph_param(g, "ln_g", HX_DTYPE_F32, 1, &es[1], hx_init_constant(1)),
                        HX_TARGET_DEVICE),
                     on(hx_graph_param(g, "ln_b", HX_DTYPE_F32, 1, &es[1], hx_init_zeros()),
                        HX_TARGET_DEVICE), 1e-5f);
    hx_graph_pop_target(g);
    hx_graph_push_target(g, HX_TARGET_CPU);
    int axis = 1;
    hx_tensor *wide = hx_reduce_sum(g, hx_gather(g, emb, *ids), 1, &axis, false);
    hx_tensor *logits = hx_matmul(g, hx_add(g, hx_tanh(g, wide), h), wo, false, false);
    hx_tensor *loss = hx_cross_entropy(g, logits, *labels);
    hx_graph_pop_target(g);
    return loss;
}

typedef struct model_run {
    float losses[12];
    float params[6][MH * EMB_D > EMB_V * EMB_D ? MH * EMB_D : EMB_V * EMB_D];
    hx_train_stats stats;
} model_run;

static const char *model_params[6] = {"emb", "w1", "b1", "w2", "wo", "ln_g"};

/* Trains `steps` steps (a NaN input at step nan_step when >= 0); with
 * ckpt_in, loads it first; with ckpt_out, saves at the end. */
static void train_model(hx_accelerator acc, int threads, bool scaling, int steps, int nan_step,
                        const char *ckpt_in, const char *ckpt_out, model_run *out)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x, *ids, *labels;
    hx_tensor *loss = build_model(g, &x, &ids, &labels);
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    opt.lr = 0.01;
    OK(hx_graph_apply_optimizer(g, NULL, &opt));
    hx_session_config c = hx_session_config_default();
    c.accelerator = acc;
    c.n_threads = threads;
    c.loss_scale.enabled = scaling;
    c.loss_scale.initial_scale = 1024;
    c.loss_scale.growth_interval = 3;
    hx_session *s = NULL;
    OK(hx_session_create(g, &c, &s));
    if (ckpt_in) OK(hx_session_load(s, ckpt_in));
    memset(out, 0, sizeof *out);
    test_rng r = test_rng_make(99);
    float xv[MB * MI];
    int32_t iv[MB * 3], lv[MB];
    for (int step = 0; step < steps; step++) {
        test_fill_uniform(&r, xv, MB * MI, -2, 2);
        for (int i = 0; i < MB * 3; i++) iv[i] = (int32_t)(test_rng_u64(&r) % EMB_V);
        for (int i = 0; i < MB; i++) lv[i] = (int32_t)(test_rng_u64(&r) % MC);
        if (step == nan_step) xv[7] = NAN;
        hx_feed f[3] = {{NULL, x, xv, sizeof xv}, {NULL, ids, iv, sizeof iv},
                        {NULL, labels, lv, sizeof lv}};
        hx_fetch o = {NULL, loss, &out->losses[step], sizeof(float)};
        hx_status st = hx_session_run(s, f, 3, &o, 1, HX_RUN_TRAIN);
        if (step == nan_step && !scaling) /* every gradient is NaN: the first update's is named */
            CHECK(st == HX_ERR_NUMERIC && strstr(hx_last_error(), "'emb' holds Inf or NaN"),
                  "a NaN input fails the step: %s: %s", hx_status_name(st), hx_last_error());
        else CHECK(st == HX_OK, "step %d: %s", step, hx_last_error());
    }
    for (int i = 0; i < 6; i++) {
        const hx_tensor *t = hx_graph_find(g, model_params[i]);
        OK(hx_session_read(s, t, out->params[i], hx_tensor_nbytes(t)));
    }
    OK(hx_session_train_stats(s, &out->stats));
    if (ckpt_out) OK(hx_session_save(s, ckpt_out));
    hx_session_free(s);
    hx_graph_free(g);
}

static bool same_run(const model_run *a, const model_run *b)
{
    return !memcmp(a->losses, b->losses, sizeof a->losses) &&
           !memcmp(a->params, b->params, sizeof a->params) && a->stats.step == b->stats.step &&
           a->stats.skipped_steps == b->stats.skipped_steps &&
           a->stats.loss_scale == b->stats.loss_scale;
}

static void test_bitwise(void)
{
    static model_run ref, run;
    for (int scaling = 0; scaling < 2; scaling++) {
        int nan_step = scaling ? 4 : 6;
        train_model(HX_ACCELERATOR_NONE, 2, scaling, 12, nan_step, NULL, NULL, &ref);
        if (scaling) CHECK(ref.stats.skipped_steps == 1, "the NaN step is skipped");
        const struct { hx_accelerator acc; int threads; } cfgs[3] = {
            {HX_ACCELERATOR_NONE, 1}, {HX_ACCELERATOR_EMU, 1}, {HX_ACCELERATOR_EMU, 2}};
        for (int k = 0; k < 3; k++) {
            train_model(cfgs[k].acc, cfgs[k].threads, scaling, 12, nan_step, NULL, NULL, &run);
            CHECK(same_run(&run, &ref), "%s at %d thread(s)%s differs from all-CPU at 2",
                  cfgs[k].acc == HX_ACCELERATOR_EMU ? "emu" : "all-CPU", cfgs[k].threads,
                  scaling ? " with loss scaling" : "");
        }
    }
    /* checkpoints: 6 steps on emu, saved, 6 more loaded into an all-CPU
     * session, equal to 12 steps in one go (the data stream restarts, so
     * compare with a reference that also restarts) */
    char path[] = "/tmp/hx_ckpt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    static model_run a, b, c;
    train_model(HX_ACCELERATOR_EMU, 2, false, 6, -1, NULL, path, &a);
    train_model(HX_ACCELERATOR_NONE, 2, false, 6, -1, path, NULL, &b);
    train_model(HX_ACCELERATOR_NONE, 2, false, 6, -1, NULL, path, &c);
    train_model(HX_ACCELERATOR_EMU, 1, false, 6, -1, path, NULL, &run);
    CHECK(same_run(&b, &run), "emu checkpoint -> all-CPU vs all-CPU checkpoint -> emu differ");
    remove(path);
}

/* Only a device gradient is non-finite: the device's scan kernel finds it
 * (the failed step changes nothing), and with loss scaling the step is
 * skipped. */
static void test_device_scan(void)
{
    for (int scaling = 0; scaling < 2; scaling++) {
        hx_graph *g = hx_graph_create();
        int64_t xs[2] = {4, 8}, ws[2] = {8, 3};
        hx_tensor *xd = hx_graph_input(g, "xd", HX_DTYPE_F32, 2, xs);
        hx_tensor *xh = hx_graph_input(g, "xh", HX_DTYPE_F32, 2, xs);
        hx_tensor *wd = on(hx_graph_param(g, "wd", HX_DTYPE_F32, 2, ws, hx_init_uniform(-1, 1)), HX_TARGET_DEVICE);
        hx_tensor *wh = on(hx_graph_param(g, "wh", HX_DTYPE_F32, 2, ws, hx_init_uniform(-1, 1)), HX_TARGET_CPU);
        /* d loss / d wd = 1e-3 xd^T: an Inf in xd reaches wd's gradient only */
        hx_tensor *yd = on(hx_matmul(g, xd, wd, false, false), HX_TARGET_DEVICE);
        hx_tensor *yh = on(hx_matmul(g, xh, wh, false, false), HX_TARGET_CPU);
        hx_tensor *loss = on(hx_reduce_sum(g, on(hx_add(g, yh, on(hx_scale(g, yd, 1e-3f),
                                                                  HX_TARGET_DEVICE)), HX_TARGET_CPU),
                                           0, NULL, false), HX_TARGET_CPU);
        OK(hx_graph_backward(g, loss));
        hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
        OK(hx_graph_apply_optimizer(g, NULL, &opt));
        hx_session_config c = hx_session_config_default();
        c.accelerator = HX_ACCELERATOR_EMU;
        c.n_threads = 2;
        c.loss_scale.enabled = scaling;
        hx_session *s = NULL;
        OK(hx_session_create(g, &c, &s));
        float xv[32], before[24], after[24], l;
        for (int i = 0; i < 32; i++) xv[i] = (float)(i % 5) - 2;
        OK(hx_session_read(s, wd, before, sizeof before));
        float xn[32];
        memcpy(xn, xv, sizeof xn);
        xn[5] = INFINITY;
        hx_feed f[2] = {{NULL, xd, xn, sizeof xn}, {NULL, xh, xv, sizeof xv}};
        hx_fetch o = {NULL, loss, &l, sizeof l};
        hx_status st = hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN);
        hx_train_stats ts;
        OK(hx_session_train_stats(s, &ts));
        if (scaling)
            CHECK(st == HX_OK && ts.skipped_steps == 1 && ts.loss_scale == 32768.0,
                  "loss scaling skips the step: %s, skipped %lld, scale %g", hx_status_name(st),
                  (long long)ts.skipped_steps, ts.loss_scale);
        else
            CHECK(st == HX_ERR_NUMERIC && strstr(hx_last_error(), "'wd' holds Inf or NaN"),
                  "the device scan names wd: %s: %s", hx_status_name(st), hx_last_error());
        OK(hx_session_read(s, wd, after, sizeof after));
        CHECK(!memcmp(before, after, sizeof before), "wd unchanged by the failed step");
        f[0].data = xv;
        OK(hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN));
        OK(hx_session_read(s, wd, after, sizeof after));
        CHECK(memcmp(before, after, sizeof before), "a finite step updates wd");
        hx_session_free(s);
        hx_graph_free(g);
    }
}

/* Kernels large enough to split over threads (GEMM, row kernels,
 * reductions), on a CPU lane and the emu lane at once, give the bits of
 * the all-CPU run at any thread count. (OpenBLAS's own threading would not:
 * 1 vs 3 threads differ here; kernels/cpu/gemm.c tiles by shape.) */
static void test_thread_count_bits(void)
{
    hx_graph *g = hx_graph_create();
    int64_t xs[2] = {384, 512}, ws[2] = {512, 448}, gs[1] = {448};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_normal(0, 1));
    hx_graph_push_target(g, HX_TARGET_CPU);
    hx_tensor *h = hx_matmul(g, x, w, false, false);
    h = hx_layernorm(g, h, hx_graph_param(g, "g", HX_DTYPE_F32, 1, gs, hx_init_uniform(0.5, 1.5)),
                     hx_graph_param(g, "b", HX_DTYPE_F32, 1, gs, hx_init_normal(0, 1)), 1e-5f);
    int axis = 0;
    hx_tensor *y = hx_reduce_sum(g, hx_softmax(g, hx_matmul(g, h, w, false, true)), 1, &axis, false);
    hx_graph_pop_target(g);
    hx_graph_push_target(g, HX_TARGET_DEVICE);
    hx_tensor *d = hx_matmul(g, hx_gelu(g, x), w, false, false);
    hx_tensor *z = hx_reduce_sum(g, hx_tanh(g, d), 1, &axis, false);
    hx_graph_pop_target(g);
    float *xv = malloc(sizeof *xv * 384 * 512), y1[512], y2[512], z1[448], z2[448];
    test_rng r = test_rng_make(77);
    test_fill_uniform(&r, xv, 384 * 512, -1, 1);
    hx_feed f = {NULL, x, xv, sizeof *xv * 384 * 512};
    float y0[512], z0[448];
    for (int t = 1; t <= 4; t++) {
        hx_session *s = open_session(g, HX_ACCELERATOR_EMU, t, no_cost, NULL);
        hx_session *ref = open_session(g, HX_ACCELERATOR_NONE, t == 1 ? 1 : 5 - t, no_cost, NULL);
        hx_fetch o[2] = {{NULL, y, y1, sizeof y1}, {NULL, z, z1, sizeof z1}};
        hx_fetch w2[2] = {{NULL, y, y2, sizeof y2}, {NULL, z, z2, sizeof z2}};
        OK(hx_session_run(s, &f, 1, o, 2, 0));
        OK(hx_session_run(ref, &f, 1, w2, 2, 0));
        const hx_plan *p = s->last_plan;
        CHECK(t == 1 || p->threads[0][0] < t, "%d threads: the CPU lane gets a share (%d)", t,
              p->threads[0][0]);
        if (t == 1) memcpy(y0, y2, sizeof y0), memcpy(z0, z2, sizeof z0);
        CHECK(!memcmp(y1, y0, sizeof y1) && !memcmp(z1, z0, sizeof z1) &&
                  !memcmp(y2, y0, sizeof y1) && !memcmp(z2, z0, sizeof z1),
              "emu at %d threads (a CPU lane beside it) or all-CPU at %d differ from all-CPU at 1",
              t, t == 1 ? 1 : 5 - t);
        hx_session_free(s);
        hx_session_free(ref);
    }
    free(xv);
    hx_graph_free(g);
}

/* ---- device feeds ------------------------------------------------------------------ */

static uint64_t h2d_copies(hx_session *s)
{
    hx_backend_stats st;
    s->e.be[HX_DEV_ACCEL]->stats(s->e.be[HX_DEV_ACCEL], &st);
    return st.h2d_copies;
}

static void test_device_feeds(void)
{
    hx_graph *g = hx_graph_create();
    int64_t sh[2] = {8, 16};
    hx_tensor *xd = hx_graph_input(g, "xd", HX_DTYPE_F32, 2, sh); /* device ops only */
    hx_tensor *xh = hx_graph_input(g, "xh", HX_DTYPE_F32, 2, sh); /* a CPU op reads it */
    hx_tensor *a = on(hx_exp(g, xd), HX_TARGET_DEVICE);
    hx_tensor *b = on(hx_tanh(g, xh), HX_TARGET_CPU);
    hx_tensor *y = on(hx_mul(g, a, on(hx_sigmoid(g, xh), HX_TARGET_DEVICE)), HX_TARGET_DEVICE);
    hx_tensor *z = on(hx_add(g, y, b), HX_TARGET_CPU);
    hx_session *s = open_session(g, HX_ACCELERATOR_EMU, 2, no_cost, NULL);
    hx_session *none = open_session(g, HX_ACCELERATOR_NONE, 2, no_cost, NULL);
    float dv[128], hv[128], out[128], want[128];
    test_rng r = test_rng_make(23);
    void *dbuf = NULL;
    OK(hx_session_device_alloc(s, 2 * sizeof dv, &dbuf));
    for (int rep = 0; rep < 4; rep++) {
        test_fill_uniform(&r, dv, 128, -1, 1);
        test_fill_uniform(&r, hv, 128, -1, 1);
        OK(hx_session_device_upload(s, (char *)dbuf + sizeof dv, dv, sizeof dv));
        bool dev = rep % 2;
        hx_feed f[2] = {{NULL, xd, dev ? (char *)dbuf + sizeof dv : (void *)dv, sizeof dv},
                        {NULL, xh, hv, sizeof hv}};
        hx_fetch o = {NULL, z, out, sizeof out}, w = {NULL, z, want, sizeof want};
        uint64_t before = h2d_copies(s);
        OK(hx_session_run(s, f, 2, &o, 1, 0));
        uint64_t copies = h2d_copies(s) - before;
        hx_feed fr[2] = {{NULL, xd, dv, sizeof dv}, {NULL, xh, hv, sizeof hv}};
        OK(hx_session_run(none, fr, 2, &w, 1, 0));
        CHECK(!memcmp(out, want, sizeof out), "rep %d (%s feed) differs from all-CPU", rep,
              dev ? "device" : "host");
        CHECK(copies == (dev ? 1u : 2u), "%s feed: %llu h2d copies (xh always, xd for a host feed)",
              dev ? "device" : "host", (unsigned long long)copies);
    }
    /* a device feed for an input a CPU op reads, for a fetched input, past the block */
    hx_feed bad[2] = {{NULL, xd, dv, sizeof dv}, {NULL, xh, dbuf, sizeof hv}};
    hx_fetch o = {NULL, z, out, sizeof out};
    hx_status st = hx_session_run(s, bad, 2, &o, 1, 0);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "feed 1 ('xh')") &&
              strstr(hx_last_error(), "placed on the cpu") && strstr(hx_last_error(), "'tanh_"),
          "device feed of a host input: %s: %s", hx_status_name(st), hx_last_error());
    hx_feed fx = {NULL, xd, dbuf, sizeof dv};
    hx_fetch ox = {NULL, xd, out, sizeof out};
    st = hx_session_run(s, &fx, 1, &ox, 1, 0);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "it is fetched"),
          "device feed of a fetched input: %s: %s", hx_status_name(st), hx_last_error());
    hx_feed past[2] = {{NULL, xd, (char *)dbuf + 600, sizeof dv}, {NULL, xh, hv, sizeof hv}};
    st = hx_session_run(s, past, 2, &o, 1, 0);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "run past the end"),
          "a feed past its block: %s: %s", hx_status_name(st), hx_last_error());
    st = hx_session_device_upload(s, (char *)dbuf + 700, dv, sizeof dv);
    CHECK(st == HX_ERR_INVALID_ARGUMENT, "upload past the block: %s", hx_status_name(st));
    void *q = NULL;
    st = hx_session_device_alloc(none, 64, &q);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !q && strstr(hx_last_error(), "no accelerator"),
          "device memory without an accelerator: %s: %s", hx_status_name(st), hx_last_error());
    /* still usable: a host feed after the errors, and after freeing the block */
    hx_session_device_free(s, dbuf);
    hx_feed good[2] = {{NULL, xd, dv, sizeof dv}, {NULL, xh, hv, sizeof hv}};
    OK(hx_session_run(s, good, 2, &o, 1, 0));
    OK(hx_session_run(none, good, 2, &(hx_fetch){NULL, z, want, sizeof want}, 1, 0));
    CHECK(!memcmp(out, want, sizeof out), "after the feed errors");
    hx_session_free(s);
    hx_session_free(none);
    hx_graph_free(g);
}

/* ---- many small runs ----------------------------------------------------------------- */

/* 300 runs of the gather graph with fresh data (emu with a little latency,
 * so lanes really interleave), each equal to the all-CPU run. */
static void test_many_runs(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *ids, *x;
    hx_tensor *y = build_gather_graph(g, HX_TARGET_CPU, &ids, &x);
    hx_emu_cost cost = {1e9, 2e-6, 0};
    hx_session *s = open_session(g, HX_ACCELERATOR_EMU, 2, cost, NULL);
    hx_session *s4 = open_session(g, HX_ACCELERATOR_EMU, 4, no_cost, NULL);
    hx_session *ref = open_session(g, HX_ACCELERATOR_NONE, 1, no_cost, NULL);
    int32_t iv[EN];
    float xv[EN * ED], out[EN * ED], out4[EN * ED], want[EN * ED];
    test_rng r = test_rng_make(31);
    int bad = 0;
    for (int rep = 0; rep < 300; rep++) {
        for (int i = 0; i < EN; i++) iv[i] = (int32_t)(test_rng_u64(&r) % EV);
        test_fill_uniform(&r, xv, EN * ED, -1, 1);
        hx_feed f[2] = {{NULL, ids, iv, sizeof iv}, {NULL, x, xv, sizeof xv}};
        hx_fetch o = {NULL, y, out, sizeof out}, o4 = {NULL, y, out4, sizeof out4},
                 w = {NULL, y, want, sizeof want};
        if (hx_session_run(s, f, 2, &o, 1, 0) || hx_session_run(s4, f, 2, &o4, 1, 0) ||
            hx_session_run(ref, f, 2, &w, 1, 0) || memcmp(out, want, sizeof out) ||
            memcmp(out4, want, sizeof out))
            bad++;
    }
    CHECK(bad == 0, "%d of 300 runs differ from the all-CPU run or failed (%s)", bad, hx_last_error());
    hx_session_free(s);
    hx_session_free(s4);
    hx_session_free(ref);
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"overlap", test_overlap},
    {"lane_errors", test_lane_errors},
    {"device_oom", test_device_oom},
    {"bitwise", test_bitwise},
    {"thread_count_bits", test_thread_count_bits},
    {"device_scan", test_device_scan},
    {"device_feeds", test_device_feeds},
    {"many_runs", test_many_runs},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "concurrency", cases, TEST_COUNT(cases));
}
