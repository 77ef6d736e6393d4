/* Direct convolutions (conv_ref.h): one loop over every product of input
 * pixel and tap that lands in the image, added where the direction puts it. */
#include "conv_ref.h"

#include <math.h>
#include <string.h>

int64_t conv_ref_numel(conv_ref_dir dir, const hx_k_window *w, int64_t C_out, int64_t groups)
{
    if (dir == CONV_REF_FORWARD) return w->N * C_out * w->OH * w->OW;
    if (dir == CONV_REF_BACKWARD_DATA) return w->N * w->C * w->H * w->W;
    return C_out * (w->C / groups) * w->kh * w->kw;
}

void conv_ref(conv_ref_dir dir, const hx_k_window *w, int64_t C_out, int64_t groups,
              const float *a, const float *b, double *out, double *mag)
{
    int64_t n_out = conv_ref_numel(dir, w, C_out, groups), Cg = w->C / groups,
            Cog = C_out / groups;
    memset(out, 0, sizeof *out * n_out);
    if (mag) memset(mag, 0, sizeof *mag * n_out);
    for (int64_t n = 0; n < w->N; n++)
        for (int64_t co = 0; co < C_out; co++)
            for (int64_t ci = 0; ci < Cg; ci++)
                for (int64_t i = 0; i < w->kh; i++)
                    for (int64_t j = 0; j < w->kw; j++)
                        for (int64_t oh = 0; oh < w->OH; oh++)
                            for (int64_t ow = 0; ow < w->OW; ow++) {
                                int64_t ih = oh * w->sh - w->ph + i * w->dh;
                                int64_t iw = ow * w->sw - w->pw + j * w->dw;
                                if (ih < 0 || ih >= w->H || iw < 0 || iw >= w->W) continue;
                                int64_t c = co / Cog * Cg + ci;
                                int64_t px = ((n * w->C + c) * w->H + ih) * w->W + iw;
                                int64_t tw = ((co * Cg + ci) * w->kh + i) * w->kw + j;
                                int64_t py = ((n * C_out + co) * w->OH + oh) * w->OW + ow;
                                int64_t o = dir == CONV_REF_FORWARD ? py
                                          : dir == CONV_REF_BACKWARD_DATA ? px : tw;
                                double p = dir == CONV_REF_FORWARD ? (double)a[px] * b[tw]
                                         : dir == CONV_REF_BACKWARD_DATA ? (double)a[py] * b[tw]
                                                                         : (double)a[py] * b[px];
                                out[o] += p;
                                if (mag) mag[o] += fabs(p);
                            }
}
