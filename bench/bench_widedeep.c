/* Wide & deep training throughput on generated Criteo-schema data. One
 * JSON object per line on stdout.
 *
 *   bench_widedeep [--steps N] [--warmup N] [--batch N] [--rows N] [--dim N] [--threads N]
 *
 * The model: 26 host tables of `rows` x `dim` (default 1M x 16, LazyAdam,
 * lazily initialised), one lookup each; a wide host table (2^22 x 1, ids
 * modulo, FTRL) summed over the 26 ids of a sample; 13 log1p numeric
 * features; an MLP 429-256-128-1 with Adam on the device; sigmoid
 * cross-entropy. Cases: accelerator none and emu. Each reports samples/s
 * over N steps after the warm-up steps (10: the first touches of table
 * pages, zeroed by the kernel, dominate early steps), and the ceiling measured in the same
 * run: a plain loop memcpy-gathering the same rows (26 x batch rows of dim
 * floats) from a table of the same shape; `gather_ratio` = step time over
 * gather time. Set HX_TRACE=path for a Chrome trace of the emu case. */
#include "hetex.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_CAT = 26, N_NUM = 13 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_widedeep: %s: %s\n", what, hx_last_error());
    exit(1);
}

typedef struct model {
    hx_graph *g;
    hx_embedding_table *tables[N_CAT], *wide;
    hx_tensor *dense, *ids[N_CAT], *wide_ids, *wide_offsets, *labels, *loss;
} model;

static hx_tensor *layer(hx_graph *g, hx_tensor *x, int64_t in, int64_t out, int k)
{
    char w[16], b[16];
    snprintf(w, sizeof w, "w%d", k);
    snprintf(b, sizeof b, "b%d", k);
    int64_t ws[2] = {in, out};
    hx_tensor *W = hx_graph_param(g, w, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
    hx_tensor *B = hx_graph_param(g, b, HX_DTYPE_F32, 1, &out, hx_init_zeros());
    hx_tensor_set_target(W, HX_TARGET_DEVICE);
    hx_tensor_set_target(B, HX_TARGET_DEVICE);
    return hx_bias_add(g, hx_matmul(g, x, W, false, false), B);
}

static void build(model *m, int64_t batch, int64_t rows, int64_t dim, int threads)
{
    memset(m, 0, sizeof *m);
    for (int c = 0; c < N_CAT; c++) {
        hx_embedding_config ec = hx_embedding_config_default();
        char name[16];
        snprintf(name, sizeof name, "C%d", c + 1);
        ec.name = name;
        ec.rows = rows;
        ec.dim = dim;
        ec.lazy_init = true;
        ec.seed = (uint64_t)c;
        ec.n_threads = threads;
        ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
        if (hx_embedding_table_create(&ec, &m->tables[c])) die("table");
    }
    hx_embedding_config wc = hx_embedding_config_default();
    wc.name = "wide";
    wc.rows = (int64_t)1 << 22;
    wc.dim = 1;
    wc.ids = HX_EMBEDDING_IDS_MODULO;
    wc.init = hx_init_zeros();
    wc.n_threads = threads;
    wc.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_FTRL);
    if (hx_embedding_table_create(&wc, &m->wide)) die("wide table");

    hx_graph *g = m->g = hx_graph_create();
    int64_t ds[2] = {batch, N_NUM}, is[1] = {batch}, ws[1] = {batch * N_CAT};
    m->dense = hx_graph_input(g, "dense", HX_DTYPE_F32, 2, ds);
    m->labels = hx_graph_input(g, "labels", HX_DTYPE_F32, 1, is);
    m->wide_ids = hx_graph_input(g, "wide_ids", HX_DTYPE_I64, 1, ws);
    m->wide_offsets = hx_graph_input(g, "wide_offsets", HX_DTYPE_I64, 1, is);
    hx_tensor *parts[N_CAT + 1] = {m->dense};
    for (int c = 0; c < N_CAT; c++) {
        char name[16];
        snprintf(name, sizeof name, "ids%d", c + 1);
        m->ids[c] = hx_graph_input(g, name, HX_DTYPE_I64, 1, is);
        parts[c + 1] = hx_embedding_lookup(g, m->tables[c], m->ids[c]); /* (B, dim) host */
    }
    hx_tensor *wide = hx_embedding_bag(g, m->wide, m->wide_ids, m->wide_offsets, NULL,
                                       HX_EMBEDDING_BAG_SUM, 0, 0);
    hx_graph_push_target(g, HX_TARGET_DEVICE);
    int64_t in = N_NUM + N_CAT * dim;
    hx_tensor *x = hx_concat(g, N_CAT + 1, parts, 1);
    x = hx_relu(g, layer(g, x, in, 256, 1));
    x = hx_relu(g, layer(g, x, 256, 128, 2));
    hx_tensor *logit = hx_reshape(g, hx_add(g, layer(g, x, 128, 1, 3), wide), 1, is);
    m->loss = hx_bce_with_logits(g, logit, m->labels);
    hx_graph_pop_target(g);
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    if (!m->loss || hx_graph_backward(g, m->loss) || hx_graph_apply_optimizer(g, NULL, &adam))
        die("graph");
}

