/* Builds a small wide-&-deep-shaped graph (host embedding gather, device MLP,
 * Adam on the host) and writes its placement as DOT and a summary; the
 * picture in docs/placement-example.png is its DOT drawn by Graphviz. */
#include <hetex.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: example_placement_dot OUT.dot OUT.txt\n");
        return 2;
    }
    hx_graph *g = hx_graph_create();
    int64_t ids_s[2] = {8, 4}, tab_s[2] = {1000, 16}, w1_s[2] = {64, 32}, w2_s[2] = {32, 1}, y_s[2] = {8, 1}, flat[2] = {8, 64};
    hx_tensor *ids = hx_graph_input(g, "ids", HX_DTYPE_I64, 2, ids_s);
    hx_tensor *label = hx_graph_input(g, "label", HX_DTYPE_F32, 2, y_s);
    hx_tensor *table = hx_graph_param(g, "table", HX_DTYPE_F32, 2, tab_s, hx_init_normal(0, 0.1));
    hx_tensor *emb = hx_gather(g, table, ids); /* CPU by default */
    hx_tensor *w1 = hx_graph_param(g, "w1", HX_DTYPE_F32, 2, w1_s, hx_init_xavier_uniform(1));
    hx_tensor *w2 = hx_graph_param(g, "w2", HX_DTYPE_F32, 2, w2_s, hx_init_xavier_uniform(1));
    hx_graph_push_target(g, HX_TARGET_DEVICE);
    hx_tensor *h = hx_relu(g, hx_matmul(g, hx_reshape(g, emb, 2, flat), w1, false, false));
    hx_tensor *loss = hx_bce_with_logits(g, hx_matmul(g, h, w2, false, false), label);
    hx_graph_pop_target(g);
    hx_graph_backward(g, loss);
    hx_optimizer_config adam = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    if (hx_graph_apply_optimizer(g, NULL, &adam)) { puts(hx_last_error()); return 1; }
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = HX_ACCELERATOR_EMU;
    hx_session *s;
    if (hx_session_create(g, &cfg, &s) || hx_session_dump_dot(s, argv[1]) || hx_session_dump_summary(s, argv[2])) { puts(hx_last_error()); return 1; }
    hx_session_free(s);
    hx_graph_free(g);
    return 0;
}
