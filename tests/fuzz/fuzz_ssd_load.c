/* libFuzzer target: a table on disk (ssd_path) over any bytes. The input is
 * a little-endian u32 n, then n bytes that become the row store's file,
 * then the bytes of a checkpoint of it: the table is created over the
 * store (a refused store is fine: nothing else may happen), six of its
 * rows read through a cache of four (so reads evict), then the
 * checkpoint loaded; a refused load must leave the rows as they were, an
 * accepted one must give rows and state that read and write. Seeds: a
 * store and checkpoint hetex wrote after three training runs (seeds.c). */
#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

enum { NIDS = 3 };

/* Rows of a then b (three each: the cache holds four, so b evicts). */
static hx_status read_two(hx_embedding_table *t, const int64_t *a, const int64_t *b, float *out)
{
    hx_status st = hx_embedding_table_read_rows(t, a, NIDS, out);
    return st ? st : hx_embedding_table_read_rows(t, b, NIDS, out + NIDS * FUZZ_TABLE_DIM);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    if (n > size - 4) n = size - 4;
    hx_status st;
    hx_embedding_table *t = fuzz_ssd_table_make(fuzz_file("ssd_store", data + 4, n), &st);
    if (!t) return 0;
    const int64_t a[NIDS] = {0, 3, FUZZ_TABLE_ROWS - 1}, b[NIDS] = {5, 11, 2};
    float before[2 * NIDS * FUZZ_TABLE_DIM], rows[2 * NIDS * FUZZ_TABLE_DIM], state[NIDS * FUZZ_TABLE_DIM];
    bool read = read_two(t, a, b, before) == HX_OK;
    const char *ckpt = fuzz_file("ssd_ckpt", data + 4 + n, size - 4 - n);
    if (hx_embedding_table_load(t, ckpt)) {
        if (read && (read_two(t, a, b, rows) || memcmp(rows, before, sizeof rows))) abort();
    } else {
        hx_embedding_stats es;
        read_two(t, a, b, rows);
        hx_embedding_table_read_state(t, 0, a, NIDS, state);
        hx_embedding_table_read_state(t, 1, b, NIDS, state);
        hx_embedding_table_stats(t, &es);
        hx_embedding_table_write_rows(t, a, NIDS, rows);
    }
    if (hx_embedding_table_free(t)) abort();
    return 0;
}
