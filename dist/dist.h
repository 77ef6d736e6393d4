/* dist/'s one header for the rest of the library: the communicator
 * (struct hx_comm, public as an opaque handle) and its non-blocking
 * collectives, which hetex drives itself: Open MPI here has no progress
 * thread, so a collective moves only while hx__coll_test or hx__coll_wait
 * is called.
 *
 * The collectives are built from point-to-point messages between every
 * pair of ranks, so that
 * - a reduction sums the ranks' values in rank order (0, 1, ..., N-1) in
 *   f32 and rounds once: its result is the same on every rank, for every
 *   transport, and bitwise the serial sum in that order;
 * - a wait that runs out of time names the ranks whose messages are
 *   missing;
 * - each rank sends (N-1)/N of the buffer for a reduce-scatter or an
 *   all-gather, twice that for an all-reduce: what a ring sends.
 * Every rank must start the same collectives in the same order (the tag
 * carries their sequence number). Every failure is HX_ERR_COMM naming the
 * collective, this rank, the peer where one is known, and MPI's text; the
 * communicator is then broken and refuses further collectives. */
#ifndef HX_DIST_H
#define HX_DIST_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

/* A collective in flight. */
typedef struct hx_coll hx_coll;

/* Sum, in rank order, of the ranks' `count` elements (f32 or bf16;
 * bf16 summed in f32 and rounded once, to nearest even). send == recv is
 * in place. */
hx_status hx__comm_all_reduce(hx_comm *c, const void *send, void *recv, int64_t count,
                              hx_dtype dt, hx_coll **out);
/* send holds size*count elements, block j = [j*count, (j+1)*count); rank r
 * receives into recv (count elements) the rank-order sum of every rank's
 * block r (f32 or bf16). recv == send + r*count is in place. */
hx_status hx__comm_reduce_scatter(hx_comm *c, const void *send, void *recv, int64_t count,
                                  hx_dtype dt, hx_coll **out);
/* Every rank's `count` elements of send, to recv's block of that rank
 * (recv holds size*count). send == recv + r*count is in place. Any dtype. */
hx_status hx__comm_all_gather(hx_comm *c, const void *send, void *recv, int64_t count,
                              hx_dtype dt, hx_coll **out);
/* The same with blocks of their own lengths, the same counts[] (size
 * entries, each >= 0, copied) on every rank: block j is counts[j]
 * elements at the sum of counts[0..j-1], back to back. Rank r receives its
 * block's sum (counts[r] elements) into recv / sends its counts[r]
 * elements of send; a rank's 0-long block sends and receives nothing, so
 * each rank sends exactly the other ranks' blocks (reduce-scatter) or
 * its own block to each other rank (all-gather). In place as above, at
 * its block's start. HX_ERR_INVALID_ARGUMENT naming a negative count. */
hx_status hx__comm_reduce_scatter_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                    hx_dtype dt, hx_coll **out);
hx_status hx__comm_all_gather_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                hx_dtype dt, hx_coll **out);
/* An all-gather in place, of bytes in segments: rank j's block is
 * segments seg_lo[j] .. seg_lo[j + 1] - 1 (seg_lo has size + 1 entries)
 * of seg_bytes[k] bytes at seg[k], the same lengths on every rank (the
 * pointers are each rank's own); this rank sends its block's segments to
 * every other rank and receives theirs into their segments, each its own
 * message, so that no buffer holds the blocks together. The arrays are
 * copied; the segments' memory must stay until the wait. */
hx_status hx__comm_all_gather_segments(hx_comm *c, void *const *seg, const int64_t *seg_bytes,
                                       const int64_t *seg_lo, hx_coll **out);
/* Rank r sends send_counts[j] elements from send + send_displs[j] to rank
 * j, and receives recv_counts[j] from rank j into recv + recv_displs[j]
 * (in elements; the arrays have size entries and are copied). */
hx_status hx__comm_all_to_all_v(hx_comm *c, const void *send, const int64_t *send_counts,
                                const int64_t *send_displs, void *recv,
                                const int64_t *recv_counts, const int64_t *recv_displs,
                                hx_dtype dt, hx_coll **out);
/* root's `count` elements of buf to every rank's buf. */
hx_status hx__comm_broadcast(hx_comm *c, void *buf, int64_t count, hx_dtype dt, int root,
                             hx_coll **out);

/* Whether c's ranks on this host are no more than its online cores, each
 * able to have one (found at creation; false without MPI). */
bool hx__comm_own_cores(const hx_comm *c);

/* A duplicate of c (collective over c: MPI_Comm_dup) with its timeout, to
 * be freed with hx_comm_free. */
hx_status hx__comm_dup(const hx_comm *c, hx_comm **out);

/* Moves q on without blocking; *done once it is complete (q stays to be
 * waited for). */
hx_status hx__coll_test(hx_coll *q, bool *done);
/* Drives q until it completes or the communicator's timeout passes, and
 * frees q (also on failure; NULL: HX_OK). Between tests it sleeps 50 us
 * once it has polled 100 times and, where each rank on the host has a
 * core (hx__comm_own_cores), 300 us. */
