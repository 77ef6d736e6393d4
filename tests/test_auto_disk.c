/* auto_offload with a host budget (offload_cpu_size): a 16-layer MLP whose
 * parameters are 3.4x the emu device cap, so the policy offloads the
 * parameters. With a budget that holds every parameter and Adam state it
 * keeps them in host memory (CPU, as without a budget); one byte less and
 * it keeps them on disk (DISK: a file under offload_path, the same chunks
 * and depth), training bitwise like an uncapped run without offload; under
 * the disk tier's minimum (the resident region and three chunk slots)
 * creation fails with HX_ERR_OUT_OF_MEMORY naming both needs, and so it
 * does over the cpu need with delayed_param_update (no disk tier then). */
#include "hetex.h"
#include "deep_mlp.h"
#include "testutil.h"
#include "tmpdir.h"
#include "session/session.h"
#include "offload/offload_disk.h"
#include "offload/disk_layout.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 2, W = 256, L = 16, STEPS = 3 };
#define CAP ((size_t)1200 << 10)

static float xv[STEPS][B * W], yv[STEPS][B * W];
static char dir[64];

static hx_session_config auto_config(size_t host_budget)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.max_device_memory = CAP;
    c.offload.auto_offload = true;
    snprintf(c.offload.offload_path, sizeof c.offload.offload_path, "%s", dir);
    c.offload.offload_cpu_size = host_budget;
    c.offload.host_mem_block_size = 4 << 20;
    return c;
}

/* STEPS training steps: the losses, then every parameter into params. */
static void train(hx_session *s, const deep_mlp *m, float *loss, char *params)
{
    for (int k = 0; k < STEPS; k++) {
        hx_feed f[2] = {{NULL, m->x, xv[k], sizeof xv[k]}, {NULL, m->y, yv[k], sizeof yv[k]}};
        hx_fetch o = {NULL, m->loss, &loss[k], sizeof *loss};
        hx_status st = hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN);
        CHECK(st == HX_OK, "step %d: %s", k, hx_last_error());
    }
    for (int l = 0; l < L; l++) {
        const hx_tensor *t[2] = {m->w[l], m->b[l]};
        for (int j = 0; j < 2; j++) {
            size_t n = hx_tensor_nbytes(t[j]);
            CHECK(hx_session_read(s, t[j], params, n) == HX_OK, "read '%s': %s",
                  hx_tensor_name(t[j]), hx_last_error());
            params += n;
        }
    }
}

/* Creates an auto_offload session under budget, checks the tier it chose
 * (want) and, when train_it, that STEPS steps match the reference bitwise. */
static void check_tier(const deep_mlp *m, size_t budget, hx_offload_target want, bool train_it,
                       const float *ref_loss, const char *ref_params, size_t *disk_min)
{
    hx_session_config c = auto_config(budget);
    hx_session *s = NULL;
    hx_status st = hx_session_create(m->g, &c, &s);
    CHECK(st == HX_OK, "budget %zu: %s", budget, hx_last_error());
    if (!s) return;
    hx_offload_report r;
    CHECK(hx_session_offload_report(s, &r) == HX_OK, "report: %s", hx_last_error());
    printf("budget %zu B: offload_param=%s chunk_size %zu prefetch_depth %d, predicted device "
           "peak %zu B of %zu B; disk tier host bytes %zu B, files %d\n",
           budget, hx_offload_target_name(r.offload_param), r.chunk_size, r.prefetch_depth,
           r.predicted_peak, r.capacity, hx__disk_host_bytes(&s->e), test_files_in(dir));
    CHECK(r.automatic && r.offload_param == want && r.offload_activations == HX_OFFLOAD_NONE,
          "budget %zu: offload_param %d, want %d", budget, r.offload_param, want);
    CHECK(test_files_in(dir) == (want == HX_OFFLOAD_DISK),
          "budget %zu: %d files under the offload path", budget, test_files_in(dir));
    if (want == HX_OFFLOAD_DISK) {
        const hx_offload_disk *d = hx__disk_of(&s->e);
        *disk_min = d->res_bytes + (size_t)HX_DISK_SLOTS * d->slot_bytes;
        CHECK(d->n_seg - d->n_res >= HX_DISK_SLOTS && hx__disk_host_bytes(&s->e) <= budget,
              "%d chunks, host bytes %zu for a budget of %zu", d->n_seg - d->n_res,
              hx__disk_host_bytes(&s->e), budget);
    }
    if (train_it) {
        float loss[STEPS];
        char *params = malloc(m->param_bytes);
        train(s, m, loss, params);
        CHECK(!memcmp(loss, ref_loss, sizeof loss), "budget %zu: losses %.9g %.9g vs %.9g %.9g",
              budget, loss[0], loss[STEPS - 1], ref_loss[0], ref_loss[STEPS - 1]);
        CHECK(!memcmp(params, ref_params, m->param_bytes), "budget %zu: parameters differ from "
              "the uncapped run", budget);
        hx_device_pools_stats ps;
        CHECK(hx_session_pool_stats(s, &ps) == HX_OK && ps.total.peak_reserved <= CAP,
              "device peak %zu over the cap %zu", ps.total.peak_reserved, CAP);
        free(params);
    }
    hx_session_free(s);
    CHECK(test_files_in(dir) == 0, "%d files left after the session", test_files_in(dir));
}

