/* offload_param=disk (see offload_disk.h). */
#include "scheduler/offload_disk.h"
#include "scheduler/backend.h"
#include "memory/disk_tier.h"
#include "memory/pinned.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK HX_MIB /* the tier's block: O_DIRECT transfers of 1 MiB */

struct hx_offload_disk {
    hx_disk_tier *tier;
    hx_pinned_pool *pinned;
    int n;          /* disk-resident tensors */
    int *ids;
    size_t *off;    /* each one's place in the host buffer (64-byte aligned) */
    size_t bytes;   /* the host buffer */
    size_t seg;     /* bytes per tier call: chunk_size rounded up to blocks */
    int n_seg;
    int gen;        /* generation in use (0 or 1); -1: nothing stored yet */
    char *buf;      /* the host copy while loaded, else NULL */
};

bool hx__disk_resident(const hx_session *s, int id)
{
    const hx_tensor *t = s->g->tensors[id];
    return s->cfg.offload.offload_param == HX_OFFLOAD_DISK && hx__dev_of(s, id) == HX_DEV_HOST &&
           (t->kind == HX_TENSOR_PARAMETER || t->kind == HX_TENSOR_STATE);
}

hx_disk_tier *hx__disk_tier_of(const hx_session *s) { return s->disk ? s->disk->tier : NULL; }

size_t hx__disk_host_bytes(const hx_session *s) { return s->disk ? s->disk->bytes : 0; }

int64_t hx__disk_block_of(const hx_session *s, int seg, bool next)
{
    const hx_offload_disk *d = s->disk;
    int gen = next ? (d->gen < 0 ? 0 : 1 - d->gen) : d->gen;
    return (int64_t)(2 * seg + gen) * (int64_t)(d->seg / BLOCK);
}

static size_t seg_len(const hx_offload_disk *d, int j)
{
    size_t at = (size_t)j * d->seg;
    return d->bytes - at < d->seg ? d->bytes - at : d->seg;
}

/* Plans bound to the old host copy rebind before their next run: bound_to
 * holds a value no arena has. */
static void unbind_plans(hx_session *s)
{
    for (int i = 0; i < s->n_plans; i++) s->plans[i]->bound_to[HX_DEV_HOST] = (const char *)s->disk;
}

void hx__disk_evict(hx_session *s)
{
    hx_offload_disk *d = s->disk;
    if (!d || !d->buf) return;
    for (int k = 0; k < d->n; k++) s->persist[d->ids[k]] = NULL;
    hx_pinned_free(d->pinned, d->buf, NULL);
    hx_pinned_trim(d->pinned); /* between runs the host holds none of it */
    d->buf = NULL;
    unbind_plans(s);
}

static hx_status host_buffer(hx_session *s, const char *fn)
{
    hx_offload_disk *d = s->disk;
    hx_mem_err err;
    void *p = NULL;
    hx_status st = hx_pinned_alloc(d->pinned, d->bytes, &p, &err);
    if (st)
        return hx__error(st, "%s: offload_param=disk: no host memory for the %zu bytes of "
                         "parameters and optimizer state a run reads from disk: %s; raise "
                         "offload_cpu_size or free host memory", fn, d->bytes, err.msg);
    d->buf = p;
    for (int k = 0; k < d->n; k++) s->persist[d->ids[k]] = d->buf + d->off[k];
    unbind_plans(s);
    return HX_OK;
}

/* Reads segments [lo, hi) into a fresh host buffer. */
static hx_status load_segments(hx_session *s, const char *fn, int lo, int hi)
{
    hx_offload_disk *d = s->disk;
    hx_status st = host_buffer(s, fn);
    hx_mem_err err;
    for (int j = lo; j < hi && !st; j++)
        st = hx_disk_tier_read(d->tier, hx__disk_block_of(s, j, false), d->buf + (size_t)j * d->seg,
                               seg_len(d, j), &err);
    if (st && d->buf) {
        hx__disk_evict(s);
        return hx__error(st, "%s: offload_param=disk: reading the parameters back failed, so "
                         "nothing ran and nothing changed: %s; %s", fn, err.msg,
                         st == HX_ERR_CORRUPT
                             ? "the file under offload_path is damaged: recreate the session and "
                               "restore the parameters from a checkpoint (hx_session_load)"
                             : "check the disk under offload_path and retry");
    }
    return st;
}

hx_status hx__disk_load(hx_session *s, const char *fn)
{
    hx_offload_disk *d = s->disk;
    return !d || d->buf ? HX_OK : load_segments(s, fn, 0, d->n_seg);
}

hx_status hx__disk_load_one(hx_session *s, const char *fn, const hx_tensor *t)
{
    hx_offload_disk *d = s->disk;
    if (!d || d->buf) return HX_OK;
    int k = 0;
    while (k < d->n && d->ids[k] != t->id) k++;
    if (k == d->n) return load_segments(s, fn, 0, 0); /* not on disk: no reads */
    size_t end = d->off[k] + hx_tensor_nbytes(t);
    return load_segments(s, fn, (int)(d->off[k] / d->seg), (int)((end + d->seg - 1) / d->seg));
}

