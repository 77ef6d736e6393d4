/* Memory offload: hx_offload_config, its "key=value,..." syntax ($HX_OFFLOAD,
 * the CLI), the placement it implies (parameters, their optimizer state
 * and updates on the host), and the automatic policy (auto_offload), which
 * picks that placement, chunk_size and prefetch_depth from the training
 * step's planned device peak and the cap. */
#include "scheduler/offload.h"
#include "scheduler/backend.h"
#include "memory/chunks.h"
#include "memory/pool.h"

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

/* Sets one key on c; false (message set) on a bad key or value. */
static bool set_key(hx_offload_config *c, const char *k, const char *v)
{
    const char *takes = NULL;
    if (!strcmp(k, "offload_param")) {
        if (!strcasecmp(v, "none")) c->offload_param = HX_OFFLOAD_NONE;
        else if (!strcasecmp(v, "cpu")) c->offload_param = HX_OFFLOAD_CPU;
        else if (!strcasecmp(v, "disk")) c->offload_param = HX_OFFLOAD_DISK;
        else takes = "none, cpu or disk";
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
                  "enable_aio, enable_pinned_mem, auto_offload, chunk_size, prefetch_depth", k);
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
    if (cfg->offload_param == HX_OFFLOAD_NONE && !cfg->auto_offload && env && *env) {
        hx_offload_config c = hx_offload_config_default();
        if (hx_offload_config_parse(env, &c)) {
            char msg[640];
            snprintf(msg, sizeof msg, "%s", hx_last_error());
            return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: $HX_OFFLOAD: %s", msg);
        }
        *cfg = c;
    }
    if ((unsigned)cfg->offload_param > HX_OFFLOAD_DISK || cfg->prefetch_depth < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: offload.offload_param must "
                         "be one of HX_OFFLOAD_* and offload.prefetch_depth >= 0 (it is %d)",
                         cfg->prefetch_depth);
    if (!cfg->chunk_size) cfg->chunk_size = (size_t)32 << 20;
    return HX_OK;
}

/* Parameters, their optimizer state and updates to the host. */
static hx_status place_on_host(hx_session *s)
{
    const hx_graph *g = s->g;
    hx_backend *host = s->be[HX_DEV_HOST];
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t->kind != HX_TENSOR_UPDATE || s->target[i] != HX_TARGET_DEVICE) continue;
        if (!host->kernel(host, t->op, t->dtype))
            return hx__error(HX_ERR_NO_KERNEL, "hx_session_create: offload_param: the update of "
                             "'%s' (%s) has no CPU kernel; it cannot run on the host",
                             t->param->name, hx__ops[t->op].name);
        s->target[i] = HX_TARGET_CPU;
        s->why[i] = HX_WHY_OFFLOAD;
        for (int k = 2; k < t->n_src; k++)
            if (t->src[k]->kind == HX_TENSOR_STATE) {
                s->target[t->src[k]->id] = HX_TARGET_CPU;
                s->why[t->src[k]->id] = HX_WHY_OFFLOAD;
            }
    }
    for (int i = 0; i < g->n; i++) /* parameters, with or without an update */
        if (g->tensors[i]->kind == HX_TENSOR_PARAMETER && s->target[i] == HX_TARGET_DEVICE) {
            s->target[i] = HX_TARGET_CPU;
            s->why[i] = HX_WHY_OFFLOAD;
        }
    return HX_OK;
}

/* ---- the automatic policy ------------------------------------------------------ */

/* The device's peak for the session's placement and offload config, as its
 * pools would reserve it: the training step is planned (not bound: no
 * device memory is taken), and the persistent tensors placed on the device,
 * the gradient scan's sums and the plan's arena are allocated, in the order
 * session creation and the first run allocate them, from pools configured
 * as the device's but over fake addresses; plus base (what the device's
 * pools hold besides, e.g. library workspaces). */
static hx_status predict(hx_session *s, size_t base, size_t *peak, size_t *persistent,
                         size_t *arena)
{
    hx_backend *acc = s->be[HX_DEV_ACCEL];
    int no_fetch[1] = {0};
    hx_plan *p = NULL;
    hx_status st = hx__plan_build(s, no_fetch, 0, true, &p);
    if (st) return st;
    *arena = p->arena_bytes[HX_DEV_ACCEL];
    hx__plan_free(s, p);
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
    for (int i = 0; i < s->g->n && !st; i++) {
        const hx_tensor *t = s->g->tensors[i];
        n_scan += t->kind == HX_TENSOR_UPDATE;
        if (!hx__offload_streamed(t) || hx__dev_of(s, i) != HX_DEV_ACCEL) continue;
        *persistent += hx_tensor_nbytes(t);
        st = hx_mem_pools_alloc(sim, hx_tensor_nbytes(t), HX_MEM_PERSISTENT, NULL, &ptr, &err);
    }
    if (!st && n_scan)
        st = hx_mem_pools_alloc(sim, sizeof(double) * n_scan, HX_MEM_PERSISTENT, NULL, &ptr, &err);
    if (!st) st = hx_mem_pools_alloc(sim, *arena, HX_MEM_TRANSIENT, NULL, &ptr, &err);
    if (st) {
        hx_mem_pools_destroy(sim);
        return hx__error(st, "offload: predicting the device peak: %s", err.msg);
    }
    hx_device_pools_stats sp;
    hx_mem_pools_stats(sim, &sp);
    hx_mem_pools_destroy(sim);
    *peak = sp.total.peak_reserved + base;
    return HX_OK;
}

