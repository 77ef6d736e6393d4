/* Data parallel's gradient sums during the backward and (ZeRO stages 1
 * and 2) the all-gathers of the updated parameters during the updates
 * (session/dp_overlap.c), under mpirun, checked by the order of events,
 * not by times: a session
 * of the deep MLP (6 layers, f32, Adam) trains beside one with
 * no_comm_overlap on the same feeds, at stages 0, 1 and 2, and from the
 * overlapping session's log of its last run (hx__session_dp_log):
 * - the units follow the backward: the steps that make one unit's
 *   gradients never come between the first and the last of another's
 *   (ZeRO's groups are runs of neighbouring chunks; groups of every
 *   rank's g-th chunk, before session 14, failed this at stages 1 and 2);
 * - on emu the backward's device work is cut into buckets of at most a
 *   chunk, so the gradient copies leave as it goes (with the 4 MiB
 *   default it was one piece here, every copy after it);
 * - no unit's sum starts before every step writing its gradients has run
 *   (its 'R'), and the units start in their order;
 * - on the CPU with one thread (every step on the calling thread, in
 *   order), a unit that may start does so before the next step runs: no
 *   step ('D') comes between the moment the next unit in order is ready
 *   and its start;
 * - at stage 0 all but the units whose last writer is phase 0's last
 *   step start during the backward (before 'E'; at stages 1 and 2, whose
 *   units are groups reduce-scattered, at least one: a start may wait for
 *   a send buffer, 'F' in the log), where the session without overlap
 *   starts none;
 * the last three for the all-gathers in the updates' log (stages 1, 2:
 * a group's all-gather after this rank's updates of it; at least one
 * during the updates when there are several groups; they need no group
 * buffer, so the log's 'F' does not hold them back);
 * - stages 1 and 2: the step returns with the all-gathers in flight and
 *   the next forward finishes them ('G' in its log: at least one, none
 *   without overlap), and on the CPU no step that reads a parameter of a
 *   group runs before that group's all-gather finished. Progress usually
 *   finishes these small all-gathers before the first step, so the case
 *   "readers" has it finish none (hx__dp_defer_test 2): the readers'
 *   waits then finish them in the middle of the forward ('G' after a
 *   'D'), with the same checks and bits; "break" leaves the waits out too
 *   (hx__dp_defer_test 1) and the check must see steps read early;
 * and the two sessions hold the same bits in every parameter and report
 * the same gradient norms. On emu (the MLP on the device, its gradient
 * copies and kernels on streams) the first three checks and the bits. Once its
 * host steps are done the thread sleeps until the streams pass the
 * next writer, at most once per gradient ('W' in the log; it polled
 * every 20-200 us before, hundreds of times a step). At stages 1 and 2
 * a unit may start only while one of the 3 send buffers is free: the log
 * says when one is freed ('F'). */
#include "deep_mlp.h"
#include "dist/dist.h"
#include "hetex_checks.h"
#include "mpi_world.h"
#include "session/session.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 3, B = 8, W = 8, LAYERS = 6 };

static hx_comm *comm;
static int rank, size;

static hx_session_config config(int stage, hx_accelerator acc, bool no_overlap)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = acc;
    cfg.comm = comm;
    cfg.zero_stage = stage;
    cfg.no_comm_overlap = no_overlap;
    cfg.offload.chunk_size = 2 * W * W * sizeof(float); /* several chunks */
    cfg.emu_cost.launch_latency_s = 5e-4; /* emu: the backward's streams take a while */
    return cfg;
}

/* What the log of one run shows. */
typedef struct order {
    int waits;  /* sleeps until a stream passed a writer ('W') */
    int early;  /* starts before their unit was ready, or out of order */
    int late;   /* steps run while the next unit could have started */
    int during; /* starts before the phase's end */
    int units;  /* started in all */
} order;

static order read_log(const hx_session *s, int phase, int slots)
{
    int n, busy = 0; /* group buffers in use (ZeRO) */
    const hx_dp_event *ev = hx__session_dp_log(s, phase, &n);
    order o = {0};
    bool ready[256] = {0}, over = false;
    for (int i = 0; i < n; i++) {
        int v = ev[i].v;
        switch (ev[i].kind) {
        case 'R':
            if (v >= 0 && v < 256) ready[v] = true;
            break;
        case 'S':
            o.early += v != o.units || v >= 256 || !ready[v];
            o.units++;
            o.during += !over;
            busy++;
            break;
        case 'F':
            busy--;
            break;
        case 'D':
            o.late += !over && o.units < 256 && ready[o.units] && busy < slots;
            break;
        case 'E':
            over = true;
            break;
        case 'W':
            o.waits++;
            break;
        }
    }
    return o;
}

