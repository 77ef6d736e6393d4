/* Data parallel's consistency check at session creation: every rank must
 * run the same graph with the same seed, chunk size and ZeRO stage, or the ranks would
 * train different models or start different collectives and hang. Each
 * rank hashes a description of every tensor; the hashes are compared over
 * the communicator, and where they differ the first differing tensor's
 * description from every rank is gathered to name it. The same gather
 * carries a hash of each rank's hostname and allowed cores, from which
 * each rank learns its place among the ranks that may run on the same
 * cores (scheduler/pin.c shares them out). */
#define _GNU_SOURCE
#include "session/session.h"
#include "dist/dist.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { DESC = 192 }; /* bytes of one tensor's description (a multiple of 8) */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* What must match: name, op, dtype, shape, kind, target, inputs. */
static void describe(const hx_tensor *t, char *buf)
{
    int n = snprintf(buf, DESC, "#%d '%s' %s %s [", t->id, t->name ? t->name : "", hx__ops[t->op].name,
                     hx_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && n < DESC; d++)
        n += snprintf(buf + n, DESC - (size_t)n, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (n < DESC) n += snprintf(buf + n, DESC - (size_t)n, "] target %s from (", hx_target_name(t->target));
    for (int s = 0; s < t->n_src && n < DESC; s++)
        n += snprintf(buf + n, DESC - (size_t)n, "%s#%d", s ? "," : "", t->src[s]->id);
    if (n < DESC) snprintf(buf + n, DESC - (size_t)n, ")");
}

/* The hash of tensor t: its description, kind, attributes and optimizer. */
static uint64_t tensor_hash(const hx_tensor *t)
{
    char d[DESC] = {0};
    describe(t, d);
    uint64_t h = fnv(1469598103934665603ull, d, strlen(d));
    int kind = (int)t->kind;
    h = fnv(h, &kind, sizeof kind);
    h = fnv(h, t->attr.i, sizeof t->attr.i);
    h = fnv(h, t->attr.f, sizeof t->attr.f);
    h = fnv(h, &t->attr.seed, sizeof t->attr.seed);
    if (t->optimizer) {
        const hx_optimizer_config *o = t->optimizer;
        double v[11] = {o->lr, o->weight_decay, o->momentum, o->dampening, o->beta1, o->beta2,
                        o->eps, o->lr_decay, o->initial_accumulator, o->l1, o->l2};
        int k[2] = {(int)o->kind, o->nesterov};
        h = fnv(fnv(h, v, sizeof v), k, sizeof k);
    }
    return h;
}

static hx_status gather(hx_comm *c, const void *mine, void *all, int64_t n)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather(c, mine, all, n, HX_DTYPE_I64, &q);
    return st ? st : hx__coll_wait(q);
}

hx_status hx__session_dp_check(hx_session *s)
{
    hx_comm *c = s->e.cfg.comm;
    const hx_graph *g = s->e.g;
    int size = hx_comm_size(c), rank = hx_comm_rank(c);
    /* per rank: tensor count, graph hash, seed, chunk size, ZeRO stage, cores, offload_param */
    enum { K = 7 };
    char host[256] = {0};
    cpu_set_t cores;
    CPU_ZERO(&cores);
    if (gethostname(host, sizeof host - 1)) host[0] = 0; /* no name: one host */
    if (sched_getaffinity(0, sizeof cores, &cores)) CPU_ZERO(&cores);
    uint64_t where = fnv(fnv(1469598103934665603ull, host, strlen(host)), &cores, sizeof cores);
    int64_t mine[K] = {g->n, 0, (int64_t)s->e.cfg.seed, (int64_t)s->e.cfg.offload.chunk_size,
                       s->e.cfg.zero_stage, (int64_t)where, s->e.cfg.offload.offload_param};
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < g->n; i++) {
        uint64_t th = tensor_hash(g->tensors[i]);
        h = fnv(h, &th, sizeof th);
    }
    mine[1] = (int64_t)h;
    int64_t *all = malloc(sizeof mine * (size_t)size);
    if (!all) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    hx_status st = gather(c, mine, all, K);
    int diff = -1; /* a rank whose graph differs from rank 0's */
    for (int r = 1; r < size && !st && diff < 0; r++)
        if (all[K * r] != all[0] || all[K * r + 1] != all[1]) diff = r;
    for (int r = 1; r < size && !st && diff < 0; r++)
        if (all[K * r + 2] != all[2] || all[K * r + 3] != all[3] || all[K * r + 4] != all[4]) {
            st = hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: data parallel: the ranks' "
                           "configs differ: rank 0 has seed %lld, chunk_size %lld and zero_stage "
                           "%lld, rank %d seed %lld, chunk_size %lld and zero_stage %lld (every "
                           "rank must use the same)", (long long)all[2], (long long)all[3],
                           (long long)all[4], r, (long long)all[K * r + 2],
                           (long long)all[K * r + 3], (long long)all[K * r + 4]);
        }
    for (int r = 1; r < size && !st && diff < 0; r++) /* ZeRO: the disk tier's ranks agree on each step */
        if (all[K * r + 6] != all[6])
            st = hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: data parallel: the ranks' "
                           "configs differ: rank 0 has offload_param=%s, rank %d offload_param=%s "
                           "(every rank must use the same)",
                           hx_offload_target_name((hx_offload_target)all[6]), r,
                           hx_offload_target_name((hx_offload_target)all[K * r + 6]));
    s->local_rank = 0;
    s->local_size = 0;
    for (int r = 0; r < size && !st; r++) {
        bool here = all[K * r + 5] == mine[5];
        s->local_rank += here && r < rank;
        s->local_size += here;
    }
    if (st || diff < 0) {
        free(all);
        return st;
    }
    /* the first tensor whose hash differs between rank 0 and rank diff
     * (every rank takes part: all know diff and the counts) */
    int64_t common = all[0] < all[K * diff] ? all[0] : all[K * diff];
    int64_t *hashes = malloc(sizeof(int64_t) * (size_t)(common ? common : 1) * (size_t)size);
    int64_t *ours = malloc(sizeof(int64_t) * (size_t)(common ? common : 1));
    char *descs = calloc((size_t)size, DESC), mine_d[DESC] = {0};
    if (!hashes || !ours || !descs) st = hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int64_t i = 0; i < common && !st; i++) ours[i] = (int64_t)tensor_hash(g->tensors[i]);
    if (!st) st = gather(c, ours, hashes, common);
    int64_t first = common; /* common: the shorter graph ends there */
    for (int64_t i = 0; i < common && !st && first == common; i++)
        if (hashes[i] != hashes[(size_t)diff * (size_t)common + (size_t)i]) first = i;
    if (!st && first < g->n) describe(g->tensors[first], mine_d);
    else if (!st) snprintf(mine_d, DESC, "(no tensor #%lld: the graph has %d)", (long long)first, g->n);
    if (!st) st = gather(c, mine_d, descs, DESC / 8);
    if (!st)
        st = hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: data parallel: the ranks' graphs "
                       "differ (this is rank %d): the first difference is tensor #%lld: rank 0 has "
                       "%.*s, rank %d has %.*s; every rank must build the same graph", rank,
                       (long long)first, DESC, descs, diff, DESC, descs + (size_t)diff * DESC);
    free(hashes);
    free(ours);
    free(descs);
    free(all);
    return st;
}
