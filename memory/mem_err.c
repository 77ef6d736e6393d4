/* Error messages of memory/ (see mem_common.h). */
#include "memory/mem_common.h"

#include <stdarg.h>
#include <stdio.h>

hx_status hx__mem_fail(hx_mem_err *err, hx_status st, const char *fmt, ...)
{
    if (!err) return st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return st;
}
