/* The device cache's CUDA kernels (kernels/gpu/emb_cache.cu) against the
 * host table's own code, bitwise. The cache's slots are a host local table
 * (hx_emb_local) of a few dozen rows, copied to the device byte for byte;
 * queries carry slot ids as the cache maps them (-1 the padding id, -2 an
 * id outside the table), with duplicates, padding, empty bags, weights,
 * every mode; f32, f16 and bf16 storage; dims 1, 7, 32, 33 and 70. Each
 * step runs the host's lookup (hx_emb_local_lookup) and fused backward +
 * update (hx_emb_local_backward_update) on the host table and the kernels
 * (bag, gradient sums over the host's grouping, the optimizer step) on the
 * device copy, for the four sparse optimizers from random optimizer state,
 * three steps in a row; outputs, argmax, params and state must be the same
 * bytes after every step. */
#include "gpu_testutil.h"
#include "embedding/embedding.h"

_Static_assert(HX_GK_EMB_ROWS == HX_EMB_ROWS && HX_GK_EMB_SUM == HX_EMB_SUM &&
                   HX_GK_EMB_MEAN == HX_EMB_MEAN && HX_GK_EMB_MAX == HX_EMB_MAX,
               "the kernels' modes are embedding.h's");

static hx_gk_ctx C;
static test_rng R;

enum { SLOTS = 40 };

static const hx_dtype DTS[3] = {HX_DTYPE_F32, HX_DTYPE_F16, HX_DTYPE_BF16};
static const int64_t DIMS[5] = {1, 7, 32, 33, 70};

static void run_ok(const char *what, hx_gk_status st)
{
    CHECK(st == HX_GK_OK, "%s: %s", what, hx_gk_strerror(st));
}

static void *up(const void *x, size_t bytes) { return gt_upload_raw(x, bytes); }

static void down(void *h, const void *d, size_t bytes)
{
    GT_CUDA(cudaStreamSynchronize(C.stream));
    GT_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* A query over the slots: n positions in nbags bags (some empty), slot ids
 * with duplicates, padding (-1, when has_padding) and ids outside the table
 * (-2). ids and offsets are the caller's (n and nbags entries). */
static hx_emb_query make_query(hx_emb_mode mode, int weighted, int has_padding, int64_t *ids,
                               int64_t n, int64_t *offsets, int64_t nbags, float *weights)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t u = test_rng_u64(&R) % 20;
        ids[i] = u == 0 ? -2 : u == 1 && has_padding ? -1 : u < 8 ? (int64_t)(u % 3) /* repeats */
                                                                   : (int64_t)(test_rng_u64(&R) % SLOTS);
    }
    hx_emb_query q;
    if (mode == HX_EMB_ROWS) {
        q = hx_emb_query_rows(ids, n);
    } else {
        offsets[0] = 0;
        for (int64_t b = 1; b < nbags; b++) {
            int64_t o = offsets[b - 1] + (int64_t)(test_rng_u64(&R) % 5); /* 0..4 ids a bag */
            offsets[b] = o < n ? o : n;
        }
        q = hx_emb_query_bags(ids, n, offsets, nbags, mode);
    }
    q.has_padding = has_padding;
    q.padding_id = -1;
    if (weighted) {
        test_fill_uniform(&R, weights, n, -1, 1);
        q.weights = weights;
    }
    return q;
}

/* Bag bounds of q (nbags + 1 values) on the device. */
static int64_t *bounds_of(const hx_emb_query *q, int64_t nbags)
{
    int64_t *b = malloc((size_t)(nbags + 1) * sizeof *b);
    for (int64_t i = 0; i <= nbags; i++) b[i] = hx_emb_bag_bound(q, i);
    int64_t *d = up(b, (size_t)(nbags + 1) * sizeof *b);
    free(b);
    return d;
}

