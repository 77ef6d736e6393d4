/* --partial-batch: the short last batch of an epoch in a session of its own
 * that takes the main session's state before its step and gives it back
 * after, both through hx_session_save/_load (the only way in the API to
 * carry the step count and the loss scale as well as every tensor). */
#include "cli/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool cli_partial_open(cli_partial *p, const char *cmd, hx_graph *g, const hx_session_config *sc)
{
    memset(p, 0, sizeof *p);
    const char *tmp = getenv("TMPDIR");
    snprintf(p->dir, sizeof p->dir, "%s/hetex-partial-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(p->dir)) {
        fprintf(stderr, "hetex %s: --partial-batch: cannot make a folder '%s' for the short "
                "batch's session: %s (set TMPDIR to a writable folder)\n", cmd, p->dir,
                strerror(errno));
        *p->dir = 0;
        return false;
    }
    snprintf(p->file, sizeof p->file, "%s/session", p->dir);
    if (hx_session_create(g, sc, &p->s)) {
        cli_error(cmd, "--partial-batch: the short batch's session", hx_last_error());
        cli_partial_close(p);
        return false;
    }
    return true;
}

hx_status cli_partial_step(cli_partial *p, hx_session *main, double lr_scale,
                           const hx_feed *feeds, int n_feeds, const hx_fetch *fetches,
                           int n_fetches)
{
    hx_status st = hx_session_save(main, p->file);
    if (!st) st = hx_session_load(p->s, p->file);
    if (!st) st = hx_session_set_lr_scale(p->s, lr_scale);
    if (!st) st = hx_session_run(p->s, feeds, n_feeds, fetches, n_fetches, HX_RUN_TRAIN);
    if (!st) st = hx_session_save(p->s, p->file);
    if (!st) st = hx_session_load(main, p->file);
    return st;
}

void cli_partial_close(cli_partial *p)
{
    hx_session_free(p->s);
    if (*p->file) unlink(p->file);
    if (*p->dir) rmdir(p->dir);
    memset(p, 0, sizeof *p);
}