/* The phase-0 steps of the last run of s that read a parameter (its
 * replica: the half copy, else the parameter) of a chunk group before
 * the log says that group's deferred all-gather finished ('G'; a group
 * with none was finished in the step before), the number of 'G's into
 * *gathers and of those after a step into *mid. Flat groups: the f32
 * ones, then the bf16 ones. */
static int reads_before_gather(const hx_session *s, int *gathers, int *mid)
{
    const hx_graph *g = s->e.g;
    int n, ne, early = 0;
    const hx_step *st = hx__plan_steps(s->last_plan, 0, &n);
    const hx_dp_event *ev = hx__session_dp_log(s, 0, &ne);
    int64_t g0 = s->dp[0] ? hx__dp_groups(s->dp[0]) : 0;
    int at[256]; /* per group: its 'G' in the log (-1: none) */
    bool stepped = false;
    *gathers = *mid = 0;
    for (int x = 0; x < 256; x++) at[x] = -1;
    for (int i = 0; i < ne; i++) {
        stepped |= ev[i].kind == 'D';
        if (ev[i].kind != 'G' || ev[i].v < 0 || ev[i].v >= 256) continue;
        at[ev[i].v] = i;
        ++*gathers;
        *mid += stepped;
    }
    for (int i = 0; i < ne; i++) {
        if (ev[i].kind != 'D' || ev[i].v < 0 || ev[i].v >= n) continue;
        const hx_step *sp = &st[ev[i].v];
        for (int t = 0; t < g->n; t++) { /* the replicas it reads (a copy: its source) */
            const hx_tensor *u = g->tensors[t];
            int k = s->dp_index[t];
            if (k < 0) continue;
            const hx_tensor *r = hx__zero_replica(u);
            bool reads = !sp->fn && sp->node == r;
            for (int j = 0; sp->fn && j < sp->node->n_src && !reads; j++) reads = sp->node->src[j] == r;
            int64_t x = (k % 2 ? g0 : 0) + hx__dp_group_of(s->dp[k % 2], k / 2);
            if (reads && x < 256 && at[x] > i) early++;
        }
    }
    return early;
}

/* The backward's gradients, as the sums read them: per unit (a chunk at
 * stage 0, a group with ZeRO) the first and last phase-0 step that makes
 * one of its gradients (where its update reads it: the gradient's node on
 * the CPU, its copy to the host on emu). Returns how many units' steps
 * interleave with another unit's (the first of one between the first and
 * last of another). */
static int interleaved(const hx_session *s)
{
    const hx_plan *p = s->last_plan;
    const hx_dp *d = s->dp[0];
    int n, lo[256], hi[256], bad = 0;
    int64_t units = hx__dp_units(d);
    const hx_step *st = hx__plan_steps(p, 0, &n);
    for (int64_t x = 0; x < units && x < 256; x++) lo[x] = n, hi[x] = -1;
    for (int i = 0; i < hx__plan_grad_count(p); i++) {
        void *v;
        int home, w = -1;
        const hx_tensor *u = hx__plan_grad(p, i, &v, &home);
        int k = s->dp_index[u->id];
        for (int j = 0; j < n; j++)
            if (st[j].node == u->src[1] && st[j].dev == home) w = j;
        int64_t x = k < 0 ? -1 : hx__dp_unit_of(d, k / 2);
        if (x < 0 || x >= 256 || w < 0) continue;
        if (w < lo[x]) lo[x] = w;
        if (w > hi[x]) hi[x] = w;
    }
    for (int64_t x = 0; x < units && x < 256; x++)
        for (int64_t y = 0; y < units && y < 256; y++)
            if (x != y && hi[y] >= 0 && lo[x] > lo[y] && lo[x] < hi[y]) {
                bad++;
                break;
            }
    return bad;
}

