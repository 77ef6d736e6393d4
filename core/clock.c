/* The library's one clock: see core.h. */
#include "core/core.h"

#include <errno.h>
#include <time.h>

double hx__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double hx__sleep_until(double end)
{
    double now = hx__now();
    if (now >= end) return now;
    struct timespec ts;
    double whole = (double)(long long)end;
    ts.tv_sec = (time_t)whole;
    ts.tv_nsec = (long)((end - whole) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
    return end;
}