static void model_free(model *m)
{
    hx_graph_free(m->g);
    for (int c = 0; c < N_CAT; c++) hx_embedding_table_free(m->tables[c]);
    hx_embedding_table_free(m->wide);
}

/* Generated batches as feeds: steps of them, made once, reused by every case. */
typedef struct data {
    float *dense, *labels;
    int64_t *ids, *wide_ids, *wide_offsets;
} data;

static void make_data(data *d, int n_batches, int64_t batch, int64_t rows)
{
    hx_generator_config gc = hx_generator_config_default();
    gc.n_rows = n_batches * batch;
    gc.batch_size = batch;
    gc.vocab_size = rows;
    gc.n_threads = 2;
    hx_generator *gen;
    if (hx_generator_create(&gc, &gen)) die("generator");
    int64_t n = n_batches * batch;
    d->dense = malloc(sizeof *d->dense * n * N_NUM);
    d->labels = malloc(sizeof *d->labels * n);
    d->ids = malloc(sizeof *d->ids * n * N_CAT);
    d->wide_ids = malloc(sizeof *d->wide_ids * n * N_CAT);
    d->wide_offsets = malloc(sizeof *d->wide_offsets * batch);
    if (!d->dense || !d->labels || !d->ids || !d->wide_ids || !d->wide_offsets) {
        fprintf(stderr, "bench_widedeep: out of memory\n");
        exit(1);
    }
    for (int64_t r = 0; r < batch; r++) d->wide_offsets[r] = r * N_CAT;
    const hx_batch *b;
    for (int k = 0; k < n_batches; k++) {
        if (hx_generator_next(gen, &b) || !b || b->n != batch) die("generator batch");
        int64_t base = k * batch;
        for (int64_t r = 0; r < batch; r++) {
            d->labels[base + r] = b->labels[r];
            for (int j = 0; j < N_NUM; j++)
                d->dense[(base + r) * N_NUM + j] = log1pf(fmaxf(b->numeric[r * N_NUM + j], 0));
            for (int c = 0; c < N_CAT; c++) {
                int64_t id = b->categorical[r * N_CAT + c];
                if (id < 0) id = 0; /* missing: row 0 */
                d->ids[(base * N_CAT) + c * batch + r] = id; /* per batch: column-major */
                d->wide_ids[(base + r) * N_CAT + c] = id * N_CAT + c;
            }
        }
    }
    hx_generator_free(gen);
}

/* The ceiling: memcpy-gathering the same rows from a plain table. */
static double gather_seconds(const data *d, int n_batches, int64_t batch, int64_t rows,
                             int64_t dim)
{
    float *table = malloc(sizeof *table * rows * dim), *out = malloc(sizeof *out * batch * dim);
    if (!table || !out) {
        fprintf(stderr, "bench_widedeep: out of memory for the gather ceiling\n");
        exit(1);
    }
    for (int64_t i = 0; i < rows * dim; i++) table[i] = (float)(i & 1023);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t = now();
        for (int k = 0; k < n_batches; k++)
            for (int c = 0; c < N_CAT; c++) {
                const int64_t *ids = d->ids + (int64_t)k * batch * N_CAT + c * batch;
                for (int64_t r = 0; r < batch; r++)
                    memcpy(out + r * dim, table + ids[r] * dim, sizeof *out * dim);
            }
        t = (now() - t) / n_batches;
        if (t < best) best = t;
    }
    free(table);
    free(out);
    return best;
}

