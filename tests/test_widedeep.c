/* The wide & deep example: its AUC against a pairwise reference (with
 * ties), a short deterministic training run on Adult, checkpoint resume
 * equality, and a corrupt checkpoint refused; Criteo-schema input from
 * files and generated. */
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "examples/widedeep/wd.h"
#include "session/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* P(positive scores above negative) + 0.5 P(tie), over all pairs. */
static double auc_pairs(const float *p, const float *y, int n)
{
    double num = 0, pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (y[i] > 0.5f && y[j] < 0.5f) {
                pairs++;
                num += p[i] > p[j] ? 1 : p[i] == p[j] ? 0.5 : 0;
            }
    return num / pairs;
}

static void test_metrics(void)
{
    test_rng r = test_rng_make(7);
    for (int trial = 0; trial < 50; trial++) {
        int n = 2 + (int)(test_rng_u64(&r) % 300);
        float p[302], y[302];
        int levels = 1 + (int)(test_rng_u64(&r) % 12); /* few levels: many ties */
        for (int i = 0; i < n; i++) {
            p[i] = (float)(test_rng_u64(&r) % (uint64_t)levels) / (float)levels;
            y[i] = (float)(test_rng_u64(&r) % 2);
        }
        y[0] = 1, y[1] = 0; /* both classes */
        wd_metrics m;
        CHECK(wd_metrics_compute(p, y, n, &m) == HX_OK, "metrics");
        double want = auc_pairs(p, y, n);
        CHECK(fabs(m.auc - want) < 1e-12, "trial %d: AUC %.15f, pairwise %.15f", trial, m.auc, want);
        double acc = 0, ll = 0;
        for (int i = 0; i < n; i++) {
            acc += (p[i] > 0.5f) == (y[i] > 0.5f);
            double q = fmin(fmax(p[i], 1e-7), 1 - 1e-7);
            ll -= y[i] > 0.5f ? log(q) : log(1 - q);
        }
        CHECK(fabs(m.accuracy - acc / n) < 1e-12 && fabs(m.log_loss - ll / n) < 1e-9,
              "trial %d: accuracy %g vs %g, log loss %g vs %g", trial, m.accuracy, acc / n,
              m.log_loss, ll / n);
    }
    float p[3] = {0.2f, 0.4f, 0.9f}, ones[3] = {1, 1, 1};
    wd_metrics m;
    CHECK(wd_metrics_compute(p, ones, 3, &m) == HX_OK && isnan(m.auc) && m.accuracy == 0.0 / 3 + 1.0 / 3,
          "one class: AUC NaN (got %g), accuracy 1/3 (got %g)", m.auc, m.accuracy);
}

static int run(const char *data, const char *extra[], int n_extra)
{
    const char *argv[32] = {"widedeep", "--data", data, "--threads", "2", "--quiet",
                            "--batch", "512"};
    int argc = 8;
    for (int i = 0; i < n_extra; i++) argv[argc++] = extra[i];
    fflush(stdout);
    return wd_main(argc, (char **)argv);
}

