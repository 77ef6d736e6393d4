/* Ctrl-C during training: the first SIGINT or SIGTERM sets a flag that the
 * training loop reads between steps; the handler is then reset, so that a
 * second one ends the process at once. */
#include "cli/cli.h"

#include <signal.h>
#include <stdlib.h>

static volatile sig_atomic_t received;

static void on_signal(int sig) { received = sig; }

void cli_interrupt_arm(void)
{
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_interrupted(void) { return received; }

void cli_interrupt_tick(void)
{
    static long at = -1, count;
    if (at < 0) {
        const char *e = getenv("HX_CLI_INTERRUPT_AT");
        at = e ? strtol(e, NULL, 10) : 0;
    }
    if (at > 0 && ++count == at) raise(SIGINT);
}
