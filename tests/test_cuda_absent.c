/* The accelerator choice on a machine without a usable CUDA device (CI):
 * AUTO takes emu, CUDA fails with HX_ERR_UNSUPPORTED saying why, a bad
 * device index is refused. In builds with CUDA it also checks, still
 * without a device, that the cuda kernel table covers the op set as the
 * op table says, and that every GPU kernel returns the CUDA error as a
 * status (never aborts) when the runtime has no device. Where a device
 * exists this program skips (tests/gpu covers that machine). */
#include "session/session.h"
#include "scheduler/scheduler.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#ifdef HX_HAVE_CUDA
#include "backend/backend_cuda_internal.h"
#endif

static hx_graph *small_graph(void)
{
    hx_graph *g = hx_graph_create();
    int64_t xs[2] = {4, 3}, ws[2] = {3, 2};
    hx_tensor *x = hx_graph_input(g, "x", HX_DTYPE_F32, 2, xs);
    hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_uniform(-1, 1));
    hx_tensor_set_name(hx_relu(g, hx_matmul(g, x, w, false, false)), "y");
    return g;
}

/* Creates a session with accelerator acc; returns its status, and the
 * accelerator backend's name ("" for none) in *name. */
static hx_status session_with(hx_graph *g, hx_accelerator acc, int device, const char **name)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = acc;
    cfg.cuda_device = device;
    cfg.n_threads = 1;
    hx_session *s = NULL;
    hx_status st = hx_session_create(g, &cfg, &s);
    *name = "";
    if (!st) {
        *name = s->e.be[HX_DEV_ACCEL] ? s->e.be[HX_DEV_ACCEL]->name : "";
        float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, y[8];
        hx_feed f = {"x", NULL, x, sizeof x};
        hx_fetch out = {"y", NULL, y, sizeof y};
        CHECK(hx_session_run(s, &f, 1, &out, 1, 0) == HX_OK, "run: %s", hx_last_error());
        hx_session_free(s);
    }
    return st;
}

static void check_choice(void)
{
    hx_graph *g = small_graph();
    const char *name;
    CHECK(session_with(g, HX_ACCELERATOR_AUTO, 0, &name) == HX_OK, "AUTO: %s", hx_last_error());
    CHECK(!strcmp(name, "emu"), "AUTO without a CUDA device takes emu, got '%s'", name);
    CHECK(session_with(g, HX_ACCELERATOR_EMU, 0, &name) == HX_OK && !strcmp(name, "emu"),
          "EMU: '%s' %s", name, hx_last_error());
    CHECK(session_with(g, HX_ACCELERATOR_NONE, 0, &name) == HX_OK && !strcmp(name, ""),
          "NONE: '%s' %s", name, hx_last_error());

    hx_status st = session_with(g, HX_ACCELERATOR_CUDA, 0, &name);
    const char *msg = hx_last_error();
    CHECK(st == HX_ERR_UNSUPPORTED, "CUDA without a device: %s (%s)", hx_status_name(st), msg);
#ifdef HX_HAVE_CUDA
    CHECK(strstr(msg, "no CUDA device ("), "the message says there is no device and why: %s", msg);
#else
    CHECK(strstr(msg, "built without CUDA"), "the message says CUDA was left out: %s", msg);
#endif
    CHECK(strstr(msg, "HX_ACCELERATOR_AUTO") && strstr(msg, "HX_ACCELERATOR_EMU"),
          "the message says what to use instead: %s", msg);

#ifdef HX_HAVE_CUDA
    st = session_with(g, HX_ACCELERATOR_AUTO, -1, &name);
    CHECK(st == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "cuda_device -1"),
          "a negative device index is refused: %s %s", hx_status_name(st), hx_last_error());
#endif
    /* The failed session left the graph usable. */
    CHECK(session_with(g, HX_ACCELERATOR_AUTO, 0, &name) == HX_OK, "%s", hx_last_error());
    hx_graph_free(g);
}

