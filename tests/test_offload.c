/* Parameter offload (hx_offload_config): the "key=value,..." syntax and its
 * errors, $HX_OFFLOAD; a deep MLP whose parameters are 10x the emu device
 * cap trains with offload_param=cpu under that cap, parameters streamed to
 * the device in chunks within a window, and its parameters after N steps
 * are bitwise those of an uncapped run without offload; auto_offload keeps
 * a step that fits, offloads one that does not (bitwise again), predicts
 * the device peak that the pools then measure, and fails a cap too small
 * for any policy with a report whose suggested cap works. */
#include "hetex.h"
#include "deep_mlp.h"
#include "testutil.h"
#include "session/session.h"
#include "scheduler/plan.h" /* the plan's fields */

#include <stdlib.h>
#include <string.h>

enum { B = 2, W = 256, L = 48, STEPS = 3 };
#define CAP ((size_t)1200 << 10)

static void test_parse(void)
{
    hx_offload_config c = hx_offload_config_default();
    CHECK(c.offload_param == HX_OFFLOAD_NONE && c.prefetch_depth == 1 && c.enable_aio &&
              c.chunk_size == (size_t)32 << 20 && !strcmp(c.offload_path, "./offload"),
          "defaults");
    hx_status st = hx_offload_config_parse(
        " offload_param = cpu, offload_path=/tmp/x y,offload_cpu_size=3GB,offload_disk_size=7,"
        "host_mem_block_size=64MB, enable_aio=false,enable_pinned_mem=0,auto_offload=true,"
        "chunk_size=48kb,prefetch_depth=3,", &c);
    CHECK(st == HX_OK, "parse: %s", hx_last_error());
    CHECK(c.offload_param == HX_OFFLOAD_CPU && !strcmp(c.offload_path, "/tmp/x y") &&
              c.offload_cpu_size == (size_t)3 << 30 && c.offload_disk_size == 7 &&
              c.host_mem_block_size == (size_t)64 << 20 && !c.enable_aio &&
              !c.enable_pinned_mem && c.auto_offload && c.chunk_size == 48 << 10 &&
              c.prefetch_depth == 3,
          "parsed values");
    CHECK(hx_offload_config_parse("", &c) == HX_OK && c.prefetch_depth == 3, "empty spec");
    for (hx_offload_target t = HX_OFFLOAD_NONE; t <= HX_OFFLOAD_DISK; t++) { /* names round-trip */
        char spec[64];
        snprintf(spec, sizeof spec, "offload_param=%s", hx_offload_target_name(t));
        CHECK(hx_offload_config_parse(spec, &c) == HX_OK && c.offload_param == t, "%s", spec);
    }
    struct { const char *spec, *names; } bad[] = {
        {"offload_param=gpu", "offload_param"}, {"offload_cpu_size=12XB", "offload_cpu_size"},
        {"enable_aio=yes", "enable_aio"},       {"prefetch_depth=-1", "prefetch_depth"},
        {"chunk_size", "chunk_size"},           {"offload_params=cpu", "offload_params"},
        {"host_mem_block_size=0", "host_mem_block_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hx_offload_config before = c;
        st = hx_offload_config_parse(bad[i].spec, &c);
        CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), bad[i].names),
              "'%s': %s, '%s'", bad[i].spec, hx_status_name(st), hx_last_error());
        CHECK(!memcmp(&before, &c, sizeof c), "'%s' changed the config", bad[i].spec);
    }
    /* a good key before a bad one changes nothing either */
    hx_offload_config before = c;
    CHECK(hx_offload_config_parse("prefetch_depth=5,enable_aio=maybe", &c) != HX_OK &&
              !memcmp(&before, &c, sizeof c), "partial parse applied");
    CHECK(hx_offload_config_parse(NULL, &c) == HX_ERR_INVALID_ARGUMENT, "NULL spec");
}

static float xv[STEPS][B * W], yv[STEPS][B * W];

/* Trains STEPS steps; returns the session (NULL on failure) and the losses. */
static hx_session *train(const deep_mlp *m, const hx_session_config *c, float *loss)
{
    hx_session *s = NULL;
    hx_status st = hx_session_create(m->g, c, &s);
    CHECK(st == HX_OK, "session: %s", hx_last_error());
    for (int k = 0; s && k < STEPS; k++) {
        hx_feed f[2] = {{NULL, m->x, xv[k], sizeof xv[k]}, {NULL, m->y, yv[k], sizeof yv[k]}};
        hx_fetch o = {NULL, m->loss, &loss[k], sizeof loss[k]};
        st = hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN);
        CHECK(st == HX_OK, "step %d: %s", k, hx_last_error());
        if (st) {
            hx_session_free(s);
            return NULL;
        }
    }
    return s;
}

