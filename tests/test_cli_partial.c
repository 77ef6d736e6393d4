/* --partial-batch of hetex widedeep and hetex resnet: the short last batch
 * of every epoch is trained (the rows each step trained, from --metrics,
 * add up to every row of the file each epoch; without the flag to the full
 * batches only); fewer rows than one batch trains as one short batch, bitwise
 * as a run whose --batch is that count (checkpoint files compared byte for
 * byte); a run stopped by Ctrl-C and resumed with the flag ends with the
 * uninterrupted run's checkpoint; refusals name the flag. Runs the built
 * `hetex` (tests/util/hetex_run.h). */
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "test_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[128], log_path[300], fashion[512], d40[300], d10[300];
static char out[1 << 16];

#define WD(data, batch) "widedeep", "--data", (data), "--batch", (batch), "--quiet", "--threads", "1"
#define RESNET(limit, batch) "resnet", "--data", fashion, "--train-limit", (limit), "--batch", \
    (batch), "--test-limit", "8", "--epochs", "2", "--width", "4", "--blocks", "1", "--quiet", \
    "--threads", "1", "--warmup", "3"

static void path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

/* hetex ARGS with $HX_CLI_INTERRUPT_AT set to interrupt_at (NULL: unset). */
static int run(const char *const *args, const char *interrupt_at)
{
    if (interrupt_at) setenv("HX_CLI_INTERRUPT_AT", interrupt_at, 1);
    int rc = test_hetex_run(args, NULL, log_path, out, sizeof out);
    unsetenv("HX_CLI_INTERRUPT_AT");
    return rc;
}

/* The files `names` (NULL-terminated) of folders a and b hold the same bytes. */
static bool same_files(const char *a, const char *b, const char *const *names)
{
    char pa[600], pb[600];
    bool same = true;
    for (int k = 0; names[k]; k++) {
        snprintf(pa, sizeof pa, "%s/%s", a, names[k]);
        snprintf(pb, sizeof pb, "%s/%s", b, names[k]);
        same = same && test_same_file(pa, pb);
    }
    return same;
}

/* The "rows" of every "step" line of a --metrics file, summed per epoch
 * (rows[e - 1], up to n epochs); the number of step lines. */
static int rows_per_epoch(const char *file, long *rows, int n)
{
    memset(rows, 0, sizeof *rows * (size_t)n);
    FILE *f = fopen(file, "r");
    char line[1024];
    int lines = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *e = strstr(line, "\"epoch\":"), *r = strstr(line, "\"rows\":");
        if (!strstr(line, "\"event\":\"step\"") || !e || !r) continue;
        int epoch = atoi(e + 8);
        if (epoch >= 1 && epoch <= n) rows[epoch - 1] += atol(r + 7);
        lines++;
    }
    if (f) fclose(f);
    return lines;
}

/* What the flag changes and what it is refused with. */
static void test_table(void)
{
    char ck[300];
    path(ck, sizeof ck, "plain");
    const char *plain[] = {WD(d40, "16"), "--epochs", "1", "--save", ck, NULL};
    int rc = run(plain, NULL);
    CHECK(rc == 0, "a run without the flag (exit %d): %s", rc, out);
    const test_hetex_var vars[] = {{"$D40", d40}, {"$D10", d10}, {"$CK", ck}, {"$FASHION", fashion}};
    static const test_hetex_case cases[] = {
        {{WD("$D40", "16"), "--epochs", "1", "--partial-batch"}, 0,
         {"2 full batches and a short one of 8 rows an epoch (--partial-batch): all 40 rows trained"}},
        {{WD("$D40", "16"), "--epochs", "1"}, 0,
         {"the 8 rows past them", "are not trained on (--partial-batch trains them)"}},
        {{WD("$D10", "16"), "--epochs", "1"}, 1,
         {"has 10 rows, fewer than one batch of 16", "or --partial-batch"}},
        {{WD("$D10", "16"), "--epochs", "1", "--partial-batch"}, 0,
         {"0 full batches and a short one of 10 rows an epoch"}},
        {{WD("$D40", "16"), "--partial-batch", "--shards", "2"}, 2, {"--partial-batch with --shards"}},
        {{WD("$D40", "16"), "--epochs", "2", "--resume", "$CK", "--partial-batch"}, 1,
         {"was made with --seed 1 --batch 16 and without --partial-batch"}},
        {{"resnet", "--data", "$FASHION", "--train-limit", "10", "--batch", "16", "--quiet"}, 2,
         {"--batch 16 is more than the 10 training images", "or --partial-batch"}},
        {{"resnet", "--data", "$FASHION", "--train-limit", "10", "--test-limit", "8", "--batch", "4",
          "--width", "4", "--blocks", "1", "--partial-batch"}, 0,
         {"2 full batches and a short one of 2 images an epoch (--partial-batch): all 10 images"}},
    };
    test_hetex_table(cases, (int)(sizeof cases / sizeof cases[0]), vars,
                     (int)(sizeof vars / sizeof vars[0]), log_path);
}

