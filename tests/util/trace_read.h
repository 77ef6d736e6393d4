/* Reads back the Chrome trace JSON hetex writes (scheduler/trace.c): lane
 * names from thread_name metadata and every "X" event, for the trace and
 * concurrency tests. Header-only: each test includes it once. */
#ifndef HX_TRACE_READ_H
#define HX_TRACE_READ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tr_event {
    char name[64], tensor[96], role[64];
    int tid;
    double ts, dur; /* microseconds */
    long long bytes;
} tr_event;

typedef struct tr_trace {
    tr_event *ev;
    int n;
    char lane[64][64]; /* lane[tid] */
    long long dropped;
} tr_trace;

/* The string value after `key` in s (up to the closing quote) into out,
 * with \" and \\ unescaped. */
static int tr_str(const char *s, const char *key, char *out, size_t n)
{
    const char *p = strstr(s, key);
    if (!p) return 0;
    p += strlen(key);
    size_t i = 0;
    while (*p && *p != '"' && i + 1 < n) {
        if (*p == '\\' && p[1]) p++;
        out[i++] = *p++;
    }
    out[i] = 0;
    return 1;
}

/* Parses path; returns 0 on success. */
static int tr_read(const char *path, tr_trace *t)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    buf[got] = 0;
    if (strncmp(buf, "{\"traceEvents\":[", 16) || !strstr(buf, "\"otherData\":{\"dropped_events\":")) {
        free(buf);
        return -1;
    }
    sscanf(strstr(buf, "\"dropped_events\":") + 17, "%lld", &t->dropped);
    int cap = 1024;
    t->ev = malloc(sizeof *t->ev * cap);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        int tid = -1;
        char *tp = strstr(line, "\"tid\":");
        if (tp) sscanf(tp + 6, "%d", &tid);
        if (strstr(line, "\"ph\":\"M\"") && tid >= 0 && tid < 64) {
            tr_str(line, "\"args\":{\"name\":\"", t->lane[tid], sizeof t->lane[tid]);
            continue;
        }
        if (!strstr(line, "\"ph\":\"X\"")) continue;
        if (t->n == cap) t->ev = realloc(t->ev, sizeof *t->ev * (cap *= 2));
        tr_event *e = &t->ev[t->n++];
        memset(e, 0, sizeof *e);
        e->tid = tid;
        tr_str(line, "{\"name\":\"", e->name, sizeof e->name);
        tr_str(line, "\"tensor\":\"", e->tensor, sizeof e->tensor);
        tr_str(line, "\"role\":\"", e->role, sizeof e->role);
        sscanf(strstr(line, "\"ts\":") + 5, "%lf", &e->ts);
        sscanf(strstr(line, "\"dur\":") + 6, "%lf", &e->dur);
        char *bp = strstr(line, "\"bytes\":");
        if (bp) sscanf(bp + 8, "%lld", &e->bytes);
    }
    free(buf);
    return 0;
}

static void tr_free(tr_trace *t) { free(t->ev); }

#endif
