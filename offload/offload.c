/* Memory offload: hx_offload_config, its "key=value,..." syntax ($HX_OFFLOAD,
 * the CLI), the placement it implies (parameters, their optimizer state
 * and updates on the host), and the automatic policy (auto_offload), which
 * picks that placement, chunk_size and prefetch_depth from the training
 * step's planned device peak and the cap, and the parameters' host tier
 * (cpu or disk) from offload_cpu_size. */
#include "offload/offload.h"
#include "offload/offload_disk.h"
#include "backend/backend.h"
#include "memory/memory.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

hx_offload_config hx_offload_config_default(void)
{
    hx_offload_config c = {.offload_param = HX_OFFLOAD_NONE,
                           .offload_path = "./offload",
                           .host_mem_block_size = (size_t)1 << 30,
                           .enable_aio = true,
                           .enable_pinned_mem = true,
                           .chunk_size = (size_t)32 << 20,
                           .prefetch_depth = 1};
    return c;
}

/* "123", "64KB", "32MB", "2GB" (powers of 1024; B optional). */
static bool parse_size(const char *v, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || errno || *v == '-') return false;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    else if (*end == 'T' || *end == 't') shift = 40, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end || (shift && x > (~0ull >> shift))) return false;
    *out = (size_t)(x << shift);
    return true;
}

static bool parse_bool(const char *v, bool *out)
{
    if (!strcasecmp(v, "true") || !strcmp(v, "1")) *out = true;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0")) *out = false;
    else return false;
    return true;
}

const char *hx_offload_target_name(hx_offload_target t)
{
    return t == HX_OFFLOAD_DISK ? "disk" : t == HX_OFFLOAD_CPU ? "cpu" : "none";
}

/* Sets one key on c; false (message set) on a bad key or value. */
static bool set_key(hx_offload_config *c, const char *k, const char *v)
{
    const char *takes = NULL;
    if (!strcmp(k, "offload_param")) {
        if (!strcasecmp(v, "none")) c->offload_param = HX_OFFLOAD_NONE;
        else if (!strcasecmp(v, "cpu")) c->offload_param = HX_OFFLOAD_CPU;
        else if (!strcasecmp(v, "disk")) c->offload_param = HX_OFFLOAD_DISK;
        else takes = "none, cpu or disk";
    } else if (!strcmp(k, "offload_activations")) {
        if (!strcasecmp(v, "none")) c->offload_activations = HX_OFFLOAD_NONE;
        else if (!strcasecmp(v, "cpu")) c->offload_activations = HX_OFFLOAD_CPU;
        else takes = "none or cpu";
    } else if (!strcmp(k, "offload_path")) {
        if (!*v || strlen(v) >= HX_OFFLOAD_PATH_MAX) takes = "a non-empty path under 512 bytes";
        else snprintf(c->offload_path, sizeof c->offload_path, "%s", v);
    } else if (!strcmp(k, "offload_cpu_size")) {
        if (!parse_size(v, &c->offload_cpu_size)) takes = "a size in bytes (suffix KB, MB or GB)";
    } else if (!strcmp(k, "offload_disk_size")) {
        if (!parse_size(v, &c->offload_disk_size)) takes = "a size in bytes (suffix KB, MB or GB)";
    } else if (!strcmp(k, "host_mem_block_size")) {
        if (!parse_size(v, &c->host_mem_block_size) || !c->host_mem_block_size)
            takes = "a size > 0 in bytes (suffix KB, MB or GB)";
    } else if (!strcmp(k, "chunk_size")) {
        if (!parse_size(v, &c->chunk_size)) takes = "a size in bytes (suffix KB, MB or GB; 0: 32 MB)";
    } else if (!strcmp(k, "enable_aio")) {
        if (!parse_bool(v, &c->enable_aio)) takes = "true or false";
    } else if (!strcmp(k, "enable_pinned_mem")) {
        if (!parse_bool(v, &c->enable_pinned_mem)) takes = "true or false";
    } else if (!strcmp(k, "recompute")) {
        if (!parse_bool(v, &c->recompute)) takes = "true or false";
    } else if (!strcmp(k, "auto_offload")) {
        if (!parse_bool(v, &c->auto_offload)) takes = "true or false";
    } else if (!strcmp(k, "prefetch_depth")) {
        char *end;
        long d = strtol(v, &end, 10);
        if (end == v || *end || d < 0 || d > 64) takes = "an integer in [0, 64]";
        else c->prefetch_depth = (int)d;
    } else {
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "hx_offload_config_parse: unknown key '%s'; the keys are offload_param, "
                  "offload_path, offload_cpu_size, offload_disk_size, host_mem_block_size, "
                  "enable_aio, enable_pinned_mem, auto_offload, chunk_size, prefetch_depth, "
                  "offload_activations, recompute", k);
        return false;
    }
    if (takes)
        hx__error(HX_ERR_INVALID_ARGUMENT, "hx_offload_config_parse: %s='%s': %s takes %s", k, v,
                  k, takes);
    return !takes;
}

