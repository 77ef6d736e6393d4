/* Tables larger than memory: a LazyAdam table of dim 32 (f32; a row and
 * its state take 384 bytes) at least twice the machine's RAM, lazy, trained
 * with bags of 26 ids for 4096 samples per step (bag sum forward, fused
 * backward and update), ids Zipf(1.05) or uniform over the rows:
 *   disk         the disk's own ceiling, measured first: random 512-byte
 *                O_DIRECT reads through io_uring (IOPS) and sequential
 *                1 MiB writes and reads (bytes/s), on a file in the same folder
 *   memory       the same step on a table in memory that fits (as many rows
 *                as the cache below holds)
 *   ssd          the table on disk (ssd_path) with a cache of 25% of the
 *                table (less when the machine has not that much memory
 *                free, said in the output), the next batch's ids handed
 *                over (prefetch) before each step; after a warm-up that
 *                fills the cache
 *   backing_file the same table mapped from a file (the old way), a few steps
 * One JSON object per case: samples/s and, for ssd, the hit rate, rows and
 * bytes read and written per step, the I/O wait per step, the ratio to the
 * memory table and to backing_file, and (uniform) the step time the disk's
 * measured IOPS and bandwidth allow for that I/O.
 *   bench_embedding-ssd [--dir DIR] [--rows N] [--cache-fraction F]
 *                       [--steps N] [--zipf-warmup N (100)] [--no-backing-file]
 * With --compare, instead: a table of --rows rows (default 4M) whose cache
 * (--cache-fraction, default 0.05) fills in the warm-up, three variants
 * stepped in turn on the same ids: LFU with aging (the counters saturate at
 * 15) writing ahead (the default), the second-chance clock (counters of one
 * bit, LRU-like) writing ahead, and LFU with evictions writing their dirty
 * rows themselves; hit rates, rows written (ahead), I/O wait, samples/s.
 * DIR (default $TMPDIR or /tmp) must have room for the rows the run writes
 * (a few GB) and for backing_file's touched pages. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <omp.h>

#include "bench/bench_ids.h"
#include "embedding/embedding.h"
#include "memory/memory.h"

#define DIM 32
#define SAMPLES 4096
#define FEATURES 26
#define NIDS (SAMPLES * FEATURES)
#define ROW_BYTES 384 /* params and LazyAdam's m and v */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_embedding-ssd: %s: %s\n", what, msg);
    exit(1);
}

static double load_now(void)
{
    char model[128];
    double load;
    machine(model, sizeof model, &load);
    return load;
}

static int64_t meminfo_kb(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    int64_t kb = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            kb = atoll(line + n + 1);
            break;
        }
    if (f) fclose(f);
    return kb;
}

/* ---- the disk's ceiling ------------------------------------------------------------ */

typedef struct disk_ceiling {
    double read_iops, seq_write_bps, seq_read_bps;
} disk_ceiling;

