/* cuDNN convolutions (hx_gpu_kernels.h) through cuDNN's convolution API
 * (descriptors, cudnnGet*Algorithm_v7, cudnnConvolution*): what the device
 * runs for a lowered conv2d (graph/lower.c). Built when cuDNN's headers are
 * found; the library is opened at run time (libcudnn.so.9 on the loader's
 * path: LD_LIBRARY_PATH, ld.so.cache), so a machine without it runs hetex
 * with the convolutions as built. */
#ifdef HX_HAVE_CUDNN
#define _GNU_SOURCE /* dladdr */
#include "kernels/gpu/hx_gpu_kernels.h"

#include <cudnn.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The cuDNN functions used, looked up in the opened library. */
#define CUDNN_FUNCS(X)                                                                          \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)  \
    X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensor4dDescriptor) \
    X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnSetFilter4dDescriptor) \
    X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)                    \
    X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionGroupCount)                         \
    X(cudnnSetConvolutionMathType) X(cudnnGetConvolutionForwardAlgorithm_v7)                    \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                              \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnConvolutionForward)                 \
    X(cudnnConvolutionBackwardData) X(cudnnConvolutionBackwardFilter)

static struct api {
#define X(f) __typeof__(&f) f;
    CUDNN_FUNCS(X)
#undef X
} A;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded;
static char why_not[512], path[512];

static void load(void)
{
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why_not, sizeof why_not, "%.500s", dlerror());
        return;
    }
#define X(f)                                                                                    \
    if (!(*(void **)&A.f = dlsym(h, #f))) {                                                     \
        snprintf(why_not, sizeof why_not, "libcudnn.so.9 has no %s", #f);                       \
        return;                                                                                 \
    }
    CUDNN_FUNCS(X)
#undef X
    Dl_info info;
    snprintf(path, sizeof path, "%s",
             dladdr(*(void **)&A.cudnnCreate, &info) && info.dli_fname ? info.dli_fname
                                                                        : "libcudnn.so.9");
    if (A.cudnnGetVersion() / 10000 != CUDNN_MAJOR) {
        snprintf(why_not, sizeof why_not, "%.400s is cuDNN %zu, not %d.x as hetex was built for",
                 path, A.cudnnGetVersion(), CUDNN_MAJOR);
        return;
    }
    loaded = true;
}

int hx_gk_cudnn_load(const char **why)
{
    pthread_once(&once, load);
    if (why) *why = loaded ? path : why_not;
    return loaded;
}

static hx_gk_status dnn(cudnnStatus_t s)
{
    return s == CUDNN_STATUS_SUCCESS ? HX_GK_OK : HX_GK_CUDNN_BASE + (int)s;
}

const char *hx_gk_cudnn_strerror(hx_gk_status st)
{
    if (st >= HX_GK_CUDNN_BASE && st < HX_GK_CUDNN_BASE + 0x10000 && hx_gk_cudnn_load(NULL))
        return A.cudnnGetErrorString((cudnnStatus_t)(st - HX_GK_CUDNN_BASE));
    return hx_gk_strerror(st);
}

int hx_gk_cudnn_is_oom(hx_gk_status st)
{
    return hx_gk_is_oom(st) || st == HX_GK_CUDNN_BASE + (int)CUDNN_STATUS_ALLOC_FAILED;
}

size_t hx_gk_cudnn_version(void) { return hx_gk_cudnn_load(NULL) ? A.cudnnGetVersion() : 0; }
size_t hx_gk_cudnn_built_version(void) { return CUDNN_VERSION; }

hx_gk_status hx_gk_cudnn_create(cudaStream_t s, void **handle)
{
    cudnnHandle_t h = NULL;
    *handle = NULL;
    if (!hx_gk_cudnn_load(NULL)) return HX_GK_BAD_ARG;
    hx_gk_status st = dnn(A.cudnnCreate(&h));
    if (!st) st = dnn(A.cudnnSetStream(h, s));
    if (st && h) A.cudnnDestroy(h);
    *handle = st ? NULL : h;
    return st;
}

static void forget_handle(void *handle);

void hx_gk_cudnn_destroy(void *handle)
{
    if (!handle) return;
    forget_handle(handle); /* a later handle may get its address */
    A.cudnnDestroy((cudnnHandle_t)handle);
}

/* The descriptors of one convolution. */
typedef struct descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} descs;

static void descs_free(descs *d)
{
    if (d->x) A.cudnnDestroyTensorDescriptor(d->x);
    if (d->y) A.cudnnDestroyTensorDescriptor(d->y);
    if (d->w) A.cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) A.cudnnDestroyConvolutionDescriptor(d->conv);
}

static bool fits_int(const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] < 0 || v[i] > INT_MAX) return false;
    return true;
}