static char *trim(char *a)
{
    while (isspace((unsigned char)*a)) a++;
    size_t n = strlen(a);
    while (n && isspace((unsigned char)a[n - 1])) a[--n] = 0;
    return a;
}

hx_status hx_offload_config_parse(const char *spec, hx_offload_config *cfg)
{
    if (!spec || !cfg)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_offload_config_parse: %s is NULL",
                         spec ? "cfg" : "spec");
    char *buf = strdup(spec);
    if (!buf) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_offload_config_parse: out of host memory");
    hx_offload_config c = *cfg;
    hx_status st = HX_OK;
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item && !st; item = strtok_r(NULL, ",", &save)) {
        char *kv = trim(item), *eq = strchr(kv, '=');
        if (!*kv) continue;
        if (!eq) {
            st = hx__error(HX_ERR_INVALID_ARGUMENT, "hx_offload_config_parse: '%s' has no '='; "
                           "write key=value (e.g. offload_param=cpu)", kv);
            break;
        }
        *eq = 0;
        if (!set_key(&c, trim(kv), trim(eq + 1))) st = HX_ERR_INVALID_ARGUMENT;
    }
    free(buf);
    if (!st) *cfg = c;
    return st;
}

hx_status hx__offload_resolve(hx_offload_config *cfg)
{
    const char *env = getenv("HX_OFFLOAD");
    if (cfg->offload_param == HX_OFFLOAD_NONE && cfg->offload_activations == HX_OFFLOAD_NONE &&
        !cfg->auto_offload && !cfg->recompute && env && *env) {
        hx_offload_config c = hx_offload_config_default();
        if (hx_offload_config_parse(env, &c)) {
            char msg[640];
            snprintf(msg, sizeof msg, "%s", hx_last_error());
            return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: $HX_OFFLOAD: %s", msg);
        }
        *cfg = c;
    }
    if ((unsigned)cfg->offload_param > HX_OFFLOAD_DISK || cfg->prefetch_depth < 0 ||
        (unsigned)cfg->offload_activations > HX_OFFLOAD_CPU)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: offload.offload_param must "
                         "be one of HX_OFFLOAD_*, offload.offload_activations HX_OFFLOAD_NONE or "
                         "HX_OFFLOAD_CPU and offload.prefetch_depth >= 0 (it is %d)",
                         cfg->prefetch_depth);
    if (!cfg->chunk_size) cfg->chunk_size = (size_t)32 << 20;
    return HX_OK;
}

/* Parameters, their optimizer state and updates to the host. */
static hx_status place_on_host(hx_engine *e)
{
    const hx_graph *g = e->g;
    hx_backend *host = e->be[HX_DEV_HOST];
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t->kind != HX_TENSOR_UPDATE || e->target[i] != HX_TARGET_DEVICE) continue;
        if (!host->kernel(host, t->op, t->dtype))
            return hx__error(HX_ERR_NO_KERNEL, "hx_session_create: offload_param: the update of "
                             "'%s' (%s) has no CPU kernel; it cannot run on the host",
                             t->param->name, hx__ops[t->op].name);
        e->target[i] = HX_TARGET_CPU;
        e->why[i] = HX_WHY_OFFLOAD;
        for (int k = 2; k < t->n_src; k++)
            if (t->src[k]->kind == HX_TENSOR_STATE) {
                e->target[t->src[k]->id] = HX_TARGET_CPU;
                e->why[t->src[k]->id] = HX_WHY_OFFLOAD;
            }
    }
    for (int i = 0; i < g->n; i++) /* parameters, with or without an update */
        if (g->tensors[i]->kind == HX_TENSOR_PARAMETER && e->target[i] == HX_TARGET_DEVICE) {
            e->target[i] = HX_TARGET_CPU;
            e->why[i] = HX_WHY_OFFLOAD;
        }
    return HX_OK;
}

/* ---- the automatic policy ------------------------------------------------------ */

/* What a policy costs: the device peak predicted for it, and the bytes its
 * training step copies. */
typedef struct prediction {
    size_t peak, persistent, arena;
    size_t copy_bytes, act_bytes; /* per step: all copies; activations, each way */
    int n_act;
    int n_recomputed;             /* recomputed ops per step, and their work */
    double recompute_flops;
} prediction;

