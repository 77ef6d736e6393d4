/* hetex widedeep: trains wide & deep on Adult, evaluates on its test file
 * after every epoch, and prints a summary. */
#include "wd.h"
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

wd_options wd_options_default(void)
{
    return (wd_options){.data = "data/adult", .epochs = 10, .batch = 256, .threads = 0,
                        .reader_threads = 2, .seed = 1, .accelerator = HX_ACCELERATOR_AUTO,
                        .placement = HX_TARGET_DEVICE,
                        .deep_dim = 8, .hidden = {100, 50}, .lr_dense = 1e-3,
                        .lr_embedding = 1e-2,
                        .embedding_optimizer = HX_EMBEDDING_OPTIMIZER_ADAGRAD, .lr_wide = 0.05,
                        .l1_wide = 0.001, .l2_wide = 0.001, .cross_buckets = 1000,
                        .deep_cache_bytes = (size_t)64 << 20,
                        .progress_interval = 10, .criteo_zipf = -1};
}

static const char usage[] =
    "usage: hetex widedeep [options]\n"
    "  --data DIR              folder with adult.data and adult.test (data/adult: the\n"
    "                          source tree's, else the installed PREFIX/share/hetex/data/adult)\n"
    "  --epochs N --batch N    (10, 256)\n"
    "  --partial-batch         train the short last batch of each epoch too (without it\n"
    "                          its rows are left out, and fewer rows than --batch is an error)\n"
    "  --accelerator auto|cuda|emu|none   where the MLP runs (auto)\n"
    "  --max-device-memory N[K|M|G]   accelerator memory cap\n"
    "  --placement expert|auto|host   the MLP on the device; every op placed by the\n"
    "                          measured cost model; or all on the host (expert)\n"
    "  --threads N             session threads, 0: all cores (0)\n"
    "  --reader-threads N      parser threads (2)\n"
    "  --seed N                initialisation and shuffling (1)\n"
    "  --deep-dim N --hidden N,N   embedding width, MLP widths (8; 100,50)\n"
    "  --lr-dense X            Adam on the MLP (1e-3)\n"
    "  --embedding-optimizer adagrad|lazy-adam --lr-embedding X   deep tables (adagrad, 1e-2)\n"
    "  --lr-wide X --l1 X --l2 X   FTRL on the wide part (0.05, 0.001, 0.001)\n"
    "  --cross-buckets N       hash buckets per crossed column (1000)\n"
    "  --deep-table-on-disk PATH   keep the deep table in a row store file behind a host\n"
    "                          cache (for tables larger than memory); prints its cache\n"
    "                          and disk statistics per epoch\n"
    "  --deep-cache-bytes N    that cache's size, K/M/G suffixes (64M)\n"
    "  --device-cache N        keep the deep table's N hottest rows and their optimizer\n"
    "                          state in a device cache (the results do not change); prints\n"
    "                          its hit rate and the rows it moved per epoch\n"
    "  --trace PATH            Chrome trace of the run (chrome://tracing, Perfetto)\n"
    "  --save DIR              checkpoint folder, replaced as a whole after every epoch\n"
    "  --resume DIR            continue from a checkpoint folder (the same --seed, --batch)\n"
    "                          (with --shards or --servers the tables are saved shard by\n"
    "                          shard: such a checkpoint resumes at any number of ranks or\n"
    "                          servers, in either mode, or in one process)\n"
    "  --curve PATH            per-epoch metrics as CSV (and PATH.png where gnuplot exists)\n"
    "  --metrics PATH          JSON lines: every step's loss, every epoch's test metrics\n"
    "                          (appended to on --resume; 'hetex plot PATH' draws them)\n"
    "  --tensorboard DIR       the same numbers as TensorBoard scalars (a new event file in\n"
    "                          DIR, made if missing: tensorboard --logdir DIR)\n"
    "  --shards N              under mpirun -np N: both tables sharded row-wise over the\n"
    "                          ranks, the MLP data parallel; --batch is the global batch\n"
    "  --servers S             under mpirun -np N: server mode, the last S ranks hold both\n"
    "                          tables and apply their updates, the N - S others train\n"
    "                          (pull rows before each step, push gradients after; the MLP\n"
    "                          data parallel among them); --batch is the global batch\n"
    "  --staleness K           --servers: a worker may run K steps ahead of the applied\n"
    "                          pushes (0: synchronous, the default)\n"
    "  --table-memory-per-rank N[K|M|G]   with --shards or --servers: a cap on one rank's\n"
    "                          table memory (rows and optimizer state as allocated); a rank\n"
    "                          whose shards exceed it refuses at creation, naming the table\n"
    "                          (--shards: the deep table's shard against N, the wide one's\n"
    "                          against what it left; --servers: each server's tables together)\n"
    "  --criteo DIR            Criteo-schema input in place of Adult: DIR holds train.tsv and\n"
    "                          test.tsv in Criteo's TSV format (label, 13 integers, 26\n"
    "                          hexadecimal ids); the integers log1p-standardised, each\n"
    "                          categorical column hashed into --hash-buckets rows of the deep\n"
    "                          and the wide table\n"
    "  --criteo-generate N     Criteo-schema input generated instead (hx_generator: --seed's\n"
    "                          planted model): N training rows and N/4 (at least --batch) test\n"
    "                          rows, written to a temporary folder removed at the end\n"
    "  --criteo-vocab N --criteo-zipf X   the generator's ids per column and their Zipf\n"
    "                          exponent, 0: uniform (10000, 1.05)\n"
    "  --hash-buckets N        Criteo: rows per categorical column in each table (10000)\n"
    "  --quiet                 no progress output\n"
    "  --progress-interval S   seconds between progress lines when not on a terminal (10)\n";

