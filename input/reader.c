/* The streaming reader: a reading thread cuts the file into blocks that end
 * at line boundaries, parser threads turn blocks into rows, and the
 * caller's thread takes the rows in file order (optionally through a seeded
 * shuffle buffer) and cuts them into batches.
 *
 * Blocks live in max_blocks slots; block k uses slot k % max_blocks, so the
 * reading thread waits for the consumer to free that slot before reusing
 * it, and memory stays bounded whatever the file's size. One mutex guards
 * every slot's state; a slot's data belongs to whoever moved it to its
 * current state (reading thread: FREE, parser: PARSING, consumer: PARSED). */
#include "input/input.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SLOT_FREE, SLOT_RAW, SLOT_PARSING, SLOT_PARSED } slot_state;

typedef struct slot {
    slot_state state;
    int64_t seq;
    char *data;            /* capacity: max_line_bytes + 1 + block_bytes */
    size_t off, len;       /* the block's complete lines: data[off, off + len) */
    int64_t bytes;         /* bytes of the file this block read */
    int64_t skipped_lines; /* header lines dropped before the block */
    bool overlong_after;   /* one line longer than max_line_bytes follows the block */
    bool last;             /* the file ends with this block */
    int io_errno;          /* the read failed (0: fine) */
    hx_status parse_status;/* out of memory while parsing */
    hx__parsed parsed;
    size_t rows_bytes;     /* parsed.rows' size, published with the state */
} slot;

struct hx_reader {
    hx__schema schema;
    char *path;
    FILE *file;
    int n_slots;
    slot *slots;
    size_t slot_capacity;
    char *carry; /* the reading thread's unfinished line */

    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_raw, cv_parsed;
    bool stop;
    pthread_t reader_thread, *parser_threads;
    int n_running_parsers;
    bool reader_running;

    /* the consumer (the caller's thread) */
    int64_t next_seq;     /* the next block to consume */
    slot *cur;            /* the block being consumed, or NULL */
    int64_t cur_pos;      /* its next row */
    int64_t cur_limit;    /* its rows to deliver: all, or those before a stop */
    bool stop_pending;    /* HX_MALFORMED_ERROR: fail once cur_limit is reached */
    bool file_done;       /* the last block is consumed */
    hx_status failed;     /* sticky until a rewind */
    char fail_msg[512];
    hx__rows batch, shuffle;
    uint64_t rng;
    hx_batch out;
    hx_reader_stats stats;
};

/* ---- the reading thread ---------------------------------------------------------- */

static slot *wait_slot(hx_reader *r, int64_t seq)
{
    slot *s = &r->slots[seq % r->n_slots];
    pthread_mutex_lock(&r->mu);
    while (!r->stop && s->state != SLOT_FREE) pthread_cond_wait(&r->cv_free, &r->mu);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stop ? NULL : s;
}

static void publish_raw(hx_reader *r, slot *s)
{
    pthread_mutex_lock(&r->mu);
    s->state = SLOT_RAW;
    pthread_cond_broadcast(&r->cv_raw);
    pthread_mutex_unlock(&r->mu);
}

static void *reading_main(void *arg)
{
    hx_reader *r = arg;
    const hx_reader_config *c = &r->schema.cfg;
    size_t carry_len = 0;
    bool discard = false; /* dropping the rest of a line (a header or an overlong line) */
    int64_t to_skip = c->skip_lines;
    for (int64_t seq = 0;; seq++) {
        slot *s = wait_slot(r, seq);
        if (!s) return NULL;
        s->seq = seq;
        s->skipped_lines = 0;
        s->overlong_after = s->last = false;
        s->io_errno = 0;
        memcpy(s->data, r->carry, carry_len);
        size_t len = carry_len;
        carry_len = 0;
        size_t got = fread(s->data + len, 1, c->block_bytes, r->file);
        len += got;
        s->bytes = (int64_t)got;
        bool eof = got < c->block_bytes;
        if (eof && ferror(r->file)) s->io_errno = errno ? errno : EIO;
        size_t start = 0;
        while (start < len) {
            if (!discard) {
                if (to_skip == 0) break;
                to_skip--;
                s->skipped_lines++;
                discard = true;
            }
            char *nl = memchr(s->data + start, '\n', len - start);
            if (!nl) {
                start = len;
                break;
            }
            start = (size_t)(nl - s->data) + 1;
            discard = false;
        }
        size_t end = len;
        if (!eof) {
            end = start;
            for (size_t i = len; i > start; i--)
                if (s->data[i - 1] == '\n') {
                    end = i;
                    break;
                }
            /* An unfinished line is certainly too long once it holds more than
             * max_line_bytes besides a '\r' that a '\n' may follow. */
            size_t rest = len - end;
            if (rest - (rest && s->data[len - 1] == '\r') > c->max_line_bytes) {
                s->overlong_after = true;
                discard = true;
            } else {
                memcpy(r->carry, s->data + end, rest);
                carry_len = rest;
            }
        }
        s->off = start;
        s->len = end - start;
        s->last = eof;
        publish_raw(r, s);
        if (eof) return NULL;
    }
}

