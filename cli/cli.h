/* What every `hetex` command shares (tools/ and examples/ include this, and
 * the public header, nothing else): strict flags, output paths checked
 * before any work, and progress output. Messages start with the command's
 * name ("hetex widedeep: ...") and speak of its flags, never of library
 * settings. Nothing here is thread-safe: commands call it from their main
 * thread. */
#ifndef HX_CLI_H
#define HX_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hetex.h"

/* ---- flags ----------------------------------------------------------------------- */

typedef enum cli_kind {
    CLI_SWITCH, /* bool: no value; present sets it true */
    CLI_INT,    /* int: a whole decimal number within [lo, hi] */
    CLI_INT64,  /* int64_t: the same, up to 2^53 */
    CLI_U64,    /* uint64_t: any whole number from 0 to 2^64 - 1 (seeds) */
    CLI_DOUBLE, /* double: a finite decimal number within [lo, hi] (lo_open: (lo, hi]) */
    CLI_BYTES,  /* size_t: a byte count, an optional K, M or G (binary) suffix, in [lo, hi] */
    CLI_STRING, /* const char *: any non-empty text (argv's own, not copied) */
    CLI_CHOICE, /* int: the index of the value among choices ("auto|cuda|emu|none") */
    CLI_INTS,   /* int[count]: count whole numbers joined by commas, each in [lo, hi] */
} cli_kind;

typedef struct cli_flag {
    const char *name;    /* "--batch" */
    cli_kind kind;
    void *out;           /* written only when the flag is given and its value is good */
    double lo, hi;       /* allowed range, inclusive (numbers) */
    bool lo_open;        /* CLI_DOUBLE: lo itself is not allowed (a learning rate > 0) */
    const char *choices; /* CLI_CHOICE: the values, '|'-separated */
    int count;           /* CLI_INTS: how many numbers */
} cli_flag;

/* Table rows (designated, so that -Wextra sees every field set). */
#define CLI_FLAG_SWITCH(n, o) {.name = (n), .kind = CLI_SWITCH, .out = (o)}
#define CLI_FLAG_TEXT(n, o) {.name = (n), .kind = CLI_STRING, .out = (o)}
#define CLI_FLAG_U64(n, o) {.name = (n), .kind = CLI_U64, .out = (o)}
#define CLI_FLAG_NUM(n, k, o, l, h) {.name = (n), .kind = (k), .out = (o), .lo = (l), .hi = (h)}
#define CLI_FLAG_ABOVE(n, o, l, h) \
    {.name = (n), .kind = CLI_DOUBLE, .out = (o), .lo = (l), .hi = (h), .lo_open = true}
#define CLI_FLAG_CHOICE(n, o, c) {.name = (n), .kind = CLI_CHOICE, .out = (o), .choices = (c)}
#define CLI_FLAG_INTS(n, o, c, l, h) \
    {.name = (n), .kind = CLI_INTS, .out = (o), .lo = (l), .hi = (h), .count = (c)}
#define CLI_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct cli_command {
    const char *name;          /* "widedeep": messages say "hetex widedeep: " */
    const char *usage;         /* printed for --help (and -h) */
    const cli_flag *flags;
    int n_flags;
    const char **positional;   /* the one positional argument, or NULL: none allowed */
    const char *positional_name; /* how usage names it ("TRACE") */
} cli_command;

/* --accelerator's choices, in hx_accelerator's order: the index is the value. */
#define CLI_ACCELERATORS "auto|cuda|emu|none"

enum { CLI_OK = 0, CLI_EXIT_USAGE = 2, CLI_HELP = -1 };

/* Parses argv[1..argc-1] ("--flag value" or "--flag=value") into the flags'
 * outputs. CLI_OK; CLI_HELP after printing the usage to stdout (the command
 * then exits 0); or CLI_EXIT_USAGE after printing to stderr one line that
 * names the flag, the value and what is allowed (an unknown flag, a missing
 * value, a number that does not parse whole or falls outside its range, a
 * value not among the choices, a missing or second positional argument). */
int cli_parse(const cli_command *c, int argc, char **argv);

