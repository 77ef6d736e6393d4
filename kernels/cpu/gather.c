/* Rows by id: gather (embedding lookup) and its backward, scatter-add. */
#include <stdint.h>
#include <string.h>

#include "hx_kinternal.h"

// out (n, row_bytes) = table[ids[lo:hi]]
static void gather_rows(char *out, const char *table, size_t row_bytes, const void *ids,
                        hx_kdtype id_dt, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++) {
        int64_t r = hx_k_id_at(ids, id_dt, i);
        memcpy(out + i * (int64_t)row_bytes, table + r * (int64_t)row_bytes, row_bytes);
    }
}

int hx_k_gather_rows(void *out, const void *table, int64_t rows, size_t row_bytes,
                     const void *ids, hx_kdtype id_dt, int64_t n, int nthreads, int64_t *bad_pos)
{
    if (hx_k_check_ids(ids, id_dt, n, rows, bad_pos)) return -1;
    /* Parallel when the bytes moved are those of HX_K_PARALLEL_MIN floats. */
    if (!hx_k_go_parallel(n * (int64_t)row_bytes / 4, nthreads)) {
        gather_rows(out, table, row_bytes, ids, id_dt, 0, n);
        return 0;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 1, &lo, &hi);
        gather_rows(out, table, row_bytes, ids, id_dt, lo, hi);
    }
    return 0;
}

// dtable rows [r0, r1) (rows, dim): zero, then += dy[i] for every i with ids[i]
// in [r0, r1), in order of i
static void scatter_add_rows(float *dtable, int64_t dim, const float *dy, const void *ids,
                             hx_kdtype id_dt, int64_t n, int64_t r0, int64_t r1)
{
    memset(dtable + r0 * dim, 0, (size_t)((r1 - r0) * dim) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        int64_t r = hx_k_id_at(ids, id_dt, i);
        if (r < r0 || r >= r1) continue;
        float *dst = dtable + r * dim;
        const float *src = dy + i * dim;
        for (int64_t j = 0; j < dim; j++) dst[j] += src[j];
    }
}

/* Each thread owns a slice of the table's rows and scans all ids, adding
 * only those that land in its slice: every row sums its updates in order of
 * i on one thread, whatever the thread count. */
int hx_k_scatter_add_rows_f32(float *dtable, int64_t rows, int64_t dim, const float *dy,
                              const void *ids, hx_kdtype id_dt, int64_t n, int nthreads,
                              int64_t *bad_pos)
{
    if (hx_k_check_ids(ids, id_dt, n, rows, bad_pos)) return -1;
    if (!hx_k_go_parallel((rows > n ? rows : n) * dim, nthreads)) {
        scatter_add_rows(dtable, dim, dy, ids, id_dt, n, 0, rows);
        return 0;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t r0, r1;
        hx_k_thread_slice(rows, 1, &r0, &r1);
        scatter_add_rows(dtable, dim, dy, ids, id_dt, n, r0, r1);
    }
    return 0;
}
