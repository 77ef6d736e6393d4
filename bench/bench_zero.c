/* Data parallel, ZeRO stages 0-3, on the GPT example (hetex gpt's
 * model: 2 layers, width 128, context 64, bf16 with host AdamW, a global
 * batch of 16 split over the ranks) at 1, 2 and 4 ranks: per rank and
 * stage, the bytes sent per step (every message this rank hands MPI, as
 * hetex passes them: bytes_counted) against the theoretical minimum (a ring
 * all-reduce of the gradients, 2(N-1)/N of their bytes: a reduce-scatter
 * of the gradients plus an all-gather of the 16-bit parameters, which is
 * what stages 0-2 need; stage 3 gathers the 16-bit parameters twice, for
 * the forward and the backward: 3(N-1)/N), the model-state memory
 * (persistent device and host bytes plus the gradients: all of them at
 * stages 0 and 1, the rank's own chunks at stages 2 and 3) against the
 * ZeRO formula of the stage (16, 4 + 12/N, 2 + 14/N, 16/N bytes per
 * parameter; stage 3 also with offload_param=cpu, where the device
 * streams the parameters chunk by chunk and the backward gathers them
 * again; without it the device keeps its copies from the forward to the
 * backward and one gather a step is what the plan reads), at stage 3 the
 * gathered parameters' transient host bytes
 * (measured peak and the plan's prediction), the sharded optimizer
 * state this rank holds against an even share, the host chunks the
 * gradients go through as the stated fixed overhead, and the step time.
 * ./build.sh bench zero runs this program, which runs itself under
 * mpirun --oversubscribe -np N; each rank prints one JSON object per
 * stage ($HX_BENCH_ZERO_STAGE, when set: the only stage run, e.g. 3;
 * $HX_BENCH_ZERO_LAYERS: that many layers instead of 2, the same width).
 *
 * Communication hidden: each stage trains two sessions on the same feeds:
 * one as configured (the gradient sums start during the backward as their
 * chunks are complete) and one with hx_session_config.no_comm_overlap
 * (every sum started after the backward: the collectives' whole time,
 * measured with nothing else running). By default ("order": "blocks")
 * all of one session's steps run, then all of the other's, as a training
 * loop of one session does: a step's all-gathers left in flight have
 * nothing but the next step's forward to run under. $HX_BENCH_ZERO_INTERLEAVED
 * set interleaves their steps instead (A B A B ...; "order":
 * "interleaved", the default before session 16), where the other
 * session's step runs while the all-gathers of one are in flight and its
 * MPI calls move them on too (Open MPI's progress is the whole process's):
 * that flatters the overlap. comm_wait_s is the median over the steps of
 * hx_train_stats.comm_wait_s's growth in a step: the time a step spends on data-parallel communication after its
 * backward and after its updates (starting the sums not started, waiting
 * for those in flight, copying the sums to and from the chunk buffers, the
 * all-gather of the updated parameters) and, at stages 1 and 2 with the
 * overlap, in its forward waiting for the all-gathers the step before
 * left in flight (each before the first step that reads its parameters;
 * the session without overlap waits for them before its run returns),
 * and (since session 17) the gradient norm's all-gather of the owners'
 * sums of squares (a few hundred bytes, blocking, after the scan), in both
 * sessions.
 * hidden_share = 1 - comm_wait_s (overlap) / comm_wait_s (no overlap): the
 * share of the collectives' time that the backward, the host update and
 * the next forward hide. The *_last figures leave out the skew: step k
 * is the same training step on every rank, and the least of the ranks'
 * waits in step k is that of the rank that came last to the step's
 * collectives, which waited for the communication itself and not for
 * another rank that was behind (on this shared 2-core machine a rank is
 * often descheduled for a millisecond or more: the others then wait for
 * it at the backward's end, with the overlap or without);
 * wait_last_s is the median over the steps of that least wait,
 * hidden_share_last = 1 - wait_last_s (overlap) / (no overlap). (Rank 0
 * prints every rank's object, in rank order: print_objects.) The
 * time progress takes inside the backward is in step_s, not in the
 * wait: both step times are printed. Stage 3 starts its sums after the
 * backward either way (its gathers share the communicator), so its share
 * is about 0. On a
 * 2-core machine step times do not scale with ranks: they are reported,
 * not tuned to.
 *
 * Host update: update_gbps is the bytes the host AdamW updates of the
 * configured session move per step on this rank
 * (its shard at stages 1-3, every parameter at stage 0: each update reads
 * and writes its f32 master and both moments, reads its gradient and
 * writes its bf16 copy, 28 bytes per parameter, as the kernel does),
 * over the median over the steps of hx_train_stats.host_update_s's
 * growth (each update from its launch to its end, pinning included),
 * against a ceiling measured right after in the same run on this rank:
 * bench_optim's loops of the mixed-precision Adam step's byte shape
 * (bench/optim_ceiling.h: plain, prefetching, non-temporal half copy)
 * over as many parameters, one thread, the best time of CEIL_REPS passes
 * after an untimed one, the best loop's GB/s (update_ratio = GB/s over
 * it). Those passes find their arrays in the caches (a shard of this
 * GPT is 3-12 MB, the last-level cache here 32 MiB), as the update may
 * find its own between a forward and a backward, or not:
 * ceiling_cold_gbps is the same after each pass has evicted them
 * (CEIL_COLD_REPS passes, each after a sweep over EVICT_BYTES), the
 * ceiling from memory, as bench_optim's 64M-parameter cases measure it
 * (update_ratio_cold = GB/s over it). */
