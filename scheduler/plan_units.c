/* Units of a plan: the steps of each subgraph in each phase, and each copy,
 * as a DAG the executor runs concurrently; the reachability between units
 * that the memory plan needs; and how the host cores are shared out. */
#include "scheduler/plan.h"

#include <stdlib.h>
#include <string.h>

/* Unit `to` reads a value unit `from` produced, first at step k (later:
 * at position k of to's steps). */
typedef struct edge { int from, to, k; } edge;

static int by_edge(const void *pa, const void *pb)
{
    const edge *a = pa, *b = pb;
    if (a->from != b->from) return a->from - b->from;
    if (a->to != b->to) return a->to - b->to;
    return a->k - b->k;
}

static int by_reader(const void *pa, const void *pb)
{
    const edge *a = pa, *b = pb;
    if (a->to != b->to) return a->to - b->to;
    if (a->k != b->k) return a->k - b->k;
    return a->from - b->from;
}

/* A min-heap of order keys (order_key). */
typedef struct heap { int *v, n; } heap;

static void heap_push(heap *h, int x)
{
    int i = h->n++;
    while (i > 0 && h->v[(i - 1) / 2] > x) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
}

static int heap_pop(heap *h)
{
    int top = h->v[0], x = h->v[--h->n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c]) c++;
        if (h->v[c] >= x) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

/* Creates units in the order of their first steps: unit_of[k] per step.
 * A subgraph's steps in a phase form one unit, but a device subgraph is
 * cut where the chunk changes (parameter or activation offload; the copies
 * of one chunk's parameters and activations back to the device form one
 * unit, its activations to the host another) and after the step whose gradient
 * copy brings the bytes copied since the last cut to a bucket
 * (grad_bucket_bytes), so that those copies leave while backward goes on.
 * Each later part of a subgraph gets an edge from the part before it
 * (cont, *n_cont); chunk[unit] receives each device or copy unit's chunk
 * (-1: none). */
static int make_units(const hx_engine *eng, hx_plan *p, int *unit_of, hx_unit *u, int *chunk,
                      edge *cont, int *n_cont)
{
    int n_sub = p->part.n_sub, nu = 0, cu = -1, co = -1;
    int *map = malloc(sizeof *map * 4 * (n_sub ? n_sub : 1));
    size_t *filled = calloc(n_sub ? n_sub : 1, sizeof *filled);
    if (!map || !filled) {
        free(map);
        free(filled);
        return -1;
    }
    int *last = map + 2 * n_sub; /* per (phase, subgraph): its latest unit */
    size_t bucket = eng->cfg.grad_bucket_bytes ? eng->cfg.grad_bucket_bytes : HX_GRAD_BUCKET_BYTES;
    for (int i = 0; i < 4 * n_sub; i++) map[i] = -1;
    *n_cont = 0;
    for (int k = 0; k < p->n_steps; k++) {
        const hx_step *sp = &p->steps[k];
        int ph = k >= p->first_update;
        int c = p->step_chunk ? p->step_chunk[k] : -1;
        char role = p->step_role[k];
        if (sp->fn) {
            int sub = ph * n_sub + p->part.sub_of[sp->node->id], *slot = &map[sub];
            if (*slot < 0 || (sp->dev == HX_DEV_ACCEL && chunk[*slot] != c)) {
                if (last[sub] >= 0) cont[(*n_cont)++] = (edge){last[sub], nu, k};
                chunk[nu] = sp->dev == HX_DEV_ACCEL ? c : -1;
                *slot = last[sub] = nu;
                u[nu++] = (hx_unit){.lane = sp->dev == HX_DEV_ACCEL ? HX_LANE_COMPUTE : HX_LANE_HOST,
                                    .phase = ph, .fed_input = -1};
            }
            unit_of[k] = *slot;
            continue;
        }
        if (role == HX_ROLE_GRAD_OUT) {
            int sub = p->part.sub_of[sp->node->id];
            filled[sub] += hx_tensor_nbytes(sp->node);
            if (filled[sub] >= bucket) { /* the bucket is full: cut backward here */
                map[sub] = -1;
                filled[sub] = 0;
            }
        }
        bool in = role == HX_ROLE_STREAM_IN || role == HX_ROLE_ACT_IN;
        if (in && cu >= 0 && chunk[cu] == c && u[cu].phase == ph) {
            unit_of[k] = cu; /* the chunk's copy unit to the device */
        } else if (role == HX_ROLE_ACT_OUT && co >= 0 && chunk[co] == c) {
            unit_of[k] = co; /* the chunk's activations to the host */
        } else {
            if (in) cu = nu;
            if (role == HX_ROLE_ACT_OUT) co = nu;
            chunk[nu] = c;
            unit_of[k] = nu;
            u[nu++] = (hx_unit){.lane = sp->dev == HX_DEV_ACCEL ? HX_LANE_H2D : HX_LANE_D2H,
                                .phase = ph,
                                .fed_input = sp->dev == HX_DEV_ACCEL &&
                                                     sp->node->kind == HX_TENSOR_INPUT
                                                 ? sp->node->id : -1};
        }
    }
    free(map);
    free(filled);
    return nu;
}

