/* The largest GPT that fits a capped device, per offload mode. A model
 * fits when its session can be created (persistent tensors placed) and its
 * training step planned (transient arena allocated) under the cap. */
#include "gpt.h"

#include <stdio.h>

static bool fits(const gpt_config *c, const gpt_optim *o, const hx_session_config *sc,
                 hx_memory_stats *ms, int64_t *n_params)
{
    gpt_run r;
    if (gpt_run_create(c, o, sc, &r)) return false;
    bool ok = !hx_session_memory_stats(r.s, ms);
    *n_params = r.m.n_params;
    gpt_run_free(&r);
    return ok;
}

static gpt_config with(const gpt_config *c, gpt_knob k, int v)
{
    gpt_config p = *c;
    if (k == GPT_KNOB_LAYERS) p.layers = v;
    else p.width = v;
    return p;
}

/* Doubling, then bisection. */
int gpt_plan_largest(const gpt_config *c, gpt_knob k, int step, int limit, const gpt_optim *o,
                     const hx_session_config *sc, int64_t *n_params)
{
    hx_memory_stats ms;
    int64_t np;
    int lo = 0, hi = 1; /* fits at lo * step (0: none known); does not at hi * step */
    while (hi * step <= limit) {
        gpt_config p = with(c, k, hi * step);
        if (!fits(&p, o, sc, &ms, &np)) break;
        lo = hi;
        hi *= 2;
    }
    if (hi * step > limit) hi = limit / step + 1;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        gpt_config p = with(c, k, mid * step);
        if (fits(&p, o, sc, &ms, &np)) lo = mid;
        else hi = mid;
    }
    if (lo) {
        gpt_config p = with(c, k, lo * step);
        fits(&p, o, sc, &ms, n_params);
    }
    return lo * step;
}

void gpt_plan_report(const gpt_config *c, const gpt_optim *o, const hx_session_config *sc)
{
    static const char *mode[] = {"none", "optimizer"};
    printf("plan: the largest model per offload mode under a %.1f MiB device cap, parameters "
           "on the device (%s, context %d, batch %d):\n", sc->max_device_memory / 1048576.0,
           hx_dtype_name(c->dtype), c->context, c->batch);
    int64_t by_layers[2] = {0, 0}, by_width[2] = {0, 0};
    for (int m = GPT_OFFLOAD_NONE; m <= GPT_OFFLOAD_OPTIMIZER; m++) {
        gpt_optim om = *o;
        om.offload = (gpt_offload)m;
        int layers = gpt_plan_largest(c, GPT_KNOB_LAYERS, 1, 4096, &om, sc, &by_layers[m]);
        if (layers) printf("  offload %-9s  width %d: up to %d layers (%lld params)\n", mode[m],
                           c->width, layers, (long long)by_layers[m]);
        else printf("  offload %-9s  width %d: not even 1 layer fits\n", mode[m], c->width);
        int width = gpt_plan_largest(c, GPT_KNOB_WIDTH, 8 * c->heads, 1 << 16, &om, sc, &by_width[m]);
        if (width) printf("  offload %-9s  %d layers: up to width %d (%lld params)\n", mode[m],
                          c->layers, width, (long long)by_width[m]);
        else printf("  offload %-9s  %d layers: not even width %d fits\n", mode[m], c->layers,
                    8 * c->heads);
    }
    if (by_layers[0] && by_width[0])
        printf("  offload optimizer trains %.1fx the params of offload none (deeper), %.1fx "
               "(wider)\n", (double)by_layers[1] / by_layers[0], (double)by_width[1] / by_width[0]);
}
