/* hx__comm_dup: a communicator of its own for a part of hetex whose
 * collectives must not interleave with another's (a sharded table's
 * exchanges run on the thread of its op, beside the session's). */
#ifdef HX_HAVE_MPI
#include "dist/comm_state.h"

hx_status hx__comm_dup(const hx_comm *c, hx_comm **out)
{
    hx_comm_config cfg = {.mpi_comm = &c->comm, .timeout_s = c->timeout_s};
    return hx_comm_create(&cfg, out);
}
#else
#include "dist/dist.h"

hx_status hx__comm_dup(const hx_comm *c, hx_comm **out)
{
    (void)c;
    *out = NULL;
    return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: this hetex was built without MPI: install Open MPI "
                     "(apt-get install openmpi-bin libopenmpi-dev) and build again");
}
#endif