/* ---- parser threads ---------------------------------------------------------------- */

static void *parser_main(void *arg)
{
    hx_reader *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        slot *s = NULL;
        while (!r->stop) {
            for (int i = 0; i < r->n_slots; i++)
                if (r->slots[i].state == SLOT_RAW && (!s || r->slots[i].seq < s->seq)) s = &r->slots[i];
            if (s) break;
            pthread_cond_wait(&r->cv_raw, &r->mu);
        }
        if (r->stop) break;
        s->state = SLOT_PARSING;
        pthread_mutex_unlock(&r->mu);
        s->parse_status = hx__parse_block(&r->schema, s->data + s->off, s->len, &s->parsed);
        size_t bytes = hx__rows_bytes(&s->parsed.rows) +
                       (size_t)s->parsed.cap_errors * sizeof(hx__line_error);
        pthread_mutex_lock(&r->mu);
        s->rows_bytes = bytes;
        s->state = SLOT_PARSED;
        pthread_cond_broadcast(&r->cv_parsed);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- starting and stopping ---------------------------------------------------------- */

static void stop_threads(hx_reader *r)
{
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv_free);
    pthread_cond_broadcast(&r->cv_raw);
    pthread_mutex_unlock(&r->mu);
    if (r->reader_running) pthread_join(r->reader_thread, NULL);
    for (int i = 0; i < r->n_running_parsers; i++) pthread_join(r->parser_threads[i], NULL);
    r->reader_running = false;
    r->n_running_parsers = 0;
}

/* Resets the file and every slot and starts the threads for a new epoch. */
static hx_status start_epoch(hx_reader *r)
{
    if (fseek(r->file, 0, SEEK_SET) != 0)
        return hx__error(HX_ERR_IO, "hx_reader: cannot seek to the start of %s: %s", r->path,
                         strerror(errno));
    clearerr(r->file);
    for (int i = 0; i < r->n_slots; i++) r->slots[i].state = SLOT_FREE;
    r->stop = false;
    r->next_seq = 0;
    r->cur = NULL;
    r->cur_pos = 0;
    r->stop_pending = false;
    r->file_done = false;
    r->failed = HX_OK;
    r->shuffle.n = 0;
    int64_t epoch = r->stats.epoch;
    size_t buf = r->stats.buffer_bytes;
    memset(&r->stats, 0, sizeof r->stats);
    r->stats.epoch = epoch;
    r->stats.buffer_bytes = buf;
    r->rng = hx__mix64(r->schema.cfg.shuffle_seed ^ hx__mix64((uint64_t)epoch + 1));
    if (pthread_create(&r->reader_thread, NULL, reading_main, r) != 0)
        return hx__error(HX_ERR_INTERNAL, "hx_reader: cannot start the reading thread");
    r->reader_running = true;
    for (int i = 0; i < r->schema.cfg.n_threads; i++) {
        if (pthread_create(&r->parser_threads[i], NULL, parser_main, r) != 0) {
            stop_threads(r);
            return hx__error(HX_ERR_INTERNAL, "hx_reader: cannot start parser thread %d", i);
        }
        r->n_running_parsers++;
    }
    return HX_OK;
}

void hx_reader_close(hx_reader *r)
{
    if (!r) return;
    stop_threads(r);
    if (r->slots)
        for (int i = 0; i < r->n_slots; i++) {
            free(r->slots[i].data);
            hx__parsed_free(&r->slots[i].parsed);
        }
    free(r->slots);
    free(r->parser_threads);
    free(r->carry);
    hx__rows_free(&r->batch);
    hx__rows_free(&r->shuffle);
    if (r->file) fclose(r->file);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_free);
    pthread_cond_destroy(&r->cv_raw);
    pthread_cond_destroy(&r->cv_parsed);
    hx__schema_free(&r->schema);
    free(r->path);
    free(r);
}

