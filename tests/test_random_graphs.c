/* test_random_graphs: 300 seeded random graphs (tests/util/randgraph.h) over
 * the whole op set with random target attributes. Each graph runs under the
 * all-CPU session (accelerator NONE) and under emu placements; the loss,
 * forward values, gradients, and after HX_RUN_TRAIN steps the parameters and
 * optimizer state must be bitwise equal (emu runs the CPU kernels, so any
 * difference is a placement, copy, memory-plan or scheduling bug).
 *
 * Every run after the first starts from poisoned transient arenas and is fed
 * new data, so a step that reads a value before it is written (a missing
 * dependency, a race in a concurrent executor, an arena overlap) sees NaN or
 * the previous run's value, not the right one by luck. Fetch sets alternate
 * (the first plan's arena is outgrown), feeds and fetches go by handle and
 * by name, and parameters are rewritten before training. A quarter of the
 * graphs with updates train with loss scaling, half of those with a scale so
 * large that steps are skipped (the gradient scan, on either device).
 *
 * emu at 2 threads is compared with the CPU at 2, emu at 1 with the CPU at
 * 1. GEMM (OpenBLAS) is not thread-count deterministic (test_backend_ops
 * shows a (7168,13)x(13,9) product that differs); every other kernel is, so
 * for graphs without a matmul the CPU runs at 1 and 2 threads must be equal
 * too. One graph in 15 holds a tensor large enough for kernels to split
 * their work over threads.
 *
 * A failure prints the seed, the graph (ops, shapes, targets) and the emu
 * plan summary. `test_random_graphs --seed N [--verbose]` runs one seed;
 * `--repeat N` runs every seed N times (a stress run for executor races). */
#include "hetex.h"
#include "backend_suite.h"
#include "graph/graph.h"
#include "randgraph.h"
#include "session/session.h"
#include "scheduler/plan.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_SEEDS 300

/* ---- a transcript: every fetched byte of a session's runs, in order ---------------- */

typedef struct record {
    int run;
    const hx_tensor *t;
    hx_status st;
    size_t off, bytes;
} record;

typedef struct transcript {
    record *rec;
    int n, cap;
    unsigned char *data;
    size_t len, cap_bytes;
} transcript;

static void tr_free(transcript *tr)
{
    free(tr->rec);
    free(tr->data);
    memset(tr, 0, sizeof *tr);
}

/* Room for one record of `bytes`; returns its data (filled with `fill`). */
static void *tr_add(transcript *tr, int run, const hx_tensor *t, size_t bytes, unsigned char fill)
{
    if (tr->n == tr->cap) {
        tr->cap = tr->cap ? 2 * tr->cap : 64;
        tr->rec = realloc(tr->rec, sizeof *tr->rec * tr->cap);
    }
    if (tr->len + bytes > tr->cap_bytes) {
        tr->cap_bytes = (tr->len + bytes) * 2;
        tr->data = realloc(tr->data, tr->cap_bytes);
    }
    if (!tr->rec || !tr->data) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    tr->rec[tr->n++] = (record){run, t, HX_OK, tr->len, bytes};
    memset(tr->data + tr->len, fill, bytes);
    tr->len += bytes;
    return tr->data + tr->len - bytes;
}

/* One run: feeds of `run`; fetches: the first n_fetch of r's plus (train)
 * every parameter; by name or by handle. */
