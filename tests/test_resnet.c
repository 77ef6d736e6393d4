/* The ResNet example (examples/resnet): its IDX reader on small crafted
 * files (every header number checked), batches, a few training steps on
 * the first real images, and the seed's memory scenario on emu: under a
 * device cap a batch fails with a device-OOM report, and trains with
 * parameter offload (offload_param=cpu, and auto_offload) bitwise as the
 * uncapped run. */
#include "examples/resnet/resnet.h"
#include "hetex_checks.h"
#include "testutil.h"
#include "tmpdir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256], data_dir[512];

/* Writes an IDX file: magic, dims, then `data_bytes` bytes of value i % 251 + k. */
static void write_idx(const char *name, uint32_t magic, int ndim, const uint32_t *dims,
                      size_t data_bytes, int label_max)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint32_t words[4] = {magic, dims[0], ndim > 1 ? dims[1] : 0, ndim > 2 ? dims[2] : 0};
    for (int w = 0; w < 1 + ndim; w++) {
        uint8_t be[4] = {words[w] >> 24, words[w] >> 16 & 255, words[w] >> 8 & 255, words[w] & 255};
        fwrite(be, 1, 4, f);
    }
    for (size_t i = 0; i < data_bytes; i++) fputc(label_max ? (int)(i % (size_t)label_max) : (int)(i % 251), f);
    fclose(f);
}

static int load(const char *images, const char *labels, int64_t limit, resnet_set *s, char *msg,
                size_t len)
{
    char ip[400], lp[400];
    snprintf(ip, sizeof ip, "%s/%s", dir, images);
    snprintf(lp, sizeof lp, "%s/%s", dir, labels);
    return resnet_set_load(ip, lp, limit, s, msg, len);
}

static void expect_refused(const char *images, const char *labels, const char *says)
{
    resnet_set s;
    char msg[1024] = "";
    int rc = load(images, labels, 0, &s, msg, sizeof msg);
    CHECK(rc == -1 && strstr(msg, says), "%s + %s: want a refusal saying '%s', got rc %d: %s",
          images, labels, says, rc, msg);
    CHECK(s.pixels == NULL && s.labels == NULL && s.n == 0, "a refused load left data behind");
}

static void test_idx_reader(void)
{
    const uint32_t img3[3] = {3, 28, 28}, lab3[1] = {3}, lab2[1] = {2}, img_side[3] = {3, 27, 28};
    const uint32_t img0[3] = {0, 28, 28}, huge[3] = {0xffffffffu, 28, 28};
    write_idx("img", 0x803, 3, img3, 3 * RESNET_PIXELS, 0);
    write_idx("lab", 0x801, 1, lab3, 3, 10);
    write_idx("lab2", 0x801, 1, lab2, 2, 10);
    write_idx("img_magic", 0x802, 3, img3, 3 * RESNET_PIXELS, 0);
    write_idx("img_side", 0x803, 3, img_side, 3 * 27 * 28, 0);
    write_idx("img_short", 0x803, 3, img3, 2 * RESNET_PIXELS + 5, 0);
    write_idx("img_long", 0x803, 3, img3, 3 * RESNET_PIXELS + 1, 0);
    write_idx("img_zero", 0x803, 3, img0, 0, 0);
    write_idx("img_huge", 0x803, 3, huge, RESNET_PIXELS, 0);
    write_idx("img_header", 0x803, 1, img3, 0, 0); /* 8 bytes: shorter than a 3-D header */

    resnet_set s;
    char msg[1024] = "";
    CHECK(load("img", "lab", 0, &s, msg, sizeof msg) == 0 && s.n == 3, "a good file: %s", msg);
    if (s.pixels) {
        CHECK(s.pixels[0] == 0 && s.pixels[RESNET_PIXELS + 1] == (RESNET_PIXELS + 1) % 251 &&
              s.labels[2] == 2, "pixel or label values differ from the file's");
        resnet_set_free(&s);
    }
    CHECK(load("img", "lab", 2, &s, msg, sizeof msg) == 0 && s.n == 2, "limit 2: n %lld: %s",
          (long long)s.n, msg);
    resnet_set_free(&s);

    expect_refused("missing", "lab", "cannot open");
    expect_refused("img_magic", "lab", "magic 0x00000802");
    expect_refused("img_side", "lab", "dims");
    expect_refused("img_short", "lab", "the file holds");
    expect_refused("img_long", "lab", "the file holds");
    expect_refused("img_zero", "lab", "dims");
    expect_refused("img_huge", "lab", "the file holds");
    expect_refused("img_header", "lab", "shorter than an IDX header");
    expect_refused("img", "lab2", "3 images");
    write_idx("lab_bad", 0x801, 1, lab3, 3, 10); /* labels 0, 1, 2; then label 1 made 10 */
    {
        char path[400];
        snprintf(path, sizeof path, "%s/lab_bad", dir);
        FILE *f = fopen(path, "r+b");
        if (f) {
            fseek(f, 8 + 1, SEEK_SET);
            fputc(10, f);
            fclose(f);
        }
    }
    expect_refused("img", "lab_bad", "label 10 at position 1");
}

