/* The disk tier: params (chunks) offloaded to files under offload_path.
 *
 * The tier stores numbered logical blocks of block_size bytes. A write
 * covers blocks first .. first + ceil(bytes / block_size) - 1 (the last one
 * may be partial); a read must name the same span and size as the write
 * that stored it. I/O is asynchronous with up to queue_depth blocks in
 * flight, through io_uring, else libaio (picked at run time; the reason for
 * a fallback is kept), on a file opened with O_DIRECT where the filesystem
 * allows it (else buffered I/O, and the reason is kept). Blocks of a
 * 4096-aligned caller buffer go straight to and from the file; others go
 * through the tier's own aligned buffers (allocated at their first use, so
 * a caller whose buffers are aligned whole blocks never pays for them). Calls block until their I/O is
 * done: a caller overlaps them with compute by calling from its own
 * thread (the prefetcher).
 *
 * Integrity: every block's XXH3-64 checksum is kept in memory and checked
 * on read. Every short write, ENOSPC, EIO or checksum mismatch is an error
 * naming the file, block and offset (HX_ERR_IO, or HX_ERR_CORRUPT for a
 * mismatch), never silent. A write goes to fresh places in the file and is
 * applied only when every block of it succeeded: after a failed write the
 * previous copy of each block is still the one read back. After a failed
 * read the destination bytes are unspecified (do not use them); the stored
 * copy is unchanged.
 *
 * One tier is used by one thread at a time. */
#ifndef HX_MEM_DISK_TIER_H
#define HX_MEM_DISK_TIER_H

#include "memory/disk_io.h"

/* Injected failures, for tests (-1: none). */
typedef struct hx_disk_faults {
    int64_t short_write_block;  /* writes of this logical block come back half done */
    int64_t enospc_after_bytes; /* writes that would take the tier past this many bytes
                                   written fail with ENOSPC */
    int64_t eio_read_block;     /* reads of this block fail with EIO */
    int64_t flip_read_block;    /* reads of this block arrive with one bit flipped */
    bool refuse_direct;         /* at create: O_DIRECT refused as tmpfs once did (EINVAL) */
} hx_disk_faults;
hx_disk_faults hx_disk_faults_none(void);

typedef struct hx_disk_config {
    const char *path;             /* offload_path: an existing directory */
    size_t block_size;            /* a multiple of 4096; 1 MiB by default */
    int queue_depth;              /* 1..1024; 32 by default */
    hx_disk_engine engine;        /* AUTO by default */
    bool direct;                  /* try O_DIRECT (true by default) */
    const hx_disk_faults *faults; /* NULL: none (copied) */
} hx_disk_config;
hx_disk_config hx_disk_config_default(const char *path);

typedef struct hx_disk_stats {
    const char *engine;        /* "io_uring", "libaio", "sync" */
    char engine_reason[192];   /* why not io_uring ("" when it is) */
    bool direct;               /* O_DIRECT in use */
    char direct_reason[192];   /* why not ("" when it is) */
    char file[512];
    size_t block_size;
    int queue_depth;
    int64_t blocks;            /* logical blocks holding data */
    int64_t slots;             /* block-sized places in the file */
    int64_t writes, reads;     /* calls that succeeded */
    int64_t failed_writes, failed_reads;
    uint64_t bytes_written, bytes_read; /* by the device, padding included */
    size_t bounce_bytes; /* host memory of the tier's bounce buffers (allocated at first use:
                            a block that is partial or not 4096-aligned in the caller's buffer) */
} hx_disk_stats;

typedef struct hx_disk_tier hx_disk_tier;

hx_status hx_disk_tier_create(const hx_disk_config *cfg, hx_disk_tier **out, hx_mem_err *err);
/* Closes and removes the file. */
void hx_disk_tier_destroy(hx_disk_tier *t);
hx_status hx_disk_tier_write(hx_disk_tier *t, int64_t first_block, const void *buf, size_t bytes,
                             hx_mem_err *err);
hx_status hx_disk_tier_read(hx_disk_tier *t, int64_t first_block, void *buf, size_t bytes,
                            hx_mem_err *err);
/* Several reads and writes run together (blocks of all of them in flight
 * at once, up to queue_depth), each as if alone: its own status and
 * message in the op; a write is applied only when all its blocks
 * succeeded. Ops that name the same blocks are refused (every op fails,
 * nothing runs). Returns the first failing op's status. */
typedef struct hx_disk_op {
    bool write;
    int64_t first;
    void *buf;
    size_t bytes;
    hx_status st;   /* out */
    hx_mem_err err; /* out: the message when st */
} hx_disk_op;
hx_status hx_disk_tier_batch(hx_disk_tier *t, hx_disk_op *ops, int n);
void hx_disk_tier_stats(const hx_disk_tier *t, hx_disk_stats *out);
/* Replaces the injected failures (tests; NULL: none). */
void hx_disk_tier_set_faults(hx_disk_tier *t, const hx_disk_faults *f);

#endif
