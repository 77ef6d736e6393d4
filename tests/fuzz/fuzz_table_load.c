/* libFuzzer target: hx_embedding_table_load of any bytes into one of the
 * tables of fuzz_common.c (the first byte picks: a lazy f16 ROWS table, an
 * f32 MODULO table, a DYNAMIC table whose file holds its id map), then
 * reads of its rows, state and stats and a write of rows. A refused load
 * must leave the table as it was. Seeds: files those tables saved after a
 * few training runs (seeds.c), behind their kind byte. */
#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

enum { NIDS = 6 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    hx_embedding_table *t = fuzz_table_make(data[0] % FUZZ_TABLE_KINDS);
    const int64_t ids[NIDS] = {0, 3, FUZZ_TABLE_ROWS - 1, 5, 11, 2};
    float before[NIDS * FUZZ_TABLE_DIM], rows[NIDS * FUZZ_TABLE_DIM], state[NIDS * FUZZ_TABLE_DIM];
    if (hx_embedding_table_read_rows(t, ids, NIDS, before)) abort();
    const char *path = fuzz_file("table", data + 1, size - 1);
    if (hx_embedding_table_load(t, path)) {
        if (hx_embedding_table_read_rows(t, ids, NIDS, rows) || memcmp(rows, before, sizeof rows)) abort();
    } else {
        hx_embedding_stats st;
        hx_embedding_table_read_rows(t, ids, NIDS, rows);
        hx_embedding_table_read_state(t, 0, ids, NIDS, state);
        hx_embedding_table_read_state(t, 1, ids, NIDS, state);
        hx_embedding_table_stats(t, &st);
        hx_embedding_table_write_rows(t, ids, NIDS, before);
    }
    if (hx_embedding_table_free(t)) abort();
    return 0;
}
