/* The placement planner on its abstract problem (graph.h: hx_ap_problem):
 * a simulator of one training step for a choice of sides, a list
 * schedule, single moves, and an exact search for small problems.
 *
 * The simulator runs the nodes in index order (a topological order), phase
 * 0 then phase 1 (the updates, which start once phase 0 is over), on four
 * lanes as the executor does: the host, the device, and one copy lane per
 * direction. A node starts when its lane is free and its inputs are on its
 * side; a value read on the other side is copied once (per value and
 * destination) as soon as it exists and the copy lane is free. Device
 * memory: the persistent nodes (parameters, state) placed there for the
 * whole step, and every other value from the node that makes it (or, for
 * a copy, its first device reader) to its last reader, in index order. */
#include "graph/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct hx_ap_work {
    double *finish, *copied; /* per node: when it ends; when its copy (one direction) ends */
    int *last, *first_dev, *last_dev;
    int64_t *delta;          /* memory sweep */
    int8_t *side;            /* per node, for this evaluation */
    int *users, *first_user; /* readers of each node (CSR) */
    int *members, *first_member; /* nodes of each group (CSR) */
    int64_t *group_persist;  /* per group: bytes of its persistent nodes */
};

static void work_free(hx_ap_work *w)
{
    if (!w) return;
    free(w->finish);
    free(w->copied);
    free(w->last);
    free(w->first_dev);
    free(w->last_dev);
    free(w->delta);
    free(w->side);
    free(w->users);
    free(w->first_user);
    free(w->members);
    free(w->first_member);
    free(w->group_persist);
    free(w);
}

static hx_ap_work *work_new(const hx_ap_problem *p)
{
    size_t n = (size_t)p->n + 1, e = 1;
    for (int i = 0; i < p->n; i++) e += (size_t)p->node[i].n_src;
    hx_ap_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->finish = malloc(sizeof *w->finish * n);
    w->copied = malloc(sizeof *w->copied * n);
    w->last = malloc(sizeof *w->last * n);
    w->first_dev = malloc(sizeof *w->first_dev * n);
    w->last_dev = malloc(sizeof *w->last_dev * n);
    w->delta = malloc(sizeof *w->delta * (n + 1));
    w->side = malloc(n);
    w->users = malloc(sizeof *w->users * e);
    w->first_user = calloc(n + 1, sizeof *w->first_user);
    size_t G = (size_t)p->n_groups + 1;
    w->members = malloc(sizeof *w->members * n);
    w->first_member = calloc(G + 1, sizeof *w->first_member);
    w->group_persist = calloc(G, sizeof *w->group_persist);
    if (!w->finish || !w->copied || !w->last || !w->first_dev || !w->last_dev || !w->delta ||
        !w->side || !w->users || !w->first_user || !w->members || !w->first_member ||
        !w->group_persist) {
        work_free(w);
        return NULL;
    }
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->node[i].n_src; k++) w->first_user[p->src[p->node[i].first_src + k] + 1]++;
    for (int i = 0; i < p->n; i++) w->first_user[i + 1] += w->first_user[i];
    int *at = w->last; /* scratch */
    for (int i = 0; i < p->n; i++) at[i] = w->first_user[i];
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->node[i].n_src; k++) {
            int j = p->src[p->node[i].first_src + k];
            w->users[at[j]++] = i;
        }
    for (int i = 0; i < p->n; i++) {
        int g = p->node[i].group;
        if (g < 0) continue;
        w->first_member[g + 1]++;
        if (p->node[i].persistent) w->group_persist[g] += (int64_t)p->node[i].bytes;
    }
    for (int g = 0; g < p->n_groups; g++) w->first_member[g + 1] += w->first_member[g];
    for (int g = 0; g < p->n_groups; g++) at[g] = w->first_member[g];
    for (int i = 0; i < p->n; i++)
        if (p->node[i].group >= 0) w->members[at[p->node[i].group]++] = i;
    return w;
}

static int8_t side_of(const hx_ap_problem *p, const int8_t *gside, int i)
{
    int g = p->node[i].group;
    return g < 0 ? p->node[i].side : gside[g];
}

