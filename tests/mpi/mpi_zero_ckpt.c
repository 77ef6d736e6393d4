/* Sharded checkpoints of ZeRO sessions (hx_session_save at zero_stage >= 1:
 * each rank's shard and a manifest), driven by tests/mpi/zero_ckpt.sh in
 * several runs of this program that share a folder (--dir):
 *   --mode save    (4 ranks) the f32 deep MLP at stage 2 trains STEPS
 *                  steps, saves, trains STEPS more and leaves its final
 *                  parameters in the folder (rank 0). In the same run: a
 *                  fresh session of the same rank count loads the set and
 *                  continues bitwise as the run that never stopped (every
 *                  parameter and moment this rank holds, and the losses),
 *                  for the MLP (at stage 2, and at stage 3, where the
 *                  parameters are sharded too: its set also loads in a
 *                  lone session, continuing within 1e-6) and for the GPT
 *                  example in bf16 with f32 masters (sharded) at stage
 *                  1; a shard cut short, one with a byte flipped and one
 *                  missing are refused on
 *                  every rank with HX_ERR_CORRUPT naming the file, and the
 *                  session is left bit for bit as it was; a whole
 *                  checkpoint of a session of one process loads into a
 *                  ZeRO session (each rank its shard) and continues within
 *                  1e-6 of that session, after a load in which the last
 *                  rank alone was given a damaged copy was refused on
 *                  every rank (the others naming it) with nothing changed.
 *   --mode resume  (2 ranks, --stage S: 1 and 3) loads the set saved at 4 ranks
 *                  (resharding), continues STEPS steps: within 1e-6
 *                  relative of the 4-rank run's final parameters.
 *   --mode alone   (no mpirun, no communicator: a plain session) the same
 *                  at one process on the whole batch.
 *   --mode saver   (2 ranks) trains and saves after every step until the
 *                  script kills the job (SIGKILL, at a random instant);
 *   --mode check   (no mpirun) the set left then loads, holds at least
 *                  --min-step steps (the last save the job reported), and
 *                  its parameters are within 1e-6 of a lone run of as many
 *                  steps.
 * Why 1e-6 and not bitwise across rank counts: the ranks' partial
 * gradient sums associate differently (see mpi_ddp.c); at the same rank
 * count every sum and update is the same, so the reload is bitwise. */
#include "dist/dist.h"
#include "graph/graph.h"
#include "deep_mlp.h"
#include "gpt.h"
#include "hetex_checks.h"
#include "mpi_world.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 4, B = 12, W = 8, LAYERS = 2, GPT_B = 4 };

static const char *mode = "", *dir = "";
static int stage_flag = 2, min_step = 1;
static hx_comm *comm;
static int rank, size = 1;

/* ---- helpers -------------------------------------------------------------------- */

static void barrier(void)
{
    int64_t v = 0, *all = calloc((size_t)size, sizeof *all);
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather(comm, &v, all, 1, HX_DTYPE_I64, &q);
    if (st == HX_OK) st = hx__coll_wait(q);
    CHECK(st == HX_OK, "barrier: %s", hx_last_error());
    free(all);
}

static bool is_saved(const hx_tensor *t)
{
    return hx_tensor_kind_of(t) == HX_TENSOR_PARAMETER || hx_tensor_kind_of(t) == HX_TENSOR_STATE;
}

/* Every saved tensor of g that this rank can read in s, concatenated
 * (malloc'd; *n its bytes). */
static char *snapshot(hx_session *s, const hx_graph *g, size_t *n)
{
    size_t total = 0;
    for (int i = 0; i < g->n; i++) total += is_saved(g->tensors[i]) ? hx_tensor_nbytes(g->tensors[i]) : 0;
    char *buf = malloc(total + 1);
    *n = 0;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (!is_saved(t)) continue;
        if (hx_session_read(s, t, buf + *n, hx_tensor_nbytes(t)) == HX_OK) *n += hx_tensor_nbytes(t);
    }
    return buf;
}

