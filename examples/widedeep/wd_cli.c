/* hetex widedeep: trains wide & deep on Adult, evaluates on its test file
 * after every epoch, and prints a summary. */
#include "wd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

wd_options wd_options_default(void)
{
    return (wd_options){.data = "data/adult", .epochs = 10, .batch = 256, .threads = 0,
                        .reader_threads = 2, .seed = 1, .accelerator = HX_ACCELERATOR_AUTO,
                        .deep_dim = 8, .hidden = {100, 50}, .lr_dense = 1e-3,
                        .lr_embedding = 1e-2,
                        .embedding_optimizer = HX_EMBEDDING_OPTIMIZER_ADAGRAD, .lr_wide = 0.05,
                        .l1_wide = 0.001, .l2_wide = 0.001, .cross_buckets = 1000};
}

static const char usage[] =
    "usage: hetex widedeep [options]\n"
    "  --data DIR              folder with adult.data and adult.test (data/adult)\n"
    "  --epochs N --batch N    (10, 256)\n"
    "  --accelerator auto|cuda|emu|none   where the MLP runs (auto)\n"
    "  --threads N             session threads, 0: all cores (0)\n"
    "  --reader-threads N      parser threads (2)\n"
    "  --seed N                initialisation and shuffling (1)\n"
    "  --deep-dim N --hidden N,N   embedding width, MLP widths (8; 100,50)\n"
    "  --lr-dense X            Adam on the MLP (1e-3)\n"
    "  --embedding-optimizer adagrad|lazy-adam --lr-embedding X   deep tables (adagrad, 1e-2)\n"
    "  --lr-wide X --l1 X --l2 X   FTRL on the wide part (0.05, 0.001, 0.001)\n"
    "  --cross-buckets N       hash buckets per crossed column (1000)\n"
    "  --trace PATH            Chrome trace of the run (chrome://tracing, Perfetto)\n"
    "  --save PREFIX           checkpoint after every epoch (PREFIX.session, .deep, .wide, .meta)\n"
    "  --resume PREFIX         continue from a checkpoint\n"
    "  --curve PATH            per-epoch metrics as CSV (and PATH.png where gnuplot exists)\n"
    "  --quiet                 no progress output\n";

static int parse(int argc, char **argv, wd_options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) {
            fprintf(stderr, "hetex widedeep: option %s needs a value\n", a);
            return 2;
        }
        bool ok = true;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--epochs")) o->epochs = atoi(v);
        else if (!strcmp(a, "--batch")) o->batch = atoll(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--reader-threads")) o->reader_threads = atoi(v);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--deep-dim")) o->deep_dim = atoi(v);
        else if (!strcmp(a, "--hidden")) ok = sscanf(v, "%d,%d", &o->hidden[0], &o->hidden[1]) == 2;
        else if (!strcmp(a, "--lr-dense")) o->lr_dense = strtod(v, NULL);
        else if (!strcmp(a, "--lr-embedding")) o->lr_embedding = strtod(v, NULL);
        else if (!strcmp(a, "--lr-wide")) o->lr_wide = strtod(v, NULL);
        else if (!strcmp(a, "--l1")) o->l1_wide = strtod(v, NULL);
        else if (!strcmp(a, "--l2")) o->l2_wide = strtod(v, NULL);
        else if (!strcmp(a, "--cross-buckets")) o->cross_buckets = atoll(v);
        else if (!strcmp(a, "--trace")) o->trace = v;
        else if (!strcmp(a, "--save")) o->save = v;
        else if (!strcmp(a, "--resume")) o->resume = v;
        else if (!strcmp(a, "--curve")) o->curve = v;
        else if (!strcmp(a, "--embedding-optimizer")) {
            if (!strcmp(v, "adagrad")) o->embedding_optimizer = HX_EMBEDDING_OPTIMIZER_ADAGRAD;
            else if (!strcmp(v, "lazy-adam")) o->embedding_optimizer = HX_EMBEDDING_OPTIMIZER_LAZY_ADAM;
            else ok = false;
        } else if (!strcmp(a, "--accelerator")) {
            if (!strcmp(v, "auto")) o->accelerator = HX_ACCELERATOR_AUTO;
            else if (!strcmp(v, "cuda")) o->accelerator = HX_ACCELERATOR_CUDA;
            else if (!strcmp(v, "emu")) o->accelerator = HX_ACCELERATOR_EMU;
            else if (!strcmp(v, "none")) o->accelerator = HX_ACCELERATOR_NONE;
            else ok = false;
        } else {
            fprintf(stderr, "hetex widedeep: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "hetex widedeep: bad value '%s' for %s (see --help)\n", v, a);
            return 2;
        }
    }
    if (o->epochs < 1 || o->batch < 1 || o->threads < 0 || o->reader_threads < 1 ||
        o->deep_dim < 1 || o->hidden[0] < 1 || o->hidden[1] < 1 || !(o->lr_dense > 0) ||
        !(o->lr_embedding > 0) || !(o->lr_wide > 0) || o->l1_wide < 0 || o->l2_wide < 0 ||
        o->cross_buckets < 1) {
        fprintf(stderr, "hetex widedeep: epochs, batch, reader threads, sizes, learning rates "
                        "and buckets must be positive; threads, l1, l2 >= 0\n");
        return 2;
    }
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Everything a run holds. */
typedef struct job {
    wd_options o;
    hx_reader_config train_cfg, test_cfg;
    hx_reader *train, *test;
    wd_features wf;
    wd_model m;
    hx_session *s;
    wd_feed fd;
    float *probs, *labels; /* the test set's, grown as read */
    int64_t scored_cap;
    int64_t train_bytes; /* the training file's size */
    int epochs_done;
    char msg[1200];      /* the example's own errors (else hx_last_error()) */
} job;

