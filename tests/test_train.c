/* End-to-end training: a 2-layer MLP and a one-block transformer learn
 * (loss falls), two runs with the same seed are bitwise identical, and the
 * memory plan shares transient buffers (peak below the sum of sizes). */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the MLP -------------------------------------------------------------- */

enum { MB = 32, MIN = 8, MH = 32, MC = 3 };

static hx_tensor *build_mlp(hx_graph *g)
{
    int64_t xs[2] = {MB, MIN}, ys[1] = {MB}, w1s[2] = {MIN, MH}, b1s[1] = {MH};
    int64_t w2s[2] = {MH, MC}, b2s[1] = {MC};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_I32, 1, ys);
    hx_tensor *w1 = hx_graph_param(g, "w1", HX_DTYPE_F32, 2, w1s, hx_init_xavier_uniform(1));
    hx_tensor *b1 = hx_graph_param(g, "b1", HX_DTYPE_F32, 1, b1s, hx_init_zeros());
    hx_tensor *w2 = hx_graph_param(g, "w2", HX_DTYPE_F32, 2, w2s, hx_init_xavier_normal(1));
    hx_tensor *b2 = hx_graph_param(g, "b2", HX_DTYPE_F32, 1, b2s, hx_init_zeros());
    hx_tensor *h = hx_relu(g, hx_bias_add(g, hx_matmul(g, x, w1, false, false), b1));
    return hx_cross_entropy(g, hx_bias_add(g, hx_matmul(g, h, w2, false, false), b2), y);
}

/* Label: which of MC fixed directions x is closest to. */
static void mlp_batch(test_rng *r, float *x, int32_t *y)
{
    static const float centres[MC][MIN] = {{1, 1, 0, 0, -1, 0, 0, 1},
                                           {-1, 0, 1, 1, 0, 0, 1, -1},
                                           {0, -1, -1, 0, 1, 1, 0, 0}};
    for (int b = 0; b < MB; b++) {
        int c = (int)(test_rng_u64(r) % MC);
        for (int i = 0; i < MIN; i++) x[b * MIN + i] = centres[c][i] + 0.7f * (float)test_rng_normal(r);
        y[b] = c;
    }
}

/* Trains for `steps`; writes the per-step losses and the final w1. */
static void train_mlp(int steps, float *losses, float *w1_out)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *loss = build_mlp(g);
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    opt.lr = 0.05f;
    opt.momentum = 0.9f;
    OK(hx_graph_apply_optimizer(g, NULL, &opt));
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 2;
    cfg.seed = 7;
    hx_session *s = NULL;
    OK(hx_session_create(g, &cfg, &s));
    if (!s) return;

    hx_memory_stats ms;
    OK(hx_session_memory_stats(s, &ms));
    CHECK(ms.transient_planned_bytes < ms.transient_tensor_bytes,
          "MLP plan %zu bytes is not below the %zu bytes of its transient tensors",
          ms.transient_planned_bytes, ms.transient_tensor_bytes);

    test_rng r = test_rng_make(3);
    float x[MB * MIN];
    int32_t y[MB];
    for (int step = 0; step < steps; step++) {
        mlp_batch(&r, x, y);
        hx_feed feeds[2] = {{"x", NULL, x, sizeof x}, {"y", NULL, y, sizeof y}};
        hx_fetch f = {NULL, loss, &losses[step], sizeof(float)};
        OK(hx_session_run(s, feeds, 2, &f, 1, HX_RUN_TRAIN));
    }
    CHECK(hx_session_step(s) == steps, "step count %lld", (long long)hx_session_step(s));
    OK(hx_session_read(s, hx_graph_find(g, "w1"), w1_out, sizeof(float) * MIN * MH));
    hx_session_free(s);
    hx_graph_free(g);
}