/* Every row trained once an epoch with the flag, the full batches' without. */
static void test_rows_trained(void)
{
    char m[300];
    long rows[2];
    path(m, sizeof m, "rows.jsonl");
    const char *with[] = {WD(d40, "16"), "--epochs", "2", "--partial-batch", "--metrics", m, NULL};
    int rc = run(with, NULL);
    int lines = rows_per_epoch(m, rows, 2);
    CHECK(rc == 0 && lines == 6 && rows[0] == 40 && rows[1] == 40,
          "widedeep --partial-batch: 3 steps and 40 rows an epoch (exit %d, %d steps, rows %ld %ld)",
          rc, lines, rows[0], rows[1]);
    const char *without[] = {WD(d40, "16"), "--epochs", "2", "--metrics", m, NULL};
    rc = run(without, NULL);
    lines = rows_per_epoch(m, rows, 2);
    CHECK(rc == 0 && lines == 4 && rows[0] == 32 && rows[1] == 32,
          "widedeep without it: 2 steps and 32 rows an epoch (exit %d, %d steps, rows %ld %ld)",
          rc, lines, rows[0], rows[1]);
    const char *resnet[] = {RESNET("10", "4"), "--partial-batch", "--metrics", m, NULL};
    rc = run(resnet, NULL);
    lines = rows_per_epoch(m, rows, 2);
    CHECK(rc == 0 && lines == 6 && rows[0] == 10 && rows[1] == 10,
          "resnet --partial-batch: 3 steps and 10 images an epoch (exit %d, %d steps, rows %ld %ld)",
          rc, lines, rows[0], rows[1]);
}

/* Fewer rows than --batch with the flag: one short batch an epoch, bitwise
 * the run whose --batch is the row count (the short batch's session is the
 * same model at that batch, its state carried in and out). */
static void test_same_as_exact_batch(void)
{
    char a[300], b[300];
    path(a, sizeof a, "wd-short");
    path(b, sizeof b, "wd-exact");
    const char *shorter[] = {WD(d10, "16"), "--epochs", "2", "--partial-batch", "--save", a, NULL};
    const char *exact[] = {WD(d10, "10"), "--epochs", "2", "--save", b, NULL};
    int rc = run(shorter, NULL), rc2 = rc ? -1 : run(exact, NULL);
    static const char *const wd_parts[] = {"session", "deep", "wide", NULL};
    CHECK(rc == 0 && rc2 == 0 && same_files(a, b, wd_parts),
          "widedeep: 10 rows at --batch 16 --partial-batch train as --batch 10 (exits %d %d): %s",
          rc, rc2, out);
    path(a, sizeof a, "resnet-short");
    path(b, sizeof b, "resnet-exact");
    const char *rshort[] = {RESNET("10", "16"), "--partial-batch", "--save", a, NULL};
    const char *rexact[] = {RESNET("10", "10"), "--save", b, NULL};
    rc = run(rshort, NULL);
    rc2 = rc ? -1 : run(rexact, NULL);
    static const char *const r_parts[] = {"session", NULL};
    CHECK(rc == 0 && rc2 == 0 && same_files(a, b, r_parts),
          "resnet (batch norm): 10 images at --batch 16 --partial-batch train as --batch 10 "
          "(exits %d %d): %s", rc, rc2, out);
}

