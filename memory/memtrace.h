/* Allocation traces: recording, the text format, replay, and synthetic
 * traces for tests and benchmarks.
 *
 * The format (one event a line; '#' starts a comment line; blank lines are
 * skipped):
 *   hxmemtrace 1              the header, first line that is not a comment
 *   a <id> <bytes> [p|t]      allocation: id (unsigned 64-bit, not live),
 *                             size in bytes, persistent or transient (t if
 *                             left out)
 *   f <id>                    free of a live id
 *
 * A recorder (hx_memtrace_open, or hx_memtrace_open_env for HX_MEMTRACE=path)
 * takes the events of a running allocator, from any thread, into a buffer
 * in memory, and writes it at close to path.tmp, then renames it over the
 * path (a reader never sees half a trace). Ids are numbered from 1 in
 * allocation order. */
#ifndef HX_MEM_MEMTRACE_H
#define HX_MEM_MEMTRACE_H

#include <stdbool.h>

#include "memory/mem_common.h"

typedef struct hx_mem_event {
    uint64_t id;
    size_t bytes;       /* alloc only */
    bool alloc;
    bool persistent;    /* alloc only */
} hx_mem_event;

/* ---- recording -------------------------------------------------------------------- */

typedef struct hx_memtrace hx_memtrace;

hx_status hx_memtrace_open(const char *path, hx_memtrace **out, hx_mem_err *err);
/* A recorder for $HX_MEMTRACE; NULL (err untouched) when it is unset or
 * empty; NULL with err set when it cannot be opened. */
hx_memtrace *hx_memtrace_open_env(hx_mem_err *err);
/* Thread-safe. A free of a pointer the recorder never saw (allocated
 * before it started) is left out of the trace. */
void hx_memtrace_alloc(hx_memtrace *t, const void *ptr, size_t bytes, bool persistent);
void hx_memtrace_free(hx_memtrace *t, const void *ptr);
/* Writes the trace (atomically) and frees the recorder (also on failure).
 * NULL: HX_OK. Fails with HX_ERR_IO when the file cannot be written and
 * with HX_ERR_OUT_OF_MEMORY when events were lost for want of host memory. */
hx_status hx_memtrace_close(hx_memtrace *t, hx_mem_err *err);

/* ---- files ---------------------------------------------------------------------------- */

/* Writes events in the format above, atomically (path.tmp, renamed). */
hx_status hx_memtrace_write(const char *path, const hx_mem_event *ev, size_t n,
                            hx_mem_err *err);
/* Reads and checks a trace: HX_ERR_IO when it cannot be read,
 * HX_ERR_CORRUPT naming the line for a bad header, a malformed line (a
 * number that is not digits within 64 bits, a NUL byte), an alloc of a
 * live id or a free of an id that is not live. *out is malloc'd. */
hx_status hx_memtrace_load(const char *path, hx_mem_event **out, size_t *n, hx_mem_err *err);

/* ---- replay ------------------------------------------------------------------------------ */

/* Replays checked events through the lifetime-segregated pools and through
 * the PyTorch-style baseline (both on fake addresses, each under the same
 * capacity, SIZE_MAX for none). An allocator that runs out of memory stops
 * there: its OOM event (index into ev) and the live bytes then are
 * reported. */
hx_status hx_memtrace_replay(const hx_mem_event *ev, size_t n, size_t capacity,
                             hx_memreplay_report *out, hx_mem_err *err);

#endif
