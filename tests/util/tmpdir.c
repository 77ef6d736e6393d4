#define _XOPEN_SOURCE 700 /* nftw */
#include "tmpdir.h"

#include <dirent.h>
#include <string.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

bool test_make_tmpdir(char *dir, size_t size, const char *name)
{
    if (snprintf(dir, size, "/tmp/%s-XXXXXX", name) >= (int)size) {
        fprintf(stderr, "test_make_tmpdir: /tmp/%s-XXXXXX does not fit %zu bytes\n", name, size);
        return false;
    }
    if (mkdtemp(dir)) return true;
    perror(dir);
    return false;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    if (remove(path)) perror(path);
    return 0;
}

void test_remove_tree(const char *dir)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

int test_files_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

int test_stage_files_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        n += strstr(e->d_name, ".stage-") || (len > 4 && !strcmp(e->d_name + len - 4, ".tmp"));
    }
    if (d) closedir(d);
    return n;
}
