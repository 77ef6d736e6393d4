/* Sessions: persistent storage, feeds and fetches, and the run loop: the
 * engine's plan for the fetches (scheduler/run.c), phase 0, the gradient
 * scan (scheduler/scan.c) and phase 1, each phase on the executor or, for
 * the updates, the delayed update or the residency, with the loss scaler's
 * bookkeeping. */
#include "session/session.h"
#include "backend/backend.h"
#include "embedding/embedding.h"
#include "scheduler/scheduler.h"
#include "offload/offload.h"
#include "dist/dist.h"

#include <math.h>
#include <stdio.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

hx_session_config hx_session_config_default(void)
{
    hx_session_config c = {.n_threads = 0, .seed = 42, .accelerator = HX_ACCELERATOR_AUTO,
                           .max_device_memory = 0, .fallback = HX_FALLBACK_ERROR,
                           .loss_scale = {false, 65536.0, 2000, 2.0, 0.5},
                           .emu_cost = {0, 0, 0}, .trace_path = NULL,
                           .offload = hx_offload_config_default()};
    return c;
}

void hx_session_free(hx_session *s)
{
    if (!s) return;
    if (hx__debug("placement") && s->timed_plan &&
        s->place_report.measured_steps < HX_PLACEMENT_TIMED_RUNS)
        hx__placement_units_debug(s); /* not printed yet: fewer runs than that */
    hx__dpu_free(&s->e);
    hx__exec_free(&s->e);
    hx__pin_free(s->e.pin);
    hx__session_dp_overlap_free(s); /* its events: before the backends go */
    hx__dp_free(s->dp[0]);
    hx__dp_free(s->dp[1]);
    hx__nccl_free(s->nccl);
    free(s->dp_index);
    hx__session_zero_free(s);
    /* before the loop below: the residency's host copies are its own */
    if (s->e.residency) s->e.residency->destroy(s->e.residency);
    hx__engine_free_plans(&s->e);
    hx__session_unbind_caches(s); /* before the device's memory goes */
    for (int i = 0; s->e.persist && i < s->e.g->n; i++) {
        if (!s->e.persist[i]) continue;
        hx_backend *b = s->e.be[hx__dev_of(&s->e, i)];
        b->free(b, s->e.persist[i]);
    }
    free(s->e.persist);
    hx_backend *acc = s->e.be[HX_DEV_ACCEL];
    for (int i = 0; i < s->n_dev_blocks; i++) acc->free(acc, s->dev_blocks[i].p);
    free(s->dev_blocks);
    hx__scan_free(&s->e);
    for (int i = 0; i < 2; i++)
        if (s->e.copy_stream[i]) acc->stream_destroy(acc, s->e.copy_stream[i]);
    for (int d = 0; d < HX_NDEV; d++) {
        if (!s->e.be[d]) continue;
        if (s->e.arena[d]) s->e.be[d]->free(s->e.be[d], s->e.arena[d]);
        if (s->e.stream[d]) s->e.be[d]->stream_destroy(s->e.be[d], s->e.stream[d]);
        s->e.be[d]->destroy(s->e.be[d]);
    }
    if (s->e.trace && hx__trace_write(s->e.trace))
        fprintf(stderr, "hetex: the trace was not written: %s\n", hx_last_error());
    hx__trace_free(s->e.trace);
    if (s->e.budget) hx__budget_destroy(s->e.budget);
    free(s->e.budget);
    free(s->e.target);
    free(s->e.why);
    free(s->e.lowered);
    free(s->auto_cost);
    hx__graph_release(s->e.g); /* frees a graph whose hx_graph_free came first */
    free(s);
}

static bool has_kernel(void *ctx, hx_target t, hx_op op, hx_dtype dt)
{
    const hx_session *s = ctx;
    const hx_backend *b = s->e.be[t == HX_TARGET_DEVICE ? HX_DEV_ACCEL : HX_DEV_HOST];
    return b && b->kernel(b, op, dt);
}

/* The host core budget and the trace (config field, else $HX_TRACE). */
static hx_status setup_lanes(hx_session *s)
{
    s->e.budget = malloc(sizeof *s->e.budget);
    if (!s->e.budget)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    hx__budget_init(s->e.budget, s->e.nthreads);
    const char *path = s->e.cfg.trace_path ? s->e.cfg.trace_path : getenv("HX_TRACE");
    if (path && *path) {
        hx_status st = hx__trace_create(path, &s->e.trace);
        if (st) return st;
    }
    return hx__exec_create(&s->e);
}

/* Backends for the configured accelerator, streams (the accelerator's:
 * compute, h2d, d2h), and placement. */
