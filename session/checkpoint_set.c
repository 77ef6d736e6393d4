/* Sharded checkpoints of a ZeRO session (hx_session_save at zero_stage >=
 * 1, a collective over its communicator): each rank writes the saved
 * tensors it is the writer of (the sharded masters and moments it owns,
 * at stage 3 its parameters too; rank 0 also every replicated tensor) as a checkpoint file of its own,
 * "<path>.g<gen>.<rank>-of-<N>" (checkpoint.c's format, staged), reads it
 * back for its size and XXH3-64, and when every rank's is written and
 * read back rank 0 commits the set with the manifest at path (core.h's
 * shard sets):
 *   hetex sharded session checkpoint 1
 *   generation G / shards N / stage S / tensors T
 *   N x "shard J tensors K bytes B xxh3 H"
 *   T x "tensor J LEN NAME"   (the shard that holds each saved tensor)
 *   check <XXH3-64 of the text before>
 * A kill at any instant leaves the old manifest and the old set, or the
 * new ones; the set before is removed once the new manifest is committed.
 * The files must be where every rank sees them (one machine, or a shared
 * folder).
 * Loading, at any number of ranks and stage or in a session of one
 * process: every number of the manifest is bounded and every tensor line
 * must name a distinct saved tensor of the graph, T of them; every shard
 * file is read whole against the manifest's size and XXH3-64 on every
 * rank (a changed, short or missing one: HX_ERR_CORRUPT naming it, on
 * every rank alike); the shards that hold a tensor this rank holds are
 * checked entry by entry (checkpoint.c), and each entry must be where the
 * manifest says; only when every rank has checked all this do they put
 * their tensors in place. */
#include "session/session.h"
#include "dist/dist.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAD "hetex sharded session checkpoint 1\n"

enum { MAX_NAME = 511 };

/* The longest manifest a graph of n tensors can have. */
static size_t manifest_cap(const hx_session *s)
{
    return 256 + (size_t)HX_MAX_SHARDS * 96 + (size_t)s->e.g->n * (48 + MAX_NAME);
}

/* The rank that writes tensor i (saved) of a ZeRO session. */
static int writer_of(const hx_session *s, int i)
{
    return s->zero_sharded[i] ? s->zero_owner[i] : 0;
}

static hx_status gather(hx_comm *c, const int64_t *mine, int64_t *all, int64_t n)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_all_gather(c, mine, all, n, HX_DTYPE_I64, &q);
    return st ? st : hx__coll_wait(q);
}

static hx_status bcast(hx_comm *c, int64_t *v, int64_t n)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_broadcast(c, v, n, HX_DTYPE_I64, 0, &q);
    return st ? st : hx__coll_wait(q);
}

/* The ranks' statuses (every stride-th of all): this rank's own error
 * (mine, kept before the collective), else one naming the first rank that
 * failed. */
static hx_status first_failure(const char *fn, const int64_t *all, int size, int stride, int rank,
                               const char *mine)
{
    hx_status own = (hx_status)all[(size_t)rank * (size_t)stride];
    if (own) return hx__error(own, "%s", mine);
    for (int j = 0; j < size; j++) {
        hx_status st = (hx_status)all[(size_t)j * (size_t)stride];
        if (!st) continue;
        return hx__error(st, "%s: rank %d failed its part (%s; its own error says why); no rank went on",
                         fn, j, hx_status_name(st));
    }
    return HX_OK;
}

hx_status hx__zero_agree(hx_session *s, const char *fn, hx_status own)
{
    if (!s->zero_owner) return own;
    hx_comm *c = s->e.cfg.comm;
    int size = hx_comm_size(c), rank = hx_comm_rank(c);
    char mine[HX_ERROR_LEN];
    snprintf(mine, sizeof mine, "%s", hx_last_error());
    int64_t me = own, *all = malloc((size_t)size * sizeof *all);
    if (!all) return own ? own : hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    hx_status st = gather(c, &me, all, 1);
    if (!st) st = first_failure(fn, all, size, 1, rank, mine);
    free(all);
    return st;
}

