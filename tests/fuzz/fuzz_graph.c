/* libFuzzer target: a graph built by the bytes, through backward, an
 * optimizer, session creation and one run. The bytes are a small program:
 * leaves (inputs, parameters, constants of f32/f16/bf16/i32/i64, with
 * small dims and now and then an extreme one: 0, -1, 2^31, 2^62,
 * INT64_MAX), then ops on the tensors made so far with their attributes
 * (every op of hetex.h but the embedding ones, reshape and slice with
 * any numbers, targets CPU or DEVICE), then a loss, hx_graph_backward, an
 * optimizer of any kind with hyper-parameters from the bytes, a session on
 * NONE or on emu under a small cap (loss scaling, clipping, activation
 * offload from the bytes), and one run with every input fed from the
 * bytes (ids and labels in range or not). Every failure must be a status
 * with a message; nothing may crash, leak or read out of bounds. A
 * session is made only when the graph's tensors hold at most 4 MiB, so
 * that hetex's own allocations stay small. Seeds: programs that build an
 * MLP, a softmax classifier and a layernorm block (seeds.c). */
#include "fuzz_common.h"
#include "graph/graph.h" /* every tensor, the added ones too: g->tensors */

#include <stdlib.h>
#include <string.h>

typedef struct prog {
    const uint8_t *p;
    size_t n, at;
} prog;

static uint8_t byte(prog *pr) { return pr->at < pr->n ? pr->p[pr->at++] : 0; }
static bool more(const prog *pr) { return pr->at < pr->n; }

enum { MAX_T = 24, MAX_OPS = 32, MAX_BYTES = 4 << 20 };

typedef struct state {
    hx_graph *g;
    hx_tensor *t[MAX_T];
    int n;
    int leaves;
} state;

static int64_t dim_of(prog *pr)
{
    static const int64_t extreme[] = {0, -1, (int64_t)1 << 31, (int64_t)1 << 62, INT64_MAX};
    uint8_t b = byte(pr);
    return b < 250 ? 1 + b % 6 : extreme[b - 250 < 5 ? b - 250 : 4];
}

static hx_dtype dtype_of(uint8_t b)
{
    static const hx_dtype dts[] = {HX_DTYPE_F32, HX_DTYPE_F32, HX_DTYPE_F32, HX_DTYPE_F16,
                                   HX_DTYPE_BF16, HX_DTYPE_I32, HX_DTYPE_I64, (hx_dtype)99};
    return dts[b % 8];
}

static void add(state *s, hx_tensor *t)
{
    if (t && s->n < MAX_T) s->t[s->n++] = t;
}

static hx_tensor *pick(state *s, prog *pr) { return s->n ? s->t[byte(pr) % s->n] : NULL; }

static void leaf(state *s, prog *pr)
{
    char name[16] = {'l', (char)('a' + s->leaves % 26), (char)('a' + s->leaves / 26 % 26), 0};
    s->leaves++;
    uint8_t kind = byte(pr);
    int nd = byte(pr) % 4;
    int64_t shape[3];
    for (int i = 0; i < nd; i++) shape[i] = dim_of(pr);
    hx_dtype dt = dtype_of(byte(pr));
    switch (kind % 3) {
    case 0: add(s, hx_graph_input(s->g, name, dt, nd, shape)); break;
    case 1: {
        hx_init init = kind & 4 ? hx_init_uniform(-1, 1) : hx_init_xavier_uniform(1);
        add(s, hx_graph_param(s->g, name, dt, nd, shape, init));
        break;
    }
    default: {
        /* data for at most 256 elements: a larger constant is not made (one
         * with a dim <= 0 is, since it is refused before its data is read) */
        static const uint8_t bytes[256 * 8];
        bool refused = false;
        int64_t numel = 1;
        for (int i = 0; i < nd; i++) {
            refused |= shape[i] <= 0;
            numel = shape[i] > 0 && shape[i] <= 256 ? numel * shape[i] : 257;
            if (numel > 256) numel = 257;
        }
        if (refused || numel <= 256) add(s, hx_graph_constant(s->g, name, dt, nd, shape, bytes));
        break;
    }
    }
}

