/* hetex widedeep --save/--resume: a checkpoint folder holding the session
 * (the MLP's parameters, Adam's state, the step), both tables and `meta`
 * (the epochs done, --seed, --batch).
 *
 * One process: the files session, deep, wide and meta, written into a
 * stage folder and committed as a set (cli/cli.h), meta "checkpoint 2".
 *
 * --shards and --servers: the tables are sharded checkpoints (every rank,
 * or every server, writes its shard, then a manifest: the library's
 * hx_embedding_table_save), which the ranks cannot stage alike, so every
 * file goes into the folder itself under the name of its epoch E
 * (deep-E, wide-E and their shard files, session-E) and rank 0 writes meta
 * ("checkpoint 3", naming E) last, renamed over the old one: the commit of
 * the set; then it removes every other epoch's files. A kill at any
 * instant leaves the old meta and its files, or the new ones. Collective
 * mode saves each table on every rank; in server mode worker 0 asks the
 * servers to save them (they do once every push of the epoch is applied).
 * The session is the same on every rank (the MLP is data parallel), so
 * rank 0 saves it as one process does.
 *
 * Resume reads either form. A sharded save resumes at any number of ranks
 * or servers, in either mode, or in one process: the tables reshard on
 * load; each rank (worker) loads the session; in server mode the servers
 * load the tables before they serve. A save of one process resumes in one
 * process (its tables are not sharded checkpoints). */
#define _GNU_SOURCE
#include "wd.h"
#include "cli/cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char meta_head[] = "hetex widedeep checkpoint ";

static bool sharded(const wd_options *o) { return o->shards || o->servers; }

/* The one-process save: a staged folder. */
static hx_status save_alone(const wd_options *o, hx_session *s, const wd_model *m, int epochs_done)
{
    cli_ckpt c;
    if (!cli_ckpt_begin("widedeep", "--save", o->save, &c)) return HX_ERR_IO;
    hx_status st = hx_session_save(s, cli_ckpt_file(&c, "session"));
    if (!st) st = hx_embedding_table_save(m->deep, cli_ckpt_file(&c, "deep"));
    if (!st) st = hx_embedding_table_save(m->wide, cli_ckpt_file(&c, "wide"));
    const char *p = st ? NULL : cli_ckpt_file(&c, "meta");
    FILE *f = p ? fopen(p, "w") : NULL;
    bool ok = f && fprintf(f, "%s2\nepochs %d\nseed %llu\nbatch %lld\n%s", meta_head, epochs_done,
                           (unsigned long long)o->seed, (long long)o->batch,
                           o->partial_batch ? "partial-batch\n" : "") > 0;
    if (f && fclose(f)) ok = false;
    if (st || !ok) {
        if (!st) fprintf(stderr, "hetex widedeep: cannot write '%s'\n", p);
        else cli_error("widedeep", "--save", hx_last_error());
        cli_ckpt_abort(&c);
        return st ? st : HX_ERR_IO;
    }
    return cli_ckpt_commit(&c) ? HX_OK : HX_ERR_IO;
}

/* Whether name is a file of a sharded save other than epoch E's (or a
 * one-process save's session, deep or wide): "deep-3", "deep-3.g1.0-of-2". */
static bool stale_file(const char *name, int E)
{
    static const char *const kinds[] = {"session", "deep", "wide"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(kinds[k]);
        if (strncmp(name, kinds[k], n)) continue;
        if (!name[n]) return true;
        if (name[n] != '-') continue;
        char *end;
        long e = strtol(name + n + 1, &end, 10);
        if (end == name + n + 1) continue;
        return (*end == 0 || *end == '.') && e != E;
    }
    return false;
}

static bool sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = fd >= 0 && !fsync(fd);
    if (fd >= 0) close(fd);
    return ok;
}

/* Rank 0's commit of epoch E's set: meta through a synced temporary file
 * renamed over the old one, then the other epochs' files removed. */
static hx_status commit_meta(const wd_options *o, int E)
{
    char p[2200], tmp[2300];
    snprintf(p, sizeof p, "%s/meta", o->save);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    bool ok = f && fprintf(f, "%s3\nepochs %d\nseed %llu\nbatch %lld\n", meta_head, E,
                           (unsigned long long)o->seed, (long long)o->batch) > 0;
    ok = f && !fflush(f) && !fsync(fileno(f)) && ok;
    if (f && fclose(f)) ok = false;
    if (!ok || rename(tmp, p) || !sync_dir(o->save)) {
        fprintf(stderr, "hetex widedeep: --save '%s': cannot write '%s': %s; the previous checkpoint "
                "is untouched\n", o->save, p, strerror(errno));
        remove(tmp);
        return HX_ERR_IO;
    }
    DIR *d = opendir(o->save);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!stale_file(e->d_name, E)) continue;
        snprintf(p, sizeof p, "%s/%s", o->save, e->d_name);
        remove(p);
    }
    if (d) closedir(d);
    return HX_OK;
}

