/* Parameter offload to the host (offload_param=cpu) on emu: a deep MLP
 * (L layers of 256x256, Adam) trained uncapped without offload (the
 * ceiling, measured in the same run) and with offload at prefetch depth 0
 * and 1 under a cap just above its measured device peak; then auto_offload
 * uncapped and under each of those caps (the policy it chose, its
 * predicted device peak against the measured one); offload_param=disk at
 * depth 0 and 1 under the same caps (files in a mkdtemp directory under
 * /tmp, a host budget of 4x the parameters: they and Adam's two states are
 * read whole per step and written back), against the cpu case and the
 * uncapped run. One JSON object per
 * case: parameter bytes, device peak, parameters / peak, step time and its
 * ratio to the uncapped step. Small by design (the machine is small): the
 * ratio params / peak grows with L, the window does not. */
#include "deep_mlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { B = 8, W = 256, STEPS = 5 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Mean step seconds after one warm-up step; *peak: the device's peak;
 * *r (when not NULL): the offload report after the steps; create_s: the
 * last session creation's seconds (auto_offload plans its candidates). */
static double create_s;

static int run(const deep_mlp *m, const hx_session_config *c, double *step_s, size_t *peak,
               hx_offload_report *r)
{
    static float x[B * W], y[B * W];
    for (int i = 0; i < B * W; i++) x[i] = (float)((i * 7919) % 200) / 100.0f - 1, y[i] = -x[i];
    hx_session *s;
    double c0 = now();
    hx_status st = hx_session_create(m->g, c, &s);
    create_s = now() - c0;
    if (st) {
        fprintf(stderr, "bench_offload: %s\n", hx_last_error());
        return -1;
    }
    hx_feed f[2] = {{NULL, m->x, x, sizeof x}, {NULL, m->y, y, sizeof y}};
    double t0 = 0;
    for (int k = 0; k <= STEPS; k++) {
        if (k == 1) t0 = now();
        if (hx_session_run(s, f, 2, NULL, 0, HX_RUN_TRAIN)) {
            fprintf(stderr, "bench_offload: %s\n", hx_last_error());
            hx_session_free(s);
            return -1;
        }
    }
    *step_s = (now() - t0) / STEPS;
    hx_device_pools_stats ps;
    hx_session_pool_stats(s, &ps);
    *peak = ps.total.peak_allocated;
    if (r) hx_session_offload_report(s, r);
    hx_session_free(s);
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
    double cpu_s[2] = {0};
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
        cpu_s[depth] = rc ? 0 : s1;
        printf("{\"case\":\"offload_cpu_depth%d\",\"layers\":%d,\"param_bytes\":%zu,\"cap\":%zu,"
               "\"trains_under_cap\":%s,\"device_peak\":%zu,\"params_over_cap\":%.2f,"
               "\"step_ms\":%.3f,\"ceiling_step_ms\":%.3f,\"throughput_vs_uncapped\":%.3f}\n",
               depth, L, m.param_bytes, c.max_device_memory, rc ? "false" : "true", peak1,
               (double)m.param_bytes / c.max_device_memory, s1 * 1e3, base_s * 1e3,
               rc ? 0.0 : base_s / s1);
    }
    char dir[] = "/tmp/hx-bench-offload-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    for (int depth = 0; depth <= 1; depth++) {
        c.offload = hx_offload_config_default();
        c.offload.offload_param = HX_OFFLOAD_DISK;
        snprintf(c.offload.offload_path, sizeof c.offload.offload_path, "%s", dir);
        c.offload.offload_cpu_size = 4 * m.param_bytes;
        c.offload.host_mem_block_size = 64 << 20;
        c.offload.chunk_size = 300 << 10;
        c.offload.prefetch_depth = depth;
        c.max_device_memory = caps[depth + 1];
        double s1;
        size_t peak1;
        int rc = run(&m, &c, &s1, &peak1, NULL);
        printf("{\"case\":\"offload_disk_depth%d\",\"layers\":%d,\"param_bytes\":%zu,\"cap\":%zu,"
               "\"host_budget\":%zu,\"trains_under_cap\":%s,\"device_peak\":%zu,"
               "\"step_ms\":%.3f,\"cpu_offload_step_ms\":%.3f,\"ceiling_step_ms\":%.3f,"
               "\"throughput_vs_cpu_offload\":%.3f,\"throughput_vs_uncapped\":%.3f}\n",
               depth, L, m.param_bytes, c.max_device_memory, c.offload.offload_cpu_size,
               rc ? "false" : "true", peak1, rc ? 0.0 : s1 * 1e3, cpu_s[depth] * 1e3, base_s * 1e3,
               rc ? 0.0 : cpu_s[depth] / s1, rc ? 0.0 : base_s / s1);
    }
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
               r.offload_param == HX_OFFLOAD_CPU ? "cpu" : "none", r.chunk_size, r.prefetch_depth,
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
