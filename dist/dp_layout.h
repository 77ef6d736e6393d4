/* dist/'s gradient layout for data parallel (dp.c), private to dist/: the
 * chunks (memory/chunks.h) the gradients are summed in and, with ZeRO,
 * which rank owns each chunk. */
#ifndef HX_DIST_DP_LAYOUT_H
#define HX_DIST_DP_LAYOUT_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

/* Per gradient its chunk and offset in it; per chunk its gradient bytes
 * (fill), its used bytes (to its last gradient's end) and (ZeRO) its owner
 * and its group (n_groups of them). */
typedef struct hx_dp_layout {
    int64_t n_chunks, n_groups, *chunk_of, *group_of;
    size_t *offset_of, *fill, *used;
    int *rank_of;
    size_t *load;    /* per rank: the gradient bytes it owns */
} hx_dp_layout;

/* An empty layout for n gradients over `ranks` ranks; HX_ERR_OUT_OF_MEMORY. */
hx_status hx__dp_layout_init(hx_dp_layout *z, int64_t n, int ranks);
void hx__dp_layout_free(hx_dp_layout *z);
/* Lays the n gradients of bytes[i] bytes (elements of esz) out in chunks
 * of cs (stage 0: a gradient larger gets a chunk of its own) into z; with
 * ranks > 0 deals the chunks to the ranks (the fullest first, each to the
 * least loaded rank) and groups them in execution order: a group is a run
 * of neighbouring chunks of different owners (a chunk whose owner has one
 * in the open group opens the next), so that the backward completes the
 * groups one after the other, the last group first. Before session 14
 * group g was every rank's g-th chunk: a group mixed chunks from anywhere
 * in the order and was complete only when its earliest was.
 * HX_ERR_INVALID_ARGUMENT naming the layout's complaint,
 * HX_ERR_OUT_OF_MEMORY. */
hx_status hx__dp_layout(hx_dp_layout *z, const size_t *bytes, int64_t n, size_t cs, size_t esz,
                        int ranks);
/* ZeRO's chunk size for the gradients, z left laid out with it: at least
 * the largest gradient (no chunk of its own), at most cap where that
 * allows; of the sizes that cut the gradients into k*N chunks (k = 1..32),
 * the one whose busiest rank owns the fewest gradient bytes, then whose
 * busiest sender (hx__dp_layout_groups) sends the fewest, then the
 * smaller. */
hx_status hx__dp_layout_zero(hx_dp_layout *z, const size_t *bytes, int64_t n, size_t cap, size_t esz,
                             int ranks, size_t *chunk_size);
/* Per group of z (n_groups of them) the used bytes of its
 * chunks into len (each rank's block of the group is its chunk, exactly:
 * 0 bytes where it has none); returns the most bytes a rank sends in a
 * reduce-scatter and an all-gather of every group (the other ranks'
 * blocks, then its own to each other rank). */
size_t hx__dp_layout_groups(const hx_dp_layout *z, int ranks, size_t *len);

#endif
