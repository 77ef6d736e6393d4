/* Gradients copied to the host in buckets while backward runs (optimizer
 * offload): the device's work is cut after each bucket of gradients that a
 * host update reads, so their copies start before backward ends. Read from
 * the trace of a run on emu whose launches last 2 ms each; the results are
 * bitwise the same whatever the bucket size. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"
#include "trace_read.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 8, C = 64, LAYERS = 6 };

typedef struct model {
    hx_graph *g;
    hx_tensor *x, *w[LAYERS];
} model;

/* x (B,C) -> LAYERS x tanh(h W) on the device -> sum; each W on the host
 * with Adam there. */
static model build(void)
{
    model m = {.g = hx_graph_create()};
    int64_t xs[2] = {B, C}, ws[2] = {C, C};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *h = m.x;
    OK(hx_graph_push_target(m.g, HX_TARGET_DEVICE));
    for (int l = 0; l < LAYERS; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        m.w[l] = hx_graph_param(m.g, name, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
        hx_tensor_set_target(m.w[l], HX_TARGET_CPU);
        h = hx_tanh(m.g, hx_matmul(m.g, h, m.w[l], false, false));
    }
    hx_tensor *loss = hx_reduce_sum(m.g, h, 0, NULL, false);
    hx_graph_pop_target(m.g);
    OK(hx_graph_backward(m.g, loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    OK(hx_graph_apply_optimizer(m.g, NULL, &opt));
    return m;
}

typedef struct timing {
    double backward_end;   /* the last device kernel (before the scan) ends, us */
    double first_grad_copy; /* the first copy of a W gradient to the host starts */
    int grad_copies;
} timing;

static timing step(size_t bucket, float *w_after)
{
    model m = build();
    char path[] = "/tmp/hx_buckets_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = 2;
    cfg.accelerator = HX_ACCELERATOR_EMU;
    cfg.emu_cost.launch_latency_s = 2e-3;
    cfg.grad_bucket_bytes = bucket;
    cfg.trace_path = path;
    hx_session *s;
    OK(hx_session_create(m.g, &cfg, &s));
    float x[B * C];
    test_rng r = test_rng_make(3);
    test_fill_uniform(&r, x, B * C, -1, 1);
    hx_feed f = {NULL, m.x, x, sizeof x};
    OK(hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN));
    for (int l = 0; l < LAYERS; l++)
        OK(hx_session_read(s, m.w[l], w_after + l * C * C, sizeof(float) * C * C));
    hx_session_free(s);
    hx_graph_free(m.g);

    tr_trace t;
    timing tm = {-1, 1e300, 0};
    CHECK(tr_read(path, &t) == 0, "cannot read the trace %s", path);
    for (int i = 0; i < t.n; i++) {
        const tr_event *e = &t.ev[i];
        if (strncmp(t.lane[e->tid], "emu", 3)) continue;
        if (!strcmp(e->name, "copy d2h") && e->bytes == (long long)sizeof(float) * C * C) {
            tm.grad_copies++;
            if (e->ts < tm.first_grad_copy) tm.first_grad_copy = e->ts;
        } else if (strncmp(e->name, "copy", 4) && strcmp(e->name, "gradient_scan")) {
            if (e->ts + e->dur > tm.backward_end) tm.backward_end = e->ts + e->dur;
        }
    }
    tr_free(&t);
    remove(path);
    return tm;
}

/* A bucket per gradient against one for all: when the copies leave, and the
 * same parameters either way. */
static void test_bucket_size(void)
{
    static float w_one[LAYERS * C * C], w_all[LAYERS * C * C];
    /* a bucket per gradient: the first copies leave while backward runs */
    timing one = step(sizeof(float) * C * C, w_one);
    /* one bucket for all: they leave after backward */
    timing all = step((size_t)1 << 30, w_all);
    printf("buckets of 1 gradient: first copy %.1f ms before backward ends; one bucket: "
           "%.1f ms after\n", (one.backward_end - one.first_grad_copy) * 1e-3,
           (all.first_grad_copy - all.backward_end) * 1e-3);
    CHECK(one.grad_copies == LAYERS && all.grad_copies == LAYERS, "gradient copies: %d and %d, "
          "want %d", one.grad_copies, all.grad_copies, LAYERS);
    /* at least 4 of the 6 layers' backward (2 launches of 2 ms each) remain */
    CHECK(one.first_grad_copy < one.backward_end - 8e3,
          "the first gradient copy starts %.1f ms before backward ends (want >= 8)",
          (one.backward_end - one.first_grad_copy) * 1e-3);
    CHECK(all.first_grad_copy >= all.backward_end, "with one bucket a copy started %.1f ms "
          "before backward ended", (all.backward_end - all.first_grad_copy) * 1e-3);
    CHECK(!memcmp(w_one, w_all, sizeof w_one), "the bucket size changed the updated params");
}

static const test_case cases[] = {{"bucket_size", test_bucket_size}};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "grad_buckets", cases, TEST_COUNT(cases));
}
