/* hetex gpt --save/--resume: a checkpoint folder (cli/cli.h: committed as a
 * set) holding the session (parameters, AdamW moments, step, loss scale:
 * hx_session_save) and `state` (cli/state.c): where the run is (steps
 * done, the state of the corpus draws, the train loss since the last
 * evaluation) and the flags that shape its numbers, XXH3-checked. A
 * resumed run continues bitwise as if it had never stopped: resume
 * refuses a checkpoint whose flags differ from the run's, naming the flag. */
#include "gpt.h"
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
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

bool gpt_checkpoint_save(const char *dir, hx_session *s, const gpt_identity *id,
                         const gpt_resume *r)
{
    char body[CLI_STATE_MAX], flags[N_FLAGS][CLI_STATE_FLAG];
    flag_lines(id, flags);
    int k = snprintf(body, sizeof body, "step %d\nrng %" PRIu64 "\nwindow %a %d\nlast_val %a\n",
                     r->step, r->rng, r->window, r->in_window, r->last_val);
    for (int i = 0; i < N_FLAGS; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s\n", flags[i]);

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

bool gpt_checkpoint_load(const char *dir, hx_session *s, const gpt_identity *id, gpt_resume *r)
{
    char path[4200], body[CLI_STATE_MAX];
    snprintf(path, sizeof path, "%s/state", dir);
    if (!cli_state_read("gpt", dir, path, body, sizeof body)) return false;
    gpt_resume got;
    int used = 0;
    if (sscanf(body, "step %d\nrng %" SCNu64 "\nwindow %la %d\nlast_val %la\n%n", &got.step,
               &got.rng, &got.window, &got.in_window, &got.last_val, &used) != 5) {
        fprintf(stderr, "hetex gpt: --resume '%s': '%s' does not say where the run was\n", dir, path);
        return false;
    }
    char flags[N_FLAGS][CLI_STATE_FLAG];
    flag_lines(id, flags);
    const char *at = body + used;
    if (!cli_state_flags("gpt", dir, &at, flags, N_FLAGS)) return false;
    if (got.step < 0 || got.step > id->steps || got.in_window < 0 || got.in_window > got.step) {
        fprintf(stderr, "hetex gpt: --resume '%s': '%s' holds a position no run of --steps %d "
                "reaches (step %d, %d steps since an evaluation)\n", dir, path, id->steps,
                got.step, got.in_window);
        return false;
    }
    snprintf(path, sizeof path, "%s/session", dir);
    if (hx_session_load(s, path)) {
        cli_error("gpt", "--resume", hx_last_error());
        return false;
    }
    *r = got;
    return true;
}
