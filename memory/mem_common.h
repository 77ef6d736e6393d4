/* What every file of memory/ shares: error messages and size arithmetic.
 *
 * memory/ sits below the scheduler and knows no graph: it manages bytes.
 * Errors follow the embedding room's pattern: a call that can fail returns
 * hx_status and writes what failed, where and how to fix it to err->msg
 * (err may be NULL); the scheduler's public wrappers copy the message into
 * hx_last_error(). */
#ifndef HX_MEM_COMMON_H
#define HX_MEM_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "hetex.h"

#define HX_MEM_ERR_LEN 1024
typedef struct hx_mem_err {
    char msg[HX_MEM_ERR_LEN];
} hx_mem_err;

/* Writes the message to err (when not NULL) and returns st. */
hx_status hx__mem_fail(hx_mem_err *err, hx_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define HX_MIB ((size_t)1 << 20)

/* n rounded up to a multiple of a (a > 0); SIZE_MAX when that overflows. */
static inline size_t hx__mem_round(size_t n, size_t a)
{
    size_t r = n % a;
    if (!r) return n;
    return n > SIZE_MAX - (a - r) ? SIZE_MAX : n + (a - r);
}

#endif