#include "bench/cpu_model.h"
#include "bench/mpi_launch.h"
#include "bench/optim_ceiling.h"
#include "dist/dist.h"
#include "gpt.h"
#include "hetex.h"
#include "session/session.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GLOBAL_BATCH = 16, STEPS = 15, CEIL_REPS = 20, CEIL_COLD_REPS = 5 };
/* Twice this guest's last-level cache (32 MiB): passed over before each
 * cold ceiling pass, it leaves none of the ceiling's arrays cached. */
#define EVICT_BYTES ((size_t)64 << 20)

/* How bytes_per_step is counted (hx_comm_bytes_sent): the bytes of the
 * messages this rank hands MPI_Isend; hetex's collectives are direct
 * messages between pairs of ranks (dist/coll.c), not a ring, and the ZeRO
 * groups' blocks are exactly their chunks (no padding). */
#define COUNTED "message bytes this rank passes to MPI_Isend (pairwise, exact blocks)"
/* What comm_wait_s counts (hx_train_stats.comm_wait_s, per step). */
#define WAITED "after the backward and the updates, the gradient norm's all-gather (stages 1-3), " \
               "the next forward's readers (stages 1-2, overlap)"

/* What update_bytes_per_step and ceiling_gbps count (see the top). */
#define UPDATED "this rank's host updates: f32 master, m, v read and written, gradient read, " \
                "bf16 copy written"
#define CEILED "bench_optim's mp-shape loops (28 B/param) over this rank's parameters, 1 thread, " \
               "best pass"

/* The most bytes of one rank's object for a stage. */
#define OBJECT_BYTES 4096

/* Rank 0 prints every rank's object (text: this rank's, "" for none), in
 * rank order: mpirun forwards each rank's output in pieces of 1024 bytes,
 * and a longer line printed by several ranks interleaved with another
 * rank's (stage 3 at 4 ranks, 1030-1040 bytes, did in session 18's first
 * run); from one rank the pieces keep their order. Every rank calls it. */
