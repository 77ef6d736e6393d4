/* Chrome trace recording: see trace.h. */
#include "scheduler/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct trace_event {
    const char *name, *tensor, *role;
    size_t bytes;
    double t0, t1;
} trace_event;

struct hx_trace_lane {
    hx_trace_lane *next;
    char *name;
    int tid;
    trace_event *ev;
    size_t n, cap;
    size_t dropped;
};

struct hx_trace {
    char *path;
    double origin;
    pthread_mutex_t mu;
    hx_trace_lane *lanes, **tail;
    int n_lanes;
};

hx_status hx__trace_create(const char *path, hx_trace **out)
{
    hx_trace *t = calloc(1, sizeof *t);
    if (t) t->path = strdup(path);
    if (!t || !t->path) {
        free(t);
        *out = NULL;
        return hx__error(HX_ERR_OUT_OF_MEMORY, "trace: out of host memory");
    }
    t->origin = hx__now();
    t->tail = &t->lanes;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return HX_OK;
}

void hx__trace_free(hx_trace *t)
{
    if (!t) return;
    for (hx_trace_lane *l = t->lanes, *next; l; l = next) {
        next = l->next;
        free(l->name);
        free(l->ev);
        free(l);
    }
    pthread_mutex_destroy(&t->mu);
    free(t->path);
    free(t);
}

hx_trace_lane *hx__trace_lane(hx_trace *t, const char *name)
{
    if (!t) return NULL;
    hx_trace_lane *l = calloc(1, sizeof *l);
    if (l) l->name = strdup(name);
    if (!l || !l->name) {
        free(l);
        return NULL;
    }
    pthread_mutex_lock(&t->mu);
    l->tid = ++t->n_lanes;
    *t->tail = l;
    t->tail = &l->next;
    pthread_mutex_unlock(&t->mu);
    return l;
}

void hx__trace_event(hx_trace_lane *l, const char *name, const char *tensor, size_t bytes,
                     double t0, double t1)
{
    hx__trace_copy(l, name, tensor, NULL, bytes, t0, t1);
}

void hx__trace_copy(hx_trace_lane *l, const char *name, const char *tensor, const char *role,
                    size_t bytes, double t0, double t1)
{
    if (!l) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        trace_event *ev = l->cap < HX_TRACE_LANE_CAP ? realloc(l->ev, sizeof *ev * cap) : NULL;
        if (!ev) {
            l->dropped++;
            return;
        }
        l->ev = ev;
        l->cap = cap;
    }
    l->ev[l->n++] = (trace_event){name, tensor, role, bytes, t0, t1};
}

/* A JSON string body: quotes, backslashes and control characters escaped. */
static void put_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

hx_status hx__trace_write(hx_trace *t)
{
    if (!t) return HX_OK;
    size_t plen = strlen(t->path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return hx__error(HX_ERR_OUT_OF_MEMORY, "trace: out of host memory");
    memcpy(tmp, t->path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        hx_status st = hx__error(HX_ERR_IO, "trace: cannot create '%s': %s (set HX_TRACE or "
                                 "trace_path to a writable file)", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    pthread_mutex_lock(&t->mu);
    size_t dropped = 0;
    fprintf(f, "{\"traceEvents\":[\n");
    bool first = true;
    for (hx_trace_lane *l = t->lanes; l; l = l->next) {
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"",
                first ? "" : ",\n", l->tid);
        put_str(f, l->name);
        fprintf(f, "\"}}");
        first = false;
        dropped += l->dropped;
        for (size_t i = 0; i < l->n; i++) {
            const trace_event *e = &l->ev[i];
            fprintf(f, ",\n{\"name\":\"");
            put_str(f, e->name);
            fprintf(f, "\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{",
                    l->tid, (e->t0 - t->origin) * 1e6, (e->t1 - e->t0) * 1e6);
            if (e->tensor) {
                fprintf(f, "\"tensor\":\"");
                put_str(f, e->tensor);
                fprintf(f, "\"%s", e->bytes || e->role ? "," : "");
            }
            if (e->role) {
                fprintf(f, "\"role\":\"");
                put_str(f, e->role);
                fprintf(f, "\"%s", e->bytes ? "," : "");
            }
            if (e->bytes) fprintf(f, "\"bytes\":%zu", e->bytes);
            fprintf(f, "}}");
        }
    }
    pthread_mutex_unlock(&t->mu);
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":%zu}}\n", dropped);
    hx_status st = HX_OK;
    if (ferror(f) | fclose(f))
        st = hx__error(HX_ERR_IO, "trace: writing '%s' failed (disk full?)", tmp);
    else if (rename(tmp, t->path))
        st = hx__error(HX_ERR_IO, "trace: cannot rename '%s' to '%s': %s", tmp, t->path,
                       strerror(errno));
    if (st) remove(tmp);
    free(tmp);
    return st;
}
