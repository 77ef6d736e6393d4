/* Saves the library writes through staged files (core/stage.c): a save
 * killed at any instant leaves the previous checkpoint or the new one,
 * never a mix, and its stage file is removed by the next save; a live
 * saver's stage makes another save to the same path fail, naming it; two
 * processes saving to one path leave one complete checkpoint. The savers
 * that get killed are this program run again with --saver (a fresh
 * process: no fork of a process whose OpenMP threads already run). */
#include "hetex.h"
#include "core/core.h"
#include "hetex_checks.h"
#include "testutil.h"
#include "tmpdir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 1 << 20 }; /* 4 MiB of params, 12 MiB checkpoints with Adam's moments */

static char dir[64];

typedef struct model {
    hx_graph *g;
    hx_session *s;
    hx_tensor *w;
} model;

/* loss = sum(w * x): w's gradient is the fed x. */
static model make(void)
{
    model m = {.g = hx_graph_create()};
    int64_t n = N;
    hx_tensor *x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 1, &n);
    m.w = hx_graph_param(m.g, "w", HX_DTYPE_F32, 1, &n, hx_init_uniform(-1, 1));
    hx_tensor *loss = hx_reduce_sum(m.g, hx_mul(m.g, m.w, x), 0, NULL, false);
    hx_optimizer_config opt = hx_optimizer_config_default(HX_OPTIMIZER_ADAM);
    if (hx_graph_backward(m.g, loss) || hx_graph_apply_optimizer(m.g, NULL, &opt)) return m;
    m.s = test_session(m.g, HX_ACCELERATOR_NONE, 1);
    return m;
}

static void drop(model *m)
{
    hx_session_free(m->s);
    hx_graph_free(m->g);
}

/* Training step t (1-based) feeds the same seeded gradient in every process. */
static hx_status step(model *m, int t, float *x)
{
    test_rng r = test_rng_make(1000 + (uint64_t)t);
    test_fill_uniform(&r, x, N, -1, 1);
    hx_feed f = {"x", NULL, x, sizeof(float) * N};
    return hx_session_run(m->s, &f, 1, NULL, 0, HX_RUN_TRAIN);
}

/* --saver PATH: train and save to PATH after every step until killed (or
 * `steps` steps, then exit 0; a failed save exits 3, a refused one 4). */
static int saver(const char *path, int steps)
{
    model m = make();
    float *x = malloc(sizeof *x * N);
    if (!m.s || !x) return 1;
    int refused = 0;
    for (int t = 1; t <= steps; t++) {
        if (step(&m, t, x)) return 1;
        hx_status st = hx_session_save(m.s, path);
        if (st == HX_ERR_STATE) refused++;
        else if (st) return 3;
    }
    drop(&m);
    free(x);
    return refused ? 4 : 0;
}

