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
    const hx_plan *last_plan; /* the last run's, one of e.plans */
    hx_train_stats stats;
    int good_steps;  /* in a row, for loss-scale growth */
    double lr_scale; /* hx_session_set_lr_scale */
    atomic_bool in_use; /* a call that runs or changes the session is in progress */
    hx_cuda_choice cuda; /* what the cuda backend found (hx_session_accelerator_info) */
    /* data parallel (cfg.comm): the gradient chunks, and each tensor's
     * gradient number in them (-1: none), dp_n gradients */
    struct hx_dp *dp;
    int *dp_index;
    int64_t dp_n;
};

/* The thread rule, enforced: the public calls that run or change the
 * session (or read what a run changes) run between these two. enter fails
 * with HX_ERR_STATE, naming fn, while another such call is in progress;
 * HX_ERR_INVALID_ARGUMENT for a NULL session. */
hx_status hx__session_enter(hx_session *s, const char *fn);
void hx__session_leave(hx_session *s);

/* data_parallel.c: the gradient chunks of cfg.comm (none without one),
 * and a training run's sum of every dense gradient over the ranks. */
hx_status hx__session_dp_setup(hx_session *s);
hx_status hx__session_dp_grads(hx_session *s, const hx_plan *p);

/* report.c: HX_DEBUG=placement lines. */
void hx__debug_placement(const hx_session *s);

#endif