/* The flags, their ranges and where each goes. */
static int parse(int argc, char **argv, wd_options *o)
{
    int accel = (int)o->accelerator, emb = o->embedding_optimizer == HX_EMBEDDING_OPTIMIZER_LAZY_ADAM;
    static const hx_target places[] = {HX_TARGET_DEVICE, HX_TARGET_AUTO, HX_TARGET_CPU};
    int place = o->placement == HX_TARGET_AUTO ? 1 : o->placement == HX_TARGET_CPU ? 2 : 0;
    const cli_flag flags[] = {
        CLI_FLAG_TEXT("--data", &o->data),
        CLI_FLAG_NUM("--epochs", CLI_INT, &o->epochs, 1, 100000),
        CLI_FLAG_NUM("--batch", CLI_INT64, &o->batch, 1, 1 << 20),
        CLI_FLAG_NUM("--threads", CLI_INT, &o->threads, 0, 1024),
        CLI_FLAG_NUM("--reader-threads", CLI_INT, &o->reader_threads, 1, 64),
        CLI_FLAG_U64("--seed", &o->seed),
        CLI_FLAG_NUM("--deep-dim", CLI_INT, &o->deep_dim, 1, 4096),
        CLI_FLAG_INTS("--hidden", o->hidden, 2, 1, 65536),
        CLI_FLAG_ABOVE("--lr-dense", &o->lr_dense, 0, 10),
        CLI_FLAG_ABOVE("--lr-embedding", &o->lr_embedding, 0, 10),
        CLI_FLAG_ABOVE("--lr-wide", &o->lr_wide, 0, 10),
        CLI_FLAG_NUM("--l1", CLI_DOUBLE, &o->l1_wide, 0, 1e6),
        CLI_FLAG_NUM("--l2", CLI_DOUBLE, &o->l2_wide, 0, 1e6),
        CLI_FLAG_NUM("--cross-buckets", CLI_INT64, &o->cross_buckets, 1, 1 << 26),
        CLI_FLAG_TEXT("--trace", &o->trace),
        CLI_FLAG_TEXT("--save", &o->save),
        CLI_FLAG_TEXT("--resume", &o->resume),
        CLI_FLAG_TEXT("--curve", &o->curve),
        CLI_FLAG_TEXT("--metrics", &o->metrics),
        CLI_FLAG_TEXT("--tensorboard", &o->tensorboard),
        CLI_FLAG_TEXT("--deep-table-on-disk", &o->deep_on_disk),
        CLI_FLAG_NUM("--deep-cache-bytes", CLI_BYTES, &o->deep_cache_bytes, 4096, 1ull << 40),
        CLI_FLAG_NUM("--device-cache", CLI_INT64, &o->device_cache_rows, 1, (int64_t)1 << 40),
        CLI_FLAG_CHOICE("--embedding-optimizer", &emb, "adagrad|lazy-adam"),
        CLI_FLAG_CHOICE("--accelerator", &accel, CLI_ACCELERATORS),
        CLI_FLAG_NUM("--max-device-memory", CLI_BYTES, &o->max_device_memory, 1 << 20, 0x1p44),
        CLI_FLAG_CHOICE("--placement", &place, "expert|auto|host"),
        CLI_FLAG_SWITCH("--quiet", &o->quiet),
        CLI_FLAG_SWITCH("--partial-batch", &o->partial_batch),
        CLI_FLAG_NUM("--shards", CLI_INT, &o->shards, 1, 4096),
        CLI_FLAG_NUM("--servers", CLI_INT, &o->servers, 1, 4095),
        CLI_FLAG_NUM("--staleness", CLI_INT, &o->staleness, 0, 1000),
        CLI_FLAG_ABOVE("--progress-interval", &o->progress_interval, 0, 3600),
        CLI_FLAG_NUM("--table-memory-per-rank", CLI_BYTES, &o->table_bytes, 1, 1ull << 50),
        CLI_FLAG_TEXT("--criteo", &o->criteo),
        CLI_FLAG_NUM("--criteo-generate", CLI_INT64, &o->criteo_generate, 1, (int64_t)1 << 32),
        CLI_FLAG_NUM("--criteo-vocab", CLI_INT64, &o->criteo_vocab, 1, (int64_t)1 << 32),
        CLI_FLAG_NUM("--criteo-zipf", CLI_DOUBLE, &o->criteo_zipf, 0, 100),
        CLI_FLAG_NUM("--hash-buckets", CLI_INT64, &o->hash_buckets, 1, (int64_t)1 << 32),
    };
    const cli_command c = {.name = "widedeep", .usage = usage, .flags = flags,
                           .n_flags = CLI_COUNT(flags)};
    int rc = cli_parse(&c, argc, argv);
    if (rc) return rc;
    o->accelerator = (hx_accelerator)accel;
    o->placement = places[place];
    static char data[4096];
    bool data_given = strcmp(o->data, wd_options_default().data) != 0;
    if (!data_given) o->data = cli_data_path(o->data, data, sizeof data);
    o->embedding_optimizer = emb ? HX_EMBEDDING_OPTIMIZER_LAZY_ADAM : HX_EMBEDDING_OPTIMIZER_ADAGRAD;
    if (o->partial_batch && (o->shards || o->servers))
        return cli_flag_error("widedeep", "--partial-batch with --shards or --servers is not built: a "
                              "short batch does not split evenly over the ranks; leave one out");
    if (o->shards && o->servers)
        return cli_flag_error("widedeep", "--shards (collective mode) and --servers (server mode) are "
                              "two ways to spread the tables: give one");
    bool criteo = o->criteo || o->criteo_generate;
    if (o->criteo && o->criteo_generate)
        return cli_flag_error("widedeep", "--criteo DIR reads Criteo files, --criteo-generate N makes them: "
                              "give one");
    if (criteo && o->deep_on_disk)
        return cli_flag_error("widedeep", "--deep-table-on-disk is for Adult's deep table; leave it out "
                              "with --criteo or --criteo-generate");
    /* 0 and -1: not given */
    if (!criteo && (o->hash_buckets || o->criteo_vocab || o->criteo_zipf >= 0))
        return cli_flag_error("widedeep", "--hash-buckets, --criteo-vocab and --criteo-zipf are for Criteo "
                              "input: give --criteo DIR or --criteo-generate N too");
    if (o->criteo && (o->criteo_vocab || o->criteo_zipf >= 0))
        return cli_flag_error("widedeep", "--criteo-vocab and --criteo-zipf shape generated data: give "
                              "--criteo-generate N, or leave them out with --criteo DIR");
    if (criteo && data_given)
        return cli_flag_error("widedeep", "--data names Adult's folder; Criteo input comes from --criteo DIR "
                              "or --criteo-generate N: give one");
    if (!o->hash_buckets) o->hash_buckets = 10000;
    if (!o->criteo_vocab) o->criteo_vocab = 10000;
    if (o->criteo_zipf < 0) o->criteo_zipf = 1.05;
    if (o->table_bytes && !o->shards && !o->servers)
        return cli_flag_error("widedeep", "--table-memory-per-rank caps each rank's shards of the tables: give "
                              "--shards N or --servers S too (one rank: mpirun -np 1 hetex widedeep --shards 1)");
    if (o->staleness && !o->servers)
        return cli_flag_error("widedeep", "--staleness is for server mode: give --servers too");
    if (o->save && !cli_check_output("widedeep", "--save", o->save, CLI_PATH_DIR)) return 2;
    if (o->trace && !cli_check_output("widedeep", "--trace", o->trace, CLI_PATH_FILE)) return 2;
    if (o->curve && !cli_check_output("widedeep", "--curve", o->curve, CLI_PATH_FILE)) return 2;
    if (o->metrics && !cli_check_output("widedeep", "--metrics", o->metrics, CLI_PATH_FILE)) return 2;
    if (o->deep_on_disk &&
        !cli_check_output("widedeep", "--deep-table-on-disk", o->deep_on_disk, CLI_PATH_FILE))
        return 2;
    return CLI_OK;
}

