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
#include "tmpdir.h"
#include "session/session.h"
#include "offload/offload_disk.h"
#include "offload/disk_layout.h"
#include "memory/disk_tier.h"
#include "memory/pinned.h"

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

/* Every parameter of s, one after the other, into out (m->param_bytes bytes). */
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
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), f);
    float loss;
    hx_status st = step(s, m, k, &loss);
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), NULL);
    const char *msg = hx_last_error();
    printf("%s: %s: %s\n", what, hx_status_name(st), msg);
    CHECK(st == want, "%s: %s (%s), want %s", what, hx_status_name(st), msg, hx_status_name(want));
    CHECK(strstr(msg, "hetex-offload-") && strstr(msg, "offset") && strstr(msg, dir),
          "%s: the message names no file and offset: %s", what, msg);
    CHECK(hx_session_step(s) == step0, "%s: the step count moved", what);
    read_all(s, m, after);
    CHECK(!memcmp(before, after, m->param_bytes), "%s: parameters changed", what);
}

static void test_disk(void)
{
    deep_mlp m;
    CHECK(deep_mlp_build(B, W, L, &m) == HX_OK, "build: %s", hx_last_error());
    size_t param_bytes = m.param_bytes;
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
    CHECK(test_files_in(dir) == 0, "a failed creation left %d files", test_files_in(dir));
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
    CHECK(test_files_in(dir) == 1, "%d files under the offload path", test_files_in(dir));
    hx_disk_stats ds;
    hx_disk_tier_stats(hx__disk_tier_of(&s->e), &ds);
    printf("tier: %s%s%s, O_DIRECT %s%s%s, file %s, host buffer %zu B for %zu B of parameters\n",
           ds.engine, *ds.engine_reason ? ": " : "", ds.engine_reason, ds.direct ? "yes" : "no",
           *ds.direct_reason ? ": " : "", ds.direct_reason, ds.file, hx__disk_host_bytes(&s->e),
           param_bytes);
    CHECK(hx__disk_host_bytes(&s->e) <= c.offload.offload_cpu_size,
          "host buffers %zu B for a %zu B "
          "budget",
          hx__disk_host_bytes(&s->e), c.offload.offload_cpu_size);

    /* two steps, three failed ones (nothing applied), the other two steps */
    for (int k = 0; k < 2; k++)
        CHECK(step(s, &m, k, &loss[k]) == HX_OK, "step %d: %s", k, hx_last_error());
    hx_disk_faults f = hx_disk_faults_none();
    f.short_write_block = hx__disk_block_of(&s->e, 1, true);
    check_fault(s, &m, &f, HX_ERR_IO, "short write", before, after, 2);
    f = hx_disk_faults_none();
    f.enospc_after_bytes = 3 << 20;
    check_fault(s, &m, &f, HX_ERR_IO, "ENOSPC", before, after, 2);
    f = hx_disk_faults_none();
    f.flip_read_block = hx__disk_block_of(&s->e, 0, false);
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
    hx_disk_tier_stats(hx__disk_tier_of(&s->e), &ds);
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
    /* a failed step may fail several writes in flight together (one batch) */
    CHECK(ds.failed_writes >= 2 && ds.failed_reads == 1, "failures %lld/%lld",
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
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), &f);
    float zero[W] = {0};
    st = hx_session_write(s, m.b[0], zero, sizeof zero);
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), NULL);
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
    CHECK(test_files_in(dir) == 0, "%d files left after the session was freed", test_files_in(dir));
    hx_session_free(ref);
    deep_mlp_free(&m);
    free(before);
    free(after);
}

/* ---- bounded host memory: the optimizer state streamed through chunk slots ---- */

enum { ML = 32, MSTEPS = 4 };

/* The deep MLP in mixed precision: every parameter an f32 master used
 * through its bf16 copy (fused into its Adam update), so the forward and
 * backward read 2 bytes per parameter and the update 12 more. */