/* A progress bar by bytes of the file read. */
static void progress(const job *j, int epoch, int64_t rows, double loss, double rate, bool tty)
{
    hx_reader_stats rs;
    if (j->o.quiet || !tty || hx_reader_stats_get(j->train, &rs)) return;
    int width = 30, done = j->train_bytes > 0 ? (int)(width * rs.bytes / j->train_bytes) : 0;
    if (done > width) done = width;
    char bar[64];
    memset(bar, '#', (size_t)done);
    memset(bar + done, '.', (size_t)(width - done));
    bar[width] = 0;
    printf("\repoch %d [%s] %lld rows  loss %.4f  %.0f examples/s ", epoch, bar,
           (long long)rows, loss, rate);
    fflush(stdout);
}

/* One pass over the training file: full batches only. */
static hx_status train_epoch(job *j, int epoch, double *mean_loss, double *examples_per_s)
{
    const wd_options *o = &j->o;
    bool tty = isatty(fileno(stdout));
    hx_feed feeds[WD_N_FEEDS];
    double sum = 0, t0 = now();
    int64_t rows = 0, batches = 0;
    const hx_batch *b;
    hx_status st;
    while (!(st = hx_reader_next(j->train, &b)) && b) {
        if (b->n < o->batch) continue; /* the partial last batch */
        if ((st = wd_feed_fill(&j->wf, b, o->batch, &j->fd))) return st;
        wd_feeds(&j->m, &j->fd, o->batch, &j->wf, feeds);
        float loss;
        hx_fetch fetch = {NULL, j->m.loss, &loss, sizeof loss};
        if ((st = hx_session_run(j->s, feeds, WD_N_FEEDS, &fetch, 1, HX_RUN_TRAIN))) return st;
        sum += loss;
        rows += b->n;
        if (++batches % 16 == 0)
            progress(j, epoch, rows, sum / batches, rows / (now() - t0), tty);
    }
    if (st) return st;
    if (!o->quiet && tty) printf("\r%*s\r", 100, "");
    *mean_loss = batches ? sum / batches : NAN;
    *examples_per_s = rows / (now() - t0);
    return hx_reader_rewind(j->train);
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
        wd_feeds(&j->m, &j->fd, o->batch, &j->wf, feeds);
        hx_fetch fetch = {NULL, j->m.prob, probs, sizeof *probs * o->batch};
        if ((st = hx_session_run(j->s, feeds, WD_N_FEEDS, &fetch, 1, 0))) break;
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

/* ---- checkpoints: the session, both tables, and the epochs done (written
 * last, so a checkpoint without its .meta is not one) ------------------------- */

static void path_of(char *buf, size_t n, const char *prefix, const char *ext)
{
    snprintf(buf, n, "%s.%s", prefix, ext);
}

static hx_status save(const job *j, int epochs_done)
{
    char p[1024], tmp[1040];
    const char *pre = j->o.save;
    path_of(p, sizeof p, pre, "session");
    hx_status st = hx_session_save(j->s, p);
    path_of(p, sizeof p, pre, "deep");
    if (!st) st = hx_embedding_table_save(j->m.deep, p);
    path_of(p, sizeof p, pre, "wide");
    if (!st) st = hx_embedding_table_save(j->m.wide, p);
    if (st) return st;
    path_of(p, sizeof p, pre, "meta");
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    bool ok = f && fprintf(f, "hetex widedeep checkpoint 1\nepochs %d\nseed %llu\n", epochs_done,
                           (unsigned long long)j->o.seed) > 0;
    if (f && fclose(f)) ok = false;
    if (!ok || rename(tmp, p)) {
        fprintf(stderr, "hetex widedeep: cannot write '%s'\n", p);
        return HX_ERR_IO;
    }
    return HX_OK;
}

static hx_status resume(job *j)
{
    char p[1024];
    const char *pre = j->o.resume;
    path_of(p, sizeof p, pre, "meta");
    FILE *f = fopen(p, "r");
    int epochs = -1;
    unsigned long long seed = 0;
    bool ok = f && fscanf(f, "hetex widedeep checkpoint 1\nepochs %d\nseed %llu", &epochs, &seed) == 2;
    if (f) fclose(f);
    if (!ok || epochs < 0) {
        snprintf(j->msg, sizeof j->msg, "'%s' is missing or not a widedeep checkpoint's .meta "
                 "file", p);
        return HX_ERR_CORRUPT;
    }
    if (seed != j->o.seed) {
        snprintf(j->msg, sizeof j->msg, "the checkpoint was made with --seed %llu; resume with "
                 "the same seed", seed);
        return HX_ERR_INVALID_ARGUMENT;
    }
    path_of(p, sizeof p, pre, "session");
    hx_status st = hx_session_load(j->s, p);
    path_of(p, sizeof p, pre, "deep");
    if (!st) st = hx_embedding_table_load(j->m.deep, p);
    path_of(p, sizeof p, pre, "wide");
    if (!st) st = hx_embedding_table_load(j->m.wide, p);
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
}

static hx_status setup(job *j)
{
    const wd_options *o = &j->o;
    char path[1024];
    j->train_cfg = hx_reader_config_adult(false);
    j->train_cfg.batch_size = o->batch;
    j->train_cfg.n_threads = o->reader_threads;
    j->train_cfg.shuffle_rows = 1 << 15;
    j->train_cfg.shuffle_seed = o->seed;
    j->test_cfg = hx_reader_config_adult(true);
    j->test_cfg.batch_size = o->batch;
    j->test_cfg.n_threads = o->reader_threads;
    snprintf(path, sizeof path, "%s/adult.data", o->data);
    hx_status st = hx_reader_open(path, &j->train_cfg, &j->train);
    struct stat sb;
    j->train_bytes = stat(path, &sb) ? 0 : (int64_t)sb.st_size;
    snprintf(path, sizeof path, "%s/adult.test", o->data);
    if (!st) st = hx_reader_open(path, &j->test_cfg, &j->test);
    if (!st) st = wd_features_fit(j->train, &j->train_cfg, o->cross_buckets, &j->wf);
    if (!st) st = wd_model_build(o, &j->wf, &j->m);
    if (!st) st = wd_feed_alloc(&j->wf, o->batch, &j->fd);
    hx_session_config sc = hx_session_config_default();
    sc.n_threads = o->threads;
    sc.seed = o->seed;
    sc.accelerator = o->accelerator;
    if (o->trace) setenv("HX_TRACE", o->trace, 1);
    if (!st) st = hx_session_create(j->m.g, &sc, &j->s);
    if (!st && o->resume) st = resume(j);
    return st;
}

static void teardown(job *j)
{
    hx_session_free(j->s);
    wd_model_free(&j->m);
    wd_feed_free(&j->fd);
    wd_features_free(&j->wf);
    hx_reader_close(j->train);
    hx_reader_close(j->test);
    free(j->probs);
    free(j->labels);
}

int wd_main(int argc, char **argv)
{
    job j = {.o = wd_options_default()};
    if (parse(argc, argv, &j.o)) return 2;
    const wd_options *o = &j.o;
    double t0 = now();
    int rc = 1;
    FILE *curve = NULL;
    if (setup(&j)) {
        fprintf(stderr, "hetex widedeep: %s\n", *j.msg ? j.msg : hx_last_error());
        goto out;
    }
    if (o->curve && !(curve = fopen(o->curve, j.epochs_done ? "a" : "w"))) {
        fprintf(stderr, "hetex widedeep: cannot write '%s'\n", o->curve);
        goto out;
    }
    if (curve && !j.epochs_done) fprintf(curve, "epoch,train_loss,test_loss,test_auc,test_accuracy\n");
    printf("hetex widedeep: %s, batch %lld, %d epochs%s\n", o->data, (long long)o->batch, o->epochs,
           j.epochs_done ? " (resumed)" : "");
    wd_metrics m = {0};
    for (int e = j.epochs_done + 1; e <= o->epochs; e++) {
        double loss, rate;
        if (train_epoch(&j, e, &loss, &rate) || evaluate(&j, &m)) {
            fprintf(stderr, "hetex widedeep: epoch %d: %s\n", e, hx_last_error());
            goto out;
        }
        printf("epoch %2d  train loss %.4f  test loss %.4f  AUC %.4f  accuracy %.4f  "
               "%.0f examples/s\n", e, loss, m.log_loss, m.auc, m.accuracy, rate);
        fflush(stdout);
        if (curve) fprintf(curve, "%d,%.6f,%.6f,%.6f,%.6f\n", e, loss, m.log_loss, m.auc, m.accuracy);
        if (o->save && save(&j, e)) {
            fprintf(stderr, "hetex widedeep: saving epoch %d: %s\n", e, hx_last_error());
            goto out;
        }
    }
    if (j.epochs_done >= o->epochs && evaluate(&j, &m)) {
        fprintf(stderr, "hetex widedeep: evaluation: %s\n", hx_last_error());
        goto out;
    }
    summary(&j, &m, now() - t0);
    rc = 0;
out:
    if (curve) {
        fclose(curve);
        if (!rc) plot(o->curve);
    }
    teardown(&j);
    return rc;
}
