/* hetex gpt --save/--resume: a checkpoint folder (cli/cli.h: committed as a
 * set) holding the session (parameters, AdamW moments, step, loss scale:
 * hx_session_save) and `state` (cli/state.c): where the run is (steps
 * done, the state of the corpus draws, the train loss since the last
 * evaluation) and the flags that shape its numbers, XXH3-checked. A
 * resumed run continues bitwise as if it had never stopped: resume
 * refuses a checkpoint whose flags differ from the run's, naming the flag.
 * Under --zero 1-3 the session is sharded and its save a collective:
 * every rank saves into the folder itself (no stage folder: the ranks
 * could not agree on one), rank 0 first writing `state-<step>`, then all
 * of them the session set `zsession` (hx_session_save: each rank's shard
 * and the manifest, whose commit is the commit of the checkpoint), after
 * which rank 0 removes the other states (and a whole checkpoint's
 * `session` and `state`). A kill at any instant leaves the old manifest
 * and its state, or the new ones. Resume looks for `zsession` first: it
 * loads at any rank count and ZeRO stage, or without --zero; the state
 * is the one of the session's step. Under --zero 0 every rank holds the
 * same state and rank 0 saves it as one process does. */
#include "gpt.h"
#include "cli/cli.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

enum { N_FLAGS = 19 };

uint64_t gpt_text_hash(const gpt_text *t)
{
    return XXH3_64bits(t->ids, sizeof *t->ids * (size_t)t->n);
}

/* The run's flags that change its numbers, as "--flag value" lines. */
static void flag_lines(const gpt_identity *id, char out[N_FLAGS][CLI_STATE_FLAG])
{
    const gpt_config *m = id->model;
    const gpt_optim *o = id->optim;
    int k = 0;
    snprintf(out[k++], CLI_STATE_FLAG, "--layers %d", m->layers);
    snprintf(out[k++], CLI_STATE_FLAG, "--heads %d", m->heads);
    snprintf(out[k++], CLI_STATE_FLAG, "--width %d", m->width);
    snprintf(out[k++], CLI_STATE_FLAG, "--context %d", m->context);
    snprintf(out[k++], CLI_STATE_FLAG, "--batch %d", m->batch);
    snprintf(out[k++], CLI_STATE_FLAG, "--dropout %.9g", (double)m->dropout);
    snprintf(out[k++], CLI_STATE_FLAG, "--dtype %s", hx_dtype_name(m->dtype));
    snprintf(out[k++], CLI_STATE_FLAG, "--seed %" PRIu64, m->seed);
    snprintf(out[k++], CLI_STATE_FLAG, "--steps %d", id->steps);
    snprintf(out[k++], CLI_STATE_FLAG, "--lr %.17g", o->lr);
    snprintf(out[k++], CLI_STATE_FLAG, "--beta1 %.17g", o->beta1);
    snprintf(out[k++], CLI_STATE_FLAG, "--beta2 %.17g", o->beta2);
    snprintf(out[k++], CLI_STATE_FLAG, "--weight-decay %.17g", o->weight_decay);
    snprintf(out[k++], CLI_STATE_FLAG, "--warmup %d", o->warmup);
    snprintf(out[k++], CLI_STATE_FLAG, "--min-lr-ratio %.17g", o->min_lr_ratio);
    snprintf(out[k++], CLI_STATE_FLAG, "--clip %.17g", id->clip);
    snprintf(out[k++], CLI_STATE_FLAG, "--dpu %d", id->dpu);
    snprintf(out[k++], CLI_STATE_FLAG, "--offload %s",
             o->offload == GPT_OFFLOAD_NONE ? "none" : "optimizer");
    snprintf(out[k++], CLI_STATE_FLAG, "--data %" PRId64 " characters, xxh3 %016" PRIx64,
             id->data_n, id->data_hash);
}

/* Rank 0 leaves the state of step (and the folder's mark) alone in dir. */
static void drop_other_states(const char *dir, int step)
{
    char keep[32], p[4400];
    snprintf(keep, sizeof keep, "state-%d", step);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        bool state = !strncmp(e->d_name, "state-", 6) && strcmp(e->d_name, keep);
        if (!state && strcmp(e->d_name, "state") && strcmp(e->d_name, "session")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        remove(p);
    }
    if (d) closedir(d);
}

