/* test_numerics: hetex's optimizers and bag modes held to the frameworks'
 * documented formulas, through the public API (docs/numerics.md says what
 * each computes, in which f32 order, and where the frameworks differ).
 *
 * Optimizers: a 4-element parameter (loss = sum(w * x), so its gradient is
 * the fed x) and a 6 x 3 table (two rows looked up per step, loss =
 * sum(rows * x)) trained for a few steps from set values; the parameter and
 * its state (hx_session_read), the table's rows and state
 * (hx_embedding_table_read_state) must be within the stated ulp bounds
 * (ref_ulps, tests/util/optim_ref.h) of golden values. The golden values are the
 * frameworks' documented algorithms (torch.optim.SGD, Adam, AdamW, Adagrad;
 * TensorFlow ApplyFtrlV2; TF Addons LazyAdam; FBGEMM row-wise Adagrad)
 * evaluated in float64 from the same f32 inputs and rounded to f32, as
 * printed by tests/golden/optimizers.py (python3, no packages).
 *
 * Bags: SUM with per-sample weights, MEAN and MAX are bitwise the f32 order
 * documented; MEAN multiplies by f32(1 / count) where torch.nn.EmbeddingBag
 * divides by the count: within 1 ulp of it, and on this data not equal. */
#include "hetex.h"
#include "optim_ref.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- golden values: python3 tests/golden/optimizers.py ------------------------------------ */

static const float GOLD_SGD_P[4] = {0.391242772f, -1.19757438f, 1.69087052f, -0.589965641f};
static const float GOLD_SGD_MOMENTUM[4] = {0.282037377f, 0.387564152f, 1.52081549f, 1.44473422f};
static const float GOLD_NESTEROV_P[4] = {0.365335613f, -1.22130346f, 1.60736203f, -0.669745564f};
static const float GOLD_NESTEROV_MOMENTUM[4] = {0.311962724f, 0.459440678f, 1.61346078f,
    1.55875838f};
static const float GOLD_ADAM_P[4] = {0.471813172f, -1.23433328f, 1.96328211f, -0.403854311f};
static const float GOLD_ADAM_EXP_AVG[4] = {0.0314056091f, 0.045786012f, 0.161976442f, 0.15620406f};
static const float GOLD_ADAM_EXP_AVG_SQ[4] = {0.00112802768f, 0.00144299923f, 0.00195114105f,
    0.00193520251f};
static const float GOLD_ADAMW_P[4] = {0.479661584f, -1.22917712f, 1.95401883f, -0.402130723f};
static const float GOLD_ADAMW_EXP_AVG[4] = {0.0294250008f, 0.0508587509f, 0.153860003f,
    0.157793745f};
static const float GOLD_ADAMW_EXP_AVG_SQ[4] = {0.00112293928f, 0.00145134539f, 0.00186981901f,
    0.00194959668f};
static const float GOLD_ADAGRAD_P[4] = {0.426122397f, -1.23371232f, 1.82323003f, -0.541349411f};
static const float GOLD_ADAGRAD_SUM[4] = {1.23723948f, 1.54119802f, 2.13800025f, 2.02163768f};
static const float GOLD_FTRL_P[4] = {-0.0346385948f, -0.439696014f, 1.30755556f, -0.29063344f};
static const float GOLD_FTRL_ACCUM[4] = {1.22500002f, 1.55312502f, 1.97500002f, 2.0531249f};
static const float GOLD_FTRL_LINEAR[4] = {0.768450797f, 10.9691677f, -36.7785339f, 8.33562946f};
static const float GOLD_LAZY_ADAM_ROWS[18] = {0.256388128f, 0.306111872f, 0.368611872f, -0.5f,
    -0.44749999f, -0.36500001f, 0.742558658f, 0.819941342f, 0.875f, -1.0f, -0.9375f, -0.875f,
    1.26408303f, 1.28871799f, 1.3588444f, -1.5f, -1.4375f, -1.375f};
static const float GOLD_LAZY_ADAM_M[18] = {-0.0250000004f, 0.0250000004f, 0.075000003f, 0.0f,
    0.0500000007f, -0.075000003f, 0.075000003f, -0.0500000007f, 0.0f, 0.0f, 0.0f, 0.0f,
    -0.0591249987f, 0.0763750002f, 0.0543750003f, 0.0f, 0.0f, 0.0f};
