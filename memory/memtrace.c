/* Allocation traces: the recorder and the text format (see memtrace.h). */
#include "memory/memtrace.h"
#include "memory/ptrmap.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "hxmemtrace 1\n"

/* ---- a growing text buffer ---------------------------------------------------------- */

typedef struct textbuf {
    char *p;
    size_t n, cap;
    bool lost; /* an append failed for want of memory */
} textbuf;

static void tb_printf(textbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(textbuf *b, const char *fmt, ...)
{
    if (b->lost) return;
    if (b->cap - b->n < 64) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->lost = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k > 0) b->n += (size_t)k; /* every line is < 64 bytes */
}

static void format_event(textbuf *b, const hx_mem_event *e)
{
    if (e->alloc) tb_printf(b, "a %" PRIu64 " %zu %c\n", e->id, e->bytes, e->persistent ? 'p' : 't');
    else tb_printf(b, "f %" PRIu64 "\n", e->id);
}

/* Writes bytes to path.tmp, flushes it to disk and renames it over path. */
static hx_status write_atomic(const char *path, const char *data, size_t n, hx_mem_err *err)
{
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    if (!tmp) return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "memtrace: out of host memory");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    hx_status st = HX_OK;
    if (!f) {
        st = hx__mem_fail(err, HX_ERR_IO, "memtrace: cannot create '%s': %s", tmp, strerror(errno));
    } else {
        bool ok = fwrite(data, 1, n, f) == n && fflush(f) == 0;
        int e = errno;
        if (fclose(f) != 0 && ok) {
            ok = false;
            e = errno;
        }
        if (!ok) st = hx__mem_fail(err, HX_ERR_IO, "memtrace: writing '%s' failed: %s", tmp, strerror(e));
        else if (rename(tmp, path) != 0)
            st = hx__mem_fail(err, HX_ERR_IO, "memtrace: cannot rename '%s' to '%s': %s", tmp, path,
                              strerror(errno));
        if (st) remove(tmp);
    }
    free(tmp);
    return st;
}

/* ---- the recorder ------------------------------------------------------------------------ */

struct hx_memtrace {
    pthread_mutex_t mu;
    char *path;
    textbuf buf;
    hx_ptrmap ids; /* live pointer -> id */
    uint64_t next_id;
};

hx_status hx_memtrace_open(const char *path, hx_memtrace **out, hx_mem_err *err)
{
    if (!out) return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_memtrace_open: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_memtrace_open: the path is NULL or empty");
    /* fail now, not at close, when the place cannot be written */
    FILE *probe = fopen(path, "ab");
    if (!probe)
        return hx__mem_fail(err, HX_ERR_IO, "hx_memtrace_open: cannot write '%s': %s", path,
                            strerror(errno));
    fclose(probe);
    hx_memtrace *t = calloc(1, sizeof *t);
    if (t) t->path = strdup(path);
    if (!t || !t->path) {
        free(t);
        return hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "hx_memtrace_open: out of host memory");
    }
    pthread_mutex_init(&t->mu, NULL);
    tb_printf(&t->buf, "# hetex device allocations (HX_MEMTRACE)\n" HEADER);
    *out = t;
    return HX_OK;
}

hx_memtrace *hx_memtrace_open_env(hx_mem_err *err)
{
    const char *path = getenv("HX_MEMTRACE");
    if (!path || !path[0]) return NULL;
    hx_memtrace *t = NULL;
    hx_memtrace_open(path, &t, err);
    return t;
}

void hx_memtrace_alloc(hx_memtrace *t, const void *ptr, size_t bytes, bool persistent)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    hx_mem_event e = {.id = ++t->next_id, .bytes = bytes, .alloc = true, .persistent = persistent};
    if (!hx__ptrmap_put(&t->ids, (uintptr_t)ptr, (void *)(uintptr_t)e.id)) t->buf.lost = true;
    format_event(&t->buf, &e);
    pthread_mutex_unlock(&t->mu);
}

