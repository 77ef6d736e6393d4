/* The host memory guard: what a planned training step will still allocate
 * on the host, against what the machine has available, before any of it
 * is allocated. */
#include "cli/cli.h"

#include <string.h>

size_t cli_host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    if (f) fclose(f);
    return (size_t)kib << 10;
}

bool cli_check_host_memory(const char *cmd, const hx_memory_stats *ms, const hx_session *s,
                           const char *hint)
{
    hx_accelerator_info a;
    bool emu = !hx_session_accelerator_info(s, &a) && a.in_use == HX_ACCELERATOR_EMU;
    /* emu's device memory is host memory too */
    size_t need = ms->transient_planned_bytes + (emu ? ms->device_transient_planned_bytes : 0);
    size_t have = cli_host_available();
    if (!have || need <= have) return true;
    fprintf(stderr, "hetex %s: the training step needs %.2f GiB more host memory (its planned "
            "activations and gradients%s), and this machine has %.2f GiB available: %s\n", cmd,
            need / 1073741824.0, emu ? ", the emulated device's included" : "",
            have / 1073741824.0, hint);
    return false;
}