static hx_status setup_devices(hx_session *s)
{
    hx_status st = hx__backend_cpu_create(&s->e.be[HX_DEV_HOST]);
    if (!st)
        st = hx__backend_cuda_for(&s->e.cfg, hx__trace_hooks(s->e.trace),
                                  &s->e.be[HX_DEV_ACCEL], &s->cuda); /* CUDA, AUTO with a GPU */
    if (!st && s->e.cfg.accelerator != HX_ACCELERATOR_NONE && !s->e.be[HX_DEV_ACCEL]) {
        size_t cap = s->e.cfg.max_device_memory ? s->e.cfg.max_device_memory : (size_t)8 << 30;
        hx_emu_options o = {hx__emu_hooks(s->e.budget, s->e.trace), s->e.cfg.emu_cost};
        st = hx__backend_emu_create(cap, &o, &s->e.be[HX_DEV_ACCEL]);
        s->e.accel_on_host = true;
    }
    for (int d = 0; d < HX_NDEV && !st; d++)
        if (s->e.be[d]) st = s->e.be[d]->stream_create(s->e.be[d], &s->e.stream[d]);
    for (int i = 0; i < 2 && !st && s->e.be[HX_DEV_ACCEL]; i++)
        st = s->e.be[HX_DEV_ACCEL]->stream_create(s->e.be[HX_DEV_ACCEL], &s->e.copy_stream[i]);
    if (st) return st;
    int n = s->e.g->n ? s->e.g->n : 1;
    s->e.target = malloc(sizeof *s->e.target * n);
    s->e.why = malloc(sizeof *s->e.why * n);
    if (!s->e.target || !s->e.why)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    hx_place_opts o = {s->e.be[HX_DEV_ACCEL] != NULL, s->e.cfg.fallback == HX_FALLBACK_CPU,
                       has_kernel, s, s->e.cfg.auto_placement, NULL};
    st = hx__place(s->e.g, &o, s->e.target, s->e.why);
    bool pending = false;
    for (int i = 0; i < s->e.g->n && !st; i++) pending |= s->e.why[i] == HX_WHY_AUTO;
    hx_target *decided = pending ? malloc(sizeof *decided * n) : NULL;
    if (pending && !decided) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    if (pending && !st && !(st = hx__autoplace(s, &o, decided))) {
        o.decided = decided;
        st = hx__place(s->e.g, &o, s->e.target, s->e.why);
    }
    free(decided);
    if (st) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", hx_last_error());
        return hx__error(st, "hx_session_create: %s", msg);
    }
    if ((st = hx__lower(s->e.g, s->e.target, has_kernel, s, !s->e.cfg.no_host_fusion,
                        hx__recompute_on(&s->e), &s->e.lowered, &s->n_lowered)))
        return st;
    if ((st = hx__offload_place(&s->e))) return st;
    for (int i = 0; i < s->e.g->n; i++) s->n_fallbacks += s->e.why[i] == HX_WHY_FALLBACK;
    if (hx__debug("placement")) {
        hx__debug_placement(s);
        hx__debug_lowering(s, has_kernel);
        hx__autoplace_debug(s);
    }
    return HX_OK;
}

static hx_status alloc_persistent(hx_session *s)
{
    const hx_graph *g = s->e.g;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t->kind != HX_TENSOR_PARAMETER && t->kind != HX_TENSOR_CONSTANT &&
            t->kind != HX_TENSOR_STATE)
            continue;
        if (hx__residency_holds(&s->e, i)) continue; /* initialised by the residency's init */
        size_t bytes = hx_tensor_nbytes(t);
        int d = hx__dev_of(&s->e, i);
        char what[160];
        snprintf(what, sizeof what, "'%s' (%s)", t->name, hx__ops[t->op].name);
        hx_status st =
                s->e.be[d]->alloc(s->e.be[d], bytes, HX_MEM_PERSISTENT, what, &s->e.persist[i]);
        if (st) return hx__engine_device_report(&s->e, "hx_session_create", st, false);
        s->e.persist_bytes[d] += bytes;
        void *host = d == HX_DEV_HOST ? s->e.persist[i] : malloc(bytes ? bytes : 1); /* staging */
        if (!host) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
        if (t->kind == HX_TENSOR_CONSTANT) memcpy(host, t->constant, bytes);
        else st = hx__param_init(t, host, s->e.cfg.seed, s->e.nthreads);
        if (!st && d != HX_DEV_HOST)
            st = hx__engine_copy_in(&s->e, d, s->e.persist[i], host, bytes);
        if (host != s->e.persist[i]) free(host);
        if (st) return st;
    }
    return HX_OK;
}

/* A training step that can never fit the device is refused at creation,
 * not at its first run: its plan is made now, with its arena. */