static bool names(const char *msg, size_t v)
{
    char num[32];
    snprintf(num, sizeof num, "%zu bytes", v);
    return strstr(msg, num) != NULL;
}

static void test_auto_disk(void)
{
    deep_mlp m;
    CHECK(deep_mlp_build(B, W, L, &m) == HX_OK, "build: %s", hx_last_error());
    CHECK(m.param_bytes >= 3 * CAP, "parameters %zu B, cap %zu B", m.param_bytes, CAP);
    size_t whole = 3 * m.param_bytes; /* parameters and Adam's two moments, f32 */

    hx_session_config rc = hx_session_config_default();
    rc.accelerator = HX_ACCELERATOR_EMU;
    rc.n_threads = 2;
    hx_session *ref = NULL;
    CHECK(hx_session_create(m.g, &rc, &ref) == HX_OK, "ref: %s", hx_last_error());
    float ref_loss[STEPS];
    char *ref_params = malloc(m.param_bytes);
    if (ref) train(ref, &m, ref_loss, ref_params);
    CHECK(ref_loss[STEPS - 1] < ref_loss[0], "loss %g -> %g", ref_loss[0], ref_loss[STEPS - 1]);

    size_t disk_min = 0;
    check_tier(&m, 0, HX_OFFLOAD_CPU, false, NULL, NULL, NULL);     /* no budget: as before */
    check_tier(&m, whole, HX_OFFLOAD_CPU, true, ref_loss, ref_params, NULL);
    check_tier(&m, whole - 1, HX_OFFLOAD_DISK, true, ref_loss, ref_params, &disk_min);
    /* the resident region: every parameter, each at a 64-byte offset, in 1 MiB blocks */
    size_t res = 0;
    for (int l = 0; l < L; l++)
        res = ((res + hx_tensor_nbytes(m.w[l]) + 63) / 64 * 64 + hx_tensor_nbytes(m.b[l]) + 63) /
              64 * 64;
    res = (res + HX_DISK_BLOCK - 1) / HX_DISK_BLOCK * HX_DISK_BLOCK;
    printf("parameters and state %zu B; disk tier minimum %zu B (resident region %zu B)\n",
           whole, disk_min, res);
    CHECK(disk_min > res && disk_min < whole, "disk minimum %zu, resident %zu, whole %zu",
          disk_min, res, whole);
    if (disk_min) check_tier(&m, disk_min, HX_OFFLOAD_DISK, false, NULL, NULL, &disk_min);

    hx_session_config c = auto_config(disk_min - 1);
    hx_session *s = NULL;
    hx_status st = hx_session_create(m.g, &c, &s);
    const char *msg = hx_last_error();
    printf("budget %zu B: %s: %s\n", disk_min - 1, hx_status_name(st), msg);
    CHECK(st == HX_ERR_OUT_OF_MEMORY && !s, "budget %zu: %s", disk_min - 1, hx_status_name(st));
    CHECK(strstr(msg, "offload_cpu_size") && names(msg, disk_min - 1) && names(msg, disk_min) &&
              names(msg, whole) && names(msg, res),
          "the message names not the budget %zu, the disk minimum %zu, the whole %zu and the "
          "resident region %zu: %s", disk_min - 1, disk_min, whole, res, msg);
    CHECK(test_files_in(dir) == 0, "a failed creation left %d files", test_files_in(dir));
    /* the disk tier does not run with delayed_param_update: over the cpu need it fails */
    c = auto_config(whole - 1);
    c.delayed_param_update = true;
    st = hx_session_create(m.g, &c, &s);
    msg = hx_last_error();
    CHECK(st == HX_ERR_OUT_OF_MEMORY && strstr(msg, "delayed_param_update") && names(msg, whole),
          "delayed_param_update, budget %zu: %s: %s", whole - 1, hx_status_name(st), msg);
    c.offload.offload_cpu_size = whole;
    st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_OK, "delayed_param_update, budget %zu: %s", whole, hx_last_error());
    hx_session_free(s);

    free(ref_params);
    hx_session_free(ref);
    deep_mlp_free(&m);
}

static int setup(void)
{
    test_rng r = test_rng_make(11);
    for (int k = 0; k < STEPS; k++) {
        test_fill_uniform(&r, xv[k], B * W, -1, 1);
        test_fill_uniform(&r, yv[k], B * W, -0.5, 0.5);
    }
    return test_make_tmpdir(dir, sizeof dir, "hx-auto-disk") ? 0 : 1;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {{"auto_disk", test_auto_disk}};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "auto_disk", cases, TEST_COUNT(cases), &o);
}
