/* The CLI's checkpoint folders (cli/checkpoint.c) as a user meets them:
 * `hetex widedeep --save` killed at every step of a save, then resumed;
 * a folder that is not a checkpoint never replaced; a folder another
 * process is saving to refused. Runs the built `hetex`
 * (tests/util/hetex_run.h). */
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "test_main.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[128], data[300], log_path[300];
static char out[1 << 16];

#define WD "widedeep", "--data", data, "--threads", "2", "--quiet", "--batch", "256"

static int run(const char *const *args, const char *crash_at)
{
    return test_hetex_run(args, crash_at, log_path, out, sizeof out);
}

/* The checkpoint folders a and b hold the same bytes. */
static bool same_checkpoint(const char *a, const char *b)
{
    static const char *const parts[] = {"session", "deep", "wide", "meta"};
    for (int k = 0; k < 4; k++) {
        char pa[600], pb[600];
        snprintf(pa, sizeof pa, "%s/%s", a, parts[k]);
        snprintf(pb, sizeof pb, "%s/%s", b, parts[k]);
        if (!test_same_file(pa, pb)) return false;
    }
    return true;
}

/* Killed at every step of an epoch's save (each file of the set written,
 * the folder synced, swapped in, the old one removed: $HX_CLI_CRASH_AT),
 * then resumed: the checkpoint is the previous epoch's or the new one's,
 * the resumed run ends bitwise where the run never killed ends, and the
 * next save leaves nothing beside it. */
