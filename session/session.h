/* session/'s state: struct hx_session is a complete type only here. The
 * session owns the engine the scheduler and the offload work on (e, which
 * keeps the plans and the gradient scan), the training statistics and loss
 * scale, and the device memory it handed out; what other folders need of
 * it they get through the engine. No other folder of the library includes
 * this header (tests may). */
#ifndef HX_SESSION_H
#define HX_SESSION_H

#include "offload/offload.h"
#include "scheduler/scheduler.h"
#include "backend/backend.h"

#include <stdatomic.h>

struct hx_session {
    hx_engine e;
    /* device memory handed out by hx_session_device_alloc */
    struct hx_device_block {
        void *p;
        size_t bytes;
    } * dev_blocks;
    int n_dev_blocks;
    int n_fallbacks;
    int n_lowered; /* device nodes run as a library call (graph.h's lowering) */
    const hx_plan *last_plan; /* the last run's, one of e.plans */
    hx_train_stats stats;
    int good_steps;  /* in a row, for loss-scale growth */
    double lr_scale; /* hx_session_set_lr_scale */
    atomic_bool in_use; /* a call that runs or changes the session is in progress */
    hx_cuda_choice cuda; /* what the cuda backend found (hx_session_accelerator_info) */
    /* data parallel (cfg.comm): the gradient chunks of f32 [0] and bf16 [1]
     * gradients (NULL: none), each dp_n[] gradients, and each tensor's
     * gradient among them: 2 * its number + the group (-1: none) */
    struct hx_dp *dp[2];
    int *dp_index;
    int64_t dp_n[2];
    /* on CUDA, the gradients of the updates on the device, summed in place
     * over NCCL (NULL: none), and how many */
    struct hx_nccl *nccl;
    int64_t nccl_n;
    struct hx_dp_overlap *dp_overlap; /* their sums during the backward (dp_overlap.c) */
    /* this rank among comm's ranks that may run on the same cores (the same
     * host and affinity mask: dp_check.c); 0 of 1 without comm */
    int local_rank, local_size;
    /* ZeRO (cfg.zero_stage >= 1, zero.c), per tensor id: the rank that
     * owns an update node and its sources but the gradient (-1: none),
     * the updates this rank leaves out (engine.update_skip), the sharded
     * tensors (kept only by their owner); their bytes here and on all
     * ranks together */
    int *zero_owner;
    bool *zero_skip, *zero_sharded;
    bool *zero_remote; /* sharded and another rank's (engine.remote) */
    size_t zero_owned_bytes, zero_sharded_bytes;
    /* this training run has passed its last collective on this rank (its
     * ranks then agree whether to keep it: offload_param=disk) */
    bool step_synced;
    /* ZeRO: per tensor id, for what the ranks read of a parameter (its
     * replica), its update's dp_index (-1: none); stage 3's gathers
     * (zero3.c) */
    int *zero_key;
    struct hx_zero3 *zero3;
    hx_placement_report place_report; /* automatic placement (autoplace.c) */
    const hx_plan *timed_plan; /* the last training run whose units were timed (one of e.plans) */
    double *auto_cost; /* per tensor id: predicted seconds on the host, on the device */
    char auto_why[160]; /* why the planner kept one side ("": its mixed placement) */
};

/* The thread rule, enforced: the public calls that run or change the
 * session (or read what a run changes) run between these two. enter fails
 * with HX_ERR_STATE, naming fn, while another such call is in progress;
 * HX_ERR_INVALID_ARGUMENT for a NULL session; and finishes the last
 * training step's deferred all-gathers (hx__session_dp_settle: their
 * failure is fn's). */
hx_status hx__session_enter(hx_session *s, const char *fn);
void hx__session_leave(hx_session *s);

/* The graph's embedding tables with a device cache: their slots into an
 * emulated device's memory (creation; fails as the device's cap), and back
 * to host pages (free). session/emb_caches.c. */
hx_status hx__session_bind_caches(hx_session *s);
void hx__session_unbind_caches(hx_session *s);
/* data_parallel.c: the gradient chunks of cfg.comm (none without one);
 * nccl: after phase 0 of a training run of p, the gradients of the
 * updates on a CUDA device summed in place over NCCL (HX_ERR_UNSUPPORTED
 * when p does not update them all). */
