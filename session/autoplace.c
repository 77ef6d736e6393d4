/* Automatic placement at session creation: the costs the planner needs
 * (graph/autoplace*.c), measured or read from the op cost cache, its plan,
 * and what it tells people (HX_DEBUG=placement, hx_session_placement_report;
 * per unit: placement_units.c).
 *
 * An op's time on a target: its kernel run once or a few times with zeroed
 * inputs of its shapes, the fastest run, raised to the simulated floor of
 * that side when emu's costs are set (the emu device runs the host's
 * kernels, so its kernel time is the host's). On an accelerator of its own
 * each run is a batch of launches and one wait, as the executor issues
 * them: with a wait per launch the waits dominated (a GPT step all on an
 * H100 was predicted at 76 ms and ran in 27) and ops faster on the device
 * went to the host. Ops that change state outside their buffers (host
 * tables) are not run: their time is the bytes they
 * touch at the host's measured memcpy rate. The link: a small and a large
 * copy per direction on the accelerator's copy streams give latency and
 * bandwidth. */
#include "session/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LINK_SMALL = 64 << 10, LINK_LARGE = 4 << 20, MEMCPY_BYTES = 8 << 20, DEVICE_BATCH = 16 };

typedef struct ap_run {
    hx_session *s;
    hx_op_costs *cache;
    hx_placement_report *r;
    double host_bytes_per_s;
    double sleep_late;  /* how late a short sleep ends (a simulated floor's) */
    char *one_side;     /* s->auto_why: why a single side was kept ("": the plan) */
    void *zeros;       /* LINK_LARGE zero bytes, grown for kernels' inputs */
    size_t zeros_bytes;
    uint64_t *seen;    /* the distinct signatures asked for */
    int n_seen, cap_seen;
} ap_run;

/* Counts sig in the report once: a signature, and whether the file had it. */
static hx_status count(ap_run *a, uint64_t sig, bool from_file)
{
    for (int i = 0; i < a->n_seen; i++)
        if (a->seen[i] == sig) return HX_OK;
    if (a->n_seen == a->cap_seen) {
        int cap = a->cap_seen ? 2 * a->cap_seen : 64;
        uint64_t *p = realloc(a->seen, sizeof *p * (size_t)cap);
        if (!p) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create (placement): out of host memory");
        a->seen = p;
        a->cap_seen = cap;
    }
    a->seen[a->n_seen++] = sig;
    a->r->n_signatures++;
    a->r->n_cache_hits += from_file;
    return HX_OK;
}

static uint64_t machine_hash(int nthreads)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    long procs = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t h = hx__hash(14695981039346656037ull, host, strlen(host));
    h = hx__hash(h, &procs, sizeof procs);
    return hx__hash(h, &nthreads, sizeof nthreads);
}

/* The op, dtype, shapes and attributes of t and its inputs, and where. The
 * op goes in by name, so that adding an op to the enum leaves the cached
 * costs of the others valid. */
static uint64_t signature(const hx_tensor *t, const char *where)
{
    uint64_t h = hx__hash(14695981039346656037ull, where, strlen(where));
    const char *op = hx__ops[t->op].name;
    h = hx__hash(h, op, strlen(op));
    int v[2] = {(int)t->dtype, t->ndim};
    h = hx__hash(h, v, sizeof v);
    h = hx__hash(h, t->shape, sizeof t->shape[0] * (size_t)t->ndim);
    h = hx__hash(h, t->attr.i, sizeof t->attr.i);
    h = hx__hash(h, t->attr.f, sizeof t->attr.f);
    for (int k = 0; k < t->n_src; k++) {
        const hx_tensor *x = t->src[k];
        int w[2] = {(int)x->dtype, x->ndim};
        h = hx__hash(h, w, sizeof w);
        h = hx__hash(h, x->shape, sizeof x->shape[0] * (size_t)x->ndim);
    }
    return h;
}

static hx_status zeros_at_least(ap_run *a, size_t n)
{
    if (n <= a->zeros_bytes) return HX_OK;
    void *z = calloc(1, n);
    if (!z) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create (placement): out of host memory");
    free(a->zeros);
    a->zeros = z;
    a->zeros_bytes = n;
    return HX_OK;
}

/* Kernel seconds of t on backend b (stream st): its fastest run of 2 to 5
 * after a warm-up, a run being `batch` launches and one wait (the time per
 * launch); *ran false when the kernel failed. */
