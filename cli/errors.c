/* The library's messages in the CLI's words: a message that tells a C
 * programmer to set HX_ACCELERATOR_EMU or trace_path tells a user of
 * `hetex` to give --accelerator emu or --trace. */
#include "cli/cli.h"

#include <string.h>

static const struct {
    const char *library, *cli;
} words[] = {
    {"HX_ACCELERATOR_AUTO", "--accelerator auto"},
    {"HX_ACCELERATOR_CUDA", "--accelerator cuda"},
    {"HX_ACCELERATOR_EMU", "--accelerator emu"},
    {"HX_ACCELERATOR_NONE", "--accelerator none"},
    {"accelerator CUDA", "--accelerator cuda"},
    {"trace_path", "--trace"},
    {"HX_TRACE", "--trace"},
    {"max_device_memory", "--max-device-memory"},
    {"offload_config", "--offload-config"},
    {"n_threads", "--threads"},
    {"hx_session_create (planning the training step)", "planning the training step"},
};

/* text to f with the library's words replaced. */
static void translated(FILE *f, const char *text)
{
    for (const char *p = text; *p;) {
        size_t i = 0, n = sizeof words / sizeof words[0];
        while (i < n && strncmp(p, words[i].library, strlen(words[i].library))) i++;
        if (i < n) {
            fputs(words[i].cli, f);
            p += strlen(words[i].library);
        } else {
            fputc(*p++, f);
        }
    }
}

void cli_error(const char *cmd, const char *what, const char *library_message)
{
    fprintf(stderr, "hetex %s: %s%s", cmd, what ? what : "", what ? ": " : "");
    translated(stderr, library_message);
    fputc('\n', stderr);
}

void cli_say(FILE *out, const char *cmd, const char *library_text)
{
    fprintf(out, "hetex %s: ", cmd);
    translated(out, library_text);
    fputc('\n', out);
    fflush(out);
}
