/* test_memtrace: the trace format (round trip, comments, every kind of bad
 * line reported with its line number), the recorder (HX_MEMTRACE, two
 * threads, atomic write), replay figures on synthetic traces (the GPT-like
 * pattern: peak reserved / peak live <= 1.05 and at most half the
 * baseline's waste; the fragmenting pattern), the OOM point under a cap,
 * and the `hetex memreplay` command. */
#include "memory/memtrace.h"
#include "memtrace_gen.h"
#include "memory/pool.h"
#include "testutil.h"
#include "tmpdir.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static const char *tmp_path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static bool same_events(const hx_mem_event *a, const hx_mem_event *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].id != b[i].id || a[i].alloc != b[i].alloc ||
            (a[i].alloc && (a[i].bytes != b[i].bytes || a[i].persistent != b[i].persistent)))
            return false;
    return true;
}

static void test_round_trip(void)
{
    size_t n[3];
    hx_gpt_trace_shape sh = {4, 256, 4, 128, 2, 1000, 2};
    hx_mem_event *ev[3] = {hx_memtrace_gen_random(7, 3000, 1 << 24, 50, &n[0]),
                           hx_memtrace_gen_gpt(&sh, &n[1]), hx_memtrace_gen_fragment(3, 4, &n[2])};
    hx_mem_err err;
    for (int k = 0; k < 3; k++) {
        CHECK(ev[k] && n[k] > 100, "generator %d: %zu events", k, n[k]);
        const char *path = tmp_path("rt.trace");
        CHECK(!hx_memtrace_write(path, ev[k], n[k], &err), "%s", err.msg);
        hx_mem_event *back;
        size_t m;
        CHECK(!hx_memtrace_load(path, &back, &m, &err), "generator %d: %s", k, err.msg);
        CHECK(m == n[k] && same_events(ev[k], back, m), "generator %d: round trip", k);
        CHECK(access(tmp_path("rt.trace.tmp"), F_OK) != 0, "no temporary file is left");
        free(back);
        /* generators are pure functions of their arguments */
        size_t m2;
        hx_mem_event *again = k == 0 ? hx_memtrace_gen_random(7, 3000, 1 << 24, 50, &m2)
                              : k == 1 ? hx_memtrace_gen_gpt(&sh, &m2)
                                       : hx_memtrace_gen_fragment(3, 4, &m2);
        CHECK(m2 == n[k] && same_events(ev[k], again, m2), "generator %d repeats", k);
        free(again);
        free(ev[k]);
    }
}

