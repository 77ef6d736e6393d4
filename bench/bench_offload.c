/* Parameter offload to the host (offload_param=cpu) on emu: a deep MLP
 * (L layers of 256x256, Adam) trained uncapped without offload (the
 * ceiling, measured in the same run) and with offload at prefetch depth 0
 * and 1 under a cap just above its measured device peak; then auto_offload
 * uncapped and under each of those caps (the policy it chose, its
 * predicted device peak against the measured one); offload_param=disk at
 * depth 0 and 1 and two chunk sizes (files in a mkdtemp directory under
 * /tmp) at the smallest host budget it takes (the parameters, then Adam's
 * state streamed through chunk slots), against cpu offload under the same
 * cap and the uncapped run (also at batch B_WIDE, where the forward and
 * backward are long enough to hide reads), with the I/O the step waited for
 * against all of it, and the tier's throughput against a plain sequential
 * O_DIRECT write and read of the same bytes in the same run. One JSON object per
 * case: parameter bytes, device peak, parameters / peak, step time and its
 * ratio to the uncapped step. Small by design (the machine is small): the
 * ratio params / peak grows with L, the window does not. */
#define _GNU_SOURCE /* O_DIRECT */
#include "deep_mlp.h"
#include "session/session.h"
#include "offload/disk_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { B = 8, B_WIDE = 256, W = 256, STEPS = 5 };

