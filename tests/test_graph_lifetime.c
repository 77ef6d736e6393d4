/* test_graph_lifetime: hx_graph_free while sessions still use the graph
 * defers the free to the last session's hx_session_free (as
 * sqlite3_close_v2 does). The session trains and fetches as before, its
 * graph's tensors stay valid with it, the graph's embedding table stays in
 * use until the session goes, and nothing leaks (LeakSanitizer in the
 * sanitizer build). */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S(...) ((const int64_t[]){__VA_ARGS__})

enum { BATCH = 4, ROWS = 8, DIM = 3, CLASSES = 2, STEPS = 3 };

typedef struct model {
    hx_embedding_table *table;
    hx_graph *g;
    hx_tensor *loss, *w;
} model;

/* ids -> table rows -> matmul w -> cross entropy; SGD on w, LazyAdam on
 * the table. Two models built alike train bitwise alike. */
static model build(void)
{
    model m = {0};
    hx_embedding_config c = hx_embedding_config_default();
    c.rows = ROWS;
    c.dim = DIM;
    c.seed = 7;
    c.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
    c.n_threads = 1;
    OK(hx_embedding_table_create(&c, &m.table));
    m.g = hx_graph_create();
    hx_tensor *ids = hx_graph_input(m.g, "ids", HX_DTYPE_I64, 1, S(BATCH));
    hx_tensor *labels = hx_graph_input(m.g, "labels", HX_DTYPE_I32, 1, S(BATCH));
    m.w = hx_graph_param(m.g, "w", HX_DTYPE_F32, 2, S(DIM, CLASSES), hx_init_xavier_uniform(1.0));
    hx_tensor *e = hx_embedding_lookup(m.g, m.table, ids);
    m.loss = hx_cross_entropy(m.g, hx_matmul(m.g, e, m.w, false, false), labels);
    OK(hx_graph_backward(m.g, m.loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    opt.lr = 0.1;
    OK(hx_graph_apply_optimizer(m.g, NULL, &opt));
    return m;
}

static hx_session *session(hx_graph *g)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.seed = 3;
    return test_session_with(g, &cfg, "session");
}

/* One training step; the loss through the tensor handle. */
static float train_step(hx_session *s, const model *m, int step)
{
    int64_t ids[BATCH];
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH; i++) {
        ids[i] = (step * 3 + i * 5) % ROWS;
        labels[i] = (step + i) % CLASSES;
    }
    hx_feed feeds[2] = {{"ids", NULL, ids, sizeof ids}, {"labels", NULL, labels, sizeof labels}};
    float loss = NAN;
    hx_fetch fetch = {NULL, m->loss, &loss, sizeof loss};
    OK(hx_session_run(s, feeds, 2, &fetch, 1, HX_RUN_TRAIN));
    return loss;
}

static void read_rows(hx_embedding_table *t, float *rows)
{
    int64_t ids[ROWS];
    for (int r = 0; r < ROWS; r++) ids[r] = r;
    OK(hx_embedding_table_read_rows(t, ids, ROWS, rows));
}

/* The graph is freed before its session; a twin built afterwards (on the
 * memory a premature free would hand back) is the reference. */
static void test_free_graph_before_session(void)
{
    model a = build();
    hx_session *sa = session(a.g);
    hx_graph_free(a.g);
    model b = build();
    hx_session *sb = session(b.g);
    for (int step = 0; step < STEPS; step++) {
        float la = train_step(sa, &a, step), lb = train_step(sb, &b, step);
        CHECK(memcmp(&la, &lb, sizeof la) == 0 && isfinite(la),
              "step %d: loss %.9g, the twin's %.9g", step, la, lb);
    }
    float wa[DIM * CLASSES], wb[DIM * CLASSES];
    OK(hx_session_read(sa, a.w, wa, sizeof wa));
    OK(hx_session_read(sb, b.w, wb, sizeof wb));
    CHECK(memcmp(wa, wb, sizeof wa) == 0, "w differs from the twin's after %d steps", STEPS);
    float ra[ROWS * DIM], rb[ROWS * DIM];
    read_rows(a.table, ra);
    read_rows(b.table, rb);
    CHECK(memcmp(ra, rb, sizeof ra) == 0, "table rows differ from the twin's after %d steps", STEPS);

    CHECK(hx_embedding_table_free(a.table) == HX_ERR_STATE,
          "the table of a freed graph whose session lives must stay in use: %s", hx_last_error());
    hx_session_free(sa); /* the last session: frees the graph, which lets go of the table */
    OK(hx_embedding_table_free(a.table));

    hx_session_free(sb);
    hx_graph_free(b.g);
    OK(hx_embedding_table_free(b.table));
}

/* Two sessions: the graph outlives the first one's free and goes with the second. */
static void test_last_session_frees_the_graph(void)
{
    model m = build();
    hx_session *s1 = session(m.g), *s2 = session(m.g);
    hx_graph_free(m.g);
    CHECK(isfinite(train_step(s1, &m, 0)), "first session's step");
    hx_session_free(s1);
    CHECK(isfinite(train_step(s2, &m, 0)), "second session's step after the first is freed");
    CHECK(hx_embedding_table_free(m.table) == HX_ERR_STATE,
          "the table must stay in use while the second session lives: %s", hx_last_error());
    hx_session_free(s2);
    OK(hx_embedding_table_free(m.table));
}

static const test_case cases[] = {
    {"free_graph_before_session", test_free_graph_before_session},
    {"last_session_frees_the_graph", test_last_session_frees_the_graph},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "graph_lifetime", cases, TEST_COUNT(cases));
}
