/* Activation offload (offload_activations=cpu): a deep MLP with a large
 * batch, whose activations dominate the device peak, runs out of device
 * memory under a cap without it and trains with it, losses and parameters
 * bitwise those of an uncapped run; the plan copies an activation out
 * right after it is made and back before its far read (the backward), the
 * measured device peak is the predicted one, under the cap and below the
 * peak without activation offload; auto_offload turns it on when the
 * parameters fit but the activations do not, leaves it off when everything
 * fits, and offloads both when neither alone fits; the gradient norm is
 * clipped so that every result depends on every gradient's scan; the
 * trace names each copy out and back with its tensor and role; the key's
 * syntax and its errors. */
#include "hetex.h"
#include "deep_mlp.h"
#include "testutil.h"
#include "session/session.h"
#include "scheduler/plan.h" /* the plan's fields */
#include "trace_read.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 256, W = 64, L = 12, STEPS = 3 };
#define CAP ((size_t)1 << 20)

static float xv[STEPS][B * W], yv[STEPS][B * W];

static hx_session_config emu_config(size_t cap)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.max_device_memory = cap;
    c.clip_grad_norm = 0.5; /* results depend on every gradient's scan (the norm) */
    return c;
}

/* Trains STEPS steps; returns the session (NULL on failure: *st says why)
 * and the losses. */
static hx_session *train(const deep_mlp *m, const hx_session_config *c, float *loss, hx_status *st)
{
    hx_session *s = NULL;
    *st = hx_session_create(m->g, c, &s);
    for (int k = 0; !*st && k < STEPS; k++) {
        hx_feed f[2] = {{NULL, m->x, xv[k], sizeof xv[k]}, {NULL, m->y, yv[k], sizeof yv[k]}};
        hx_fetch o = {NULL, m->loss, &loss[k], sizeof loss[k]};
        *st = hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN);
    }
    if (*st) {
        hx_session_free(s);
        return NULL;
    }
    return s;
}

static hx_session *train_ok(const deep_mlp *m, const hx_session_config *c, float *loss,
                            const char *what)
{
    hx_status st;
    hx_session *s = train(m, c, loss, &st);
    CHECK(s, "%s: %s (%s)", what, hx_status_name(st), hx_last_error());
    return s;
}

static hx_offload_report report_of(hx_session *s, const char *what)
{
    hx_offload_report r;
    memset(&r, 0, sizeof r);
    CHECK(hx_session_offload_report(s, &r) == HX_OK, "%s: report: %s", what, hx_last_error());
    printf("%s: offload_param=%s offload_activations=%s chunk_size=%zu prefetch_depth=%d, "
           "%d activations (%zu B each way, %zu B copied per step), %d policies: predicted peak "
           "%zu B (persistent %zu, arena %zu; no offload %zu), measured %zu B reserved, %zu B "
           "allocated, cap %zu B\n", what, r.offload_param ? "cpu" : "none",
           r.offload_activations ? "cpu" : "none", r.chunk_size, r.prefetch_depth,
           r.activations_offloaded, r.activation_bytes, r.copy_bytes, r.candidates,
           r.predicted_peak, r.predicted_persistent, r.predicted_arena, r.predicted_no_offload,
           r.measured_peak_reserved, r.measured_peak_allocated, r.capacity);
    return r;
}

