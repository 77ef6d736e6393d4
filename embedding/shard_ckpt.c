/* Checkpoints of sharded tables: each rank saves its part with the local
 * table's checksummed save (embedding/emb_io.c) to "PATH.g<gen>.<r>-of-<N>",
 * then rank 0 writes the manifest at PATH (a staged file: the commit of
 * the set; core.h's shard sets, shared with the session's sharded
 * checkpoints) naming every shard's rows, bytes and XXH3-64. A crash at any instant leaves the old
 * manifest and the old generation's files, or the new ones. The files
 * must be where every rank sees them (one machine, or a shared folder).
 *
 * A load reads the manifest, checks every shard file it needs against it
 * (a changed or corrupt shard: HX_ERR_CORRUPT), reads those shards into
 * tables of their own (verifying every block), and only when every rank
 * has done so puts the rows and their optimizer state where the table now
 * keeps them: a fixed table saved at N shards (row-wise or table-wise)
 * loads at any number of ranks, and into a table of one process without
 * MPI. A DYNAMIC table loaded at the layout and rank count it was saved at
 * takes its own shard's map as saved; at another one, or into a DYNAMIC
 * table of one process, the keys of every shard are re-hashed to the
 * ranks that now own them, with their counts, clocks, rows and state
 * (embedding/shard_rekey.c). */
#define _GNU_SOURCE
#include "embedding/shard_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MANIFEST_HEAD "hetex sharded embedding table 1\n"
enum { LAYOUT_ROWS = 0, LAYOUT_TABLE = 1 };
static const char *const layout_name[2] = {"rows", "table"};

typedef struct manifest {
    int64_t gen, shards, rows, dim, owner, dtype, dynamic, layout;
    int64_t *srows, *sbytes;
    uint64_t *shash;
} manifest;

static void manifest_free(manifest *m)
{
    free(m->srows);
    m->srows = m->sbytes = NULL;
    m->shash = NULL;
}

/* XXH3-64 and size of a whole file. */
static hx_status file_hash(const char *path, uint64_t *hash, int64_t *bytes, hx_emb_err *err)
{
    hx_status st = hx__file_xxh3("sharded embedding checkpoint", path, hash, bytes);
    return st ? hx_emb_fail(err, st, "%s", hx_last_error()) : HX_OK;
}

/* The manifest at path, every number checked. */
static hx_status manifest_read(const char *path, manifest *m, hx_emb_err *err)
{
    memset(m, 0, sizeof *m);
    enum { CAP = 64 + HX_MAX_SHARDS * 96 + 512 };
    hx_manifest mf;
    hx_status st = hx__manifest_read("sharded embedding checkpoint", path, MANIFEST_HEAD, CAP, &mf);
    if (st) return hx_emb_fail(err, st, "%s", hx_last_error());
    m->gen = mf.gen;
    m->shards = mf.shards;
    const char *p = mf.body;
    char layout[16] = "";
    int used = 0;
    if (sscanf(p, "rows %" SCNd64 "\ndim %" SCNd64 "\ndtype %" SCNd64 "\ndynamic %" SCNd64
               "\nlayout %15s\nowner %" SCNd64 "\n%n", &m->rows, &m->dim, &m->dtype, &m->dynamic, layout,
               &m->owner, &used) != 6)
        st = hx_emb_fail(err, HX_ERR_CORRUPT, "%s: the manifest's header lines are malformed", path);
    m->layout = !strcmp(layout, "table") ? LAYOUT_TABLE : LAYOUT_ROWS;
    if (!st && (m->rows < 1 || m->rows > ((int64_t)1 << 40) ||
                m->dim < 1 || m->dim > ((int64_t)1 << 20) || m->dynamic < 0 || m->dynamic > 1 ||
                (strcmp(layout, "rows") && strcmp(layout, "table")) || m->owner < 0 || m->owner >= m->shards ||
                (m->dtype != HX_DTYPE_F32 && m->dtype != HX_DTYPE_F16 && m->dtype != HX_DTYPE_BF16)))
        st = hx_emb_fail(err, HX_ERR_CORRUPT, "%s: a header value is out of range (%" PRId64 " shards, %"
                         PRId64 " x %" PRId64 ")", path, m->shards, m->rows, m->dim);
    if (!st) {
        m->srows = malloc((size_t)m->shards * 3 * sizeof *m->srows);
        if (!m->srows) st = hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
        else {
            m->sbytes = m->srows + m->shards;
            m->shash = (uint64_t *)(m->sbytes + m->shards);
        }
    }
    p += used;
    for (int64_t s = 0; s < m->shards && !st; s++) {
        int64_t idx;
        unsigned long long h;
        if (sscanf(p, "shard %" SCNd64 " rows %" SCNd64 " bytes %" SCNd64 " xxh3 %16llx\n%n", &idx, &m->srows[s],
                   &m->sbytes[s], &h, &used) != 4 || idx != s || m->srows[s] < 0 || m->srows[s] > m->rows ||
            m->sbytes[s] < 0)
            st = hx_emb_fail(err, HX_ERR_CORRUPT, "%s: shard line %" PRId64 " is malformed or out of range", path, s);
        m->shash[s] = h;
        p += used;
        /* a fixed table's shard holds the rows its layout gives it, exactly */
        int64_t want = m->layout == LAYOUT_TABLE ? (s == m->owner ? m->rows : 0)
                       : s < m->rows              ? (m->rows - s + m->shards - 1) / m->shards : 0;
        if (!st && !m->dynamic && m->srows[s] != want)
            st = hx_emb_fail(err, HX_ERR_CORRUPT, "%s: shard %" PRId64 " holds %" PRId64 " rows; a %s-wise "
                             "layout of %" PRId64 " rows over %" PRId64 " shards gives it %" PRId64, path, s,
                             m->srows[s], layout_name[m->layout], m->rows, m->shards, want);
    }
    hx__manifest_free(&mf);
    if (st) manifest_free(m);
    return st;
}