static hx_status print_objects(hx_comm *comm, const char *text)
{
    int n = hx_comm_size(comm);
    int64_t mine[OBJECT_BYTES / 8] = {0};
    char *all = malloc((size_t)n * OBJECT_BYTES);
    if (!all) return HX_ERR_OUT_OF_MEMORY;
    if (strlen(text) >= OBJECT_BYTES)
        fprintf(stderr, "bench_zero: rank %d: its object is %zu bytes, over %d: left out\n",
                hx_comm_rank(comm), strlen(text), OBJECT_BYTES);
    else memcpy(mine, text, strlen(text));
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather(comm, mine, all, OBJECT_BYTES / 8, HX_DTYPE_I64, &q); /* as bytes */
    if (!st) st = hx__coll_wait(q);
    for (int r = 0; r < n && !st && hx_comm_rank(comm) == 0; r++)
        fputs(all + (size_t)r * OBJECT_BYTES, stdout); /* each slot ends in a 0 */
    fflush(stdout);
    free(all);
    return st;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Stage `stage`'s session (no_overlap: its sums after the backward). */
static hx_status stage_session(hx_comm *comm, int stage, bool offload_param, bool no_overlap,
                               const gpt_config *c, gpt_run *r)
{
    gpt_optim o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                   .offload = GPT_OFFLOAD_OPTIMIZER, .warmup = 0, .min_lr_ratio = 1};
    hx_session_config sc = hx_session_config_default();
    sc.accelerator = HX_ACCELERATOR_EMU;
    sc.n_threads = 1;
    sc.comm = comm;
    sc.zero_stage = stage;
    sc.no_comm_overlap = no_overlap;
    if (offload_param) { /* chunks of 256 KiB: the device holds a few of them, not the model */
        sc.offload.offload_param = HX_OFFLOAD_CPU;
        sc.offload.chunk_size = (size_t)256 << 10;
    }
    return gpt_run_create(c, &o, &sc, r);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the STEPS values of v (sorted in place). */
static double median(double *v)
{
    qsort(v, STEPS, sizeof *v, by_value);
    return STEPS % 2 ? v[STEPS / 2] : (v[STEPS / 2 - 1] + v[STEPS / 2]) / 2;
}

static double comm_wait(const hx_session *s)
{
    hx_train_stats t;
    return hx_session_train_stats(s, &t) ? 0 : t.comm_wait_s;
}

/* The median over the steps of the least of the ranks' waits in each
 * step (waits: this rank's, STEPS per session, 2 sessions), per session
 * into last[2]; every rank calls it. */
static hx_status last_rank_waits(hx_comm *comm, const double waits[2][STEPS], double last[2])
{
    int n = hx_comm_size(comm);
    double *all = malloc(sizeof *all * 2 * STEPS * (size_t)n);
    if (!all) return HX_ERR_OUT_OF_MEMORY;
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather(comm, waits, all, 2 * STEPS, HX_DTYPE_I64, &q); /* as bytes */
    if (!st) st = hx__coll_wait(q);
    for (int v = 0; v < 2 && !st; v++) {
        double least[STEPS];
        for (int k = 0; k < STEPS; k++) {
            least[k] = all[v * STEPS + k];
            for (int r = 1; r < n; r++)
                if (all[(size_t)r * 2 * STEPS + (size_t)v * STEPS + k] < least[k])
                    least[k] = all[(size_t)r * 2 * STEPS + (size_t)v * STEPS + k];
        }
        last[v] = median(least);
    }
    free(all);
    return st;
}

static double host_update(const hx_session *s)
{
    hx_train_stats t;
    return hx_session_train_stats(s, &t) ? 0 : t.host_update_s;
}

/* One training step of s on feeds f: its time / STEPS added to *step_s,
 * its growth of comm_wait_s into *wait, of host_update_s into *update. */
static hx_status timed_step(hx_session *s, const hx_feed *f, double *step_s, double *wait, double *update)
{
    double t0 = now(), w0 = comm_wait(s), u0 = host_update(s);
    hx_status st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
    *step_s += (now() - t0) / STEPS;
    *wait = comm_wait(s) - w0;
    *update = host_update(s) - u0;
    return st;
}

/* The bytes the dense updates this rank runs (not those ZeRO leaves to
 * other ranks: engine.update_skip) move per step, as the kernels move
 * them: each source read and written, but the gradient (src[1]) and the
 * half copy (src[attr.i[0]] where > 0) only read or written; their
 * parameters into *params. */
static double update_bytes(const hx_session *s, int64_t *params)
{
    const hx_engine *e = &s->e;
    double bytes = 0;
    *params = 0;
    for (int i = 0; i < e->g->n; i++) {
        const hx_tensor *u = e->g->tensors[i];
        if (!hx__is_dense_update(u) || (e->update_skip && e->update_skip[i])) continue;
        *params += hx_tensor_numel(u);
        for (int j = 0; j < u->n_src; j++)
            bytes += (double)hx_tensor_nbytes(u->src[j]) * (j == 1 || j == u->attr.i[0] ? 1 : 2);
    }
    return bytes;
}

static volatile float ceiling_zero; /* 0, unknown to the compiler: the loops change nothing */

/* Reads and writes every line of buf (bytes long) through the caches. */
static void evict(uint64_t *buf, size_t bytes)
{
    for (size_t i = 0; i < bytes / 8; i += 8) buf[i] += 1;
}

/* The mixed-precision Adam step's ceiling over n parameters (see the
 * top): the best GB/s of its loops, the best one's name into *loop;
 * cold: each pass after evict() over EVICT_BYTES, so that its arrays come
 * from memory. */
static double update_ceiling(int64_t n, bool cold, const char **loop)
{
    static void (*const fn[3])(float *restrict, float *restrict, float *restrict, const uint16_t *restrict,
                               uint16_t *restrict, float, int64_t) = {shape_mp, shape_mp_pf, shape_mp_nt};
    static const char *const name[3] = {"ceiling-mp-shape", "ceiling-mp-shape-pf", "ceiling-mp-shape-nt"};
    size_t f32 = ((size_t)n * 4 + 63) / 64 * 64, f16 = ((size_t)n * 2 + 63) / 64 * 64;
    char *mem = aligned_alloc(64, 3 * f32 + 2 * f16); /* aligned: the non-temporal stores need it */
    uint64_t *away = cold ? calloc(EVICT_BYTES / 8, 8) : NULL;
    double best = 0;
    *loop = "none";
    if (!mem || n <= 0 || (cold && !away)) {
        free(mem);
        free(away);
        return 0;
    }
    memset(mem, 0, 3 * f32 + 2 * f16);
    float *p = (float *)mem, *m = (float *)(mem + f32), *v = (float *)(mem + 2 * f32);
    uint16_t *g = (uint16_t *)(mem + 3 * f32), *h = (uint16_t *)(mem + 3 * f32 + f16);
    for (int k = 0; k < 3; k++) {
        double t = 1e30;
        for (int r = -1; r < (cold ? CEIL_COLD_REPS : CEIL_REPS); r++) {
            if (cold) evict(away, EVICT_BYTES);
            double t0 = now();
            fn[k](p, m, v, g, h, ceiling_zero, n);
            if (r >= 0 && now() - t0 < t) t = now() - t0;
        }
        double gbps = (double)n * CEILING_MP_BYTES / t * 1e-9;
        if (gbps > best) best = gbps, *loop = name[k];
    }
    free(mem);
    free(away);
    return best;
}

/* One stage; offload_param: the parameters on the host, streamed to emu chunk by chunk. */
static int run_stage(hx_comm *comm, int stage, bool offload_param)
{
    int rank = hx_comm_rank(comm), n = hx_comm_size(comm);
    const char *layers = getenv("HX_BENCH_ZERO_LAYERS"); /* a deeper model of the same width */
    gpt_config c = {.vocab = 65, .layers = layers ? atoi(layers) : 2, .heads = 4, .width = 128,
                    .context = 64, .batch = GLOBAL_BATCH / n, .seed = 1, .dtype = HX_DTYPE_BF16};
    gpt_run r, off; /* as configured; every sum after the backward */
    if (stage_session(comm, stage, offload_param, false, &c, &r)) {
        fprintf(stderr, "bench_zero: rank %d stage %d: %s\n", rank, stage, hx_last_error());
        return 1;
    }
    if (stage_session(comm, stage, offload_param, true, &c, &off)) {
        fprintf(stderr, "bench_zero: rank %d stage %d: %s\n", rank, stage, hx_last_error());
        gpt_run_free(&r);
        return 1;
    }
    size_t nt = (size_t)c.batch * c.context;
    int32_t *tok = malloc(sizeof *tok * nt), *tgt = malloc(sizeof *tgt * nt);
    uint64_t x = 88172645463325252ull + (uint64_t)rank;
    for (size_t i = 0; i < nt; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % 65);
        tgt[i] = (int32_t)((x >> 20) % 65);
    }
    hx_feed f[2] = {{NULL, r.m.tokens, tok, sizeof *tok * nt}, {NULL, r.m.targets, tgt, sizeof *tgt * nt}};
    hx_feed f_off[2] = {{NULL, off.m.tokens, tok, sizeof *tok * nt},
                        {NULL, off.m.targets, tgt, sizeof *tgt * nt}};
    hx_status st = hx_session_run(r.s, f, 2, NULL, 0, HX_RUN_TRAIN); /* warm-up: plans, arenas */
    if (!st) st = hx_session_run(off.s, f_off, 2, NULL, 0, HX_RUN_TRAIN);
    double step_s = 0, step_off_s = 0, per_step = 0, waits[2][STEPS], updates[2][STEPS];
    bool blocks = getenv("HX_BENCH_ZERO_INTERLEAVED") == NULL; /* each session's steps in a row */
    for (int k = 0; k < STEPS && !st; k++) { /* interleaved, the load changes both alike */
        uint64_t sent0 = hx_comm_bytes_sent(comm);
        st = timed_step(r.s, f, &step_s, &waits[0][k], &updates[0][k]);
        per_step += (double)(hx_comm_bytes_sent(comm) - sent0) / STEPS;
        if (!st && !blocks) st = timed_step(off.s, f_off, &step_off_s, &waits[1][k], &updates[1][k]);
    }
    for (int k = 0; k < STEPS && !st && blocks; k++)
        st = timed_step(off.s, f_off, &step_off_s, &waits[1][k], &updates[1][k]);
    double last[2] = {0, 0};
    if (st) memset(waits, 0, sizeof waits); /* a failed rank still takes part */
    hx_status gathered = last_rank_waits(comm, waits, last);
    if (!st) st = gathered;
    double wait_s = median(waits[0]), wait_off_s = median(waits[1]);
    /* the ceiling right after the collective: the ranks measure it together, as they update */
    int64_t up_params;
    double up_bytes = update_bytes(r.s, &up_params), up_s = st ? 0 : median(updates[0]);
    const char *loop, *loop_cold;
    double ceiling = st ? 0 : update_ceiling(up_params, false, &loop);
    double ceiling_cold = st ? 0 : update_ceiling(up_params, true, &loop_cold);
    hx_memory_stats ms;
    if (!st) st = hx_session_memory_stats(r.s, &ms);
    char *text = NULL; /* this rank's object */
    size_t len = 0;
    if (st) {
        fprintf(stderr, "bench_zero: rank %d stage %d: %s\n", rank, stage, hx_last_error());
    } else {
        double psi = (double)r.m.n_params, grads = psi * hx_dtype_size(c.dtype);
        double minimum = (stage == 3 ? 3.0 : 2.0) * (n - 1) / n * grads;
        double persistent = (double)(ms.persistent_bytes + ms.device_persistent_bytes);
        double states = persistent + (stage >= 2 ? (double)ms.zero_grad_shard_bytes : grads);
        double formula[4] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n};
        static const char *const min_formula[4] = {"2(N-1)/N x 2 Psi", "2(N-1)/N x 2 Psi",
                                                   "2(N-1)/N x 2 Psi", "3(N-1)/N x 2 Psi"};
        FILE *o = open_memstream(&text, &len);
        if (!o) {
            fprintf(stderr, "bench_zero: rank %d: out of memory for its object\n", rank);
            st = HX_ERR_OUT_OF_MEMORY;
        } else {
            fprintf(o, "{\"bench\": \"zero\", \"stage\": %d, \"offload_param\": \"%s\", \"ranks\": %d, "
                       "\"rank\": %d, \"layers\": %d, \"params\": %.0f, \"bytes_per_step\": %.0f, "
                       "\"min_bytes_per_step\": %.0f, \"min_bytes_formula\": \"%s\", "
                       "\"bytes_counted\": \"%s\", \"bytes_ratio\": ",
                       stage, offload_param ? "cpu" : "none", n, rank, c.layers, psi, per_step, minimum,
                       min_formula[stage], COUNTED);
            if (minimum > 0) fprintf(o, "%.4f", per_step / minimum);
            else fprintf(o, "null");
            /* stage 3 whose backward reads the device's copies from the forward: one gather a step */
            if (stage == 3) fprintf(o, ", \"min_bytes_gather_once\": %.0f", 2.0 * (n - 1) / n * grads);
            fprintf(o, ", \"model_state_bytes\": %.0f, \"formula_bytes\": %.0f, \"memory_ratio\": %.4f, "
                       "\"sharded_state_bytes_here\": %zu, \"sharded_state_bytes_all\": %zu, "
                       "\"grad_shard_bytes\": %zu, \"fixed_overhead_chunk_bytes\": %zu, "
                       "\"gathered_peak_bytes\": %zu, \"gathered_planned_bytes\": %zu, \"step_s\": %.4f, "
                       "\"step_no_overlap_s\": %.4f, \"comm_wait_s\": %.6f, "
                       "\"comm_wait_no_overlap_s\": %.6f, "
                       "\"comm_wait_counted\": \"%s\", \"order\": \"%s\", \"hidden_share\": ",
                       states, formula[stage], states / formula[stage], ms.zero_owned_bytes,
                       ms.zero_sharded_bytes, ms.zero_grad_shard_bytes, ms.dp_chunk_bytes,
                       ms.zero_gather_peak_bytes, ms.zero_gather_planned_bytes, step_s, step_off_s, wait_s,
                       wait_off_s, WAITED, blocks ? "blocks" : "interleaved");
            if (n > 1 && wait_off_s > 0) fprintf(o, "%.4f", 1 - wait_s / wait_off_s);
            else fprintf(o, "null");
            fprintf(o, ", \"wait_last_s\": %.6f, \"wait_no_overlap_last_s\": %.6f, "
                       "\"hidden_share_last\": ", last[0], last[1]);
            if (n > 1 && last[1] > 0) fprintf(o, "%.4f", 1 - last[0] / last[1]);
            else fprintf(o, "null");
            char cpu[128];
            bench_cpu_model(cpu, sizeof cpu);
            double gbps = up_s > 0 ? up_bytes / up_s * 1e-9 : 0;
            fprintf(o, ", \"update_params\": %lld, \"update_bytes_per_step\": %.0f, "
                       "\"update_bytes_counted\": \"%s\", \"host_update_s\": %.6f, \"update_gbps\": %.3f, "
                       "\"ceiling_gbps\": %.3f, \"ceiling_loop\": \"%s\", \"ceiling_counted\": \"%s\", "
                       "\"ceiling_reps\": %d, \"update_ratio\": %.4f, \"ceiling_cold_gbps\": %.3f, "
                       "\"ceiling_cold_loop\": \"%s\", \"update_ratio_cold\": %.4f, \"cpu\": \"%s\"}\n",
                       (long long)up_params, up_bytes, UPDATED, up_s, gbps, ceiling, loop, CEILED, CEIL_REPS,
                       ceiling > 0 ? gbps / ceiling : 0, ceiling_cold, loop_cold,
                       ceiling_cold > 0 ? gbps / ceiling_cold : 0, cpu);
            fclose(o);
        }
    }
    hx_status printed = print_objects(comm, text ? text : ""); /* a failed rank still takes part */
    if (!st) st = printed;
    free(text);
    free(tok);
    free(tgt);
    gpt_run_free(&r);
    gpt_run_free(&off);
    return st ? 1 : 0;
}

static int rank_main(void)
{
    hx_comm *comm = NULL;
    if (hx_comm_create(NULL, &comm)) {
        fprintf(stderr, "bench_zero: %s\n", hx_last_error());
        return 1;
    }
    int rc = 0;
    const char *only = getenv("HX_BENCH_ZERO_STAGE"); /* one stage ("3"); unset: all */
    for (int stage = 0; stage <= 3; stage++)
        if (!only || atoi(only) == stage) rc |= run_stage(comm, stage, false);
    if (!only || atoi(only) == 3) rc |= run_stage(comm, 3, true); /* the backward gathers again */
    hx_comm_free(comm);
    return rc;
}

int main(int argc, char **argv) { return bench_mpi_main("bench_zero", argc, argv, rank_main); }
