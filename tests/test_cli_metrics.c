/* --metrics of every training command read back (JSON lines: each line
 * one object, every step and evaluation, numbers that parse, samples of
 * the asked length), `hetex plot` drawing them as a PNG (and refusing a
 * file that is not one), the lines that say a partial batch is left out,
 * hetex resnet's accelerator line, and the new flags' errors naming the
 * flag. Runs the built `hetex` (tests/util/hetex_run.h). */
#include "cli/cli.h"
#include "hetex_run.h"
#include "testutil.h"
#include "tmpdir.h"
#include "test_main.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[128], log_path[300], corpus[512], adult[512], fashion[512], small[300];
static char out[1 << 16];

static int run(const char *const *args) { return test_hetex_run(args, NULL, log_path, out, sizeof out); }

/* One metrics line read back: its event, and the number or decoded text
 * of key. */
typedef struct parsed {
    char event[32];
    double value;      /* NAN: key absent, null, or not a number */
    char text[4096];   /* a string value, decoded */
    int text_len;      /* -1: no string value */
} parsed;

/* A line {"event":"E","k":v,...} with v a number, null or a JSON string.
 * false: not such a line. */
static bool parse(const char *line, const char *key, parsed *p)
{
    memset(p, 0, sizeof *p);
    p->value = NAN;
    p->text_len = -1;
    const char *c = line;
    if (strncmp(c, "{\"event\":\"", 10)) return false;
    c += 10;
    size_t n = strcspn(c, "\"");
    if (!n || n >= sizeof p->event) return false;
    memcpy(p->event, c, n);
    c += n + 1;
    while (*c == ',') {
        if (*++c != '"') return false;
        const char *k = ++c;
        c += strcspn(c, "\"");
        bool mine = (size_t)(c - k) == strlen(key) && !strncmp(k, key, strlen(key));
        if (*c++ != '"' || *c++ != ':') return false;
        if (*c == '"') {
            int len = 0;
            for (c++; *c && *c != '"'; c++) {
                char ch = *c;
                if (*c == '\\') {
                    c++;
                    if (*c == 'n') ch = '\n';
                    else if (*c == 'u') {
                        char hex[5] = {0};
                        memcpy(hex, c + 1, 4);
                        ch = (char)strtol(hex, NULL, 16);
                        c += 4;
                    } else ch = *c;
                }
                if (mine && len < (int)sizeof p->text - 1) p->text[len++] = ch;
            }
            if (*c++ != '"') return false;
            if (mine) p->text_len = len;
        } else if (!strncmp(c, "null", 4)) {
            c += 4;
        } else {
            char *end;
            double v = strtod(c, &end);
            if (end == c) return false;
            if (mine) p->value = v;
            c = end;
        }
    }
    return !strcmp(c, "}\n");
}

/* Lines of file with event (all: NULL) whose key reads back; every line
 * must parse (else -1). */
static int count(const char *file, const char *event, const char *key)
{
    FILE *f = fopen(file, "r");
    char line[20000];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        parsed p;
        if (!parse(line, key, &p)) {
            fprintf(stderr, "not a metrics line in %s: %s", file, line);
            n = -1;
            break;
        }
        n += (!event || !strcmp(p.event, event)) && (isfinite(p.value) || p.text_len >= 0);
    }
    if (f) fclose(f);
    return f ? n : -1;
}

static bool is_png(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char head[4] = {0};
    bool png = f && fread(head, 1, 4, f) == 4 && !memcmp(head, "\x89PNG", 4);
    if (f) fclose(f);
    return png;
}

/* hetex gpt's metrics: 8 steps numbered 1..8 with their loss and lr, two
 * evaluations, two samples of 30 characters, a summary; then drawn. */