hx_status hx__disk_store(hx_session *s, const char *fn)
{
    hx_offload_disk *d = s->disk;
    if (!d || !d->buf) return HX_OK;
    hx_mem_err err;
    hx_status st = HX_OK;
    for (int j = 0; j < d->n_seg && !st; j++)
        st = hx_disk_tier_write(d->tier, hx__disk_block_of(s, j, true), d->buf + (size_t)j * d->seg,
                                seg_len(d, j), &err);
    if (st)
        return hx__error(st, "%s: offload_param=disk: writing the parameters back failed: %s; "
                         "nothing of this call was applied: the parameters on disk are those from "
                         "before it (free space under offload_path or check the disk, then "
                         "retry)", fn, err.msg);
    d->gen = d->gen < 0 ? 0 : 1 - d->gen;
    return HX_OK;
}

void hx__disk_close(hx_session *s)
{
    hx_offload_disk *d = s->disk;
    if (!d) return;
    hx__disk_evict(s);
    hx_disk_tier_destroy(d->tier);
    hx_pinned_destroy(d->pinned);
    free(d->ids);
    free(d->off);
    free(d);
    s->disk = NULL;
}

/* The tier and the pinned pool, the layout, the checks against the budgets. */
static hx_status setup(hx_session *s, hx_offload_disk *d)
{
    const hx_offload_config *oc = &s->cfg.offload;
    for (int i = 0; i < s->g->n; i++)
        if (hx__disk_resident(s, i)) {
            d->ids[d->n] = i;
            d->off[d->n++] = d->bytes;
            d->bytes = hx__mem_round(d->bytes + hx_tensor_nbytes(s->g->tensors[i]), 64);
        }
    d->seg = hx__mem_round(oc->chunk_size > BLOCK ? oc->chunk_size : BLOCK, BLOCK);
    d->n_seg = (int)((d->bytes + d->seg - 1) / d->seg);
    if (oc->offload_cpu_size && d->bytes > oc->offload_cpu_size)
        return hx__error(HX_ERR_OUT_OF_MEMORY,
                         "hx_session_create: offload_param=disk reads the parameters and "
                         "optimizer state of a run into host memory at once, %zu bytes, more than "
                         "offload_cpu_size (%zu bytes): raise offload_cpu_size to at least %zu",
                         d->bytes, oc->offload_cpu_size, d->bytes);
    /* two generations, and the blocks of one segment written before its old ones are free */
    size_t disk = 2 * hx__mem_round(d->bytes, BLOCK) + d->seg;
    if (oc->offload_disk_size && disk > oc->offload_disk_size)
        return hx__error(HX_ERR_IO, "hx_session_create: offload_param=disk needs up to %zu bytes "
                         "under offload_path '%s' (two copies of %zu bytes of parameters and "
                         "optimizer state, and a segment in flight), more than offload_disk_size "
                         "(%zu bytes): raise offload_disk_size", disk, oc->offload_path, d->bytes,
                         oc->offload_disk_size);
    hx_disk_config dc = hx_disk_config_default(oc->offload_path);
    dc.block_size = BLOCK;
    dc.engine = oc->enable_aio ? HX_DISK_ENGINE_AUTO : HX_DISK_ENGINE_SYNC;
    hx_mem_err err;
    hx_status st = hx_disk_tier_create(&dc, &d->tier, &err);
    if (st)
        return hx__error(st, "hx_session_create: offload_param=disk: %s (offload_path must be an "
                         "existing, writable directory)", err.msg);
    hx_pinned_config pc = hx_pinned_config_default();
    pc.block_size = hx__mem_round(oc->host_mem_block_size, 4096);
    pc.capacity = oc->offload_cpu_size ? oc->offload_cpu_size : SIZE_MAX;
    if (pc.block_size > pc.capacity) pc.block_size = pc.capacity / 4096 * 4096; /* >= bytes */
    pc.lock = oc->enable_pinned_mem;
    st = hx_pinned_create(&pc, &d->pinned, &err);
    if (st) return hx__error(st, "hx_session_create: offload_param=disk: %s", err.msg);
    return HX_OK;
}

hx_status hx__disk_open(hx_session *s)
{
    if (s->cfg.offload.offload_param != HX_OFFLOAD_DISK) return HX_OK;
    if (s->cfg.delayed_param_update)
        return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: offload_param=disk does not run "
                         "with delayed_param_update (the update behind the next run would need "
                         "the parameters in host memory across runs); use offload_param=cpu");
    hx_offload_disk *d = calloc(1, sizeof *d);
    int n = s->g->n ? s->g->n : 1;
    if (d) {
        d->ids = malloc(sizeof *d->ids * n);
        d->off = malloc(sizeof *d->off * n);
        d->gen = -1;
    }
    s->disk = d;
    if (!d || !d->ids || !d->off)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    hx_status st = setup(s, d);
    if (st || !d->n) return st;
    /* the initialised tensors move into the host buffer, then to disk */
    void **init = malloc(sizeof *init * d->n);
    if (!init) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    for (int k = 0; k < d->n; k++) init[k] = s->persist[d->ids[k]];
    st = host_buffer(s, "hx_session_create");
    hx_backend *host = s->be[HX_DEV_HOST];
    for (int k = 0; k < d->n; k++) {
        size_t bytes = hx_tensor_nbytes(s->g->tensors[d->ids[k]]);
        if (!st) memcpy(d->buf + d->off[k], init[k], bytes);
        if (st) s->persist[d->ids[k]] = init[k]; /* still the session's to free */
        else {
            host->free(host, init[k]);
            s->persist_bytes[HX_DEV_HOST] -= bytes;
        }
    }
    free(init);
    if (!st) st = hx__disk_store(s, "hx_session_create");
    hx__disk_evict(s);
    return st;
}
