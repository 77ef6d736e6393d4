/* Lowering (graph.h): which nodes a session runs as one kernel reading
 * other sources. On the device: a convolution (im2col + conv_gemm,
 * graph/ops_conv.c) and its two gradients as cuDNN calls of x, w and dy,
 * where the device backend has those kernels. On the host (fusion, unless
 * the session turns it off): a matmul, its bias_add and an activation of
 * that as one GEMM with an epilogue (kernels/cpu/gemm.c); a layernorm of an
 * add as one pass that writes the sum too (kernels/cpu/rows.c); in
 * training, a gelu that keeps its derivative for its gradient, which then
 * multiplies (kernels/cpu/elementwise.c); a matmul reading or writing
 * through attention's head-swap permutes (lower_permuted.c). The graph
 * is not changed; the answer is a per-node table the session's plans read
 * through. */
#include "graph/graph.h"

#include <stdlib.h>

typedef struct rule {
    hx_op op;         /* the node lowered */
    hx_op via_op[2];  /* its source 0 (then that one's source 0) must be the
                         output of these ops (HX_OP_COUNT: no second) */
    int via;          /* device rules: the source that is via_op[0]'s output */
    hx_lower_kind kind;
    int8_t n_read;
    int8_t path[HX_LOWER_MAX_READ][3];
    bool writes_inner; /* the value inside (via_op[0]'s) is still read by others: the
                          kernel writes it, and its node runs nothing */
} rule;

#define NO HX_OP_COUNT
static const rule rules[] = {
    {HX_OP_CONV_GEMM, {HX_OP_IM2COL, NO}, 0, HX_LOWER_CONV2D, 2,
     {{0, 0, -1}, {1, -1, -1}}, false},
    {HX_OP_COL2IM, {HX_OP_CONV_GEMM_BACKWARD_COLS, NO}, 0, HX_LOWER_CONV2D_BACKWARD_DATA, 2,
     {{0, 0, -1}, {0, 1, -1}}, false},
    {HX_OP_CONV_GEMM_BACKWARD_W, {HX_OP_IM2COL, NO}, 1, HX_LOWER_CONV2D_BACKWARD_FILTER, 2,
     {{0, -1, -1}, {1, 0, -1}}, false},
    /* host: act(bias_add(matmul(x, w), b)) reads x, w, b */
    {HX_OP_RELU, {HX_OP_BIAS_ADD, HX_OP_MATMUL}, 0, HX_LOWER_MATMUL_BIAS_RELU, 3,
     {{0, 0, 0}, {0, 0, 1}, {0, 1, -1}}, false},
    {HX_OP_GELU, {HX_OP_BIAS_ADD, HX_OP_MATMUL}, 0, HX_LOWER_MATMUL_BIAS_GELU, 3,
     {{0, 0, 0}, {0, 0, 1}, {0, 1, -1}}, false},
    {HX_OP_GELU_ERF, {HX_OP_BIAS_ADD, HX_OP_MATMUL}, 0, HX_LOWER_MATMUL_BIAS_GELU_ERF, 3,
     {{0, 0, 0}, {0, 0, 1}, {0, 1, -1}}, false},
    /* host: bias_add(matmul(x, w), b) */
    {HX_OP_BIAS_ADD, {HX_OP_MATMUL, NO}, 0, HX_LOWER_MATMUL_BIAS, 3,
     {{0, 0, -1}, {0, 1, -1}, {1, -1, -1}}, false},
    /* host: layernorm(s = add(x, r), gamma, beta) reads x, r, gamma, beta, writes s */
    {HX_OP_LAYERNORM, {HX_OP_ADD, NO}, 0, HX_LOWER_ADD_LAYERNORM, 5,
     {{0, 0, -1}, {0, 1, -1}, {1, -1, -1}, {2, -1, -1}, {0, -1, -1}}, true},
};
enum { N_RULES = sizeof rules / sizeof rules[0] };

/* The nodes of t's group under rule r, outermost first: t, then the
 * values inside it (its source 0, then that one's); returns how many (2 or
 * 3), 0 when t's sources are not r's ops. */
static int group_of(const rule *r, const hx_tensor *t, bool recompute, const hx_tensor *in[3])
{
    if (t->op != r->op) return 0;
    in[0] = t;
    int n = 1;
    for (int h = 0; h < 2 && r->via_op[h] != NO; h++) {
        const hx_tensor *s = hx__src(in[n - 1], h ? 0 : r->via, recompute);
        if (s->op != r->via_op[h]) return 0;
        in[n++] = s;
    }
    return n;
}

int *hx__lower_readers(const hx_graph *g, bool recompute)
{
    int *readers = calloc((size_t)g->n + 1, sizeof *readers);
    for (int i = 0; readers && i < g->n; i++)
        for (int j = 0; j < g->tensors[i]->n_src; j++)
            readers[hx__src(g->tensors[i], j, recompute)->id]++;
    return readers;
}

