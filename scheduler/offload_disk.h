/* offload_param=disk: the parameters and optimizer state that live on the
 * host (offload's placement puts every parameter, its state and its update
 * there) are kept in a disk tier file under offload_path (memory/disk_tier:
 * O_DIRECT where the filesystem takes it, io_uring/libaio when enable_aio,
 * an XXH3 checksum per block). Between runs the host holds none of them.
 * A run reads them all into one buffer from the pinned host pool, the plan
 * is bound to it, and a training run writes them back after its updates;
 * the buffer is then given back.
 *
 * All or nothing: the file holds two generations of every segment; a store
 * writes the generation not in use and switches to it only when every
 * segment's write succeeded. A failed read (EIO, checksum mismatch) or
 * write (short write, ENOSPC) fails the call, the host copy is dropped and
 * the parameters on disk stay as they were. */
#ifndef HX_OFFLOAD_DISK_H
#define HX_OFFLOAD_DISK_H

#include "scheduler/sched.h"

typedef struct hx_disk_tier hx_disk_tier;

/* Whether tensor id is kept on disk by the session's config. */
bool hx__disk_resident(const hx_session *s, int id);

/* At session creation, after the persistent tensors are initialised: moves
 * the disk-resident ones to the tier (s->persist[id] NULL after). */
hx_status hx__disk_open(hx_session *s);
/* Drops any host copy and removes the file. */
void hx__disk_close(hx_session *s);

/* Reads every disk-resident tensor into host memory and points
 * s->persist at it (plans rebind); a no-op without a disk tier. fn names
 * the public call in messages. */
hx_status hx__disk_load(hx_session *s, const char *fn);
/* As hx__disk_load, but only the bytes of t are read (the rest of the host
 * copy is undefined: use it for t alone, then evict). t must belong to the
 * session's graph. */
hx_status hx__disk_load_one(hx_session *s, const char *fn, const hx_tensor *t);
/* Writes the host copies back as a new generation, all or nothing. */
hx_status hx__disk_store(hx_session *s, const char *fn);
/* Gives the host copy back without writing it. */
void hx__disk_evict(hx_session *s);

/* For tests and benchmarks: the tier (NULL without one), the first
 * logical block of segment seg in the generation the next store writes
 * (next) or the one in use, and the host buffer's bytes. */
hx_disk_tier *hx__disk_tier_of(const hx_session *s);
int64_t hx__disk_block_of(const hx_session *s, int seg, bool next);
size_t hx__disk_host_bytes(const hx_session *s);

#endif
