/* The local table: storage (anonymous memory with huge pages, or a mapped
 * file), seeded initialisers, lazily initialised rows, optimizer state, and
 * the interface (hx_emb_ops) through which callers use it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <omp.h>

#include "embedding/embedding.h"
#include "kernels/cpu/hx_kernels.h"

/* Tables from this size up get huge pages when huge_pages is -1. */
#define HUGE_MIN_BYTES ((size_t)32 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)

hx_status hx_emb_fail(hx_emb_err *err, hx_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

const char *hx_emb_dtype_name(hx_dtype dt)
{
    switch (dt) {
    case HX_DTYPE_F32: return "f32";
    case HX_DTYPE_F16: return "f16";
    case HX_DTYPE_BF16: return "bf16";
    case HX_DTYPE_I32: return "i32";
    case HX_DTYPE_I64: return "i64";
    }
    return "unknown dtype";
}

int64_t hx_emb_row_stride(int64_t dim, hx_dtype dtype)
{
    int64_t per = dtype == HX_DTYPE_F32 ? 16 : 32;
    return (dim + per - 1) / per * per;
}

hx_emb_table_config hx_emb_table_config_default(int64_t rows, int64_t dim)
{
    hx_emb_table_config c;
    memset(&c, 0, sizeof c);
    c.rows = rows;
    c.dim = dim;
    c.dtype = HX_DTYPE_F32;
    c.init.kind = HX_EMB_INIT_UNIFORM;
    c.init.a = -0.05;
    c.init.b = 0.05;
    c.huge_pages = -1;
    c.optim.kind = HX_EMB_OPTIM_NONE;
    c.oob = HX_EMB_OOB_ERROR;
    c.nthreads = 1;
    return c;
}

hx_emb_optim hx_emb_optim_default(hx_emb_optim_kind kind)
{
    hx_emb_optim o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.lr_power = -0.5;
    switch (kind) {
    case HX_EMB_OPTIM_LAZY_ADAM:
        o.lr = 1e-3;
        o.beta1 = 0.9;
        o.beta2 = 0.999;
        o.eps = 1e-8;
        break;
    case HX_EMB_OPTIM_ADAGRAD:
    case HX_EMB_OPTIM_ROW_ADAGRAD:
        o.lr = 1e-2;
        o.eps = 1e-10;
        break;
    case HX_EMB_OPTIM_FTRL:
        o.lr = 1e-3;
        o.initial_accumulator = 0.1;
        break;
    case HX_EMB_OPTIM_NONE:
        break;
    }
    return o;
}

/* ---- initialisers ------------------------------------------------------------ */

hx_status hx_emb_init_check(const hx_emb_init *in, const char *who, hx_emb_err *err)
{
    if (in->kind != HX_EMB_INIT_ZEROS && in->kind != HX_EMB_INIT_UNIFORM && in->kind != HX_EMB_INIT_NORMAL)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "%s: unknown initialiser %d", who, (int)in->kind);
    if (in->kind == HX_EMB_INIT_UNIFORM && !(in->a <= in->b))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "%s: uniform initialiser needs a <= b (got %g, %g)", who,
                           in->a, in->b);
    if (in->kind == HX_EMB_INIT_NORMAL && !(in->b >= 0))
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "%s: normal initialiser needs std >= 0 (got %g)", who,
                           in->b);
    return HX_OK;
}

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void hx_emb_init_row(const hx_emb_init *in, int64_t r, int64_t dim, int64_t stride, float *dst)
{
    if (in->kind == HX_EMB_INIT_ZEROS) {
        memset(dst, 0, (size_t)stride * sizeof(float));
        return;
    }
    uint64_t hr = mix64(in->seed ^ mix64((uint64_t)r * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull));
    double a = in->a, b = in->b;
    if (in->kind == HX_EMB_INIT_UNIFORM) {
        for (int64_t c = 0; c < dim; c++) {
            uint64_t x = mix64(hr + (uint64_t)c * 0xD1B54A32D192ED03ull);
            double u = (double)(x >> 40) * 0x1.0p-24;
            dst[c] = (float)(a + (b - a) * u);
        }
    } else {
        for (int64_t c = 0; c < dim; c++) {
            uint64_t x = mix64(hr + (uint64_t)c * 0xD1B54A32D192ED03ull);
            double u1 = (double)((x >> 40) + 1) * 0x1.0p-24;
            double u2 = (double)((x >> 16) & 0xFFFFFFu) * 0x1.0p-24;
            double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            dst[c] = (float)(a + b * z);
        }
    }
    for (int64_t c = dim; c < stride; c++) dst[c] = 0.0f;
}