/* ---- save ------------------------------------------------------------------------ */

static hx_status manifest_write(hx_emb_shard *s, const char *path, int64_t gen, const int64_t *all,
                                hx_emb_err *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory writing %s", path);
    fprintf(m, MANIFEST_HEAD "generation %" PRId64 "\nshards %d\nrows %" PRId64 "\ndim %" PRId64
            "\ndtype %d\ndynamic %d\nlayout %s\nowner %d\n", gen, s->size, s->base.rows, s->base.dim,
            (int)s->tc.dtype, s->dynamic, layout_name[s->table_wise], s->table_wise ? s->owner : 0);
    for (int j = 0; j < s->size; j++)
        fprintf(m, "shard %d rows %" PRId64 " bytes %" PRId64 " xxh3 %016llx\n", j, all[4 * j + 1],
                all[4 * j + 2], (unsigned long long)all[4 * j + 3]);
    fclose(m);
    hx_status st = hx__manifest_commit("hx_embedding_table_save", path, text, len);
    free(text);
    return st ? hx_emb_fail(err, st, "%s", hx_last_error()) : HX_OK;
}

static hx_status bcast(hx_emb_shard *s, int64_t *v, int64_t n, hx_emb_err *err)
{
    hx_coll *q = NULL;
    hx_status st = hx__comm_broadcast(s->comm, v, n, HX_DTYPE_I64, 0, &q);
    if (!st) st = hx__coll_wait(q);
    return st ? hx_emb_fail(err, st, "sharded embedding checkpoint: %s", hx_last_error()) : HX_OK;
}

hx_status hx__shard_save(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    hx_emb_shard *s = (hx_emb_shard *)t;
    int N = s->size;
    hx_emb_err mine;
    pthread_mutex_lock(&s->lock);
    hx_status own = HX_OK;
    hx__shard_hot_before(s, false, &own, &mine); /* the owners' rows current */
    /* the next generation and the shards of the one before: rank 0 reads them */
    int64_t gen[2] = {1, 0};
    manifest old;
    if (s->rank == 0 && !manifest_read(path, &old, NULL)) {
        gen[0] = old.gen + 1;
        gen[1] = old.shards;
        manifest_free(&old);
    }
    hx_status st = bcast(s, gen, 2, err);
    /* this rank's part: (status, rows, bytes, xxh3) to every rank */
    char *mine_path = st ? NULL : hx__shard_file(path, gen[0], s->rank, N);
    int64_t me[4] = {0, s->part ? s->local->base.rows : 0, 0, 0};
    int64_t *all = malloc((size_t)N * 4 * sizeof *all);
    if (!own && (!mine_path || !all)) own = hx_emb_fail(&mine, HX_ERR_OUT_OF_MEMORY, "out of memory");
    else if (!own && s->part && !(own = hx_emb_table_save(s->part, mine_path, &mine)))
        own = file_hash(mine_path, (uint64_t *)&me[3], &me[2], &mine);
    me[0] = own;
    if (!st && all) {
        hx_coll *q = NULL;
        st = hx__comm_all_gather(s->comm, me, all, 4, HX_DTYPE_I64, &q);
        if (!st) st = hx__coll_wait(q);
        if (st) st = hx_emb_fail(err, st, "sharded embedding save: %s", hx_last_error());
    } else if (!st) {
        st = hx_emb_fail(err, own, "%s", mine.msg); /* the peers time out naming this rank */
    }
    for (int j = 0; j < N && !st; j++)
        if (all[4 * j]) {
            if (j == s->rank) st = hx_emb_fail(err, own, "%s", mine.msg);
            else
                st = hx_emb_fail(err, (hx_status)all[4 * j], "sharded embedding save: rank %d could not save "
                                 "its shard (%s; its own error says why); the checkpoint at %s is as it was",
                                 j, hx_status_name((hx_status)all[4 * j]), path);
        }
    /* rank 0 commits the set */
    hx_status commit = !st && s->rank == 0 ? manifest_write(s, path, gen[0], all, &mine) : HX_OK;
    if (!st) st = hx__shard_agree(s, HX_EMB_X_SAVE, commit, &mine, err);
    if (st && mine_path && s->part) remove(mine_path);
    if (!st && s->rank == 0) hx__shard_files_remove(path, gen[0] - 1, gen[1]); /* the set before, no longer named */
    pthread_mutex_unlock(&s->lock);
    free(mine_path);
    free(all);
    return st;
}

