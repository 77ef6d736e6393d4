/* offload_param=disk (see offload_disk.h and disk_layout.h): the layout,
 * the generations, and the disk tier as the session's residency: loads
 * and stores of the resident region, single tensors, checkpoint spans,
 * creation (the I/O thread and the update phase: disk_update.c). */
#include "offload/disk_layout.h"
#include "offload/offload.h"
#include "backend/backend.h"
#include "scheduler/scheduler.h"

#include <stdlib.h>
#include <string.h>

/* Whether tensor id is kept on disk by the session's config (placement;
 * ZeRO: not another rank's shard). */
static bool on_disk(const hx_engine *e, int id)
{
    const hx_tensor *t = e->g->tensors[id];
    return e->cfg.offload.offload_param == HX_OFFLOAD_DISK && hx__dev_of(e, id) == HX_DEV_HOST &&
            (t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE) &&
            !(e->remote && e->remote[id]);
}

static bool holds(const hx_residency *r, int id)
{
    return ((const hx_offload_disk *)r)->where[id] > -2;
}

static void destroy(hx_residency *r);

hx_offload_disk *hx__disk_of(const hx_engine *e)
{
    /* the disk tier is the one residency with a table: known by its destroy */
    return e->residency && e->residency->destroy == destroy ? hx__disk(e->residency) : NULL;
}

hx_disk_tier *hx__disk_tier_of(const hx_engine *e)
{
    hx_offload_disk *d = hx__disk_of(e);
    return d ? d->tier : NULL;
}

hx_pinned_pool *hx__disk_pool_of(const hx_engine *e)
{
    hx_offload_disk *d = hx__disk_of(e);
    return d ? d->pinned : NULL;
}

size_t hx__disk_host_bytes(const hx_engine *e)
{
    hx_offload_disk *d = hx__disk_of(e);
    return d ? d->res_bytes + (size_t)d->n_slots * d->slot_bytes : 0;
}

size_t hx__disk_whole_bytes(const hx_engine *e)
{
    hx_offload_disk *d = hx__disk_of(e);
    return d ? d->whole : 0;
}

hx_disk_run_stats hx__disk_last_run(const hx_engine *e)
{
    hx_offload_disk *d = hx__disk_of(e);
    return d ? d->last : (hx_disk_run_stats){0};
}

int hx__disk_segments(const hx_engine *e, int *resident)
{
    hx_offload_disk *d = hx__disk_of(e);
    if (resident) *resident = d ? d->n_res : 0;
    return d ? d->n_seg : 0;
}

int64_t hx__disk_block_of(const hx_engine *e, int seg, bool next)
{
    const hx_disk_seg *g = &hx__disk_of(e)->segs[seg];
    return hx__disk_seg_block(g, next ? hx__disk_next_gen(g) : g->gen);
}

/* ---- segments and generations ---------------------------------------------------- */

hx_status hx__disk_seg_read(hx_offload_disk *d, int k, void *buf, hx_mem_err *err)
{
    const hx_disk_seg *g = &d->segs[k];
    return hx_disk_tier_read(d->tier, hx__disk_seg_block(g, g->gen), buf, g->bytes, err);
}

hx_status hx__disk_seg_write(hx_offload_disk *d, int k, const void *buf, hx_mem_err *err)
{
    hx_disk_seg *g = &d->segs[k];
    hx_status st = hx_disk_tier_write(d->tier, hx__disk_seg_block(g, hx__disk_next_gen(g)), buf,
                                      g->bytes, err);
    if (!st) g->pending = true;
    return st;
}

/* Every pending segment switches to its new generation, or none does. */
static void commit(hx_offload_disk *d)
{
    for (int k = 0; k < d->n_seg; k++)
        if (d->segs[k].pending) {
            d->segs[k].gen = hx__disk_next_gen(&d->segs[k]);
            d->segs[k].pending = false;
        }
}

static void abort_pending(hx_offload_disk *d)
{
    for (int k = 0; k < d->n_seg; k++) d->segs[k].pending = false;
}