/* The device's peak for the session's placement and offload config, as its
 * pools would reserve it: the training step is planned (not bound: no
 * device memory is taken), and the persistent tensors placed on the device,
 * the gradient scan's sums and the plan's arena are allocated, in the order
 * session creation and the first run allocate them, from pools configured
 * as the device's but over fake addresses; plus base (what the device's
 * pools hold besides, e.g. library workspaces). */
static hx_status predict(hx_engine *e, size_t base, prediction *out)
{
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    int no_fetch[1] = {0};
    hx_plan *p = NULL;
    hx_status st = hx__plan_build(e, no_fetch, 0, true, &p);
    if (st) return st;
    hx_plan_sizes ps = hx__plan_sizes(p);
    *out = (prediction){.arena = ps.arena_bytes, .copy_bytes = ps.copy_bytes,
                        .act_bytes = ps.act_bytes, .n_act = ps.n_act,
                        .n_recomputed = ps.n_recomputed, .recompute_flops = ps.recompute_flops};
    size_t *arena = &out->arena, *persistent = &out->persistent;
    hx__plan_free(e, p);
    hx_mem_pools_config c = *hx_mem_pools_config_of(acc->pools);
    hx_mem_virtual v = {0};
    c.capacity = SIZE_MAX;
    c.source = hx__mem_virtual_source(&v);
    c.trace = NULL;
    c.trace_persistent_only = false;
    hx_mem_pools *sim = NULL;
    hx_mem_err err;
    st = hx_mem_pools_create(&c, &sim, &err);
    *persistent = 0;
    int n_scan = 0;
    void *ptr;
    for (int i = 0; i < e->g->n && !st; i++) {
        const hx_tensor *t = e->g->tensors[i];
        n_scan += t->kind == HX_TENSOR_UPDATE;
        if (!hx__offload_streamed(t) || hx__dev_of(e, i) != HX_DEV_ACCEL) continue;
        *persistent += hx_tensor_nbytes(t);
        st = hx_mem_pools_alloc(sim, hx_tensor_nbytes(t), HX_MEM_PERSISTENT, NULL, &ptr, &err);
    }
    if (!st && n_scan)
        st = hx_mem_pools_alloc(sim, sizeof(double) * n_scan, HX_MEM_PERSISTENT, NULL, &ptr, &err);
    if (!st) st = hx_mem_pools_alloc(sim, *arena, HX_MEM_TRANSIENT, NULL, &ptr, &err);
    if (!st && ps.workspace_bytes) /* the lowered kernels' stream scratch (its first growth) */
        st = hx_mem_pools_alloc(sim, ps.workspace_bytes, HX_MEM_TRANSIENT, NULL, &ptr, &err);
    if (st) {
        hx_mem_pools_destroy(sim);
        return hx__error(st, "offload: predicting the device peak: %s", err.msg);
    }
    hx_device_pools_stats sp;
    hx_mem_pools_stats(sim, &sp);
    hx_mem_pools_destroy(sim);
    out->peak = sp.total.peak_reserved + base;
    return HX_OK;
}

/* Headroom under the cap: two of the pools' largest small segments and
 * 1/64 of the cap, for what the warm-up plan does not show (a run's
 * fetches living to its end, device feed buffers). Large segments are
 * exact now (segment_round is 4 KiB, a page), so it is not the unit. */
static size_t margin_of(const hx_engine *e, size_t cap)
{
    size_t g = hx_mem_pools_config_of(e->be[HX_DEV_ACCEL]->pools)->small_segment;
    return 2 * g + cap / 64;
}

/* A cap under which a peak predicted under another cap fits with its
 * margin: the pools' segments grow with the cap (memory/pool_device.c: cap
 * / 64 rounded down to a power of 2, in [1 KiB, 2 MiB]), so the peak may
 * grow by a segment per pool, and the margin by two more. */
static size_t suggest_cap(size_t peak)
{
    size_t cap = peak;
    for (int k = 0; k < 8; k++) {
        size_t g = (size_t)2 << 20;
        while (g > 1024 && g > cap / 64) g /= 2;
        cap = peak + 4 * g + cap / 64 + 1;
    }
    return cap;
}

typedef struct candidate {
    hx_offload_target where, acts; /* parameters, activations */
    bool recompute;                /* the marked blocks */
    size_t chunk;
    int depth;
    prediction pr;
    double cost_s; /* the cost model's seconds per step (rates_of) */
} candidate;

/* "offload_param=cpu offload_activations=none recompute=false chunk_size=...
 * prefetch_depth=..." */