/* Whether node t reads `of`, directly or through other nodes (as plans
 * read sources before lowering: hx__src with the recompute switch; a
 * lowering only shortens such paths). Creation order is topological, so
 * only nodes made after `of` are searched, each once. Out of memory: false,
 * which only forgoes a fusion. */
static bool depends_on(const hx_tensor *t, const hx_tensor *of, bool recompute)
{
    int span = t->id - of->id; /* nodes of, ..., t */
    if (span <= 0) return false;
    bool *seen = calloc((size_t)span + 1, sizeof *seen);
    const hx_tensor **stack = malloc(((size_t)span + 1) * sizeof *stack);
    bool found = false;
    int top = 0;
    if (seen && stack) {
        stack[top++] = t;
        seen[span] = true;
    }
    while (top && !found) {
        const hx_tensor *u = stack[--top];
        for (int j = 0; j < u->n_src && !found; j++) {
            const hx_tensor *s = hx__src(u, j, recompute);
            found = s == of;
            if (!found && s->id > of->id && s->id < t->id && !seen[s->id - of->id]) {
                seen[s->id - of->id] = true;
                stack[top++] = s;
            }
        }
    }
    free(seen);
    free(stack);
    return found;
}
/* Why the sum `add` that layernorm `ln` reads cannot be written by ln's
 * fused kernel, or NULL: it must add two tensors of its own shape, and
 * every other node reading it must be on the host and depend on ln's
 * output (so it runs after ln's kernel wrote the sum). */
static const char *sum_why_not(const hx_tensor *ln, const hx_tensor *add, const hx_target *target,
                               bool recompute)
{
    for (int k = 0; k < 2; k++) {
        const hx_tensor *x = add->src[k];
        bool same = x->ndim == add->ndim;
        for (int d = 0; same && d < add->ndim; d++) same = x->shape[d] == add->shape[d];
        if (!same) return "the add broadcasts (the fused kernel adds two tensors of one shape)";
    }
    const hx_graph *g = ln->graph;
    for (int i = add->id + 1; i < g->n; i++) {
        const hx_tensor *u = g->tensors[i];
        if (u == ln) continue;
        bool reads = false;
        for (int j = 0; j < u->n_src && !reads; j++) reads = hx__src(u, j, recompute) == add;
        if (!reads) continue;
        if (target[i] != HX_TARGET_CPU) return "the sum is read on the device too";
        if (!depends_on(u, ln, recompute))
            return "another node reading the sum does not depend on the layernorm (it could "
                   "run before the fused kernel wrote the sum)";
    }
    return NULL;
}

/* Why host group `in` (n nodes) of rule r cannot be fused, or NULL. */
static const char *host_why_not(const rule *r, const hx_tensor *const *in, int n,
                                const hx_target *target, const int *readers,
                                hx_has_kernel_fn has_kernel, void *ctx, bool recompute)
{
    for (int k = 0; k < n; k++)
        if (target[in[k]->id] != HX_TARGET_CPU) return "a node of the group is on the device";
    const char *why = r->writes_inner ? sum_why_not(in[0], in[1], target, recompute) : NULL;
    if (why) return why;
    for (int k = 1; k < n && !r->writes_inner; k++)
        if (readers[in[k]->id] != 1)
            return k + 1 < n ? "its input (the bias_add) is read by other nodes too (in "
                               "training the activation's gradient reads it)"
                             : "the matmul's product is read by other nodes too";
    if (!has_kernel(ctx, HX_TARGET_CPU, HX_LOWERED_OP(r->kind), in[0]->dtype) ||
        (r->writes_inner &&
         !has_kernel(ctx, HX_TARGET_CPU, HX_LOWERED_OP(HX_LOWER_WRITTEN_BY_READER), in[1]->dtype)))
        return "no fused kernel for this dtype";
    return NULL;
}

static void set(hx_lowered *low, const hx_tensor *t, const rule *r)
{
    low[t->id].kind = (int8_t)r->kind;
    low[t->id].n_read = r->n_read;
    for (int j = 0; j < HX_LOWER_MAX_READ; j++)
        for (int k = 0; k < 3; k++) low[t->id].path[j][k] = j < r->n_read ? r->path[j][k] : -1;
}

/* t runs nothing: its reader's kernel writes it; it reads its own sources
 * (so it runs after them, and its output's lifetime starts with them). */
static void set_written(hx_lowered *low, const hx_tensor *t)
{
    low[t->id].kind = (int8_t)HX_LOWER_WRITTEN_BY_READER;
    low[t->id].n_read = (int8_t)t->n_src;
    for (int j = 0; j < HX_LOWER_MAX_READ; j++)
        for (int k = 0; k < 3; k++) low[t->id].path[j][k] = (int8_t)(k || j >= t->n_src ? -1 : j);
}