static hx_status plan_training_step(hx_session *s)
{
    bool updates = false;
    for (int i = 0; i < s->e.g->n && !updates; i++) updates = s->e.g->tensors[i]->kind == HX_TENSOR_UPDATE;
    if (!updates || !s->e.be[HX_DEV_ACCEL]) return HX_OK;
    hx_plan *p = NULL;
    int no_fetch[1];
    return hx__engine_plan(&s->e, no_fetch, 0, true, "hx_session_create (planning the training step)", &p);
}

hx_status hx_session_create(hx_graph *g, const hx_session_config *cfg, hx_session **out)
{
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: out is NULL");
    *out = NULL;
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: graph is NULL");
    hx_session_config c = cfg ? *cfg : hx_session_config_default();
    if (c.n_threads < 0 || (unsigned)c.accelerator > HX_ACCELERATOR_NONE ||
        (unsigned)c.fallback > HX_FALLBACK_CPU)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_session_create: n_threads %d must be >= 0 (0: all cores), "
                         "accelerator one of HX_ACCELERATOR_* and fallback one of HX_FALLBACK_*",
                         c.n_threads);
    const hx_loss_scale_config *ls = &c.loss_scale;
    if (ls->enabled && !(ls->initial_scale > 0 && isfinite(ls->initial_scale) &&
                         ls->growth_interval >= 1 && ls->growth_factor >= 1 &&
                         isfinite(ls->growth_factor) && ls->backoff_factor > 0 &&
                         ls->backoff_factor < 1))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_session_create: loss scaling needs initial_scale > 0, "
                         "growth_interval >= 1, growth_factor >= 1 and 0 < backoff_factor < 1");
    if (!(c.clip_grad_norm >= 0 && isfinite(c.clip_grad_norm)))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: clip_grad_norm %g must be "
                         "finite and >= 0 (0: no clipping)", c.clip_grad_norm);
    const hx_emu_host_cost *hc = &c.emu_host_cost;
    if (!(hc->flops_per_s >= 0 && isfinite(hc->flops_per_s) && hc->launch_latency_s >= 0 &&
          hc->launch_latency_s < 1))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: emu_host_cost needs a "
                         "finite flops_per_s >= 0 and 0 <= launch_latency_s < 1 (all 0: no "
                         "simulated host), not %g and %g", hc->flops_per_s, hc->launch_latency_s);
    if (c.zero_stage < 0 || c.zero_stage > 3 || (c.zero_stage && !c.comm))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: zero_stage %d %s", c.zero_stage,
                         c.zero_stage < 0 || c.zero_stage > 3
                                 ? "is not a ZeRO stage (0, 1, 2 or 3)"
                                 : "needs a communicator (config.comm) to shard over; without "
                                   "one leave zero_stage 0");
    hx_status st = hx__offload_resolve(&c.offload);
    if (st) return st;
    hx_session *s = calloc(1, sizeof *s);
    if (!s) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    s->stats.loss_scale = ls->enabled ? ls->initial_scale : 1.0;
    s->lr_scale = 1.0;
    s->local_size = 1;
    s->e.g = g;
    s->e.cfg = c;
    s->e.nthreads = c.n_threads ? c.n_threads : omp_get_num_procs();
    hx__graph_hold(g);
    s->e.persist = calloc(g->n ? g->n : 1, sizeof *s->e.persist);
    st = s->e.persist ? setup_lanes(s)
                      : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    if (!st) st = setup_devices(s);
    /* before planning (it sets the gradient buckets) and the storage (ZeRO: what is
     * another rank's); collective: its ranks agree on the rest where they keep a disk tier */
    if (!st) st = hx__session_dp_setup(s);
    bool agree = !st && s->zero_owner && s->e.cfg.offload.offload_param == HX_OFFLOAD_DISK;
    /* where parameters live: the config's or auto_offload's choice (none: s->e.persist) */
    if (!st && s->e.cfg.offload.offload_param == HX_OFFLOAD_DISK)
        st = hx__disk_create(&s->e, &s->e.residency);
    if (!st) st = alloc_persistent(s);
    if (!st) st = hx__session_bind_caches(s);
    if (!st && !s->e.residency) st = hx__half_copies_refresh(&s->e, NULL); /* else by its init */
    if (!st) st = hx__scan_alloc(&s->e);
    if (!st && s->e.residency) st = s->e.residency->init(s->e.residency);
    if (!st && s->zero_owner) st = hx__session_zero_shard(s);
    if (agree) st = hx__zero_agree(s, "hx_session_create", st);
    if (!st) st = plan_training_step(s);
    if (!st && c.pin_update_threads) /* the cores of the ranks on this host: after dp_setup */
        st = hx__pin_create(s->e.nthreads, s->local_rank, s->local_size,
                            c.comm ? hx_comm_rank(c.comm) : 0, &s->e.pin);
    if (st) {
        hx_session_free(s);
        return st;
    }
    *out = s;
    return HX_OK;
}

int64_t hx_session_step(const hx_session *s) { return s ? s->stats.step : 0; }

