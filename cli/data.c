/* The bundled data a command reads by default: found from the current
 * folder (a source tree), beside the binary's tree (build/hetex run from
 * anywhere) or where `./build.sh install` puts it (PREFIX/share/hetex). */
#include "cli/cli.h"

#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cli_data_path(const char *rel, char *buf, size_t n)
{
    struct stat sb;
    if (!stat(rel, &sb)) return rel;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return rel;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return rel;
    *slash = 0; /* the binary's folder: PREFIX/bin, or build/ */
    static const char *const beside[] = {"../share/hetex", ".."};
    for (size_t i = 0; i < sizeof beside / sizeof beside[0]; i++) {
        snprintf(buf, n, "%s/%s/%s", exe, beside[i], rel);
        if (!stat(buf, &sb)) return buf;
    }
    return rel;
}
