/* Memory benchmarks, one JSON object per case:
 *   memreplay_*   synthetic traces (GPT-like at three sizes, random
 *                 lifetimes, a fragmenting pattern) replayed through
 *                 hetex's lifetime-segregated pools and through the
 *                 PyTorch-style single-pool baseline: peak reserved / peak
 *                 live of each, our waste as a share of the baseline's,
 *                 and the segment reservations and releases (cudaMalloc /
 *                 cudaFree calls on a GPU) each made, in all and in steady
 *                 state (after the trace's second step);
 *   disk_*        the disk tier writing and reading SIZE bytes (1 MiB
 *                 blocks, queue depth 32) through io_uring and libaio,
 *                 beside the ceiling measured in the same run: a plain
 *                 sequential O_DIRECT pwrite/pread loop of the same size
 *                 and block size on the same filesystem;
 *   chunks_gpt    the chunk-size search on a 24-layer, hidden-1024 layout;
 *   memreplay_run_*  traces recorded in this run from our own GPT and wide &
 *                 deep (the hetex CLI beside this program, --accelerator emu,
 *                 HX_MEMTRACE into DIR), replayed the same way: "tensors"
 *                 (HX_MEMTRACE_MODE=tensors: each transient device tensor
 *                 its own allocation, as a per-tensor allocator would see
 *                 the run) and "blocks" (the device's real allocations: the
 *                 plan's transient arena is one block, so that replay is
 *                 trivial and shown only for contrast). Skipped (a JSON line
 *                 says why) without the CLI or data/.
 * Usage: bench_memory [--dir DIR] [--mib SIZE] [--reps N] [--only chunks]
 * (DIR: /tmp; --only chunks: the machine line and the chunks cases). */
#define _GNU_SOURCE /* O_DIRECT */
#include "memory/caching_baseline.h"
#include "memory/chunks.h"
#include "memory/disk_tier.h"
#include "memory/memtrace.h"
#include "memtrace_gen.h"
#include "memory/pool.h"
#include "memory/ptrmap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double mib(size_t b) { return (double)b / (1 << 20); }

/* Segment reservations and releases (device allocation calls) of each
 * allocator over a trace: in all, and in steady state, i.e. after the
 * trace's second step (a step ends where its transient bytes are all freed:
 * the first is learned, the second is the first on a plan). Also the
 * steps, and the transient allocations the pools' plan served. */
typedef struct seg_ops {
    int64_t steps, steady_pools, steady_baseline, planned, unplanned;
} seg_ops;

static int64_t ops_of(const hx_pool_stats *s) { return s->reserves + s->releases; }

static seg_ops count_ops(const hx_mem_event *ev, size_t n)
{
    hx_mem_virtual vp = {0}, vb = {0};
    hx_mem_pools_config c = hx_mem_pools_config_default("bench", SIZE_MAX);
    c.source = hx__mem_virtual_source(&vp);
    hx_mem_pools *p;
    hx_mem_baseline *b;
    hx_mem_err err;
    if (hx_mem_pools_create(&c, &p, &err) ||
        hx_mem_baseline_create(SIZE_MAX, hx__mem_virtual_source(&vb), &b, &err)) {
        fprintf(stderr, "bench_memory: %s\n", err.msg);
        exit(1);
    }
    hx_ptrmap pp = {0}, pb = {0}, sz = {0};
    size_t transient = 0;
    seg_ops o = {0};
    int64_t mark_p = 0, mark_b = 0;
    for (size_t i = 0; i < n; i++) {
        const hx_mem_event *e = &ev[i];
        if (e->alloc) {
            void *x, *y;
            if (hx_mem_pools_alloc(p, e->bytes, e->persistent ? HX_MEM_PERSISTENT : HX_MEM_TRANSIENT,
                                   NULL, &x, &err) || hx_mem_baseline_alloc(b, e->bytes, &y, &err)) {
                fprintf(stderr, "bench_memory: %s\n", err.msg);
                exit(1);
            }
            hx__ptrmap_put(&pp, e->id + 1, x);
            hx__ptrmap_put(&pb, e->id + 1, y);
            if (!e->persistent) transient += e->bytes;
            hx__ptrmap_put(&sz, e->id + 1, (void *)(uintptr_t)(e->persistent ? 1 : e->bytes + 2));
            continue;
        }
        hx_mem_pools_free(p, hx__ptrmap_del(&pp, e->id + 1), &err);
        hx_mem_baseline_free(b, hx__ptrmap_del(&pb, e->id + 1), &err);
        uintptr_t t = (uintptr_t)hx__ptrmap_del(&sz, e->id + 1);
        if (t < 2) continue; /* persistent */
        transient -= t - 2;
        if (transient) continue;
        if (++o.steps == 2) {
            hx_device_pools_stats s;
            hx_pool_stats bs;
            hx_mem_pools_stats(p, &s);
            hx_mem_baseline_stats(b, &bs);
            mark_p = ops_of(&s.total);
            mark_b = ops_of(&bs);
        }
    }
    hx_device_pools_stats s;
    hx_pool_stats bs;
    hx_mem_pools_stats(p, &s);
    hx_mem_baseline_stats(b, &bs);
    o.steady_pools = o.steps >= 2 ? ops_of(&s.total) - mark_p : -1;
    o.steady_baseline = o.steps >= 2 ? ops_of(&bs) - mark_b : -1;
    hx_mem_plan_stats ps;
    hx_mem_pools_plan_stats(p, &ps);
    o.planned = ps.planned;
    o.unplanned = ps.unplanned;
    hx__ptrmap_free(&pp);
    hx__ptrmap_free(&pb);
    hx__ptrmap_free(&sz);
    hx_mem_pools_destroy(p);
    hx_mem_baseline_destroy(b);
    return o;
}