static hx_status read_failed(const char *fn, hx_status st, const hx_mem_err *err)
{
    return hx__error(st, "%s: offload_param=disk: reading parameters or optimizer state back "
                     "failed, so nothing changed: %s; %s", fn, err->msg,
                     st == HX_ERR_CORRUPT
                         ? "the file under offload_path is damaged: recreate the session and "
                           "restore the parameters from a checkpoint (hx_session_load)"
                         : "check the disk under offload_path and retry");
}

static hx_status write_failed(const char *fn, hx_status st, const hx_mem_err *err)
{
    return hx__error(st, "%s: offload_param=disk: writing parameters or optimizer state back "
                     "failed: %s; nothing of this call was applied: the parameters and state on "
                     "disk are those from before it (free space under offload_path or check the "
                     "disk, then retry)", fn, err->msg);
}

static hx_status host_alloc(hx_offload_disk *d, const char *fn, size_t bytes, const char *what,
                            char **out)
{
    hx_mem_err err;
    void *p = NULL;
    *out = NULL;
    hx_status st = hx_pinned_alloc(d->pinned, bytes, &p, &err);
    if (st)
        return hx__error(st, "%s: offload_param=disk: no host memory for %s (%zu bytes): %s; raise "
                         "offload_cpu_size or free host memory", fn, what, bytes, err.msg);
    *out = p;
    return HX_OK;
}

static void host_free(hx_offload_disk *d, char *p)
{
    if (p) hx_pinned_free(d->pinned, p, NULL);
}

/* ---- the resident region during a run ------------------------------------------------ */

/* Plans bound to the old host copy rebind before their next run. */
static void unbind_plans(hx_offload_disk *d) { d->e->bind_gen++; }

static void point_resident(hx_offload_disk *d, char *base)
{
    hx_engine *e = d->e;
    for (int i = 0; i < e->g->n; i++)
        if (d->where[i] == -1) e->persist[i] = base ? base + d->at[i] : NULL;
}

/* The residency's run_end: gives the host copies back without writing
 * them; pending writes are dropped and a chunked update in progress is
 * stopped. */
static void evict(hx_residency *r)
{
    hx_offload_disk *d = hx__disk(r);
    hx__disk_update_end(d);
    abort_pending(d);
    if (!d->loaded) return;
    point_resident(d, NULL);
    host_free(d, d->res);
    hx_pinned_trim(d->pinned); /* between runs the host holds none of it */
    d->res = NULL;
    d->loaded = d->res_dirty = false;
    atomic_store(&d->res_ready, false);
    unbind_plans(d);
}

/* Gives the resident region a host buffer and points e->persist at its
 * tensors (plans rebind); a no-op when loaded. async leaves the reading to
 * the I/O thread of hx__disk_update_begin, else the region is read here. */
static hx_status load(hx_offload_disk *d, const char *fn, bool async)
{
    if (d->loaded) return HX_OK;
    double t0 = hx__now();
    hx_status st = d->res_bytes ? host_alloc(d, fn, d->res_bytes, "the resident region", &d->res)
                                : HX_OK;
    hx_mem_err err;
    for (int k = 0; k < d->n_res && !st && !async; k++)
        if ((st = hx__disk_seg_read(d, k, d->res + d->segs[k].off, &err))) st = read_failed(fn, st, &err);
    if (st) {
        host_free(d, d->res);
        d->res = NULL;
        return st;
    }
    d->loaded = true;
    atomic_store(&d->res_ready, !async || !d->n_res);
    d->res_dirty = false;
    point_resident(d, d->res);
    unbind_plans(d);
    d->last = (hx_disk_run_stats){.resident_read_s = async ? 0 : hx__now() - t0,
                                  .resident_bytes = d->res_bytes};
    return HX_OK;
}

/* The residency's run_begin: the resident region, and for a training run
 * the I/O thread that reads it and the chunks. */
static hx_status run_begin(hx_residency *r, const hx_plan *p, bool train)
{
    hx_offload_disk *d = hx__disk(r);
    hx_status st = load(d, "hx_session_run", train);
    return !st && train ? hx__disk_update_begin(d, p) : st;
}

/* The residency's run_store: writes back the resident segments the
 * updates (ZeRO: the all-gathers too) changed and the I/O thread has not
 * written yet, pending with the chunks; a failure drops them all. */
