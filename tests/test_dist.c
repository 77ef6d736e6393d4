/* A communicator outside mpirun: in a build with MPI, one rank of its own
 * (MPI's singleton start) whose collectives give back the inputs; in a
 * build without, hx_comm_create says how to get MPI. $HX_TEST_MPI says
 * which the build is (cmake/hetex_mpi_tests.cmake sets it). */
#include "dist/dist.h"
#include "hetex_checks.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void test_alone(void)
{
    const char *want = getenv("HX_TEST_MPI");
    if (!want) {
        test_skip("HX_TEST_MPI not set: run under ctest");
        return;
    }
    hx_comm *c = NULL;
    hx_status st = hx_comm_create(NULL, &c);
    if (strcmp(want, "ON")) {
        CHECK(st == HX_ERR_UNSUPPORTED && strstr(hx_last_error(), "apt-get install openmpi-bin"),
              "a build without MPI: got %s: %s", hx_status_name(st), hx_last_error());
        CHECK(c == NULL, "*out NULL");
        return;
    }
    CHECK(st == HX_OK, "%s", hx_last_error());
    if (st != HX_OK) return;
    CHECK(hx_comm_rank(c) == 0 && hx_comm_size(c) == 1, "rank %d of %d", hx_comm_rank(c), hx_comm_size(c));
    test_rng g = test_rng_make(5);
    float x[37], y[37];
    test_fill_uniform(&g, x, 37, -2, 2);
    hx_coll *q = NULL;
    OK(hx__comm_all_reduce(c, x, y, 37, HX_DTYPE_F32, &q));
    OK(hx__coll_wait(q));
    CHECK(!memcmp(x, y, sizeof x), "one rank's sum is its input");
    hx_comm_free(c);
}

int main(int argc, char **argv)
{
    static const test_case cases[] = {{"alone", test_alone}};
    return test_main(argc, argv, "test_dist", cases, TEST_COUNT(cases));
}