static const float GOLD_LAZY_ADAM_V[18] = {6.2500003e-05f, 6.2500003e-05f, 0.000562499976f, 0.0f,
    0.000250000012f, 0.000562499976f, 0.000562499976f, 0.000250000012f, 0.0f, 0.0f, 0.0f, 0.0f,
    0.00067145325f, 0.000796078122f, 0.000670953537f, 0.0f, 0.0f, 0.0f};
static const float GOLD_TABLE_ADAGRAD_ROWS[18] = {0.310801327f, 0.251698673f, 0.284662485f, -0.5f,
    -0.522015452f, -0.282855719f, 0.658768058f, 0.896178663f, 0.875f, -1.0f, -0.9375f, -0.875f,
    1.33605909f, 1.19639325f, 1.29065621f, -1.5f, -1.4375f, -1.375f};
static const float GOLD_TABLE_ADAGRAD_SUM[18] = {0.162499994f, 0.162499994f, 0.662500024f,
    0.100000001f, 0.349999994f, 0.662500024f, 0.662500024f, 0.349999994f, 0.100000001f,
    0.100000001f, 0.100000001f, 0.100000001f, 0.771875024f, 0.896875024f, 0.771875024f,
    0.100000001f, 0.100000001f, 0.100000001f};
static const float GOLD_ROW_ADAGRAD_ROWS[18] = {0.293574452f, 0.268925548f, 0.244276598f, -0.5f,
    -0.519607067f, -0.25183937f, 0.626839399f, 0.894607067f, 0.875f, -1.0f, -0.9375f, -0.875f,
    1.34267449f, 1.19270146f, 1.2629894f, -1.5f, -1.4375f, -1.375f};
static const float GOLD_ROW_ADAGRAD_ACC[6] = {0.329166681f, 0.370833337f, 0.370833337f,
    0.100000001f, 0.813541651f, 0.100000001f};
static const float GOLD_TABLE_FTRL_ROWS[18] = {0.0842494294f, 0.0357458293f, 0.182718709f,
    0.000630461844f, -0.245035663f, -0.182718709f, 0.411514372f, 0.418978781f, -0.00122151978f,
    -1.0f, -0.9375f, -0.875f, 0.484613836f, 0.0312196743f, 0.708948851f, -1.5f, -1.4375f, -1.375f};
static const float GOLD_TABLE_FTRL_ACCUM[18] = {0.162499994f, 0.162499994f, 0.662500024f,
    0.100000001f, 0.349999994f, 0.662500024f, 0.662500024f, 0.349999994f, 0.100000001f,
    0.100000001f, 0.100000001f, 0.100000001f, 0.771875024f, 0.896875024f, 0.771875024f,
    0.100000001f, 0.100000001f, 0.100000001f};
static const float GOLD_TABLE_FTRL_LINEAR[18] = {-0.681925595f, -0.289907008f, -2.97909951f,
    -0.00499999989f, 2.90520191f, 2.97909951f, -6.70819902f, -4.96680355f, 0.00875000004f, 0.0f,
    0.0f, 0.0f, -8.52597904f, -0.592946768f, -12.4723206f, 0.0f, 0.0f, 0.0f};

/* Gradient of element (position) j, column c at step k: exact in f32. */
static float grad_at(int k, int j, int c)
{
    return (float)((((3 * k + 5 * j + 2 * c) % 7) - 3) * 0.25 + 0.125 * j);
}

static const float P0[4] = {0.5f, -1.25f, 2.0f, -0.375f};

/* got against golden f32 values, in ulps (ref_ulps), within bound. */
static void gold_check(const char *what, const float *got, const float *gold, int n, double bound)
{
    double want[32];
    for (int i = 0; i < n; i++) want[i] = gold[i];
    int64_t at;
    double u = ref_ulps(got, want, n, &at);
    CHECK(u <= bound, "%s: %.1f ulps off the golden value at %lld (%.9g, golden %.9g); bound %.0f", what,
          u, (long long)at, (double)got[at], (double)gold[at], bound);
    fprintf(stderr, "test_numerics: %-25s %5.1f ulps from the golden values (bound %.0f)\n", what, u, bound);
}

static hx_session_config cpu_config(void)
{
    hx_session_config sc = hx_session_config_default();
    sc.accelerator = HX_ACCELERATOR_NONE;
    sc.n_threads = 1;
    return sc;
}

/* ---- dense optimizers ------------------------------------------------------------------------ */

