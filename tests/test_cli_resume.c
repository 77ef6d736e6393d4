/* --save/--resume and Ctrl-C as a user meets them (hetex gpt, and hetex
 * resnet stopped within an epoch): a run stopped and resumed ends bitwise
 * where the run never stopped ends (parameters, optimizer state, position,
 * and every later loss); a real SIGINT saves and exits 130; a save onto a full disk fails saying so and leaves the
 * previous checkpoint as it was; damaged checkpoints and other flags are
 * refused naming the file or the flag; two runs saving to one folder
 * leave one complete checkpoint. Tiny models, a few steps each. Runs the
 * built `hetex` (tests/util/hetex_run.h). */
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "test_main.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[128], corpus[512], fashion[512], log_path[300];
static char out[1 << 16];

#define GPT "gpt", "--data", corpus, "--layers", "1", "--heads", "2", "--width", "16", \
    "--context", "8", "--batch", "4", "--eval-every", "4", "--eval-iters", "2", "--threads", \
    "1", "--quiet", "--sample", "24", "--steps"

static const char *crash_at; /* $HX_CLI_CRASH_AT of the next start (NULL: unset) */

/* Starts `hetex ARGS` with output into log; $HX_CLI_INTERRUPT_AT set to
 * interrupt_at (NULL: unset), $HX_CLI_CRASH_AT to crash_at; file writes capped at fsize bytes (0: no cap;
 * SIGXFSZ ignored, so that a write past it fails with EFBIG as on a full
 * disk). Returns the pid. */
static pid_t start(const char *const *args, const char *interrupt_at, rlim_t fsize)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), in = open("/dev/null", O_RDONLY);
        if (fd < 0 || in < 0) _exit(127);
        dup2(in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (interrupt_at) setenv("HX_CLI_INTERRUPT_AT", interrupt_at, 1);
        else unsetenv("HX_CLI_INTERRUPT_AT");
        if (crash_at) setenv("HX_CLI_CRASH_AT", crash_at, 1);
        else unsetenv("HX_CLI_CRASH_AT");
        if (fsize) {
            struct rlimit rl = {fsize, fsize};
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl)) _exit(126);
        }
        const char *argv[40] = {test_hetex_path()};
        for (int i = 0; args[i] && i < 38; i++) argv[i + 1] = args[i];
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    return pid;
}

/* Waits for pid; its output into out. The exit code, or minus its signal. */
static int finish(pid_t pid)
{
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1000;
    FILE *f = fopen(log_path, "r");
    size_t k = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[k] = 0;
    if (f) fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1000;
}

static int run(const char *const *args, const char *interrupt_at, rlim_t fsize)
{
    return finish(start(args, interrupt_at, fsize));
}

static void path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static bool same_checkpoint(const char *a, const char *b)
{
    char pa[400], pb[400];
    bool same = true;
    static const char *const parts[] = {"session", "state"};
    for (int k = 0; k < 2; k++) {
        snprintf(pa, sizeof pa, "%s/%s", a, parts[k]);
        snprintf(pb, sizeof pb, "%s/%s", b, parts[k]);
        same = same && test_same_file(pa, pb);
    }
    return same;
}

/* The value of "key": in a metrics line (its text up to , or }), or "". */
static void field(const char *line, const char *key, char *buf, size_t n)
{
    char want[64];
    snprintf(want, sizeof want, "\"%s\":", key);
    const char *at = strstr(line, want);
    size_t len = at ? strcspn(at + strlen(want), ",}") : 0;
    snprintf(buf, n, "%.*s", (int)len, at ? at + strlen(want) : "");
}

/* A metrics file's lines of one event as "step=..;loss=.." keys (the
 * fields that must not depend on timing), one per line, into buf. */
