/* Exact AUC, accuracy and log loss. */
#include "wd.h"

#include <math.h>
#include <stdlib.h>

typedef struct scored {
    float p, y;
} scored;

static int by_score(const void *a, const void *b)
{
    float x = ((const scored *)a)->p, y = ((const scored *)b)->p;
    return (x > y) - (x < y);
}

/* AUC = P(score of a random positive > score of a random negative), ties
 * one half: the Mann-Whitney U over ranks, tied scores sharing their mean
 * rank. */
hx_status wd_metrics_compute(const float *p, const float *y, int64_t n, wd_metrics *out)
{
    scored *s = malloc(sizeof *s * (n ? n : 1));
    if (!s) return HX_ERR_OUT_OF_MEMORY;
    double pos = 0, right = 0, loss = 0;
    for (int64_t i = 0; i < n; i++) {
        s[i] = (scored){p[i], y[i]};
        pos += y[i] > 0.5f;
        right += (p[i] > 0.5f) == (y[i] > 0.5f);
        double q = fmin(fmax(p[i], 1e-7), 1 - 1e-7);
        loss -= y[i] > 0.5f ? log(q) : log(1 - q);
    }
    qsort(s, (size_t)n, sizeof *s, by_score);
    double rank_sum = 0; /* ranks of the positives, 1-based */
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        double tied_pos = 0;
        while (j < n && s[j].p == s[i].p) tied_pos += s[j++].y > 0.5f;
        rank_sum += tied_pos * (i + 1 + j) / 2.0; /* mean of ranks i+1 .. j */
        i = j;
    }
    free(s);
    double neg = n - pos;
    out->n = n;
    out->auc = pos && neg ? (rank_sum - pos * (pos + 1) / 2) / (pos * neg) : NAN;
    out->accuracy = n ? right / n : NAN;
    out->log_loss = n ? loss / n : NAN;
    return HX_OK;
}
