/* The pinned host pool: staging memory for copies between host and device
 * (and the disk tier's buffers), in blocks of host_mem_block_size carved
 * best fit (split, coalesced; 64-byte alignment). A request larger than a
 * block gets a block of its own.
 *
 * Blocks are page-locked where that is permitted: with the cuda backend
 * through its hooks (cudaHostAlloc / cudaFreeHost), otherwise page-aligned
 * memory locked with mlock while the locked total stays under
 * RLIMIT_MEMLOCK's soft limit. Where locking is not permitted or fails the
 * block is plain page-aligned memory, and the statistics say so and why.
 * Thread-safe. */
#ifndef HX_MEM_PINNED_H
#define HX_MEM_PINNED_H

#include "memory/arena.h"

/* Page-locked memory from a device runtime (cudaHostAlloc/cudaFreeHost). */
typedef struct hx_pinned_hooks {
    void *ctx;
    hx_status (*alloc)(void *ctx, size_t bytes, void **out);
    void (*free)(void *ctx, void *p, size_t bytes);
    const char *name; /* "cudaHostAlloc", in the statistics */
} hx_pinned_hooks;

typedef struct hx_pinned_config {
    size_t block_size;            /* host_mem_block_size; a multiple of 4096 */
    size_t capacity;              /* bytes of blocks in all; SIZE_MAX: no limit */
    const hx_pinned_hooks *hooks; /* NULL: mlock where permitted (copied) */
    bool lock;                    /* false: plain memory, no mlock */
} hx_pinned_config;
/* 64 MiB blocks, no limit, no hooks, lock. */
hx_pinned_config hx_pinned_config_default(void);

typedef struct hx_pinned_stats {
    hx_pool_stats pool;
    size_t block_size;
    size_t locked_bytes;     /* in page-locked blocks (mlock or hooks) */
    int64_t locked_blocks, plain_blocks;
    const char *locked_by;   /* "mlock", the hooks' name, or "none" */
    char plain_reason[192];  /* why the last plain block is not locked ("" if none is) */
} hx_pinned_stats;

typedef struct hx_pinned_pool hx_pinned_pool;

hx_status hx_pinned_create(const hx_pinned_config *cfg, hx_pinned_pool **out, hx_mem_err *err);
void hx_pinned_destroy(hx_pinned_pool *p);
/* 64-byte aligned; HX_ERR_OUT_OF_MEMORY past the capacity or when the host is out. */
hx_status hx_pinned_alloc(hx_pinned_pool *p, size_t bytes, void **out, hx_mem_err *err);
hx_status hx_pinned_free(hx_pinned_pool *p, void *ptr, hx_mem_err *err);
/* Gives back blocks that hold nothing; returns their bytes. */
size_t hx_pinned_trim(hx_pinned_pool *p);
void hx_pinned_stats_get(hx_pinned_pool *p, hx_pinned_stats *out);

#endif
