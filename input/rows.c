/* Row tables: the struct-of-arrays storage behind batches, parsed blocks and
 * the shuffle buffer. */
#include "input/input.h"

#include <stdlib.h>
#include <string.h>

void hx__rows_init(hx__rows *r, int nn, int nc)
{
    memset(r, 0, sizeof *r);
    r->nn = nn;
    r->nc = nc;
}

static hx_status grow(void **p, int64_t cap, size_t elem)
{
    if (!elem) return HX_OK;
    void *q = realloc(*p, (size_t)cap * elem);
    if (!q) return HX_ERR_OUT_OF_MEMORY;
    *p = q;
    return HX_OK;
}

hx_status hx__rows_reserve(hx__rows *r, int64_t cap)
{
    if (cap <= r->cap) return HX_OK;
    int64_t c = r->cap ? r->cap : 64;
    while (c < cap) c *= 2;
    if (grow((void **)&r->labels, c, sizeof(float)) ||
        grow((void **)&r->numeric, c, sizeof(float) * (size_t)r->nn) ||
        grow((void **)&r->missing, c, (size_t)r->nn) ||
        grow((void **)&r->cat, c, sizeof(int64_t) * (size_t)r->nc))
        return hx__error(HX_ERR_OUT_OF_MEMORY, "data input: out of host memory for %lld rows",
                         (long long)c);
    r->cap = c;
    return HX_OK;
}

void hx__rows_free(hx__rows *r)
{
    free(r->labels);
    free(r->numeric);
    free(r->missing);
    free(r->cat);
    hx__rows_init(r, r->nn, r->nc);
}

size_t hx__rows_bytes(const hx__rows *r)
{
    return (size_t)r->cap * (sizeof(float) * (1 + (size_t)r->nn) + (size_t)r->nn +
                             sizeof(int64_t) * (size_t)r->nc);
}

void hx__rows_copy(hx__rows *dst, int64_t di, const hx__rows *src, int64_t si, int64_t count)
{
    if (count <= 0) return;
    size_t nn = (size_t)src->nn, nc = (size_t)src->nc;
    memcpy(dst->labels + di, src->labels + si, (size_t)count * sizeof(float));
    if (nn) {
        memcpy(dst->numeric + (size_t)di * nn, src->numeric + (size_t)si * nn,
               (size_t)count * nn * sizeof(float));
        memcpy(dst->missing + (size_t)di * nn, src->missing + (size_t)si * nn, (size_t)count * nn);
    }
    if (nc)
        memcpy(dst->cat + (size_t)di * nc, src->cat + (size_t)si * nc,
               (size_t)count * nc * sizeof(int64_t));
}

hx_batch hx__rows_batch(const hx__rows *r)
{
    hx_batch b = {r->n, r->nn, r->nc, r->labels, r->numeric, r->missing, r->cat};
    return b;
}
