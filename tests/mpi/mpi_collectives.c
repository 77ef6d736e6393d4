/* The communicator's collectives (dist/dist.h) under mpirun, each against
 * a serial reference every rank computes from every rank's inputs (they
 * come from seeds): sums in rank order in f32 (bf16: rounded once), so the
 * results are bitwise equal to the reference. Also in-place calls, blocks
 * split into several messages, blocks of their own lengths (the _v
 * variants), an all-gather in place into segments of odd byte lengths
 * (some empty), two collectives in flight at once, the bytes
 * each rank sends, bad input, a timeout naming the rank that did not come,
 * whether the ranks have a core each, and MPI's start and end: hetex starts and finalises it; with --user-mpi
 * the program does, and hetex works on a communicator the program split.
 * Each rank prints "hx-digest rank R of N: HASH" over every result, which
 * tests/mpi/same_over_tcp.sh compares between transports. */
#include "dist/dist.h"
#include "backend_cases.h"
#include "hetex_checks.h"
#include "mpi_world.h"
#include "testutil.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The call failed with `want` and a message holding `sub`. */
#define STATUS_IS(call, want, sub)                                                          \
    do {                                                                                    \
        hx_status st_ = (call);                                                             \
        CHECK(st_ == (want) && strstr(hx_last_error(), sub), "want %s with \"%s\": got %s: %s", \
              #want, sub, hx_status_name(st_), hx_last_error());                            \
    } while (0)
#define MSG_HAS(what, sub) \
    CHECK(strstr(hx_last_error(), sub) != NULL, "%s: \"%s\" not in: %s", what, sub, hx_last_error())

static hx_comm *comm;
static int rank, size;
static bool user_mpi;
static MPI_Comm user_comm = MPI_COMM_NULL;
static uint64_t digest = 1469598103934665603ull;

static void fold(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) digest = (digest ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
}

/* Rank r's `n` inputs of case `tag`: random, of both signs, never all zero. */
static void *inputs(int r, int tag, int64_t n, hx_dtype dt)
{
    test_rng g = test_rng_make((uint64_t)tag * 1000003u + (uint64_t)r * 7919u + 11u);
    void *p = malloc((size_t)(n ? n : 1) * hx_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        if (dt == HX_DTYPE_I64) ((int64_t *)p)[i] = (int64_t)test_rng_u64(&g);
        else bs_put(p, dt, i, test_rng_uniform(&g, -3.0, 3.0));
    }
    return p;
}

/* The rank-order sum of every rank's element i of case tag, in f32,
 * stored as dt (bf16 rounded to nearest even once). */
static void *reference_sum(int tag, int64_t n, hx_dtype dt)
{
    void *out = malloc((size_t)(n ? n : 1) * hx_dtype_size(dt));
    void **in = malloc((size_t)size * sizeof *in);
    for (int r = 0; r < size; r++) in[r] = inputs(r, tag, n, dt);
    for (int64_t i = 0; i < n; i++) {
        float acc = (float)bs_get(in[0], dt, i);
        for (int r = 1; r < size; r++) acc += (float)bs_get(in[r], dt, i);
        bs_put(out, dt, i, acc);
    }
    for (int r = 0; r < size; r++) free(in[r]);
    free(in);
    return out;
}

static bool same(const char *what, const void *got, const void *want, size_t bytes)
{
    fold(got, bytes);
    bool ok = memcmp(got, want, bytes) == 0;
    CHECK(ok, "%s on rank %d of %d: differs from the serial reference", what, rank, size);
    return ok;
}

/* The collective a start call gave (read after the call: &q, not q). */
static hx_status run(hx_status st, hx_coll **q) { return st == HX_OK ? hx__coll_wait(*q) : st; }

static const hx_dtype sum_types[2] = {HX_DTYPE_F32, HX_DTYPE_BF16};
static const int64_t counts[4] = {1, 7, 1000, 4099};

static void test_all_reduce(void)
{
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 4; k++)
            for (int inplace = 0; inplace < 2; inplace++) {
                hx_dtype dt = sum_types[t];
                int64_t n = counts[k];
                int tag = 100 + t * 10 + k;
                size_t bytes = (size_t)n * hx_dtype_size(dt);
                void *send = inputs(rank, tag, n, dt), *want = reference_sum(tag, n, dt);
                void *recv = inplace ? send : malloc(bytes);
                hx_coll *q = NULL;
                OK(run(hx__comm_all_reduce(comm, send, recv, n, dt, &q), &q));
                char what[96];
                snprintf(what, sizeof what, "all_reduce %lld %s%s", (long long)n, hx_dtype_name(dt),
                         inplace ? " in place" : "");
                same(what, recv, want, bytes);
                if (!inplace) free(recv);
                free(send);
                free(want);
            }
}