static void describe(const candidate *c, char *buf, size_t n)
{
    int k = snprintf(buf, n, "offload_param=%s offload_activations=%s recompute=%s",
                     hx_offload_target_name(c->where), hx_offload_target_name(c->acts),
                     c->recompute ? "true" : "false");
    if ((c->where || c->acts) && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - k, " chunk_size=%zu prefetch_depth=%d", c->chunk, c->depth);
}

static void debug_candidate(const candidate *c, size_t limit)
{
    char how[192];
    describe(c, how, sizeof how);
    fprintf(stderr, "hetex offload: candidate %s: peak %zu B (persistent %zu, arena %zu) %s the "
            "limit %zu B; copies %zu B per step (%d activations, %zu B each way), recomputes "
            "%d ops (%.3g FLOP); modeled cost %.3g s per step\n", how, c->pr.peak,
            c->pr.persistent, c->pr.arena, c->pr.peak <= limit ? "within" : "over", limit,
            c->pr.copy_bytes, c->pr.n_act, c->pr.act_bytes, c->pr.n_recomputed,
            c->pr.recompute_flops, c->cost_s);
}

/* The cost model's rates: emu's simulated copy bandwidth and compute rate
 * where its config sets them, else nominal ones (a PCIe 4.0 x16 link, a
 * data-centre GPU's sustained rate). */
#define NOMINAL_LINK_BYTES_PER_S 16e9
#define NOMINAL_DEVICE_FLOPS_PER_S 50e12
static void rates_of(const hx_engine *e, double *link, double *flops)
{
    const hx_emu_cost *c = &e->cfg.emu_cost;
    bool emu = e->be[HX_DEV_ACCEL] && !strcmp(e->be[HX_DEV_ACCEL]->name, "emu");
    *link = emu && c->copy_bytes_per_s > 0 ? c->copy_bytes_per_s : NOMINAL_LINK_BYTES_PER_S;
    *flops = emu && c->flops_per_s > 0 ? c->flops_per_s : NOMINAL_DEVICE_FLOPS_PER_S;
}

/* Seconds per step the policy's copies and recomputed work take. */
static double cost_of(const hx_engine *e, const prediction *pr)
{
    double link, flops;
    rates_of(e, &link, &flops);
    return (double)pr->copy_bytes / link + pr->recompute_flops / flops;
}

/* Plans the step under candidate c (its config set on the session, whose
 * placement must be c's). */
static hx_status try_candidate(hx_engine *e, size_t base, candidate *c, size_t limit,
                               candidate *smallest)
{
    e->cfg.offload.chunk_size = c->chunk;
    e->cfg.offload.prefetch_depth = c->depth;
    e->cfg.offload.offload_activations = c->acts;
    e->cfg.offload.recompute = c->recompute;
    hx_offload_target *op = &e->cfg.offload.offload_param; /* DISK stays DISK */
    if (c->where == HX_OFFLOAD_NONE) *op = HX_OFFLOAD_NONE;
    else if (*op == HX_OFFLOAD_NONE) *op = HX_OFFLOAD_CPU;
    hx_status st = predict(e, base, &c->pr);
    if (st) return st;
    c->cost_s = cost_of(e, &c->pr);
    e->offload_report.candidates++;
    if (!smallest->pr.peak || c->pr.peak < smallest->pr.peak) *smallest = *c;
    if (hx__debug("offload")) debug_candidate(c, limit);
    return HX_OK;
}

/* Candidate chunk sizes, one per power of two P from 64 KiB up to the first
 * at least the streamed bytes: the size in [P, 2P) (steps of P/64) whose
 * chunks of the parameters in creation order waste the least
 * (memory/chunks.h), so that e.g. a weight and its bias share a chunk. */
static hx_status chunk_sizes(const hx_engine *e, size_t *out, int max, int *n_out)
{
    size_t total = 0;
    int64_t n = 0;
    size_t *sz = malloc(sizeof *sz * (e->g->n ? e->g->n : 1));
    if (!sz) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int i = 0; i < e->g->n; i++)
        if (hx__offload_streamed(e->g->tensors[i]) && hx__dev_of(e, i) == HX_DEV_HOST) {
            sz[n++] = hx_tensor_nbytes(e->g->tensors[i]);
            total += sz[n - 1];
        }
    int k = 0;
    hx_status st = HX_OK;
    for (size_t c = (size_t)64 << 10; k < max && !st; c *= 2) {
        hx_chunk_search cs = {c, 2 * c - c / 64, c / 64, 1};
        hx_chunk_plan best;
        hx_mem_err err;
        st = n ? hx_chunk_search_run(sz, n, &cs, &best, &err) : HX_OK;
        if (st) st = hx__error(st, "hx_session_create: auto_offload: %s", err.msg);
        out[k++] = n ? best.chunk_size : c;
        if (c >= total) break;
    }
    free(sz);
    *n_out = k;
    return st;
}