static hx_emb_local *make_table(hx_dtype dt, int64_t dim, hx_emb_optim_kind kind, int wd)
{
    hx_emb_table_config cfg = hx_emb_table_config_default(SLOTS, dim);
    cfg.dtype = dt;
    cfg.init = (hx_emb_init){HX_EMB_INIT_UNIFORM, -0.5, 0.5, test_rng_u64(&R)};
    cfg.huge_pages = 0;
    cfg.oob = HX_EMB_OOB_ZERO;
    cfg.optim = hx_emb_optim_default(kind);
    if (kind != HX_EMB_OPTIM_NONE) {
        cfg.optim.lr = 0.05;
        cfg.optim.weight_decay = wd ? 0.01 : 0;
        cfg.optim.lr_decay = wd ? 0.1 : 0;
        cfg.optim.l1 = wd ? 0.001 : 0;
        cfg.optim.l2 = wd ? 0.002 : 0;
        cfg.optim.l2_shrinkage = wd ? 0.003 : 0;
    }
    hx_emb_table *t;
    hx_emb_err err;
    if (hx_emb_local_create(&cfg, &t, &err)) {
        fprintf(stderr, "hx_emb_local_create: %s\n", err.msg);
        exit(1);
    }
    hx_emb_local *L = hx_emb_as_local(t);
    /* random state of the kind's ranges (sums and accumulators positive);
     * a row's padding keeps its start value, as in any table (the host's
     * row kernels run over the padding with zero gradients, a no-op there) */
    int ns = hx_emb_optim_nstate(kind);
    int rowwise = kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    for (int k = 0; k < ns; k++) {
        int positive = kind != HX_EMB_OPTIM_FTRL ? k == 1 || kind != HX_EMB_OPTIM_LAZY_ADAM : k == 0;
        for (int64_t r = 0; r < SLOTS; r++)
            test_fill_uniform(&R, L->state[k] + (rowwise ? r : r * L->gstride), rowwise ? 1 : dim,
                              positive ? 0.05 : -0.5, positive ? 1.0 : 0.5);
    }
    return L;
}

static size_t param_bytes(const hx_emb_local *L) { return (size_t)SLOTS * (size_t)L->stride * L->esize; }

static size_t state_bytes(const hx_emb_local *L)
{
    return (size_t)SLOTS * sizeof(float) * (size_t)(L->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD ? 1 : L->gstride);
}

/* The bag kernel on the device copy of L's params against the host lookup. */
static void check_lookup(hx_emb_local *L, const void *dparam, const hx_emb_query *q, const char *what)
{
    int64_t dim = L->base.dim, nb = hx_emb_query_out_rows(q);
    float *want = malloc((size_t)(nb * dim + 1) * sizeof *want), *got = malloc((size_t)(nb * dim + 1) * sizeof *got);
    int64_t *am_want = malloc((size_t)(nb * dim + 1) * sizeof *am_want);
    int64_t *am_got = malloc((size_t)(nb * dim + 1) * sizeof *am_got);
    hx_emb_err err;
    hx_status st = hx_emb_local_lookup(L, q, HX_EMB_OOB_ZERO, NULL, want, q->mode == HX_EMB_MAX ? am_want : NULL, &err);
    CHECK(!st, "host lookup (%s): %s", what, err.msg);
    void *dids = up(q->ids, (size_t)q->n * sizeof(int64_t));
    void *dw = q->weights ? up(q->weights, (size_t)q->n * sizeof(float)) : NULL;
    int64_t *db = q->mode == HX_EMB_ROWS ? NULL : bounds_of(q, nb);
    float *dout = gt_poisoned(HX_K_F32, nb * dim);
    int64_t *dam = q->mode == HX_EMB_MAX ? gt_poisoned(HX_K_I64, nb * dim) : NULL;
    run_ok(what, hx_gk_emb_bag(&C, (hx_kdtype)L->dtype, dparam, L->stride, dim, dids, q->n, (int)q->mode, db, nb,
                               dw, q->has_padding, dout, dam));
    down(got, dout, (size_t)(nb * dim) * sizeof *got);
    CHECK(!memcmp(got, want, (size_t)(nb * dim) * sizeof *got), "%s: the device's rows are the host's bits", what);
    if (dam) {
        down(am_got, dam, (size_t)(nb * dim) * sizeof *am_got);
        CHECK(!memcmp(am_got, am_want, (size_t)(nb * dim) * sizeof *am_got), "%s: argmax as the host's", what);
    }
    cudaFree(dids), cudaFree(dw), cudaFree(db), cudaFree(dout), cudaFree(dam);
    free(want), free(got), free(am_want), free(am_got);
}

static void lookups(void)
{
    for (int d = 0; d < 3; d++)
        for (int di = 0; di < 5; di++)
            for (int mode = HX_EMB_ROWS; mode <= HX_EMB_MAX; mode++)
                for (int var = 0; var < 3; var++) { /* plain, padding, weights (SUM) */
                    if (var == 2 && mode != HX_EMB_SUM) continue;
                    hx_emb_local *L = make_table(DTS[d], DIMS[di], HX_EMB_OPTIM_NONE, 0);
                    void *dparam = up(L->param, param_bytes(L));
                    int64_t ids[97], offsets[23];
                    float w[97];
                    hx_emb_query q = make_query((hx_emb_mode)mode, var == 2, var == 1, ids, 97, offsets, 23, w);
                    char what[96];
                    snprintf(what, sizeof what, "bag %s mode %d dim %lld var %d", hx_emb_dtype_name(DTS[d]), mode,
                             (long long)DIMS[di], var);
                    check_lookup(L, dparam, &q, what);
                    cudaFree(dparam);
                    hx_emb_table_free(&L->base);
                }
}

