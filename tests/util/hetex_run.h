/* Running the built `hetex` from a test, and the small data folders its
 * commands read. */
#ifndef HX_TEST_HETEX_RUN_H
#define HX_TEST_HETEX_RUN_H

#include <stdbool.h>
#include <stddef.h>

/* The hetex binary: $HX_HETEX (ctest sets it), else "build/hetex". */
const char *test_hetex_path(void);

/* Runs `hetex ARGS...` (args NULL-terminated, at most 30) with stdin from
 * /dev/null and $HX_CLI_CRASH_AT set to crash_at (NULL: unset); stdout and
 * stderr go to the file log, then into out (n bytes, NUL-terminated).
 * Returns the exit code, or minus the signal that killed it. */
int test_hetex_run(const char *const *args, const char *crash_at, const char *log, char *out, size_t n);

/* Writes text to path. */
bool test_write_text(const char *path, const char *text);

/* The first n rows of src into dst (a header line without a comma, as
 * adult.test's first, is copied and not counted); with `only`, just rows
 * holding that text (a label such as "<=50K"). */
bool test_copy_rows(const char *src, const char *dst, int n, const char *only);

/* Folder dst (made) with adult.data (train_text, or its first train_rows
 * rows of src_dir's) and adult.test (test_rows rows of src_dir's, of
 * test_label only when not NULL). */
bool test_adult_folder(const char *dst, const char *src_dir, const char *train_text,
                      int train_rows, int test_rows, const char *test_label);

/* One row of a table of command lines: the arguments (up to 15; an
 * argument or wanted text starting with a variable's name has it replaced
 * by its value), the exit code, and texts the output must hold (up to 4). */
typedef struct test_hetex_case {
    const char *args[16];
    int rc;
    const char *want[4];
} test_hetex_case;
typedef struct test_hetex_var {
    const char *name, *value; /* "$DATA", "/tmp/x/data" */
} test_hetex_var;
/* Runs each row (output through the file log) and CHECKs its exit code and
 * texts, naming the command line and showing the output when they differ. */
void test_hetex_table(const test_hetex_case *cases, int n, const test_hetex_var *vars,
                      int n_vars, const char *log);
/* a with a leading variable's name replaced by its value (into buf). */
const char *test_hetex_expand(const char *a, const test_hetex_var *vars, int n_vars, char *buf,
                              size_t n);

/* Files a and b hold the same bytes. */
bool test_same_file(const char *a, const char *b);

#endif