/* Everything a run holds. */
typedef struct job {
    wd_options o;
    hx_reader_config train_cfg, test_cfg;
    hx_reader *train, *test;
    int64_t train_rows;  /* good rows of the training file (its check) */
    int64_t steps;       /* steps an epoch: the full batches, and the short one with
                            --partial-batch */
    wd_features wf;
    wd_model m;
    hx_session *s;
    wd_model pm;         /* --partial-batch: the model at the short batch, over m's tables */
    cli_partial part;    /* and its session */
    wd_feed fd, fd_next; /* this step's batch and the next one's (read ahead) */
    float *probs, *labels; /* the test set's, grown as read */
    int64_t scored_cap;
    int epochs_done;
    cli_metrics metrics;
    bool interrupted;    /* Ctrl-C stopped an epoch: no checkpoint of it */
    int rank;            /* --shards: this rank, whose slice of every batch it feeds */
    int64_t lb;          /* rows a step feeds this rank: --batch / --shards */
    char msg[1200];      /* the example's own errors (else hx_last_error()) */
    char gen_dir[1024];  /* --criteo-generate: its folder, removed at the end; "" */
    char source[1200];   /* what it trains on, in words */
} job;

/* The next batch of the training file into fd (the short last one with
 * --partial-batch only); *got false at its end. */