static int numbers_of(const char *file, const char *event, const char *const *keys, char *buf,
                      size_t n)
{
    FILE *f = fopen(file, "r");
    char line[20000], want[64], v[256];
    snprintf(want, sizeof want, "{\"event\":\"%s\",", event);
    size_t k = 0;
    int lines = 0;
    buf[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want))) continue;
        lines++;
        for (int i = 0; keys[i]; i++) {
            field(line, keys[i], v, sizeof v);
            k += (size_t)snprintf(buf + k, n - k, "%s=%s;", keys[i], v);
            if (k >= n) k = n - 1;
        }
        k += (size_t)snprintf(buf + k, n - k, "\n");
        if (k >= n) k = n - 1;
    }
    if (f) fclose(f);
    return lines;
}

/* Stopped by Ctrl-C after step 6 (the fault hook raises a real SIGINT),
 * then resumed: the checkpoint at step 12 is the uninterrupted run's byte
 * for byte (parameters, AdamW moments, loss scale, step, the corpus
 * draws' state), and the metrics of both runs together are the
 * uninterrupted run's: every step's loss and lr, every evaluation, every
 * sample. */
static void test_resume_bitwise(void)
{
    char full[300], ck[300], full_m[300], ck_m[300];
    path(full, sizeof full, "full");
    path(ck, sizeof ck, "ck");
    path(full_m, sizeof full_m, "full.jsonl");
    path(ck_m, sizeof ck_m, "ck.jsonl");
    const char *straight[] = {GPT, "12", "--save", full, "--metrics", full_m, NULL};
    const char *stopped[] = {GPT, "12", "--save", ck, "--metrics", ck_m, NULL};
    const char *resumed[] = {GPT, "12", "--resume", ck, "--save", ck, "--metrics", ck_m, NULL};
    int rc = run(straight, NULL, 0);
    CHECK(rc == 0, "the uninterrupted run (exit %d): %s", rc, out);
    rc = run(stopped, "6", 0);
    CHECK(rc == 130 && strstr(out, "interrupted (Ctrl-C) after step 6 of 12; saved to '") &&
              strstr(out, "--resume"),
          "Ctrl-C after step 6: saved, exit 130 (exit %d): %s", rc, out);
    rc = run(resumed, NULL, 0);
    CHECK(rc == 0 && strstr(out, "resumed from '") && strstr(out, "at step 6 of 12"),
          "resumed (exit %d): %s", rc, out);
    CHECK(same_checkpoint(full, ck), "the resumed run's last checkpoint is the uninterrupted one's");

    static char a[1 << 16], b[1 << 16];
    static const char *const step_keys[] = {"step", "loss", "lr", NULL};
    static const char *const eval_keys[] = {"step", "train_loss", "val_loss", "lr", NULL};
    static const char *const sample_keys[] = {"step", "text", NULL};
    int na = numbers_of(full_m, "step", step_keys, a, sizeof a);
    int nb = numbers_of(ck_m, "step", step_keys, b, sizeof b);
    CHECK(na == 12 && nb == 12 && !strcmp(a, b), "every step's loss and lr as if never stopped "
          "(%d and %d lines):\n%s---\n%s", na, nb, a, b);
    na = numbers_of(full_m, "eval", eval_keys, a, sizeof a);
    nb = numbers_of(ck_m, "eval", eval_keys, b, sizeof b);
    CHECK(na == 3 && nb == 3 && !strcmp(a, b), "the evaluations (%d, %d):\n%s---\n%s", na, nb, a, b);
    na = numbers_of(full_m, "sample", sample_keys, a, sizeof a);
    nb = numbers_of(ck_m, "sample", sample_keys, b, sizeof b);
    CHECK(na == 3 && nb == 3 && !strcmp(a, b), "the samples (%d, %d):\n%s---\n%s", na, nb, a, b);
    CHECK(test_stage_files_in(dir) == 0, "no stage left beside the checkpoints");
}

/* Killed (SIGKILL) at every step of its saves ($HX_CLI_CRASH_AT: each
 * file of the set written, synced, swapped in, the old one removed) after
 * resuming from step 6, then resumed again: each time the folder holds a
 * whole checkpoint, and the run ends bitwise where the run never stopped
 * ends, with no stage left beside it. */
