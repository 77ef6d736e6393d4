/* Data parallel, ZeRO stage 0 (hx_session_config.comm), under mpirun: N
 * ranks, each training tests/util/deep_mlp on its B/N rows of a global
 * batch of B, against one session on this rank training the whole batch
 * alone; f32 Adam, 20 steps, on the CPU, on emu's device, and with the
 * parameters and Adam on the host (offload_param=cpu).
 *
 * Why not bitwise: the N-rank run sums each rank's gradient of the mean
 * loss over B/N rows and divides by N, the lone run takes the mean over B
 * rows; the partial sums associate differently, so gradients differ in
 * the last bits and Adam carries that on. Losses (the ranks' mean) and
 * parameters must agree within 1e-6 relative. Across ranks, runs and
 * transports the N-rank run is bitwise the same: the sum is in rank
 * order; tests/mpi/same_over_tcp.sh compares the "hx-digest" lines.
 * Also: a NaN fed on one rank skips the step on every rank (loss
 * scaling), the data-parallel refusals, and ranks whose graphs or seeds
 * differ refused at session creation, naming the first difference. */
#include "dist/dist.h"
#include "deep_mlp.h"
#include "hetex_checks.h"
#include "mpi_world.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 12, W = 8, LAYERS = 2, STEPS = 20 };

static hx_comm *comm;
static int rank, size;
static uint64_t digest = 1469598103934665603ull;

static void fold(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) digest = (digest ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
}

/* The global batch of step s, the same on every rank. */
static void batch(int s, float *x, float *y)
{
    test_rng g = test_rng_make(1000 + (uint64_t)s);
    test_fill_uniform(&g, x, B * W, -1, 1);
    test_fill_uniform(&g, y, B * W, -1, 1);
}

static float mean_over_ranks(float v)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_reduce(comm, &v, &v, 1, HX_DTYPE_F32, &q);
    if (st == HX_OK) st = hx__coll_wait(q);
    CHECK(st == HX_OK, "%s", hx_last_error());
    return v / (float)size;
}

static hx_session_config config(int variant, hx_comm *c)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.accelerator = variant == 0 ? HX_ACCELERATOR_NONE : HX_ACCELERATOR_EMU;
    cfg.offload.chunk_size = 200; /* w (256 bytes) in chunks of their own, the biases together */
    if (variant == 2) cfg.offload.offload_param = HX_OFFLOAD_CPU;
    cfg.comm = c;
    return cfg;
}

static const char *const variant_name[3] = {"cpu", "emu", "emu, offload_param=cpu"};

static void train_against_alone(int variant)
{
    deep_mlp dp, alone;
    if (deep_mlp_build(B / size, W, LAYERS, &dp) || deep_mlp_build(B, W, LAYERS, &alone)) {
        CHECK(false, "deep_mlp_build: %s", hx_last_error());
        return;
    }
    hx_session_config cd = config(variant, comm), ca = config(variant, NULL);
    hx_session *sd = test_session_with(dp.g, &cd, "data parallel"), *sa = test_session_with(alone.g, &ca, "alone");
    float x[B * W], y[B * W];
    int rows = B / size;
    double worst_loss = 0;
    for (int s = 0; s < STEPS && sd && sa; s++) {
        batch(s, x, y);
        float ld, la;
        hx_feed fd[2] = {{NULL, dp.x, x + rank * rows * W, sizeof(float) * rows * W},
                         {NULL, dp.y, y + rank * rows * W, sizeof(float) * rows * W}};
        hx_feed fa[2] = {{NULL, alone.x, x, sizeof x}, {NULL, alone.y, y, sizeof y}};
        hx_fetch gd = {NULL, dp.loss, &ld, sizeof ld}, ga = {NULL, alone.loss, &la, sizeof la};
        OK(hx_session_run(sd, fd, 2, &gd, 1, HX_RUN_TRAIN));
        OK(hx_session_run(sa, fa, 2, &ga, 1, HX_RUN_TRAIN));
        float mean = mean_over_ranks(ld);
        fold(&mean, sizeof mean);
        worst_loss = fmax(worst_loss, fabs((double)mean - la) / fabs((double)la));
    }
    CHECK(worst_loss <= 1e-6, "%s: the ranks' mean loss is %.3g off the lone run's", variant_name[variant], worst_loss);
    for (int l = 0; l < LAYERS && sd && sa; l++) {
        const hx_tensor *td[2] = {dp.w[l], dp.b[l]}, *ta[2] = {alone.w[l], alone.b[l]};
        for (int j = 0; j < 2; j++) {
            int64_t n = hx_tensor_numel(td[j]);
            float *pd = malloc(sizeof(float) * n), *pa = malloc(sizeof(float) * n);
            OK(hx_session_read(sd, td[j], pd, sizeof(float) * n));
            OK(hx_session_read(sa, ta[j], pa, sizeof(float) * n));
            fold(pd, sizeof(float) * n);
            double e = test_max_rel_f32(pd, pa, n);
            CHECK(e <= 1e-6, "%s: parameter '%s' after %d steps is %.3g off the lone run's",
                  variant_name[variant], hx_tensor_name(td[j]), STEPS, e);
            free(pd);
            free(pa);
        }
    }
    hx_train_stats st;
    if (sd && hx_session_train_stats(sd, &st) == HX_OK)
        CHECK(st.step == STEPS, "%lld steps", (long long)st.step);
    hx_session_free(sd);
    hx_session_free(sa);
    deep_mlp_free(&dp);
    deep_mlp_free(&alone);
}

static void test_cpu(void) { train_against_alone(0); }
static void test_emu(void) { train_against_alone(1); }
static void test_offload_cpu(void) { train_against_alone(2); }