static void replay_case(const char *name, hx_mem_event *ev, size_t n)
{
    if (!ev) {
        fprintf(stderr, "bench_memory: %s: out of memory\n", name);
        exit(1);
    }
    hx_memreplay_report r;
    hx_mem_err err;
    double t0 = now();
    if (hx_memtrace_replay(ev, n, SIZE_MAX, &r, &err)) {
        fprintf(stderr, "bench_memory: %s: %s\n", name, err.msg);
        exit(1);
    }
    double t = now() - t0;
    seg_ops o = count_ops(ev, n);
    double wp = (double)r.pools.total.peak_reserved - r.peak_live;
    double wb = (double)r.baseline.peak_reserved - r.peak_live;
    printf("{\"bench\":\"memory\",\"case\":\"memreplay_%s\",\"events\":%lld,\"peak_live_mib\":%.2f,"
           "\"pools_peak_reserved_mib\":%.2f,\"pools_ratio\":%.4f,\"pools_persistent_mib\":%.2f,"
           "\"pools_transient_mib\":%.2f,\"baseline_peak_reserved_mib\":%.2f,\"baseline_ratio\":%.4f,"
           "\"pools_waste_share_of_baseline\":%.3f,\"pools_reserves\":%lld,\"pools_releases\":%lld,"
           "\"baseline_reserves\":%lld,\"baseline_releases\":%lld,\"steps\":%lld,"
           "\"pools_steady_segment_ops\":%lld,\"baseline_steady_segment_ops\":%lld,"
           "\"planned_allocs\":%lld,\"unplanned_allocs\":%lld,\"replay_s\":%.4f}\n",
           name, (long long)r.events, mib(r.peak_live), mib(r.pools.total.peak_reserved),
           r.pools_ratio, mib(r.pools.persistent.peak_reserved), mib(r.pools.transient.peak_reserved),
           mib(r.baseline.peak_reserved), r.baseline_ratio, wb > 0 ? wp / wb : 0,
           (long long)r.pools.total.reserves, (long long)r.pools.total.releases,
           (long long)r.baseline.reserves, (long long)r.baseline.releases, (long long)o.steps,
           (long long)o.steady_pools, (long long)o.steady_baseline, (long long)o.planned,
           (long long)o.unplanned, t);
    free(ev);
}

/* The ceiling: one sequential O_DIRECT pass writing (then reading) bytes in
 * block-sized pwrite/pread calls. Returns GB/s of each through *w, *r. */
static void plain_direct(const char *dir, char *buf, size_t bytes, size_t block, double *w, double *r)
{
    char path[512];
    snprintf(path, sizeof path, "%s/hetex-bench-plain-%d.bin", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) {
        perror("bench_memory: O_DIRECT open");
        exit(1);
    }
    double t0 = now();
    for (size_t off = 0; off < bytes; off += block)
        if (pwrite(fd, buf + off, block, (off_t)off) != (ssize_t)block) {
            perror("bench_memory: pwrite");
            exit(1);
        }
    *w = bytes / (now() - t0) / 1e9;
    t0 = now();
    for (size_t off = 0; off < bytes; off += block)
        if (pread(fd, buf + off, block, (off_t)off) != (ssize_t)block) {
            perror("bench_memory: pread");
            exit(1);
        }
    *r = bytes / (now() - t0) / 1e9;
    close(fd);
    unlink(path);
}

