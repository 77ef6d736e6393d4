/* NCCL on one GPU rank (the one this project is lent): the clique is
 * bootstrapped over a one-rank communicator (MPI's singleton start), and
 * its all-reduce, in-place reduce-scatter and all-gather give back the
 * inputs; an asynchronous error check passes. More GPU ranks are not lent
 * here, so the multi-rank path never ran. Exits 77 without a device, or in
 * a build without NCCL. */
#include "dist/dist.h"
#include "gpu_testutil.h"

#include <cuda_runtime.h>

static void test_one_rank(void)
{
    hx_comm *c = NULL;
    if (hx_comm_create(NULL, &c) != HX_OK) {
        CHECK(false, "hx_comm_create: %s", hx_last_error());
        return;
    }
    hx_nccl *n = NULL;
    hx_status st = hx__nccl_create(c, 0, &n);
    if (st == HX_ERR_UNSUPPORTED) {
        test_skip(hx_last_error());
        hx_comm_free(c);
        return;
    }
    CHECK(st == HX_OK, "hx__nccl_create: %s", hx_last_error());
    enum { N = 1027 };
    float x[N], y[N];
    test_rng g = test_rng_make(9);
    test_fill_uniform(&g, x, N, -4, 4);
    float *d = NULL;
    GT_CUDA(cudaMalloc((void **)&d, sizeof x));
    GT_CUDA(cudaMemcpy(d, x, sizeof x, cudaMemcpyHostToDevice));
    CHECK(hx__nccl_all_reduce(n, d, N, HX_DTYPE_F32, NULL) == HX_OK, "%s", hx_last_error());
    CHECK(hx__nccl_reduce_scatter(n, d, N, HX_DTYPE_F32, NULL) == HX_OK, "%s", hx_last_error());
    CHECK(hx__nccl_all_gather(n, d, N, HX_DTYPE_F32, NULL) == HX_OK, "%s", hx_last_error());
    CHECK(hx__nccl_sync(n, NULL) == HX_OK, "%s", hx_last_error());
    GT_CUDA(cudaMemcpy(y, d, sizeof y, cudaMemcpyDeviceToHost));
    CHECK(!memcmp(x, y, sizeof x), "one rank's collectives give back the input");
    CHECK(hx__nccl_all_reduce(n, d, N, (hx_dtype)77, NULL) == HX_ERR_DTYPE, "bad dtype refused");
    GT_CUDA(cudaFree(d));
    hx__nccl_free(n);
    hx_comm_free(c);
}

int main(int argc, char **argv)
{
    static const test_case cases[] = {{"one_rank", test_one_rank}};
    test_options o = {.setup = gt_require_device};
    return test_main_with(argc, argv, "test_gpu_nccl", cases, TEST_COUNT(cases), &o);
}