static void test_gpt(void)
{
    char m[300], png[300];
    snprintf(m, sizeof m, "%s/gpt.jsonl", dir);
    snprintf(png, sizeof png, "%s/gpt.png", dir);
    const char *gpt[] = {"gpt", "--data", corpus, "--layers", "1", "--heads", "2", "--width", "16",
                         "--context", "8", "--batch", "4", "--steps", "8", "--eval-every", "4",
                         "--eval-iters", "2", "--threads", "1", "--quiet", "--sample", "30",
                         "--metrics", m, NULL};
    int rc = run(gpt);
    CHECK(rc == 0 && strstr(out, "sample at step 4 (30 characters, --seed 1):\n"),
          "hetex gpt --metrics --sample (exit %d): %s", rc, out);
    CHECK(count(m, "step", "loss") == 8 && count(m, "step", "lr") == 8 &&
              count(m, "eval", "val_loss") == 2 && count(m, "summary", "val_loss") == 1,
          "8 steps with loss and lr, 2 evaluations, a summary: %d %d %d %d",
          count(m, "step", "loss"), count(m, "step", "lr"), count(m, "eval", "val_loss"),
          count(m, "summary", "val_loss"));
    FILE *f = fopen(m, "r");
    char line[20000];
    int step = 0, samples = 0;
    bool ordered = true;
    while (f && fgets(line, sizeof line, f)) {
        parsed p;
        if (parse(line, "step", &p) && !strcmp(p.event, "step")) ordered &= p.value == ++step;
        if (parse(line, "text", &p) && !strcmp(p.event, "sample"))
            samples += p.text_len == 30 && !memchr(p.text, 0, 30);
    }
    if (f) fclose(f);
    CHECK(ordered && step == 8 && samples == 2, "steps 1..8 in order (%d), 2 samples of 30 "
          "characters (%d)", step, samples);

    const char *plot[] = {"plot", m, "--output", png, NULL};
    rc = run(plot);
    CHECK(rc == 0 && is_png(png) && strstr(out, "3 series"), "hetex plot draws a PNG of loss, "
          "train_loss, val_loss (exit %d): %s", rc, out);

    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.jsonl", dir);
    CHECK(test_write_text(bad, "{\"event\":\"step\",\"step\":1,\"loss\":2}\n{\"event\":\"st"),
          "a cut metrics file");
    const char *plot_bad[] = {"plot", bad, NULL};
    rc = run(plot_bad);
    CHECK(rc == 1 && strstr(out, bad) && strstr(out, "line 2 is not a metrics line"),
          "a damaged metrics file is refused naming it and the line (exit %d): %s", rc, out);
}

/* widedeep, resnet and mlp write their steps and epochs; widedeep and
 * resnet say how many rows a partial batch leaves out; resnet's first
 * lines say which accelerator. */
static void test_other_commands(void)
{
    char m[300], curve[300], png[310];
    snprintf(m, sizeof m, "%s/wd.jsonl", dir);
    snprintf(curve, sizeof curve, "%s/wd.csv", dir);
    snprintf(png, sizeof png, "%s.png", curve);
    const char *wd[] = {"widedeep", "--data", small, "--batch", "16", "--epochs", "2", "--quiet",
                        "--threads", "1", "--metrics", m, "--curve", curve, NULL};
    int rc = run(wd);
    CHECK(rc == 0 && strstr(out, "2 full batches an epoch; the 8 rows past them"),
          "widedeep says it leaves out a partial batch (exit %d): %s", rc, out);
    CHECK(is_png(png), "widedeep --curve draws %s (gnuplot: ./build.sh installs it)", png);
    CHECK(count(m, "step", "loss") == 4 && count(m, "epoch", "test_auc") == 2 &&
              count(m, "epoch", "step") == 2,
          "widedeep: 4 steps, 2 epochs with AUC and step: %d %d", count(m, "step", "loss"),
          count(m, "epoch", "test_auc"));

    snprintf(m, sizeof m, "%s/resnet.jsonl", dir);
    const char *resnet[] = {"resnet", "--data", fashion, "--train-limit", "20", "--test-limit",
                            "8", "--batch", "8", "--epochs", "1", "--width", "4", "--blocks", "1",
                            "--accelerator", "emu", "--quiet", "--metrics", m, NULL};
    rc = run(resnet);
    CHECK(rc == 0 && strstr(out, "hetex resnet: accelerator: emu, an emulated accelerator on the "
                                 "host's cores (asked for (--accelerator emu)); device memory cap") &&
              strstr(out, "2 full batches an epoch; the 4 images past them"),
          "resnet: the accelerator line, the partial batch (exit %d): %s", rc, out);
    CHECK(count(m, "step", "loss") == 2 && count(m, "epoch", "test_accuracy") == 1,
          "resnet: 2 steps, 1 epoch: %d %d", count(m, "step", "loss"),
          count(m, "epoch", "test_accuracy"));

    snprintf(m, sizeof m, "%s/mlp.jsonl", dir);
    const char *mlp[] = {"mlp", "--steps", "5", "--every", "5", "--metrics", m, NULL};
    rc = run(mlp);
    CHECK(rc == 0 && count(m, "step", "loss") == 5, "mlp: 5 steps (exit %d, %d lines): %s", rc,
          count(m, "step", "loss"), out);
}