static void check_same_state(hx_session *a, const hx_graph *ga, hx_session *b, const hx_graph *gb,
                             const char *what)
{
    size_t na, nb;
    char *x = snapshot(a, ga, &na), *y = snapshot(b, gb, &nb);
    CHECK(na == nb && na > 0 && !memcmp(x, y, na), "%s: rank %d: the state differs (%zu and %zu bytes readable)",
          what, rank, na, nb);
    free(x);
    free(y);
    CHECK(hx_session_step(a) == hx_session_step(b), "%s: step %lld and %lld", what,
          (long long)hx_session_step(a), (long long)hx_session_step(b));
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* ---- the deep MLP, f32: its parameters replicated, its moments sharded ---------- */

static hx_session_config mlp_config(int stage, hx_comm *c)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = HX_ACCELERATOR_NONE;
    cfg.offload.chunk_size = 200; /* several chunks */
    cfg.comm = c;
    cfg.zero_stage = c ? stage : 0;
    return cfg;
}

typedef struct mlp {
    deep_mlp m;
    hx_session *s;
    int ranks; /* the batch is split over them (1: the whole batch) */
} mlp;

static bool mlp_open(mlp *r, int stage, hx_comm *c, const char *what)
{
    r->ranks = c ? size : 1;
    r->s = NULL;
    if (deep_mlp_build(B / r->ranks, W, LAYERS, &r->m)) {
        CHECK(false, "%s: deep_mlp_build: %s", what, hx_last_error());
        return false;
    }
    hx_session_config cfg = mlp_config(stage, c);
    r->s = test_session_with(r->m.g, &cfg, what);
    if (!r->s) deep_mlp_free(&r->m);
    return r->s != NULL;
}

static void mlp_close(mlp *r)
{
    hx_session_free(r->s);
    deep_mlp_free(&r->m);
}

/* Steps from the session's step on, each on the global batch of its number. */
static void mlp_train(mlp *r, int steps)
{
    int rows = B / r->ranks, part = r->ranks == 1 ? 0 : rank;
    float x[B * W], y[B * W];
    for (int k = 0; k < steps; k++) {
        test_rng g = test_rng_make(1000 + (uint64_t)hx_session_step(r->s));
        test_fill_uniform(&g, x, B * W, -1, 1);
        test_fill_uniform(&g, y, B * W, -1, 1);
        hx_feed f[2] = {{NULL, r->m.x, x + part * rows * W, sizeof(float) * rows * W},
                        {NULL, r->m.y, y + part * rows * W, sizeof(float) * rows * W}};
        OK(hx_session_run(r->s, f, 2, NULL, 0, HX_RUN_TRAIN));
    }
}

/* The parameters (replicated: every rank reads them), w then b per layer. */
static size_t mlp_params(mlp *r, float *out)
{
    size_t n = 0;
    for (int l = 0; l < LAYERS; l++) {
        const hx_tensor *t[2] = {r->m.w[l], r->m.b[l]};
        for (int j = 0; j < 2; j++) {
            OK(hx_session_read(r->s, t[j], out + n, hx_tensor_nbytes(t[j])));
            n += (size_t)hx_tensor_numel(t[j]);
        }
    }
    return n;
}

enum { N_PARAMS = LAYERS * (W * W + W) };

static int64_t sum_over_ranks(int64_t v)
{
    if (!comm) return v;
    int64_t *all = calloc((size_t)size, sizeof *all), total = 0;
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather(comm, &v, all, 1, HX_DTYPE_I64, &q);
    if (st == HX_OK) st = hx__coll_wait(q);
    CHECK(st == HX_OK, "all-gather: %s", hx_last_error());
    for (int r = 0; r < size; r++) total += all[r];
    free(all);
    return total;
}

/* The parameters within 1e-6 relative of those the 4-rank run left: each
 * where this rank can read it (stage 3: its owner), every one somewhere. */
