/* The backend consistency suite: see backend_suite.h. The runner uses the
 * public API for graphs and sessions and two internal hooks: the session's
 * arenas (poisoning) and the accelerator's kernel table (coverage). */
#include "backend_suite.h"
#include "backend_cases.h"

#include "session/session.h"
#include "graph/graph.h"
#include "scheduler/scheduler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bsuite_config bsuite_config_default(hx_accelerator acc)
{
    return (bsuite_config){.accelerator = acc, .n_threads = 2,
                           .tol = {[HX_DTYPE_F32] = 1e-5, [HX_DTYPE_F16] = 1e-2, [HX_DTYPE_BF16] = 1e-2},
                           .dtypes = 0x1f, .scale = 1, .perf_seconds = 0.05, .seed = 1};
}

hx_status bsuite_poison(hx_session *s, unsigned char byte)
{
    if (!s) return HX_ERR_INVALID_ARGUMENT;
    for (int d = 0; d < HX_NDEV; d++) {
        hx_backend *b = s->e.be[d];
        if (!b || !s->e.arena[d] || !s->e.arena_bytes[d]) continue;
        if (d == HX_DEV_HOST) {
            memset(s->e.arena[d], byte, s->e.arena_bytes[d]);
            continue;
        }
        void *fill = malloc(s->e.arena_bytes[d]);
        if (!fill) return HX_ERR_OUT_OF_MEMORY;
        memset(fill, byte, s->e.arena_bytes[d]);
        hx_status st = b->copy_h2d(
                b, s->e.stream[d],
                (hx_h2d_copy){.dev = s->e.arena[d], .host = fill, .bytes = s->e.arena_bytes[d]});
        if (!st) st = b->stream_sync(b, s->e.stream[d]);
        free(fill);
        if (st) return st;
    }
    return HX_OK;
}

void bsuite_print_summary(hx_session *s, FILE *to)
{
    char path[] = "/tmp/hx_summary_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    if (hx_session_dump_summary(s, path) == HX_OK) {
        FILE *f = fopen(path, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) fputs(line, to);
        if (f) fclose(f);
    } else {
        fprintf(to, "(no summary: %s)\n", hx_last_error());
    }
    remove(path);
}

static const char *acc_name(hx_accelerator a)
{
    static const char *n[] = {"auto", "cuda", "emu", "none"};
    return (unsigned)a <= HX_ACCELERATOR_NONE ? n[a] : "?";
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- sessions and runs ------------------------------------------------------------------ */

/* A session over the case's graph with its parameters written. */
static hx_session *open_session(bs_ctx *c, hx_accelerator acc, int threads, hx_status *st)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = acc;
    cfg.n_threads = threads;
    hx_session *s = NULL;
    if ((*st = hx_session_create(c->g, &cfg, &s))) return NULL;
    for (int i = 0; i < c->n_leaf && !*st; i++)
        if (hx_tensor_kind_of(c->leaf[i].t) == HX_TENSOR_PARAMETER)
            *st = hx_session_write(s, c->leaf[i].t, c->leaf[i].data, hx_tensor_nbytes(c->leaf[i].t));
    if (*st) {
        hx_session_free(s);
        return NULL;
    }
    return s;
}

static hx_status run_once(bs_ctx *c, hx_session *s, const hx_tensor *y, bool train, void *out)
{
    hx_feed feeds[BS_MAX_LEAVES];
    int n = 0;
    for (int i = 0; i < c->n_leaf; i++)
        if (hx_tensor_kind_of(c->leaf[i].t) == HX_TENSOR_INPUT)
            feeds[n++] = (hx_feed){.tensor = c->leaf[i].t, .data = c->leaf[i].data,
                                   .bytes = hx_tensor_nbytes(c->leaf[i].t)};
    hx_fetch f = {.tensor = y, .data = out, .bytes = hx_tensor_nbytes(y)};
    return hx_session_run(s, feeds, n, &f, 1, train ? HX_RUN_TRAIN : 0);
}