static hx_status next_batch(job *j, wd_feed *fd, bool *got)
{
    const hx_batch *b;
    hx_status st;
    *got = false;
    while (!(st = hx_reader_next(j->train, &b)) && b) {
        if (b->n < j->o.batch && !j->o.partial_batch) continue; /* the short last batch */
        *got = true;
        return wd_feed_fill(&j->wf, b, j->o.batch, fd);
    }
    return st;
}

/* One pass over the training file: its full batches, and with
 * --partial-batch the short last one in its own session. The epoch's loss
 * is the mean over its rows (each batch's mean weighted by its rows). The
 * next batch is read before the step runs, and its deep ids handed to the
 * deep table, which reads their rows from disk meanwhile when it lives
 * there. */
static hx_status train_epoch(job *j, int epoch, double *mean_loss, double *examples_per_s,
                             int64_t *steps)
{
    const wd_options *o = &j->o;
    hx_feed feeds[WD_N_FEEDS];
    char label[32];
    snprintf(label, sizeof label, "epoch %d", epoch);
    cli_progress bar;
    cli_progress_start(&bar, stdout, o->quiet, o->progress_interval, label, "examples",
                       (double)(j->train_rows / o->batch * o->batch));
    double sum = 0;
    int64_t rows = 0, batches = 0;
    wd_feed *cur = &j->fd, *next = &j->fd_next;
    bool got, got_next;
    hx_status st = next_batch(j, cur, &got);
    while (!st && got) {
        if ((st = next_batch(j, next, &got_next))) return st;
        if (got_next &&
            (st = hx_embedding_table_prefetch(j->m.deep, next->deep_ids, o->batch * j->wf.n_deep)))
            return st;
        wd_feeds_slice(&j->m, cur, j->lb, j->rank, &j->wf, feeds);
        float loss;
        hx_fetch fetch = {NULL, j->m.loss, &loss, sizeof loss};
        if (cur->n < o->batch) { /* --partial-batch: the short last batch */
            wd_feeds(&j->pm, cur, cur->n, &j->wf, feeds);
            fetch.tensor = j->pm.loss;
            st = cli_partial_step(&j->part, j->s, 1, feeds, WD_N_FEEDS, &fetch, 1);
        } else {
            st = hx_session_run(j->s, feeds, WD_N_FEEDS, &fetch, 1, HX_RUN_TRAIN);
        }
        if (st) return st;
        sum += (double)loss * (double)cur->n;
        rows += cur->n;
        batches++;
        cli_progress_update(&bar, (double)rows, sum / (double)rows);
        cli_metrics_begin(&j->metrics, "step");
        cli_metrics_int(&j->metrics, "epoch", epoch);
        cli_metrics_int(&j->metrics, "step", (epoch - 1) * j->steps + batches);
        cli_metrics_int(&j->metrics, "rows", cur->n);
        cli_metrics_num(&j->metrics, "loss", loss);
        if (!cli_metrics_end(&j->metrics)) return HX_ERR_IO;
        cli_interrupt_tick();
        if (cli_interrupted() && got_next) { /* after the last step: the epoch is done */
            j->interrupted = true;
            cli_progress_end(&bar);
            return HX_OK;
        }
        wd_feed *t = cur;
        cur = next;
        next = t;
        got = got_next;
    }
    cli_progress_end(&bar);
    if (st) return st;
    *mean_loss = sum / (double)rows; /* the input check saw at least one batch */
    *examples_per_s = (double)rows / (cli_now() - bar.t0);
    *steps = batches;
    return hx_reader_rewind(j->train);
}

/* The deep table's cache and disk traffic per step of an epoch (a table on disk). */
static void disk_stats(const hx_embedding_stats *a, const hx_embedding_stats *b, int64_t steps)
{
    double n = (double)(steps ? steps : 1);
    int64_t lookups = b->cache_lookups - a->cache_lookups;
    printf("          deep table on disk: cache %lld rows, hit rate %.1f%%; per step %.0f rows read, "
           "%.0f written (%.0f of them ahead of eviction), %.2f MB read, %.2f MB written, I/O wait "
           "%.2f ms\n",
           (long long)b->cache_rows,
           lookups ? 100.0 * (double)(b->cache_hits - a->cache_hits) / (double)lookups : 100.0,
           (double)(b->disk_rows_read - a->disk_rows_read) / n,
           (double)(b->disk_rows_written - a->disk_rows_written) / n,
           (double)(b->disk_rows_written_ahead - a->disk_rows_written_ahead) / n,
           (double)(b->disk_bytes_read - a->disk_bytes_read) / n / 1e6,
           (double)(b->disk_bytes_written - a->disk_bytes_written) / n / 1e6,
           (b->io_wait_s - a->io_wait_s) / n * 1e3);
}

