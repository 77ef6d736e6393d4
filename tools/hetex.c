/* hetex: the command-line front end. Each subcommand lives in its own file. */
#include "commands.h"
#include "hetex.h"

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
    {"resnet", resnet_main, "train a small ResNet on Fashion-MNIST (examples/resnet) and report test accuracy"},
    {"plot", hx_cmd_plot, "draw a --metrics file, or a benchmark's results (--bench), as PNGs"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f)
{
    fprintf(f, "usage: hetex COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'hetex help COMMAND' (or 'hetex COMMAND --help') lists a command's options;\n"
               "'hetex --version' prints the version.\n");
}

static int find(const char *name)
{
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(name, commands[i].name)) return i;
    return -1;
}

static int unknown(const char *name)
{
    fprintf(stderr, "hetex: unknown command '%s'\n\n", name);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *a = argv[1];
    if (!strcmp(a, "--help") || !strcmp(a, "-h") || (!strcmp(a, "help") && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(a, "--version") || !strcmp(a, "version")) {
        printf("hetex %s\n", hx_version());
        return 0;
    }
    if (!strcmp(a, "help")) { /* hetex help COMMAND: its --help */
        if (argc > 3) {
            fprintf(stderr, "hetex help: one command at a time (got '%s' and '%s')\n", argv[2], argv[3]);
            return 2;
        }
        int k = find(argv[2]);
        if (k < 0) return unknown(argv[2]);
        static char help_flag[] = "--help";
        char *help_argv[] = {argv[2], help_flag, NULL};
        return commands[k].run(2, help_argv);
    }
    int k = find(a);
    return k < 0 ? unknown(a) : commands[k].run(argc - 1, argv + 1);
}