static void test_reduce_scatter(void)
{
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++)
            for (int inplace = 0; inplace < 2; inplace++) {
                hx_dtype dt = sum_types[t];
                int64_t n = counts[k], total = n * size;
                size_t esz = hx_dtype_size(dt);
                int tag = 200 + t * 10 + k;
                char *send = inputs(rank, tag, total, dt), *want = reference_sum(tag, total, dt);
                char *recv = inplace ? send + (size_t)rank * (size_t)n * esz : malloc((size_t)n * esz);
                hx_coll *q = NULL;
                OK(run(hx__comm_reduce_scatter(comm, send, recv, n, dt, &q), &q));
                char what[96];
                snprintf(what, sizeof what, "reduce_scatter %lld %s%s", (long long)n, hx_dtype_name(dt),
                         inplace ? " in place" : "");
                same(what, recv, want + (size_t)rank * (size_t)n * esz, (size_t)n * esz);
                if (!inplace) free(recv);
                free(send);
                free(want);
            }
}

static void test_all_gather(void)
{
    const hx_dtype types[3] = {HX_DTYPE_F32, HX_DTYPE_BF16, HX_DTYPE_I64};
    for (int t = 0; t < 3; t++)
        for (int inplace = 0; inplace < 2; inplace++) {
            hx_dtype dt = types[t];
            int64_t n = 333;
            size_t esz = hx_dtype_size(dt), blk = (size_t)n * esz;
            int tag = 300 + t;
            char *want = malloc(blk * (size_t)size), *recv = malloc(blk * (size_t)size);
            for (int r = 0; r < size; r++) {
                void *in = inputs(r, tag, n, dt);
                memcpy(want + (size_t)r * blk, in, blk);
                if (r == rank && inplace) memcpy(recv + (size_t)r * blk, in, blk);
                free(in);
            }
            void *mine = inputs(rank, tag, n, dt);
            hx_coll *q = NULL;
            OK(run(hx__comm_all_gather(comm, inplace ? recv + (size_t)rank * blk : mine, recv, n, dt, &q), &q));
            same(inplace ? "all_gather in place" : "all_gather", recv, want, blk * (size_t)size);
            free(mine);
            free(recv);
            free(want);
        }
}

/* Block j of case k is (5 + 37*j + 11*k) % 53 elements long, rank 1's
 * (where there is one) 0 in case 0: blocks of their own lengths. */
static int64_t v_count(int j, int k) { return j == 1 && k == 0 ? 0 : (5 + 37 * j + 11 * k) % 53; }

/* reduce_scatter_v and all_gather_v against the serial reference, in place
 * and not, f32 and bf16: each rank gets exactly its block, and sends
 * exactly the others' blocks (reduce-scatter) or its own to each other
 * rank (all-gather), nothing padded. */
