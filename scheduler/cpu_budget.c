/* Host core budget: see cpu_budget.h. */
#include "scheduler/cpu_budget.h"

void hx__budget_init(hx_cpu_budget *b, int total)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->freed, NULL);
    b->total = b->free = total > 0 ? total : 1;
}

void hx__budget_destroy(hx_cpu_budget *b)
{
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->freed);
}

int hx__budget_take(hx_cpu_budget *b, int n)
{
    if (!b) return 0;
    if (n > b->total) n = b->total;
    if (n < 1) n = 1;
    pthread_mutex_lock(&b->mu);
    while (b->free < n) pthread_cond_wait(&b->freed, &b->mu);
    b->free -= n;
    pthread_mutex_unlock(&b->mu);
    return n;
}

void hx__budget_give(hx_cpu_budget *b, int n)
{
    if (!b || !n) return;
    pthread_mutex_lock(&b->mu);
    b->free += n;
    pthread_cond_broadcast(&b->freed);
    pthread_mutex_unlock(&b->mu);
}
