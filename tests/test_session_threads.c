/* The thread rules (hetex.h): a session is used by one thread at a time,
 * and the library enforces it: a run (or a checkpoint, a parameter read or
 * write) that starts while another thread's call on the same session is in
 * progress fails with HX_ERR_STATE and changes nothing, so runs never mix
 * each other's feeds. Different sessions run at once. A table shared by
 * several sessions: runs that only read it overlap; a training run, a
 * write of rows or a load holds it alone, and what overlaps one fails with
 * HX_ERR_STATE naming the table. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { R = 24, K = 48, RUNS = 12 };

/* Whether `seconds` have passed since *start (set on the first call). */
static bool past(struct timespec *start, double seconds)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!start->tv_sec && !start->tv_nsec) *start = now;
    return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec) > seconds;
}

/* After a refusal: let the other thread go on. */
static void back_off(void) { nanosleep(&(struct timespec){0, 100000}, NULL); }

/* y = relu(x @ w) on emu with a launch latency, so that a run lasts long
 * enough for another thread to try the session meanwhile. */
typedef struct model {
    hx_graph *g;
    hx_tensor *x, *w, *y;
} model;

static model build(void)
{
    model m = {hx_graph_create(), NULL, NULL, NULL};
    int64_t xs[2] = {R, K}, ws[2] = {K, K};
    m.x = hx_graph_input(m.g, "x", HX_DTYPE_F32, 2, xs);
    m.w = hx_graph_param(m.g, "w", HX_DTYPE_F32, 2, ws, hx_init_xavier_uniform(1));
    m.y = hx_relu(m.g, hx_matmul(m.g, m.x, m.w, false, false));
    return m;
}

static hx_session *slow_session(hx_graph *g)
{
    hx_session_config c = hx_session_config_default();
    c.accelerator = HX_ACCELERATOR_EMU;
    c.n_threads = 1;
    c.emu_cost = (hx_emu_cost){0, 2e-3, 0};
    return test_session_with(g, &c, "session");
}

/* What one thread does: RUNS successful runs with its own x, retrying
 * while the session is in use; every result must be its own. */
typedef struct runner {
    hx_session *s;
    const model *m;
    float x[R * K], want[R * K];
    atomic_int *busy_seen;
    int wrong, other_errors, done;
    char other[256];
} runner;

static void *run_many(void *arg)
{
    runner *r = arg;
    float y[R * K];
    struct timespec start = {0, 0};
    while (r->done < RUNS && !past(&start, 30)) {
        hx_feed f = {NULL, r->m->x, r->x, sizeof r->x};
        hx_fetch o = {NULL, r->m->y, y, sizeof y};
        hx_status st = hx_session_run(r->s, &f, 1, &o, 1, 0);
        if (st == HX_ERR_STATE) {
            atomic_fetch_add(r->busy_seen, 1);
            back_off();
            continue;
        }
        if (st) {
            r->other_errors++;
            snprintf(r->other, sizeof r->other, "%s: %s", hx_status_name(st), hx_last_error());
            continue;
        }
        r->wrong += memcmp(y, r->want, sizeof y) != 0;
        r->done++;
    }
    return NULL;
}

static void test_one_thread_per_session(void)
{
    model m = build();
    hx_session *s = slow_session(m.g);
    if (!s) return;
    static runner r[2];
    atomic_int busy = 0;
    for (int t = 0; t < 2; t++) {
        memset(&r[t], 0, sizeof r[t]);
        r[t].s = s;
        r[t].m = &m;
        r[t].busy_seen = &busy;
        test_rng g = test_rng_make(70 + (uint64_t)t);
        test_fill_uniform(&g, r[t].x, R * K, -1, 1);
        hx_feed f = {NULL, m.x, r[t].x, sizeof r[t].x};
        hx_fetch o = {NULL, m.y, r[t].want, sizeof r[t].want};
        OK(hx_session_run(s, &f, 1, &o, 1, 0)); /* one thread after the other: fine */
    }
    CHECK(memcmp(r[0].want, r[1].want, sizeof r[0].want) != 0, "the two threads' results differ");
    pthread_t th[2];
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, run_many, &r[t]);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++) {
        CHECK(r[t].done == RUNS, "thread %d: %d of %d runs done", t, r[t].done, RUNS);
        CHECK(r[t].wrong == 0, "thread %d: %d runs gave another feed's result", t, r[t].wrong);
        CHECK(r[t].other_errors == 0, "thread %d: %d runs failed: %s", t, r[t].other_errors, r[t].other);
    }
    CHECK(atomic_load(&busy) > 0, "no run was refused while another was in progress");
    hx_session_free(s);
    hx_graph_free(m.g);
}

/* While one thread's run is in progress, the other calls that use the
 * session are refused too, with a message that says why. */
typedef struct holder {
    hx_session *s;
    const model *m;
    float x[R * K];
    atomic_int running;
} holder;

