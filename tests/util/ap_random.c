/* Random placement problems: see ap_random.h. */
#include "ap_random.h"

#include <math.h>
#include <stdlib.h>

void test_ap_random(test_rng *r, int k, int cap_nodes, hx_ap_problem *p)
{
    p->node = calloc((size_t)cap_nodes, sizeof *p->node);
    p->src = malloc(sizeof *p->src * 3 * (size_t)cap_nodes);
    int n = 0, e = 0, g = 0, pending_param = -1;
    size_t persist = 0;
    for (int i = 0; i < 2; i++) /* inputs */
        p->node[n++] = (hx_ap_node){.group = -1, .side = 0, .leaf = true,
                                    .bytes = (size_t)exp(test_rng_uniform(r, log(1e3), log(4e6)))};
    while ((g < k || pending_param >= 0) && n + 2 < cap_nodes) {
        hx_ap_node a = {.group = -1};
        a.bytes = (size_t)exp(test_rng_uniform(r, log(1e3), log(4e6)));
        double u = test_rng_uniform(r, 0, 1);
        if (pending_param < 0 && g + 2 <= k && u < 0.2) { /* a parameter leaf */
            a.leaf = a.persistent = true;
            a.group = g++;
            pending_param = n;
            persist += a.bytes;
            p->node[n++] = a;
            continue;
        }
        double host = exp(test_rng_uniform(r, log(1e-5), log(2e-3)));
        bool mm = test_rng_uniform(r, 0, 1) < 0.4;
        a.cost[0] = host;
        a.cost[1] = 1e-5 + host / (mm ? 20 : test_rng_uniform(r, 0.8, 2));
        a.first_src = e;
        int ns = 1 + (test_rng_uniform(r, 0, 1) < 0.5);
        for (int j = 0; j < ns; j++) { /* nothing reads an update */
            int src = (int)test_rng_uniform(r, 0, n - 0.001);
            while (p->node[src].phase1) src--;
            p->src[e++] = src;
        }
        if (pending_param >= 0 && u > 0.6) { /* the update of that parameter */
            p->src[e++] = pending_param;
            a.group = p->node[pending_param].group;
            a.phase1 = true;
            pending_param = -1;
        } else if (u < 0.75 && g < k) {
            a.group = g++;
        } else {
            a.side = (int8_t)(test_rng_uniform(r, 0, 1) < 0.3);
            a.cost[!a.side] = INFINITY;
        }
        a.n_src = e - a.first_src;
        p->node[n++] = a;
    }
    p->n = n;
    p->n_groups = g;
    p->lat[0] = p->lat[1] = 10e-6;
    p->bw[0] = p->bw[1] = 8e9;
    p->cap = test_rng_uniform(r, 0, 1) < 0.25 ? persist / 2 + 4000000 : (size_t)1 << 34;
}

void test_ap_free(hx_ap_problem *p)
{
    free(p->node);
    free(p->src);
}