static hx_status store(hx_residency *r)
{
    hx_offload_disk *d = hx__disk(r);
    const char *fn = "hx_session_run";
    if (!d->loaded) return HX_OK;
    hx_status st = hx__disk_resident_wait(d, d->n_res - 1); /* a run without updates */
    if (st) return st;
    double t0 = hx__now();
    hx_mem_err err;
    for (int k = 0; k < d->n_res && d->res_dirty && !st; k++) {
        if (d->segs[k].pending || !hx__disk_update_touched(d, k)) continue; /* written, unchanged */
        if ((st = hx__disk_seg_write(d, k, d->res + d->segs[k].off, &err)))
            st = write_failed(fn, st, &err);
        else d->last.resident_bytes_written += d->segs[k].bytes;
    }
    d->last.resident_write_s = hx__now() - t0;
    if (st) abort_pending(d);
    return st;
}

/* The residency's run_commit: what store and the I/O thread wrote, in use. */
static void keep(hx_residency *r)
{
    hx_offload_disk *d = hx__disk(r);
    if (!d->loaded) return;
    commit(d);
    d->res_dirty = false;
}

/* ---- spans: segments loaded together ----------------------------------------------------- */

/* Resident segments [lo, hi] or chunk seg (lo = hi = seg) in one buffer. */
typedef struct span { int lo, hi; char *buf; } span;

static size_t span_bytes(const hx_offload_disk *d, const span *p)
{
    return d->segs[p->hi].off + d->segs[p->hi].bytes - d->segs[p->lo].off;
}

/* Where tensor id's bytes are in a loaded span. */
static char *span_at(const hx_offload_disk *d, const span *p, int id)
{
    return p->buf + (d->where[id] >= 0 ? d->at[id] : d->at[id] - d->segs[p->lo].off);
}

/* The resident segments tensor id (resident) lies in. */
static void resident_segs(const hx_offload_disk *d, int id, int *lo, int *hi)
{
    size_t n = hx_tensor_nbytes(d->e->g->tensors[id]);
    *lo = (int)(d->at[id] / d->seg_bytes);
    *hi = (int)((d->at[id] + (n ? n - 1 : 0)) / d->seg_bytes);
}

/* The residency's loaded: resident tensor id (id < 0: the whole region)
 * read; others are never read during the forward and backward. */
static hx_status loaded(hx_residency *r, int id)
{
    hx_offload_disk *d = hx__disk(r);
    if (id < 0) return hx__disk_resident_wait(d, d->n_res - 1);
    if (d->where[id] != -1) return HX_OK;
    int lo, hi;
    resident_segs(d, id, &lo, &hi);
    return hx__disk_resident_wait(d, hi);
}

static hx_status span_load(hx_offload_disk *d, const char *fn, span *p, bool blank)
{
    hx_status st = host_alloc(d, fn, span_bytes(d, p), "a segment of parameters or state", &p->buf);
    if (st) return st;
    if (blank) {
        memset(p->buf, 0, span_bytes(d, p));
        return HX_OK;
    }
    hx_mem_err err;
    for (int k = p->lo; k <= p->hi && !st; k++)
        if ((st = hx__disk_seg_read(d, k, p->buf + d->segs[k].off - d->segs[p->lo].off, &err)))
            st = read_failed(fn, st, &err);
    return st;
}

static hx_status span_store(hx_offload_disk *d, const char *fn, const span *p)
{
    hx_mem_err err;
    hx_status st = HX_OK;
    for (int k = p->lo; k <= p->hi && !st; k++)
        if ((st = hx__disk_seg_write(d, k, p->buf + d->segs[k].off - d->segs[p->lo].off, &err)))
            st = write_failed(fn, st, &err);
    return st;
}

static void span_drop(hx_offload_disk *d, span *p)
{
    host_free(d, p->buf);
    p->buf = NULL;
}

static span span_of(const hx_offload_disk *d, int id)
{
    span p = {d->where[id], d->where[id], NULL};
    if (p.lo < 0) resident_segs(d, id, &p.lo, &p.hi);
    return p;
}