static void check_final(mlp *r, const char *what)
{
    char p[512];
    path_of(p, sizeof p, "final.f32");
    float want[N_PARAMS], got[N_PARAMS];
    FILE *f = fopen(p, "rb");
    CHECK(f && fread(want, sizeof want, 1, f) == 1, "%s: cannot read %s", what, p);
    if (f) fclose(f);
    double e = 0;
    int64_t at = 0, readable = 0;
    for (int l = 0; l < LAYERS; l++) {
        const hx_tensor *t[2] = {r->m.w[l], r->m.b[l]};
        for (int j = 0; j < 2; j++) {
            int64_t n = hx_tensor_numel(t[j]);
            if (hx_session_read(r->s, t[j], got + at, hx_tensor_nbytes(t[j])) == HX_OK) {
                e = fmax(e, test_max_rel_f32(got + at, want + at, n));
                readable++;
            }
            at += n;
        }
    }
    int64_t seen = sum_over_ranks(readable);
    CHECK(at == N_PARAMS && seen >= 2 * LAYERS, "%s: %lld of the %d parameters readable over the ranks", what,
          (long long)seen, 2 * LAYERS);
    CHECK(e <= 1e-6, "%s: the parameters after %d steps are %.3g off the 4-rank run's", what, 2 * STEPS, e);
    printf("%s: %lld steps, parameters %.3g (relative) off the uninterrupted 4-rank run\n", what,
           (long long)hx_session_step(r->s), e);
}

