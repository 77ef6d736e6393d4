/* The library's one clock: see core.h. */
#include "core/core.h"

#include <time.h>

double hx__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