hx_status hx_session_train_stats(const hx_session *s, hx_train_stats *out)
{
    if (!s || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_train_stats: %s is NULL",
                         s ? "out" : "session");
    *out = s->stats;
    out->host_update_s = atomic_load(&s->e.host_update_s); /* the delayed update's thread adds too */
    return HX_OK;
}

hx_status hx_session_set_lr_scale(hx_session *s, double scale)
{
    if (!s) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_set_lr_scale: session is NULL");
    if (!(scale >= 0 && isfinite(scale)))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_set_lr_scale: scale %g must be "
                         "finite and >= 0", scale);
    hx_status st = hx__session_enter(s, "hx_session_set_lr_scale");
    if (st) return st;
    s->lr_scale = scale;
    hx__session_leave(s);
    return HX_OK;
}

/* ---- the thread rule ------------------------------------------------------------ */

/* The session for fn's caller alone (enter without the settling). */
static hx_status claim(hx_session *s, const char *fn)
{
    if (!s) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: session is NULL", fn);
    if (atomic_exchange(&s->in_use, true))
        return hx__error(HX_ERR_STATE,
                         "%s: another thread is using this session (a call on it has not "
                         "returned); a session is used by one thread at a time: wait for that "
                         "call, or give each thread its own session", fn);
    return HX_OK;
}

hx_status hx__session_enter(hx_session *s, const char *fn)
{
    hx_status st = claim(s, fn);
    if (st) return st;
    if ((st = hx__session_dp_settle(s, fn))) hx__session_leave(s);
    return st;
}

void hx__session_leave(hx_session *s) { atomic_store(&s->in_use, false); }

/* The embedding tables of the graph, held for a run as the table rule
 * says: a training run alone, others shared. */
static hx_status hold_tables(hx_session *s, bool train)
{
    const hx_graph *g = s->e.g;
    for (int i = 0; i < g->n_tables; i++) {
        hx_status st = hx__embedding_hold(g->tables[i].table, train, "hx_session_run");
        if (st) {
            while (i--) hx__embedding_release(g->tables[i].table, train);
            return st;
        }
    }
    return HX_OK;
}

static void release_tables(hx_session *s, bool train)
{
    for (int i = 0; i < s->e.g->n_tables; i++) hx__embedding_release(s->e.g->tables[i].table, train);
}

/* ---- feeds and fetches -------------------------------------------------------- */

static hx_status resolve(const hx_session *s, const char *what, int i, const char *name,
                         const hx_tensor *t, const hx_tensor **out)
{
    if (t) {
        *out = t;
        if (t->graph != s->e.g)
            return hx__error(HX_ERR_INVALID_ARGUMENT,
                             "hx_session_run: %s %d names tensor '%s' of another graph; use the "
                             "tensors of the session's graph", what, i, t->name);
        return HX_OK;
    }
    if (!name)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_session_run: %s %d has neither tensor nor name", what, i);
    *out = hx_graph_find(s->e.g, name);
    if (!*out)
        return hx__error(HX_ERR_NOT_FOUND,
                         "hx_session_run: %s %d names '%s', which is not in the graph", what, i,
                         name);
    return HX_OK;
}

static hx_status check_bytes(const char *what, int i, const hx_tensor *t, const void *data,
                             size_t bytes)
{
    char sh[HX_SHAPE_STR_LEN];
    if (!data)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_run: %s %d ('%s') data is NULL",
                         what, i, t->name);
    if (bytes != hx_tensor_nbytes(t))
        return hx__error(HX_ERR_SHAPE,
                         "hx_session_run: %s %d ('%s') has %zu bytes; the tensor is %s %s = "
                         "%zu bytes", what, i, t->name, bytes, hx_dtype_name(t->dtype),
                         hx__shape_str(t, sh, sizeof sh), hx_tensor_nbytes(t));
    return HX_OK;
}

/* torch.nn.utils.clip_grad_norm_'s coefficient for a global norm. */
static float clip_coefficient(double max_norm, double norm)
{
    if (max_norm <= 0) return 1.0f;
    double c = max_norm / (norm + 1e-6);
    return c < 1 ? (float)c : 1.0f;
}

/* Phase 0 (forward and backward), then (training) the gradient scan and
 * phase 1 (the updates), with the loss scaler's bookkeeping. */