/* Stopped by Ctrl-C and resumed with the flag: the uninterrupted run's
 * checkpoint, byte for byte. */
static void test_resume(void)
{
    char full[300], ck[300];
    path(full, sizeof full, "wd-full");
    path(ck, sizeof ck, "wd-ck");
    const char *straight[] = {WD(d40, "16"), "--epochs", "3", "--partial-batch", "--save", full, NULL};
    const char *stopped[] = {WD(d40, "16"), "--epochs", "3", "--partial-batch", "--save", ck, NULL};
    const char *resumed[] = {WD(d40, "16"), "--epochs", "3", "--partial-batch", "--resume", ck,
                             "--save", ck, NULL};
    int rc = run(straight, NULL);
    CHECK(rc == 0, "widedeep uninterrupted (exit %d): %s", rc, out);
    rc = run(stopped, "4"); /* 3 steps an epoch: in epoch 2 */
    CHECK(rc == 130 && strstr(out, "in epoch 2, which is not saved"), "Ctrl-C in epoch 2 "
          "(exit %d): %s", rc, out);
    rc = run(resumed, NULL);
    static const char *const wd_parts[] = {"session", "deep", "wide", "meta", NULL};
    CHECK(rc == 0 && same_files(full, ck, wd_parts),
          "widedeep resumed: the uninterrupted run's checkpoint (exit %d): %s", rc, out);

    path(full, sizeof full, "resnet-full");
    path(ck, sizeof ck, "resnet-ck");
    const char *rstraight[] = {RESNET("10", "4"), "--partial-batch", "--save", full, NULL};
    const char *rstopped[] = {RESNET("10", "4"), "--partial-batch", "--save", ck, NULL};
    const char *rresumed[] = {RESNET("10", "4"), "--partial-batch", "--resume", ck, "--save", ck,
                              NULL};
    static const char *const r_parts[] = {"session", "state", NULL};
    rc = run(rstraight, NULL);
    CHECK(rc == 0, "resnet uninterrupted (exit %d): %s", rc, out);
    static const char *const at[] = {"2", "4"}; /* before epoch 1's short step; in epoch 2 */
    for (int i = 0; i < 2; i++) {
        rc = run(rstopped, at[i]);
        CHECK(rc == 130 && strstr(out, "; saved to '"), "resnet Ctrl-C at step %s (exit %d): %s",
              at[i], rc, out);
        rc = run(rresumed, NULL);
        CHECK(rc == 0 && same_files(full, ck, r_parts),
              "resnet resumed from step %s: the uninterrupted run's checkpoint (exit %d): %s", at[i],
              rc, out);
    }
    const char *other[] = {RESNET("10", "4"), "--resume", ck, NULL};
    rc = run(other, NULL);
    CHECK(rc == 1 && strstr(out, "was made with --partial-batch yes; this run has --partial-batch no"),
          "resnet: resuming without the flag is refused naming it (exit %d): %s", rc, out);
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    char adult[512];
    snprintf(adult, sizeof adult, "%s/data/adult", src ? src : ".");
    snprintf(fashion, sizeof fashion, "%s/data/fashion-mnist", src ? src : ".");
    if (!test_make_tmpdir(dir, sizeof dir, "hx_test_cli_partial")) return 1;
    snprintf(log_path, sizeof log_path, "%s/out.txt", dir);
    path(d40, sizeof d40, "adult40");
    path(d10, sizeof d10, "adult10");
    bool ok = test_adult_folder(d40, adult, NULL, 40, 40, NULL) &&
              test_adult_folder(d10, adult, NULL, 10, 40, NULL);
    if (!ok) fprintf(stderr, "test_cli_partial: cannot make the data folders under %s\n", dir);
    return ok ? 0 : 1;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"table", test_table},
    {"rows_trained", test_rows_trained},
    {"same_as_exact_batch", test_same_as_exact_batch},
    {"resume", test_resume},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "cli_partial", cases, TEST_COUNT(cases), &o);
}
