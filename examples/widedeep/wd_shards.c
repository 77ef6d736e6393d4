/* hetex widedeep --shards N under mpirun -np N: both tables sharded
 * row-wise over the ranks (collective mode) and the MLP data parallel;
 * --servers S: server mode, the last S ranks hold the tables (hx_ps) and
 * the others train, the MLP data parallel among them.
 * Every rank reads every batch of the global batch and feeds its slice of
 * it; evaluation runs every slice on every rank (the tables' lookups are
 * collective), so every rank scores the whole test file alike and rank 0
 * prints and writes the records (--curve, --metrics, --tensorboard,
 * --trace). */
#include "wd.h"

#include <stdio.h>

int wd_slices(const wd_options *o)
{
    return o->shards ? o->shards : o->ps ? hx_comm_size(o->comm) - o->servers : 1;
}

/* --servers S: the roles over the world (the last S ranks serve). */
static hx_status start_servers(wd_options *o, int *rank, char *msg, size_t len)
{
    int N = hx_comm_size(o->comm);
    if (N <= o->servers) {
        snprintf(msg, len, "--servers %d, but %d ranks run: start it as mpirun -np N hetex widedeep "
                 "--servers %d with N > %d (N - %d workers)", o->servers, N, o->servers, o->servers,
                 o->servers);
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (o->batch % (N - o->servers)) {
        snprintf(msg, len, "--servers %d of %d ranks: --batch (the global batch) must be a multiple of "
                 "the %d workers", o->servers, N, N - o->servers);
        return HX_ERR_INVALID_ARGUMENT;
    }
    hx_ps_config pc = hx_ps_config_default();
    pc.comm = o->comm;
    pc.servers = o->servers;
    pc.staleness = o->staleness;
    pc.rank_bytes = o->table_bytes;
    hx_status st = hx_ps_create(&pc, &o->ps);
    if (!st) *rank = hx_ps_index(o->ps);
    return st;
}

hx_status wd_shards_start(wd_options *o, int *rank, char *msg, size_t len)
{
    *rank = 0;
    int spread = o->shards ? o->shards : o->servers;
    const char *flag = o->shards ? "--shards" : "--servers";
    if (!spread) return HX_OK;
    if ((o->shards && o->batch % o->shards) || o->deep_on_disk) {
        snprintf(msg, len, "%s %d: %s", flag, spread,
                 o->shards && o->batch % o->shards ? "--batch (the global batch) must be a multiple of it"
                                                   : "--deep-table-on-disk is not built for sharded tables "
                                                     "yet");
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (!wd_ckpt_check(o)) {
        snprintf(msg, len, "--save: said above");
        return HX_ERR_INVALID_ARGUMENT;
    }
    hx_status st = hx_comm_create(NULL, &o->comm);
    if (st) return st;
    int world = hx_comm_rank(o->comm);
    *rank = world;
    if (o->shards && hx_comm_size(o->comm) != o->shards) {
        snprintf(msg, len, "--shards %d, but %d ranks run: start it as mpirun -np %d hetex widedeep "
                 "--shards %d", o->shards, hx_comm_size(o->comm), o->shards, o->shards);
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (o->servers && (st = start_servers(o, rank, msg, len))) return st;
    if (world == 0 || (o->ps && hx_ps_is_server(o->ps))) return HX_OK;
    /* rank 0 prints and writes the run's records; servers say what they serve */
    o->curve = o->metrics = o->tensorboard = o->trace = NULL;
    if (!freopen("/dev/null", "w", stdout)) {
        snprintf(msg, len, "rank %d cannot quieten its output", world);
        return HX_ERR_IO;
    }
    return HX_OK;
}

void wd_shards_stop(wd_options *o)
{
    /* a worker is done (its tables were freed before) */
    if (o->ps && !hx_ps_is_server(o->ps) && hx_ps_finish(o->ps))
        fprintf(stderr, "hetex widedeep: %s\n", hx_last_error());
    hx_ps_free(o->ps);
    o->ps = NULL;
    hx_comm_free(o->comm);
    o->comm = NULL;
}

int wd_serve(wd_options *o)
{
    hx_ps_stats st;
    int rank = hx_comm_rank(o->comm);
    if (hx_ps_stats_get(o->ps, &st)) return 1;
    printf("hetex widedeep: rank %d is server %d of %d: it holds %lld rows of the deep and wide tables "
           "(%.1f MiB with their optimizer state", rank, hx_ps_index(o->ps), o->servers,
           (long long)st.rows_held, (double)st.bytes_held / (1 << 20));
    if (o->table_bytes) printf(": %zu bytes, under the cap of %zu bytes a rank", st.bytes_held, o->table_bytes);
    printf(")\n");
    fflush(stdout);
    hx_status rc = hx_ps_serve(o->ps);
    hx_ps_stats_get(o->ps, &st);
    printf("hetex widedeep: server %d: %lld steps applied (both tables), %lld pulls answered, %lld pushes "
           "taken, %.1f MiB of rows sent; the most steps a pull ran ahead of the applied pushes: %lld\n",
           hx_ps_index(o->ps), (long long)st.steps, (long long)st.pulls, (long long)st.pushes,
           (double)st.pull_bytes / (1 << 20), (long long)st.max_staleness);
    if (rc) fprintf(stderr, "hetex widedeep: server %d: %s\n", hx_ps_index(o->ps), hx_last_error());
    return rc ? 1 : 0;
}

void wd_worker_stats(const wd_options *o)
{
    hx_ps_stats st;
    if (hx_ps_stats_get(o->ps, &st) || !st.steps) return;
    printf("server mode: worker 0 pulled %.1f KiB and pushed %.1f KiB a step (both tables, %lld steps, the "
           "evaluations' pulls counted in); "
           "its pulls ran at most %lld steps ahead of the applied pushes (bound %d); %.2f s waiting for "
           "the servers\n", (double)st.pull_bytes / 1024 / (double)st.steps,
           (double)st.push_bytes / 1024 / (double)st.steps, (long long)st.steps, (long long)st.max_staleness,
           o->staleness, st.wait_s);
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
