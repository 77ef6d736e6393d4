/* A command's `state` file in its checkpoint folder: "hetex CMD checkpoint
 * 1", the command's own lines (where the run is, then the flags that shape
 * its numbers as "--flag value"), and an XXH3 of everything before it. */
#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <xxhash.h>

static void magic(const char *cmd, char *buf, size_t n)
{
    snprintf(buf, n, "hetex %s checkpoint 1\n", cmd);
}

bool cli_state_write(const char *path, const char *cmd, const char *body)
{
    char head[64], sum[32];
    magic(cmd, head, sizeof head);
    XXH3_state_t *h = XXH3_createState();
    if (!h) return errno = ENOMEM, false;
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, head, strlen(head));
    XXH3_64bits_update(h, body, strlen(body));
    snprintf(sum, sizeof sum, "xxh3 %016" PRIx64 "\n", XXH3_64bits_digest(h));
    XXH3_freeState(h);
    FILE *f = fopen(path, "w");
    errno = 0;
    bool ok = f && fputs(head, f) >= 0 && fputs(body, f) >= 0 && fputs(sum, f) >= 0;
    if (f && fclose(f)) ok = false;
    if (!ok && !errno) errno = EIO;
    return ok;
}

bool cli_state_read(const char *cmd, const char *dir, const char *path, char *body, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "hetex %s: --resume '%s': cannot read '%s': %s\n", cmd, dir, path,
                strerror(errno));
        return false;
    }
    size_t len = fread(body, 1, n - 1, f);
    bool longer = fgetc(f) != EOF;
    fclose(f);
    body[len] = 0;
    char head[64];
    magic(cmd, head, sizeof head);
    char *sum = len ? strstr(body, "xxh3 ") : NULL;
    while (sum && sum > body && sum[-1] != '\n') sum = strstr(sum + 1, "xxh3 ");
    uint64_t want;
    int used = 0;
    if (longer || strncmp(body, head, strlen(head)) || !sum ||
        sscanf(sum, "xxh3 %16" SCNx64 "\n%n", &want, &used) != 1 || sum[used] ||
        XXH3_64bits(body, (size_t)(sum - body)) != want) {
        fprintf(stderr, "hetex %s: --resume '%s': '%s' is not a %s checkpoint's state or is "
                "damaged (its checksum does not match)\n", cmd, dir, path, cmd);
        return false;
    }
    *sum = 0;
    memmove(body, body + strlen(head), strlen(body + strlen(head)) + 1);
    return true;
}

bool cli_state_flags(const char *cmd, const char *dir, const char **at, char (*want)[160], int n)
{
    for (int i = 0; i < n; i++) {
        const char *end = strchr(*at, '\n');
        size_t len = end ? (size_t)(end - *at) : strlen(*at);
        size_t name = strcspn(want[i], " ");
        if (len != strlen(want[i]) || strncmp(*at, want[i], len)) {
            fprintf(stderr, "hetex %s: --resume '%s' was made with %.*s; this run has %s: "
                    "resume with the flags of the run that saved it\n", cmd, dir, (int)len, *at,
                    strncmp(*at, want[i], name) ? "other flags" : want[i]);
            return false;
        }
        *at += len + (end != NULL);
    }
    return true;
}