static hx_status time_kernel(ap_run *a, hx_backend *b, hx_stream *st, const hx_tensor *t,
                             int batch, double *out, bool *ran)
{
    hx_launch_fn fn = b->kernel(b, t->op, t->dtype);
    void *buf[17] = {0};
    int n = t->n_src < 16 ? t->n_src : 16;
    hx_status s = HX_OK;
    *ran = false;
    for (int k = 0; k <= n && !s; k++) {
        size_t bytes = hx_tensor_nbytes(k < n ? t->src[k] : t);
        bytes = bytes ? bytes : 1;
        if (!(s = zeros_at_least(a, bytes)) &&
            !(s = b->alloc(b, bytes, HX_MEM_TRANSIENT, "placement profiling", &buf[k])))
            s = b->copy_h2d(b, st, (hx_h2d_copy){buf[k], a->zeros, bytes, {0}});
    }
    if (!s) s = b->stream_sync(b, st);
    /* the threads a lane gets when host and emu work run side by side (the
     * executor shares the cores out), all of them otherwise */
    const hx_engine *e = &a->s->e;
    int nt = e->accel_on_host ? e->nthreads / 2 : e->nthreads;
    hx_exec ex = {.nthreads = nt > 1 ? nt : 1, .step = 0, .train = true, .grad_unscale = 1,
                  .grad_clip = 1, .lr_scale = 1};
    double best = INFINITY, spent = 0;
    /* a warm-up run (thread pools, first touches), then the fastest of 2 to 5 */
    for (int rep = -1; !s && fn && t->n_src <= 16 && rep < 5 && (rep < 2 || spent < 10e-3); rep++) {
        double t0 = hx__now();
        hx_status k = HX_OK;
        for (int i = 0; i < batch && !k; i++) k = b->launch(b, st, fn, &ex, t, buf[n], buf);
        if (!k) k = b->stream_sync(b, st);
        if (k) break; /* not runnable on zeros: estimated instead */
        if (rep < 0) continue;
        double dt = hx__now() - t0;
        best = fmin(best, dt / batch);
        spent += dt;
        *ran = true;
    }
    for (int k = 0; k <= n; k++)
        if (buf[k]) b->free(b, buf[k]);
    *out = best;
    return s == HX_ERR_OUT_OF_MEMORY || s == HX_ERR_DEVICE_OOM ? HX_OK : s; /* too big: estimated */
}

static double touched_bytes(const hx_tensor *t)
{
    double n = (double)hx_tensor_nbytes(t);
    for (int k = 0; k < t->n_src; k++) n += (double)hx_tensor_nbytes(t->src[k]);
    return n;
}

/* Whether running t on zeroed scratch buffers leaves all other state as it was. */
static bool runnable(const hx_tensor *t)
{
    return !hx__ops[t->op].host_only && !t->table && t->n_src <= 16;
}

/* The kernel seconds of t where its kernels run (`where`: "cpu" or the
 * accelerator's name), from the cache or measured now. */
static hx_status kernel_seconds(ap_run *a, const hx_tensor *t, bool device, double *out)
{
    hx_engine *e = &a->s->e;
    bool own = device && !e->accel_on_host; /* emu runs the host's kernels */
    hx_backend *b = e->be[own ? HX_DEV_ACCEL : HX_DEV_HOST];
    if (!runnable(t)) {
        *out = touched_bytes(t) / a->host_bytes_per_s;
        return HX_OK;
    }
    uint64_t sig = signature(t, b->name);
    bool from_file;
    if (hx__op_costs_get(a->cache, sig, out, &from_file)) return count(a, sig, from_file);
    bool ran;
    hx_status st = time_kernel(a, b, e->stream[own ? HX_DEV_ACCEL : HX_DEV_HOST], t,
                               own ? DEVICE_BATCH : 1, out, &ran);
    if (!st) st = count(a, sig, false);
    if (st) return st;
    if (!ran) {
        *out = touched_bytes(t) / a->host_bytes_per_s;
        return HX_OK;
    }
    return hx__op_costs_put(a->cache, sig, *out, hx__ops[t->op].name);
}

