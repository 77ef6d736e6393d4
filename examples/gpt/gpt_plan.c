/* The largest GPT (and context) that fits a capped device, per offload
 * mode, without and with recomputation. A model
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
    else if (k == GPT_KNOB_WIDTH) p.width = v;
    else p.context = v;
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
    static const char *mode[] = {"none", "optimizer"}, *rc_name[] = {"keep", "recompute"};
    printf("plan: the largest model and context per offload mode, activations kept or blocks "
           "recomputed, under a %.1f MiB device cap, parameters on the device (%s, context %d, "
           "batch %d):\n", sc->max_device_memory / 1048576.0, hx_dtype_name(c->dtype),
           c->context, c->batch);
    int64_t np = 0, by_layers[2][2] = {{0}}, contexts[2][2] = {{0}};
    int64_t deep_params[2] = {0, 0}, wide_params[2] = {0, 0}; /* activations kept */
    for (int m = GPT_OFFLOAD_NONE; m <= GPT_OFFLOAD_OPTIMIZER; m++)
        for (int rc = 0; rc < 2; rc++) {
            gpt_optim om = *o;
            om.offload = (gpt_offload)m;
            hx_session_config s = *sc;
            s.offload.recompute = rc;
            gpt_config cc = *c;
            cc.recompute = cc.recompute || rc;
            const char *how = rc_name[rc];
            int layers = gpt_plan_largest(&cc, GPT_KNOB_LAYERS, 1, 4096, &om, &s, &np);
            by_layers[m][rc] = layers;
            if (!rc) deep_params[m] = layers ? np : 0;
            if (layers) printf("  offload %-9s %-9s width %d: up to %d layers (%lld params)\n",
                               mode[m], how, c->width, layers, (long long)np);
            else printf("  offload %-9s %-9s width %d: not even 1 layer fits\n", mode[m], how,
                        c->width);
            /* the width is bound by parameters (w^2) more than activations (w):
             * recomputation does not search it */
            int width = rc ? 0 : gpt_plan_largest(&cc, GPT_KNOB_WIDTH, 8 * c->heads, 1 << 16, &om,
                                                  &s, &np);
            if (!rc) wide_params[m] = width ? np : 0;
            if (width) printf("  offload %-9s %-9s %d layers: up to width %d (%lld params)\n",
                              mode[m], how, c->layers, width, (long long)np);
            else if (!rc) printf("  offload %-9s %-9s %d layers: not even width %d fits\n",
                                 mode[m], how, c->layers, 8 * c->heads);
            int ctx = gpt_plan_largest(&cc, GPT_KNOB_CONTEXT, 8, 1 << 16, &om, &s, &np);
            contexts[m][rc] = ctx;
            if (ctx) printf("  offload %-9s %-9s %d layers, width %d: up to context %d\n",
                            mode[m], how, c->layers, c->width, ctx);
            else printf("  offload %-9s %-9s %d layers, width %d: not even context 8 fits\n",
                        mode[m], how, c->layers, c->width);
        }
    if (deep_params[0] && wide_params[0])
        printf("  offload optimizer trains %.1fx the params of offload none (deeper), %.1fx "
               "(wider)\n", (double)deep_params[1] / deep_params[0],
               (double)wide_params[1] / wide_params[0]);
    for (int m = GPT_OFFLOAD_NONE; m <= GPT_OFFLOAD_OPTIMIZER; m++)
        if (by_layers[m][0] && contexts[m][0])
            printf("  offload %s: recomputation fits %.1fx the layers and %.1fx the context\n",
                   mode[m], (double)by_layers[m][1] / by_layers[m][0],
                   (double)contexts[m][1] / contexts[m][0]);
}

int gpt_plan_alternatives(const gpt_config *c, const gpt_optim *o, const hx_session_config *sc,
                          char *out, size_t n)
{
    static const struct {
        const char *flags;
        int offload;             /* -1: o's */
        const char *offload_config; /* NULL: sc's */
    } tries[] = {
        {"--offload optimizer", GPT_OFFLOAD_OPTIMIZER, NULL},
        {"--offload-config auto_offload=true", -1, "auto_offload=true"},
        {"--offload optimizer --offload-config auto_offload=true", GPT_OFFLOAD_OPTIMIZER,
         "auto_offload=true"},
        {"--offload-config offload_param=cpu", -1, "offload_param=cpu"},
    };
    int found = 0;
    size_t k = 0;
    *out = 0;
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        gpt_optim om = *o;
        hx_session_config scm = *sc;
        if (tries[i].offload >= 0) {
            if ((int)o->offload == tries[i].offload) continue; /* that is the setting that failed */
            om.offload = (gpt_offload)tries[i].offload;
        }
        if (tries[i].offload_config && hx_offload_config_parse(tries[i].offload_config, &scm.offload))
            continue;
        hx_memory_stats ms;
        int64_t np;
        if (!fits(c, &om, &scm, &ms, &np)) continue;
        if (k < n) k += (size_t)snprintf(out + k, n - k, "%s%s", found ? "; " : "", tries[i].flags);
        found++;
    }
    return found;
}