/* Between two policies of one family that fit: copies that overlap compute
 * (depth >= 1: chunk k's copies run while chunk k-1 computes) over none
 * (depth 0, the device waits for every chunk), then the larger chunk
 * (fewer, larger copies), then the deeper prefetch. */
static bool better(const candidate *a, const candidate *b)
{
    if ((a->depth > 0) != (b->depth > 0)) return a->depth > 0;
    if (a->chunk != b->chunk) return a->chunk > b->chunk;
    return a->depth > b->depth;
}

/* Candidate activation segments: powers of two from 64 KiB up to the first
 * at least the bytes the device's ops output in a training step. */
static int segment_sizes(const hx_engine *e, size_t *out, int max)
{
    size_t total = 0;
    for (int i = 0; i < e->g->n; i++) {
        const hx_tensor *t = e->g->tensors[i];
        if (t->op > HX_OP_STATE && t->kind != HX_TENSOR_UPDATE && hx__dev_of(e, i) == HX_DEV_ACCEL)
            total += hx_tensor_nbytes(t);
    }
    int k = 0;
    for (size_t c = (size_t)64 << 10; k < max; c *= 2) {
        out[k++] = c;
        if (c >= total) break;
    }
    return k;
}

/* One family of policies (proto's placement of parameters and
 * activations): for each depth the largest of the sizes (ascending) that
 * fits, and of those the better(); *found says whether one fits. Depth 0
 * (the least held on the device) goes first; the deeper ones hold more,
 * so they are planned only when a size fits at depth 0, from that size
 * down: a model far over the cap costs a third, one that fits about half. */
static hx_status family(hx_engine *e, size_t base, candidate proto, const size_t *sizes, int n,
                        size_t limit, candidate *smallest, candidate *best, bool *found)
{
    *found = false;
    static const int depths[3] = {0, 2, 1};
    int top = n - 1;
    for (int d = 0; d < 3 && (d == 0 || *found); d++)
        for (int k = top; k >= 0; k--) {
            candidate c = proto;
            c.chunk = sizes[k];
            c.depth = depths[d];
            hx_status st = try_candidate(e, base, &c, limit, smallest);
            if (st) return st;
            if (c.pr.peak > limit) continue;
            if (!*found || better(&c, best)) *best = c;
            *found = true;
            if (!d) top = k;
            break; /* the largest chunk at this depth */
        }
    return HX_OK;
}

/* Whether a costs less time per step than b by the cost model (ties:
 * fewer bytes copied, then better()). */
static bool cheaper(const candidate *a, const candidate *b)
{
    if (a->cost_s != b->cost_s) return a->cost_s < b->cost_s;
    if (a->pr.copy_bytes != b->pr.copy_bytes) return a->pr.copy_bytes < b->pr.copy_bytes;
    return better(a, b);
}

/* The choices of the families that fit, and the cheapest of them. */
typedef struct choices {
    candidate fit[8];
    int n;
} choices;

static void keep(choices *ch, const candidate *c, bool fits)
{
    if (fits && ch->n < (int)(sizeof ch->fit / sizeof ch->fit[0])) ch->fit[ch->n++] = *c;
}

/* The cheapest choice (-1: none fits) and, in *runner_up, the next (-1). */
static int cheapest(const choices *ch, int *runner_up)
{
    int best = -1, next = -1;
    for (int i = 0; i < ch->n; i++) {
        if (best < 0 || cheaper(&ch->fit[i], &ch->fit[best])) next = best, best = i;
        else if (next < 0 || cheaper(&ch->fit[i], &ch->fit[next])) next = i;
    }
    *runner_up = next;
    return best;
}

/* Plans family proto (family()) and keeps its choice if one fits. */
static hx_status add_family(hx_engine *e, size_t base, candidate proto, const size_t *sizes, int n,
                            size_t limit, candidate *smallest, choices *ch)
{
    candidate fam;
    bool fits;
    hx_status st = family(e, base, proto, sizes, n, limit, smallest, &fam, &fits);
    if (!st) keep(ch, &fam, fits);
    return st;
}

/* Whether hx_graph_backward emitted recomputed ops (blocks are marked). */
static bool has_recomputed(const hx_graph *g)
{
    for (int i = 0; i < g->n; i++)
        if (g->tensors[i]->recompute_of) return true;
    return false;
}