static void disk_cases(const char *dir, size_t bytes, int reps)
{
    size_t block = HX_MIB;
    char *buf = aligned_alloc(4096, bytes);
    for (size_t i = 0; i < bytes; i++) buf[i] = (char)(i * 131 + (i >> 20));
    hx_disk_engine engines[2] = {HX_DISK_ENGINE_URING, HX_DISK_ENGINE_AIO};
    for (int e = 0; e < 2; e++) {
        hx_disk_config c = hx_disk_config_default(dir);
        c.block_size = block;
        c.queue_depth = 32;
        c.engine = engines[e];
        /* best of reps for the tier and for the ceiling (measured just before each rep) */
        double bw = 0, br = 0, cw = 0, cr = 0;
        hx_disk_stats s = {0};
        for (int k = 0; k < reps; k++) {
            double pw, pr;
            plain_direct(dir, buf, bytes, block, &pw, &pr);
            hx_disk_tier *t;
            hx_mem_err err;
            if (hx_disk_tier_create(&c, &t, &err)) {
                fprintf(stderr, "bench_memory: %s\n", err.msg);
                return;
            }
            double t0 = now();
            if (hx_disk_tier_write(t, 0, buf, bytes, &err)) fprintf(stderr, "bench_memory: %s\n", err.msg);
            double w = bytes / (now() - t0) / 1e9;
            t0 = now();
            if (hx_disk_tier_read(t, 0, buf, bytes, &err)) fprintf(stderr, "bench_memory: %s\n", err.msg);
            double r = bytes / (now() - t0) / 1e9;
            hx_disk_tier_stats(t, &s);
            hx_disk_tier_destroy(t);
            if (w > bw) bw = w;
            if (pw > cw) cw = pw;
            if (r > br) br = r;
            if (pr > cr) cr = pr;
        }
        printf("{\"bench\":\"memory\",\"case\":\"disk_%s\",\"mib\":%.0f,\"block_kib\":%zu,\"queue_depth\":32,"
               "\"direct\":%s,\"write_gbs\":%.3f,\"plain_direct_write_gbs\":%.3f,\"write_ratio\":%.3f,"
               "\"read_gbs\":%.3f,\"plain_direct_read_gbs\":%.3f,\"read_ratio\":%.3f,\"reps\":%d}\n",
               s.engine, mib(bytes), block >> 10, s.direct ? "true" : "false", bw, cw, bw / cw, br, cr,
               br / cr, reps);
    }
    free(buf);
}

static void chunks_case(void)
{
    size_t sz[400];
    int64_t n = 0;
    const size_t h = 1024, e = 2;
    sz[n++] = 50257 * h * e;
    sz[n++] = 1024 * h * e;
    for (int l = 0; l < 24; l++) {
        size_t per[] = {h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * 4 * h, 4 * h, 4 * h * h, h};
        for (int k = 0; k < 12; k++) sz[n++] = per[k] * e;
    }
    sz[n++] = h * e;
    sz[n++] = h * e;
    size_t ranges[][2] = {{32, 64}, {32, 128}, {32, 256}};
    for (int i = 0; i < 3; i++) {
        hx_chunk_search s = {ranges[i][0] << 20, ranges[i][1] << 20, 1024, 256};
        hx_chunk_plan p;
        hx_mem_err err;
        double t0 = now();
        hx_chunk_search_run(sz, n, &s, &p, &err);
        printf("{\"bench\":\"memory\",\"case\":\"chunks_gpt_24x1024_fp16\",\"range\":\"%zu-%zu MiB\","
               "\"range_mib\":[%zu,%zu],"
               "\"step\":1024,\"chunk_mib\":%.3f,\"chunks\":%lld,\"last_chunk_mib\":%.3f,\"own_chunks\":%lld,"
               "\"waste_mib\":%.2f,\"waste_pct\":%.3f,\"search_s\":%.3f}\n", ranges[i][0], ranges[i][1],
               ranges[i][0], ranges[i][1], mib(p.chunk_size), (long long)p.n_chunks, mib(p.last_chunk),
               (long long)p.n_own, mib(p.waste), 100 * p.waste_fraction, now() - t0);
    }
}

/* Runs `cli args` with HX_MEMTRACE=DIR/name.trace (and the mode), then
 * replays the trace. */
