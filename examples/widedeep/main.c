/* example_widedeep: the wide & deep example as a program of its own (same
 * options as `hetex widedeep`). */
#include "wd.h"

int main(int argc, char **argv) { return wd_main(argc, argv); }
