/* test_errors: every bad-input path of the public API returns its status (or
 * NULL), leaves a message in hx_last_error() that names the op and the
 * offending shapes / names, and leaves the graph or session usable: after
 * each error a valid op is added (the failed one must not have added any
 * tensor) or a valid run succeeds. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* A check (counted as CHECK's are) at the caller's line; a failure also
 * shows the library's last error. */
static void report(int line, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool passed = test_vcheck(ok, __FILE__, line, fmt, ap);
    va_end(ap);
    if (!passed)
        fprintf(stderr, "    last error: \"%s\"\n", hx_last_error() ? hx_last_error() : "(null)");
}

/* The message is non-empty and contains every string of subs. */
static void msg_has_(int line, const char *what, const char *const *subs)
{
    const char *m = hx_last_error();
    report(line, m && m[0], "%s: empty error message", what);
    for (; m && *subs; subs++) report(line, strstr(m, *subs) != NULL, "%s: message does not mention \"%s\"", what, *subs);
}

/* The integers dims[0..n) appear one after another among the integers of the
 * message, whatever the brackets and separators ("[32,64]", "(32, 64)", "32x64"). */
static void msg_has_dims_(int line, const char *what, int n, const int64_t *dims)
{
    const char *m = hx_last_error();
    long long v[512];
    int k = 0;
    for (const char *p = m ? m : ""; *p && k < 512;) {
        if (isdigit((unsigned char)*p) || (*p == '-' && isdigit((unsigned char)p[1]))) {
            char *e;
            v[k++] = strtoll(p, &e, 10);
            p = e;
        } else {
            p++;
        }
    }
    bool found = false;
    for (int i = 0; !found && i + n <= k; i++) {
        found = true;
        for (int j = 0; j < n && found; j++) found = v[i + j] == dims[j];
    }
    char want[128] = "";
    size_t pos = 0;
    for (int j = 0; j < n && pos < 100; j++)
        pos += (size_t)snprintf(want + pos, sizeof want - pos, "%s%lld", j ? "," : "", (long long)dims[j]);
    report(line, found, "%s: message does not show the shape [%s]", what, want);
}

#define MSG_HAS(what, ...) msg_has_(__LINE__, what, (const char *const[]){__VA_ARGS__, NULL})
#define MSG_DIMS(what, n, ...) msg_has_dims_(__LINE__, what, n, S(__VA_ARGS__))

/* An op builder failed: NULL, a message naming what it should, and the graph
 * has no new tensor. */
#define EXPECT_NULL(g, before, t, what, ...)                                                   \
    do {                                                                                       \
        const void *t_ = (t);                                                                  \
        report(__LINE__, t_ == NULL, "%s: expected NULL", what);                               \
        MSG_HAS(what, __VA_ARGS__);                                                            \
        if (g) report(__LINE__, hx_graph_tensor_count(g) == (before),                          \
                      "%s: failed call changed the tensor count %d -> %d", what, (before),     \
                      hx_graph_tensor_count(g));                                               \
    } while (0)

#define EXPECT_ST(st, want, what, ...)                                                         \
    do {                                                                                       \
        hx_status st_ = (st);                                                                  \
        report(__LINE__, st_ == (want), "%s: status %s, want %s", what, hx_status_name(st_),   \
               hx_status_name(want));                                                          \
        report(__LINE__, st_ == HX_OK || hx_last_status() == st_,                              \
               "%s: hx_last_status() %s, the call returned %s", what,                          \
               hx_status_name(hx_last_status()), hx_status_name(st_));                         \
        MSG_HAS(what, __VA_ARGS__);                                                            \
    } while (0)

/* An op builder failed with status `want` (read with hx_last_status), as
 * EXPECT_NULL checks it otherwise. */
#define EXPECT_NULL_ST(g, before, t, want, what, ...)                                          \
    do {                                                                                       \
        EXPECT_NULL(g, before, t, what, __VA_ARGS__);                                          \
        report(__LINE__, hx_last_status() == (want), "%s: hx_last_status() %s, want %s", what, \
               hx_status_name(hx_last_status()), hx_status_name(want));                       \
    } while (0)

/* After an error the graph takes a valid op. */
static hx_tensor *usable_(int line, hx_graph *g, hx_tensor *x, const char *what)
{
    int before = hx_graph_tensor_count(g);
    hx_tensor *r = hx_relu(g, x);
    report(line, r != NULL, "%s: graph does not take a valid op after the error", what);
    report(line, hx_graph_tensor_count(g) == before + 1, "%s: valid op added %d tensors", what,
           hx_graph_tensor_count(g) - before);
    return r;
}
#define USABLE(g, x, what) usable_(__LINE__, g, x, what)

static hx_session *session(hx_graph *g)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    return test_session_with(g, &cfg, "session");
}

/* ---- errors when ops are added -------------------------------------------------------- */

