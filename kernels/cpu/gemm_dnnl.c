/* bf16 and f32 GEMM tiles through oneDNN's matmul primitive (Debian 12's
 * libdnnl 2.6: brgemm kernels with AMX or AVX512-BF16, f32 accumulation),
 * chosen by measurement: bf16, on the GPT example's tile shapes, one
 * thread, 2.6-11x OpenBLAS's sgemm on the same values in f32
 * (bench_gemm_half, bench/results/bf16-gemm-cpu-2026-12-07-s15.md); f32
 * on most of those shapes faster than a single-threaded sgemm once the
 * per-tile set-up below is gone (which tiles gemm.c sends here: its top
 * comment). oneDNN 2.6 has no f16 matmul for this CPU (creating one
 * returns dnnl_unimplemented), so f16 stays widened.
 *
 * gemm.c cuts a GEMM into tiles from its shape alone and runs each tile on
 * one thread; here a tile is one oneDNN matmul executed on that thread. Its
 * primitive is created while the thread's OpenMP nthreads is 1 (gemm.c
 * sets it), so oneDNN's own partition of the tile is that of one thread
 * whatever the GEMM's thread count: the bits depend on the tile's shape
 * only. Primitives are cached per (dtype, ta, tb, m, n, K, lda, ldb,
 * ldc): the tiles of a training step have a few dozen shapes, each
 * created once.
 * Scratchpads are the caller's (user mode), so that the threads can run
 * one cached primitive at the same time.
 *
 * A oneDNN stream, scratchpad and memory object cost ~2.5 us a tile to
 * make and drop, as much as a 64 x 64 x 32 attention tile's product, so
 * each thread keeps its own across GEMMs (thread_state): one stream, one
 * scratchpad grown as tiles need, and per cached primitive the memory
 * objects of its A, B and C, whose data pointers are set per tile. A
 * thread's state is freed when the thread exits (an OpenMP pool thread
 * included: a pthread key's destructor), and the states of the threads
 * still alive when the process exits (the main thread's, the pool's) by
 * an exit handler. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "gemm_dnnl.h"

#define DNNL_CACHE_MAX 256 /* primitives kept; beyond it, made and dropped per tile */

typedef struct prim_key {
    dnnl_data_type_t dt; /* A's and B's: dnnl_bf16 or dnnl_f32 (C: f32) */
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
} prim_key;

typedef struct prim {
    prim_key key;
    dnnl_primitive_t p;
    size_t scratch; /* bytes of scratchpad it needs */
} prim;

/* One thread's oneDNN state, kept across GEMMs. */
typedef struct thread_state {
    dnnl_stream_t stream;
    void *scratch; /* its scratchpad (contents not kept across tiles) */
    size_t scratch_size;
    dnnl_memory_t scratch_mem;            /* over scratch; NULL while scratch_size is 0 */
    dnnl_memory_t mem[DNNL_CACHE_MAX][3]; /* A, B, C of cache[i], once used here */
    struct thread_state *prev, *next;     /* in `states` */
} thread_state;

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static bool usable;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static prim cache[DNNL_CACHE_MAX];
static atomic_int cached; /* cache[0 .. cached) are complete: read without the lock */
static pthread_key_t state_key;
static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static thread_state *states; /* every live thread's, for the exit handler */
static bool states_closed;   /* the exit handler freed them */

static void state_free(thread_state *t)
{
    for (int i = 0; i < DNNL_CACHE_MAX; i++)
        for (int j = 0; j < 3; j++)
            if (t->mem[i][j]) dnnl_memory_destroy(t->mem[i][j]);
    if (t->scratch_mem) dnnl_memory_destroy(t->scratch_mem);
    if (t->stream) dnnl_stream_destroy(t->stream);
    free(t->scratch);
    free(t);
}

/* The pthread key's destructor: a thread that ran tiles exits. */
static void state_exit(void *p)
{
    thread_state *t = p;
    pthread_mutex_lock(&states_lock);
    bool mine = !states_closed; /* else the exit handler freed it */
    if (mine) {
        if (t->prev) t->prev->next = t->next;
        else states = t->next;
        if (t->next) t->next->prev = t->prev;
    }
    pthread_mutex_unlock(&states_lock);
    if (mine) state_free(t);
}

/* At process exit (registered after oneDNN's own initialisation, so run
 * before oneDNN's destructors): the states of the threads still alive. */
