/* Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/):
 * files hetex wrote for the targets' own models (checkpoints, tables, a
 * recorded memory trace, a generated Criteo TSV), lines of data/adult,
 * and small graph programs and offload specs; with the argument "zero"
 * (under mpirun) only the sharded checkpoints of fuzz_zero_load. Run by
 * `./build.sh fuzz-seeds` from the source root; the corpora are kept in
 * the tree, so this runs again only when a format or a model changes. */
#include "fuzz_common.h"
#include "session/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void die(const char *what)
{
    fprintf(stderr, "seeds: %s: %s\n", what, hx_last_error());
    exit(1);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)size + 1);
    if (!b || fread(b, 1, (size_t)size, f) != (size_t)size) die(path);
    fclose(f);
    *n = (size_t)size;
    return b;
}

/* corpus/<target>/<name>: the prefix bytes, then the body. */
static void seed(const char *target, const char *name, const void *prefix, size_t np, const void *body,
                 size_t nb)
{
    char path[512];
    snprintf(path, sizeof path, "tests/fuzz/corpus/%s", target);
    mkdir("tests/fuzz/corpus", 0755);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "tests/fuzz/corpus/%s/%s", target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(prefix, 1, np, f) != np || fwrite(body, 1, nb, f) != nb || fclose(f)) die(path);
}

static void seed_file(const char *target, const char *name, const void *prefix, size_t np, const char *file)
{
    size_t n;
    unsigned char *b = slurp(file, &n);
    seed(target, name, prefix, np, b, n);
    free(b);
}

/* Sharded checkpoints of the session model (fuzz_zero_load's input: flags
 * 0, the shard files, the manifest) saved after two steps at ZeRO stages
 * 1-3 by every rank of MPI_COMM_WORLD (`fuzz_seeds zero` under mpirun
 * -np 2); rank 0 writes the seeds. */
static void zero_seeds(void)
{
    hx_comm *c = NULL;
    if (hx_comm_create(NULL, &c)) die("communicator");
    int ranks = hx_comm_size(c);
    if (ranks > 4) die("zero seeds: more than 4 ranks (fuzz_zero_load reads at most 4 shard files)");
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/hx_fuzz_seed_zero", dir && *dir ? dir : "/tmp");
    for (int stage = 1; stage <= 3; stage++) {
        fuzz_session_model m;
        fuzz_session_model_make(&m, c, stage);
        for (int i = 0; i < 2; i++)
            if (fuzz_session_model_step(&m)) die("zero step");
        if (hx_session_save(m.s, path)) die("zero save");
        fuzz_session_model_free(&m);
        if (hx_comm_rank(c)) continue;
        unsigned char *body = NULL;
        size_t nb = 0, n;
        FILE *f = open_memstream((char **)&body, &nb);
        if (!f) die("zero seed");
        const unsigned char head[2] = {0, (unsigned char)ranks};
        fwrite(head, 1, 2, f);
        for (int r = 0; r < ranks; r++) {
            char *file = hx__shard_file(path, 1, r, ranks);
            unsigned char *b = file ? slurp(file, &n) : NULL;
            const unsigned char len[4] = {n & 255, n >> 8 & 255, n >> 16 & 255, n >> 24 & 255};
            if (!b) die("zero seed");
            fwrite(len, 1, 4, f);
            fwrite(b, 1, n, f);
            remove(file);
            free(file);
            free(b);
        }
        unsigned char *mb = slurp(path, &n);
        fwrite(mb, 1, n, f);
        free(mb);
        remove(path);
        if (fclose(f)) die("zero seed");
        char name[32];
        snprintf(name, sizeof name, "stage%d_np%d", stage, ranks);
        seed("zero_load", name, NULL, 0, body, nb);
        free(body);
    }
    hx_comm_free(c);
}

static void session_seeds(void)
{
    fuzz_session_model m;
    fuzz_session_model_make(&m, NULL, 0);
    const char *p = fuzz_file("seed_ckpt", NULL, 0);
    if (hx_session_save(m.s, p)) die("save");
    seed_file("session_load", "fresh", NULL, 0, p);
    for (int i = 0; i < 2; i++)
        if (fuzz_session_model_step(&m)) die("step");
    if (hx_session_save(m.s, p)) die("save");
    seed_file("session_load", "after_two_steps", NULL, 0, p);
    fuzz_session_model_free(&m);
}

/* Trains t through a lookup of n ids (summed as the loss, SGD) for `steps`
 * runs, run k feeding the n ids at ids + k * stride. */
static void train_lookup(hx_embedding_table *t, int64_t n, const int64_t *ids_at, int64_t stride,
                         int steps)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *loss = hx_reduce_sum(g, hx_embedding_lookup(g, t, ids), 0, NULL, false);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    hx_session *s = NULL;
    if (!loss || hx_graph_backward(g, loss) || hx_graph_apply_optimizer(g, NULL, &oc) ||
        hx_session_create(g, NULL, &s))
        die("table graph");
    for (int step = 0; step < steps; step++) {
        hx_feed f = {NULL, ids, ids_at + step * stride, sizeof(int64_t) * (size_t)n};
        if (hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN)) die("table step");
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* Each table after three training runs of a lookup (dynamic keys seen
 * twice, so they get rows), saved behind its kind byte. */