/* When value j is on side s for a reader: at once where it is made, else
 * after its copy (made on first need, on the direction's lane). */
static double arrival(const hx_ap_problem *p, hx_ap_work *w, double copy_free[2], int j, int s)
{
    if (w->side[j] == s) return w->finish[j];
    if (w->copied[j] >= 0) return w->copied[j];
    int dir = s == 1 ? 0 : 1;
    double start = fmax(copy_free[dir], w->finish[j]);
    w->copied[j] = start + p->lat[dir] + (double)p->node[j].bytes / p->bw[dir];
    copy_free[dir] = w->copied[j];
    return w->copied[j];
}

/* Device bytes at the step's peak for the sides in w->side. */
static size_t device_bytes(const hx_ap_problem *p, hx_ap_work *w)
{
    int n = p->n;
    int64_t persist = 0;
    for (int i = 0; i <= n; i++) w->delta[i] = 0;
    for (int i = 0; i < n; i++) {
        w->last[i] = i;
        w->first_dev[i] = -1;
        w->last_dev[i] = -1;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < p->node[i].n_src; k++) {
            int j = p->src[p->node[i].first_src + k];
            if (i > w->last[j]) w->last[j] = i;
            if (w->side[i] == 1 && w->side[j] == 0) {
                if (w->first_dev[j] < 0) w->first_dev[j] = i;
                w->last_dev[j] = i;
            }
        }
    for (int i = 0; i < n; i++) {
        const hx_ap_node *a = &p->node[i];
        int64_t b = (int64_t)a->bytes;
        if (a->persistent && w->side[i] == 1) {
            persist += b;
            continue;
        }
        int from = -1, to = -1;
        if (w->side[i] == 1 && !a->persistent && !a->leaf) from = i, to = w->last[i];
        else if (w->first_dev[i] >= 0) from = w->first_dev[i], to = w->last_dev[i];
        if (from < 0) continue;
        w->delta[from] += b;
        w->delta[to + 1] -= b;
    }
    int64_t live = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        live += w->delta[i];
        if (live > peak) peak = live;
    }
    return (size_t)(persist + peak);
}

static double simulate(const hx_ap_problem *p, hx_ap_work *w)
{
    double lane_free[2] = {0, 0}, copy_free[2] = {0, 0}, phase0 = 0, end = 0;
    for (int i = 0; i < p->n; i++) w->copied[i] = -1, w->finish[i] = 0;
    for (int phase = 0; phase < 2; phase++) {
        for (int i = 0; i < p->n; i++) {
            const hx_ap_node *a = &p->node[i];
            if (a->phase1 != (phase == 1)) continue;
            int s = w->side[i];
            if (a->leaf) {
                w->finish[i] = 0;
                continue;
            }
            double ready = phase ? phase0 : 0;
            for (int k = 0; k < a->n_src; k++)
                ready = fmax(ready, arrival(p, w, copy_free, p->src[a->first_src + k], s));
            double start = fmax(lane_free[s], ready);
            w->finish[i] = start + a->cost[s];
            lane_free[s] = w->finish[i];
        }
        end = fmax(fmax(lane_free[0], lane_free[1]), fmax(copy_free[0], copy_free[1]));
        if (!phase) phase0 = end;
    }
    return end;
}

double hx__ap_eval(const hx_ap_problem *p, hx_ap_work *w, const int8_t *gside, size_t *dev_bytes)
{
    for (int i = 0; i < p->n; i++) w->side[i] = side_of(p, gside, i);
    size_t bytes = device_bytes(p, w);
    if (dev_bytes) *dev_bytes = bytes;
    double t = simulate(p, w);
    return bytes > p->cap ? INFINITY : t;
}

hx_status hx__ap_work_new(const hx_ap_problem *p, hx_ap_work **out)
{
    *out = work_new(p);
    return *out ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "placement planner: out of host memory");
}

void hx__ap_work_free(hx_ap_work *w) { work_free(w); }

/* ---- the list schedule ------------------------------------------------------------ */

/* Where node i (undecided group) finishes on side s, given the schedule so
 * far, without committing its copies; plus the copies its group's leaves
 * (a parameter) would need for the readers already placed on the other side. */