static void test_training(const char *data, const char *dir)
{
    char a[512], b[512], csv[512], fa[600], fb[600];
    snprintf(a, sizeof a, "%s/straight", dir);
    snprintf(b, sizeof b, "%s/resumed", dir);
    snprintf(csv, sizeof csv, "%s/curve.csv", dir);

    /* Two epochs straight; one epoch, then a resumed second: the same bytes. */
    const char *straight[] = {"--epochs", "2", "--save", a, "--curve", csv};
    CHECK(run(data, straight, 6) == 0, "two epochs");
    FILE *f = fopen(csv, "r");
    char line[256];
    double auc = 0, acc = 0;
    int epochs = 0;
    while (f && fgets(line, sizeof line, f)) {
        int e;
        double tl, vl;
        if (sscanf(line, "%d,%lf,%lf,%lf,%lf", &e, &tl, &vl, &auc, &acc) == 5) epochs++;
    }
    if (f) fclose(f);
    CHECK(epochs == 2 && auc > 0.89 && acc > 0.84,
          "after 2 epochs on Adult: AUC %.4f (want > 0.89), accuracy %.4f (> 0.84), %d rows",
          auc, acc, epochs);

    const char *first[] = {"--epochs", "1", "--save", b};
    const char *second[] = {"--epochs", "2", "--resume", b, "--save", b};
    CHECK(run(data, first, 4) == 0 && run(data, second, 6) == 0, "1 epoch, then resume");
    static const char *const parts[] = {"session", "deep", "wide", "meta"};
    for (int k = 0; k < 4; k++) {
        snprintf(fa, sizeof fa, "%s/%s", a, parts[k]);
        snprintf(fb, sizeof fb, "%s/%s", b, parts[k]);
        CHECK(test_same_file(fa, fb), "resumed run's %s equals the straight run's", parts[k]);
    }

    /* A flipped byte in the session checkpoint: refused, nothing trained. */
    snprintf(fb, sizeof fb, "%s/session", b);
    f = fopen(fb, "r+b");
    CHECK(f != NULL, "open %s", fb);
    if (f) {
        fseek(f, -9, SEEK_END);
        int c = fgetc(f);
        fseek(f, -9, SEEK_END);
        fputc(c ^ 0x20, f);
        fclose(f);
    }
    const char *corrupt[] = {"--epochs", "3", "--resume", b};
    CHECK(run(data, corrupt, 4) != 0, "a corrupt checkpoint is refused");
    CHECK(strstr(hx_last_error(), "checksum") || strstr(hx_last_error(), "corrupt"),
          "the error says why: %s", hx_last_error());
    const char *missing[] = {"--epochs", "3", "--resume", "/nonexistent/ckpt"};
    CHECK(run(data, missing, 4) != 0, "a missing checkpoint is refused");
    const char *bad_data[] = {"--epochs", "1", "--data", "/nonexistent"};
    CHECK(run(data, bad_data, 4) != 0 && strstr(hx_last_error(), "/nonexistent"),
          "a missing data folder is named: %s", hx_last_error());
}

/* The deep table in a row store behind a cache smaller than it: the same
 * curve as in memory (the cache moves rows, never changes them), and a
 * resumed run loads the table's checkpoint from the same store. */
