/* hetex resnet --save/--resume: a checkpoint folder (cli/cli.h: committed
 * as a set) holding the session (weights, momentum, batch-norm statistics,
 * step) and `state` (cli/state.c): the epoch in progress, its steps done,
 * its train loss so far, and the flags that shape the run's numbers. The
 * image order of an epoch is replayed from --seed on resume, so a resumed
 * run continues bitwise as if it had never stopped. */
#include "resnet.h"
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

enum { N_FLAGS = 14 };

uint64_t resnet_set_hash(const resnet_set *s)
{
    size_t n = (size_t)s->n;
    return XXH3_64bits(s->pixels, n * RESNET_PIXELS) ^ XXH3_64bits(s->labels, n) * 31;
}

static void flag_lines(const resnet_identity *id, char out[N_FLAGS][CLI_STATE_FLAG])
{
    int k = 0;
    snprintf(out[k++], CLI_STATE_FLAG, "--width %d", id->model->width);
    snprintf(out[k++], CLI_STATE_FLAG, "--blocks %d", id->model->blocks);
    snprintf(out[k++], CLI_STATE_FLAG, "--batch %d", id->model->batch);
    snprintf(out[k++], CLI_STATE_FLAG, "--dtype %s", hx_dtype_name(id->model->dtype));
    snprintf(out[k++], CLI_STATE_FLAG, "--epochs %d", id->epochs);
    snprintf(out[k++], CLI_STATE_FLAG, "--lr %.17g", id->optim->lr);
    snprintf(out[k++], CLI_STATE_FLAG, "--momentum %.17g", id->optim->momentum);
    snprintf(out[k++], CLI_STATE_FLAG, "--weight-decay %.17g", id->optim->weight_decay);
    snprintf(out[k++], CLI_STATE_FLAG, "--warmup %d", id->optim->warmup);
    snprintf(out[k++], CLI_STATE_FLAG, "--no-flip %s", id->flip ? "no" : "yes");
    snprintf(out[k++], CLI_STATE_FLAG, "--seed %" PRIu64, id->seed);
    snprintf(out[k++], CLI_STATE_FLAG, "--train-limit (images used) %" PRId64, id->train_n);
    snprintf(out[k++], CLI_STATE_FLAG, "--data xxh3 %016" PRIx64, id->train_hash);
    snprintf(out[k++], CLI_STATE_FLAG, "--partial-batch %s", id->partial ? "yes" : "no");
}

bool resnet_checkpoint_save(const char *dir, hx_session *s, const resnet_identity *id,
                            const resnet_resume *r)
{
    char body[CLI_STATE_MAX], flags[N_FLAGS][CLI_STATE_FLAG];
    flag_lines(id, flags);
    int k = snprintf(body, sizeof body, "epoch %d\ndone %" PRId64 "\nstep %" PRId64 "\nloss_sum %a\n",
                     r->epoch, r->done, r->step, r->loss_sum);
    for (int i = 0; i < N_FLAGS; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s\n", flags[i]);
    cli_ckpt c;
    if (!cli_ckpt_begin("resnet", "--save", dir, &c)) return false;
    if (hx_session_save(s, cli_ckpt_file(&c, "session"))) {
        cli_error("resnet", "--save", hx_last_error());
        cli_ckpt_abort(&c);
        return false;
    }
    const char *p = cli_ckpt_file(&c, "state");
    if (!cli_state_write(p, "resnet", body)) {
        fprintf(stderr, "hetex resnet: --save '%s': cannot write '%s': %s; the previous "
                "checkpoint is untouched\n", dir, p, strerror(errno));
        cli_ckpt_abort(&c);
        return false;
    }
    return cli_ckpt_commit(&c);
}

bool resnet_checkpoint_load(const char *dir, hx_session *s, const resnet_identity *id,
                            resnet_resume *r)
{
    char path[4200], body[CLI_STATE_MAX];
    snprintf(path, sizeof path, "%s/state", dir);
    if (!cli_state_read("resnet", dir, path, body, sizeof body)) return false;
    resnet_resume got;
    int used = 0;
    if (sscanf(body, "epoch %d\ndone %" SCNd64 "\nstep %" SCNd64 "\nloss_sum %la\n%n", &got.epoch,
               &got.done, &got.step, &got.loss_sum, &used) != 4) {
        fprintf(stderr, "hetex resnet: --resume '%s': '%s' does not say where the run was\n", dir,
                path);
        return false;
    }
    char flags[N_FLAGS][CLI_STATE_FLAG];
    flag_lines(id, flags);
    const char *at = body + used;
    if (!cli_state_flags("resnet", dir, &at, flags, N_FLAGS)) return false;
    int64_t per_epoch = id->train_n / id->model->batch +
                        (id->partial && id->train_n % id->model->batch);
    if (got.epoch < 1 || got.epoch > id->epochs + 1 || got.done < 0 || got.done >= per_epoch ||
        got.step != (got.epoch - 1) * per_epoch + got.done) {
        fprintf(stderr, "hetex resnet: --resume '%s': '%s' holds a position no run of these "
                "flags reaches (epoch %d, step %" PRId64 ")\n", dir, path, got.epoch, got.step);
        return false;
    }
    snprintf(path, sizeof path, "%s/session", dir);
    if (hx_session_load(s, path)) {
        cli_error("resnet", "--resume", hx_last_error());
        return false;
    }
    *r = got;
    return true;
}
