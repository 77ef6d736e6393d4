/* hetex resnet: trains the ResNet of resnet_model.c on Fashion-MNIST and
 * reports the test accuracy after every epoch. */
#include "resnet.h"
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    resnet_config model;
    resnet_optim optim;
    const char *data;
    int epochs, threads;
    int64_t train_limit, test_limit;
    uint64_t seed;
    bool no_flip, quiet, partial_batch;
    const char *metrics;      /* JSON lines of every step and epoch, or NULL */
    const char *tensorboard;  /* a folder for TensorBoard event files of the same, or NULL */
    const char *save, *resume; /* checkpoint folders */
    double progress_interval; /* seconds between progress lines off a terminal */
    hx_accelerator accelerator;
    size_t max_device_memory;
    const char *offload_config; /* hx_offload_config_parse's key=value,... */
} options;

static const char usage[] =
    "usage: hetex resnet [options]\n"
    "  --data DIR              Fashion-MNIST's four IDX files (data/fashion-mnist)\n"
    "  --width N --blocks N    first-stage channels, basic blocks per stage (16 3: ResNet-20)\n"
    "  --batch N --epochs N    (128 3)\n"
    "  --partial-batch         train the short last batch of each epoch too (without it\n"
    "                          its images are left out, and fewer images than --batch is an error)\n"
    "  --lr X --momentum X --weight-decay X   SGD, Nesterov (0.1 0.9 5e-4)\n"
    "  --warmup N              linear warmup steps, then cosine decay to 0 (200)\n"
    "  --no-flip               no random left-right flips of training images\n"
    "  --dtype f32|bf16|f16    activations and parameter copies on the device (f32);\n"
    "                          f16 turns on dynamic loss scaling\n"
    "  --accelerator auto|cuda|emu|none   where DEVICE ops run (auto)\n"
    "  --max-device-memory N[K|M|G]   accelerator memory cap\n"
    "  --offload-config K=V,...  parameter offload (offload_param=cpu, auto_offload=true,\n"
    "                          chunk_size=, prefetch_depth=, ...)\n"
    "  --train-limit N --test-limit N   use the first N images only (0: all)\n"
    "  --threads N --seed N\n"
    "  --metrics PATH          JSON lines: every step's loss and lr, every epoch's test\n"
    "                          accuracy ('hetex plot PATH' draws them)\n"
    "  --tensorboard DIR       the same numbers as TensorBoard scalars (a new event file in\n"
    "                          DIR, made if missing: tensorboard --logdir DIR)\n"
    "  --save DIR              checkpoint folder, replaced as a whole after every epoch\n"
    "                          and on Ctrl-C (then the run stops, exit 130)\n"
    "  --resume DIR            continue from a checkpoint folder, bitwise as if never\n"
    "                          stopped (the same flags as the run that saved it)\n"
    "  --quiet                 no progress output\n"
    "  --progress-interval S   seconds between progress lines when not on a terminal (10)\n";