static void test_kill_during_save(void)
{
    char full[300], base[300], ck[300], cmd[1000], k_text[16];
    path(full, sizeof full, "kill-full");
    path(base, sizeof base, "kill-base");
    path(ck, sizeof ck, "kill");
    const char *straight[] = {GPT, "12", "--save", full, NULL};
    const char *stopped[] = {GPT, "12", "--save", base, NULL};
    const char *resumed[] = {GPT, "12", "--resume", ck, "--save", ck, NULL};
    int rc = run(straight, NULL, 0);
    CHECK(rc == 0, "the uninterrupted run (exit %d): %s", rc, out);
    rc = run(stopped, "6", 0);
    CHECK(rc == 130, "a checkpoint at step 6 (exit %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", ck, base, ck);
    int points = 0;
    for (int k = 1; k <= 40; k++) {
        CHECK(system(cmd) == 0, "a fresh copy of the step 6 checkpoint");
        snprintf(k_text, sizeof k_text, "%d", k);
        crash_at = k_text;
        rc = run(resumed, NULL, 0);
        crash_at = NULL;
        if (rc == 0) break; /* past the last step of the run's saves */
        points++;
        CHECK(rc == -9, "killed at step %d of the saves (exit %d): %s", k, rc, out);
        rc = run(resumed, NULL, 0);
        bool saved = !strstr(out, "nothing left to train"); /* else no save sweeps */
        CHECK(rc == 0 && same_checkpoint(ck, full) && (!saved || test_stage_files_in(dir) == 0),
              "killed at step %d of the saves, then resumed: exit %d, the uninterrupted run's "
              "checkpoint, %d stages left: %s", k, rc, test_stage_files_in(dir), out);
    }
    printf("  killed at each of the %d steps of two saves\n", points);
    CHECK(points >= 10, "two saves of at least 5 steps each (2 files, the mark, sync, swap): %d",
          points);
}

/* The run's "after step K of" from an interrupted run's line; -1: none. */
static int interrupted_at(const char *text)
{
    const char *at = strstr(text, "interrupted (Ctrl-C) after step ");
    return at ? atoi(at + strlen("interrupted (Ctrl-C) after step ")) : -1;
}

/* A real Ctrl-C from outside while the run trains: it saves where it is
 * and exits 130; that checkpoint resumes at its step. Without --save it
 * says nothing was saved. */
static void test_sigint(void)
{
    char ck[300], metrics[300], k_text[32];
    path(ck, sizeof ck, "sigint");
    path(metrics, sizeof metrics, "sigint.jsonl");
    const char *long_run[] = {GPT, "100000", "--save", ck, "--metrics", metrics, NULL};
    const char *unsaved[] = {GPT, "100000", "--metrics", metrics, NULL};
    for (int saving = 1; saving >= 0; saving--) {
        pid_t pid = start(saving ? long_run : unsaved, NULL, 0);
        bool training = false;
        for (int i = 0; i < 6000 && !training; i++) { /* up to 60 s for 3 steps */
            struct stat sb;
            training = !stat(metrics, &sb) && sb.st_size > 300;
            struct timespec ts = {0, 10000000};
            if (!training) nanosleep(&ts, NULL);
        }
        CHECK(training, "the run trains (its metrics grow)");
        kill(pid, SIGINT);
        int rc = finish(pid), k = interrupted_at(out);
        if (saving)
            CHECK(rc == 130 && k >= 1 && strstr(out, "saved to '"),
                  "SIGINT while training: saved, exit 130 (exit %d): %s", rc, out);
        else
            CHECK(rc == 130 && k >= 1 && strstr(out, "nothing saved (--save DIR keeps a run)"),
                  "SIGINT without --save says nothing was saved (exit %d): %s", rc, out);
        if (!saving) break;
        const char *resumed[] = {GPT, "100000", "--resume", ck, NULL};
        rc = run(resumed, "1", 0);
        snprintf(k_text, sizeof k_text, "at step %d of 100000", k);
        CHECK(rc == 130 && strstr(out, k_text) && interrupted_at(out) == k + 1,
              "its checkpoint resumes at step %d (exit %d): %s", k, rc, out);
        remove(metrics);
    }
}

