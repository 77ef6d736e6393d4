/* offload_param=disk: the parameters and optimizer state that live on the
 * host (offload's placement puts every parameter, its state and its update
 * there) are kept in a disk tier file under offload_path (memory/disk_tier:
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

typedef struct hx_disk_tier hx_disk_tier;
typedef struct hx_pinned_pool hx_pinned_pool;

/* Whether tensor id is kept on disk by the session's config (placement). */
bool hx__disk_resident(const hx_session *s, int id);

/* After placement, before the persistent tensors are allocated: lays the
 * file out, checks the budgets, creates the tier and the pinned pool
 * (s->disk set; a no-op without offload_param=disk). */
hx_status hx__disk_layout(hx_session *s);
/* The host bytes the two host tiers keep for the session's placement
 * (before any is chosen: auto_offload), with chunk_size chunk_size:
 * offload_param=cpu every parameter and optimizer state on the host
 * (whole); disk at least the resident region and the chunk slots
 * (minimum), what hx__disk_layout checks against offload_cpu_size. */
typedef struct hx_disk_host_need {
    size_t whole, minimum;
    size_t resident, slot; /* minimum = resident + slots * slot */
    int slots;
} hx_disk_host_need;
hx_status hx__disk_host_need(hx_session *s, size_t chunk_size, hx_disk_host_need *out);
/* Whether tensor id lives in the tier (laid out): alloc_persistent skips it. */
bool hx__disk_holds(const hx_session *s, int id);
/* After the other persistent tensors are initialised: initialises the
 * disk tensors segment by segment (half copies from their masters) and
 * stores them. */
hx_status hx__disk_open(hx_session *s);
/* Drops any host copy and removes the file. */
void hx__disk_close(hx_session *s);

/* Gives the resident region a host buffer and points s->persist at its
 * tensors (plans rebind); a no-op without a disk tier or when loaded. A
 * training run (async) leaves the reading to the I/O thread that
 * hx__disk_update_begin starts: its steps wait for their segments
 * (hx__disk_step_ready), so the forward starts with the first segment;
 * otherwise the region is read here. fn names the public call. */
hx_status hx__disk_load(hx_session *s, const char *fn, bool async);
/* Before plan step sp runs (executor): waits until the resident segments
 * it reads are in host memory; the I/O thread's failure otherwise. */
hx_status hx__disk_step_ready(hx_session *s, const hx_step *sp);
/* Waits for resident segments 0..k (k < 0: none). */
hx_status hx__disk_resident_wait(hx_session *s, int k);
/* After a training run: writes back the resident segments the updates
 * changed and the I/O thread has not written yet, and commits them with
 * the chunks, all or nothing. */
hx_status hx__disk_store(hx_session *s, const char *fn);
/* Gives the host copies back without writing them; pending writes are
 * dropped and a chunked update in progress is stopped. */
void hx__disk_evict(hx_session *s);

/* A training run with plan p: starts the run's I/O thread (the resident
 * region, then the first chunks, read while the forward and backward run).
 * HX_ERR_UNSUPPORTED when p's update phase holds anything but host kernels. */
hx_status hx__disk_update_begin(hx_session *s, const hx_plan *p);
/* Whether s runs p's update phase through hx__disk_update_run. */
bool hx__disk_update_ready(const hx_session *s, const hx_plan *p);
/* Runs p's update phase chunk by chunk with ex (disk_update.c). */
hx_status hx__disk_update_run(hx_session *s, const hx_plan *p, const hx_exec *ex);

/* Whether tensor id is on disk outside the resident region (no host copy
 * during a run: read it with hx__disk_read_tensor). */
bool hx__disk_chunked(const hx_session *s, int id);
/* t's current bytes from disk into dst (bytes: t's size), through a
 * segment buffer of the pinned pool. */
hx_status hx__disk_read_tensor(hx_session *s, const char *fn, const hx_tensor *t, void *dst);
/* Sets t (on disk) to data and refreshes its half copies, all or nothing. */
hx_status hx__disk_write_tensor(hx_session *s, const char *fn, const hx_tensor *t,
                                const void *data);

/* Checkpoints (checkpoint.c): visits the disk tensors segment span by span,
 * each span loaded (or, blank, zeroed: every byte of it is then written by
 * visit) into a buffer; visit gets each tensor of the span and its host
 * bytes. With write, the spans are stored back and committed once every
 * visit and write succeeded. Returns the first failure. */
typedef hx_status (*hx_disk_visit_fn)(void *ctx, const hx_tensor *t, void *bytes);
hx_status hx__disk_visit(hx_session *s, const char *fn, bool blank, bool write,
                         hx_disk_visit_fn visit, void *ctx);

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
hx_disk_tier *hx__disk_tier_of(const hx_session *s);
hx_pinned_pool *hx__disk_pool_of(const hx_session *s);
int hx__disk_segments(const hx_session *s, int *resident);
int64_t hx__disk_block_of(const hx_session *s, int seg, bool next);
size_t hx__disk_host_bytes(const hx_session *s);
size_t hx__disk_whole_bytes(const hx_session *s);
hx_disk_run_stats hx__disk_last_run(const hx_session *s);

#endif
