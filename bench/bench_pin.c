/* Host update threads pinned to cores (hx_session_config
 * .pin_update_threads) against the same updates unpinned: per rank, the
 * host AdamW's GB/s over its shard, with the memory system's ceiling
 * measured in the same run.
 *
 * The tests' deep MLP (tests/util/deep_mlp: 6 layers of 1024 x 1024, f32,
 * Adam on every parameter, 6.3M parameters) on the CPU (accelerator
 * none), ZeRO stage 2 over mpirun's ranks (--bind-to none: the processes
 * may run anywhere, so pinning, not mpirun, places them), each rank
 * n_threads = allowed cores / ranks, batch 8 per rank. Two sessions, one
 * pinned and one not, train on the same feeds, their steps interleaved (A
 * B A B ...) so that the load changes both alike, and between them the
 * ceiling loop runs: Adam's memory shape (read 4 f32 arrays, write 3 of
 * them back) over as many elements as this rank updates, with the same
 * threads, arithmetic trivial. An update moves 28 bytes per parameter
 * (reads param, m, v and the f32 gradient, writes param, m and v), the
 * ceiling the same 28; GB/s = those bytes over the median of the step's
 * growth of hx_train_stats.host_update_s (each update from its launch to
 * its end, pinning's own binding and unbinding included).
 * ./build.sh bench pin: 1 and 2 ranks. */
#define _GNU_SOURCE
#include "bench/mpi_launch.h"
#include "deep_mlp.h"
#include "hetex.h"
#include "session/session.h"

#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { STEPS = 11, BATCH = 8, WIDTH = 1024, LAYERS = 6 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v)
{
    qsort(v, STEPS, sizeof *v, by_value);
    return v[STEPS / 2];
}

static double update_s(const hx_session *s)
{
    hx_train_stats t;
    return hx_session_train_stats(s, &t) ? 0 : t.host_update_s;
}

/* The parameters this rank's updates write (the others' are left out). */
static int64_t updated_here(const hx_session *s)
{
    int64_t n = 0;
    for (int i = 0; i < s->e.g->n; i++) {
        const hx_tensor *t = s->e.g->tensors[i];
        if (hx__is_dense_update(t) && !(s->zero_skip && s->zero_skip[i])) n += hx_tensor_numel(t);
    }
    return n;
}

/* Adam's memory shape with trivial arithmetic: seconds for one pass. */
static double ceiling_pass(float *p, float *m, float *v, const float *g, int64_t n, int threads)
{
    double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        m[i] = m[i] + x;
        v[i] = v[i] + x;
        p[i] = p[i] - x;
    }
    return now() - t0;
}

static int rank_main(void)
{
    hx_comm *comm = NULL;
    if (hx_comm_create(NULL, &comm)) {
        fprintf(stderr, "bench_pin: %s\n", hx_last_error());
        return 1;
    }
    int rank = hx_comm_rank(comm), size = hx_comm_size(comm);
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) ? 1 : CPU_COUNT(&set);
    int threads = cores / size > 0 ? cores / size : 1;
    deep_mlp m;
    hx_session *s[2] = {NULL, NULL}; /* pinned, not */
    if (deep_mlp_build(BATCH, WIDTH, LAYERS, &m)) {
        fprintf(stderr, "bench_pin: %s\n", hx_last_error());
        hx_comm_free(comm);
        return 1;
    }
    hx_status st = HX_OK;
    for (int k = 0; k < 2 && !st; k++) {
        hx_session_config c = hx_session_config_default();
        c.accelerator = HX_ACCELERATOR_NONE;
        c.n_threads = threads;
        c.comm = comm;
        c.zero_stage = 2;
        c.pin_update_threads = k == 0;
        st = hx_session_create(m.g, &c, &s[k]);
    }
    size_t nx = (size_t)BATCH * WIDTH;
    float *x = malloc(sizeof *x * nx), *y = malloc(sizeof *y * nx);
    uint64_t r = 88172645463325252ull + (uint64_t)rank;
    for (size_t i = 0; x && y && i < nx; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)(r % 2001) / 1000.0f - 1.0f;
        y[i] = (float)((r >> 20) % 2001) / 1000.0f - 1.0f;
    }
    int64_t n = st ? 0 : updated_here(s[0]);
    float *cp = calloc((size_t)n + 1, sizeof *cp), *cm = calloc((size_t)n + 1, sizeof *cm),
          *cv = calloc((size_t)n + 1, sizeof *cv), *cg = calloc((size_t)n + 1, sizeof *cg);
    if (!st && (!x || !y || !cp || !cm || !cv || !cg))
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "out of host memory");
    hx_feed f[2] = {{NULL, m.x, x, sizeof *x * nx}, {NULL, m.y, y, sizeof *y * nx}};
    double upd[2][STEPS], step[2][STEPS], ceil_s[STEPS];
    for (int k = 0; k < 2 && !st; k++) st = hx_session_run(s[k], f, 2, NULL, 0, HX_RUN_TRAIN); /* warm-up */
    if (!st) ceiling_pass(cp, cm, cv, cg, n, threads);
    for (int i = 0; i < STEPS && !st; i++) {
        for (int k = 0; k < 2 && !st; k++) {
            double u0 = update_s(s[k]), t0 = now();
            st = hx_session_run(s[k], f, 2, NULL, 0, HX_RUN_TRAIN);
            step[k][i] = now() - t0;
            upd[k][i] = update_s(s[k]) - u0;
        }
        ceil_s[i] = ceiling_pass(cp, cm, cv, cg, n, threads);
    }
    if (st) {
        fprintf(stderr, "bench_pin: rank %d: %s\n", rank, hx_last_error());
    } else {
        double bytes = 28.0 * (double)n, u_pin = median(upd[0]), u_free = median(upd[1]);
        double c_s = median(ceil_s), gb_pin = bytes / u_pin / 1e9, gb_free = bytes / u_free / 1e9,
               gb_ceil = bytes / c_s / 1e9;
        printf("{\"bench\": \"pin\", \"ranks\": %d, \"rank\": %d, \"threads\": %d, \"cores_allowed\": %d, "
               "\"params_updated\": %lld, \"bytes_per_step\": %.0f, \"update_s_pinned\": %.6f, "
               "\"update_s_unpinned\": %.6f, \"gbps_pinned\": %.3f, \"gbps_unpinned\": %.3f, "
               "\"pinned_over_unpinned\": %.4f, \"ceiling_gbps\": %.3f, \"ratio_pinned\": %.4f, "
               "\"ratio_unpinned\": %.4f, \"step_s_pinned\": %.4f, \"step_s_unpinned\": %.4f}\n",
               size, rank, threads, cores, (long long)n, bytes, u_pin, u_free, gb_pin, gb_free,
               gb_pin / gb_free, gb_ceil, gb_pin / gb_ceil, gb_free / gb_ceil, median(step[0]),
               median(step[1]));
        fflush(stdout);
    }
    free(cp), free(cm), free(cv), free(cg), free(x), free(y);
    hx_session_free(s[0]);
    hx_session_free(s[1]);
    deep_mlp_free(&m);
    hx_comm_free(comm);
    return st ? 1 : 0;
}

int main(int argc, char **argv)
{
    static const int ranks[2] = {1, 2};
    return bench_mpi_main_at("bench_pin", argc, argv, rank_main, ranks, 2, "--bind-to none");
}
