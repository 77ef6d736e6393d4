/* The baseline hetex's pools are measured against: a single-pool best-fit
 * caching allocator that behaves like PyTorch's CUDA caching allocator as
 * its documentation describes it (our own code):
 *   - requests are rounded up to 512 bytes;
 *   - requests up to 1 MiB come from 2 MiB segments ("small pool"), larger
 *     ones from 20 MiB segments when under 10 MiB, else from a segment of
 *     the request rounded up to 2 MiB ("large pool");
 *   - best fit among the cached free blocks of the request's pool; a block
 *     is split when the rest is at least 512 bytes (small) or more than
 *     1 MiB (large), else handed out whole; freed blocks coalesce with
 *     free neighbours;
 *   - nothing goes back to the device until empty_cache, or until the
 *     device (or the cap) refuses a segment: then every entirely free
 *     segment is released and the reservation tried once more.
 * Lifetimes are not known to it: everything shares the two size pools. */
#ifndef HX_MEM_CACHING_BASELINE_H
#define HX_MEM_CACHING_BASELINE_H

#include "memory/arena.h"

typedef struct hx_mem_baseline hx_mem_baseline;

/* capacity: SIZE_MAX for none. */
hx_status hx_mem_baseline_create(size_t capacity, hx_mem_source src, hx_mem_baseline **out,
                                 hx_mem_err *err);
void hx_mem_baseline_destroy(hx_mem_baseline *b);
/* HX_ERR_DEVICE_OOM when no segment can be had. */
hx_status hx_mem_baseline_alloc(hx_mem_baseline *b, size_t bytes, void **out, hx_mem_err *err);
hx_status hx_mem_baseline_free(hx_mem_baseline *b, void *p, hx_mem_err *err);
/* Releases every entirely free segment; returns the bytes released. */
size_t hx_mem_baseline_empty_cache(hx_mem_baseline *b);
void hx_mem_baseline_stats(hx_mem_baseline *b, hx_pool_stats *out);

#endif
