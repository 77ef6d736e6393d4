/* test_chunks: chunk layouts checked against the rules (execution order,
 * alignment, no overlap, params larger than a chunk on their own) and a
 * reference count of waste; the search against a brute force over the
 * range; the 24-layer, hidden-1024 GPT layout: waste <= 1% in [32, 128] MiB;
 * bad input. */
#include "memory/chunks.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* The waste of one chunk size, counted independently: the layout's chunks
 * are rebuilt from chunk_of/offset_of and checked on the way. */
static bool check_layout(const size_t *sz, int64_t n, size_t chunk, size_t align, size_t own_round,
                         const hx_chunk_plan *p, const int64_t *chunk_of, const size_t *off,
                         size_t *waste)
{
    int64_t n_chunks = p->n_chunks + p->n_own;
    size_t *end = calloc((size_t)n_chunks + 1, sizeof *end), *held = calloc((size_t)n_chunks + 1, sizeof *held);
    char *own = calloc((size_t)n_chunks + 1, 1);
    bool ok = true;
    int64_t last_equal = -1;
    size_t total = 0, params = 0;
    for (int64_t i = 0; i < n && ok; i++) {
        int64_t c = chunk_of[i];
        ok &= c >= 0 && c < n_chunks;
        if (!ok) break;
        params += sz[i];
        if (sz[i] > chunk) {
            ok &= off[i] == 0 && !held[c] && !end[c];
            own[c] = 1;
            held[c] = sz[i];
            total += round_up(sz[i], own_round);
            continue;
        }
        ok &= !own[c] && off[i] % align == 0 && off[i] >= end[c] && off[i] + sz[i] <= chunk;
        ok &= c >= last_equal; /* execution order: never back to an earlier chunk */
        if (c != last_equal) {
            /* a new chunk opens only when the parameter did not fit the last */
            if (last_equal >= 0) ok &= round_up(end[last_equal], align) + sz[i] > chunk;
            total += chunk;
        }
        last_equal = c;
        end[c] = off[i] + sz[i];
        held[c] += sz[i];
    }
    if (last_equal >= 0) { /* the last chunk: to its end, rounded to the step */
        size_t last = round_up(end[last_equal], own_round);
        if (last > chunk) last = chunk;
        ok &= p->last_chunk == last;
        total += last - chunk;
    }
    *waste = total - params;
    ok &= total == p->total_bytes && params == p->param_bytes && p->waste == *waste;
    free(end);
    free(held);
    free(own);
    return ok;
}

static void test_random_layouts(void)
{
    test_rng r = test_rng_make(21);
    hx_mem_err err;
    for (int trial = 0; trial < 40; trial++) {
        int64_t n = 1 + (int64_t)(test_rng_u64(&r) % 200);
        size_t *sz = malloc((size_t)n * sizeof *sz);
        for (int64_t i = 0; i < n; i++) sz[i] = 1 + test_rng_u64(&r) % (trial % 3 ? 5000 : 50000);
        size_t align = (size_t)1 << (test_rng_u64(&r) % 8), step = 64 * (1 + test_rng_u64(&r) % 4);
        int64_t *chunk_of = malloc((size_t)n * sizeof *chunk_of);
        size_t *off = malloc((size_t)n * sizeof *off);
        hx_chunk_search s = {4096, 32768, step, align};
        hx_chunk_plan best, p;
        CHECK(!hx_chunk_search_run(sz, n, &s, &best, &err), "%s", err.msg);
        size_t min_waste = SIZE_MAX, min_at = 0;
        for (size_t c = s.min_chunk; c <= s.max_chunk; c += step) {
            size_t w;
            CHECK(!hx_chunk_layout(sz, n, c, align, step, &p, chunk_of, off, &err), "%s", err.msg);
            if (!check_layout(sz, n, c, align, step, &p, chunk_of, off, &w)) {
                CHECK(false, "trial %d: the layout at chunk %zu breaks a rule", trial, c);
                break;
            }
            if (w < min_waste) min_waste = w, min_at = c;
        }
        CHECK(best.waste == min_waste && best.chunk_size == min_at,
              "trial %d: search found %zu at %zu, brute force %zu at %zu", trial, best.waste,
              best.chunk_size, min_waste, min_at);
        free(sz);
        free(chunk_of);
        free(off);
    }
}

/* GPT-2 medium-like: 24 layers of hidden 1024, fp16, in execution order. */
static int64_t gpt_layout(size_t *sz, int layers, size_t h, size_t vocab, size_t seq)
{
    const size_t e = 2;
    int64_t n = 0;
    sz[n++] = vocab * h * e;
    sz[n++] = seq * h * e;
    for (int l = 0; l < layers; l++) {
        size_t per[] = {h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * 4 * h, 4 * h, 4 * h * h, h};
        for (size_t k = 0; k < sizeof per / sizeof *per; k++) sz[n++] = per[k] * e;
    }
    sz[n++] = h * e;
    sz[n++] = h * e;
    return n;
}

