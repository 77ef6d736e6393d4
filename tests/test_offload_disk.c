/* offload_param=disk: parameters and Adam state in a disk tier file under
 * offload_path (a mkdtemp directory). A 16-layer MLP whose parameters are
 * 3.4x the emu device cap trains under it with the parameters on disk, and
 * its losses and parameters after N steps are bitwise those of an uncapped
 * run without offload; between runs the host holds none of them. Read,
 * write, save and load go to the disk. An injected short write, ENOSPC and
 * a corrupt block on read each fail the step with HX_ERR_IO/HX_ERR_CORRUPT
 * naming the file and offset, and nothing is applied: the parameters and
 * the step count stay, and training goes on bitwise as if the failed steps
 * had not been tried. The file is gone when the session is freed. */
#include "hetex.h"
#include "deep_mlp.h"
#include "testutil.h"
#include "scheduler/offload_disk.h"
#include "memory/disk_tier.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 2, W = 256, L = 16, STEPS = 4 };
#define CAP ((size_t)1200 << 10)

static float xv[STEPS][B * W], yv[STEPS][B * W];
static char dir[64];

static hx_status step(hx_session *s, const deep_mlp *m, int k, float *loss)
{
    hx_feed f[2] = {{NULL, m->x, xv[k], sizeof xv[k]}, {NULL, m->y, yv[k], sizeof yv[k]}};
    hx_fetch o = {NULL, m->loss, loss, sizeof *loss};
    return hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN);
}

static size_t params_of(const deep_mlp *m)
{
    size_t n = 0;
    for (int l = 0; l < L; l++) n += hx_tensor_nbytes(m->w[l]) + hx_tensor_nbytes(m->b[l]);
    return n;
}

/* Every parameter of s, one after the other, into out (params_of bytes). */
static void read_all(hx_session *s, const deep_mlp *m, char *out)
{
    for (int l = 0; l < L; l++) {
        const hx_tensor *t[2] = {m->w[l], m->b[l]};
        for (int j = 0; j < 2; j++) {
            size_t n = hx_tensor_nbytes(t[j]);
            hx_status st = hx_session_read(s, t[j], out, n);
            CHECK(st == HX_OK, "read '%s': %s", hx_tensor_name(t[j]), hx_last_error());
            out += n;
        }
    }
}

static int files_in_dir(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static hx_session_config disk_config(size_t host_budget)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 2;
    c.max_device_memory = CAP;
    c.offload.offload_param = HX_OFFLOAD_DISK;
    snprintf(c.offload.offload_path, sizeof c.offload.offload_path, "%s", dir);
    c.offload.chunk_size = 300 << 10; /* a weight and its bias per device chunk; 1 MiB segments */
    c.offload.prefetch_depth = 0;
    c.offload.offload_cpu_size = host_budget;
    c.offload.host_mem_block_size = 4 << 20;
    return c;
}

/* One injected failure: the step fails with `want` naming the file and an
 * offset, and nothing is applied. */
static void check_fault(hx_session *s, const deep_mlp *m, const hx_disk_faults *f, hx_status want,
                        const char *what, char *before, char *after, int k)
{
    int64_t step0 = hx_session_step(s);
    read_all(s, m, before);
    hx_disk_tier_set_faults(hx__disk_tier_of(s), f);
    float loss;
    hx_status st = step(s, m, k, &loss);
    hx_disk_tier_set_faults(hx__disk_tier_of(s), NULL);
    const char *msg = hx_last_error();
    printf("%s: %s: %s\n", what, hx_status_name(st), msg);
    CHECK(st == want, "%s: %s (%s), want %s", what, hx_status_name(st), msg, hx_status_name(want));
    CHECK(strstr(msg, "hetex-offload-") && strstr(msg, "offset") && strstr(msg, dir),
          "%s: the message names no file and offset: %s", what, msg);
    CHECK(hx_session_step(s) == step0, "%s: the step count moved", what);
    read_all(s, m, after);
    CHECK(!memcmp(before, after, params_of(m)), "%s: parameters changed", what);
}