static pid_t spawn_saver(const char *path, int steps)
{
    char n[16];
    snprintf(n, sizeof n, "%d", steps);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_staged_save", "--saver", path, n, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void pause_us(long us)
{
    struct timespec ts = {us / 1000000, us % 1000000 * 1000};
    nanosleep(&ts, NULL);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The checkpoint at path loads into a fresh model, and its parameters are
 * bitwise those of an uninterrupted run to the step it reports. */
static bool resumes_exactly(const char *path, model *fresh, int64_t *at)
{
    float *x = malloc(sizeof *x * N), *got = malloc(sizeof *got * N), *want = malloc(sizeof *want * N);
    bool ok = false;
    model ref = make();
    if (x && got && want && ref.s && !hx_session_load(fresh->s, path)) {
        *at = hx_session_step(fresh->s);
        ok = !hx_session_read(fresh->s, fresh->w, got, sizeof *got * N);
        for (int t = 1; ok && t <= *at; t++) ok = !step(&ref, t, x);
        ok = ok && !hx_session_read(ref.s, ref.w, want, sizeof *want * N) &&
             !memcmp(got, want, sizeof *got * N);
    }
    drop(&ref);
    free(x);
    free(got);
    free(want);
    return ok;
}

/* A saver killed (SIGKILL) 12 times, at random instants and (every other
 * time) while its stage file exists: each time the
 * checkpoint is the previous complete one or the new one (it resumes
 * bitwise), and the next save leaves no stage file. */
static void test_killed_saves(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/killed.ckpt", dir);
    test_rng r = test_rng_make(77);
    model fresh = make();
    if (!fresh.s) return;
    int left = 0, committed = 0;
    for (int k = 0; k < 12; k++) {
        pid_t pid = spawn_saver(path, 1000000);
        if (k % 2) { /* mid-save: once its stage exists, within 0-2 ms */
            double t0 = now();
            while (!test_stage_files_in(dir) && now() - t0 < 10) pause_us(50);
            pause_us((long)(test_rng_u64(&r) % 2000));
        } else { /* anywhere: starting, training or saving */
            pause_us((long)(30000 + test_rng_u64(&r) % 120000));
        }
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status), "kill %d: the saver was killed (status %d)", k, status);
        left += test_stage_files_in(dir) > 0;
        if (access(path, F_OK) == 0) {
            int64_t at = -1;
            CHECK(resumes_exactly(path, &fresh, &at),
                  "kill %d: the checkpoint (step %lld) resumes bitwise: %s", k, (long long)at,
                  hx_last_error());
            committed++;
            OK(hx_session_save(fresh.s, path));
        }
        else {
            CHECK(test_stage_files_in(dir) <= 1, "kill %d: at most the one stage left", k);
            OK(hx_session_save(fresh.s, path)); /* removes it */
        }
        CHECK(test_stage_files_in(dir) == 0, "kill %d: no stage file after the next save", k);
    }
    printf("  12 kills: %d left a stage file behind (removed by the next save), %d found a "
           "checkpoint\n", left, committed);
    CHECK(committed > 0, "some kill came after a committed save");
    drop(&fresh);
    remove(path);
}

/* Stages of dead writers (and an earlier version's "<path>.tmp") are
 * removed; a stage that a live saver holds makes the save fail naming it,
 * and leaves the checkpoint as it was. */
static void test_dead_and_live_stages(void)
{
    char path[128], dead[200], legacy[200], live[200];
    snprintf(path, sizeof path, "%s/one.ckpt", dir);
    snprintf(dead, sizeof dead, "%s.stage-999999-7", path);
    snprintf(legacy, sizeof legacy, "%s.tmp", path);
    snprintf(live, sizeof live, "%s.stage-1-0", path);
    model m = make();
    if (!m.s) return;
    float *x = malloc(sizeof *x * N);
    OK(step(&m, 1, x));
    FILE *f = fopen(dead, "w"), *g = fopen(legacy, "w");
    CHECK(f && g && fputs("half a checkpoint", f) >= 0, "make the leftovers");
    if (f) fclose(f);
    if (g) fclose(g);
    OK(hx_session_save(m.s, path));
    CHECK(access(dead, F_OK) && access(legacy, F_OK) && test_stage_files_in(dir) == 0,
          "a dead writer's stage and a .tmp are removed by the save");

    int fd = open(live, O_RDWR | O_CREAT, 0600); /* another saver, mid-save */
    CHECK(fd >= 0 && !flock(fd, LOCK_EX), "lock a stage");
    OK(step(&m, 2, x));
    hx_status st = hx_session_save(m.s, path);
    CHECK(st == HX_ERR_STATE && strstr(hx_last_error(), live) && strstr(hx_last_error(), "another saver"),
          "a live saver's stage: %s: %s", hx_status_name(st), hx_last_error());
    model back = make();
    OK(hx_session_load(back.s, path));
    CHECK(hx_session_step(back.s) == 1, "the checkpoint is the earlier one (step %lld)",
          (long long)hx_session_step(back.s));
    hx_embedding_config ec = hx_embedding_config_default();
    ec.rows = 100;
    ec.dim = 4;
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    st = t ? hx_embedding_table_save(t, path) : HX_ERR_INTERNAL;
    CHECK(st == HX_ERR_STATE && strstr(hx_last_error(), live), "a table save too: %s",
          hx_last_error());
    close(fd); /* the saver died: its stage is now a leftover */
    OK(hx_session_save(m.s, path));
    CHECK(test_stage_files_in(dir) == 0, "its stage is removed by the next save");
    OK(hx_embedding_table_save(t, path));
    CHECK(test_stage_files_in(dir) == 0, "and by a table's save");
    hx_embedding_table_free(t);
    drop(&m);
    drop(&back);
    free(x);
    remove(path);
}