/* Two runs into out[0] and out[1]; the second from NaN-filled arenas and
 * fetch buffer. */
static hx_status two_runs(bs_ctx *c, hx_session *s, const hx_tensor *y, bool train, void *out[2])
{
    size_t n = hx_tensor_nbytes(y);
    memset(out[0], 0xff, n);
    memset(out[1], 0xff, n);
    hx_status st = run_once(c, s, y, train, out[0]);
    if (!st) st = bsuite_poison(s, 0xff);
    if (!st) st = run_once(c, s, y, train, out[1]);
    return st;
}

/* Microseconds per run of s, over at least `seconds` and 3 runs. */
static double time_runs(bs_ctx *c, hx_session *s, const hx_tensor *y, bool train, double seconds,
                        void *out, int *runs)
{
    double t0 = now(), t = t0;
    int k = 0;
    while (k < 3 || t - t0 < seconds) {
        if (run_once(c, s, y, train, out)) return NAN;
        k++;
        t = now();
    }
    *runs = k;
    return (t - t0) / k * 1e6;
}

/* ---- comparing -------------------------------------------------------------------------- */

/* The worst element of got against want (dtype dt): its index and error
 * relative to max(|want|, 1e-3 max|want|); NaN where want has a number, or
 * a mismatched infinity, counts as an infinite error. Integers: 0 or inf. */
static double worst_error(const void *got, const void *want, hx_dtype dt, int64_t n, int64_t *at)
{
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = fabs(bs_get(want, dt, i));
        if (isfinite(w) && w > scale) scale = w;
    }
    /* Elements near zero are judged against a floor: an output that is the
     * difference of terms as large as the largest output (layernorm's
     * x_hat * gain + bias, log_softmax's backward) carries one rounding of
     * those terms whatever the order of operations, 6e-8 to 1.2e-7 of the
     * scale in f32, and a backend that fuses multiply-adds (nvcc does)
     * rounds differently from one that does not. With f32's tolerance of
     * 1e-5 a floor of 1e-3 of the scale would demand a sixth of an ulp of
     * such an element; 1e-1 allows about 8 ulps of the scale. Halves keep
     * 1e-3: both backends round the same f32 results to them. */
    double floor = scale > 0 ? (dt == HX_DTYPE_F32 ? 1e-1 : 1e-3) * scale : 1e-30;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = bs_get(got, dt, i), w = bs_get(want, dt, i), e;
        if (isnan(w)) e = isnan(g) ? 0 : INFINITY;
        else if (isinf(w) || isinf(g)) e = g == w ? 0 : INFINITY;
        else if (isnan(g)) e = INFINITY;
        else if (dt == HX_DTYPE_I32 || dt == HX_DTYPE_I64) e = g == w ? 0 : INFINITY;
        else e = fabs(g - w) / fmax(fabs(w), floor);
        if (e > worst) {
            worst = e;
            *at = i;
        }
    }
    return worst;
}

static bool has_nan(const void *p, const hx_tensor *y)
{
    for (int64_t i = 0; i < hx_tensor_numel(y); i++)
        if (isnan(bs_get(p, hx_tensor_dtype(y), i))) return true;
    return false;
}

/* ---- one case ------------------------------------------------------------------------------ */

typedef struct suite {
    const bsuite_config *cfg;
    bsuite_result *r;
    FILE *out;
    bool covered[HX_OP_COUNT];
} suite;

static void mark_ops(suite *su, const hx_graph *g, const char *op, bool *found)
{
    *found = false;
    for (int i = 0; i < g->n; i++) {
        hx_op o = g->tensors[i]->op;
        su->covered[o] = true;
        *found |= !strcmp(hx__ops[o].name, op);
    }
}

static void say(suite *su, const char *what, const bs_case *k, bs_ctx *c, hx_dtype dt,
                const char *detail)
{
    if (su->cfg->verbose)
        fprintf(su->out, "%-5s %-26s %-5s %-44s %s\n", what, k->op, hx_dtype_name(dt), c->variant,
                detail ? detail : "");
}