typedef struct mp_mlp {
    hx_graph *g;
    hx_tensor *x, *y, *loss, *w[ML], *b[ML];
} mp_mlp;

static hx_tensor *through_bf16(hx_graph *g, hx_tensor *p)
{
    return hx_cast(g, hx_cast(g, p, HX_DTYPE_BF16), HX_DTYPE_F32);
}

static void mp_build(mp_mlp *m)
{
    m->g = hx_graph_create();
    int64_t xs[2] = {B, W}, ws[2] = {W, W}, bs[1] = {W};
    m->x = hx_graph_input(m->g, "x", HX_DTYPE_F32, 2, xs);
    m->y = hx_graph_input(m->g, "y", HX_DTYPE_F32, 2, xs);
    hx_graph_push_target(m->g, HX_TARGET_DEVICE);
    hx_tensor *h = m->x;
    for (int l = 0; l < ML; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        m->w[l] = hx_graph_param(m->g, name, HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1.4));
        snprintf(name, sizeof name, "b%d", l);
        m->b[l] = hx_graph_param(m->g, name, HX_DTYPE_F32, 1, bs, hx_init_uniform(-0.1, 0.1));
        hx_tensor *z = hx_bias_add(m->g, hx_matmul(m->g, h, through_bf16(m->g, m->w[l]), false, false),
                                   through_bf16(m->g, m->b[l]));
        h = l + 1 < ML ? hx_relu(m->g, z) : z;
    }
    m->loss = hx_mse(m->g, h, m->y);
    hx_graph_pop_target(m->g);
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    oc.lr = 1e-3;
    CHECK(m->loss && hx_graph_backward(m->g, m->loss) == HX_OK &&
              hx_graph_apply_optimizer(m->g, NULL, &oc) == HX_OK, "mixed-precision MLP: %s",
          hx_last_error());
}

static hx_status mp_step(hx_session *s, const mp_mlp *m, int k, float *loss)
{
    hx_feed f[2] = {{NULL, m->x, xv[k], sizeof xv[k]}, {NULL, m->y, yv[k], sizeof yv[k]}};
    hx_fetch o = {NULL, m->loss, loss, sizeof *loss};
    return hx_session_run(s, f, 2, &o, 1, HX_RUN_TRAIN);
}

/* Every parameter and optimizer state tensor (masters, half copies, Adam's
 * m and v), one after the other; returns the bytes (out NULL: just count). */
static size_t state_of(hx_session *s, const mp_mlp *m, char *out)
{
    size_t n = 0;
    for (int i = 0; i < m->g->n; i++) {
        const hx_tensor *t = m->g->tensors[i];
        if (t->kind != HX_TENSOR_PARAMETER && t->kind != HX_TENSOR_STATE) continue;
        size_t k = hx_tensor_nbytes(t);
        if (out) {
            hx_status st = hx_session_read(s, t, out + n, k);
            CHECK(st == HX_OK, "read '%s': %s", t->name, hx_last_error());
        }
        n += k;
    }
    return n;
}

/* Every parameter and state tensor of s, the step count and the loss scale
 * as a checkpoint's bytes (the disk tier read once, segment by segment,
 * where hx_session_read would read a segment per tensor); *n its size. */
static char *snapshot(hx_session *s, size_t *n)
{
    char path[96];
    snprintf(path, sizeof path, "%s.snap", dir);
    CHECK(hx_session_save(s, path) == HX_OK, "snapshot: %s", hx_last_error());
    FILE *f = fopen(path, "rb");
    char *p = NULL;
    *n = 0;
    if (f && !fseek(f, 0, SEEK_END)) {
        long size = ftell(f);
        p = size > 0 ? malloc((size_t)size) : NULL;
        if (p && !fseek(f, 0, SEEK_SET)) *n = fread(p, 1, (size_t)size, f);
    }
    if (f) fclose(f);
    unlink(path);
    CHECK(p && *n, "snapshot: cannot read it back");
    return p;
}

