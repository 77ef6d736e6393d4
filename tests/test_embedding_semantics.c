/* test_embedding_semantics: what include/hetex.h promises about a table's
 * padding_id and its optimizer state.
 * - padding_id: a ROWS table's names a row in [-rows, rows), negative from
 *   the end as torch's padding_idx (forward, mean count and gradient skip
 *   it); outside that range the bag is refused with HX_ERR_INDEX naming the
 *   table, the id and the range; without the flag it is ignored; a MODULO
 *   table compares it with the raw ids (HX_ID_MISSING skips the id -1, not
 *   the row -1 maps to).
 * - hx_embedding_table_read_state: each optimizer's arrays (m and v,
 *   sum, a row's accumulator, accum and linear) as the update left them,
 *   start values for rows never updated (lazy or DYNAMIC rows too), and its
 *   errors; hx_embedding_stats.last_step. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <string.h>

enum { ROWS = 6, DIM = 2 };

static float row_value(int64_t r, int c) { return (float)(r + 1) + 0.25f * (float)c; }

static hx_embedding_table *table(const char *name, hx_embedding_ids ids, hx_embedding_optimizer_kind kind,
                                 bool lazy)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = name;
    ec.rows = ROWS;
    ec.dim = DIM;
    ec.ids = ids;
    ec.lazy_init = lazy;
    ec.optimizer = hx_embedding_optimizer_default(kind);
    ec.optimizer.initial_accumulator = 0.5;
    ec.n_threads = 1;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    if (t && ids != HX_EMBEDDING_IDS_DYNAMIC) {
        int64_t all[ROWS];
        float v[ROWS * DIM];
        for (int r = 0; r < ROWS; r++) {
            all[r] = r;
            for (int c = 0; c < DIM; c++) v[r * DIM + c] = row_value(r, c);
        }
        OK(hx_embedding_table_write_rows(t, all, ROWS, v));
    }
    return t;
}

/* One bag of ids {a, b, c} with `flags` and padding_id: its output. */
static bool bag_of(hx_embedding_table *t, hx_embedding_bag_mode mode, unsigned flags, int64_t pad,
                   const int64_t ids3[3], float out[DIM])
{
    hx_graph *g = hx_graph_create();
    int64_t n = 3, one = 1, zero = 0;
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *off = hx_graph_input(g, "off", HX_DTYPE_I64, 1, &one);
    hx_tensor *e = hx_embedding_bag(g, t, ids, off, NULL, mode, flags, pad);
    hx_session *s = e ? test_session(g, HX_ACCELERATOR_NONE, 1) : NULL;
    hx_feed f[2] = {{"ids", NULL, ids3, 3 * sizeof(int64_t)}, {"off", NULL, &zero, sizeof zero}};
    hx_fetch fe = {NULL, e, out, DIM * sizeof(float)};
    bool ok = s && hx_session_run(s, f, 2, &fe, 1, 0) == HX_OK;
    hx_session_free(s);
    hx_graph_free(g);
    return ok;
}

static void test_padding_rows(void)
{
    hx_embedding_table *t = table("pads", HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_NONE, false);
    if (!t) return;
    const int64_t ids[3] = {5, 1, 2};
    float out[DIM];
    /* -1 is the last row, as 5 is: skipped in the sum and in the mean's count */
    for (int64_t pad = -1; pad <= 5; pad += 6) {
        CHECK(bag_of(t, HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, pad, ids, out), "sum pad %lld: %s",
              (long long)pad, hx_last_error());
        for (int c = 0; c < DIM; c++)
            CHECK(out[c] == row_value(1, c) + row_value(2, c), "sum pad %lld col %d: %g", (long long)pad, c,
                  (double)out[c]);
        CHECK(bag_of(t, HX_EMBEDDING_BAG_MEAN, HX_EMBEDDING_BAG_PADDING, pad, ids, out), "mean: %s",
              hx_last_error());
        for (int c = 0; c < DIM; c++)
            CHECK(out[c] == (row_value(1, c) + row_value(2, c)) * 0.5f, "mean pad %lld col %d: %g",
                  (long long)pad, c, (double)out[c]);
    }
    /* -6 is row 0, which the bag does not hold: nothing skipped */
    CHECK(bag_of(t, HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, -6, ids, out) &&
              out[0] == row_value(5, 0) + row_value(1, 0) + row_value(2, 0),
          "pad -6: %g", (double)out[0]);
    /* without the flag the padding id is ignored, in range or not */
    CHECK(bag_of(t, HX_EMBEDDING_BAG_SUM, 0, 1000, ids, out) &&
              out[1] == row_value(5, 1) + row_value(1, 1) + row_value(2, 1),
          "no flag: %s", hx_last_error());
    /* outside [-rows, rows): refused when the bag is added, the graph unchanged */
    static const int64_t bad[3] = {6, -7, INT64_MIN};
    for (int k = 0; k < 3; k++) {
        hx_graph *g = hx_graph_create();
        int64_t n = 3, one = 1;
        hx_tensor *i = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
        hx_tensor *o = hx_graph_input(g, "off", HX_DTYPE_I64, 1, &one);
        int before = hx_graph_tensor_count(g);
        hx_tensor *e = hx_embedding_bag(g, t, i, o, NULL, HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, bad[k]);
        char id[32];
        snprintf(id, sizeof id, "padding_id %lld", (long long)bad[k]);
        CHECK(!e && strstr(hx_last_error(), "'pads'") && strstr(hx_last_error(), id) &&
                  strstr(hx_last_error(), "[-6, 6)"),
              "padding %lld: %s", (long long)bad[k], hx_last_error());
        CHECK(hx_graph_tensor_count(g) == before, "a refused bag added tensors");
        hx_graph_free(g);
    }
    OK(hx_embedding_table_free(t));
}