static void fail(suite *su, const bs_case *k, bs_ctx *c, hx_dtype dt, const char *why)
{
    su->r->failed++;
    fprintf(stderr, "FAIL backend_ops %s: %s %s [%s]: %s\n", acc_name(su->cfg->accelerator), k->op,
            hx_dtype_name(dt), c->variant, why);
    say(su, "FAIL", k, c, dt, why);
}

static void skip(suite *su, const bs_case *k, bs_ctx *c, hx_dtype dt, const char *why)
{
    su->r->skipped++;
    say(su, "skip", k, c, dt, why);
}

/* Checks the accelerator's two runs against the reference's. lowered: the
 * accelerator ran some nodes as one library call (graph.h's lowering). */
static void compare(suite *su, const bs_case *k, bs_ctx *c, hx_dtype dt, const hx_tensor *y,
                    void *const got[2], void *const want[2], bool lowered)
{
    hx_dtype ydt = hx_tensor_dtype(y);
    size_t bytes = hx_tensor_nbytes(y);
    /* An output wider than the case's dtype (an f32 parameter's gradient
     * through a cast) carries the case dtype's roundings: two backends
     * that accumulate in another order may round an f16 value one ulp
     * apart, and the cast back to f32 keeps that ulp. */
    double tol = fmax(su->cfg->tol[ydt], su->cfg->tol[dt]);
    /* A lowered convolution rounds once where the CPU reference rounds each
     * column (or column gradient) to a half dtype before summing them: on
     * the H100, bf16 input gradients 1.4-2.2% (up to 3 ulps) apart, the
     * device's the closer to a double reference (tests/gpu/test_gpu_cudnn
     * bounds it against one). Halves get four times their tolerance there. */
    if (lowered && (dt == HX_DTYPE_F16 || dt == HX_DTYPE_BF16)) tol *= 4;
    for (int run = 0; run < 2; run++) {
        int64_t at;
        double e = worst_error(got[run], want[run], ydt, hx_tensor_numel(y), &at);
        bool bits = !su->cfg->bitwise || !memcmp(got[run], want[run], bytes);
        if (e <= tol && bits) continue;
        char why[320];
        snprintf(why, sizeof why,
                 "run %d%s, output %s: element %lld: got %.9g want %.9g (error %.3g, tolerance %.3g%s)",
                 run + 1, run ? " (from NaN-filled arenas)" : "", hx_dtype_name(ydt), (long long)at,
                 bs_get(got[run], ydt, at), bs_get(want[run], ydt, at), e, tol,
                 bits ? "" : ", bitwise required");
        fail(su, k, c, dt, why);
        return;
    }
    su->r->passed++;
    say(su, "ok", k, c, dt, NULL);
}

static void perf_line(suite *su, const bs_case *k, bs_ctx *c, hx_dtype dt, const hx_tensor *y,
                      hx_session *acc, hx_session *ref, void *buf)
{
    int runs = 0, ref_runs = 0;
    double us = time_runs(c, acc, y, k->train, su->cfg->perf_seconds, buf, &runs);
    double cpu_us = time_runs(c, ref, y, k->train, su->cfg->perf_seconds, buf, &ref_runs);
    fprintf(su->out,
            "{\"bench\":\"backend_ops\",\"backend\":\"%s\",\"op\":\"%s\",\"variant\":\"%s\","
            "\"dtype\":\"%s\",\"threads\":%d,\"scale\":%d,\"us_per_run\":%.3f,\"runs\":%d,"
            "\"cpu_us_per_run\":%.3f,\"vs_cpu\":%.3f}\n",
            acc_name(su->cfg->accelerator), k->op, c->variant, hx_dtype_name(dt),
            su->cfg->n_threads, su->cfg->scale, us, runs, cpu_us, cpu_us / us);
}

static void ctx_clear(bs_ctx *c)
{
    hx_graph_free(c->g);
    for (int i = 0; i < c->n_leaf; i++) free(c->leaf[i].data);
    memset(c, 0, sizeof *c);
}