/* Issue 16's case: the search in [32, 128] MiB wastes at most 1%. With
 * every chunk counted whole, the last one's unused tail dominated: the
 * best there wasted 1.45% (98.1 MiB chunks: 8.0 MiB in the tails of
 * chunks whose next parameter did not fit, 2.0 MiB after the last
 * parameter); the last chunk ending at its last parameter, the search
 * picks 120.13 MiB chunks that waste 0.58%. */
static void test_gpt(void)
{
    size_t sz[2 + 24 * 12 + 2];
    int64_t n = gpt_layout(sz, 24, 1024, 50257, 1024);
    hx_chunk_search s = {32 << 20, 128 << 20, 1024, 256};
    hx_chunk_plan p;
    hx_mem_err err;
    CHECK(!hx_chunk_search_run(sz, n, &s, &p, &err), "%s", err.msg);
    printf("gpt 24x1024 fp16: chunk %zu bytes (%.2f MiB), %lld chunks + %lld own, params %zu, "
           "waste %zu (%.3f%%)\n", p.chunk_size, p.chunk_size / 1048576.0, (long long)p.n_chunks,
           (long long)p.n_own, p.param_bytes, p.waste, 100 * p.waste_fraction);
    CHECK(p.waste_fraction <= 0.01, "GPT 24 x 1024: waste %.3f%% <= 1%%", 100 * p.waste_fraction);
    CHECK(p.chunk_size >= s.min_chunk && p.chunk_size <= s.max_chunk, "chunk %zu in the range", p.chunk_size);
    /* the size it reports lays out as it says */
    hx_chunk_plan again;
    CHECK(!hx_chunk_layout(sz, n, p.chunk_size, 256, 1024, &again, NULL, NULL, &err) &&
          again.total_bytes == p.total_bytes && again.waste == p.waste && again.n_chunks == p.n_chunks &&
          again.n_own == p.n_own && again.last_chunk == p.last_chunk,
          "the layout at the chunk size the search reports: %zu bytes of waste, the search said %zu",
          again.waste, p.waste);
    CHECK(p.param_bytes == (size_t)(50257 + 1024 + 2) * 1024 * 2 + 24 * (size_t)(12 * 1024 * 1024 + 13 * 1024) * 2,
          "the layout holds every parameter");
    /* a fixed, unsearched chunk size wastes more */
    hx_chunk_plan fixed;
    hx_chunk_layout(sz, n, 64 << 20, 256, 1024, &fixed, NULL, NULL, &err);
    CHECK(fixed.waste > p.waste, "the search beats a fixed 64 MiB chunk (%zu vs %zu)", p.waste, fixed.waste);
}

static void test_bad_input(void)
{
    size_t sz[3] = {10, 20, 30};
    hx_chunk_plan p;
    hx_mem_err err;
    hx_chunk_search s = {1024, 512, 64, 1};
    CHECK(hx_chunk_search_run(sz, 3, &s, &p, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "range"),
          "an empty range: %s", err.msg);
    s = (hx_chunk_search){64, 1024, 0, 1};
    CHECK(hx_chunk_search_run(sz, 3, &s, &p, &err) == HX_ERR_INVALID_ARGUMENT, "step 0");
    CHECK(hx_chunk_layout(sz, 3, 0, 1, 1, &p, NULL, NULL, &err) == HX_ERR_INVALID_ARGUMENT, "chunk 0");
    int64_t c[3];
    CHECK(hx_chunk_layout(sz, 3, 64, 1, 1, &p, c, NULL, &err) == HX_ERR_INVALID_ARGUMENT, "half the outputs");
    /* all larger than the chunk: each its own, no equal chunk */
    CHECK(!hx_chunk_layout(sz, 3, 8, 1, 16, &p, NULL, NULL, &err) && p.n_own == 3 && p.n_chunks == 0 &&
          p.total_bytes == 16 + 32 + 32 && p.waste == 20, "own chunks: %zu total", p.total_bytes);
    CHECK(!hx_chunk_layout(NULL, 0, 64, 1, 1, &p, NULL, NULL, &err) && p.total_bytes == 0 &&
          p.waste_fraction == 0, "no parameters");
}

static const test_case cases[] = {
    {"random_layouts", test_random_layouts},
    {"gpt", test_gpt},
    {"bad_input", test_bad_input},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "chunks", cases, TEST_COUNT(cases));
}