/* A save that cannot be written (the disk full: writes past a size limit
 * fail with EFBIG) fails with a message naming --save and the reason, and
 * the previous checkpoint is as it was; nothing is left beside it. */
static void test_full_disk(void)
{
    char ck[300], copy[300];
    path(ck, sizeof ck, "full-disk");
    path(copy, sizeof copy, "full-disk-before");
    const char *first[] = {GPT, "12", "--save", ck, NULL};
    const char *again[] = {GPT, "12", "--resume", ck, "--save", ck, NULL};
    int rc = run(first, "5", 0); /* saved at step 5 */
    CHECK(rc == 130, "a checkpoint at step 5 (exit %d): %s", rc, out);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", ck, copy);
    CHECK(system(cmd) == 0, "keep a copy of it");
    rc = run(again, NULL, 4096); /* the session file is larger */
    CHECK(rc == 1 && strstr(out, "--save") && strstr(out, "File too large"),
          "a save onto a full disk fails saying why (exit %d): %s", rc, out);
    CHECK(same_checkpoint(ck, copy) && test_stage_files_in(dir) == 0,
          "the previous checkpoint is untouched, no stage left");

    /* A folder that cannot be written to is refused before training. */
    char ro[300], inside[400];
    path(ro, sizeof ro, "read-only");
    snprintf(inside, sizeof inside, "%s/ck", ro);
    CHECK(!mkdir(ro, 0500), "a read-only folder");
    const char *into_ro[] = {GPT, "12", "--save", inside, NULL};
    rc = run(into_ro, NULL, 0);
    if (geteuid() == 0) /* root writes anywhere: the save works */
        CHECK(rc == 0, "as root a read-only folder is written (exit %d): %s", rc, out);
    else
        CHECK(rc == 2 && strstr(out, "--save") && strstr(out, "cannot create a file"),
              "a read-only folder is refused before training (exit %d): %s", rc, out);
    chmod(ro, 0700);
}

/* Damaged checkpoints and other flags: refused, naming the file or flag;
 * nothing trains. */
static void test_refused(void)
{
    char ck[300], bad[300], file[400], cmd[1000];
    path(ck, sizeof ck, "refused");
    path(bad, sizeof bad, "bad");
    const char *save[] = {GPT, "12", "--save", ck, NULL};
    int rc = run(save, NULL, 0);
    CHECK(rc == 0, "a checkpoint (exit %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", bad, ck, bad);
    const char *resume[] = {GPT, "12", "--resume", bad, NULL};
    const char *wider[] = {GPT, "12", "--resume", ck, "--width", "32", NULL};
    const char *shorter[] = {GPT, "8", "--resume", ck, NULL};
    rc = run(wider, NULL, 0);
    CHECK(rc == 1 && strstr(out, "was made with --width 16; this run has --width 32"),
          "another --width is refused naming it (exit %d): %s", rc, out);
    rc = run(shorter, NULL, 0);
    CHECK(rc == 1 && strstr(out, "was made with --steps 12; this run has --steps 8"),
          "another --steps is refused naming it (exit %d): %s", rc, out);

    CHECK(system(cmd) == 0, "a copy to damage");
    snprintf(file, sizeof file, "%s/session", bad);
    CHECK(truncate(file, 1000) == 0, "truncate its session file");
    rc = run(resume, NULL, 0);
    CHECK(rc == 1 && strstr(out, file) && strstr(out, "truncated or damaged") &&
              !strstr(out, "step "),
          "a truncated session file is refused naming it (exit %d): %s", rc, out);

    CHECK(system(cmd) == 0, "a copy to damage");
    snprintf(file, sizeof file, "%s/state", bad);
    FILE *f = fopen(file, "r+");
    CHECK(f && fseek(f, 30, SEEK_SET) == 0 && fputc('9', f) != EOF && fclose(f) == 0,
          "change a byte of its state");
    rc = run(resume, NULL, 0);
    CHECK(rc == 1 && strstr(out, file) && strstr(out, "damaged"),
          "a changed state file is refused naming it (exit %d): %s", rc, out);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", bad);
    CHECK(system(cmd) == 0, "remove the copy");
    rc = run(resume, NULL, 0);
    CHECK(rc == 1 && strstr(out, "--resume") && strstr(out, "cannot read"),
          "a missing folder is refused naming it (exit %d): %s", rc, out);
}