static hx_status execute(hx_session *s, const hx_plan *p, bool train)
{
    const hx_loss_scale_config *ls = &s->e.cfg.loss_scale;
    bool scaling = train && ls->enabled && s->e.g->grad_seed;
    hx_status st = HX_OK;
    if (scaling) { /* d loss / d loss = the scale */
        int id = s->e.g->grad_seed->id;
        float v = (float)s->stats.loss_scale;
        if ((st = hx__engine_copy_in(&s->e, hx__dev_of(&s->e, id), s->e.persist[id], &v, sizeof v)))
            return st;
    }
    /* data parallel: the ranks' summed gradients averaged, with the unscaling */
    double unscale = (scaling ? 1.0 / s->stats.loss_scale : 1.0) /
                     (s->e.cfg.comm ? hx_comm_size(s->e.cfg.comm) : 1); /* sharded tables too */
    hx_exec run = {.step = s->stats.step, .train = train, .grad_unscale = (float)unscale,
                   .grad_clip = 1.0f, .lr_scale = s->lr_scale};
    hx_exec ex[2][2]; /* [phase][host lanes, device] */
    hx__plan_contexts(p, &run, ex);
    if (!hx__dpu_reads_no_master(p) && (st = hx__dpu_settle(&s->e))) return st;
    int n_updates;
    hx__plan_steps(p, 1, &n_updates);
    bool summing = train && n_updates && hx__session_dp_on(s);
    /* the last step's all-gathers: a run that sums finishes each before its first reader */
    if (!summing && (st = hx__session_dp_settle(s, "hx_session_run"))) return st;
    if ((st = hx__session_zero3_begin(s, p))) return st; /* stage 3: the gathers */
    if (summing && (st = hx__session_dp_begin(s, p))) { /* the sums, during the backward */
        hx__session_zero3_end(s);
        return st;
    }
    st = hx__exec_phase(&s->e, p, 0, &ex[0][0], &ex[0][1]);
    hx_status gathered = hx__session_zero3_end(s);
    if (!st) st = gathered;
    if (st && summing) hx__session_dp_abort(s);
    if (st) return st;
    if ((st = hx__dpu_settle(&s->e)) || !train) { /* the update of the step before */
        if (summing) hx__session_dp_abort(s);
        return st;
    }
    if (!n_updates) { /* a training run without updates */
        s->stats.step++;
        return HX_OK;
    }

    if (summing && ((st = hx__session_dp_grads(s)) || (st = hx__session_dp_nccl(s, p)))) return st;
    const hx_tensor *bad;
    double sumsq;
    if ((st = hx__scan_grads(&s->e, p, ex[1], &bad, &sumsq))) return st;
    if (s->e.cfg.zero_stage && (st = hx__session_zero_norm(s, p, &bad, &sumsq))) return st;
    bool sharing = s->zero_owner && s->e.cfg.zero_stage < 3; /* the owners' parameters to every rank */
    s->step_synced = !sharing; /* the norm was stage 3's last collective */
    s->stats.grad_norm = sqrt(sumsq) * unscale;
    if (bad && !scaling)
        return hx__error(HX_ERR_NUMERIC,
                         "hx_session_run: the gradient of parameter '%s' holds Inf or NaN; no "
                         "parameter was updated (check the inputs, lower the learning rate, or "
                         "enable loss scaling)", bad->param->name);
    s->stats.last_skipped = bad != NULL;
    if (bad) {
        s->stats.skipped_steps++;
        s->stats.loss_scale *= ls->backoff_factor;
        s->good_steps = 0;
        return HX_OK;
    }
    float clip = clip_coefficient(s->e.cfg.clip_grad_norm, s->stats.grad_norm);
    ex[1][0].grad_clip = ex[1][1].grad_clip = clip;
    bool delay = s->e.cfg.delayed_param_update && s->stats.step >= s->e.cfg.dpu_warmup_steps &&
            hx__dpu_plan_ok(p);
    /* the disk tier: what the all-gathers write over read first */
    if (sharing && s->e.residency && (st = s->e.residency->loaded(s->e.residency, -1))) return st;
    if (sharing && (st = hx__session_dp_share_begin(s, p))) return st;
    if (delay) st = hx__dpu_launch(&s->e, p, &ex[1][0]);
    else if (s->e.residency) st = s->e.residency->update(s->e.residency, p, &ex[1][0]);
    else st = hx__exec_phase(&s->e, p, 1, &ex[1][0], &ex[1][1]);
    if (sharing && st && !s->e.residency) hx__session_dp_abort(s);
    else if (sharing) { /* the disk tier's failure too: the others' all-gathers need this rank's */
        char why[HX_ERROR_LEN]; /* (then every rank drops the step) */
        snprintf(why, sizeof why, "%s", st ? hx_last_error() : "");
        hx_status shared = hx__session_dp_share_end(s);
        s->step_synced = true;
        st = st ? hx__error(st, "%s", why) : shared;
    }
    if (st) return st;
    s->stats.step++;
    if (scaling && ++s->good_steps >= ls->growth_interval) { /* >=: a loaded count may be past it */
        s->stats.loss_scale *= ls->growth_factor;
        s->good_steps = 0;
    }
    return HX_OK;
}