static void test_on_disk(const char *data, const char *dir)
{
    char mem[512], disk[512], rows[512], ck[512], resumed[512];
    snprintf(mem, sizeof mem, "%s/mem.csv", dir);
    snprintf(disk, sizeof disk, "%s/disk.csv", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.csv", dir);
    snprintf(rows, sizeof rows, "%s/deep.rows", dir);
    snprintf(ck, sizeof ck, "%s/disk-ckpt", dir);
    const char *in_memory[] = {"--epochs", "2", "--curve", mem};
    const char *on_disk[] = {"--epochs", "2", "--curve", disk, "--deep-table-on-disk", rows,
                             "--deep-cache-bytes", "24K"};
    CHECK(run(data, in_memory, 4) == 0 && run(data, on_disk, 8) == 0, "2 epochs in memory and on disk: %s",
          hx_last_error());
    CHECK(test_same_file(mem, disk), "the curve with the deep table on disk equals memory's");
    unlink(rows);
    const char *first[] = {"--epochs", "1", "--save", ck, "--curve", resumed, "--deep-table-on-disk", rows,
                           "--deep-cache-bytes", "24K"};
    const char *second[] = {"--epochs", "2", "--resume", ck, "--curve", resumed, "--deep-table-on-disk", rows,
                            "--deep-cache-bytes", "24K"};
    CHECK(run(data, first, 10) == 0 && run(data, second, 10) == 0, "on disk: 1 epoch, then resume: %s",
          hx_last_error());
    CHECK(test_same_file(mem, resumed), "resumed from the table's checkpoint: the same curve");
}

/* The deep table's hot rows in a device cache smaller than the table
 * (rows evicted and written back every epoch): the same curve as without. */
static void test_device_cache(const char *data, const char *dir)
{
    char plain[512], cached[512];
    snprintf(plain, sizeof plain, "%s/plain.csv", dir);
    snprintf(cached, sizeof cached, "%s/cached.csv", dir);
    const char *without[] = {"--epochs", "1", "--curve", plain, "--accelerator", "emu"};
    const char *with[] = {"--epochs", "1", "--curve", cached, "--accelerator", "emu", "--device-cache", "90"};
    CHECK(run(data, without, 6) == 0 && run(data, with, 8) == 0, "an epoch with and without a device cache: %s",
          hx_last_error());
    CHECK(test_same_file(plain, cached), "the curve with a device cache of 90 rows equals the one without");
}

/* Criteo's schema: generator files read through --criteo DIR train as
 * --criteo-generate's own (the same rows: the curve byte for byte), and
 * learn the planted model; Criteo-only flags without Criteo input, and
 * both inputs at once, are refused naming the flags. */
static void test_criteo(const char *dir)
{
    char folder[512], path[600], a[512], b[512];
    snprintf(folder, sizeof folder, "%s/criteo", dir);
    CHECK(mkdir(folder, 0700) == 0, "mkdir %s", folder);
    hx_generator_config gc = hx_generator_config_default();
    gc.seed = 1; /* widedeep's default --seed */
    gc.vocab_size = 5000;
    for (int k = 0; k < 2; k++) {
        gc.n_rows = k ? 1024 : 4096;
        gc.first_row = k ? 4096 : 0;
        snprintf(path, sizeof path, "%s/%s", folder, k ? "test.tsv" : "train.tsv");
        CHECK(hx_generator_write_tsv(&gc, path) == HX_OK, "%s", hx_last_error());
    }
    snprintf(a, sizeof a, "%s/criteo-files.csv", dir);
    snprintf(b, sizeof b, "%s/criteo-generated.csv", dir);
    const char *files[] = {"widedeep", "--criteo", folder, "--hash-buckets", "1000", "--threads", "2", "--quiet",
                           "--batch", "256", "--epochs", "2", "--curve", a};
    const char *generated[] = {"widedeep", "--criteo-generate", "4096", "--criteo-vocab", "5000", "--hash-buckets",
                               "1000", "--threads", "2", "--quiet", "--batch", "256", "--epochs", "2", "--curve", b};
    fflush(stdout);
    CHECK(wd_main(14, (char **)files) == 0 && wd_main(16, (char **)generated) == 0, "Criteo from files and "
          "generated: %s", hx_last_error());
    CHECK(test_same_file(a, b), "--criteo DIR of the generator's files trains as --criteo-generate");
    FILE *f = fopen(a, "r");
    char line[256];
    double auc = 0, acc = 0, tl, vl;
    int e, epochs = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%d,%lf,%lf,%lf,%lf", &e, &tl, &vl, &auc, &acc) == 5) epochs++;
    if (f) fclose(f);
    CHECK(epochs == 2 && auc > 0.72, "the planted model learnt: AUC %.4f after %d epochs (want > 0.72)", auc,
          epochs);
    const char *stray[] = {"widedeep", "--hash-buckets", "10", "--epochs", "1"};
    CHECK(wd_main(5, (char **)stray) == 2, "--hash-buckets without Criteo input refused");
    const char *both[] = {"widedeep", "--criteo", folder, "--criteo-generate", "100"};
    CHECK(wd_main(5, (char **)both) == 2, "--criteo with --criteo-generate refused");
}

static char data_dir[512], out_dir[64];

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    snprintf(data_dir, sizeof data_dir, "%s/data/adult", src ? src : ".");
    return test_make_tmpdir(out_dir, sizeof out_dir, "hx_test_widedeep") ? 0 : 1;
}

static void teardown(void) { test_remove_tree(out_dir); }

static void training(void) { test_training(data_dir, out_dir); }
static void on_disk(void) { test_on_disk(data_dir, out_dir); }
static void device_cache(void) { test_device_cache(data_dir, out_dir); }
static void criteo(void) { test_criteo(out_dir); }

/* The example's graph with every op AUTO on emu simulating a device 20x
 * faster than the host and an 8 GB/s link: the lookups and sparse updates
 * stay on the host, the MLP goes to the device, and the predicted step is
 * no worse than the best manual split's (all-host, or the expert's, which
 * is auto's all-device here: the lookups cannot move). Measured steps are
 * compared by ./build.sh bench placement. */