/* Two savers alive at once, where the later one's stage sorts first (so
 * both passed the check at their start): the earlier one gives way at its
 * commit with HX_ERR_STATE naming the other's stage, and the file keeps
 * what it held. Through core.h's staged files, to hold the overlap still. */
static void test_overlap_at_commit(void)
{
    char path[128], live[200], text[16] = "";
    snprintf(path, sizeof path, "%s/overlap.bin", dir);
    snprintf(live, sizeof live, "%s.stage-1-0", path);
    hx_stage s;
    OK(hx__stage_open("test", path, &s));
    CHECK(fputs("old", s.f) >= 0, "write the first version");
    OK(hx__stage_commit("test", &s));
    OK(hx__stage_open("test", path, &s));
    CHECK(fputs("new", s.f) >= 0, "write the second version");
    int fd = open(live, O_RDWR | O_CREAT, 0600); /* a saver that started just now */
    CHECK(fd >= 0 && !flock(fd, LOCK_EX), "lock a stage that sorts first");
    hx_status st = hx__stage_commit("test", &s);
    CHECK(st == HX_ERR_STATE && strstr(hx_last_error(), live) &&
              strstr(hx_last_error(), "another saver"),
          "the earlier saver gives way at its commit: %s: %s", hx_status_name(st), hx_last_error());
    FILE *f = fopen(path, "r");
    CHECK(f && fgets(text, sizeof text, f) && !strcmp(text, "old"), "the file still holds '%s'", text);
    if (f) fclose(f);
    CHECK(test_stage_files_in(dir) == 1, "only the other saver's stage is left");
    close(fd);
    remove(live);
    remove(path);
}

/* Two processes saving to one path, 6 times each: every save succeeds or
 * is refused with HX_ERR_STATE, and the file left is one complete
 * checkpoint. */
static void test_two_savers(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/two.ckpt", dir);
    pid_t a = spawn_saver(path, 6), b = spawn_saver(path, 6);
    int sa, sb;
    waitpid(a, &sa, 0);
    waitpid(b, &sb, 0);
    int ea = WIFEXITED(sa) ? WEXITSTATUS(sa) : -1, eb = WIFEXITED(sb) ? WEXITSTATUS(sb) : -1;
    CHECK((ea == 0 || ea == 4) && (eb == 0 || eb == 4),
          "each save succeeded or was refused as busy (exits %d and %d; 3: a save failed)", ea, eb);
    printf("  two savers: exits %d and %d (4: some saves were refused as busy)\n", ea, eb);
    model m = make();
    int64_t at = -1;
    CHECK(m.s && resumes_exactly(path, &m, &at) && at >= 1 && at <= 6,
          "the file left is a complete checkpoint (step %lld): %s", (long long)at, hx_last_error());
    CHECK(test_stage_files_in(dir) == 0, "no stage left");
    drop(&m);
    remove(path);
}

static int setup(void) { return test_make_tmpdir(dir, sizeof dir, "hx_test_staged") ? 0 : 1; }
static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"dead_and_live_stages", test_dead_and_live_stages},
    {"killed_saves", test_killed_saves},
    {"overlap_at_commit", test_overlap_at_commit},
    {"two_savers", test_two_savers},
};

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--saver")) return saver(argv[2], atoi(argv[3]));
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "staged_save", cases, TEST_COUNT(cases), &o);
}