/* The gradient of host gelu y that may read its saved derivative instead
 * of its input, or NULL: a gelu_backward on the host reading y as its
 * third source (the rule in op_table.c builds it so), both with kernels
 * for it. Out of memory never happens here. */
static const hx_tensor *saving_gelu_backward(const hx_graph *g, const hx_tensor *y,
                                             const hx_target *target, hx_has_kernel_fn has_kernel,
                                             void *ctx, bool recompute)
{
    if (y->op != HX_OP_GELU || target[y->id] != HX_TARGET_CPU ||
        !has_kernel(ctx, HX_TARGET_CPU, HX_LOWERED_OP(HX_LOWER_GELU_SAVE), y->dtype) ||
        !has_kernel(ctx, HX_TARGET_CPU, HX_LOWERED_OP(HX_LOWER_GELU_BACKWARD_SAVED), y->dtype))
        return NULL;
    for (int i = y->id + 1; i < g->n; i++) {
        const hx_tensor *b = g->tensors[i];
        if (b->op == HX_OP_GELU_BACKWARD && b->n_src == 3 && hx__src(b, 2, recompute) == y)
            return target[i] == HX_TARGET_CPU ? b : NULL;
    }
    return NULL;
}

/* The n nodes in[] inside a group run nothing now: not lowered either. */
static void unlower_inside(hx_lowered *low, const hx_tensor *const *in, int n, int *n_lowered)
{
    for (int k = 0; k < n; k++)
        if (low[in[k]->id].kind) {
            low[in[k]->id].kind = HX_LOWER_NONE;
            --*n_lowered;
        }
}

static void set_gelu_save(hx_lowered *low, const hx_tensor *y, const hx_tensor *b)
{
    for (int j = 0; j < HX_LOWER_MAX_READ; j++)
        for (int k = 0; k < 3; k++) low[y->id].path[j][k] = low[b->id].path[j][k] = -1;
    low[y->id].kind = (int8_t)HX_LOWER_GELU_SAVE;
    low[y->id].n_read = 1;
    low[y->id].path[0][0] = 0; /* x */
    low[b->id].kind = (int8_t)HX_LOWER_GELU_BACKWARD_SAVED;
    low[b->id].n_read = 2;
    low[b->id].path[0][0] = 0; /* dy */
    low[b->id].path[1][0] = 2; /* y, its derivative behind it */
}

hx_status hx__lower(const hx_graph *g, const hx_target *target, hx_has_kernel_fn has_kernel,
                    void *ctx, bool host_fusion, bool recompute, hx_lowered **out,
                    int *n_lowered)
{
    *out = NULL;
    *n_lowered = 0;
    int *readers = host_fusion ? hx__lower_readers(g, recompute) : NULL;
    hx_lowered *low = calloc((size_t)g->n + 1, sizeof *low);
    if (!low || (host_fusion && !readers)) {
        free(low);
        free(readers);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    /* Activations come after their bias_add, and a permute after its
     * matmul: a group's outer node takes the nodes inside it out of the
     * table again (nothing reads those then). */
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i], *in[3];
        for (int q = 0; q < N_RULES; q++) {
            const rule *r = &rules[q];
            int n = group_of(r, t, recompute, in);
            if (!n) continue;
            bool ok = hx__lower_on_host(r->kind)
                              ? host_fusion && !host_why_not(r, in, n, target, readers,
                                                             has_kernel, ctx, recompute)
                              : target[i] == HX_TARGET_DEVICE &&
                                        has_kernel(ctx, HX_TARGET_DEVICE,
                                                   HX_LOWERED_OP(r->kind), t->dtype);
            if (!ok || (r->writes_inner && low[in[1]->id].kind)) continue; /* one writer */
            set(low, t, r);
            ++*n_lowered;
            if (r->writes_inner) {
                set_written(low, in[1]);
                ++*n_lowered;
            } else {
                unlower_inside(low, in + 1, n - 1, n_lowered);
            }
            break;
        }
        const char *why = NULL;
        if (host_fusion && !low[i].kind &&
            hx__lower_permuted(t, target, readers, has_kernel, ctx, recompute, &low[i], &why) &&
            !why) {
            ++*n_lowered;
            if (low[i].kind == HX_LOWER_MATMUL_PERMUTED_OUT) {
                const hx_tensor *mm = hx__src(t, 0, recompute);
                unlower_inside(low, &mm, 1, n_lowered);
            }
        }
        const hx_tensor *b = host_fusion && !low[i].kind
                                     ? saving_gelu_backward(g, t, target, has_kernel, ctx, recompute)
                                     : NULL;
        if (b) {
            set_gelu_save(low, t, b);
            *n_lowered += 2;
        }
    }
    free(readers);
    if (!*n_lowered) {
        free(low);
        low = NULL;
    }
    *out = low;
    return HX_OK;
}

