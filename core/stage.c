/* Files replaced atomically (core.h, "staged files"): each save writes its
 * own stage file "<path>.stage-<pid>-<n>", held under an exclusive flock
 * while it is written; commit syncs it, renames it over path and syncs the
 * folder. The lock tells a live saver's stage from a dead one's: the next
 * save removes every stage of path that it can lock (a killed writer's,
 * whose lock went with it), and refuses to write while another saver holds
 * one. Two savers that overlap go on only while neither sees a live stage
 * that sorts before its own, checked when each starts and again just
 * before its rename: of two savers alive at once, one commits and the
 * other fails naming it. */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint stage_seq;

/* path's folder and its last component, split into dir (n bytes). */
static const char *split(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, n, ".");
        return path;
    }
    size_t len = (size_t)(slash - path);
    snprintf(dir, n, "%.*s", len ? (int)len : 1, len ? path : "/");
    return slash + 1;
}

/* An entry of dir that is a stage of the file named base: "<base>.stage-*",
 * or the "<base>.tmp" / "<base>.tmp.<pid>" that earlier versions staged in. */
static bool is_stage_of(const char *entry, const char *base)
{
    size_t len = strlen(base);
    if (strncmp(entry, base, len)) return false;
    const char *rest = entry + len;
    if (!strncmp(rest, ".stage-", 7)) return true;
    if (strncmp(rest, ".tmp", 4)) return false;
    rest += 4;
    if (!*rest) return true;
    if (*rest++ != '.' || !*rest) return false;
    return strspn(rest, "0123456789") == strlen(rest);
}

/* Removes the dead stages of base in dir (all but `own`) and reports the
 * first live one (held by another saver) into live; false when one is
 * live and, with `only_lower`, its name sorts before own's. */
static bool sweep(const char *dir, const char *base, const char *own, bool only_lower,
                  char *live, size_t live_len)
{
    DIR *d = opendir(dir);
    if (!d) return true; /* creating the stage will say why */
    bool clear = true;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_stage_of(e->d_name, base) || (own && !strcmp(e->d_name, own))) continue;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
        int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (!flock(fd, LOCK_EX | LOCK_NB)) {
            unlink(p); /* its writer is gone */
        } else if (errno == EWOULDBLOCK && (!only_lower || strcmp(e->d_name, own) < 0) && clear) {
            snprintf(live, live_len, "%s", p);
            clear = false;
        }
        close(fd);
    }
    closedir(d);
    return clear;
}

static hx_status busy(const char *who, const char *path, const char *live)
{
    return hx__error(HX_ERR_STATE,
                     "%s: another saver is writing '%s' now (its stage file '%s' is locked); "
                     "nothing was written: save to another path, or again after it finishes",
                     who, path, live);
}

hx_status hx__stage_open(const char *who, const char *path, hx_stage *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    char dir[4096], live[4200];
    const char *base = split(path, dir, sizeof dir);
    if (!*base) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: '%s' names a folder, not a file", who, path);
    if (!sweep(dir, base, NULL, false, live, sizeof live)) return busy(who, path, live);
    size_t n = strlen(path) + 64;
    if (!(s->path = strdup(path)) || !(s->tmp = malloc(n))) {
        hx__stage_abort(s);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
    }
    /* Created, then locked: a sweep between the two may take it for a dead
     * writer's and remove it, so the name must still be ours once locked. */
    for (int tries = 0; tries < 8; tries++) {
        snprintf(s->tmp, n, "%s.stage-%ld-%u", path, (long)getpid(), atomic_fetch_add(&stage_seq, 1));
        s->fd = open(s->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (s->fd < 0) {
            if (errno == EEXIST) continue; /* a dead process's pid and number */
            int err = errno;
            hx__stage_abort(s);
            return hx__error(HX_ERR_IO, "%s: cannot create '%s.stage-*' beside '%s': %s", who,
                             path, path, strerror(err));
        }
        struct stat a, b;
        if (!flock(s->fd, LOCK_EX) && !fstat(s->fd, &a) && !stat(s->tmp, &b) &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            break;
        close(s->fd);
        s->fd = -1;
    }
    if (s->fd < 0) {
        hx__stage_abort(s);
        return hx__error(HX_ERR_IO, "%s: could not hold a stage file beside '%s'", who, path);
    }
    /* Two savers that started together: the one whose stage sorts first goes on. */
    const char *own = strrchr(s->tmp, '/');
    if (!sweep(dir, base, own ? own + 1 : s->tmp, true, live, sizeof live)) {
        hx__stage_abort(s);
        return busy(who, path, live);
    }
    if (!(s->f = fdopen(s->fd, "wb"))) {
        hx__stage_abort(s);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
    }
    return HX_OK;
}

hx_status hx__stage_commit(const char *who, hx_stage *s)
{
    int err = 0;
    if (fflush(s->f) || fsync(s->fd)) err = errno ? errno : EIO;
    char dir[4096], live[4200];
    const char *base = split(s->path, dir, sizeof dir), *own = strrchr(s->tmp, '/');
    /* A saver that began after this one's check, whose stage sorts first,
     * went on too: one of the two must give way, and it is this one. */
    if (!err && !sweep(dir, base, own ? own + 1 : s->tmp, true, live, sizeof live)) {
        hx_status st = busy(who, s->path, live);
        hx__stage_abort(s);
        return st;
    }
    if (!err && rename(s->tmp, s->path)) err = errno;
    if (err) {
        hx_status st = hx__error(HX_ERR_IO, "%s: writing '%s' failed: %s (disk full?); the previous "
                                 "file at '%s' is untouched", who, s->tmp, strerror(err), s->path);
        hx__stage_abort(s);
        return st;
    }
    /* The rename is durable once the folder is synced. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) && errno != EINVAL) err = errno; /* EINVAL: a folder that cannot sync */
        close(dfd);
    }
    fclose(s->f); /* the lock goes with it */
    s->f = NULL;
    s->fd = -1;
    free(s->tmp);
    free(s->path);
    s->tmp = s->path = NULL;
    if (err)
        return hx__error(HX_ERR_IO, "%s: '%s' was written but its folder could not be synced: %s",
                         who, dir, strerror(err));
    return HX_OK;
}

void hx__stage_abort(hx_stage *s)
{
    if (s->tmp && s->fd >= 0) unlink(s->tmp); /* while still locked: never another's */
    if (s->f) fclose(s->f);
    else if (s->fd >= 0) close(s->fd);
    free(s->tmp);
    free(s->path);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}
