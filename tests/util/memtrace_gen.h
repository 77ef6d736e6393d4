/* Synthetic allocation traces for the memory tests and benchmarks: test
 * code, not part of the library (memory/memtrace.h holds the format). */
#ifndef HX_MEMTRACE_GEN_H
#define HX_MEMTRACE_GEN_H

#include "memory/memtrace.h"

/* Each returns a malloc'd, consistent event list (every id freed by the end
 * unless stated) or NULL when out of host memory. */

/* Random sizes (log-uniform in [16, max_bytes]) and lifetimes: n_allocs
 * allocations, each live set member freed with probability 1/2 per step
 * once more than `live` are live; a tenth persistent and never freed. */
hx_mem_event *hx_memtrace_gen_random(uint64_t seed, size_t n_allocs, size_t max_bytes,
                                     size_t live, size_t *n);

/* A GPT-2-style training loop: parameters (persistent, f32) first, then per
 * step the forward pass keeps each layer's activations for the backward
 * pass and frees its temporaries, the backward pass walks the layers in
 * reverse freeing them and allocating gradients, and Adam's moments are
 * allocated at the first step (persistent, between the activations, as
 * frameworks that create optimizer state lazily do). Parameters and
 * moments stay live at the end. */
typedef struct hx_gpt_trace_shape {
    int layers, hidden, heads, seq, batch, vocab, steps;
} hx_gpt_trace_shape;
hx_mem_event *hx_memtrace_gen_gpt(const hx_gpt_trace_shape *shape, size_t *n);

/* A pattern that fragments a single pool: rounds of large transient
 * buffers with a small long-lived (persistent) tensor allocated between
 * each two, then the transients freed and a round of larger ones (a
 * growing sequence length), `rounds` times. */
hx_mem_event *hx_memtrace_gen_fragment(uint64_t seed, int rounds, size_t *n);

#endif
