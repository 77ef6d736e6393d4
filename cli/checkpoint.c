/* Checkpoint folders committed as a set: every file of a save goes into a
 * stage folder "<dir>.stage-<pid>-<n>" beside the checkpoint, locked
 * (flock) while it is written; commit syncs each file and the folder, then
 * swaps it with the old checkpoint in one rename (RENAME_EXCHANGE; a plain
 * rename for the first save), removes the old one and syncs the parent. A
 * kill at any instant leaves the old checkpoint or the new one under the
 * name; what it leaves beside it is a stage no one holds, which the next
 * save removes. A stage someone holds is another saver's: the save is
 * refused, when it starts and again just before the swap (of two savers
 * alive at once, the one whose stage sorts first goes on). */
#define _GNU_SOURCE
#include "cli/cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_crash_point(void)
{
    static long at = -1, count;
    if (at < 0) {
        const char *e = getenv("HX_CLI_CRASH_AT");
        at = e ? strtol(e, NULL, 10) : 0;
    }
    if (at > 0 && ++count == at) raise(SIGKILL);
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p) ? -1 : 0;
}

static int remove_tree(const char *p) { return nftw(p, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void split(const char *path, char *parent, size_t n, const char **base)
{
    snprintf(parent, n, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash) {
        snprintf(parent, n, ".");
        *base = path;
    } else {
        *base = path + (slash - parent) + 1;
        if (slash == parent) slash[1] = 0;
        else *slash = 0;
    }
}

static bool sync_path(const char *p)
{
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && (!fsync(fd) || errno == EINVAL);
    if (fd >= 0) close(fd);
    return ok;
}

/* Removes the stages of base in parent that no one holds; the first one
 * someone holds into live (false). */
static bool sweep(const char *parent, const char *base, const char *own, char *live, size_t n)
{
    DIR *d = opendir(parent);
    if (!d) return true;
    size_t len = strlen(base);
    bool clear = true;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, base, len) || strncmp(e->d_name + len, ".stage-", 7)) continue;
        if (own && !strcmp(e->d_name, own)) continue;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", parent, e->d_name) >= (int)sizeof p) continue;
        int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (!flock(fd, LOCK_EX | LOCK_NB)) {
            remove_tree(p); /* a dead saver's, or an old checkpoint swapped out */
        } else if (clear && (!own || strcmp(e->d_name, own) < 0)) {
            snprintf(live, n, "%s", p);
            clear = false;
        }
        close(fd);
    }
    closedir(d);
    return clear;
}

bool cli_ckpt_foreign(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return false;
    bool entries = false, mark = false;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        entries = true;
        mark |= !strcmp(e->d_name, CLI_CKPT_MARK);
    }
    closedir(d);
    return entries && !mark;
}