/* The deep table's device cache per step of an epoch (--device-cache):
 * rows moved to and from the device with the cache (misses in,
 * write-backs out; where several ranks replicate the hot rows, several
 * workers or --shards, whose caches take in only the rows seen twice,
 * also each miss pulled and its update pushed) against the rows its
 * lookups asked for (each moved in, and its update out, without it). The
 * ranks' exchange of the cached rows' gradients is traffic between
 * ranks, not to the device: not counted here (bench_ps counts it). */
static void device_stats(const hx_embedding_stats *a, const hx_embedding_stats *b, int64_t steps, bool replicated)
{
    double n = (double)(steps ? steps : 1);
    int64_t lookups = b->device_cache_lookups - a->device_cache_lookups;
    double in = (double)(b->device_rows_in - a->device_rows_in), out = (double)(b->device_rows_out - a->device_rows_out);
    double pulled = replicated ? 2.0 * (double)(lookups - (b->device_cache_hits - a->device_cache_hits)) : 0.0;
    printf("          deep table device cache: %lld rows, hit rate %.1f%%; per step %.0f rows in (%.0f "
           "ahead), %.0f written back, %.3f MB moved; %.0f rows looked up (%.1f%% fewer rows moved "
           "than without the cache)\n",
           (long long)b->device_cache_rows,
           lookups ? 100.0 * (double)(b->device_cache_hits - a->device_cache_hits) / (double)lookups : 100.0,
           in / n, (double)(b->device_rows_prefetched - a->device_rows_prefetched) / n, out / n,
           (double)(b->device_bytes_in - a->device_bytes_in + b->device_bytes_out - a->device_bytes_out) / n / 1e6,
           (double)lookups / n, lookups ? 100.0 * (1.0 - (in + out + pulled) / (2.0 * (double)lookups)) : 0.0);
}

static hx_status evaluate(job *j, wd_metrics *out)
{
    const wd_options *o = &j->o;
    hx_feed feeds[WD_N_FEEDS];
    float *probs = malloc(sizeof *probs * o->batch);
    int64_t n = 0;
    const hx_batch *b;
    hx_status st = probs ? HX_OK : HX_ERR_OUT_OF_MEMORY;
    while (!st && !(st = hx_reader_next(j->test, &b)) && b) {
        if ((st = wd_feed_fill(&j->wf, b, o->batch, &j->fd))) break;
        for (int s = 0; s < o->batch / j->lb && !st; s++) { /* every slice, on every rank */
            wd_feeds_slice(&j->m, &j->fd, j->lb, s, &j->wf, feeds);
            hx_fetch fetch = {NULL, j->m.prob, probs + s * j->lb, sizeof *probs * j->lb};
            st = hx_session_run(j->s, feeds, WD_N_FEEDS, &fetch, 1, 0);
        }
        if (st) break;
        if (n + b->n > j->scored_cap) {
            int64_t cap = 2 * (n + b->n);
            float *p = realloc(j->probs, sizeof *p * cap), *y = p ? realloc(j->labels, sizeof *y * cap) : NULL;
            if (p) j->probs = p;
            if (!p || !y) {
                st = HX_ERR_OUT_OF_MEMORY;
                break;
            }
            j->labels = y;
            j->scored_cap = cap;
        }
        memcpy(j->probs + n, probs, sizeof *probs * b->n); /* padding rows left out */
        memcpy(j->labels + n, j->fd.labels, sizeof *j->labels * b->n);
        n += b->n;
    }
    free(probs);
    if (!st) st = wd_metrics_compute(j->probs, j->labels, n, out);
    hx_status rw = hx_reader_rewind(j->test);
    return st ? st : rw;
}

/* --resume: the checkpoint's session and tables (wd_ckpt.c), then the
 * reader's shuffle as it was after those epochs. */
static hx_status resume(job *j)
{
    int epochs = 0;
    hx_status st = wd_ckpt_resume(&j->o, j->s, &j->m, &epochs, j->msg, sizeof j->msg);
    for (int e = 0; e < epochs && !st; e++) st = hx_reader_rewind(j->train); /* its shuffle */
    j->epochs_done = epochs;
    return st;
}

static void plot(const char *csv)
{
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) return;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "gnuplot -e \"set terminal png size 800,500; set output '%s.png'; set datafile "
             "separator ','; set key autotitle columnhead; set xlabel 'epoch'; set y2tics; "
             "plot '%s' using 1:2 with linespoints, '' using 1:4 with linespoints axes x1y2\"",
             csv, csv);
    if (system(cmd) != 0) fprintf(stderr, "hetex widedeep: gnuplot failed; %s.png not written\n", csv);
}

