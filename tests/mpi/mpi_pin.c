/* The host update threads pinned to cores (hx_session_config
 * .pin_update_threads, scheduler/pin.c), under mpirun at 1 and 2 ranks:
 * the deep MLP (f32, Adam on the host) trains with pinning beside a
 * session without, at ZeRO stages 0 and 2, on the same feeds, and
 * - the two hold the same bits in every parameter and report the same
 *   gradient norms, and each step adds to their host_update_s;
 * - each slot's core is this rank's share of the allowed cores, worked
 *   out here from sched_getaffinity and MPI's own idea of the ranks on
 *   this host (MPI_COMM_TYPE_SHARED), not from hetex's hostnames: the
 *   ranks there with the same mask share it out (mpirun binds each rank
 *   to a core of its own by default; ctest runs np 2 that way and with
 *   --bind-to none, where the two share both cores);
 * - every update thread, read back from inside it just after its update
 *   (sched_getcpu and its affinity mask), ran on its slot's core alone,
 *   and some did;
 * - the ranks on one host used disjoint cores where the mask has a core
 *   for each of them. */
#define _GNU_SOURCE
#include "deep_mlp.h"
#include "hetex_checks.h"
#include "mpi_world.h"
#include "session/session.h"
#include "testutil.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

enum { STEPS = 3, B = 8, W = 64, LAYERS = 4, THREADS = 2 };

static hx_comm *comm;
static int rank, size, local_rank, local_size;
static cpu_set_t start_mask; /* the calling thread's, before any session */

static hx_session_config config(int stage, bool pin)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = THREADS;
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.comm = comm;
    cfg.zero_stage = stage;
    cfg.pin_update_threads = pin;
    cfg.offload.chunk_size = 2 * W * W * sizeof(float); /* several chunks */
    return cfg;
}

/* This rank's expected core for slot j, as the header describes it. */
static int expected_core(int j)
{
    cpu_set_t set;
    int cores[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof set, &set)) return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) cores[n++] = c;
    int k = n / local_size;
    return k ? cores[local_rank * k + j % k] : cores[local_rank % n];
}

/* Checks the slots of a's pinning; returns the mask of the cores used. */
static uint64_t check_slots(const hx_session *a, const char *what)
{
    const hx_pin *p = a->e.pin;
    uint64_t used = 0;
    CHECK(p != NULL, "%s: rank %d: the session has no pinning", what, rank);
    if (!p) return 0;
    CHECK(hx__pin_slots(p) == THREADS, "%s: rank %d: %d slots for %d threads", what, rank,
          hx__pin_slots(p), THREADS);
    long runs = 0;
    for (int j = 0; j < hx__pin_slots(p); j++) {
        int core = hx__pin_core(p, j), want = expected_core(j);
        CHECK(core == want, "%s: rank %d (local %d of %d): slot %d on core %d, expected %d", what, rank,
              local_rank, local_size, j, core, want);
        const hx_pin_seen *s = hx__pin_seen(p, j);
        long r = atomic_load(&s->runs);
        runs += r;
        if (!r) continue;
        int cpu = atomic_load(&s->cpu), first = atomic_load(&s->mask_first),
            count = atomic_load(&s->mask_count);
        CHECK(cpu == core && first == core && count == 1, "%s: rank %d: slot %d's thread ran on core "
              "%d with a mask of %d cores from %d, not on core %d alone", what, rank, j, cpu, count,
              first, core);
        if (core >= 0 && core < 64) used |= 1ull << core;
    }
    CHECK(runs > 0, "%s: rank %d: no update ran on a pinned thread", what, rank);
    return used;
}