static void states_exit(void)
{
    pthread_mutex_lock(&states_lock);
    states_closed = true;
    thread_state *t = states;
    states = NULL;
    pthread_mutex_unlock(&states_lock);
    while (t) {
        thread_state *next = t->next;
        state_free(t);
        t = next;
    }
}

static void dnnl_init(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    bool bf16 = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
                (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    usable = bf16 && dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success &&
             pthread_key_create(&state_key, state_exit) == 0 && atexit(states_exit) == 0;
}

bool hx__dnnl_bf16_usable(void)
{
    pthread_once(&dnnl_once, dnnl_init);
    return usable;
}

int hx__dnnl_thread_states(void)
{
    int n = 0;
    pthread_mutex_lock(&states_lock);
    for (const thread_state *t = states; t; t = t->next) n++;
    pthread_mutex_unlock(&states_lock);
    return n;
}

/* The calling thread's state, made on its first tile; NULL: out of memory. */
static thread_state *thread_state_get(void)
{
    thread_state *t = pthread_getspecific(state_key);
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (dnnl_stream_create(&t->stream, engine, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(state_key, t) != 0) {
        state_free(t);
        return NULL;
    }
    pthread_mutex_lock(&states_lock);
    t->next = states;
    if (states) states->prev = t;
    states = t;
    pthread_mutex_unlock(&states_lock);
    return t;
}

/* The three memory descriptors of a tile: A (m x K) and B (K x n) in k->dt
 * at their strides, C (m x n) f32. */
static int tile_mds(const prim_key *k, dnnl_memory_desc_t md[3])
{
    dnnl_dims_t ad = {k->m, k->k}, bd = {k->k, k->n}, cd = {k->m, k->n};
    dnnl_dims_t as = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t bs = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t cs = {k->ldc, 1};
    return dnnl_memory_desc_init_by_strides(&md[0], 2, ad, k->dt, as) != dnnl_success ||
                   dnnl_memory_desc_init_by_strides(&md[1], 2, bd, k->dt, bs) != dnnl_success ||
                   dnnl_memory_desc_init_by_strides(&md[2], 2, cd, dnnl_f32, cs) != dnnl_success
               ? -1
               : 0;
}

/* k's A, B and C memory objects, without data (set per tile). */
static int tile_mems(const prim_key *k, dnnl_memory_t mem[3])
{
    dnnl_memory_desc_t md[3];
    if (tile_mds(k, md)) return -1;
    for (int j = 0; j < 3; j++)
        if (dnnl_memory_create(&mem[j], &md[j], engine, DNNL_MEMORY_NONE) != dnnl_success) {
            while (j--) dnnl_memory_destroy(mem[j]), mem[j] = NULL;
            return -1;
        }
    return 0;
}

/* The primitive descriptor of desc: for bf16 oneDNN's first choice; for
 * f32 its "gemm:jit" implementation (its own sgemm), whatever the strides.
 * oneDNN picks "brg" for a dense f32 tile and "gemm:jit" for one with a
 * leading dimension wider than the tile, and the two sum in different
 * orders: a tile read in place (attention's heads, lda H*D) would not
 * give the bits of the same values read compact (after a permute).
 * -1 where it has none (the tile goes to OpenBLAS). */
static int pd_create(dnnl_data_type_t dt, const dnnl_matmul_desc_t *desc,
                     dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd)
{
    if (dt != dnnl_f32)
        return dnnl_primitive_desc_create(pd, desc, attr, engine, NULL) == dnnl_success ? 0 : -1;
    dnnl_primitive_desc_iterator_t it;
    if (dnnl_primitive_desc_iterator_create(&it, desc, attr, engine, NULL) != dnnl_success)
        return -1;
    int rc = -1;
    do {
        dnnl_primitive_desc_t d = dnnl_primitive_desc_iterator_fetch(it);
        const char *impl = NULL;
        if (!d) break;
        if (dnnl_primitive_desc_query(d, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
            impl && strncmp(impl, "gemm:jit", 8) == 0) {
            *pd = d;
            rc = 0;
            break;
        }
        dnnl_primitive_desc_destroy(d);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    return rc;
}

/* A new primitive for k with a user scratchpad (its size in *scratch). */
static int prim_create(const prim_key *k, dnnl_primitive_t *p, size_t *scratch)
{
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    if (tile_mds(k, md) ||
        dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success)
        return -1;
    int rc = -1;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
        pd_create(k->dt, &desc, attr, &pd) == 0) {
        *scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
        rc = dnnl_primitive_create(p, pd) == dnnl_success ? 0 : -1;
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_primitive_attr_destroy(attr);
    return rc;
}

static bool key_eq(const prim_key *x, const prim_key *y)
{
    return x->dt == y->dt && x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k &&
           x->lda == y->lda && x->ldb == y->ldb && x->ldc == y->ldc;
}

static int prim_find(const prim_key *k, int n)
{
    for (int i = 0; i < n; i++)
        if (key_eq(&cache[i].key, k)) return i;
    return -1;
}

/* k's slot in the cache, its primitive created and cached on a miss; -1
 * where the cache is full, with owned->p made for this tile (the caller
 * destroys it), or NULL: it could not be made. */
static int prim_get(const prim_key *k, prim *owned)
{
    int i = prim_find(k, atomic_load_explicit(&cached, memory_order_acquire));
    if (i >= 0) return i;
    /* created under the lock: another thread needing it waits, not makes it twice */
    pthread_mutex_lock(&cache_lock);
    int n = atomic_load_explicit(&cached, memory_order_relaxed);
    i = prim_find(k, n);
    if (i < 0 && prim_create(k, &owned->p, &owned->scratch) == 0 && n < DNNL_CACHE_MAX) {
        cache[n] = *owned;
        owned->p = NULL;
        atomic_store_explicit(&cached, n + 1, memory_order_release);
        i = n;
    }
    pthread_mutex_unlock(&cache_lock);
    return i;
}

/* t's scratchpad grown to need bytes, its memory object with it. */
static int thread_scratch(thread_state *t, size_t need)
{
    if (need <= t->scratch_size) return 0;
    size_t size = (need + 63) / 64 * 64;
    void *s = aligned_alloc(64, size);
    dnnl_memory_desc_t md;
    dnnl_dims_t d = {(dnnl_dim_t)size};
    dnnl_memory_t m;
    if (!s || dnnl_memory_desc_init_by_tag(&md, 1, d, dnnl_u8, dnnl_a) != dnnl_success ||
        dnnl_memory_create(&m, &md, engine, s) != dnnl_success) {
        free(s);
        return -1;
    }
    if (t->scratch_mem) dnnl_memory_destroy(t->scratch_mem);
    free(t->scratch);
    t->scratch = s, t->scratch_size = size, t->scratch_mem = m;
    return 0;
}

/* The tile of hx__dnnl_gemm_bf16 / hx__dnnl_gemm_f32, A and B in dt. */
static int tile_gemm(dnnl_data_type_t dt, int ta, int tb, int64_t m, int64_t n, int64_t K,
                     const void *A, int64_t lda, const void *B, int64_t ldb, float *C,
                     int64_t ldc)
{
    prim_key k = {dt, ta, tb, m, n, K, lda, ldb, ldc};
    prim owned = {k, NULL, 0};
    thread_state *t = thread_state_get();
    if (!t) return -1;
    int slot = prim_get(&k, &owned);
    if (slot < 0 && !owned.p) return -1;
    const prim *p = slot >= 0 ? &cache[slot] : &owned;
    dnnl_memory_t tmp[3] = {NULL, NULL, NULL}, *mem = slot >= 0 ? t->mem[slot] : tmp;
    int rc = -1;
    if ((mem[0] || tile_mems(&k, mem) == 0) && thread_scratch(t, p->scratch) == 0 &&
        dnnl_memory_set_data_handle(mem[0], (void *)A) == dnnl_success &&
        dnnl_memory_set_data_handle(mem[1], (void *)B) == dnnl_success &&
        dnnl_memory_set_data_handle(mem[2], C) == dnnl_success) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]},
                                   {DNNL_ARG_DST, mem[2]}, {DNNL_ARG_SCRATCHPAD, t->scratch_mem}};
        rc = dnnl_primitive_execute(p->p, t->stream, p->scratch ? 4 : 3, args) == dnnl_success &&
                     dnnl_stream_wait(t->stream) == dnnl_success
                 ? 0
                 : -1;
    }
    if (slot < 0) {
        for (int j = 0; j < 3; j++)
            if (tmp[j]) dnnl_memory_destroy(tmp[j]);
        dnnl_primitive_destroy(owned.p);
    }
    return rc;
}

int hx__dnnl_gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t K, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float *C, int64_t ldc)
{
    return tile_gemm(dnnl_bf16, ta, tb, m, n, K, A, lda, B, ldb, C, ldc);
}

int hx__dnnl_gemm_f32(int ta, int tb, int64_t m, int64_t n, int64_t K, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc)
{
    return tile_gemm(dnnl_f32, ta, tb, m, n, K, A, lda, B, ldb, C, ldc);
}
