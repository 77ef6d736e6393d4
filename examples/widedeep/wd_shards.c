/* hetex widedeep --shards N under mpirun -np N: both tables sharded
 * row-wise over the ranks (collective mode) and the MLP data parallel.
 * Every rank reads every batch of the global batch and feeds its slice of
 * it; evaluation runs every slice on every rank (the tables' lookups are
 * collective), so every rank scores the whole test file alike and rank 0
 * prints and writes the records (--curve, --metrics, --tensorboard,
 * --trace). */
#include "wd.h"

#include <stdio.h>

hx_status wd_shards_start(wd_options *o, int *rank, char *msg, size_t len)
{
    *rank = 0;
    if (!o->shards) return HX_OK;
    if (o->batch % o->shards || o->save || o->resume || o->deep_on_disk) {
        snprintf(msg, len, "--shards %d: %s", o->shards,
                 o->batch % o->shards ? "--batch (the global batch) must be a multiple of it"
                                      : "--save, --resume and --deep-table-on-disk are not "
                                        "built for sharded tables yet");
        return HX_ERR_INVALID_ARGUMENT;
    }
    hx_status st = hx_comm_create(NULL, &o->comm);
    if (st) return st;
    *rank = hx_comm_rank(o->comm);
    if (hx_comm_size(o->comm) != o->shards) {
        snprintf(msg, len, "--shards %d, but %d ranks run: start it as mpirun -np %d hetex widedeep "
                 "--shards %d", o->shards, hx_comm_size(o->comm), o->shards, o->shards);
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (*rank == 0) return HX_OK;
    /* rank 0 prints and writes the run's records */
    o->curve = o->metrics = o->tensorboard = o->trace = NULL;
    if (!freopen("/dev/null", "w", stdout)) {
        snprintf(msg, len, "rank %d cannot quieten its output", *rank);
        return HX_ERR_IO;
    }
    return HX_OK;
}

void wd_shards_stop(wd_options *o)
{
    hx_comm_free(o->comm);
    o->comm = NULL;
}

void wd_feeds_slice(const wd_model *m, const wd_feed *fd, int64_t batch, int slice,
                    const wd_features *wf, hx_feed feeds[WD_N_FEEDS])
{
    wd_feeds(m, fd, batch, wf, feeds);
    int64_t first = batch * slice; /* the slice's first row; offsets start at 0 in every slice */
    feeds[0].data = fd->dense + first * wf->shape.dense_dim;
    feeds[1].data = fd->deep_ids + first * wf->n_deep;
    feeds[2].data = fd->wide_ids + first * wf->shape.n_wide;
    feeds[4].data = fd->labels + first;
}
