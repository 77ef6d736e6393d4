/* Optimizer update nodes against the written formulas, the gradient scan
 * (NaN/Inf leaves everything unchanged), dynamic loss scaling, and
 * checkpoints (resume equality, corrupt and truncated files refused). */
#include "hetex.h"
#include "optim_ref.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

enum { N = 37 };

/* loss = sum(w * x): the gradient of w is the fed x. */
typedef struct model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *w, *loss;
} model;

static model make(const hx_optimizer_config *opt, hx_loss_scale_config ls)
{
    model m = {.g = hx_graph_create()};
    int64_t n = N;
    hx_tensor *x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 1, &n);
    m.w = hx_graph_param(m.g, "w", HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
    m.loss = hx_reduce_sum(m.g, hx_mul(m.g, m.w, x), 0, NULL, false);
    OK(hx_graph_backward(m.g, m.loss));
    OK(hx_graph_apply_optimizer(m.g, NULL, opt));
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 1;
    cfg.loss_scale = ls;
    OK(hx_session_create(m.g, &cfg, &m.s));
    return m;
}

static void drop(model *m)
{
    hx_session_free(m->s);
    hx_graph_free(m->g);
}

static hx_status step(model *m, const float *x)
{
    hx_feed f = {"x", NULL, x, sizeof(float) * N};
    return hx_session_run(m->s, &f, 1, NULL, 0, HX_RUN_TRAIN);
}

static void grads(int t, float *x)
{
    test_rng r = test_rng_make(100 + t);
    test_fill_uniform(&r, x, N, -2, 2);
}

/* One element in double (tests/util/optim_ref.h): p, then the state. */
typedef struct ref_state { double p, a, b; } ref_state;

static void ref_step(const hx_optimizer_config *c, ref_state *s, double g, int t)
{
    static const ref_optim_kind kinds[] = {[HX_OPTIMIZER_SGD] = REF_SGD, [HX_OPTIMIZER_ADAM] = REF_ADAM,
                                           [HX_OPTIMIZER_ADAMW] = REF_ADAMW,
                                           [HX_OPTIMIZER_ADAGRAD] = REF_ADAGRAD,
                                           [HX_OPTIMIZER_FTRL] = REF_FTRL};
    ref_optim o = {.kind = kinds[c->kind], .lr = c->lr, .weight_decay = c->weight_decay,
                   .momentum = c->momentum, .dampening = c->dampening, .nesterov = c->nesterov,
                   .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps, .lr_decay = c->lr_decay,
                   .l1 = c->l1, .l2 = c->l2, .l2_shrinkage = c->l2_shrinkage};
    ref_optim_step(&o, t, g, &s->p, &s->a, &s->b);
}

/* ulp bounds (ref_ulps) of the params after 10 steps through a session,
 * by config below; measured: sgd 32.2, sgd-nesterov 10.1, adam 2.0, adamw
 * 6.0, adagrad 2.8, ftrl 7.4. */
static const double ULPS[6] = {64, 32, 8, 16, 8, 16};

static void test_against_formulas(void)
{
    hx_optimizer_config cfgs[6];
    cfgs[0] = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    cfgs[0].momentum = 0.9, cfgs[0].weight_decay = 0.01, cfgs[0].lr = 0.05;
    cfgs[1] = cfgs[0];
    cfgs[1].nesterov = true;
    cfgs[2] = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    cfgs[2].weight_decay = 0.02, cfgs[2].lr = 0.01;
    cfgs[3] = hx_optimizer_config_default(HX_OPTIMIZER_ADAMW);
    cfgs[3].lr = 0.01;
    cfgs[4] = hx_optimizer_config_default(HX_OPTIMIZER_ADAGRAD);
    cfgs[4].lr_decay = 0.01, cfgs[4].initial_accumulator = 0.1;
    cfgs[5] = hx_optimizer_config_default(HX_OPTIMIZER_FTRL);
    cfgs[5].lr = 0.1, cfgs[5].l1 = 0.01, cfgs[5].l2 = 0.02;
    static const char *names[] = {"sgd", "sgd-nesterov", "adam", "adamw", "adagrad", "ftrl"};
    hx_loss_scale_config off = hx_session_config_default().loss_scale;
    for (int k = 0; k < 6; k++) {
        const hx_optimizer_config *c = &cfgs[k];
        model m = make(c, off);
        if (!m.s) continue;
        float w[N], x[N];
        ref_state rs[N];
        OK(hx_session_read(m.s, m.w, w, sizeof w));
        for (int i = 0; i < N; i++)
            rs[i] = (ref_state){w[i], c->kind >= HX_OPTIMIZER_ADAGRAD ? c->initial_accumulator : 0, 0};
        for (int t = 1; t <= 10; t++) {
            grads(t, x);
            OK(step(&m, x));
            for (int i = 0; i < N; i++) ref_step(c, &rs[i], x[i], t);
        }
        OK(hx_session_read(m.s, m.w, w, sizeof w));
        double want[N];
        for (int i = 0; i < N; i++) want[i] = rs[i].p;
        double err = test_max_rel_err(w, want, N, 1e-3);
        CHECK(err <= 1e-5, "%s: params after 10 steps are %.3g off the formula", names[k], err);
        double u = ref_ulps(w, want, N, NULL);
        CHECK(u <= ULPS[k], "%s: params after 10 steps are %.1f ulps off the formula; bound %.0f",
              names[k], u, ULPS[k]);
        fprintf(stderr, "test_train_state: %s within %.1f ulps of the formula after 10 steps (bound %.0f)\n",
                names[k], u, ULPS[k]);
        drop(&m);
    }
}