static void test_kill_during_save(void)
{
    char straight[300], ck[300], k_text[16];
    snprintf(straight, sizeof straight, "%s/straight", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    const char *two[] = {WD, "--epochs", "2", "--save", straight, NULL};
    const char *one[] = {WD, "--epochs", "1", "--save", ck, NULL};
    const char *again[] = {WD, "--epochs", "2", "--resume", ck, "--save", ck, NULL};
    CHECK(run(two, NULL) == 0 && run(one, NULL) == 0, "two epochs, one epoch: %s", out);
    int points = 0;
    for (int k = 1; k <= 20; k++) {
        snprintf(k_text, sizeof k_text, "%d", k);
        int rc = run(again, k_text);
        if (rc == 0) break; /* past the last step of a save */
        points++;
        CHECK(rc == -9, "crash at step %d: killed (exit %d): %s", k, rc, out);
        rc = run(again, NULL);
        CHECK(rc == 0 && same_checkpoint(ck, straight),
              "crash at step %d, then resumed: exit %d, the checkpoint equals the run never "
              "killed: %s", k, rc, out);
        rc = run(one, NULL);
        CHECK(rc == 0 && test_stage_files_in(dir) == 0,
              "crash at step %d: the next save leaves no stage (exit %d, %d left)", k, rc,
              test_stage_files_in(dir));
    }
    printf("  killed at each of the %d steps of a save\n", points);
    CHECK(points >= 7, "a save has at least 7 steps (4 files, the mark, sync, swap): %d", points);
}

/* The run's "final: accuracy ... test rows" into buf. */
static const char *final_line(const char *text, char *buf, size_t n)
{
    const char *a = strstr(text, "final: accuracy"), *b = a ? strstr(a, " test rows") : NULL;
    snprintf(buf, n, "%.*s", a && b ? (int)(b - a) : 0, a ? a : "");
    return buf;
}

/* The same with the deep table on disk: its save commits the row store's
 * checkpoint before the folder is swapped in, so a kill between them
 * leaves the folder of the epoch before as the last; the store keeps the
 * records of its last two checkpoints and the resumed run ends where the
 * run in memory never killed ends. */
static void test_kill_during_save_on_disk(void)
{
    char ck[300], rows[300], want[256], got[256];
    snprintf(ck, sizeof ck, "%s/ck-disk", dir);
    snprintf(rows, sizeof rows, "%s/deep.rows", dir);
    const char *two[] = {WD, "--epochs", "2", NULL};
    const char *one[] = {WD, "--epochs", "1", "--save", ck, "--deep-table-on-disk", rows, NULL};
    const char *again[] = {WD, "--epochs", "2", "--resume", ck, "--save", ck, "--deep-table-on-disk", rows, NULL};
    CHECK(run(two, NULL) == 0 && *final_line(out, want, sizeof want), "two epochs in memory: %s", out);
    CHECK(run(one, NULL) == 0, "one epoch on disk: %s", out);
    int points = 0;
    char k_text[16];
    for (int k = 1; k <= 20; k++) {
        snprintf(k_text, sizeof k_text, "%d", k);
        int rc = run(again, k_text);
        if (rc == 0) break;
        points++;
        CHECK(rc == -9, "on disk, crash at step %d: killed (exit %d): %s", k, rc, out);
        rc = run(again, NULL);
        CHECK(rc == 0 && !strcmp(final_line(out, got, sizeof got), want),
              "on disk, crash at step %d, then resumed: exit %d, '%s' (the run never killed: '%s')", k, rc, got,
              want);
        CHECK(run(one, NULL) == 0, "on disk: one epoch again: %s", out);
    }
    CHECK(points >= 7, "killed at each of the %d steps of a save", points);
}

/* A folder with files and no hetex-checkpoint mark is not replaced, nor is
 * a file; a damaged checkpoint is refused on resume. */
static void test_foreign_folder(void)
{
    char mine[300], file[400], ck[300];
    snprintf(mine, sizeof mine, "%s/mine", dir);
    snprintf(file, sizeof file, "%s/notes.txt", mine);
    snprintf(ck, sizeof ck, "%s/ck2", dir);
    CHECK(!mkdir(mine, 0700) && test_write_text(file, "keep me"), "make a folder of files");
    const char *save[] = {WD, "--epochs", "1", "--save", mine, NULL};
    int rc = run(save, NULL);
    CHECK(rc == 2 && strstr(out, "--save") && strstr(out, "not a checkpoint") &&
          !access(file, F_OK), "a folder of files is refused and kept (exit %d): %s", rc, out);
    const char *onto_file[] = {WD, "--epochs", "1", "--save", file, NULL};
    rc = run(onto_file, NULL);
    CHECK(rc == 2 && strstr(out, "not a checkpoint"), "a file is refused (exit %d): %s", rc, out);
    const char *resume_foreign[] = {WD, "--epochs", "1", "--resume", mine, NULL};
    rc = run(resume_foreign, NULL);
    CHECK(rc == 1 && strstr(out, "--resume") && strstr(out, "not a widedeep checkpoint"),
          "resuming from a folder of files is refused (exit %d): %s", rc, out);
}

/* A save into a folder that another process is saving to (its stage is
 * locked) is refused, naming the stage; the checkpoint stays as it was. */
static void test_busy_folder(void)
{
    char ck[300], stage[400], meta[400];
    snprintf(ck, sizeof ck, "%s/busy", dir);
    snprintf(stage, sizeof stage, "%s.stage-1-0", ck);
    snprintf(meta, sizeof meta, "%s/meta", ck);
    const char *one[] = {WD, "--epochs", "1", "--save", ck, NULL};
    const char *two[] = {WD, "--epochs", "2", "--resume", ck, "--save", ck, NULL};
    CHECK(run(one, NULL) == 0, "one epoch: %s", out);
    int fd = mkdir(stage, 0700) ? -1 : open(stage, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0 && !flock(fd, LOCK_EX), "hold a stage as another saver would");
    int rc = run(two, NULL);
    FILE *f = fopen(meta, "r");
    char line[64] = "", epochs[64] = "";
    if (f && fgets(line, sizeof line, f) && fgets(epochs, sizeof epochs, f)) {}
    if (f) fclose(f);
    CHECK(rc == 1 && strstr(out, "another process is saving") && strstr(out, stage) &&
          !strcmp(epochs, "epochs 1\n"),
          "refused while another saves, the checkpoint still epoch 1 (exit %d, '%s'): %s", rc,
          epochs, out);
    close(fd); /* that saver died */
    rc = run(two, NULL);
    CHECK(rc == 0 && access(stage, F_OK) && test_stage_files_in(dir) == 0,
          "its stage is removed by the next save (exit %d): %s", rc, out);
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    char adult[512];
    snprintf(adult, sizeof adult, "%s/data/adult", src ? src : ".");
    if (!test_make_tmpdir(dir, sizeof dir, "hx_test_cli_ckpt")) return 1;
    snprintf(data, sizeof data, "%s/small", dir);
    snprintf(log_path, sizeof log_path, "%s/out.txt", dir);
    return test_adult_folder(data, adult, NULL, 1000, 500, NULL) ? 0 : 1;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"kill_during_save", test_kill_during_save},
    {"kill_during_save_on_disk", test_kill_during_save_on_disk},
    {"foreign_folder", test_foreign_folder},
    {"busy_folder", test_busy_folder},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "cli_checkpoint", cases, TEST_COUNT(cases), &o);
}
