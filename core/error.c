/* The library's one thread-local error message (hx_last_error), status
 * names and the version. */
#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[HX_ERROR_LEN];
static _Thread_local hx_status last_status; /* the status last_error was set with */

const char *hx_last_error(void) { return last_error; }

hx_status hx_last_status(void) { return last_status; }

void hx__clear_error(void)
{
    last_error[0] = 0;
    last_status = HX_OK;
}

hx_status hx__error(hx_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    last_status = st;
    return st;
}

const char *hx_status_name(hx_status st)
{
    static const char *names[] = {
        "HX_OK", "HX_ERR_INVALID_ARGUMENT", "HX_ERR_SHAPE", "HX_ERR_DTYPE", "HX_ERR_NOT_FOUND",
        "HX_ERR_INDEX", "HX_ERR_OUT_OF_MEMORY", "HX_ERR_DEVICE_OOM", "HX_ERR_NO_KERNEL",
        "HX_ERR_NUMERIC", "HX_ERR_IO", "HX_ERR_CORRUPT", "HX_ERR_STATE", "HX_ERR_UNSUPPORTED",
        "HX_ERR_INTERNAL", "HX_ERR_COMM"};
    if ((unsigned)st >= sizeof names / sizeof names[0]) return "HX_ERR_(unknown)";
    return names[st];
}

const char *hx_version(void) { return "0.1.0"; }