static void test_padding_modulo(void)
{
    hx_embedding_table *t = table("hashed", HX_EMBEDDING_IDS_MODULO, HX_EMBEDDING_OPTIMIZER_NONE, false);
    if (!t) return;
    /* rows: -1 -> (2^64 - 1) mod 6 = 3, 5 -> 5, 11 -> 5 */
    const int64_t ids[3] = {HX_ID_MISSING, 5, 11};
    float out[DIM];
    CHECK(bag_of(t, HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, HX_ID_MISSING, ids, out),
          "modulo: %s", hx_last_error());
    for (int c = 0; c < DIM; c++)
        CHECK(out[c] == row_value(5, c) + row_value(5, c), "modulo col %d: %g (the raw id -1 skipped, "
              "row 5 twice)", c, (double)out[c]);
    CHECK(bag_of(t, HX_EMBEDDING_BAG_SUM, 0, 0, ids, out) && out[0] == row_value(3, 0) + 2 * row_value(5, 0),
          "modulo without padding: %g", (double)out[0]);
    OK(hx_embedding_table_free(t));
}

/* Trains t for `steps` steps: rows {1, 2} (step 1) and {1, 4} (step 2)
 * looked up in a bag with padding_id -1 holding row 5 as well; the gradient
 * of the bag's sum is x. */
static void train(hx_embedding_table *t, int steps)
{
    hx_graph *g = hx_graph_create();
    int64_t n = 3, one = 1, xs[2] = {1, DIM};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *off = hx_graph_input(g, "off", HX_DTYPE_I64, 1, &one);
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *e = hx_embedding_bag(g, t, ids, off, NULL, HX_EMBEDDING_BAG_SUM, HX_EMBEDDING_BAG_PADDING, -1);
    OK(hx_graph_backward(g, hx_reduce_sum(g, hx_mul(g, e, x), 0, NULL, false)));
    hx_optimizer_config unused = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(g, NULL, &unused));
    hx_session *s = test_session(g, HX_ACCELERATOR_NONE, 1);
    for (int k = 1; k <= steps && s; k++) {
        int64_t iv[3] = {1, k == 1 ? 2 : 4, 5}, zero = 0;
        float xv[DIM] = {0.5f, -0.25f};
        hx_feed f[3] = {{"ids", NULL, iv, sizeof iv}, {"off", NULL, &zero, sizeof zero}, {"x", NULL, xv, sizeof xv}};
        OK(hx_session_run(s, f, 3, NULL, 0, HX_RUN_TRAIN));
    }
    hx_session_free(s);
    hx_graph_free(g);
}

