/* The host update threads pinned to cores (hx_session_config
 * .pin_update_threads). At session creation the cores this process may
 * run on (sched_getaffinity) are dealt out over the data-parallel ranks
 * that may run on them too (session/dp_check.c: the same host and mask):
 * local rank L of S takes the k = cores / S cores from L*k on,
 * and its n_threads update slots take them in order (slot j: its core
 * j mod k). With fewer cores than ranks (k = 0) each rank takes the one
 * core L mod cores, and with fewer than n_threads per rank slots share
 * cores: each said once, to stderr.
 *
 * Around each dense update on the host (hx__host_launch), every thread of
 * the team that runs it (the lane's thread and its OpenMP threads, a team
 * of the launch's nthreads as the kernel's own) takes a free slot, binds
 * itself to the slot's core, and after the kernel records what it saw
 * (sched_getcpu, its affinity read back), puts its previous mask back and
 * frees the slot. The OpenMP runtimes give a team's thread i the same
 * pooled thread in consecutive regions of one size from one thread, so the
 * kernel's region between the two runs on the bound threads. Slots make
 * teams that update at once (several lanes) take different cores: the
 * budget lets no more than n_threads threads compute at once. */
#define _GNU_SOURCE
#include "scheduler/scheduler.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hx_pin {
    pthread_mutex_t mu;
    int n;           /* slots: the session's n_threads */
    int *core;       /* per slot */
    int *users;      /* per slot: threads holding it now */
    hx_pin_seen *seen;
};

/* This thread's slot while it runs an update (-1: none) and the mask it
 * had before. */
static _Thread_local int my_slot = -1;
static _Thread_local cpu_set_t my_mask;
static _Thread_local bool my_bound;

/* The allowed cores, in order: *n of them (at least 1). */
static int *allowed_cores(int *n)
{
    cpu_set_t set;
    int count = 0, *cores = NULL;
    if (sched_getaffinity(0, sizeof set, &set) == 0) count = CPU_COUNT(&set);
    cores = malloc(sizeof *cores * (size_t)(count > 0 ? count : 1));
    if (!cores) return NULL;
    if (count <= 0) { /* no mask to read: this thread's core alone */
        int c = sched_getcpu();
        cores[0] = c >= 0 ? c : 0;
        *n = 1;
        return cores;
    }
    int k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < count; c++)
        if (CPU_ISSET(c, &set)) cores[k++] = c;
    *n = k;
    return cores;
}

hx_status hx__pin_create(int nthreads, int local_rank, int local_size, int rank, hx_pin **out)
{
    *out = NULL;
    hx_pin *p = calloc(1, sizeof *p);
    int n_cores = 0, *cores = allowed_cores(&n_cores);
    if (p) {
        pthread_mutex_init(&p->mu, NULL);
        p->n = nthreads;
        p->core = calloc((size_t)nthreads, sizeof *p->core);
        p->users = calloc((size_t)nthreads, sizeof *p->users);
        p->seen = calloc((size_t)nthreads, sizeof *p->seen);
    }
    if (!p || !cores || !p->core || !p->users || !p->seen) {
        free(cores);
        hx__pin_free(p);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_session_create: out of host memory");
    }
    int k = n_cores / local_size, first = local_rank * k;
    if (k == 0) {
        k = 1;
        first = local_rank % n_cores;
        fprintf(stderr, "hetex pin: rank %d: %d ranks on the same %d allowed cores: too few for a "
                "core each; local rank %d shares core %d with the ranks %d apart\n", rank,
                local_size, n_cores, local_rank, cores[first], n_cores);
    } else if (k < nthreads) {
        fprintf(stderr, "hetex pin: rank %d: %d update threads on the %d cores of this rank's share "
                "(%d allowed, shared by %d ranks): threads share cores (n_threads %d "
                "would give each its own)\n", rank, nthreads, k, n_cores, local_size, k);
    }
    for (int j = 0; j < nthreads; j++) p->core[j] = cores[first + j % k];
    for (int j = 0; j < nthreads; j++) atomic_store(&p->seen[j].cpu, -1);
    if (hx__debug("pin")) { /* one write: the ranks' lines do not interleave */
        char line[1024];
        size_t at = (size_t)snprintf(line, sizeof line, "hetex pin: rank %d (local rank %d of %d, %d "
                                     "cores allowed): update threads", rank, local_rank, local_size, n_cores);
        for (int j = 0; j < nthreads && at < sizeof line; j++)
            at += (size_t)snprintf(line + at, sizeof line - at, "%s %d -> core %d", j ? "," : "", j, p->core[j]);
        fprintf(stderr, "%s\n", line);
    }
    free(cores);
    *out = p;
    return HX_OK;
}

void hx__pin_free(hx_pin *p)
{
    if (!p) return;
    pthread_mutex_destroy(&p->mu);
    free(p->core);
    free(p->users);
    free(p->seen);
    free(p);
}

int hx__pin_core(const hx_pin *p, int slot) { return p->core[slot]; }
int hx__pin_slots(const hx_pin *p) { return p->n; }
const hx_pin_seen *hx__pin_seen(const hx_pin *p, int slot) { return &p->seen[slot]; }

/* The least used slot (a free one while no more threads update than there
 * are slots). */
static int take_slot(hx_pin *p)
{
    pthread_mutex_lock(&p->mu);
    int best = 0;
    for (int j = 1; j < p->n; j++)
        if (p->users[j] < p->users[best]) best = j;
    p->users[best]++;
    pthread_mutex_unlock(&p->mu);
    return best;
}

static void bind_self(hx_pin *p)
{
    my_slot = take_slot(p);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(p->core[my_slot], &one);
    my_bound = pthread_getaffinity_np(pthread_self(), sizeof my_mask, &my_mask) == 0 &&
               pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
}

static void unbind_self(hx_pin *p)
{
    if (my_slot < 0) return; /* not in the first region's team */
    hx_pin_seen *s = &p->seen[my_slot];
    cpu_set_t now;
    int first = -1, count = 0;
    if (pthread_getaffinity_np(pthread_self(), sizeof now, &now) == 0) {
        count = CPU_COUNT(&now);
        for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
            if (CPU_ISSET(c, &now)) first = c;
    }
    atomic_store_explicit(&s->cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store_explicit(&s->mask_first, first, memory_order_relaxed);
    atomic_store_explicit(&s->mask_count, count, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->runs, 1, memory_order_relaxed);
    if (my_bound) pthread_setaffinity_np(pthread_self(), sizeof my_mask, &my_mask);
    pthread_mutex_lock(&p->mu);
    p->users[my_slot]--;
    pthread_mutex_unlock(&p->mu);
    my_slot = -1;
    my_bound = false;
}

void hx__pin_enter(hx_pin *p, int nthreads)
{
#pragma omp parallel num_threads(nthreads)
    bind_self(p);
}

void hx__pin_leave(hx_pin *p, int nthreads)
{
#pragma omp parallel num_threads(nthreads)
    unbind_self(p);
}
