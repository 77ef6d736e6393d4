/* Output paths checked before any work, so that an unwritable --trace or a
 * --save into a missing folder fails at once, not after an epoch. A
 * checkpoint folder (CLI_PATH_DIR) that exists must be one (or empty). */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The folder that will hold path ("." for a bare name). */
static void parent_of(const char *path, char *buf, size_t n)
{
    snprintf(buf, n, "%s", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0; /* "dir/" names dir */
    char *slash = strrchr(buf, '/');
    if (!slash) snprintf(buf, n, ".");
    else if (slash == buf) buf[1] = 0;
    else *slash = 0;
}

bool cli_check_output(const char *cmd, const char *flag, const char *path, cli_path_kind kind)
{
    struct stat sb;
    if (!stat(path, &sb)) {
        bool is_dir = S_ISDIR(sb.st_mode);
        if (kind == CLI_PATH_FILE && is_dir) {
            fprintf(stderr, "hetex %s: %s '%s' is a folder; give a file name\n", cmd, flag, path);
            return false;
        }
        if (kind == CLI_PATH_DIR && (!is_dir || cli_ckpt_foreign(path))) {
            fprintf(stderr, "hetex %s: %s '%s' exists and is not a checkpoint folder (no %s "
                    "in it): it would be replaced; give a new folder's name\n", cmd, flag, path,
                    CLI_CKPT_MARK);
            return false;
        }
    }
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "hetex %s: %s '%s': its folder '%s' does not exist; create it first\n",
                cmd, flag, path, dir);
        return false;
    }
    /* Try it: access() says yes to root on a read-only file system. */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.hetex-probe.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno != EEXIST) {
        fprintf(stderr, "hetex %s: %s '%s': cannot create a file in '%s': %s\n", cmd, flag, path,
                dir, strerror(errno));
        return false;
    }
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    if (kind == CLI_PATH_FILE && !stat(path, &sb) && access(path, W_OK)) {
        fprintf(stderr, "hetex %s: %s '%s' cannot be overwritten: %s\n", cmd, flag, path,
                strerror(errno));
        return false;
    }
    return true;
}
