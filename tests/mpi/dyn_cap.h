/* A DYNAMIC table's shards under a byte cap (hx_embedding_config.rank_bytes),
 * trained through the graph: shared by mpi_shard.c (collective mode) and
 * mpi_ps.c (server mode); include after shard_model.h (config).
 *
 * The cap: each shard's rows and Adagrad state (CAP_RPS rows of CAP_D f32,
 * 128 bytes a row), its map's queue of a row id per row, and 6 KiB for
 * the map's slots of 32 bytes and its header: room for 128 slots (64 keys
 * at a load of one half), not 256. Per training rank and step:
 *   CAP_FILTER (min_count 2): 4 keys fed twice (a row at once) and 8 keys
 *     seen once ever (counted, never admitted): without the cap the maps
 *     count every one-off key and grow past it; under it they forget the
 *     oldest one-off keys, and the 4 keys' rows train exactly as without.
 *   CAP_ERROR, CAP_EVICT (min_count 1): 16 keys never seen before, each
 *     given a row: past 64 keys a shard's map is full; without
 *     evict_when_full the step fails (HX_ERR_OUT_OF_MEMORY naming the map
 *     and evict_when_full) and every row stays as it was; with it the keys
 *     seen longest ago go and training goes on. */
#ifndef HX_TEST_DYN_CAP_H
#define HX_TEST_DYN_CAP_H

enum { CAP_D = 16, CAP_N = 16, CAP_RPS = 512, CAP_STEPS = 12 };
enum { CAP_FILTER, CAP_ERROR, CAP_EVICT };

static size_t cap_bytes(void) { return (size_t)CAP_RPS * (CAP_D * 4 * 2 + 8) + 6144; }

/* The keys training rank r feeds at step s. */
static void cap_keys(int kind, int r, int s, int64_t *k)
{
    for (int i = 0; i < CAP_N; i++)
        k[i] = kind != CAP_FILTER ? 7919LL * (s * 1024 + r * 16 + i) + 3
               : i < 8            ? 100 + 4 * r + i / 2
                                  : 1000003LL * (s * 64 + r * 8 + i) + 7;
}

/* A table of `shards` parts of CAP_RPS rows, on ps or over c, capped or not. */
static hx_embedding_table *cap_table(hx_comm *c, hx_ps *ps, int shards, const char *name, int kind, bool capped)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = name;
    ec.rows = (int64_t)CAP_RPS * shards;
    ec.dim = CAP_D;
    ec.ids = HX_EMBEDDING_IDS_DYNAMIC;
    ec.min_count = kind == CAP_FILTER ? 2 : 1;
    ec.evict_when_full = kind == CAP_EVICT;
    ec.seed = 5;
    ec.init = hx_init_uniform(-0.5, 0.5);
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    ec.n_threads = 1;
    ec.comm = c;
    ec.ps = ps;
    ec.sharding = HX_EMBEDDING_SHARD_ROWS;
    ec.rank_bytes = capped ? cap_bytes() : 0;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    return t;
}

/* What a training rank saw of one table's run. */
typedef struct cap_result {
    int steps;            /* run before the first failure */
    hx_status failed;     /* its status (HX_OK: none) */
    char why[600];
    size_t most;          /* the most bytes this rank's shard held after a step (0 on a worker) */
    bool kept;            /* the rows read after the failure are those read before it */
    float hot[4 * CAP_D]; /* CAP_FILTER: the rows of the keys fed twice, at the end */
} cap_result;

/* Trains t on up to steps steps of kind's keys as training rank r, the
 * loss the sum of the rows times x (SGD on nothing dense). After each
 * step the rows of every key fed so far are read (a collective call), so
 * that a failed step can be held against the rows before it. */
static void cap_train(hx_embedding_table *t, hx_comm *dense, int kind, int r, int steps, cap_result *out)
{
    memset(out, 0, sizeof *out);
    hx_graph *g = hx_graph_create();
    int64_t n = CAP_N, xs[2] = {CAP_N, CAP_D};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    OK(hx_graph_backward(g, hx_reduce_sum(g, hx_mul(g, hx_embedding_lookup(g, t, ids), x), 0, NULL, false)));
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &sgd));
    hx_session_config cfg = config(dense);
    hx_session *s = test_session_with(g, &cfg, "a capped DYNAMIC table");
    float xv[CAP_N * CAP_D];
    for (int i = 0; i < CAP_N * CAP_D; i++) xv[i] = 0.25f * (float)(i % 5) - 0.5f;
    int64_t *fed = malloc(sizeof(int64_t) * CAP_N * (size_t)steps);
    float *before = malloc(sizeof(float) * CAP_N * CAP_D * (size_t)steps), *after = malloc(sizeof(float) * CAP_N * CAP_D * (size_t)steps);
    int64_t nfed = 0;
    for (; s && out->steps < steps; out->steps++) {
        int64_t *k = fed + nfed;
        cap_keys(kind, r, out->steps, k);
        hx_feed f[2] = {{NULL, ids, k, sizeof(int64_t) * CAP_N}, {NULL, x, xv, sizeof xv}};
        if ((out->failed = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN))) {
            snprintf(out->why, sizeof out->why, "%s", hx_last_error());
            OK(hx_embedding_table_read_rows(t, fed, nfed, after));
            out->kept = !memcmp(before, after, sizeof(float) * CAP_D * (size_t)nfed);
            break;
        }
        nfed += CAP_N;
        OK(hx_embedding_table_read_rows(t, fed, nfed, before));
        hx_embedding_stats es;
        OK(hx_embedding_table_stats(t, &es));
        if (es.bytes > out->most) out->most = es.bytes;
    }
    if (kind == CAP_FILTER) {
        int64_t hot[4];
        for (int i = 0; i < 4; i++) hot[i] = 100 + 4 * r + i;
        OK(hx_embedding_table_read_rows(t, hot, 4, out->hot));
    }
    free(fed);
    free(before);
    free(after);
    hx_session_free(s);
    hx_graph_free(g);
}

#endif