/* ---- rows: reading, writing, readiness ------------------------------------------- */

static inline int row_ready(const hx_emb_local *t, int64_t r)
{
    return (atomic_load_explicit(&t->ready[r >> 6], memory_order_relaxed) >> (r & 63)) & 1;
}

static void to_f32(float *dst, const void *src, hx_dtype dt, int64_t n)
{
    if (dt == HX_DTYPE_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else hx_k_cast(dst, HX_K_F32, src, (hx_kdtype)dt, n, 1);
}

void hx_emb_local_pack_row(const hx_emb_local *t, int64_t r, int ns, bool rowwise, char *rec)
{
    size_t pb = (size_t)t->base.dim * t->esize, sf = rowwise ? 1 : (size_t)t->base.dim;
    memcpy(rec, (const char *)t->param + (size_t)r * (size_t)t->stride * t->esize, pb);
    rec += pb;
    for (int k = 0; k < ns; k++, rec += sf * 4)
        memcpy(rec, rowwise ? t->state[k] + r : t->state[k] + r * t->gstride, sf * 4);
}

void hx_emb_local_unpack_row(hx_emb_local *t, int64_t r, int ns, bool rowwise, const char *rec)
{
    size_t pb = (size_t)t->base.dim * t->esize, sf = rowwise ? 1 : (size_t)t->base.dim;
    memcpy((char *)t->param + (size_t)r * (size_t)t->stride * t->esize, rec, pb);
    rec += pb;
    for (int k = 0; k < ns; k++, rec += sf * 4)
        memcpy(rowwise ? t->state[k] + r : t->state[k] + r * t->gstride, rec, sf * 4);
}

void hx_emb_local_read_row(const hx_emb_local *t, int64_t r, float *dst)
{
    if (t->lazy && !row_ready(t, r)) {
        hx_emb_init_row(&t->init, hx_emb_local_init_of(t, r), t->base.dim, t->gstride, dst);
        /* As the row will be stored: rounded to the storage dtype. */
        for (int64_t c = 0; c < t->base.dim && t->dtype != HX_DTYPE_F32; c += 64) {
            uint16_t half[64];
            int64_t len = t->base.dim - c < 64 ? t->base.dim - c : 64;
            hx_k_cast(half, (hx_kdtype)t->dtype, dst + c, HX_K_F32, len, 1);
            hx_k_cast(dst + c, HX_K_F32, half, (hx_kdtype)t->dtype, len, 1);
        }
        return;
    }
    to_f32(dst, (const char *)t->param + (size_t)r * (size_t)t->stride * t->esize, t->dtype,
           t->base.dim);
}

/* Writes row r's param from f32 values (dim of them; storage padding zero). */
static void write_param_row(hx_emb_local *t, int64_t r, const float *src)
{
    char *dst = (char *)t->param + (size_t)r * (size_t)t->stride * t->esize;
    int64_t dim = t->base.dim;
    if (t->dtype == HX_DTYPE_F32) memcpy(dst, src, (size_t)dim * sizeof(float));
    else hx_k_cast(dst, (hx_kdtype)t->dtype, src, HX_K_F32, dim, 1);
    memset(dst + (size_t)dim * t->esize, 0, (size_t)(t->stride - dim) * t->esize);
}

int hx_emb_optim_nstate(hx_emb_optim_kind kind)
{
    switch (kind) {
    case HX_EMB_OPTIM_LAZY_ADAM:
    case HX_EMB_OPTIM_FTRL: return 2;
    case HX_EMB_OPTIM_ADAGRAD:
    case HX_EMB_OPTIM_ROW_ADAGRAD: return 1;
    case HX_EMB_OPTIM_NONE: break;
    }
    return 0;
}

const char *hx_emb_optim_name(hx_emb_optim_kind kind)
{
    switch (kind) {
    case HX_EMB_OPTIM_NONE: return "none";
    case HX_EMB_OPTIM_LAZY_ADAM: return "LazyAdam";
    case HX_EMB_OPTIM_ADAGRAD: return "Adagrad";
    case HX_EMB_OPTIM_ROW_ADAGRAD: return "row-wise Adagrad";
    case HX_EMB_OPTIM_FTRL: return "FTRL";
    }
    return "unknown";
}

/* Start value of state array k. */
static float state_start(const hx_emb_optim *o, int k)
{
    if (o->kind == HX_EMB_OPTIM_LAZY_ADAM) return 0.0f;
    return k == 0 ? (float)o->initial_accumulator : 0.0f;
}

void hx_emb_local_read_state(const hx_emb_local *t, int k, int64_t r, float *dst)
{
    int rowwise = t->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    int64_t w = rowwise ? 1 : t->base.dim;
    if (r < 0 || (t->lazy && !row_ready(t, r))) {
        float v = state_start(&t->optim, k);
        for (int64_t c = 0; c < w; c++) dst[c] = v;
        return;
    }
    memcpy(dst, rowwise ? t->state[k] + r : t->state[k] + r * t->gstride, (size_t)w * sizeof(float));
}

/* Writes the state rows of r to their start values. */
static void reset_state_row(hx_emb_local *t, int64_t r)
{
    int ns = hx_emb_optim_nstate(t->optim.kind);
    for (int k = 0; k < ns; k++) {
        float v = state_start(&t->optim, k);
        if (t->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD) {
            t->state[k][r] = v;
            continue;
        }
        float *s = t->state[k] + r * t->gstride;
        for (int64_t c = 0; c < t->gstride; c++) s[c] = v;
    }
}

/* Row r with its initial value and start state; tmp holds gstride floats. */
static void write_initial_row(hx_emb_local *t, int64_t r, float *tmp)
{
    hx_emb_init_row(&t->init, hx_emb_local_init_of(t, r), t->base.dim, t->gstride, tmp);
    write_param_row(t, r, tmp);
    reset_state_row(t, r);
}

void hx_emb_local_init_row_as(hx_emb_local *t, int64_t r, int64_t as_row, float *tmp)
{
    hx_emb_init_row(&t->init, as_row, t->base.dim, t->gstride, tmp);
    write_param_row(t, r, tmp);
    reset_state_row(t, r);
}

bool hx_emb_local_is_cold(const hx_emb_local *t, int64_t r) { return t->lazy && !row_ready(t, r); }

void hx_emb_local_materialise(hx_emb_local *t, int64_t r, float *tmp)
{
    if (!t->lazy || row_ready(t, r)) return;
    write_initial_row(t, r, tmp);
    atomic_fetch_or_explicit(&t->ready[r >> 6], 1ull << (r & 63), memory_order_relaxed);
}

void hx_emb_local_write_row(hx_emb_local *t, int64_t r, const float *src, float *tmp)
{
    hx_emb_local_materialise(t, r, tmp);
    write_param_row(t, r, src);
}

void hx_emb_local_reset_rows(hx_emb_table *tt, const int64_t *rows, int64_t n)
{
    hx_emb_local *t = hx_emb_as_local(tt);
    if (!t) return;
    float *tmp = malloc((size_t)t->gstride * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows[i];
        if (r < 0 || r >= t->base.rows) continue;
        if (t->lazy) atomic_fetch_and_explicit(&t->ready[r >> 6], ~(1ull << (r & 63)),
                                               memory_order_relaxed);
        else if (tmp) write_initial_row(t, r, tmp);
    }
    free(tmp);
}

void hx_emb_local_init_unready(hx_emb_local *t, const uint64_t *file_ready, int nthreads)
{
    int64_t rows = t->base.rows;
#pragma omp parallel num_threads(nthreads)
    {
        float *tmp = malloc((size_t)t->gstride * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            if (tmp && !((file_ready[r >> 6] >> (r & 63)) & 1)) write_initial_row(t, r, tmp);
        free(tmp);
    }
}

/* ---- memory ------------------------------------------------------------------------- */

/* Region i of the table: 0 params, 1 and 2 state, 3 the ready bitmap. In a
 * backing file the first three sit at fixed offsets (2 MiB aligned), so
 * state of one optimizer may be mapped over the file range of another's;
 * the bitmap is always anonymous memory. */
static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t region_offset(const hx_emb_local *t, int i)
{
    size_t pb = align_up((size_t)t->base.rows * (size_t)t->stride * t->esize, HUGE_ALIGN);
    size_t sb = align_up((size_t)t->base.rows * (size_t)t->gstride * sizeof(float), HUGE_ALIGN);
    return i == 0 ? 0 : pb + (size_t)(i - 1) * sb;
}

static hx_status region_map(hx_emb_local *t, int i, size_t bytes, hx_emb_region *reg,
                            hx_emb_err *err)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    memset(reg, 0, sizeof *reg);
    if (t->mem.alloc && i < 3) { /* the params and state of a device cache's slots */
        static const char *const names[3] = {"rows", "optimizer state", "optimizer state"};
        char what[96];
        snprintf(what, sizeof what, "%s of %s", names[i], t->mem.what);
        void *p;
        hx_status st = t->mem.alloc(t->mem.ctx, bytes ? bytes : 1, what, &p);
        if (st) return hx_emb_fail(err, st, "%s", hx_last_error());
        memset(p, 0, bytes);
        *reg = (hx_emb_region){p, NULL, 0, bytes};
        return HX_OK;
    }
    if (t->backing_fd >= 0 && i < 3) {
        size_t off = region_offset(t, i), end = off + align_up(bytes, HUGE_ALIGN);
        off_t cur = lseek(t->backing_fd, 0, SEEK_END);
        if (cur < 0 || ((size_t)cur < end && ftruncate(t->backing_fd, (off_t)end) != 0))
            return hx_emb_fail(err, HX_ERR_IO, "embedding table: cannot size backing file %s to %zu bytes: %s",
                               t->backing_path, end, strerror(errno));
        size_t len = align_up(bytes, page);
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, t->backing_fd, (off_t)off);
        if (p == MAP_FAILED)
            return hx_emb_fail(err, HX_ERR_IO, "embedding table: cannot map %zu bytes of backing file %s: %s",
                               bytes, t->backing_path, strerror(errno));
        madvise(p, len, MADV_RANDOM);
        *reg = (hx_emb_region){p, p, len, bytes};
        return HX_OK;
    }
    int huge = i < 3 && t->huge;
    size_t align = huge ? HUGE_ALIGN : page;
    size_t len = align_up(bytes, align) + (huge ? HUGE_ALIGN : 0);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY,
                           "embedding table: cannot reserve %zu bytes of host memory: %s; use a "
                           "smaller table, or lazy_init with a backing_file",
                           bytes, strerror(errno));
    char *a = (char *)align_up((size_t)p, align);
    if (huge) madvise(a, align_up(bytes, HUGE_ALIGN), MADV_HUGEPAGE);
    *reg = (hx_emb_region){a, p, len, bytes};
    return HX_OK;
}

