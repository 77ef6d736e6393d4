/* Sets of shard files under one manifest (core.h, "shard sets"): what the
 * sharded embedding tables (embedding/shard_ckpt.c) and the sharded
 * session checkpoints (session/checkpoint_zero.c) share. Each rank writes
 * "<path>.g<gen>.<r>-of-<N>"; the manifest at path, a staged file, is the
 * commit of the set: text lines that begin with the writer's head line,
 * "generation G" and "shards N", and end with "check <XXH3-64 of every
 * byte before it>". A new set takes the next generation, so its files
 * never overwrite the ones the committed manifest names. */
#define _GNU_SOURCE
#include "core/core.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum { PIECE = 1 << 20 };

char *hx__shard_file(const char *path, int64_t gen, int64_t r, int64_t n)
{
    char *p = NULL;
    if (asprintf(&p, "%s.g%" PRId64 ".%" PRId64 "-of-%" PRId64, path, gen, r, n) < 0) return NULL;
    return p;
}

hx_status hx__file_xxh3(const char *who, const char *path, uint64_t *hash, int64_t *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) return hx__error(HX_ERR_IO, "%s: cannot read shard file '%s': %s", who, path, strerror(errno));
    XXH3_state_t *h = XXH3_createState();
    char *buf = malloc(PIECE);
    hx_status st = h && buf && XXH3_64bits_reset(h) != XXH_ERROR
            ? HX_OK : hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory hashing '%s'", who, path);
    *bytes = 0;
    size_t k;
    while (!st && (k = fread(buf, 1, PIECE, f)) > 0) {
        XXH3_64bits_update(h, buf, k);
        *bytes += (int64_t)k;
    }
    if (!st && ferror(f)) st = hx__error(HX_ERR_IO, "%s: reading shard file '%s' failed", who, path);
    if (!st) *hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    free(buf);
    fclose(f);
    return st;
}

hx_status hx__manifest_commit(const char *who, const char *path, const char *text, size_t len)
{
    hx_stage stg;
    hx_status st = hx__stage_open(who, path, &stg);
    if (st) return st;
    fwrite(text, 1, len, stg.f);
    fprintf(stg.f, "check %016llx\n", (unsigned long long)XXH3_64bits(text, len));
    if (ferror(stg.f)) {
        int err = errno ? errno : EIO;
        hx__stage_abort(&stg);
        return hx__error(HX_ERR_IO, "%s: writing the manifest '%s' failed: %s (disk full?); the previous "
                         "one is untouched", who, path, strerror(err));
    }
    return hx__stage_commit(who, &stg);
}

hx_status hx__manifest_read(const char *who, const char *path, const char *head, size_t cap,
                            hx_manifest *m)
{
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f) return hx__error(HX_ERR_IO, "%s: cannot read '%s': %s", who, path, strerror(errno));
    long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        return hx__error(HX_ERR_IO, "%s: cannot size '%s'", who, path);
    }
    if ((unsigned long)size > cap) {
        fclose(f);
        return hx__error(HX_ERR_CORRUPT, "%s: '%s' is longer (%ld bytes) than a manifest can be (%zu)", who,
                         path, size, cap);
    }
    char *text = malloc((size_t)size + 1);
    size_t n = text ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!text) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory reading '%s'", who, path);
    text[n] = 0;
    size_t hl = strlen(head);
    char *last = n > 1 ? memrchr(text, '\n', n - 1) : NULL;
    unsigned long long check = 0;
    int used = 0;
    hx_status st = HX_OK;
    if (n < hl || memcmp(text, head, hl) || !last || text[n - 1] != '\n' ||
        sscanf(last + 1, "check %16llx\n", &check) != 1 || XXH3_64bits(text, (size_t)(last + 1 - text)) != check)
        st = hx__error(HX_ERR_CORRUPT, "%s: '%s' is not a manifest of this kind (\"%.*s\"), or it is damaged "
                       "(its check line does not match its text)", who, path, (int)(hl - 1), head);
    else if (sscanf(text + hl, "generation %" SCNd64 "\nshards %" SCNd64 "\n%n", &m->gen, &m->shards,
                    &used) != 2 || m->gen < 1 || m->shards < 1 || m->shards > HX_MAX_SHARDS)
        st = hx__error(HX_ERR_CORRUPT, "%s: '%s': its generation and shard count are malformed or out of range "
                       "(generation >= 1, 1 to %d shards)", who, path, HX_MAX_SHARDS);
    if (st) {
        free(text);
        return st;
    }
    last[1] = 0; /* the text without its check line */
    m->text = text;
    m->body = text + hl + used;
    return HX_OK;
}

void hx__manifest_free(hx_manifest *m)
{
    free(m->text);
    memset(m, 0, sizeof *m);
}

void hx__shard_files_remove(const char *path, int64_t gen, int64_t n)
{
    for (int64_t r = 0; r < n; r++) {
        char *p = hx__shard_file(path, gen, r, n);
        if (p) remove(p);
        free(p);
    }
}