/* hx_session_accelerator_info says which accelerator and why, and the cap. */
static void check_info(void)
{
    hx_graph *g = small_graph();
    static const struct {
        hx_accelerator asked, in_use;
        size_t cap;
        const char *why;
    } cases[] = {
#ifdef HX_HAVE_CUDA
        {HX_ACCELERATOR_AUTO, HX_ACCELERATOR_EMU, 0, "no CUDA device found (CUDA says: "},
#else
        {HX_ACCELERATOR_AUTO, HX_ACCELERATOR_EMU, 0, "built without CUDA"},
#endif
        {HX_ACCELERATOR_EMU, HX_ACCELERATOR_EMU, (size_t)48 << 20, "asked for (HX_ACCELERATOR_EMU)"},
        {HX_ACCELERATOR_NONE, HX_ACCELERATOR_NONE, 0, "asked for (HX_ACCELERATOR_NONE)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hx_session_config cfg = hx_session_config_default();
        cfg.accelerator = cases[i].asked;
        cfg.max_device_memory = cases[i].cap;
        cfg.n_threads = 1;
        hx_session *s = NULL;
        hx_accelerator_info a;
        CHECK(hx_session_create(g, &cfg, &s) == HX_OK && hx_session_accelerator_info(s, &a) == HX_OK,
              "case %zu: %s", i, hx_last_error());
        if (!s) continue;
        size_t want_cap = cases[i].in_use == HX_ACCELERATOR_NONE ? 0
                        : cases[i].cap ? cases[i].cap : (size_t)8 << 30;
        CHECK(a.in_use == cases[i].in_use && strstr(a.why, cases[i].why) && a.capacity == want_cap &&
              a.device_memory == 0 &&
              (a.in_use != HX_ACCELERATOR_EMU || strstr(a.device, "emulated accelerator")),
              "case %zu: in use %d, device '%s', cap %zu (want %zu), why '%s'", i, (int)a.in_use,
              a.device, a.capacity, want_cap, a.why);
        hx_session_free(s);
    }
    CHECK(hx_session_accelerator_info(NULL, NULL) == HX_ERR_INVALID_ARGUMENT, "NULL refused");
    hx_graph_free(g);
}

#ifdef HX_HAVE_CUDA
#ifdef HX_HAVE_CUDNN
static bool cudnn_here(void)
{
    const char *why;
    int ok = hx_gk_cudnn_load(&why);
    printf("cuDNN: %s (%s, version %zu)\n", ok ? "opened" : "not usable", why, hx_gk_cudnn_version());
    return ok;
}
#else
static bool cudnn_here(void) { return false; }
#endif
/* Every op the CPU runs has a cuda kernel for f32 unless the op table keeps
 * it on the host; float ops take f16/bf16 too; integers only move. */
static void check_kernel_table(void)
{
    for (int op = HX_OP_MATMUL; op < HX_OP_COUNT; op++) {
        const char *name = hx__ops[op].name;
        hx_launch_fn f32 = hx__cuda_kernel((hx_op)op, HX_DTYPE_F32);
        if (hx__ops[op].host_only) {
            for (int dt = HX_DTYPE_F32; dt <= HX_DTYPE_I64; dt++)
                CHECK(!hx__cuda_kernel((hx_op)op, (hx_dtype)dt), "%s is host-only", name);
            continue;
        }
        CHECK(f32 != NULL || !hx__cpu_kernel((hx_op)op), "%s has a CPU kernel but no cuda f32 one",
              name);
        bool moves = op == HX_OP_RESHAPE || op == HX_OP_PERMUTE || op == HX_OP_CONCAT ||
                     op == HX_OP_SLICE || op == HX_OP_BROADCAST_TO || op == HX_OP_SLICE_BACKWARD;
        bool f32_only = op == HX_OP_CROSS_ENTROPY || op == HX_OP_BCE_LOGITS ||
                        op == HX_OP_CROSS_ENTROPY_BACKWARD || op == HX_OP_BCE_LOGITS_BACKWARD ||
                        op >= HX_OP_SGD_UPDATE;
        for (int dt = HX_DTYPE_F16; dt <= HX_DTYPE_BF16; dt++)
            CHECK(!f32 || (hx__cuda_kernel((hx_op)op, (hx_dtype)dt) != NULL) == !f32_only,
                  "%s on %s", name, hx_dtype_name((hx_dtype)dt));
        for (int dt = HX_DTYPE_I32; dt <= HX_DTYPE_I64; dt++)
            CHECK(!f32 || (hx__cuda_kernel((hx_op)op, (hx_dtype)dt) != NULL) == moves,
                  "%s on %s", name, hx_dtype_name((hx_dtype)dt));
    }
    CHECK(hx__cuda_kernel(HX_KERNEL_SUMSQ, HX_DTYPE_F32) &&
              hx__cuda_kernel(HX_KERNEL_SUMSQ, HX_DTYPE_BF16) &&
              !hx__cuda_kernel(HX_KERNEL_SUMSQ, HX_DTYPE_I32),
          "the gradient scan kernel");
    /* the lowered convolutions (graph.h): cuDNN's where it was built in and
     * opens, on float dtypes; the host fusions have no device kernel */
    bool dnn = cudnn_here();
    for (int k = HX_LOWER_CONV2D; k < HX_LOWER_COUNT; k++)
        for (int dt = HX_DTYPE_F32; dt <= HX_DTYPE_I64; dt++) {
            bool want = dnn && dt <= HX_DTYPE_BF16 && !hx__lower_on_host((hx_lower_kind)k);
            CHECK((hx__cuda_kernel(HX_LOWERED_OP(k), (hx_dtype)dt) != NULL) == want,
                  "%s on %s: %s", hx__lower_name((hx_lower_kind)k), hx_dtype_name((hx_dtype)dt),
                  want ? "missing" : "present");
        }
    CHECK(!hx__cuda_kernel(HX_LOWERED_OP(HX_LOWER_COUNT), HX_DTYPE_F32), "past the table");
}

/* Each kernel, called with no device behind the runtime, reports an error
 * with text; none aborts and none claims success. Pointers are never
 * touched on the host, so NULL ones are fine. */
static void expect_failure(const char *what, hx_gk_status st)
{
    const char *text = hx_gk_strerror(st);
    CHECK(st != HX_GK_OK && text && *text && strcmp(text, "no error"),
          "%s without a device: status %#x '%s'", what, st, text ? text : "(null)");
}

static void check_kernels_fail_cleanly(void)
{
    static char scratch_dummy;
    hx_gk_ctx c = {0, NULL, &scratch_dummy, (size_t)1 << 30, 0};
    int64_t shape[2] = {3, 4}, st2[2] = {4, 1}, bst[2] = {0, 1};
    uint8_t red[2] = {1, 0};
    uint64_t *bad = NULL;
    hx_optim_io io = hx_optim_io_f32(NULL, 1);
    hx_adam_hp hp = {1e-3, 0.9, 0.999, 1e-8, 0, 0};
    hx_optim_plan pl = hx_optim_plan_adam(&hp, 1, &io);
    void *p = NULL;
    expect_failure("gemm", hx_gk_gemm(&c, HX_K_F16, 0, 1, 2, 3, 4, 5, p, 5, 15, p, 5, 20, p, 4, 12));
    expect_failure("binary", hx_gk_binary(&c, HX_K_F32, HX_BINARY_DIV, p, p, st2, p, bst, shape, 2));
    expect_failure("unary", hx_gk_unary(&c, HX_K_BF16, HX_UNARY_GELU, p, p, 12));
    expect_failure("unary_backward", hx_gk_unary_backward(&c, HX_K_F32, HX_UNARY_TANH, p, p, NULL, &scratch_dummy, 12));
    expect_failure("scale", hx_gk_scale(&c, HX_K_F32, p, p, 2.0f, 12));
    expect_failure("bias_add", hx_gk_bias_add(&c, HX_K_F16, p, p, p, 3, 4));
    expect_failure("cast", hx_gk_cast(&c, p, HX_K_BF16, p, HX_K_F16, 12));
    expect_failure("causal_mask", hx_gk_causal_mask(&c, HX_K_F32, p, p, 2, 4, -1e30f));
    expect_failure("dropout", hx_gk_dropout(&c, HX_K_F32, p, p, 0.5f, 1, 2, 12));
    expect_failure("softmax", hx_gk_softmax(&c, HX_K_F32, p, p, 3, 4));
    expect_failure("log_softmax", hx_gk_log_softmax(&c, HX_K_F32, p, p, 3, 4));
    expect_failure("softmax_backward", hx_gk_softmax_backward(&c, HX_K_F32, p, p, p, 3, 4));
    expect_failure("log_softmax_backward", hx_gk_log_softmax_backward(&c, HX_K_F32, p, p, p, 3, 4));
    expect_failure("layernorm", hx_gk_layernorm(&c, HX_K_F32, p, p, p, p, 1e-5f, 3, 4));
    expect_failure("layernorm_backward_x", hx_gk_layernorm_backward_x(&c, HX_K_F32, p, p, p, p, 1e-5f, 3, 4));
    expect_failure("layernorm_backward_gamma", hx_gk_layernorm_backward_gamma(&c, HX_K_F32, p, p, p, 1e-5f, 3, 4));
    expect_failure("reduce_sum", hx_gk_reduce_sum(&c, HX_K_F32, p, p, shape, 2, red));
    expect_failure("copy_strided", hx_gk_copy_strided(&c, p, st2, p, st2, shape, 2, 2));
    expect_failure("gather_rows", hx_gk_gather_rows(&c, p, p, 10, 16, p, HX_K_I64, 5, bad));
    expect_failure("scatter_add_rows", hx_gk_scatter_add_rows(&c, HX_K_F32, p, 10, 4, p, p, HX_K_I32, 5, bad));
    expect_failure("cross_entropy", hx_gk_cross_entropy(&c, HX_K_F32, p, p, p, HX_K_I32, 3, 4, bad));
    expect_failure("cross_entropy_backward", hx_gk_cross_entropy_backward(&c, HX_K_F32, p, p, p, p, HX_K_I64, 3, 4, bad));
    expect_failure("bce_logits", hx_gk_bce_logits(&c, HX_K_F32, p, p, p, 12));
    expect_failure("bce_logits_backward", hx_gk_bce_logits_backward(&c, HX_K_F32, p, p, p, p, 12));
    expect_failure("optim_update", hx_gk_optim_update(&c, &pl, p, p, p, p, NULL, 12));
    expect_failure("sumsq", hx_gk_sumsq(&c, HX_K_F32, (double *)p, p, 12));
    expect_failure("memcpy", hx_gk_memcpy(&c, &scratch_dummy, p, 12));
    expect_failure("memset0", hx_gk_memset0(&c, p, 12));

    /* Arguments a kernel does not take fail before any CUDA call. */
    CHECK(hx_gk_unary(&c, HX_K_I32, HX_UNARY_RELU, p, p, 4) == HX_GK_BAD_ARG, "int unary");
    CHECK(hx_gk_copy_strided(&c, p, st2, p, st2, shape, 2, 3) == HX_GK_BAD_ARG, "3-byte elements");
    CHECK(hx_gk_gemm(&c, HX_K_I64, 0, 0, 1, 2, 2, 2, p, 2, 0, p, 2, 0, p, 2, 0) == HX_GK_BAD_ARG, "int gemm");
    CHECK(hx_gk_gemm(&c, HX_K_F32, 0, 0, 1, (int64_t)1 << 32, 2, 2, p, 2, 0, p, 2, 0, p, 2, 0) ==
              HX_GK_BAD_ARG, "gemm dims past int");
    hx_gk_ctx small = c;
    small.scratch_bytes = 8;
    CHECK(hx_gk_cross_entropy(&small, HX_K_F32, p, p, p, HX_K_I32, 3, 4, bad) == HX_GK_SCRATCH,
          "scratch too small");
    CHECK(strstr(hx_gk_strerror(HX_GK_SCRATCH), "scratch"), "scratch text");
    CHECK(hx_gk_is_oom(hx_gk_cuda(cudaErrorMemoryAllocation)) && !hx_gk_is_oom(HX_GK_BAD_ARG), "oom");
    CHECK(!strcmp(hx_gk_strerror(hx_gk_cuda(cudaErrorInvalidValue)), cudaGetErrorString(cudaErrorInvalidValue)),
          "CUDA text");
    CHECK(!strcmp(hx_gk_strerror(hx_gk_cublas(CUBLAS_STATUS_NOT_INITIALIZED)),
                  cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)), "cuBLAS text");
}
#endif

static int setup(void)
{
    const char *why = NULL;
    if (hx__cuda_device_count(&why) > 0) {
        printf("a CUDA device is present: skipped (tests/gpu covers machines with one)\n");
        return TEST_SKIPPED;
    }
    printf("no usable CUDA device: %s\n", why);
    return 0;
}

static const test_case cases[] = {
    {"choice", check_choice},
    {"info", check_info},
#ifdef HX_HAVE_CUDA
    {"kernel_table", check_kernel_table},
    {"kernels_fail_cleanly", check_kernels_fail_cleanly},
#endif
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup};
    return test_main_with(argc, argv, "cuda_absent", cases, TEST_COUNT(cases), &o);
}
