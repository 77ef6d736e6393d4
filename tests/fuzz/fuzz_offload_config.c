/* libFuzzer target: hx_offload_config_parse on any text; a spec it takes
 * then configures a session on a small graph under a 64 KiB emu cap, which
 * checks the combination and plans it (auto_offload's search included),
 * and runs one step. The disk tier's folder is the target's own, whatever
 * the spec says (offload_path is parsed, not used). Seeds: the specs of
 * the docs and tests. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static hx_graph *g;
static hx_tensor *x, *loss;
static char disk_dir[HX_OFFLOAD_PATH_MAX];

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(disk_dir, sizeof disk_dir, "%s/hx_fuzz_offload_%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    mkdir(disk_dir, 0700);
    g = hx_graph_create();
    int64_t xs[2] = {8, 16}, ws[2] = {16, 16};
    x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *h = x;
    for (int i = 0; i < 3; i++) {
        char name[8] = {'w', (char)('0' + i), 0};
        hx_tensor *w = hx_graph_param(g, name, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
        h = hx_relu(g, hx_matmul(g, h, w, false, false));
        hx_tensor_set_target(h, HX_TARGET_DEVICE);
    }
    loss = hx_reduce_sum(g, h, 0, NULL, false);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAMW);
    if (!loss || hx_graph_backward(g, loss) || hx_graph_apply_optimizer(g, NULL, &oc)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g) setup();
    char *spec = malloc(size + 1);
    if (!spec) return 0;
    memcpy(spec, data, size);
    spec[size] = 0;
    hx_offload_config oc = hx_offload_config_default();
    hx_status st = hx_offload_config_parse(spec, &oc);
    free(spec);
    if (st) return 0;
    memcpy(oc.offload_path, disk_dir, sizeof disk_dir);
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 1;
    c.max_device_memory = 64 << 10;
    c.offload = oc;
    hx_session *s = NULL;
    if (hx_session_create(g, &c, &s)) return 0;
    float xv[8 * 16];
    for (int i = 0; i < 8 * 16; i++) xv[i] = (float)(i % 7) - 3.0f;
    hx_feed f = {NULL, x, xv, sizeof xv};
    hx_session_run(s, &f, 1, NULL, 0, HX_RUN_TRAIN);
    hx_session_free(s);
    return 0;
}
