/* What placement and partition decided, for people: HX_DEBUG=placement
 * lines on stderr, and the public reports of the session's plan (counts,
 * DOT, summary), which scheduler/plan_report.c writes. */
#include "session/session.h"
#include "scheduler/scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hx__debug_placement(const hx_session *s)
{
    const hx_graph *g = s->e.g;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t->kind == HX_TENSOR_INPUT || t->kind == HX_TENSOR_CONSTANT) continue;
        bool again = t->recomputed && hx__recompute_on(&s->e);
        char costs[96] = "";
        if (s->e.why[i] == HX_WHY_AUTO && s->auto_cost && t->op > HX_OP_STATE && !t->recompute_of)
            snprintf(costs, sizeof costs, " (predicted: host %.4f ms, device %.4f ms)",
                     1e3 * s->auto_cost[2 * i], 1e3 * s->auto_cost[2 * i + 1]);
        fprintf(stderr, "hetex placement: '%s' (%s) -> %s: %s%s%s%s%s\n", t->name,
                hx__ops[t->op].name, hx_target_name(s->e.target[i]), hx__place_why_str(s->e.why[i]),
                costs, again ? "; freed after forward, recomputed in backward as '" : "",
                again ? t->recomputed->name : "", again ? "'" : "");
    }
}

void hx__debug_lowering(const hx_session *s, hx_has_kernel_fn has_kernel)
{
    const hx_graph *g = s->e.g;
    const hx_lowered *low = s->e.lowered;
    bool fuse = !s->e.cfg.no_host_fusion, rc = hx__recompute_on(&s->e);
    int *readers = fuse ? hx__lower_readers(g, rc) : NULL;
    if (!fuse) fprintf(stderr, "hetex fusion: off (hx_session_config.no_host_fusion)\n");
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t->recompute_of && !rc) continue; /* not planned: gradients read the originals */
        hx_lower_kind lk = low ? (hx_lower_kind)low[i].kind : HX_LOWER_NONE;
        if (lk == HX_LOWER_WRITTEN_BY_READER) continue; /* its layernorm's line says */
        if (lk == HX_LOWER_ADD_LAYERNORM) {
            const hx_tensor *sum = hx__read_src(t, 4, rc, low);
            fprintf(stderr, "hetex fusion: '%s' (%s) -> %s of '%s' + '%s': writes the sum '%s' "
                    "too (a step that runs nothing holds it), whose other readers all run "
                    "after this\n", t->name, hx__ops[t->op].name, hx__lower_name(lk),
                    hx__read_src(t, 0, rc, low)->name, hx__read_src(t, 1, rc, low)->name,
                    sum->name);
            continue;
        }
        if (lk == HX_LOWER_GELU_BACKWARD_SAVED) continue; /* its gelu's line says */
        if (lk == HX_LOWER_GELU_SAVE) {
            fprintf(stderr, "hetex fusion: '%s' (%s) -> %s: writes gelu' of '%s' (f32) behind "
                    "its values; its gradient reads it and not '%s'\n", t->name,
                    hx__ops[t->op].name, hx__lower_name(lk), hx__read_src(t, 0, rc, low)->name,
                    hx__read_src(t, 0, rc, low)->name);
            continue;
        }
        if (lk == HX_LOWER_MATMUL_PERMUTED || lk == HX_LOWER_MATMUL_PERMUTED_OUT) {
            const hx_tensor *a = hx__read_src(t, 0, rc, low), *b = hx__read_src(t, 1, rc, low);
            const hx_tensor *mm = lk == HX_LOWER_MATMUL_PERMUTED ? t : hx__src(t, 0, rc);
            fprintf(stderr, "hetex fusion: '%s' (%s) -> %s: reads '%s' and '%s'%s%s%s; a "
                    "head-swap permute no other node reads is not planned\n", t->name,
                    hx__ops[t->op].name, hx__lower_name(lk), a->name, b->name,
                    mm != t ? ", runs the matmul '" : "", mm != t ? mm->name : "",
                    mm != t ? "' writing its output in place" : "");
            continue;
        }
        if (low && low[i].kind && hx__lower_on_host((hx_lower_kind)low[i].kind)) {
            fprintf(stderr, "hetex fusion: '%s' (%s) -> %s of '%s', '%s' and '%s': each "
                    "value inside is read by the next op only; '%s' is not planned\n", t->name,
                    hx__ops[t->op].name, hx__lower_name((hx_lower_kind)low[i].kind),
                    hx__read_src(t, 0, rc, low)->name, hx__read_src(t, 1, rc, low)->name,
                    hx__read_src(t, 2, rc, low)->name, hx__src(t, 0, rc)->name);
            continue;
        }
        if (low && low[i].kind) {
            hx_lower_kind k = (hx_lower_kind)low[i].kind;
            const hx_tensor *cols = t->src[k == HX_LOWER_CONV2D_BACKWARD_FILTER ? 1 : 0];
            fprintf(stderr, "hetex lowering: '%s' (%s) -> %s of '%s' and '%s': the device has "
                    "it; '%s' (%s, %zu bytes) is not planned, the call's workspace is at most "
                    "that\n", t->name, hx__ops[t->op].name, hx__lower_name(k),
                    hx__read_src(t, 0, false, low)->name, hx__read_src(t, 1, false, low)->name,
                    cols->name, hx__ops[cols->op].name, hx__lowered_workspace(t, k));
            continue;
        }
        const char *why = hx__lower_why_not(t, s->e.target, low, has_kernel, (void *)s, fuse,
                                            rc, readers);
        if (why)
            fprintf(stderr, "hetex %s: '%s' (%s) on the %s runs as built: %s\n",
                    s->e.target[i] == HX_TARGET_CPU ? "fusion" : "lowering", t->name,
                    hx__ops[t->op].name, s->e.target[i] == HX_TARGET_CPU ? "host" : "device", why);
    }
    free(readers);
}