static void test_cpu_offload_bitwise(void)
{
    deep_mlp m;
    CHECK(deep_mlp_build(B, W, L, &m) == HX_OK, "build: %s", hx_last_error());
    size_t param_bytes = m.param_bytes;
    CHECK(param_bytes >= 10 * CAP, "parameters %zu bytes, 10x the cap is %zu", param_bytes, 10 * CAP);

    hx_session_config rc = hx_session_config_default();
    rc.accelerator = HX_ACCELERATOR_EMU;
    rc.n_threads = 2;
    float ref_loss[STEPS], loss[STEPS];
    hx_session *ref = train(&m, &rc, ref_loss);

    hx_session_config c = rc; /* no offload: the step does not fit under the cap */
    c.max_device_memory = CAP;
    hx_session *s = NULL;
    hx_status st = hx_session_create(m.g, &c, &s);
    if (!st) {
        hx_feed f[2] = {{NULL, m.x, xv[0], sizeof xv[0]}, {NULL, m.y, yv[0], sizeof yv[0]}};
        st = hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN);
    }
    CHECK(st == HX_ERR_DEVICE_OOM, "without offload: %s (%s)", hx_status_name(st), hx_last_error());
    hx_session_free(s);

    /* depth 0 under the cap; depth 1 (copies one chunk ahead, gradients
     * copied out one chunk later) holds about twice the window */
    for (int depth = 0; depth <= 1; depth++) {
        size_t cap = depth ? 2 * CAP : CAP;
        c.max_device_memory = cap;
        c.offload.offload_param = HX_OFFLOAD_CPU;
        c.offload.chunk_size = 300 << 10; /* one weight and its bias per chunk */
        c.offload.prefetch_depth = depth;
        s = train(&m, &c, loss);
        if (!s || !ref) break;
        CHECK(!memcmp(loss, ref_loss, sizeof loss), "depth %d: losses %.9g %.9g vs %.9g %.9g", depth,
              loss[0], loss[STEPS - 1], ref_loss[0], ref_loss[STEPS - 1]);
        CHECK(loss[STEPS - 1] < loss[0], "depth %d: loss %g -> %g", depth, loss[0], loss[STEPS - 1]);
        char what[32];
        snprintf(what, sizeof what, "depth %d", depth);
        deep_mlp_check_same_params(s, ref, &m, what);
        hx_device_pools_stats ps;
        hx_memory_stats ms;
        CHECK(hx_session_pool_stats(s, &ps) == HX_OK && hx_session_memory_stats(s, &ms) == HX_OK,
              "stats: %s", hx_last_error());
        const hx_plan *p = s->last_plan;
        printf("depth %d: params %zu B, cap %zu B, device peak %zu B (persistent %zu, arena %zu), "
               "%d chunks, %zu B streamed per step, host persistent %zu B\n", depth, param_bytes,
               cap, ps.total.peak_allocated, ms.device_persistent_bytes,
               ms.device_transient_planned_bytes, p->n_chunks, p->streamed_bytes,
               ms.persistent_bytes);
        CHECK(ps.total.peak_allocated <= cap && ps.capacity == cap, "peak %zu over the cap %zu",
              ps.total.peak_allocated, cap);
        CHECK(ms.device_persistent_bytes < (size_t)64 << 10, "parameters left on the device: %zu B",
              ms.device_persistent_bytes);
        CHECK(ms.persistent_bytes >= 3 * param_bytes, "host holds params and Adam state: %zu B",
              ms.persistent_bytes);
        /* the forward streams every parameter, the backward the weights again
         * (biases' gradients do not read them), except the last few layers'
         * whose copies are still in the window when the backward starts */
        size_t wbytes = hx_tensor_nbytes(m.w[0]);
        CHECK(p->streamed_bytes >= param_bytes + (L - 4) * wbytes &&
                  p->streamed_bytes < param_bytes + L * wbytes,
              "streamed %zu B per step, params %zu B", p->streamed_bytes, param_bytes);
        CHECK(p->n_chunks >= 2 * L - 4, "%d chunks", p->n_chunks);
        hx_session_free(s);
    }
    hx_session_free(ref);
    deep_mlp_free(&m);
}

/* $HX_OFFLOAD configures a session whose config leaves offload at its
 * default; a bad value fails creation naming the key; disk under a missing
 * offload_path fails naming it. */