static double finish_on(const hx_ap_problem *p, hx_ap_work *w, const double lane_free[2],
                        const double copy_free[2], int i, int s)
{
    const hx_ap_node *a = &p->node[i];
    if (!isfinite(a->cost[s])) return INFINITY;
    double cf[2] = {copy_free[0], copy_free[1]}, ready = a->phase1 ? w->finish[p->n] : 0;
    for (int k = 0; k < a->n_src; k++) {
        int j = p->src[a->first_src + k];
        double r;
        if (w->side[j] == s || w->side[j] < 0) r = w->finish[j];
        else if (w->copied[j] >= 0) r = w->copied[j];
        else {
            int dir = s == 1 ? 0 : 1;
            r = fmax(cf[dir], w->finish[j]) + p->lat[dir] + (double)p->node[j].bytes / p->bw[dir];
            cf[dir] = r;
        }
        ready = fmax(ready, r);
    }
    double t = fmax(lane_free[s], ready) + a->cost[s];
    for (int m = w->first_member[a->group]; m < w->first_member[a->group + 1]; m++) {
        int j = w->members[m]; /* the group's leaves, read on the other side */
        if (!p->node[j].leaf) continue;
        for (int u = w->first_user[j]; u < w->first_user[j + 1]; u++) {
            int r = w->users[u];
            if (w->side[r] >= 0 && w->side[r] != s) {
                int dir = w->side[r] == 1 ? 0 : 1;
                t += p->lat[dir] + (double)p->node[j].bytes / p->bw[dir];
                break;
            }
        }
    }
    return t;
}

static void list_schedule(const hx_ap_problem *p, hx_ap_work *w, int8_t *gside)
{
    double lane_free[2] = {0, 0}, copy_free[2] = {0, 0};
    int64_t persist = 0; /* device bytes of persistent nodes placed there */
    for (int g = 0; g < p->n_groups; g++) gside[g] = -1;
    for (int i = 0; i < p->n; i++) {
        w->side[i] = p->node[i].group < 0 ? p->node[i].side : -1;
        w->copied[i] = -1;
        w->finish[i] = 0;
        if (w->side[i] == 1 && p->node[i].persistent) persist += (int64_t)p->node[i].bytes;
    }
    w->finish[p->n] = 0; /* the end of phase 0 */
    for (int phase = 0; phase < 2; phase++) {
        for (int i = 0; i < p->n; i++) {
            const hx_ap_node *a = &p->node[i];
            if (a->phase1 != (phase == 1)) continue;
            int g = a->group;
            if (g >= 0 && gside[g] < 0 && !a->leaf) {
                int64_t gbytes = w->group_persist[g];
                double t0 = finish_on(p, w, lane_free, copy_free, i, 0);
                double t1 = persist + gbytes > (int64_t)p->cap ? INFINITY
                                                               : finish_on(p, w, lane_free, copy_free, i, 1);
                gside[g] = t1 < t0 ? 1 : 0;
                if (gside[g]) persist += gbytes;
                for (int m = w->first_member[g]; m < w->first_member[g + 1]; m++)
                    w->side[w->members[m]] = gside[g];
            }
            if (a->leaf || w->side[i] < 0) continue;
            int s = w->side[i];
            double ready = phase ? w->finish[p->n] : 0;
            for (int k = 0; k < a->n_src; k++) {
                int j = p->src[a->first_src + k];
                ready = fmax(ready, w->side[j] < 0 ? 0 : arrival(p, w, copy_free, j, s));
            }
            w->finish[i] = fmax(lane_free[s], ready) + a->cost[s];
            lane_free[s] = w->finish[i];
        }
        if (!phase)
            w->finish[p->n] = fmax(fmax(lane_free[0], lane_free[1]), fmax(copy_free[0], copy_free[1]));
    }
    for (int g = 0; g < p->n_groups; g++) /* groups of leaves alone: the host */
        if (gside[g] < 0) gside[g] = 0;
}

/* ---- improvement ------------------------------------------------------------------- */

/* Whether the move of groups a and b (b < 0: a alone) to their other side
 * helps; keeps it if so. */