/* Normalisation (Fashion-MNIST's mean and std) and flips. */
static void test_batch(void)
{
    uint8_t pix[2 * RESNET_PIXELS], lab[2] = {3, 7};
    for (int i = 0; i < 2 * RESNET_PIXELS; i++) pix[i] = (uint8_t)(i * 7);
    resnet_set s = {2, pix, lab};
    int64_t order[2] = {1, 0};
    float x[2 * RESNET_PIXELS];
    int32_t y[2];
    resnet_batch(&s, order, 0, 2, 0, x, y);
    CHECK(y[0] == 7 && y[1] == 3, "labels %d %d, want 7 3", y[0], y[1]);
    float want = ((uint8_t)(RESNET_PIXELS * 7) / 255.0f - 0.2860f) / 0.3530f;
    CHECK(fabsf(x[0] - want) < 1e-6f, "pixel 0 of image 1: %g, want %g", x[0], want);
    int flipped = 0;
    for (uint64_t seed = 1; seed <= 16; seed++) {
        resnet_batch(&s, order, 0, 2, seed, x, y);
        float mirrored = ((uint8_t)((RESNET_PIXELS + 27) * 7) / 255.0f - 0.2860f) / 0.3530f;
        flipped += x[0] == mirrored;
    }
    CHECK(flipped > 0 && flipped < 16, "%d of 16 seeds flipped image 1", flipped);
}

static const resnet_config TINY = {.width = 4, .blocks = 1, .batch = 8, .dtype = HX_DTYPE_F32};
static const resnet_optim SGD = {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .warmup = 0};

/* Steps on batches of the first real training images; loss of each step. */
static hx_status train_steps(resnet_run *r, const resnet_set *s, int steps, float *losses)
{
    int B = TINY.batch;
    float x[8 * RESNET_PIXELS];
    int32_t y[8];
    int64_t order[64];
    for (int i = 0; i < 64; i++) order[i] = i;
    for (int k = 0; k < steps; k++) {
        resnet_batch(s, order, (int64_t)(k % 2) * B, B, 0, x, y);
        hx_feed feeds[2] = {{NULL, r->m.images, x, sizeof x}, {NULL, r->m.labels, y, sizeof y}};
        hx_fetch f = {NULL, r->m.loss, &losses[k], sizeof(float)};
        hx_status st = hx_session_run(r->s, feeds, 2, &f, 1, HX_RUN_TRAIN);
        if (st) return st;
    }
    return HX_OK;
}

static bool real_data(resnet_set *s)
{
    char msg[1024], ip[600], lp[600];
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte", data_dir);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte", data_dir);
    if (resnet_set_load(ip, lp, 64, s, msg, sizeof msg) == 0) return true;
    CHECK(false, "Fashion-MNIST: %s", msg);
    return false;
}

/* Two batches in turn: the loss falls. */
static void test_train(void)
{
    resnet_set s;
    if (!real_data(&s)) return;
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_EMU;
    cfg.n_threads = 2;
    resnet_run r;
    hx_status st = resnet_run_create(&TINY, &SGD, &cfg, &r);
    CHECK(st == HX_OK, "resnet_run_create: %s", hx_last_error());
    float l[12];
    if (!st) {
        st = train_steps(&r, &s, 12, l);
        CHECK(st == HX_OK, "training: %s", hx_last_error());
        CHECK(!st && l[10] + l[11] < 0.8 * (l[0] + l[1]), "loss %g %g -> %g %g: not falling",
              l[0], l[1], l[10], l[11]);
        resnet_run_free(&r);
    }
    resnet_set_free(&s);
}

/* The seed's scenario at a small scale: width 32, one block per stage,
 * batch 2, SGD momentum on the device. */
static const resnet_config SEED = {.width = 32, .blocks = 1, .batch = 2, .dtype = HX_DTYPE_F32};
enum { SEED_STEPS = 3 };

static hx_status seed_open(size_t cap, const char *offload, resnet_run *r)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_EMU;
    cfg.n_threads = 2;
    cfg.max_device_memory = cap;
    if (offload && hx_offload_config_parse(offload, &cfg.offload)) return HX_ERR_INVALID_ARGUMENT;
    return resnet_run_create(&SEED, &SGD, &cfg, r);
}

/* SEED_STEPS steps on the first images; every parameter after them, in
 * model order (NULL with the error set when a step fails). */