static disk_ceiling measure_disk(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/hx-bench-disk.bin", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) die("disk", "cannot open a file with O_DIRECT in the folder");
    const size_t MB = 1 << 20, file = (size_t)2 << 30;
    char *buf = aligned_alloc(4096, 8 * MB);
    memset(buf, 0x5a, 8 * MB);
    disk_ceiling c = {0};
    double t0 = now();
    for (size_t off = 0; off < file; off += 8 * MB)
        if (pwrite(fd, buf, 8 * MB, (off_t)off) != (ssize_t)(8 * MB)) die("disk", "write failed");
    fdatasync(fd);
    c.seq_write_bps = (double)file / (now() - t0);
    t0 = now();
    for (size_t off = 0; off < file; off += 8 * MB)
        if (pread(fd, buf, 8 * MB, (off_t)off) != (ssize_t)(8 * MB)) die("disk", "read failed");
    c.seq_read_bps = (double)file / (now() - t0);
    /* Random 512-byte reads, 256 in flight, for 3 seconds. */
    hx_aio *io;
    hx_mem_err me;
    char why[192];
    if (hx__aio_open(HX_DISK_ENGINE_AUTO, 256, &io, why, sizeof why, &me)) die("disk", me.msg);
    int64_t done = 0, inflight = 0, blocks = (int64_t)(file / 512);
    t0 = now();
    while (now() - t0 < 3.0 || inflight) {
        int queued = 0;
        while (inflight < 256 && now() - t0 < 3.0) {
            off_t off = (off_t)(rng_next() % (uint64_t)blocks) * 512;
            if (hx__aio_queue(io, fd, false, buf + (size_t)(inflight % 256) * 4096, 512, off, 0)) break;
            inflight++;
            queued++;
        }
        if (queued && hx__aio_flush(io)) die("disk", "submit failed");
        unsigned tag;
        long res;
        if (!inflight) continue;
        if (hx__aio_wait(io, &tag, &res) || res != 512) die("disk", "a read failed");
        inflight--;
        done++;
    }
    c.read_iops = (double)done / (now() - t0);
    hx__aio_close(io);
    close(fd);
    unlink(path);
    free(buf);
    printf("{\"bench\":\"embedding-ssd\",\"case\":\"disk\",\"random_read_512b_iops\":%.0f,"
           "\"seq_write_mb_s\":%.0f,\"seq_read_mb_s\":%.0f,\"engine\":\"%s\",\"load_1min\":%.2f}\n",
           c.read_iops, c.seq_write_bps / 1e6, c.seq_read_bps / 1e6, why[0] ? why : "io_uring", load_now());
    fflush(stdout);
    return c;
}

/* ---- steps ----------------------------------------------------------------------- */

typedef struct run {
    hx_emb_table *t;
    int64_t rows;
    int zipfian;
    zipf z;
    int64_t *ids[2]; /* this step's and the next one's */
    int64_t *offsets;
    float *out, *dout;
    hx_emb_workspace *ws;
    int64_t step;
    uint64_t rng;    /* the run's own id stream */
} run;

static void draw(run *r, int64_t *ids)
{
    uint64_t global = rng_state;
    rng_state = r->rng;
    for (int64_t i = 0; i < NIDS; i++)
        ids[i] = r->zipfian ? (int64_t)(((__int128)(zipf_draw(&r->z) - 1) * 7919) % r->rows)
                            : (int64_t)(rng_next() % (uint64_t)r->rows);
    r->rng = rng_state;
    rng_state = global;
}

static void run_init(run *r, hx_emb_table *t, int64_t rows, int zipfian)
{
    memset(r, 0, sizeof *r);
    r->t = t;
    r->rows = rows;
    r->zipfian = zipfian;
    r->z = zipf_make(1.05, (double)rows);
    for (int k = 0; k < 2; k++) r->ids[k] = malloc(sizeof(int64_t) * NIDS);
    r->offsets = malloc(sizeof(int64_t) * SAMPLES);
    r->out = malloc(sizeof(float) * SAMPLES * DIM);
    r->dout = malloc(sizeof(float) * SAMPLES * DIM);
    r->ws = hx_emb_workspace_create();
    for (int64_t b = 0; b < SAMPLES; b++) r->offsets[b] = b * FEATURES;
    for (int64_t i = 0; i < SAMPLES * DIM; i++) r->dout[i] = (float)((rng_unit() - 0.5) * 1e-3);
    r->rng = rng_next();
    draw(r, r->ids[1]);
}

static void run_free(run *r)
{
    for (int k = 0; k < 2; k++) free(r->ids[k]);
    free(r->offsets);
    free(r->out);
    free(r->dout);
    hx_emb_workspace_free(r->ws);
}

/* One step: the ids drawn last time, the next ones drawn and handed to a
 * table on disk, then bag forward and fused backward + LazyAdam. Drawing
 * is outside the timed part (*t_draw). */
