/* The hetex CLI as a user meets it: every bad input of the table exits
 * non-zero with a message naming the flag, the value and what is allowed
 * (or the file and what is wrong with it), before any training; the help,
 * the version; progress on a terminal (a pty through script(1)) and in a
 * pipe. Runs the built `hetex` (tests/util/hetex_run.h). */
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "test_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[128], data_src[512];
static char d_empty[256], d_garbage[256], d_few[256], d_one_class[256], d_gpt_short[256];
static char a_file[256], shakespeare[512];

/* Runs hetex ARGS into out; its exit code. */
static int run(const char *const *args, char *out, size_t n)
{
    char log[300];
    snprintf(log, sizeof log, "%s/out.txt", dir);
    return test_hetex_run(args, NULL, log, out, n);
}

/* Folder dir/name, its path into dst: see test_adult_folder. */
static bool make_data(char *dst, size_t n, const char *name, const char *train_text, int train_rows,
                      int test_rows, const char *test_label)
{
    snprintf(dst, n, "%s/%s", dir, name);
    return test_adult_folder(dst, data_src, train_text, train_rows, test_rows, test_label);
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    snprintf(data_src, sizeof data_src, "%s/data/adult", src ? src : ".");
    snprintf(shakespeare, sizeof shakespeare, "%s/data/tinyshakespeare/input.txt", src ? src : ".");
    if (!test_make_tmpdir(dir, sizeof dir, "hx_test_cli")) return 1;
    snprintf(a_file, sizeof a_file, "%s/a_file", dir);
    snprintf(d_gpt_short, sizeof d_gpt_short, "%s/short.txt", dir);
    bool ok = make_data(d_empty, sizeof d_empty, "empty", "", 0, 50, NULL) &&
              make_data(d_garbage, sizeof d_garbage, "garbage", "hello world\nnot,a,row\n\n", 0,
                        50, NULL) &&
              make_data(d_few, sizeof d_few, "few", NULL, 10, 50, NULL) &&
              make_data(d_one_class, sizeof d_one_class, "one_class", NULL, 300, 40, "<=50K") &&
              test_write_text(a_file, "x") && test_write_text(d_gpt_short, "to be or not\n");
    if (!ok) fprintf(stderr, "test_cli: cannot make the data folders under %s\n", dir);
    return ok ? 0 : 1;
}

static void teardown(void) { test_remove_tree(dir); }

/* One row of the table: the arguments (up to 8; "$X" names a path made by
 * setup), the exit code, and text the output must hold (up to 4). */
typedef struct cli_case {
    const char *args[9];
    int rc;
    const char *want[4];
} cli_case;

/* a with a leading "$NAME" replaced by the path setup made (into buf). */
static const char *expand(const char *a, char *buf, size_t n)
{
    static const struct { const char *name; const char *path; } vars[] = {
        {"$EMPTY", d_empty}, {"$GARBAGE", d_garbage}, {"$FEW", d_few},
        {"$ONE_CLASS", d_one_class}, {"$DIR", dir}, {"$FILE", a_file}, {"$SHORT", d_gpt_short},
        {"$SHAKESPEARE", shakespeare}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        size_t len = strlen(vars[i].name);
        if (!strncmp(a, vars[i].name, len)) {
            snprintf(buf, n, "%s%s", vars[i].path, a + len);
            return buf;
        }
    }
    return a;
}

static void check_table(const cli_case *cases, int n)
{
    static char out[1 << 16];
    for (int i = 0; i < n; i++) {
        const char *args[10] = {0};
        char shown[512] = "", bufs[9][512], want[512];
        size_t k = 0;
        for (int j = 0; cases[i].args[j]; j++) {
            args[j] = expand(cases[i].args[j], bufs[j], sizeof bufs[j]);
            k += (size_t)snprintf(shown + k, sizeof shown - k, " %s", args[j]);
            if (k >= sizeof shown) k = sizeof shown - 1;
        }
        int rc = run(args, out, sizeof out);
        bool ok = rc == cases[i].rc;
        for (int w = 0; w < 4 && cases[i].want[w]; w++)
            ok = ok && strstr(out, expand(cases[i].want[w], want, sizeof want));
        CHECK(ok, "hetex%s: exit %d (want %d), output:\n%s", shown, rc, cases[i].rc, out);
    }
}