static hx_status one_run(rg_graph *r, hx_session *s, transcript *tr, int run, int n_fetch,
                         bool train, bool by_name, unsigned char fill)
{
    hx_feed feeds[r->n_inputs + 1];
    rg_feeds(r, (uint64_t)run, feeds);
    int n = n_fetch + (train ? r->n_params : 0);
    hx_fetch fetches[n + 1];
    int first = tr->n;
    for (int i = 0; i < n; i++) {
        const hx_tensor *t = i < n_fetch ? r->fetch[i] : r->params[i - n_fetch];
        size_t bytes = hx_tensor_nbytes(t);
        tr_add(tr, run, t, bytes, fill);
        fetches[i] = by_name ? (hx_fetch){.name = hx_tensor_name(t), .bytes = bytes}
                             : (hx_fetch){.tensor = t, .bytes = bytes};
    }
    for (int i = 0; i < n; i++) fetches[i].data = tr->data + tr->rec[first + i].off;
    for (int i = 0; by_name && i < r->n_inputs; i++) {
        feeds[i].name = hx_tensor_name(feeds[i].tensor);
        feeds[i].tensor = NULL;
    }
    hx_status st = hx_session_run(s, feeds, r->n_inputs, fetches, n, train ? HX_RUN_TRAIN : 0);
    for (int i = 0; i < n; i++) tr->rec[first + i].st = st;
    return st;
}

/* New parameter values (the same for every session of the graph). */
static hx_status write_params(rg_graph *r, hx_session *s)
{
    test_rng rng = test_rng_make(r->seed + 77);
    hx_status st = HX_OK;
    for (int i = 0; i < r->n_params && !st; i++) {
        int64_t n = hx_tensor_numel(r->params[i]);
        float *v = malloc(sizeof *v * (size_t)n);
        if (!v) return HX_ERR_OUT_OF_MEMORY;
        test_fill_uniform(&rng, v, n, -1, 1);
        st = hx_session_write(s, r->params[i], v, sizeof *v * (size_t)n);
        free(v);
    }
    return st;
}

/* The protocol every session of a graph goes through. Inference runs
 * alternate a loss-only fetch and the full fetch set, so the first plan's
 * arena is outgrown and that plan must follow the new one; the third and
 * fourth fetch and feed by name. Then new parameter values are written,
 * and training runs follow (three with updates, else one: dropout is
 * active), then the parameters and optimizer state are read back. Every
 * run after the first starts from poisoned arenas. Returns the first
 * failure. */
static hx_status protocol(rg_graph *r, hx_session *s, transcript *tr, unsigned char fill)
{
    int n_train = r->n_updates ? 3 : 1;
    hx_status st = HX_OK;
    for (int k = 0; k < 4 && !st; k++) {
        if (k) st = bsuite_poison(s, k & 1 ? 0xff : 0x7f);
        if (!st) st = one_run(r, s, tr, k, k & 1 ? r->n_fetch : 1, false, k >= 2, fill);
    }
    if (!st) st = write_params(r, s);
    for (int k = 0; k < n_train && !st; k++) {
        st = bsuite_poison(s, k & 1 ? 0xff : 0x7f);
        if (!st) st = one_run(r, s, tr, 4 + k, r->n_fetch, true, false, fill);
    }
    for (int i = 0; i < r->n_params + r->n_state && !st; i++) {
        const hx_tensor *t = i < r->n_params ? r->params[i] : r->state[i - r->n_params];
        size_t bytes = hx_tensor_nbytes(t);
        st = hx_session_read(s, t, tr_add(tr, 100, t, bytes, fill), bytes);
        tr->rec[tr->n - 1].st = st;
    }
    hx_train_stats ts = {0};
    if (!st) st = hx_session_train_stats(s, &ts);
    if (!st) {
        int64_t v[3] = {ts.step, ts.skipped_steps, (int64_t)ts.loss_scale};
        memcpy(tr_add(tr, 101, NULL, sizeof v, fill), v, sizeof v);
    }
    return st;
}

/* ---- comparing ------------------------------------------------------------------------ */

static int n_reported;

static void report(rg_graph *r, hx_session *s, const char *what)
{
    if (n_reported++ >= 3) return; /* the first few in full */
    fprintf(stderr, "---- seed %llu: %s\n%s", (unsigned long long)r->seed, what, rg_describe(r));
    if (s) {
        fprintf(stderr, "---- plan of the session under test:\n");
        bsuite_print_summary(s, stderr);
    }
    fprintf(stderr, "---- rerun: test_random_graphs --seed %llu --verbose\n", (unsigned long long)r->seed);
}