static void step(run *r, double *t_draw)
{
    double t0 = now();
    int64_t *cur = r->ids[1];
    r->ids[1] = r->ids[0];
    r->ids[0] = cur;
    draw(r, r->ids[1]);
    *t_draw += now() - t0;
    hx_emb_ssd *s = hx_emb_as_ssd(r->t);
    if (s) hx_emb_ssd_prefetch(s, r->ids[1], NIDS);
    hx_emb_query q = hx_emb_query_bags(cur, NIDS, r->offsets, SAMPLES, HX_EMB_SUM);
    q.nthreads = omp_get_num_procs();
    hx_emb_err err;
    if (hx_emb_table_lookup(r->t, &q, r->out, NULL, &err)) die("lookup", err.msg);
    hx_emb_grad_input gi = {r->dout, NULL, DIM, HX_EMB_DEDUP_AUTO};
    if (hx_emb_table_backward_update(r->t, &q, &gi, ++r->step, r->ws, &err)) die("update", err.msg);
}

/* Runs `warm` steps, then `steps` timed ones: samples/s. */
static double timed(run *r, int warm, int steps)
{
    double skip = 0;
    for (int i = 0; i < warm; i++) step(r, &skip);
    skip = 0;
    double t0 = now();
    for (int i = 0; i < steps; i++) step(r, &skip);
    return (double)steps * SAMPLES / (now() - t0 - skip);
}

static hx_emb_table_config table_config(int64_t rows)
{
    hx_emb_table_config c = hx_emb_table_config_default(rows, DIM);
    c.init = (hx_emb_init){HX_EMB_INIT_NORMAL, 0, 0.05, 7};
    c.lazy_init = 1;
    c.optim = hx_emb_optim_default(HX_EMB_OPTIM_LAZY_ADAM);
    c.nthreads = omp_get_num_procs();
    return c;
}

static const char *dist_name(int zipfian) { return zipfian ? "zipf1.05" : "uniform"; }