/* Seconds of one copy of `bytes` in direction dir (0: to the device). */
static hx_status time_copy(ap_run *a, int dir, size_t bytes, void *dev, void *host, double *out)
{
    hx_engine *e = &a->s->e;
    hx_backend *b = e->be[HX_DEV_ACCEL];
    hx_stream *st = e->copy_stream[dir];
    double best = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = hx__now();
        hx_status s = dir ? b->copy_d2h(b, st, (hx_d2h_copy){host, dev, bytes, {0}})
                          : b->copy_h2d(b, st, (hx_h2d_copy){dev, host, bytes, {0}});
        if (!s) s = b->stream_sync(b, st);
        if (s) return s;
        best = fmin(best, hx__now() - t0);
    }
    *out = best;
    return HX_OK;
}

/* Latency and bandwidth per direction, from the cache (keyed by the
 * accelerator and its simulated costs) or two copy sizes timed now. */
static hx_status measure_link(ap_run *a)
{
    hx_engine *e = &a->s->e;
    hx_backend *b = e->be[HX_DEV_ACCEL];
    const hx_emu_cost *c = &e->cfg.emu_cost;
    void *dev = NULL;
    hx_status st = zeros_at_least(a, LINK_LARGE);
    for (int dir = 0; dir < 2 && !st; dir++) {
        double t[2];
        for (int k = 0; k < 2 && !st; k++) {
            size_t bytes = k ? LINK_LARGE : LINK_SMALL;
            uint64_t sig = hx__hash(14695981039346656037ull, b->name, strlen(b->name));
            int v[2] = {dir, k};
            sig = hx__hash(sig, v, sizeof v);
            if (e->accel_on_host) sig = hx__hash(sig, c, sizeof *c);
            if (hx__op_costs_get(a->cache, sig, &t[k], NULL)) continue;
            if (!dev) st = b->alloc(b, LINK_LARGE, HX_MEM_TRANSIENT, "placement profiling", &dev);
            if (!st) st = time_copy(a, dir, bytes, dev, a->zeros, &t[k]);
            if (!st) st = hx__op_costs_put(a->cache, sig, t[k], dir ? "d2h" : "h2d");
        }
        if (st) break;
        double bw = (LINK_LARGE - LINK_SMALL) / (t[1] - t[0]);
        if (!(bw > 0 && isfinite(bw))) bw = LINK_LARGE / t[1];
        double lat = fmax(0, t[0] - LINK_SMALL / bw);
        if (dir) a->r->d2h_latency_s = lat, a->r->d2h_bytes_per_s = bw;
        else a->r->h2d_latency_s = lat, a->r->h2d_bytes_per_s = bw;
    }
    if (dev) b->free(b, dev);
    return st;
}

/* The host's memcpy rate (the estimate for ops that are not run). */
static hx_status measure_memcpy(ap_run *a)
{
    uint64_t sig = hx__hash(14695981039346656037ull, "memcpy", 6);
    double t;
    if (!hx__op_costs_get(a->cache, sig, &t, NULL)) {
        char *p = malloc(2 * (size_t)MEMCPY_BYTES);
        if (!p) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create (placement): out of host memory");
        memset(p, 1, 2 * (size_t)MEMCPY_BYTES);
        t = INFINITY;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = hx__now();
            memcpy(p + MEMCPY_BYTES, p, MEMCPY_BYTES);
            t = fmin(t, hx__now() - t0);
        }
        free(p);
        hx_status st = hx__op_costs_put(a->cache, sig, t, "memcpy");
        if (st) return st;
    }
    a->host_bytes_per_s = 2.0 * MEMCPY_BYTES / t; /* read and written */
    return HX_OK;
}

/* How late this machine wakes from a 50 us sleep (the median of 5): what
 * a kernel that sleeps out a simulated floor takes past it. */
static void measure_sleep(ap_run *a)
{
    double late[5];
    for (int i = 0; i < 5; i++) {
        double t0 = hx__now();
        late[i] = hx__sleep_until(t0 + 50e-6) >= t0 ? hx__now() - t0 - 50e-6 : 0;
    }
    for (int i = 1; i < 5; i++) /* insertion sort */
        for (int j = i; j > 0 && late[j] < late[j - 1]; j--) {
            double x = late[j];
            late[j] = late[j - 1];
            late[j - 1] = x;
        }
    a->sleep_late = fmax(0, late[2]);
}