hx_status hx_reader_open(const char *path, const hx_reader_config *cfg, hx_reader **out)
{
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_reader_open: out is NULL");
    *out = NULL;
    if (!path) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_reader_open: path is NULL");
    hx_reader *r = calloc(1, sizeof *r);
    if (!r) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_reader_open: out of host memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv_free, NULL);
    pthread_cond_init(&r->cv_raw, NULL);
    pthread_cond_init(&r->cv_parsed, NULL);
    hx_status st = hx__schema_init(&r->schema, cfg);
    if (st) {
        free(r);
        return st;
    }
    const hx_reader_config *c = &r->schema.cfg;
    r->path = strdup(path);
    r->file = fopen(path, "rb");
    if (!r->file) {
        st = hx__error(HX_ERR_IO, "hx_reader_open: cannot open %s: %s", path, strerror(errno));
        hx_reader_close(r);
        return st;
    }
    r->n_slots = c->max_blocks;
    r->slot_capacity = c->max_line_bytes + 1 + c->block_bytes;
    r->slots = calloc((size_t)r->n_slots, sizeof *r->slots);
    r->parser_threads = calloc((size_t)c->n_threads, sizeof *r->parser_threads);
    r->carry = malloc(c->max_line_bytes + 1);
    bool oom = !r->path || !r->slots || !r->parser_threads || !r->carry;
    for (int i = 0; !oom && i < r->n_slots; i++) {
        r->slots[i].data = malloc(r->slot_capacity);
        hx__rows_init(&r->slots[i].parsed.rows, r->schema.n_numeric, r->schema.n_categorical);
        oom |= !r->slots[i].data;
    }
    hx__rows_init(&r->batch, r->schema.n_numeric, r->schema.n_categorical);
    hx__rows_init(&r->shuffle, r->schema.n_numeric, r->schema.n_categorical);
    if (oom || hx__rows_reserve(&r->batch, c->batch_size) ||
        (c->shuffle_rows && hx__rows_reserve(&r->shuffle, c->shuffle_rows))) {
        hx_reader_close(r);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_reader_open: out of host memory for %d blocks of "
                         "%zu bytes, a batch of %lld rows and a shuffle buffer of %lld rows; lower "
                         "max_blocks, block_bytes, batch_size or shuffle_rows",
                         r->n_slots, r->slot_capacity, (long long)c->batch_size,
                         (long long)c->shuffle_rows);
    }
    st = start_epoch(r);
    if (st) {
        hx_reader_close(r);
        return st;
    }
    *out = r;
    return HX_OK;
}

hx_status hx_reader_rewind(hx_reader *r)
{
    if (!r) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_reader_rewind: reader is NULL");
    stop_threads(r);
    r->stats.epoch++;
    return start_epoch(r);
}

/* ---- the consumer ------------------------------------------------------------------------ */

static hx_status fail(hx_reader *r, hx_status st, const char *fmt, const char *detail)
{
    r->failed = st;
    snprintf(r->fail_msg, sizeof r->fail_msg, fmt, r->path, detail);
    return hx__error(st, "%s", r->fail_msg);
}

/* Counts a malformed line; under HX_MALFORMED_ERROR the reader delivers
 * the block's rows before it and then stops. */
static void malformed(hx_reader *r, const hx__line_error *e, int64_t line, int64_t rows_before)
{
    char msg[sizeof r->stats.first_malformed];
    hx__line_error_format(&r->schema, e, line, msg, sizeof msg);
    if (r->schema.cfg.on_malformed == HX_MALFORMED_ERROR) {
        r->stop_pending = true;
        r->cur_limit = rows_before;
        snprintf(r->fail_msg, sizeof r->fail_msg, "hx_reader_next: %s %s (the reader stops at malformed "
                 "rows: on_malformed = HX_MALFORMED_ERROR; HX_MALFORMED_SKIP skips and counts them)",
                 r->path, msg);
        return;
    }
    r->stats.malformed++;
    r->stats.malformed_by_reason[e->reason]++;
    if (!r->stats.first_malformed_line) {
        r->stats.first_malformed_line = line;
        snprintf(r->stats.first_malformed, sizeof r->stats.first_malformed, "%s", msg);
    }
}

/* Waits for the next block in file order and accounts for its lines. */
static hx_status open_block(hx_reader *r)
{
    slot *s = &r->slots[r->next_seq % r->n_slots];
    size_t held = 0;
    pthread_mutex_lock(&r->mu);
    while (s->state != SLOT_PARSED) pthread_cond_wait(&r->cv_parsed, &r->mu);
    for (int i = 0; i < r->n_slots; i++) held += r->slots[i].rows_bytes;
    pthread_mutex_unlock(&r->mu);
    held += (size_t)r->n_slots * r->slot_capacity + r->schema.cfg.max_line_bytes + 1 +
            hx__rows_bytes(&r->batch) + hx__rows_bytes(&r->shuffle);
    if (held > r->stats.buffer_bytes) r->stats.buffer_bytes = held;
    r->next_seq++;
    r->cur = s;
    r->cur_pos = 0;
    r->cur_limit = s->parsed.rows.n;
    if (s->io_errno) return fail(r, HX_ERR_IO, "hx_reader_next: reading %s failed: %s", strerror(s->io_errno));
    if (s->parse_status) return fail(r, s->parse_status, "hx_reader_next: parsing %s: %s",
                                     "out of host memory");
    r->stats.bytes += s->bytes;
    r->stats.lines += s->skipped_lines;
    int64_t base = r->stats.lines;
    for (int64_t i = 0; i < s->parsed.n_errors && !r->stop_pending; i++)
        malformed(r, &s->parsed.errors[i], base + s->parsed.errors[i].line, s->parsed.errors[i].rows_before);
    r->stats.lines += s->parsed.n_lines;
    if (s->overlong_after) {
        hx__line_error e = {0, 0, HX_MALFORMED_TOO_LONG, -1, 0, ""};
        r->stats.lines++;
        if (!r->stop_pending) malformed(r, &e, r->stats.lines, s->parsed.rows.n);
    }
    return HX_OK;
}

