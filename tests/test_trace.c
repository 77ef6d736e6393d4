/* Chrome traces: every kernel (op and tensor name) and copy (bytes) of a
 * run is in the file, on the lane that ran it (host threads, emu streams),
 * lanes are named, events on one lane do not overlap; the file is written
 * by hx_session_trace_flush and again (with everything) at hx_session_free;
 * HX_TRACE works without the config field; an unwritable path is an error;
 * a session without a trace writes nothing. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"
#include "trace_read.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hx_tensor *on(hx_tensor *t, hx_target tg)
{
    hx_tensor_set_target(t, tg);
    return t;
}

typedef struct model {
    hx_graph *g;
    hx_tensor *x, *y;
} model;

/* x -> exp (cpu) -> tanh, relu (device) -> add (cpu), with a "quoted" name. */
static model build(void)
{
    model m = {hx_graph_create(), NULL, NULL};
    int64_t sh[2] = {16, 32};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 2, sh);
    hx_tensor *a = on(hx_exp(m.g, m.x), HX_TARGET_CPU);
    hx_tensor *b = on(hx_tanh(m.g, a), HX_TARGET_DEVICE);
    hx_tensor_set_name(b, "tanh \"quoted\"");
    hx_tensor *c = on(hx_relu(m.g, b), HX_TARGET_DEVICE);
    m.y = on(hx_add(m.g, c, a), HX_TARGET_CPU);
    return m;
}

static void run(hx_session *s, const model *m, int times)
{
    float x[512], y[512];
    for (int i = 0; i < 512; i++) x[i] = (float)(i % 9) / 9;
    hx_feed f = {NULL, m->x, x, sizeof x};
    hx_fetch o = {NULL, m->y, y, sizeof y};
    for (int i = 0; i < times; i++) OK(hx_session_run(s, &f, 1, &o, 1, 0));
}

static int count(const tr_trace *t, const char *name, const char *tensor, const char *lane)
{
    int n = 0;
    for (int i = 0; i < t->n; i++)
        n += !strcmp(t->ev[i].name, name) && (!tensor || !strcmp(t->ev[i].tensor, tensor)) &&
             !strncmp(t->lane[t->ev[i].tid], lane, strlen(lane));
    return n;
}

static void check_trace(const char *path, int runs)
{
    tr_trace t;
    CHECK(tr_read(path, &t) == 0, "cannot read the trace %s", path);
    CHECK(!strcmp(t.lane[1], "host (calling thread)"), "lane 1 is '%s'", t.lane[1]);
    CHECK(!strcmp(t.lane[2], "emu stream 1"), "lane 2 is '%s'", t.lane[2]);
    CHECK(count(&t, "exp", "exp_1", "host") == runs, "exp on the host: %d", count(&t, "exp", "exp_1", "host"));
    CHECK(count(&t, "add", NULL, "host") == runs, "add on the host");
    CHECK(count(&t, "tanh", "tanh \"quoted\"", "emu") == runs,
          "tanh on an emu stream, its name escaped: %d", count(&t, "tanh", "tanh \"quoted\"", "emu"));
    CHECK(count(&t, "relu", NULL, "emu") == runs, "relu on an emu stream");
    int h2d = 0, d2h = 0;
    for (int i = 0; i < t.n; i++) {
        const tr_event *e = &t.ev[i];
        CHECK(e->ts >= 0 && e->dur >= 0, "event %d: ts %g dur %g", i, e->ts, e->dur);
        bool copy = !strcmp(e->name, "copy h2d") || !strcmp(e->name, "copy d2h");
        h2d += !strcmp(e->name, "copy h2d");
        d2h += !strcmp(e->name, "copy d2h");
        if (copy) CHECK(e->bytes == 2048, "%s bytes %lld", e->name, e->bytes);
        for (int j = i + 1; j < t.n; j++) /* a lane runs one thing at a time */
            if (t.ev[j].tid == e->tid)
                CHECK(t.ev[j].ts >= e->ts + e->dur - 1e-3 || e->ts >= t.ev[j].ts + t.ev[j].dur - 1e-3,
                      "events %d and %d overlap on lane %s", i, j, t.lane[e->tid]);
    }
    /* per run: a to the device, c back to the host, and the fetch is on the host */
    CHECK(h2d == runs && d2h == runs, "%d h2d and %d d2h copies for %d runs", h2d, d2h, runs);
    CHECK(t.dropped == 0, "dropped %lld", t.dropped);
    tr_free(&t);
}

