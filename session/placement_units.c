/* Automatic placement's report per unit: what the planner's costs predict
 * for each unit of the timed training plan against what the executor
 * measured (scheduler/exec.c's unit clocks), as the public struct array
 * and as the text HX_DEBUG=placement and the CLI print. */
#include "session/session.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The predicted seconds of one step: a kernel's profiled time on its
 * side (a recomputed op's: its original's), a copy's latency + bytes /
 * bandwidth in its direction (NAN: no prediction). */
static double step_seconds(const hx_session *s, const hx_step *sp)
{
    const hx_placement_report *r = &s->place_report;
    if (!sp->fn) {
        double n = (double)hx_tensor_nbytes(sp->node);
        return sp->dev == HX_DEV_ACCEL ? r->h2d_latency_s + n / r->h2d_bytes_per_s
                                       : r->d2h_latency_s + n / r->d2h_bytes_per_s;
    }
    const hx_tensor *t = sp->node->recompute_of ? sp->node->recompute_of : sp->node;
    double c = s->auto_cost[2 * t->id + (sp->dev == HX_DEV_ACCEL)];
    return isfinite(c) ? c : NAN;
}

static hx_placement_unit unit_of(const hx_session *s, int u)
{
    const hx_plan *p = s->timed_plan;
    hx_unit_view v = hx__plan_unit(p, u);
    hx_placement_unit x = {.index = u, .phase = v.phase, .lane = v.lane, .n_steps = v.n_steps,
                           .measured_s = v.clock.runs ? v.clock.best_s : 0, .runs = v.clock.runs};
    for (int i = 0; i < v.n_steps; i++) {
        const hx_step *sp = hx__plan_unit_step(p, u, i);
        if (!i) x.first_op = sp->node->name;
        x.last_op = sp->node->name;
        if (!sp->fn) x.copy_bytes += hx_tensor_nbytes(sp->node);
        x.predicted_s += step_seconds(s, sp);
    }
    if (x.runs && x.predicted_s > 0) {
        x.ratio = x.measured_s / x.predicted_s;
        x.off = x.ratio > 1.2 || x.ratio < 0.8;
    }
    return x;
}

static int n_units(const hx_session *s)
{
    return s->place_report.n_auto && s->timed_plan ? hx__plan_n_units(s->timed_plan) : 0;
}

hx_status hx_session_placement_units(const hx_session *s, hx_placement_unit *out, int cap,
                                     int *n)
{
    if (!s || !n || cap < 0 || (!out && cap))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_placement_units: %s",
                         !s ? "session is NULL" : !n ? "n_units is NULL"
                         : cap < 0 ? "cap is negative" : "out is NULL with cap > 0");
    int total = n_units(s);
    for (int u = 0; u < total && u < cap; u++) out[u] = unit_of(s, u);
    *n = total;
    return HX_OK;
}

/* Text into a growing buffer. */
typedef struct text {
    char *b;
    size_t n, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->b ? t->b + t->n : NULL, t->b ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0 || t->oom) return;
    if (t->n + (size_t)k >= t->cap) {
        size_t cap = 2 * (t->n + (size_t)k) + 256;
        char *b = realloc(t->b, cap);
        if (!b) {
            t->oom = true;
            return;
        }
        t->b = b;
        t->cap = cap;
        va_start(ap, fmt);
        vsnprintf(t->b + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
    }
    t->n += (size_t)k;
}

static const char *lane_name(hx_unit_lane l)
{
    static const char *names[] = {"host", "device", "copy h2d", "copy d2h"};
    return names[l];
}

static void put_unit(text *t, const hx_placement_unit *x)
{
    put(t, "  unit %d (phase %d) %-8s %4d %s %s%s%s", x->index, x->phase, lane_name(x->lane),
        x->n_steps, x->copy_bytes ? "copies" : x->n_steps == 1 ? "op" : "ops", x->first_op,
        x->n_steps > 1 ? " .. " : "", x->n_steps > 1 ? x->last_op : "");
    if (x->copy_bytes) put(t, " (%zu bytes)", x->copy_bytes);
    put(t, ": predicted %.3f ms", 1e3 * x->predicted_s);
    if (x->runs)
        put(t, ", measured %.3f ms (fastest of %d), ratio %.2f%s\n", 1e3 * x->measured_s, x->runs,
            x->ratio, x->off ? " OFF by more than 20%" : "");
    else put(t, ", not measured\n");
}

/* Farthest from its prediction first (|log ratio|), unmeasured last. */
static int by_miss(const void *pa, const void *pb)
{
    const hx_placement_unit *a = pa, *b = pb;
    double ma = a->ratio > 0 ? fabs(log(a->ratio)) : -1, mb = b->ratio > 0 ? fabs(log(b->ratio)) : -1;
    return ma < mb ? 1 : ma > mb ? -1 : a->index - b->index;
}

static void put_report(text *t, const hx_session *s, int worst)
{
    const hx_placement_report *r = &s->place_report;
    int n = n_units(s);
    if (!r->n_auto) {
        put(t, "placement report: no node was placed automatically\n");
        return;
    }
    if (!n) {
        put(t, "placement report: no training run has been timed yet\n");
        return;
    }
    hx_placement_unit *u = malloc(sizeof *u * (size_t)n);
    if (!u) {
        t->oom = true;
        return;
    }
    int off = 0;
    for (int i = 0; i < n; i++) off += (u[i] = unit_of(s, i)).off;
    int shown = worst && worst < n ? worst : n;
    if (worst) qsort(u, (size_t)n, sizeof *u, by_miss);
    put(t, "placement report: %d units, %d more than 20%% off their prediction%s\n", n, off,
        worst && shown < n ? "; the farthest from it:" : "");
    for (int i = 0; i < shown; i++) put_unit(t, &u[i]);
    if (shown < n) put(t, "  (%d more units: HX_DEBUG=placement lists them all)\n", n - shown);
    put(t, "  step: predicted %.3f ms", 1e3 * r->predicted_step_s);
    if (r->measured_steps)
        put(t, ", measured %.3f ms (fastest of %d), ratio %.2f%s\n", 1e3 * r->measured_step_s,
            r->measured_steps, r->measured_step_s / r->predicted_step_s,
            r->off ? " OFF by more than 20%" : "");
    else put(t, ", not measured\n");
    free(u);
}

hx_status hx_session_placement_text(const hx_session *s, int worst, char *buf, size_t cap,
                                    size_t *len)
{
    if (!s || !len || worst < 0 || (!buf && cap))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_placement_text: %s",
                         !s ? "session is NULL" : !len ? "len is NULL"
                         : worst < 0 ? "worst is negative" : "buf is NULL with cap > 0");
    text t = {0};
    put_report(&t, s, worst);
    if (t.oom) {
        free(t.b);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_placement_text: out of host memory");
    }
    if (cap) snprintf(buf, cap, "%s", t.b ? t.b : "");
    *len = t.n;
    free(t.b);
    return HX_OK;
}

void hx__placement_units_debug(const hx_session *s)
{
    text t = {0};
    put_report(&t, s, 0);
    if (t.b && !t.oom) fprintf(stderr, "hetex %s", t.b);
    free(t.b);
}
