/* hetex memreplay TRACE [--cap BYTES]: replays an allocation trace through
 * hetex's lifetime-segregated device pools and through a PyTorch-style
 * single-pool caching allocator, and compares what each had to reserve
 * with what was live. */
#include "commands.h"
#include "hetex.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: hetex memreplay TRACE [--cap BYTES[K|M|G]]\n"
    "  Replays TRACE (a hetex memory trace: write one with HX_MEMTRACE=path) through\n"
    "  (a) hetex's device pools (persistent and transient separate) and (b) a single-pool\n"
    "  best-fit caching allocator in the style of PyTorch's, and prints each one's peak\n"
    "  reserved memory against the peak live bytes. With --cap, both run under that cap\n"
    "  and the first allocation each cannot serve is reported.\n";

static double mib(size_t b) { return (double)b / (1 << 20); }

static void print_one(const char *name, const hx_pool_stats *s, double ratio, size_t live,
                      int64_t oom_event, size_t oom_live)
{
    printf("  %-26s peak reserved %10.2f MiB  peak live %10.2f MiB  ratio %.4f  waste %9.2f MiB"
           "  segments reserved %lld, released %lld\n", name, mib(s->peak_reserved),
           mib(s->peak_requested), ratio,
           mib(s->peak_reserved - (s->peak_requested < s->peak_reserved ? s->peak_requested
                                                                        : s->peak_reserved)),
           (long long)s->reserves, (long long)s->releases);
    if (oom_event >= 0)
        printf("  %-26s out of memory at event %lld with %.1f MiB live (%.1f%% of the trace's peak)\n",
               "", (long long)oom_event, mib(oom_live), live ? 100.0 * oom_live / live : 0);
}

int hx_cmd_memreplay(int argc, char **argv)
{
    const char *path = NULL;
    size_t cap = 0;
    const cli_flag flags[] = {CLI_FLAG_NUM("--cap", CLI_BYTES, &cap, 1, 0x1p50)};
    const cli_command c = {.name = "memreplay", .usage = usage, .flags = flags,
                           .n_flags = CLI_COUNT(flags), .positional = &path,
                           .positional_name = "TRACE"};
    int rc = cli_parse(&c, argc, argv);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    hx_memreplay_report r;
    if (hx_memreplay(path, cap, &r) != HX_OK) {
        cli_error("memreplay", NULL, hx_last_error());
        return 1;
    }
    printf("%s: %lld events (%lld allocations, %lld frees), peak live %.1f MiB", path,
           (long long)r.events, (long long)r.allocs, (long long)r.frees, mib(r.peak_live));
    if (cap) printf(", cap %.1f MiB", mib(cap));
    printf("\n");
    print_one("hetex pools", &r.pools.total, r.pools_ratio, r.peak_live, r.pools_oom_event,
              r.pools_oom_live);
    printf("  %-26s persistent peak reserved %.2f MiB, transient %.2f MiB\n", "",
           mib(r.pools.persistent.peak_reserved), mib(r.pools.transient.peak_reserved));
    print_one("single-pool caching (PyTorch-style)", &r.baseline, r.baseline_ratio, r.peak_live,
              r.baseline_oom_event, r.baseline_oom_live);
    size_t wp = r.pools.total.peak_reserved - r.pools.total.peak_requested;
    size_t wb = r.baseline.peak_reserved - r.baseline.peak_requested;
    if (r.pools_oom_event < 0 && r.baseline_oom_event < 0 && wb > 0)
        printf("  hetex pools waste %.1f%% of the baseline's\n", 100.0 * wp / wb);
    return 0;
}