hx_status hx__coll_wait(hx_coll *q);

/* The largest message, in elements, a collective sends in one piece
 * (larger blocks go in several; default 2^28): tests make it small. */
void hx__comm_set_max_message(hx_comm *c, int64_t elems);
/* Bytes this rank has sent to other ranks since c was created. */
uint64_t hx__comm_bytes_sent(const hx_comm *c);

/* Data parallel: n gradients of dtype dt (f32 or bf16) of bytes[i]
 * bytes, laid out in chunks by memory/chunks.h's layout, in the order
 * given (the same on every rank).
 * Stage 0: chunks of chunk_size (0: 32 MiB; at most all the gradients'
 * bytes), summed over the ranks one all-reduce per chunk, all chunks in
 * flight together.
 * ZeRO (stage 1, 2): chunks of one size, at least the largest gradient
 * and at most chunk_size (0: 32 MiB) where that allows, chosen among
 * the sizes that cut the gradients into k*N chunks (k = 1..32) for the
 * least loaded busiest rank (dp_layout.h). Chunks are dealt the fullest
 * first, each to the least loaded rank; a group is a run of neighbouring
 * chunks in execution order with different owners, so the backward
 * completes the groups one after another. Both stages keep only
 * the sums of this rank's chunks (a reduce-scatter per group whose
 * blocks are its chunks' used bytes, nothing padded: each rank sends the
 * others' chunks of the group, hx__comm_reduce_scatter_v); stage 1 differs
 * only in that hx__dp_grad_shard_bytes counts no shard (it keeps every
 * gradient's memory anyway). */
typedef struct hx_dp hx_dp;
hx_status hx__dp_create(hx_comm *c, const size_t *bytes, int64_t n, size_t chunk_size, hx_dtype dt,
                        int stage, hx_dp **out);
void hx__dp_free(hx_dp *d);
/* The sums, unit by unit: a unit is a chunk at stage 0 (an all-reduce:
 * every rank gets the chunk's sum) and a group of chunks (neighbours, at
 * most one of each rank) with ZeRO (a reduce-scatter: each rank gets its own chunk's sum); rank-order sums either way, so the bits do not depend on
 * which units are in flight together or when they start. grads[i] is
 * gradient i's host-addressable value. Every rank must start the same
 * units in the same order (any order; the communicator's sequence). */
int64_t hx__dp_units(const hx_dp *d);
int64_t hx__dp_unit_of(const hx_dp *d, int64_t i); /* gradient i's unit */
/* Whether a unit may start now: ZeRO's reduce-scatters use one of a few
 * group buffers (3), each free once its sum is done (an all-gather
 * needs none: it may always start). */
bool hx__dp_can_start(const hx_dp *d);
/* Copies unit x's gradients (only those are read) into its buffer and
 * starts its sum (needs hx__dp_can_start). */
hx_status hx__dp_start(hx_dp *d, int64_t x, void *const *grads);
/* Moves unit x's sum on without blocking; *done once it is complete (a
 * unit not started is done). */
hx_status hx__dp_test(hx_dp *d, int64_t x, bool *done);
/* Waits for unit x's sum and (grads not NULL) writes it over its
 * gradients: with ZeRO over this rank's own only (the others' are left
 * as they were). */
hx_status hx__dp_finish(hx_dp *d, int64_t x, void *const *grads);
/* Every unit in order, started and finished: the sums of every gradient
 * (ZeRO: of this rank's own), written over them. */
hx_status hx__dp_sum(hx_dp *d, void *const *grads);
int64_t hx__dp_chunks(const hx_dp *d);        /* holding gradients */
int64_t hx__dp_padded_chunks(const hx_dp *d); /* ZeRO: groups times N (chunk slots) */
size_t hx__dp_chunk_size(const hx_dp *d);     /* ZeRO: the one chunk size */
/* The host bytes the sums go through: stage 0 all chunks together; ZeRO
 * this rank's chunks and up to 3 groups' buffers (the reduce-scatters
 * that may be in flight at once; a group's buffer is its chunks' used
 * bytes). */
size_t hx__dp_chunk_bytes(const hx_dp *d);
/* Stage 2: this rank's chunks of summed gradients (else 0). */
size_t hx__dp_grad_shard_bytes(const hx_dp *d);
/* ZeRO: the rank that owns gradient i (stage 0: -1). */
int hx__dp_owner(const hx_dp *d, int64_t i);
/* ZeRO, after the updates: vals[i] (val_bytes[i] <= gradient i's bytes,
 * host-addressable, the same lengths on every rank) of every gradient an
 * owner holds to every other rank, group after group, each an all-gather
 * in place (hx__comm_all_gather_segments: the owner sends from its
 * values, the others receive into theirs; no buffer between).
 * all_gather does every group in turn; share_start starts group g's
 * (until it is finished the owner's values of the group must not change
 * and the others' are not there yet; it may be in flight beside the
 * group's next reduce-scatter), share_test moves it on as hx__dp_test, and
 * share_finish waits for it (on failure the others' values are partly
 * written). Groups may be in flight together, in any order the same on
 * every rank. */