hx_status hx__session_dp_setup(hx_session *s);
hx_status hx__session_dp_nccl(hx_session *s, const hx_plan *p);
bool hx__session_dp_on(const hx_session *s);
/* dp_overlap.c: a training run's sum of every dense gradient over the
 * ranks, started during its backward, and (stages 1, 2) the all-gather of
 * the updated parameters, started during the updates (see there). begin,
 * before phase 0 of a training run of p that updates: p's schedule (built
 * on its first run), the engine's watch (HX_ERR_UNSUPPORTED when p does
 * not update every dense gradient); after phase 0, grads (the rest
 * started, every sum waited for and written over the gradients). Then at
 * stages 1 and 2 share_begin before phase 1 and share_end after it (each
 * owner's parameters written over the others' copies). When a phase
 * fails, abort (the collectives in flight waited for and dropped) instead
 * of grads or share_end. grads and share_end add their time to
 * stats.comm_wait_s. create/free: with the chunks. At stages 1 and 2 with
 * the overlap, share_end leaves the all-gathers in flight, each finished
 * before the next forward's first reader of its parameters (the engine's
 * hx_param_gather) or at the end of its phase 0; settle finishes every
 * one left (before any call but a training run reads or changes the
 * session, and before free; their time in comm_wait_s), failing as fn
 * with the collective's error. */
typedef struct hx_dp_overlap hx_dp_overlap;
hx_status hx__session_dp_overlap_create(hx_session *s);
void hx__session_dp_overlap_free(hx_session *s);
hx_status hx__session_dp_begin(hx_session *s, const hx_plan *p);
hx_status hx__session_dp_grads(hx_session *s);
hx_status hx__session_dp_share_begin(hx_session *s, const hx_plan *p);
hx_status hx__session_dp_share_end(hx_session *s);
void hx__session_dp_abort(hx_session *s);
hx_status hx__session_dp_settle(hx_session *s, const char *fn);
/* Tests: 1, no reader waits for the deferred all-gathers and progress
 * finishes none (phase 0's end does), to show the checks catch it; 2,
 * progress finishes none (the readers must); 3, this rank starts none of
 * the all-gathers after the updates (as a rank stopped there would). */
extern int hx__dp_defer_test;
/* Tests: the last training run's events of phase `phase` in order: 'D'
 * host step v of the phase has run, 'R' unit v (its place in the start
 * order) is ready (every step of this rank writing what it sends has
 * run), 'S' unit v starts, 'F' unit v's collective was seen complete
 * during the phase (its group buffer free again; an all-gather's values
 * written), 'W' after the phase's host steps the thread sleeps until
 * the streams pass step v (a writer), 'G' (phase 0) the last step's
 * all-gather of chunk group v (flat: the f32 groups, then the bf16 ones)
 * finished, its values written, 'E' the phase is over (the units
 * started after it wait for the step); at most 4096 of them. */
typedef struct hx_dp_event {
    char kind;
    int v;
} hx_dp_event;
const hx_dp_event *hx__session_dp_log(const hx_session *s, int phase, int *n);
size_t hx__session_dp_chunk_bytes(const hx_session *s); /* all groups' chunks */
/* dp_check.c: the ranks run the same graph, seed, chunk size and ZeRO stage, else
 * HX_ERR_INVALID_ARGUMENT on every rank naming the first difference. */
hx_status hx__session_dp_check(hx_session *s);

/* zero.c: ZeRO stages 1-3 on top of data_parallel.c's chunks. setup
 * (after the chunks, before any storage) assigns the updates to their
 * owners and marks what this rank does not own (engine.remote: the disk
 * tier leaves it out); refuses the delayed update and (stage 3) a replica
 * on the accelerator (HX_ERR_UNSUPPORTED). shard (once the persistent
 * tensors are set, half copies from their masters) frees the storage of
 * what this rank does not own (stage 3: also the replicas, zero3.c
 * gathers them). */