/* --compare: the cache's variants stepped in turn on the same ids. */
static void compare(const char *dir, int64_t rows, double fraction, int steps, int zipf_warm, disk_ceiling dc)
{
    enum { NV = 3 };
    static const char *const name[NV] = {"lfu-aging", "clock", "lfu-aging"};
    static const int counter_max[NV] = {15, 1, 15}, ahead[NV] = {1, 1, 0};
    size_t cache_bytes = (size_t)((double)rows * fraction) * (ROW_BYTES + 48);
    int64_t cache_rows = (int64_t)(cache_bytes / (ROW_BYTES + 48));
    hx_emb_err err;
    for (int zf = 1; zf >= 0; zf--) {
        hx_emb_table *t[NV];
        run r[NV];
        char path[NV][1024];
        uint64_t seed = rng_next();
        for (int v = 0; v < NV; v++) {
            snprintf(path[v], sizeof path[v], "%s/hx-bench-compare-%d.rows", dir, v);
            unlink(path[v]);
            hx_emb_table_config c = table_config(rows);
            c.ssd_path = path[v];
            c.cache_bytes = cache_bytes;
            c.cache_counter_max = counter_max[v];
            c.no_write_ahead = !ahead[v];
            if (hx_emb_fixed_create(&c, &t[v], &err)) die("table on disk", err.msg);
            run_init(&r[v], t[v], rows, zf);
            r[v].rng = seed; /* the same ids for each */
            draw(&r[v], r[v].ids[1]);
        }
        int warm = zf ? zipf_warm : (int)(cache_rows / (NIDS * 9 / 10)) + 10;
        double skip = 0, busy[NV] = {0};
        for (int i = 0; i < warm; i++)
            for (int v = 0; v < NV; v++) step(&r[v], &skip);
        hx_emb_ssd_stats a[NV], b[NV];
        for (int v = 0; v < NV; v++) hx_emb_ssd_stats_get(hx_emb_as_ssd(t[v]), &a[v]);
        for (int i = 0; i < steps; i++)
            for (int v = 0; v < NV; v++) {
                double d = 0, t0 = now();
                step(&r[v], &d);
                busy[v] += now() - t0 - d;
            }
        for (int v = 0; v < NV; v++) {
            hx_emb_ssd_stats_get(hx_emb_as_ssd(t[v]), &b[v]);
            double n = steps;
            double lookups = (double)(b[v].lookups - a[v].lookups), cold = (double)(b[v].cold - a[v].cold);
            double reads = (double)(b[v].store.rows_read - a[v].store.rows_read) / n;
            double wbytes = (double)(b[v].store.bytes_written - a[v].store.bytes_written) / n;
            double allowed_s = reads / dc.read_iops + wbytes / dc.seq_write_bps;
            double step_s = busy[v] / n;
            char over[32] = "null";
            if (allowed_s > 0) snprintf(over, sizeof over, "%.2f", step_s / allowed_s);
            printf("{\"bench\":\"embedding-ssd\",\"case\":\"compare\",\"ids\":\"%s\",\"policy\":\"%s\","
                   "\"write_ahead\":\"%s\",\"rows\":%lld,\"cache_rows\":%lld,\"warmup_steps\":%d,\"steps\":%d,"
                   "\"samples_per_s\":%.0f,\"hit_rate\":%.4f,\"hit_rate_of_rows_on_disk_or_cached\":%.4f,"
                   "\"rows_read_per_step\":%.0f,\"rows_written_per_step\":%.0f,"
                   "\"rows_written_ahead_per_step\":%.0f,\"io_wait_ms_per_step\":%.2f,"
                   "\"io_bound_step_ms\":%.2f,\"step_ms\":%.2f,\"step_over_io_bound\":%s,\"load_1min\":%.2f}\n",
                   dist_name(zf), name[v], ahead[v] ? "on" : "off", (long long)rows, (long long)cache_rows,
                   warm, steps, SAMPLES / step_s, (double)(b[v].hits - a[v].hits) / lookups,
                   (double)(b[v].hits - a[v].hits) / (lookups - cold), reads,
                   (double)(b[v].store.rows_written - a[v].store.rows_written) / n,
                   (double)(b[v].store.written_ahead - a[v].store.written_ahead) / n,
                   (b[v].store.io_wait_s - a[v].store.io_wait_s) / n * 1e3, allowed_s * 1e3, step_s * 1e3, over,
                   load_now());
            fflush(stdout);
            run_free(&r[v]);
            hx_emb_table_free(t[v]);
            unlink(path[v]);
        }
    }
}