/* The allowed values of f in words ("a whole number from 1 to 1048576"). */
void cli_flag_range(const cli_flag *f, char *buf, size_t n);

/* Prints "hetex CMD: FLAG VALUE is not allowed: REASON" style errors for
 * checks the table cannot express (one flag against another); returns
 * CLI_EXIT_USAGE. */
int cli_flag_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "hetex CMD: WHAT: MESSAGE" (WHAT may be NULL) with the library's
 * names of settings (HX_ACCELERATOR_EMU, trace_path, max_device_memory,
 * ...) replaced by the CLI flags that set them. */
void cli_error(const char *cmd, const char *what, const char *library_message);

/* "hetex CMD: TEXT" to out, with the library's words replaced as above. */
void cli_say(FILE *out, const char *cmd, const char *library_text);

/* The first lines' "hetex CMD: accelerator: ..." of session s: which
 * accelerator (a GPU's name and memory, or emu on the host's cores), why
 * (asked for, found, or why not CUDA), and the device memory cap. */
void cli_print_accelerator(FILE *out, const char *cmd, const hx_session *s);
/* "hetex CMD: placement auto: ..." lines of session s (nothing when no node
 * was AUTO): what the planner chose and predicted, and once training ran
 * the placement report (hx_session_placement_text: the 10 units farthest
 * from their prediction, and the step). */
void cli_print_placement(FILE *out, const char *cmd, const hx_session *s);

/* ---- bundled data ---------------------------------------------------------------------- */

/* The path of bundled data rel ("data/adult"): rel itself where it exists
 * (the current folder is a source tree), else beside the binary's tree
 * (BINDIR/../share/hetex/rel after an install, BINDIR/../rel for build/),
 * written into buf; rel when none exists (the command's error then names
 * it and its --data flag). */
const char *cli_data_path(const char *rel, char *buf, size_t n);

/* ---- host memory ---------------------------------------------------------------------- */

/* Bytes the machine has available now (/proc/meminfo's MemAvailable; 0
 * when unknown). */
size_t cli_host_available(void);
/* true when the host memory that session s's planned step (ms, from
 * hx_session_memory_stats) will still allocate fits what is available;
 * else false after printing the estimate, the bytes available and hint
 * (the flags to lower). */
bool cli_check_host_memory(const char *cmd, const hx_memory_stats *ms, const hx_session *s,
                           const char *hint);

/* ---- output paths ------------------------------------------------------------------- */

typedef enum cli_path_kind { CLI_PATH_FILE, CLI_PATH_DIR } cli_path_kind;

/* Checks, before any work, that the path given to flag can be written: its
 * folder exists and a file can be created there (tried, then removed), and
 * the path is not a folder (CLI_PATH_FILE) or not a file (CLI_PATH_DIR).
 * Returns true, or false after printing why, naming the flag and the path. */
bool cli_check_output(const char *cmd, const char *flag, const char *path, cli_path_kind kind);

/* ---- checkpoint folders --------------------------------------------------------------- */

/* A checkpoint is a folder of files committed as a set (cli/checkpoint.c):
 * a kill at any instant leaves the previous checkpoint or the new one, and
 * the next save removes what an interrupted one left beside it. A folder
 * that exists is replaced only when it is a checkpoint (it holds the file
 * CLI_CKPT_MARK) or empty. */
#define CLI_CKPT_MARK "hetex-checkpoint"
typedef struct cli_ckpt {
    const char *cmd;
    char dir[2048], stage[2100], file[2400];
    int fd; /* the stage's lock */
} cli_ckpt;

/* Starts a save into the checkpoint folder dir (given with flag): removes
 * the stages of dead savers and makes this save's. false after printing
 * why (another process is saving to dir now; dir is not a checkpoint; it
 * cannot be created). */
bool cli_ckpt_begin(const char *cmd, const char *flag, const char *dir, cli_ckpt *c);
/* The path to write the set's file `name` to (valid until the next call). */
const char *cli_ckpt_file(cli_ckpt *c, const char *name);
/* Commits the set: syncs it, swaps it in, removes the old one. false after
 * printing why (the previous checkpoint is then untouched). Ends c. */