/* The predicted seconds of t on one side: its kernel, raised to the floor
 * of emu's simulated machine (and then the wake-up's lateness). */
static hx_status op_seconds(ap_run *a, const hx_tensor *t, bool device, double *out)
{
    hx_engine *e = &a->s->e;
    hx_status st = kernel_seconds(a, t, device, out);
    if (st) return st;
    const hx_emu_cost *c = &e->cfg.emu_cost;
    double floor = 0;
    if (device && e->accel_on_host)
        floor = c->launch_latency_s + (c->flops_per_s > 0 ? hx__op_flops(t) / c->flops_per_s : 0);
    else if (!device) floor = hx__sim_host_floor(e, t);
    if (floor > *out) *out = floor + a->sleep_late;
    return HX_OK;
}

static double cost_of(void *ctx, const hx_tensor *t, hx_target target)
{
    const hx_session *s = ctx;
    return s->auto_cost[2 * t->id + (target == HX_TARGET_DEVICE)];
}

/* Every op's predicted seconds on the sides it may run on into s->auto_cost. */
static hx_status measure_ops(ap_run *a, const hx_place_opts *o)
{
    hx_session *s = a->s;
    const hx_graph *g = s->e.g;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        s->auto_cost[2 * i] = s->auto_cost[2 * i + 1] = INFINITY;
        if (t->op <= HX_OP_STATE || t->recompute_of) continue;
        bool pend = s->e.target[i] == HX_TARGET_AUTO && s->e.why[i] == HX_WHY_AUTO;
        for (int d = 0; d < 2; d++) {
            hx_target tg = d ? HX_TARGET_DEVICE : HX_TARGET_CPU;
            if (pend ? !o->has_kernel(o->ctx, tg, t->op, t->dtype) : s->e.target[i] != tg) continue;
            hx_status st = op_seconds(a, t, d, &s->auto_cost[2 * i + d]);
            if (st) return st;
        }
    }
    return HX_OK;
}

static hx_status plan(ap_run *a, const hx_place_opts *o, hx_target *decided)
{
    hx_session *s = a->s;
    const hx_graph *g = s->e.g;
    hx_placement_report *r = a->r;
    int *group_of = malloc(sizeof *group_of * (size_t)(g->n ? g->n : 1));
    hx_ap_problem p;
    hx_status st = group_of ? hx__ap_build(g, s->e.target, s->e.why, o, cost_of, s, &p, group_of)
                            : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    if (st) {
        free(group_of);
        return st;
    }
    /* a value that crosses wakes two waiting threads (the copy stream, then
     * the lane that reads it), each late by about the measured lateness */
    p.lat[0] = r->h2d_latency_s + 2 * a->sleep_late;
    p.lat[1] = r->d2h_latency_s + 2 * a->sleep_late;
    p.bw[0] = r->h2d_bytes_per_s;
    p.bw[1] = r->d2h_bytes_per_s;
    p.cap = r->device_cap;
    int8_t *gside = malloc((size_t)(p.n_groups ? p.n_groups : 1));
    hx_ap_work *w = NULL;
    if (!gside || (st = hx__ap_work_new(&p, &w)) || (st = hx__ap_plan(&p, gside, &r->predicted_step_s))) {
        if (!st) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    } else {
        a->one_side[0] = 0;
        r->mixed_step_s = r->predicted_step_s;
        int G = p.n_groups;
        int8_t *side = gside;
        int8_t *all = malloc((size_t)(G ? G : 1) * 2);
        if (!all) {
            st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
            goto out;
        }
        memset(all, 0, (size_t)G);
        memset(all + G, 1, (size_t)G);
        r->predicted_all_host_s = hx__ap_eval(&p, w, all, NULL);
        r->predicted_all_device_s = hx__ap_eval(&p, w, all + G, NULL);
        /* a mixed placement must beat the better single side by the margin */
        bool dev = r->predicted_all_device_s <= r->predicted_all_host_s;
        double single = dev ? r->predicted_all_device_s : r->predicted_all_host_s;
        if (isfinite(single) && single <= r->predicted_step_s * (1 + HX_AUTO_MIXED_MARGIN)) {
            side = dev ? all + G : all;
            r->predicted_step_s = single;
            snprintf(a->one_side, sizeof s->auto_why, "every AUTO node on the %s: the mixed "
                     "placement predicted %.3f ms, not %.0f%% under it", dev ? "device" : "host",
                     1e3 * r->mixed_step_s, 100 * HX_AUTO_MIXED_MARGIN);
        }
        hx__ap_eval(&p, w, side, &r->predicted_device_bytes);
        for (int i = 0; i < g->n; i++) {
            decided[i] = HX_TARGET_CPU;
            if (group_of[i] < 0) continue;
            decided[i] = side[group_of[i]] ? HX_TARGET_DEVICE : HX_TARGET_CPU;
            r->n_auto++;
            r->n_auto_device += side[group_of[i]];
        }
        free(all);
    }
out:
    hx__ap_work_free(w);
    free(gside);
    free(group_of);
    hx__ap_problem_free(&p);
    return st;
}