/* ---- saving --------------------------------------------------------------------- */

/* Rank 0: the manifest of the set gen, all[3j..3j+2] rank j's (status, bytes, xxh3). */
static hx_status write_manifest(hx_session *s, const char *path, int64_t gen, const int64_t *all)
{
    const hx_graph *g = s->e.g;
    int size = hx_comm_size(s->e.cfg.comm);
    int64_t *count = calloc((size_t)size, sizeof *count), total = 0;
    char *text = NULL;
    size_t len = 0;
    FILE *m = count ? open_memstream(&text, &len) : NULL;
    if (!m) {
        free(count);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_save: out of host memory");
    }
    for (int i = 0; i < g->n; i++)
        if (hx__ckpt_saved(g->tensors[i])) count[writer_of(s, i)]++, total++;
    fprintf(m, HEAD "generation %" PRId64 "\nshards %d\nstage %d\ntensors %" PRId64 "\n", gen, size,
            s->e.cfg.zero_stage, total);
    for (int j = 0; j < size; j++)
        fprintf(m, "shard %d tensors %" PRId64 " bytes %" PRId64 " xxh3 %016llx\n", j, count[j], all[3 * j + 1],
                (unsigned long long)all[3 * j + 2]);
    for (int i = 0; i < g->n; i++)
        if (hx__ckpt_saved(g->tensors[i]))
            fprintf(m, "tensor %d %zu %s\n", writer_of(s, i), strlen(g->tensors[i]->name), g->tensors[i]->name);
    fclose(m);
    free(count);
    hx_status st = text ? hx__manifest_commit("hx_session_save", path, text, len)
                        : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_save: out of host memory");
    free(text);
    return st;
}

hx_status hx__ckpt_save_set(hx_session *s, const char *path)
{
    hx_comm *c = s->e.cfg.comm;
    int size = hx_comm_size(c), rank = hx_comm_rank(c);
    const hx_graph *g = s->e.g;
    for (int i = 0; i < g->n; i++)
        if (strlen(g->tensors[i]->name) > MAX_NAME && hx__ckpt_saved(g->tensors[i]))
            return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_save: tensor name '%.40s...' is longer "
                             "than a checkpoint holds (%d bytes)", g->tensors[i]->name, MAX_NAME);
    /* the next generation and the shard count of the one before: rank 0 reads them */
    int64_t gen[2] = {1, 0};
    hx_manifest old;
    if (rank == 0 && !hx__manifest_read("hx_session_save", path, HEAD, manifest_cap(s), &old)) {
        gen[0] = old.gen + 1;
        gen[1] = old.shards;
        hx__manifest_free(&old);
    }
    hx_status st = bcast(c, gen, 2);
    if (st) return st;
    /* this rank's shard, read back: (status, bytes, xxh3) to every rank */
    char *file = hx__shard_file(path, gen[0], rank, size);
    bool *keep = calloc((size_t)(g->n ? g->n : 1), sizeof *keep);
    int64_t *all = malloc((size_t)size * 3 * sizeof *all), me[3] = {0, 0, 0};
    hx_status own = file && keep && all ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_save: out of host memory");
    for (int i = 0; i < g->n && keep; i++) keep[i] = hx__ckpt_holds(s, i) && writer_of(s, i) == rank;
    if (!own) own = hx__ckpt_write(s, file, keep);
    if (!own) own = hx__file_xxh3("hx_session_save", file, (uint64_t *)&me[2], &me[1]);
    me[0] = own;
    char mine[HX_ERROR_LEN];
    snprintf(mine, sizeof mine, "%s", hx_last_error());
    if (!all) st = own; /* the others time out naming this rank */
    else st = gather(c, me, all, 3);
    if (!st) st = first_failure("hx_session_save", all, size, 3, rank, mine);
    /* rank 0 commits the set; every rank learns whether it did */
    int64_t commit = !st && rank == 0 ? write_manifest(s, path, gen[0], all) : HX_OK;
    if (!st) {
        snprintf(mine, sizeof mine, "%s", hx_last_error());
        st = bcast(c, &commit, 1);
        if (!st && commit)
            st = rank == 0 ? hx__error((hx_status)commit, "%s", mine)
                           : hx__error((hx_status)commit, "hx_session_save: rank 0 could not commit the "
                                       "manifest '%s' (%s; its own error says why); the checkpoint there is "
                                       "as it was", path, hx_status_name((hx_status)commit));
    }
    if (st && file) remove(file);
    if (!st && rank == 0 && gen[1]) hx__shard_files_remove(path, gen[0] - 1, gen[1]); /* no longer named */
    free(file);
    free(keep);
    free(all);
    return st;
}