static void test_build_errors(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, S(4, 5));
    hx_tensor *xi = hx_graph_input(g, "xi", HX_DTYPE_I32, 2, S(4, 5));
    hx_tensor *a = hx_graph_input(g, "a", HX_DTYPE_F32, 2, S(32, 64));
    hx_tensor *b = hx_graph_input(g, "b", HX_DTYPE_F32, 2, S(63, 10));
    hx_tensor *a3 = hx_graph_input(g, "a3", HX_DTYPE_F32, 3, S(2, 3, 4));
    hx_tensor *b3 = hx_graph_input(g, "b3", HX_DTYPE_F32, 3, S(3, 4, 5));
    hx_tensor *w45 = hx_graph_input(g, "w45", HX_DTYPE_F32, 2, S(4, 5));
    hx_tensor *v3 = hx_graph_input(g, "v3", HX_DTYPE_F32, 1, S(3));
    hx_tensor *x46 = hx_graph_input(g, "x46", HX_DTYPE_F32, 2, S(4, 6));
    hx_tensor *x245 = hx_graph_input(g, "x245", HX_DTYPE_F32, 3, S(2, 4, 5));
    hx_tensor *l4f = hx_graph_input(g, "l4f", HX_DTYPE_F32, 1, S(4));
    hx_tensor *l4 = hx_graph_input(g, "l4", HX_DTYPE_I32, 1, S(4));
    hx_tensor *l3 = hx_graph_input(g, "l3", HX_DTYPE_I32, 1, S(3));
    hx_tensor *l2 = hx_graph_input(g, "l2", HX_DTYPE_I64, 1, S(2));
    hx_tensor *sc = hx_graph_input(g, "scalar_in", HX_DTYPE_F32, 0, S(1));
    report(__LINE__, x && xi && a && b && a3 && b3 && w45 && v3 && x46 && x245 && l4f && l4 && l3 && l2 && sc,
           "leaves");
    int n0;
    hx_tensor *t;

    /* matmul */
    n0 = hx_graph_tensor_count(g);
    t = hx_matmul(g, a, b, false, false);
    EXPECT_NULL(g, n0, t, "matmul [32,64]x[63,10]", "matmul");
    MSG_DIMS("matmul [32,64]x[63,10]", 2, 32, 64);
    MSG_DIMS("matmul [32,64]x[63,10]", 2, 63, 10);
    /* an op given NULL returns NULL and keeps the first failure's message */
    t = hx_relu(g, hx_scale(g, t, 2.0f));
    EXPECT_NULL(g, n0, t, "relu(scale(failed matmul))", "matmul");
    MSG_DIMS("relu(scale(failed matmul)) keeps the matmul message", 2, 63, 10);
    USABLE(g, x, "after matmul error");
    n0 = hx_graph_tensor_count(g);
    t = hx_matmul(g, a, b, true, false); /* [64,32]x[63,10] */
    EXPECT_NULL(g, n0, t, "matmul trans_a [32,64]^T x [63,10]", "matmul");
    t = hx_matmul(g, a3, b3, false, false); /* batch 2 vs 3 */
    EXPECT_NULL(g, n0, t, "matmul batch [2,3,4]x[3,4,5]", "matmul");
    MSG_DIMS("matmul batch [2,3,4]x[3,4,5]", 3, 2, 3, 4);
    t = hx_matmul(g, a3, w45, true, false); /* shared 2-D b needs trans_a false */
    EXPECT_NULL(g, n0, t, "matmul trans_a with shared 2-D b", "matmul");
    t = hx_matmul(g, v3, w45, false, false);
    EXPECT_NULL(g, n0, t, "matmul 1-D a", "matmul");
    t = hx_matmul(g, xi, hx_graph_find(g, "xi"), false, true);
    EXPECT_NULL(g, n0, t, "matmul i32", "matmul", "i32");
    USABLE(g, x, "after matmul errors");

    /* elementwise */
    static const char *bn[] = {"add", "sub", "mul", "div"};
    for (int k = 0; k < 4; k++) {
        hx_tensor *(*f)(hx_graph *, hx_tensor *, hx_tensor *) =
            k == 0 ? hx_add : k == 1 ? hx_sub : k == 2 ? hx_mul : hx_div;
        char what[64];
        n0 = hx_graph_tensor_count(g);
        snprintf(what, sizeof what, "%s [4,5]+[4,6]", bn[k]);
        t = f(g, x, x46);
        EXPECT_NULL(g, n0, t, what, bn[k]);
        MSG_DIMS(what, 2, 4, 5);
        MSG_DIMS(what, 2, 4, 6);
        snprintf(what, sizeof what, "%s [4,5]+[3]", bn[k]);
        t = f(g, x, v3);
        EXPECT_NULL(g, n0, t, what, bn[k]);
        snprintf(what, sizeof what, "%s f32+i32", bn[k]);
        t = f(g, x, xi);
        EXPECT_NULL(g, n0, t, what, bn[k], "i32");
        USABLE(g, x, what);
    }
    n0 = hx_graph_tensor_count(g);
    t = hx_bias_add(g, x, hx_graph_find(g, "l4f"));
    EXPECT_NULL(g, n0, t, "bias_add [4,5]+[4]", "bias_add");
    MSG_DIMS("bias_add [4,5]+[4]", 2, 4, 5);
    t = hx_bias_add(g, x, w45);
    EXPECT_NULL(g, n0, t, "bias_add 2-D bias", "bias_add");

    /* unary on integers */
    t = hx_log(g, xi);
    EXPECT_NULL(g, n0, t, "log i32", "log", "i32");
    t = hx_relu(g, xi);
    EXPECT_NULL(g, n0, t, "relu i32", "relu");
    t = hx_softmax(g, xi);
    EXPECT_NULL(g, n0, t, "softmax i32", "softmax");
    t = hx_scale(g, xi, 2.0f);
    EXPECT_NULL(g, n0, t, "scale i32", "scale");
    USABLE(g, x, "after unary errors");

    /* layernorm */
    n0 = hx_graph_tensor_count(g);
    t = hx_layernorm(g, x, l4f, l4f, 1e-5f);
    EXPECT_NULL(g, n0, t, "layernorm [4,5] gamma [4]", "layernorm");
    t = hx_layernorm(g, x, v3, v3, -1.0f);
    EXPECT_NULL(g, n0, t, "layernorm eps < 0 / gamma [3]", "layernorm");

    /* reshape */
    int64_t bad1[2] = {3, 7}, bad2[2] = {-1, -1}, bad3[2] = {3, -1}, bad4[2] = {0, 20};
    t = hx_reshape(g, x, 2, bad1);
    EXPECT_NULL(g, n0, t, "reshape [4,5] -> [3,7]", "reshape");
    MSG_DIMS("reshape [4,5] -> [3,7]", 2, 4, 5);
    MSG_DIMS("reshape [4,5] -> [3,7]", 2, 3, 7);
    t = hx_reshape(g, x, 2, bad2);
    EXPECT_NULL(g, n0, t, "reshape two -1", "reshape");
    t = hx_reshape(g, x, 2, bad3);
    EXPECT_NULL(g, n0, t, "reshape [4,5] -> [3,-1]", "reshape");
    t = hx_reshape(g, x, 2, bad4);
    EXPECT_NULL(g, n0, t, "reshape to a zero dim", "reshape");
    t = hx_reshape(g, x, 9, S(1, 1, 1, 1, 1, 1, 1, 4, 5));
    EXPECT_NULL(g, n0, t, "reshape to 9 dims", "reshape");
    USABLE(g, x, "after reshape errors");

    /* permute */
    n0 = hx_graph_tensor_count(g);
    t = hx_permute(g, x, (const int[]){0, 0});
    EXPECT_NULL(g, n0, t, "permute (0,0)", "permute");
    t = hx_permute(g, x, (const int[]){0, 2});
    EXPECT_NULL(g, n0, t, "permute (0,2) on 2-D", "permute");
    t = hx_permute(g, x, (const int[]){1, -1});
    EXPECT_NULL(g, n0, t, "permute (1,-1)", "permute");
    USABLE(g, x, "after permute errors");

    /* slice */
    n0 = hx_graph_tensor_count(g);
    t = hx_slice(g, x, 1, 2, 7);
    EXPECT_NULL(g, n0, t, "slice [4,5] axis 1 [2,7)", "slice");
    MSG_DIMS("slice [4,5] axis 1 [2,7)", 2, 4, 5);
    t = hx_slice(g, x, -1, 3, 2);
    EXPECT_NULL(g, n0, t, "slice start > end", "slice");
    t = hx_slice(g, x, 2, 0, 1);
    EXPECT_NULL(g, n0, t, "slice axis 2 of 2-D", "slice");
    t = hx_slice(g, x, -3, 0, 1);
    EXPECT_NULL(g, n0, t, "slice axis -3 of 2-D", "slice");
    t = hx_slice(g, x, 0, -1, 2);
    EXPECT_NULL(g, n0, t, "slice start -1", "slice");
    t = hx_slice(g, x, 0, 2, 2);
    EXPECT_NULL(g, n0, t, "slice empty range [2,2)", "slice");
    USABLE(g, x, "after slice errors");

    /* concat */
    n0 = hx_graph_tensor_count(g);
    t = hx_concat(g, 3, (hx_tensor *const[]){x, x46, x}, 0);
    EXPECT_NULL(g, n0, t, "concat axis 0 [4,5],[4,6],[4,5]", "concat");
    MSG_DIMS("concat axis 0 [4,5],[4,6],[4,5]", 2, 4, 6);
    t = hx_concat(g, 2, (hx_tensor *const[]){x, x245}, 0);
    EXPECT_NULL(g, n0, t, "concat ranks 2 and 3", "concat");
    t = hx_concat(g, 2, (hx_tensor *const[]){x, x}, 2);
    EXPECT_NULL(g, n0, t, "concat axis 2 of 2-D", "concat");
    t = hx_concat(g, 2, (hx_tensor *const[]){x, xi}, 0);
    EXPECT_NULL(g, n0, t, "concat f32 with i32", "concat");
    t = hx_concat(g, 0, (hx_tensor *const[]){x}, 0);
    EXPECT_NULL(g, n0, t, "concat of 0 tensors", "concat");
    t = hx_concat(g, 2, NULL, 0);
    EXPECT_NULL(g, n0, t, "concat NULL list", "");
    USABLE(g, x, "after concat errors");

    /* reductions */
    n0 = hx_graph_tensor_count(g);
    t = hx_reduce_sum(g, x, 1, (const int[]){2}, false);
    EXPECT_NULL(g, n0, t, "reduce_sum axis 2 of 2-D", "reduce_sum");
    t = hx_reduce_mean(g, x, 1, (const int[]){5}, true);
    EXPECT_NULL(g, n0, t, "reduce_mean axis 5 of 2-D", "reduce_mean");
    t = hx_reduce_sum(g, x, 1, NULL, false);
    EXPECT_NULL(g, n0, t, "reduce_sum naxes 1, axes NULL", "reduce_sum");
    t = hx_reduce_sum(g, x, 2, (const int[]){1, 1}, false);
    EXPECT_NULL(g, n0, t, "reduce_sum axes (1,1)", "reduce_sum");
    t = hx_reduce_mean(g, x, 3, (const int[]){0, 1, 0}, false);
    EXPECT_NULL(g, n0, t, "reduce_mean 3 axes of 2-D", "reduce_mean");

    /* cast */
    t = hx_cast(g, x, (hx_dtype)99);
    EXPECT_NULL(g, n0, t, "cast to dtype 99", "cast");
    t = hx_cast(g, x, HX_DTYPE_I32); /* "Between f32, f16 and bf16" */
    EXPECT_NULL(g, n0, t, "cast f32 to i32", "cast", "i32");
    t = hx_softmax(g, hx_graph_find(g, "scalar_in"));
    EXPECT_NULL(g, n0, t, "softmax of a scalar", "softmax");
    t = hx_layernorm(g, hx_graph_find(g, "scalar_in"), v3, v3, 1e-5f);
    EXPECT_NULL(g, n0, t, "layernorm of a scalar", "layernorm");

    /* gather */
    hx_tensor *ids_f = hx_graph_input(g, "ids_f", HX_DTYPE_F32, 1, S(3));
    n0 = hx_graph_tensor_count(g);
    t = hx_gather(g, x, ids_f);
    EXPECT_NULL(g, n0, t, "gather f32 ids", "gather");
    t = hx_gather(g, v3, l4);
    EXPECT_NULL(g, n0, t, "gather 1-D table", "gather");
    t = hx_gather(g, xi, l4);
    EXPECT_NULL(g, n0, t, "gather i32 table", "gather");

    /* causal mask */
    t = hx_causal_mask(g, x);
    EXPECT_NULL(g, n0, t, "causal_mask [4,5]", "causal_mask");
    MSG_DIMS("causal_mask [4,5]", 2, 4, 5);
    t = hx_causal_mask(g, v3);
    EXPECT_NULL(g, n0, t, "causal_mask 1-D", "causal_mask");

    /* losses */
    t = hx_cross_entropy(g, x, l4f);
    EXPECT_NULL(g, n0, t, "cross_entropy f32 labels", "cross_entropy", "f32");
    t = hx_cross_entropy(g, x245, l2);
    EXPECT_NULL(g, n0, t, "cross_entropy 3-D logits", "cross_entropy");
    MSG_DIMS("cross_entropy 3-D logits", 3, 2, 4, 5);
    t = hx_cross_entropy(g, x, l3);
    EXPECT_NULL(g, n0, t, "cross_entropy logits [4,5] labels [3]", "cross_entropy");
    MSG_DIMS("cross_entropy logits [4,5] labels [3]", 2, 4, 5);
    t = hx_cross_entropy(g, x, x);
    EXPECT_NULL(g, n0, t, "cross_entropy 2-D f32 labels", "cross_entropy");
    t = hx_bce_with_logits(g, x, x46);
    EXPECT_NULL(g, n0, t, "bce_with_logits [4,5] vs [4,6]", "bce_with_logits");
    t = hx_bce_with_logits(g, x, xi);
    EXPECT_NULL(g, n0, t, "bce_with_logits i32 targets", "bce_with_logits");
    t = hx_mse(g, x, x46);
    EXPECT_NULL(g, n0, t, "mse [4,5] vs [4,6]", "mse");
    MSG_DIMS("mse [4,5] vs [4,6]", 2, 4, 6);

    /* dropout */
    t = hx_dropout(g, x, 1.0f, 1);
    EXPECT_NULL(g, n0, t, "dropout p=1", "dropout");
    t = hx_dropout(g, x, -0.1f, 1);
    EXPECT_NULL(g, n0, t, "dropout p=-0.1", "dropout");
    t = hx_dropout(g, x, NAN, 1);
    EXPECT_NULL(g, n0, t, "dropout p=NaN", "dropout");
    t = hx_dropout(g, xi, 0.5f, 1);
    EXPECT_NULL(g, n0, t, "dropout on i32", "dropout");
    USABLE(g, x, "after loss/dropout errors");

    /* leaves: dtype, shapes, names */
    n0 = hx_graph_tensor_count(g);
    t = hx_graph_input(g, "bad_dt", (hx_dtype)99, 2, S(4, 5));
    EXPECT_NULL(g, n0, t, "input with dtype 99", "bad_dt");
    report(__LINE__, hx_dtype_size((hx_dtype)99) == 0, "hx_dtype_size(99) = %zu", hx_dtype_size((hx_dtype)99));
    report(__LINE__, hx_dtype_size(HX_DTYPE_BF16) == 2 && hx_dtype_size(HX_DTYPE_I64) == 8,
           "hx_dtype_size");
    t = hx_graph_param(g, "bad_dt_p", (hx_dtype)-1, 1, S(4), hx_init_zeros());
    EXPECT_NULL(g, n0, t, "param with dtype -1", "bad_dt_p");
    t = hx_graph_param(g, "bad_init", HX_DTYPE_F32, 1, S(4), (hx_init){(hx_init_kind)42, 0, 0});
    EXPECT_NULL(g, n0, t, "param with init kind 42", "bad_init");
    t = hx_graph_input(g, "zero_dim", HX_DTYPE_F32, 2, S(4, 0));
    EXPECT_NULL(g, n0, t, "input with a 0 dim", "zero_dim");
    t = hx_graph_input(g, "neg_dim", HX_DTYPE_F32, 2, S(-4, 5));
    EXPECT_NULL(g, n0, t, "input with a negative dim", "neg_dim");
    t = hx_graph_input(g, "nine_dims", HX_DTYPE_F32, 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1));
    EXPECT_NULL(g, n0, t, "input with 9 dims", "nine_dims");
    t = hx_graph_input(g, "neg_ndim", HX_DTYPE_F32, -1, S(1));
    EXPECT_NULL(g, n0, t, "input with ndim -1", "neg_ndim");
    t = hx_graph_input(g, "null_shape", HX_DTYPE_F32, 2, NULL);
    EXPECT_NULL(g, n0, t, "input with NULL shape", "null_shape");
    t = hx_graph_constant(g, "null_data", HX_DTYPE_F32, 1, S(3), NULL);
    EXPECT_NULL(g, n0, t, "constant with NULL data", "null_data");
    t = hx_graph_input(g, "x", HX_DTYPE_F32, 2, S(4, 5));
    EXPECT_NULL(g, n0, t, "duplicate input name x", "x");
    t = hx_graph_param(g, "a", HX_DTYPE_F32, 1, S(3), hx_init_zeros());
    EXPECT_NULL(g, n0, t, "duplicate param name a", "a");
    t = hx_graph_constant(g, "b", HX_DTYPE_F32, 1, S(1), (const float[]){1});
    EXPECT_NULL(g, n0, t, "duplicate constant name b", "b");
    t = hx_graph_input(g, NULL, HX_DTYPE_F32, 1, S(3));
    EXPECT_NULL(g, n0, t, "input with NULL name", "");
    hx_tensor *r = USABLE(g, x, "after leaf errors");
    hx_status st = hx_tensor_set_name(r, "a3");
    EXPECT_ST(st, HX_ERR_INVALID_ARGUMENT, "set_name to a duplicate name", "a3");
    report(__LINE__, hx_graph_find(g, "a3") == a3, "duplicate set_name took the name away");
    report(__LINE__, r && strcmp(hx_tensor_name(r), "a3") != 0, "duplicate set_name renamed the tensor");
    report(__LINE__, hx_tensor_set_name(r, "my_relu") == HX_OK, "set_name: %s", hx_last_error());
    report(__LINE__, hx_graph_find(g, "my_relu") == r, "find after set_name");
    t = hx_graph_find(g, "no_such_tensor");
    EXPECT_NULL(g, hx_graph_tensor_count(g), t, "find unknown name", "no_such_tensor");

    /* NULL graph / tensor arguments */
    n0 = hx_graph_tensor_count(g);
    t = hx_graph_input(NULL, "q", HX_DTYPE_F32, 1, S(3));
    EXPECT_NULL(g, n0, t, "input on a NULL graph", "");
    t = hx_relu(NULL, x);
    EXPECT_NULL(g, n0, t, "relu on a NULL graph", "");
    t = hx_add(g, NULL, x);
    EXPECT_NULL(g, n0, t, "add(NULL, x)", "");
    t = hx_add(g, x, NULL);
    EXPECT_NULL(g, n0, t, "add(x, NULL)", "");
    t = hx_matmul(g, NULL, w45, false, false);
    EXPECT_NULL(g, n0, t, "matmul(NULL, w)", "");
    t = hx_concat(g, 2, (hx_tensor *const[]){x, NULL}, 0);
    EXPECT_NULL(g, n0, t, "concat(x, NULL)", "");
    t = hx_layernorm(g, x, NULL, NULL, 1e-5f);
    EXPECT_NULL(g, n0, t, "layernorm without gamma", "");
    report(__LINE__, hx_tensor_grad(NULL) == NULL, "hx_tensor_grad(NULL)");
    EXPECT_ST(hx_tensor_set_name(NULL, "n"), HX_ERR_INVALID_ARGUMENT, "set_name(NULL)", "");
    EXPECT_ST(hx_tensor_set_name(r, NULL), HX_ERR_INVALID_ARGUMENT, "set_name(t, NULL)", "");
    EXPECT_ST(hx_tensor_set_target(NULL, HX_TARGET_CPU), HX_ERR_INVALID_ARGUMENT, "set_target(NULL)", "");
    EXPECT_ST(hx_graph_push_target(NULL, HX_TARGET_CPU), HX_ERR_INVALID_ARGUMENT, "push_target(NULL)", "");
    EXPECT_ST(hx_graph_pop_target(NULL), HX_ERR_INVALID_ARGUMENT, "pop_target(NULL)", "");
    EXPECT_ST(hx_graph_backward(NULL, x), HX_ERR_INVALID_ARGUMENT, "backward(NULL graph)", "");
    EXPECT_ST(hx_graph_backward(g, NULL), HX_ERR_INVALID_ARGUMENT, "backward(NULL loss)", "");
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    EXPECT_ST(hx_graph_apply_optimizer(NULL, NULL, &oc), HX_ERR_INVALID_ARGUMENT, "apply_optimizer(NULL graph)", "");
    hx_session *s = NULL;
    hx_session_config cfg = hx_session_config_default();
    EXPECT_ST(hx_session_create(NULL, &cfg, &s), HX_ERR_INVALID_ARGUMENT, "session_create(NULL graph)", "");
    report(__LINE__, s == NULL, "session_create(NULL graph) set *out");
    EXPECT_ST(hx_session_create(g, &cfg, NULL), HX_ERR_INVALID_ARGUMENT, "session_create(out NULL)", "");
    EXPECT_ST(hx_session_run(NULL, NULL, 0, NULL, 0, 0), HX_ERR_INVALID_ARGUMENT, "session_run(NULL)", "");
    float buf[20];
    EXPECT_ST(hx_session_read(NULL, x, buf, sizeof buf), HX_ERR_INVALID_ARGUMENT, "session_read(NULL)", "");
    EXPECT_ST(hx_session_write(NULL, x, buf, sizeof buf), HX_ERR_INVALID_ARGUMENT, "session_write(NULL)", "");
    EXPECT_ST(hx_session_memory_stats(NULL, NULL), HX_ERR_INVALID_ARGUMENT, "memory_stats(NULL)", "");
    hx_graph_free(NULL);
    hx_session_free(NULL);
    report(__LINE__, hx_graph_tensor_count(g) == n0, "NULL calls changed the graph");

    /* targets */
    n0 = hx_graph_tensor_count(g);
    EXPECT_ST(hx_tensor_set_target(x, HX_TARGET_CPU), HX_ERR_INVALID_ARGUMENT, "set_target on an input", "x");
    report(__LINE__, hx_tensor_target(x) == HX_TARGET_DEFAULT, "set_target on an input changed it");
    hx_tensor *c1 = hx_graph_constant(g, "c1", HX_DTYPE_F32, 1, S(2), (const float[]){1, 2});
    EXPECT_ST(hx_tensor_set_target(c1, HX_TARGET_DEVICE), HX_ERR_INVALID_ARGUMENT, "set_target on a constant", "c1");
    EXPECT_ST(hx_tensor_set_target(r, (hx_target)7), HX_ERR_INVALID_ARGUMENT, "set_target 7", "");
    report(__LINE__, hx_tensor_target(r) == HX_TARGET_DEFAULT, "bad set_target changed it");
    EXPECT_ST(hx_graph_push_target(g, (hx_target)-2), HX_ERR_INVALID_ARGUMENT, "push_target -2", "");
    EXPECT_ST(hx_graph_pop_target(g), HX_ERR_STATE, "pop_target on an empty stack", "");
    int pushed = 0;
    while (pushed < 16 && hx_graph_push_target(g, HX_TARGET_CPU) == HX_OK) pushed++;
    report(__LINE__, pushed == 16, "push_target: only %d of 16 pushes succeeded", pushed);
    EXPECT_ST(hx_graph_push_target(g, HX_TARGET_CPU), HX_ERR_STATE, "push_target 17 deep", "");
    int popped = 0;
    while (popped < 17 && hx_graph_pop_target(g) == HX_OK) popped++;
    report(__LINE__, popped == pushed, "pop_target: %d pops after %d pushes", popped, pushed);
    USABLE(g, x, "after target errors");

    /* the graph still runs: relu(x) after all those errors */
    s = session(g);
    if (s) {
        float xv[20], yv[20];
        for (int i = 0; i < 20; i++) xv[i] = (float)(i - 10);
        hx_feed f = {"x", NULL, xv, sizeof xv};
        hx_fetch out = {"my_relu", NULL, yv, sizeof yv};
        st = hx_session_run(s, &f, 1, &out, 1, 0);
        report(__LINE__, st == HX_OK, "run after build errors: %s", hx_status_name(st));
        bool ok = true;
        for (int i = 0; st == HX_OK && i < 20; i++) ok = ok && yv[i] == (xv[i] > 0 ? xv[i] : 0);
        report(__LINE__, ok, "relu values after build errors");
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* ---- autodiff / optimizer / frozen graph ------------------------------------------------ */

static void test_backward_errors(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, S(2, 3));
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, S(3, 4), hx_init_uniform(-1, 1));
    hx_tensor *unused = hx_graph_param(g, "unused_w", HX_DTYPE_F32, 1, S(3), hx_init_constant(0.5));
    hx_tensor *y = hx_matmul(g, x, w, false, false);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    oc.lr = 0.1f;
    report(__LINE__, x && w && unused && y, "graph: %s", hx_last_error());

    int n0 = hx_graph_tensor_count(g);
    EXPECT_ST(hx_graph_apply_optimizer(g, NULL, &oc), HX_ERR_STATE, "apply_optimizer before backward", "");
    EXPECT_ST(hx_graph_backward(g, y), HX_ERR_SHAPE, "backward of a [2,4] loss", "");
    MSG_DIMS("backward of a [2,4] loss", 2, 2, 4);
    report(__LINE__, hx_graph_tensor_count(g) == n0, "failed backward added tensors");
    hx_tensor *loss = hx_reduce_sum(g, y, 0, NULL, false);
    report(__LINE__, loss != NULL, "reduce_sum: %s", hx_last_error());
    report(__LINE__, hx_graph_backward(g, loss) == HX_OK, "backward: %s", hx_last_error());
    n0 = hx_graph_tensor_count(g);
    EXPECT_ST(hx_graph_backward(g, loss), HX_ERR_STATE, "backward twice", "");
    report(__LINE__, hx_graph_tensor_count(g) == n0, "second backward added tensors");
    report(__LINE__, hx_tensor_grad(w) != NULL, "grad of w: %s", hx_last_error());
    hx_tensor *t = hx_tensor_grad(unused);
    EXPECT_NULL(g, n0, t, "grad of a param that does not reach the loss", "unused_w");
    EXPECT_ST(hx_graph_apply_optimizer(g, unused, &oc), HX_ERR_NOT_FOUND, "apply_optimizer on a param without gradient", "unused_w");
    EXPECT_ST(hx_graph_apply_optimizer(g, x, &oc), HX_ERR_INVALID_ARGUMENT, "apply_optimizer on an input", "x");
    EXPECT_ST(hx_graph_apply_optimizer(g, w, NULL), HX_ERR_INVALID_ARGUMENT, "apply_optimizer NULL config", "");
    hx_optimizer_config bad = oc;
    bad.kind = (hx_optimizer_kind)9;
    EXPECT_ST(hx_graph_apply_optimizer(g, w, &bad), HX_ERR_INVALID_ARGUMENT, "apply_optimizer kind 9", "");
    report(__LINE__, hx_graph_tensor_count(g) == n0, "failed apply_optimizer added tensors");
    report(__LINE__, hx_graph_apply_optimizer(g, NULL, &oc) == HX_OK, "apply_optimizer(NULL): %s",
           hx_last_error());

    /* invalid session configs */
    hx_session *s = NULL;
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = -1;
    EXPECT_ST(hx_session_create(g, &cfg, &s), HX_ERR_INVALID_ARGUMENT, "session n_threads -1", "");
    cfg = hx_session_config_default();
    cfg.accelerator = (hx_accelerator)77;
    EXPECT_ST(hx_session_create(g, &cfg, &s), HX_ERR_INVALID_ARGUMENT, "session accelerator 77", "");
    report(__LINE__, s == NULL, "failed session_create set *out");

    s = session(g);
    if (!s) {
        hx_graph_free(g);
        return;
    }
    /* the graph is frozen while the session exists */
    n0 = hx_graph_tensor_count(g);
    t = hx_relu(g, x);
    EXPECT_NULL(g, n0, t, "relu on a frozen graph", "");
    t = hx_graph_input(g, "late", HX_DTYPE_F32, 1, S(3));
    EXPECT_NULL(g, n0, t, "input on a frozen graph", "");
    t = hx_graph_param(g, "late_p", HX_DTYPE_F32, 1, S(3), hx_init_zeros());
    EXPECT_NULL(g, n0, t, "param on a frozen graph", "");
    EXPECT_ST(hx_graph_apply_optimizer(g, w, &oc), HX_ERR_STATE, "apply_optimizer on a frozen graph", "");
    report(__LINE__, hx_graph_tensor_count(g) == n0, "frozen graph changed");

    /* a training step still works; apply_optimizer(NULL) skipped unused_w */
    float xv[6] = {1, -2, 0.5f, 3, 0.25f, -1}, w0[12], w1[12], u[3];
    report(__LINE__, hx_session_read(s, w, w0, sizeof w0) == HX_OK, "read w: %s", hx_last_error());
    hx_feed f = {"x", NULL, xv, sizeof xv};
    float lv;
    hx_fetch fl = {NULL, loss, &lv, sizeof lv};
    hx_status st = hx_session_run(s, &f, 1, &fl, 1, HX_RUN_TRAIN);
    report(__LINE__, st == HX_OK, "train step on a frozen graph: %s", hx_last_error());
    report(__LINE__, hx_session_read(s, w, w1, sizeof w1) == HX_OK, "read w: %s", hx_last_error());
    report(__LINE__, hx_session_read(s, unused, u, sizeof u) == HX_OK, "read unused_w: %s", hx_last_error());
    /* d loss / d w[k][j] = sum_i x[i][k] */
    bool ok = true;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 4; j++)
            ok = ok && fabsf(w1[k * 4 + j] - (w0[k * 4 + j] - 0.1f * (xv[k] + xv[3 + k]))) < 1e-5f;
    report(__LINE__, st != HX_OK || ok, "SGD step on w");
    report(__LINE__, u[0] == 0.5f && u[1] == 0.5f && u[2] == 0.5f, "unused_w changed: %g %g %g", u[0],
           u[1], u[2]);
    hx_session_free(s);

    /* freed: the graph takes ops again */
    n0 = hx_graph_tensor_count(g);
    t = hx_relu(g, x);
    report(__LINE__, t != NULL && hx_graph_tensor_count(g) == n0 + 1,
           "graph not usable after its session was freed: %s", hx_last_error());
    hx_graph_free(g);
}