static float *seed_train(resnet_run *r, const resnet_set *s, float *losses, hx_status *st)
{
    float x[2 * RESNET_PIXELS];
    int32_t y[2];
    int64_t order[64];
    for (int i = 0; i < 64; i++) order[i] = i;
    for (int k = 0; k < SEED_STEPS && !*st; k++) {
        resnet_batch(s, order, 2 * k, 2, 0, x, y);
        hx_feed feeds[2] = {{NULL, r->m.images, x, sizeof x}, {NULL, r->m.labels, y, sizeof y}};
        hx_fetch f = {NULL, r->m.loss, &losses[k], sizeof(float)};
        *st = hx_session_run(r->s, feeds, 2, &f, 1, HX_RUN_TRAIN);
    }
    float *p = *st ? NULL : malloc(sizeof *p * (size_t)r->m.n_params);
    int64_t off = 0;
    for (int i = 0; p && i < r->m.n_weights + r->m.n_others && !*st; i++) {
        hx_tensor *t = i < r->m.n_weights ? r->m.weights[i] : r->m.others[i - r->m.n_weights];
        *st = hx_session_read(r->s, t, p + off, hx_tensor_nbytes(t));
        off += hx_tensor_numel(t);
    }
    if (*st) {
        free(p);
        p = NULL;
    }
    return p;
}

/* Uncapped, the step needs T transient and P persistent device bytes; under
 * a cap of T + P / 2 the same batch runs out of device memory with a report
 * naming what was asked, the capacity, what is used, the persistent and
 * transient parts and the options; with offload_param=cpu, or auto_offload,
 * it trains, bit for bit as the uncapped run. */
static void test_seed_scenario(void)
{
    resnet_set s;
    if (!real_data(&s)) return;
    resnet_run u;
    hx_status st = seed_open(0, NULL, &u);
    CHECK(st == HX_OK, "uncapped: %s", hx_last_error());
    if (st) {
        resnet_set_free(&s);
        return;
    }
    float lu[SEED_STEPS], *pu = seed_train(&u, &s, lu, &st);
    CHECK(pu != NULL, "uncapped training: %s", hx_last_error());
    hx_memory_stats ms;
    OK(hx_session_memory_stats(u.s, &ms));
    int64_t n_params = u.m.n_params;
    resnet_run_free(&u);
    size_t cap = ms.device_transient_planned_bytes + ms.device_persistent_bytes / 2;
    printf("  uncapped device: %zu persistent, %zu transient bytes; cap %zu\n",
           ms.device_persistent_bytes, ms.device_transient_planned_bytes, cap);

    resnet_run c;
    st = seed_open(cap, NULL, &c);
    float lc[SEED_STEPS];
    if (!st) {
        float *pc = seed_train(&c, &s, lc, &st);
        free(pc);
        resnet_run_free(&c);
    }
    const char *report = hx_last_error();
    CHECK(st == HX_ERR_DEVICE_OOM, "under a %zu-byte cap without offload: %s (%s)", cap,
          hx_status_name(st), report);
    static const char *names[] = {"out of memory allocating", "capacity", "in use", "persistent",
                                  "transient", "offload_param=cpu", "max_device_memory"};
    for (size_t k = 0; st == HX_ERR_DEVICE_OOM && k < sizeof names / sizeof names[0]; k++)
        CHECK(strstr(report, names[k]), "the device-OOM report does not name '%s': %s", names[k],
              report);

    static const char *offload[] = {"offload_param=cpu,chunk_size=64K,prefetch_depth=0",
                                    "auto_offload=true"};
    for (int k = 0; k < 2 && pu; k++) {
        st = seed_open(cap, offload[k], &c);
        CHECK(st == HX_OK, "%s under the cap: %s", offload[k], hx_last_error());
        if (st) continue;
        float *pc = seed_train(&c, &s, lc, &st);
        CHECK(pc != NULL, "%s: training under the cap: %s", offload[k], hx_last_error());
        CHECK(pc && !memcmp(pc, pu, sizeof *pc * (size_t)n_params) && !memcmp(lc, lu, sizeof lu),
              "%s: differs from the uncapped run after %d steps (loss %.9g vs %.9g)", offload[k],
              SEED_STEPS, lc[SEED_STEPS - 1], lu[SEED_STEPS - 1]);
        free(pc);
        resnet_run_free(&c);
    }
    free(pu);
    resnet_set_free(&s);
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    snprintf(data_dir, sizeof data_dir, "%s/data/fashion-mnist", src ? src : ".");
    return test_make_tmpdir(dir, sizeof dir, "hx-resnet") ? 0 : 1;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"idx_reader", test_idx_reader},
    {"batch", test_batch},
    {"train", test_train},
    {"seed_scenario", test_seed_scenario},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "resnet", cases, TEST_COUNT(cases), &o);
}
