/* A build without MPI (CMake found none): communicators cannot be made,
 * and every call says how to get a build that has them. */
#ifndef HX_HAVE_MPI
#include "dist/dist.h"

#define NO_MPI "this hetex was built without MPI: install Open MPI (apt-get install openmpi-bin " \
               "libopenmpi-dev) and build again (./build.sh; CMake finds it)"

hx_comm_config hx_comm_config_default(void)
{
    hx_comm_config c = {.mpi_comm = NULL, .timeout_s = 300.0};
    return c;
}

hx_status hx_comm_create(const hx_comm_config *cfg, hx_comm **out)
{
    if (out) *out = NULL;
    return hx__error(HX_ERR_UNSUPPORTED, "hx_comm_create: %s", NO_MPI);
}

/* No hx_comm exists in this build: the calls below never get one. */
void hx_comm_free(hx_comm *c) { (void)c; }
int hx_comm_rank(const hx_comm *c) { return -1; }
int hx_comm_size(const hx_comm *c) { return -1; }
uint64_t hx_comm_bytes_sent(const hx_comm *c) { return 0; }

static hx_status no_mpi(const char *what) { return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: %s: %s", what, NO_MPI); }

hx_status hx__comm_all_reduce(hx_comm *c, const void *send, void *recv, int64_t count, hx_dtype dt,
                              hx_coll **out) { return no_mpi("all_reduce"); }
hx_status hx__comm_reduce_scatter(hx_comm *c, const void *send, void *recv, int64_t count,
                                  hx_dtype dt, hx_coll **out) { return no_mpi("reduce_scatter"); }
hx_status hx__comm_all_gather(hx_comm *c, const void *send, void *recv, int64_t count, hx_dtype dt,
                              hx_coll **out) { return no_mpi("all_gather"); }
hx_status hx__comm_reduce_scatter_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                    hx_dtype dt, hx_coll **out) { return no_mpi("reduce_scatter"); }
hx_status hx__comm_all_gather_v(hx_comm *c, const void *send, void *recv, const int64_t *counts,
                                hx_dtype dt, hx_coll **out) { return no_mpi("all_gather"); }
hx_status hx__comm_all_gather_segments(hx_comm *c, void *const *seg, const int64_t *seg_bytes,
                                       const int64_t *seg_lo, hx_coll **out) { return no_mpi("all_gather"); }
hx_status hx__comm_all_to_all_v(hx_comm *c, const void *send, const int64_t *send_counts,
                                const int64_t *send_displs, void *recv,
                                const int64_t *recv_counts, const int64_t *recv_displs,
                                hx_dtype dt, hx_coll **out) { return no_mpi("all_to_all_v"); }
hx_status hx__comm_broadcast(hx_comm *c, void *buf, int64_t count, hx_dtype dt, int root,
                             hx_coll **out) { return no_mpi("broadcast"); }
hx_status hx__coll_test(hx_coll *q, bool *done)
{
    *done = false;
    return no_mpi("test");
}
hx_status hx__coll_wait(hx_coll *q) { return q ? no_mpi("wait") : HX_OK; }
void hx__comm_set_max_message(hx_comm *c, int64_t elems) { (void)c; }
bool hx__comm_own_cores(const hx_comm *c) { (void)c; return false; }
uint64_t hx__comm_bytes_sent(const hx_comm *c) { return 0; }
#endif