/* ---- load ------------------------------------------------------------------------ */

bool hx_emb_shard_is_manifest(const char *path)
{
    char head[sizeof MANIFEST_HEAD];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    return n == sizeof head - 1 && !memcmp(head, MANIFEST_HEAD, n);
}

/* Shard s of m, checked against the manifest, read into a local table of
 * its own shaped by tc (rows starting as the whole table's would), or a
 * dynamic one of mcfg's map (its capacity the shard's rows). */
static hx_status load_shard(const manifest *m, const char *path, int64_t s, const hx_emb_table_config *tc,
                            const hx_emb_idmap_config *mcfg, hx_emb_table **out, hx_emb_err *err)
{
    char *p = hx__shard_file(path, m->gen, s, m->shards);
    if (!p) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory");
    uint64_t h = 0;
    int64_t bytes = 0;
    hx_status st = file_hash(p, &h, &bytes, err);
    if (!st && (h != m->shash[s] || bytes != m->sbytes[s]))
        st = hx_emb_fail(err, HX_ERR_CORRUPT, "shard file %s does not match the manifest %s (%" PRId64 " bytes, "
                         "XXH3 %016llx; the manifest says %" PRId64 ", %016llx): changed or damaged since the "
                         "save", p, path, bytes, (unsigned long long)h, m->sbytes[s],
                         (unsigned long long)m->shash[s]);
    hx_emb_table_config c = *tc;
    c.rows = m->srows[s];
    c.lazy_init = 1;
    c.nthreads = 1;
    c.backing_file = c.ssd_path = NULL;
    if (!m->dynamic) { /* a dynamic shard's rows start as its own (hx__shard_make_part) */
        c.row_stride = m->layout == LAYOUT_ROWS ? m->shards : 0;
        c.row_offset = s;
    }
    hx_emb_idmap_config mc = *mcfg;
    mc.capacity = c.rows;
    if (!st) st = m->dynamic ? hx_emb_dynamic_create(&c, &mc, out, err) : hx_emb_local_create(&c, out, err);
    if (!st && (st = hx_emb_table_load(*out, p, err))) {
        hx_emb_table_free(*out);
        *out = NULL;
    }
    free(p);
    return st;
}

/* Where the table now keeps global row g: this rank's local row, or -1. */
typedef struct place_now {
    int size, rank, owner;
    bool table_wise;
} place_now;

static int64_t local_of(const place_now *p, int64_t g)
{
    if (p->table_wise) return p->rank == p->owner ? g : -1;
    return g % p->size == p->rank ? g / p->size : -1;
}