static void op(state *s, prog *pr)
{
    hx_graph *g = s->g;
    uint8_t code = byte(pr);
    hx_tensor *a = pick(s, pr), *b = pick(s, pr), *r = NULL;
    uint8_t x = byte(pr);
    switch (code % 30) {
    case 0: r = hx_matmul(g, a, b, x & 1, x & 2); break;
    case 1: r = hx_add(g, a, b); break;
    case 2: r = hx_sub(g, a, b); break;
    case 3: r = hx_mul(g, a, b); break;
    case 4: r = hx_div(g, a, b); break;
    case 5: r = hx_scale(g, a, (float)(int8_t)x / 16); break;
    case 6: r = hx_bias_add(g, a, b); break;
    case 7: r = hx_relu(g, a); break;
    case 8: r = hx_gelu(g, a); break;
    case 9: r = hx_sigmoid(g, a); break;
    case 10: r = hx_tanh(g, a); break;
    case 11: r = hx_exp(g, a); break;
    case 12: r = hx_log(g, a); break;
    case 13: r = hx_sqrt(g, a); break;
    case 14: r = hx_softmax(g, a); break;
    case 15: r = hx_log_softmax(g, a); break;
    case 16: r = hx_layernorm(g, a, b, x & 1 ? b : NULL, 1e-5f); break;
    case 17: {
        int nd = x % 4;
        int64_t shape[3];
        for (int i = 0; i < nd; i++) shape[i] = byte(pr) == 7 ? -1 : dim_of(pr);
        r = hx_reshape(g, a, nd, shape);
        break;
    }
    case 18: {
        int perm[8] = {x % 3, (x / 3) % 3, (x / 9) % 3, 3, 4, 5, 6, 7};
        r = hx_permute(g, a, perm);
        break;
    }
    case 19: {
        hx_tensor *xs[3] = {a, b, pick(s, pr)};
        r = hx_concat(g, 2 + x % 2, xs, (int)(int8_t)byte(pr) % 4);
        break;
    }
    case 20: r = hx_slice(g, a, (int8_t)x % 4, (int8_t)byte(pr) % 8, (int8_t)byte(pr) % 8); break;
    case 21: {
        int axes[2] = {(int8_t)byte(pr) % 4, (int8_t)byte(pr) % 4};
        r = hx_reduce_sum(g, a, x % 3, axes, x & 4);
        break;
    }
    case 22: {
        int axes[1] = {(int8_t)byte(pr) % 4};
        r = hx_reduce_mean(g, a, x % 2, axes, x & 4);
        break;
    }
    case 23: r = hx_cast(g, a, dtype_of(x)); break;
    case 24: r = hx_gather(g, a, b); break;
    case 25: r = hx_causal_mask(g, a); break;
    case 26: r = hx_cross_entropy(g, a, b); break;
    case 27: r = hx_bce_with_logits(g, a, b); break;
    case 28: r = hx_mse(g, a, b); break;
    default: r = hx_dropout(g, a, (float)x / 256, x); break;
    }
    if (r && (x & 0x80)) hx_tensor_set_target(r, x & 0x40 ? HX_TARGET_DEVICE : HX_TARGET_CPU);
    add(s, r);
}

static hx_optimizer_config optimizer(prog *pr)
{
    uint8_t k = byte(pr);
    hx_optimizer_config oc = hx_optimizer_config_default((hx_optimizer_kind)(k % 6));
    uint8_t h = byte(pr);
    if (h & 1) oc.lr = (double)(int8_t)byte(pr) / 64;
    if (h & 2) oc.weight_decay = (double)byte(pr) / 256;
    if (h & 4) oc.momentum = (double)byte(pr) / 200;
    oc.nesterov = h & 8;
    if (h & 16) oc.beta1 = (double)byte(pr) / 255;
    if (h & 32) oc.l1 = (double)(int8_t)byte(pr) / 64;
    return oc;
}