static const char *run_name(int run)
{
    static char buf[32];
    if (run == 100) return "read back";
    if (run == 101) return "train stats (step, skipped, scale)";
    snprintf(buf, sizeof buf, "run %d (%s)", run, run < 4 ? "inference" : "train");
    return buf;
}

/* got vs want, record by record; describes the first difference. */
static bool same(const transcript *got, const transcript *want, char *why, size_t n)
{
    if (got->n != want->n) {
        snprintf(why, n, "%d records vs %d (a run failed in one session only?)", got->n, want->n);
        return false;
    }
    for (int i = 0; i < got->n; i++) {
        const record *a = &got->rec[i], *b = &want->rec[i];
        const char *name = b->t ? hx_tensor_name(b->t) : "step";
        if (a->st != b->st) {
            snprintf(why, n, "%s, '%s': status %s vs %s", run_name(b->run), name,
                     hx_status_name(a->st), hx_status_name(b->st));
            return false;
        }
        if (!memcmp(got->data + a->off, want->data + b->off, b->bytes)) continue;
        size_t es = b->t ? hx_dtype_size(hx_tensor_dtype(b->t)) : 8, e = 0;
        while (!memcmp(got->data + a->off + e * es, want->data + b->off + e * es, es)) e++;
        float gv = 0, wv = 0;
        if (b->t && hx_tensor_dtype(b->t) == HX_DTYPE_F32) {
            memcpy(&gv, got->data + a->off + e * es, 4);
            memcpy(&wv, want->data + b->off + e * es, 4);
        }
        snprintf(why, n, "%s, '%s' (%s): element %zu differs: %.9g vs %.9g", run_name(b->run), name,
                 b->t ? hx_tensor_op_name(b->t) : "", e, (double)gv, (double)wv);
        return false;
    }
    return true;
}

/* ---- one seed ------------------------------------------------------------------------- */

typedef struct totals {
    int graphs, ops, device_ops, copies, subgraphs, fallbacks, optimizers, big, scaled, skipped;
    int thread_checked; /* graphs whose all-CPU runs at 1 and 2 threads were compared */
    long op_seen[HX_OP_COUNT];
} totals;

/* Loss scaling on a quarter of the graphs with updates: a moderate scale,
 * or one so large that gradients overflow and steps are skipped. */
static hx_loss_scale_config loss_scale_for(const rg_graph *r)
{
    hx_loss_scale_config ls = hx_session_config_default().loss_scale;
    if (r->n_updates && r->seed % 4 == 3) {
        ls.enabled = true;
        ls.initial_scale = r->seed % 8 == 3 ? 1e36 : 1024;
        ls.growth_interval = 2;
    }
    return ls;
}

static hx_session *open_session(rg_graph *r, hx_accelerator acc, int threads, hx_fallback fb,
                                hx_status *st)
{
    hx_session_config c = hx_session_config_default();
    c.loss_scale = loss_scale_for(r);
    c.accelerator = acc;
    c.n_threads = threads;
    c.seed = 1000 + r->seed;
    c.fallback = fb;
    hx_session *s = NULL;
    *st = hx_session_create(r->g, &c, &s);
    return s;
}

static rg_options options_for(uint64_t seed)
{
    rg_options o = rg_options_default();
    o.big = seed % 15 == 7;
    if (o.big) o.max_moves = 7;
    o.optimizer = seed % 2 == 1;
    o.ftrl = seed % 6 == 1;
    return o;
}

/* The all-CPU run at `threads` into ref (with tot: counted). */
/* The ops a host fusion (graph.h's lowering: a matmul and its bias_add,
 * an activation of that) took into one fused node's kernel, which the
 * session's last plan therefore does not run: counted back, so that op
 * counts compare between sessions that fuse (all-CPU) and do not (emu's
 * device ops). */