static void test_format_errors(void)
{
    const char *path = tmp_path("bad.trace");
    write_text(path, "# a comment\n\n  # indented comment\nhxmemtrace 1\na 5 100\na 6 7 p\n# mid\nf 5\nf 6\n");
    hx_memreplay_report r;
    CHECK(hx_memreplay(path, 0, &r) == HX_OK, "comments, blank lines, omitted flag: %s", hx_last_error());
    CHECK(r.events == 4 && r.allocs == 2 && r.frees == 2 && r.peak_live == 107 &&
          r.pools.persistent.peak_requested == 7 && r.pools.transient.peak_requested == 100,
          "the small trace: %lld events, live %zu", (long long)r.events, r.peak_live);
    struct { const char *text, *want; hx_status st; } bad[] = {
        {"hxmemtrace 2\n", "line 1", HX_ERR_CORRUPT},
        {"a 1 100 t\n", "header", HX_ERR_CORRUPT},
        {"", "no header", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 100 t\nx 1\n", "line 3", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 100 q\n", "line 2", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 -100 t\n", "line 2", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1\n", "malformed", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 100 t extra\n", "line 2", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 100 t\na 1 5 t\n", "allocated while live", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 100 t\nf 2\n", "not live", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 100 t\nf 1\nf 1\n", "line 4", HX_ERR_CORRUPT},
        /* numbers past 64 bits are refused, not saturated */
        {"hxmemtrace 1\na 1 100000000000000000000000 t\n", "line 2", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 18446744073709551616 1 t\n", "line 2", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na 1 100 t\nf 18446744073709551617\n", "line 3", HX_ERR_CORRUPT},
        {"hxmemtrace 1\na +1 100 t\n", "line 2", HX_ERR_CORRUPT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(path, bad[i].text);
        memset(&r, 0x5a, sizeof r);
        hx_status st = hx_memreplay(path, 0, &r);
        CHECK(st == bad[i].st && strstr(hx_last_error(), bad[i].want) &&
              strstr(hx_last_error(), "hx_memreplay"),
              "bad trace %zu: %s: %s", i, hx_status_name(st), hx_last_error());
    }
    /* a NUL byte hides nothing: what follows it on the line is read too */
    static const char with_nul[] = "hxmemtrace 1\na 1 100 t\0 garbage\nf 1\n";
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(with_nul, 1, sizeof with_nul - 1, f) == sizeof with_nul - 1, "write %s", path);
    if (f) fclose(f);
    hx_status nul_st = hx_memreplay(path, 0, &r);
    CHECK(nul_st == HX_ERR_CORRUPT && strstr(hx_last_error(), "line 2") && strstr(hx_last_error(), "NUL"),
          "a NUL byte in line 2: %s: %s", hx_status_name(nul_st), hx_last_error());
    CHECK(hx_memreplay(tmp_path("missing.trace"), 0, &r) == HX_ERR_IO &&
          strstr(hx_last_error(), "missing.trace"), "a missing file: %s", hx_last_error());
    CHECK(hx_memreplay(NULL, 0, &r) == HX_ERR_INVALID_ARGUMENT, "NULL path");
    CHECK(hx_memreplay(path, 0, NULL) == HX_ERR_INVALID_ARGUMENT, "NULL report");
}

/* ---- the recorder ------------------------------------------------------------------------ */

typedef struct rec_arg {
    hx_mem_pools *p;
    uint64_t seed;
    int errors;
} rec_arg;

static void *churn(void *v)
{
    rec_arg *a = v;
    test_rng r = test_rng_make(a->seed);
    void *live[32] = {0};
    hx_mem_err err;
    for (int i = 0; i < 3000; i++) {
        int k = (int)(test_rng_u64(&r) % 32);
        if (live[k]) {
            a->errors += hx_mem_pools_free(a->p, live[k], &err) != HX_OK;
            live[k] = NULL;
        } else {
            a->errors += hx_mem_pools_alloc(a->p, 1 + test_rng_u64(&r) % (4 << 20),
                                            i % 4 ? HX_MEM_TRANSIENT : HX_MEM_PERSISTENT, "x",
                                            &live[k], &err) != HX_OK;
        }
    }
    for (int k = 0; k < 32; k++) hx_mem_pools_free(a->p, live[k], &err);
    return NULL;
}