/* Flags that do not parse whole or fall outside their range. */
static void test_bad_flags(void)
{
    static const cli_case cases[] = {
        {{"widedeep", "--batch", "1e3"}, 2, {"--batch", "'1e3'", "whole number from 1 to 1048576"}},
        {{"widedeep", "--epochs", "2x"}, 2, {"--epochs", "'2x'", "whole number"}},
        {{"widedeep", "--seed", "abc"}, 2, {"--seed", "'abc'", "from 0 to 18446744073709551615"}},
        {{"widedeep", "--seed", "-1"}, 2, {"--seed", "'-1'"}},
        {{"widedeep", "--lr-dense", "abc"}, 2, {"--lr-dense", "'abc'", "above 0"}},
        {{"widedeep", "--lr-dense=0"}, 2, {"--lr-dense", "'0'", "out of range"}},
        {{"widedeep", "--hidden", "100"}, 2, {"--hidden", "'100'", "2 whole numbers"}},
        {{"widedeep", "--accelerator", "gpu"}, 2, {"--accelerator", "'gpu'", "auto|cuda|emu|none"}},
        {{"widedeep", "--batch"}, 2, {"--batch needs a value"}},
        {{"widedeep", "--bogus", "1"}, 2, {"unknown option --bogus"}},
        {{"widedeep", "stray"}, 2, {"unexpected argument 'stray'"}},
        {{"widedeep", "--quiet=yes"}, 2, {"--quiet takes no value"}},
        {{"gpt", "--lr", "abc"}, 2, {"--lr", "'abc'"}},
        {{"gpt", "--steps", "1.5"}, 2, {"--steps", "'1.5'", "whole number"}},
        {{"gpt", "--batch", "0"}, 2, {"--batch", "'0'", "from 1 to"}},
        {{"gpt", "--dropout", "nan"}, 2, {"--dropout", "'nan'", "not a number"}},
        {{"gpt", "--max-device-memory", "16Q"}, 2, {"--max-device-memory", "'16Q'", "byte count"}},
        {{"gpt", "--width", "100", "--heads", "3"}, 2, {"--width 100", "--heads 3"}},
        {{"gpt", "--dtype", "f8"}, 2, {"--dtype", "f32|bf16|f16"}},
        {{"mlp", "--steps", "-1"}, 2, {"--steps", "'-1'", "from 1 to"}},
        {{"mlp", "--lr", "0x10"}, 2, {"--lr", "'0x10'", "not a number"}},
        {{"memreplay", "t", "--cap", "0"}, 2, {"--cap", "'0'", "byte count"}},
        {{"memreplay"}, 2, {"no TRACE given"}},
        {{"nonsense"}, 2, {"unknown command 'nonsense'"}},
        {{"help", "nonsense"}, 2, {"unknown command 'nonsense'"}},
    };
    check_table(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Output paths that cannot be written: refused before any training. */
static void test_bad_outputs(void)
{
    static const cli_case cases[] = {
        {{"widedeep", "--save", "/nonexistent/ck"}, 2, {"--save", "/nonexistent", "does not exist"}},
        {{"widedeep", "--trace", "$DIR"}, 2, {"--trace", "$DIR", "is a folder"}},
        {{"widedeep", "--curve", "/proc/hetex-curve.csv"}, 2, {"--curve", "cannot create"}},
    };
    check_table(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Input that cannot train: an error naming the file and what is wrong. */
static void test_bad_input(void)
{
    static const cli_case cases[] = {
        {{"widedeep", "--data", "$EMPTY", "--threads", "2"}, 1, {"$EMPTY/adult.data", "has no rows"}},
        {{"widedeep", "--data", "$GARBAGE", "--threads", "2"}, 1,
         {"$GARBAGE/adult.data", "no good row", "wrong number of columns"}},
        {{"widedeep", "--data", "$FEW", "--threads", "2"}, 1,
         {"has 10 rows, fewer than one batch of 256", "--batch 10"}},
        {{"widedeep", "--data", "$ONE_CLASS", "--threads", "2", "--batch", "64"}, 1,
         {"$ONE_CLASS/adult.test", "one class"}},
        {{"widedeep", "--data", "/nonexistent"}, 1, {"/nonexistent/adult.data"}},
        {{"gpt", "--data", "$SHORT"}, 1, {"$SHORT", "too short"}},
    };
    check_table(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* A library error in the CLI's words: no CUDA device names --accelerator,
 * not HX_ACCELERATOR_EMU (where a GPU is, the run just trains). */
static void test_library_words(void)
{
    static char out[1 << 16];
    const char *args[] = {"widedeep", "--data", d_few, "--batch", "4", "--epochs", "1",
                          "--accelerator", "cuda", "--quiet", NULL};
    int rc = run(args, out, sizeof out);
    CHECK(rc == 0 || (rc == 1 && strstr(out, "--accelerator auto") && !strstr(out, "HX_ACCELERATOR")),
          "--accelerator cuda without a device (exit %d):\n%s", rc, out);
}

static void test_help_version(void)
{
    static const cli_case cases[] = {
        {{"--version"}, 0, {"hetex 0."}},
        {{"help"}, 0, {"widedeep", "gpt", "memreplay"}},
        {{"help", "gpt"}, 0, {"usage: hetex gpt", "--max-device-memory"}},
        {{"widedeep", "--help"}, 0, {"usage: hetex widedeep", "--save"}},
        {{"mlp", "-h"}, 0, {"usage: hetex mlp"}},
    };
    check_table(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* A tiny gpt run whose progress shows: its command line. */
#define TINY_GPT "gpt --data $SHAKESPEARE --layers 1 --heads 2 --width 16 --context 16 --batch 4 --steps 60 " \
                 "--eval-every 30 --eval-iters 1 --threads 1 --progress-interval 0.001"

/* In a pipe: "progress:" lines with percent, ETA and tokens/s, no carriage
 * returns; --quiet: none. */
static void test_progress_pipe(void)
{
    static char out[1 << 16];
    const char *args[32] = {0};
    char line[] = TINY_GPT;
    int n = 0;
    char bufs[30][512];
    for (char *t = strtok(line, " "); t && n < 30; t = strtok(NULL, " ")) {
        args[n] = expand(t, bufs[n], sizeof bufs[n]);
        n++;
    }
    int rc = run(args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "progress: steps") && strstr(out, "% ") && strstr(out, "ETA") &&
          strstr(out, "tokens/s") && !strchr(out, '\r') && strstr(out, "summary: 60 steps"),
          "piped progress lines (exit %d):\n%s", rc, out);
    args[n] = "--quiet";
    rc = run(args, out, sizeof out);
    CHECK(rc == 0 && !strstr(out, "progress:") && strstr(out, "summary:"),
          "--quiet: no progress lines (exit %d):\n%s", rc, out);
}

/* On a terminal (script(1) gives the command a pty): a bar redrawn with
 * carriage returns. */
static void test_progress_tty(void)
{
    if (system("command -v script >/dev/null 2>&1")) {
        test_skip("no script(1) (bsdutils) to run hetex on a pseudo-terminal");
        return;
    }
    char cmd[2048], log[300];
    snprintf(log, sizeof log, "%s/tty.txt", dir);
    char gpt[600];
    snprintf(gpt, sizeof gpt, "%s", TINY_GPT);
    char *at = strstr(gpt, "$SHAKESPEARE");
    *at = 0; /* the command line with the corpus's path in place of $SHAKESPEARE */
    snprintf(cmd, sizeof cmd, "script -qec '%s %s%s%s' /dev/null >%s 2>&1 </dev/null",
             test_hetex_path(), gpt, shakespeare, at + strlen("$SHAKESPEARE"), log);
    int rc = system(cmd);
    static char out[1 << 16];
    FILE *f = fopen(log, "r");
    size_t k = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[k] = 0;
    if (f) fclose(f);
    CHECK(rc == 0 && strstr(out, "\r") && strstr(out, "[#") && strstr(out, "ETA") &&
          !strstr(out, "progress:"), "a bar on a pty (exit %d):\n%s", rc, out);
}

static const test_case cases[] = {
    {"bad_flags", test_bad_flags},
    {"bad_outputs", test_bad_outputs},
    {"bad_input", test_bad_input},
    {"library_words", test_library_words},
    {"help_version", test_help_version},
    {"progress_pipe", test_progress_pipe},
    {"progress_tty", test_progress_tty},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "cli", cases, TEST_COUNT(cases), &o);
}
