/* Node-to-kernel-argument decoding shared by the cpu and cuda launchers:
 * see node_args.h. */
#include "backend/node_args.h"

static int64_t last_dim(const hx_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* Contiguous element strides of t. */
static void strides_of(const hx_tensor *t, int64_t *st)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= t->shape[d];
    }
}

/* Strides that read x (right-aligned) as if broadcast to y's shape. */
static void broadcast_strides(const hx_tensor *x, const hx_tensor *y, int64_t *st)
{
    int64_t xs[HX_MAX_DIMS];
    strides_of(x, xs);
    int lead = y->ndim - x->ndim;
    for (int d = 0; d < y->ndim; d++) {
        int dx = d - lead;
        st[d] = dx < 0 || x->shape[dx] == 1 ? 0 : xs[dx];
    }
}

hx__gemm_args hx__matmul_args(const hx_tensor *y)
{
    const hx_tensor *a = y->src[0], *b = y->src[1];
    hx__gemm_args g = {.ta = y->attr.i[0], .tb = y->attr.i[1]};
    g.K = a->shape[a->ndim - (g.ta ? 2 : 1)];
    g.M = y->shape[y->ndim - 2];
    g.N = y->shape[y->ndim - 1];
    g.batch = hx_tensor_numel(y) / (g.M * g.N);
    g.lda = a->shape[a->ndim - 1];
    g.ldb = b->shape[b->ndim - 1];
    if (b->ndim == 2 && g.batch > 1) {
        g.M *= g.batch;
        g.batch = 1;
    }
    g.a_stride = g.M * g.K;
    g.b_stride = b->ndim == 2 ? 0 : g.K * g.N;
    g.ldc = g.N;
    g.c_stride = g.M * g.N;
    return g;
}

/* 4-D operand or product t (B,H,R,C) as B x H matrices of R x C: the
 * leading dimension and the steps between heads and between batches; read
 * (or written) through its head-swap permute when swapped, whose source
 * (B,R,H,C) holds row r of head h at (r * H + h) * C. */
static void bh_layout(const hx_tensor *t, bool swapped, int64_t *ld, int64_t *h_step,
                      int64_t *b_step)
{
    int64_t H = t->shape[1], R = t->shape[2], C = t->shape[3];
    *ld = swapped ? H * C : C;
    *h_step = swapped ? C : R * C;
    *b_step = H * R * C;
}

hx__gemm_bh_args hx__matmul_permuted_args(const hx_tensor *y)
{
    bool out_swapped = y->op == HX_OP_PERMUTE;
    const hx_tensor *m = out_swapped ? y->src[0] : y;
    hx__gemm_bh_args r = {.g = hx__matmul_args(m), .outer = m->shape[0]};
    r.g.batch = m->shape[1];
    bh_layout(m->src[0], hx__head_swap(m->src[0]), &r.g.lda, &r.g.a_stride, &r.a_outer);
    bh_layout(m->src[1], hx__head_swap(m->src[1]), &r.g.ldb, &r.g.b_stride, &r.b_outer);
    bh_layout(m, out_swapped, &r.g.ldc, &r.g.c_stride, &r.c_outer);
    return r;
}

hx__binary_args hx__binary_of(const hx_tensor *y)
{
    hx__binary_args a;
    broadcast_strides(y->src[0], y, a.a_strides);
    broadcast_strides(y->src[1], y, a.b_strides);
    return a;
}

hx__rows_args hx__rows_of(const hx_tensor *t)
{
    int64_t cols = last_dim(t);
    return (hx__rows_args){.rows = hx_tensor_numel(t) / cols, .cols = cols};
}

/* A copy of y's shape into y, contiguous. */
static hx__copy_args into(const hx_tensor *y)
{
    hx__copy_args c = {.elem_size = hx_dtype_size(y->dtype), .shape = y->shape, .ndim = y->ndim};
    strides_of(y, c.out_strides);
    return c;
}

hx__copy_args hx__permute_of(const hx_tensor *y)
{
    hx__copy_args c = into(y);
    int64_t xs[HX_MAX_DIMS];
    strides_of(y->src[0], xs);
    for (int d = 0; d < y->ndim; d++) c.in_strides[d] = xs[y->attr.i[d]];
    return c;
}

hx__copy_args hx__concat_part_of(const hx_tensor *y, int k)
{
    int ax = (int)y->attr.i[0];
    const hx_tensor *x = y->src[k];
    hx__copy_args c = into(y);
    int64_t off = 0;
    for (int j = 0; j < k; j++) off += y->src[j]->shape[ax];
    c.out_offset = off * c.out_strides[ax] * c.elem_size;
    strides_of(x, c.in_strides);
    c.shape = x->shape;
    c.ndim = x->ndim;
    return c;
}

hx__copy_args hx__slice_of(const hx_tensor *y)
{
    hx__copy_args c = into(y);
    strides_of(y->src[0], c.in_strides);
    c.in_offset = y->attr.i[1] * c.in_strides[y->attr.i[0]] * c.elem_size;
    return c;
}

hx__copy_args hx__slice_backward_of(const hx_tensor *y)
{
    const hx_tensor *dy = y->src[0];
    hx__copy_args c = into(y);
    c.out_offset = y->attr.i[1] * c.out_strides[y->attr.i[0]] * c.elem_size;
    strides_of(dy, c.in_strides);
    c.shape = dy->shape;
    c.ndim = dy->ndim;
    return c;
}

hx__copy_args hx__broadcast_to_of(const hx_tensor *y)
{
    hx__copy_args c = into(y);
    broadcast_strides(y->src[0], y, c.in_strides);
    return c;
}