/* The key, its errors, and $HX_OFFLOAD. */
static void test_parse(const deep_mlp *m)
{
    hx_offload_config c = hx_offload_config_default();
    CHECK(c.offload_activations == HX_OFFLOAD_NONE, "default");
    CHECK(hx_offload_config_parse(" offload_activations = CPU ,prefetch_depth=2", &c) == HX_OK &&
              c.offload_activations == HX_OFFLOAD_CPU && c.prefetch_depth == 2,
          "parse: %s", hx_last_error());
    CHECK(hx_offload_config_parse("offload_activations=none", &c) == HX_OK &&
              c.offload_activations == HX_OFFLOAD_NONE, "none: %s", hx_last_error());
    const char *bad[] = {"offload_activations=disk", "offload_activations=",
                         "offload_activations=1", "offload_activations"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hx_offload_config before = c;
        hx_status st = hx_offload_config_parse(bad[i], &c);
        CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "offload_activations"),
              "'%s': %s, '%s'", bad[i], hx_status_name(st), hx_last_error());
        CHECK(!memcmp(&before, &c, sizeof c), "'%s' changed the config", bad[i]);
    }
    CHECK(hx_offload_config_parse("offload_activation=cpu", &c) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "offload_activations"),
          "the unknown-key message lists the key: %s", hx_last_error());

    hx_session_config sc = emu_config(0);
    sc.offload.offload_activations = (hx_offload_target)HX_OFFLOAD_DISK;
    hx_session *s = NULL;
    CHECK(hx_session_create(m->g, &sc, &s) == HX_ERR_INVALID_ARGUMENT && !s &&
              strstr(hx_last_error(), "offload_activations"), "DISK: %s", hx_last_error());
    sc = emu_config(0);
    setenv("HX_OFFLOAD", "offload_activations=cpu,chunk_size=64KB", 1);
    CHECK(hx_session_create(m->g, &sc, &s) == HX_OK, "HX_OFFLOAD: %s", hx_last_error());
    if (s) {
        CHECK(s->e.cfg.offload.offload_activations == HX_OFFLOAD_CPU &&
                      s->e.cfg.offload.chunk_size == 64 << 10,
              "HX_OFFLOAD not applied");
        hx_session_free(s);
    }
    sc.offload.offload_activations = HX_OFFLOAD_CPU; /* the field overrides the variable */
    setenv("HX_OFFLOAD", "offload_param=cpu", 1);
    CHECK(hx_session_create(m->g, &sc, &s) == HX_OK &&
                  s->e.cfg.offload.offload_param == HX_OFFLOAD_NONE,
          "HX_OFFLOAD over the field: %s", hx_last_error());
    hx_session_free(s);
    unsetenv("HX_OFFLOAD");
}

/* The plan: each copy out is followed by its copy back, both of a value
 * made on the device, out right after the op that makes it, back right
 * before a device op that reads it, at least 2 * depth + 2 chunks later. */
static void check_plan(const hx_plan *p, int depth, const char *what)
{
    int outs = 0, ins = 0;
    size_t bytes = 0;
    for (int k = 0; k < p->n_steps; k++) {
        const hx_step *sp = &p->steps[k];
        if (p->step_role[k] == HX_ROLE_ACT_OUT) {
            outs++;
            bytes += hx_tensor_nbytes(sp->node);
            CHECK(!sp->fn && sp->src_dev == HX_DEV_ACCEL && sp->dev == HX_DEV_HOST && k > 0 &&
                      (p->steps[k - 1].node == sp->node || !p->steps[k - 1].fn),
                  "%s: copy out of '%s' not right after it is made", what, sp->node->name);
            int back = -1;
            for (int j = k + 1; j < p->n_steps && back < 0; j++)
                if (p->step_role[j] == HX_ROLE_ACT_IN && p->steps[j].node == sp->node) back = j;
            CHECK(back > 0 && p->step_chunk[back] - p->step_chunk[k] >= 2 * depth + 2,
                  "%s: '%s' out in chunk %d, back at step %d", what, sp->node->name,
                  p->step_chunk[k], back);
        }
        if (p->step_role[k] == HX_ROLE_ACT_IN) {
            ins++;
            CHECK(!sp->fn && sp->src_dev == HX_DEV_HOST && sp->dev == HX_DEV_ACCEL &&
                      k + 1 < p->n_steps && p->steps[k + 1].dev == HX_DEV_ACCEL,
                  "%s: copy back of '%s'", what, sp->node->name);
        }
    }
    CHECK(outs == p->n_act && ins == outs && bytes == p->act_bytes && outs > 0,
          "%s: %d out, %d back, %d counted", what, outs, ins, p->n_act);
}