static void auto_placement(void)
{
    wd_options o = wd_options_default();
    o.batch = 256;
    o.threads = 2;
    o.placement = HX_TARGET_AUTO;
    hx_reader_config rc = hx_reader_config_adult(false);
    rc.batch_size = o.batch;
    char path[600], cache[600];
    snprintf(path, sizeof path, "%s/adult.data", data_dir);
    snprintf(cache, sizeof cache, "%s/op_costs", out_dir);
    hx_reader *r = NULL;
    wd_features wf = {0};
    wd_model m = {0};
    hx_session *s = NULL;
    hx_status st = hx_reader_open(path, &rc, &r);
    if (!st) st = wd_features_fit(r, &rc, o.cross_buckets, &wf);
    if (!st) st = wd_model_build(&o, &wf, &m);
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.auto_placement = true;
    c.emu_cost = (hx_emu_cost){.copy_bytes_per_s = 8e9, .launch_latency_s = 10e-6, .flops_per_s = 2e9};
    c.emu_host_cost = (hx_emu_host_cost){.flops_per_s = 1e8, .launch_latency_s = 2e-6};
    c.placement_cache = cache;
    if (!st) st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_OK, "auto session: %s", hx_last_error());
    hx_placement_report rep;
    if (!st && !hx_session_placement_report(s, &rep)) {
        CHECK(rep.n_auto > 0 && rep.predicted_step_s <= rep.predicted_all_host_s &&
              rep.predicted_step_s <= rep.predicted_all_device_s * 1.0000001,
              "auto %g s, all-host %g s, expert %g s", rep.predicted_step_s,
              rep.predicted_all_host_s, rep.predicted_all_device_s);
        printf("wide & deep auto: %d nodes placed, %d on the device; predicted step %.3f ms, "
               "all-host %.3f ms, expert %.3f ms\n", rep.n_auto, rep.n_auto_device,
               1e3 * rep.predicted_step_s, 1e3 * rep.predicted_all_host_s,
               1e3 * rep.predicted_all_device_s);
    }
    /* lookups and sparse updates on the host; the MLP's weights (those of
     * 1000 values or more: mlp1.w, mlp2.w), their updates, its forward
     * matmuls and (by FLOPs) its gradients' on the device. A tiny op (a
     * bias, the 50x1 output layer, a small gradient matmul) may run on the
     * idle host lane when the model predicts that is faster. */
    int host_emb = 0, dev_emb = 0, host_param = 0, host_fwd_mm = 0;
    double mm_flops = 0, dev_mm_flops = 0;
    for (int i = 0; !st && i < m.g->n; i++) {
        const hx_tensor *t = m.g->tensors[i];
        bool dev = s->e.target[i] == HX_TARGET_DEVICE;
        if (t->op == HX_OP_EMBEDDING_LOOKUP || t->op == HX_OP_EMBEDDING_BAG ||
            t->op == HX_OP_EMBEDDING_UPDATE) {
            host_emb += !dev;
            dev_emb += dev;
        }
        const hx_tensor *p = t->kind == HX_TENSOR_UPDATE ? t->param : t;
        bool weight = (t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_UPDATE) &&
                      t->op != HX_OP_EMBEDDING_UPDATE && hx_tensor_numel(p) >= 1000;
        host_param += weight && !dev;
        if (t->op != HX_OP_MATMUL) continue;
        host_fwd_mm += t->id < m.loss->id && hx__op_flops(t) >= 1e5 && !dev; /* layers 1 and 2 */
        mm_flops += hx__op_flops(t);
        dev_mm_flops += dev ? hx__op_flops(t) : 0;
    }
    CHECK(!st && host_emb == 4 && dev_emb == 0, "2 lookups, 2 sparse updates on the host (%d host, "
          "%d device)", host_emb, dev_emb);
    CHECK(!st && host_param == 0 && host_fwd_mm == 0 && dev_mm_flops >= 0.95 * mm_flops,
          "the MLP on the device: %d large weights or their updates and %d forward matmuls on the host, "
          "%.1f%% of the matmul FLOPs on the device", host_param, host_fwd_mm,
          100 * dev_mm_flops / mm_flops);
    hx_session_free(s);
    wd_model_free(&m);
    wd_features_free(&wf);
    hx_reader_close(r);
}

static const test_case cases[] = {
    {"metrics", test_metrics},
    {"training", training},
    {"on_disk", on_disk},
    {"device_cache", device_cache},
    {"criteo", criteo},
    {"auto_placement", auto_placement},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "widedeep", cases, TEST_COUNT(cases), &o);
}