static void *hold_with_runs(void *arg)
{
    holder *h = arg;
    float y[R * K];
    while (atomic_load(&h->running)) {
        hx_feed f = {NULL, h->m->x, h->x, sizeof h->x};
        hx_fetch o = {NULL, h->m->y, y, sizeof y};
        hx_session_run(h->s, &f, 1, &o, 1, 0);
    }
    return NULL;
}

static void test_other_calls_refused(void)
{
    model m = build();
    hx_session *s = slow_session(m.g);
    if (!s) return;
    static holder h;
    h.s = s;
    h.m = &m;
    test_rng g = test_rng_make(5);
    test_fill_uniform(&g, h.x, R * K, -1, 1);
    atomic_store(&h.running, 1);
    pthread_t th;
    pthread_create(&th, NULL, hold_with_runs, &h);
    float w[K * K];
    bool read_refused = false, lr_refused = false;
    struct timespec start = {0, 0};
    while (!(read_refused && lr_refused) && !past(&start, 30)) {
        if (!read_refused && hx_session_read(s, m.w, w, sizeof w) == HX_ERR_STATE) {
            read_refused = true;
            CHECK(strstr(hx_last_error(), "hx_session_read") && strstr(hx_last_error(), "one thread at a time"),
                  "the message says what and why: %s", hx_last_error());
        }
        if (!lr_refused && hx_session_set_lr_scale(s, 0.5) == HX_ERR_STATE) lr_refused = true;
        back_off();
    }
    atomic_store(&h.running, 0);
    pthread_join(th, NULL);
    CHECK(read_refused, "hx_session_read during runs of another thread was never refused");
    CHECK(lr_refused, "hx_session_set_lr_scale during runs of another thread was never refused");
    OK(hx_session_read(s, m.w, w, sizeof w)); /* and accepted once they are over */
    hx_session_free(s);
    hx_graph_free(m.g);
}

/* Two sessions (of one graph) run at once on two threads, each with its
 * own results. */
static void test_sessions_run_at_once(void)
{
    model m = build();
    static runner r[2];
    atomic_int busy = 0;
    hx_session *s[2] = {slow_session(m.g), slow_session(m.g)};
    if (!s[0] || !s[1]) return;
    for (int t = 0; t < 2; t++) {
        memset(&r[t], 0, sizeof r[t]);
        r[t].s = s[t];
        r[t].m = &m;
        r[t].busy_seen = &busy;
        test_rng g = test_rng_make(90 + (uint64_t)t);
        test_fill_uniform(&g, r[t].x, R * K, -1, 1);
        hx_feed f = {NULL, m.x, r[t].x, sizeof r[t].x};
        hx_fetch o = {NULL, m.y, r[t].want, sizeof r[t].want};
        OK(hx_session_run(s[t], &f, 1, &o, 1, 0));
    }
    pthread_t th[2];
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, run_many, &r[t]);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++)
        CHECK(r[t].done == RUNS && r[t].wrong == 0 && r[t].other_errors == 0,
              "session %d: %d runs, %d wrong, %d failed %s", t, r[t].done, r[t].wrong, r[t].other_errors,
              r[t].other);
    CHECK(atomic_load(&busy) == 0, "%d runs of separate sessions were refused", atomic_load(&busy));
    hx_session_free(s[0]);
    hx_session_free(s[1]);
    hx_graph_free(m.g);
}

/* ---- a table shared by two sessions ---------------------------------------------------- */

enum { ROWS = 64, DIM = 8, IDS = 32 };

typedef struct table_model {
    hx_graph *g;
    hx_tensor *ids, *loss;
} table_model;

/* loss = sum(lookup(ids) * v): the table trains with Adagrad, v with SGD. */
static table_model build_on(hx_embedding_table *t)
{
    table_model m = {hx_graph_create(), NULL, NULL};
    int64_t is[1] = {IDS}, vs[2] = {IDS, DIM};
    m.ids = hx_graph_input(m.g, "ids", HX_DTYPE_I64, 1, is);
    hx_tensor *v = hx_graph_param(m.g, "v", HX_DTYPE_F32, 2, vs, hx_init_uniform(-1, 1));
    m.loss = hx_reduce_sum(m.g, hx_mul(m.g, hx_embedding_lookup(m.g, t, m.ids), v), 0, NULL, false);
    OK(hx_graph_backward(m.g, m.loss));
    hx_optimizer_config oc = hx_optimizer_config_default(HX_OPTIMIZER_SGD);
    OK(hx_graph_apply_optimizer(m.g, NULL, &oc));
    return m;
}

typedef struct table_runner {
    hx_session *s;
    const table_model *m;
    unsigned flags;
    int64_t ids[IDS];
    atomic_int *busy_seen, *go;
    int done, other_errors;
    char other[256];
} table_runner;