/* Two runs saving to one folder at once (each saves at every evaluation):
 * each ends with a complete save or says another process was saving
 * there; the folder is one complete checkpoint that resumes, with no stage
 * left beside it. */
static void test_two_savers(void)
{
    char ck[300], log_a[300], log_b[300];
    path(ck, sizeof ck, "shared");
    const char *a[] = {"gpt", "--data", corpus, "--layers", "1", "--heads", "2", "--width", "16",
                       "--context", "8", "--batch", "4", "--eval-every", "1", "--eval-iters", "1",
                       "--threads", "1", "--quiet", "--sample", "0", "--steps", "40", "--save", ck,
                       NULL};
    snprintf(log_a, sizeof log_a, "%s", log_path);
    path(log_b, sizeof log_b, "out-b.txt");
    pid_t pa = start(a, NULL, 0);
    snprintf(log_path, sizeof log_path, "%s", log_b);
    pid_t pb = start(a, NULL, 0);
    int rb = finish(pb);
    static char out_b[1 << 16];
    snprintf(out_b, sizeof out_b, "%s", out);
    snprintf(log_path, sizeof log_path, "%s", log_a);
    int ra = finish(pa);
    CHECK((ra == 0 || (ra == 1 && strstr(out, "another process is saving there now"))) &&
              (rb == 0 || (rb == 1 && strstr(out_b, "another process is saving there now"))),
          "each saves or is told another saves there (exits %d, %d):\n%s\n---\n%s", ra, rb, out,
          out_b);
    const char *resume[] = {"gpt", "--data", corpus, "--layers", "1", "--heads", "2", "--width",
                            "16", "--context", "8", "--batch", "4", "--eval-every", "1",
                            "--eval-iters", "1", "--threads", "1", "--quiet", "--sample", "0",
                            "--steps", "40", "--resume", ck, NULL};
    int rc = run(resume, NULL, 0);
    CHECK(rc == 0 && strstr(out, "resumed from '"), "the folder resumes (exit %d): %s", rc, out);
    CHECK(test_stage_files_in(dir) == 0, "no stage left");
}

/* hetex resnet stopped by Ctrl-C within its first epoch (after step 3 of
 * 5) and within its second (the hook's 5th step is the first epoch's
 * last, so it stops after step 6), then resumed: the last checkpoint and
 * every step's loss and lr are the uninterrupted run's; other flags are
 * refused naming the flag. */
static void test_resnet(void)
{
#define RESNET "resnet", "--data", fashion, "--train-limit", "40", "--test-limit", "8", \
    "--batch", "8", "--epochs", "2", "--width", "4", "--blocks", "1", "--quiet", "--threads", \
    "1", "--warmup", "3"
    char full[300], ck[300], full_m[300], ck_m[300], where[64];
    path(full, sizeof full, "resnet-full");
    path(ck, sizeof ck, "resnet");
    path(full_m, sizeof full_m, "resnet-full.jsonl");
    path(ck_m, sizeof ck_m, "resnet.jsonl");
    const char *straight[] = {RESNET, "--save", full, "--metrics", full_m, NULL};
    const char *stopped[] = {RESNET, "--save", ck, "--metrics", ck_m, NULL};
    const char *resumed[] = {RESNET, "--resume", ck, "--save", ck, "--metrics", ck_m, NULL};
    int rc = run(straight, NULL, 0);
    CHECK(rc == 0, "the uninterrupted run (exit %d): %s", rc, out);
    static const char *const at[] = {"3", "5"};
    static const int epoch[] = {1, 2}, step[] = {3, 6};
    static char a[1 << 14], b[1 << 14];
    static const char *const step_keys[] = {"step", "loss", "lr", NULL};
    for (int i = 0; i < 2; i++) {
        remove(ck_m);
        rc = run(stopped, at[i], 0);
        snprintf(where, sizeof where, "at epoch %d, step %d of 10; saved", epoch[i], step[i]);
        CHECK(rc == 130 && strstr(out, where), "Ctrl-C %s (exit %d): %s", where, rc, out);
        rc = run(resumed, NULL, 0);
        CHECK(rc == 0 && strstr(out, "resumed from '") && same_checkpoint(full, ck),
              "resumed from epoch %d step %d: the uninterrupted run's checkpoint (exit %d): %s",
              epoch[i], step[i], rc, out);
        int na = numbers_of(full_m, "step", step_keys, a, sizeof a);
        int nb = numbers_of(ck_m, "step", step_keys, b, sizeof b);
        CHECK(na == 10 && nb == 10 && !strcmp(a, b), "every step's loss and lr as if never "
              "stopped (%d and %d lines):\n%s---\n%s", na, nb, a, b);
    }
    const char *wider[] = {RESNET, "--resume", ck, "--width", "8", NULL};
    rc = run(wider, NULL, 0);
    CHECK(rc == 1 && strstr(out, "was made with --width 4; this run has --width 8"),
          "another --width is refused naming it (exit %d): %s", rc, out);
#undef RESNET
}

