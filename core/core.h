/* What every folder of the library shares: the thread-local error message
 * behind hx_last_error(), dtype facts, the HX_DEBUG switches, the clock and
 * which sanitizer a build has.
 * This is core/'s one internal header; it knows nothing but the public
 * header. */
#ifndef HX_CORE_H
#define HX_CORE_H

#include "hetex.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Errors: set the thread-local message (at most HX_ERROR_LEN bytes with
 * its terminator); return the status (or NULL). */
#define HX_ERROR_LEN 1024
hx_status hx__error(hx_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hx__clear_error(void);

bool hx__is_float(hx_dtype dt);

/* HX_DEBUG contains `what` (e.g. "placement"). */
bool hx__debug(const char *what);

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): the time base of the
 * trace and of the emu device's simulated costs. */
double hx__now(void);
/* Sleeps until hx__now() reaches end (at once if it has); returns the later
 * of the two. */
double hx__sleep_until(double end);

/* Staged files: a file replaced as a whole or not at all. hx__stage_open
 * removes the stages of path that dead writers left behind and creates
 * this save's own, "<path>.stage-<pid>-<n>", locked while it is written
 * (HX_ERR_STATE, naming the stage file, when another saver is writing path
 * now; HX_ERR_IO). Write through s->f; then hx__stage_commit (flush, fsync,
 * rename over path, fsync the folder) or hx__stage_abort (removes the
 * stage). Both end s. `who` starts the error messages. */
typedef struct hx_stage {
    FILE *f;
    int fd;
    char *tmp, *path;
} hx_stage;
hx_status hx__stage_open(const char *who, const char *path, hx_stage *s);
hx_status hx__stage_commit(const char *who, hx_stage *s);
void hx__stage_abort(hx_stage *s);

/* Shard sets (shard_files.c): a checkpoint written by N ranks, each its
 * file "<path>.g<gen>.<r>-of-<N>" (hx__shard_file: malloc'd, NULL out of
 * memory), committed by the manifest at path, a staged file of text lines:
 * the writer's head line, "generation G", "shards N", its own lines, and
 * "check <XXH3-64 of the text before it>". A new set takes the last
 * committed generation + 1, so a crash before its manifest is committed
 * leaves the old set whole. hx__file_xxh3: a whole file's XXH3-64 and
 * size (HX_ERR_IO naming it). hx__manifest_commit writes text (ending in
 * a newline) and its check line to path as a staged file (see above).
 * hx__manifest_read checks path's head, length (at most cap bytes), check
 * line, generation (>= 1) and shard count (1..HX_MAX_SHARDS) into m: its
 * text without the check line, and body, the lines after "shards N"
 * (HX_ERR_IO: unreadable; HX_ERR_CORRUPT naming path; free with
 * hx__manifest_free). hx__shard_files_remove removes generation gen's n
 * files (those that exist). `who` starts the error messages. */
#define HX_MAX_SHARDS 65536
typedef struct hx_manifest {
    int64_t gen, shards;
    char *text;
    const char *body;
} hx_manifest;
char *hx__shard_file(const char *path, int64_t gen, int64_t r, int64_t n);
hx_status hx__file_xxh3(const char *who, const char *path, uint64_t *hash, int64_t *bytes);
hx_status hx__manifest_commit(const char *who, const char *path, const char *text, size_t len);
hx_status hx__manifest_read(const char *who, const char *path, const char *head, size_t cap, hx_manifest *m);
void hx__manifest_free(hx_manifest *m);
void hx__shard_files_remove(const char *path, int64_t gen, int64_t n);

/* The sanitizer this file is built with, one test for both compilers: GCC
 * defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang answers
 * __has_feature. HX_ASAN and HX_TSAN are 1 under it, else undefined. */
#if defined(__SANITIZE_ADDRESS__)
#define HX_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define HX_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(HX_ASAN)
#define HX_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(HX_TSAN)
#define HX_TSAN 1
#endif
#endif

#endif