/* The device allocation that holds p (the whole [p, p + bytes) if `whole`), or NULL. */
static const struct hx_device_block *device_block(const hx_session *s, const void *p,
                                                  size_t bytes, bool whole)
{
    for (int i = 0; i < s->n_dev_blocks; i++) {
        const struct hx_device_block *b = &s->dev_blocks[i];
        const char *lo = b->p, *x = p;
        if (x >= lo && x < lo + b->bytes && (!whole || bytes <= b->bytes - (size_t)(x - lo)))
            return b;
    }
    return NULL;
}

/* A feed that starts in a device block must end in it. */
static hx_status check_device_feed(const hx_session *s, int i, const hx_tensor *t,
                                   const void *data, size_t bytes)
{
    if (device_block(s, data, bytes, false) && !device_block(s, data, bytes, true))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_session_run: feed %d ('%s') is device memory from "
                         "hx_session_device_alloc, but its %zu bytes run past the end of that "
                         "allocation", i, t->name, bytes);
    return HX_OK;
}

/* hx_session_run, its caller holding the session. */
static hx_status run(hx_session *s, const hx_feed *feeds, int n_feeds, const hx_fetch *fetches,
                     int n_fetches, unsigned flags)
{
    if (n_feeds < 0 || n_fetches < 0 || (n_feeds && !feeds) || (n_fetches && !fetches))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_session_run: %d feeds at %p, %d fetches at %p", n_feeds,
                         (const void *)feeds, n_fetches, (const void *)fetches);
    if (flags & ~(unsigned)HX_RUN_TRAIN)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_run: unknown flags 0x%x", flags);

    enum { SMALL = 16 };
    const hx_tensor *feed_small[SMALL], *fetch_small[SMALL];
    int id_small[SMALL];
    bool on_dev_small[SMALL];
    const hx_tensor **feed_t = n_feeds <= SMALL ? feed_small : malloc(sizeof *feed_t * n_feeds);
    bool *on_dev = n_feeds <= SMALL ? on_dev_small : malloc(sizeof *on_dev * n_feeds);
    const hx_tensor **fetch_t = n_fetches <= SMALL ? fetch_small : malloc(sizeof *fetch_t * n_fetches);
    int *ids = n_fetches <= SMALL ? id_small : malloc(sizeof *ids * n_fetches);
    hx_residency *res = s->e.residency;
    hx_status st = HX_OK;
    bool tables_held = false;
    if (!feed_t || !on_dev || !fetch_t || !ids) {
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
        goto out;
    }

    for (int i = 0; i < n_feeds && !st; i++) {
        if ((st = resolve(s, "feed", i, feeds[i].name, feeds[i].tensor, &feed_t[i]))) break;
        const hx_tensor *t = feed_t[i];
        if (t->kind != HX_TENSOR_INPUT)
            st = hx__error(HX_ERR_INVALID_ARGUMENT,
                           "hx_session_run: feed %d names '%s', which is not an input (it is "
                           "%s); set parameters with hx_session_write", i, t->name,
                           hx__ops[t->op].name);
        if (!st) st = check_bytes("feed", i, t, feeds[i].data, feeds[i].bytes);
        if (!st) st = check_device_feed(s, i, t, feeds[i].data, feeds[i].bytes);
        on_dev[i] = device_block(s, feeds[i].data, feeds[i].bytes, true);
        for (int j = 0; j < i && !st; j++)
            if (feed_t[j] == t)
                st = hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_run: '%s' is fed twice",
                               t->name);
    }
    for (int i = 0; i < n_fetches && !st; i++) {
        if ((st = resolve(s, "fetch", i, fetches[i].name, fetches[i].tensor, &fetch_t[i]))) break;
        const hx_tensor *t = fetch_t[i];
        if (t->kind == HX_TENSOR_UPDATE)
            st = hx__error(HX_ERR_INVALID_ARGUMENT,
                           "hx_session_run: fetch %d names '%s', an optimizer update, which has "
                           "no value; fetch the parameter instead", i, t->name);
        if (!st) st = check_bytes("fetch", i, t, fetches[i].data, fetches[i].bytes);
        if (!st) st = hx__session_zero_access(s, "hx_session_run", t, false); /* another rank's shard */
        ids[i] = t->id;
    }
    if (st) goto out;

    bool train = flags & HX_RUN_TRAIN;
    s->step_synced = false;
    if ((st = hold_tables(s, train))) goto out;
    tables_held = true;
    hx_plan *p = NULL;
    if ((st = hx__engine_plan(&s->e, ids, n_fetches, train, "hx_session_run", &p))) goto out;
    if (res && (st = res->run_begin(res, p, train))) goto out; /* its reads overlap phase 0 */
    if ((st = hx__engine_feed(&s->e, p, feeds, feed_t, on_dev, n_feeds))) goto out;
    s->last_plan = p;

    hx_train_stats stats0 = s->stats;
    int good0 = s->good_steps;
    double t0 = hx__now();
    s->e.time_units = train && hx__autoplace_timing(s);
    st = execute(s, p, train);
    if (!st && s->e.time_units) s->timed_plan = p;
    s->e.time_units = false;
    if (!st && train) hx__autoplace_record_step(s, hx__now() - t0);
    if (!st && train && res) st = res->run_store(res);
    /* ZeRO: every rank keeps the step or none does (each rank's disk holds its shard) */
    if (train && res && s->zero_owner && (!st || s->step_synced))
        st = hx__zero_agree(s, "hx_session_run", st);
    if (!st && train && res) res->run_commit(res);
    if (st && res) { /* nothing applied: the step did not happen */
        s->stats = stats0;
        s->good_steps = good0;
    }
    if (st) goto out;
    hx__plan_memtrace(&s->e, p);
    for (int i = 0; i < n_fetches && !st; i++) {
        const hx_tensor *t = fetch_t[i];
        int d = hx__dev_of(&s->e, t->id);
        const void *src = hx__plan_locate(&s->e, p, d, t->id);
        if (!src) /* held by the residency, not in host memory for the run (optimizer state) */
            st = res->read(res, "hx_session_run", t, fetches[i].data);
        else st = hx__engine_copy_out(&s->e, d, fetches[i].data, src, fetches[i].bytes);
    }
