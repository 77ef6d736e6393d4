/* The session's host cores as a counted budget. Every lane that computes on
 * host cores (host worker threads running CPU subgraphs, emu streams running
 * kernels or memcpys) takes its thread count from the budget before it
 * computes and gives it back after, so lanes that run at the same time never
 * use more cores than the session's n_threads. Lanes never hold cores while
 * they wait for an event, so waiting cannot deadlock.
 *
 * The count is a relaxed atomic, so taking and giving cores orders nothing
 * (a race between lanes stays visible to ThreadSanitizer); a lane short of
 * cores sleeps on a condition variable, woken by give or after 1 ms. */
#ifndef HX_CPU_BUDGET_H
#define HX_CPU_BUDGET_H

#include <pthread.h>

typedef struct hx_cpu_budget {
    pthread_mutex_t mu;
    pthread_cond_t freed;
    int total;
    int free, waiters; /* atomics */
} hx_cpu_budget;

void hx__budget_init(hx_cpu_budget *b, int total);
void hx__budget_destroy(hx_cpu_budget *b);
/* Takes min(n, total) cores (at least 1), waiting until they are free;
 * returns how many it took (give exactly those back). A NULL budget takes
 * nothing. */
int hx__budget_take(hx_cpu_budget *b, int n);
void hx__budget_give(hx_cpu_budget *b, int n);

#endif
