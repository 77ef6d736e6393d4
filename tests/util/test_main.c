#include "test_main.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char skip_reason[256];
static const char *skipped_because; /* NULL, or skip_reason: the running case skipped */

void test_skip(const char *why)
{
    snprintf(skip_reason, sizeof skip_reason, "%s", why ? why : "skipped");
    skipped_because = skip_reason;
}

static void list(FILE *f, const test_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) fprintf(f, "%s\n", cases[i].name);
}

static int usage(FILE *f, const char *prog, const test_options *opts, int code)
{
    fprintf(f, "usage: %s [--case NAME]... [--list] [--help]%s\n"
               "  --case NAME  run only this case (repeatable; --list names them)\n"
               "  --list       print the case names, one a line\n"
               "  --help       this text\n%s",
            prog, opts->flag ? " [flags]" : "", opts->flags_help ? opts->flags_help : "");
    return code;
}

static long find(const test_case *cases, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(cases[i].name, name)) return (long)i;
    return -1;
}

/* One case: its line of counts; false when it checked nothing without
 * saying it skipped. */
static bool run_case(const char *suite, const test_case *c, int *n_skipped)
{
    int checks = hx_test_checks, failures = hx_test_failures;
    skipped_because = NULL;
    c->run();
    checks = hx_test_checks - checks;
    failures = hx_test_failures - failures;
    if (skipped_because) {
        printf("%s/%s: skipped (%s), %d checks, %d failed\n", suite, c->name, skipped_because,
               checks, failures);
        ++*n_skipped;
        return true;
    }
    printf("%s/%s: %d checks, %d failed\n", suite, c->name, checks, failures);
    if (checks > 0) return true;
    fprintf(stderr, "FAIL %s/%s: the case ran no check (a test that checks nothing "
                    "cannot pass)\n", suite, c->name);
    return false;
}

int test_main_with(int argc, char **argv, const char *suite, const test_case *cases, size_t n,
                   const test_options *opts)
{
    static const test_options none;
    if (!opts) opts = &none;
    bool *chosen = calloc(n ? n : 1, sizeof *chosen), any_chosen = false;
    if (!chosen) return 1;
    int code = 0;
    for (int i = 1; i < argc && !code; i++) {
        const char *a = argv[i];
        int taken;
        if (!strcmp(a, "--list")) {
            list(stdout, cases, n);
            code = -1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            code = usage(stdout, argv[0], opts, -1);
        } else if (!strcmp(a, "--case")) {
            const char *name = i + 1 < argc ? argv[i + 1] : "";
            long k = find(cases, n, name);
            if (k < 0) {
                fprintf(stderr, "%s: no case named '%s'; the cases are:\n", argv[0], name);
                list(stderr, cases, n);
                code = 2;
            } else {
                chosen[k] = any_chosen = true;
                i++;
            }
        } else if (opts->flag && (taken = opts->flag(argc, argv, i)) != 0) {
            if (taken < 0) {
                fprintf(stderr, "%s: bad or missing value for %s\n", argv[0], a);
                code = usage(stderr, argv[0], opts, 2);
            }
            i += taken - 1;
        } else {
            fprintf(stderr, "%s: unknown flag %s\n", argv[0], a);
            code = usage(stderr, argv[0], opts, 2);
        }
    }
    if (code) {
        free(chosen);
        return code < 0 ? 0 : code;
    }
    if (opts->setup && (code = opts->setup()) != 0) {
        free(chosen);
        if (code == TEST_SKIPPED) printf("%s: skipped\n", suite);
        return code;
    }
    int ran = 0, skipped = 0;
    bool each_checked = true;
    for (size_t i = 0; i < n; i++) {
        if (any_chosen && !chosen[i]) continue;
        ran++;
        each_checked &= run_case(suite, &cases[i], &skipped);
    }
    free(chosen);
    if (opts->teardown) opts->teardown();
    printf("%s: %d passed, %d failed\n", suite, hx_test_checks - hx_test_failures,
           hx_test_failures);
    if (hx_test_failures || !each_checked) return 1;
    if (hx_test_checks == 0 && (ran == 0 || skipped < ran)) {
        fprintf(stderr, "FAIL %s: no check ran (a test that checks nothing cannot pass)\n", suite);
        return 1;
    }
    return ran > 0 && skipped == ran ? TEST_SKIPPED : 0;
}

int test_main(int argc, char **argv, const char *suite, const test_case *cases, size_t n)
{
    return test_main_with(argc, argv, suite, cases, n, NULL);
}