static void table_seeds(void)
{
    static const char *names[FUZZ_TABLE_KINDS] = {"rows_lazy_f16", "modulo_ftrl", "dynamic_adagrad"};
    for (int k = 0; k < FUZZ_TABLE_KINDS; k++) {
        hx_embedding_table *t = fuzz_table_make(k);
        static const int64_t rows[6] = {1, 3, 3, 9, 15, 0}, keys[6] = {1000003, -5, 1000003, 77, -5, 4};
        train_lookup(t, 6, k == 2 ? keys : rows, 0, 3);
        const char *p = fuzz_file("seed_table", NULL, 0);
        if (hx_embedding_table_save(t, p)) die("table save");
        unsigned char kind = (unsigned char)k;
        seed_file("table_load", names[k], &kind, 1, p);
        if (hx_embedding_table_free(t)) die("table free");
    }
}

/* A table on disk after three training runs of a lookup: its row store
 * (its unused tail cut, up to a record's end: the store grows its file in
 * 64 MiB steps) behind its length, then its checkpoint. */
static void ssd_seeds(void)
{
    const char *store = fuzz_file("seed_ssd_store", NULL, 0);
    hx_status st;
    hx_embedding_table *t = fuzz_ssd_table_make(store, &st);
    if (!t) die("ssd table");
    static const int64_t rows[3][3] = {{1, 3, 9}, {15, 0, 3}, {4, 6, 8}};
    train_lookup(t, 3, rows[0], 3, 3);
    const char *ckpt = fuzz_file("seed_ssd_ckpt", NULL, 0);
    if (hx_embedding_table_save(t, ckpt) || hx_embedding_table_free(t)) die("ssd save");
    size_t ns, nc;
    unsigned char *sb = slurp(store, &ns), *cb = slurp(ckpt, &nc);
    size_t used = ns;
    while (used > 0 && sb[used - 1] == 0) used--;
    ns = (used + 511) / 512 * 512 < ns ? (used + 511) / 512 * 512 : ns; /* 512-byte records */
    unsigned char *body = malloc(ns + nc + 1);
    if (!body) die("ssd seed");
    memcpy(body, sb, ns);
    memcpy(body + ns, cb, nc);
    const unsigned char len[4] = {ns & 255, ns >> 8 & 255, ns >> 16 & 255, ns >> 24 & 255};
    seed("ssd_load", "after_three_steps", len, 4, body, ns + nc);
    free(sb), free(cb), free(body);
}

/* Op cost caches: eight entries of the fuzz machine, and those beside
 * entries of another machine. */
static void op_costs_seeds(void)
{
    for (int k = 0; k < 2; k++) {
        const char *p = fuzz_file("seed_op_costs", NULL, 0);
        remove(p);
        hx_op_costs *c = NULL;
        if (hx__op_costs_open(p, FUZZ_OP_COSTS_MACHINE, &c)) die("op costs");
        for (int i = 0; i < 8; i++)
            if (hx__op_costs_put(c, fuzz_op_costs_sig(i), 1e-6 * (i + 1) * (i + 3), i % 2 ? "matmul" : "gelu"))
                die("op costs put");
        if (hx__op_costs_save(c)) die("op costs save");
        hx__op_costs_free(c);
        if (k) {
            if (hx__op_costs_open(p, 42, &c) || hx__op_costs_put(c, fuzz_op_costs_sig(0), 0.5, "softmax") ||
                hx__op_costs_save(c))
                die("op costs, another machine");
            hx__op_costs_free(c);
        }
        seed_file("op_costs", k ? "two_machines" : "eight_entries", NULL, 0, p);
    }
}

/* A trace the emu backend recorded (HX_MEMTRACE) over a session's
 * training step, behind a capacity of 16 x 4 KiB. */
static void memtrace_seeds(void)
{
    const char *p = fuzz_file("seed_trace", NULL, 0);
    setenv("HX_MEMTRACE", p, 1);
    fuzz_session_model m;
    fuzz_session_model_make(&m, NULL, 0);
    if (fuzz_session_model_step(&m)) die("trace step");
    fuzz_session_model_free(&m);
    unsetenv("HX_MEMTRACE");
    const unsigned char cap[2] = {0, 16};
    seed_file("memtrace", "emu_mlp_step", cap, 2, p);
    static const char small[] = "hxmemtrace 1\n# a comment\na 1 100 t\na 2 4096 p\nf 1\na 3 64\nf 3\nf 2\n";
    const unsigned char none[2] = {0, 0};
    seed("memtrace", "hand_written", none, 2, small, sizeof small - 1);
}