static void summary(job *j, const wd_metrics *m, double seconds)
{
    hx_placement_stats ps;
    if (hx_session_placement_stats(j->s, &ps)) return;
    printf("final: accuracy %.4f  AUC %.4f  log loss %.4f on %lld test rows; %.1f s\n",
           m->accuracy, m->auc, m->log_loss, (long long)m->n, seconds);
    printf("placement: %d ops, %d on the device, %d on the host; %d subgraphs (%d on the "
           "device); %d copies per step (%d to the device, %d back), %zu bytes\n",
           ps.n_ops, ps.n_device_ops, ps.n_ops - ps.n_device_ops, ps.n_subgraphs,
           ps.n_device_subgraphs, ps.n_copies, ps.n_h2d, ps.n_d2h, ps.copy_bytes);
    cli_print_placement(stdout, "widedeep", j->s);
}

/* The tables' shapes (Criteo) and this rank's share of them against
 * --table-memory-per-rank (--shards); false after saying why not. */
static bool tables_said(const job *j)
{
    const wd_options *o = &j->o;
    hx_embedding_stats d, w;
    if (hx_embedding_table_stats(j->m.deep, &d) || hx_embedding_table_stats(j->m.wide, &w)) {
        cli_error("widedeep", "the tables' stats", hx_last_error());
        return false;
    }
    if (o->criteo || o->criteo_generate)
        printf("hetex widedeep: 13 numeric and %d categorical columns, each hashed into %lld rows: deep table "
               "%lld x %lld, wide table %lld x 1\n", j->wf.n_deep, (long long)o->hash_buckets,
               (long long)d.rows, (long long)d.dim, (long long)w.rows);
    if (o->shards && o->table_bytes)
        printf("hetex widedeep: rank 0's shards: %zu bytes (deep %zu, wide %zu: rows and optimizer state), "
               "under the cap of %zu bytes a rank (--table-memory-per-rank)\n", d.bytes + w.bytes, d.bytes,
               w.bytes, o->table_bytes);
    return true;
}

static hx_status setup(job *j)
{
    const wd_options *o = &j->o;
    char path[1200];
    bool criteo = o->criteo || o->criteo_generate;
    j->train_cfg = criteo ? hx_reader_config_criteo() : hx_reader_config_adult(false);
    j->train_cfg.batch_size = o->batch;
    j->train_cfg.n_threads = o->reader_threads;
    j->train_cfg.shuffle_rows = 1 << 15;
    j->train_cfg.shuffle_seed = o->seed;
    j->test_cfg = criteo ? hx_reader_config_criteo() : hx_reader_config_adult(true);
    j->test_cfg.batch_size = o->batch;
    j->test_cfg.n_threads = o->reader_threads;
    char test_path[1200];
    wd_input train, test;
    hx_status st = wd_shards_start(&j->o, &j->rank, j->msg, sizeof j->msg);
    j->lb = o->batch / wd_slices(o);
    if (!st && o->criteo_generate)
        st = wd_criteo_generate(o, j->gen_dir, sizeof j->gen_dir, j->msg, sizeof j->msg);
    const char *dir = o->criteo ? o->criteo : o->criteo_generate ? j->gen_dir : o->data;
    snprintf(path, sizeof path, "%s/%s", dir, criteo ? "train.tsv" : "adult.data");
    snprintf(test_path, sizeof test_path, "%s/%s", dir, criteo ? "test.tsv" : "adult.test");
    if (o->criteo_generate)
        snprintf(j->source, sizeof j->source, "Criteo schema generated (%lld training rows, ids of %lld per "
                 "column, Zipf %g)", (long long)o->criteo_generate, (long long)o->criteo_vocab, o->criteo_zipf);
    else
        snprintf(j->source, sizeof j->source, "%s%s", criteo ? "Criteo schema " : "", dir);
    if (!st && ((st = hx_reader_open(path, &j->train_cfg, &j->train)) ||
                (st = hx_reader_open(test_path, &j->test_cfg, &j->test))) && st == HX_ERR_IO)
        snprintf(j->msg, sizeof j->msg, "%s (give %s)", hx_last_error(),
                 criteo ? "--criteo DIR, a folder holding train.tsv and test.tsv in Criteo's TSV format"
                        : "--data DIR, a folder holding adult.data and adult.test");
    if (!st) st = wd_input_check(j->train, path, o->batch, o->partial_batch, false, &train, j->msg,
                                 sizeof j->msg);
    if (!st) st = wd_input_check(j->test, test_path, o->batch, false, true, &test, j->msg,
                                 sizeof j->msg);
    if (st) return st;
    j->train_rows = train.rows;
    int64_t short_rows = o->partial_batch ? train.rows % o->batch : 0;
    j->steps = train.rows / o->batch + (short_rows > 0);
    if (*train.malformed_text) printf("hetex widedeep: '%s': %s\n", path, train.malformed_text);
    if (*test.malformed_text) printf("hetex widedeep: '%s': %s\n", test_path, test.malformed_text);
    if (!st)
        st = criteo ? wd_features_fit_criteo(j->train, &j->train_cfg, o->hash_buckets, &j->wf)
                    : wd_features_fit(j->train, &j->train_cfg, o->cross_buckets, &j->wf);
    wd_options lo = *o; /* the graph takes this rank's slice */
    lo.batch = j->lb;
    if (!st && (st = wd_model_build(&lo, &j->wf, &j->m)) == HX_ERR_OUT_OF_MEMORY && o->table_bytes)
        snprintf(j->msg, sizeof j->msg, "%s (--table-memory-per-rank %zu: %s)", hx_last_error(), o->table_bytes,
                 o->shards ? "a rank's deep shard is checked against it, its wide shard against what the deep one "
                             "left; give more ranks or a larger cap"
                           : "each server's tables together; give more servers or a larger cap");
    if (!st && o->ps && hx_ps_is_server(o->ps)) /* a server: the tables only */
        return o->resume ? resume(j) : HX_OK;
    if (!st) st = wd_feed_alloc(&j->wf, o->batch, &j->fd);
    if (!st) st = wd_feed_alloc(&j->wf, o->batch, &j->fd_next);
    hx_session_config sc = hx_session_config_default();
    sc.n_threads = o->threads;
    sc.seed = o->seed;
    sc.accelerator = o->accelerator;
    sc.max_device_memory = o->max_device_memory; /* 0: the default cap */
    sc.auto_placement = o->placement == HX_TARGET_AUTO;
    sc.comm = o->ps ? hx_ps_workers(o->ps) : o->comm; /* --servers: the workers' */
    if (!st && short_rows) { /* before the trace is set: it records the main session */
        st = wd_model_build_twin(&lo, &j->wf, &j->m, short_rows, &j->pm);
        if (!st && !cli_partial_open(&j->part, "widedeep", j->pm.g, &sc)) {
            snprintf(j->msg, sizeof j->msg, "--partial-batch: the short batch's session (said above)");
            st = HX_ERR_INVALID_ARGUMENT;
        }
    }
    if (o->trace) setenv("HX_TRACE", o->trace, 1);
    if (!st) st = hx_session_create(j->m.g, &sc, &j->s);
    if (!st && o->resume) st = resume(j);
    return st;
}