static void test_variable_blocks(void)
{
    int64_t *n = malloc((size_t)size * sizeof *n), *lo = malloc((size_t)(size + 1) * sizeof *lo);
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < 2; t++)
            for (int inplace = 0; inplace < 2; inplace++) {
                hx_dtype dt = sum_types[t];
                size_t esz = hx_dtype_size(dt);
                lo[0] = 0;
                for (int j = 0; j < size; j++) n[j] = v_count(j, k), lo[j + 1] = lo[j] + n[j];
                int64_t total = lo[size];
                int tag = 800 + k * 10 + t;
                char *send = inputs(rank, tag, total, dt), *want = reference_sum(tag, total, dt);
                char *recv = inplace ? send + (size_t)lo[rank] * esz : malloc((size_t)(n[rank] ? n[rank] : 1) * esz);
                char what[96];
                snprintf(what, sizeof what, "reduce_scatter_v case %d %s%s", k, hx_dtype_name(dt),
                         inplace ? " in place" : "");
                uint64_t sent0 = hx__comm_bytes_sent(comm);
                hx_coll *q = NULL;
                OK(run(hx__comm_reduce_scatter_v(comm, send, recv, n, dt, &q), &q));
                same(what, recv, want + (size_t)lo[rank] * esz, (size_t)n[rank] * esz);
                uint64_t rs_bytes = (uint64_t)(total - n[rank]) * esz;
                CHECK(hx__comm_bytes_sent(comm) - sent0 == rs_bytes, "%s: rank %d sent %llu bytes, want %llu",
                      what, rank, (unsigned long long)(hx__comm_bytes_sent(comm) - sent0),
                      (unsigned long long)rs_bytes);
                if (!inplace) free(recv);
                free(send);
                /* every rank's block of `want`, gathered */
                char *all = malloc((size_t)(total ? total : 1) * esz), *mine = malloc((size_t)(n[rank] ? n[rank] : 1) * esz);
                memcpy(mine, want + (size_t)lo[rank] * esz, (size_t)n[rank] * esz);
                if (inplace) memcpy(all + (size_t)lo[rank] * esz, mine, (size_t)n[rank] * esz);
                snprintf(what, sizeof what, "all_gather_v case %d %s%s", k, hx_dtype_name(dt),
                         inplace ? " in place" : "");
                sent0 = hx__comm_bytes_sent(comm);
                OK(run(hx__comm_all_gather_v(comm, inplace ? all + (size_t)lo[rank] * esz : mine, all, n, dt, &q), &q));
                same(what, all, want, (size_t)total * esz);
                uint64_t ag_bytes = (uint64_t)(size - 1) * (uint64_t)n[rank] * esz;
                CHECK(hx__comm_bytes_sent(comm) - sent0 == ag_bytes, "%s: rank %d sent %llu bytes, want %llu",
                      what, rank, (unsigned long long)(hx__comm_bytes_sent(comm) - sent0),
                      (unsigned long long)ag_bytes);
                free(all);
                free(mine);
                free(want);
            }
    free(n);
    free(lo);
}

/* Rank i sends rank j (3 + 5*i + 2*j) % 11 elements (some zero). */
static int64_t a2a_count(int i, int j) { return (3 + 5 * i + 2 * j) % 11; }