/* The flags, their ranges and where each goes. */
static int parse(int argc, char **argv, options *o)
{
    int dtype = 0, accel = (int)o->accelerator;
    const cli_flag flags[] = {
        CLI_FLAG_TEXT("--data", &o->data),
        CLI_FLAG_NUM("--width", CLI_INT, &o->model.width, 1, 1024),
        CLI_FLAG_NUM("--blocks", CLI_INT, &o->model.blocks, 1, 20),
        CLI_FLAG_NUM("--batch", CLI_INT, &o->model.batch, 1, 65536),
        CLI_FLAG_NUM("--epochs", CLI_INT, &o->epochs, 1, 100000),
        CLI_FLAG_ABOVE("--lr", &o->optim.lr, 0, 10),
        CLI_FLAG_NUM("--momentum", CLI_DOUBLE, &o->optim.momentum, 0, 0.999),
        CLI_FLAG_NUM("--weight-decay", CLI_DOUBLE, &o->optim.weight_decay, 0, 1),
        CLI_FLAG_NUM("--warmup", CLI_INT, &o->optim.warmup, 0, 1000000000),
        CLI_FLAG_SWITCH("--no-flip", &o->no_flip),
        CLI_FLAG_CHOICE("--dtype", &dtype, "f32|bf16|f16"),
        CLI_FLAG_CHOICE("--accelerator", &accel, CLI_ACCELERATORS),
        CLI_FLAG_NUM("--max-device-memory", CLI_BYTES, &o->max_device_memory, 1 << 20, 0x1p44),
        CLI_FLAG_TEXT("--offload-config", &o->offload_config),
        CLI_FLAG_NUM("--train-limit", CLI_INT64, &o->train_limit, 0, 1e12),
        CLI_FLAG_NUM("--test-limit", CLI_INT64, &o->test_limit, 0, 1e12),
        CLI_FLAG_NUM("--threads", CLI_INT, &o->threads, 0, 1024),
        CLI_FLAG_U64("--seed", &o->seed),
        CLI_FLAG_SWITCH("--quiet", &o->quiet),
        CLI_FLAG_SWITCH("--partial-batch", &o->partial_batch),
        CLI_FLAG_TEXT("--metrics", &o->metrics),
        CLI_FLAG_TEXT("--tensorboard", &o->tensorboard),
        CLI_FLAG_TEXT("--save", &o->save),
        CLI_FLAG_TEXT("--resume", &o->resume),
        CLI_FLAG_ABOVE("--progress-interval", &o->progress_interval, 0, 3600),
    };
    const cli_command c = {.name = "resnet", .usage = usage, .flags = flags,
                           .n_flags = CLI_COUNT(flags)};
    int rc = cli_parse(&c, argc, argv);
    if (rc) return rc;
    static const hx_dtype dtypes[3] = {HX_DTYPE_F32, HX_DTYPE_BF16, HX_DTYPE_F16};
    o->model.dtype = dtypes[dtype];
    o->accelerator = (hx_accelerator)accel;
    if (o->metrics && !cli_check_output("resnet", "--metrics", o->metrics, CLI_PATH_FILE))
        return CLI_EXIT_USAGE;
    if (o->save && !cli_check_output("resnet", "--save", o->save, CLI_PATH_DIR))
        return CLI_EXIT_USAGE;
    return CLI_OK;
}

static int load(const options *o, const char *images, const char *labels, int64_t limit,
                resnet_set *s)
{
    char ip[512], lp[512], msg[1024];
    snprintf(ip, sizeof ip, "%s/%s", o->data, images);
    snprintf(lp, sizeof lp, "%s/%s", o->data, labels);
    if (!resnet_set_load(ip, lp, limit, s, msg, sizeof msg)) return 0;
    fprintf(stderr, "hetex resnet: %s\n", msg);
    return -1;
}

/* The order of epoch's images: the order before it, shuffled (Fisher-Yates,
 * xorshift64 seeded by --seed and the epoch). Returns the generator's
 * state after it, the seed of the epoch's flips. */
static uint64_t shuffle(int64_t *order, int64_t n, uint64_t seed, int epoch)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch + 1;
    for (int64_t i = n - 1; i > 0; i--) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        int64_t j = (int64_t)(z % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    return z;
}

/* The images an epoch trains on: its full batches, and with --partial-batch
 * the short last one. */
static int64_t epoch_images(const options *o, int64_t n)
{
    return o->partial_batch ? n : n / o->model.batch * o->model.batch;
}

/* The rest of epoch `at->epoch` over `order` (shuffled for it, z its
 * generator's state) from its step at->done; progress as it goes. The
 * short last batch (--partial-batch) trains in part's session, over pr's
 * model. at->loss_sum sums each step's mean loss times its images. 0 when
 * the epoch is done, 1 when Ctrl-C stopped it (at says where), -1 failed. */
