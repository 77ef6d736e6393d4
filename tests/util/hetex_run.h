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

/* Files a and b hold the same bytes. */
bool test_same_file(const char *a, const char *b);

#endif