static void *run_table(void *arg)
{
    table_runner *r = arg;
    while (!atomic_load(r->go)) sched_yield();
    struct timespec start = {0, 0};
    while (r->done < RUNS && !past(&start, 30)) {
        hx_feed f = {NULL, r->m->ids, r->ids, sizeof r->ids};
        float l;
        hx_fetch o = {NULL, r->m->loss, &l, sizeof l};
        hx_status st = hx_session_run(r->s, &f, 1, &o, 1, r->flags);
        if (st == HX_ERR_STATE && strstr(hx_last_error(), "'shared'")) {
            atomic_fetch_add(r->busy_seen, 1);
            back_off();
            continue;
        }
        if (st) {
            r->other_errors++;
            snprintf(r->other, sizeof r->other, "%s: %s", hx_status_name(st), hx_last_error());
            continue;
        }
        r->done++;
    }
    return NULL;
}

/* Both sessions' runs with the flags given, at once; returns the refusals. */
static int run_both(hx_session *const *s, const table_model *m, unsigned flags)
{
    static table_runner r[2];
    atomic_int busy = 0, go = 0;
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        memset(&r[t], 0, sizeof r[t]);
        r[t] = (table_runner){.s = s[t], .m = &m[t], .flags = flags, .busy_seen = &busy, .go = &go};
        for (int i = 0; i < IDS; i++) r[t].ids[i] = (i * 7 + t) % ROWS;
        pthread_create(&th[t], NULL, run_table, &r[t]);
    }
    atomic_store(&go, 1);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++)
        CHECK(r[t].done == RUNS && r[t].other_errors == 0, "%s session %d: %d runs, %d failed %s",
              flags ? "training" : "reading", t, r[t].done, r[t].other_errors, r[t].other);
    return atomic_load(&busy);
}

typedef struct trainer {
    hx_session *s;
    const table_model *m;
    int64_t ids[IDS];
    atomic_int running;
} trainer;

static void *train_until_stopped(void *arg)
{
    trainer *tr = arg;
    while (atomic_load(&tr->running)) {
        hx_feed f = {NULL, tr->m->ids, tr->ids, sizeof tr->ids};
        hx_session_run(tr->s, &f, 1, NULL, 0, HX_RUN_TRAIN);
    }
    return NULL;
}

static void test_shared_table(void)
{
    hx_embedding_config ec = hx_embedding_config_default();
    ec.name = "shared";
    ec.rows = ROWS;
    ec.dim = DIM;
    ec.optimizer = hx_embedding_optimizer_default(HX_EMBEDDING_OPTIMIZER_ADAGRAD);
    hx_embedding_table *t = NULL;
    OK(hx_embedding_table_create(&ec, &t));
    if (!t) return;
    table_model m[2] = {build_on(t), build_on(t)};
    hx_session *s[2] = {slow_session(m[0].g), slow_session(m[1].g)};
    if (s[0] && s[1]) {
        CHECK(run_both(s, m, 0) == 0, "runs that only read the table were refused");
        int refused = run_both(s, m, HX_RUN_TRAIN);
        CHECK(refused > 0, "training runs of two sessions on one table were never refused");
        hx_embedding_stats st;
        OK(hx_embedding_table_stats(t, &st));
        CHECK(st.updates == 2 * RUNS, "%lld table updates for %d training runs", (long long)st.updates, 2 * RUNS);
    }
    /* A write of rows while a run uses the table is refused, and taken
     * between runs. */
    float row[DIM] = {1, 2, 3, 4, 5, 6, 7, 8}, back[DIM];
    int64_t id = 3;
    if (s[0]) {
        static trainer tr;
        tr = (trainer){.s = s[0], .m = &m[0]};
        for (int i = 0; i < IDS; i++) tr.ids[i] = i % ROWS;
        atomic_store(&tr.running, 1);
        pthread_t th;
        pthread_create(&th, NULL, train_until_stopped, &tr);
        bool refused = false;
        hx_status st = HX_OK;
        struct timespec start = {0, 0};
        while (!refused && !st && !past(&start, 30)) {
            st = hx_embedding_table_write_rows(t, &id, 1, row);
            refused = st == HX_ERR_STATE && strstr(hx_last_error(), "'shared'");
            if (refused) st = HX_OK;
            back_off();
        }
        atomic_store(&tr.running, 0);
        pthread_join(th, NULL);
        CHECK(refused && !st, "a write of rows during training runs was never refused (%s: %s)",
              hx_status_name(st), hx_last_error());
    }
    OK(hx_embedding_table_write_rows(t, &id, 1, row));
    OK(hx_embedding_table_read_rows(t, &id, 1, back));
    CHECK(!memcmp(row, back, sizeof row), "the row written between runs");
    hx_session_free(s[0]);
    hx_session_free(s[1]);
    hx_graph_free(m[0].g);
    hx_graph_free(m[1].g);
    OK(hx_embedding_table_free(t));
}

static const test_case cases[] = {
    {"one_thread_per_session", test_one_thread_per_session},
    {"other_calls_refused", test_other_calls_refused},
    {"sessions_run_at_once", test_sessions_run_at_once},
    {"shared_table", test_shared_table},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "session_threads", cases, TEST_COUNT(cases));
}