static void test_state(void)
{
    const int64_t all[ROWS] = {0, 1, 2, 3, 4, 5};
    float st[ROWS * DIM], st2[ROWS * DIM];
    /* LazyAdam: m = 0.1 g after one step of g, 0.19 g after two; v = 0.001 g^2 after one */
    hx_embedding_table *t = table("lazy", HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_LAZY_ADAM, true);
    if (!t) return;
    train(t, 2);
    OK(hx_embedding_table_read_state(t, 0, all, ROWS, st));
    OK(hx_embedding_table_read_state(t, 1, all, ROWS, st2));
    CHECK(fabsf(st[1 * DIM] - 0.095f) < 1e-8f, "m of row 1 after two steps: %.9g", (double)st[1 * DIM]);
    CHECK(fabsf(st[2 * DIM] - 0.05f) < 1e-9f && fabsf(st[4 * DIM] - 0.05f) < 1e-9f &&
              fabsf(st[2 * DIM + 1] + 0.025f) < 1e-9f,
          "m of rows 2 and 4 after one step each: %.9g %.9g", (double)st[2 * DIM], (double)st[4 * DIM]);
    CHECK(st[0] == 0 && st[3 * DIM] == 0 && st[5 * DIM] == 0 && st2[5 * DIM + 1] == 0,
          "untouched and padding rows (0, 3, 5) keep m = v = 0");
    CHECK(fabsf(st2[2 * DIM] - 0.001f * 0.25f) < 1e-9f, "v of row 2: %.9g", (double)st2[2 * DIM]);
    hx_embedding_stats es;
    OK(hx_embedding_table_stats(t, &es));
    CHECK(es.updates == 2 && es.last_step == 2, "stats: %lld updates, last step %lld", (long long)es.updates,
          (long long)es.last_step);
    /* errors: a third array, an id out of range (out untouched), NULLs */
    CHECK(hx_embedding_table_read_state(t, 2, all, ROWS, st) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "0: m, 1: v") && strstr(hx_last_error(), "'lazy'"),
          "k = 2: %s", hx_last_error());
    CHECK(hx_embedding_table_read_state(t, -1, all, ROWS, st) == HX_ERR_INVALID_ARGUMENT, "k = -1");
    int64_t badids[2] = {1, 6};
    float keep[2 * DIM] = {7, 7, 7, 7};
    CHECK(hx_embedding_table_read_state(t, 0, badids, 2, keep) == HX_ERR_INDEX && strstr(hx_last_error(), "id 6") &&
              keep[0] == 7 && keep[3] == 7,
          "id 6: %s", hx_last_error());
    CHECK(hx_embedding_table_read_state(NULL, 0, all, 1, st) == HX_ERR_INVALID_ARGUMENT &&
              hx_embedding_table_read_state(t, 0, NULL, 1, st) == HX_ERR_INVALID_ARGUMENT &&
              hx_embedding_table_read_state(t, 0, all, 1, NULL) == HX_ERR_INVALID_ARGUMENT &&
              hx_embedding_table_read_state(t, 0, all, -1, st) == HX_ERR_INVALID_ARGUMENT &&
              hx_embedding_table_read_state(t, 0, NULL, 0, NULL) == HX_OK,
          "NULL arguments");
    OK(hx_embedding_table_free(t));

    /* FTRL: accum starts at initial_accumulator, grows by g^2; linear */
    t = table("ftrl", HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_FTRL, false);
    if (t) {
        train(t, 1);
        OK(hx_embedding_table_read_state(t, 0, all, ROWS, st));
        OK(hx_embedding_table_read_state(t, 1, all, ROWS, st2));
        CHECK(st[1 * DIM] == 0.75f && st[1 * DIM + 1] == 0.5625f && st[0] == 0.5f && st[5 * DIM] == 0.5f,
              "accum: %.9g %.9g (row 0, 5 start: %.9g %.9g)", (double)st[DIM], (double)st[DIM + 1], (double)st[0],
              (double)st[5 * DIM]);
        CHECK(st2[1 * DIM] != 0 && st2[0] == 0 && st2[5 * DIM] == 0, "linear: %.9g", (double)st2[DIM]);
        OK(hx_embedding_table_free(t));
    }
    /* Row-wise Adagrad: one value per row, the mean of g^2 added */
    t = table("rowwise", HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD, false);
    if (t) {
        train(t, 1);
        float acc[ROWS + 1];
        acc[ROWS] = 9;
        OK(hx_embedding_table_read_state(t, 0, all, ROWS, acc));
        CHECK(acc[1] == 0.5f + (0.25f + 0.0625f) / 2 && acc[0] == 0.5f && acc[ROWS] == 9,
              "row accumulators: %.9g %.9g (one float per row)", (double)acc[1], (double)acc[0]);
        OK(hx_embedding_table_free(t));
    }
    /* Adagrad on a lazy table: a row never written reads the start value */
    t = table("ada", HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_ADAGRAD, true);
    if (t) {
        OK(hx_embedding_table_read_state(t, 0, all, ROWS, st));
        bool start = true;
        for (int i = 0; i < ROWS * DIM; i++) start &= st[i] == 0.5f;
        CHECK(start, "lazy Adagrad state before any update: %.9g", (double)st[0]);
        OK(hx_embedding_table_free(t));
    }
    /* A table without an optimizer has no state; a DYNAMIC id without a row reads the start value */
    t = table("frozen", HX_EMBEDDING_IDS_ROWS, HX_EMBEDDING_OPTIMIZER_NONE, false);
    if (t) {
        CHECK(hx_embedding_table_read_state(t, 0, all, 1, st) == HX_ERR_INVALID_ARGUMENT &&
                  strstr(hx_last_error(), "keeps 0"),
              "NONE: %s", hx_last_error());
        OK(hx_embedding_table_free(t));
    }
    t = table("dyn", HX_EMBEDDING_IDS_DYNAMIC, HX_EMBEDDING_OPTIMIZER_ADAGRAD, false);
    if (t) {
        int64_t key = 123456789;
        float s2[DIM] = {0};
        OK(hx_embedding_table_read_state(t, 0, &key, 1, s2));
        CHECK(s2[0] == 0.5f && s2[1] == 0.5f, "DYNAMIC id without a row: %.9g", (double)s2[0]);
        OK(hx_embedding_table_free(t));
    }
}

static const test_case cases[] = {
    {"padding_rows", test_padding_rows},
    {"padding_modulo", test_padding_modulo},
    {"state", test_state},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "embedding_semantics", cases, TEST_COUNT(cases));
}