/* Rows for each schema of fuzz_reader, behind the two config bytes it reads. */
static void reader_seeds(void)
{
    size_t n;
    unsigned char *adult = slurp("data/adult/adult.data", &n);
    size_t cut = 0;
    for (int lines = 0; cut < n && lines < 40; cut++) lines += adult[cut] == '\n';
    const unsigned char adult_cfg[2] = {0, 0x17}; /* Adult, skip; batches of 8, 2 threads, 128 B blocks */
    seed("reader", "adult_40_lines", adult_cfg, 2, adult, cut);
    free(adult);
    hx_generator_config gc = hx_generator_config_default();
    gc.n_rows = 30;
    gc.batch_size = 30;
    gc.missing_rate = 0.1;
    const char *p = fuzz_file("seed_criteo", NULL, 0);
    if (hx_generator_write_tsv(&gc, p)) die("criteo tsv");
    const unsigned char criteo_cfg[2] = {1, 0x23};
    seed_file("reader", "criteo_30_rows", criteo_cfg, 2, p);
    static const char small[] = "yes,1.5,red,x,2,ff\nno.,-3,\"blue, dark\",y,NA,1a\n"
                                "yes,0,red,,7e-3,\nno,12,green,z,1,00ff\r\nno,4,red,q,0,abc\n";
    const unsigned char small_cfg[2] = {2 | 8 | 16, 0x02};
    seed("reader", "small_schema", small_cfg, 2, small, sizeof small - 1);
}

/* Programs for fuzz_graph's interpreter (see there): leaves, ops, loss,
 * optimizer, session, feeds. */
static void graph_seeds(void)
{
    static const unsigned char mlp[] = {
        3,                                       /* 4 leaves */
        0, 2, 3, 4, 0,                           /* input x [4,5] f32 */
        1, 2, 4, 2, 0,                           /* param w [5,3] */
        0, 1, 3, 5,                              /* input labels [4] i32 */
        1, 1, 2, 0,                              /* param b [3] */
        4,                                       /* 4 ops */
        0, 0, 1, 0,                              /* matmul(x, w) */
        6, 4, 3, 0,                              /* bias_add(., b) */
        7, 5, 0, 0xc0,                           /* relu, on the device */
        26, 6, 2, 0,                             /* cross_entropy(., labels) */
        1,                                       /* the loss as it is */
        1, 1, 8,                                 /* Adam, lr 8/64 */
        2 | 32, 255,                             /* emu, loss scaling, 64 KiB */
        5, 1};                                   /* feeds */
    static const unsigned char softmax_mse[] = {
        2,                                       /* 3 leaves */
        0, 2, 1, 3, 0,                           /* input x [2,4] */
        1, 2, 3, 3, 1,                           /* param w [4,4] (uniform) */
        0, 2, 1, 3, 0,                           /* input y [2,4] */
        3,
        0, 0, 1, 2,                              /* matmul(x, w^T) */
        14, 3, 0, 0,                             /* softmax */
        28, 4, 2, 0,                             /* mse(., y) */
        1,
        3, 0,                                    /* Adagrad */
        1, 7,                                    /* NONE, 2 threads */
        9, 3};
    static const unsigned char layernorm[] = {
        3,
        0, 3, 1, 2, 3, 4,                        /* input x [2,3,4] bf16 */
        1, 1, 3, 0,                              /* param gamma [4] */
        1, 1, 3, 0,                              /* param beta [4] */
        0, 2, 1, 3, 0,                           /* input r [2,4] */
        5,
        23, 0, 0, 0,                             /* cast x to f32 */
        16, 4, 1, 1,                             /* layernorm(., gamma, gamma) */
        17, 5, 0, 2, 0, 1, 7,                    /* reshape to [2,-1] */
        8, 6, 0, 0x80,                           /* gelu on the CPU */
        21, 7, 0, 1, 1,                          /* reduce_sum over axis 1 */
        0,                                       /* reduce to a scalar */
        4, 0,                                    /* FTRL */
        2 | 128, 40,                             /* emu, activations offloaded */
        1, 2};
    seed("graph", "mlp_cross_entropy", NULL, 0, mlp, sizeof mlp);
    seed("graph", "softmax_mse", NULL, 0, softmax_mse, sizeof softmax_mse);
    seed("graph", "layernorm_block", NULL, 0, layernorm, sizeof layernorm);
}

static void offload_seeds(void)
{
    static const char *specs[] = {
        "offload_param=cpu,chunk_size=4K,prefetch_depth=0",
        " offload_activations = CPU ,prefetch_depth=2",
        "auto_offload=true",
        "auto_offload=true,offload_cpu_size=64K,chunk_size=1K",
        "offload_param=none,enable_aio=false,enable_pinned_mem=false,host_mem_block_size=1M",
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        char name[16];
        snprintf(name, sizeof name, "spec_%zu", i);
        seed("offload_config", name, NULL, 0, specs[i], strlen(specs[i]));
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "zero")) { /* under mpirun */
        zero_seeds();
        return 0;
    }
    session_seeds();
    table_seeds();
    memtrace_seeds();
    reader_seeds();
    graph_seeds();
    offload_seeds();
    ssd_seeds();
    op_costs_seeds();
    return 0;
}