/* Manual activation offload under a cap that the step without it exceeds. */
static void test_manual(const deep_mlp *m, hx_session *ref, const float *ref_loss)
{
    float loss[STEPS];
    hx_session_config c = emu_config(CAP);
    hx_status st;
    hx_session *s = train(m, &c, loss, &st); /* without: out of device memory */
    CHECK(!s && st == HX_ERR_DEVICE_OOM, "without activation offload: %s", hx_status_name(st));
    hx_session_free(s);
    s = NULL;
    /* refused when it is made (the step can never fit), so planned under a larger cap */
    CHECK(hx_session_create(m->g, &c, &s) == HX_ERR_DEVICE_OOM && !s &&
              strstr(hx_last_error(), "offload_activations=cpu"),
          "without activation offload the session is refused: %s", hx_last_error());
    hx_session_config big = emu_config(16 * CAP);
    CHECK(hx_session_create(m->g, &big, &s) == HX_OK, "create: %s", hx_last_error());
    hx_offload_report none = {0};
    if (s) none = report_of(s, "none, 16 MiB (planned only)");
    hx_session_free(s);
    CHECK(none.predicted_peak > CAP, "the step without offload fits: %zu B", none.predicted_peak);

    for (int depth = 0; depth <= 1; depth++) {
        c.offload.offload_activations = HX_OFFLOAD_CPU;
        c.offload.chunk_size = 64 << 10;
        c.offload.prefetch_depth = depth;
        char what[64];
        snprintf(what, sizeof what, "activations, 1 MiB, depth %d", depth);
        s = train_ok(m, &c, loss, what);
        if (!s) continue;
        CHECK(!memcmp(loss, ref_loss, sizeof loss), "%s: losses %.9g %.9g vs %.9g %.9g", what,
              loss[0], loss[STEPS - 1], ref_loss[0], ref_loss[STEPS - 1]);
        CHECK(loss[STEPS - 1] < loss[0], "%s: loss %g -> %g", what, loss[0], loss[STEPS - 1]);
        deep_mlp_check_same_params(s, ref, m, what);
        check_plan(s->last_plan, depth, what);
        hx_offload_report r = report_of(s, what);
        CHECK(!r.automatic && r.offload_activations == HX_OFFLOAD_CPU &&
                  r.offload_param == HX_OFFLOAD_NONE && r.activations_offloaded > 0 &&
                  r.activation_bytes == s->last_plan->act_bytes,
              "%s: report", what);
        /* the warm-up plan has no fetch: the loss living to the run's end may
         * add a block of the pools' granularity (cap / 64) */
        CHECK(r.measured_peak_reserved >= r.predicted_peak &&
                  r.measured_peak_reserved <= r.predicted_peak + CAP / 64,
              "%s: measured %zu, predicted %zu", what, r.measured_peak_reserved, r.predicted_peak);
        CHECK(r.measured_peak_reserved <= CAP && r.measured_peak_reserved < none.predicted_peak,
              "%s: measured %zu, cap %zu, without %zu", what, r.measured_peak_reserved, CAP,
              none.predicted_peak);
        hx_session_free(s);
    }
}

/* auto_offload: everything fits uncapped, so nothing moves; under the cap
 * the parameters fit (their device copies are transient) but the step's
 * activations do not, and it offloads activations only, bitwise again. */
static void test_auto(const deep_mlp *m, hx_session *ref, const float *ref_loss)
{
    float loss[STEPS];
    hx_session_config c = emu_config(0);
    c.offload.auto_offload = true;
    hx_session *s = train_ok(m, &c, loss, "auto, 8 GiB");
    if (s) {
        hx_offload_report r = report_of(s, "auto, 8 GiB");
        CHECK(r.automatic && r.candidates == 1 && r.offload_activations == HX_OFFLOAD_NONE &&
                  r.offload_param == HX_OFFLOAD_NONE && !r.activations_offloaded &&
                  !r.activation_bytes && !s->last_plan->n_act,
              "auto, fits: %d policies, activations %d", r.candidates, (int)r.offload_activations);
        CHECK(!memcmp(loss, ref_loss, sizeof loss), "auto, fits: losses differ");
        hx_session_free(s);
    }
    c.max_device_memory = CAP;
    s = train_ok(m, &c, loss, "auto, 1 MiB");
    if (!s) return;
    hx_offload_report r = report_of(s, "auto, 1 MiB");
    CHECK(r.automatic && r.offload_activations == HX_OFFLOAD_CPU &&
              r.offload_param == HX_OFFLOAD_NONE && r.activations_offloaded > 0 &&
              r.activation_bytes == s->last_plan->act_bytes && r.candidates > 1 &&
              r.predicted_no_offload > CAP && r.predicted_peak + r.margin <= CAP,
          "auto, 1 MiB: activations %d (%d moved), params %d, %d policies, no offload %zu",
          (int)r.offload_activations, r.activations_offloaded, (int)r.offload_param, r.candidates,
          r.predicted_no_offload);
    CHECK(r.measured_peak_reserved <= CAP && r.measured_peak_reserved >= r.predicted_peak &&
              r.measured_peak_reserved <= r.predicted_peak + r.margin,
          "auto, 1 MiB: measured %zu, predicted %zu, margin %zu", r.measured_peak_reserved,
          r.predicted_peak, r.margin);
    CHECK(!memcmp(loss, ref_loss, sizeof loss), "auto, 1 MiB: losses %.9g vs %.9g",
          loss[STEPS - 1], ref_loss[STEPS - 1]);
    deep_mlp_check_same_params(s, ref, m, "auto, 1 MiB");
    check_plan(s->last_plan, r.prefetch_depth, "auto, 1 MiB");
    hx_session_free(s);
}

/* A wider MLP (batch 64, width 256, 12 layers) whose parameter copies (3.1
 * MB) and activations each exceed the cap: only offloading both fits, and
 * auto_offload plans that family once neither of the others fits (its
 * inputs are W x B: the same xv, yv). */