/* ---- run-time errors ------------------------------------------------------------------- */

static void test_run_errors(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, S(4, 3));
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I32, 1, S(5));
    hx_tensor *ids64 = hx_graph_input(g, "ids64", HX_DTYPE_I64, 1, S(2));
    hx_tensor *lbl = hx_graph_input(g, "lbl", HX_DTYPE_I32, 1, S(4));
    hx_tensor *table = hx_graph_param(g, "table", HX_DTYPE_F32, 2, S(6, 3), hx_init_uniform(-1, 1));
    hx_tensor *k = hx_graph_constant(g, "k", HX_DTYPE_F32, 1, S(2), (const float[]){3, 4});
    hx_tensor *y = hx_relu(g, x);
    hx_tensor *gth = hx_gather(g, table, ids);
    hx_tensor *gth64 = hx_gather(g, table, ids64);
    hx_tensor *logits = hx_matmul(g, x, hx_permute(g, table, (const int[]){1, 0}), false, false);
    hx_tensor *ce = hx_cross_entropy(g, logits, lbl);
    report(__LINE__, x && ids && ids64 && lbl && table && k && y && gth && gth64 && logits && ce,
           "graph: %s", hx_last_error());
    hx_graph *g2 = hx_graph_create();
    hx_tensor *other = hx_graph_input(g2, "x", HX_DTYPE_F32, 2, S(4, 3));
    hx_tensor *other_p = hx_graph_param(g2, "table", HX_DTYPE_F32, 2, S(6, 3), hx_init_zeros());
    hx_session *s = session(g);
    if (!s) goto out;

    float xv[12], yv[12], tv[18], gv[15], g64[6], lossv;
    for (int i = 0; i < 12; i++) xv[i] = (float)(i % 5) - 2.0f;
    const hx_feed fx = {"x", NULL, xv, sizeof xv};
    const hx_fetch fy = {NULL, y, yv, sizeof yv};
