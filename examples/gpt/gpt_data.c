/* The character corpus: load, vocabulary, split, random windows. */
#include "gpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hx_status gpt_text_load(const char *path, gpt_text *t, char *msg, size_t msg_len)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, msg_len, "cannot open '%s': %s (give a text file with --data PATH)", path,
                 strerror(errno));
        return HX_ERR_IO;
    }
    unsigned char *bytes = NULL;
    size_t n = 0, cap = 0;
    bool oom = false;
    for (;;) {
        if (n == cap) {
            unsigned char *grown = realloc(bytes, cap = cap ? 2 * cap : 1 << 20);
            if (!grown) {
                oom = true;
                break;
            }
            bytes = grown;
        }
        size_t got = fread(bytes + n, 1, cap - n, f);
        if (!got) break;
        n += got;
    }
    bool failed = ferror(f);
    fclose(f);
    if (oom || failed) {
        free(bytes);
        snprintf(msg, msg_len, "reading '%s' failed: %s", path,
                 oom ? "out of memory" : "read error");
        return oom ? HX_ERR_OUT_OF_MEMORY : HX_ERR_IO;
    }
    if (n < 2) {
        free(bytes);
        snprintf(msg, msg_len, "'%s' has %zu bytes; a corpus needs at least 2", path, n);
        return HX_ERR_INVALID_ARGUMENT;
    }
    int id_of[256];
    bool seen[256] = {false};
    for (size_t i = 0; i < n; i++) seen[bytes[i]] = true;
    for (int c = 0; c < 256; c++)
        if (seen[c]) {
            t->chars[t->vocab] = (unsigned char)c;
            id_of[c] = t->vocab++;
        }
    t->ids = malloc(sizeof *t->ids * n);
    if (!t->ids) {
        free(bytes);
        snprintf(msg, msg_len, "out of memory for %zu token ids", n);
        return HX_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < n; i++) t->ids[i] = id_of[bytes[i]];
    free(bytes);
    t->n = (int64_t)n;
    t->n_train = t->n * 9 / 10;
    return HX_OK;
}

void gpt_text_free(gpt_text *t)
{
    free(t->ids);
    memset(t, 0, sizeof *t);
}

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void gpt_text_batch(const gpt_text *t, bool val, int batch, int context, uint64_t *rng,
                    int32_t *tokens, int32_t *targets)
{
    int64_t lo = val ? t->n_train : 0, hi = val ? t->n : t->n_train;
    int64_t starts = hi - lo - context; /* windows of context + 1 ids */
    for (int b = 0; b < batch; b++) {
        int64_t s = lo + (int64_t)(next(rng) % (uint64_t)starts);
        memcpy(tokens + (int64_t)b * context, t->ids + s, sizeof *tokens * context);
        memcpy(targets + (int64_t)b * context, t->ids + s + 1, sizeof *targets * context);
    }
}
