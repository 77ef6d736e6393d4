/* The hetex commands on input that cannot train (each refused with a
 * message naming the file and what is wrong), their first lines (which
 * accelerator, why, the cap), the guards before training (a model over
 * the device cap, a step over the host's memory), library errors in the
 * CLI's words, and progress in a pipe and on a terminal (a pty through
 * script(1)). Runs the built `hetex` (tests/util/hetex_run.h). */
#include "cli/cli.h"
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "test_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[128], data_src[512], log_path[300];
static char d_empty[256], d_garbage[256], d_few[256], d_one_class[256], d_gpt_short[256];
static char shakespeare[512];

static void table(const test_hetex_case *cases, int n)
{
    const test_hetex_var vars[] = {
        {"$EMPTY", d_empty}, {"$GARBAGE", d_garbage}, {"$FEW", d_few},
        {"$ONE_CLASS", d_one_class}, {"$SHORT", d_gpt_short}, {"$SHAKESPEARE", shakespeare}};
    test_hetex_table(cases, n, vars, (int)(sizeof vars / sizeof vars[0]), log_path);
}

static int run(const char *const *args, char *out, size_t n)
{
    return test_hetex_run(args, NULL, log_path, out, n);
}

/* Folder dir/name, its path into dst: see test_adult_folder. */
static bool make_data(char *dst, size_t n, const char *name, const char *train_text, int train_rows,
                      int test_rows, const char *test_label)
{
    snprintf(dst, n, "%s/%s", dir, name);
    return test_adult_folder(dst, data_src, train_text, train_rows, test_rows, test_label);
}