/* The bytes every tensor of g holds, saturating; a graph too big for a session gets none. */
static int64_t graph_bytes(const state *s)
{
    int64_t total = 0;
    for (int i = 0; i < s->g->n; i++) {
        int64_t b = (int64_t)hx_tensor_nbytes(s->g->tensors[i]);
        if (b > MAX_BYTES || (total += b) > MAX_BYTES) return INT64_MAX;
    }
    return total;
}

static void run(state *s, prog *pr, hx_tensor *loss, bool train)
{
    uint8_t c = byte(pr);
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1 + (c & 1);
    cfg.accelerator = c & 2 ? HX_ACCELERATOR_EMU : HX_ACCELERATOR_NONE;
    cfg.max_device_memory = (size_t)(1 + byte(pr)) << (8 + (c >> 2 & 7));
    cfg.loss_scale.enabled = c & 32;
    cfg.clip_grad_norm = c & 64 ? 1.0 : 0;
    if (c & 128) cfg.offload.offload_activations = HX_OFFLOAD_CPU;
    cfg.fallback = HX_FALLBACK_CPU;
    hx_session *sess = NULL;
    if (hx_session_create(s->g, &cfg, &sess)) return;
    hx_feed feeds[MAX_T];
    void *bufs[MAX_T];
    int nf = 0;
    for (int i = 0; i < s->g->n && nf < MAX_T; i++) {
        hx_tensor *t = s->g->tensors[i];
        if (hx_tensor_kind_of(t) != HX_TENSOR_INPUT) continue;
        size_t bytes = hx_tensor_nbytes(t);
        uint8_t *d = malloc(bytes ? bytes : 1);
        bool ints = hx_tensor_dtype(t) == HX_DTYPE_I32 || hx_tensor_dtype(t) == HX_DTYPE_I64;
        uint8_t fill = byte(pr);
        for (size_t k = 0; k < bytes; k++) /* ids and labels small: in range, mostly */
            d[k] = ints ? (k % (hx_tensor_dtype(t) == HX_DTYPE_I32 ? 4 : 8) ? 0 : (uint8_t)((fill + k) % 3))
                        : (uint8_t)(fill * 31 + k * 7);
        bufs[nf] = d;
        feeds[nf++] = (hx_feed){NULL, t, d, bytes};
    }
    float l;
    hx_fetch f = {NULL, loss, &l, sizeof l};
    hx_session_run(sess, feeds, nf, loss ? &f : NULL, loss ? 1 : 0, train ? HX_RUN_TRAIN : 0);
    for (int i = 0; i < nf; i++) free(bufs[i]);
    hx_session_free(sess);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    prog pr = {data, size, 0};
    state s = {.g = hx_graph_create()};
    int leaves = 1 + byte(&pr) % 6;
    for (int i = 0; i < leaves; i++) leaf(&s, &pr);
    int ops = byte(&pr) % MAX_OPS;
    for (int i = 0; i < ops && more(&pr); i++) op(&s, &pr);
    /* the loss: the last tensor as an f32 scalar, or (when the byte says) as it is */
    hx_tensor *last = s.n ? s.t[s.n - 1] : NULL, *loss = last;
    uint8_t how = byte(&pr);
    if (last && !(how & 1)) {
        if (hx_tensor_dtype(last) != HX_DTYPE_F32) last = hx_cast(s.g, last, HX_DTYPE_F32);
        loss = hx_reduce_sum(s.g, last, 0, NULL, false);
    }
    bool train = loss && !hx_graph_backward(s.g, loss);
    if (train) {
        hx_optimizer_config oc = optimizer(&pr);
        train = !hx_graph_apply_optimizer(s.g, NULL, &oc);
    }
    if (graph_bytes(&s) <= MAX_BYTES) run(&s, &pr, loss, train);
    hx_graph_free(s.g);
    return 0;
}