out:
    if (res) res->run_end(res);
    if (tables_held) release_tables(s, flags & HX_RUN_TRAIN);
    if (feed_t != feed_small) free(feed_t);
    if (on_dev != on_dev_small) free(on_dev);
    if (fetch_t != fetch_small) free(fetch_t);
    if (ids != id_small) free(ids);
    return st;
}

hx_status hx_session_run(hx_session *s, const hx_feed *feeds, int n_feeds,
                         const hx_fetch *fetches, int n_fetches, unsigned flags)
{
    hx_status st = claim(s, "hx_session_run"); /* the all-gathers left: execute() */
    if (st) return st;
    st = run(s, feeds, n_feeds, fetches, n_fetches, flags);
    hx__session_leave(s);
    return st;
}

/* ---- parameter access, statistics ------------------------------------------------ */

static hx_status persistent_of(hx_session *s, const char *fn, const hx_tensor *t, size_t bytes,
                               const void *data, void **out)
{
    if (!s || !t || !data)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                         !s ? "session" : !t ? "tensor" : "data");
    if (t->graph != s->e.g)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: '%s' belongs to another graph", fn, t->name);
    if (!s->e.persist[t->id] && !hx__residency_holds(&s->e, t->id))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s: '%s' is not a parameter, constant or optimizer state; fetch it "
                         "with hx_session_run", fn, t->name);
    if (bytes != hx_tensor_nbytes(t))
        return hx__error(HX_ERR_SHAPE, "%s: '%s' is %zu bytes, not %zu", fn, t->name,
                         hx_tensor_nbytes(t), bytes);
    *out = s->e.persist[t->id];
    return hx__dpu_settle(&s->e);
}

/* A parameter or state the residency holds, or one of whose half copies it holds. */
static bool held(const hx_session *s, const hx_tensor *t)
{
    if (hx__residency_holds(&s->e, t->id)) return true;
    for (int i = 0; s->e.residency && i < s->e.g->n; i++) {
        const hx_tensor *c = s->e.g->tensors[i];
        if (hx__is_half_copy(c) && c->param == t && hx__residency_holds(&s->e, i)) return true;
    }
    return false;
}

static hx_status read_held(hx_session *s, const hx_tensor *t, void *data, size_t bytes)
{
    void *p = NULL;
    hx_status st = t ? hx__session_zero_access(s, "hx_session_read", t, false) : HX_OK;
    if (!st) st = persistent_of(s, "hx_session_read", t, bytes, data, &p);
    if (!st && hx__residency_holds(&s->e, t->id))
        return s->e.residency->read(s->e.residency, "hx_session_read", t, data);
    if (!st) st = hx__engine_copy_out(&s->e, hx__dev_of(&s->e, t->id), data, p, bytes);
    return st;
}

static hx_status write_held(hx_session *s, const hx_tensor *t, const void *data, size_t bytes)
{
    void *p = NULL;
    hx_status st = t ? hx__session_zero_access(s, "hx_session_write", t, true) : HX_OK;
    if (!st) st = persistent_of(s, "hx_session_write", t, bytes, data, &p);
    if (!st && held(s, t))
        return s->e.residency->write(s->e.residency, "hx_session_write", t, data);
    if (!st) st = hx__engine_copy_in(&s->e, hx__dev_of(&s->e, t->id), p, data, bytes);
    if (!st && t->kind == HX_TENSOR_PARAMETER) st = hx__half_copies_refresh(&s->e, t);
    return st;
}