static void test_config_path(void)
{
    model m = build();
    char path[] = "/tmp/hx_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.trace_path = path;
    hx_session *s = NULL;
    OK(hx_session_create(m.g, &c, &s));
    run(s, &m, 3);
    OK(hx_session_trace_flush(s));
    check_trace(path, 3);
    run(s, &m, 2);
    hx_session_free(s);
    check_trace(path, 5);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "the temporary file is renamed away");
    remove(path);

    /* HX_TRACE; the config field wins over it */
    setenv("HX_TRACE", path, 1);
    c.trace_path = NULL;
    OK(hx_session_create(m.g, &c, &s));
    run(s, &m, 1);
    hx_session_free(s);
    check_trace(path, 1);
    remove(path);
    char other[] = "/tmp/hx_trace_other_XXXXXX";
    fd = mkstemp(other);
    close(fd);
    c.trace_path = other;
    OK(hx_session_create(m.g, &c, &s));
    run(s, &m, 2);
    hx_session_free(s);
    CHECK(access(path, F_OK) != 0, "HX_TRACE is not written when trace_path is set");
    check_trace(other, 2);
    remove(other);
    unsetenv("HX_TRACE");

    /* an unwritable path: flush fails and says where; no trace: flush is a no-op */
    c.trace_path = "/nonexistent-dir/trace.json";
    OK(hx_session_create(m.g, &c, &s));
    run(s, &m, 1);
    hx_status st = hx_session_trace_flush(s);
    CHECK(st == HX_ERR_IO && strstr(hx_last_error(), "/nonexistent-dir/trace.json.tmp"), "%s: %s",
          hx_status_name(st), hx_last_error());
    c.trace_path = NULL;
    hx_session *quiet = NULL;
    OK(hx_session_create(m.g, &c, &quiet));
    run(quiet, &m, 1);
    OK(hx_session_trace_flush(quiet));
    CHECK(hx_session_trace_flush(NULL) == HX_ERR_INVALID_ARGUMENT, "NULL session");
    hx_session_free(quiet);
    hx_session_free(s); /* reports the failed write on stderr */
    hx_graph_free(m.g);
}

/* A long run stays within the per-lane cap: 10,000 tiny adds on the host. */
static void test_many_events(void)
{
    hx_graph *g = hx_graph_create();
    int64_t n = 16;
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, &n), *y = x;
    for (int i = 0; i < 10000; i++) y = on(hx_add(g, y, x), HX_TARGET_CPU);
    char path[] = "/tmp/hx_trace_many_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_NONE;
    c.n_threads = 1;
    c.trace_path = path;
    hx_session *s = NULL;
    OK(hx_session_create(g, &c, &s));
    float xv[16] = {1}, yv[16];
    hx_feed f = {NULL, x, xv, sizeof xv};
    hx_fetch o = {NULL, y, yv, sizeof yv};
    OK(hx_session_run(s, &f, 1, &o, 1, 0));
    hx_session_free(s);
    tr_trace t;
    CHECK(tr_read(path, &t) == 0 && t.n == 10000 && t.dropped == 0, "%d events", t.n);
    tr_free(&t);
    remove(path);
    hx_graph_free(g);
}

static const test_case cases[] = {
    {"config_path", test_config_path},
    {"many_events", test_many_events},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "trace", cases, TEST_COUNT(cases));
}
