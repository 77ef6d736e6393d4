/* Partition: maximal same-target subgraphs whose subgraph DAG has no cycle.
 * Nodes are visited in topological order; a node joins a same-target
 * subgraph (one of its producers' if it can, else any) unless one of its
 * producers' subgraphs already depends on that one (joining would close a
 * cycle), else it opens a new subgraph. anc[a][b] (b is an ancestor of a) is kept transitive. */
#include "graph/graph.h"

#include <stdlib.h>
#include <string.h>

void hx__partition_free(hx_partition *p)
{
    if (!p) return;
    free(p->sub_of);
    free(p->sub_target);
    free(p->sub_ops);
    free(p->dep);
    memset(p, 0, sizeof *p);
}

hx_status hx__partition(const hx_graph *g, const bool *in_set, const hx_target *target,
                        bool recompute, const hx_lowered *low, hx_partition *out)
{
    int n = g->n, cap = 0;
    size_t nz = n > 0 ? (size_t)n : 1;
    for (int i = 0; i < n; i++) cap += in_set[i];
    memset(out, 0, sizeof *out);
    out->sub_of = malloc(sizeof *out->sub_of * nz);
    out->sub_target = malloc(sizeof *out->sub_target * (cap ? cap : 1));
    out->sub_ops = calloc(cap ? cap : 1, sizeof *out->sub_ops);
    bool *anc = calloc((size_t)(cap ? cap : 1) * (cap ? cap : 1), sizeof *anc);
    int *preds = malloc(sizeof *preds * (cap ? cap : 1));
    if (!out->sub_of || !out->sub_target || !out->sub_ops || !anc || !preds) {
        free(anc);
        free(preds);
        hx__partition_free(out);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "partition: out of host memory");
    }
    int ns = 0;
    for (int v = 0; v < n; v++) {
        out->sub_of[v] = -1;
        if (!in_set[v]) continue;
        const hx_tensor *t = g->tensors[v];
        int np = 0;
        for (int k = 0; k < hx__n_read(t, low); k++) {
            int s = out->sub_of[hx__read_src(t, k, recompute, low)->id];
            bool dup = s < 0;
            for (int j = 0; j < np && !dup; j++) dup = preds[j] == s;
            if (!dup) preds[np++] = s;
        }
        int join = -1; /* producers' subgraphs first, then any other, newest first */
        for (int j = 0; j < np + ns && join < 0; j++) {
            int s = j < np ? preds[j] : ns - 1 - (j - np);
            if (out->sub_target[s] != target[v]) continue;
            bool ok = true;
            for (int q = 0; q < np && ok; q++) ok = preds[q] == s || !anc[(size_t)preds[q] * cap + s];
            if (ok) join = s;
        }
        if (join < 0) {
            join = ns++;
            out->sub_target[join] = target[v];
        }
        out->sub_of[v] = join;
        out->sub_ops[join]++;
        /* join's ancestors grow by the producers' subgraphs and their ancestors;
         * so do the ancestors of every subgraph that descends from join. */
        for (int j = 0; j < np; j++) {
            int s = preds[j];
            if (s == join) continue;
            anc[(size_t)join * cap + s] = true;
            for (int b = 0; b < ns; b++)
                if (anc[(size_t)s * cap + b]) anc[(size_t)join * cap + b] = true;
        }
        for (int d = 0; d < ns; d++)
            if (anc[(size_t)d * cap + join])
                for (int b = 0; b < ns; b++)
                    if (anc[(size_t)join * cap + b]) anc[(size_t)d * cap + b] = true;
    }
    free(anc);
    free(preds);
    out->n_sub = ns;
    out->dep = calloc((size_t)(ns ? ns : 1) * (ns ? ns : 1), sizeof *out->dep);
    if (!out->dep) {
        hx__partition_free(out);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "partition: out of host memory");
    }
    for (int v = 0; v < n; v++) {
        int a = out->sub_of[v];
        if (a < 0) continue;
        for (int k = 0; k < hx__n_read(g->tensors[v], low); k++) {
            int b = out->sub_of[hx__read_src(g->tensors[v], k, recompute, low)->id];
            if (b >= 0 && b != a) out->dep[(size_t)a * ns + b] = true;
        }
    }
    return HX_OK;
}