size_t hx__lowered_workspace(const hx_tensor *t, hx_lower_kind kind)
{
    switch (kind) {
    case HX_LOWER_CONV2D:
    case HX_LOWER_CONV2D_BACKWARD_DATA: return hx_tensor_nbytes(t->src[0]);
    case HX_LOWER_CONV2D_BACKWARD_FILTER: return hx_tensor_nbytes(t->src[1]);
    default: return 0;
    }
}

const char *hx__lower_name(hx_lower_kind kind)
{
    switch (kind) {
    case HX_LOWER_CONV2D: return "cuDNN convolution forward";
    case HX_LOWER_CONV2D_BACKWARD_DATA: return "cuDNN convolution backward data";
    case HX_LOWER_CONV2D_BACKWARD_FILTER: return "cuDNN convolution backward filter";
    case HX_LOWER_MATMUL_BIAS: return "fused matmul + bias";
    case HX_LOWER_MATMUL_BIAS_RELU: return "fused matmul + bias + relu";
    case HX_LOWER_MATMUL_BIAS_GELU: return "fused matmul + bias + gelu";
    case HX_LOWER_MATMUL_BIAS_GELU_ERF: return "fused matmul + bias + gelu_erf";
    case HX_LOWER_ADD_LAYERNORM: return "fused add + layernorm";
    case HX_LOWER_WRITTEN_BY_READER: return "written by its reader's fused kernel";
    case HX_LOWER_GELU_SAVE: return "gelu keeping its derivative for the backward";
    case HX_LOWER_GELU_BACKWARD_SAVED: return "gelu backward from the saved derivative";
    case HX_LOWER_MATMUL_PERMUTED: return "matmul reading head-swapped operands in place";
    case HX_LOWER_MATMUL_PERMUTED_OUT: return "matmul writing through its head-swap permute";
    default: return "none";
    }
}

const char *hx__lower_why_not(const hx_tensor *t, const hx_target *target, const hx_lowered *low,
                              hx_has_kernel_fn has_kernel, void *ctx, bool host_fusion,
                              bool recompute, const int *readers)
{
    if (low && low[t->id].kind) return NULL;
    if (target[t->id] == HX_TARGET_CPU) {
        if (!host_fusion || !readers) return NULL;
        for (int i = t->id + 1; low && t->op == HX_OP_BIAS_ADD && i < t->graph->n; i++)
            for (int j = 0; j < t->graph->tensors[i]->n_src; j++)
                if (hx__src(t->graph->tensors[i], j, recompute) == t &&
                    hx__lower_fuses_matmul((hx_lower_kind)low[i].kind))
                    return NULL; /* inside its reader's fusion */
        for (int q = 0; q < N_RULES; q++) {
            const hx_tensor *in[3];
            int n = hx__lower_on_host(rules[q].kind) ? group_of(&rules[q], t, recompute, in) : 0;
            if (n)
                return host_why_not(&rules[q], in, n, target, readers, has_kernel, ctx,
                                    recompute);
        }
        for (int i = t->id + 1; low && t->op == HX_OP_MATMUL && i < t->graph->n; i++)
            if (low[i].kind == HX_LOWER_MATMUL_PERMUTED_OUT &&
                hx__src(t->graph->tensors[i], 0, recompute) == t)
                return NULL; /* its permute runs it */
        const char *why = NULL;
        hx_lowered unused;
        hx__lower_permuted(t, target, readers, has_kernel, ctx, recompute, &unused, &why);
        return why;
    }
    if (target[t->id] != HX_TARGET_DEVICE) return NULL;
    if (t->op == HX_OP_IM2COL) return NULL; /* its readers say */
    const rule *r = NULL;
    for (int q = 0; q < N_RULES && !r; q++) {
        const hx_tensor *in[3];
        if (!hx__lower_on_host(rules[q].kind) && group_of(&rules[q], t, false, in)) r = &rules[q];
    }
    if (!r) {
        bool conv = t->op == HX_OP_CONV_GEMM || t->op == HX_OP_COL2IM ||
                    t->op == HX_OP_CONV_GEMM_BACKWARD_W;
        return conv ? "its columns are not an im2col's (another op made or summed them)" : NULL;
    }
    return has_kernel(ctx, HX_TARGET_DEVICE, HX_LOWERED_OP(r->kind), t->dtype)
                   ? NULL
                   : "the device has no cuDNN convolution for this dtype (not a cuda "
                     "accelerator, or hetex was built without cuDNN)";
}
