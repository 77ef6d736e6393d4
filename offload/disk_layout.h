/* offload_param=disk: how the disk-resident tensors lie in the tier file
 * and in host memory. Shared by offload_disk.c (layout, loads, stores,
 * single tensors, checkpoints) and disk_update.c (the chunked update).
 *
 * The file is a list of segments, each a whole number of tier blocks and
 * each stored twice (two generations). The first n_res segments are the
 * resident region: the disk tensors that the forward and backward read
 * (parameters, half copies), laid out one after another and cut into
 * segments of seg_bytes; a run loads all of them. The others are chunks:
 * the tensors only optimizer updates read (Adam's m and v, the f32 masters
 * of fused half copies), grouped by update in graph order, each chunk a
 * segment of its own; the update phase streams them through a few host
 * slots. A tensor lies in one chunk, but may straddle resident segments. */
#ifndef HX_DISK_LAYOUT_H
#define HX_DISK_LAYOUT_H

#include "offload/offload_disk.h"
#include "memory/memory.h"

#include <stdatomic.h>

#define HX_DISK_BLOCK HX_MIB /* the tier's block: O_DIRECT transfers of 1 MiB */
#define HX_DISK_SLOTS 3      /* chunk slots at least: one updated, one read ahead, one written back */

typedef struct hx_disk_seg {
    size_t off;    /* resident: byte offset in the resident region; chunk: 0 */
    size_t bytes;  /* a multiple of HX_DISK_BLOCK */
    int64_t block; /* first logical block of generation 0; generation 1 follows it */
    int gen;       /* the generation holding the current copy (-1: none yet) */
    bool pending;  /* the other generation holds a newer copy, not committed yet */
} hx_disk_seg;

typedef struct hx_disk_update hx_disk_update;
typedef struct hx_trace_lane hx_trace_lane;

struct hx_offload_disk {
    hx_residency residency; /* the session's: its points get &residency (first: the same address) */
    hx_engine *e;
    hx_disk_tier *tier;
    hx_pinned_pool *pinned;
    int *where;      /* per tensor id: -2 not on disk, -1 resident region, else its chunk's segment */
    size_t *at;      /* per tensor id on disk: byte offset in the resident region or its chunk */
    int n_seg, n_res;
    hx_disk_seg *segs;
    size_t seg_bytes;  /* a resident segment (the last may be shorter) and the chunk target */
    size_t res_bytes;  /* the resident region */
    size_t slot_bytes; /* the largest chunk */
    int n_slots;       /* min(HX_DISK_SLOTS, chunks), more where offload_cpu_size has room */
    size_t whole;      /* every disk tensor's bytes: what one buffer for all would take */
    char *res;         /* the resident region while loaded, else NULL */
    bool loaded;       /* the resident region has its host buffer (res NULL when it is empty) */
    atomic_bool res_ready; /* ... and every segment of it is read (else the I/O thread reads it) */
    bool res_dirty;    /* the loaded region may differ from disk: a training run stores it */
    hx_disk_update *upd; /* the chunked update of the run in progress (disk_update.c) */
    hx_disk_run_stats last; /* the last run's figures */
    hx_trace_lane *io_lane; /* the I/O thread's lane in the trace (NULL: none) */
};

/* The generation a write of segment k goes to. */
static inline int hx__disk_next_gen(const hx_disk_seg *g) { return g->gen < 0 ? 0 : 1 - g->gen; }
static inline int64_t hx__disk_seg_block(const hx_disk_seg *g, int gen)
{
    return g->block + gen * (int64_t)(g->bytes / HX_DISK_BLOCK);
}

/* Reads segment k (its current generation) into buf / writes buf to its
 * next generation and marks it pending; errors carry the tier's message in err. */
hx_status hx__disk_seg_read(hx_offload_disk *d, int k, void *buf, hx_mem_err *err);
hx_status hx__disk_seg_write(hx_offload_disk *d, int k, const void *buf, hx_mem_err *err);

/* The tier whose residency r is. */
static inline hx_offload_disk *hx__disk(hx_residency *r) { return (hx_offload_disk *)r; }

/* disk_update.c: a training run's I/O thread and its update phase.
 * hx__disk_update_begin starts the thread, which reads the resident region
 * (into the buffer the run's load gave it), then the first chunks, while
 * the forward and backward run; HX_ERR_UNSUPPORTED when p's update phase
 * holds anything but host kernels. */
hx_status hx__disk_update_begin(hx_offload_disk *d, const hx_plan *p);
/* The residency's step_ready: waits until the resident segments plan step
 * sp reads are in host memory; the I/O thread's failure otherwise. */
hx_status hx__disk_step_ready(hx_residency *r, const hx_step *sp);
/* Waits for resident segments 0..k (k < 0: none). */
hx_status hx__disk_resident_wait(hx_offload_disk *d, int k);
/* The residency's update: p's update phase chunk by chunk with ex. */
hx_status hx__disk_update_run(hx_residency *r, const hx_plan *p, const hx_exec *ex);
/* Stops a chunked update in progress and gives its slots back. */
void hx__disk_update_end(hx_offload_disk *d);
/* Whether the run's updates write into resident segment k (true without a
 * chunked update: anything may have). */
bool hx__disk_update_touched(const hx_offload_disk *d, int k);

#endif