/* ---- loading -------------------------------------------------------------------- */

bool hx__ckpt_is_set(const char *path)
{
    char head[sizeof HEAD];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    return n == sizeof head - 1 && !memcmp(head, HEAD, n);
}

typedef struct set {
    hx_manifest m;
    int64_t stage, tensors;
    int64_t *count, *bytes; /* per shard */
    uint64_t *hash;
    int *shard;             /* per tensor id: the shard the manifest names (-1: none) */
} set;

static hx_status bad(const char *path, const char *what, int64_t line)
{
    return hx__error(HX_ERR_CORRUPT, "hx_session_load: the manifest '%s' is not one of this graph's "
                     "sharded checkpoints: %s (line %" PRId64 " of its list); nothing was loaded",
                     path, what, line);
}

/* The manifest's lines after "shards N", every number bounded, every
 * tensor one of the graph's saved ones, named once. */
static hx_status parse(const hx_session *s, const char *path, set *x)
{
    const hx_graph *g = s->e.g;
    const char *p = x->m.body;
    int used = 0;
    int64_t N = x->m.shards, expected = 0;
    for (int i = 0; i < g->n; i++) expected += hx__ckpt_saved(g->tensors[i]);
    if (sscanf(p, "stage %" SCNd64 "\ntensors %" SCNd64 "\n%n", &x->stage, &x->tensors, &used) != 2 ||
        x->stage < 1 || x->stage > 3)
        return bad(path, "its stage line is malformed or not 1 to 3", 0);
    if (x->tensors != expected) {
        char why[96];
        snprintf(why, sizeof why, "it holds %" PRId64 " tensors, the graph has %" PRId64, x->tensors, expected);
        return bad(path, why, 0);
    }
    p += used;
    x->count = malloc((size_t)N * 2 * sizeof *x->count);
    x->hash = malloc((size_t)N * sizeof *x->hash);
    x->shard = malloc((size_t)(g->n ? g->n : 1) * sizeof *x->shard);
    if (!x->count || !x->hash || !x->shard) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
    x->bytes = x->count + N;
    for (int i = 0; i < g->n; i++) x->shard[i] = -1;
    for (int64_t j = 0; j < N; j++) {
        int64_t idx;
        unsigned long long h;
        if (sscanf(p, "shard %" SCNd64 " tensors %" SCNd64 " bytes %" SCNd64 " xxh3 %16llx\n%n", &idx,
                   &x->count[j], &x->bytes[j], &h, &used) != 4 || idx != j || x->count[j] < 0 ||
            x->count[j] > x->tensors || x->bytes[j] < 16 || x->bytes[j] > ((int64_t)1 << 56))
            return bad(path, "a shard line is malformed or out of range", j + 1);
        x->hash[j] = h;
        p += used;
    }
    int64_t *listed = calloc((size_t)N, sizeof *listed);
    if (!listed) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
    hx_status st = HX_OK;
    for (int64_t k = 0; k < x->tensors && !st; k++) {
        int64_t j, len;
        char name[MAX_NAME + 1];
        /* the name: len bytes after one space, whatever they are */
        if (sscanf(p, "tensor %" SCNd64 " %" SCNd64 "%n", &j, &len, &used) != 2 || p[used++] != ' ' || j < 0 ||
            j >= N || len < 1 || len > MAX_NAME || strnlen(p + used, (size_t)len + 1) < (size_t)len + 1 ||
            p[used + len] != '\n') {
            st = bad(path, "a tensor line is malformed or out of range", N + k + 1);
            break;
        }
        memcpy(name, p + used, (size_t)len);
        name[len] = 0;
        p += used + len + 1;
        const hx_tensor *t = hx_graph_find(g, name);
        if (!t || !hx__ckpt_saved(t) ||
            x->shard[t->id] >= 0) {
            hx__error(HX_ERR_CORRUPT, "hx_session_load: the manifest '%s' names '%s'%s; nothing was loaded",
                      path, name, t && x->shard[t->id] >= 0 ? " twice" : ", which is not a parameter or "
                      "optimizer state of this graph");
            st = HX_ERR_CORRUPT;
            break;
        }
        x->shard[t->id] = (int)j;
        listed[j]++;
    }
    for (int64_t j = 0; j < N && !st; j++)
        if (listed[j] != x->count[j]) st = bad(path, "a shard's tensor count differs from its tensor lines", j + 1);
    if (!st && *p) st = bad(path, "lines after the last tensor", N + x->tensors + 1);
    free(listed);
    return st;
}

