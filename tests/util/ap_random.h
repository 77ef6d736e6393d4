/* Random problems for the placement planner (graph.h's hx_ap_problem),
 * for its tests and benchmark. */
#ifndef HX_TEST_AP_RANDOM_H
#define HX_TEST_AP_RANDOM_H

#include "graph/graph.h"
#include "testutil.h"

/* Up to k undecided groups and cap_nodes nodes (whichever comes first):
 * two inputs, ops with one or two earlier sources (never an update), some
 * fixed on either side, 40% "matmuls" 20x faster on the device, the others
 * 0.8-2x, parameters read by an op and written by an update in phase 1 (a
 * group of two), values of 1 KiB to 4 MiB, 10 us + 8 GB/s links each way;
 * a quarter of them with a device cap that holds about half the
 * parameters. Free with test_ap_free. */
void test_ap_random(test_rng *r, int k, int cap_nodes, hx_ap_problem *p);
void test_ap_free(hx_ap_problem *p);

#endif