/* The residency's read: through a buffer of the pinned pool. */
static hx_status read_tensor(hx_residency *r, const char *fn, const hx_tensor *t, void *dst)
{
    hx_offload_disk *d = hx__disk(r);
    size_t n = hx_tensor_nbytes(t);
    if (!n) return HX_OK;
    /* only the blocks that hold t: segments are whole blocks, each block read alone is valid */
    span p = span_of(d, t->id);
    size_t lo = d->at[t->id], hi = lo + n; /* in the resident region, or in the chunk (off 0) */
    size_t b0 = lo / HX_DISK_BLOCK * HX_DISK_BLOCK, b1 = hx__mem_round(hi, HX_DISK_BLOCK);
    char *buf;
    hx_status st = host_alloc(d, fn, b1 - b0, "the blocks of a tensor", &buf);
    hx_mem_err err;
    for (int k = p.lo; k <= p.hi && !st; k++) {
        const hx_disk_seg *g = &d->segs[k];
        size_t x0 = g->off > b0 ? g->off : b0, x1 = g->off + g->bytes < b1 ? g->off + g->bytes : b1;
        if (x0 >= x1) continue;
        int64_t first = hx__disk_seg_block(g, g->gen) + (int64_t)((x0 - g->off) / HX_DISK_BLOCK);
        if ((st = hx_disk_tier_read(d->tier, first, buf + (x0 - b0), x1 - x0, &err)))
            st = read_failed(fn, st, &err);
    }
    if (!st) memcpy(dst, buf + (lo - b0), n);
    host_free(d, buf);
    hx_pinned_trim(d->pinned);
    return st;
}

/* The residency's write. */
static hx_status write_tensor(hx_residency *r, const char *fn, const hx_tensor *t,
                              const void *data)
{
    hx_offload_disk *d = hx__disk(r);
    hx_engine *e = d->e;
    const hx_graph *g = e->g;
    /* t and its half copies: the resident segments they touch as one span, their chunks */
    span res = {-1, -1, NULL}, ch[2] = {{-1, -1, NULL}, {-1, -1, NULL}};
    int n_ch = 0;
    hx_status st = HX_OK;
    for (int i = 0; i < g->n && !st; i++) {
        const hx_tensor *c = g->tensors[i];
        if (c != t && !(hx__is_half_copy(c) && c->param == t)) continue;
        if (!holds(r, i)) continue;
        span p = span_of(d, i);
        if (d->where[i] == -1) {
            res.lo = res.lo < 0 || p.lo < res.lo ? p.lo : res.lo;
            res.hi = p.hi > res.hi ? p.hi : res.hi;
            continue;
        }
        bool have = false;
        for (int k = 0; k < n_ch; k++) have |= ch[k].lo == p.lo;
        if (have) continue;
        if (n_ch == 2)
            st = hx__error(HX_ERR_INTERNAL, "%s: '%s' and its half copies lie in more than two "
                           "chunks of the disk tier", fn, t->name);
        else ch[n_ch++] = p;
    }
    if (!st && res.lo >= 0) st = span_load(d, fn, &res, false);
    for (int k = 0; k < n_ch && !st; k++) st = span_load(d, fn, &ch[k], false);
    /* point persist at the loaded copies, set t, refresh its half copies */
    for (int i = 0; i < g->n && !st; i++) {
        if (d->where[i] == -1 && res.buf && d->at[i] >= d->segs[res.lo].off &&
            d->at[i] + hx_tensor_nbytes(g->tensors[i]) <= d->segs[res.hi].off + d->segs[res.hi].bytes)
            e->persist[i] = span_at(d, &res, i);
        for (int k = 0; k < n_ch; k++)
            if (d->where[i] == ch[k].lo) e->persist[i] = span_at(d, &ch[k], i);
    }
    if (!st)
        st = hx__engine_copy_in(e, hx__dev_of(e, t->id), e->persist[t->id], data,
                                hx_tensor_nbytes(t));
    if (!st && t->kind == HX_TENSOR_PARAMETER) st = hx__half_copies_refresh(e, t);
    if (!st && res.buf) st = span_store(d, fn, &res);
    for (int k = 0; k < n_ch && !st; k++) st = span_store(d, fn, &ch[k]);
    if (st) abort_pending(d);
    else commit(d);
    for (int i = 0; i < g->n; i++)
        if (d->where[i] > -2) e->persist[i] = NULL;
    span_drop(d, &res);
    for (int k = 0; k < n_ch; k++) span_drop(d, &ch[k]);
    hx_pinned_trim(d->pinned);
    return st;
}