/* Builds variant v of case k in dt at `scale` with every op on the
 * accelerator; err receives hx_last_error() of a failed build. */
static hx_tensor *build_case(bs_ctx *c, const bsuite_config *cfg, const bs_case *k, int v,
                             hx_dtype dt, int64_t scale, char *err, size_t n)
{
    ctx_clear(c);
    c->g = hx_graph_create();
    c->scale = scale;
    c->perf = cfg->perf;
    c->rng = test_rng_make(cfg->seed * 1000003 + (uint64_t)(k - bs_cases) * 101 + (uint64_t)v * 7 + dt);
    if (!c->g) {
        snprintf(err, n, "hx_graph_create failed");
        return NULL;
    }
    hx_graph_push_target(c->g, HX_TARGET_DEVICE);
    hx_tensor *y = k->build(c, dt, v, k->arg);
    snprintf(err, n, "%s", hx_last_error());
    hx_graph_pop_target(c->g);
    return y;
}

static int64_t largest_tensor(const hx_graph *g)
{
    int64_t m = 0;
    for (int i = 0; i < g->n; i++)
        if (hx_tensor_numel(g->tensors[i]) > m) m = hx_tensor_numel(g->tensors[i]);
    return m;
}

static void run_case(suite *su, const bs_case *k, int v, hx_dtype dt)
{
    const bsuite_config *cfg = su->cfg;
    bs_ctx c = {0};
    hx_session *acc = NULL, *ref = NULL;
    void *got[2] = {NULL, NULL}, *want[2] = {NULL, NULL};
    char err[512];
    int64_t scale = cfg->scale > 0 ? cfg->scale : 1;
    hx_tensor *y = build_case(&c, cfg, k, v, dt, scale, err, sizeof err);
    while (y && largest_tensor(c.g) < cfg->min_elements && scale < (1 << 20)) {
        scale *= 2; /* grow until kernels split their work */
        y = build_case(&c, cfg, k, v, dt, scale, err, sizeof err);
    }
    bool takes = cfg->dtypes & k->dtypes & 1u << dt, found = false;
    if (!y) {
        if (c.skip) say(su, "n/a", k, &c, dt, c.skip);
        else if (takes) {
            su->r->cases++;
            fail(su, k, &c, dt, err);
        }
        else skip(su, k, &c, dt, err);
        goto out;
    }
    su->r->cases++;
    mark_ops(su, c.g, k->op, &found);
    if (!found) {
        fail(su, k, &c, dt, "the case's graph does not contain its op");
        goto out;
    }
    hx_status st;
    acc = open_session(&c, cfg->accelerator, cfg->n_threads, &st);
    if (st == HX_ERR_NO_KERNEL) {
        su->r->no_kernel++;
        su->r->cases--;
        skip(su, k, &c, dt, hx_last_error());
        goto out;
    }
    if (!acc) {
        fail(su, k, &c, dt, hx_last_error());
        goto out;
    }
    ref = open_session(&c, HX_ACCELERATOR_NONE, cfg->ref_threads ? cfg->ref_threads : cfg->n_threads, &st);
    if (!ref) {
        fail(su, k, &c, dt, hx_last_error());
        goto out;
    }
    size_t bytes = hx_tensor_nbytes(y) ? hx_tensor_nbytes(y) : 1;
    for (int i = 0; i < 2; i++) {
        got[i] = malloc(bytes);
        want[i] = malloc(bytes);
    }
    if (!got[0] || !got[1] || !want[0] || !want[1]) {
        fail(su, k, &c, dt, "out of host memory");
        goto out;
    }
    if ((st = two_runs(&c, ref, y, k->train, want))) {
        fail(su, k, &c, dt, hx_last_error());
        goto out;
    }
    if (has_nan(want[0], y) || has_nan(want[1], y)) {
        fail(su, k, &c, dt, "the all-CPU reference holds NaN: a CPU kernel left elements "
                            "unwritten, or the case's data is out of the op's domain");
        goto out;
    }
    if ((st = two_runs(&c, acc, y, k->train, got))) {
        fail(su, k, &c, dt, hx_last_error());
        goto out;
    }
    hx_placement_stats ps = {0};
    if (hx_session_placement_stats(acc, &ps) || ps.n_device_ops != ps.n_ops) {
        char why[160];
        snprintf(why, sizeof why, "%d of %d ops ran on the accelerator", ps.n_device_ops, ps.n_ops);
        fail(su, k, &c, dt, why);
        goto out;
    }
    compare(su, k, &c, dt, y, got, want, acc->n_lowered > 0);
    if (cfg->perf) perf_line(su, k, &c, dt, y, acc, ref, got[0]);
out:
    for (int i = 0; i < 2; i++) {
        free(got[i]);
        free(want[i]);
    }
    hx_session_free(acc);
    hx_session_free(ref);
    ctx_clear(&c);
}

