/* The ceiling loops of the mixed-precision Adam step's memory shape, for
 * bench_optim (its ceiling-mp-shape cases) and bench_zero (the host
 * update's ceiling per rank): trivial arithmetic over the arrays the
 * kernel reads and writes, 28 bytes per parameter (f32 master, m, v read
 * and written; the 16-bit gradient read; the 16-bit copy written). Each
 * adds g * z with z = 0 at run time (pass a zero the compiler cannot
 * see): every byte moves as in the kernel and the data stays as it was. */
#ifndef HX_BENCH_OPTIM_CEILING_H
#define HX_BENCH_OPTIM_CEILING_H

#include <stdint.h>

/* One clone per ISA, picked at load time as the kernels' paths are. */
#define CEIL_FN __attribute__((target_clones("avx512f", "avx2", "default")))

/* Bytes each loop moves per parameter. */
#define CEILING_MP_BYTES 28

/* p, m, v += g * z (g as bf16); h = the top half of p: plain, with the
 * kernels' software prefetch (HX_OPTIM_PF_DIST ahead), and prefetching
 * with h written by non-temporal stores (as the kernels write a long
 * aligned half copy). */
void shape_mp(float *restrict p, float *restrict m, float *restrict v, const uint16_t *restrict g,
              uint16_t *restrict h, float z, int64_t n);
void shape_mp_pf(float *restrict p, float *restrict m, float *restrict v, const uint16_t *restrict g,
                 uint16_t *restrict h, float z, int64_t n);
void shape_mp_nt(float *restrict p, float *restrict m, float *restrict v, const uint16_t *restrict g,
                 uint16_t *restrict h, float z, int64_t n);

#endif