static void recorded_case(const char *cli, const char *dir, const char *name, const char *mode,
                          const char *args, const char *need)
{
    if (access(cli, X_OK) || access(need, R_OK)) {
        printf("{\"bench\":\"memory\",\"case\":\"memreplay_run_%s_%s\",\"skipped\":\"%s not found\"}\n",
               name, mode, access(cli, X_OK) ? cli : need);
        return;
    }
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/hx_bench_memory_%s_%s.trace", dir, name, mode);
    snprintf(cmd, sizeof cmd, "HX_MEMTRACE='%s' HX_MEMTRACE_MODE=%s '%s' %s >/dev/null", path, mode,
             cli, args);
    double t0 = now();
    int rc = system(cmd);
    double t_run = now() - t0;
    hx_mem_event *ev = NULL;
    size_t n = 0;
    hx_mem_err err;
    if (rc || hx_memtrace_load(path, &ev, &n, &err)) {
        fprintf(stderr, "bench_memory: %s (exit %d): %s\n", cmd, rc, rc ? "failed" : err.msg);
        exit(1);
    }
    remove(path);
    char full[128];
    snprintf(full, sizeof full, "run_%s_%s", name, mode);
    printf("{\"bench\":\"memory\",\"case\":\"record_%s\",\"cmd\":\"hetex %s\",\"run_s\":%.2f}\n",
           full, args, t_run);
    replay_case(full, ev, n);
}

static void recorded_cases(const char *argv0, const char *dir)
{
    char cli[1024];
    const char *slash = strrchr(argv0, '/');
    snprintf(cli, sizeof cli, "%.*shetex", slash ? (int)(slash - argv0 + 1) : 0, argv0);
    static const struct { const char *name, *args, *need; } runs[] = {
        {"gpt_2x128_b32_t64", "gpt --steps 3 --eval-every 1000 --eval-iters 2 --accelerator emu "
         "--offload none --threads 2", "data/tinyshakespeare/input.txt"},
        {"gpt_4x256_b16_t128", "gpt --layers 4 --width 256 --context 128 --batch 16 --steps 2 "
         "--eval-every 1000 --eval-iters 2 --accelerator emu --offload none --threads 2",
         "data/tinyshakespeare/input.txt"},
        {"widedeep_adult", "widedeep --data data/adult --accelerator emu --epochs 1 --threads 2 "
         "--quiet", "data/adult/adult.data"},
        {"widedeep_adult_wide", "widedeep --data data/adult --accelerator emu --epochs 1 "
         "--threads 2 --batch 4096 --deep-dim 32 --hidden 1024,512,256 --quiet",
         "data/adult/adult.data"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        recorded_case(cli, dir, runs[i].name, "tensors", runs[i].args, runs[i].need);
        recorded_case(cli, dir, runs[i].name, "blocks", runs[i].args, runs[i].need);
    }
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp";
    size_t size_mib = 256;
    int reps = 3;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--mib")) size_mib = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--only")) only = argv[i + 1];
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double load[1] = {0};
    getloadavg(load, 1);
    printf("{\"bench\":\"memory\",\"case\":\"machine\",\"cores\":%ld,\"loadavg\":%.2f,\"dir\":\"%s\"}\n",
           cores, load[0], dir);
    if (only && !strcmp(only, "chunks")) {
        chunks_case();
        return 0;
    }
    if (only) {
        fprintf(stderr, "bench_memory: --only takes 'chunks', not '%s'\n", only);
        return 2;
    }
    size_t n;
    hx_gpt_trace_shape big = {24, 1024, 16, 1024, 4, 50257, 3}, mid = {12, 768, 12, 512, 8, 50257, 3},
                       small = {6, 256, 4, 128, 4, 4096, 3};
    hx_mem_event *ev = hx_memtrace_gen_gpt(&big, &n);
    replay_case("gpt_24x1024_b4_t1024", ev, n);
    ev = hx_memtrace_gen_gpt(&mid, &n);
    replay_case("gpt_12x768_b8_t512", ev, n);
    ev = hx_memtrace_gen_gpt(&small, &n);
    replay_case("gpt_6x256_b4_t128", ev, n);
    ev = hx_memtrace_gen_random(1, 20000, 64 << 20, 200, &n);
    replay_case("random_lifetimes", ev, n);
    ev = hx_memtrace_gen_fragment(1, 8, &n);
    replay_case("fragmenting", ev, n);
    recorded_cases(argv[0], dir);
    chunks_case();
    disk_cases(dir, size_mib << 20, reps);
    return 0;
}