int main(int argc, char **argv)
{
    int steps = 20, warm = 10, threads = 2;
    int64_t batch = 4096, rows = 1 << 20, dim = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        long long v = atoll(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = (int)v;
        else if (!strcmp(argv[i], "--warmup")) warm = (int)v;
        else if (!strcmp(argv[i], "--batch")) batch = v;
        else if (!strcmp(argv[i], "--rows")) rows = v;
        else if (!strcmp(argv[i], "--dim")) dim = v;
        else if (!strcmp(argv[i], "--threads")) threads = (int)v;
        else {
            fprintf(stderr, "bench_widedeep: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (steps < 1 || warm < 0 || batch < 1 || rows < 1 || dim < 1 || threads < 1) {
        fprintf(stderr, "bench_widedeep: options must be positive\n");
        return 2;
    }
    int n_batches = steps + warm;
    data d;
    make_data(&d, n_batches, batch, rows);
    double gather = gather_seconds(&d, n_batches, batch, rows, dim);
    const char *trace = getenv("HX_TRACE");
    static const struct { const char *name; hx_accelerator acc; } cases[] = {
        {"none", HX_ACCELERATOR_NONE}, {"emu", HX_ACCELERATOR_EMU}};
    for (int k = 0; k < 2; k++) {
        if (trace) {
            if (cases[k].acc == HX_ACCELERATOR_EMU) setenv("HX_TRACE", trace, 1);
            else unsetenv("HX_TRACE");
        }
        model m;
        build(&m, batch, rows, dim, threads);
        hx_session_config sc = hx_session_config_default();
        sc.n_threads = threads;
        sc.accelerator = cases[k].acc;
        hx_session *s;
        if (hx_session_create(m.g, &sc, &s)) die("session");
        double t0 = 0, loss_sum = 0;
        for (int step = 0; step < n_batches; step++) {
            if (step == warm) t0 = now();
            int64_t base = (int64_t)step * batch;
            hx_feed feeds[4 + N_CAT] = {
                {NULL, m.dense, d.dense + base * N_NUM, sizeof(float) * batch * N_NUM},
                {NULL, m.labels, d.labels + base, sizeof(float) * batch},
                {NULL, m.wide_ids, d.wide_ids + base * N_CAT, sizeof(int64_t) * batch * N_CAT},
                {NULL, m.wide_offsets, d.wide_offsets, sizeof(int64_t) * batch}};
            for (int c = 0; c < N_CAT; c++)
                feeds[4 + c] = (hx_feed){NULL, m.ids[c], d.ids + base * N_CAT + c * batch,
                                         sizeof(int64_t) * batch};
            float loss;
            hx_fetch fetch = {NULL, m.loss, &loss, sizeof loss};
            if (hx_session_run(s, feeds, 4 + N_CAT, &fetch, 1, HX_RUN_TRAIN)) die("step");
            if (step >= warm) loss_sum += loss;
        }
        double step_s = (now() - t0) / steps;
        hx_placement_stats ps;
        hx_session_placement_stats(s, &ps);
        printf("{\"bench\":\"widedeep\",\"case\":\"%s\",\"threads\":%d,\"batch\":%lld,"
               "\"tables\":%d,\"rows\":%lld,\"dim\":%lld,\"steps\":%d,\"step_ms\":%.3f,"
               "\"samples_per_s\":%.0f,\"gather_ms\":%.3f,\"gather_ratio\":%.2f,"
               "\"mean_loss\":%.4f,\"copies_per_step\":%d,\"copy_bytes_per_step\":%zu}\n",
               cases[k].name, threads, (long long)batch, N_CAT, (long long)rows, (long long)dim,
               steps, step_s * 1e3, batch / step_s, gather * 1e3, step_s / gather,
               loss_sum / steps, ps.n_copies, ps.copy_bytes);
        fflush(stdout);
        hx_session_free(s);
        model_free(&m);
    }
    free(d.dense);
    free(d.labels);
    free(d.ids);
    free(d.wide_ids);
    free(d.wide_offsets);
    return 0;
}