/* Sorts edges and keeps one per (from, to): the first read. */
static int dedup_edges(edge *e, int ne)
{
    qsort(e, ne, sizeof *e, by_edge);
    int m = 0;
    for (int i = 0; i < ne; i++)
        if (!m || e[m - 1].from != e[i].from || e[m - 1].to != e[i].to) e[m++] = e[i];
    return m;
}

/* Edges between units: a step reads a value another unit produced; and
 * the n_cont edges between the parts of a cut subgraph. */
static int make_edges(const hx_engine *eng, const hx_plan *p, const int *unit_of, edge *e,
                      const edge *cont, int n_cont)
{
    int n = eng->g->n, ne = 0;
    for (int i = 0; i < n_cont; i++) e[ne++] = cont[i];
    int *prod = malloc(sizeof *prod * HX_NDEV * (n ? n : 1));
    if (!prod) return -1;
    for (int i = 0; i < HX_NDEV * n; i++) prod[i] = -1;
    for (int k = 0; k < p->n_steps; k++) {
        const hx_step *sp = &p->steps[k];
        const hx_tensor *t = sp->node;
        if (!sp->fn) {
            int q = prod[sp->src_dev * n + t->id];
            if (q >= 0) e[ne++] = (edge){unit_of[q], unit_of[k], k};
        }
        for (int j = 0; sp->fn && j < hx__n_reads(eng, t); j++) {
            int q = prod[sp->dev * n + hx__read(eng, t, j)->id];
            if (q >= 0 && unit_of[q] != unit_of[k]) e[ne++] = (edge){unit_of[q], unit_of[k], k};
        }
        prod[sp->dev * n + t->id] = k;
    }
    free(prod);
    return dedup_edges(e, ne);
}

/* Offload's prefetch limit, as edges: a copy to the device made in chunk c
 * (the chunk's parameters and activations back, a fed input) waits for the
 * device work of chunk c - 1 - depth (the latest chunk at or before it that
 * has some), and a copy to the host made in chunk c (a gradient, an
 * activation out) must be done before
 * the device work of chunk c + 1 + depth starts and before the copies of
 * that chunk to the device, so that the device holds about depth + 1
 * chunks of parameters and of gradients. */
static int control_edges(const hx_engine *eng, const hx_plan *p, const int *unit_of,
                         const int *chunk, const hx_unit *u, int nu, edge *e, int ne)
{
    int depth = eng->cfg.offload.prefetch_depth;
    int *first = malloc(sizeof *first * (nu ? nu : 1));
    if (!first) return -1;
    for (int k = p->n_steps - 1; k >= 0; k--) first[unit_of[k]] = k;
    for (int x = 0; x < nu; x++) {
        if (chunk[x] < 0 || u[x].phase || u[x].lane == HX_LANE_COMPUTE) continue;
        bool in = u[x].lane == HX_LANE_H2D;
        int best = -1, copy = -1; /* out: also the copies to the device of that chunk */
        for (int w = 0; w < nu; w++) {
            if (u[w].phase || chunk[w] < 0) continue;
            if (!in && u[w].lane == HX_LANE_H2D && chunk[w] >= chunk[x] + 1 + depth &&
                (copy < 0 || chunk[w] < chunk[copy]))
                copy = w;
            if (u[w].lane != HX_LANE_COMPUTE) continue;
            if (in ? chunk[w] <= chunk[x] - 1 - depth && (best < 0 || chunk[w] >= chunk[best])
                   : chunk[w] >= chunk[x] + 1 + depth && (best < 0 || chunk[w] < chunk[best]))
                best = w;
        }
        if (best >= 0) e[ne++] = in ? (edge){best, x, first[x]} : (edge){x, best, first[best]};
        if (copy >= 0) e[ne++] = (edge){x, copy, first[copy]};
    }
    free(first);
    return dedup_edges(e, ne);
}

/* Which ready unit comes first in the unit-major order: phase 0 before
 * phase 1, then copy units before compute and host units (a copy that may
 * run beside a compute unit but sits after it would stretch every value
 * of that unit to the copy's position in the memory plan, so that none of
 * them shares bytes; before it, only the copy's few values are affected),
 * then the lowest creation number. */
static int order_key(const hx_unit *x, int u, int nu)
{
    bool copy = x->lane == HX_LANE_H2D || x->lane == HX_LANE_D2H;
    return u + nu * (2 * x->phase + !copy);
}