static void pin_case(int stage)
{
    char what[48];
    snprintf(what, sizeof what, "stage %d at %d ranks", stage, size);
    deep_mlp m;
    if (deep_mlp_build(B / size, W, LAYERS, &m)) {
        CHECK(false, "deep_mlp_build: %s", hx_last_error());
        return;
    }
    hx_session_config ca = config(stage, true), cb = config(stage, false);
    hx_session *a = test_session_with(m.g, &ca, what), *b = test_session_with(m.g, &cb, "unpinned");
    CHECK(!b || !b->e.pin, "%s: the session without pinning pins", what);
    int rows = B / size;
    float x[B * W], y[B * W];
    test_rng rng = test_rng_make(11);
    double upd[2] = {0, 0}; /* hx_train_stats.host_update_s so far */
    for (int s = 0; s < STEPS && a && b; s++) {
        test_fill_uniform(&rng, x, B * W, -1, 1);
        test_fill_uniform(&rng, y, B * W, -1, 1);
        hx_feed f[2] = {{NULL, m.x, x + rank * rows * W, sizeof(float) * rows * W},
                        {NULL, m.y, y + rank * rows * W, sizeof(float) * rows * W}};
        OK(hx_session_run(a, f, 2, NULL, 0, HX_RUN_TRAIN));
        OK(hx_session_run(b, f, 2, NULL, 0, HX_RUN_TRAIN));
        hx_train_stats ta, tb;
        OK(hx_session_train_stats(a, &ta));
        OK(hx_session_train_stats(b, &tb));
        CHECK(ta.grad_norm == tb.grad_norm, "%s: step %d: gradient norm %.17g, unpinned %.17g", what, s,
              ta.grad_norm, tb.grad_norm);
        CHECK(ta.host_update_s > upd[0] && tb.host_update_s > upd[1], "%s: step %d: host_update_s "
              "%g -> %g pinned, %g -> %g not: no growth", what, s, upd[0], ta.host_update_s, upd[1],
              tb.host_update_s);
        upd[0] = ta.host_update_s, upd[1] = tb.host_update_s;
    }
    if (a && b) {
        cpu_set_t now;
        CHECK(!sched_getaffinity(0, sizeof now, &now) && CPU_EQUAL(&now, &start_mask), "%s: rank %d: "
              "the calling thread's mask was not put back after the updates", what, rank);
        deep_mlp_check_same_params(a, b, &m, what);
        uint64_t used = check_slots(a, what), seen[64] = {0};
        cpu_set_t set;
        int n_allowed = sched_getaffinity(0, sizeof set, &set) ? 0 : CPU_COUNT(&set);
        /* the cores each rank on this host used (MPI's ranks on this host) */
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
        MPI_Allgather(&used, 1, MPI_UINT64_T, seen, 1, MPI_UINT64_T, local);
        MPI_Comm_free(&local);
        if (n_allowed >= local_size)
            for (int i = 0; i < local_size; i++)
                for (int j = i + 1; j < local_size; j++)
                    CHECK(!(seen[i] & seen[j]), "%s: local ranks %d and %d both used cores "
                          "%#llx", what, i, j, (unsigned long long)(seen[i] & seen[j]));
    }
    hx_session_free(a);
    hx_session_free(b);
    deep_mlp_free(&m);
}

static void test_stage0(void) { pin_case(0); }
static void test_stage2(void) { pin_case(2); }

static int setup(void)
{
    comm = mpi_world_open(60, &rank, &size);
    if (!comm) return 1;
    /* the ranks on this host (MPI's view) with this rank's mask */
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    int lr, ls;
    MPI_Comm_rank(local, &lr);
    MPI_Comm_size(local, &ls);
    cpu_set_t mine, all[64];
    if (ls > 64 || sched_getaffinity(0, sizeof mine, &mine)) {
        fprintf(stderr, "mpi_pin: %d ranks on one host, or no affinity mask to read\n", ls);
        return 1;
    }
    start_mask = mine;
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, local);
    MPI_Comm_free(&local);
    local_rank = local_size = 0;
    for (int r = 0; r < ls; r++) {
        bool same = CPU_EQUAL(&all[r], &mine);
        local_rank += same && r < lr;
        local_size += same;
    }
    return 0;
}

static void teardown(void) { hx_comm_free(comm); }

int main(int argc, char **argv)
{
    static const test_case cases[] = {{"stage0", test_stage0}, {"stage2", test_stage2}};
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "mpi_pin", cases, TEST_COUNT(cases), &o);
}
