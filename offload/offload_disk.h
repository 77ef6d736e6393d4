/* offload_param=disk: the parameters and optimizer state that live on the
 * host (offload's placement puts every parameter, its state and its update
 * there), but for the other ranks' ZeRO shards (engine.remote), are kept
 * in a disk tier file under offload_path (memory/disk_tier:
 * O_DIRECT where the filesystem takes it, io_uring/libaio when enable_aio,
 * an XXH3 checksum per block). Between runs the host holds none of them.
 *
 * Bounded host memory (disk_layout.h): a run loads only the resident
 * region (what the forward and backward read; a training run's steps each
 * wait for the segments they read, while the I/O thread reads on); the optimizer state is
 * streamed through HX_DISK_SLOTS (or, where offload_cpu_size has room,
 * more) chunk slots during the update phase by an
 * I/O thread (disk_update.c) that reads the next chunks (the first ones
 * while the forward and backward run) and writes the updated ones back
 * while the calling thread updates. offload_cpu_size must hold the resident
 * region and the slots, not the whole set. Single tensors, checkpoints and
 * creation go segment by segment.
 *
 * All or nothing: every segment is stored in two generations; a call
 * writes the generation not in use and marks it pending, and only when all
 * its writes succeeded are the pending segments switched at once. A failed
 * read (EIO, checksum mismatch) or write (short write, ENOSPC) fails the
 * call with nothing applied: the parameters and state on disk stay as
 * they were, and so do the step count and the loss scale. */
#ifndef HX_OFFLOAD_DISK_H
#define HX_OFFLOAD_DISK_H

#include "scheduler/scheduler.h"

typedef struct hx_offload_disk hx_offload_disk;
typedef struct hx_disk_tier hx_disk_tier;
typedef struct hx_pinned_pool hx_pinned_pool;

/* The session's residency (scheduler/residency.h) for offload_param=disk,
 * after placement and before the persistent tensors are allocated: lays
 * the file out, checks the budgets, creates the tier and the pinned pool.
 * Its points: a run loads the resident region (a training run leaves the
 * reading to an I/O thread that its steps wait for, segment by segment),
 * updates chunk by chunk (disk_update.c), stores the resident segments
 * the updates changed and commits them with the chunks; single tensors and
 * checkpoints go segment by segment. Once *out is set, the session
 * destroys it, also when this fails. */
hx_status hx__disk_create(hx_engine *e, hx_residency **out);
/* The host bytes the two host tiers keep for the session's placement
 * (before any is chosen: auto_offload), with chunk_size chunk_size:
 * offload_param=cpu every parameter and optimizer state on the host
 * (whole); disk at least the resident region and the chunk slots
 * (minimum), what hx__disk_create checks against offload_cpu_size. */
typedef struct hx_disk_host_need {
    size_t whole, minimum;
    size_t resident, slot; /* minimum = resident + slots * slot */
    int slots;
} hx_disk_host_need;
hx_status hx__disk_host_need(hx_engine *e, size_t chunk_size, hx_disk_host_need *out);

/* The session's disk tier (disk_layout.h), NULL without one. */
hx_offload_disk *hx__disk_of(const hx_engine *e);

/* What the last run did with the disk (benchmarks, tests). */
typedef struct hx_disk_run_stats {
    double resident_read_s;  /* reading the resident region (a training run: on the I/O thread) */
    double resident_wait_s;  /* of it, steps of the forward and backward waiting for it */
    double resident_write_s; /* after the update phase (what the I/O thread left) */
    double update_s;      /* the update phase: first update to the last chunk written */
    double update_wait_s; /* of it, the calling thread waiting for the I/O thread */
    double io_s;          /* the I/O thread's time in tier reads and writes */
    double prefetch_s;    /* of io_s, reads done before the update phase began */
    uint64_t resident_bytes;         /* the resident region, read before the forward */
    uint64_t resident_bytes_written; /* its segments the updates changed, written back */
    uint64_t chunk_bytes_read, chunk_bytes_written;
    int chunks;
} hx_disk_run_stats;

/* For tests and benchmarks: the tier and the pinned pool (NULL without
 * one), segments (resident first), the first logical block of segment k in
 * the generation the next store writes (next) or the one in use, the host
 * bytes a training run needs at most (resident region and slots), every
 * disk tensor's bytes, the last run's figures. */
hx_disk_tier *hx__disk_tier_of(const hx_engine *e);
hx_pinned_pool *hx__disk_pool_of(const hx_engine *e);
int hx__disk_segments(const hx_engine *e, int *resident);
int64_t hx__disk_block_of(const hx_engine *e, int seg, bool next);
size_t hx__disk_host_bytes(const hx_engine *e);
size_t hx__disk_whole_bytes(const hx_engine *e);
hx_disk_run_stats hx__disk_last_run(const hx_engine *e);

#endif
