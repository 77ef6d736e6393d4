/* libFuzzer target: the op cost cache file (session/op_costs.c; the
 * placement planner's measured op times, in $HOME/.cache/hetex/op_costs)
 * over any bytes. A file is taken whole or ignored: every time it gives
 * must be in (0, 1000) seconds; after one entry is put (one it gave, so
 * that a full file drops none of them, else a new one), the save must load
 * again with that entry and the others it gave (to the 9 digits a save
 * keeps). Seeds: caches hetex wrote (seeds.c). */
#include "fuzz_common.h"
#include "session/session.h"

#include <math.h>
#include <stdlib.h>

enum { MACHINE_SIGS = 8 }; /* signatures looked up */
#define FUZZ_MACHINE FUZZ_OP_COSTS_MACHINE
#define sig_at fuzz_op_costs_sig

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("op_costs", data, size);
    hx_op_costs *c = NULL;
    if (hx__op_costs_open(path, FUZZ_MACHINE, &c)) return 0;
    double got[MACHINE_SIGS];
    bool have[MACHINE_SIGS];
    for (int i = 0; i < MACHINE_SIGS; i++) {
        have[i] = hx__op_costs_get(c, sig_at(i), &got[i], NULL);
        if (have[i] && !(got[i] > 0 && got[i] < 1000)) abort();
    }
    int put = 0;
    while (put < MACHINE_SIGS && !have[put]) put++;
    if (hx__op_costs_put(c, sig_at(put), 2.5e-4, "matmul") == HX_OK && hx__op_costs_save(c) == HX_OK) {
        hx_op_costs *again = NULL;
        double s;
        if (hx__op_costs_open(path, FUZZ_MACHINE, &again)) abort();
        if (!hx__op_costs_get(again, sig_at(put), &s, NULL) || s != 2.5e-4) abort();
        for (int i = 0; i < MACHINE_SIGS; i++)
            if (i != put && have[i] &&
                (!hx__op_costs_get(again, sig_at(i), &s, NULL) || fabs(s - got[i]) > 1e-8 * got[i]))
                abort();
        hx__op_costs_free(again);
    }
    hx__op_costs_free(c);
    return 0;
}