hx_status hx__dp_all_gather(hx_dp *d, void *const *vals, const size_t *val_bytes);
hx_status hx__dp_share_start(hx_dp *d, int64_t g, void *const *vals, const size_t *val_bytes);
hx_status hx__dp_share_test(hx_dp *d, int64_t g, bool *done);
hx_status hx__dp_share_finish(hx_dp *d, int64_t g);
/* Whether group g's all-gather was started and not finished yet. */
bool hx__dp_sharing(const hx_dp *d, int64_t g);
/* ZeRO stage 3, one group at a time: the groups (runs of neighbouring
 * chunks, at most one of each rank; 0 at stage 0), group g's buffer bytes (its chunks' used bytes, rank
 * after rank, 0 for a rank with none), gradient i's group and its offset in its group's buffer (what
 * stands in for it there may be shorter: it starts at the same place).
 * gather_start begins the in-place all-gather of group g into buf (those
 * bytes; this rank's block, filled by the caller, goes to every rank):
 * wait for *out with hx__coll_wait. */
int64_t hx__dp_groups(const hx_dp *d);
size_t hx__dp_group_bytes(const hx_dp *d, int64_t g);
int64_t hx__dp_group_of(const hx_dp *d, int64_t i);
size_t hx__dp_in_group(const hx_dp *d, int64_t i);
hx_status hx__dp_gather_start(hx_dp *d, int64_t g, void *buf, hx_coll **out);

/* NCCL between GPU ranks (built with CUDA where nccl.h is found; the other
 * builds answer HX_ERR_UNSUPPORTED): a clique over c's ranks, bootstrapped
 * by broadcasting rank 0's unique id over c. Buffers are device memory of
 * cuda_device, stream a cudaStream_t (NULL: the default stream); the calls
 * enqueue and return, and hx__nccl_sync waits for the stream and reports
 * an asynchronous NCCL error. Reduce-scatter and all-gather work in place
 * on buf (size*count elements; rank r's block at r*count). */
typedef struct hx_nccl hx_nccl;
hx_status hx__nccl_create(hx_comm *c, int cuda_device, hx_nccl **out);
void hx__nccl_free(hx_nccl *n);
hx_status hx__nccl_all_reduce(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream);
hx_status hx__nccl_reduce_scatter(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream);
hx_status hx__nccl_all_gather(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream);
hx_status hx__nccl_sync(hx_nccl *n, void *stream);

/* ---- point-to-point messages (dist/msg.c) ---- */
/* Point-to-point messages between the ranks of a communicator, for a
 * parameter server's requests and replies (embedding/ps_*.c): unlike the
 * collectives of dist/dist.h, a rank sends when it has something to say
 * and polls for what arrives, so servers and workers need not call the
 * same things in the same order. A mailbox owns a duplicate of the
 * communicator. Sends are non-blocking and copy their bytes: each call
 * moves the sends still in flight on (Open MPI here has no progress
 * thread: a message moves only while its sender or receiver is in MPI).
 * Messages from one rank with one tag arrive in the order sent. Failures
 * are HX_ERR_COMM with MPI's text, naming the peer; a build without MPI
 * answers HX_ERR_UNSUPPORTED. Threads: any thread; the mailbox's calls
 * take its lock (and hetex's MPI lock), so threads may share it. */
typedef struct hx_mailbox hx_mailbox;

/* A mailbox over a duplicate of c (collective over c). */
hx_status hx__mailbox_create(const hx_comm *c, hx_mailbox **out);
/* Frees it; sends a dead peer never took are abandoned (and the duplicate
 * left to MPI, as a broken communicator's is). */
void hx__mailbox_free(hx_mailbox *m);
int hx__mailbox_rank(const hx_mailbox *m);
int hx__mailbox_size(const hx_mailbox *m);
/* Bytes this rank has sent (all messages, headers included). */
uint64_t hx__mailbox_bytes_sent(const hx_mailbox *m);

/* Sends n bytes (< 2^31) of buf to rank dst with tag (0 <= tag < 32767),
 * without waiting: buf is copied. */
hx_status hx__msg_send(hx_mailbox *m, int dst, int tag, const void *buf, size_t n);
/* A message, received: data is malloc'd (free it), n its bytes. */
typedef struct hx_msg {
    int src, tag;
    void *data;
    size_t n;
} hx_msg;
/* Receives one message from src (-1: any) with tag (-1: any) if one has
 * arrived (*got), without waiting. */
hx_status hx__msg_poll(hx_mailbox *m, int src, int tag, hx_msg *out, bool *got);
/* Waits up to timeout_s for every send to be taken; false when one was
 * not (its peer is dead or stuck: *peer names it). */
bool hx__msg_flush(hx_mailbox *m, double timeout_s, int *peer);

/* The communicator of c's ranks with this color (collective over c; each
 * rank gives its own, ranks ordered as in c), with c's timeout. */
hx_status hx__comm_split(const hx_comm *c, int color, hx_comm **out);

/* A short sleep for a loop that found nothing to do (idle: how many times
 * in a row), growing from 20 us to 1 ms, so that a waiting rank leaves
 * the cores to the ranks it waits for. */
void hx__msg_idle(long idle);

#endif
