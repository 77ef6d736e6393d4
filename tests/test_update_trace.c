/* Every optimizer launch goes through a backend's launch and into the
 * trace, whichever way a run updates: synchronously on the host,
 * synchronously on the device (emu), delayed behind the next run
 * (delayed_param_update), with the parameters streamed from the host
 * (offload_param=cpu) or on the disk tier (offload_param=disk). In each,
 * a few training steps with trace_path set give every update node once per
 * step in the trace, on the lane of the thread or stream that ran it, and
 * the backends' launch counts grow by exactly the kernels the trace shows. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"
#include "tmpdir.h"
#include "trace_read.h"
#include "session/session.h"
#include "scheduler/scheduler.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 512, K = 3, STEPS = 3 };

typedef enum mode { HOST, DEVICE, DELAYED, STREAMED, DISK, N_MODES } mode;
static const char *const mode_name[N_MODES] = {"host", "device", "delayed", "offload_param=cpu",
                                               "offload_param=disk"};
/* The lane each mode's updates run on (a prefix of its name). */
static const char *const update_lane[N_MODES] = {"host (calling thread)", "emu stream",
                                                 "host (delayed update)", "host",
                                                 "host (calling thread)"};
static char dir[64];

/* loss = sum_k sum(y_k * y_k * x), y_k = f32(bf16(w_k)) on the device,
 * Adam on every w_k, which lives at `where`: the device reads each w_k
 * only through its bf16 half copy, so the updates may run delayed. */
static hx_graph *build(hx_target where, hx_tensor **x)
{
    hx_graph *g = hx_graph_create();
    int64_t n = N;
    *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, &n);
    hx_tensor *loss = NULL;
    for (int k = 0; k < K; k++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", k);
        hx_tensor *w = hx_graph_param(g, name, HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
        OK(hx_tensor_set_target(w, where));
        OK(hx_graph_push_target(g, HX_TARGET_DEVICE));
        hx_tensor *y = hx_cast(g, hx_cast(g, w, HX_DTYPE_BF16), HX_DTYPE_F32);
        hx_tensor *l = hx_reduce_sum(g, hx_mul(g, hx_mul(g, y, y), *x), 0, NULL, false);
        loss = loss ? hx_add(g, loss, l) : l;
        hx_graph_pop_target(g);
    }
    OK(hx_graph_backward(g, loss));
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    opt.lr = 1e-3;
    OK(hx_graph_apply_optimizer(g, NULL, &opt));
    return g;
}

static hx_session_config config_for(mode m, const char *trace)
{
    hx_session_config c = hx_session_config_default();
    c.n_threads = 1; /* one host lane: no two host launches at once, which the cpu backend's
                        count may lose one of */
    c.accelerator = m == HOST ? HX_ACCELERATOR_NONE : HX_ACCELERATOR_EMU;
    c.trace_path = trace;
    c.delayed_param_update = m == DELAYED;
    if (m == STREAMED) c.offload.offload_param = HX_OFFLOAD_CPU;
    if (m == DISK) {
        c.offload.offload_param = HX_OFFLOAD_DISK;
        snprintf(c.offload.offload_path, sizeof c.offload.offload_path, "%s", dir);
        c.offload.chunk_size = 4 << 10; /* each update's Adam state a chunk of its own */
    }
    return c;
}

static uint64_t launches(const hx_session *s)
{
    uint64_t n = 0;
    for (int d = 0; d < HX_NDEV; d++) {
        if (!s->e.be[d]) continue;
        hx_backend_stats st;
        s->e.be[d]->stats(s->e.be[d], &st);
        n += st.launches;
    }
    return n;
}

/* A kernel's event: anything but a copy or the disk tier's I/O. */
static bool is_kernel(const tr_event *e)
{
    return strncmp(e->name, "copy ", 5) && strncmp(e->name, "disk ", 5);
}

static void check_mode(mode m)
{
    hx_tensor *x;
    hx_graph *g = build(m == DELAYED ? HX_TARGET_CPU : HX_TARGET_DEVICE, &x);
    char path[] = "/tmp/hx_update_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    hx_session_config c = config_for(m, path);
    hx_session *s = NULL;
    OK(hx_session_create(g, &c, &s));
    if (!s) return;
    uint64_t before = launches(s);
    float xv[N], w[N];
    test_rng r = test_rng_make(7);
    hx_tensor *w0 = hx_graph_find(g, "w0");
    for (int t = 0; t < STEPS; t++) {
        test_fill_uniform(&r, xv, N, -1, 1);
        hx_feed f = {NULL, x, xv, sizeof xv};
        OK(hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN));
        /* lands a delayed update: nothing launches on the host while it runs */
        OK(hx_session_read(s, w0, w, sizeof w));
    }
    uint64_t counted = launches(s) - before;
    hx_session_free(s);

    tr_trace tr;
    CHECK(tr_read(path, &tr) == 0, "%s: cannot read the trace %s", mode_name[m], path);
    int kernels = 0;
    for (int i = 0; i < tr.n; i++) kernels += is_kernel(&tr.ev[i]);
    CHECK(counted == (uint64_t)kernels, "%s: the backends counted %llu launches, the trace shows "
          "%d kernels", mode_name[m], (unsigned long long)counted, kernels);
    int updates = 0;
    for (int i = 0; i < hx_graph_tensor_count(g); i++) {
        const hx_tensor *u = g->tensors[i];
        if (hx_tensor_kind_of(u) != HX_TENSOR_UPDATE) continue;
        updates++;
        int seen = 0, on_lane = 0;
        for (int j = 0; j < tr.n; j++) {
            const tr_event *e = &tr.ev[j];
            if (strcmp(e->tensor, hx_tensor_name(u)) || strcmp(e->name, hx_tensor_op_name(u)))
                continue;
            seen++;
            on_lane += !strncmp(tr.lane[e->tid], update_lane[m], strlen(update_lane[m]));
        }
        CHECK(seen == STEPS && on_lane == STEPS, "%s: update '%s' is in the trace %d times, %d "
              "on lane '%s...', in %d steps", mode_name[m], hx_tensor_name(u), seen, on_lane,
              update_lane[m], STEPS);
    }
    CHECK(updates == K, "%s: %d update nodes", mode_name[m], updates);
    CHECK(tr.dropped == 0, "%s: dropped %lld events", mode_name[m], tr.dropped);
    tr_free(&tr);
    remove(path);
    hx_graph_free(g);
}

static void mode_host(void) { check_mode(HOST); }
static void mode_device(void) { check_mode(DEVICE); }
static void mode_delayed(void) { check_mode(DELAYED); }
static void mode_streamed(void) { check_mode(STREAMED); }
static void mode_disk(void) { check_mode(DISK); }

static int setup(void) { return test_make_tmpdir(dir, sizeof dir, "hx-update-trace") ? 0 : 1; }
static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"host", mode_host},
    {"device", mode_device},
    {"delayed", mode_delayed},
    {"offload_param_cpu", mode_streamed},
    {"offload_param_disk", mode_disk},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "update_trace", cases, TEST_COUNT(cases), &o);
}
