/* The op cost cache: measured seconds per (machine, signature), kept in a
 * text file between sessions. A file is read only if all of it is valid:
 *
 *   hetex-op-costs 1
 *   <machine: 16 hex digits> <signature: 16 hex digits> <seconds> <what>
 *   ...
 *
 * at most HX_OP_COSTS_MAX lines of entries and 1 MiB, every time finite and
 * in (0, 1000), `what` 1..63 characters of [A-Za-z0-9_.:-]; anything else
 * makes the whole file ignored (HX_DEBUG=placement says why) and the next
 * save rewrites it. Saves keep the newest HX_OP_COSTS_MAX entries and
 * replace the file atomically (a temporary file renamed over it). */
#include "session/session.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HX_OP_COSTS_MAX = 8192, WHAT_LEN = 64 };
#define HX_OP_COSTS_MAX_BYTES ((long)1 << 20)

typedef struct entry {
    uint64_t machine, sig;
    double seconds;
    char what[WHAT_LEN];
} entry;

struct hx_op_costs {
    char *path;         /* NULL: no file */
    uint64_t machine;
    entry *e;           /* oldest first */
    int n, cap;
    int n_file;         /* e[0..n_file) came from the file */
    bool dirty;
};

uint64_t hx__hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static bool what_ok(const char *w)
{
    size_t n = strlen(w);
    if (!n || n >= WHAT_LEN) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)w[i]) && !strchr("_.:-", w[i])) return false;
    return true;
}

static bool hex16(const char *s, uint64_t *out)
{
    if (strlen(s) != 16) return false;
    for (int i = 0; i < 16; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    *out = strtoull(s, NULL, 16);
    return true;
}

static hx_status add(hx_op_costs *c, uint64_t machine, uint64_t sig, double seconds,
                     const char *what)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 256;
        entry *e = realloc(c->e, sizeof *e * (size_t)cap);
        if (!e) return hx__error(HX_ERR_OUT_OF_MEMORY, "op cost cache: out of host memory");
        c->e = e;
        c->cap = cap;
    }
    entry *x = &c->e[c->n++];
    *x = (entry){machine, sig, seconds, ""};
    snprintf(x->what, sizeof x->what, "%s", what);
    return HX_OK;
}

/* Reads c->path into c; false (and c empty) when the file is not valid,
 * with why. A missing file is valid and empty. */
static bool load(hx_op_costs *c, char *why, size_t n)
{
    FILE *f = fopen(c->path, "r");
    if (!f) {
        snprintf(why, n, "%s", errno == ENOENT ? "" : strerror(errno));
        return errno == ENOENT;
    }
    char line[256];
    bool ok = fgets(line, sizeof line, f) && !strcmp(line, "hetex-op-costs 1\n");
    if (!ok) snprintf(why, n, "the first line is not 'hetex-op-costs 1'");
    for (int ln = 2; ok && fgets(line, sizeof line, f); ln++) {
        char m[24], s[24], w[WHAT_LEN + 8], rest[8];
        double sec;
        uint64_t mh, sh;
        ok = strchr(line, '\n') && ftell(f) <= HX_OP_COSTS_MAX_BYTES && c->n < HX_OP_COSTS_MAX &&
             sscanf(line, "%23s %23s %lf %71s %7s", m, s, &sec, w, rest) == 4 && hex16(m, &mh) &&
             hex16(s, &sh) && isfinite(sec) && sec > 0 && sec < 1000 && what_ok(w) &&
             !add(c, mh, sh, sec, w);
        if (!ok) snprintf(why, n, "line %d is not '<16 hex> <16 hex> <seconds in (0,1000)> <name>', "
                          "or the file passes %d entries or 1 MiB", ln, HX_OP_COSTS_MAX);
    }
    ok = ok && !ferror(f);
    fclose(f);
    if (!ok) c->n = 0;
    return ok;
}