static void region_unmap(const hx_emb_local *t, hx_emb_region *reg)
{
    if (reg->map) munmap(reg->map, reg->len);
    else if (reg->ptr && t->mem.alloc) t->mem.free(t->mem.ctx, reg->ptr);
    memset(reg, 0, sizeof *reg);
}

/* ---- optimizer --------------------------------------------------------------------- */

static hx_status optim_check(const hx_emb_optim *o, hx_emb_err *err)
{
    const char *what = NULL;
    switch (o->kind) {
    case HX_EMB_OPTIM_NONE: return HX_OK;
    case HX_EMB_OPTIM_LAZY_ADAM:
        if (!(o->lr >= 0)) what = "lr must be >= 0";
        else if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
            what = "beta1 and beta2 must be in [0, 1)";
        else if (!(o->eps >= 0)) what = "eps must be >= 0";
        else if (!(o->weight_decay >= 0)) what = "weight_decay must be >= 0";
        break;
    case HX_EMB_OPTIM_ADAGRAD:
    case HX_EMB_OPTIM_ROW_ADAGRAD:
        if (!(o->lr >= 0)) what = "lr must be >= 0";
        else if (!(o->eps >= 0)) what = "eps must be >= 0";
        else if (!(o->lr_decay >= 0)) what = "lr_decay must be >= 0";
        else if (!(o->initial_accumulator >= 0)) what = "initial_accumulator must be >= 0";
        else if (!(o->weight_decay >= 0)) what = "weight_decay must be >= 0";
        break;
    case HX_EMB_OPTIM_FTRL:
        if (!(o->lr > 0)) what = "lr must be > 0";
        else if (!(o->l1 >= 0) || !(o->l2 >= 0) || !(o->l2_shrinkage >= 0))
            what = "l1, l2 and l2_shrinkage must be >= 0";
        else if (!(o->initial_accumulator >= 0)) what = "initial_accumulator must be >= 0";
        else if (o->lr_power != -0.5)
            return hx_emb_fail(err, HX_ERR_UNSUPPORTED,
                               "embedding optimizer FTRL: lr_power %g is not supported; only -0.5",
                               o->lr_power);
        break;
    default:
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding optimizer: unknown kind %d",
                           (int)o->kind);
    }
    if (what)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding optimizer %s: %s",
                           hx_emb_optim_name(o->kind), what);
    return HX_OK;
}

