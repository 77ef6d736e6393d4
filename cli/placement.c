/* What automatic placement chose, in a command's own words: the nodes it
 * placed, its predicted step beside the all-host and all-device ones, what
 * profiling and planning cost, and (after training) the library's placement
 * report: the units farthest from their prediction and the step. */
#include "cli/cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { WORST_UNITS = 10 }; /* units listed after training (HX_DEBUG=placement: all) */

static void ms(double s, char *buf, size_t n)
{
    if (isfinite(s)) snprintf(buf, n, "%.3f ms", 1e3 * s);
    else snprintf(buf, n, "does not fit");
}

void cli_print_placement(FILE *out, const char *cmd, const hx_session *s)
{
    hx_placement_report r;
    if (hx_session_placement_report(s, &r) || !r.n_auto) return;
    char step[32], host[32], dev[32], line[900];
    ms(r.predicted_step_s, step, sizeof step);
    ms(r.predicted_all_host_s, host, sizeof host);
    ms(r.predicted_all_device_s, dev, sizeof dev);
    snprintf(line, sizeof line, "placement auto: %d of the %d nodes it placed on the device, %d "
             "on the host; predicted step %s (all on the host: %s, all on the device: %s), "
             "device %.1f of %.1f MiB; %d op signatures (%d from the cache) profiled in %.3f s, "
             "planned in %.3f s (HX_DEBUG=placement lists every decision)",
             r.n_auto_device, r.n_auto, r.n_auto - r.n_auto_device, step, host, dev,
             (double)r.predicted_device_bytes / (1 << 20), (double)r.device_cap / (1 << 20),
             r.n_signatures, r.n_cache_hits, r.profile_s, r.plan_s);
    cli_say(out, cmd, line);
    if (!r.measured_steps) return;
    /* the library's report: the units farthest from their prediction, the step */
    size_t len;
    if (hx_session_placement_text(s, WORST_UNITS, NULL, 0, &len)) return;
    char *text = malloc(len + 1);
    if (text && !hx_session_placement_text(s, WORST_UNITS, text, len + 1, &len))
        for (char *p = text; *p;) { /* line by line */
            size_t k = strcspn(p, "\n");
            bool more = p[k] != 0;
            p[k] = 0;
            cli_say(out, cmd, p);
            p += k + more;
        }
    free(text);
}