/* Rank 0 feeds a NaN at step 1: the summed gradient is NaN on every rank,
 * so every rank skips that step (loss scaling) and all stay equal. */
static void test_nan_on_one_rank(void)
{
    deep_mlp m;
    if (deep_mlp_build(B / size, W, 1, &m)) {
        CHECK(false, "deep_mlp_build: %s", hx_last_error());
        return;
    }
    hx_session_config cfg = config(1, comm);
    cfg.loss_scale.enabled = true;
    hx_session *s = test_session_with(m.g, &cfg, "nan");
    float x[B * W], y[B * W];
    int rows = B / size;
    for (int step = 0; step < 3 && s; step++) {
        batch(step, x, y);
        if (step == 1 && rank == 0) x[3] = NAN;
        hx_feed f[2] = {{NULL, m.x, x + rank * rows * W, sizeof(float) * rows * W},
                        {NULL, m.y, y + rank * rows * W, sizeof(float) * rows * W}};
        OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
        hx_train_stats st;
        OK(hx_session_train_stats(s, &st));
        CHECK(st.last_skipped == (step == 1), "rank %d step %d: skipped %d", rank, step, st.last_skipped);
        float skipped = (float)st.last_skipped, all = mean_over_ranks(skipped);
        CHECK(all == skipped, "rank %d step %d: the ranks disagree on skipping", rank, step);
    }
    float w[W * W], sum[W * W];
    OK(hx_session_read(s, m.w[0], w, sizeof w));
    memcpy(sum, w, sizeof w);
    hx_coll *q = NULL;
    OK(hx__comm_all_reduce(comm, sum, sum, W * W, HX_DTYPE_F32, &q));
    OK(hx__coll_wait(q));
    bool same = true;
    for (int i = 0; i < W * W; i++) same &= sum[i] == w[i] * (float)size || size == 3; /* exact for 1, 2, 4 */
    CHECK(same, "rank %d: the ranks' parameters differ", rank);
    hx_session_free(s);
    deep_mlp_free(&m);
}

static void test_refusals(void)
{
    hx_graph *g = hx_graph_create();
    hx_embedding_config ec = hx_embedding_config_default();
    ec.rows = 10;
    ec.dim = 4;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    int64_t is[1] = {3}, ws[2] = {4, 2};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, is);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_uniform(-1, 1));
    hx_tensor *loss = hx_reduce_mean(g, hx_matmul(g, hx_embedding_lookup(g, t, ids), w, false, false), 2, (const int[]){0, 1}, false);
    hx_embedding_optimizer eo = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    OK(hx_embedding_table_set_optimizer(t, &eo));
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &oc));
    hx_session_config cfg = config(0, comm);
    hx_session *s = (hx_session *)g;
    hx_status st = hx_session_create(g, &cfg, &s);
    CHECK(st == HX_ERR_UNSUPPORTED && strstr(hx_last_error(), "embedding tables") && !s,
          "embedding tables refused: %s %s", hx_status_name(st), hx_last_error());
    hx_graph_free(g);
    hx_embedding_table_free(t);
}

/* The last rank builds a wider model: every rank's session creation fails,
 * naming the first tensor that differs as each rank has it. */
static void test_mismatched_graphs(void)
{
    if (size < 2) {
        test_skip("needs 2 ranks");
        return;
    }
    deep_mlp m;
    int width = rank == size - 1 ? W + 1 : W;
    if (deep_mlp_build(B / size, width, 1, &m)) {
        CHECK(false, "deep_mlp_build: %s", hx_last_error());
        return;
    }
    hx_session_config cfg = config(0, comm);
    hx_session *s = (hx_session *)m.g;
    hx_status st = hx_session_create(m.g, &cfg, &s);
    char want[96];
    snprintf(want, sizeof want, "rank 0 has #0 'x' input f32 [%d,%d]", B / size, W);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !s && strstr(hx_last_error(), "graphs differ") &&
              strstr(hx_last_error(), "tensor #0") && strstr(hx_last_error(), want),
          "rank %d: %s: %s", rank, hx_status_name(st), hx_last_error());
    snprintf(want, sizeof want, "rank %d has #0 'x' input f32 [%d,%d]", size - 1, B / size, W + 1);
    CHECK(strstr(hx_last_error(), want), "rank %d: the other rank's tensor: %s", rank, hx_last_error());
    hx_session_free(s);
    /* the same graph but another seed on the last rank */
    deep_mlp_free(&m);
    if (deep_mlp_build(B / size, W, 1, &m)) return;
    cfg.seed = rank == size - 1 ? 43 : 42;
    st = hx_session_create(m.g, &cfg, &s);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && !s && strstr(hx_last_error(), "configs differ") &&
              strstr(hx_last_error(), "seed 43"),
          "rank %d: %s: %s", rank, hx_status_name(st), hx_last_error());
    /* the communicator still works: the same graphs then train */
    cfg.seed = 42;
    OK(hx_session_create(m.g, &cfg, &s));
    hx_session_free(s);
    deep_mlp_free(&m);
}

static int setup(void)
{
    if (!(comm = mpi_world_open(60, &rank, &size))) return 1;
    if (B % size) {
        fprintf(stderr, "mpi_ddp: %d ranks do not divide the batch of %d\n", size, B);
        return 1;
    }
    return 0;
}

static void teardown(void) { mpi_world_close_with_digest(comm, rank, size, digest); }

int main(int argc, char **argv)
{
    static const test_case cases[] = {
        {"cpu", test_cpu}, {"emu", test_emu}, {"offload_cpu", test_offload_cpu},
        {"nan_on_one_rank", test_nan_on_one_rank}, {"refusals", test_refusals},
        {"mismatched_graphs", test_mismatched_graphs},
    };
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "mpi_ddp", cases, TEST_COUNT(cases), &o);
}
