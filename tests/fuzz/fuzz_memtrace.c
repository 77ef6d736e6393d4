/* libFuzzer target: the memory-trace loader and replay (hx_memreplay) on
 * any bytes, with a device capacity taken from the first two bytes (0: no
 * cap). Seeds: traces hetex recorded (seeds.c) and hand-written ones. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t capacity = ((size_t)data[0] << 8 | data[1]) * 4096;
    hx_memreplay_report r;
    hx_memreplay(fuzz_file("trace", data + 2, size - 2), capacity, &r);
    return 0;
}