/* Headroom under the cap: two segments of the pools' granularity and 1/64
 * of the cap, for what the warm-up plan does not show (a run's fetches
 * living to its end, device feed buffers). */
static size_t margin_of(const hx_session *s, size_t cap)
{
    size_t g = hx_mem_pools_config_of(s->be[HX_DEV_ACCEL]->pools)->segment_round;
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
    hx_offload_target where;
    size_t chunk;
    int depth;
    size_t peak, persistent, arena;
} candidate;

static void debug_candidate(const candidate *c, size_t limit)
{
    if (c->where == HX_OFFLOAD_NONE)
        fprintf(stderr, "hetex offload: candidate offload_param=none: peak %zu B (persistent %zu, "
                "arena %zu) %s the limit %zu B\n", c->peak, c->persistent, c->arena,
                c->peak <= limit ? "within" : "over", limit);
    else
        fprintf(stderr, "hetex offload: candidate offload_param=cpu chunk_size=%zu "
                "prefetch_depth=%d: peak %zu B (persistent %zu, arena %zu) %s the limit %zu B\n",
                c->chunk, c->depth, c->peak, c->persistent, c->arena,
                c->peak <= limit ? "within" : "over", limit);
}

/* Plans the step under candidate c (its config set on the session). */
static hx_status try_candidate(hx_session *s, size_t base, candidate *c, size_t limit,
                               candidate *smallest)
{
    s->cfg.offload.chunk_size = c->chunk;
    s->cfg.offload.prefetch_depth = c->depth;
    hx_status st = predict(s, base, &c->peak, &c->persistent, &c->arena);
    if (st) return st;
    s->offload_report.candidates++;
    if (!smallest->peak || c->peak < smallest->peak) *smallest = *c;
    if (hx__debug("offload")) debug_candidate(c, limit);
    return HX_OK;
}

/* Candidate chunk sizes, one per power of two P from 64 KiB up to the first
 * at least the streamed bytes: the size in [P, 2P) (steps of P/64) whose
 * chunks of the parameters in creation order waste the least
 * (memory/chunks.h), so that e.g. a weight and its bias share a chunk. */
