/* The line that says where a command's device ops run and why, and the
 * device memory cap in force. */
#include "cli/cli.h"

static void bytes(size_t b, char *buf, size_t n)
{
    if (b >= (size_t)1 << 30) snprintf(buf, n, "%.1f GiB", (double)b / (1 << 30));
    else snprintf(buf, n, "%.1f MiB", (double)b / (1 << 20));
}

void cli_print_accelerator(FILE *out, const char *cmd, const hx_session *s)
{
    hx_accelerator_info a;
    if (hx_session_accelerator_info(s, &a)) return;
    char cap[32], mem[32], line[700];
    bytes(a.capacity, cap, sizeof cap);
    bytes(a.device_memory, mem, sizeof mem);
    if (a.in_use == HX_ACCELERATOR_CUDA)
        snprintf(line, sizeof line, "accelerator: cuda, %s with %s (%s); device memory cap %s",
                 a.device, mem, a.why, cap);
    else if (a.in_use == HX_ACCELERATOR_EMU)
        snprintf(line, sizeof line, "accelerator: emu, an %s (%s); device memory cap %s",
                 a.device, a.why, cap);
    else
        snprintf(line, sizeof line, "accelerator: none (%s)", a.why);
    cli_say(out, cmd, line);
}
