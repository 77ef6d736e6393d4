/* The communicator's state (struct hx_comm), private to dist/: it holds
 * MPI types, and only dist/'s files include mpi.h. */
#ifndef HX_DIST_COMM_STATE_H
#define HX_DIST_COMM_STATE_H

#include "dist/dist.h"

#include <mpi.h>

struct hx_comm {
    MPI_Comm comm;       /* hetex's duplicate, MPI_ERRORS_RETURN */
    int rank, size;
    double timeout_s;
    uint64_t seq;        /* collectives started: the tag of the next one */
    int64_t max_msg;     /* elements per message piece */
    bool own_cores;      /* its ranks on this host have a core each (comm.c) */
    uint64_t bytes_sent; /* to other ranks */
    bool broken;         /* a collective failed: no more, and no MPI_Comm_free */
    void **quarantine;   /* buffers a broken collective may still be written to */
    int n_quarantine;
};

/* The process-wide lock around every MPI call hetex makes. */
void hx__mpi_lock(void);
void hx__mpi_unlock(void);

/* MPI's text for err ("MPI error N" where it has none). */
const char *hx__mpi_error_text(int err, char *buf, int len);

#endif