/* The inputs of m (batch rows of W), the same every step. */
static float *inputs(const deep_mlp *m, float **y)
{
    size_t n = (size_t)m->x->shape[0] * W;
    float *x = malloc(2 * n * sizeof *x);
    for (size_t i = 0; x && i < n; i++) x[i] = (float)((i * 7919) % 200) / 100.0f - 1, x[n + i] = -x[i];
    *y = x ? x + n : NULL;
    return x;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Trains one warm-up step and STEPS timed ones; adds each timed step's disk
 * figures to *sum when sum is not NULL. Mean step seconds; -1 on failure
 * (the session stays the caller's). */
static double timed_steps(hx_session *s, const deep_mlp *m, hx_disk_run_stats *sum)
{
    float *y, *x = inputs(m, &y);
    size_t bytes = hx_tensor_nbytes(m->x);
    hx_feed f[2] = {{NULL, m->x, x, bytes}, {NULL, m->y, y, bytes}};
    double t0 = 0;
    for (int k = 0; k <= STEPS; k++) {
        if (k == 1) t0 = now();
        if (!x || hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN)) {
            fprintf(stderr, "bench_offload: %s\n", x ? hx_last_error() : "out of memory");
            free(x);
            return -1;
        }
        if (!k || !sum) continue;
        hx_disk_run_stats r = hx__disk_last_run(&s->e);
        sum->resident_read_s += r.resident_read_s;
        sum->resident_wait_s += r.resident_wait_s;
        sum->resident_write_s += r.resident_write_s;
        sum->update_s += r.update_s;
        sum->update_wait_s += r.update_wait_s;
        sum->io_s += r.io_s;
        sum->prefetch_s += r.prefetch_s;
        sum->resident_bytes += r.resident_bytes;
        sum->resident_bytes_written += r.resident_bytes_written;
        sum->chunk_bytes_read += r.chunk_bytes_read;
        sum->chunk_bytes_written += r.chunk_bytes_written;
        sum->chunks = r.chunks;
    }
    free(x);
    return (now() - t0) / STEPS;
}

/* Mean step seconds after one warm-up step; *peak: the device's peak;
 * *r (when not NULL): the offload report after the steps; create_s: the
 * last session creation's seconds (auto_offload plans its candidates). */
static double create_s;

static int run(const deep_mlp *m, const hx_session_config *c, double *step_s, size_t *peak,
               hx_offload_report *r)
{
    hx_session *s;
    double c0 = now();
    hx_status st = hx_session_create(m->g, c, &s);
    create_s = now() - c0;
    if (st) {
        fprintf(stderr, "bench_offload: %s\n", hx_last_error());
        return -1;
    }
    if ((*step_s = timed_steps(s, m, NULL)) < 0) {
        hx_session_free(s);
        return -1;
    }
    hx_device_pools_stats ps;
    hx_session_pool_stats(s, &ps);
    *peak = ps.total.peak_allocated;
    if (r) hx_session_offload_report(s, r);
    hx_session_free(s);
    return 0;
}

/* ---- offload_param=disk ----------------------------------------------------------- */

/* A plain sequential O_DIRECT write then read of `wbytes` / `rbytes` in
 * 4 MiB requests, one at a time, in a fresh file under dir: the ceiling
 * for the tier's throughput. Seconds of each; -1 on failure. */
static int plain_direct(const char *dir, uint64_t wbytes, uint64_t rbytes, double *w_s, double *r_s)
{
    enum { REQ = 4 << 20 };
    char path[128];
    snprintf(path, sizeof path, "%s/plain-direct.bin", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    char *buf = aligned_alloc(4096, REQ);
    if (fd < 0 || !buf) {
        fprintf(stderr, "bench_offload: plain O_DIRECT file: %s\n", strerror(errno));
        free(buf);
        if (fd >= 0) close(fd);
        return -1;
    }
    for (size_t i = 0; i < REQ; i++) buf[i] = (char)(i * 2654435761u >> 13);
    uint64_t span = wbytes > rbytes ? wbytes : rbytes;
    span = (span + REQ - 1) / REQ * REQ;
    int rc = 0;
    double t0 = now();
    for (uint64_t at = 0; at < span && !rc; at += REQ) rc = pwrite(fd, buf, REQ, (off_t)at) != REQ;
    *w_s = (now() - t0) * ((double)wbytes / span);
    t0 = now();
    for (uint64_t at = 0; at < span && !rc; at += REQ) rc = pread(fd, buf, REQ, (off_t)at) != REQ;
    *r_s = (now() - t0) * ((double)rbytes / span);
    close(fd);
    unlink(path);
    free(buf);
    return rc ? -1 : 0;
}

/* Trains STEPS steps after a warm-up; sums the disk figures of the timed
 * steps into *sum. */
static int run_disk(const deep_mlp *m, const hx_session_config *c, double *step_s,
                    hx_disk_run_stats *sum, size_t *need, size_t *whole, size_t *pinned_peak,
                    size_t *stored, int *slots)
{
    hx_session *s;
    if (hx_session_create(m->g, c, &s)) {
        fprintf(stderr, "bench_offload: %s\n", hx_last_error());
        return -1;
    }
    *need = hx__disk_host_bytes(&s->e);
    *slots = hx__disk_of(&s->e)->n_slots;
    *whole = hx__disk_whole_bytes(&s->e);
    int n_seg = hx__disk_segments(&s->e, NULL);
    *stored = 0;
    for (int k = 0; k < n_seg; k++) *stored += hx__disk_of(&s->e)->segs[k].bytes;
    memset(sum, 0, sizeof *sum);
    if ((*step_s = timed_steps(s, m, sum)) < 0) {
        hx_session_free(s);
        return -1;
    }
    hx_pinned_stats ps;
    hx_pinned_stats_get(hx__disk_pool_of(&s->e), &ps);
    *pinned_peak = ps.pool.peak_reserved;
    hx_session_free(s);
    return 0;
}

/* offload_param=disk at the smallest host budget it takes, against cpu
 * offload with the same chunk size and depth under the same device cap
 * (its measured peak + 1 MiB) and against the uncapped step. */
static int disk_case(const deep_mlp *m, const char *dir, size_t chunk, int depth, double base_s,
                     bool roomy)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.offload.offload_param = HX_OFFLOAD_CPU;
    c.offload.chunk_size = chunk;
    c.offload.prefetch_depth = depth;
    double cpu_s;
    size_t peak;
    if (run(m, &c, &cpu_s, &peak, NULL)) return -1;
    c.max_device_memory = peak + (1 << 20); /* + 64 KiB was too tight for some arenas */
    if (run(m, &c, &cpu_s, &peak, NULL)) return -1;
    c.offload.offload_param = HX_OFFLOAD_DISK;
    snprintf(c.offload.offload_path, sizeof c.offload.offload_path, "%s", dir);
    hx_disk_run_stats r;
    double disk_s;
    size_t need, whole, pinned, stored;
    int slots;
    if (run_disk(m, &c, &disk_s, &r, &need, &whole, &pinned, &stored, &slots)) return -1; /* sizes */
    /* the smallest budget it takes, or (roomy) the whole set: a slot for every chunk it
     * fits, so the forward and backward read them all ahead */
    c.offload.offload_cpu_size = roomy ? whole : need;
    if (run_disk(m, &c, &disk_s, &r, &need, &whole, &pinned, &stored, &slots)) return -1;
    uint64_t rd = r.resident_bytes + r.chunk_bytes_read, wr = r.resident_bytes_written + r.chunk_bytes_written;
    double io_total = r.io_s + r.resident_read_s + r.resident_write_s; /* device busy, all steps */
    /* what the step's threads waited for (resident waits are the executor's submission
     * waits, an upper bound: work already queued on the device runs meanwhile) */
    double exposed = r.update_wait_s + r.resident_wait_s + r.resident_write_s;
    double w_s, r_s;
    if (plain_direct(dir, wr, rd, &w_s, &r_s)) return -1;
    double tier_mbs = (rd + wr) / io_total / 1e6, plain_mbs = (rd + wr) / (w_s + r_s) / 1e6;
    printf("{\"case\":\"offload_disk\",\"layers\":%d,\"batch\":%d,\"param_bytes\":%zu,\"chunk_size\":%zu,"
           "\"prefetch_depth\":%d,\"cap\":%zu,\"host_budget\":%zu,\"whole_set_bytes\":%zu,"
           "\"budget_over_whole_set\":%.3f,\"pinned_peak_reserved\":%zu,\"disk_chunks\":%d,"
           "\"chunk_slots\":%d,"
           "\"stored_bytes\":%zu,\"padding_fraction\":%.3f,"
           "\"step_ms\":%.3f,\"cpu_offload_step_ms\":%.3f,\"ceiling_step_ms\":%.3f,"
           "\"throughput_vs_cpu_offload\":%.3f,\"throughput_vs_uncapped\":%.3f,"
           "\"per_step\":{\"resident_read_ms\":%.3f,\"resident_wait_ms\":%.3f,\"update_ms\":%.3f,\"update_wait_ms\":%.3f,"
           "\"resident_write_left_ms\":%.3f,\"io_thread_ms\":%.3f,\"prefetch_during_fwd_bwd_ms\":%.3f,"
           "\"bytes_read\":%llu,\"bytes_written\":%llu},"
           "\"io_hidden_fraction\":%.3f,\"tier_mb_s\":%.1f,\"plain_direct_mb_s\":%.1f,"
           "\"plain_write_mb_s\":%.1f,\"plain_read_mb_s\":%.1f,\"tier_over_plain\":%.3f}\n",
           m->layers, (int)m->x->shape[0], m->param_bytes, chunk, depth, c.max_device_memory,
           c.offload.offload_cpu_size, whole,
           (double)c.offload.offload_cpu_size / whole, pinned, r.chunks, slots, stored, 1.0 - (double)whole / stored,
           disk_s * 1e3, cpu_s * 1e3, base_s * 1e3, cpu_s / disk_s, base_s / disk_s,
           r.resident_read_s * 1e3 / STEPS, r.resident_wait_s * 1e3 / STEPS, r.update_s * 1e3 / STEPS, r.update_wait_s * 1e3 / STEPS,
           r.resident_write_s * 1e3 / STEPS, r.io_s * 1e3 / STEPS, r.prefetch_s * 1e3 / STEPS,
           (unsigned long long)(rd / STEPS), (unsigned long long)(wr / STEPS),
           1.0 - exposed / io_total, tier_mbs, plain_mbs, wr / w_s / 1e6, rd / r_s / 1e6,
           tier_mbs / plain_mbs);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    int L = argc > 1 ? atoi(argv[1]) : 48;
    deep_mlp m;
    if (deep_mlp_build(B, W, L, &m)) {
        fprintf(stderr, "bench_offload: %s\n", hx_last_error());
        return 1;
    }
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    double base_s;
    size_t base_peak;
    if (run(&m, &c, &base_s, &base_peak, NULL)) return 1;
    printf("{\"case\":\"uncapped_no_offload\",\"layers\":%d,\"param_bytes\":%zu,\"device_peak\":%zu,"
           "\"step_ms\":%.3f}\n", L, m.param_bytes, base_peak, base_s * 1e3);
    size_t caps[3] = {0};
    for (int depth = 0; depth <= 1; depth++) {
        c.offload.offload_param = HX_OFFLOAD_CPU;
        c.offload.chunk_size = 300 << 10;
        c.offload.prefetch_depth = depth;
        c.max_device_memory = 0;
        double s0;
        size_t peak;
        if (run(&m, &c, &s0, &peak, NULL)) return 1;
        c.max_device_memory = peak + (64 << 10); /* the measured peak is what a cap must hold */
        double s1;
        size_t peak1;
        caps[depth + 1] = c.max_device_memory;
        int rc = run(&m, &c, &s1, &peak1, NULL);
        printf("{\"case\":\"offload_cpu_depth%d\",\"layers\":%d,\"param_bytes\":%zu,\"cap\":%zu,"
               "\"trains_under_cap\":%s,\"device_peak\":%zu,\"params_over_cap\":%.2f,"
               "\"step_ms\":%.3f,\"ceiling_step_ms\":%.3f,\"throughput_vs_uncapped\":%.3f}\n",
               depth, L, m.param_bytes, c.max_device_memory, rc ? "false" : "true", peak1,
               (double)m.param_bytes / c.max_device_memory, s1 * 1e3, base_s * 1e3,
               rc ? 0.0 : base_s / s1);
    }
    char dir[] = "/tmp/hx-bench-offload-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    /* disk: chunks of 300 KiB at depth 0 and 1 as above (the tier's chunks of 1 MiB blocks
     * are then 40% padding), and of 4 MiB at depth 0 (12% padding); each against cpu
     * offload under the same cap */
    size_t chunk[3] = {300 << 10, 300 << 10, 4 << 20};
    int depth[3] = {0, 1, 0};
    for (int k = 0; k < 3; k++)
        if (disk_case(&m, dir, chunk[k], depth[k], base_s, false)) return 1;
    /* the same layers at batch B_WIDE: the forward and backward take long enough to hide
     * the resident region's read and the first chunks' */
    deep_mlp wide;
    double wide_s;
    size_t wide_peak;
    c.offload = hx_offload_config_default();
    c.max_device_memory = 0;
    if (deep_mlp_build(B_WIDE, W, L, &wide) || run(&wide, &c, &wide_s, &wide_peak, NULL) ||
        disk_case(&wide, dir, chunk[2], 0, wide_s, false) ||
        disk_case(&wide, dir, chunk[2], 0, wide_s, true))
        return 1;
    deep_mlp_free(&wide);
    rmdir(dir);
    c.offload = hx_offload_config_default();
    /* auto_offload uncapped (0: 8 GiB) and under the manual cases' caps */
    for (int k = 0; k < 3; k++) {
        c.offload = hx_offload_config_default();
        c.offload.auto_offload = true;
        c.max_device_memory = caps[k];
        double s1;
        size_t peak1;
        hx_offload_report r = {0};
        int rc = run(&m, &c, &s1, &peak1, &r);
        printf("{\"case\":\"auto_offload\",\"layers\":%d,\"param_bytes\":%zu,\"cap\":%zu,"
               "\"trains_under_cap\":%s,\"offload_param\":\"%s\",\"chunk_size\":%zu,"
               "\"prefetch_depth\":%d,\"policies_planned\":%d,\"margin\":%zu,"
               "\"predicted_no_offload\":%zu,\"predicted_peak\":%zu,"
               "\"measured_peak_reserved\":%zu,\"measured_peak_allocated\":%zu,"
               "\"measured_over_predicted\":%.4f,\"params_over_cap\":%.2f,\"create_ms\":%.1f,"
               "\"step_ms\":%.3f,"
               "\"ceiling_step_ms\":%.3f,\"throughput_vs_uncapped\":%.3f}\n",
               L, m.param_bytes, r.capacity, rc ? "false" : "true",
               hx_offload_target_name(r.offload_param), r.chunk_size, r.prefetch_depth,
               r.candidates, r.margin, r.predicted_no_offload, r.predicted_peak,
               r.measured_peak_reserved, r.measured_peak_allocated,
               r.predicted_peak ? (double)r.measured_peak_reserved / r.predicted_peak : 0.0,
               r.capacity ? (double)m.param_bytes / r.capacity : 0.0, create_s * 1e3,
               rc ? 0.0 : s1 * 1e3,
               base_s * 1e3, rc ? 0.0 : base_s / s1);
    }
    deep_mlp_free(&m);
    return 0;
}