static void test_disk(void)
{
    deep_mlp m;
    CHECK(deep_mlp_build(B, W, L, &m) == HX_OK, "build: %s", hx_last_error());
    size_t param_bytes = params_of(&m);
    char *before = malloc(param_bytes), *after = malloc(param_bytes);
    CHECK(param_bytes >= 3 * CAP, "parameters %zu B, cap %zu B", param_bytes, CAP);

    /* the reference: uncapped, no offload, the same STEPS steps */
    hx_session_config rc = hx_session_config_default();
    rc.accelerator = HX_ACCELERATOR_EMU;
    rc.n_threads = 2;
    hx_session *ref = NULL;
    CHECK(hx_session_create(m.g, &rc, &ref) == HX_OK, "ref: %s", hx_last_error());
    float ref_loss[STEPS], loss[STEPS];
    for (int k = 0; ref && k < STEPS; k++)
        CHECK(step(ref, &m, k, &ref_loss[k]) == HX_OK, "ref %d: %s", k, hx_last_error());

    /* a host budget under what a run reads at once fails creation, naming it */
    hx_session_config c = disk_config(param_bytes);
    hx_session *s = NULL;
    hx_status st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_ERR_OUT_OF_MEMORY && strstr(hx_last_error(), "offload_cpu_size"), "%s: %s",
          hx_status_name(st), hx_last_error());
    CHECK(files_in_dir() == 0, "a failed creation left %d files", files_in_dir());
    hx_session_config bad = disk_config(0);
    snprintf(bad.offload.offload_path, sizeof bad.offload.offload_path, "%s/missing", dir);
    st = hx_session_create(m.g, &bad, &s);
    CHECK(st == HX_ERR_IO && strstr(hx_last_error(), "missing"), "%s: %s", hx_status_name(st),
          hx_last_error());
    bad = disk_config(0);
    bad.offload.offload_disk_size = param_bytes;
    st = hx_session_create(m.g, &bad, &s);
    CHECK(st == HX_ERR_IO && strstr(hx_last_error(), "offload_disk_size"), "%s: %s",
          hx_status_name(st), hx_last_error());

    c = disk_config(4 * param_bytes); /* parameters and two Adam states */
    st = hx_session_create(m.g, &c, &s);
    CHECK(st == HX_OK, "disk session: %s", hx_last_error());
    if (!s || !ref) goto done;
    CHECK(files_in_dir() == 1, "%d files under the offload path", files_in_dir());
    hx_disk_stats ds;
    hx_disk_tier_stats(hx__disk_tier_of(s), &ds);
    printf("tier: %s%s%s, O_DIRECT %s%s%s, file %s, host buffer %zu B for %zu B of parameters\n",
           ds.engine, *ds.engine_reason ? ": " : "", ds.engine_reason, ds.direct ? "yes" : "no",
           *ds.direct_reason ? ": " : "", ds.direct_reason, ds.file, hx__disk_host_bytes(s),
           param_bytes);
    CHECK(hx__disk_host_bytes(s) >= 3 * param_bytes, "host buffer %zu B", hx__disk_host_bytes(s));

    /* two steps, three failed ones (nothing applied), the other two steps */
    for (int k = 0; k < 2; k++)
        CHECK(step(s, &m, k, &loss[k]) == HX_OK, "step %d: %s", k, hx_last_error());
    hx_disk_faults f = hx_disk_faults_none();
    f.short_write_block = hx__disk_block_of(s, 1, true);
    check_fault(s, &m, &f, HX_ERR_IO, "short write", before, after, 2);
    f = hx_disk_faults_none();
    f.enospc_after_bytes = 3 << 20;
    check_fault(s, &m, &f, HX_ERR_IO, "ENOSPC", before, after, 2);
    f = hx_disk_faults_none();
    f.flip_read_block = hx__disk_block_of(s, 0, false);
    check_fault(s, &m, &f, HX_ERR_CORRUPT, "corrupt block", before, after, 2);
    for (int k = 2; k < STEPS; k++)
        CHECK(step(s, &m, k, &loss[k]) == HX_OK, "step %d: %s", k, hx_last_error());
    CHECK(!memcmp(loss, ref_loss, sizeof loss), "losses %.9g %.9g vs %.9g %.9g", loss[0],
          loss[STEPS - 1], ref_loss[0], ref_loss[STEPS - 1]);
    CHECK(loss[STEPS - 1] < loss[0], "loss %g -> %g", loss[0], loss[STEPS - 1]);
    read_all(s, &m, before);
    read_all(ref, &m, after);
    CHECK(!memcmp(before, after, param_bytes), "parameters differ from the uncapped run");

    hx_device_pools_stats ps;
    hx_memory_stats ms;
    CHECK(hx_session_pool_stats(s, &ps) == HX_OK && hx_session_memory_stats(s, &ms) == HX_OK,
          "stats: %s", hx_last_error());
    hx_disk_tier_stats(hx__disk_tier_of(s), &ds);
    printf("params %zu B, cap %zu B, device peak %zu B; host persistent between runs %zu B; "
           "tier: %lld writes, %lld reads, %lld failed writes, %lld failed reads, %llu B written, "
           "%llu B read, %lld slots\n", param_bytes, CAP, ps.total.peak_allocated,
           ms.persistent_bytes, (long long)ds.writes, (long long)ds.reads,
           (long long)ds.failed_writes, (long long)ds.failed_reads,
           (unsigned long long)ds.bytes_written, (unsigned long long)ds.bytes_read,
           (long long)ds.slots);
    CHECK(ps.total.peak_allocated <= CAP, "device peak %zu over the cap", ps.total.peak_allocated);
    CHECK(ms.persistent_bytes < param_bytes / 8, "host keeps %zu B between runs",
          ms.persistent_bytes);
    CHECK(ds.failed_writes == 2 && ds.failed_reads == 1, "failures %lld/%lld",
          (long long)ds.failed_writes, (long long)ds.failed_reads);

    /* write/read round trip; save, overwrite, load */
    test_rng r = test_rng_make(7);
    float *wv = malloc(hx_tensor_nbytes(m.w[3])), *got = malloc(hx_tensor_nbytes(m.w[3]));
    size_t wn = hx_tensor_nbytes(m.w[3]);
    test_fill_uniform(&r, wv, W * W, -1, 1);
    char ckpt[96];
    snprintf(ckpt, sizeof ckpt, "%s.ckpt", dir);
    read_all(s, &m, before);
    CHECK(hx_session_save(s, ckpt) == HX_OK, "save: %s", hx_last_error());
    CHECK(hx_session_write(s, m.w[3], wv, wn) == HX_OK, "write: %s", hx_last_error());
    CHECK(hx_session_read(s, m.w[3], got, wn) == HX_OK && !memcmp(wv, got, wn), "round trip");
    f = hx_disk_faults_none();
    f.enospc_after_bytes = 0;
    hx_disk_tier_set_faults(hx__disk_tier_of(s), &f);
    float zero[W] = {0};
    st = hx_session_write(s, m.b[0], zero, sizeof zero);
    hx_disk_tier_set_faults(hx__disk_tier_of(s), NULL);
    CHECK(st == HX_ERR_IO, "write under ENOSPC: %s", hx_status_name(st));
    CHECK(hx_session_read(s, m.b[0], got, sizeof zero) == HX_OK &&
              !memcmp(got, before + hx_tensor_nbytes(m.w[0]), sizeof zero),
          "a failed write changed b0");
    CHECK(hx_session_load(s, ckpt) == HX_OK, "load: %s", hx_last_error());
    read_all(s, &m, after);
    CHECK(!memcmp(before, after, param_bytes), "load did not restore the parameters");
    float l0, l1;
    CHECK(step(s, &m, 0, &l0) == HX_OK && step(ref, &m, 0, &l1) == HX_OK && l0 == l1,
          "a step after load: %g vs %g (%s)", l0, l1, hx_last_error());
    unlink(ckpt);
    free(wv);
    free(got);
done:
    hx_session_free(s);
    CHECK(files_in_dir() == 0, "%d files left after the session was freed", files_in_dir());
    hx_session_free(ref);
    deep_mlp_free(&m);
    free(before);
    free(after);
}

int main(void)
{
    test_rng r = test_rng_make(3);
    for (int k = 0; k < STEPS; k++) {
        test_fill_uniform(&r, xv[k], B * W, -1, 1);
        test_fill_uniform(&r, yv[k], B * W, -0.5, 0.5);
    }
    snprintf(dir, sizeof dir, "/tmp/hx-offload-disk-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_disk();
    rmdir(dir);
    return test_finish("offload_disk");
}
