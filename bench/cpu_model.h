/* For the benchmarks' machine lines: the CPU's name as /proc/cpuinfo's
 * first "model name" gives it ("unknown" where there is none), without
 * quotes so that it can go into JSON as is. */
#ifndef HX_BENCH_CPU_MODEL_H
#define HX_BENCH_CPU_MODEL_H

#include <stdio.h>
#include <string.h>

static inline void bench_cpu_model(char *model, size_t n)
{
    char line[256];
    snprintf(model, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            size_t k = 0;
            for (c += 2; *c && *c != '\n' && *c != '"' && k + 1 < n; c++) model[k++] = *c;
            model[k] = 0;
            break;
        }
    }
    fclose(f);
}

#endif
