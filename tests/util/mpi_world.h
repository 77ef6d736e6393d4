/* The MPI tests' communicator over all of mpirun's ranks: opened with a
 * collective timeout (a hang fails instead of waiting for ever), and, for
 * the tests whose transports a script compares, closed with the
 * "hx-digest rank R of N: HASH" line (tests/mpi/same_over_tcp.sh). */
#ifndef HX_TEST_MPI_WORLD_H
#define HX_TEST_MPI_WORLD_H

#include "hetex.h"

#include <stdint.h>
#include <stdio.h>

/* The communicator and this rank and size; NULL (the reason on stderr)
 * when it cannot be made. */
static inline hx_comm *mpi_world_open(double timeout_s, int *rank, int *size)
{
    hx_comm_config cfg = hx_comm_config_default();
    cfg.timeout_s = timeout_s;
    hx_comm *c = NULL;
    if (hx_comm_create(&cfg, &c) != HX_OK) {
        fprintf(stderr, "hx_comm_create: %s\n", hx_last_error());
        return NULL;
    }
    *rank = hx_comm_rank(c);
    *size = hx_comm_size(c);
    return c;
}

/* Prints the rank's digest of every result, then frees the communicator. */
static inline void mpi_world_close_with_digest(hx_comm *c, int rank, int size, uint64_t digest)
{
    printf("hx-digest rank %d of %d: %016llx\n", rank, size, (unsigned long long)digest);
    fflush(stdout);
    hx_comm_free(c);
}

#endif
