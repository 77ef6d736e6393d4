/* Communicators over Open MPI: MPI started on the first hx_comm_create
 * where nobody started it, finalised with the last hx_comm_free; each
 * communicator is hetex's own duplicate with MPI_ERRORS_RETURN. */
#ifdef HX_HAVE_MPI
#include "dist/comm_state.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* Process-wide: MPI is one per process, so whether hetex started it and
 * how many communicators use it are too. Guarded by mpi_mutex. */
static pthread_mutex_t mpi_mutex = PTHREAD_MUTEX_INITIALIZER;
static bool we_initialised;
static int live_comms;

void hx__mpi_lock(void) { pthread_mutex_lock(&mpi_mutex); }
void hx__mpi_unlock(void) { pthread_mutex_unlock(&mpi_mutex); }

const char *hx__mpi_error_text(int err, char *buf, int len)
{
    int n = 0;
    if (MPI_Error_string(err, buf, &n) != MPI_SUCCESS || n <= 0) snprintf(buf, (size_t)len, "MPI error %d", err);
    return buf;
}

hx_comm_config hx_comm_config_default(void)
{
    hx_comm_config c = {.mpi_comm = NULL, .timeout_s = 300.0};
    return c;
}

/* MPI running, started here if nobody has (mpi_mutex held). */
static hx_status start_mpi(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return hx__error(HX_ERR_STATE, "hx_comm_create: MPI was finalized in this process (by hetex "
                         "when its last communicator was freed, or by the program) and cannot start "
                         "again: create every communicator before freeing the last one");
    if (inited) return HX_OK;
    int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
        char buf[MPI_MAX_ERROR_STRING];
        return hx__error(HX_ERR_COMM, "hx_comm_create: MPI_Init_thread failed: %s (run the program "
                         "under mpirun, or alone for one rank)", hx__mpi_error_text(rc, buf, sizeof buf));
    }
    we_initialised = true;
    /* MPI is hetex's: its world's errors come back too */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return HX_OK;
}

/* Whether the ranks of comm on this host are no more than its cores
 * (mpi_mutex held; collective over comm). */
static bool own_cores(MPI_Comm comm)
{
    MPI_Comm local;
    int here = 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) != MPI_SUCCESS) return false;
    if (MPI_Comm_size(local, &here) != MPI_SUCCESS) here = 0;
    MPI_Comm_free(&local);
    return here > 0 && here <= cores;
}

static void stop_mpi_if_ours(void)
{
    if (live_comms == 0 && we_initialised) {
        MPI_Finalize();
        we_initialised = false;
    }
}

hx_status hx_comm_create(const hx_comm_config *cfg, hx_comm **out)
{
    if (out) *out = NULL;
    hx_comm_config c = cfg ? *cfg : hx_comm_config_default();
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_comm_create: out is NULL");
    if (!isfinite(c.timeout_s) || c.timeout_s <= 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_comm_create: timeout_s %g: give the seconds a "
                         "collective may wait, > 0 (default 300)", c.timeout_s);
    hx_comm *m = calloc(1, sizeof *m);
    if (!m) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_comm_create: out of host memory");
    hx__mpi_lock();
    hx_status st = start_mpi();
    if (st == HX_OK) {
        MPI_Comm base = c.mpi_comm ? *(const MPI_Comm *)c.mpi_comm : MPI_COMM_WORLD;
        int rc = MPI_Comm_dup(base, &m->comm);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &m->rank);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->comm, &m->size);
        if (rc == MPI_SUCCESS) m->own_cores = own_cores(m->comm);
        if (rc != MPI_SUCCESS) {
            char buf[MPI_MAX_ERROR_STRING];
            st = hx__error(HX_ERR_COMM, "hx_comm_create: duplicating the %s communicator failed: %s",
                           c.mpi_comm ? "caller's" : "world", hx__mpi_error_text(rc, buf, sizeof buf));
            if (m->comm != MPI_COMM_NULL && m->comm) MPI_Comm_free(&m->comm);
        }
    }
    if (st == HX_OK) live_comms++;
    else stop_mpi_if_ours();
    hx__mpi_unlock();
    if (st != HX_OK) {
        free(m);
        return st;
    }
    m->timeout_s = c.timeout_s;
    m->max_msg = (int64_t)1 << 28;
    *out = m;
    return HX_OK;
}

void hx_comm_free(hx_comm *c)
{
    if (!c) return;
    hx__mpi_lock();
    /* a broken communicator keeps its MPI_Comm: messages it gave up on may
     * still be in flight on it */
    if (!c->broken) MPI_Comm_free(&c->comm);
    live_comms--;
    bool ours = we_initialised;
    stop_mpi_if_ours();
    hx__mpi_unlock();
    /* buffers a late message could still land in: only once MPI is down */
    if (!c->broken || ours) {
        for (int i = 0; i < c->n_quarantine; i++) free(c->quarantine[i]);
        free(c->quarantine);
    }
    free(c);
}

int hx_comm_rank(const hx_comm *c) { return c ? c->rank : -1; }
int hx_comm_size(const hx_comm *c) { return c ? c->size : -1; }
bool hx__comm_own_cores(const hx_comm *c) { return c->own_cores; }
uint64_t hx_comm_bytes_sent(const hx_comm *c) { return c ? c->bytes_sent : 0; }

void hx__comm_set_max_message(hx_comm *c, int64_t elems) { c->max_msg = elems > 0 ? elems : 1; }
uint64_t hx__comm_bytes_sent(const hx_comm *c) { return c->bytes_sent; }
#endif