/* $HOME/.cache/hetex/op_costs, its folders made; NULL when there is no $HOME. */
static char *default_path(void)
{
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    size_t n = strlen(home) + 32;
    char *p = malloc(n);
    if (!p) return NULL;
    snprintf(p, n, "%s/.cache", home);
    mkdir(p, 0755);
    snprintf(p, n, "%s/.cache/hetex", home);
    mkdir(p, 0755);
    snprintf(p, n, "%s/.cache/hetex/op_costs", home);
    return p;
}

hx_status hx__op_costs_open(const char *path, uint64_t machine, hx_op_costs **out)
{
    hx_op_costs *c = calloc(1, sizeof *c);
    if (!c) return hx__error(HX_ERR_OUT_OF_MEMORY, "op cost cache: out of host memory");
    c->machine = machine;
    if (!path) path = getenv("HX_PLACEMENT_CACHE");
    c->path = path ? (*path ? strdup(path) : NULL) : default_path();
    char why[160] = "";
    if (c->path && !load(c, why, sizeof why)) {
        if (hx__debug("placement"))
            fprintf(stderr, "hetex placement: the op cost cache '%s' is ignored (%s); it will "
                    "be rewritten\n", c->path, why);
        c->dirty = true;
    }
    c->n_file = c->n;
    *out = c;
    return HX_OK;
}

bool hx__op_costs_get(const hx_op_costs *c, uint64_t sig, double *seconds, bool *from_file)
{
    for (int i = c->n - 1; i >= 0; i--)
        if (c->e[i].sig == sig && c->e[i].machine == c->machine) {
            *seconds = c->e[i].seconds;
            if (from_file) *from_file = i < c->n_file;
            return true;
        }
    return false;
}

hx_status hx__op_costs_put(hx_op_costs *c, uint64_t sig, double seconds, const char *what)
{
    if (!(seconds > 0 && seconds < 1000)) seconds = seconds > 0 ? 999 : 1e-9;
    c->dirty = true;
    /* the newest entry, the one hx__op_costs_get gives (a file may repeat one) */
    for (int i = c->n - 1; i >= 0; i--)
        if (c->e[i].sig == sig && c->e[i].machine == c->machine) {
            c->e[i].seconds = seconds;
            return HX_OK;
        }
    return add(c, c->machine, sig, seconds, what_ok(what) ? what : "op");
}

hx_status hx__op_costs_save(hx_op_costs *c)
{
    if (!c->path || !c->dirty) return HX_OK;
    size_t n = strlen(c->path) + 32;
    char *tmp = malloc(n);
    if (!tmp) return hx__error(HX_ERR_OUT_OF_MEMORY, "op cost cache: out of host memory");
    snprintf(tmp, n, "%s.tmp-%ld", c->path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f && fprintf(f, "hetex-op-costs 1\n") > 0;
    int from = c->n > HX_OP_COSTS_MAX ? c->n - HX_OP_COSTS_MAX : 0;
    for (int i = from; ok && i < c->n; i++)
        ok = fprintf(f, "%016" PRIx64 " %016" PRIx64 " %.9g %s\n", c->e[i].machine,
                     c->e[i].sig, c->e[i].seconds, c->e[i].what) > 0;
    if (f) {
        bool werr = ferror(f) != 0; /* fclose runs whatever it says */
        ok = fclose(f) == 0 && !werr && ok;
    }
    if (ok) ok = !rename(tmp, c->path);
    if (!ok) remove(tmp);
    hx_status st = ok ? HX_OK
                      : hx__error(HX_ERR_IO, "op cost cache: cannot write '%s'; set "
                                  "hx_session_config.placement_cache to a writable file, or \"\" "
                                  "for no cache", c->path);
    free(tmp);
    c->dirty = !ok;
    return st;
}

void hx__op_costs_free(hx_op_costs *c)
{
    if (!c) return;
    free(c->path);
    free(c->e);
    free(c);
}