static int fused_away(const hx_session *s)
{
    const hx_plan *p = s->last_plan;
    const hx_lowered *low = s->e.lowered;
    int n = 0;
    for (int k = 0; p && low && k < p->n_steps; k++) {
        const hx_tensor *t = p->steps[k].node;
        if (!p->steps[k].fn || !hx__lower_fuses_matmul((hx_lower_kind)low[t->id].kind)) continue;
        for (const hx_tensor *u = t->src[0];; u = u->src[0]) {
            bool planned = false;
            for (int q = 0; q < p->n_steps && !planned; q++)
                planned = p->steps[q].fn && p->steps[q].node == u;
            n += !planned;
            if (u->op == HX_OP_MATMUL) break;
        }
    }
    return n;
}

static hx_status reference(rg_graph *r, int threads, transcript *ref, hx_placement_stats *ps,
                           totals *tot)
{
    unsigned long long seed = (unsigned long long)r->seed;
    hx_status st;
    hx_session *s = open_session(r, HX_ACCELERATOR_NONE, threads, HX_FALLBACK_ERROR, &st);
    CHECK(st == HX_OK, "seed %llu: all-CPU session: %s", seed, hx_last_error());
    if (!s) return st;
    st = protocol(r, s, ref, 0x00);
    CHECK(st == HX_OK, "seed %llu: all-CPU run at %d thread(s): %s: %s", seed, threads,
          hx_status_name(st), hx_last_error());
    if (st) report(r, s, "the all-CPU run failed");
    CHECK(hx_session_placement_stats(s, ps) == HX_OK && ps->n_device_ops == 0 && ps->n_copies == 0,
          "seed %llu: all-CPU session: %d device ops, %d copies", seed, ps->n_device_ops,
          ps->n_copies);
    ps->n_ops += fused_away(s);
    hx_train_stats ts = {0};
    if (tot && !hx_session_train_stats(s, &ts)) tot->skipped += (int)ts.skipped_steps;
    hx_session_free(s);
    return st;
}

/* emu at `threads` (with the CPU fallback where FTRL needs it) against ref. */
static void against_emu(rg_graph *r, int threads, const transcript *ref,
                        const hx_placement_stats *ref_ps, bool verbose, totals *tot)
{
    unsigned long long seed = (unsigned long long)r->seed;
    hx_status st;
    hx_session *s = open_session(r, HX_ACCELERATOR_EMU, threads, HX_FALLBACK_ERROR, &st);
    if (st == HX_ERR_NO_KERNEL) { /* only FTRL lacks an emu kernel */
        CHECK(r->has_ftrl && strstr(hx_last_error(), "ftrl_update"), "seed %llu: emu: %s", seed,
              hx_last_error());
        s = open_session(r, HX_ACCELERATOR_EMU, threads, HX_FALLBACK_CPU, &st);
    }
    CHECK(st == HX_OK, "seed %llu: emu session: %s: %s", seed, hx_status_name(st), hx_last_error());
    if (!s) return;
    transcript got = {0};
    hx_status rst = protocol(r, s, &got, 0xff);
    char why[512] = "";
    bool ok = rst == HX_OK && same(&got, ref, why, sizeof why);
    if (rst) snprintf(why, sizeof why, "run failed: %s: %s", hx_status_name(rst), hx_last_error());
    CHECK(ok, "seed %llu: emu vs all-CPU at %d thread(s): %s", seed, threads, why);
    if (!ok) {
        char what[700];
        snprintf(what, sizeof what, "emu at %d thread(s): %s", threads, why);
        report(r, s, what);
    }
    hx_placement_stats ps = {0};
    CHECK(hx_session_placement_stats(s, &ps) == HX_OK, "stats: %s", hx_last_error());
    ps.n_ops += fused_away(s);
    CHECK(ps.n_ops == ref_ps->n_ops && ps.n_device_ops <= ps.n_ops &&
              ps.n_copies == ps.n_h2d + ps.n_d2h && ps.n_device_subgraphs <= ps.n_subgraphs,
          "seed %llu: emu stats: %d ops (all-CPU %d), %d device ops, %d copies = %d h2d + %d d2h",
          seed, ps.n_ops, ref_ps->n_ops, ps.n_device_ops, ps.n_copies, ps.n_h2d, ps.n_d2h);
    hx_memory_stats ms = {0};
    CHECK(hx_session_memory_stats(s, &ms) == HX_OK && ms.device_used_bytes <= ms.device_peak_bytes &&
              ms.device_peak_bytes <= ms.device_capacity &&
              ms.device_persistent_bytes + ms.device_transient_planned_bytes <= ms.device_peak_bytes,
          "seed %llu: emu memory: used %zu, peak %zu, capacity %zu, persistent %zu + arena %zu",
          seed, ms.device_used_bytes, ms.device_peak_bytes, ms.device_capacity,
          ms.device_persistent_bytes, ms.device_transient_planned_bytes);
    if (tot) {
        tot->ops += ps.n_ops;
        tot->device_ops += ps.n_device_ops;
        tot->copies += ps.n_copies;
        tot->subgraphs += ps.n_subgraphs;
        tot->fallbacks += ps.n_fallbacks;
    }
    if (verbose) bsuite_print_summary(s, stdout);
    tr_free(&got);
    hx_session_free(s);
}

