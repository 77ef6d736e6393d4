/* The gradient scan between a training run's phases: a sum of squares per
 * gradient, whose Inf or NaN stops the step before any update and whose
 * total is the gradient norm that clipping uses. */
#include "scheduler/plan.h"
#include "kernels/cpu/hx_kernels.h"

#include <math.h>
#include <stdlib.h>

hx_status hx__scan_alloc(hx_engine *e)
{
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    for (int i = 0; i < e->g->n; i++) e->n_scan += e->g->tensors[i]->kind == HX_TENSOR_UPDATE;
    if (!e->n_scan) return HX_OK;
    size_t bytes = sizeof(double) * e->n_scan;
    e->scan_host = malloc(2 * bytes); /* the device's sums copied back, then the host's */
    if (!e->scan_host) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    if (!acc) return HX_OK;
    hx_status st = acc->alloc(acc, bytes, HX_MEM_PERSISTENT, "the gradient scan's sums",
                              (void **)&e->scan_dev);
    return st ? hx__engine_device_report(e, "hx_session_create", st, false) : HX_OK;
}

void hx__scan_free(hx_engine *e)
{
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    if (e->scan_dev) acc->free(acc, e->scan_dev);
    free(e->scan_host);
}

hx_status hx__scan_grads(hx_engine *e, const hx_plan *p, const hx_exec ex[2],
                         const hx_tensor **bad, double *sumsq)
{
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    double *dev_sums = e->scan_host, *host_sums = e->scan_host + e->n_scan;
    int host_threads = ex[0].nthreads;
    hx_status st = HX_OK;
    int n_dev = 0;
    *bad = NULL;
    *sumsq = 0;
    for (int i = 0; i < p->n_scan && !st; i++) {
        const hx_tensor *g = p->scan_update[i]->src[1];
        if (p->scan_home[i] != HX_DEV_ACCEL) continue;
        hx_launch_fn fn = acc->kernel(acc, HX_KERNEL_SUMSQ, g->dtype);
        if (!fn)
            return hx__error(HX_ERR_NO_KERNEL, "hx_session_run: the %s backend has no kernel to "
                             "scan gradient '%s' (%s) for Inf/NaN", acc->name, g->name,
                             hx_dtype_name(g->dtype));
        st = acc->launch(acc, e->stream[HX_DEV_ACCEL], fn, &ex[1], g, &e->scan_dev[i],
                         &p->scan_at[i]);
        n_dev = i + 1;
    }
    if (!st && n_dev)
        st = acc->copy_d2h(acc, e->stream[HX_DEV_ACCEL],
                           (hx_d2h_copy){.host = dev_sums,
                                         .dev = e->scan_dev,
                                         .bytes = sizeof(double) * n_dev,
                                         .why = {.role = "gradient scan sums"}});
    int cores = hx__budget_take(e->budget, host_threads);
    for (int i = 0; i < p->n_scan && !st; i++) {
        const hx_tensor *g = p->scan_update[i]->src[1];
        if (p->scan_home[i] == HX_DEV_HOST)
            host_sums[i] = hx_k_sumsq(p->scan_at[i], (hx_kdtype)g->dtype, hx_tensor_numel(g),
                                      host_threads);
    }
    hx__budget_give(e->budget, cores);
    if (n_dev) {
        hx_status sync = acc->stream_sync(acc, e->stream[HX_DEV_ACCEL]);
        if (!st) st = sync;
    }
    if (st) return st;
    for (int i = 0; i < p->n_scan; i++) {
        const hx_tensor *u = p->scan_update[i];
        double v = hx__scan_sum(e, p, i);
        if (!isfinite(v) && !*bad) *bad = u;
        if (u->op != HX_OP_EMBEDDING_UPDATE) *sumsq += v;
    }
    return HX_OK;
}

double hx__scan_sum(const hx_engine *e, const hx_plan *p, int i)
{
    return e->scan_host[(p->scan_home[i] == HX_DEV_ACCEL ? 0 : e->n_scan) + i];
}

int hx__plan_grad_count(const hx_plan *p) { return p->n_scan; }

const hx_tensor *hx__plan_grad(const hx_plan *p, int i, void **at, int *home)
{
    *at = p->scan_at[i];
    *home = p->scan_home[i];
    return p->scan_update[i];
}