/* Loads span p (blank: zeroed), visits its tensors ids[0 .. n), stores it
 * back (pending) when write, gives the buffer back. */
static hx_status visit_span(hx_offload_disk *d, const char *fn, span *p, const int *ids, int n,
                            bool blank, bool write, hx_residency_visit_fn visit, void *ctx)
{
    hx_status st = span_load(d, fn, p, blank);
    for (int k = 0; k < n && !st; k++)
        st = visit(ctx, d->e->g->tensors[ids[k]], span_at(d, p, ids[k]));
    if (!st && write) st = span_store(d, fn, p);
    span_drop(d, p);
    return st;
}

/* The residency's visit: segment span by segment span, each loaded into a
 * buffer (resident tensors in layout order, merged where they share a
 * segment, then each chunk). */
static hx_status visit_held(hx_residency *r, const char *fn, bool blank, bool write,
                           hx_residency_visit_fn visit, void *ctx)
{
    hx_offload_disk *d = hx__disk(r);
    const hx_graph *g = d->e->g;
    int *ids = malloc(sizeof *ids * (g->n ? g->n : 1));
    if (!ids) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    hx_status st = HX_OK;
    /* resident tensors in layout (id) order, in spans merged where they share a segment */
    span p = {-1, -1, NULL};
    int n_ids = 0;
    for (int i = 0; i < g->n && !st; i++) {
        if (d->where[i] != -1) continue;
        span q = span_of(d, i);
        if (n_ids && q.lo > p.hi) {
            st = visit_span(d, fn, &p, ids, n_ids, blank, write, visit, ctx);
            n_ids = 0;
        }
        if (!n_ids) p = q;
        else if (q.hi > p.hi) p.hi = q.hi;
        ids[n_ids++] = i;
    }
    if (n_ids && !st) st = visit_span(d, fn, &p, ids, n_ids, blank, write, visit, ctx);
    /* then each chunk */
    for (int k = d->n_res; k < d->n_seg && !st; k++) {
        n_ids = 0;
        for (int i = 0; i < g->n; i++)
            if (d->where[i] == k) ids[n_ids++] = i;
        p = (span){k, k, NULL};
        st = visit_span(d, fn, &p, ids, n_ids, blank, write, visit, ctx);
    }
    free(ids);
    if (write && !st) commit(d);
    else abort_pending(d);
    hx_pinned_trim(d->pinned);
    return st;
}

/* ---- layout, creation ------------------------------------------------------------------- */

/* Per tensor: the one update node that reads it when every reader is that
 * update (the tensor can wait on disk until the update phase), else -2;
 * -1 when nothing reads it. */
static void update_readers(const hx_graph *g, int *upd)
{
    for (int i = 0; i < g->n; i++) upd[i] = -1;
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *u = g->tensors[i];
        for (int k = 0; k < u->n_src; k++) {
            int id = u->src[k]->id;
            if (upd[id] == -2) continue;
            upd[id] = u->kind == HX_TENSOR_UPDATE && (upd[id] == -1 || upd[id] == i) ? i : -2;
        }
    }
}

static void add_seg(hx_offload_disk *d, size_t off, size_t bytes, int64_t *block)
{
    d->segs[d->n_seg++] = (hx_disk_seg){.off = off, .bytes = bytes, .block = *block, .gen = -1};
    *block += 2 * (int64_t)(bytes / HX_DISK_BLOCK);
}