typedef struct dense_case {
    const char *name;
    hx_optimizer_config cfg;
    const char *state[2];     /* "w/<state>" */
    const float *gold[3];     /* param, state... */
    double bound;
} dense_case;

static void dense_run(const dense_case *c)
{
    hx_graph *g = hx_graph_create();
    int64_t n = 4;
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, &n);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 1, &n, hx_init_zeros());
    hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, w, x), 0, NULL, false);
    OK(hx_graph_backward(g, loss));
    OK(hx_graph_apply_optimizer(g, NULL, &c->cfg));
    hx_session *s = NULL;
    hx_session_config sc = cpu_config();
    OK(hx_session_create(g, &sc, &s));
    if (!s) {
        hx_graph_free(g);
        return;
    }
    OK(hx_session_write(s, w, P0, sizeof P0));
    for (int k = 1; k <= 5; k++) {
        float xv[4];
        for (int j = 0; j < 4; j++) xv[j] = grad_at(k, j, 0);
        hx_feed f = {"x", NULL, xv, sizeof xv};
        OK(hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN));
    }
    float got[4];
    char what[64];
    OK(hx_session_read(s, w, got, sizeof got));
    snprintf(what, sizeof what, "%s param", c->name);
    gold_check(what, got, c->gold[0], 4, c->bound);
    for (int k = 0; k < 2 && c->state[k]; k++) {
        char name[64];
        snprintf(name, sizeof name, "w/%s", c->state[k]);
        OK(hx_session_read(s, hx_graph_find(g, name), got, sizeof got));
        snprintf(what, sizeof what, "%s %s", c->name, c->state[k]);
        gold_check(what, got, c->gold[k + 1], 4, c->bound);
    }
    hx_session_free(s);
    hx_graph_free(g);
}

static void test_dense(void)
{
    dense_case cases[6];
    for (int k = 0; k < 6; k++) memset(&cases[k], 0, sizeof cases[k]);
    cases[0] = (dense_case){"sgd", hx_optimizer_config_default(HX_OPTIMIZER_SGD), {"momentum"},
                            {GOLD_SGD_P, GOLD_SGD_MOMENTUM}, 0};
    cases[0].cfg.lr = 0.05, cases[0].cfg.momentum = 0.9, cases[0].cfg.dampening = 0.1;
    cases[0].cfg.weight_decay = 0.01;
    cases[1] = cases[0];
    cases[1].name = "sgd-nesterov";
    cases[1].cfg.dampening = 0, cases[1].cfg.nesterov = true;
    cases[1].gold[0] = GOLD_NESTEROV_P, cases[1].gold[1] = GOLD_NESTEROV_MOMENTUM;
    cases[2] = (dense_case){"adam", hx_optimizer_config_default(HX_OPTIMIZER_ADAM),
                            {"exp_avg", "exp_avg_sq"}, {GOLD_ADAM_P, GOLD_ADAM_EXP_AVG, GOLD_ADAM_EXP_AVG_SQ}, 0};
    cases[2].cfg.lr = 0.01, cases[2].cfg.weight_decay = 0.01;
    cases[3] = (dense_case){"adamw", hx_optimizer_config_default(HX_OPTIMIZER_ADAMW),
                            {"exp_avg", "exp_avg_sq"}, {GOLD_ADAMW_P, GOLD_ADAMW_EXP_AVG, GOLD_ADAMW_EXP_AVG_SQ}, 0};
    cases[3].cfg.lr = 0.01, cases[3].cfg.weight_decay = 0.1;
    cases[4] = (dense_case){"adagrad", hx_optimizer_config_default(HX_OPTIMIZER_ADAGRAD), {"sum"},
                            {GOLD_ADAGRAD_P, GOLD_ADAGRAD_SUM}, 0};
    cases[4].cfg.lr = 0.1, cases[4].cfg.lr_decay = 0.01, cases[4].cfg.weight_decay = 0.02;
    cases[4].cfg.initial_accumulator = 0.1;
    cases[5] = (dense_case){"ftrl", hx_optimizer_config_default(HX_OPTIMIZER_FTRL), {"accum", "linear"},
                            {GOLD_FTRL_P, GOLD_FTRL_ACCUM, GOLD_FTRL_LINEAR}, 0};
    cases[5].cfg.lr = 0.05, cases[5].cfg.l1 = 0.001, cases[5].cfg.l2 = 0.01;
    cases[5].cfg.l2_shrinkage = 0.005;
    /* measured: sgd 1/1, sgd-nesterov 2/2, adam 1/2/4, adamw 1/1/2, adagrad 0/1, ftrl 2/0/3 */
    static const double bounds[6] = {4, 4, 8, 8, 4, 8};
    for (int k = 0; k < 6; k++) {
        cases[k].bound = bounds[k];
        dense_run(&cases[k]);
    }
}