static void test_auto_both(void)
{
    deep_mlp m;
    CHECK(deep_mlp_build(W, B, L, &m) == HX_OK, "build: %s", hx_last_error());
    float ref_loss[STEPS], loss[STEPS];
    hx_session_config c = emu_config(0);
    hx_session *ref = train_ok(&m, &c, ref_loss, "wide, uncapped");
    size_t cap = (size_t)3 << 19; /* 1.5 MiB: the step without offload peaks at 4.8 MB */
    c.max_device_memory = cap;
    c.offload.auto_offload = true;
    hx_session *s = ref ? train_ok(&m, &c, loss, "wide, auto") : NULL;
    if (s) {
        hx_offload_report r = report_of(s, "wide, auto");
        CHECK(r.offload_activations == HX_OFFLOAD_CPU && r.offload_param == HX_OFFLOAD_CPU,
              "wide, auto: activations %d, params %d", (int)r.offload_activations,
              (int)r.offload_param);
        CHECK(r.measured_peak_reserved <= cap && r.measured_peak_reserved >= r.predicted_peak &&
                  r.measured_peak_reserved <= r.predicted_peak + r.margin,
              "wide, auto: measured %zu, predicted %zu", r.measured_peak_reserved, r.predicted_peak);
        CHECK(!memcmp(loss, ref_loss, sizeof loss), "wide, auto: losses differ");
        deep_mlp_check_same_params(s, ref, &m, "wide, auto");
        hx_session_free(s);
    }
    hx_session_free(ref);
    deep_mlp_free(&m);
}

/* Every activation's copy out and back in the trace of a run, with its
 * tensor's name and role. */
static void test_trace_labels(const deep_mlp *m)
{
    char path[] = "/tmp/hx-act-trace-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    hx_session_config c = emu_config(CAP);
    c.offload.offload_activations = HX_OFFLOAD_CPU;
    c.offload.chunk_size = 64 << 10;
    c.offload.prefetch_depth = 1;
    c.trace_path = path;
    float loss[STEPS];
    hx_session *s = train_ok(m, &c, loss, "traced");
    tr_trace t;
    if (s) {
        int n_act = s->last_plan->n_act;
        CHECK(hx_session_trace_flush(s) == HX_OK, "flush: %s", hx_last_error());
        hx_session_free(s);
        CHECK(tr_read(path, &t) == 0, "cannot read the trace %s", path);
        int out = 0, back = 0, unnamed = 0;
        for (int i = 0; i < t.n; i++) {
            const tr_event *e = &t.ev[i];
            bool d2h = !strcmp(e->name, "copy d2h"), h2d = !strcmp(e->name, "copy h2d");
            out += d2h && !strcmp(e->role, "activation out") && e->tensor[0];
            back += h2d && !strcmp(e->role, "activation back") && e->tensor[0];
            unnamed += (d2h || h2d) && e->role[0] && !e->tensor[0];
        }
        CHECK(n_act > 0 && out == STEPS * n_act && back == STEPS * n_act && !unnamed,
              "trace: %d copies out and %d back for %d activations over %d steps, %d with a "
              "role and no tensor", out, back, n_act, STEPS, unnamed);
        tr_free(&t);
    }
    remove(path);
}

/* The model and the uncapped run that every capped run must equal. */
static deep_mlp mlp;
static hx_session *reference;
static float reference_loss[STEPS];

static int setup(void)
{
    test_rng r = test_rng_make(33);
    for (int k = 0; k < STEPS; k++) {
        test_fill_uniform(&r, xv[k], B * W, -1, 1);
        test_fill_uniform(&r, yv[k], B * W, -1, 1);
    }
    CHECK(deep_mlp_build(B, W, L, &mlp) == HX_OK, "build: %s", hx_last_error());
    hx_session_config rc = emu_config(0);
    reference = train_ok(&mlp, &rc, reference_loss, "uncapped");
    return 0;
}

static void teardown(void)
{
    hx_session_free(reference);
    deep_mlp_free(&mlp);
}

static void case_parse(void) { test_parse(&mlp); }
static void case_manual(void) { if (reference) test_manual(&mlp, reference, reference_loss); }
static void case_auto(void) { if (reference) test_auto(&mlp, reference, reference_loss); }
static void case_trace_labels(void) { test_trace_labels(&mlp); }

static const test_case cases[] = {
    {"parse", case_parse},
    {"manual", case_manual},
    {"auto", case_auto},
    {"auto_both", test_auto_both},
    {"trace_labels", case_trace_labels},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "activation_offload", cases, TEST_COUNT(cases), &o);
}