hx_status hx__session_zero_setup(hx_session *s);
hx_status hx__session_zero_shard(hx_session *s);
void hx__session_zero_free(hx_session *s);
/* Stage 2: the gradient norm's sum of squares and the first update whose
 * gradient is not finite, from the owners' scan sums of p (plan order). */
hx_status hx__session_zero_norm(hx_session *s, const hx_plan *p, const hx_tensor **bad, double *sumsq);
/* Per gradient of dtype group grp (its order there), what every rank
 * reads of its parameter (hx__zero_replica): that tensor's storage and
 * bytes, what the owners send to every rank after the updates
 * (dp_overlap.c). */
void hx__session_zero_replicas(const hx_session *s, int grp, void **vals, size_t *bytes);
/* HX_OK unless t is sharded and (write) cannot be written, or (read) is
 * held by another rank: then the error, naming fn and the owner. */
hx_status hx__session_zero_access(const hx_session *s, const char *fn, const hx_tensor *t, bool write);
/* What every rank reads of update u's parameter after the update: its
 * half copy, else the parameter itself. */
static inline const hx_tensor *hx__zero_replica(const hx_tensor *u)
{
    return u->attr.i[0] > 0 ? u->src[u->attr.i[0]] : u->src[0];
}
/* ZeRO: the replicas (zero_key >= 0) step sp reads, their tensor ids into
 * ids and input slots into js; returns how many (-1: more than max). A
 * copy reads its source; a kernel its inputs, on the host only when
 * host_only (stage 3: what a device kernel reads is a copy's). */
int hx__zero_replica_reads(const hx_session *s, const hx_step *sp, bool host_only, int *ids, int *js,
                           int max);
/* The zero_* fields of hx_memory_stats. */
void hx__session_zero_stats(const hx_session *s, hx_memory_stats *out);

/* zero3.c: stage 3's gathers (see there), after zero.c has set the owners
 * and zero_key: create makes them the engine's hx_gather; begin readies
 * plan p's schedule (built on its first run: HX_ERR_UNSUPPORTED if its
 * update phase reads a replica this rank does not hold) before phase 0,
 * end waits for every gather and frees every buffer after it (the run's
 * first gather failure). No-ops below stage 3. */
typedef struct hx_zero3 hx_zero3;
hx_status hx__session_zero3_create(hx_session *s);
void hx__session_zero3_free(hx_session *s);
hx_status hx__session_zero3_begin(hx_session *s, const hx_plan *p);
hx_status hx__session_zero3_end(hx_session *s);
/* The schedules of every plan built so far (the predictions below). */
hx_status hx__session_zero3_plans(hx_session *s);
/* The most bytes gathered at once so far, and the most a plan's schedule
 * predicts (steps in plan order); 0 below stage 3. */
void hx__session_zero3_stats(const hx_session *s, size_t *peak, size_t *planned);
/* Tests: 1 leaves out the first window's gather (its readers then read
 * only this rank's block), to show the comparisons catch it. */
extern int hx__zero3_test_break;

/* checkpoint.c: checkpoint files (the format there). hx__ckpt_write writes
 * the saved tensors keep selects (per tensor id; NULL: all of them) and the
 * counters to path, a staged file. Loading: hx__ckpt_in_init for n_files
 * files; hx__ckpt_in_file checks file k (its checksum, counters, every
 * entry against the graph; shard: a part of the tensors, counters equal to
 * the earlier files') into in: where each tensor is; hx__ckpt_in_check: every
 * tensor this rank holds (hx__ckpt_holds: saved, and at ZeRO not another
 * rank's shard) was found; hx__ckpt_in_apply puts them and the counters in
 * the session. Each fails with HX_ERR_CORRUPT naming the file (or the
 * tensor none holds), HX_ERR_IO, HX_ERR_OUT_OF_MEMORY; only apply changes
 * the session. hx__ckpt_in_free closes the files (also after a failed init). */