static double mean(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

static void test_mlp(void)
{
    enum { STEPS = 150 };
    float l1[STEPS], l2[STEPS], w1[MIN * MH], w2[MIN * MH];
    train_mlp(STEPS, l1, w1);
    train_mlp(STEPS, l2, w2);
    double first = mean(l1, 10), last = mean(l1 + STEPS - 10, 10);
    printf("mlp: loss %.4f -> %.4f\n", first, last);
    CHECK(last < 0.5 * first, "MLP loss did not fall enough: %.4f -> %.4f", first, last);
    CHECK(!memcmp(l1, l2, sizeof l1), "two MLP runs with one seed differ in their losses");
    CHECK(!memcmp(w1, w2, sizeof w1), "two MLP runs with one seed differ in their weights");
}

/* ---- the transformer block ------------------------------------------------------ */

enum { TB = 4, TT = 8, TV = 11, TC = 16, TH = 2, TD = TC / TH };

static hx_tensor *param(hx_graph *g, const char *name, int ndim, int64_t a, int64_t b, hx_init in)
{
    int64_t shape[2] = {a, b};
    return hx_graph_param(g, name, HX_DTYPE_F32, ndim, shape, in);
}

/* (B,T,C) -> (B,H,T,D) */
static hx_tensor *split_heads(hx_graph *g, hx_tensor *x)
{
    int64_t s[4] = {TB, TT, TH, TD};
    int perm[4] = {0, 2, 1, 3};
    return hx_permute(g, hx_reshape(g, x, 4, s), perm);
}

/* tokens (B,T) -> embeddings -> pre-LN causal self-attention and GELU MLP
 * with residuals -> LN -> logits (B*T, V) -> cross-entropy with the next tokens */
static hx_tensor *build_transformer(hx_graph *g)
{
    int64_t tok_s[2] = {TB, TT}, tgt_s[1] = {TB * TT}, flat[2] = {TB * TT, TC};
    hx_tensor *tok = hx_graph_input(g, "tokens", HX_DTYPE_I32, 2, tok_s);
    hx_tensor *tgt = hx_graph_input(g, "targets", HX_DTYPE_I32, 1, tgt_s);
    hx_tensor *wte = param(g, "wte", 2, TV, TC, hx_init_normal(0, 0.1));
    hx_tensor *wpe = param(g, "wpe", 2, TT, TC, hx_init_normal(0, 0.1));
    hx_tensor *x = hx_add(g, hx_gather(g, wte, tok), wpe); /* (B,T,C) + (T,C) */

    hx_tensor *h = hx_layernorm(g, x, param(g, "ln1_g", 1, TC, 0, hx_init_constant(1)),
                                param(g, "ln1_b", 1, TC, 0, hx_init_zeros()), 1e-5f);
    hx_tensor *qkv = hx_matmul(g, h, param(g, "w_qkv", 2, TC, 3 * TC, hx_init_xavier_uniform(1)),
                               false, false); /* (B,T,3C) */
    hx_tensor *q = split_heads(g, hx_slice(g, qkv, 2, 0, TC));
    hx_tensor *k = split_heads(g, hx_slice(g, qkv, 2, TC, 2 * TC));
    hx_tensor *v = split_heads(g, hx_slice(g, qkv, 2, 2 * TC, 3 * TC));
    hx_tensor *att = hx_scale(g, hx_matmul(g, q, k, false, true), (float)(1 / sqrt(TD)));
    att = hx_dropout(g, hx_softmax(g, hx_causal_mask(g, att)), 0.1f, 99);
    int perm[4] = {0, 2, 1, 3};
    int64_t btc[3] = {TB, TT, TC};
    hx_tensor *o = hx_reshape(g, hx_permute(g, hx_matmul(g, att, v, false, false), perm), 3, btc);
    x = hx_add(g, x, hx_matmul(g, o, param(g, "w_proj", 2, TC, TC, hx_init_xavier_uniform(1)),
                               false, false));

    h = hx_layernorm(g, x, param(g, "ln2_g", 1, TC, 0, hx_init_constant(1)),
                     param(g, "ln2_b", 1, TC, 0, hx_init_zeros()), 1e-5f);
    h = hx_gelu(g, hx_bias_add(g, hx_matmul(g, h, param(g, "w_fc", 2, TC, 4 * TC,
                                                           hx_init_xavier_uniform(1)),
                                            false, false),
                               param(g, "b_fc", 1, 4 * TC, 0, hx_init_zeros())));
    x = hx_add(g, x, hx_matmul(g, h, param(g, "w_out", 2, 4 * TC, TC, hx_init_xavier_uniform(1)),
                               false, false));
    x = hx_layernorm(g, x, param(g, "lnf_g", 1, TC, 0, hx_init_constant(1)),
                     param(g, "lnf_b", 1, TC, 0, hx_init_zeros()), 1e-5f);
    hx_tensor *logits = hx_matmul(g, hx_reshape(g, x, 2, flat),
                                  param(g, "w_head", 2, TC, TV, hx_init_xavier_uniform(1)),
                                  false, false);
    return hx_cross_entropy(g, logits, tgt);
}

/* Sequences t[i+1] = (3 t[i] + 1) mod V from random starts: the next token
 * is a function of the current one, which one block learns quickly. */
static void lm_batch(test_rng *r, int32_t *tok, int32_t *tgt)
{
    for (int b = 0; b < TB; b++) {
        int32_t t = (int32_t)(test_rng_u64(r) % TV);
        for (int i = 0; i < TT; i++) {
            tok[b * TT + i] = t;
            t = (3 * t + 1) % TV;
            tgt[b * TT + i] = t;
        }
    }
}

static void train_transformer(int steps, float *losses)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *loss = build_transformer(g);
    CHECK(loss != NULL, "%s", hx_last_error());
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    opt.lr = 0.1f;
    opt.momentum = 0.9f;
    OK(hx_graph_apply_optimizer(g, NULL, &opt));
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    hx_session *s = NULL;
    OK(hx_session_create(g, &cfg, &s));
    if (!s) {
        hx_graph_free(g);
        return;
    }
    hx_memory_stats ms;
    OK(hx_session_memory_stats(s, &ms));
    printf("transformer: transient plan %zu bytes for %zu bytes of tensors, %zu persistent\n",
           ms.transient_planned_bytes, ms.transient_tensor_bytes, ms.persistent_bytes);
    CHECK(ms.transient_planned_bytes < ms.transient_tensor_bytes,
          "transformer plan %zu bytes is not below %zu", ms.transient_planned_bytes,
          ms.transient_tensor_bytes);
    test_rng r = test_rng_make(11);
    int32_t tok[TB * TT], tgt[TB * TT];
    for (int step = 0; step < steps; step++) {
        lm_batch(&r, tok, tgt);
        hx_feed feeds[2] = {{"tokens", NULL, tok, sizeof tok}, {"targets", NULL, tgt, sizeof tgt}};
        hx_fetch f = {NULL, loss, &losses[step], sizeof(float)};
        OK(hx_session_run(s, feeds, 2, &f, 1, HX_RUN_TRAIN));
    }
    hx_session_free(s);
    hx_graph_free(g);
}

static void test_transformer(void)
{
    enum { STEPS = 120 };
    float l1[STEPS], l2[STEPS];
    train_transformer(STEPS, l1);
    train_transformer(STEPS, l2);
    double first = mean(l1, 10), last = mean(l1 + STEPS - 10, 10);
    printf("transformer: loss %.4f -> %.4f (uniform guess %.4f)\n", first, last, log(TV));
    CHECK(last < 0.5 * first, "transformer loss did not fall enough: %.4f -> %.4f", first, last);
    CHECK(!memcmp(l1, l2, sizeof l1), "two transformer runs with one seed differ");
}

static const test_case cases[] = {
    {"mlp", test_mlp},
    {"transformer", test_transformer},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "train", cases, TEST_COUNT(cases));
}