#define VALID_RUN(what)                                                                        \
    do {                                                                                       \
        memset(yv, 0, sizeof yv);                                                              \
        hx_status st_ = hx_session_run(s, &fx, 1, &fy, 1, 0);                                  \
        report(__LINE__, st_ == HX_OK && yv[0] == 0 && yv[4] == 2 && yv[8] == 1,                          \
               "%s: valid run afterwards: %s", what, hx_status_name(st_));                     \
    } while (0)
    VALID_RUN("first run");

    hx_feed fbad = {"nosuch", NULL, xv, sizeof xv};
    hx_feed two[2] = {fx, fbad};
    EXPECT_ST(hx_session_run(s, two, 2, &fy, 1, 0), HX_ERR_NOT_FOUND, "feed of an unknown name", "nosuch");
    VALID_RUN("unknown feed");
    hx_feed fshort = {"x", NULL, xv, sizeof xv - 4};
    EXPECT_ST(hx_session_run(s, &fshort, 1, &fy, 1, 0), HX_ERR_SHAPE, "feed with 44 bytes for 48", "x");
    MSG_DIMS("feed with 44 bytes for 48", 1, 44);
    VALID_RUN("short feed");
    EXPECT_ST(hx_session_run(s, NULL, 0, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "missing feed", "x");
    VALID_RUN("missing feed");
    hx_feed fnull = {"x", NULL, NULL, sizeof xv};
    EXPECT_ST(hx_session_run(s, &fnull, 1, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "feed with NULL data", "x");
    EXPECT_ST(hx_session_run(s, NULL, 1, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "NULL feeds, n_feeds 1", "");
    EXPECT_ST(hx_session_run(s, &fx, -1, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "n_feeds -1", "");
    hx_feed fother = {NULL, other, xv, sizeof xv};
    EXPECT_ST(hx_session_run(s, &fother, 1, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "feed of another graph's tensor", "");
    hx_feed twice[2] = {fx, fx};
    EXPECT_ST(hx_session_run(s, twice, 2, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "x fed twice", "x");
    hx_feed finter = {NULL, y, xv, sizeof xv};
    hx_feed fxi[2] = {fx, finter};
    EXPECT_ST(hx_session_run(s, fxi, 2, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "feed of an intermediate", "");
    EXPECT_ST(hx_session_run(s, &fx, 1, &fy, 1, 0x80), HX_ERR_INVALID_ARGUMENT, "unknown run flag 0x80", "");
    hx_feed fnoname = {NULL, NULL, xv, sizeof xv};
    EXPECT_ST(hx_session_run(s, &fnoname, 1, &fy, 1, 0), HX_ERR_INVALID_ARGUMENT, "feed without name or tensor", "");
    VALID_RUN("bad feeds");

    hx_fetch fo = {NULL, other, yv, sizeof yv};
    EXPECT_ST(hx_session_run(s, &fx, 1, &fo, 1, 0), HX_ERR_INVALID_ARGUMENT, "fetch of another graph's tensor", "");
    hx_fetch fn = {"nothing_here", NULL, yv, sizeof yv};
    EXPECT_ST(hx_session_run(s, &fx, 1, &fn, 1, 0), HX_ERR_NOT_FOUND, "fetch of an unknown name", "nothing_here");
    hx_fetch fb = {NULL, y, yv, sizeof yv + 4};
    EXPECT_ST(hx_session_run(s, &fx, 1, &fb, 1, 0), HX_ERR_SHAPE, "fetch with 52 bytes for 48", "");
    hx_fetch fnd = {NULL, y, NULL, sizeof yv};
    EXPECT_ST(hx_session_run(s, &fx, 1, &fnd, 1, 0), HX_ERR_INVALID_ARGUMENT, "fetch with NULL data", "");
    EXPECT_ST(hx_session_run(s, &fx, 1, NULL, 1, 0), HX_ERR_INVALID_ARGUMENT, "NULL fetches, n_fetches 1", "");
    VALID_RUN("bad fetches");

    /* gather id out of range: HX_ERR_INDEX naming the id */
    int32_t bad_ids[5] = {0, 2, 17, 1, 5}, good_ids[5] = {5, 0, 0, 3, 1};
    hx_feed fid = {"ids", NULL, bad_ids, sizeof bad_ids};
    hx_fetch fg = {NULL, gth, gv, sizeof gv};
    EXPECT_ST(hx_session_run(s, &fid, 1, &fg, 1, 0), HX_ERR_INDEX, "gather id 17 of 6", "17");
    MSG_HAS("gather id 17 of 6", "gather");
    bad_ids[2] = -1;
    EXPECT_ST(hx_session_run(s, &fid, 1, &fg, 1, 0), HX_ERR_INDEX, "gather id -1", "-1");
    int64_t bad64[2] = {1, 6000000000LL};
    hx_feed fid64 = {"ids64", NULL, bad64, sizeof bad64};
    hx_fetch fg64 = {NULL, gth64, g64, sizeof g64};
    EXPECT_ST(hx_session_run(s, &fid64, 1, &fg64, 1, 0), HX_ERR_INDEX, "gather i64 id 6000000000", "6000000000");
    fid.data = good_ids;
    hx_status st = hx_session_run(s, &fid, 1, &fg, 1, 0);
    report(__LINE__, st == HX_OK, "gather with valid ids after an index error: %s", hx_last_error());
    report(__LINE__, hx_session_read(s, table, tv, sizeof tv) == HX_OK, "read table: %s", hx_last_error());
    bool ok = true;
    for (int i = 0; st == HX_OK && i < 5; i++)
        for (int j = 0; j < 3; j++) ok = ok && gv[i * 3 + j] == tv[good_ids[i] * 3 + j];
    report(__LINE__, ok, "gather values after an index error");

    /* cross-entropy label out of range */
    int32_t bad_lbl[4] = {0, 1, 6, 2}, good_lbl[4] = {0, 5, 3, 2};
    hx_feed fce[2] = {fx, {"lbl", NULL, bad_lbl, sizeof bad_lbl}};
    hx_fetch fl = {NULL, ce, &lossv, sizeof lossv};
    EXPECT_ST(hx_session_run(s, fce, 2, &fl, 1, 0), HX_ERR_INDEX, "cross_entropy label 6 of 6 classes", "6");
    bad_lbl[2] = -3;
    EXPECT_ST(hx_session_run(s, fce, 2, &fl, 1, 0), HX_ERR_INDEX, "cross_entropy label -3", "-3");
    fce[1].data = good_lbl;
    st = hx_session_run(s, fce, 2, &fl, 1, 0);
    report(__LINE__, st == HX_OK && isfinite(lossv) && lossv > 0,
           "cross_entropy with valid labels after an index error: %s", hx_last_error());

    /* read / write */
    EXPECT_ST(hx_session_read(s, table, tv, sizeof tv - 4), HX_ERR_SHAPE, "read of table with 68 bytes for 72", "table");
    float wbuf[18];
    for (int i = 0; i < 18; i++) wbuf[i] = 100.0f + i;
    EXPECT_ST(hx_session_write(s, table, wbuf, sizeof wbuf + 4), HX_ERR_SHAPE, "write of table with 76 bytes for 72", "table");
    float tv2[18];
    report(__LINE__, hx_session_read(s, table, tv2, sizeof tv2) == HX_OK && memcmp(tv, tv2, sizeof tv) == 0,
           "failed write changed the table");
    EXPECT_ST(hx_session_read(s, table, NULL, sizeof tv), HX_ERR_INVALID_ARGUMENT, "read into NULL", "");
    EXPECT_ST(hx_session_read(s, NULL, tv, sizeof tv), HX_ERR_INVALID_ARGUMENT, "read of NULL tensor", "");
    EXPECT_ST(hx_session_read(s, other_p, tv, sizeof tv), HX_ERR_INVALID_ARGUMENT, "read of another graph's param", "");
    EXPECT_ST(hx_session_read(s, x, yv, sizeof yv), HX_ERR_INVALID_ARGUMENT, "read of an input", "x");
    EXPECT_ST(hx_session_write(s, y, yv, sizeof yv), HX_ERR_INVALID_ARGUMENT, "write of an intermediate", "");
    float kv[2] = {0};
    report(__LINE__, hx_session_read(s, k, kv, sizeof kv) == HX_OK && kv[0] == 3 && kv[1] == 4,
           "read of a constant: %s", hx_last_error());
    report(__LINE__, hx_session_write(s, table, wbuf, sizeof wbuf) == HX_OK, "write: %s", hx_last_error());
    report(__LINE__, hx_session_read(s, table, tv2, sizeof tv2) == HX_OK && memcmp(wbuf, tv2, sizeof tv2) == 0,
           "read back after write");
    VALID_RUN("read/write errors");
    hx_session_free(s);
out:
    hx_graph_free(g);
    hx_graph_free(g2);
#undef VALID_RUN
}

/* A training step that fails at run time (bad id) changes no parameter and
 * does not count as a step; the next valid step does. */
static void test_failed_train_step(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 1, S(3));
    hx_tensor *table = hx_graph_param(g, "emb", HX_DTYPE_F32, 2, S(5, 2), hx_init_uniform(-1, 1));
    hx_tensor *loss = hx_reduce_sum(g, hx_gather(g, table, ids), 0, NULL, false);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    oc.lr = 0.5f;
    report(__LINE__, loss && hx_graph_backward(g, loss) == HX_OK &&
                         hx_graph_apply_optimizer(g, NULL, &oc) == HX_OK,
           "train graph: %s", hx_last_error());
    hx_session *s = session(g);
    if (s) {
        float t0[10], t1[10], lv;
        int64_t bad[3] = {0, 9, 1}, good[3] = {0, 4, 0};
        hx_feed f = {"ids", NULL, bad, sizeof bad};
        hx_fetch fl = {NULL, loss, &lv, sizeof lv};
        hx_session_read(s, table, t0, sizeof t0);
        EXPECT_ST(hx_session_run(s, &f, 1, &fl, 1, HX_RUN_TRAIN), HX_ERR_INDEX, "train step with id 9 of 5", "9");
        hx_session_read(s, table, t1, sizeof t1);
        report(__LINE__, memcmp(t0, t1, sizeof t0) == 0, "failed train step changed the parameter");
        report(__LINE__, hx_session_step(s) == 0, "failed train step counted: step %lld",
               (long long)hx_session_step(s));
        f.data = good;
        report(__LINE__, hx_session_run(s, &f, 1, &fl, 1, HX_RUN_TRAIN) == HX_OK, "valid train step: %s",
               hx_last_error());
        hx_session_read(s, table, t1, sizeof t1);
        report(__LINE__, hx_session_step(s) == 1, "step after one good step: %lld", (long long)hx_session_step(s));
        /* row 0 used twice: -0.5*2; row 4 once: -0.5; others unchanged */
        bool ok = true;
        for (int i = 0; i < 10; i++) {
            float d = i / 2 == 0 ? -1.0f : i / 2 == 4 ? -0.5f : 0.0f;
            ok = ok && fabsf(t1[i] - (t0[i] + d)) < 1e-6f;
        }
        report(__LINE__, ok, "SGD on gathered rows after a failed step");
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* ---- messages and status names ------------------------------------------------------------ */

static void *thread_msg(void *arg)
{
    const char **out = arg;
    out[0] = hx_last_error()[0] ? "not empty" : "";
    hx_graph *g = hx_graph_create();
    hx_graph_input(g, "thread_only_name", (hx_dtype)55, 1, S(1));
    out[1] = strstr(hx_last_error(), "thread_only_name") ? "ok" : "missing";
    hx_graph_free(g);
    return NULL;
}

static void test_messages(void)
{
    report(__LINE__, hx_status_name(HX_OK) && strcmp(hx_status_name(HX_ERR_SHAPE), "HX_ERR_SHAPE") == 0,
           "hx_status_name(HX_ERR_SHAPE) = %s", hx_status_name(HX_ERR_SHAPE));
    report(__LINE__, strcmp(hx_status_name(HX_ERR_INDEX), "HX_ERR_INDEX") == 0, "hx_status_name(INDEX)");
    for (int i = HX_OK; i <= HX_ERR_INTERNAL; i++)
        report(__LINE__, hx_status_name((hx_status)i) && hx_status_name((hx_status)i)[0], "status %d has no name", i);
    /* the message is thread-local */
    hx_graph *g = hx_graph_create();
    hx_tensor *a = hx_graph_input(g, "a", HX_DTYPE_F32, 2, S(2, 3));
    report(__LINE__, hx_matmul(g, a, a, false, false) == NULL, "matmul [2,3]x[2,3]");
    MSG_HAS("matmul [2,3]x[2,3]", "matmul");
    const char *res[2] = {"unset", "unset"};
    pthread_t th;
    if (pthread_create(&th, NULL, thread_msg, res) == 0) {
        pthread_join(th, NULL);
        report(__LINE__, res[0][0] == 0, "hx_last_error in a new thread is %s", res[0]);
        report(__LINE__, strcmp(res[1], "ok") == 0, "error message in the thread: %s", res[1]);
        MSG_HAS("main thread's message after a failure on another thread", "matmul");
    }
    hx_graph_free(g);
}

static void test_last_error_before_any_failure(void)
{
    report(__LINE__, hx_last_error() && hx_last_error()[0] == 0, "hx_last_error before any failure");
    report(__LINE__, hx_last_status() == HX_OK, "hx_last_status before any failure: %s",
           hx_status_name(hx_last_status()));
}

static void *thread_status(void *arg)
{
    hx_status *out = arg;
    out[0] = hx_last_status();
    hx_graph *g = hx_graph_create();
    hx_graph_input(g, "x", HX_DTYPE_F32, 1, S(-1));
    out[1] = hx_last_status();
    hx_graph_free(g);
    return NULL;
}

/* hx_last_status: the status of the failure hx_last_error describes, for the
 * calls that return NULL; unchanged by successful calls; per thread. */
static void test_last_status(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *a = hx_graph_input(g, "a", HX_DTYPE_F32, 2, S(2, 3));
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_F32, 1, S(2));
    int n0 = hx_graph_tensor_count(g);
    EXPECT_NULL_ST(g, n0, hx_matmul(g, a, a, false, false), HX_ERR_SHAPE, "matmul [2,3]x[2,3]",
                   "matmul");
    EXPECT_NULL_ST(g, n0, hx_gather(g, a, ids), HX_ERR_DTYPE, "gather with f32 ids", "ids");
    EXPECT_NULL_ST(g, n0, hx_graph_find(g, "nothing"), HX_ERR_NOT_FOUND, "find", "nothing");
    EXPECT_NULL_ST(g, n0, hx_graph_input(g, "a", HX_DTYPE_F32, 1, S(1)), HX_ERR_INVALID_ARGUMENT,
                   "a name taken", "a");
    EXPECT_NULL_ST(g, n0, hx_relu(g, NULL), HX_ERR_INVALID_ARGUMENT, "relu of NULL", "relu");
    /* a success leaves it */
    report(__LINE__, hx_relu(g, a) != NULL, "relu: %s", hx_last_error());
    report(__LINE__, hx_last_status() == HX_ERR_INVALID_ARGUMENT, "after a success: %s",
           hx_status_name(hx_last_status()));
    /* a status-returning call sets it too */
    EXPECT_ST(hx_graph_pop_target(g), HX_ERR_STATE, "pop with an empty stack", "pop");
    hx_status res[2] = {HX_ERR_INTERNAL, HX_ERR_INTERNAL};
    pthread_t th;
    if (pthread_create(&th, NULL, thread_status, res) == 0) {
        pthread_join(th, NULL);
        report(__LINE__, res[0] == HX_OK, "a new thread's status: %s", hx_status_name(res[0]));
        report(__LINE__, res[1] == HX_ERR_SHAPE, "the thread's own failure: %s",
               hx_status_name(res[1]));
        report(__LINE__, hx_last_status() == HX_ERR_STATE, "this thread's after the other's: %s",
               hx_status_name(hx_last_status()));
    }
    hx_graph_free(g);
}

/* ---- extreme shapes and losses ----------------------------------------------------- */

/* Element counts past the limit (2^56) are refused where the shape is made:
 * by a leaf, an op's output, or a reshape, never wrapped or overflowed. */
static void test_shape_overflow(void)
{
    hx_graph *g = hx_graph_create();
    int n0 = hx_graph_tensor_count(g);
    hx_tensor *t = hx_graph_input(g, "wide", HX_DTYPE_F32, 3, S(2, INT64_MAX, 1));
    EXPECT_NULL(g, n0, t, "input {2, INT64_MAX, 1}", "wide", "elements");
    t = hx_graph_param(g, "square", HX_DTYPE_F32, 2, S((int64_t)1 << 32, (int64_t)1 << 32), hx_init_zeros());
    EXPECT_NULL(g, n0, t, "param {2^32, 2^32}", "square", "elements");
    t = hx_graph_param(g, "wraps", HX_DTYPE_F32, 2, S((int64_t)1 << 62, 4), hx_init_zeros());
    EXPECT_NULL(g, n0, t, "param {2^62, 4} (wraps to 0)", "wraps", "elements");
    t = hx_graph_input(g, "limit", HX_DTYPE_F32, 2, S((int64_t)1 << 28, ((int64_t)1 << 28) + 1));
    EXPECT_NULL(g, n0, t, "input of 2^56 + 2^28 elements", "limit", "elements");

    /* an op whose output would be too big: [2^30, 1] x [1, 2^30] */
    hx_tensor *a = hx_graph_input(g, "a", HX_DTYPE_F32, 2, S((int64_t)1 << 30, 1));
    hx_tensor *b = hx_graph_input(g, "b", HX_DTYPE_F32, 2, S(1, (int64_t)1 << 30));
    report(__LINE__, a && b, "inputs of 2^30 elements: %s", hx_last_error());
    n0 = hx_graph_tensor_count(g);
    t = hx_matmul(g, a, b, false, false);
    EXPECT_NULL(g, n0, t, "matmul to 2^60 elements", "elements");

    /* reshape: the known dims' product must not overflow into a match */
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, S(4));
    n0 = hx_graph_tensor_count(g);
    t = hx_reshape(g, x, 3, S((int64_t)1 << 62, 4, 4)); /* 2^66 wraps to 0 */
    EXPECT_NULL(g, n0, t, "reshape to {2^62, 4, 4}", "x");
    t = hx_reshape(g, x, 3, S(INT64_MAX, INT64_MAX, -1));
    EXPECT_NULL(g, n0, t, "reshape to {INT64_MAX, INT64_MAX, -1}", "x");
    t = hx_reshape(g, x, 2, S(2, 2));
    report(__LINE__, t != NULL, "reshape to {2, 2}: %s", hx_last_error());
    USABLE(g, x, "after the shape errors");
    hx_graph_free(g);
}

/* A loss must be computed by an op: a parameter (or any leaf) given as the
 * loss is refused with a message, and the graph stays usable. */
static void test_loss_is_a_leaf(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 1, S(1), hx_init_uniform(-1, 1));
    hx_tensor *c = hx_graph_constant(g, "c", HX_DTYPE_F32, 1, S(1), (const float[]){2.5f});
    int n0 = hx_graph_tensor_count(g);
    EXPECT_ST(hx_graph_backward(g, w), HX_ERR_INVALID_ARGUMENT, "backward of a parameter", "'w'", "parameter");
    EXPECT_ST(hx_graph_backward(g, c), HX_ERR_INVALID_ARGUMENT, "backward of a constant", "'c'");
    report(__LINE__, hx_graph_tensor_count(g) == n0, "failed backward added tensors");
    /* the same parameter through an op trains */
    hx_tensor *loss = hx_mul(g, w, c);
    report(__LINE__, hx_graph_backward(g, loss) == HX_OK, "backward of w * c: %s", hx_last_error());
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    report(__LINE__, hx_graph_apply_optimizer(g, NULL, &oc) == HX_OK, "optimizer: %s", hx_last_error());
    hx_session *s = session(g);
    if (s) {
        float w0, w1, lv;
        hx_fetch fl = {NULL, loss, &lv, sizeof lv};
        OK(hx_session_read(s, w, &w0, sizeof w0));
        OK(hx_session_run(s, NULL, 0, &fl, 1, HX_RUN_TRAIN));
        OK(hx_session_read(s, w, &w1, sizeof w1));
        report(__LINE__, fabsf(w1 - (w0 - (float)oc.lr * 2.5f)) < 1e-6f, "w %g -> %g", w0, w1);
        hx_session_free(s);
    }
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"last_error_before_any_failure", test_last_error_before_any_failure},
    {"messages", test_messages},
    {"last_status", test_last_status},
    {"build_errors", test_build_errors},
    {"backward_errors", test_backward_errors},
    {"run_errors", test_run_errors},
    {"failed_train_step", test_failed_train_step},
    {"shape_overflow", test_shape_overflow},
    {"loss_is_a_leaf", test_loss_is_a_leaf},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "errors", cases, TEST_COUNT(cases));
}