/* A load of ckpt that must fail with HX_ERR_CORRUPT naming file, leaving s as it was. */
static void refused_load(mlp *r, const char *ckpt, const char *file, const char *what)
{
    size_t n0, n1;
    char *before = snapshot(r->s, r->m.g, &n0);
    int64_t step = hx_session_step(r->s);
    hx_status st = hx_session_load(r->s, ckpt);
    CHECK(st == HX_ERR_CORRUPT && strstr(hx_last_error(), file), "%s: rank %d: want HX_ERR_CORRUPT naming '%s', "
          "got %s: %s", what, rank, file, hx_status_name(st), hx_last_error());
    char *after = snapshot(r->s, r->m.g, &n1);
    CHECK(n0 == n1 && !memcmp(before, after, n0) && hx_session_step(r->s) == step,
          "%s: rank %d: the refused load changed the session", what, rank);
    free(before);
    free(after);
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    if (len > 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    if (f) fclose(f);
    *n = buf ? (size_t)len : 0;
    return buf;
}

static void spill(const char *path, const char *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
}

/* Rank 0 damages shard 1 (cut short, a byte flipped) and removes shard
 * 3; every rank's load is refused naming it; the shard is put back. */
static void damaged_shards(mlp *r, const char *ckpt)
{
    char shard[600], moved[620];
    snprintf(shard, sizeof shard, "%s.g1.%d-of-%d", ckpt, size > 1 ? 1 : 0, size);
    size_t n = 0;
    char *good = slurp(shard, &n);
    CHECK(good && n > 64, "no shard file %s", shard);
    if (!good) return;
    for (int k = 0; k < 2; k++) {
        barrier();
        if (rank == 0) {
            if (k == 1) good[n / 2] ^= 0x10;
            spill(shard, good, k == 0 ? n - 1 : n);
            if (k == 1) good[n / 2] ^= 0x10;
        }
        barrier();
        refused_load(r, ckpt, shard, k == 0 ? "a shard cut short" : "a shard with a byte flipped");
    }
    barrier();
    if (rank == 0) spill(shard, good, n);
    free(good);
    snprintf(shard, sizeof shard, "%s.g1.%d-of-%d", ckpt, size - 1, size);
    snprintf(moved, sizeof moved, "%s.away", shard);
    barrier();
    if (rank == 0) CHECK(rename(shard, moved) == 0, "rename %s", shard);
    barrier();
    refused_load(r, ckpt, shard, "a missing shard");
    barrier();
    if (rank == 0) CHECK(rename(moved, shard) == 0, "rename %s back", moved);
    barrier();
}

/* A whole checkpoint of a lone session (rank 0 writes it) into a ZeRO
 * session: each rank takes its part; both continue alike within 1e-6. */
static void plain_into_zero(void)
{
    char p[512];
    path_of(p, sizeof p, "plain.ckpt");
    mlp lone, z;
    if (!mlp_open(&lone, 0, NULL, "lone")) return;
    mlp_train(&lone, STEPS);
    if (rank == 0) OK(hx_session_save(lone.s, p));
    barrier();
    if (mlp_open(&z, 2, comm, "plain into stage 2")) {
        /* the last rank given a damaged copy: every rank refuses, the others naming it */
        char bad[520];
        snprintf(bad, sizeof bad, "%s.bad", p);
        if (rank == size - 1) {
            size_t n;
            char *buf = slurp(p, &n);
            CHECK(buf && n > 100, "no %s", p);
            if (buf) buf[n - 100] ^= 1;
            if (buf) spill(bad, buf, n);
            free(buf);
        }
        size_t n0, n1;
        char *before = snapshot(z.s, z.m.g, &n0);
        hx_status st = hx_session_load(z.s, rank == size - 1 ? bad : p);
        char named[64];
        snprintf(named, sizeof named, "rank %d failed its part", size - 1);
        CHECK(st == HX_ERR_CORRUPT && strstr(hx_last_error(), rank == size - 1 ? bad : named),
              "rank %d: one rank's damaged checkpoint: %s: %s", rank, hx_status_name(st), hx_last_error());
        char *after = snapshot(z.s, z.m.g, &n1);
        CHECK(n0 == n1 && !memcmp(before, after, n0) && hx_session_step(z.s) == 0,
              "rank %d: a load another rank refused changed this rank's session", rank);
        free(before);
        free(after);
        OK(hx_session_load(z.s, p));
        CHECK(hx_session_step(z.s) == STEPS, "plain into zero: step %lld", (long long)hx_session_step(z.s));
        mlp_train(&z, STEPS);
        mlp_train(&lone, STEPS);
        float a[N_PARAMS], b[N_PARAMS];
        mlp_params(&z, a);
        mlp_params(&lone, b);
        double e = test_max_rel_f32(a, b, N_PARAMS);
        CHECK(e <= 1e-6, "a lone session's checkpoint loaded at %d ranks, continued: %.3g off", size, e);
        mlp_close(&z);
    }
    mlp_close(&lone);
}

static void test_mlp_save(void)
{
    char ckpt[512], fin[512];
    path_of(ckpt, sizeof ckpt, "mlp.ckpt");
    path_of(fin, sizeof fin, "final.f32");
    mlp a, b;
    if (!mlp_open(&a, 2, comm, "stage 2")) return;
    mlp_train(&a, STEPS);
    OK(hx_session_save(a.s, ckpt));
    mlp_train(&a, STEPS);
    float final[N_PARAMS];
    mlp_params(&a, final);
    if (rank == 0) spill(fin, (const char *)final, sizeof final);
    if (mlp_open(&b, 2, comm, "stage 2, reloaded")) {
        damaged_shards(&b, ckpt); /* a fresh session: nothing loaded into it yet */
        OK(hx_session_load(b.s, ckpt));
        CHECK(hx_session_step(b.s) == STEPS, "reloaded at step %lld", (long long)hx_session_step(b.s));
        mlp_train(&b, STEPS);
        check_same_state(a.s, a.m.g, b.s, b.m.g, "mlp reloaded at the same rank count");
        mlp_close(&b);
    }
    mlp_close(&a);
    plain_into_zero();
    barrier();
}

/* Stage 3 (the parameters sharded too): saved, reloaded at the same rank
 * count bitwise; the set loads into a lone session, which continues within
 * 1e-6 of the stage 3 run. */
static void test_mlp_stage3(void)
{
    char ckpt[512];
    path_of(ckpt, sizeof ckpt, "mlp3.ckpt");
    mlp a, b, lone;
    if (!mlp_open(&a, 3, comm, "stage 3")) return;
    mlp_train(&a, STEPS);
    OK(hx_session_save(a.s, ckpt));
    mlp_train(&a, STEPS);
    if (mlp_open(&b, 3, comm, "stage 3, reloaded")) {
        OK(hx_session_load(b.s, ckpt));
        mlp_train(&b, STEPS);
        check_same_state(a.s, a.m.g, b.s, b.m.g, "stage 3 reloaded at the same rank count");
        mlp_close(&b);
    }
    if (mlp_open(&lone, 0, NULL, "stage 3's set, alone")) {
        OK(hx_session_load(lone.s, ckpt));
        CHECK(hx_session_step(lone.s) == STEPS, "stage 3's set alone: step %lld", (long long)hx_session_step(lone.s));
        mlp_train(&lone, STEPS);
        /* every parameter and moment the stage 3 run holds on this rank */
        double e = 0;
        int k = 0;
        for (int i = 0; i < a.m.g->n; i++) {
            const hx_tensor *t = a.m.g->tensors[i];
            size_t n = hx_tensor_nbytes(t);
            float *want = is_saved(t) ? malloc(n) : NULL, *got = want ? malloc(n) : NULL;
            if (want && hx_session_read(a.s, t, want, n) == HX_OK) {
                OK(hx_session_read(lone.s, hx_graph_find(lone.m.g, hx_tensor_name(t)), got, n));
                e = fmax(e, test_max_rel_f32(got, want, (int64_t)(n / sizeof(float))));
                k++;
            }
            free(want);
            free(got);
        }
        CHECK(k > 0 && e <= 1e-6, "stage 3's set loaded alone, continued: %.3g off the stage 3 run (%d tensors)",
              e, k);
        mlp_close(&lone);
    }
    mlp_close(&a);
    barrier();
}

/* ---- the GPT example, bf16 with f32 masters (sharded) at stage 1 --------------- */

static const gpt_config GPT = {.vocab = 32, .layers = 1, .heads = 2, .width = 32, .context = 8,
                               .batch = GPT_B, .seed = 1, .dtype = HX_DTYPE_BF16};

static float gpt_step(gpt_run *r, int step)
{
    int n = GPT_B / size * GPT.context;
    int32_t tok[GPT_B * 8], tgt[GPT_B * 8];
    test_rng g = test_rng_make(77 + 1000 * (uint64_t)step + (uint64_t)rank);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)(test_rng_u64(&g) % GPT.vocab);
    for (int i = 0; i < n; i++) tgt[i] = (tok[i] * 7 + 3) % GPT.vocab;
    float loss = NAN;
    hx_feed f[2] = {{NULL, r->m.tokens, tok, sizeof *tok * n}, {NULL, r->m.targets, tgt, sizeof *tgt * n}};
    hx_fetch l = {NULL, r->m.loss, &loss, sizeof loss};
    OK(hx_session_run(r->s, f, 2, &l, 1, HX_RUN_TRAIN));
    return loss;
}