bool cli_ckpt_begin(const char *cmd, const char *flag, const char *dir, cli_ckpt *c)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->cmd = cmd;
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    size_t len = strlen(c->dir);
    while (len > 1 && c->dir[len - 1] == '/') c->dir[--len] = 0;
    char parent[4096], live[4200];
    const char *base;
    split(c->dir, parent, sizeof parent, &base);
    if (cli_ckpt_foreign(c->dir)) {
        fprintf(stderr, "hetex %s: %s '%s' is a folder with files and no %s: not a checkpoint, "
                "so it is not replaced; give a new folder's name\n", cmd, flag, c->dir,
                CLI_CKPT_MARK);
        return false;
    }
    if (!sweep(parent, base, NULL, live, sizeof live)) {
        fprintf(stderr, "hetex %s: %s '%s': another process is saving there now (its stage "
                "'%s' is locked); nothing was saved\n", cmd, flag, c->dir, live);
        return false;
    }
    static unsigned seq;
    for (int tries = 0; tries < 8 && c->fd < 0; tries++) {
        snprintf(c->stage, sizeof c->stage, "%s.stage-%ld-%u", c->dir, (long)getpid(), seq++);
        if (mkdir(c->stage, 0755)) {
            if (errno == EEXIST) continue;
            fprintf(stderr, "hetex %s: %s '%s': cannot create '%s': %s\n", cmd, flag, c->dir,
                    c->stage, strerror(errno));
            return false;
        }
        /* Made, then locked: a sweep in between may have taken it for a dead one's. */
        int fd = open(c->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat a, b;
        if (fd >= 0 && !flock(fd, LOCK_EX) && !fstat(fd, &a) && !stat(c->stage, &b) &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            c->fd = fd;
        else if (fd >= 0)
            close(fd);
    }
    const char *own = strrchr(c->stage, '/');
    if (c->fd < 0 || !sweep(parent, base, own ? own + 1 : c->stage, live, sizeof live)) {
        if (c->fd >= 0)
            fprintf(stderr, "hetex %s: %s '%s': another process is saving there now (its "
                    "stage '%s' is locked); nothing was saved\n", cmd, flag, c->dir, live);
        else
            fprintf(stderr, "hetex %s: %s '%s': could not hold a stage folder\n", cmd, flag, c->dir);
        cli_ckpt_abort(c);
        return false;
    }
    return true;
}

const char *cli_ckpt_file(cli_ckpt *c, const char *name)
{
    snprintf(c->file, sizeof c->file, "%s/%s", c->stage, name);
    cli_crash_point(); /* the file before it is written */
    return c->file;
}

bool cli_ckpt_commit(cli_ckpt *c)
{
    const char *failed = NULL;
    int err = 0;
    FILE *mark = fopen(cli_ckpt_file(c, CLI_CKPT_MARK), "w");
    if (!mark || fprintf(mark, "hetex %s checkpoint\n", c->cmd) < 0) failed = "write", err = errno;
    if (mark && fclose(mark) && !failed) failed = "write", err = errno;
    DIR *d = failed ? NULL : opendir(c->stage);
    for (struct dirent *e; d && !failed && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", c->stage, e->d_name);
        if (!sync_path(p)) failed = "sync", err = errno;
    }
    if (d) closedir(d);
    else if (!failed) failed = "read", err = errno;
    cli_crash_point();
    if (!failed && !sync_path(c->stage)) failed = "sync", err = errno;
    char parent[4096];
    const char *base;
    split(c->dir, parent, sizeof parent, &base);
    char live[4200];
    const char *own = strrchr(c->stage, '/');
    if (!failed && !sweep(parent, base, own ? own + 1 : c->stage, live, sizeof live)) {
        fprintf(stderr, "hetex %s: '%s': another process is saving there now (its stage '%s' "
                "is locked); nothing was saved\n", c->cmd, c->dir, live);
        cli_ckpt_abort(c);
        return false;
    }
    struct stat sb;
    bool first = stat(c->dir, &sb) != 0;
    if (!failed && first && rename(c->stage, c->dir)) failed = "rename", err = errno;
    if (!failed && !first && renameat2(AT_FDCWD, c->stage, AT_FDCWD, c->dir, RENAME_EXCHANGE))
        failed = "swap", err = errno;
    if (failed) {
        fprintf(stderr, "hetex %s: saving '%s' failed (%s of '%s': %s); the previous checkpoint "
                "is untouched\n", c->cmd, c->dir, failed, c->stage, strerror(err));
        cli_ckpt_abort(c);
        return false;
    }
    cli_crash_point();
    /* The stage name now holds the old checkpoint (none after a first save). */
    if (!first) remove_tree(c->stage);
    cli_crash_point();
    sync_path(parent);
    close(c->fd);
    c->fd = -1;
    return true;
}

void cli_ckpt_abort(cli_ckpt *c)
{
    if (c->fd >= 0) {
        remove_tree(c->stage); /* still locked: ours */
        close(c->fd);
    }
    c->fd = -1;
}