static hx_status chunk_sizes(const hx_session *s, size_t *out, int max, int *n_out)
{
    size_t total = 0;
    int64_t n = 0;
    size_t *sz = malloc(sizeof *sz * (s->g->n ? s->g->n : 1));
    if (!sz) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int i = 0; i < s->g->n; i++)
        if (hx__offload_streamed(s->g->tensors[i]) && hx__dev_of(s, i) == HX_DEV_HOST) {
            sz[n++] = hx_tensor_nbytes(s->g->tensors[i]);
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

/* Between two policies that fit: copies that overlap compute (depth >= 1:
 * chunk k's copies run while chunk k-1 computes) over none (depth 0, the
 * device waits for every chunk), then the larger chunk (fewer, larger
 * copies), then the deeper prefetch. */
static bool better(const candidate *a, const candidate *b)
{
    if ((a->depth > 0) != (b->depth > 0)) return a->depth > 0;
    if (a->chunk != b->chunk) return a->chunk > b->chunk;
    return a->depth > b->depth;
}

/* auto_offload: everything where placement put it if the step's predicted
 * peak stays under the cap less the margin; else parameter offload, for
 * each depth 2, 1, 0 with the largest candidate chunk that fits, the
 * best of those (better()); else a device OOM naming the smallest peak
 * found. */
static hx_status auto_place(hx_session *s)
{
    hx_offload_config *oc = &s->cfg.offload;
    hx_offload_report *r = &s->offload_report;
    hx_backend_stats bs;
    s->be[HX_DEV_ACCEL]->stats(s->be[HX_DEV_ACCEL], &bs);
    size_t margin = margin_of(s, bs.capacity);
    size_t limit = bs.capacity > margin ? bs.capacity - margin : 0;
    hx_device_pools_stats dp; /* before anything of the session: library workspaces */
    hx_mem_pools_stats(s->be[HX_DEV_ACCEL]->pools, &dp);
    size_t base = dp.total.reserved;
    *r = (hx_offload_report){.automatic = true, .capacity = bs.capacity, .margin = margin};
    candidate none = {.where = HX_OFFLOAD_NONE, .chunk = oc->chunk_size,
                      .depth = oc->prefetch_depth}, smallest = {0}, best = {0};
    bool found = false;
    hx_status st = HX_OK;
    if (oc->offload_param == HX_OFFLOAD_NONE) {
        if ((st = try_candidate(s, base, &none, limit, &smallest))) return st;
        r->predicted_no_offload = none.peak;
        best = none;
        found = none.peak <= limit;
    }
    if (!found) {
        if (oc->offload_param == HX_OFFLOAD_NONE) oc->offload_param = HX_OFFLOAD_CPU;
        if ((st = place_on_host(s))) return st;
        size_t sizes[48];
        int n = 0;
        if ((st = chunk_sizes(s, sizes, 48, &n))) return st;
        for (int depth = 2; depth >= 0 && !st; depth--)
            for (int k = n - 1; k >= 0 && !st; k--) {
                candidate c = {.where = HX_OFFLOAD_CPU, .chunk = sizes[k], .depth = depth};
                st = try_candidate(s, base, &c, limit, &smallest);
                if (st || c.peak > limit) continue;
                if (!found || better(&c, &best)) best = c;
                found = true;
                break; /* the largest chunk at this depth */
            }
        if (st) return st;
    }
    if (!found) {
        size_t need = suggest_cap(smallest.peak);
        char how[160] = "";
        if (smallest.where == HX_OFFLOAD_CPU)
            snprintf(how, sizeof how, "offload_param=cpu with chunk_size=%zu and prefetch_depth=%d",
                     smallest.chunk, smallest.depth);
        else
            snprintf(how, sizeof how, "offload_param=none");
        return hx__error(HX_ERR_DEVICE_OOM,
                         "hx_session_create: auto_offload: no placement keeps the training "
                         "step under the device cap of %zu bytes less a %zu-byte margin: %d "
                         "policies planned; everything on the device peaks at %zu bytes, the "
                         "smallest peak found, %s, at %zu bytes (%zu persistent, a %zu-byte "
                         "arena); raise max_device_memory to about %zu bytes or more, or lower "
                         "the batch size", bs.capacity, margin, r->candidates,
                         r->predicted_no_offload, how, smallest.peak, smallest.persistent,
                         smallest.arena, need);
    }
    oc->chunk_size = best.chunk;
    oc->prefetch_depth = best.depth;
    r->predicted_peak = best.peak;
    r->predicted_persistent = best.persistent;
    r->predicted_arena = best.arena;
    if (hx__debug("offload")) {
        char how[96] = "offload_param=none";
        if (best.where == HX_OFFLOAD_CPU)
            snprintf(how, sizeof how, "offload_param=cpu chunk_size=%zu prefetch_depth=%d",
                     best.chunk, best.depth);
        fprintf(stderr, "hetex offload: auto_offload chose %s: predicted device peak %zu B of a "
                "%zu-B cap (margin %zu B; everything on the device: %zu B); %d policies "
                "planned\n", how, best.peak, bs.capacity, margin, r->predicted_no_offload,
                r->candidates);
    }
    return HX_OK;
}

hx_status hx__offload_place(hx_session *s)
{
    if (s->cfg.offload.auto_offload && s->be[HX_DEV_ACCEL]) return auto_place(s);
    return hx__offload_on(s) ? place_on_host(s) : HX_OK;
}

hx_status hx_session_offload_report(hx_session *s, hx_offload_report *out)
{
    if (!s || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_offload_report: %s is NULL",
                         s ? "out" : "session");
    hx_offload_report *r = &s->offload_report;
    r->offload_param = hx__offload_on(s) ? s->cfg.offload.offload_param : HX_OFFLOAD_NONE;
    r->chunk_size = s->cfg.offload.chunk_size;
    r->prefetch_depth = s->cfg.offload.prefetch_depth;
    hx_status st = HX_OK;
    if (s->be[HX_DEV_ACCEL] && !r->automatic && !r->predicted_peak) /* a manual policy */
        st = predict(s, 0, &r->predicted_peak, &r->predicted_persistent, &r->predicted_arena);
    if (st) return st;
    *out = *r;
    if (!s->be[HX_DEV_ACCEL]) return HX_OK;
    hx_device_pools_stats ps;
    hx_mem_pools_stats(s->be[HX_DEV_ACCEL]->pools, &ps);
    out->capacity = ps.capacity;
    out->measured_peak_reserved = ps.total.peak_reserved;
    out->measured_peak_allocated = ps.total.peak_allocated;
    return HX_OK;
}