/* One failure injected into the chunked update: the step fails naming the
 * file and offset, and nothing is applied. */
static void mp_fault(hx_session *s, const mp_mlp *m, const hx_disk_faults *f, hx_status want,
                     const char *what, const char *names, int k)
{
    int64_t step0 = hx_session_step(s);
    size_t n0, n1;
    char *before = snapshot(s, &n0);
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), f);
    float loss;
    hx_status st = mp_step(s, m, k, &loss);
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), NULL);
    const char *msg = hx_last_error();
    printf("%s: %s: %s\n", what, hx_status_name(st), msg);
    CHECK(st == want, "%s: %s (%s), want %s", what, hx_status_name(st), msg, hx_status_name(want));
    CHECK(strstr(msg, "hetex-offload-") && strstr(msg, "offset") && strstr(msg, names),
          "%s: the message names no file, offset and %s: %s", what, names, msg);
    CHECK(hx_session_step(s) == step0, "%s: the step count moved", what);
    char *after = snapshot(s, &n1);
    CHECK(n0 == n1 && !memcmp(before, after, n0), "%s: parameters or optimizer state changed", what);
    free(before);
    free(after);
}

static void test_bounded(void)
{
    mp_mlp m;
    mp_build(&m);
    hx_session_config rc = hx_session_config_default();
    rc.accelerator = HX_ACCELERATOR_EMU;
    rc.n_threads = 2;
    hx_session *ref = NULL, *s = NULL;
    CHECK(hx_session_create(m.g, &rc, &ref) == HX_OK, "ref: %s", hx_last_error());
    float ref_loss[MSTEPS], loss[MSTEPS];
    for (int k = 0; ref && k < MSTEPS; k++)
        CHECK(mp_step(ref, &m, k, &ref_loss[k]) == HX_OK, "ref %d: %s", k, hx_last_error());

    /* the budget error names the minimum; the minimum itself works. The
     * device holds the f32 widening of each bf16 weight: a larger cap */
    hx_session_config c = disk_config(1 << 20);
    c.max_device_memory = (size_t)16 << 20;
    hx_status st = hx_session_create(m.g, &c, &s);
    const char *least = strstr(hx_last_error(), "at least ");
    size_t need = least ? strtoull(least + 9, NULL, 10) : 0;
    CHECK(st == HX_ERR_OUT_OF_MEMORY && strstr(hx_last_error(), "offload_cpu_size") && need > c.offload.offload_cpu_size,
          "%s: %s", hx_status_name(st), hx_last_error());
    c.offload.offload_cpu_size = need - 1;
    CHECK(hx_session_create(m.g, &c, &s) == HX_ERR_OUT_OF_MEMORY, "a budget of the minimum - 1 "
          "bytes was taken: %s", hx_last_error());
    c.offload.offload_cpu_size = need;
    CHECK(hx_session_create(m.g, &c, &s) == HX_OK, "budget %zu: %s", need, hx_last_error());
    if (!s || !ref) goto done;
    int n_res, n_seg = hx__disk_segments(&s->e, &n_res);
    size_t whole = hx__disk_whole_bytes(&s->e), bytes = state_of(s, &m, NULL);
    size_t resident = 0;
    for (int i = 0; i < m.g->n; i++)
        if (m.g->tensors[i]->kind == HX_TENSOR_STATE && m.g->tensors[i]->dtype == HX_DTYPE_BF16)
            resident += hx_tensor_nbytes(m.g->tensors[i]);
    printf("bounded: budget %zu B (resident region and %d slots), whole set %zu B (the old path "
           "held it all), optimizer state %zu B = %.2fx the budget; %d segments, %d resident\n",
           need, HX_DISK_SLOTS, whole, whole - resident, (double)(whole - resident) / need, n_seg,
           n_res);
    CHECK(need == hx__disk_host_bytes(&s->e) && need < whole && whole == bytes,
          "budget %zu, whole %zu", need, whole);
    CHECK(whole - resident > 3 * need, "optimizer state %zu B is not several times the budget %zu B",
          whole - resident, need);
    CHECK(n_seg - n_res >= 8, "%d chunks", n_seg - n_res);

    char *before = malloc(bytes), *after = malloc(bytes);
    CHECK(mp_step(s, &m, 0, &loss[0]) == HX_OK, "step 0: %s", hx_last_error());
    hx_disk_run_stats rs = hx__disk_last_run(&s->e);
    CHECK(rs.chunks == n_seg - n_res && rs.chunk_bytes_read == rs.chunk_bytes_written &&
              rs.chunk_bytes_read >= whole - resident,
          "run: %d chunks, %llu B read, %llu B written", rs.chunks,
          (unsigned long long)rs.chunk_bytes_read, (unsigned long long)rs.chunk_bytes_written);
    hx_disk_faults f = hx_disk_faults_none();
    f.short_write_block = hx__disk_block_of(&s->e, n_res + 5, true);
    mp_fault(s, &m, &f, HX_ERR_IO, "short write of chunk 5", "chunk 5", 1);
    f = hx_disk_faults_none();
    f.enospc_after_bytes = 6 << 20; /* chunks are written first: fails at the seventh */
    mp_fault(s, &m, &f, HX_ERR_IO, "ENOSPC at chunk 6", "chunk", 1);
    f = hx_disk_faults_none();
    f.flip_read_block = hx__disk_block_of(&s->e, n_res + 9, false);
    mp_fault(s, &m, &f, HX_ERR_CORRUPT, "corrupt block in chunk 9", "chunk 9", 1);
    f = hx_disk_faults_none();
    f.eio_read_block = hx__disk_block_of(&s->e, n_seg - 1, false);
    mp_fault(s, &m, &f, HX_ERR_IO, "EIO reading the last chunk", "chunk", 1);
    /* the resident region: read by the I/O thread while the forward runs, each segment
     * written back by it once its last update ran */
    f = hx_disk_faults_none();
    f.flip_read_block = hx__disk_block_of(&s->e, n_res - 1, false);
    mp_fault(s, &m, &f, HX_ERR_CORRUPT, "corrupt block in the resident region", "resident segment", 1);
    f = hx_disk_faults_none();
    f.short_write_block = hx__disk_block_of(&s->e, 2, true);
    mp_fault(s, &m, &f, HX_ERR_IO, "short write of a resident segment", "resident segment 2", 1);
    for (int k = 1; k < MSTEPS; k++)
        CHECK(mp_step(s, &m, k, &loss[k]) == HX_OK, "step %d: %s", k, hx_last_error());
    CHECK(!memcmp(loss, ref_loss, sizeof loss), "losses %.9g %.9g vs %.9g %.9g", loss[0],
          loss[MSTEPS - 1], ref_loss[0], ref_loss[MSTEPS - 1]);
    CHECK(loss[MSTEPS - 1] < loss[0], "loss %g -> %g", loss[0], loss[MSTEPS - 1]);
    state_of(s, &m, before);
    state_of(ref, &m, after);
    CHECK(!memcmp(before, after, bytes), "parameters or optimizer state differ from the uncapped run");

    /* a training run that fetches a master (in a chunk, not loaded for the run) */
    float got_w[W * W], want_w[W * W], l0, l1;
    hx_feed fd[2] = {{NULL, m.x, xv[0], sizeof xv[0]}, {NULL, m.y, yv[0], sizeof yv[0]}};
    hx_fetch fe[2] = {{NULL, m.loss, &l0, sizeof l0}, {NULL, m.w[7], got_w, sizeof got_w}};
    CHECK(hx_session_run(s, fd, 2, fe, 2, HX_RUN_TRAIN) == HX_OK, "fetch: %s", hx_last_error());
    fe[0].data = &l1;
    fe[1].data = want_w;
    CHECK(hx_session_run(ref, fd, 2, fe, 2, HX_RUN_TRAIN) == HX_OK, "ref fetch: %s", hx_last_error());
    CHECK(l0 == l1 && !memcmp(got_w, want_w, sizeof got_w), "a fetched master differs");

    /* write/read round trip of a master (its half copy follows); save, load */
    char ckpt[96];
    snprintf(ckpt, sizeof ckpt, "%s.mp.ckpt", dir);
    state_of(s, &m, before);
    CHECK(hx_session_save(s, ckpt) == HX_OK, "save: %s", hx_last_error());
    test_rng r = test_rng_make(11);
    test_fill_uniform(&r, want_w, W * W, -1, 1);
    CHECK(hx_session_write(s, m.w[9], want_w, sizeof want_w) == HX_OK, "write: %s", hx_last_error());
    CHECK(hx_session_read(s, m.w[9], got_w, sizeof got_w) == HX_OK &&
              !memcmp(got_w, want_w, sizeof got_w), "write/read round trip of a master");
    /* a load whose write of chunk 3 comes back short applies nothing */
    size_t n0, n1;
    char *snap0 = snapshot(s, &n0);
    f = hx_disk_faults_none();
    f.short_write_block = hx__disk_block_of(&s->e, n_res + 3, true);
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), &f);
    st = hx_session_load(s, ckpt);
    hx_disk_tier_set_faults(hx__disk_tier_of(&s->e), NULL);
    CHECK(st == HX_ERR_IO && strstr(hx_last_error(), "offset"), "load under a short write: %s: %s",
          hx_status_name(st), hx_last_error());
    char *snap1 = snapshot(s, &n1);
    CHECK(n0 == n1 && !memcmp(snap0, snap1, n0), "a failed load changed the session");
    free(snap0);
    free(snap1);
    CHECK(hx_session_load(s, ckpt) == HX_OK, "load: %s", hx_last_error());
    state_of(s, &m, after);
    CHECK(!memcmp(before, after, bytes), "load did not restore the parameters and state");
    CHECK(mp_step(s, &m, 2, &l0) == HX_OK && mp_step(ref, &m, 2, &l1) == HX_OK && l0 == l1,
          "a step after load: %g vs %g (%s)", l0, l1, hx_last_error());
    state_of(s, &m, before);
    state_of(ref, &m, after);
    CHECK(!memcmp(before, after, bytes), "after load and a step: differs from the uncapped run");

    /* an inference run (the resident region read before it, no I/O thread) */
    hx_fetch lf = {NULL, m.loss, &l0, sizeof l0};
    CHECK(hx_session_run(s, fd, 2, &lf, 1, 0) == HX_OK && (lf.data = &l1, 1) &&
              hx_session_run(ref, fd, 2, &lf, 1, 0) == HX_OK && l0 == l1,
          "inference: %g vs %g (%s)", l0, l1, hx_last_error());
    /* a checkpoint of the session without offload (graph order) loads into the disk tier */
    CHECK(hx_session_save(ref, ckpt) == HX_OK && hx_session_load(s, ckpt) == HX_OK, "ref "
          "checkpoint: %s", hx_last_error());
    state_of(s, &m, before);
    CHECK(!memcmp(before, after, bytes), "the uncapped run's checkpoint loaded other values");
    unlink(ckpt);

    /* host memory: the pinned pool never held more than the budget, the tier no bounce buffer */
    hx_pinned_stats ps;
    hx_pinned_stats_get(hx__disk_pool_of(&s->e), &ps);
    hx_disk_stats ds;
    hx_disk_tier_stats(hx__disk_tier_of(&s->e), &ds);
    printf("bounded: pinned pool peak %zu B reserved (%zu B allocated) under a %zu B budget; "
           "whole set %zu B; tier bounce buffers %zu B; now %zu B reserved\n",
           ps.pool.peak_reserved, ps.pool.peak_allocated, need, whole, ds.bounce_bytes,
           ps.pool.reserved);
    CHECK(ps.pool.peak_reserved <= need &&
                  ps.pool.peak_allocated >= need - hx__disk_host_bytes(&s->e) / 4,
          "pinned peak %zu B against a %zu B budget", ps.pool.peak_reserved, need);
    CHECK(ds.bounce_bytes == 0 && ps.pool.reserved == 0, "bounce %zu B, held between calls %zu B",
          ds.bounce_bytes, ps.pool.reserved);
    /* the file: two copies of every segment and the writes of one batch in flight, at most */
    size_t stored = 0;
    for (int k = 0; k < n_seg; k++) stored += hx__disk_of(&s->e)->segs[k].bytes;
    size_t file = (size_t)ds.slots * HX_DISK_BLOCK;
    printf("bounded: file %zu B for %zu B stored\n", file, stored);
    CHECK(file <= 2 * stored + hx__disk_of(&s->e)->slot_bytes + hx__disk_of(&s->e)->res_bytes,
          "file %zu B", file);
    free(before);
    free(after);