/* Resident region, then chunks of update-only tensors in update order. */
static void lay_out(hx_engine *e, hx_offload_disk *d, int *upd)
{
    const hx_graph *g = e->g;
    size_t res = 0;
    for (int i = 0; i < g->n; i++) {
        d->where[i] = -2;
        if (!on_disk(e, i)) continue;
        size_t n = hx_tensor_nbytes(g->tensors[i]);
        d->whole += n;
        if (upd[i] >= 0) {
            d->where[i] = -3; /* placed in a chunk below */
            continue;
        }
        d->where[i] = -1;
        d->at[i] = res;
        res = hx__mem_round(res + n, 64);
    }
    d->res_bytes = hx__mem_round(res, HX_DISK_BLOCK);
    int64_t block = 0;
    for (size_t off = 0; off < d->res_bytes; off += d->seg_bytes)
        add_seg(d, off, d->res_bytes - off < d->seg_bytes ? d->res_bytes - off : d->seg_bytes, &block);
    d->n_res = d->n_seg;
    size_t cur = 0;
    for (int u = 0; u < g->n; u++) {
        const hx_tensor *x = g->tensors[u];
        if (x->kind != HX_TENSOR_UPDATE) continue;
        size_t grp = 0;
        for (int k = 0; k < x->n_src; k++)
            if (d->where[x->src[k]->id] == -3 && upd[x->src[k]->id] == u)
                grp += hx__mem_round(hx_tensor_nbytes(x->src[k]), 64);
        if (!grp) continue;
        if (cur && cur + grp > d->seg_bytes) { /* close the chunk */
            add_seg(d, 0, hx__mem_round(cur, HX_DISK_BLOCK), &block);
            cur = 0;
        }
        for (int k = 0; k < x->n_src; k++) {
            int id = x->src[k]->id;
            if (d->where[id] != -3 || upd[id] != u) continue;
            d->where[id] = d->n_seg; /* the chunk being filled */
            d->at[id] = cur;
            cur = hx__mem_round(cur + hx_tensor_nbytes(x->src[k]), 64);
        }
    }
    if (cur) add_seg(d, 0, hx__mem_round(cur, HX_DISK_BLOCK), &block);
    for (int k = d->n_res; k < d->n_seg; k++)
        if (d->segs[k].bytes > d->slot_bytes) d->slot_bytes = d->segs[k].bytes;
    int chunks = d->n_seg - d->n_res;
    d->n_slots = chunks < HX_DISK_SLOTS ? chunks : HX_DISK_SLOTS;
}

/* The tier and the pinned pool, the checks against the budgets. */
static hx_status setup(hx_engine *e, hx_offload_disk *d)
{
    const hx_offload_config *oc = &e->cfg.offload;
    size_t need = d->res_bytes + (size_t)d->n_slots * d->slot_bytes;
    if (oc->offload_cpu_size && need > oc->offload_cpu_size)
        return hx__error(HX_ERR_OUT_OF_MEMORY,
                         "hx_session_create: offload_param=disk holds the resident region (%zu "
                         "bytes: the parameters the forward and backward read) and %d chunk "
                         "slots of %zu bytes (optimizer state streamed through the update) in "
                         "host memory, %zu bytes, more than offload_cpu_size (%zu bytes): raise "
                         "offload_cpu_size to at least %zu, or lower chunk_size to shrink the "
                         "slots (all parameters and optimizer state are %zu bytes)",
                         d->res_bytes, d->n_slots, d->slot_bytes, need, oc->offload_cpu_size, need,
                         d->whole);
    /* a budget with room for more slots reads more chunks ahead, during the forward and
     * backward (without a budget: the three) */
    int chunks = d->n_seg - d->n_res;
    size_t more = oc->offload_cpu_size && d->slot_bytes ? (oc->offload_cpu_size - need) / d->slot_bytes : 0;
    d->n_slots = more > (size_t)(chunks - d->n_slots) ? chunks : d->n_slots + (int)more;
    /* two generations, and the blocks written before their old ones are free: a segment,
     * or a chunk with the resident segments the I/O thread writes in the same batch */
    size_t stored = 0, largest = 0;
    for (int k = 0; k < d->n_seg; k++) {
        stored += d->segs[k].bytes;
        if (d->segs[k].bytes > largest) largest = d->segs[k].bytes;
    }
    size_t batch = d->slot_bytes + d->res_bytes;
    size_t disk = 2 * stored + (batch > largest ? batch : largest);
    if (oc->offload_disk_size && disk > oc->offload_disk_size)
        return hx__error(HX_ERR_IO, "hx_session_create: offload_param=disk needs up to %zu bytes "
                         "under offload_path '%s' (two copies of %zu bytes of parameters and "
                         "optimizer state, and the writes in flight), more than offload_disk_size "
                         "(%zu bytes): raise offload_disk_size", disk, oc->offload_path, stored,
                         oc->offload_disk_size);
    hx_disk_config dc = hx_disk_config_default(oc->offload_path);
    dc.block_size = HX_DISK_BLOCK;
    dc.engine = oc->enable_aio ? HX_DISK_ENGINE_AUTO : HX_DISK_ENGINE_SYNC;
    hx_mem_err err;
    hx_status st = hx_disk_tier_create(&dc, &d->tier, &err);
    if (st)
        return hx__error(st, "hx_session_create: offload_param=disk: %s (offload_path must be an "
                         "existing, writable directory)", err.msg);
    /* every buffer is a whole number of tier blocks: with blocks of that
     * size each one is exact and page aligned (the tier moves it without
     * a bounce), and the pool's reserve is what the buffers hold */
    hx_pinned_config pc = hx_pinned_config_default();
    pc.block_size = HX_DISK_BLOCK;
    pc.capacity = oc->offload_cpu_size ? oc->offload_cpu_size : SIZE_MAX;
    pc.lock = oc->enable_pinned_mem;
    st = hx_pinned_create(&pc, &d->pinned, &err);
    if (st) return hx__error(st, "hx_session_create: offload_param=disk: %s", err.msg);
    d->io_lane = hx__trace_lane(e->trace, "disk I/O");
    return HX_OK;
}