/* One fused backward + update: on the host, and on the device as the
 * host's grouping of positions, the gradient-sum kernel and the kind's
 * step kernel. */
static void device_update(hx_emb_local *L, void *dparam, float *ds0, float *ds1, const hx_emb_query *q,
                          const hx_emb_grad_input *gi, int64_t step, const char *what)
{
    int64_t dim = L->base.dim, nb = hx_emb_query_out_rows(q);
    hx_emb_workspace *ws = hx_emb_workspace_create();
    hx_emb_gplan plan;
    hx_emb_err err;
    hx_status st = hx_emb_group_plan(q, gi, L->base.rows, ws, &plan, &err);
    CHECK(!st, "group plan (%s): %s", what, err.msg);
    /* every share's groups in one list */
    int64_t *uniq = malloc((size_t)(plan.m + 1) * sizeof *uniq), *start = malloc((size_t)(plan.m + 2) * sizeof *start);
    uint32_t *pos = malloc((size_t)(plan.m + 1) * sizeof *pos);
    int64_t U = 0, P = 0;
    start[0] = 0;
    for (int s = 0; !st && s < plan.nshares; s++) {
        hx_emb_groups gr;
        hx_emb_group_share(&plan, s, &gr);
        for (int64_t u = 0; u < gr.U; u++) {
            uniq[U] = gr.uniq[u];
            for (int64_t p = gr.start[u]; p < gr.start[u + 1]; p++) pos[P++] = gr.pos[p];
            start[++U] = P;
        }
    }
    void *duniq = up(uniq, (size_t)U * sizeof *uniq), *dstart = up(start, (size_t)(U + 1) * sizeof *start);
    void *dpos = up(pos, (size_t)P * sizeof *pos);
    void *dbag = up(plan.bag_of, (size_t)q->n * sizeof *plan.bag_of);
    void *dscale = q->mode == HX_EMB_MAX ? NULL : up(plan.scale, (size_t)q->n * sizeof *plan.scale);
    void *ddout = up(gi->dout, (size_t)(nb * dim) * sizeof(float));
    void *dam = gi->argmax ? up(gi->argmax, (size_t)(nb * dim) * sizeof(int64_t)) : NULL;
    float *dG = gt_poisoned(HX_K_F32, U * dim);
    run_ok(what, hx_gk_emb_grad_sum(&C, (int)q->mode, ddout, dam, dim, dstart, U, dpos, dbag, dscale, dG));
    hx_emb_step_plan sp = hx_emb_step_plan_of(&L->optim, step);
    if (L->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD)
        run_ok(what, hx_gk_emb_rows_row_adagrad(&C, sp.ra_clr, sp.ra_eps, sp.ra_wd, (hx_kdtype)L->dtype, dparam,
                                                L->stride, ds0, duniq, U, dG, dim));
    else
        run_ok(what, hx_gk_emb_rows_update(&C, &sp.plan, (hx_kdtype)L->dtype, dparam, L->stride, ds0, ds1,
                                           L->gstride, duniq, U, dG, dim));
    GT_CUDA(cudaStreamSynchronize(C.stream));
    cudaFree(duniq), cudaFree(dstart), cudaFree(dpos), cudaFree(dbag), cudaFree(dscale), cudaFree(ddout);
    cudaFree(dam), cudaFree(dG);
    free(uniq), free(start), free(pos);
    /* the host, from the same table */
    st = hx_emb_local_backward_update(L, q, gi, step, HX_EMB_OOB_ZERO, ws, &err);
    CHECK(!st, "host update (%s): %s", what, err.msg);
    hx_emb_workspace_free(ws);
}

