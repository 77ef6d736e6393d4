/* Matmuls through head-swap permutes (graph.h, HX_LOWER_MATMUL_PERMUTED*):
 * attention splits (B,T,C) into heads as permute((B,T,H,D)) -> (B,H,T,D),
 * multiplies per (b, h), and permutes the product back. A head-swap
 * permute's source, read as B x H matrices of T x D, is strided (rows H*D
 * apart, heads D apart, batches T*H*D), which a GEMM with a leading
 * dimension and a head stride reads and writes in place
 * (backend/backend_cpu_fused.c): the matmul reads each operand that is a
 * head-swap permute in place of the permute's source, and a head-swap
 * permute of a matmul runs that matmul writing its own output. The same
 * GEMM calls on the same values as the unlowered nodes, without the copies. */
#include "graph/graph.h"

/* Whether m is a 4-D matmul of 4-D operands (no shared 2-D b: that one
 * runs as one GEMM over all rows, which a permuted a cannot be). */
static bool batched_4d(const hx_tensor *m, bool recompute)
{
    return m->op == HX_OP_MATMUL && m->ndim == 4 && hx__src(m, 0, recompute)->ndim == 4 &&
           hx__src(m, 1, recompute)->ndim == 4;
}

/* Why the nodes of m's operands m reads through (its head-swap permutes)
 * cannot be, or NULL; sets path[j] (from m) to read operand j. */
static const char *operands(const hx_tensor *m, const hx_target *target, bool recompute,
                            int8_t path[2][2])
{
    for (int j = 0; j < 2; j++) {
        const hx_tensor *s = hx__src(m, j, recompute);
        path[j][0] = (int8_t)j;
        path[j][1] = -1;
        if (!hx__head_swap(s)) continue;
        if (target[s->id] != HX_TARGET_CPU) return "a permute it reads is on the device";
        path[j][1] = 0;
    }
    return NULL;
}

hx_lower_kind hx__lower_permuted(const hx_tensor *t, const hx_target *target, const int *readers,
                                 hx_has_kernel_fn has_kernel, void *ctx, bool recompute,
                                 hx_lowered *entry, const char **why)
{
    const hx_tensor *m = hx__head_swap(t) ? hx__src(t, 0, recompute) : t;
    if (!batched_4d(m, recompute)) return HX_LOWER_NONE;
    bool out = m != t;
    if (!out && !hx__head_swap(hx__src(m, 0, recompute)) &&
        !hx__head_swap(hx__src(m, 1, recompute)))
        return HX_LOWER_NONE;
    hx_lower_kind kind = out ? HX_LOWER_MATMUL_PERMUTED_OUT : HX_LOWER_MATMUL_PERMUTED;
    int8_t path[2][2];
    *why = target[t->id] != HX_TARGET_CPU || target[m->id] != HX_TARGET_CPU
                   ? "a node of the group is on the device"
                   : operands(m, target, recompute, path);
    if (!*why && out && readers[m->id] != 1)
        *why = "the matmul's product is read by other nodes too";
    if (!*why && !has_kernel(ctx, HX_TARGET_CPU, HX_LOWERED_OP(kind), t->dtype))
        *why = "no fused kernel for this dtype";
    if (*why) return kind;
    *entry = (hx_lowered){.kind = (int8_t)kind, .n_read = 2};
    for (int j = 0; j < HX_LOWER_MAX_READ; j++)
        for (int k = 0; k < 3; k++) entry->path[j][k] = -1;
    for (int j = 0; j < 2; j++) { /* out: down to the matmul first */
        entry->path[j][0] = out ? 0 : path[j][0];
        entry->path[j][1] = out ? path[j][0] : path[j][1];
        entry->path[j][2] = out ? path[j][1] : -1;
    }
    return kind;
}