/* Every row of the loaded shards that dst holds, with its state. */
static hx_status copy_in(const manifest *m, hx_emb_table *const *src, const place_now *pn, hx_emb_local *dst,
                         hx_emb_err *err)
{
    int ns = hx_emb_optim_nstate(dst->optim.kind);
    bool rowwise = dst->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    float *buf = malloc((size_t)dst->gstride * sizeof *buf), *tmp = malloc((size_t)dst->gstride * sizeof *tmp);
    int64_t *reset = malloc((size_t)(dst->base.rows + 1) * sizeof *reset), nreset = 0;
    if (!buf || !tmp || !reset) {
        free(buf);
        free(tmp);
        free(reset);
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory loading rows");
    }
    for (int64_t s = 0; s < m->shards; s++) {
        hx_emb_local *from = src[s] ? hx_emb_as_local(src[s]) : NULL;
        for (int64_t l = 0; from && l < m->srows[s]; l++) {
            int64_t g = m->layout == LAYOUT_ROWS ? l * m->shards + s : l, r = local_of(pn, g);
            if (r < 0) continue;
            if (!((atomic_load(&from->ready[l >> 6]) >> (l & 63)) & 1)) { /* never written: its start */
                reset[nreset++] = r;
                continue;
            }
            hx_emb_local_read_row(from, l, buf);
            hx_emb_local_write_row(dst, r, buf, tmp);
            for (int k = 0; k < ns; k++) {
                hx_emb_local_read_state(from, k, l, buf);
                memcpy(dst->state[k] + (rowwise ? r : r * dst->gstride), buf,
                       (size_t)(rowwise ? 1 : dst->base.dim) * sizeof *buf);
            }
        }
    }
    hx_emb_local_reset_rows(&dst->base, reset, nreset);
    free(buf);
    free(tmp);
    free(reset);
    return HX_OK;
}

/* The loaded shards this placement needs (all of them where it holds rows;
 * mc: a DYNAMIC table's map). */
static hx_status load_all(const manifest *m, const char *path, const hx_emb_table_config *tc,
                          const hx_emb_idmap_config *mc, bool holds, hx_emb_table ***out, hx_emb_err *err)
{
    *out = calloc((size_t)m->shards, sizeof **out);
    if (!*out) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "out of memory");
    hx_status st = HX_OK;
    for (int64_t s = 0; s < m->shards && holds && !st; s++)
        if (m->srows[s] > 0) st = load_shard(m, path, s, tc, mc, &(*out)[s], err);
    return st;
}

static void free_srcs(hx_emb_table **src, int64_t n)
{
    for (int64_t s = 0; src && s < n; s++) hx_emb_table_free(src[s]);
    free(src);
}

/* The manifest fits a table of rows x dim of dtype. */
static hx_status fits(const manifest *m, const char *path, int64_t rows, int64_t dim, hx_dtype dtype, bool dynamic,
                      hx_emb_err *err)
{
    if (m->rows != rows || m->dim != dim || m->dtype != (int64_t)dtype)
        return hx_emb_fail(err, HX_ERR_SHAPE, "%s holds a %" PRId64 " x %" PRId64 " %s table; this one is %" PRId64
                           " x %" PRId64 " %s", path, m->rows, m->dim, hx_emb_dtype_name((hx_dtype)m->dtype), rows,
                           dim, hx_emb_dtype_name(dtype));
    if (m->dynamic != dynamic)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "%s holds a %s table; this one is %s", path,
                           m->dynamic ? "DYNAMIC" : "fixed (ROWS, MODULO)", dynamic ? "DYNAMIC" : "fixed");
    return HX_OK;
}

hx_status hx_emb_shard_load_local(hx_emb_local *dst, const char *path, hx_emb_err *err)
{
    manifest m;
    hx_status st = manifest_read(path, &m, err);
    if (st) return st;
    hx_emb_table **src = NULL;
    hx_emb_table_config tc = hx_emb_table_config_default(dst->base.rows, dst->base.dim);
    tc.dtype = dst->dtype;
    tc.init = dst->init;
    tc.optim = dst->optim;
    hx_emb_idmap_config mc = {0};
    st = fits(&m, path, dst->base.rows, dst->base.dim, dst->dtype, false, err);
    if (!st) st = load_all(&m, path, &tc, &mc, true, &src, err);
    place_now pn = {1, 0, 0, false};
    if (!st) st = copy_in(&m, src, &pn, dst, err);
    free_srcs(src, m.shards);
    manifest_free(&m);
    return st;
}

static bool any_key(const void *ctx, int64_t key)
{
    (void)ctx, (void)key;
    return true;
}

