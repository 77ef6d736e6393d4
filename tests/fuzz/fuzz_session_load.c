/* libFuzzer target: hx_session_load of any bytes into a fixed session (a
 * two-layer MLP on emu with Adam and loss scaling, fuzz_common.c), then one
 * training step. A refused file must leave the session as it was; after
 * an accepted one the step may fail but must not crash, and the session is
 * put back from its pristine checkpoint. Seeds: checkpoints of this model
 * (seeds.c). */
#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

static fuzz_session_model model;
static char pristine[512];
static float w1_before[6 * 5];

static void setup(void)
{
    fuzz_session_model_make(&model, NULL, 0);
    const char *p = fuzz_file("pristine", NULL, 0);
    strcpy(pristine, p);
    if (hx_session_save(model.s, pristine) ||
        hx_session_read(model.s, hx_graph_find(model.g, "w1"), w1_before, sizeof w1_before))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!model.s) setup();
    const char *path = fuzz_file("ckpt", data, size);
    hx_status st = hx_session_load(model.s, path);
    if (st) { /* refused: nothing changed */
        float w1[6 * 5];
        if (hx_session_read(model.s, hx_graph_find(model.g, "w1"), w1, sizeof w1) ||
            memcmp(w1, w1_before, sizeof w1))
            abort();
        return 0;
    }
    fuzz_session_model_step(&model);
    if (hx_session_load(model.s, pristine)) abort();
    return 0;
}