int main(int argc, char **argv)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int64_t rows = 0;
    double fraction = 0.25;
    int steps = 30, backing = 1, zipf_warm = 100, cmp = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cache-fraction") && i + 1 < argc) fraction = atof(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--zipf-warmup") && i + 1 < argc) zipf_warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-backing-file")) backing = 0;
        else if (!strcmp(argv[i], "--compare")) cmp = 1;
        else die("usage", "[--dir DIR] [--rows N] [--cache-fraction F] [--steps N] [--zipf-warmup N] "
                 "[--no-backing-file] [--compare]");
    }
    if (cmp) {
        char model[128];
        double load;
        machine(model, sizeof model, &load);
        printf("{\"bench\":\"embedding-ssd\",\"case\":\"setup\",\"mode\":\"compare\",\"cpu\":\"%s\","
               "\"cores\":%d,\"load_1min\":%.2f,\"dir\":\"%s\"}\n", model, omp_get_num_procs(), load, dir);
        fflush(stdout);
        disk_ceiling dc = measure_disk(dir);
        compare(dir, rows > 0 ? rows : 4 << 20, fraction == 0.25 ? 0.05 : fraction, steps, zipf_warm, dc);
        return 0;
    }
    int64_t ram = meminfo_kb("MemTotal") * 1024, avail = meminfo_kb("MemAvailable") * 1024;
    if (rows <= 0) rows = (2 * ram + ROW_BYTES - 1) / ROW_BYTES;
    int64_t table_bytes = rows * ROW_BYTES;
    struct statvfs vs;
    int64_t disk_free = statvfs(dir, &vs) == 0 ? (int64_t)vs.f_bavail * (int64_t)vs.f_frsize : -1;
    /* The cache: the fraction asked for, unless it would leave the machine
     * short (at most 60% of the memory available now). */
    size_t slot = ROW_BYTES + 48 + 32; /* + the map */
    double used = fraction;
    const char *why = "as asked";
    if ((double)table_bytes * fraction / ROW_BYTES * (double)slot > 0.6 * (double)avail) {
        used = 0.6 * (double)avail / ((double)table_bytes / ROW_BYTES * (double)slot);
        why = "cut to 60% of the memory available at start (a shared machine)";
    }
    size_t cache_bytes = (size_t)((double)table_bytes * used / ROW_BYTES) * (ROW_BYTES + 48);
    int64_t cache_rows = (int64_t)(cache_bytes / (ROW_BYTES + 48));
    char model[128];
    double load;
    machine(model, sizeof model, &load);
    printf("{\"bench\":\"embedding-ssd\",\"case\":\"setup\",\"cpu\":\"%s\",\"cores\":%d,\"load_1min\":%.2f,"
           "\"ram_bytes\":%lld,\"mem_available_bytes\":%lld,\"disk_free_bytes\":%lld,\"dir\":\"%s\","
           "\"rows\":%lld,\"dim\":%d,\"table_bytes\":%lld,\"table_over_ram\":%.2f,\"cache_fraction\":%.3f,"
           "\"cache_fraction_why\":\"%s\",\"cache_rows\":%lld,\"samples_per_step\":%d,\"ids_per_step\":%d}\n",
           model, omp_get_num_procs(), load, (long long)ram, (long long)avail, (long long)disk_free, dir,
           (long long)rows, DIM, (long long)table_bytes, (double)table_bytes / (double)ram, used, why,
           (long long)cache_rows, SAMPLES, NIDS);
    fflush(stdout);
    disk_ceiling dc = measure_disk(dir);

    double mem_rate[2], ssd_rate[2], back_rate[2] = {0, 0};
    hx_emb_err err;
    /* A table in memory that fits: as many rows as the cache holds. */
    {
        hx_emb_table_config c = table_config(cache_rows);
        hx_emb_table *t;
        if (hx_emb_local_create(&c, &t, &err)) die("memory table", err.msg);
        for (int zf = 1; zf >= 0; zf--) {
            run r;
            run_init(&r, t, cache_rows, zf);
            mem_rate[zf] = timed(&r, 5, steps);
            run_free(&r);
            printf("{\"bench\":\"embedding-ssd\",\"case\":\"memory\",\"ids\":\"%s\",\"rows\":%lld,"
                   "\"samples_per_s\":%.0f,\"load_1min\":%.2f}\n", dist_name(zf), (long long)cache_rows,
                   mem_rate[zf], load_now());
            fflush(stdout);
        }
        hx_emb_table_free(t);
    }
    /* The table on disk. */
    {
        char path[1024];
        snprintf(path, sizeof path, "%s/hx-bench-table.rows", dir);
        unlink(path);
        hx_emb_table_config c = table_config(rows);
        c.ssd_path = path;
        c.cache_bytes = cache_bytes;
        double t0 = now();
        hx_emb_table *t;
        if (hx_emb_fixed_create(&c, &t, &err)) die("table on disk", err.msg);
        double create_s = now() - t0;
        hx_emb_ssd *s = hx_emb_as_ssd(t);
        for (int zf = 1; zf >= 0; zf--) {
            run r;
            run_init(&r, t, rows, zf);
            /* Warm-up: Zipf until its working set settles; uniform until the cache is full. */
            int warm = zf ? zipf_warm : (int)(cache_rows / (NIDS * 9 / 10)) + 10;
            double skip = 0;
            for (int i = 0; i < warm; i++) step(&r, &skip);
            hx_emb_ssd_stats a, b;
            hx_emb_ssd_stats_get(s, &a);
            ssd_rate[zf] = timed(&r, 0, steps);
            hx_emb_ssd_stats_get(s, &b);
            run_free(&r);
            double n = steps;
            double reads = (double)(b.store.rows_read - a.store.rows_read) / n;
            double wbytes = (double)(b.store.bytes_written - a.store.bytes_written) / n;
            double hit = (double)(b.hits - a.hits) / (double)(b.lookups - a.lookups);
            /* Misses of rows never written (lazy: initialised, no I/O) left out. */
            double hit_warm = (double)(b.hits - a.hits) / (double)(b.lookups - a.lookups - (b.cold - a.cold));
            double allowed_s = reads / dc.read_iops + wbytes / dc.seq_write_bps; /* per step */
            double step_s = SAMPLES / ssd_rate[zf];
            char over[32] = "null"; /* no I/O in the timed steps: no bound (JSON has no inf) */
            if (allowed_s > 0) snprintf(over, sizeof over, "%.2f", step_s / allowed_s);
            printf("{\"bench\":\"embedding-ssd\",\"case\":\"ssd\",\"ids\":\"%s\",\"rows\":%lld,"
                   "\"cache_rows\":%lld,\"create_s\":%.2f,\"warmup_steps\":%d,\"steps\":%d,"
                   "\"samples_per_s\":%.0f,\"hit_rate\":%.4f,\"hit_rate_of_rows_on_disk_or_cached\":%.4f,"
                   "\"cold_misses_per_step\":%.0f,\"rows_read_per_step\":%.0f,"
                   "\"rows_prefetched_per_step\":%.0f,\"rows_written_per_step\":%.0f,"
                   "\"rows_written_ahead_per_step\":%.0f,\"bytes_read_per_step\":%.0f,\"bytes_written_per_step\":%.0f,"
                   "\"io_wait_ms_per_step\":%.2f,\"rows_on_disk\":%lld,\"vs_memory\":%.3f,"
                   "\"io_bound_step_ms\":%.2f,\"step_ms\":%.2f,\"step_over_io_bound\":%s,"
                   "\"load_1min\":%.2f}\n",
                   dist_name(zf), (long long)rows, (long long)cache_rows, create_s, warm, steps, ssd_rate[zf],
                   hit, hit_warm, (double)(b.cold - a.cold) / n, reads, (double)(b.store.prefetched - a.store.prefetched) / n,
                   (double)(b.store.rows_written - a.store.rows_written) / n,
                   (double)(b.store.written_ahead - a.store.written_ahead) / n,
                   (double)(b.store.bytes_read - a.store.bytes_read) / n, wbytes,
                   (b.store.io_wait_s - a.store.io_wait_s) / n * 1e3, (long long)b.store.rows_on_disk,
                   ssd_rate[zf] / mem_rate[zf], allowed_s * 1e3, step_s * 1e3, over, load_now());
            fflush(stdout);
        }
        hx_emb_table_free(t);
        unlink(path);
    }
    /* backing_file: the same table mapped from a file. */
    if (backing) {
        char path[1024];
        snprintf(path, sizeof path, "%s/hx-bench-table.mapped", dir);
        hx_emb_table_config c = table_config(rows);
        c.backing_file = path;
        hx_emb_table *t;
        if (hx_emb_local_create(&c, &t, &err)) die("backing_file table", err.msg);
        for (int zf = 1; zf >= 0; zf--) {
            run r;
            run_init(&r, t, rows, zf);
            back_rate[zf] = timed(&r, 1, 3);
            run_free(&r);
            printf("{\"bench\":\"embedding-ssd\",\"case\":\"backing_file\",\"ids\":\"%s\",\"rows\":%lld,"
                   "\"steps\":3,\"samples_per_s\":%.0f,\"ssd_over_backing_file\":%.1f,\"load_1min\":%.2f}\n",
                   dist_name(zf), (long long)rows, back_rate[zf], ssd_rate[zf] / back_rate[zf], load_now());
            fflush(stdout);
        }
        hx_emb_table_free(t);
        unlink(path);
    }
    return 0;
}