hx_status hx_emb_shard_load_dynamic(hx_emb_table *dst, const char *path, hx_emb_err *err)
{
    hx_emb_local *l = hx_emb_as_local(hx_emb_dynamic_local(dst));
    if (!l)
        return hx_emb_fail(err, HX_ERR_UNSUPPORTED, "a DYNAMIC table's sharded checkpoint loads into a DYNAMIC "
                           "table in memory");
    manifest m;
    hx_status st = manifest_read(path, &m, err);
    if (st) return st;
    hx_emb_table **src = NULL;
    hx_emb_table_config tc = hx_emb_table_config_default(l->base.rows, l->base.dim);
    tc.dtype = l->dtype;
    tc.init = l->init;
    tc.optim = l->optim;
    hx_emb_idmap_config mc = {0}; /* the saved maps are read as they were (capacity: each shard's rows) */
    st = fits(&m, path, l->base.rows, l->base.dim, l->dtype, true, err);
    if (!st) st = load_all(&m, path, &tc, &mc, true, &src, err);
    if (!st) st = hx__shard_rekey(src, m.shards, any_key, NULL, dst, err);
    free_srcs(src, m.shards);
    manifest_free(&m);
    return st;
}

/* Whether this rank of shard s owns key. */
static bool owns_key(const void *ctx, int64_t key)
{
    const hx_emb_shard *s = ctx;
    int owner;
    int64_t local;
    hx__shard_place(s, key, &owner, &local);
    return owner == s->rank;
}

hx_status hx__shard_load(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    hx_emb_shard *s = (hx_emb_shard *)t;
    hx_emb_err mine;
    manifest m;
    memset(&m, 0, sizeof m);
    pthread_mutex_lock(&s->lock);
    hx_emb_table **src = NULL, *fresh = NULL, *fresh_part = NULL;
    hx_status own = HX_OK;
    hx__shard_hot_before(s, true, &own, &mine); /* rows back, the cache empty: the load replaces them */
    if (!own) own = manifest_read(path, &m, &mine);
    if (!own) own = fits(&m, path, s->base.rows, s->base.dim, s->tc.dtype, s->dynamic, &mine);
    bool same = !own && m.shards == s->size && m.layout == (int64_t)s->table_wise &&
                (!s->table_wise || m.owner == s->owner);
    if (!own && s->dynamic && !same) {
        /* another layout: every shard's keys, those this rank now owns kept */
        hx_emb_table_config tc = s->tc;
        tc.optim = s->optim;
        own = load_all(&m, path, &tc, &s->mc, s->part != NULL, &src, &mine);
        if (!own && s->part && !(own = hx__shard_make_part(s, &fresh, &fresh_part, &mine)))
            own = hx__shard_rekey(src, m.shards, owns_key, s, fresh, &mine);
    } else if (!own && s->dynamic) {
        /* the layout it was saved at: this rank's own shard as saved */
        if (s->part && !(own = hx__shard_make_part(s, &fresh, &fresh_part, &mine))) {
            char *p = hx__shard_file(path, m.gen, s->rank, m.shards);
            uint64_t h = 0;
            int64_t bytes = 0;
            own = p ? file_hash(p, &h, &bytes, &mine) : hx_emb_fail(&mine, HX_ERR_OUT_OF_MEMORY, "out of memory");
            if (!own && (h != m.shash[s->rank] || bytes != m.sbytes[s->rank]))
                own = hx_emb_fail(&mine, HX_ERR_CORRUPT, "shard file %s does not match the manifest %s: "
                                  "changed or damaged since the save", p, path);
            if (!own) own = hx_emb_table_load(fresh, p, &mine);
            free(p);
        }
    } else if (!own) {
        hx_emb_table_config tc = s->tc;
        tc.optim = s->optim;
        own = load_all(&m, path, &tc, &s->mc, s->part != NULL, &src, &mine);
    }
    /* a capped shard's loaded map must fit where the map it replaces was */
    if (!own && s->dynamic && fresh)
        own = hx_emb_idmap_fits(hx_emb_dynamic_idmap(fresh), hx_emb_dynamic_idmap(s->part), &mine);
    hx_status st = hx__shard_agree(s, HX_EMB_X_LOAD, own, &mine, err);
    if (!st && s->dynamic && fresh) {
        hx_emb_idmap_replace(hx_emb_dynamic_idmap(fresh), hx_emb_dynamic_idmap(s->part));
        hx_emb_table_free(s->part);
        s->part = fresh;
        s->local = hx_emb_as_local(fresh_part);
        fresh = NULL;
    } else if (!st && s->part) {
        place_now pn = {s->size, s->rank, s->owner, s->table_wise};
        st = copy_in(&m, src, &pn, s->local, err); /* (out of memory here: this rank alone) */
    }
    pthread_mutex_unlock(&s->lock);
    hx_emb_table_free(fresh);
    free_srcs(src, m.shards);
    manifest_free(&m);
    return st;
}