/* State array k at its start value: every row of an eager table; on a lazy
 * table only the rows already written (the others get it when first
 * updated). */
static void fill_state(hx_emb_local *t, int k, int nthreads)
{
    if (t->lazy) {
        int64_t words = (t->base.rows + 63) / 64;
        for (int64_t w = 0; w < words; w++) {
            uint64_t bits = atomic_load_explicit(&t->ready[w], memory_order_relaxed);
            for (; bits; bits &= bits - 1) reset_state_row(t, w * 64 + __builtin_ctzll(bits));
        }
        return;
    }
    float v = state_start(&t->optim, k), *s = t->state[k];
    int64_t n = t->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD ? t->base.rows
                                                          : t->base.rows * t->gstride;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < n; i++) s[i] = v;
}

hx_status hx_emb_local_set_optim(hx_emb_table *tt, const hx_emb_optim *optim, int nthreads,
                                 hx_emb_err *err)
{
    hx_emb_local *t = hx_emb_as_local(tt);
    if (!t) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding set_optim: not a local table");
    if (!optim) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding set_optim: optim is NULL");
    if (nthreads < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding set_optim: nthreads %d < 1", nthreads);
    hx_status st = optim_check(optim, err);
    if (st) return st;
    if (optim->kind == t->optim.kind) {
        t->optim = *optim;
        return HX_OK;
    }
    /* The new state is mapped before the old is dropped: a failure keeps the
     * table as it was. */
    int ns = hx_emb_optim_nstate(optim->kind);
    size_t bytes = optim->kind == HX_EMB_OPTIM_ROW_ADAGRAD
                       ? (size_t)t->base.rows * sizeof(float)
                       : (size_t)t->base.rows * (size_t)t->gstride * sizeof(float);
    hx_emb_region nreg[2];
    memset(nreg, 0, sizeof nreg);
    for (int k = 0; k < ns; k++) {
        st = region_map(t, 1 + k, bytes, &nreg[k], err);
        if (st) {
            for (int j = 0; j < k; j++) region_unmap(t, &nreg[j]);
            return st;
        }
    }
    for (int k = 0; k < 2; k++) {
        region_unmap(t, &t->reg[1 + k]);
        t->reg[1 + k] = nreg[k];
        t->state[k] = nreg[k].ptr;
    }
    t->optim = *optim;
    for (int k = 0; k < ns; k++) fill_state(t, k, nthreads);
    return HX_OK;
}

/* ---- create, free, stats ----------------------------------------------------------- */

hx_emb_local *hx_emb_as_local(hx_emb_table *t)
{
    return t && t->ops == &hx_emb_local_ops ? (hx_emb_local *)t : NULL;
}

static void local_free(hx_emb_table *tt)
{
    hx_emb_local *t = (hx_emb_local *)tt;
    for (int i = 0; i < 4; i++) region_unmap(t, &t->reg[i]);
    if (t->backing_fd >= 0) close(t->backing_fd);
    free(t->backing_path);
    free(t);
}

hx_status hx_emb_local_create(const hx_emb_table_config *cfg, hx_emb_table **out,
                              hx_emb_err *err)
{
    if (!out) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding table: out is NULL");
    *out = NULL;
    if (!cfg) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding table: config is NULL");
    if (cfg->rows < 1 || cfg->dim < 1 || cfg->rows > ((int64_t)1 << 40) || cfg->dim > ((int64_t)1 << 20))
        return hx_emb_fail(err, HX_ERR_SHAPE,
                           "embedding table: %lld x %lld is not a valid shape (rows in [1, 2^40], dim in [1, 2^20])",
                           (long long)cfg->rows, (long long)cfg->dim);
    if (cfg->dtype != HX_DTYPE_F32 && cfg->dtype != HX_DTYPE_F16 && cfg->dtype != HX_DTYPE_BF16)
        return hx_emb_fail(err, HX_ERR_DTYPE, "embedding table: storage dtype %s is not f32, f16 or bf16",
                           hx_emb_dtype_name(cfg->dtype));
    hx_status st = hx_emb_init_check(&cfg->init, "embedding table", err);
    if (st) return st;
    if (cfg->oob != HX_EMB_OOB_ERROR && cfg->oob != HX_EMB_OOB_ZERO)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding table: unknown out-of-range policy %d",
                           (int)cfg->oob);
    if (cfg->nthreads < 1)
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding table: nthreads %d < 1", cfg->nthreads);
    st = optim_check(&cfg->optim, err);
    if (st) return st;

    hx_emb_local *t = calloc(1, sizeof *t);
    if (!t) return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding table: out of memory");
    t->base.ops = &hx_emb_local_ops;
    t->base.rows = cfg->rows;
    t->base.dim = cfg->dim;
    t->dtype = cfg->dtype;
    t->esize = hx_k_dtype_size((hx_kdtype)cfg->dtype);
    t->stride = hx_emb_row_stride(cfg->dim, cfg->dtype);
    t->gstride = hx_emb_row_stride(cfg->dim, HX_DTYPE_F32);
    t->init = cfg->init;
    t->row_stride = cfg->row_stride;
    t->row_offset = cfg->row_offset;
    t->oob = cfg->oob;
    t->optim.kind = HX_EMB_OPTIM_NONE;
    t->lazy = cfg->lazy_init != 0;
    t->backing_fd = -1;
    if (cfg->mem) t->mem = *cfg->mem;
    size_t pbytes = (size_t)cfg->rows * (size_t)t->stride * t->esize;
    t->huge = cfg->backing_file == NULL && !cfg->mem &&
              (cfg->huge_pages > 0 || (cfg->huge_pages < 0 && pbytes >= HUGE_MIN_BYTES));
    if (cfg->backing_file) {
        t->backing_path = strdup(cfg->backing_file);
        t->backing_fd = open(cfg->backing_file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (!t->backing_path || t->backing_fd < 0) {
            st = hx_emb_fail(err, HX_ERR_IO, "embedding table: cannot create backing file %s: %s",
                             cfg->backing_file, strerror(errno));
            local_free(&t->base);
            return st;
        }
    }
    st = region_map(t, 0, pbytes, &t->reg[0], err);
    if (!st && t->lazy) st = region_map(t, 3, (size_t)((cfg->rows + 63) / 64) * 8, &t->reg[3], err);
    if (st) {
        local_free(&t->base);
        return st;
    }
    t->param = t->reg[0].ptr;
    t->ready = t->reg[3].ptr;
    if (!t->lazy) {
        int64_t rows = cfg->rows;
        int fail = 0;
#pragma omp parallel num_threads(cfg->nthreads) reduction(| : fail)
        {
            float *tmp = malloc((size_t)t->gstride * sizeof(float));
            if (!tmp) fail = 1;
#pragma omp for schedule(static)
            for (int64_t r = 0; r < rows; r++) {
                if (!tmp) continue;
                hx_emb_init_row(&t->init, hx_emb_local_init_of(t, r), t->base.dim, t->gstride, tmp);
                write_param_row(t, r, tmp);
            }
            free(tmp);
        }
        if (fail) {
            local_free(&t->base);
            return hx_emb_fail(err, HX_ERR_OUT_OF_MEMORY, "embedding table: out of memory");
        }
    }
    if (cfg->optim.kind != HX_EMB_OPTIM_NONE) {
        st = hx_emb_local_set_optim(&t->base, &cfg->optim, cfg->nthreads, err);
        if (st) {
            local_free(&t->base);
            return st;
        }
    }
    *out = &t->base;
    return HX_OK;
}

hx_status hx_emb_local_stats_get(const hx_emb_table *tt, hx_emb_local_stats *s,
                                 hx_emb_err *err)
{
    const hx_emb_local *t = hx_emb_as_local((hx_emb_table *)tt);
    if (!t || !s) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding stats: not a local table");
    s->oob_ids = atomic_load(&t->oob_count);
    if (t->lazy) {
        int64_t n = 0, words = (t->base.rows + 63) / 64;
        for (int64_t w = 0; w < words; w++)
            n += __builtin_popcountll(atomic_load_explicit(&t->ready[w], memory_order_relaxed));
        s->rows_ready = n;
    } else {
        s->rows_ready = t->base.rows;
    }
    s->bytes = t->reg[0].bytes + t->reg[1].bytes + t->reg[2].bytes + t->reg[3].bytes;
    s->huge_pages = t->huge;
    return HX_OK;
}

/* ---- the interface --------------------------------------------------------------- */

static hx_status local_lookup_rows(hx_emb_table *tt, const hx_emb_query *q, float *out,
                                   int64_t *argmax, hx_emb_err *err)
{
    hx_emb_local *t = (hx_emb_local *)tt;
    return hx_emb_local_lookup(t, q, t->oob, &t->oob_count, out, argmax, err);
}

static hx_status local_apply(hx_emb_table *tt, const hx_emb_sparse_grad *g, int64_t step,
                             int nthreads, hx_emb_err *err)
{
    hx_emb_local *t = (hx_emb_local *)tt;
    return hx_emb_local_apply(t, g, step, nthreads, t->oob, err);
}

static hx_status local_backward_update(hx_emb_table *tt, const hx_emb_query *q,
                                       const hx_emb_grad_input *gi, int64_t step,
                                       hx_emb_workspace *ws, hx_emb_err *err)
{
    hx_emb_local *t = (hx_emb_local *)tt;
    return hx_emb_local_backward_update(t, q, gi, step, t->oob, ws, err);
}

static hx_status local_save(hx_emb_table *tt, const char *path, hx_emb_err *err)
{
    return hx_emb_local_save_with((hx_emb_local *)tt, path, NULL, 0, err);
}

static hx_status local_load(hx_emb_table *tt, const char *path, hx_emb_err *err)
{
    return hx_emb_local_load_with((hx_emb_local *)tt, path, NULL, NULL, err);
}

const hx_emb_ops hx_emb_local_ops = {
    "local", local_lookup_rows, local_apply, local_backward_update, local_save, local_load, local_free,
};

/* ---- calls through the interface ----------------------------------------------------- */

#define NEED_TABLE(t, what)                                                                 \
    if (!(t) || !(t)->ops)                                                                  \
        return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding %s: table is NULL", what)

hx_status hx_emb_table_lookup(hx_emb_table *t, const hx_emb_query *q, float *out,
                              int64_t *argmax, hx_emb_err *err)
{
    NEED_TABLE(t, "lookup");
    return t->ops->lookup_rows(t, q, out, argmax, err);
}

hx_status hx_emb_table_apply(hx_emb_table *t, const hx_emb_sparse_grad *g, int64_t step,
                             int nthreads, hx_emb_err *err)
{
    NEED_TABLE(t, "update");
    return t->ops->apply_sparse_update(t, g, step, nthreads, err);
}

hx_status hx_emb_table_backward_update(hx_emb_table *t, const hx_emb_query *q,
                                       const hx_emb_grad_input *gi, int64_t step,
                                       hx_emb_workspace *ws, hx_emb_err *err)
{
    NEED_TABLE(t, "backward_update");
    return t->ops->backward_update(t, q, gi, step, ws, err);
}

hx_status hx_emb_table_save(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    NEED_TABLE(t, "save");
    if (!path) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding save: path is NULL");
    return t->ops->save(t, path, err);
}

hx_status hx_emb_table_load(hx_emb_table *t, const char *path, hx_emb_err *err)
{
    NEED_TABLE(t, "load");
    if (!path) return hx_emb_fail(err, HX_ERR_INVALID_ARGUMENT, "embedding load: path is NULL");
    return t->ops->load(t, path, err);
}

void hx_emb_table_free(hx_emb_table *t)
{
    if (t && t->ops) t->ops->free(t);
}