/* ---- tables ------------------------------------------------------------------------------------ */

enum { ROWS = 6, DIM = 3, TSTEPS = 3 };

static hx_embedding_table *table_make(const hx_embedding_optimizer *o)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "numerics";
    ec.rows = ROWS;
    ec.dim = DIM;
    ec.optimizer = *o;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    if (!t) return NULL;
    int64_t ids[ROWS];
    float rows[ROWS * DIM];
    for (int r = 0; r < ROWS; r++) {
        ids[r] = r;
        for (int c = 0; c < DIM; c++) rows[r * DIM + c] = (float)(0.25 * (r + 1) * (r % 2 ? -1 : 1) + 0.0625 * c);
    }
    OK(hx_embedding_table_write_rows(t, ids, ROWS, rows));
    return t;
}

/* TSTEPS training steps looking up rows {k % 3, 4} at step k. */
static void table_train(hx_embedding_table *t)
{
    hx_graph *g = hx_graph_create();
    int64_t n = 2, xs[2] = {2, DIM};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, hx_embedding_lookup(g, t, ids), x), 0, NULL, false);
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config unused = hx_optimizer_config_default(HX_OPTIMIZER_SGD); /* no dense parameter */
    OK(hx_graph_apply_optimizer(g, NULL, &unused));
    hx_session *s = NULL;
    hx_session_config sc = cpu_config();
    OK(hx_session_create(g, &sc, &s));
    for (int k = 1; k <= TSTEPS && s; k++) {
        int64_t iv[2] = {k % 3, 4};
        float xv[2 * DIM];
        for (int i = 0; i < 2; i++)
            for (int c = 0; c < DIM; c++) xv[i * DIM + c] = grad_at(k, i, c);
        hx_feed f[2] = {{"ids", NULL, iv, sizeof iv}, {"x", NULL, xv, sizeof xv}};
        OK(hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN));
    }
    hx_session_free(s);
    hx_graph_free(g);
}

static void test_tables(void)
{
    hx_embedding_optimizer o[4];
    o[0] = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_LAZY_ADAM);
    o[0].lr = 0.01;
    o[1] = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    o[1].lr = 0.1, o[1].lr_decay = 0.01, o[1].initial_accumulator = 0.1;
    o[2] = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD);
    o[2].lr = 0.1, o[2].initial_accumulator = 0.1, o[2].eps = 1e-10;
    o[3] = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_FTRL);
    o[3].lr = 0.05, o[3].l1 = 0.001, o[3].l2 = 0.01, o[3].l2_shrinkage = 0.005;
    static const char *names[4] = {"lazy-adam", "adagrad", "row-wise adagrad", "ftrl"};
    static const float *gold[4][3] = {{GOLD_LAZY_ADAM_ROWS, GOLD_LAZY_ADAM_M, GOLD_LAZY_ADAM_V},
                                      {GOLD_TABLE_ADAGRAD_ROWS, GOLD_TABLE_ADAGRAD_SUM},
                                      {GOLD_ROW_ADAGRAD_ROWS, GOLD_ROW_ADAGRAD_ACC},
                                      {GOLD_TABLE_FTRL_ROWS, GOLD_TABLE_FTRL_ACCUM, GOLD_TABLE_FTRL_LINEAR}};
    /* measured (rows / state): lazy-adam 0/1/1, adagrad 1/0, row-wise 1/1,
     * ftrl 40/0/24 (its shrinkage moves elements whose gradient is 0 to near
     * zero, where the floor of ref_ulps measures them) */
    static const double bounds[4] = {4, 4, 4, 64};
    for (int k = 0; k < 4; k++) {
        hx_embedding_table *t = table_make(&o[k]);
        if (!t) continue;
        table_train(t);
        int64_t ids[ROWS] = {0, 1, 2, 3, 4, 5};
        float rows[ROWS * DIM];
        char what[64];
        OK(hx_embedding_table_read_rows(t, ids, ROWS, rows));
        snprintf(what, sizeof what, "%s rows", names[k]);
        gold_check(what, rows, gold[k][0], ROWS * DIM, bounds[k]);
        for (int a = 0; a < 2 && gold[k][a + 1]; a++) { /* the state through hx_embedding_table_read_state */
            OK(hx_embedding_table_read_state(t, a, ids, ROWS, rows));
            snprintf(what, sizeof what, "%s state %d", names[k], a);
            gold_check(what, rows, gold[k][a + 1], k == 2 ? ROWS : ROWS * DIM, bounds[k]);
        }
        OK(hx_embedding_table_free(t));
    }
}

