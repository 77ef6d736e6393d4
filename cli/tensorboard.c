/* TensorBoard event files: TFRecord framing (u64 length, masked CRC-32C of
 * it, the data, masked CRC-32C of the data) around Events that protobuf-c
 * encodes from cli/tensorboard.proto (TensorFlow's field numbers). Each
 * record is flushed as written. */
#include "cli/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint32_t cli_crc32c(const void *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    const unsigned char *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#ifdef HX_HAVE_PROTOBUF_C
#include "tensorboard.pb-c.h"

static uint32_t masked(const void *p, size_t n)
{
    uint32_t c = cli_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One record (little-endian, as TFRecord is written on x86). */
static bool record(FILE *f, const Tensorboard__Event *ev)
{
    size_t n = tensorboard__event__get_packed_size(ev);
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) return errno = ENOMEM, false;
    tensorboard__event__pack(ev, buf);
    uint64_t len = n;
    uint32_t len_crc = masked(&len, sizeof len), data_crc = masked(buf, n);
    bool ok = fwrite(&len, sizeof len, 1, f) == 1 && fwrite(&len_crc, sizeof len_crc, 1, f) == 1 &&
              fwrite(buf, 1, n, f) == n && fwrite(&data_crc, sizeof data_crc, 1, f) == 1 &&
              !fflush(f);
    free(buf);
    return ok;
}

FILE *cli_tb_open(const char *cmd, const char *dir, char *path, size_t n)
{
    struct stat sb;
    if (mkdir(dir, 0755) && (errno != EEXIST || stat(dir, &sb) || !S_ISDIR(sb.st_mode))) {
        fprintf(stderr, "hetex %s: --tensorboard '%s': %s\n", cmd, dir,
                errno == EEXIST ? "is a file; give a folder's name"
                                : "cannot make the folder (its parent must exist)");
        return NULL;
    }
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    snprintf(path, n, "%s/events.out.tfevents.%lld.%s.%ld.hetex", dir, (long long)time(NULL), host,
             (long)getpid());
    FILE *f = fopen(path, "wbx");
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time();
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)"brain.Event:2";
    if (!f || !record(f, &ev)) {
        fprintf(stderr, "hetex %s: --tensorboard '%s': cannot write '%s': %s\n", cmd, dir, path,
                strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    return f;
}

bool cli_tb_write(FILE *f, int64_t step, char (*tags)[80], const double *values, int n)
{
    Tensorboard__Summary__Value v[CLI_METRICS_MAX_NUMBERS], *vp[CLI_METRICS_MAX_NUMBERS];
    for (int i = 0; i < n && i < CLI_METRICS_MAX_NUMBERS; i++) {
        tensorboard__summary__value__init(&v[i]);
        v[i].tag = tags[i];
        v[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        v[i].simple_value = (float)values[i];
        vp[i] = &v[i];
    }
    Tensorboard__Summary summary = TENSORBOARD__SUMMARY__INIT;
    summary.n_value = (size_t)(n < CLI_METRICS_MAX_NUMBERS ? n : CLI_METRICS_MAX_NUMBERS);
    summary.value = vp;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time();
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    return record(f, &ev);
}

#else /* built without protobuf-c */

FILE *cli_tb_open(const char *cmd, const char *dir, char *path, size_t n)
{
    (void)path, (void)n;
    fprintf(stderr, "hetex %s: --tensorboard '%s': this hetex was built without protobuf-c, "
            "which writes TensorBoard's files: apt-get install libprotobuf-c-dev "
            "protobuf-c-compiler (./build.sh does), then rebuild\n", cmd, dir);
    return NULL;
}

bool cli_tb_write(FILE *f, int64_t step, char (*tags)[80], const double *values, int n)
{
    (void)f, (void)step, (void)tags, (void)values, (void)n;
    return false;
}

#endif