/* Every dim an int and every tensor under 2^31 elements. */
static bool fits(const hx_gk_conv *p)
{
    const hx_k_window *w = &p->win;
    int64_t v[] = {w->N, w->C, w->H, w->W, w->OH, w->OW, w->kh, w->kw, w->sh, w->sw,
                   w->ph, w->pw, w->dh, w->dw, p->C_out, p->groups};
    if (!fits_int(v, (int)(sizeof v / sizeof v[0])) || p->groups < 1) return false;
    int64_t numel[] = {w->N * w->C, w->N * p->C_out, p->C_out * (w->C / p->groups)};
    int64_t plane[] = {w->H * w->W, w->OH * w->OW, w->kh * w->kw};
    for (int i = 0; i < 3; i++)
        if (plane[i] && numel[i] > INT_MAX / plane[i]) return false;
    return true;
}

static cudnnDataType_t data_type(hx_kdtype dt)
{
    return dt == HX_K_F16 ? CUDNN_DATA_HALF : dt == HX_K_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* f32: FMA only unless TF32 is allowed; f16/bf16: tensor cores. */
static cudnnMathType_t math_of(hx_kdtype dt, int allow_tf32)
{
    if (dt != HX_K_F32) return CUDNN_TENSOR_OP_MATH;
    return allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

static hx_gk_status descs_make(descs *d, hx_kdtype dt, const hx_gk_conv *p, cudnnMathType_t math)
{
    const hx_k_window *w = &p->win;
    cudnnDataType_t t = data_type(dt);
    *d = (descs){0};
    hx_gk_status st = dnn(A.cudnnCreateTensorDescriptor(&d->x));
    if (!st) st = dnn(A.cudnnCreateTensorDescriptor(&d->y));
    if (!st) st = dnn(A.cudnnCreateFilterDescriptor(&d->w));
    if (!st) st = dnn(A.cudnnCreateConvolutionDescriptor(&d->conv));
    if (!st) st = dnn(A.cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, t, (int)w->N, (int)w->C,
                                                 (int)w->H, (int)w->W));
    if (!st) st = dnn(A.cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, t, (int)w->N,
                                                 (int)p->C_out, (int)w->OH, (int)w->OW));
    if (!st) st = dnn(A.cudnnSetFilter4dDescriptor(d->w, t, CUDNN_TENSOR_NCHW, (int)p->C_out,
                                                 (int)(w->C / p->groups), (int)w->kh, (int)w->kw));
    if (!st) st = dnn(A.cudnnSetConvolution2dDescriptor(d->conv, (int)w->ph, (int)w->pw, (int)w->sh,
                                                      (int)w->sw, (int)w->dh, (int)w->dw,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    if (!st) st = dnn(A.cudnnSetConvolutionGroupCount(d->conv, (int)p->groups));
    if (!st) st = dnn(A.cudnnSetConvolutionMathType(d->conv, math));
    if (st) descs_free(d);
    return st;
}

/* Whether a ranked candidate may be taken: it ran in the heuristic's
 * check, is deterministic, fits, and keeps f32 off TF32 unless allowed. */
static bool takes(cudnnStatus_t status, cudnnDeterminism_t det, size_t memory,
                  cudnnMathType_t math, cudnnMathType_t want, size_t limit)
{
    bool tensor_op = math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    return status == CUDNN_STATUS_SUCCESS && det == CUDNN_DETERMINISTIC && memory <= limit &&
           (want != CUDNN_FMA_MATH || !tensor_op);
}

/* The choice: algorithm in the low byte, math type above it (FMA where
 * asked: for f32 cuDNN's default math may use TF32). */
#define PICK(perf, n, want, limit, algo, ws)                                                     \
    for (int i_ = 0; i_ < (n); i_++)                                                             \
        if (takes((perf)[i_].status, (perf)[i_].determinism, (perf)[i_].memory,                  \
                  (perf)[i_].mathType, (want), (limit))) {                                       \
            *(algo) = (int)(perf)[i_].algo |                                                     \
                      (int)((want) == CUDNN_FMA_MATH ? (want) : (perf)[i_].mathType) << 8;       \
            *(ws) = (perf)[i_].memory;                                                           \
            break;                                                                               \
        }

/* The choices made, per handle and question: cuDNN's heuristic query costs
 * milliseconds on the host (on the H100, ResNet-20 ran at 820 images/s
 * asking it at every launch, 4,300 as built), and its answer depends only
 * on the question, so each is asked once. A full table starts over. */
typedef struct choice {
    void *handle;
    hx_kdtype dt;
    hx_gk_conv_dir dir;
    hx_gk_conv p;
    size_t ws_limit;
    int allow_tf32;
    hx_gk_status st;
    int algo;
    size_t ws_bytes;
} choice;

#define N_CHOICES 256
static choice choices[N_CHOICES];
static int n_choices;
static pthread_mutex_t choices_mu = PTHREAD_MUTEX_INITIALIZER;

static bool same_question(const choice *a, const choice *b)
{
    return a->handle == b->handle && a->dt == b->dt && a->dir == b->dir &&
           !memcmp(&a->p, &b->p, sizeof a->p) && a->ws_limit == b->ws_limit &&
           a->allow_tf32 == b->allow_tf32;
}

static hx_gk_status ask(void *handle, const hx_gk_ctx *c, hx_kdtype dt, hx_gk_conv_dir dir,
                        const hx_gk_conv *p, size_t ws_limit, int *algo, size_t *ws_bytes);

static void forget_handle(void *handle)
{
    pthread_mutex_lock(&choices_mu);
    int k = 0;
    for (int i = 0; i < n_choices; i++)
        if (choices[i].handle != handle) choices[k++] = choices[i];
    n_choices = k;
    pthread_mutex_unlock(&choices_mu);
}

hx_gk_status hx_gk_conv_cudnn_algo(void *handle, const hx_gk_ctx *c, hx_kdtype dt,
                                   hx_gk_conv_dir dir, const hx_gk_conv *p, size_t ws_limit,
                                   int *algo, size_t *ws_bytes)
{
    choice q;
    memset(&q, 0, sizeof q); /* padding too: questions compare by memcmp */
    q.handle = handle, q.dt = dt, q.dir = dir, q.p = *p, q.ws_limit = ws_limit;
    q.allow_tf32 = c->allow_tf32;
    pthread_mutex_lock(&choices_mu);
    for (int i = 0; i < n_choices; i++)
        if (same_question(&choices[i], &q)) {
            *algo = choices[i].algo, *ws_bytes = choices[i].ws_bytes;
            hx_gk_status st = choices[i].st;
            pthread_mutex_unlock(&choices_mu);
            return st;
        }
    pthread_mutex_unlock(&choices_mu);
    q.st = ask(handle, c, dt, dir, p, ws_limit, &q.algo, &q.ws_bytes);
    *algo = q.algo, *ws_bytes = q.ws_bytes;
    if (q.st != HX_GK_OK && q.st != HX_GK_BAD_ARG) return q.st; /* not an answer: ask again */
    pthread_mutex_lock(&choices_mu);
    if (n_choices == N_CHOICES) n_choices = 0;
    choices[n_choices++] = q;
    pthread_mutex_unlock(&choices_mu);
    return q.st;
}

/* cuDNN's heuristic, asked: the first ranked candidate that takes(). */
static hx_gk_status ask(void *handle, const hx_gk_ctx *c, hx_kdtype dt, hx_gk_conv_dir dir,
                        const hx_gk_conv *p, size_t ws_limit, int *algo, size_t *ws_bytes)
{
    *algo = -1;
    *ws_bytes = 0;
    if (!fits(p) || dt > HX_K_BF16) return HX_GK_BAD_ARG;
    cudnnHandle_t h = handle;
    cudnnMathType_t want = math_of(dt, c->allow_tf32);
    descs d;
    hx_gk_status st = descs_make(&d, dt, p, want);
    if (st) return st;
    int n = 0;
    if (dir == HX_GK_CONV_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        st = dnn(A.cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y,
                                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
        if (!st) PICK(perf, n, want, ws_limit, algo, ws_bytes)
    } else if (dir == HX_GK_CONV_BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        st = dnn(A.cudnnGetConvolutionBackwardDataAlgorithm_v7(
                h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
        if (!st) PICK(perf, n, want, ws_limit, algo, ws_bytes)
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        st = dnn(A.cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
        if (!st) PICK(perf, n, want, ws_limit, algo, ws_bytes)
    }
    descs_free(&d);
    if (!st && *algo < 0) st = HX_GK_BAD_ARG;
    return st;
}

hx_gk_status hx_gk_conv_cudnn(void *handle, const hx_gk_ctx *c, hx_kdtype dt, hx_gk_conv_dir dir,
                              const hx_gk_conv *p, int algo, size_t ws_bytes, void *out,
                              const void *a, const void *b)
{
    if (!fits(p) || dt > HX_K_BF16 || algo < 0) return HX_GK_BAD_ARG;
    if (ws_bytes > c->scratch_bytes) return HX_GK_SCRATCH;
    cudnnHandle_t h = handle;
    descs d;
    hx_gk_status st = descs_make(&d, dt, p, (cudnnMathType_t)(algo >> 8));
    if (st) return st;
    const float one = 1.0f, zero = 0.0f; /* float compute: float scales */
    void *ws = ws_bytes ? c->scratch : NULL;
    int al = algo & 0xff;
    if (dir == HX_GK_CONV_FORWARD)
        st = dnn(A.cudnnConvolutionForward(h, &one, d.x, a, d.w, b, d.conv,
                                         (cudnnConvolutionFwdAlgo_t)al, ws, ws_bytes, &zero, d.y,
                                         out));
    else if (dir == HX_GK_CONV_BACKWARD_DATA)
        st = dnn(A.cudnnConvolutionBackwardData(h, &one, d.w, b, d.y, a, d.conv,
                                              (cudnnConvolutionBwdDataAlgo_t)al, ws, ws_bytes,
                                              &zero, d.x, out));
    else
        st = dnn(A.cudnnConvolutionBackwardFilter(h, &one, d.x, b, d.y, a, d.conv,
                                                (cudnnConvolutionBwdFilterAlgo_t)al, ws, ws_bytes,
                                                &zero, d.w, out));
    descs_free(&d);
    return st;
}
#endif