static bool try_move(const hx_ap_problem *p, hx_ap_work *w, int8_t *gside, int a, int b,
                     double *best, size_t *bytes, long *budget)
{
    gside[a] ^= 1;
    if (b >= 0) gside[b] ^= 1;
    size_t nb;
    double t = hx__ap_eval(p, w, gside, &nb);
    --*budget;
    bool better = isfinite(*best) ? t < *best * (1 - 1e-9) : (isfinite(t) || nb < *bytes);
    if (better) {
        *best = t;
        *bytes = nb;
        return true;
    }
    gside[a] ^= 1;
    if (b >= 0) gside[b] ^= 1;
    return false;
}

/* Moves one group at a time to its other side while that shortens the
 * step (or, from a placement that does not fit, lowers device memory),
 * first improvement; when no single move helps, pairs of groups (on
 * problems of at most PAIRS_MAX groups); until nothing helps or `budget`
 * evaluations are spent. */
enum { PAIRS_MAX = 40 };
static double improve(const hx_ap_problem *p, hx_ap_work *w, int8_t *gside, long *budget)
{
    size_t bytes;
    double best = hx__ap_eval(p, w, gside, &bytes);
    --*budget;
    for (bool moved = true; moved && *budget > 0;) {
        moved = false;
        for (int g = 0; g < p->n_groups && *budget > 0; g++)
            moved |= try_move(p, w, gside, g, -1, &best, &bytes, budget);
        for (int a = 0; !moved && p->n_groups <= PAIRS_MAX && a < p->n_groups && *budget > 0; a++)
            for (int b = a + 1; !moved && b < p->n_groups && *budget > 0; b++)
                moved = try_move(p, w, gside, a, b, &best, &bytes, budget);
    }
    return best;
}

hx_status hx__ap_plan(const hx_ap_problem *p, int8_t *gside, double *step)
{
    hx_ap_work *w;
    hx_status st = hx__ap_work_new(p, &w);
    if (st) return st;
    int G = p->n_groups ? p->n_groups : 1;
    int8_t *cand = malloc((size_t)G);
    if (!cand) {
        hx__ap_work_free(w);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "placement planner: out of host memory");
    }
    /* Evaluations cost about (nodes + edges) x 50 ns: about 8e6 node-edge
     * visits in all (0.4 s), and on small problems at least 3 passes of
     * single moves and 4 of pairs; the list schedule gets half, the other
     * starts (all host, all device) a quarter each. */
    double size = 1;
    for (int i = 0; i < p->n; i++) size += 1.0 + p->node[i].n_src;
    long budget_all = (long)(8e6 / size);
    if (G <= PAIRS_MAX && budget_all < 12L * G * G + 12) budget_all = 12L * G * G + 12;
    double best = INFINITY;
    for (int start = 0; start < 3; start++) {
        if (start == 0) list_schedule(p, w, cand);
        else memset(cand, start == 1 ? 0 : 1, (size_t)G);
        long budget = start ? budget_all / 4 : budget_all / 2;
        double t = improve(p, w, cand, &budget);
        if (t < best || start == 0) {
            best = t;
            memcpy(gside, cand, (size_t)p->n_groups);
        }
    }
    *step = best;
    free(cand);
    hx__ap_work_free(w);
    return HX_OK;
}

hx_status hx__ap_exact(const hx_ap_problem *p, int8_t *gside, double *step)
{
    if (p->n_groups > 20)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "placement exact search: %d undecided groups; "
                         "it enumerates at most 20", p->n_groups);
    hx_ap_work *w;
    hx_status st = hx__ap_work_new(p, &w);
    if (st) return st;
    int8_t cur[20];
    double best = INFINITY;
    for (uint32_t m = 0; m < (1u << p->n_groups); m++) {
        for (int g = 0; g < p->n_groups; g++) cur[g] = (int8_t)(m >> g & 1);
        double t = hx__ap_eval(p, w, cur, NULL);
        if (t < best) {
            best = t;
            memcpy(gside, cur, (size_t)p->n_groups);
        }
    }
    if (!isfinite(best)) memset(gside, 0, (size_t)p->n_groups);
    *step = best;
    hx__ap_work_free(w);
    return HX_OK;
}