/* The layout of the disk tier for the session's config and placement (its
 * sizes, no tier yet) in *out, which the caller frees with free_layout,
 * also when this fails. */
static hx_status plan_layout(hx_engine *e, hx_offload_disk **out)
{
    const hx_offload_config *oc = &e->cfg.offload;
    hx_offload_disk *d = *out = calloc(1, sizeof *d);
    int n = e->g->n ? e->g->n : 1;
    int *upd = malloc(sizeof *upd * n);
    if (d) {
        d->where = malloc(sizeof *d->where * n);
        for (int i = 0; d->where && i < n; i++) d->where[i] = -2;
        d->at = calloc(n, sizeof *d->at);
        d->segs = malloc(sizeof *d->segs * (size_t)(2 * n + 1)); /* resident segments, chunks */
    }
    if (!d || !d->where || !d->at || !d->segs || !upd) {
        free(upd);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    d->seg_bytes = hx__mem_round(oc->chunk_size > HX_DISK_BLOCK ? oc->chunk_size : HX_DISK_BLOCK,
                                 HX_DISK_BLOCK);
    update_readers(e->g, upd);
    /* resident segments: at most n tensors' bytes / seg_bytes + 1 each; grow if needed */
    size_t res = 0;
    for (int i = 0; i < e->g->n; i++)
        if (on_disk(e, i) && upd[i] < 0)
            res = hx__mem_round(res + hx_tensor_nbytes(e->g->tensors[i]), 64);
    size_t n_res = hx__mem_round(res, HX_DISK_BLOCK) / d->seg_bytes + 1;
    if (n_res > (size_t)n) {
        hx_disk_seg *g = realloc(d->segs, sizeof *g * (n_res + (size_t)n + 1));
        if (!g) {
            free(upd);
            return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
        }
        d->segs = g;
    }
    lay_out(e, d, upd);
    free(upd);
    return HX_OK;
}

static void free_layout(hx_offload_disk *d)
{
    if (!d) return;
    free(d->where);
    free(d->at);
    free(d->segs);
    free(d);
}

static hx_status init(hx_residency *r);

hx_status hx__disk_create(hx_engine *e, hx_residency **out)
{
    *out = NULL;
    if (e->cfg.delayed_param_update)
        return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: offload_param=disk does not run "
                         "with delayed_param_update (the update behind the next run would need "
                         "the parameters in host memory across runs); use offload_param=cpu");
    hx_offload_disk *d = NULL;
    hx_status st = plan_layout(e, &d);
    if (!d) return st;
    d->residency = (hx_residency){.holds = holds, .init = init, .run_begin = run_begin,
                                  .step_ready = hx__disk_step_ready, .update = hx__disk_update_run,
                                  .loaded = loaded, .run_store = store, .run_commit = keep,
                                  .run_end = evict, .read = read_tensor,
                                  .write = write_tensor, .visit = visit_held, .destroy = destroy};
    d->e = e;
    *out = &d->residency;
    return st ? st : setup(e, d);
}

