/* NCCL between GPU ranks: a clique over an hx_comm's ranks, bootstrapped
 * by broadcasting rank 0's unique id over the communicator (MPI). Built
 * with the CUDA backend where nccl.h is found (HX_HAVE_NCCL); NCCL sums in
 * its own order (rings, trees), not the rank order of the MPI collectives. */
#include "dist/dist.h"

#ifdef HX_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdlib.h>

struct hx_nccl {
    ncclComm_t comm;
    int rank, size, device;
};

static bool nccl_type(hx_dtype dt, ncclDataType_t *t)
{
    switch (dt) {
    case HX_DTYPE_F32: *t = ncclFloat32; return true;
    case HX_DTYPE_F16: *t = ncclFloat16; return true;
    case HX_DTYPE_BF16: *t = ncclBfloat16; return true;
    case HX_DTYPE_I32: *t = ncclInt32; return true;
    case HX_DTYPE_I64: *t = ncclInt64; return true;
    }
    return false;
}

static hx_status nccl_fail(const hx_nccl *n, const char *what, ncclResult_t r)
{
    return hx__error(HX_ERR_COMM, "hetex dist: NCCL %s on rank %d of %d (GPU %d): %s (%s)", what,
                     n->rank, n->size, n->device, ncclGetErrorString(r),
                     n->comm ? ncclGetLastError(n->comm) : "no communicator yet");
}

hx_status hx__nccl_create(hx_comm *c, int cuda_device, hx_nccl **out)
{
    if (!c || !out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: nccl_create: NULL argument");
    *out = NULL;
    hx_nccl *n = calloc(1, sizeof *n);
    if (!n) return hx__error(HX_ERR_OUT_OF_MEMORY, "hetex dist: nccl_create: out of host memory");
    n->rank = hx_comm_rank(c);
    n->size = hx_comm_size(c);
    n->device = cuda_device;
    cudaError_t ce = cudaSetDevice(cuda_device);
    if (ce != cudaSuccess) {
        free(n);
        return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: nccl_create on rank %d: cudaSetDevice(%d): %s",
                         hx_comm_rank(c), cuda_device, cudaGetErrorString(ce));
    }
    /* rank 0's id and whether it got one: the others wait for both */
    struct { ncclUniqueId id; int64_t ok; } msg = {.ok = 0};
    _Static_assert(sizeof msg % sizeof(int64_t) == 0, "the id travels as int64s");
    ncclResult_t r = ncclSuccess;
    if (n->rank == 0) msg.ok = (r = ncclGetUniqueId(&msg.id)) == ncclSuccess;
    hx_coll *q;
    hx_status st = hx__comm_broadcast(c, &msg, (int64_t)(sizeof msg / sizeof(int64_t)), HX_DTYPE_I64, 0, &q);
    if (st == HX_OK) st = hx__coll_wait(q);
    if (st == HX_OK && !msg.ok)
        st = n->rank == 0 ? nccl_fail(n, "ncclGetUniqueId", r)
                          : hx__error(HX_ERR_COMM, "hetex dist: NCCL on rank %d: rank 0 could not make "
                                      "the clique's id (its error says why)", n->rank);
    if (st == HX_OK && (r = ncclCommInitRank(&n->comm, n->size, msg.id, n->rank)) != ncclSuccess)
        st = nccl_fail(n, "ncclCommInitRank", r);
    if (st != HX_OK) {
        free(n);
        return st;
    }
    *out = n;
    return HX_OK;
}

void hx__nccl_free(hx_nccl *n)
{
    if (!n) return;
    ncclCommDestroy(n->comm);
    free(n);
}

/* Checks the call's arguments: buf, count and dtype. */
static hx_status check(const hx_nccl *n, const char *what, const void *buf, int64_t count, hx_dtype dt,
                       ncclDataType_t *t)
{
    if (!n) return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: NCCL %s: NULL clique", what);
    if (!nccl_type(dt, t)) return hx__error(HX_ERR_DTYPE, "hetex dist: NCCL %s: invalid dtype %d", what, (int)dt);
    if (count < 0 || (count > 0 && !buf))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: NCCL %s on rank %d: count %lld, buffer %p",
                         what, n->rank, (long long)count, buf);
    return HX_OK;
}

hx_status hx__nccl_all_reduce(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream)
{
    ncclDataType_t t = ncclFloat32;
    hx_status st = check(n, "all_reduce", buf, count, dt, &t);
    if (st != HX_OK) return st;
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)count, t, ncclSum, n->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? HX_OK : nccl_fail(n, "all_reduce", r);
}

hx_status hx__nccl_reduce_scatter(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream)
{
    ncclDataType_t t = ncclFloat32;
    hx_status st = check(n, "reduce_scatter", buf, count, dt, &t);
    if (st != HX_OK) return st;
    char *mine = (char *)buf + (size_t)n->rank * (size_t)count * hx_dtype_size(dt);
    ncclResult_t r = ncclReduceScatter(buf, mine, (size_t)count, t, ncclSum, n->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? HX_OK : nccl_fail(n, "reduce_scatter", r);
}

hx_status hx__nccl_all_gather(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream)
{
    ncclDataType_t t = ncclFloat32;
    hx_status st = check(n, "all_gather", buf, count, dt, &t);
    if (st != HX_OK) return st;
    char *mine = (char *)buf + (size_t)n->rank * (size_t)count * hx_dtype_size(dt);
    ncclResult_t r = ncclAllGather(mine, buf, (size_t)count, t, n->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? HX_OK : nccl_fail(n, "all_gather", r);
}

hx_status hx__nccl_sync(hx_nccl *n, void *stream)
{
    if (!n) return hx__error(HX_ERR_INVALID_ARGUMENT, "hetex dist: NCCL sync: NULL clique");
    cudaError_t ce = cudaStreamSynchronize((cudaStream_t)stream);
    ncclResult_t async = ncclSuccess, r = ncclCommGetAsyncError(n->comm, &async);
    if (r != ncclSuccess) return nccl_fail(n, "ncclCommGetAsyncError", r);
    if (async != ncclSuccess) return nccl_fail(n, "(asynchronous error)", async);
    if (ce != cudaSuccess)
        return hx__error(HX_ERR_COMM, "hetex dist: NCCL sync on rank %d: cudaStreamSynchronize: %s",
                         n->rank, cudaGetErrorString(ce));
    return HX_OK;
}
#else
static hx_status no_nccl(void)
{
    return hx__error(HX_ERR_UNSUPPORTED, "hetex dist: this hetex was built without NCCL: it needs "
                     "the CUDA backend, MPI and nccl.h (the CUDA toolkit's or libnccl-dev) at build time");
}
hx_status hx__nccl_create(hx_comm *c, int cuda_device, hx_nccl **out)
{
    if (out) *out = NULL;
    return no_nccl();
}
/* No hx_nccl exists in this build: the calls below never get one. */
void hx__nccl_free(hx_nccl *n) { (void)n; }
hx_status hx__nccl_all_reduce(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream) { return no_nccl(); }
hx_status hx__nccl_reduce_scatter(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream) { return no_nccl(); }
hx_status hx__nccl_all_gather(hx_nccl *n, void *buf, int64_t count, hx_dtype dt, void *stream) { return no_nccl(); }
hx_status hx__nccl_sync(hx_nccl *n, void *stream) { return no_nccl(); }
#endif