static void test_gpt_reload(void)
{
    char ckpt[512];
    path_of(ckpt, sizeof ckpt, "gpt.ckpt");
    gpt_config c = GPT;
    c.batch = GPT_B / size;
    gpt_optim o = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                   .offload = GPT_OFFLOAD_OPTIMIZER, .warmup = 0, .min_lr_ratio = 1};
    hx_session_config cfg = mlp_config(1, comm);
    cfg.accelerator = HX_ACCELERATOR_EMU;
    gpt_run a, b;
    if (gpt_run_create(&c, &o, &cfg, &a)) {
        CHECK(false, "gpt: %s", hx_last_error());
        return;
    }
    float la[STEPS], lb[STEPS];
    for (int s = 0; s < STEPS; s++) gpt_step(&a, s);
    OK(hx_session_save(a.s, ckpt));
    for (int s = 0; s < STEPS; s++) la[s] = gpt_step(&a, STEPS + s);
    if (!gpt_run_create(&c, &o, &cfg, &b)) {
        OK(hx_session_load(b.s, ckpt));
        for (int s = 0; s < STEPS; s++) lb[s] = gpt_step(&b, STEPS + s);
        CHECK(!memcmp(la, lb, sizeof la), "gpt reloaded: rank %d: losses %.9g ... differ from %.9g ...", rank,
              lb[0], la[0]);
        check_same_state(a.s, a.g, b.s, b.g, "gpt (bf16, f32 masters) reloaded at the same rank count");
        gpt_run_free(&b);
    } else {
        CHECK(false, "gpt: %s", hx_last_error());
    }
    gpt_run_free(&a);
}

/* ---- the other modes --------------------------------------------------------------- */