static void test_all_to_all_v(void)
{
    int64_t *sc = calloc((size_t)size, 8), *sd = calloc((size_t)size, 8), *rc = calloc((size_t)size, 8),
            *rd = calloc((size_t)size, 8);
    int64_t stot = 0, rtot = 0;
    for (int j = 0; j < size; j++) {
        sc[j] = a2a_count(rank, j);
        sd[j] = stot;
        stot += sc[j] + 1; /* a gap between blocks */
        rc[j] = a2a_count(j, rank);
        rd[j] = rtot;
        rtot += rc[j];
    }
    float *send = inputs(rank, 400, stot, HX_DTYPE_F32), *recv = malloc((size_t)(rtot + 1) * 4),
          *want = malloc((size_t)(rtot + 1) * 4);
    for (int j = 0; j < size; j++) { /* rank j's block for me, at its displacement */
        int64_t off = 0;
        for (int k = 0; k < rank; k++) off += a2a_count(j, k) + 1;
        float *in = inputs(j, 400, off + rc[j] + 1, HX_DTYPE_F32);
        memcpy(want + rd[j], in + off, (size_t)rc[j] * 4);
        free(in);
    }
    hx_coll *q = NULL;
    OK(run(hx__comm_all_to_all_v(comm, send, sc, sd, recv, rc, rd, HX_DTYPE_F32, &q), &q));
    same("all_to_all_v", recv, want, (size_t)rtot * 4);
    free(send);
    free(recv);
    free(want);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

static void test_broadcast(void)
{
    for (int root = 0; root < size; root++) {
        int64_t n = 517;
        void *want = inputs(root, 500 + root, n, HX_DTYPE_BF16);
        void *buf = rank == root ? inputs(root, 500 + root, n, HX_DTYPE_BF16) : calloc((size_t)n, 2);
        hx_coll *q = NULL;
        OK(run(hx__comm_broadcast(comm, buf, n, HX_DTYPE_BF16, root, &q), &q));
        same("broadcast", buf, want, (size_t)n * 2);
        free(buf);
        free(want);
    }
}

/* Segment k of rank j's block in the segmented all-gather: (3 + 29*j +
 * 17*k) % 41 bytes (rank 1's second: 0), k < j % 3 + 2. */
static int64_t seg_len(int j, int k) { return j == 1 && k == 1 ? 0 : (3 + 29 * j + 17 * k) % 41; }

/* hx__comm_all_gather_segments: every rank's segments, each its own
 * buffer, arrive whole in every other rank's, in messages of 64 bytes
 * and whole; this rank sends its block's bytes to each other rank. */
static void test_segments(void)
{
    for (int pieces = 0; pieces < 2; pieces++) {
        int64_t lo[65], len[256], n = 0;
        void *seg[256];
        char *want[256];
        for (int j = 0; j < size && j < 64; j++) {
            lo[j] = n;
            unsigned char *src = inputs(j, 650 + pieces, 64, HX_DTYPE_I64); /* bytes to cut from */
            for (int k = 0; k < j % 3 + 2; k++, n++) {
                len[n] = seg_len(j, k);
                want[n] = malloc((size_t)len[n] + 1);
                memcpy(want[n], src + 8 * k, (size_t)len[n]);
                seg[n] = calloc(1, (size_t)len[n] + 1);
                if (j == rank) memcpy(seg[n], want[n], (size_t)len[n]);
            }
            free(src);
        }
        lo[size] = n;
        if (pieces) hx__comm_set_max_message(comm, 64);
        uint64_t sent0 = hx__comm_bytes_sent(comm), mine = 0;
        for (int64_t k = lo[rank]; k < lo[rank + 1]; k++) mine += (uint64_t)len[k];
        hx_coll *q = NULL;
        OK(run(hx__comm_all_gather_segments(comm, seg, len, lo, &q), &q));
        hx__comm_set_max_message(comm, (int64_t)1 << 28);
        for (int64_t k = 0; k < n; k++) {
            CHECK(!memcmp(seg[k], want[k], (size_t)len[k]), "segmented all_gather%s: segment %lld (%lld "
                  "bytes) differs on rank %d", pieces ? " in pieces" : "", (long long)k, (long long)len[k],
                  rank);
            fold(seg[k], (size_t)len[k]);
            free(seg[k]);
            free(want[k]);
        }
        CHECK(hx__comm_bytes_sent(comm) - sent0 == mine * (uint64_t)(size - 1), "segmented all_gather: "
              "rank %d sent %llu bytes, its block is %llu", rank,
              (unsigned long long)(hx__comm_bytes_sent(comm) - sent0), (unsigned long long)mine);
    }
    int64_t lo[65] = {0}, len[1] = {-1};
    void *seg[1] = {NULL};
    hx_coll *q = NULL;
    for (int j = 1; j <= size && j < 65; j++) lo[j] = 1;
    STATUS_IS(hx__comm_all_gather_segments(comm, seg, len, lo, &q), HX_ERR_INVALID_ARGUMENT, "segment 0");
}

/* Blocks of 1000 elements sent in messages of 64: the pieces arrive whole. */
static void test_pieces(void)
{
    hx__comm_set_max_message(comm, 64);
    int64_t n = 1000;
    float *send = inputs(rank, 600, n * size, HX_DTYPE_F32), *want = reference_sum(600, n * size, HX_DTYPE_F32);
    float *recv = malloc((size_t)(n * size) * 4);
    hx_coll *q = NULL;
    OK(run(hx__comm_all_reduce(comm, send, recv, n * size, HX_DTYPE_F32, &q), &q));
    same("all_reduce in pieces of 64", recv, want, (size_t)(n * size) * 4);
    hx__comm_set_max_message(comm, (int64_t)1 << 28);
    free(send);
    free(recv);
    free(want);
}

/* Two collectives in flight, driven by hx__coll_test while the rank
 * "computes", then waited for in the other order; and the bytes sent. */
static void test_overlap_and_bytes(void)
{
    int64_t n = 4096;
    float *a = inputs(rank, 700, n * size, HX_DTYPE_F32), *wa = reference_sum(700, n * size, HX_DTYPE_F32);
    float *b = inputs(rank, 701, n, HX_DTYPE_F32), *wb = reference_sum(701, n, HX_DTYPE_F32);
    float *ra = malloc((size_t)n * 4);
    uint64_t sent0 = hx__comm_bytes_sent(comm);
    hx_coll *qa = NULL, *qb = NULL;
    OK(hx__comm_reduce_scatter(comm, a, ra, n, HX_DTYPE_F32, &qa));
    OK(hx__comm_all_reduce(comm, b, b, n, HX_DTYPE_F32, &qb));
    bool da = false, db = false;
    volatile double work = 0;
    for (int i = 0; i < 200000 && !(da && db); i++) {
        work += i * 1e-9; /* the rank's own work between tests */
        if (i % 1000 == 0) {
            if (!da) OK(hx__coll_test(qa, &da));
            if (!db) OK(hx__coll_test(qb, &db));
        }
    }
    OK(hx__coll_wait(qb));
    OK(hx__coll_wait(qa));
    same("reduce_scatter beside an all_reduce", ra, wa + (size_t)rank * (size_t)n, (size_t)n * 4);
    same("all_reduce beside a reduce_scatter", b, wb, (size_t)n * 4);
    /* reduce-scatter: (N-1) blocks of n; all-reduce: the other ranks'
     * blocks of the exchange, then N-1 copies of my summed block */
    int64_t lo = n / size * rank + (rank < n % size ? rank : n % size);
    int64_t mine = n / size * (rank + 1) + (rank + 1 < n % size ? rank + 1 : n % size) - lo;
    uint64_t want = (uint64_t)((size - 1) * n + (n - mine) + (size - 1) * mine) * 4;
    CHECK(hx__comm_bytes_sent(comm) - sent0 == want, "rank %d sent %llu bytes, want %llu", rank,
          (unsigned long long)(hx__comm_bytes_sent(comm) - sent0), (unsigned long long)want);
    free(a);
    free(wa);
    free(b);
    free(wb);
    free(ra);
}

static void test_bad_input(void)
{
    float x[4] = {1, 2, 3, 4};
    int32_t ix[4] = {1, 2, 3, 4};
    hx_coll *q = NULL;
    STATUS_IS(hx__comm_all_reduce(comm, ix, ix, 4, HX_DTYPE_I32, &q), HX_ERR_DTYPE, "sums f32 or bf16");
    CHECK(q == NULL, "no collective on failure");
    STATUS_IS(hx__comm_all_reduce(comm, x, x, -1, HX_DTYPE_F32, &q), HX_ERR_INVALID_ARGUMENT, "count -1");
    STATUS_IS(hx__comm_all_gather(comm, NULL, x, 4, HX_DTYPE_F32, &q), HX_ERR_INVALID_ARGUMENT, "NULL buffer");
    STATUS_IS(hx__comm_broadcast(comm, x, 4, HX_DTYPE_F32, size, &q), HX_ERR_INVALID_ARGUMENT, "is not a rank");
    STATUS_IS(hx__comm_reduce_scatter(NULL, x, x, 1, HX_DTYPE_F32, &q), HX_ERR_INVALID_ARGUMENT, "NULL");
    STATUS_IS(hx__comm_all_reduce(comm, x, x, 4, (hx_dtype)99, &q), HX_ERR_DTYPE, "invalid dtype");
    int64_t *c = calloc((size_t)size, 8), *z = calloc((size_t)size, 8);
    c[rank] = 2;
    STATUS_IS(hx__comm_all_to_all_v(comm, x, c, z, x, z, z, HX_DTYPE_F32, &q), HX_ERR_INVALID_ARGUMENT,
              "sends itself 2 elements but receives 0");
    c[rank] = -1;
    STATUS_IS(hx__comm_all_to_all_v(comm, x, c, z, x, c, z, HX_DTYPE_F32, &q), HX_ERR_INVALID_ARGUMENT,
              "count is -1");
    STATUS_IS(hx__comm_reduce_scatter_v(comm, x, x, c, HX_DTYPE_F32, &q), HX_ERR_INVALID_ARGUMENT,
              "count is -1");
    STATUS_IS(hx__comm_all_gather_v(comm, x, x, NULL, HX_DTYPE_F32, &q), HX_ERR_INVALID_ARGUMENT,
              "counts are NULL");
    free(c);
    free(z);
    hx_comm_config cfg = hx_comm_config_default();
    cfg.timeout_s = 0;
    hx_comm *bad = (hx_comm *)&cfg;
    STATUS_IS(hx_comm_create(&cfg, &bad), HX_ERR_INVALID_ARGUMENT, "timeout_s 0");
    CHECK(bad == NULL, "*out NULL on failure");
    CHECK(!strcmp(hx_status_name(HX_ERR_COMM), "HX_ERR_COMM"), "%s", hx_status_name(HX_ERR_COMM));
    CHECK(hx_comm_rank(NULL) == -1 && hx_comm_size(NULL) == -1, "NULL communicator");
    /* the refused calls took no sequence number: the next collective matches */
    float s = (float)(rank + 1);
    OK(run(hx__comm_all_reduce(comm, &s, &s, 1, HX_DTYPE_F32, &q), &q));
    CHECK(s == (float)(size * (size + 1) / 2), "sum of ranks+1: %g", s);
}

/* On a communicator of its own: rank 1 starts a broadcast from itself
 * 1.5 s late; rank 0 gives up after 0.3 s naming rank 1, and its
 * communicator then refuses more. */
static void test_timeout(void)
{
    if (size < 2) {
        test_skip("needs 2 ranks");
        return;
    }
    hx_comm_config cfg = hx_comm_config_default();
    cfg.mpi_comm = user_mpi ? (const void *)&user_comm : NULL;
    cfg.timeout_s = 0.3;
    hx_comm *c2 = NULL;
    OK(hx_comm_create(&cfg, &c2));
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    hx_coll *q = NULL;
    if (rank == 1) usleep(1500 * 1000);
    if (rank <= 1) {
        hx_status st = run(hx__comm_broadcast(c2, x, 8, HX_DTYPE_F32, 1, &q), &q);
        if (rank == 0) {
            STATUS_IS(st, HX_ERR_COMM, "broadcast");
            MSG_HAS("timeout message", "rank(s) 1 ");
            MSG_HAS("timeout message", "on rank 0 of");
            MSG_HAS("timeout message", "timed out after 0.3 s");
            STATUS_IS(hx__comm_all_reduce(c2, x, x, 8, HX_DTYPE_F32, &q), HX_ERR_STATE, "earlier collective");
        } else {
            CHECK(st == HX_OK, "the late root's sends complete: %s", hx_last_error());
        }
    } else {
        CHECK(true, "rank %d is not in this one", rank);
    }
    hx_comm_free(c2);
}

/* Whether the ranks have a core each (hx__comm_own_cores: where they do,
 * a wait polls 300 us before it sleeps, and the data-parallel overlap
 * polls its all-gathers): every rank of these tests runs on this host, so
 * it is whether the ranks are no more than its online cores. */
static void test_own_cores(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(hx__comm_own_cores(comm) == (size <= cores), "rank %d of %d on %ld cores: own cores %d", rank,
          size, cores, (int)hx__comm_own_cores(comm));
}

static int setup(void)
{
    if (user_mpi) {
        int provided;
        MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        int wr;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        /* reversed ranks: hetex's ranks are the split communicator's */
        MPI_Comm_split(MPI_COMM_WORLD, 0, -wr, &user_comm);
    }
    hx_comm_config cfg = hx_comm_config_default();
    cfg.mpi_comm = user_mpi ? (const void *)&user_comm : NULL;
    cfg.timeout_s = 60;
    if (hx_comm_create(&cfg, &comm) != HX_OK) {
        fprintf(stderr, "hx_comm_create: %s\n", hx_last_error());
        return 1;
    }
    rank = hx_comm_rank(comm);
    size = hx_comm_size(comm);
    if (user_mpi) {
        int wr, ws;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        MPI_Comm_size(MPI_COMM_WORLD, &ws);
        if (rank != ws - 1 - wr) fprintf(stderr, "rank %d is world rank %d: not the split's\n", rank, wr);
        if (rank != ws - 1 - wr) return 1;
    }
    return 0;
}

/* Last: the communicator goes, and with it MPI if hetex started it. */
static void test_finalize(void)
{
    mpi_world_close_with_digest(comm, rank, size, digest);
    comm = NULL;
    int fin = 0;
    MPI_Finalized(&fin);
    hx_comm *again = NULL;
    if (user_mpi) {
        CHECK(!fin, "MPI the program started is the program's to finalise");
        OK(hx_comm_create(NULL, &again)); /* still running: another communicator */
        hx_comm_free(again);
        MPI_Comm_free(&user_comm);
        MPI_Finalize();
    } else {
        CHECK(fin, "hetex finalised the MPI it started with its last communicator");
        STATUS_IS(hx_comm_create(NULL, &again), HX_ERR_STATE, "cannot start again");
    }
}

static int flag(int argc, char **argv, int i)
{
    if (strcmp(argv[i], "--user-mpi")) return 0;
    user_mpi = true;
    return 1;
}

int main(int argc, char **argv)
{
    static const test_case cases[] = {
        {"all_reduce", test_all_reduce},     {"reduce_scatter", test_reduce_scatter},
        {"all_gather", test_all_gather},     {"all_to_all_v", test_all_to_all_v},
        {"variable_blocks", test_variable_blocks}, {"segments", test_segments},
        {"broadcast", test_broadcast},       {"pieces", test_pieces},
        {"overlap_and_bytes", test_overlap_and_bytes}, {"bad_input", test_bad_input},
        {"timeout", test_timeout},           {"own_cores", test_own_cores},
        {"finalize", test_finalize},
    };
    test_options o = {.setup = setup, .flag = flag,
                      .flags_help = "  --user-mpi   the program starts MPI and hands hetex a split communicator\n"};
    return test_main_with(argc, argv, "mpi_collectives", cases, TEST_COUNT(cases), &o);
}