/* A session on the accelerator over a one-op graph: is it there at all,
 * and which kernels does it offer. */
typedef struct probe {
    hx_graph *g;
    hx_session *s;
} probe;

static hx_status probe_open(probe *p, hx_accelerator acc)
{
    int64_t one = 1;
    p->g = hx_graph_create();
    hx_tensor *x = p->g ? hx_graph_input(p->g, "x", HX_DTYPE_F32, 1, &one) : NULL;
    if (!x || !hx_relu(p->g, x)) return HX_ERR_OUT_OF_MEMORY;
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = acc;
    hx_status st = hx_session_create(p->g, &cfg, &p->s);
    return st ? st : p->s->e.be[HX_DEV_ACCEL] ? HX_OK : HX_ERR_UNSUPPORTED;
}

static void probe_close(probe *p)
{
    hx_session_free(p->s);
    hx_graph_free(p->g);
}

/* Ops the accelerator has a kernel for that no case ran. */
static void check_coverage(suite *su, const probe *p)
{
    const hx_backend *b = p->s->e.be[HX_DEV_ACCEL];
    for (int op = HX_OP_MATMUL; op < HX_OP_COUNT; op++)
        if (!su->covered[op] && b->kernel(b, (hx_op)op, HX_DTYPE_F32)) {
            fprintf(stderr, "FAIL backend_ops %s: op '%s' has a kernel and no case\n",
                    acc_name(su->cfg->accelerator), hx__ops[op].name);
            su->r->uncovered++;
        }
}

int bsuite_run(const bsuite_config *cfg, bsuite_result *r)
{
    suite su = {.cfg = cfg, .r = r, .out = cfg->out ? cfg->out : stdout};
    memset(r, 0, sizeof *r);
    probe p = {0};
    hx_status st = probe_open(&p, cfg->accelerator);
    if (st) { /* one failure, not one per case */
        fprintf(stderr, "FAIL backend_ops %s: the accelerator cannot be opened: %s: %s\n",
                acc_name(cfg->accelerator), hx_status_name(st), hx_last_error());
        probe_close(&p);
        r->failed = 1;
        return 1;
    }
    for (int k = 0; k < bs_n_cases; k++) {
        const bs_case *kc = &bs_cases[k];
        if (cfg->op && !strstr(kc->op, cfg->op)) continue;
        bool left_out = false;
        for (const char *const *e = cfg->except; e && *e && !left_out; e++) left_out = !strcmp(*e, kc->op);
        if (left_out) continue;
        for (int v = 0; v < kc->n_variants; v++)
            for (int dt = HX_DTYPE_F32; dt <= HX_DTYPE_I64; dt++)
                if (cfg->dtypes & 1u << dt) run_case(&su, kc, v, (hx_dtype)dt);
    }
    if (!cfg->op && !cfg->except && (cfg->dtypes & 1u << HX_DTYPE_F32)) check_coverage(&su, &p);
    probe_close(&p);
    return r->failed + r->uncovered;
}