/* Input that cannot train: an error naming the file and what is wrong. */
static void test_bad_input(void)
{
    static const test_hetex_case cases[] = {
        {{"widedeep", "--data", "$EMPTY", "--threads", "2"}, 1, {"$EMPTY/adult.data", "has no rows"}},
        {{"widedeep", "--data", "$GARBAGE", "--threads", "2"}, 1,
         {"$GARBAGE/adult.data", "no good row", "wrong number of columns"}},
        {{"widedeep", "--data", "$FEW", "--threads", "2"}, 1,
         {"has 10 rows, fewer than one batch of 256", "--batch 10"}},
        {{"widedeep", "--data", "$ONE_CLASS", "--threads", "2", "--batch", "64"}, 1,
         {"$ONE_CLASS/adult.test", "one class"}},
        {{"widedeep", "--data", "/nonexistent"}, 1, {"/nonexistent/adult.data", "give --data DIR"}},
        {{"gpt", "--data", "/nonexistent/x.txt"}, 1, {"/nonexistent/x.txt", "--data PATH"}},
        {{"gpt", "--data", "$SHORT"}, 1, {"$SHORT", "too short"}},
    };
    table(cases, (int)(sizeof cases / sizeof cases[0]));
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

/* The first lines say which accelerator, why, and the cap in force. */
static void test_first_lines(void)
{
    static const test_hetex_case cases[] = {
        {{"widedeep", "--data", "$FEW", "--batch", "4", "--epochs", "1", "--accelerator", "none",
          "--quiet"}, 0, {"hetex widedeep: accelerator: none (asked for (--accelerator none)"}},
        {{"widedeep", "--data", "$FEW", "--batch", "4", "--epochs", "1", "--accelerator", "emu",
          "--max-device-memory", "3M", "--quiet"}, 0,
         {"hetex widedeep: accelerator: emu, an emulated accelerator on the host's cores (asked "
          "for (--accelerator emu)); device memory cap 3.0 MiB"}},
        {{"mlp", "--steps", "1", "--every", "1"}, 0, {"hetex mlp: accelerator: "}},
        {{"gpt", "--data", "$SHAKESPEARE", "--steps", "1", "--eval-iters", "1", "--layers", "1",
          "--accelerator", "emu", "--quiet"}, 0,
         {"hetex gpt: accelerator: emu, an emulated accelerator on the host's cores (asked for "
          "(--accelerator emu)); device memory cap 8.0 GiB"}},
    };
    table(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Guards before training: a model that does not fit the device cap is
 * refused naming what would fit; a step whose host memory exceeds what is
 * available is refused with the estimate (cli_check_host_memory, on a
 * session's real accelerator and a planned size past any machine's). */
static void test_guards(void)
{
    static const test_hetex_case cases[] = {
        {{"gpt", "--data", "$SHAKESPEARE", "--max-device-memory", "6M", "--layers", "1", "--width",
          "64", "--context", "64", "--batch", "32", "--eval-iters", "1"}, 1,
         {"does not fit the device memory cap (--max-device-memory 6.0 MiB)",
          "These would fit: --offload-config auto_offload=true"}},
    };
    table(cases, (int)(sizeof cases / sizeof cases[0]));

    hx_graph *g = hx_graph_create();
    int64_t n = 4;
    hx_tensor_set_name(hx_relu(g, hx_graph_input(g, "x", HX_DTYPE_F32, 1, &n)), "y");
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_EMU;
    hx_session *s = NULL;
    CHECK(hx_session_create(g, &cfg, &s) == HX_OK, "a session: %s", hx_last_error());
    size_t have = cli_host_available();
    hx_memory_stats small = {.transient_planned_bytes = 1 << 20},
                    huge = {.transient_planned_bytes = (size_t)1 << 40,
                            .device_transient_planned_bytes = (size_t)1 << 40};
    CHECK(have > 0 && cli_check_host_memory("test", &small, s, "hint"),
          "1 MiB fits (%zu bytes available)", have);
    fflush(stderr);
    CHECK(!cli_check_host_memory("test", &huge, s, "lower --batch"),
          "2 TiB is refused (%zu bytes available)", have);
    hx_session_free(s);
    hx_graph_free(g);
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
    const test_hetex_var vars[] = {{"$SHAKESPEARE", shakespeare}};
    for (char *t = strtok(line, " "); t && n < 30; t = strtok(NULL, " ")) {
        args[n] = test_hetex_expand(t, vars, 1, bufs[n], sizeof bufs[n]);
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
    CHECK(rc == 0 && strstr(out, "\r") && strstr(out, "steps [") && strstr(out, "ETA") &&
          !strstr(out, "progress:"), "a bar on a pty (exit %d):\n%s", rc, out);
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    snprintf(data_src, sizeof data_src, "%s/data/adult", src ? src : ".");
    snprintf(shakespeare, sizeof shakespeare, "%s/data/tinyshakespeare/input.txt", src ? src : ".");
    if (!test_make_tmpdir(dir, sizeof dir, "hx_test_cli_runs")) return 1;
    snprintf(log_path, sizeof log_path, "%s/out.txt", dir);
    snprintf(d_gpt_short, sizeof d_gpt_short, "%s/short.txt", dir);
    bool ok = make_data(d_empty, sizeof d_empty, "empty", "", 0, 50, NULL) &&
              make_data(d_garbage, sizeof d_garbage, "garbage", "hello world\nnot,a,row\n\n", 0,
                        50, NULL) &&
              make_data(d_few, sizeof d_few, "few", NULL, 10, 50, NULL) &&
              make_data(d_one_class, sizeof d_one_class, "one_class", NULL, 300, 40, "<=50K") &&
              test_write_text(d_gpt_short, "to be or not\n");
    if (!ok) fprintf(stderr, "test_cli_runs: cannot make the data folders under %s\n", dir);
    return ok ? 0 : 1;
}

/* The deep table on disk: its cache and disk statistics after every
 * epoch; a cache size the strict parser refuses names the flag. */
static void test_table_on_disk(void)
{
    static char out[1 << 16];
    char rows[300];
    snprintf(rows, sizeof rows, "%s/deep.rows", dir);
    const char *args[] = {"widedeep", "--data", d_few, "--batch", "4", "--epochs", "2", "--quiet",
                          "--deep-table-on-disk", rows, "--deep-cache-bytes", "16K", NULL};
    int rc = run(args, out, sizeof out);
    const char *first = strstr(out, "deep table on disk: cache ");
    CHECK(rc == 0 && first && strstr(first + 1, "deep table on disk: cache ") && strstr(out, "hit rate ") &&
              strstr(out, "rows read, ") && strstr(out, "MB written, I/O wait "),
          "one line of cache and disk statistics per epoch (exit %d):\n%s", rc, out);
    const char *bad[] = {"widedeep", "--data", d_few, "--deep-table-on-disk", rows, "--deep-cache-bytes",
                         "12", NULL};
    rc = run(bad, out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--deep-cache-bytes"), "a cache of 12 bytes is refused naming the flag (exit "
          "%d):\n%s", rc, out);
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"bad_input", test_bad_input},
    {"library_words", test_library_words},
    {"first_lines", test_first_lines},
    {"guards", test_guards},
    {"progress_pipe", test_progress_pipe},
    {"progress_tty", test_progress_tty},
    {"table_on_disk", test_table_on_disk},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "cli_runs", cases, TEST_COUNT(cases), &o);
}