/* A NaN or Inf gradient fails the run and changes nothing. */
static void test_nonfinite(void)
{
    hx_optimizer_config c = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    model m = make(&c, hx_session_config_default().loss_scale);
    if (!m.s) return;
    float x[N], w0[N], w1[N], m0[N], m1[N];
    grads(1, x);
    OK(step(&m, x));
    hx_tensor *mom = hx_graph_find(m.g, "w/exp_avg");
    CHECK(mom != NULL, "Adam state is named w/exp_avg: %s", hx_last_error());
    OK(hx_session_read(m.s, m.w, w0, sizeof w0));
    OK(hx_session_read(m.s, mom, m0, sizeof m0));
    for (int bad = 0; bad < 2; bad++) {
        x[N / 2] = bad ? NAN : INFINITY;
        hx_status st = step(&m, x);
        CHECK(st == HX_ERR_NUMERIC, "non-finite gradient gave %s", hx_status_name(st));
        CHECK(strstr(hx_last_error(), "'w'") != NULL, "message names the parameter: %s", hx_last_error());
    }
    OK(hx_session_read(m.s, m.w, w1, sizeof w1));
    OK(hx_session_read(m.s, mom, m1, sizeof m1));
    CHECK(!memcmp(w0, w1, sizeof w0) && !memcmp(m0, m1, sizeof m0), "params or moments changed");
    CHECK(hx_session_step(m.s) == 1, "step count moved to %lld", (long long)hx_session_step(m.s));
    grads(2, x);
    OK(step(&m, x));
    CHECK(hx_session_step(m.s) == 2, "a good step after the failures counts");
    drop(&m);
}

/* With a power-of-two scale, scaled-then-unscaled gradients are exact, so a
 * scaled run matches an unscaled one bitwise apart from the skipped step. */
static void test_loss_scaling(void)
{
    hx_optimizer_config c = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    hx_loss_scale_config ls = {true, 1024.0, 2, 2.0, 0.5};
    model a = make(&c, ls), b = make(&c, hx_session_config_default().loss_scale);
    if (!a.s || !b.s) return;
    float x[N], wa[N], wb[N];
    hx_train_stats st;
    grads(1, x);
    OK(step(&a, x));
    OK(step(&b, x));
    grads(2, x);
    x[3] = INFINITY;
    OK(step(&a, x)); /* skipped, not an error */
    OK(hx_session_train_stats(a.s, &st));
    CHECK(st.last_skipped && st.skipped_steps == 1 && st.step == 1 && st.loss_scale == 512.0,
          "after overflow: skipped %d/%lld step %lld scale %g", st.last_skipped,
          (long long)st.skipped_steps, (long long)st.step, st.loss_scale);
    OK(hx_session_read(a.s, a.w, wa, sizeof wa));
    OK(hx_session_read(b.s, b.w, wb, sizeof wb));
    CHECK(!memcmp(wa, wb, sizeof wa), "the skipped step changed params");
    for (int t = 3; t <= 4; t++) {
        grads(t, x);
        OK(step(&a, x));
        OK(step(&b, x));
    }
    OK(hx_session_train_stats(a.s, &st));
    CHECK(!st.last_skipped && st.step == 3 && st.loss_scale == 1024.0,
          "after 2 good steps the scale grows back: step %lld scale %g", (long long)st.step,
          st.loss_scale);
    OK(hx_session_read(a.s, a.w, wa, sizeof wa));
    OK(hx_session_read(b.s, b.w, wb, sizeof wb));
    CHECK(!memcmp(wa, wb, sizeof wa), "scaled and unscaled runs differ");
    drop(&a);
    drop(&b);
}

