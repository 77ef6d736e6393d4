/* hetex gpt --save/--resume: a checkpoint folder (cli/cli.h: committed as a
 * set) holding the session (parameters, AdamW moments, step, loss scale:
 * hx_session_save) and `state`: where the run is (steps done, the state of
 * the corpus draws, the train loss since the last evaluation) and the flags
 * that shape its numbers, each as "--flag value", then an XXH3 of all of
 * that. A resumed run continues bitwise as if it had never stopped: resume
 * refuses a checkpoint whose flags differ from the run's, naming the flag. */
#include "gpt.h"
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define STATE_MAGIC "hetex gpt checkpoint 1\n"
enum { STATE_MAX = 8192, N_FLAGS = 19, FLAG_LEN = 160 };

uint64_t gpt_text_hash(const gpt_text *t)
{
    return XXH3_64bits(t->ids, sizeof *t->ids * (size_t)t->n);
}

/* The run's flags that change its numbers, as "--flag value" lines. */
static void flag_lines(const gpt_identity *id, char out[N_FLAGS][FLAG_LEN])
{
    const gpt_config *m = id->model;
    const gpt_optim *o = id->optim;
    int k = 0;
    snprintf(out[k++], FLAG_LEN, "--layers %d", m->layers);
    snprintf(out[k++], FLAG_LEN, "--heads %d", m->heads);
    snprintf(out[k++], FLAG_LEN, "--width %d", m->width);
    snprintf(out[k++], FLAG_LEN, "--context %d", m->context);
    snprintf(out[k++], FLAG_LEN, "--batch %d", m->batch);
    snprintf(out[k++], FLAG_LEN, "--dropout %.9g", (double)m->dropout);
    snprintf(out[k++], FLAG_LEN, "--dtype %s", hx_dtype_name(m->dtype));
    snprintf(out[k++], FLAG_LEN, "--seed %" PRIu64, m->seed);
    snprintf(out[k++], FLAG_LEN, "--steps %d", id->steps);
    snprintf(out[k++], FLAG_LEN, "--lr %.17g", o->lr);
    snprintf(out[k++], FLAG_LEN, "--beta1 %.17g", o->beta1);
    snprintf(out[k++], FLAG_LEN, "--beta2 %.17g", o->beta2);
    snprintf(out[k++], FLAG_LEN, "--weight-decay %.17g", o->weight_decay);
    snprintf(out[k++], FLAG_LEN, "--warmup %d", o->warmup);
    snprintf(out[k++], FLAG_LEN, "--min-lr-ratio %.17g", o->min_lr_ratio);
    snprintf(out[k++], FLAG_LEN, "--clip %.17g", id->clip);
    snprintf(out[k++], FLAG_LEN, "--dpu %d", id->dpu);
    snprintf(out[k++], FLAG_LEN, "--offload %s",
             o->offload == GPT_OFFLOAD_NONE ? "none" : "optimizer");
    snprintf(out[k++], FLAG_LEN, "--data %" PRId64 " characters, xxh3 %016" PRIx64, id->data_n,
             id->data_hash);
}

bool gpt_checkpoint_save(const char *dir, hx_session *s, const gpt_identity *id,
                         const gpt_resume *r)
{
    char text[STATE_MAX], flags[N_FLAGS][FLAG_LEN];
    flag_lines(id, flags);
    int k = snprintf(text, sizeof text, STATE_MAGIC "step %d\nrng %" PRIu64 "\nwindow %a %d\n"
                     "last_val %a\n", r->step, r->rng, r->window, r->in_window, r->last_val);
    for (int i = 0; i < N_FLAGS; i++) k += snprintf(text + k, sizeof text - (size_t)k, "%s\n", flags[i]);
    k += snprintf(text + k, sizeof text - (size_t)k, "xxh3 %016" PRIx64 "\n",
                  XXH3_64bits(text, (size_t)k));

    cli_ckpt c;
    if (!cli_ckpt_begin("gpt", "--save", dir, &c)) return false;
    if (hx_session_save(s, cli_ckpt_file(&c, "session"))) {
        cli_error("gpt", "--save", hx_last_error());
        cli_ckpt_abort(&c);
        return false;
    }
    const char *p = cli_ckpt_file(&c, "state");
    FILE *f = fopen(p, "w");
    errno = 0;
    bool ok = f && fwrite(text, 1, (size_t)k, f) == (size_t)k;
    if (f && fclose(f)) ok = false;
    if (!ok) {
        fprintf(stderr, "hetex gpt: --save '%s': cannot write '%s': %s; the previous checkpoint "
                "is untouched\n", dir, p, strerror(errno ? errno : EIO));
        cli_ckpt_abort(&c);
        return false;
    }
    return cli_ckpt_commit(&c);
}

/* state's text (NUL-terminated into buf) with its checksum checked. */
static bool read_state(const char *path, char *buf, size_t n, char *why, size_t why_n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_n, "cannot read '%s': %s", path, strerror(errno));
        return false;
    }
    size_t len = fread(buf, 1, n - 1, f);
    bool longer = fgetc(f) != EOF;
    fclose(f);
    buf[len] = 0;
    char *sum = len ? strstr(buf, "xxh3 ") : NULL;
    while (sum && sum > buf && sum[-1] != '\n') sum = strstr(sum + 1, "xxh3 ");
    uint64_t want;
    int used = 0;
    if (longer || strncmp(buf, STATE_MAGIC, strlen(STATE_MAGIC)) || !sum ||
        sscanf(sum, "xxh3 %16" SCNx64 "\n%n", &want, &used) != 1 || sum[used] ||
        XXH3_64bits(buf, (size_t)(sum - buf)) != want) {
        snprintf(why, why_n, "'%s' is not a gpt checkpoint's state or is damaged (its checksum "
                 "does not match)", path);
        return false;
    }
    *sum = 0; /* the checked part */
    return true;
}

bool gpt_checkpoint_load(const char *dir, hx_session *s, const gpt_identity *id, gpt_resume *r)
{
    char path[4200], text[STATE_MAX], why[4400];
    snprintf(path, sizeof path, "%s/state", dir);
    if (!read_state(path, text, sizeof text, why, sizeof why)) {
        fprintf(stderr, "hetex gpt: --resume '%s': %s\n", dir, why);
        return false;
    }
    gpt_resume got;
    int used = 0;
    const char *at = text + strlen(STATE_MAGIC);
    if (sscanf(at, "step %d\nrng %" SCNu64 "\nwindow %la %d\nlast_val %la\n%n", &got.step,
               &got.rng, &got.window, &got.in_window, &got.last_val, &used) != 5) {
        fprintf(stderr, "hetex gpt: --resume '%s': '%s' does not say where the run was\n", dir, path);
        return false;
    }
    char flags[N_FLAGS][FLAG_LEN];
    flag_lines(id, flags);
    at += used;
    for (int i = 0; i < N_FLAGS; i++) {
        const char *end = strchr(at, '\n');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        size_t name = strcspn(flags[i], " ");
        if (len != strlen(flags[i]) || strncmp(at, flags[i], len)) {
            fprintf(stderr, "hetex gpt: --resume '%s' was made with %.*s; this run has %s: "
                    "resume with the flags of the run that saved it\n", dir, (int)len, at,
                    strncmp(at, flags[i], name) ? "other flags" : flags[i]);
            return false;
        }
        at += len + (end != NULL);
    }
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
