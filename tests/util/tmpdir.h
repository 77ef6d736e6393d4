/* Temporary directories for the tests that write files. */
#ifndef HX_TEST_TMPDIR_H
#define HX_TEST_TMPDIR_H

#include <stdbool.h>
#include <stddef.h>

/* Makes a fresh directory /tmp/<name>-XXXXXX and writes its path into dir
 * (size bytes); false, with the reason on stderr, when it cannot. */
bool test_make_tmpdir(char *dir, size_t size, const char *name);

/* Removes dir and everything below it; says on stderr what it could not. */
void test_remove_tree(const char *dir);

/* Entries of directory dir other than those starting with '.' (0 when it
 * cannot be opened). */
int test_files_in(const char *dir);

/* Entries of dir that are stage files of a save ("*.stage-*", "*.tmp"). */
int test_stage_files_in(const char *dir);

#endif