/* Why auto_offload chose c: in r->reason. */
static void explain(const hx_engine *e, hx_offload_report *r, const candidate *c,
                    const candidate *runner_up, int n_fit, size_t limit)
{
    char how[192], alt[192] = "";
    describe(c, how, sizeof how);
    double link, flops;
    rates_of(e, &link, &flops);
    if (!c->where && !c->acts && !c->recompute) {
        snprintf(r->reason, sizeof r->reason, "everything fits on the device: a predicted peak "
                 "of %zu B within the limit of %zu B", c->pr.peak, limit);
        return;
    }
    if (runner_up) {
        describe(runner_up, alt, sizeof alt);
        char *end = alt + strlen(alt);
        snprintf(end, sizeof alt - (size_t)(end - alt), " (%.3g s)", runner_up->cost_s);
    }
    int k = snprintf(r->reason, sizeof r->reason, "everything on the device peaks at %zu B, "
                     "over the limit of %zu B; of %d families of policies that fit, %s adds "
                     "the least time by the cost model: %.3g s per step (%zu B copied at %.3g "
                     "B/s, %.3g FLOP recomputed at %.3g FLOP/s)%s%s", r->predicted_no_offload,
                     limit, n_fit, how, c->cost_s, c->pr.copy_bytes, link,
                     c->pr.recompute_flops, flops, runner_up ? "; next: " : "", alt);
    if (k >= (int)sizeof r->reason) /* cut at the end of the alternative */
        memcpy(r->reason + sizeof r->reason - 4, "...", 4);
}

/* The host tier of a policy that offloads parameters (best->where CPU),
 * from offload_cpu_size (0: no limit, CPU): CPU when it holds every
 * parameter and optimizer state; else DISK, the same device side (chunks,
 * depth), when it holds the disk tier's resident region and chunk slots;
 * else HX_ERR_OUT_OF_MEMORY naming both. An explicit DISK stays (its
 * minimum is checked when the tier is laid out). */
static hx_status host_tier(hx_engine *e, candidate *best)
{
    hx_offload_config *oc = &e->cfg.offload;
    size_t budget = oc->offload_cpu_size;
    if (best->where == HX_OFFLOAD_CPU && oc->offload_param == HX_OFFLOAD_DISK)
        best->where = HX_OFFLOAD_DISK;
    if (best->where != HX_OFFLOAD_CPU || !budget) return HX_OK;
    hx_disk_host_need need;
    hx_status st = hx__disk_host_need(e, best->chunk, &need);
    if (st) return st;
    bool cpu = need.whole <= budget;
    bool disk = !cpu && need.minimum <= budget && !e->cfg.delayed_param_update;
    if (hx__debug("offload"))
        fprintf(stderr,
                "hetex offload: host tier: offload_param=cpu keeps %zu B of parameters "
                "and optimizer state in host memory, %s offload_cpu_size (%zu B); "
                "offload_param=disk at least %zu B (resident region %zu B, %d chunk slots of "
                "%zu B)%s: %s\n",
                need.whole, cpu ? "within" : "over", budget, need.minimum, need.resident,
                need.slots, need.slot,
                e->cfg.delayed_param_update ? ", not with delayed_param_update" : "",
                cpu            ? "cpu"
                        : disk ? "disk"
                               : "neither fits");
    if (cpu) return HX_OK;
    if (disk) {
        best->where = HX_OFFLOAD_DISK;
        return HX_OK;
    }
    if (e->cfg.delayed_param_update)
        return hx__error(HX_ERR_OUT_OF_MEMORY,
                         "hx_session_create: auto_offload: the training step fits the device "
                         "cap only with the parameters offloaded, and offload_param=cpu keeps "
                         "%zu bytes of parameters and optimizer state in host memory, more than "
                         "offload_cpu_size (%zu bytes); offload_param=disk (at least %zu bytes) "
                         "does not run with delayed_param_update: raise offload_cpu_size to at "
                         "least %zu bytes, or turn delayed_param_update off",
                         need.whole, budget, need.minimum, need.whole);
    return hx__error(HX_ERR_OUT_OF_MEMORY,
                     "hx_session_create: auto_offload: the training step fits the device cap "
                     "only with the parameters offloaded, and neither host tier fits "
                     "offload_cpu_size (%zu bytes): offload_param=cpu keeps every parameter and "
                     "optimizer state in host memory, %zu bytes; offload_param=disk keeps at "
                     "least the resident region (%zu bytes: what the forward and backward read) "
                     "and %d chunk slots of %zu bytes, %zu bytes; raise offload_cpu_size to at "
                     "least %zu bytes (disk) or %zu bytes (cpu)",
                     budget, need.whole, need.resident, need.slots, need.slot, need.minimum,
                     need.minimum, need.whole);
}

