/* Automatic placement's report per unit (hx_session_placement_units,
 * hx_session_placement_text) on emu's simulated machine, whose floors (40
 * ms per launch and copy, far above this model's kernels even in
 * sanitizer builds) make each unit's time its model's within the noise of
 * a shared host (a wake-up from a sleep was 4 ms late at load 14 on 2
 * cores, and the model adds the lateness measured at creation):
 * - predicted right: every kernel unit within 20% of its prediction and
 *   every copy within 2x (a copy's prediction is the link's latency, the
 *   fastest of three copies timed at creation, each a wake-up away from
 *   its floor: 57 ms for a 40 ms floor under ASan at load 20), the fields
 *   consistent, the units timed in the first HX_PLACEMENT_TIMED_RUNS
 *   training runs only (the step may still be off: it is the units only
 *   where the model's overlap holds);
 * - predicted wrong on purpose: the op cost cache says every matmul takes
 *   0.5 s; of the kernel units exactly those that run a matmul are flagged
 *   (copies are held to 2x, as above), the step too, and the text lists
 *   them first;
 * - the calls' refusals. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"
#include "tmpdir.h"
#include "session/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];
static char cache[300];

static hx_session_config simulated(void)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.auto_placement = true;
    c.emu_cost = (hx_emu_cost){.copy_bytes_per_s = 8e9, .launch_latency_s = 40e-3, .flops_per_s = 2e9};
    c.emu_host_cost = (hx_emu_host_cost){.flops_per_s = 1e8, .launch_latency_s = 40e-3};
    c.placement_cache = cache;
    return c;
}

/* x (32,64) @ w (64,64), relu, mse to y, Adam. */
static hx_graph *model(hx_tensor **x, hx_tensor **y, hx_tensor **loss)
{
    hx_graph *g = hx_graph_create();
    int64_t s[2] = {32, 64};
    *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, s);
    *y = hx_graph_input(g, "y", HX_DTYPE_F32, 2, s);
    int64_t ws[2] = {64, 64};
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1.0));
    *loss = hx_mse(g, hx_relu(g, hx_matmul(g, *x, w, false, false)), *y);
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    CHECK(hx_graph_backward(g, *loss) == HX_OK && hx_graph_apply_optimizer(g, NULL, &adam) == HX_OK,
          "build: %s", hx_last_error());
    return g;
}

static void train(hx_session *s, hx_tensor *x, hx_tensor *y, hx_tensor *loss, int steps)
{
    test_rng r = test_rng_make(3);
    static float xv[32 * 64], yv[32 * 64];
    float l;
    for (int i = 0; i < steps; i++) {
        test_fill_uniform(&r, xv, 32 * 64, -1, 1);
        test_fill_uniform(&r, yv, 32 * 64, -1, 1);
        hx_feed f[2] = {{NULL, x, xv, sizeof xv}, {NULL, y, yv, sizeof yv}};
        hx_fetch o = {NULL, loss, &l, sizeof l};
        CHECK(hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN) == HX_OK, "train: %s", hx_last_error());
    }
}

/* The units of s (at most 64). */
static int units(hx_session *s, hx_placement_unit *u)
{
    int n = -1;
    CHECK(hx_session_placement_units(s, NULL, 0, &n) == HX_OK && n > 0 && n <= 64, "%d units: %s",
          n, hx_last_error());
    int m = -1;
    if (n > 0 && n <= 64)
        CHECK(hx_session_placement_units(s, u, 64, &m) == HX_OK && m == n, "units again: %d", m);
    return n > 0 && n <= 64 ? n : 0;
}

/* Whether unit u of s's timed plan runs a matmul (its kernels, by the plan). */
static bool has_matmul(const hx_session *s, int u)
{
    hx_unit_view v = hx__plan_unit(s->timed_plan, u);
    for (int i = 0; i < v.n_steps; i++) {
        const hx_step *sp = hx__plan_unit_step(s->timed_plan, u, i);
        if (sp->fn && sp->node->op == HX_OP_MATMUL) return true;
    }
    return false;
}

/* What every unit must satisfy, right or wrong. */
static void check_fields(const hx_placement_unit *u, int n, int runs)
{
    int timed = 0;
    for (int i = 0; i < n; i++) {
        const hx_placement_unit *x = &u[i];
        CHECK(x->index == i && (x->phase == 0 || x->phase == 1) && x->n_steps > 0 && x->first_op &&
              x->last_op && (x->lane == HX_UNIT_H2D || x->lane == HX_UNIT_D2H) == (x->copy_bytes > 0),
              "unit %d: index %d phase %d, %d steps, lane %d, %zu bytes", i, x->index, x->phase,
              x->n_steps, (int)x->lane, x->copy_bytes);
        CHECK(x->predicted_s > 0 && isfinite(x->predicted_s), "unit %d predicted %g", i, x->predicted_s);
        if (!x->runs) {
            CHECK(x->measured_s == 0 && x->ratio == 0 && !x->off, "unit %d untimed", i);
            continue;
        }
        timed++;
        CHECK(x->runs == runs, "unit %d timed in %d runs, not %d", i, x->runs, runs);
        CHECK(x->measured_s > 0 && fabs(x->ratio - x->measured_s / x->predicted_s) < 1e-12 &&
              x->off == (x->ratio > 1.2 || x->ratio < 0.8),
              "unit %d: measured %g predicted %g ratio %g off %d", i, x->measured_s, x->predicted_s,
              x->ratio, x->off);
    }
    CHECK(timed == n, "%d of %d units timed", timed, n);
}