hx_status hx_session_read(hx_session *s, const hx_tensor *t, void *data, size_t bytes)
{
    hx_status st = hx__session_enter(s, "hx_session_read");
    if (st) return st;
    st = read_held(s, t, data, bytes);
    hx__session_leave(s);
    return st;
}

hx_status hx_session_write(hx_session *s, const hx_tensor *t, const void *data, size_t bytes)
{
    hx_status st = hx__session_enter(s, "hx_session_write");
    if (st) return st;
    st = write_held(s, t, data, bytes);
    hx__session_leave(s);
    return st;
}

static hx_status memory_stats_held(hx_session *s, hx_memory_stats *out)
{
    if (!s->e.n_plans) { /* plan the training step without running it */
        hx_plan *p = NULL;
        int no_fetch[1];
        hx_status st = hx__engine_plan(&s->e, no_fetch, 0, true, "hx_session_memory_stats", &p);
        if (st) return st;
    }
    hx__engine_memory_stats(&s->e, out);
    return hx__session_zero3_plans(s); /* stage 3: the gathers' prediction */
}

hx_status hx_session_memory_stats(hx_session *s, hx_memory_stats *out)
{
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_memory_stats: out is NULL");
    hx_status st = hx__session_enter(s, "hx_session_memory_stats");
    if (st) return st;
    st = memory_stats_held(s, out);
    if (!st) out->dp_chunk_bytes = hx__session_dp_chunk_bytes(s);
    if (!st) hx__session_zero_stats(s, out);
    if (!st) out->disk_persistent_bytes = hx__disk_whole_bytes(&s->e);
    hx__session_leave(s);
    return st;
}

/* ---- device memory for feeds, trace ---------------------------------------------- */

static hx_status need_accel(const hx_session *s, const char *fn)
{
    if (!s) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: session is NULL", fn);
    if (!s->e.be[HX_DEV_ACCEL])
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: the session has no accelerator "
                         "(HX_ACCELERATOR_NONE); there is no device memory", fn);
    return HX_OK;
}

static hx_status device_alloc_held(hx_session *s, size_t bytes, void **out)
{
    const char *fn = "hx_session_device_alloc";
    hx_status st = need_accel(s, fn);
    if (st) return st;
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    struct hx_device_block *blocks = realloc(s->dev_blocks, sizeof *blocks * (s->n_dev_blocks + 1));
    if (!blocks) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    s->dev_blocks = blocks;
    hx_backend *acc = s->e.be[HX_DEV_ACCEL];
    void *p = NULL;
    if ((st = acc->alloc(acc, bytes, HX_MEM_PERSISTENT, "a device feed buffer", &p))) return hx__engine_device_report(&s->e, fn, st, false);
    s->dev_blocks[s->n_dev_blocks++] = (struct hx_device_block){p, bytes};
    *out = p;
    return HX_OK;
}

hx_status hx_session_device_alloc(hx_session *s, size_t bytes, void **out)
{
    if (out) *out = NULL;
    hx_status st = hx__session_enter(s, "hx_session_device_alloc");
    if (st) return st;
    st = device_alloc_held(s, bytes, out);
    hx__session_leave(s);
    return st;
}

void hx_session_device_free(hx_session *s, void *p)
{
    if (!s || !p) return;
    for (int i = 0; i < s->n_dev_blocks; i++)
        if (s->dev_blocks[i].p == p) {
            s->e.be[HX_DEV_ACCEL]->free(s->e.be[HX_DEV_ACCEL], p);
            s->dev_blocks[i] = s->dev_blocks[--s->n_dev_blocks];
            return;
        }
}

hx_status hx_session_device_upload(hx_session *s, void *dst, const void *src, size_t bytes)
{
    const char *fn = "hx_session_device_upload";
    hx_status st = need_accel(s, fn);
    if (st) return st;
    if (!dst || !src) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, dst ? "src" : "dst");
    if ((st = hx__session_enter(s, fn))) return st;
    if (!device_block(s, dst, bytes, true))
        st = hx__error(HX_ERR_INVALID_ARGUMENT, "%s: %zu bytes at %p are not inside one "
                       "allocation of hx_session_device_alloc of this session", fn, bytes, dst);
    else st = hx__engine_copy_in(&s->e, HX_DEV_ACCEL, dst, src, bytes);
    hx__session_leave(s);
    return st;
}

hx_status hx_session_trace_flush(hx_session *s)
{
    if (!s) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_trace_flush: session is NULL");
    return hx__trace_write(s->e.trace);
}

hx_status hx_session_offload_report(hx_session *s, hx_offload_report *out)
{
    if (!s || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_offload_report: %s is NULL",
                         s ? "out" : "session");
    return hx__offload_report(&s->e, out);
}