bool cli_ckpt_commit(cli_ckpt *c);
/* Drops the save (its stage is removed). Ends c. */
void cli_ckpt_abort(cli_ckpt *c);
/* true when dir exists and is not a checkpoint folder nor empty: a save
 * there would replace someone's files. */
bool cli_ckpt_foreign(const char *dir);
/* The kill-during-save tests' fault hook: with $HX_CLI_CRASH_AT=K the
 * process kills itself (SIGKILL) at the K-th step of its saves (here: a
 * file written, synced, the swap, the old one removed; a command's own
 * saves may add steps), counted from 1. */
void cli_crash_point(void);

/* The `state` file of a command's checkpoint folder (cli/state.c): a first
 * line naming the command, body (where the run is, then the flags that
 * shape its numbers, one "--flag value" a line), then an XXH3 of both.
 * write: false with errno set. read: body (n bytes) gets the checked
 * body; false after printing why, naming --resume dir and path. flags:
 * the n lines at *at (advanced past them) equal want's; false after
 * printing the first that differs, naming the flag. */
enum { CLI_STATE_MAX = 8192, CLI_STATE_FLAG = 160 };
bool cli_state_write(const char *path, const char *cmd, const char *body);
bool cli_state_read(const char *cmd, const char *dir, const char *path, char *body, size_t n);
bool cli_state_flags(const char *cmd, const char *dir, const char **at,
                     char (*want)[CLI_STATE_FLAG], int n);

/* ---- progress ----------------------------------------------------------------------- */

/* Progress of one phase of long work (an epoch, a run of steps): on a
 * terminal a bar redrawn in place with percent, elapsed time, ETA, the
 * throughput and the loss; elsewhere (a log, a pipe) one line per
 * `interval` seconds; nothing when quiet. */
typedef struct cli_progress {
    FILE *out;
    bool tty, quiet;
    double interval;     /* seconds between lines when not a terminal */
    const char *label;   /* "epoch 3", "steps" */
    const char *unit;    /* "examples", "tokens" */
    double total;        /* units in the phase (0: unknown: no percent or ETA) */
    double t0, last;     /* start, last print */
    bool drawn;          /* a bar is on the terminal's current line */
} cli_progress;

/* Starts a phase: out is where progress goes (stdout), interval the seconds
 * between lines off a terminal (> 0). */
void cli_progress_start(cli_progress *p, FILE *out, bool quiet, double interval,
                        const char *label, const char *unit, double total);
/* Reports `done` units so far and the running loss (NaN: none); prints
 * when it is time (a terminal: at most 10 times a second). */
void cli_progress_update(cli_progress *p, double done, double loss);
/* Ends the phase: clears the bar from the terminal (the caller prints its
 * own summary line next). */
void cli_progress_end(cli_progress *p);
/* Seconds on a monotonic clock. */
double cli_now(void);
/* "1h02m", "3m05s", "12.3s" */
void cli_duration(double seconds, char *buf, size_t n);

/* ---- metrics: JSON lines --------------------------------------------------------------- */

/* --metrics PATH: one JSON object a line, {"event":"step","time_s":1.25,...},
 * flushed as written, for plots and scripts (`hetex plot` draws them).
 * Numbers round-trip (%.17g); a NaN or infinity is null. --tensorboard
 * DIR: the same numbers as TensorBoard scalars tagged "EVENT/KEY" at the
 * line's "step", in an event file of the run's own in DIR. Every call is a
 * no-op when neither is open, so commands call them unconditionally. */
enum { CLI_METRICS_MAX_NUMBERS = 32 };
typedef struct cli_metrics {
    FILE *f, *tb;
    const char *cmd, *path;
    char tb_path[4400];
    char line[16384];
    size_t len;
    char event[32];
    char keys[CLI_METRICS_MAX_NUMBERS][80]; /* this line's scalars: "event/key" */
    double values[CLI_METRICS_MAX_NUMBERS];
    int n_values;
    int64_t step;
    double t0;
    bool failed; /* a write failed: said once, every later call is a no-op */
} cli_metrics;