static void test_env(void)
{
    deep_mlp m;
    CHECK(deep_mlp_build(B, W, L, &m) == HX_OK, "build: %s", hx_last_error());
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    hx_session *s = NULL;
    setenv("HX_OFFLOAD", "offload_param=cpu,chunk_size=1MB", 1);
    CHECK(hx_session_create(m.g, &c, &s) == HX_OK, "%s", hx_last_error());
    if (s) {
        CHECK(s->e.cfg.offload.offload_param == HX_OFFLOAD_CPU &&
                      s->e.cfg.offload.chunk_size == 1 << 20,
              "HX_OFFLOAD not applied");
        CHECK(s->e.target[m.w[0]->id] == HX_TARGET_CPU &&
                      s->e.target[m.loss->id] == HX_TARGET_DEVICE,
              "placement under offload");
        hx_session_free(s);
    }
    setenv("HX_OFFLOAD", "offload_param=cpu,chunk_sise=1MB", 1);
    hx_status st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "HX_OFFLOAD") &&
              strstr(hx_last_error(), "chunk_sise"), "%s", hx_last_error());
    c.offload.prefetch_depth = 2; /* still the default policy: the variable applies */
    st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_ERR_INVALID_ARGUMENT, "variable ignored: %s", hx_status_name(st));
    c.offload.offload_param = HX_OFFLOAD_CPU; /* the field overrides the variable */
    CHECK(hx_session_create(m.g, &c, &s) == HX_OK && s->e.cfg.offload.prefetch_depth == 2, "%s",
          hx_last_error());
    hx_session_free(s);
    unsetenv("HX_OFFLOAD");
    c.offload.offload_param = HX_OFFLOAD_DISK; /* tests/test_offload_disk.c trains with it */
    snprintf(c.offload.offload_path, sizeof c.offload.offload_path, "/nonexistent/hx-offload");
    st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_ERR_IO && strstr(hx_last_error(), "/nonexistent/hx-offload"), "disk: %s",
          hx_last_error());
    deep_mlp_free(&m);
}

/* The report's prediction against the measured peak: the cap holds, and
 * the measured peak is within the margin of the prediction. */
static void check_report(hx_session *s, const char *what, size_t cap)
{
    hx_offload_report r;
    CHECK(hx_session_offload_report(s, &r) == HX_OK, "%s: report: %s", what, hx_last_error());
    printf("%s: offload_param=%s chunk_size=%zu prefetch_depth=%d after %d policies: predicted "
           "peak %zu B (persistent %zu, arena %zu; no offload %zu), measured %zu B reserved, %zu B "
           "allocated; cap %zu B, margin %zu B\n", what,
           r.offload_param == HX_OFFLOAD_CPU ? "cpu" : "none", r.chunk_size, r.prefetch_depth,
           r.candidates, r.predicted_peak, r.predicted_persistent, r.predicted_arena,
           r.predicted_no_offload, r.measured_peak_reserved, r.measured_peak_allocated,
           r.capacity, r.margin);
    CHECK(r.automatic && r.capacity == cap && r.predicted_peak + r.margin <= cap,
          "%s: predicted %zu + margin %zu over the cap %zu", what, r.predicted_peak, r.margin, cap);
    CHECK(r.measured_peak_reserved <= cap && r.measured_peak_allocated <= r.measured_peak_reserved,
          "%s: measured %zu over the cap %zu", what, r.measured_peak_reserved, cap);
    CHECK(r.measured_peak_reserved <= r.predicted_peak + r.margin &&
              r.measured_peak_reserved + r.margin >= r.predicted_peak,
          "%s: measured %zu vs predicted %zu (margin %zu)", what, r.measured_peak_reserved,
          r.predicted_peak, r.margin);
    CHECK(r.predicted_persistent + r.predicted_arena <= r.predicted_peak, "%s: parts", what);
}

/* auto_offload: a cap that holds the step keeps every parameter on the
 * device; one 10x under the parameters turns on parameter offload, whose
 * parameters after N steps are bitwise an uncapped plain run's; a cap too
 * small for any policy fails with a report. */