static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x20, f);
    fclose(f);
}

static void test_checkpoint(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/hx_ckpt_%d.bin", (int)getpid());
    hx_optimizer_config c = hx_optimizer_config_default(HX_OPTIMIZER_ADAMW);
    hx_loss_scale_config ls = {true, 256.0, 3, 2.0, 0.5};
    model a = make(&c, ls);
    if (!a.s) return;
    float x[N], wa[N], wb[N];
    for (int t = 1; t <= 3; t++) {
        grads(t, x);
        OK(step(&a, x));
    }
    OK(hx_session_save(a.s, path));
    for (int t = 4; t <= 6; t++) {
        grads(t, x);
        OK(step(&a, x));
    }
    OK(hx_session_read(a.s, a.w, wa, sizeof wa));

    model b = make(&c, ls); /* fresh session: different state until loaded */
    OK(hx_session_load(b.s, path));
    CHECK(hx_session_step(b.s) == 3, "resumed at step %lld", (long long)hx_session_step(b.s));
    for (int t = 4; t <= 6; t++) {
        grads(t, x);
        OK(step(&b, x));
    }
    OK(hx_session_read(b.s, b.w, wb, sizeof wb));
    CHECK(!memcmp(wa, wb, sizeof wa), "resumed run differs from the uninterrupted one");

    /* Corrupt and truncated files are refused and change nothing. */
    float before[N], after[N];
    OK(hx_session_read(b.s, b.w, before, sizeof before));
    flip_byte(path, 100);
    hx_status st = hx_session_load(b.s, path);
    CHECK(st == HX_ERR_CORRUPT, "corrupt checkpoint gave %s", hx_status_name(st));
    CHECK(strstr(hx_last_error(), path) != NULL, "message names the file: %s", hx_last_error());
    OK(hx_session_save(a.s, path));
    CHECK(truncate(path, 60) == 0, "truncate");
    st = hx_session_load(b.s, path);
    CHECK(st == HX_ERR_CORRUPT, "truncated checkpoint gave %s", hx_status_name(st));
    OK(hx_session_read(b.s, b.w, after, sizeof after));
    CHECK(!memcmp(before, after, sizeof before), "a refused load changed params");
    CHECK(hx_session_step(b.s) == 6, "a refused load changed the step");

    /* A checkpoint of another graph is refused. */
    hx_optimizer_config sgd = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    model other = make(&sgd, hx_session_config_default().loss_scale);
    OK(hx_session_save(other.s, path));
    st = hx_session_load(b.s, path);
    CHECK(st == HX_ERR_CORRUPT, "another graph's checkpoint gave %s", hx_status_name(st));
    remove(path);
    st = hx_session_load(b.s, path);
    CHECK(st == HX_ERR_IO, "missing checkpoint gave %s", hx_status_name(st));
    st = hx_session_save(b.s, "/nonexistent-dir/x.ckpt");
    CHECK(st == HX_ERR_IO, "unwritable path gave %s", hx_status_name(st));
    drop(&a);
    drop(&b);
    drop(&other);
}

/* Header values a checksum-valid file may still hold are validated as
 * hx_session_create validates its config: an impossible step, loss scale
 * (0, negative, NaN, Inf) or count is refused and nothing changes. The
 * file's total checksum is recomputed after each edit. */