static void check_updates(hx_emb_optim_kind kind)
{
    for (int d = 0; d < 3; d++)
        for (int di = 0; di < 5; di++)
            for (int mode = HX_EMB_ROWS; mode <= HX_EMB_MAX; mode++)
                for (int wd = 0; wd < 2; wd++) {
                    hx_emb_local *L = make_table(DTS[d], DIMS[di], kind, wd);
                    int64_t dim = L->base.dim;
                    int ns = hx_emb_optim_nstate(kind);
                    void *dparam = up(L->param, param_bytes(L));
                    float *ds[2] = {NULL, NULL};
                    for (int k = 0; k < ns; k++) ds[k] = up(L->state[k], state_bytes(L));
                    char *hp = malloc(param_bytes(L));
                    float *hs = malloc(state_bytes(L));
                    for (int64_t step = 1; step <= 3; step++) {
                        int64_t ids[61], offsets[17];
                        float w[61];
                        hx_emb_query q = make_query((hx_emb_mode)mode, mode == HX_EMB_SUM && wd, wd, ids, 61,
                                                    offsets, 17, w);
                        int64_t nb = hx_emb_query_out_rows(&q);
                        float *dout = gt_random(&R, nb * dim, -1, 1);
                        int64_t *am = NULL;
                        char what[128];
                        snprintf(what, sizeof what, "%s %s dim %lld mode %d wd %d step %lld", hx_emb_optim_name(kind),
                                 hx_emb_dtype_name(DTS[d]), (long long)dim, mode, wd, (long long)step);
                        check_lookup(L, dparam, &q, what); /* the forward reads the updated rows alike */
                        if (mode == HX_EMB_MAX) {
                            float *out = malloc((size_t)(nb * dim + 1) * sizeof *out);
                            am = malloc((size_t)(nb * dim + 1) * sizeof *am);
                            hx_emb_err err;
                            CHECK(!hx_emb_local_lookup(L, &q, HX_EMB_OOB_ZERO, NULL, out, am, &err), "%s", err.msg);
                            free(out);
                        }
                        hx_emb_grad_input gi = {dout, am, dim, HX_EMB_DEDUP_AUTO};
                        device_update(L, dparam, ds[0], ds[1], &q, &gi, step, what);
                        down(hp, dparam, param_bytes(L));
                        CHECK(!memcmp(hp, L->param, param_bytes(L)), "%s: params are the host's bits", what);
                        for (int k = 0; k < ns; k++) {
                            down(hs, ds[k], state_bytes(L));
                            CHECK(!memcmp(hs, L->state[k], state_bytes(L)), "%s: state %d is the host's bits", what, k);
                        }
                        free(dout), free(am);
                    }
                    free(hp), free(hs);
                    cudaFree(dparam), cudaFree(ds[0]), cudaFree(ds[1]);
                    hx_emb_table_free(&L->base);
                }
}

static void lazy_adam(void) { check_updates(HX_EMB_OPTIM_LAZY_ADAM); }
static void adagrad(void) { check_updates(HX_EMB_OPTIM_ADAGRAD); }
static void row_adagrad(void) { check_updates(HX_EMB_OPTIM_ROW_ADAGRAD); }
static void ftrl(void) { check_updates(HX_EMB_OPTIM_FTRL); }

/* Arguments the kernels refuse. */
static void bad_args(void)
{
    hx_optim_plan sgd = {0};
    sgd.kind = HX_OPT_SGD;
    sgd.unscale = sgd.clip = 1.0f;
    float *p = gt_poisoned(HX_K_F32, 8);
    CHECK(hx_gk_emb_rows_update(&C, &sgd, HX_K_F32, p, 8, p, p, 8, NULL, 0, NULL, 8) == HX_GK_BAD_ARG,
          "SGD is no row optimizer");
    CHECK(hx_gk_emb_bag(&C, HX_K_I64, p, 8, 8, NULL, 1, HX_GK_EMB_ROWS, NULL, 0, NULL, 0, p, NULL) == HX_GK_BAD_ARG,
          "an integer table");
    CHECK(hx_gk_emb_bag(&C, HX_K_F32, p, 8, 8, NULL, 1, HX_GK_EMB_MEAN, NULL, 1, p, 0, p, NULL) == HX_GK_BAD_ARG,
          "weights outside SUM, bags without bounds");
    CHECK(hx_gk_emb_grad_sum(&C, HX_GK_EMB_MAX, p, NULL, 8, NULL, 1, NULL, NULL, NULL, p) == HX_GK_BAD_ARG,
          "MAX without argmax");
    cudaFree(p);
}

static int setup(void)
{
    int skip = gt_require_device();
    if (skip) return skip;
    R = test_rng_make(20261126);
    C = gt_ctx((size_t)1 << 20);
    return 0;
}

static void teardown(void)
{
    GT_CUDA(cudaStreamSynchronize(C.stream));
    gt_ctx_free(&C);
}

static const test_case cases[] = {
    {"lookups", lookups},         {"lazy_adam", lazy_adam}, {"adagrad", adagrad},
    {"row_adagrad", row_adagrad}, {"ftrl", ftrl},           {"bad_args", bad_args},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "gpu_devcache", cases, TEST_COUNT(cases), &o);
}