/* auto_offload: everything where placement put it if the step's predicted
 * peak stays under the cap less the margin; else, of the families that
 * fit, each family's choice (family()), the one that costs the least time
 * per step by the cost model (cost_of); else a device OOM naming the
 * smallest peak found. The families: recomputation of the marked blocks
 * (when the graph marks any); activations offloaded with the parameters on
 * the device, and with recomputation when neither alone fits; parameters
 * offloaded; both, planned only when nothing else fits; and each of those
 * two with recomputation when still nothing fits. offload_param CPU keeps
 * the families that offload parameters, offload_activations CPU those
 * that offload activations, recompute those that recompute. */
static hx_status auto_place(hx_engine *e)
{
    hx_offload_config *oc = &e->cfg.offload;
    hx_offload_report *r = &e->offload_report;
    hx_backend_stats bs;
    e->be[HX_DEV_ACCEL]->stats(e->be[HX_DEV_ACCEL], &bs);
    size_t margin = margin_of(e, bs.capacity);
    size_t limit = bs.capacity > margin ? bs.capacity - margin : 0;
    hx_device_pools_stats dp; /* before anything of the session: library workspaces */
    hx_mem_pools_stats(e->be[HX_DEV_ACCEL]->pools, &dp);
    size_t base = dp.total.reserved;
    *r = (hx_offload_report){.automatic = true, .capacity = bs.capacity, .margin = margin};
    bool need_params = oc->offload_param != HX_OFFLOAD_NONE; /* the config asks for them */
    bool need_acts = oc->offload_activations != HX_OFFLOAD_NONE;
    bool need_rc = oc->recompute;
    bool try_rc = !need_rc && has_recomputed(e->g); /* recomputation as a family of its own */
    candidate none = {.chunk = oc->chunk_size, .depth = oc->prefetch_depth, .recompute = need_rc},
              smallest = {0}, best = {0};
    choices ch = {.n = 0};
    bool on_host = false; /* place_on_host() ran */
    hx_status st = HX_OK;
    int n = e->g->n ? e->g->n : 1;
    hx_target *target = malloc(sizeof *target * n);
    hx_place_why *why = malloc(sizeof *why * n);
    if (!target || !why) {
        st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
        goto out;
    }
    if (!need_params && !need_acts) {
        if ((st = try_candidate(e, base, &none, limit, &smallest))) goto out;
        r->predicted_no_offload = none.pr.peak;
        keep(&ch, &none, none.pr.peak <= limit);
    }
    if (!ch.n) {
        size_t sizes[48];
        int n_sizes = 0;
        if (!need_params && !need_acts && try_rc) { /* recomputation alone */
            candidate rc = none;
            rc.recompute = true;
            if ((st = try_candidate(e, base, &rc, limit, &smallest))) goto out;
            keep(&ch, &rc, rc.pr.peak <= limit);
        }
        if (!need_params) { /* activations, parameters where placement put them */
            n_sizes = segment_sizes(e, sizes, 48);
            candidate a = {.where = HX_OFFLOAD_NONE, .acts = HX_OFFLOAD_CPU, .recompute = need_rc};
            if ((st = add_family(e, base, a, sizes, n_sizes, limit, &smallest, &ch))) goto out;
            a.recompute = true; /* with recomputation, when neither alone fits */
            if (!ch.n && try_rc &&
                (st = add_family(e, base, a, sizes, n_sizes, limit, &smallest, &ch)))
                goto out;
        }
        memcpy(target, e->target, sizeof *target * e->g->n);
        memcpy(why, e->why, sizeof *why * e->g->n);
        on_host = true;
        if ((st = place_on_host(e)) || (st = chunk_sizes(e, sizes, 48, &n_sizes))) goto out;
        candidate pc = {.where = HX_OFFLOAD_CPU, .acts = HX_OFFLOAD_NONE, .recompute = need_rc};
        for (int rc = 0; rc < 2 && !st; rc++) { /* with recomputation when nothing fits */
            if (rc && (ch.n || !try_rc)) break;
            pc.recompute = need_rc || rc;
            pc.acts = HX_OFFLOAD_NONE; /* parameters */
            if (!need_acts && (st = add_family(e, base, pc, sizes, n_sizes, limit, &smallest, &ch)))
                goto out;
            pc.acts = HX_OFFLOAD_CPU; /* both, when nothing else fits */
            if (!ch.n && (st = add_family(e, base, pc, sizes, n_sizes, limit, &smallest, &ch)))
                goto out;
        }
    }
    int runner_up = -1, b = cheapest(&ch, &runner_up);
    bool found = b >= 0;
    if (found) best = ch.fit[b];
    if (found && on_host && best.where == HX_OFFLOAD_NONE) { /* parameters back where placement put them */
        memcpy(e->target, target, sizeof *target * e->g->n);
        memcpy(e->why, why, sizeof *why * e->g->n);
    }
    if (!found) {
        size_t need = suggest_cap(smallest.pr.peak);
        char how[160];
        describe(&smallest, how, sizeof how);
        st = hx__error(HX_ERR_DEVICE_OOM,
                       "hx_session_create: auto_offload: no placement keeps the training "
                       "step under the device cap of %zu bytes less a %zu-byte margin: %d "
                       "policies planned; everything on the device peaks at %zu bytes, the "
                       "smallest peak found, %s, at %zu bytes (%zu persistent, a %zu-byte "
                       "arena); raise max_device_memory to about %zu bytes or more, or lower "
                       "the batch size", bs.capacity, margin, r->candidates,
                       r->predicted_no_offload, how, smallest.pr.peak, smallest.pr.persistent,
                       smallest.pr.arena, need);
        goto out;
    }
    if ((st = host_tier(e, &best))) goto out;
    if (best.where == HX_OFFLOAD_NONE) oc->offload_param = HX_OFFLOAD_NONE;
    else if (best.where == HX_OFFLOAD_DISK) oc->offload_param = HX_OFFLOAD_DISK;
    else if (oc->offload_param == HX_OFFLOAD_NONE) oc->offload_param = HX_OFFLOAD_CPU;
    oc->offload_activations = best.acts;
    oc->recompute = best.recompute;
    oc->chunk_size = best.chunk;
    oc->prefetch_depth = best.depth;
    r->predicted_peak = best.pr.peak;
    r->predicted_persistent = best.pr.persistent;
    r->predicted_arena = best.pr.arena;
    r->activations_offloaded = best.pr.n_act;
    r->activation_bytes = best.pr.act_bytes;
    r->copy_bytes = best.pr.copy_bytes;
    r->recomputed_ops = best.pr.n_recomputed;
    r->recompute_flops = best.pr.recompute_flops;
    r->modeled_cost_s = best.cost_s;
    explain(e, r, &best, runner_up >= 0 ? &ch.fit[runner_up] : NULL, ch.n, limit);
    if (hx__debug("offload")) {
        char how[192];
        describe(&best, how, sizeof how);
        fprintf(stderr, "hetex offload: auto_offload chose %s after %d policies: predicted "
                "device peak %zu B of a %zu-B cap (margin %zu B); %s\n", how, r->candidates,
                best.pr.peak, bs.capacity, margin, r->reason);
    }
out:
    free(target);
    free(why);
    return st;
}

