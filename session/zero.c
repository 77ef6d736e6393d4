/* Data parallel, ZeRO stages 1-3 (hx_session_config.zero_stage): each
 * rank owns the parameters of its chunks of the gradient layout
 * (dist/dp.c); it keeps and updates only their optimizer state and, where
 * a parameter is an f32 master used through a half copy, the master; the
 * others' storage is freed at creation (with offload_param=disk the disk
 * tier never holds them: engine.remote; it keeps the rest, this rank's
 * shard of the state and what it reads of every parameter) and their
 * updates are left out of phase 1 (engine.update_skip). After the
 * updates each owner's chunks of
 * what every rank reads of its parameters (the half copy, else the f32
 * parameter itself) go to every rank (dist/dp.c's all-gather). Each rank
 * sums only its own gradients (a reduce-scatter at every stage), so the
 * gradient norm and the Inf/NaN check come from the owners' per-parameter
 * sums of squares, gathered and added in plan order as the scan adds
 * them: bitwise stage 0's norm. Stage 1 differs from stage 2 only in the
 * memory it accounts (every gradient's). Stage 3 sums as stage 2, shards
 * the replicas too (what every rank reads: the half copy, else the f32 parameter) and gathers them for
 * the forward and backward (zero3.c) instead of after the updates. */
#include "session/session.h"
#include "dist/dist.h"
#include "offload/offload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Source j of update u is sharded: a state of u, or its f32 master when u
 * writes a half copy (which the ranks read instead); at stage 3 every
 * source but the gradient. */
static bool sharded_src(const hx_tensor *u, int j, int stage)
{
    int half = (int)u->attr.i[0];
    if (stage == 3) return j != 1;
    return j >= 2 ? j != half : j == 0 && half > 0;
}

/* HX_DEBUG=zero: per dtype group, the chunks and what this rank owns. */
static void debug_layout(const hx_session *s)
{
    static const char *const group[2] = {"f32", "bf16"};
    int rank = hx_comm_rank(s->e.cfg.comm);
    for (int k = 0; k < 2; k++) {
        if (!s->dp[k]) continue;
        size_t mine = 0, all = 0;
        for (int i = 0; i < s->e.g->n; i++) {
            int x = s->dp_index[i];
            if (x < 0 || x % 2 != k) continue;
            size_t b = hx_tensor_nbytes(s->e.g->tensors[i]->src[1]);
            all += b;
            if (s->zero_owner[i] == rank) mine += b;
        }
        fprintf(stderr, "hetex zero: rank %d: %s gradients: %lld of them, %zu bytes in %lld chunks "
                "of %zu (padded to %lld); this rank owns %zu bytes of them\n", rank, group[k],
                (long long)s->dp_n[k], all, (long long)hx__dp_chunks(s->dp[k]),
                hx__dp_chunk_size(s->dp[k]), (long long)hx__dp_padded_chunks(s->dp[k]), mine);
    }
}

static hx_status refuse(const char *what)
{
    return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: ZeRO stages 1-3 do not combine "
                     "with %s yet: use zero_stage 0 for it", what);
}

hx_status hx__session_zero_setup(hx_session *s)
{
    hx_engine *e = &s->e;
    const hx_graph *g = e->g;
    int stage = e->cfg.zero_stage, rank = hx_comm_rank(e->cfg.comm);
    if (e->cfg.delayed_param_update) return refuse("delayed_param_update");
    size_t n = (size_t)(g->n ? g->n : 1);
    s->zero_owner = malloc(n * sizeof *s->zero_owner);
    s->zero_skip = calloc(n, sizeof *s->zero_skip);
    s->zero_sharded = calloc(n, sizeof *s->zero_sharded);
    s->zero_remote = calloc(n, sizeof *s->zero_remote);
    s->zero_key = malloc(n * sizeof *s->zero_key);
    if (!s->zero_owner || !s->zero_skip || !s->zero_sharded || !s->zero_remote || !s->zero_key)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int i = 0; i < g->n; i++) s->zero_owner[i] = s->zero_key[i] = -1;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *u = g->tensors[i];
        int k = s->dp_index[i];
        if (k < 0) continue;
        int owner = hx__dp_owner(s->dp[k % 2], k / 2);
        const hx_tensor *r = hx__zero_replica(u);
        if (hx_tensor_nbytes(r) > hx_tensor_nbytes(u->src[1]))
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: ZeRO: '%s' (%s) is larger than "
                             "its gradient '%s' (%s), whose chunks carry it to the ranks", r->name,
                             hx_dtype_name(r->dtype), u->src[1]->name, hx_dtype_name(u->src[1]->dtype));
        if (stage == 3 && hx__dev_of(e, r->id) != HX_DEV_HOST)
            return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: ZeRO stage 3 gathers the "
                             "parameters into host memory, and '%s' lives on the accelerator: set "
                             "offload_param=cpu (every parameter on the host, fetched to the device "
                             "chunk by chunk), or use zero_stage 2", r->name);
        s->zero_key[r->id] = k;
        s->zero_owner[i] = owner;
        s->zero_skip[i] = owner != rank;
        for (int j = 0; j < u->n_src; j++) {
            if (j == 1) continue; /* the gradient */
            int id = u->src[j]->id;
            s->zero_owner[id] = owner;
            if (!sharded_src(u, j, stage)) continue;
            size_t bytes = hx_tensor_nbytes(u->src[j]);
            s->zero_sharded[id] = true;
            s->zero_sharded_bytes += bytes;
            if (owner == rank) s->zero_owned_bytes += bytes;
            else s->zero_remote[id] = true;
        }
    }
    e->update_skip = s->zero_skip;
    e->remote = s->zero_remote;
    if (hx__debug("zero")) debug_layout(s);
    return HX_OK;
}