static bool save_sharded(const char *dir, hx_session *s, const gpt_identity *id, const gpt_resume *r,
                         const char *body)
{
    char p[4200], tmp[4300];
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "hetex gpt: --save '%s': cannot create it: %s\n", dir, strerror(errno));
        return false; /* (every rank: the same folder) */
    }
    bool lead = hx_comm_rank(id->comm) == 0;
    if (lead) { /* a failure here ends rank 0; the others' save then fails naming it */
        snprintf(p, sizeof p, "%s/%s", dir, CLI_CKPT_MARK);
        FILE *f = fopen(p, "a");
        snprintf(p, sizeof p, "%s/state-%d", dir, r->step);
        snprintf(tmp, sizeof tmp, "%s.tmp", p);
        if (!f || fclose(f) || !cli_state_write(tmp, "gpt", body) || rename(tmp, p)) {
            fprintf(stderr, "hetex gpt: --save '%s': cannot write '%s': %s; the previous checkpoint "
                    "is untouched\n", dir, p, strerror(errno));
            return false;
        }
    }
    snprintf(p, sizeof p, "%s/zsession", dir);
    if (hx_session_save(s, p)) {
        cli_error("gpt", "--save", hx_last_error());
        return false;
    }
    cli_crash_point(); /* every rank: the set is committed */
    if (lead) drop_other_states(dir, r->step);
    return true;
}

bool gpt_checkpoint_save(const char *dir, hx_session *s, const gpt_identity *id,
                         const gpt_resume *r)
{
    char body[CLI_STATE_MAX], flags[N_FLAGS][CLI_STATE_FLAG];
    flag_lines(id, flags);
    int k = snprintf(body, sizeof body, "step %d\nrng %" PRIu64 "\nwindow %a %d\nlast_val %a\n",
                     r->step, r->rng, r->window, r->in_window, r->last_val);
    for (int i = 0; i < N_FLAGS; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s\n", flags[i]);

    if (id->zero >= 1) return save_sharded(dir, s, id, r, body);
    if (id->comm && hx_comm_rank(id->comm) != 0) return true; /* rank 0 saves the replicas' state */
    cli_ckpt c;
    if (!cli_ckpt_begin("gpt", "--save", dir, &c)) return false;
    if (hx_session_save(s, cli_ckpt_file(&c, "session"))) {
        cli_error("gpt", "--save", hx_last_error());
        cli_ckpt_abort(&c);
        return false;
    }
    const char *p = cli_ckpt_file(&c, "state");
    if (!cli_state_write(p, "gpt", body)) {
        fprintf(stderr, "hetex gpt: --save '%s': cannot write '%s': %s; the previous checkpoint "
                "is untouched\n", dir, p, strerror(errno));
        cli_ckpt_abort(&c);
        return false;
    }
    return cli_ckpt_commit(&c);
}

/* The state file at path: where the run is, and the run's flags. */
static bool read_state(const char *dir, const char *path, const gpt_identity *id, gpt_resume *got)
{
    char body[CLI_STATE_MAX];
    if (!cli_state_read("gpt", dir, path, body, sizeof body)) return false;
    int used = 0;
    if (sscanf(body, "step %d\nrng %" SCNu64 "\nwindow %la %d\nlast_val %la\n%n", &got->step,
               &got->rng, &got->window, &got->in_window, &got->last_val, &used) != 5) {
        fprintf(stderr, "hetex gpt: --resume '%s': '%s' does not say where the run was\n", dir, path);
        return false;
    }
    char flags[N_FLAGS][CLI_STATE_FLAG];
    flag_lines(id, flags);
    const char *at = body + used;
    if (!cli_state_flags("gpt", dir, &at, flags, N_FLAGS)) return false;
    if (got->step < 0 || got->step > id->steps || got->in_window < 0 || got->in_window > got->step) {
        fprintf(stderr, "hetex gpt: --resume '%s': '%s' holds a position no run of --steps %d "
                "reaches (step %d, %d steps since an evaluation)\n", dir, path, id->steps,
                got->step, got->in_window);
        return false;
    }
    return true;
}

bool gpt_checkpoint_load(const char *dir, hx_session *s, const gpt_identity *id, gpt_resume *r)
{
    char path[4200];
    gpt_resume got;
    struct stat st;
    snprintf(path, sizeof path, "%s/zsession", dir);
    if (!stat(path, &st)) { /* sharded: the session tells the step, whose state is beside it */
        if (hx_session_load(s, path)) {
            cli_error("gpt", "--resume", hx_last_error());
            return false;
        }
        snprintf(path, sizeof path, "%s/state-%lld", dir, (long long)hx_session_step(s));
        if (!read_state(dir, path, id, &got)) return false;
        if (got.step != hx_session_step(s)) {
            fprintf(stderr, "hetex gpt: --resume '%s': '%s' says step %d\n", dir, path, got.step);
            return false;
        }
        *r = got;
        return true;
    }
    snprintf(path, sizeof path, "%s/state", dir);
    if (!read_state(dir, path, id, &got)) return false;
    snprintf(path, sizeof path, "%s/session", dir);
    if (hx_session_load(s, path)) {
        cli_error("gpt", "--resume", hx_last_error());
        return false;
    }
    *r = got;
    return true;
}