/* Kahn's algorithm in order_key's order: rank[old] = new number. */
static int topo_order(const hx_unit *units, int nu, const edge *e, int ne, int *rank,
                      int *scratch)
{
    int *indeg = scratch, *start = scratch + nu;
    heap h = {scratch + 2 * nu + 1, 0};
    memset(indeg, 0, sizeof *indeg * nu);
    memset(start, 0, sizeof *start * (nu + 1));
    for (int i = 0; i < ne; i++) {
        indeg[e[i].to]++;
        start[e[i].from + 1]++;
    }
    for (int u = 0; u < nu; u++) start[u + 1] += start[u];
    for (int u = 0; u < nu; u++)
        if (!indeg[u]) heap_push(&h, order_key(&units[u], u, nu));
    int next = 0;
    while (h.n) {
        int u = heap_pop(&h) % nu;
        rank[u] = next++;
        for (int i = start[u]; i < start[u + 1]; i++)
            if (!--indeg[e[i].to]) heap_push(&h, order_key(&units[e[i].to], e[i].to, nu));
    }
    return next;
}

int hx__unit_after(const hx_plan *p, const uint64_t *reach, int U, int u)
{
    const hx_unit *x = &p->units[U];
    if (x->phase > p->units[u].phase) return 0;
    int words = hx__reach_words(p->n_units);
    for (int j = 0; j < x->n_pred; j++) { /* preds in the order they are needed */
        int w = p->links[x->first_pred + j];
        if (w == u || hx__reaches(reach, words, u, w)) return p->link_at[x->first_pred + j];
    }
    return x->n_steps;
}

/* Whether some step of u can run at the same time as some step of v. */
static bool concurrent(const hx_plan *p, const uint64_t *reach, int u, int v)
{
    return u != v && hx__unit_after(p, reach, v, u) > 0 && hx__unit_after(p, reach, u, v) > 0;
}

/* Upper bound on the CPU units of phase ph that can run at once, and
 * whether one of them can run at the same time as a device unit. */
static int host_width(const hx_plan *p, const uint64_t *reach, int ph, bool *with_dev)
{
    int width = 0;
    *with_dev = false;
    for (int u = p->first_unit[ph]; u < p->first_unit[ph + 1]; u++) {
        if (p->units[u].lane != HX_LANE_HOST) continue;
        int w = 1;
        for (int v = p->first_unit[ph]; v < p->first_unit[ph + 1]; v++) {
            if (!concurrent(p, reach, u, v)) continue;
            if (p->units[v].lane == HX_LANE_HOST) w++;
            else if (p->units[v].lane == HX_LANE_COMPUTE) *with_dev = true;
        }
        if (w > width) width = w;
    }
    return width;
}

/* Host cores per lane: CPU units that can run at once share them with the
 * emu compute stream when it can run beside them; otherwise each gets all
 * it can. */
static void share_threads(const hx_engine *eng, hx_plan *p, const uint64_t *reach)
{
    int T = eng->nthreads;
    for (int ph = 0; ph < 2; ph++) {
        bool with_dev;
        int width = host_width(p, reach, ph, &with_dev);
        int dev = eng->accel_on_host && with_dev;
        int lanes = width < 1 ? 1 : width;
        if (lanes > T - dev) lanes = T - dev > 1 ? T - dev : 1;
        int h = T / (lanes + dev);
        if (h < 1) h = 1;
        int e = dev ? T - lanes * h : T;
        p->host_lanes[ph] = lanes;
        p->threads[ph][0] = h;
        p->threads[ph][1] = e < 1 ? 1 : e;
    }
}