hx_status hx__session_zero_shard(hx_session *s)
{
    hx_engine *e = &s->e;
    for (int id = 0; id < e->g->n; id++) {
        if (!s->zero_remote[id] || !e->persist[id]) continue;
        int d = hx__dev_of(e, id);
        e->be[d]->free(e->be[d], e->persist[id]);
        e->persist[id] = NULL;
        e->persist_bytes[d] -= hx_tensor_nbytes(e->g->tensors[id]);
    }
    e->bind_gen++; /* plans bound before now rebind: the freed storage is gone */
    return e->cfg.zero_stage == 3 ? hx__session_zero3_create(s) : HX_OK;
}

void hx__session_zero_free(hx_session *s)
{
    hx__session_zero3_free(s);
    free(s->zero_key);
    free(s->zero_owner);
    free(s->zero_skip);
    free(s->zero_sharded);
    free(s->zero_remote);
}

hx_status hx__session_zero_norm(hx_session *s, const hx_plan *p, const hx_tensor **bad, double *sumsq)
{
    hx_comm *c = s->e.cfg.comm;
    int n = hx__plan_grad_count(p), size = hx_comm_size(c), rank = hx_comm_rank(c);
    double *mine = calloc((size_t)(n ? n : 1), sizeof *mine);
    double *all = calloc((size_t)(n ? n : 1) * (size_t)size, sizeof *all);
    hx_status st = mine && all ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_run: out of host memory");
    for (int i = 0; i < n && !st; i++) {
        void *at;
        int home;
        const hx_tensor *u = hx__plan_grad(p, i, &at, &home);
        if (s->zero_owner[u->id] == rank) mine[i] = hx__scan_sum(&s->e, p, i);
    }
    hx_coll *q = NULL;
    double t0 = hx__now(); /* not hidden: in comm_wait_s */
    if (!st) st = hx__comm_all_gather(c, mine, all, n, HX_DTYPE_I64, &q); /* doubles, as bytes */
    if (!st) st = hx__coll_wait(q);
    s->stats.comm_wait_s += hx__now() - t0;
    *bad = NULL;
    *sumsq = 0;
    for (int i = 0; i < n && !st; i++) {
        void *at;
        int home;
        const hx_tensor *u = hx__plan_grad(p, i, &at, &home);
        double v = all[(size_t)s->zero_owner[u->id] * (size_t)n + (size_t)i];
        if (!isfinite(v) && !*bad) *bad = u;
        *sumsq += v;
    }
    free(mine);
    free(all);
    return st;
}

int hx__zero_replica_reads(const hx_session *s, const hx_step *sp, bool host_only, int *ids, int *js,
                           int max)
{
    const hx_engine *e = &s->e;
    int n = 0;
    if (!sp->fn) {
        if ((!host_only || sp->src_dev == HX_DEV_HOST) && s->zero_key[sp->node->id] >= 0)
            ids[n] = sp->node->id, js[n++] = 0;
        return n;
    }
    if (host_only && sp->dev != HX_DEV_HOST) return 0;
    for (int j = 0; j < hx__n_reads(e, sp->node); j++) {
        int id = hx__read(e, sp->node, j)->id;
        if (s->zero_key[id] < 0) continue;
        if (n == max) return -1;
        ids[n] = id, js[n++] = j;
    }
    return n;
}

void hx__session_zero_replicas(const hx_session *s, int grp, void **vals, size_t *bytes)
{
    const hx_graph *g = s->e.g;
    for (int i = 0; i < g->n; i++) {
        int k = s->dp_index[i];
        if (k < 0 || k % 2 != grp) continue;
        const hx_tensor *r = hx__zero_replica(g->tensors[i]);
        vals[k / 2] = s->e.persist[r->id];
        bytes[k / 2] = hx_tensor_nbytes(r);
    }
}

hx_status hx__session_zero_access(const hx_session *s, const char *fn, const hx_tensor *t, bool write)
{
    if (!s->zero_sharded || t->graph != s->e.g || !s->zero_sharded[t->id]) return HX_OK;
    int owner = s->zero_owner[t->id];
    if (write)
        return hx__error(HX_ERR_UNSUPPORTED, "%s: '%s' is sharded over the ranks at ZeRO stage %d "
                         "(rank %d holds it); writing sharded state is not built: write it in a "
                         "session at zero_stage 0", fn, t->name, s->e.cfg.zero_stage, owner);
    if (owner != hx_comm_rank(s->e.cfg.comm))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: '%s' is sharded over the ranks at ZeRO stage "
                         "%d and rank %d holds it, not this rank (%d): read it there", fn, t->name,
                         s->e.cfg.zero_stage, owner, hx_comm_rank(s->e.cfg.comm));
    return HX_OK;
}

void hx__session_zero_stats(const hx_session *s, hx_memory_stats *out)
{
    out->zero_owned_bytes = s->zero_owned_bytes;
    out->zero_sharded_bytes = s->zero_sharded_bytes;
    out->zero_grad_shard_bytes = 0;
    for (int k = 0; k < 2; k++)
        if (s->dp[k]) out->zero_grad_shard_bytes += hx__dp_grad_shard_bytes(s->dp[k]);
    hx__session_zero3_stats(s, &out->zero_gather_peak_bytes, &out->zero_gather_planned_bytes);
}
