/* example_resnet: the ResNet example as a program of its own (same options
 * as `hetex resnet`). */
#include "resnet.h"

int main(int argc, char **argv) { return resnet_main(argc, argv); }