void hx_memtrace_free(hx_memtrace *t, const void *ptr)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    uint64_t id = (uintptr_t)hx__ptrmap_del(&t->ids, (uintptr_t)ptr);
    if (id) format_event(&t->buf, &(hx_mem_event){.id = id});
    pthread_mutex_unlock(&t->mu);
}

hx_status hx_memtrace_close(hx_memtrace *t, hx_mem_err *err)
{
    if (!t) return HX_OK;
    hx_status st = t->buf.lost
        ? hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY,
                       "memtrace '%s': events were lost for want of host memory; nothing written",
                       t->path)
        : write_atomic(t->path, t->buf.p, t->buf.n, err);
    hx__ptrmap_free(&t->ids);
    pthread_mutex_destroy(&t->mu);
    free(t->buf.p);
    free(t->path);
    free(t);
    return st;
}

/* ---- files ------------------------------------------------------------------------------- */

hx_status hx_memtrace_write(const char *path, const hx_mem_event *ev, size_t n, hx_mem_err *err)
{
    if (!path || (!ev && n))
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_memtrace_write: path or events NULL");
    textbuf b = {0};
    tb_printf(&b, HEADER);
    for (size_t i = 0; i < n; i++) format_event(&b, &ev[i]);
    hx_status st = b.lost ? hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "hx_memtrace_write: out of host memory")
                          : write_atomic(path, b.p, b.n, err);
    free(b.p);
    return st;
}

/* The next word of *s (separated by spaces, tabs, CR, LF) into [*w, *w +
 * *len); false when none is left. */
static bool next_word(const char **s, const char **w, size_t *len)
{
    const char *p = *s + strspn(*s, " \t\r\n");
    size_t n = strcspn(p, " \t\r\n");
    *s = p + n;
    *w = p;
    *len = n;
    return n > 0;
}

static bool word_is(const char *w, size_t len, const char *want)
{
    return len == strlen(want) && !memcmp(w, want, len);
}

/* A decimal number of digits only that fits 64 bits: no sign, no wrap,
 * no saturation. */
static bool parse_u64(const char *w, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned)(w[i] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return len > 0;
}

/* Parses one event line, "a <id> <bytes> [p|t]" or "f <id>"; false when
 * malformed. */
static bool parse_event(const char *line, hx_mem_event *e)
{
    const char *w;
    size_t len;
    uint64_t id, bytes;
    memset(e, 0, sizeof *e);
    if (!next_word(&line, &w, &len)) return false;
    bool alloc = word_is(w, len, "a");
    if (!alloc && !word_is(w, len, "f")) return false;
    if (!next_word(&line, &w, &len) || !parse_u64(w, len, &id)) return false;
    e->id = id;
    if (!alloc) return !next_word(&line, &w, &len);
    if (!next_word(&line, &w, &len) || !parse_u64(w, len, &bytes) || bytes > SIZE_MAX) return false;
    bool persistent = false;
    if (next_word(&line, &w, &len)) {
        persistent = word_is(w, len, "p");
        if (!persistent && !word_is(w, len, "t")) return false;
        if (next_word(&line, &w, &len)) return false;
    }
    *e = (hx_mem_event){.id = id, .bytes = (size_t)bytes, .alloc = true, .persistent = persistent};
    return true;
}

/* One line of f into line (cap bytes, NUL-terminated, its newline kept). */
typedef enum { LINE_OK, LINE_END, LINE_TOO_LONG, LINE_NUL } line_read;

static line_read read_line(FILE *f, char *line, size_t cap)
{
    size_t n = 0;
    int c = EOF;
    while (n + 1 < cap && (c = getc(f)) != EOF) {
        if (c == 0) return LINE_NUL;
        line[n++] = (char)c;
        if (c == '\n') break;
    }
    line[n] = 0;
    if (n == 0) return LINE_END;
    return n + 1 == cap && line[n - 1] != '\n' ? LINE_TOO_LONG : LINE_OK;
}