static int train_epoch(resnet_run *r, resnet_run *pr, cli_partial *part, const options *o,
                       const resnet_set *train, const int64_t *order, uint64_t z,
                       resnet_resume *at, int64_t total, float *x, int32_t *y, cli_metrics *mt)
{
    int B = o->model.batch, epoch = at->epoch;
    int64_t images = epoch_images(o, train->n), *step = &at->step;
    int64_t steps = (images + B - 1) / B;
    char label[32];
    snprintf(label, sizeof label, "epoch %d", epoch);
    cli_progress bar;
    cli_progress_start(&bar, stdout, o->quiet, o->progress_interval, label, "images",
                       (double)(images - at->done * B));
    double loss_sum = at->loss_sum;
    int64_t from = at->done;
    for (int64_t k = from; k < steps; k++, (*step)++) {
        int b = (int)(images - k * B < B ? images - k * B : B);
        resnet_run *m = b < B ? pr : r; /* the short batch's model */
        resnet_batch(train, order, k * B, b, o->no_flip ? 0 : z + (uint64_t)*step, x, y);
        float loss;
        hx_feed feeds[2] = {{NULL, m->m.images, x, sizeof *x * (size_t)b * RESNET_PIXELS},
                            {NULL, m->m.labels, y, sizeof *y * (size_t)b}};
        hx_fetch f = {NULL, m->m.loss, &loss, sizeof loss};
        double scale = resnet_lr_scale(&o->optim, *step, total);
        if (b < B ? cli_partial_step(part, r->s, scale, feeds, 2, &f, 1)
                  : hx_session_set_lr_scale(r->s, scale) ||
                        hx_session_run(r->s, feeds, 2, &f, 1, HX_RUN_TRAIN)) {
            cli_progress_end(&bar);
            char what[64];
            snprintf(what, sizeof what, "epoch %d step %lld", epoch, (long long)k + 1);
            cli_error("resnet", what, hx_last_error());
            return -1;
        }
        loss_sum += (double)loss * b;
        at->loss_sum = loss_sum;
        at->done = k + 1;
        cli_progress_update(&bar, (double)(k * B + b - from * B),
                            loss_sum / (double)(k * B + b));
        cli_metrics_begin(mt, "step");
        cli_metrics_int(mt, "epoch", epoch);
        cli_metrics_int(mt, "step", *step + 1);
        cli_metrics_int(mt, "rows", b);
        cli_metrics_num(mt, "loss", loss);
        cli_metrics_num(mt, "lr", o->optim.lr * scale);
        if (!cli_metrics_end(mt)) {
            cli_progress_end(&bar);
            return -1;
        }
        cli_interrupt_tick();
        if (cli_interrupted() && k + 1 < steps) {
            cli_progress_end(&bar);
            (*step)++;
            return 1;
        }
    }
    cli_progress_end(&bar);
    return 0;
}