static void teardown(job *j)
{
    cli_partial_close(&j->part);
    wd_model_free(&j->pm); /* before m, whose tables it uses */
    hx_session_free(j->s);
    wd_model_free(&j->m);
    wd_feed_free(&j->fd);
    wd_feed_free(&j->fd_next);
    wd_features_free(&j->wf);
    hx_reader_close(j->train);
    hx_reader_close(j->test);
    free(j->probs);
    free(j->labels);
    wd_shards_stop(&j->o);
    wd_criteo_remove(j->gen_dir);
}

int wd_main(int argc, char **argv)
{
    job j = {.o = wd_options_default()};
    int prc = parse(argc, argv, &j.o);
    if (prc) return prc == CLI_HELP ? 0 : prc;
    const wd_options *o = &j.o;
    double t0 = cli_now();
    int rc = 1;
    FILE *curve = NULL;
    if (setup(&j)) {
        cli_error("widedeep", NULL, *j.msg ? j.msg : hx_last_error());
        goto out;
    }
    if (o->ps && hx_ps_is_server(o->ps)) {
        rc = wd_serve(&j.o);
        goto out;
    }
    if (o->curve && !(curve = fopen(o->curve, j.epochs_done ? "a" : "w"))) {
        fprintf(stderr, "hetex widedeep: cannot write '%s'\n", o->curve);
        goto out;
    }
    if (curve && !j.epochs_done) fprintf(curve, "epoch,train_loss,test_loss,test_auc,test_accuracy\n");
    if (!cli_metrics_open(&j.metrics, "widedeep", o->metrics, o->tensorboard, j.epochs_done > 0)) goto out;
    printf("hetex widedeep: %s, batch %lld, %d epochs%s\n", j.source, (long long)o->batch, o->epochs,
           j.epochs_done ? " (resumed)" : "");
    if (!tables_said(&j)) goto out;
    if (j.train_rows % o->batch && o->partial_batch)
        printf("hetex widedeep: %lld full batches and a short one of %lld rows an epoch "
               "(--partial-batch): all %lld rows trained\n", (long long)(j.train_rows / o->batch),
               (long long)(j.train_rows % o->batch), (long long)j.train_rows);
    else if (j.train_rows % o->batch)
        printf("hetex widedeep: %lld full batches an epoch; the %lld rows past them (a partial "
               "batch, other rows each epoch as they are shuffled) are not trained on "
               "(--partial-batch trains them)\n",
               (long long)(j.train_rows / o->batch), (long long)(j.train_rows % o->batch));
    if (o->shards)
        printf("hetex widedeep: %d ranks, %lld rows of each batch per rank; tables sharded row-wise, "
               "the MLP data parallel; train loss: rank 0's rows\n", o->shards, (long long)j.lb);
    if (o->servers)
        printf("hetex widedeep: server mode: ranks 0-%d train (workers), ranks %d-%d hold the tables "
               "(servers); %lld rows of each batch per worker, staleness %d%s; the MLP data parallel "
               "among the workers; train loss: worker 0's rows\n", wd_slices(o) - 1, wd_slices(o),
               wd_slices(o) + o->servers - 1, (long long)j.lb, o->staleness,
               o->staleness ? "" : " (synchronous)");
    cli_print_accelerator(stdout, "widedeep", j.s);
    cli_print_placement(stdout, "widedeep", j.s);
    hx_memory_stats ms;
    if (hx_session_memory_stats(j.s, &ms)) {
        cli_error("widedeep", "planning the training step", hx_last_error());
        goto out;
    }
    if (!cli_check_host_memory("widedeep", &ms, j.s, "lower --batch")) goto out;
    wd_metrics m = {0};
    if (!o->shards && !o->servers) cli_interrupt_arm(); /* ranks would stop at different steps */
    for (int e = j.epochs_done + 1; e <= o->epochs; e++) {
        double loss = 0, rate = 0; /* set by a whole epoch */
        int64_t steps = 0;
        hx_embedding_stats before, after;
        if (hx_embedding_table_stats(j.m.deep, &before) || train_epoch(&j, e, &loss, &rate, &steps)) {
            char what[32];
            snprintf(what, sizeof what, "epoch %d", e);
            if (!j.metrics.failed) cli_error("widedeep", what, hx_last_error()); /* else said */
            goto out;
        }
        if (j.interrupted) {
            printf("hetex widedeep: interrupted (%s) in epoch %d, which is not saved; %s%s%s\n",
                   cli_interrupted() == SIGINT ? "Ctrl-C" : "SIGTERM", e,
                   !o->save || e == 1 ? "no checkpoint of this run" : "'",
                   o->save && e > 1 ? o->save : "",
                   o->save && e > 1 ? "' holds the epochs before it: continue with the same "
                                      "flags and --resume it" : "");
            rc = CLI_EXIT_INTERRUPTED;
            goto out;
        }
        if (hx_embedding_table_stats(j.m.deep, &after) || evaluate(&j, &m)) {
            char what[32];
            snprintf(what, sizeof what, "epoch %d", e);
            if (!j.metrics.failed) cli_error("widedeep", what, hx_last_error()); /* else said */
            goto out;
        }
        printf("epoch %2d  train loss %.4f  test loss %.4f  AUC %.4f  accuracy %.4f  "
               "%.0f examples/s\n", e, loss, m.log_loss, m.auc, m.accuracy, rate);
        if (o->deep_on_disk) disk_stats(&before, &after, steps);
        if (o->device_cache_rows)
            device_stats(&before, &after, steps, o->ps ? hx_comm_size(hx_ps_workers(o->ps)) > 1
                                                       : o->comm && hx_comm_size(o->comm) > 1);
        fflush(stdout);
        if (curve) fprintf(curve, "%d,%.6f,%.6f,%.6f,%.6f\n", e, loss, m.log_loss, m.auc, m.accuracy);
        cli_metrics_begin(&j.metrics, "epoch");
        cli_metrics_int(&j.metrics, "epoch", e);
        cli_metrics_int(&j.metrics, "step", e * j.steps);
        cli_metrics_num(&j.metrics, "train_loss", loss);
        cli_metrics_num(&j.metrics, "test_loss", m.log_loss);
        cli_metrics_num(&j.metrics, "test_auc", m.auc);
        cli_metrics_num(&j.metrics, "test_accuracy", m.accuracy);
        cli_metrics_num(&j.metrics, "examples_per_s", rate);
        if (!cli_metrics_end(&j.metrics)) goto out;
        if (o->save && wd_ckpt_save(o, j.s, &j.m, e)) {
            fprintf(stderr, "hetex widedeep: epoch %d was not saved\n", e);
            goto out;
        }
    }
    if (j.epochs_done >= o->epochs && evaluate(&j, &m)) {
        cli_error("widedeep", "evaluation", hx_last_error());
        goto out;
    }
    summary(&j, &m, cli_now() - t0);
    if (o->ps) wd_worker_stats(o);
    rc = cli_metrics_close(&j.metrics) ? 0 : 1;
out:
    cli_metrics_close(&j.metrics);
    if (curve) {
        fclose(curve);
        if (!rc) plot(o->curve);
    }
    teardown(&j);
    return rc;
}