static void test_recorder(void)
{
    hx_mem_err err;
    const char *path = tmp_path("rec.trace");
    unsetenv("HX_MEMTRACE");
    CHECK(hx_memtrace_open_env(&err) == NULL, "no HX_MEMTRACE, no recorder");
    setenv("HX_MEMTRACE", path, 1);
    hx_memtrace *t = hx_memtrace_open_env(&err);
    unsetenv("HX_MEMTRACE");
    CHECK(t != NULL, "HX_MEMTRACE=path opens a recorder: %s", err.msg);
    if (!t) return;
    hx_mem_virtual v = {0};
    hx_mem_pools_config c = hx_mem_pools_config_default("traced", SIZE_MAX);
    c.source = hx__mem_virtual_source(&v);
    c.trace = t;
    hx_mem_pools *p;
    CHECK(!hx_mem_pools_create(&c, &p, &err), "%s", err.msg);
    pthread_t th[2];
    rec_arg a[2] = {{p, 11, 0}, {p, 12, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, churn, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    hx_device_pools_stats s;
    hx_mem_pools_stats(p, &s);
    hx_mem_pools_destroy(p);
    CHECK(a[0].errors + a[1].errors == 0, "the churn ran without errors");
    FILE *f = fopen(path, "r");
    long size = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fclose(f);
    }
    CHECK(size == 0, "nothing is written before close (%ld bytes)", size);
    CHECK(!hx_memtrace_close(t, &err), "%s", err.msg);
    hx_mem_event *ev;
    size_t n;
    CHECK(!hx_memtrace_load(path, &ev, &n, &err), "the recorded trace loads: %s", err.msg);
    int64_t allocs = 0;
    for (size_t i = 0; i < n; i++) allocs += ev[i].alloc;
    CHECK(allocs == s.total.allocs && (int64_t)n - allocs == s.total.frees,
          "every alloc and free is recorded: %lld/%lld allocs, %lld/%lld frees", (long long)allocs,
          (long long)s.total.allocs, (long long)((int64_t)n - allocs), (long long)s.total.frees);
    hx_memreplay_report r1, r2;
    CHECK(!hx_memtrace_replay(ev, n, SIZE_MAX, &r1, &err), "%s", err.msg);
    CHECK(r1.peak_live == s.total.peak_requested && r1.pools.persistent.peak_requested ==
          s.persistent.peak_requested, "the trace's peak live is what the pools saw (%zu vs %zu)",
          r1.peak_live, s.total.peak_requested);
    CHECK(!hx_memtrace_replay(ev, n, SIZE_MAX, &r2, &err) && !memcmp(&r1, &r2, sizeof r1),
          "replay is deterministic");
    free(ev);
    CHECK(hx_memtrace_open("/nonexistent-dir/x.trace", &t, &err) == HX_ERR_IO && !t &&
          strstr(err.msg, "/nonexistent-dir/x.trace"), "an unwritable path fails at open: %s", err.msg);
}

/* ---- replay figures ------------------------------------------------------------------------ */

static void test_replay_figures(void)
{
    hx_mem_err err;
    hx_memreplay_report r;
    size_t n;
    /* GPT-2-like: 24 layers of hidden 1024 and a small one */
    hx_gpt_trace_shape shapes[2] = {{24, 1024, 16, 1024, 4, 50257, 3}, {6, 256, 4, 128, 4, 4096, 3}};
    for (int k = 0; k < 2; k++) {
        hx_mem_event *ev = hx_memtrace_gen_gpt(&shapes[k], &n);
        CHECK(!hx_memtrace_replay(ev, n, SIZE_MAX, &r, &err), "%s", err.msg);
        double wp = (double)r.pools.total.peak_reserved - r.peak_live;
        double wb = (double)r.baseline.peak_reserved - r.peak_live;
        CHECK(r.pools.total.peak_requested == r.peak_live && r.baseline.peak_requested == r.peak_live,
              "both served every byte");
        /* the transient pool lays out the first step and reuses it */
        CHECK(r.pools_ratio >= 1 && r.pools_ratio <= 1.02,
              "GPT %d: pools peak reserved / peak live = %.4f", k, r.pools_ratio);
        CHECK(wp <= 0.5 * wb, "GPT %d: pools waste %.1f MiB, baseline %.1f MiB", k, wp / (1 << 20),
              wb / (1 << 20));
        CHECK(r.pools.total.allocs == r.allocs && r.pools.total.live_blocks == r.allocs - r.frees,
              "every event reached the pools");
        /* under a cap below the peak both run out, at an allocation */
        size_t cap = r.peak_live / 10 * 8;
        hx_memreplay_report c;
        CHECK(!hx_memtrace_replay(ev, n, cap, &c, &err), "%s", err.msg);
        CHECK(c.pools_oom_event >= 0 && c.baseline_oom_event >= 0 && ev[c.pools_oom_event].alloc &&
              ev[c.baseline_oom_event].alloc && c.pools_oom_live <= cap && c.baseline_oom_live <= cap &&
              c.pools.total.peak_reserved <= cap && c.baseline.peak_reserved <= cap,
              "GPT %d under a cap of 80%% of the peak: OOM at events %lld / %lld", k,
              (long long)c.pools_oom_event, (long long)c.baseline_oom_event);
        CHECK(c.pools_oom_event >= c.baseline_oom_event,
              "the pools run out no earlier than the baseline (%lld vs %lld)",
              (long long)c.pools_oom_event, (long long)c.baseline_oom_event);
        /* with the pools' own peak as the cap they never run out */
        CHECK(!hx_memtrace_replay(ev, n, r.pools.total.peak_reserved, &c, &err) && c.pools_oom_event < 0,
              "GPT %d fits a cap of the pools' uncapped peak", k);
        free(ev);
    }
    /* the fragmenting pattern: the baseline grows, the pools do not */
    hx_mem_event *ev = hx_memtrace_gen_fragment(1, 8, &n);
    CHECK(!hx_memtrace_replay(ev, n, SIZE_MAX, &r, &err), "%s", err.msg);
    CHECK(r.pools_ratio < 1.1 && r.baseline_ratio > 2,
          "fragmenting pattern: pools %.3f, baseline %.3f", r.pools_ratio, r.baseline_ratio);
    free(ev);
    /* random lifetimes: both serve everything, statistics add up */
    ev = hx_memtrace_gen_random(3, 5000, 16 << 20, 100, &n);
    CHECK(!hx_memtrace_replay(ev, n, SIZE_MAX, &r, &err), "%s", err.msg);
    CHECK(r.pools_ratio >= 1 && r.baseline_ratio >= 1 && r.pools.total.peak_requested == r.peak_live &&
          r.pools.transient.allocated == 0 && r.baseline.requested == r.pools.persistent.requested,
          "random: pools %.3f, baseline %.3f", r.pools_ratio, r.baseline_ratio);
    free(ev);
}

static void test_cli(void)
{
    size_t n;
    hx_gpt_trace_shape sh = {2, 128, 2, 64, 2, 500, 2};
    hx_mem_event *ev = hx_memtrace_gen_gpt(&sh, &n);
    hx_mem_err err;
    const char *path = tmp_path("cli.trace");
    hx_memtrace_write(path, ev, n, &err);
    free(ev);
    if (access("./hetex", X_OK) != 0) {
        CHECK(false, "the hetex CLI is not in the test's directory");
        return;
    }
    char cmd[1024], out[4096] = {0};
    snprintf(cmd, sizeof cmd, "./hetex memreplay %s --cap 4M 2>&1", path);
    FILE *f = popen(cmd, "r");
    size_t got = fread(out, 1, sizeof out - 1, f);
    int rc = pclose(f);
    out[got] = 0;
    CHECK(rc == 0 && strstr(out, "hetex pools") && strstr(out, "PyTorch-style") &&
          strstr(out, "peak live") && strstr(out, "ratio") && strstr(out, "cap 4.0 MiB"),
          "hetex memreplay prints both allocators: %s", out);
    snprintf(cmd, sizeof cmd, "./hetex memreplay %s --cap lots 2>&1", path);
    f = popen(cmd, "r");
    got = fread(out, 1, sizeof out - 1, f);
    out[got] = 0;
    CHECK(pclose(f) != 0 && strstr(out, "--cap"), "a bad cap is refused: %s", out);
}

static int setup(void) { return test_make_tmpdir(dir, sizeof dir, "hx_test_memtrace") ? 0 : 1; }
static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"round_trip", test_round_trip},
    {"format_errors", test_format_errors},
    {"recorder", test_recorder},
    {"replay_figures", test_replay_figures},
    {"cli", test_cli},
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "memtrace", cases, TEST_COUNT(cases), &o);
}
