/* A test program for the runner itself (tests/harness/test_harness.sh):
 * one case that checks, one that checks nothing, one that skips. */
#include "testutil.h"

static void checks(void) { CHECK(1 + 1 == 2, "arithmetic"); }
static void checks_nothing(void) {}
static void skips(void) { test_skip("nothing to run here"); }

static const test_case cases[] = {
    {"checks", checks},
    {"checks_nothing", checks_nothing},
    {"skips", skips},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "harness_probe", cases, TEST_COUNT(cases));
}