static void check_seed(uint64_t seed, bool verbose, totals *tot)
{
    rg_options o = options_for(seed);
    rg_graph *r = rg_build(seed, &o);
    CHECK(r != NULL, "seed %llu: out of memory", (unsigned long long)seed);
    if (!r) return;
    if (verbose) printf("%s", rg_describe(r));
    CHECK(!r->error[0], "%s", r->error);
    if (r->error[0]) {
        report(r, NULL, r->error);
        rg_free(r);
        return;
    }
    for (int i = 0; i < r->g->n; i++) tot->op_seen[r->g->tensors[i]->op]++;
    tot->graphs++;
    tot->big += o.big;
    tot->optimizers += r->n_updates > 0;
    tot->scaled += loss_scale_for(r).enabled;

    /* per thread count: the all-CPU run, and emu against it */
    static const int threads[2] = {2, 1};
    transcript ref[2] = {{0}};
    hx_status st[2] = {HX_ERR_INTERNAL, HX_ERR_INTERNAL};
    for (int k = 0; k < 2; k++) {
        hx_placement_stats ref_ps = {0};
        st[k] = reference(r, threads[k], &ref[k], &ref_ps, k ? NULL : tot);
        if (!st[k]) against_emu(r, threads[k], &ref[k], &ref_ps, verbose && !k, k ? NULL : tot);
    }
    /* every kernel but GEMM gives the same bits at any thread count */
    bool gemm = false;
    for (int i = 0; i < r->g->n; i++) gemm |= r->g->tensors[i]->op == HX_OP_MATMUL;
    if (!gemm && !st[0] && !st[1]) {
        char why[512] = "";
        bool ok = same(&ref[1], &ref[0], why, sizeof why);
        CHECK(ok, "seed %llu: all-CPU at 1 thread vs at 2: %s", (unsigned long long)seed, why);
        if (!ok) report(r, NULL, "the all-CPU runs at 1 and 2 threads differ");
        tot->thread_checked++;
    }
    tr_free(&ref[0]);
    tr_free(&ref[1]);
    rg_free(r);
}

/* Every op the generator means to reach shows up in some graph; ops of the
 * table it does not generate are listed. */