/* Loads the 4-rank set here (this rank count, or alone), continues, compares. */
static void test_resume(void)
{
    char ckpt[512], what[96];
    path_of(ckpt, sizeof ckpt, "mlp.ckpt");
    mlp r;
    if (comm) snprintf(what, sizeof what, "saved at 4 ranks, loaded at %d at stage %d", size, stage_flag);
    else snprintf(what, sizeof what, "saved at 4 ranks, loaded by one process alone");
    if (!mlp_open(&r, stage_flag, comm, what)) return;
    OK(hx_session_load(r.s, ckpt));
    CHECK(hx_session_step(r.s) == STEPS, "%s: step %lld", what, (long long)hx_session_step(r.s));
    mlp_train(&r, STEPS);
    check_final(&r, what);
    mlp_close(&r);
}

/* Trains and saves after every step, until killed. */
static void test_saver(void)
{
    char ckpt[512];
    path_of(ckpt, sizeof ckpt, "killed.ckpt");
    mlp r;
    if (!mlp_open(&r, 2, comm, "saver")) return;
    for (;;) {
        mlp_train(&r, 1);
        OK(hx_session_save(r.s, ckpt));
        if (rank == 0) printf("saved step %lld\n", (long long)hx_session_step(r.s));
        fflush(stdout);
    }
}

/* What the killed saver left loads, and matches a lone run of its steps. */
static void test_check(void)
{
    char ckpt[512];
    path_of(ckpt, sizeof ckpt, "killed.ckpt");
    mlp r, lone;
    if (!mlp_open(&r, 0, NULL, "check") || !mlp_open(&lone, 0, NULL, "lone")) return;
    OK(hx_session_load(r.s, ckpt));
    int64_t steps = hx_session_step(r.s);
    CHECK(steps >= min_step, "the killed saver's checkpoint holds %lld steps; it reported a save at step %d",
          (long long)steps, min_step);
    mlp_train(&lone, (int)steps);
    float a[N_PARAMS], b[N_PARAMS];
    mlp_params(&r, a);
    mlp_params(&lone, b);
    double e = test_max_rel_f32(a, b, N_PARAMS);
    CHECK(e <= 1e-6, "the killed saver's checkpoint (step %lld) is %.3g off a lone run", (long long)steps, e);
    printf("check: the checkpoint left by the killed job loads: step %lld, %.3g off a lone run\n",
           (long long)steps, e);
    mlp_close(&r);
    mlp_close(&lone);
}

static void test_run(void)
{
    if (!strcmp(mode, "save")) test_mlp_save(), test_mlp_stage3(), test_gpt_reload();
    else if (!strcmp(mode, "resume") || !strcmp(mode, "alone")) test_resume();
    else if (!strcmp(mode, "saver")) test_saver();
    else if (!strcmp(mode, "check")) test_check();
    else CHECK(false, "unknown --mode '%s'", mode);
}

static int flag(int argc, char **argv, int i)
{
    if (strcmp(argv[i], "--mode") && strcmp(argv[i], "--dir") && strcmp(argv[i], "--stage") &&
        strcmp(argv[i], "--min-step"))
        return 0;
    if (i + 1 >= argc) return -1;
    if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--stage")) stage_flag = atoi(argv[i + 1]);
    else min_step = atoi(argv[i + 1]);
    return 2;
}

static int setup(void)
{
    if (!*dir) {
        fprintf(stderr, "mpi_zero_ckpt: --dir DIR is needed\n");
        return 2;
    }
    if (!strcmp(mode, "alone") || !strcmp(mode, "check")) return 0; /* a plain process */
    if (!(comm = mpi_world_open(60, &rank, &size))) return 1;
    if (B % size || GPT_B % size) {
        fprintf(stderr, "mpi_zero_ckpt: %d ranks do not divide the batches of %d and %d\n", size, B, GPT_B);
        return 1;
    }
    return 0;
}

static void teardown(void) { hx_comm_free(comm); }

int main(int argc, char **argv)
{
    static const test_case cases[] = {{"run", test_run}};
    test_options o = {.setup = setup, .teardown = teardown, .flag = flag,
                      .flags_help = "  --mode save|resume|alone|saver|check  --dir DIR  --stage S  --min-step N\n"};
    return test_main_with(argc, argv, "mpi_zero_ckpt", cases, TEST_COUNT(cases), &o);
}
