/* libFuzzer target: hx_session_load of a sharded (ZeRO) checkpoint, its
 * manifest (core/shard_files.c, session/checkpoint_set.c) and its shard
 * files (session/checkpoint.c) made of any bytes, into the session model
 * of one process (fuzz_common.c; the load at M = 1 ranks, no MPI), then
 * one training step. A refused set must leave the session as it was;
 * after an accepted one the step may fail but must not crash, and the
 * session is put back from its pristine checkpoint.
 * Input: a flags byte, a byte F (F % 5 shard files), F x {u32 length
 * (little-endian), its bytes} the shard files, then the manifest. The
 * files are named as hx__shard_file names them, after the manifest's
 * "generation G" and "shards N" where those read as numbers in range
 * (else generation 1, F shards). A checksum is not a bounds check, so
 * mutations get past the checksums: unless the flags say otherwise, each
 * shard file's last 8 bytes are set to the XXH3-64 of the bytes before
 * (checkpoint.c's total; flag bit 0 leaves them), each manifest line
 * "shard J tensors K ..." of a file given to that file's size and XXH3-64
 * (bit 1 leaves them), and the manifest's last line to "check <XXH3-64 of
 * the text before>" (bit 2 leaves it). Seeds: sets this model saved at 2
 * ranks, ZeRO stages 1-3 (seeds.c, `fuzz_seeds zero` under mpirun), flags
 * 0. (With the flags as fixes to ask for, a sabotaged shard index check
 * went unfound in 2 minutes; as fixes by default it is found in seconds.) */
#include "fuzz_common.h"
#include "core/core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum { MAX_FILES = 4, KEEP_TOTALS = 1, KEEP_SHARD_LINES = 2, KEEP_CHECK = 4 };

static fuzz_session_model model;
static char pristine[512];
static float w1_before[6 * 5], w2_before[5 * 3];
static char *written[MAX_FILES]; /* the shard files of the input before */

static void read_params(float *w1, float *w2)
{
    if (hx_session_read(model.s, hx_graph_find(model.g, "w1"), w1, sizeof w1_before) ||
        hx_session_read(model.s, hx_graph_find(model.g, "w2"), w2, sizeof w2_before))
        abort();
}

static void setup(void)
{
    fuzz_session_model_make(&model, NULL, 0);
    snprintf(pristine, sizeof pristine, "%s", fuzz_file("pristine", NULL, 0));
    if (hx_session_save(model.s, pristine)) abort();
    read_params(w1_before, w2_before);
}

/* The manifest's generation and shard count, where they read so. */
static void name_numbers(const char *text, int64_t *gen, int64_t *shards)
{
    const char *nl = strchr(text, '\n');
    int64_t g, n;
    if (nl && sscanf(nl + 1, "generation %" SCNd64 "\nshards %" SCNd64, &g, &n) == 2 && g >= 1 &&
        g < ((int64_t)1 << 40) && n >= 1 && n <= HX_MAX_SHARDS)
        *gen = g, *shards = n;
}

/* The manifest with the flags' fixes (malloc'd, *n bytes and a NUL). */
static char *fixed_manifest(const uint8_t *data, size_t size, int flags, int nf, const size_t *len,
                            const uint64_t *hash, size_t *n_out)
{
    char *out = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&out, &n);
    if (!m) abort();
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ll = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
        char line[128];
        int64_t j, k;
        snprintf(line, sizeof line, "%.*s", (int)(ll < sizeof line ? ll : sizeof line - 1), p);
        if (!(flags & KEEP_SHARD_LINES) && sscanf(line, "shard %" SCNd64 " tensors %" SCNd64, &j, &k) == 2 &&
            j >= 0 && j < nf)
            fprintf(m, "shard %" PRId64 " tensors %" PRId64 " bytes %zu xxh3 %016llx\n", j, k, len[j],
                    (unsigned long long)hash[j]);
        else
            fwrite(p, 1, ll, m);
        p += ll;
    }
    if (fclose(m)) abort();
    if (!(flags & KEEP_CHECK)) { /* the last line off, a check line of the rest on */
        size_t keep = n && out[n - 1] == '\n' ? n - 1 : n;
        while (keep && out[keep - 1] != '\n') keep--;
        char *t = malloc(keep + 32);
        if (!t) abort();
        memcpy(t, out, keep);
        unsigned long long check = XXH3_64bits(t, keep);
        *n_out = keep + (size_t)snprintf(t + keep, 32, "check %016llx\n", check);
        free(out);
        return t;
    }
    *n_out = n;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    if (!model.s) setup();
    for (int k = 0; k < MAX_FILES; k++) {
        if (written[k]) remove(written[k]);
        free(written[k]);
        written[k] = NULL;
    }
    int flags = data[0], nf = data[1] % (MAX_FILES + 1);
    size_t at = 2, len[MAX_FILES];
    const uint8_t *file[MAX_FILES];
    uint64_t hash[MAX_FILES];
    for (int k = 0; k < nf; k++) {
        uint32_t l = 0;
        for (int b = 0; b < 4 && at < size; b++) l |= (uint32_t)data[at++] << (8 * b);
        len[k] = l < size - at ? l : size - at;
        file[k] = data + at;
        at += len[k];
    }
    /* the shard files, fixed as the flags say */
    uint8_t *copy[MAX_FILES];
    for (int k = 0; k < nf; k++) {
        copy[k] = malloc(len[k] ? len[k] : 1);
        if (!copy[k]) abort();
        memcpy(copy[k], file[k], len[k]);
        if (!(flags & KEEP_TOTALS) && len[k] >= 8) {
            uint64_t total = XXH3_64bits(copy[k], len[k] - 8);
            memcpy(copy[k] + len[k] - 8, &total, 8);
        }
        hash[k] = XXH3_64bits(copy[k], len[k]);
    }
    size_t n_text;
    char *text = fixed_manifest(data + at, size - at, flags, nf, len, hash, &n_text);
    int64_t gen = 1, shards = nf ? nf : 1;
    name_numbers(text, &gen, &shards);
    const char *path = fuzz_file("manifest", (const uint8_t *)text, n_text);
    for (int k = 0; k < nf; k++) {
        written[k] = hx__shard_file(path, gen, k, shards);
        FILE *f = written[k] ? fopen(written[k], "wb") : NULL;
        if (!f || (len[k] && fwrite(copy[k], 1, len[k], f) != len[k]) || fclose(f)) abort();
        free(copy[k]);
    }
    free(text);
    hx_status st = hx_session_load(model.s, path);
    if (st) { /* refused: nothing changed */
        float w1[6 * 5], w2[5 * 3];
        read_params(w1, w2);
        if (memcmp(w1, w1_before, sizeof w1) || memcmp(w2, w2_before, sizeof w2)) abort();
        return 0;
    }
    fuzz_session_model_step(&model);
    if (hx_session_load(model.s, pristine)) abort();
    return 0;
}
