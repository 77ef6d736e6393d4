/* bf16 GEMM tiles through oneDNN's matmul primitive (Debian 12's libdnnl
 * 2.6: brgemm kernels with AMX or AVX512-BF16, f32 accumulation), chosen
 * by measurement: on the GPT example's tile shapes, one thread, 2.6-11x
 * OpenBLAS's sgemm on the same values in f32 (bench_gemm_half,
 * bench/results/bf16-gemm-cpu-2026-12-07-s15.md). Its f16 matmul is not implemented
 * in 2.6 on this CPU (primitive creation says unimplemented), so f16 stays
 * widened; its f32 matmul loses to OpenBLAS on the wider shapes.
 *
 * gemm.c cuts a GEMM into tiles from its shape alone and runs each tile on
 * one thread; here a tile is one oneDNN matmul executed on that thread. Its
 * primitive is created while the thread's OpenMP nthreads is 1 (gemm.c
 * sets it), so oneDNN's own partition of the tile is that of one thread
 * whatever the GEMM's thread count: the bits depend on the tile's shape
 * only. Primitives are cached per (ta, tb, m, n, K, lda, ldb, ldc): the
 * tiles of a training step have a few dozen shapes, each created once.
 * Scratchpads are the caller's (user mode), so that the threads can run
 * one cached primitive at the same time. */
#include <pthread.h>
#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h>

#include "gemm_dnnl.h"

#define DNNL_CACHE_MAX 256 /* primitives kept; beyond it, made and dropped per tile */

typedef struct prim_key {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
} prim_key;

typedef struct prim {
    prim_key key;
    dnnl_primitive_t p;
    size_t scratch; /* bytes of scratchpad it needs */
} prim;

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static bool usable;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static prim cache[DNNL_CACHE_MAX];
static int cached;

static void dnnl_init(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    bool bf16 = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
                (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    usable = bf16 && dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success;
}

bool hx__dnnl_bf16_usable(void)
{
    pthread_once(&dnnl_once, dnnl_init);
    return usable;
}

/* The three memory descriptors of a tile: A (m x K) and B (K x n) bf16 at
 * their strides, C (m x n) f32. */
static int tile_mds(const prim_key *k, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b,
                    dnnl_memory_desc_t *c)
{
    dnnl_dims_t ad = {k->m, k->k}, bd = {k->k, k->n}, cd = {k->m, k->n};
    dnnl_dims_t as = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t bs = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t cs = {k->ldc, 1};
    return dnnl_memory_desc_init_by_strides(a, 2, ad, dnnl_bf16, as) != dnnl_success ||
                   dnnl_memory_desc_init_by_strides(b, 2, bd, dnnl_bf16, bs) != dnnl_success ||
                   dnnl_memory_desc_init_by_strides(c, 2, cd, dnnl_f32, cs) != dnnl_success
               ? -1
               : 0;
}

/* A new primitive for k with a user scratchpad (its size in *scratch). */
static int prim_create(const prim_key *k, dnnl_primitive_t *p, size_t *scratch)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    if (tile_mds(k, &a, &b, &c) || dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success)
        return -1;
    int rc = -1;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL) == dnnl_success) {
        *scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
        rc = dnnl_primitive_create(p, pd) == dnnl_success ? 0 : -1;
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_primitive_attr_destroy(attr);
    return rc;
}

static bool key_eq(const prim_key *x, const prim_key *y)
{
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k &&
           x->lda == y->lda && x->ldb == y->ldb && x->ldc == y->ldc;
}

/* k's primitive from the cache, created and cached on a miss; *owned: not
 * cached (the cache is full), the caller destroys it after use. */
static int prim_get(const prim_key *k, dnnl_primitive_t *p, size_t *scratch, bool *owned)
{
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < cached; i++)
        if (key_eq(&cache[i].key, k)) {
            *p = cache[i].p, *scratch = cache[i].scratch, *owned = false;
            pthread_mutex_unlock(&cache_lock);
            return 0;
        }
    /* created under the lock: another thread needing it waits, not makes it twice */
    int rc = prim_create(k, p, scratch);
    *owned = rc == 0 && cached == DNNL_CACHE_MAX;
    if (rc == 0 && !*owned) cache[cached++] = (prim){*k, *p, *scratch};
    pthread_mutex_unlock(&cache_lock);
    return rc;
}

static int thread_scratch(hx__dnnl_thread *t, size_t need)
{
    if (need <= t->scratch_size) return 0;
    void *s = aligned_alloc(64, (need + 63) / 64 * 64); /* its contents need not be kept */
    if (!s) return -1;
    free(t->scratch);
    t->scratch = s, t->scratch_size = need;
    return 0;
}

int hx__dnnl_gemm_bf16(hx__dnnl_thread *t, int ta, int tb, int64_t m, int64_t n, int64_t K,
                       const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                       int64_t ldc)
{
    prim_key k = {ta, tb, m, n, K, lda, ldb, ldc};
    dnnl_primitive_t p;
    size_t need;
    bool owned;
    if (!t->stream) {
        dnnl_stream_t st;
        if (dnnl_stream_create(&st, engine, dnnl_stream_default_flags) != dnnl_success) return -1;
        t->stream = st;
    }
    if (prim_get(&k, &p, &need, &owned)) return -1;
    dnnl_memory_desc_t a, b, c, s;
    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
    dnnl_dims_t sd = {(dnnl_dim_t)need};
    int rc = -1;
    if (thread_scratch(t, need) == 0 && tile_mds(&k, &a, &b, &c) == 0 &&
        dnnl_memory_desc_init_by_tag(&s, 1, sd, dnnl_u8, dnnl_a) == dnnl_success &&
        dnnl_memory_create(&mem[0], &a, engine, (void *)A) == dnnl_success &&
        dnnl_memory_create(&mem[1], &b, engine, (void *)B) == dnnl_success &&
        dnnl_memory_create(&mem[2], &c, engine, C) == dnnl_success &&
        dnnl_memory_create(&mem[3], &s, engine, t->scratch) == dnnl_success) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]},
                                   {DNNL_ARG_DST, mem[2]}, {DNNL_ARG_SCRATCHPAD, mem[3]}};
        rc = dnnl_primitive_execute(p, t->stream, need ? 4 : 3, args) == dnnl_success &&
                     dnnl_stream_wait(t->stream) == dnnl_success
                 ? 0
                 : -1;
    }
    for (int i = 0; i < 4; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (owned) dnnl_primitive_destroy(p);
    return rc;
}

void hx__dnnl_thread_end(hx__dnnl_thread *t)
{
    if (t->stream) dnnl_stream_destroy(t->stream);
    free(t->scratch);
    *t = (hx__dnnl_thread){0};
}