int resnet_main(int argc, char **argv)
{
    options o = {.model = {.width = 16, .blocks = 3, .batch = 128, .dtype = HX_DTYPE_F32},
                 .optim = {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .warmup = 200},
                 .data = "data/fashion-mnist", .epochs = 3, .seed = 1,
                 .accelerator = HX_ACCELERATOR_AUTO, .progress_interval = 10};
    int prc = parse(argc, argv, &o);
    if (prc) return prc == CLI_HELP ? 0 : prc;

    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = o.threads;
    cfg.seed = o.seed;
    cfg.accelerator = o.accelerator;
    cfg.max_device_memory = o.max_device_memory;
    cfg.loss_scale.enabled = o.model.dtype == HX_DTYPE_F16;
    if (o.offload_config && hx_offload_config_parse(o.offload_config, &cfg.offload)) {
        cli_error("resnet", "--offload-config", hx_last_error());
        return 2;
    }
    resnet_set train = {0}, test = {0};
    if (load(&o, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", o.train_limit, &train) ||
        load(&o, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", o.test_limit, &test)) {
        resnet_set_free(&train);
        return 1;
    }
    int B = o.model.batch, rc = 1;
    cli_metrics metrics = {0};
    if (train.n < B && !o.partial_batch) {
        cli_flag_error("resnet", "--batch %d is more than the %lld training images: give --batch "
                       "%lld or less, or --partial-batch to train them as one short batch", B,
                       (long long)train.n, (long long)train.n);
        resnet_set_free(&train);
        resnet_set_free(&test);
        return 2;
    }
    float *x = malloc(sizeof *x * (size_t)B * RESNET_PIXELS);
    int32_t *y = malloc(sizeof *y * (size_t)B);
    int64_t *order = malloc(sizeof *order * (size_t)train.n);
    resnet_run r = {0}, pr = {0}; /* pr: --partial-batch's model at the short batch */
    cli_partial part = {0};
    if (!x || !y || !order) {
        fprintf(stderr, "hetex resnet: out of host memory\n");
        goto out;
    }
    for (int64_t i = 0; i < train.n; i++) order[i] = i;
    printf("hetex resnet: ResNet-%d (width %d), batch %d, %s; %lld training, %lld test images "
           "from %s\n", 6 * o.model.blocks + 2, o.model.width, B, hx_dtype_name(o.model.dtype),
           (long long)train.n, (long long)test.n, o.data);
    if (resnet_run_create(&o.model, &o.optim, &cfg, &r)) {
        cli_error("resnet", NULL, hx_last_error());
        goto out;
    }
    cli_print_accelerator(stdout, "resnet", r.s);
    if (train.n % B && o.partial_batch) {
        resnet_config short_batch = o.model;
        short_batch.batch = (int)(train.n % B);
        if (resnet_run_graph(&short_batch, &o.optim, &pr)) {
            cli_error("resnet", "--partial-batch", hx_last_error());
            goto out;
        }
        if (!cli_partial_open(&part, "resnet", pr.g, &cfg)) goto out;
        printf("hetex resnet: %lld full batches and a short one of %lld images an epoch "
               "(--partial-batch): all %lld images trained\n", (long long)(train.n / B),
               (long long)(train.n % B), (long long)train.n);
    } else if (train.n % B) {
        printf("hetex resnet: %lld full batches an epoch; the %lld images past them (a partial "
               "batch, other images each epoch as they are shuffled) are not trained on "
               "(--partial-batch trains them)\n",
               (long long)(train.n / B), (long long)(train.n % B));
    }
    if (!cli_metrics_open(&metrics, "resnet", o.metrics, o.tensorboard, o.resume != NULL)) goto out;
    printf("%lld parameters; SGD lr %g (warmup %d, cosine), momentum %g, weight decay %g; "
           "%d epochs\n", (long long)r.m.n_params, o.optim.lr, o.optim.warmup, o.optim.momentum,
           o.optim.weight_decay, o.epochs);
    fflush(stdout);
    int64_t images = epoch_images(&o, train.n), steps = (images + B - 1) / B;
    int64_t total = (int64_t)o.epochs * steps;
    resnet_resume at = {.epoch = 1};
    const resnet_identity id = {&o.model, &o.optim, o.epochs, !o.no_flip, o.partial_batch,
                                o.seed, train.n, resnet_set_hash(&train)};
    if (o.resume) {
        if (!resnet_checkpoint_load(o.resume, r.s, &id, &at)) goto out;
        printf("hetex resnet: resumed from '%s' at epoch %d, step %lld of %lld\n", o.resume,
               at.epoch, (long long)at.step, (long long)total);
        for (int e = 1; e < at.epoch && e <= o.epochs; e++) shuffle(order, train.n, o.seed, e);
    }
    if (at.epoch > o.epochs)
        printf("hetex resnet: the checkpoint is after the last epoch; nothing left to train\n");
    cli_interrupt_arm();
    double t0 = cli_now();
    for (int e = at.epoch; e <= o.epochs; e++) {
        double acc, t_epoch = cli_now();
        int64_t first = at.done;
        uint64_t z = shuffle(order, train.n, o.seed, e);
        int stopped = train_epoch(&r, &pr, &part, &o, &train, order, z, &at, total, x, y, &metrics);
        if (stopped < 0) goto out;
        if (stopped) {
            bool saved = o.save && resnet_checkpoint_save(o.save, r.s, &id, &at);
            if (o.save && !saved) goto out;
            printf("hetex resnet: interrupted (%s) at epoch %d, step %lld of %lld; %s%s%s\n",
                   cli_interrupted() == SIGINT ? "Ctrl-C" : "SIGTERM", e, (long long)at.step,
                   (long long)total, saved ? "saved to '" : "nothing saved (--save DIR keeps a run)",
                   saved ? o.save : "", saved ? "': continue with the same flags and --resume "
                   "it" : "");
            rc = CLI_EXIT_INTERRUPTED;
            goto out;
        }
        double train_s = cli_now() - t_epoch, loss = at.loss_sum / (double)images;
        double rate = (double)(images - first * B) / train_s;
        if (resnet_accuracy(&r, B, &test, test.n, x, y, &acc)) {
            cli_error("resnet", "evaluation", hx_last_error());
            goto out;
        }
        char took[32];
        cli_duration(cli_now() - t0, took, sizeof took);
        printf("epoch %d  train loss %.4f  %.1f images/s  test accuracy %.2f%% (%lld images)  "
               "%s\n", e, loss, rate, 100 * acc, (long long)test.n, took);
        fflush(stdout);
        cli_metrics_begin(&metrics, "epoch");
        cli_metrics_int(&metrics, "epoch", e);
        cli_metrics_int(&metrics, "step", at.step);
        cli_metrics_num(&metrics, "train_loss", loss);
        cli_metrics_num(&metrics, "test_accuracy", acc);
        cli_metrics_num(&metrics, "images_per_s", rate);
        if (!cli_metrics_end(&metrics)) goto out;
        at = (resnet_resume){.epoch = e + 1, .step = at.step};
        if (o.save && !resnet_checkpoint_save(o.save, r.s, &id, &at)) goto out;
    }

    rc = cli_metrics_close(&metrics) ? 0 : 1;
out:
    cli_metrics_close(&metrics);
    cli_partial_close(&part);
    resnet_run_free(&pr);
    resnet_run_free(&r);
    resnet_set_free(&train);
    resnet_set_free(&test);
    free(x);
    free(y);
    free(order);
    return rc;
}