hx_status hx_session_accelerator_info(const hx_session *s, hx_accelerator_info *out)
{
    if (!s || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_accelerator_info: %s is NULL",
                         s ? "out" : "session");
    hx_accelerator_info a = {.in_use = HX_ACCELERATOR_NONE};
    const hx_backend *b = s->e.be[HX_DEV_ACCEL];
    hx_accelerator asked = s->e.cfg.accelerator;
    if (b) {
        hx_backend_stats bs;
        b->stats(b, &bs);
        a.capacity = bs.capacity;
    }
    if (b && !s->e.accel_on_host) {
        a.in_use = HX_ACCELERATOR_CUDA;
        snprintf(a.device, sizeof a.device, "%s", s->cuda.device);
        a.device_memory = s->cuda.memory;
        snprintf(a.why, sizeof a.why, "%s", s->cuda.why);
    } else if (b) {
        a.in_use = HX_ACCELERATOR_EMU;
        snprintf(a.device, sizeof a.device, "emulated accelerator on the host's cores");
        snprintf(a.why, sizeof a.why, "%s", asked == HX_ACCELERATOR_EMU
                 ? "asked for (HX_ACCELERATOR_EMU)" : s->cuda.why);
    } else {
        snprintf(a.why, sizeof a.why, "asked for (HX_ACCELERATOR_NONE): every op on the host");
    }
    *out = a;
    return HX_OK;
}

/* The last run's plan, or the training step's before any run. */
static hx_status report_plan(hx_session *s, const char *fn, const hx_plan **out)
{
    if (!s) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: session is NULL", fn);
    if (!s->last_plan && !s->e.n_plans) {
        hx_memory_stats ms;
        hx_status st = hx_session_memory_stats(s, &ms);
        if (st) return st;
    }
    *out = s->last_plan ? s->last_plan : s->e.plans[0];
    return HX_OK;
}

hx_status hx_session_placement_stats(hx_session *s, hx_placement_stats *out)
{
    const hx_plan *p = NULL;
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_placement_stats: out is NULL");
    hx_status st = report_plan(s, "hx_session_placement_stats", &p);
    if (st) return st;
    hx__plan_stats(p, out);
    out->n_fallbacks = s->n_fallbacks;
    return HX_OK;
}

/* The plan to report on and the file to write it to. */
static hx_status open_report(hx_session *s, const char *fn, const char *path,
                             const hx_plan **p, FILE **f)
{
    hx_status st = report_plan(s, fn, p);
    if (st) return st;
    if (!path) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: path is NULL", fn);
    *f = fopen(path, "w");
    if (!*f)
        return hx__error(HX_ERR_IO, "%s: cannot write '%s'; check the directory exists and is "
                         "writable", fn, path);
    return HX_OK;
}

static hx_status close_out(const char *fn, const char *path, FILE *f)
{
    if (ferror(f) | fclose(f))
        return hx__error(HX_ERR_IO, "%s: writing '%s' failed (disk full?)", fn, path);
    return HX_OK;
}

/* The plan of the last run written to path as DOT or as a summary. */
static hx_status dump(hx_session *s, const char *fn, const char *path, bool dot)
{
    const hx_plan *p = NULL;
    FILE *f = NULL;
    hx_status st = open_report(s, fn, path, &p, &f);
    if (st) return st;
    if (dot) hx__plan_write_dot(f, &s->e, p);
    else hx__plan_write_summary(f, &s->e, p);
    return close_out(fn, path, f);
}

hx_status hx_session_dump_dot(hx_session *s, const char *path)
{
    return dump(s, "hx_session_dump_dot", path, true);
}

hx_status hx_session_dump_summary(hx_session *s, const char *path)
{
    return dump(s, "hx_session_dump_summary", path, false);
}