/* Opens path (NULL: no JSON lines) for writing, or appending for a resumed
 * run, and a new event file in tensorboard_dir (NULL: none; the folder is
 * made when its parent exists). false after printing why, naming the flag
 * and path. */
bool cli_metrics_open(cli_metrics *m, const char *cmd, const char *path,
                      const char *tensorboard_dir, bool append);
/* Starts a line: {"event":EVENT,"time_s":seconds since open. */
void cli_metrics_begin(cli_metrics *m, const char *event);
void cli_metrics_int(cli_metrics *m, const char *key, int64_t value);
void cli_metrics_num(cli_metrics *m, const char *key, double value);
void cli_metrics_text(cli_metrics *m, const char *key, const char *value, size_t len);
/* Ends and writes the line. false after printing why (a full disk), naming
 * --metrics and the file; the command then stops with exit 1. */
bool cli_metrics_end(cli_metrics *m);
/* Closes the file; false when a write or the close failed (said). */
bool cli_metrics_close(cli_metrics *m);

/* cli/tensorboard.c, TensorBoard's event files (records framed with
 * masked CRC32C, Events encoded by protobuf-c): a new file in dir, its
 * first Event the file version; NULL after printing why (or that this
 * build has no protobuf-c). path gets the file's name. */
FILE *cli_tb_open(const char *cmd, const char *dir, char *path, size_t n);
/* One Event at step with n scalars (tags[i], values[i]); false when the
 * write failed (errno says why). */
bool cli_tb_write(FILE *f, int64_t step, char (*tags)[80], const double *values, int n);
/* CRC-32C (Castagnoli) of n bytes: the records' checksums. */
uint32_t cli_crc32c(const void *p, size_t n);

/* ---- a partial last batch (--partial-batch) ------------------------------------------ */

/* The last, short batch of an epoch trains in a session of its own: over
 * the command's model built again at the short batch's size (the same
 * parameters and optimizer state by name and shape; embedding tables
 * shared), created with the main session's config. Each step takes the
 * main session's whole state (parameters, optimizer state, batch-norm
 * statistics, the step count, the loss scale) through a checkpoint file in
 * a folder of its own, trains, and gives the state back the same way, so
 * the run goes on as if one session had taken the short batch: its loss
 * the mean over its rows, every row of the epoch trained once. */
typedef struct cli_partial {
    hx_session *s; /* the short batch's session, or NULL (no partial batch) */
    char dir[512], file[600];
} cli_partial;
/* Creates the session over g (which it then uses; the caller frees g after
 * cli_partial_close) with config sc. false after printing why. */
bool cli_partial_open(cli_partial *p, const char *cmd, hx_graph *g, const hx_session_config *sc);
/* One training run of the short batch: main's state in, the run (with
 * main's learning-rate scale lr_scale), the state back into main. On
 * failure (hx_last_error says why) main is as it was. */
hx_status cli_partial_step(cli_partial *p, hx_session *main, double lr_scale,
                           const hx_feed *feeds, int n_feeds, const hx_fetch *fetches,
                           int n_fetches);
/* Frees the session and removes its folder; a no-op for an unopened p. */
void cli_partial_close(cli_partial *p);

/* ---- interrupts ---------------------------------------------------------------------- */

/* Ctrl-C (SIGINT) and SIGTERM during training: cli_interrupt_arm makes the
 * first one set a flag the training loop reads between steps (it then saves
 * what it was asked to and exits with CLI_EXIT_INTERRUPTED); a second one
 * kills as usual. $HX_CLI_INTERRUPT_AT=K raises SIGINT at the K-th
 * cli_interrupt_tick (the tests' way to interrupt at a known step). */
enum { CLI_EXIT_INTERRUPTED = 130 };
void cli_interrupt_arm(void);
/* The signal received (SIGINT, SIGTERM), or 0. */
int cli_interrupted(void);
/* One unit of work done (a step): the fault hook above. */
void cli_interrupt_tick(void);

#endif