done:
    hx_session_free(s);
    hx_session_free(ref);
    hx_graph_free(m.g);
}

/* Without an accelerator every op is a host kernel: each waits for the
 * resident segments it reads while the I/O thread reads on. */
static void test_host_only(void)
{
    mp_mlp m;
    mp_build(&m);
    hx_session_config rc = hx_session_config_default();
    rc.accelerator = HX_ACCELERATOR_NONE;
    rc.n_threads = 2;
    hx_session *ref = NULL;
    CHECK(hx_session_create(m.g, &rc, &ref) == HX_OK, "host-only ref: %s", hx_last_error());
    float ref_loss[2] = {0};
    for (int k = 0; ref && k < 2; k++)
        CHECK(mp_step(ref, &m, k, &ref_loss[k]) == HX_OK, "host-only ref %d: %s", k, hx_last_error());
    size_t bytes = ref ? state_of(ref, &m, NULL) : 0;
    char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
    if (ref) state_of(ref, &m, b);
    /* no budget (three slots), and a budget with room for a slot per chunk (every chunk read
     * during the forward and backward) */
    for (int v = 0; v < 2 && ref; v++) {
        hx_session_config c = disk_config(v ? (size_t)64 << 20 : 0);
        c.accelerator = HX_ACCELERATOR_NONE;
        hx_session *s = NULL;
        CHECK(hx_session_create(m.g, &c, &s) == HX_OK, "host-only disk session: %s", hx_last_error());
        if (!s) continue;
        int n_res, n_seg = hx__disk_segments(&s->e, &n_res);
        int slots = hx__disk_of(&s->e)->n_slots;
        CHECK(v ? slots == n_seg - n_res : slots == HX_DISK_SLOTS, "%d slots for %d chunks", slots,
              n_seg - n_res);
        float l = 0;
        for (int k = 0; k < 2; k++)
            CHECK(mp_step(s, &m, k, &l) == HX_OK && l == ref_loss[k], "host-only step %d, %d slots: "
                  "%g vs %g (%s)", k, slots, l, ref_loss[k], hx_last_error());
        state_of(s, &m, a);
        CHECK(!memcmp(a, b, bytes), "host-only, %d slots: parameters or state differ from the run "
              "without disk", slots);
        hx_session_free(s);
    }
    free(a);
    free(b);
    hx_session_free(ref);
    hx_graph_free(m.g);
}

static int setup(void)
{
    test_rng r = test_rng_make(3);
    for (int k = 0; k < STEPS; k++) {
        test_fill_uniform(&r, xv[k], B * W, -1, 1);
        test_fill_uniform(&r, yv[k], B * W, -0.5, 0.5);
    }
    return test_make_tmpdir(dir, sizeof dir, "hx-offload-disk") ? 0 : 1;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"disk", test_disk},
    {"bounded", test_bounded},
    {"host_only", test_host_only},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "offload_disk", cases, TEST_COUNT(cases), &o);
}