hx_status hx__disk_host_need(hx_engine *e, size_t chunk_size, hx_disk_host_need *out)
{
    hx_offload_config keep = e->cfg.offload;
    e->cfg.offload.offload_param = HX_OFFLOAD_DISK;
    e->cfg.offload.chunk_size = chunk_size;
    hx_offload_disk *d = NULL;
    hx_status st = plan_layout(e, &d);
    e->cfg.offload = keep;
    if (!st)
        *out = (hx_disk_host_need){.whole = d->whole, .resident = d->res_bytes,
                                   .slot = d->slot_bytes, .slots = d->n_slots,
                                   .minimum = d->res_bytes + (size_t)d->n_slots * d->slot_bytes};
    free_layout(d);
    return st;
}

/* Half copy c from its master, both on the host now. */
static hx_status refresh(hx_engine *e, const hx_tensor *c)
{
    return e->persist[c->id] && e->persist[c->param->id] ? hx__half_copies_refresh(e, c->param)
                                                         : HX_OK;
}

/* The residency's init: the tensors of each chunk, then of the resident
 * region, initialised in a host buffer (half copies from their masters)
 * and stored. */
static hx_status init(hx_residency *r)
{
    hx_offload_disk *d = hx__disk(r);
    hx_engine *e = d->e;
    const hx_graph *g = e->g;
    const char *fn = "hx_session_create";
    hx_status st = d->res_bytes ? host_alloc(d, fn, d->res_bytes, "the resident region", &d->res)
                                : HX_OK;
    if (d->res) memset(d->res, 0, d->res_bytes);
    point_resident(d, d->res);
    for (int i = 0; i < g->n && !st; i++)
        if (d->where[i] == -1)
            st = hx__param_init(g->tensors[i], e->persist[i], e->cfg.seed, e->nthreads);
    char *buf = NULL;
    if (!st && d->slot_bytes) st = host_alloc(d, fn, d->slot_bytes, "a chunk slot", &buf);
    hx_mem_err err;
    for (int k = d->n_res; k < d->n_seg && !st; k++) {
        memset(buf, 0, d->segs[k].bytes);
        for (int i = 0; i < g->n; i++)
            if (d->where[i] == k) e->persist[i] = buf + d->at[i];
        for (int i = 0; i < g->n && !st; i++)
            if (d->where[i] == k)
                st = hx__param_init(g->tensors[i], e->persist[i], e->cfg.seed, e->nthreads);
        for (int i = 0; i < g->n && !st; i++) { /* half copies with a side in this chunk */
            const hx_tensor *c = g->tensors[i];
            if (hx__is_half_copy(c) && (d->where[i] == k || d->where[c->param->id] == k))
                st = refresh(e, c);
        }
        if (!st && (st = hx__disk_seg_write(d, k, buf, &err))) st = write_failed(fn, st, &err);
        for (int i = 0; i < g->n; i++)
            if (d->where[i] == k) e->persist[i] = NULL;
    }
    host_free(d, buf);
    for (int i = 0; i < g->n && !st; i++) { /* half copies with no side in a chunk */
        const hx_tensor *c = g->tensors[i];
        if (hx__is_half_copy(c) && d->where[i] < 0 && d->where[c->param->id] < 0)
            st = refresh(e, c);
    }
    for (int k = 0; k < d->n_res && !st; k++)
        if ((st = hx__disk_seg_write(d, k, d->res + d->segs[k].off, &err))) st = write_failed(fn, st, &err);
    if (st) abort_pending(d);
    else commit(d);
    point_resident(d, NULL);
    host_free(d, d->res);
    d->res = NULL;
    hx_pinned_trim(d->pinned);
    return st;
}

/* The residency's destroy: drops any host copy and removes the file. */
static void destroy(hx_residency *r)
{
    hx_offload_disk *d = hx__disk(r);
    hx_engine *e = d->e;
    evict(r);
    for (int i = 0; i < e->g->n && d->where; i++) /* a failed init may leave pointers */
        if (d->where[i] > -2) e->persist[i] = NULL;
    hx_disk_tier_destroy(d->tier);
    if (d->pinned) hx_pinned_destroy(d->pinned);
    free_layout(d);
}