/* Every shard file against the manifest; those holding a tensor this rank
 * holds, entry by entry, into in. */
static hx_status check_shards(const hx_session *s, const char *path, const set *x, hx_ckpt_in *in)
{
    const hx_graph *g = s->e.g;
    hx_status st = HX_OK;
    for (int64_t j = 0; j < x->m.shards && !st; j++) {
        char *file = hx__shard_file(path, x->m.gen, j, x->m.shards);
        if (!file) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_load: out of host memory");
        uint64_t h = 0;
        int64_t bytes = 0;
        if (hx__file_xxh3("hx_session_load", file, &h, &bytes))
            st = hx__error(HX_ERR_CORRUPT, "hx_session_load: shard file '%s' of the checkpoint '%s' cannot be "
                           "read (%s); nothing was loaded", file, path, hx_last_error());
        else if (h != x->hash[j] || bytes != x->bytes[j])
            st = hx__error(HX_ERR_CORRUPT, "hx_session_load: shard file '%s' does not match the manifest '%s' "
                           "(%" PRId64 " bytes, XXH3 %016llx; the manifest says %" PRId64 ", %016llx): changed, "
                           "cut short or damaged since the save; nothing was loaded", file, path, bytes,
                           (unsigned long long)h, x->bytes[j], (unsigned long long)x->hash[j]);
        bool needed = false;
        for (int i = 0; i < g->n && !needed; i++) needed = x->shard[i] == j && hx__ckpt_holds(s, i);
        if (!st && needed) st = hx__ckpt_in_file(in, s, (int)j, file, true);
        free(file);
    }
    for (int i = 0; i < g->n && !st; i++)
        if (in->off[i] >= 0 && in->file[i] != x->shard[i])
            st = hx__error(HX_ERR_CORRUPT, "hx_session_load: '%s' is in shard %d of '%s', its manifest says shard "
                           "%d; nothing was loaded", g->tensors[i]->name, in->file[i], path, x->shard[i]);
    return st;
}

hx_status hx__ckpt_load_set(hx_session *s, const char *path)
{
    hx_status st = hx__dpu_settle(&s->e); /* a delayed update lands first */
    if (st) return st;
    set x;
    memset(&x, 0, sizeof x);
    hx_ckpt_in in;
    memset(&in, 0, sizeof in);
    st = hx__manifest_read("hx_session_load", path, HEAD, manifest_cap(s), &x.m);
    if (!st) st = parse(s, path, &x);
    if (!st) st = hx__ckpt_in_init(&in, s, (int)x.m.shards);
    if (!st) st = check_shards(s, path, &x, &in);
    if (!st) st = hx__ckpt_in_check(&in, s);
    st = hx__zero_agree(s, "hx_session_load", st);
    if (!st) st = hx__ckpt_in_apply(&in, s);
    hx__ckpt_in_free(&in);
    hx__manifest_free(&x.m);
    free(x.count);
    free(x.hash);
    free(x.shard);
    return st;
}
