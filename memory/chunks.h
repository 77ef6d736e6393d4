/* Chunks: parameters grouped, in execution order, into chunks of one size,
 * the unit of transfer and offload (as in Colossal-AI's Gemini). A
 * parameter goes into the open chunk when it fits there (at an offset
 * aligned to param_align), else it closes that chunk and opens the next;
 * a parameter larger than a chunk gets a chunk of its own (its size
 * rounded up to the search step) and the open chunk stays open. The last
 * chunk ends at its last parameter's end rounded up to the step (as an own
 * chunk is), never past chunk_size: no parameter comes after it to fill
 * its tail, and where hetex gives chunks memory it sizes them by what they
 * hold (dist/dp_layout.c: a chunk group is as long as its longest used
 * chunk). Parameters never split across chunks (a parameter is read from
 * one chunk), so the other chunks' tails stay: a parameter that did not
 * fit one moved to the next.
 *
 * Waste is every byte of chunk memory that holds no parameter: alignment
 * gaps, unused chunk tails, and the rounding of own chunks and of the last
 * chunk. The search
 * tries every chunk size in [min_chunk, max_chunk] in steps of `step` and
 * keeps the one with the least waste (the smaller on a tie). */
#ifndef HX_MEM_CHUNKS_H
#define HX_MEM_CHUNKS_H

#include "memory/mem_common.h"

typedef struct hx_chunk_search {
    size_t min_chunk, max_chunk; /* the range searched */
    size_t step;                 /* the chunk-size alignment (a power of 2 is not required) */
    size_t param_align;          /* a parameter's offset in a chunk is a multiple of this (>= 1) */
} hx_chunk_search;

typedef struct hx_chunk_plan {
    size_t chunk_size;
    int64_t n_chunks;       /* chunks of chunk_size (the last: last_chunk bytes) */
    size_t last_chunk;      /* the last chunk's bytes (0: no chunk of chunk_size) */
    int64_t n_own;          /* parameters larger than a chunk, each in a chunk of its own */
    size_t param_bytes;     /* the parameters' bytes */
    size_t total_bytes;     /* all chunks */
    size_t waste;           /* total_bytes - param_bytes */
    double waste_fraction;  /* waste / total_bytes */
} hx_chunk_plan;

/* The layout for one chunk size. chunk_of / offset_of (n entries each, or
 * NULL) receive each parameter's chunk (equal chunks and own chunks are
 * numbered together, in order of opening) and offset in it. */
hx_status hx_chunk_layout(const size_t *sizes, int64_t n, size_t chunk_size, size_t param_align,
                          size_t own_round, hx_chunk_plan *out, int64_t *chunk_of,
                          size_t *offset_of, hx_mem_err *err);
/* The chunk size in the range with the least waste. */
hx_status hx_chunk_search_run(const size_t *sizes, int64_t n, const hx_chunk_search *s,
                              hx_chunk_plan *best, hx_mem_err *err);

#endif