/* mode (hx__dp_defer_test, stages 1, 2 on the CPU): 2, progress finishes
 * no deferred all-gather (the readers' waits do); 1, nothing but phase
 * 0's end does, and only the check that must see it runs. */
static void overlap_case(int stage, hx_accelerator acc, int mode)
{
    static const char *const modes[3] = {"", ", readers not waiting", ", the readers finish them"};
    bool broken = mode == 1;
    char what[96];
    snprintf(what, sizeof what, "stage %d on %s%s", stage, acc == HX_ACCELERATOR_NONE ? "the cpu" : "emu",
             modes[mode]);
    deep_mlp ma; /* both sessions run its graph */
    if (deep_mlp_build(B / size, W, LAYERS, &ma)) {
        CHECK(false, "deep_mlp_build: %s", hx_last_error());
        return;
    }
    hx_session_config ca = config(stage, acc, false), cb = config(stage, acc, true);
    hx_session *a = test_session_with(ma.g, &ca, what), *b = test_session_with(ma.g, &cb, "no overlap");
    int rows = B / size;
    float x[B * W], y[B * W];
    test_rng rng = test_rng_make(7);
    hx__dp_defer_test = mode;
    for (int s = 0; s < STEPS && a && b; s++) {
        test_fill_uniform(&rng, x, B * W, -1, 1);
        test_fill_uniform(&rng, y, B * W, -1, 1);
        hx_feed fa[2] = {{NULL, ma.x, x + rank * rows * W, sizeof(float) * rows * W},
                         {NULL, ma.y, y + rank * rows * W, sizeof(float) * rows * W}};
        OK(hx_session_run(a, fa, 2, NULL, 0, HX_RUN_TRAIN));
        OK(hx_session_run(b, fa, 2, NULL, 0, HX_RUN_TRAIN));
        hx_train_stats ta, tb;
        OK(hx_session_train_stats(a, &ta));
        OK(hx_session_train_stats(b, &tb));
        CHECK(broken || ta.grad_norm == tb.grad_norm, "%s: step %d: gradient norm %.17g, without "
              "overlap %.17g", what, s, ta.grad_norm, tb.grad_norm);
    }
    hx__dp_defer_test = 0;
    if (a && b && broken) {
        int gathers, mid, early = reads_before_gather(a, &gathers, &mid);
        CHECK(gathers > 0 && early > 0, "%s: rank %d: the check saw none of %d steps reading a "
              "parameter before its all-gather finished (%d finished in the forward)", what, rank, early,
              gathers);
    } else if (a && b) {
        deep_mlp_check_same_params(a, b, &ma, what);
        int64_t units = hx__dp_units(a->dp[0]);
        int slots = !stage ? (int)units : (units < 3 ? (int)units : 3); /* dist/dp.c's */
        int mixed = interleaved(a);
        order o = read_log(a, 0, slots), ob = read_log(b, 0, slots);
        /* the units follow the backward: each one's gradients are made one
         * after the other, none between another's (groups that took every
         * rank's g-th chunk mixed the first and the last layers) */
        CHECK(!mixed, "%s: rank %d: %d of %lld units have gradients made between those of another "
              "unit", what, rank, mixed, (long long)units);
        CHECK(o.units == units && ob.units == units, "%s: rank %d: %d and %d of %lld units started",
              what, rank, o.units, ob.units, (long long)units);
        CHECK(!o.early, "%s: rank %d: %d sums started before their gradients were complete or out of "
              "order", what, rank, o.early);
        CHECK(ob.during == 0, "%s: rank %d: without overlap %d sums started during the backward", what,
              rank, ob.during);
        /* after its host steps the thread sleeps on the streams' writers,
         * once each at most, instead of polling (which took the cores from
         * the computation it waits for) */
        CHECK(o.waits <= hx__plan_grad_count(a->last_plan), "%s: rank %d: %d waits for the streams "
              "in the backward, for %d gradients", what, rank, o.waits, hx__plan_grad_count(a->last_plan));
        if (acc == HX_ACCELERATOR_EMU) {
            /* the gradients leave the device as the backward makes them: its
             * work is cut in buckets of at most a chunk (with the 4 MiB
             * default this 1.7 KB model's phase 0 was one device unit, and
             * every gradient copy waited for its end) */
            int cuts = 0;
            for (int u = 0; u < hx__plan_n_units(a->last_plan); u++) {
                hx_unit_view v = hx__plan_unit(a->last_plan, u);
                cuts += v.phase == 0 && v.lane == HX_UNIT_DEVICE;
            }
            CHECK(cuts > 1 && a->e.cfg.grad_bucket_bytes <= hx__dp_chunk_size(a->dp[0]), "%s: rank %d: "
                  "the backward's device work in %d part(s), buckets of %zu bytes for chunks of %zu", what,
                  rank, cuts, a->e.cfg.grad_bucket_bytes, hx__dp_chunk_size(a->dp[0]));
        }
        if (acc == HX_ACCELERATOR_NONE) {
            /* the units whose last writer is the backward's last step can start only after it */
            const hx_plan *p = a->last_plan;
            int n, at_end = 0;
            const hx_step *st = hx__plan_steps(p, 0, &n);
            for (int i = 0; i < hx__plan_grad_count(p); i++) {
                void *v;
                int home;
                const hx_tensor *u = hx__plan_grad(p, i, &v, &home);
                at_end += st[n - 1].node == u->src[1];
            }
            CHECK(!o.late, "%s: rank %d: %d steps ran while a sum could have started", what, rank, o.late);
            CHECK(o.during >= (!stage ? units - at_end : 1), "%s: rank %d: %d of %lld sums started "
                  "during the backward (%d gradients written by its last step)", what, rank, o.during,
                  (long long)units, at_end);
        }
        if (stage) { /* the all-gathers of the updated parameters, during the updates */
            int64_t groups = hx__dp_groups(a->dp[0]);
            order g = read_log(a, 1, (int)groups), gb = read_log(b, 1, (int)groups); /* no buffers */
            CHECK(g.units == groups && gb.units == groups, "%s: rank %d: %d and %d of %lld all-gathers "
                  "started", what, rank, g.units, gb.units, (long long)groups);
            CHECK(!g.early, "%s: rank %d: %d all-gathers started before their updates or out of order",
                  what, rank, g.early);
            CHECK(gb.during == 0, "%s: rank %d: without overlap %d all-gathers started during the updates",
                  what, rank, gb.during);
            if (acc == HX_ACCELERATOR_NONE) {
                CHECK(!g.late, "%s: rank %d: %d updates ran while an all-gather could have started", what,
                      rank, g.late);
                CHECK(groups < 2 || g.during > 0, "%s: rank %d: none of %lld all-gathers started during "
                      "the updates", what, rank, (long long)groups);
            }
            /* the last step's all-gathers end in this forward, before their readers */
            int gathers, gathers_b, mid, early = reads_before_gather(a, &gathers, &mid);
            reads_before_gather(b, &gathers_b, &mid);
            CHECK(gathers > 0 && gathers_b == 0, "%s: rank %d: %d all-gathers finished in the forward, "
                  "%d without overlap", what, rank, gathers, gathers_b);
            if (acc == HX_ACCELERATOR_NONE)
                CHECK(!early, "%s: rank %d: %d steps read a parameter before its group's all-gather "
                      "finished", what, rank, early);
            reads_before_gather(a, &gathers, &mid);
            CHECK(mode != 2 || mid > 0, "%s: rank %d: none of %d all-gathers finished after a step of the "
                  "forward", what, rank, gathers);
        }
    }
    hx_session_free(a);
    hx_session_free(b);
    deep_mlp_free(&ma);
}

static void test_cpu(void)
{
    for (int stage = 0; stage <= 2; stage++) overlap_case(stage, HX_ACCELERATOR_NONE, 0);
}

static void test_emu(void)
{
    for (int stage = 0; stage <= 2; stage++) overlap_case(stage, HX_ACCELERATOR_EMU, 0);
}

static void test_readers(void) { overlap_case(2, HX_ACCELERATOR_NONE, 2); }
static void test_break(void) { overlap_case(2, HX_ACCELERATOR_NONE, 1); }

static int setup(void)
{
    comm = mpi_world_open(60, &rank, &size);
    return comm ? 0 : 1;
}

static void teardown(void) { hx_comm_free(comm); }

int main(int argc, char **argv)
{
    static const test_case cases[] = {{"cpu", test_cpu}, {"emu", test_emu}, {"readers", test_readers},
                                       {"break", test_break}};
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "mpi_zero_overlap", cases, TEST_COUNT(cases), &o);
}
