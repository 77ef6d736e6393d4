/* Text from the model: each next character drawn from the softmax of its
 * scores at the last position of the window so far (causal attention:
 * later positions, padding here, do not change it). */
#include "gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* An id drawn from softmax(scores) with the uniform u in [0, 1). */
static int draw(const float *scores, int v, double u)
{
    double top = scores[0], sum = 0;
    for (int i = 1; i < v; i++) top = fmax(top, scores[i]);
    for (int i = 0; i < v; i++) sum += exp(scores[i] - top);
    double want = u * sum, acc = 0;
    for (int i = 0; i < v; i++) {
        acc += exp(scores[i] - top);
        if (acc > want) return i;
    }
    return v - 1;
}

hx_status gpt_sample(hx_session *s, const gpt_model *m, const gpt_config *c, const gpt_text *t,
                     int n, uint64_t seed, char *out)
{
    int B = c->batch, T = c->context, V = c->vocab;
    size_t n_tok = (size_t)B * T;
    int32_t *tok = calloc(n_tok, sizeof *tok), *tgt = calloc(n_tok, sizeof *tgt);
    float *scores = malloc(sizeof *scores * n_tok * (size_t)V);
    hx_status st = tok && tgt && scores ? HX_OK : HX_ERR_OUT_OF_MEMORY;
    int len = 1; /* ids in row 0's window */
    const unsigned char *nl = memchr(t->chars, '\n', (size_t)V);
    tok[0] = nl ? (int32_t)(nl - t->chars) : 0;
    uint64_t rng = seed ^ 0x5A3B1E5EEDull;
    for (int i = 0; i < n && !st; i++) {
        hx_feed feeds[2] = {{NULL, m->tokens, tok, sizeof *tok * n_tok},
                            {NULL, m->targets, tgt, sizeof *tgt * n_tok}};
        hx_fetch fetch = {NULL, m->logits, scores, sizeof *scores * n_tok * (size_t)V};
        if ((st = hx_session_run(s, feeds, 2, &fetch, 1, 0))) break;
        double u = (double)(next(&rng) >> 11) * 0x1p-53;
        int id = draw(scores + (size_t)(len - 1) * V, V, u);
        out[i] = (char)t->chars[id];
        if (len == T) memmove(tok, tok + 1, sizeof *tok * (size_t)(T - 1));
        else len++;
        tok[len - 1] = id;
    }
    out[st ? 0 : n] = 0;
    free(tok);
    free(tgt);
    free(scores);
    return st;
}