static char *text_of(hx_session *s, int worst)
{
    size_t len = 0;
    CHECK(hx_session_placement_text(s, worst, NULL, 0, &len) == HX_OK && len > 0, "text length: %s",
          hx_last_error());
    char *t = malloc(len + 1);
    size_t len2 = 0;
    CHECK(t && hx_session_placement_text(s, worst, t, len + 1, &len2) == HX_OK && len2 == len &&
          strlen(t) == len, "text: %zu then %zu", len, len2);
    return t;
}

static void print_units(const hx_placement_unit *u, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(stderr, "  unit %d lane %d %d steps %s..%s predicted %.3f ms measured %.3f ms "
                "ratio %.2f%s\n", u[i].index, (int)u[i].lane, u[i].n_steps, u[i].first_op,
                u[i].last_op, 1e3 * u[i].predicted_s, 1e3 * u[i].measured_s, u[i].ratio,
                u[i].off ? " off" : "");
}

static void test_predicted_right(void)
{
    hx_tensor *x, *y, *loss;
    hx_graph *g = model(&x, &y, &loss);
    hx_session_config c = simulated();
    hx_session *s = test_session_with(g, &c, "auto");
    if (s) {
        int n = -1;
        CHECK(hx_session_placement_units(s, NULL, 0, &n) == HX_OK && n == 0, "no run yet: %d", n);
        char *t = text_of(s, 0);
        CHECK(strstr(t, "no training run"), "text before a run: %s", t);
        free(t);
        train(s, x, y, loss, HX_PLACEMENT_TIMED_RUNS + 2); /* the last two untimed */
        hx_placement_unit u[64];
        n = units(s, u);
        check_fields(u, n, HX_PLACEMENT_TIMED_RUNS);
        int bad = 0, kernels = 0, off = 0;
        for (int i = 0; i < n; i++) {
            bool copy = u[i].lane == HX_UNIT_H2D || u[i].lane == HX_UNIT_D2H;
            kernels += !copy;
            off += u[i].off;
            bad += copy ? u[i].ratio < 0.5 || u[i].ratio > 2 : u[i].off;
        }
        CHECK(kernels >= 2 && !bad, "%d of %d units past their tolerance", bad, n);
        if (bad) print_units(u, n);
        t = text_of(s, 0);
        int lines = 0, flagged = 0;
        for (const char *p = t; (p = strchr(p, '\n')); p++) lines++;
        for (const char *p = t; (p = strstr(p, " OFF ")); p++) flagged++;
        char head[64];
        snprintf(head, sizeof head, "%d units, %d more than 20%% off", n, off);
        /* the flags of the units and (the step may be off too) the step's */
        CHECK(lines == n + 2 && strstr(t, head) && strstr(t, "\n  step: predicted") &&
              flagged - (strstr(strstr(t, "\n  step: predicted"), " OFF ") != NULL) == off,
              "%d lines for %d units, %d flagged of %d:\n%s", lines, n, flagged, off, t);
        free(t);
        hx_placement_report r;
        CHECK(hx_session_placement_report(s, &r) == HX_OK && r.measured_steps == HX_PLACEMENT_TIMED_RUNS + 2,
              "%d steps measured", r.measured_steps);
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* Every matmul line of the cache file set to 0.5 s. */
static int poison_matmuls(void)
{
    FILE *f = fopen(cache, "r");
    CHECK(f != NULL, "read %s", cache);
    if (!f) return 0;
    char out[1 << 16] = "", line[256];
    size_t n = 0;
    int changed = 0;
    while (fgets(line, sizeof line, f)) {
        char m[32], sig[32], what[64];
        double sec;
        if (sscanf(line, "%31s %31s %lf %63s", m, sig, &sec, what) == 4 && !strcmp(what, "matmul")) {
            snprintf(line, sizeof line, "%s %s 0.5 matmul\n", m, sig);
            changed++;
        }
        n += (size_t)snprintf(out + n, sizeof out - n, "%s", line);
    }
    fclose(f);
    f = fopen(cache, "w");
    CHECK(f && n < sizeof out, "rewrite %s", cache);
    if (f) {
        fputs(out, f);
        fclose(f);
    }
    return changed;
}

static void test_predicted_wrong(void)
{
    hx_tensor *x, *y, *loss;
    hx_graph *g = model(&x, &y, &loss);
    hx_session_config c = simulated();
    hx_session *s = test_session_with(g, &c, "profile into the cache");
    hx_session_free(s);
    CHECK(poison_matmuls() >= 2, "the cache holds the forward and backward matmuls");
    s = test_session_with(g, &c, "auto, matmuls at 0.5 s");
    if (s) {
        train(s, x, y, loss, 3);
        hx_placement_unit u[64];
        int n = units(s, u), flagged = 0, with_matmul = 0;
        check_fields(u, n, 3);
        for (int i = 0; i < n; i++) {
            bool mm = has_matmul(s, i), copy = u[i].lane == HX_UNIT_H2D || u[i].lane == HX_UNIT_D2H;
            with_matmul += mm;
            flagged += u[i].off && !copy;
            CHECK(copy ? u[i].ratio >= 0.5 && u[i].ratio <= 2 : u[i].off == mm && (!mm || u[i].ratio < 0.5),
                  "unit %d (%s..%s): matmul %d, ratio %.3f, off %d", i, u[i].first_op,
                  u[i].last_op, mm, u[i].ratio, u[i].off);
        }
        CHECK(with_matmul > 0 && flagged == with_matmul && flagged < n, "%d kernel units flagged, "
              "%d run a matmul, of %d", flagged, with_matmul, n);
        if (flagged != with_matmul) print_units(u, n);
        hx_placement_report r;
        CHECK(hx_session_placement_report(s, &r) == HX_OK && r.off &&
              r.measured_step_s < 0.8 * r.predicted_step_s, "step: measured %g predicted %g off %d",
              r.measured_step_s, r.predicted_step_s, r.off);
        /* worst 1: a flagged unit, then how many were left out, then the step */
        char *t = text_of(s, 1);
        char *nl = strchr(t, '\n');
        CHECK(nl && strstr(nl + 1, "OFF by more than 20%") && strchr(nl + 1, '\n') &&
              strstr(t, "more units") && strstr(t, "step: predicted") &&
              strstr(strstr(t, "step: predicted"), "OFF"), "worst 1:\n%s", t);
        free(t);
        /* a short buffer gets the start, NUL-terminated, and the whole length */
        char small[16];
        size_t len = 0;
        CHECK(hx_session_placement_text(s, 0, small, sizeof small, &len) == HX_OK &&
              strlen(small) == sizeof small - 1 && len > sizeof small &&
              !strncmp(small, "placement repor", sizeof small - 1), "short buffer: '%s' %zu", small, len);
    }
    hx_session_free(s);
    hx_graph_free(g);
}

static void test_refusals(void)
{
    hx_tensor *x, *y, *loss;
    hx_graph *g = model(&x, &y, &loss);
    hx_session_config c = simulated();
    c.auto_placement = false;
    hx_session *s = test_session_with(g, &c, "no AUTO node");
    hx_placement_unit u[4];
    int n = 7;
    size_t len = 9;
    char buf[8];
    CHECK(hx_session_placement_units(NULL, u, 4, &n) == HX_ERR_INVALID_ARGUMENT && n == 7 &&
          strstr(hx_last_error(), "session is NULL"), "NULL session: %s", hx_last_error());
    if (s) {
        CHECK(hx_session_placement_units(s, u, 4, NULL) == HX_ERR_INVALID_ARGUMENT &&
              strstr(hx_last_error(), "n_units"), "NULL n_units: %s", hx_last_error());
        CHECK(hx_session_placement_units(s, u, -1, &n) == HX_ERR_INVALID_ARGUMENT && n == 7 &&
              strstr(hx_last_error(), "cap"), "negative cap: %s", hx_last_error());
        CHECK(hx_session_placement_units(s, NULL, 4, &n) == HX_ERR_INVALID_ARGUMENT && n == 7 &&
              strstr(hx_last_error(), "out is NULL"), "NULL out: %s", hx_last_error());
        CHECK(hx_session_placement_text(s, -1, buf, sizeof buf, &len) == HX_ERR_INVALID_ARGUMENT &&
              len == 9 && strstr(hx_last_error(), "worst"), "negative worst: %s", hx_last_error());
        CHECK(hx_session_placement_text(s, 0, NULL, 8, &len) == HX_ERR_INVALID_ARGUMENT && len == 9,
              "NULL buf: %s", hx_last_error());
        CHECK(hx_session_placement_text(s, 0, buf, sizeof buf, NULL) == HX_ERR_INVALID_ARGUMENT,
              "NULL len: %s", hx_last_error());
        train(s, x, y, loss, 2);
        CHECK(hx_session_placement_units(s, u, 4, &n) == HX_OK && n == 0, "no AUTO node: %d units", n);
        char *t = text_of(s, 3);
        CHECK(strstr(t, "no node was placed automatically"), "text: %s", t);
        free(t);
    }
    hx_session_free(s);
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"predicted_right", test_predicted_right},
    {"predicted_wrong", test_predicted_wrong},
    {"refusals", test_refusals},
};

int main(int argc, char **argv)
{
    CHECK(test_make_tmpdir(dir, sizeof dir, "hx-placement-report"), "tmpdir");
    snprintf(cache, sizeof cache, "%s/op_costs", dir);
    int rc = test_main(argc, argv, "placement_report", cases, TEST_COUNT(cases));
    test_remove_tree(dir);
    return rc;
}
