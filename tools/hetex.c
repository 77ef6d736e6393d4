/* hetex: the command-line front end. Each subcommand lives in its own file. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"mlp", hx_cmd_mlp, "train a small MLP on generated data and print its falling loss"},
    {"memreplay", hx_cmd_memreplay, "replay a memory trace through hetex's pools and a PyTorch-style allocator"},
    {"widedeep", wd_main, "train wide & deep on UCI Adult (examples/widedeep): host embeddings, device MLP"},
    {"gpt", gpt_main, "train a character-level GPT (examples/gpt) and report validation loss"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: hetex COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'hetex COMMAND --help' lists a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "hetex: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
