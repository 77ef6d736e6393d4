/* --criteo-generate: Criteo-schema training and test files from the
 * generator (hx_generator_write_tsv), in a temporary folder of this
 * process that the run removes. */
#include "wd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const files[2] = {"train.tsv", "test.tsv"};

hx_status wd_criteo_generate(const wd_options *o, char *dir, size_t dir_len, char *msg, size_t msg_len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, dir_len, "%s/hetex-criteo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        snprintf(msg, msg_len, "--criteo-generate: cannot make a folder '%s' (set TMPDIR to a writable one)", dir);
        *dir = 0;
        return HX_ERR_IO;
    }
    hx_generator_config gc = hx_generator_config_default();
    gc.seed = o->seed;
    gc.vocab_size = o->criteo_vocab;
    gc.zipf_exponent = o->criteo_zipf;
    int64_t test_rows = o->criteo_generate / 4 > o->batch ? o->criteo_generate / 4 : o->batch;
    for (int k = 0; k < 2; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        gc.n_rows = k ? test_rows : o->criteo_generate;
        gc.first_row = k ? o->criteo_generate : 0; /* the test rows follow the training rows */
        hx_status st = hx_generator_write_tsv(&gc, path);
        if (st) {
            snprintf(msg, msg_len, "--criteo-generate: %s", hx_last_error());
            return st;
        }
    }
    return HX_OK;
}

void wd_criteo_remove(const char *dir)
{
    if (!*dir) return;
    for (int k = 0; k < 2; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        remove(path);
    }
    rmdir(dir);
}
