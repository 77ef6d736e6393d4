/* Fashion-MNIST's IDX files: a big-endian header (magic, then one u32 per
 * dimension) and u8 data. */
#include "resnet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads an IDX file of u8 data with `ndim` dims; dims[1..] must equal
 * want[1..] and the data must be exactly the file's remaining bytes. Keeps
 * the first min(N, limit) items (limit 0: all); *count is N. */
static uint8_t *idx_read(const char *path, uint32_t magic, int ndim, const uint32_t *want,
                         int64_t limit, int64_t *count, char *msg, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, len, "%s: cannot open (Fashion-MNIST is in data/fashion-mnist; see its "
                 "README, or pass --data DIR)", path);
        return NULL;
    }
    uint8_t head[16];
    size_t hbytes = 4 + 4 * (size_t)ndim;
    uint8_t *data = NULL;
    long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET)) {
        snprintf(msg, len, "%s: cannot read its size", path);
    } else if ((size_t)size < hbytes || fread(head, 1, hbytes, f) != hbytes) {
        snprintf(msg, len, "%s: %ld bytes, shorter than an IDX header of %zu", path, size, hbytes);
    } else if (be32(head) != magic) {
        snprintf(msg, len, "%s: magic 0x%08x, want 0x%08x (u8 data, %d dims)", path, be32(head),
                 magic, ndim);
    } else {
        uint64_t n = be32(head + 4), per = 1;
        int ok = n > 0;
        for (int d = 1; d < ndim && ok; d++) {
            ok = be32(head + 4 + 4 * d) == want[d];
            per *= want[d];
        }
        uint64_t body = (uint64_t)size - hbytes;
        uint64_t keep = limit > 0 && (uint64_t)limit < n ? (uint64_t)limit : n;
        if (!ok)
            snprintf(msg, len, "%s: dims (%u%s) are not (N > 0%s)", path, (unsigned)n,
                     ndim > 1 ? ", ..." : "", ndim > 1 ? ", 28, 28" : "");
        else if (body / per != n || body % per)
            snprintf(msg, len, "%s: the header says %llu items of %llu bytes, the file holds "
                     "%llu data bytes", path, (unsigned long long)n, (unsigned long long)per,
                     (unsigned long long)body);
        else if (!(data = malloc(keep * per)))
            snprintf(msg, len, "%s: out of memory for %llu bytes", path,
                     (unsigned long long)(keep * per));
        else if (fread(data, 1, keep * per, f) != keep * per) {
            snprintf(msg, len, "%s: short read", path);
            free(data);
            data = NULL;
        } else {
            *count = (int64_t)n;
        }
    }
    fclose(f);
    return data;
}

int resnet_set_load(const char *images, const char *labels, int64_t limit, resnet_set *out,
                    char *msg, size_t msg_len)
{
    memset(out, 0, sizeof *out);
    static const uint32_t img_dims[3] = {0, RESNET_SIDE, RESNET_SIDE}, lab_dims[1] = {0};
    int64_t ni = 0, nl = 0;
    out->pixels = idx_read(images, 0x00000803, 3, img_dims, limit, &ni, msg, msg_len);
    if (out->pixels)
        out->labels = idx_read(labels, 0x00000801, 1, lab_dims, limit, &nl, msg, msg_len);
    if (out->labels && ni != nl)
        snprintf(msg, msg_len, "%s holds %lld images, %s %lld labels", images, (long long)ni,
                 labels, (long long)nl);
    int64_t kept = limit > 0 && limit < nl ? limit : nl;
    for (int64_t i = 0; out->labels && ni == nl && i < kept; i++)
        if (out->labels[i] >= RESNET_CLASSES) {
            snprintf(msg, msg_len, "%s: label %u at position %lld is not a class (0..9)", labels,
                     out->labels[i], (long long)i);
            nl = -1;
        }
    if (!out->labels || ni != nl) {
        resnet_set_free(out);
        return -1;
    }
    out->n = kept;
    return 0;
}

void resnet_set_free(resnet_set *s)
{
    free(s->pixels);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void resnet_batch(const resnet_set *s, const int64_t *order, int64_t start, int B,
                  uint64_t flip_seed, float *x, int32_t *y)
{
    const float mean = 0.2860f, inv_std = 1.0f / 0.3530f; /* over the training images */
    for (int b = 0; b < B; b++) {
        int64_t k = order[(start + b) % s->n];
        const uint8_t *p = s->pixels + k * RESNET_PIXELS;
        bool flip = flip_seed && (mix(flip_seed + (uint64_t)(start + b)) & 1);
        float *o = x + (int64_t)b * RESNET_PIXELS;
        for (int r = 0; r < RESNET_SIDE; r++)
            for (int c = 0; c < RESNET_SIDE; c++) {
                int src = flip ? RESNET_SIDE - 1 - c : c;
                o[r * RESNET_SIDE + c] = (p[r * RESNET_SIDE + src] / 255.0f - mean) * inv_std;
            }
        y[b] = s->labels[k];
    }
}