/* --shards, --servers: every rank (a server: none) writes its part of
 * epoch E's files into the folder, rank 0 commits. */
static hx_status save_sharded(const wd_options *o, hx_session *s, const wd_model *m, int E)
{
    char p[2200];
    bool lead = hx_comm_rank(o->comm) == 0;
    if (mkdir(o->save, 0755) && errno != EEXIST) {
        fprintf(stderr, "hetex widedeep: --save '%s': cannot create it: %s\n", o->save, strerror(errno));
        return HX_ERR_IO; /* (every rank: the same folder) */
    }
    if (lead) { /* the folder is a checkpoint's (wd_ckpt_check refused any other) */
        snprintf(p, sizeof p, "%s/%s", o->save, CLI_CKPT_MARK);
        FILE *f = fopen(p, "a");
        if (!f || fclose(f)) {
            fprintf(stderr, "hetex widedeep: --save '%s': cannot write '%s': %s\n", o->save, p, strerror(errno));
            return HX_ERR_IO;
        }
    }
    hx_status st = HX_OK;
    if (o->shards || lead) { /* collective mode: every rank; server mode: worker 0 asks the servers */
        snprintf(p, sizeof p, "%s/deep-%d", o->save, E);
        st = hx_embedding_table_save(m->deep, p);
        snprintf(p, sizeof p, "%s/wide-%d", o->save, E);
        if (!st) st = hx_embedding_table_save(m->wide, p);
    }
    snprintf(p, sizeof p, "%s/session-%d", o->save, E);
    if (!st && lead) st = hx_session_save(s, p);
    if (st) {
        cli_error("widedeep", "--save", hx_last_error());
        return st;
    }
    return lead ? commit_meta(o, E) : HX_OK;
}

hx_status wd_ckpt_save(const wd_options *o, hx_session *s, const wd_model *m, int epochs_done)
{
    return sharded(o) ? save_sharded(o, s, m, epochs_done) : save_alone(o, s, m, epochs_done);
}

bool wd_ckpt_check(const wd_options *o)
{
    if (!o->save || !sharded(o) || !cli_ckpt_foreign(o->save)) return true;
    fprintf(stderr, "hetex widedeep: --save '%s' is a folder with files and no %s: not a checkpoint, so it "
            "is not written to; give a new folder's name\n", o->save, CLI_CKPT_MARK);
    return false;
}

hx_status wd_ckpt_resume(const wd_options *o, hx_session *s, const wd_model *m, int *epochs, char *msg,
                         size_t len)
{
    char p[2200];
    const char *dir = o->resume;
    snprintf(p, sizeof p, "%s/meta", dir);
    FILE *f = fopen(p, "r");
    int version = 0, E = -1;
    unsigned long long seed = 0;
    long long batch = 0;
    char partial[16] = "";
    bool ok = f && fscanf(f, "hetex widedeep checkpoint %d\nepochs %d\nseed %llu\nbatch %lld", &version, &E,
                          &seed, &batch) == 4 && (version == 2 || version == 3);
    if (ok && fscanf(f, " %15s", partial) == 1 && (strcmp(partial, "partial-batch") || version == 3)) ok = false;
    if (f) fclose(f);
    if (!ok || E < 0 || E > 100000) {
        snprintf(msg, len, "--resume '%s' is not a widedeep checkpoint folder (its meta file is missing or "
                 "not one)", dir);
        return HX_ERR_CORRUPT;
    }
    if (seed != o->seed || batch != o->batch || !*partial != !o->partial_batch) {
        snprintf(msg, len, "--resume '%s' was made with --seed %llu --batch %lld%s; resume with the same", dir,
                 seed, batch, *partial ? " --partial-batch" : " and without --partial-batch");
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (version == 2 && sharded(o)) {
        snprintf(msg, len, "--resume '%s' is a checkpoint of one process, whose tables are not sharded "
                 "checkpoints: resume it without --shards and --servers", dir);
        return HX_ERR_UNSUPPORTED;
    }
    char suffix[16] = "";
    if (version == 3) snprintf(suffix, sizeof suffix, "-%d", E);
    hx_status st = HX_OK;
    if (s) { /* a server has none */
        snprintf(p, sizeof p, "%s/session%s", dir, suffix);
        st = hx_session_load(s, p);
    }
    if (!o->ps || hx_ps_is_server(o->ps)) { /* a worker's tables are the servers' */
        snprintf(p, sizeof p, "%s/deep%s", dir, suffix);
        if (!st) st = hx_embedding_table_load(m->deep, p);
        snprintf(p, sizeof p, "%s/wide%s", dir, suffix);
        if (!st) st = hx_embedding_table_load(m->wide, p);
    }
    *epochs = E;
    return st;
}