#ifdef HX_HAVE_PROTOBUF_C
#include "tensorboard.pb-c.h"

/* The value of key in the metrics line of event at step (NAN: none). */
static double metric(const char *file, const char *event, int64_t step, const char *key)
{
    FILE *f = fopen(file, "r");
    char line[20000];
    double v = NAN;
    while (f && fgets(line, sizeof line, f)) {
        parsed p, ps;
        if (parse(line, key, &p) && parse(line, "step", &ps) && !strcmp(p.event, event) &&
            ps.value == (double)step)
            v = p.value;
    }
    if (f) fclose(f);
    return v;
}

/* --tensorboard: an event file whose records' checksums hold, its first
 * Event the file version, then one Event per metrics line with the same
 * numbers (as float) under "EVENT/KEY" at the line's step, decoded with
 * protobuf-c. */
static void test_tensorboard(void)
{
    CHECK(cli_crc32c("123456789", 9) == 0xE3069283u, "CRC-32C's check value");
    char m[300], tb[300], file[600] = "";
    snprintf(m, sizeof m, "%s/tb.jsonl", dir);
    snprintf(tb, sizeof tb, "%s/tb", dir);
    const char *gpt[] = {"gpt", "--data", corpus, "--layers", "1", "--heads", "2", "--width", "16",
                         "--context", "8", "--batch", "4", "--steps", "6", "--eval-every", "3",
                         "--eval-iters", "1", "--threads", "1", "--quiet", "--sample", "0",
                         "--metrics", m, "--tensorboard", tb, NULL};
    int rc = run(gpt);
    CHECK(rc == 0, "hetex gpt --tensorboard (exit %d): %s", rc, out);
    DIR *d = opendir(tb);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) snprintf(file, sizeof file, "%s/%s", tb, e->d_name);
    if (d) closedir(d);
    FILE *f = *file ? fopen(file, "rb") : NULL;
    CHECK(f, "an events.out.tfevents.* file in %s", tb);
    int events = 0, losses = 0, val_losses = 0, wrong = 0;
    bool framed = true, version = false;
    uint64_t len;
    while (f && fread(&len, sizeof len, 1, f) == 1) {
        uint32_t len_crc, data_crc;
        unsigned char *data = len < (1u << 20) ? malloc(len ? len : 1) : NULL;
        bool ok = data && fread(&len_crc, 4, 1, f) == 1 && fread(data, 1, len, f) == len &&
                  fread(&data_crc, 4, 1, f) == 1;
        uint32_t a = cli_crc32c(&len, 8), b = ok ? cli_crc32c(data, len) : 0;
        ok = ok && len_crc == ((a >> 15) | (a << 17)) + 0xA282EAD8u &&
             data_crc == ((b >> 15) | (b << 17)) + 0xA282EAD8u;
        Tensorboard__Event *ev = ok ? tensorboard__event__unpack(NULL, len, data) : NULL;
        framed &= ev != NULL;
        if (ev && events == 0)
            version = ev->what_case == TENSORBOARD__EVENT__WHAT_FILE_VERSION &&
                      !strcmp(ev->file_version, "brain.Event:2");
        for (size_t i = 0; ev && ev->what_case == TENSORBOARD__EVENT__WHAT_SUMMARY &&
                           i < ev->summary->n_value; i++) {
            const Tensorboard__Summary__Value *v = ev->summary->value[i];
            double want = NAN;
            if (!strcmp(v->tag, "step/loss")) want = metric(m, "step", ev->step, "loss"), losses++;
            else if (!strcmp(v->tag, "eval/val_loss"))
                want = metric(m, "eval", ev->step, "val_loss"), val_losses++;
            else continue;
            wrong += v->value_case != TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE ||
                     v->simple_value != (float)want;
        }
        if (ev) tensorboard__event__free_unpacked(ev, NULL);
        free(data);
        events++;
        if (!ok) break;
    }
    if (f) fclose(f);
    CHECK(framed && version && losses == 6 && val_losses == 2 && wrong == 0,
          "%d records framed and decoded (%d), the file version first (%d), 6 step losses (%d) "
          "and 2 validation losses (%d) equal to the metrics file's (%d differ)", events, framed,
          version, losses, val_losses, wrong);
}
#endif