hx_status hx_memtrace_load(const char *path, hx_mem_event **out, size_t *n, hx_mem_err *err)
{
    if (!path || !out || !n)
        return hx__mem_fail(err, HX_ERR_INVALID_ARGUMENT, "hx_memtrace_load: path, out or n is NULL");
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return hx__mem_fail(err, HX_ERR_IO, "memtrace: cannot open '%s': %s", path, strerror(errno));
    hx_mem_event *ev = NULL;
    size_t cnt = 0, cap = 0;
    hx_ptrmap live = {0}; /* id + 1 -> marker */
    hx_status st = HX_OK;
    bool header = false;
    char line[256];
    line_read lr;
    for (long ln = 1; (lr = read_line(f, line, sizeof line)) != LINE_END; ln++) {
        if (lr != LINE_OK) {
            st = hx__mem_fail(err, HX_ERR_CORRUPT, "memtrace '%s' line %ld: %s", path, ln,
                              lr == LINE_NUL ? "a NUL byte (not a text file?)" : "line too long");
            break;
        }
        const char *s = line + strspn(line, " \t");
        if (*s == '#' || *s == '\n' || *s == '\r' || !*s) continue;
        if (!header) {
            const char *w, *rest = s;
            size_t len;
            uint64_t v;
            if (!next_word(&rest, &w, &len) || !word_is(w, len, "hxmemtrace") ||
                !next_word(&rest, &w, &len) || !parse_u64(w, len, &v) || v != 1 ||
                next_word(&rest, &w, &len)) {
                st = hx__mem_fail(err, HX_ERR_CORRUPT,
                                  "memtrace '%s' line %ld: expected the header 'hxmemtrace 1' "
                                  "(a hetex memory trace, version 1)", path, ln);
                break;
            }
            header = true;
            continue;
        }
        hx_mem_event e;
        if (!parse_event(s, &e)) {
            st = hx__mem_fail(err, HX_ERR_CORRUPT,
                              "memtrace '%s' line %ld: malformed event '%.*s'; expected "
                              "'a <id> <bytes> [p|t]' or 'f <id>'", path, ln,
                              (int)strcspn(s, "\r\n"), s);
            break;
        }
        if (e.id == UINT64_MAX) {
            st = hx__mem_fail(err, HX_ERR_CORRUPT, "memtrace '%s' line %ld: id %" PRIu64 " is too large",
                              path, ln, e.id);
            break;
        }
        bool is_live = hx__ptrmap_get(&live, e.id + 1) != NULL;
        if (e.alloc == is_live) {
            st = hx__mem_fail(err, HX_ERR_CORRUPT,
                              e.alloc ? "memtrace '%s' line %ld: id %" PRIu64 " is allocated while live"
                                      : "memtrace '%s' line %ld: free of id %" PRIu64 ", which is not live",
                              path, ln, e.id);
            break;
        }
        bool ok = e.alloc ? hx__ptrmap_put(&live, e.id + 1, (void *)1)
                          : hx__ptrmap_del(&live, e.id + 1) != NULL;
        if (ok && cnt == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            hx_mem_event *p = realloc(ev, nc * sizeof *p);
            if (p) {
                ev = p;
                cap = nc;
            } else ok = false;
        }
        if (!ok) {
            st = hx__mem_fail(err, HX_ERR_OUT_OF_MEMORY, "memtrace '%s': out of host memory", path);
            break;
        }
        ev[cnt++] = e;
    }
    if (!st && ferror(f)) st = hx__mem_fail(err, HX_ERR_IO, "memtrace: reading '%s' failed", path);
    if (!st && !header)
        st = hx__mem_fail(err, HX_ERR_CORRUPT, "memtrace '%s': no header line 'hxmemtrace 1' (empty file?)", path);
    fclose(f);
    hx__ptrmap_free(&live);
    if (st) {
        free(ev);
        return st;
    }
    *out = ev;
    *n = cnt;
    return HX_OK;
}