static void test_auto(void)
{
    deep_mlp m;
    CHECK(deep_mlp_build(B, W, L, &m) == HX_OK, "build: %s", hx_last_error());
    hx_session_config rc = hx_session_config_default();
    rc.accelerator = HX_ACCELERATOR_EMU;
    rc.n_threads = 2;
    float ref_loss[STEPS], loss[STEPS];
    hx_session *ref = train(&m, &rc, ref_loss);
    if (!ref) return;

    hx_session_config c = rc;
    c.offload.auto_offload = true;
    hx_session *s = train(&m, &c, loss); /* 8 GiB: everything fits */
    if (s) {
        CHECK(!memcmp(loss, ref_loss, sizeof loss), "auto, fits: losses differ");
        deep_mlp_check_same_params(s, ref, &m, "auto, fits");
        CHECK(!memcmp(s->e.target, ref->e.target, sizeof *s->e.target * m.g->n) &&
                      !s->e.cfg.offload.offload_param,
              "auto, fits: the placement changed");
        check_report(s, "auto, 8 GiB", (size_t)8 << 30);
        hx_offload_report r;
        hx_session_offload_report(s, &r);
        CHECK(r.offload_param == HX_OFFLOAD_NONE && r.candidates == 1 &&
                  r.predicted_peak == r.predicted_no_offload &&
                  r.predicted_persistent + r.predicted_arena >= m.param_bytes,
              "auto, fits: %d policies, offload %d", r.candidates, (int)r.offload_param);
        hx_session_free(s);
    }

    c.max_device_memory = CAP; /* parameters 10x the cap */
    s = train(&m, &c, loss);
    if (s) {
        CHECK(!memcmp(loss, ref_loss, sizeof loss), "auto, capped: losses %.9g vs %.9g",
              loss[STEPS - 1], ref_loss[STEPS - 1]);
        deep_mlp_check_same_params(s, ref, &m, "auto, capped");
        CHECK(s->e.target[m.w[0]->id] == HX_TARGET_CPU &&
                      s->e.cfg.offload.offload_param == HX_OFFLOAD_CPU,
              "auto, capped: no offload");
        check_report(s, "auto, 1.2 MB", CAP);
        hx_offload_report r;
        hx_session_offload_report(s, &r);
        CHECK(r.offload_param == HX_OFFLOAD_CPU && r.candidates > 1 &&
                  r.predicted_no_offload > 10 * CAP && r.chunk_size >= 64 << 10,
              "auto, capped: %d policies, no offload %zu", r.candidates, r.predicted_no_offload);
        hx_session_free(s);
    }

    c.max_device_memory = 96 << 10; /* less than one layer's weight */
    s = NULL;
    hx_status st = hx_session_create(m.g, &c, &s);
    const char *e = hx_last_error();
    CHECK(st == HX_ERR_DEVICE_OOM && !s && strstr(e, "auto_offload") &&
              strstr(e, "smallest peak") && strstr(e, "98304") && strstr(e, "max_device_memory"),
          "auto, too small: %s (%s)", hx_status_name(st), e);
    printf("auto, 96 KiB: %s\n", e);
    size_t need = 0; /* the cap the report suggests is enough */
    const char *at = strstr(e, "about ");
    CHECK(at && sscanf(at, "about %zu", &need) == 1 && need > 96 << 10 && need < CAP,
          "auto, too small: no cap suggested");
    c.max_device_memory = need;
    if (need) s = train(&m, &c, loss);
    if (s) check_report(s, "auto, the suggested cap", need);
    hx_session_free(s);

    /* end to end through $HX_OFFLOAD; manual offload reports its prediction too */
    c = rc;
    c.max_device_memory = CAP;
    setenv("HX_OFFLOAD", "auto_offload=true", 1);
    s = train(&m, &c, loss);
    unsetenv("HX_OFFLOAD");
    if (s) {
        CHECK(s->e.cfg.offload.auto_offload && s->e.cfg.offload.offload_param == HX_OFFLOAD_CPU,
              "HX_OFFLOAD=auto_offload=true not applied");
        check_report(s, "auto via HX_OFFLOAD", CAP);
        hx_session_free(s);
    }
    c.offload.offload_param = HX_OFFLOAD_CPU;
    c.offload.chunk_size = 300 << 10;
    c.offload.prefetch_depth = 0;
    s = train(&m, &c, loss);
    if (s) {
        hx_offload_report r;
        CHECK(hx_session_offload_report(s, &r) == HX_OK && !r.automatic && r.predicted_peak &&
                  r.measured_peak_reserved <= r.predicted_peak + (64 << 10) &&
                  r.measured_peak_reserved + (64 << 10) >= r.predicted_peak,
              "manual: predicted %zu, measured %zu", r.predicted_peak, r.measured_peak_reserved);
        printf("manual cpu, depth 0, 300 KiB chunks: predicted %zu B, measured %zu B reserved\n",
               r.predicted_peak, r.measured_peak_reserved);
        hx_session_free(s);
    }
    hx_session_free(ref);
    deep_mlp_free(&m);
}

static int setup(void)
{
    test_rng r = test_rng_make(21);
    for (int k = 0; k < STEPS; k++) {
        test_fill_uniform(&r, xv[k], B * W, -1, 1);
        test_fill_uniform(&r, yv[k], B * W, -1, 1);
    }
    return 0;
}

static const test_case cases[] = {
    {"parse", test_parse},
    {"env", test_env},
    {"cpu_offload_bitwise", test_cpu_offload_bitwise},
    {"auto", test_auto},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup};
    return test_main_with(argc, argv, "offload", cases, TEST_COUNT(cases), &o);
}