hx_status hx__autoplace(hx_session *s, const hx_place_opts *o, hx_target *decided)
{
    hx_placement_report *r = &s->place_report;
    hx_backend_stats bs;
    s->e.be[HX_DEV_ACCEL]->stats(s->e.be[HX_DEV_ACCEL], &bs);
    r->device_cap = bs.capacity - bs.capacity / 10;
    ap_run a = {.s = s, .r = r, .one_side = s->auto_why};
    s->auto_cost = malloc(sizeof *s->auto_cost * 2 * (size_t)(s->e.g->n ? s->e.g->n : 1));
    if (!s->auto_cost) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    double t0 = hx__now();
    hx_status st = hx__op_costs_open(s->e.cfg.placement_cache, machine_hash(s->e.nthreads), &a.cache);
    if (!st) st = measure_memcpy(&a);
    measure_sleep(&a);
    if (!st) st = measure_link(&a);
    if (!st) st = measure_ops(&a, o);
    r->profile_s = hx__now() - t0;
    double t1 = hx__now();
    if (!st) st = plan(&a, o, decided);
    r->plan_s = hx__now() - t1;
    if (!st && a.cache && hx__op_costs_save(a.cache) && hx__debug("placement"))
        fprintf(stderr, "hetex placement: %s\n", hx_last_error());
    hx__op_costs_free(a.cache);
    free(a.zeros);
    free(a.seen);
    return st;
}

void hx__autoplace_debug(const hx_session *s)
{
    const hx_placement_report *r = &s->place_report;
    if (!r->n_auto) return;
    fprintf(stderr, "hetex placement: auto placed %d nodes (%d on the device); predicted step "
            "%.3f ms (all auto nodes on the host: %.3f ms, on the device: %.3f ms); device "
            "%.1f of %.1f MiB; %d op signatures, %d from the cache; profiling %.3f s, "
            "planning %.3f s; link h2d %.1f us + %.2f GB/s, d2h %.1f us + %.2f GB/s%s%s\n",
            r->n_auto, r->n_auto_device, 1e3 * r->predicted_step_s, 1e3 * r->predicted_all_host_s,
            1e3 * r->predicted_all_device_s, r->predicted_device_bytes / 1048576.0,
            r->device_cap / 1048576.0, r->n_signatures, r->n_cache_hits, r->profile_s, r->plan_s,
            1e6 * r->h2d_latency_s, r->h2d_bytes_per_s / 1e9, 1e6 * r->d2h_latency_s,
            r->d2h_bytes_per_s / 1e9, *s->auto_why ? "; " : "", s->auto_why);
}

void hx__autoplace_record_step(hx_session *s, double seconds)
{
    hx_placement_report *r = &s->place_report;
    if (!r->n_auto) return;
    r->measured_steps++;
    if (r->measured_steps == 1 || seconds < r->measured_step_s) r->measured_step_s = seconds;
    r->off = fabs(r->measured_step_s - r->predicted_step_s) > 0.2 * r->predicted_step_s;
    if (r->measured_steps == HX_PLACEMENT_TIMED_RUNS && s->timed_plan && hx__debug("placement"))
        hx__placement_units_debug(s);
}

bool hx__autoplace_timing(const hx_session *s)
{
    return s->place_report.n_auto && s->place_report.measured_steps < HX_PLACEMENT_TIMED_RUNS;
}

hx_status hx_session_placement_report(const hx_session *s, hx_placement_report *out)
{
    if (!s || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_placement_report: %s is NULL",
                         s ? "out" : "session");
    *out = s->place_report;
    return HX_OK;
}
