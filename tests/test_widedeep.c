/* The wide & deep example: its AUC against a pairwise reference (with
 * ties), a short deterministic training run on Adult, checkpoint resume
 * equality, and a corrupt checkpoint refused. */
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "examples/widedeep/wd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static const test_case cases[] = {
    {"metrics", test_metrics},
    {"training", training},
    {"on_disk", on_disk},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "widedeep", cases, TEST_COUNT(cases), &o);
}
