/* The fuzz targets' shared pieces (fuzz_common.h). */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "fuzz harness: %s: %s\n", what, hx_last_error());
    abort();
}

const char *fuzz_file(const char *what, const uint8_t *data, size_t size)
{
    static char path[8][512];
    static const char *names[8];
    int k = 0;
    while (k < 8 && names[k] && strcmp(names[k], what)) k++;
    if (k == 8) die("more than 8 file names");
    names[k] = what;
    const char *dir = getenv("TMPDIR");
    snprintf(path[k], sizeof path[k], "%s/hx_fuzz_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), what);
    FILE *f = fopen(path[k], "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) die(path[k]);
    return path[k];
}

void fuzz_session_model_make(fuzz_session_model *m, hx_comm *comm, int zero_stage)
{
    memset(m, 0, sizeof *m);
    m->g = hx_graph_create();
    int64_t xs[2] = {4, 6}, ls[1] = {4}, w1s[2] = {6, 5}, b1s[1] = {5}, w2s[2] = {5, 3};
    m->x = hx_graph_input(m->g, "x", HX_DTYPE_F32, 2, xs);
    m->labels = hx_graph_input(m->g, "labels", HX_DTYPE_I32, 1, ls);
    hx_tensor *w1 = hx_graph_param(m->g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1));
    hx_tensor *b1 = hx_graph_param(m->g, "b1", HX_DTYPE_F32, 1, b1s, hx_init_uniform(-0.1, 0.1));
    hx_tensor *w2 = hx_graph_param(m->g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_uniform(1));
    hx_tensor *h = hx_relu(m->g, hx_bias_add(m->g, hx_matmul(m->g, m->x, w1, false, false), b1));
    hx_tensor *logits = hx_matmul(m->g, h, w2, false, false);
    hx_tensor_set_target(logits, HX_TARGET_DEVICE);
    m->loss = hx_cross_entropy(m->g, logits, m->labels);
    if (!m->loss || hx_graph_backward(m->g, m->loss)) die("session model");
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    if (hx_graph_apply_optimizer(m->g, NULL, &oc)) die("session model optimizer");
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 1;
    c.loss_scale.enabled = true;
    c.comm = comm;
    c.zero_stage = zero_stage;
    if (zero_stage == 3) c.offload.offload_param = HX_OFFLOAD_CPU;
    if (hx_session_create(m->g, &c, &m->s)) die("session model session");
    for (int i = 0; i < 4 * 6; i++) m->xv[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 4; i++) m->lv[i] = i % 3;
}

hx_status fuzz_session_model_step(fuzz_session_model *m)
{
    hx_feed f[2] = {{NULL, m->x, m->xv, sizeof m->xv}, {NULL, m->labels, m->lv, sizeof m->lv}};
    float l;
    hx_fetch o = {NULL, m->loss, &l, sizeof l};
    return hx_session_run(m->s, f, 2, &o, 1, HX_RUN_TRAIN);
}

void fuzz_session_model_free(fuzz_session_model *m)
{
    hx_session_free(m->s);
    hx_graph_free(m->g);
}

hx_embedding_table *fuzz_table_make(int kind)
{
    static const char *names[FUZZ_TABLE_KINDS] = {"rows", "modulo", "dynamic"};
    hx_embedding_config c = hx_embedding_config_default();
    c.name = names[kind];
    c.rows = FUZZ_TABLE_ROWS;
    c.dim = FUZZ_TABLE_DIM;
    c.n_threads = 1;
    c.seed = 7;
    switch (kind) {
    case 0:
        c.dtype = HX_DTYPE_F16;
        c.lazy_init = true;
        c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
        break;
    case 1:
        c.ids = HX_EMBEDDING_IDS_MODULO;
        c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_FTRL);
        break;
    default:
        c.ids = HX_EMBEDDING_IDS_DYNAMIC;
        c.min_count = 2;
        c.evict_when_full = true;
        c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
        break;
    }
    hx_embedding_table *t = NULL;
    if (hx_embedding_table_create(&c, &t)) die("table");
    return t;
}

hx_embedding_table *fuzz_ssd_table_make(const char *ssd_path, hx_status *st)
{
    hx_embedding_config c = hx_embedding_config_default();
    c.name = "on_disk";
    c.rows = FUZZ_TABLE_ROWS;
    c.dim = FUZZ_TABLE_DIM;
    c.n_threads = 1;
    c.seed = 7;
    c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
    c.ssd_path = ssd_path;
    /* a slot: the row and its two moments, each padded to 64 bytes, and 48
     * bytes of the cache's bookkeeping (embedding/emb_ssd.c) */
    c.cache_bytes = FUZZ_SSD_CACHE_ROWS * (3 * 64 + 48);
    hx_embedding_table *t = NULL;
    *st = hx_embedding_table_create(&c, &t);
    return t;
}