/* hetex widedeep stopped by Ctrl-C in its second epoch: it says the epoch
 * is not saved and that the folder holds the first; resumed, it ends with
 * the uninterrupted run's checkpoint, byte for byte. */
static void test_widedeep(void)
{
    char data[300], full[300], ck[300], src[600], part[400], other[400];
    const char *from = getenv("HX_TEST_SRC");
    snprintf(src, sizeof src, "%s/data/adult", from ? from : ".");
    path(data, sizeof data, "adult");
    path(full, sizeof full, "wd-full");
    path(ck, sizeof ck, "wd");
    CHECK(test_adult_folder(data, src, NULL, 40, 40, NULL), "a 40-row Adult folder");
#define WD "widedeep", "--data", data, "--batch", "16", "--epochs", "3", "--quiet", "--threads", "1"
    const char *straight[] = {WD, "--save", full, NULL};
    const char *stopped[] = {WD, "--save", ck, NULL};
    const char *resumed[] = {WD, "--resume", ck, "--save", ck, NULL};
    int rc = run(straight, NULL, 0);
    CHECK(rc == 0, "the uninterrupted run (exit %d): %s", rc, out);
    rc = run(stopped, "3", 0); /* 2 steps an epoch: in epoch 2 */
    CHECK(rc == 130 && strstr(out, "interrupted (Ctrl-C) in epoch 2, which is not saved; '") &&
              strstr(out, "' holds the epochs before it"),
          "Ctrl-C in epoch 2 (exit %d): %s", rc, out);
    rc = run(resumed, NULL, 0);
    bool same = rc == 0;
    static const char *const parts[] = {"session", "deep", "wide", "meta"};
    for (int k = 0; k < 4; k++) {
        snprintf(part, sizeof part, "%s/%s", ck, parts[k]);
        snprintf(other, sizeof other, "%s/%s", full, parts[k]);
        same = same && test_same_file(part, other);
    }
    CHECK(same, "resumed: the uninterrupted run's checkpoint (exit %d): %s", rc, out);
#undef WD
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    snprintf(corpus, sizeof corpus, "%s/data/tinyshakespeare/input.txt", src ? src : ".");
    snprintf(fashion, sizeof fashion, "%s/data/fashion-mnist", src ? src : ".");
    if (!test_make_tmpdir(dir, sizeof dir, "hx_test_cli_resume")) return 1;
    snprintf(log_path, sizeof log_path, "%s/out.txt", dir);
    return 0;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"resume_bitwise", test_resume_bitwise},
    {"kill_during_save", test_kill_during_save},
    {"sigint", test_sigint},
    {"full_disk", test_full_disk},
    {"refused", test_refused},
    {"two_savers", test_two_savers},
    {"resnet", test_resnet},
    {"widedeep", test_widedeep},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "cli_resume", cases, TEST_COUNT(cases), &o);
}
