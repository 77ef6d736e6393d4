/* Reader throughput: MB/s parsing data/adult/adult.data and a generated
 * Criteo-schema TSV at 1, 2 and 4 parser threads, against a ceiling
 * measured in the same run: reading the same file in the same blocks and
 * finding its line ends (memchr) on one thread, no parsing. One JSON
 * object per case; the best of `reps` runs (files in the page cache).
 *
 *   bench_reader [criteo_rows (200000)] [reps (3)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hetex.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds to read the file in 1 MiB blocks and count its lines. */
static double scan_seconds(const char *path, long long *lines)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    double t0 = now();
    size_t n;
    *lines = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (char *p = buf, *e = buf + n; (p = memchr(p, '\n', (size_t)(e - p))); p++) ++*lines;
    double t = now() - t0;
    fclose(f);
    return t;
}

static double read_seconds(const char *path, const hx_reader_config *c, long long *rows, long long *bytes)
{
    hx_reader *r;
    double t0 = now();
    if (hx_reader_open(path, c, &r) != HX_OK) {
        fprintf(stderr, "bench_reader: %s\n", hx_last_error());
        exit(1);
    }
    const hx_batch *b;
    *rows = 0;
    while (hx_reader_next(r, &b) == HX_OK && b) *rows += b->n;
    double t = now() - t0;
    hx_reader_stats st;
    hx_reader_stats_get(r, &st);
    *bytes = st.bytes;
    hx_reader_close(r);
    return t;
}

static void bench_file(const char *name, const char *path, hx_reader_config c, int reps)
{
    long long lines = 0, rows = 0, bytes = 0;
    double ceiling = 1e30;
    for (int i = 0; i < reps; i++) {
        double t = scan_seconds(path, &lines);
        if (t >= 0 && t < ceiling) ceiling = t;
    }
    int threads[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        c.n_threads = threads[k];
        double best = 1e30;
        for (int i = 0; i < reps; i++) {
            double t = read_seconds(path, &c, &rows, &bytes);
            if (t < best) best = t;
        }
        double mb = (double)bytes / 1e6;
        printf("{\"bench\":\"reader\",\"case\":\"%s\",\"threads\":%d,\"cores\":%ld,\"bytes\":%lld,\"rows\":%lld,"
               "\"seconds\":%.4f,\"mb_per_s\":%.1f,\"rows_per_s\":%.0f,\"ceiling\":\"fread+memchr lines, 1 thread\","
               "\"ceiling_mb_per_s\":%.1f,\"ratio_to_ceiling\":%.3f}\n",
               name, threads[k], sysconf(_SC_NPROCESSORS_ONLN), bytes, rows, best, mb / best, (double)rows / best,
               mb / ceiling, ceiling / best);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    long long criteo_rows = argc > 1 ? atoll(argv[1]) : 200000;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    const char *src = getenv("HX_TEST_SRC");
    char adult[1024];
    snprintf(adult, sizeof adult, "%s/data/adult/adult.data", src ? src : ".");
    if (access(adult, R_OK) != 0) snprintf(adult, sizeof adult, "data/adult/adult.data");
    bench_file("adult", adult, hx_reader_config_adult(false), reps);

    char tsv[64];
    snprintf(tsv, sizeof tsv, "/tmp/bench_reader_%d.tsv", (int)getpid());
    hx_generator_config g = hx_generator_config_default();
    g.n_rows = criteo_rows;
    g.missing_rate = 0.05;
    if (hx_generator_write_tsv(&g, tsv) != HX_OK) {
        fprintf(stderr, "bench_reader: %s\n", hx_last_error());
        return 1;
    }
    hx_reader_config c = hx_reader_config_criteo();
    c.batch_size = 4096;
    bench_file("criteo_generated", tsv, c, reps);
    remove(tsv);
    return 0;
}
