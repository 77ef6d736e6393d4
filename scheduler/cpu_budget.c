/* Host core budget: see cpu_budget.h. */
#include "scheduler/cpu_budget.h"

#include <stdbool.h>
#include <time.h>

void hx__budget_init(hx_cpu_budget *b, int total)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->freed, NULL);
    b->total = b->free = total > 0 ? total : 1;
    b->waiters = 0;
}

void hx__budget_destroy(hx_cpu_budget *b)
{
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->freed);
}

static bool try_take(hx_cpu_budget *b, int n)
{
    int f = __atomic_load_n(&b->free, __ATOMIC_RELAXED);
    while (f >= n)
        if (__atomic_compare_exchange_n(&b->free, &f, f - n, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return true;
    return false;
}

int hx__budget_take(hx_cpu_budget *b, int n)
{
    if (!b) return 0;
    if (n > b->total) n = b->total;
    if (n < 1) n = 1;
    if (try_take(b, n)) return n;
    pthread_mutex_lock(&b->mu);
    __atomic_fetch_add(&b->waiters, 1, __ATOMIC_RELAXED);
    while (!try_take(b, n)) { /* the timeout bounds a wakeup missed between check and wait */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&b->freed, &b->mu, &ts);
    }
    __atomic_fetch_sub(&b->waiters, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&b->mu);
    return n;
}

void hx__budget_give(hx_cpu_budget *b, int n)
{
    if (!b || !n) return;
    __atomic_fetch_add(&b->free, n, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&b->waiters, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&b->mu);
    pthread_cond_broadcast(&b->freed);
    pthread_mutex_unlock(&b->mu);
}
