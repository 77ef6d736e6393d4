/* test_update_status: the CPU optimizer launchers return their kernel's
 * status (they used to drop it and report HX_OK). Every dense update node
 * of a small graph (SGD, SGD with momentum, Adam, Adagrad, FTRL) runs
 * through the CPU backend's launcher on host buffers: with one thread it
 * updates its parameter; with arguments its kernel refuses (no thread, and
 * SGD momentum without its buffer) it fails with HX_ERR_INTERNAL, names
 * the node and its parameter, and leaves the parameter as it was. */
#include "hetex.h"
#include "backend/backend.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <stdlib.h>
#include <string.h>

enum { B = 4, IN = 3, OUT = 2, MAX_SRC = 5 };

/* logits = sum over the params of x @ w; loss = cross_entropy(logits, y);
 * one optimizer per param. */
static hx_graph *build(void)
{
    static const hx_optimizer_kind kinds[] = {HX_OPTIMIZER_SGD, HX_OPTIMIZER_SGD,
                                              HX_OPTIMIZER_ADAM, HX_OPTIMIZER_ADAGRAD,
                                              HX_OPTIMIZER_FTRL};
    static const char *const names[] = {"w_sgd", "w_momentum", "w_adam", "w_adagrad", "w_ftrl"};
    enum { N = sizeof kinds / sizeof kinds[0] };
    int64_t xs[2] = {B, IN}, ys[1] = {B}, ws[2] = {IN, OUT};
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *y = hx_graph_input(g, "y", HX_DTYPE_I32, 1, ys);
    hx_tensor *w[N], *logits = NULL;
    for (int k = 0; k < N; k++) {
        w[k] = hx_graph_param(g, names[k], HX_DTYPE_F32, 2, ws, hx_init_constant(0.25));
        hx_tensor *t = hx_matmul(g, x, w[k], false, false);
        logits = logits ? hx_add(g, logits, t) : t;
    }
    OK(hx_graph_backward(g, hx_cross_entropy(g, logits, y)));
    for (int k = 0; k < N; k++) {
        hx_optimizer_config c = hx_optimizer_config_default(kinds[k]);
        if (k == 1) c.momentum = 0.9;
        OK(hx_graph_apply_optimizer(g, w[k], &c));
    }
    return g;
}

/* Buffers of update node u's inputs: the param at 1, the gradient at 0.5,
 * optimizer state at 0 (FTRL's accumulator must be >= 0). */
typedef struct bufs {
    float *at[MAX_SRC];
} bufs;

static void fill(bufs *b, const hx_tensor *u)
{
    for (int k = 0; k < u->n_src; k++) {
        int64_t n = hx_tensor_numel(u->src[k]);
        for (int64_t i = 0; i < n; i++) b->at[k][i] = k == 0 ? 1.0f : k == 1 ? 0.5f : 0.0f;
    }
}

static bool param_is_one(const bufs *b, const hx_tensor *u)
{
    for (int64_t i = 0; i < hx_tensor_numel(u); i++)
        if (b->at[0][i] != 1.0f) return false;
    return true;
}

/* Runs u with ex.nthreads = threads and in = b's buffers (the state at
 * in[2] dropped when no_state). */
static hx_status run(const hx_tensor *u, bufs *b, int threads, bool no_state)
{
    hx_exec ex = {.nthreads = threads, .step = 0, .train = true, .grad_unscale = 1,
                  .grad_clip = 1, .lr_scale = 1};
    void *in[MAX_SRC];
    for (int k = 0; k < u->n_src; k++) in[k] = b->at[k];
    if (no_state) in[2] = NULL;
    fill(b, u);
    return hx__cpu_kernel(u->op)(&ex, u, NULL, in);
}

static void check_refused(const hx_tensor *u, hx_status st, const bufs *b, const char *why)
{
    const char *msg = hx_last_error();
    CHECK(st == HX_ERR_INTERNAL, "%s '%s' (%s): got %s", hx__ops[u->op].name, u->name, why,
          hx_status_name(st));
    CHECK(strstr(msg, u->name) && strstr(msg, u->param->name) && strstr(msg, "refused"),
          "%s: the message names the node, its parameter and the refusal: %s", u->name, msg);
    CHECK(param_is_one(b, u), "%s (%s): the parameter is untouched", u->name, why);
}

/* Every update node of the graph, run by its CPU kernel directly. */
static void test_update_nodes(void)
{
    hx_graph *g = build();
    int updates = 0;
    for (int i = 0; g && i < g->n; i++) {
        const hx_tensor *u = g->tensors[i];
        if (u->kind != HX_TENSOR_UPDATE) continue;
        updates++;
        CHECK(u->n_src <= MAX_SRC && hx__cpu_kernel(u->op), "%s: %d inputs", u->name, u->n_src);
        bufs b = {{0}};
        for (int k = 0; k < u->n_src; k++)
            b.at[k] = malloc(sizeof(float) * (size_t)hx_tensor_numel(u->src[k]));

        OK(run(u, &b, 1, false));
        CHECK(!param_is_one(&b, u), "%s: one thread updates the parameter", u->name);
        check_refused(u, run(u, &b, 0, false), &b, "no thread");
        if (u->op == HX_OP_SGD_UPDATE && u->optimizer->momentum != 0)
            check_refused(u, run(u, &b, 1, true), &b, "momentum without its buffer");
        for (int k = 0; k < u->n_src; k++) free(b.at[k]);
    }
    CHECK(updates == 5, "%d update nodes", updates);
    hx_graph_free(g);
}

static const test_case cases[] = {{"update_nodes", test_update_nodes}};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "update_status", cases, TEST_COUNT(cases));
}
