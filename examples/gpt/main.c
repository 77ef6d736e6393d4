/* example_gpt: the GPT example as a program of its own (same options as
 * `hetex gpt`). */
#include "gpt.h"

int main(int argc, char **argv) { return gpt_main(argc, argv); }
