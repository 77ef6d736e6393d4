/* A program outside the tree: builds against the installed hetex only. */
#include <hetex.h>
#include <stdio.h>

int main(void)
{
    hx_graph *g = hx_graph_create();
    int64_t shape[1] = {4};
    float a[4] = {1, 2, 3, 4}, out[4];
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 1, shape);
    hx_tensor *c = hx_graph_constant(g, "c", HX_DTYPE_F32, 1, shape, a);
    hx_tensor *y = hx_mul(g, x, c);
    hx_session *s;
    if (!y || hx_session_create(g, NULL, &s)) {
        fprintf(stderr, "consumer: %s\n", hx_last_error());
        return 1;
    }
    hx_feed feed = {"x", NULL, a, sizeof a};
    hx_fetch fetch = {NULL, y, out, sizeof out};
    hx_status st = hx_session_run(s, &feed, 1, &fetch, 1, 0);
    hx_session_free(s);
    hx_graph_free(g);
    if (st || out[3] != 16.0f) {
        fprintf(stderr, "consumer: wrong result (%s)\n", hx_last_error());
        return 1;
    }
    printf("consumer: hetex %s works\n", hx_version());
    return 0;
}