static void rewrite_header(const char *from, const char *to, long at, const void *v, size_t n)
{
    FILE *f = fopen(from, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    unsigned char *b = malloc((size_t)size);
    fseek(f, 0, SEEK_SET);
    bool read = b && fread(b, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    if (read && (f = fopen(to, "wb"))) {
        memcpy(b + at, v, n);
        uint64_t total = XXH3_64bits(b, (size_t)size - 8);
        memcpy(b + size - 8, &total, 8);
        fwrite(b, 1, (size_t)size, f);
        fclose(f);
    }
    free(b);
}

static void test_checkpoint_header_values(void)
{
    char path[64], edited[64];
    snprintf(path, sizeof path, "/tmp/hx_ckpt_hdr_%d.bin", (int)getpid());
    snprintf(edited, sizeof edited, "/tmp/hx_ckpt_hdr_%d.edit", (int)getpid());
    hx_optimizer_config c = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    hx_loss_scale_config ls = {true, 64.0, 4, 2.0, 0.5};
    model a = make(&c, ls), b = make(&c, ls);
    if (!a.s || !b.s) return;
    float x[N], wb[N], wb2[N];
    for (int t = 1; t <= 2; t++) {
        grads(t, x);
        OK(step(&a, x));
    }
    OK(hx_session_save(a.s, path));
    OK(hx_session_read(b.s, b.w, wb, sizeof wb));
    /* "HXCKPT01", then u64 step, skipped, good, f64 scale */
    enum { STEP = 8, SKIPPED = 16, GOOD = 24, SCALE = 32 };
    const uint64_t steps[] = {((uint64_t)1 << 63) + 5, UINT64_MAX};
    const double scales[] = {0.0, -1.0, NAN, INFINITY, -INFINITY};
    struct { long at; uint64_t v; const char *what; } ints[] = {
        {STEP, steps[0], "step"}, {STEP, steps[1], "step"}, {SKIPPED, steps[0], "skipped"},
        {GOOD, (uint64_t)1 << 40, "good"}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints + sizeof scales / sizeof *scales; i++) {
        char what[64];
        if (i < sizeof ints / sizeof *ints) {
            rewrite_header(path, edited, ints[i].at, &ints[i].v, 8);
            snprintf(what, sizeof what, "%s %llu", ints[i].what, (unsigned long long)ints[i].v);
        } else {
            double v = scales[i - sizeof ints / sizeof *ints];
            rewrite_header(path, edited, SCALE, &v, 8);
            snprintf(what, sizeof what, "loss scale %g", v);
        }
        hx_status st = hx_session_load(b.s, edited);
        CHECK(st == HX_ERR_CORRUPT && strstr(hx_last_error(), edited), "%s: %s: %s", what, hx_status_name(st),
              hx_last_error());
        OK(hx_session_read(b.s, b.w, wb2, sizeof wb2));
        hx_train_stats ts;
        OK(hx_session_train_stats(b.s, &ts));
        CHECK(!memcmp(wb, wb2, sizeof wb) && ts.step == 0 && ts.loss_scale == 64.0, "%s: the session changed", what);
    }
    /* A valid edit loads, and the next step trains with finite parameters. */
    double half = 32.0;
    rewrite_header(path, path, SCALE, &half, 8);
    OK(hx_session_load(b.s, path));
    hx_train_stats ts;
    OK(hx_session_train_stats(b.s, &ts));
    CHECK(ts.step == 2 && ts.loss_scale == 32.0, "loaded: step %lld scale %g", (long long)ts.step, ts.loss_scale);
    grads(3, x);
    OK(step(&b, x));
    OK(hx_session_read(b.s, b.w, wb2, sizeof wb2));
    bool finite = true;
    for (int i = 0; i < N; i++) finite = finite && isfinite(wb2[i]);
    CHECK(finite, "parameters finite after a step");
    remove(path);
    remove(edited);
    drop(&a);
    drop(&b);
}

/* Names: empty names are refused like NULL ones. */
static void test_names(void)
{
    hx_graph *g = hx_graph_create();
    int64_t n = 2;
    CHECK(hx_graph_input(g, "", HX_DTYPE_F32, 1, &n) == NULL, "an empty input name was accepted");
    CHECK(strstr(hx_last_error(), "empty") != NULL, "message says why: %s", hx_last_error());
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, &n);
    CHECK(hx_tensor_set_name(x, "") == HX_ERR_INVALID_ARGUMENT, "renaming to \"\" was accepted");
    CHECK(!strcmp(hx_tensor_name(x), "x"), "a refused rename changed the name");
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"names", test_names},
    {"against_formulas", test_against_formulas},
    {"nonfinite", test_nonfinite},
    {"loss_scaling", test_loss_scaling},
    {"checkpoint", test_checkpoint},
    {"checkpoint_header_values", test_checkpoint_header_values},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "train_state", cases, TEST_COUNT(cases));
}
