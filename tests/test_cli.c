/* The hetex CLI's flags as a user meets them: every bad flag or output
 * path of the table exits 2 with a message naming the flag, the value and
 * what is allowed, before any work; the help and the version. Runs the
 * built `hetex` (tests/util/hetex_run.h); test_cli_runs runs its commands
 * on bad input. */
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "test_main.h"

#include <stdio.h>
#include <string.h>

static char dir[128], log_path[300];

static void table(const test_hetex_case *cases, int n)
{
    const test_hetex_var vars[] = {{"$DIR", dir}};
    test_hetex_table(cases, n, vars, 1, log_path);
}

/* Flags that do not parse whole or fall outside their range. */
static void test_bad_flags(void)
{
    static const test_hetex_case cases[] = {
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
    table(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Output paths that cannot be written: refused before any training. */
static void test_bad_outputs(void)
{
    static const test_hetex_case cases[] = {
        {{"widedeep", "--save", "/nonexistent/ck"}, 2, {"--save", "/nonexistent", "does not exist"}},
        {{"widedeep", "--trace", "$DIR"}, 2, {"--trace", "$DIR", "is a folder"}},
        {{"widedeep", "--curve", "/proc/hetex-curve.csv"}, 2, {"--curve", "cannot create"}},
    };
    table(cases, (int)(sizeof cases / sizeof cases[0]));
}

static void test_help_version(void)
{
    static const test_hetex_case cases[] = {
        {{"--version"}, 0, {"hetex 0."}},
        {{"help"}, 0, {"widedeep", "gpt", "memreplay"}},
        {{"help", "gpt"}, 0, {"usage: hetex gpt", "--max-device-memory"}},
        {{"widedeep", "--help"}, 0, {"usage: hetex widedeep", "--save"}},
        {{"mlp", "-h"}, 0, {"usage: hetex mlp"}},
    };
    table(cases, (int)(sizeof cases / sizeof cases[0]));
}

static int setup(void)
{
    if (!test_make_tmpdir(dir, sizeof dir, "hx_test_cli")) return 1;
    snprintf(log_path, sizeof log_path, "%s/out.txt", dir);
    return 0;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"bad_flags", test_bad_flags},
    {"bad_outputs", test_bad_outputs},
    {"help_version", test_help_version},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "cli", cases, TEST_COUNT(cases), &o);
}