hx_status hx__offload_place(hx_engine *e)
{
    if (e->cfg.offload.auto_offload && e->be[HX_DEV_ACCEL]) return auto_place(e);
    return hx__offload_on(e) ? place_on_host(e) : HX_OK;
}

hx_status hx__offload_report(hx_engine *e, hx_offload_report *out)
{
    hx_offload_report *r = &e->offload_report;
    r->offload_param = hx__offload_on(e) ? e->cfg.offload.offload_param : HX_OFFLOAD_NONE;
    r->offload_activations = hx__offload_activations_on(e) ? HX_OFFLOAD_CPU : HX_OFFLOAD_NONE;
    r->chunk_size = e->cfg.offload.chunk_size;
    r->prefetch_depth = e->cfg.offload.prefetch_depth;
    r->recompute = hx__recompute_on(e);
    if (e->be[HX_DEV_ACCEL]) rates_of(e, &r->link_bytes_per_s, &r->device_flops_per_s);
    if (e->be[HX_DEV_ACCEL] && !r->automatic && !r->predicted_peak) { /* a manual policy */
        prediction pr;
        hx_status st = predict(e, 0, &pr);
        if (st) return st;
        r->predicted_peak = pr.peak;
        r->predicted_persistent = pr.persistent;
        r->predicted_arena = pr.arena;
        r->activations_offloaded = pr.n_act;
        r->activation_bytes = pr.act_bytes;
        r->copy_bytes = pr.copy_bytes;
        r->recomputed_ops = pr.n_recomputed;
        r->recompute_flops = pr.recompute_flops;
        r->modeled_cost_s = cost_of(e, &pr);
        snprintf(r->reason, sizeof r->reason, "the config's policy (auto_offload is off)");
    }
    *out = *r;
    if (!e->be[HX_DEV_ACCEL]) return HX_OK;
    hx_device_pools_stats ps;
    hx_mem_pools_stats(e->be[HX_DEV_ACCEL]->pools, &ps);
    out->capacity = ps.capacity;
    out->measured_peak_reserved = ps.total.peak_reserved;
    out->measured_peak_allocated = ps.total.peak_allocated;
    return HX_OK;
}