typedef struct hx_ckpt_in {
    int n_files;
    FILE **f;
    char **path;
    int64_t *off;  /* per tensor id: its bytes' place in its file (-1: in no file read) */
    uint64_t *sum; /* per tensor id: their XXH3-64 */
    int *file;     /* per tensor id: the file */
    bool have_head;
    uint64_t step, skipped, good;
    double scale;
    char *piece;
    struct XXH3_state_s *h;
} hx_ckpt_in;
bool hx__ckpt_saved(const hx_tensor *t); /* a parameter or optimizer state */
hx_status hx__ckpt_write(hx_session *s, const char *path, const bool *keep);
hx_status hx__ckpt_in_init(hx_ckpt_in *in, const hx_session *s, int n_files);
hx_status hx__ckpt_in_file(hx_ckpt_in *in, const hx_session *s, int k, const char *path, bool shard);
bool hx__ckpt_holds(const hx_session *s, int id);
hx_status hx__ckpt_in_check(const hx_ckpt_in *in, const hx_session *s);
hx_status hx__ckpt_in_apply(hx_ckpt_in *in, hx_session *s);
void hx__ckpt_in_free(hx_ckpt_in *in);
/* checkpoint_set.c: the sharded checkpoints of a ZeRO session. save_set
 * (collective over the session's communicator) writes each rank's shard
 * and the manifest at path; is_set: path begins like such a manifest;
 * load_set loads one at any rank count, into any session of the graph.
 * zero_agree (collective; also session creation and training runs with
 * the disk tier: session.c): own (this rank's status) on a ZeRO session's
 * every rank: the first failure fails them all (own's error, or one
 * naming the rank that failed); other sessions: own. */
hx_status hx__ckpt_save_set(hx_session *s, const char *path);
bool hx__ckpt_is_set(const char *path);
hx_status hx__ckpt_load_set(hx_session *s, const char *path);
hx_status hx__zero_agree(hx_session *s, const char *fn, hx_status own);

/* report.c: HX_DEBUG=placement lines: placement, and each lowered device
 * node (or why a convolution on the device is not lowered; has_kernel asks
 * the backends as the lowering did). */
void hx__debug_placement(const hx_session *s);
void hx__debug_lowering(const hx_session *s, hx_has_kernel_fn has_kernel);

/* A mixed placement is kept only when it predicts a step this much shorter
 * than the better single side (the model leaves out per-unit overhead). */
#define HX_AUTO_MIXED_MARGIN 0.10
/* autoplace.c: decides the nodes the first hx__place left AUTO (the
 * session's target and why) into decided[] (per tensor id), filling
 * s->place_report and s->auto_cost. */
hx_status hx__autoplace(hx_session *s, const hx_place_opts *o, hx_target *decided);
/* Its summary line (HX_DEBUG=placement), and a training run's measured step. */
void hx__autoplace_debug(const hx_session *s);
void hx__autoplace_record_step(hx_session *s, double seconds);
/* Whether the next training run's units are timed (AUTO nodes, fewer than
 * HX_PLACEMENT_TIMED_RUNS training runs so far). */
bool hx__autoplace_timing(const hx_session *s);
/* placement_units.c: the per-unit report (HX_DEBUG=placement), printed once
 * the timed runs are done, or at hx_session_free if fewer ran. */
void hx__placement_units_debug(const hx_session *s);

/* op_costs.c: the op cost cache file (see there). FNV-1a of n bytes onto h. */
uint64_t hx__hash(uint64_t h, const void *p, size_t n);
typedef struct hx_op_costs hx_op_costs;
/* path NULL: $HX_PLACEMENT_CACHE, else $HOME/.cache/hetex/op_costs; "": none.
 * An unreadable or invalid file is ignored. Fails only out of memory. */
hx_status hx__op_costs_open(const char *path, uint64_t machine, hx_op_costs **out);
/* The seconds cached for sig on this machine; *from_file: read from the file. */
bool hx__op_costs_get(const hx_op_costs *c, uint64_t sig, double *seconds, bool *from_file);
hx_status hx__op_costs_put(hx_op_costs *c, uint64_t sig, double seconds, const char *what);
/* Writes the file if anything was added (HX_ERR_IO when it cannot). */
hx_status hx__op_costs_save(hx_op_costs *c);
void hx__op_costs_free(hx_op_costs *c);

#endif