hx_status hx__plan_units(const hx_engine *eng, hx_plan *p, uint64_t **reach_out)
{
    int ns = p->n_steps ? p->n_steps : 1;
    size_t max_edges = 0;
    for (int k = 0; k < p->n_steps; k++) max_edges += p->steps[k].fn ? hx__n_reads(eng, p->steps[k].node) : 1;
    int *unit_of = malloc(sizeof *unit_of * ns), *chunk = malloc(sizeof *chunk * ns);
    hx_unit *u0 = malloc(sizeof *u0 * ns);
    edge *e = malloc(sizeof *e * (max_edges + 3 * (size_t)ns)), *cont = malloc(sizeof *cont * ns);
    int n_cont = 0;
    int *rank = malloc(sizeof *rank * ns), *scratch = malloc(sizeof *scratch * (3 * ns + 1));
    uint64_t *reach = NULL;
    hx_status st = HX_OK;
    if (!unit_of || !chunk || !u0 || !e || !cont || !rank || !scratch) goto oom;
    int nu = make_units(eng, p, unit_of, u0, chunk, cont, &n_cont);
    int ne = nu < 0 ? -1 : make_edges(eng, p, unit_of, e, cont, n_cont);
    if (ne < 0) goto oom;
    if (p->step_chunk) { /* without the prefetch limit where it would close a cycle */
        int nc = control_edges(eng, p, unit_of, chunk, u0, nu, e, ne);
        if (nc < 0) goto oom;
        if (topo_order(u0, nu, e, nc, rank, scratch) == nu) ne = nc;
        else if ((ne = make_edges(eng, p, unit_of, e, cont, n_cont)) < 0) goto oom;
    }
    topo_order(u0, nu, e, ne, rank, scratch);
    for (int i = 0; i < ne; i++) e[i] = (edge){rank[e[i].from], rank[e[i].to], e[i].k};
    qsort(e, ne, sizeof *e, by_edge);

    int words = hx__reach_words(nu);
    p->n_units = nu;
    p->units = malloc(sizeof *p->units * (nu ? nu : 1));
    p->unit_steps = malloc(sizeof *p->unit_steps * ns);
    p->links = malloc(sizeof *p->links * (2 * (size_t)ne + 1));
    p->link_at = malloc(sizeof *p->link_at * (2 * (size_t)ne + 1));
    reach = calloc((size_t)(nu ? nu : 1) * words, sizeof *reach);
    if (!p->units || !p->unit_steps || !p->links || !p->link_at || !reach) goto oom;
    for (int i = 0; i < nu; i++) p->units[rank[i]] = u0[i];
    /* steps, unit after unit, each unit's in step order */
    int *fill = scratch;
    memset(fill, 0, sizeof *fill * (nu + 1));
    for (int k = 0; k < p->n_steps; k++) fill[rank[unit_of[k]] + 1]++;
    for (int i = 0; i < nu; i++) {
        fill[i + 1] += fill[i];
        p->units[i].first = fill[i];
        p->units[i].n_steps = fill[i + 1] - fill[i];
    }
    for (int k = 0; k < p->n_steps; k++) p->unit_steps[fill[rank[unit_of[k]]]++] = k;
    /* same-phase links: each unit's preds in the order its steps first need
     * them (link_at: that step's position in the unit), then its succs
     * (link_at: where the link sits in the succ's preds) */
    for (int k = 0; k < p->n_steps; k++) unit_of[p->unit_steps[k]] = k; /* step -> position */
    edge *by_to = malloc(sizeof *by_to * (ne ? ne : 1));
    if (!by_to) goto oom;
    memcpy(by_to, e, sizeof *e * ne);
    for (int i = 0; i < ne; i++) by_to[i].k = unit_of[by_to[i].k];
    qsort(by_to, ne, sizeof *by_to, by_reader);
    int nl = 0;
    for (int i = 0, j = 0; i < nu; i++) {
        hx_unit *x = &p->units[i];
        x->first_pred = nl;
        for (; j < ne && by_to[j].to == i; j++)
            if (p->units[by_to[j].from].phase == x->phase) {
                p->links[nl] = by_to[j].from;
                p->link_at[nl++] = by_to[j].k - x->first;
            }
        x->n_pred = nl - x->first_pred;
    }
    free(by_to);
    for (int i = 0, j = 0; i < nu; i++) {
        hx_unit *x = &p->units[i];
        x->first_succ = nl;
        for (; j < ne && e[j].from == i; j++) {
            const hx_unit *v = &p->units[e[j].to];
            if (v->phase != x->phase) continue;
            int back = 0;
            while (p->links[v->first_pred + back] != i) back++;
            p->links[nl] = e[j].to;
            p->link_at[nl++] = back;
        }
        x->n_succ = nl - x->first_succ;
    }
    p->n_links = nl;
    p->first_unit[0] = 0;
    p->first_unit[1] = p->first_unit[2] = nu;
    for (int i = nu - 1; i >= 0 && p->units[i].phase == 1; i--) p->first_unit[1] = i;
    /* reach, last unit first: itself, its successors' rows, and after phase 0, all of phase 1 */
    for (int i = nu - 1, j = ne - 1; i >= 0; i--) {
        uint64_t *row = reach + (size_t)i * words;
        row[i / 64] |= 1ull << (i % 64);
        for (; j >= 0 && e[j].from == i; j--)
            for (int w = 0; w < words; w++) row[w] |= reach[(size_t)e[j].to * words + w];
        for (int v = p->first_unit[1]; p->units[i].phase == 0 && v < nu; v++)
            row[v / 64] |= 1ull << (v % 64);
    }
    share_threads(eng, p, reach);
    goto done;
oom:
    st = hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
    free(reach);
    reach = NULL;
done:
    free(cont);
    free(unit_of);
    free(chunk);
    free(u0);
    free(e);
    free(rank);
    free(scratch);
    *reach_out = reach;
    return st;
}