/* The new flags: a bad value or path names the flag, before any work. */
static void test_flags(void)
{
    static const test_hetex_case cases[] = {
        {{"gpt", "--sample", "abc"}, 2, {"--sample 'abc'", "from 0 to 2000"}},
        {{"gpt", "--metrics", "$DIR"}, 2, {"hetex gpt: --metrics '", "' is a folder; give a file name"}},
        {{"gpt", "--save", "$DIR/no/ck"}, 2, {"hetex gpt: --save '", "/no/ck': its folder", "/no' does not exist"}},
        {{"widedeep", "--metrics", "$DIR/no/m.jsonl"}, 2, {"hetex widedeep: --metrics '", "/no' does not exist"}},
        {{"resnet", "--metrics", "$DIR"}, 2, {"hetex resnet: --metrics '", "' is a folder"}},
        {{"mlp", "--metrics", "$DIR"}, 2, {"hetex mlp: --metrics '", "' is a folder"}},
        {{"plot"}, 2, {"no METRICS given"}},
        {{"plot", "$DIR/none.jsonl"}, 1, {"hetex plot: cannot read '", "/none.jsonl'"}},
        {{"plot", "x.jsonl", "--output", "it's.png"}, 2, {"--output: a quote"}},
        {{"plot", "x.jsonl", "--colour", "red"}, 2, {"--colour"}},
        {{"mlp", "--steps", "1", "--tensorboard", "$DIR/no/tb"}, 1,
         {"hetex mlp: --tensorboard '", "/no/tb': cannot make the folder (its parent must exist)"}},
    };
    const test_hetex_var vars[] = {{"$DIR", dir}};
    test_hetex_table(cases, (int)(sizeof cases / sizeof cases[0]), vars, 1, log_path);
}

static int setup(void)
{
    const char *src = getenv("HX_TEST_SRC");
    snprintf(corpus, sizeof corpus, "%s/data/tinyshakespeare/input.txt", src ? src : ".");
    snprintf(adult, sizeof adult, "%s/data/adult", src ? src : ".");
    snprintf(fashion, sizeof fashion, "%s/data/fashion-mnist", src ? src : ".");
    if (!test_make_tmpdir(dir, sizeof dir, "hx_test_cli_metrics")) return 1;
    snprintf(log_path, sizeof log_path, "%s/out.txt", dir);
    snprintf(small, sizeof small, "%s/adult", dir);
    return test_adult_folder(small, adult, NULL, 40, 40, NULL) ? 0 : 1;
}

static void teardown(void) { test_remove_tree(dir); }

static const test_case cases[] = {
    {"gpt", test_gpt},
    {"other_commands", test_other_commands},
    {"flags", test_flags},
#ifdef HX_HAVE_PROTOBUF_C
    {"tensorboard", test_tensorboard},
#endif
};

int main(int argc, char **argv)
{
    test_options o = {.setup = setup, .teardown = teardown};
    return test_main_with(argc, argv, "cli_metrics", cases, TEST_COUNT(cases), &o);
}