/* ---- bags -------------------------------------------------------------------------------------- */

/* Bags {0, 1, 3} in SUM (weights 0.75, -1.5, 0.3), MEAN and MAX over the
 * table of table_make, against the order of docs/numerics.md computed here. */
static void test_bags(void)
{
    hx_embedding_optimizer none = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_NONE);
    hx_embedding_table *t = table_make(&none);
    if (!t) return;
    int64_t idv[3] = {0, 1, 3}, offv[1] = {0}, n = 3, one = 1;
    float wv[3] = {0.75f, -1.5f, 0.3f}, rows[3 * DIM];
    OK(hx_embedding_table_read_rows(t, idv, 3, rows));
    hx_graph *g = hx_graph_create();
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, &n);
    hx_tensor *offsets = hx_graph_input(g, "offsets", HX_DTYPE_I64, 1, &one);
    hx_tensor *w = hx_graph_input(g, "w", HX_DTYPE_F32, 1, &n);
    hx_tensor *out[3] = {
        hx_embedding_bag(g, t, ids, offsets, w, HX_EMBEDDING_BAG_SUM, 0, 0),
        hx_embedding_bag(g, t, ids, offsets, NULL, HX_EMBEDDING_BAG_MEAN, 0, 0),
        hx_embedding_bag(g, t, ids, offsets, NULL, HX_EMBEDDING_BAG_MAX, 0, 0)};
    hx_session *s = NULL;
    hx_session_config sc = cpu_config();
    OK(hx_session_create(g, &sc, &s));
    float got[3][DIM];
    hx_feed f[3] = {{"ids", NULL, idv, sizeof idv}, {"offsets", NULL, offv, sizeof offv},
                    {"w", NULL, wv, sizeof wv}};
    hx_fetch fe[3] = {{NULL, out[0], got[0], sizeof got[0]}, {NULL, out[1], got[1], sizeof got[1]},
                      {NULL, out[2], got[2], sizeof got[2]}};
    if (s) OK(hx_session_run(s, f, 3, fe, 3, 0));
    int mean_differs = 0;
    for (int c = 0; c < DIM && s; c++) {
        /* volatile: each product and sum rounded to f32, nothing fused */
        volatile float wsum = 0.0f, sum = 0.0f, mx = rows[c];
        for (int i = 0; i < 3; i++) {
            volatile float prod = wv[i] * rows[i * DIM + c];
            wsum = wsum + prod;
            sum = sum + rows[i * DIM + c];
            if (rows[i * DIM + c] > mx) mx = rows[i * DIM + c];
        }
        float mean = sum * (1.0f / 3.0f), torch_mean = sum / 3.0f;
        CHECK(got[0][c] == wsum, "weighted sum column %d: %.9g, the documented order gives %.9g", c,
              (double)got[0][c], (double)wsum);
        CHECK(got[1][c] == mean, "mean column %d: %.9g, sum * f32(1/3) is %.9g", c, (double)got[1][c],
              (double)mean);
        CHECK(fabsf(got[1][c] - torch_mean) <= nextafterf(fabsf(torch_mean), INFINITY) - fabsf(torch_mean),
              "mean column %d: %.9g is more than 1 ulp from sum / 3 = %.9g", c, (double)got[1][c],
              (double)torch_mean);
        mean_differs |= got[1][c] != torch_mean;
        CHECK(got[2][c] == mx, "max column %d: %.9g, want %.9g", c, (double)got[2][c], (double)mx);
    }
    CHECK(mean_differs, "the mean of bag {0, 1, 3} equals sum / 3 in every column: the data no longer "
          "shows the multiply-by-reciprocal difference");
    hx_session_free(s);
    hx_graph_free(g);
    OK(hx_embedding_table_free(t));
}

static const test_case cases[] = {
    {"dense", test_dense},
    {"tables", test_tables},
    {"bags", test_bags},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "numerics", cases, TEST_COUNT(cases));
}