static void check_coverage(const totals *t, int n_seeds)
{
    static const hx_op generated[] = {
        HX_OP_MATMUL, HX_OP_ADD, HX_OP_SUB, HX_OP_MUL, HX_OP_DIV, HX_OP_SCALE, HX_OP_BIAS_ADD,
        HX_OP_RELU, HX_OP_GELU, HX_OP_SIGMOID, HX_OP_TANH, HX_OP_EXP, HX_OP_LOG, HX_OP_SQRT,
        HX_OP_SOFTMAX, HX_OP_LOG_SOFTMAX, HX_OP_LAYERNORM, HX_OP_RESHAPE, HX_OP_PERMUTE,
        HX_OP_CONCAT, HX_OP_SLICE, HX_OP_REDUCE_SUM, HX_OP_CAST, HX_OP_GATHER,
        HX_OP_CAUSAL_MASK, HX_OP_CROSS_ENTROPY, HX_OP_BCE_LOGITS, HX_OP_DROPOUT,
        HX_OP_RELU_BACKWARD, HX_OP_GELU_BACKWARD, HX_OP_SIGMOID_BACKWARD, HX_OP_TANH_BACKWARD,
        HX_OP_SOFTMAX_BACKWARD, HX_OP_LOG_SOFTMAX_BACKWARD, HX_OP_LAYERNORM_BACKWARD_X,
        HX_OP_LAYERNORM_BACKWARD_GAMMA, HX_OP_SUM_TO, HX_OP_BROADCAST_TO, HX_OP_SLICE_BACKWARD,
        HX_OP_SCATTER_ADD, HX_OP_CROSS_ENTROPY_BACKWARD, HX_OP_BCE_LOGITS_BACKWARD,
        HX_OP_SGD_UPDATE, HX_OP_ADAM_UPDATE, HX_OP_ADAGRAD_UPDATE, HX_OP_FTRL_UPDATE,
    };
    enum { N_GEN = sizeof generated / sizeof generated[0] };
    bool listed[HX_OP_COUNT] = {false};
    for (int k = 0; k < N_GEN; k++) {
        listed[generated[k]] = true;
        if (n_seeds >= N_SEEDS)
            CHECK(t->op_seen[generated[k]] > 0, "no random graph used op '%s'",
                  hx__ops[generated[k]].name);
    }
    for (int op = HX_OP_MATMUL; op < HX_OP_COUNT; op++)
        if (!listed[op]) printf("note: the generator does not make op '%s'\n", hx__ops[op].name);
}

/* Which seeds, set by the flags. */
static long first_seed = 0, n_seeds = N_SEEDS, repeats = 1;
static bool verbose;

static int flag(int argc, char **argv, int i)
{
    const char *a = argv[i];
    if (!strcmp(a, "--verbose")) return verbose = true, 1;
    if (strcmp(a, "--seed") && strcmp(a, "--count") && strcmp(a, "--repeat")) return 0;
    if (i + 1 >= argc) return -1;
    long v = atol(argv[i + 1]);
    if (!strcmp(a, "--seed")) {
        first_seed = v;
        n_seeds = 1;
    } else if (!strcmp(a, "--count")) {
        n_seeds = v;
    } else {
        repeats = v; /* stress: races show up on some repeats only */
    }
    return 2;
}

static void test_graphs(void)
{
    totals tot = {0};
    clock_t t0 = clock();
    for (long rep = 0; rep < repeats; rep++)
        for (long k = 0; k < n_seeds; k++) check_seed((uint64_t)(first_seed + k), verbose, &tot);
    check_coverage(&tot, (int)n_seeds);
    printf("random graphs: %d graphs (%d big, %d with optimizers, %d with loss scaling: %d "
           "steps skipped), %d ops, %d on the device, %d subgraphs, %d copies, %d fallbacks; "
           "%d without GEMM also equal at 1 and 2 threads; %.2f s CPU\n",
           tot.graphs, tot.big, tot.optimizers, tot.scaled, tot.skipped, tot.ops, tot.device_ops,
           tot.subgraphs, tot.copies, tot.fallbacks, tot.thread_checked,
           (double)(clock() - t0) / CLOCKS_PER_SEC);
}

static const test_case cases[] = {{"graphs", test_graphs}};

int main(int argc, char **argv)
{
    test_options o = {.flag = flag,
                      .flags_help = "  --seed N     that seed only\n"
                                    "  --count N    N seeds (from --seed or 0)\n"
                                    "  --repeat N   every seed N times\n"
                                    "  --verbose    a line a graph\n"};
    return test_main_with(argc, argv, "random_graphs", cases, TEST_COUNT(cases), &o);
}
