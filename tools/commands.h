/* Subcommands of the hetex CLI: each takes argv from its own name on and
 * returns the process exit code. */
#ifndef HX_TOOLS_COMMANDS_H
#define HX_TOOLS_COMMANDS_H

int hx_cmd_mlp(int argc, char **argv);
int hx_cmd_memreplay(int argc, char **argv);
int hx_cmd_plot(int argc, char **argv);
/* The examples the CLI runs (examples/<name>/, built into the CLI). */
int gpt_main(int argc, char **argv);
int resnet_main(int argc, char **argv);
int wd_main(int argc, char **argv);

#endif