hx__reduce_args hx__reduce_sum_of(const hx_tensor *y)
{
    const hx_tensor *x = y->src[0];
    hx__reduce_args r = {.shape = x->shape, .ndim = x->ndim};
    for (int d = 0; d < HX_MAX_DIMS; d++) r.reduce[d] = d < x->ndim && (y->attr.i[0] >> d & 1);
    return r;
}

hx__reduce_args hx__sum_to_of(const hx_tensor *y)
{
    const hx_tensor *dy = y->src[0];
    hx__reduce_args r = {.shape = dy->shape, .ndim = dy->ndim};
    int lead = dy->ndim - y->ndim;
    for (int d = 0; d < HX_MAX_DIMS; d++)
        r.reduce[d] = d < dy->ndim &&
                      (d < lead || (y->shape[d - lead] == 1 && dy->shape[d] != 1));
    return r;
}

hx__gather_args hx__gather_of(const hx_tensor *y)
{
    const hx_tensor *table = y->src[0], *ids = y->src[1];
    return (hx__gather_args){.rows = table->shape[0], .n_ids = hx_tensor_numel(ids),
                             .row_bytes = hx_tensor_nbytes(table) / table->shape[0], .ids = ids};
}

hx__scatter_args hx__scatter_add_of(const hx_tensor *y)
{
    const hx_tensor *ids = y->src[1];
    return (hx__scatter_args){.rows = y->shape[0], .cols = y->shape[1],
                              .n_ids = hx_tensor_numel(ids), .ids = ids};
}

hx__xent_args hx__cross_entropy_of(const hx_tensor *y)
{
    if (y->op == HX_OP_CROSS_ENTROPY_BACKWARD) /* y is the logits' gradient */
        return (hx__xent_args){.rows = y->shape[0], .classes = y->shape[1],
                               .labels = y->src[2], .label_in = 2};
    const hx_tensor *logits = y->src[0];
    return (hx__xent_args){.rows = logits->shape[0], .classes = logits->shape[1],
                           .labels = y->src[1], .label_in = 1};
}

hx__mask_args hx__causal_mask_of(const hx_tensor *y)
{
    int64_t T = last_dim(y);
    return (hx__mask_args){.batch = hx_tensor_numel(y) / (T * T), .T = T};
}

hx__dropout_args hx__dropout_of(const hx_exec *ex, const hx_tensor *y)
{
    float p = y->attr.f[0];
    return (hx__dropout_args){
        .identity = !ex->train || p == 0, .p = p,
        .seed = y->attr.seed ^ ((uint64_t)ex->step * 0x9E3779B97F4A7C15ull),
        .stream = y->attr.stream, .n = hx_tensor_numel(y)};
}

/* ---- optimizer updates ------------------------------------------------------ */

/* The update's learning rate in this run. */
static double lr_of(const hx_exec *ex, const hx_tensor *y)
{
    return y->optimizer->lr * ex->lr_scale;
}

hx_sgd_hp hx__sgd_hp_of(const hx_exec *ex, const hx_tensor *y)
{
    const hx_optimizer_config *c = y->optimizer;
    return (hx_sgd_hp){lr_of(ex, y), c->momentum, c->dampening, c->weight_decay, c->nesterov};
}

hx_adam_hp hx__adam_hp_of(const hx_exec *ex, const hx_tensor *y)
{
    const hx_optimizer_config *c = y->optimizer;
    return (hx_adam_hp){lr_of(ex, y), c->beta1, c->beta2, c->eps, c->weight_decay,
                        c->kind == HX_OPTIMIZER_ADAMW};
}

hx_adagrad_hp hx__adagrad_hp_of(const hx_exec *ex, const hx_tensor *y)
{
    const hx_optimizer_config *c = y->optimizer;
    return (hx_adagrad_hp){lr_of(ex, y), c->lr_decay, c->eps, c->weight_decay};
}

hx_ftrl_hp hx__ftrl_hp_of(const hx_exec *ex, const hx_tensor *y)
{
    const hx_optimizer_config *c = y->optimizer;
    return (hx_ftrl_hp){lr_of(ex, y), c->l1, c->l2, c->l2_shrinkage};
}

hx_optim_io hx__update_io(const hx_exec *ex, const hx_tensor *u, void *const *in, int nthreads)
{
    hx_optim_io io = hx_optim_io_f32(in[1], nthreads);
    io.grad_dtype = (hx_kdtype)u->src[1]->dtype;
    io.grad_unscale = ex->grad_unscale;
    io.grad_clip = ex->grad_clip;
    int half = (int)u->attr.i[0];
    if (half) {
        io.param_half = in[half];
        io.param_half_dtype = (hx_kdtype)u->src[half]->dtype;
    }
    return io;
}

void *hx__update_state(const hx_tensor *u, void *const *in, int k)
{
    int n_state = u->n_src - 2 - (u->attr.i[0] != 0);
    return k < n_state ? in[2 + k] : NULL;
}

hx_status hx__update_status(const hx_tensor *u, const hx_optim_io *io, int status)
{
    if (status == HX_OPTIM_OK) return HX_OK;
    const hx_tensor *g = u->src[1];
    return hx__error(HX_ERR_INTERNAL,
                     "%s '%s' of parameter '%s' (gradient '%s' %s, %d thread(s)): the optimizer "
                     "kernel refused its arguments (status %d: it takes an f32, f16 or bf16 "
                     "gradient, one thread or more, an f16 or bf16 half copy, SGD momentum with "
                     "its buffer) and updated nothing; this is a bug in hetex, please report it "
                     "with this message", hx__ops[u->op].name, u->name, u->param->name, g->name,
                     hx_dtype_name(g->dtype), io->nthreads, status);
}
