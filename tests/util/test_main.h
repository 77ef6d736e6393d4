/* The runner behind every test program's main: named cases, --list, --case
 * NAME, and the rule that a test which checked nothing fails. */
#ifndef HX_TEST_MAIN_H
#define HX_TEST_MAIN_H

#include <stddef.h>

/* Exit code of a program whose every chosen case was skipped (ctest's
 * SKIP_RETURN_CODE). */
#define TEST_SKIPPED 77

typedef struct test_case {
    const char *name;
    void (*run)(void);
} test_case;

/* What a program may add to the runner; every member may be left out. */
typedef struct test_options {
    /* Before the first case (not for --list or --help); nonzero is the
     * program's exit code (TEST_SKIPPED: the whole program is skipped). */
    int (*setup)(void);
    /* After the last case, when setup ran and returned 0. */
    void (*teardown)(void);
    /* The program's own flags: how many of argv[i..] it takes (0: not one of
     * its flags, -1: one of them with a bad or missing value). */
    int (*flag)(int argc, char **argv, int i);
    const char *flags_help; /* their lines for --help */
} test_options;

#define TEST_COUNT(cases) (sizeof(cases) / sizeof((cases)[0]))

/* Runs the cases named by --case NAME (repeatable), all of them without one,
 * in table order; prints each case's checks and failures, then the suite's
 * "N passed, N failed". --list prints the names, --help the usage. Returns
 * the exit code: 0, 1 when a check failed or a case that ran checked
 * nothing, 2 for a bad command line, TEST_SKIPPED when every case run was
 * skipped. */
int test_main(int argc, char **argv, const char *suite, const test_case *cases, size_t n);
int test_main_with(int argc, char **argv, const char *suite, const test_case *cases, size_t n,
                   const test_options *opts);

/* Marks the running case skipped (a feature not built, no device): it may
 * then end without a check. */
void test_skip(const char *why);

#endif
