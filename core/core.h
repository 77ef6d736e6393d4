/* What every folder of the library shares: the thread-local error message
 * behind hx_last_error(), dtype facts, the HX_DEBUG switches and the clock.
 * This is core/'s one internal header; it knows nothing but the public
 * header. */
#ifndef HX_CORE_H
#define HX_CORE_H

#include "hetex.h"

#include <stdbool.h>

/* Errors: set the thread-local message (at most HX_ERROR_LEN bytes with
 * its terminator); return the status (or NULL). */
#define HX_ERROR_LEN 1024
hx_status hx__error(hx_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hx__clear_error(void);

bool hx__is_float(hx_dtype dt);

/* HX_DEBUG contains `what` (e.g. "placement"). */
bool hx__debug(const char *what);

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): the time base of the
 * trace and of the emu device's simulated costs. */
double hx__now(void);

#endif