static void release_block(hx_reader *r)
{
    bool last = r->cur->last;
    pthread_mutex_lock(&r->mu);
    r->cur->state = SLOT_FREE;
    pthread_cond_broadcast(&r->cv_free);
    pthread_mutex_unlock(&r->mu);
    r->cur = NULL;
    if (last) r->file_done = true;
}

/* Points *src and *idx at the next row in file order; *src = NULL at the end. */
static hx_status next_row(hx_reader *r, const hx__rows **src, int64_t *idx)
{
    *src = NULL;
    for (;;) {
        if (r->cur && r->cur_pos < r->cur_limit) {
            *src = &r->cur->parsed.rows;
            *idx = r->cur_pos++;
            return HX_OK;
        }
        if (r->stop_pending) {
            r->failed = HX_ERR_CORRUPT;
            return hx__error(r->failed, "%s", r->fail_msg);
        }
        if (r->cur) release_block(r);
        if (r->file_done) return HX_OK;
        hx_status st = open_block(r);
        if (st) return st;
    }
}

static hx_status fill_in_order(hx_reader *r, int64_t want)
{
    hx__rows *b = &r->batch;
    while (b->n < want) {
        const hx__rows *src;
        int64_t idx;
        hx_status st = next_row(r, &src, &idx);
        if (st || !src) return st;
        /* Take the rest of the block's rows at once. */
        int64_t take = r->cur_limit - idx;
        if (take > want - b->n) take = want - b->n;
        hx__rows_copy(b, b->n, src, idx, take);
        r->cur_pos = idx + take;
        b->n += take;
    }
    return HX_OK;
}

/* A shuffle buffer of S rows: once full, each incoming row replaces a
 * uniformly chosen buffered row, which is emitted; at the end the buffer
 * drains in random order. Every row is emitted once. */
static hx_status fill_shuffled(hx_reader *r, int64_t want)
{
    hx__rows *b = &r->batch, *sb = &r->shuffle;
    const int64_t cap = r->schema.cfg.shuffle_rows;
    while (b->n < want) {
        const hx__rows *src = NULL;
        int64_t idx = 0;
        if (!r->file_done || r->cur) {
            hx_status st = next_row(r, &src, &idx);
            if (st) return st;
        }
        if (src && sb->n < cap) {
            hx__rows_copy(sb, sb->n++, src, idx, 1);
            continue;
        }
        if (sb->n == 0) return HX_OK;
        r->rng += 0x9E3779B97F4A7C15ull;
        int64_t j = (int64_t)(hx__mix64(r->rng) % (uint64_t)sb->n);
        hx__rows_copy(b, b->n++, sb, j, 1);
        if (src) hx__rows_copy(sb, j, src, idx, 1);
        else hx__rows_copy(sb, j, sb, --sb->n, 1);
    }
    return HX_OK;
}

hx_status hx_reader_next(hx_reader *r, const hx_batch **out)
{
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_reader_next: out is NULL");
    *out = NULL;
    if (!r) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_reader_next: reader is NULL");
    if (r->failed) return hx__error(r->failed, "%s", r->fail_msg);
    r->batch.n = 0;
    hx_status st = r->schema.cfg.shuffle_rows ? fill_shuffled(r, r->schema.cfg.batch_size)
                                              : fill_in_order(r, r->schema.cfg.batch_size);
    /* Rows before a malformed row that stops the reader are delivered first. */
    if (st && !(st == HX_ERR_CORRUPT && r->batch.n > 0)) return st;
    r->stats.rows += r->batch.n;
    if (r->batch.n == 0) return HX_OK;
    r->out = hx__rows_batch(&r->batch);
    *out = &r->out;
    return HX_OK;
}

hx_status hx_reader_stats_get(const hx_reader *r, hx_reader_stats *out)
{
    if (!r || !out)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_reader_stats_get: %s is NULL", r ? "out" : "reader");
    *out = r->stats;
    return HX_OK;
}
