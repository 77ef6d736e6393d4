/* The input check before training: one pass over a file through its
 * reader, so that input that cannot train (an empty file, one whose every
 * row is malformed, fewer rows than one batch without --partial-batch, a
 * test set of one class, where AUC means nothing) is an error naming the
 * file and the flag to change, and the rows skipped as malformed are
 * counted per reason. */
#include "wd.h"

#include <stdio.h>
#include <string.h>

/* "3 malformed rows skipped (2 wrong number of columns, 1 bad label);
 * the first at line 17: ..." into buf; "" when none were. */
static void malformed_text(const hx_reader_stats *rs, char *buf, size_t n)
{
    *buf = 0;
    if (!rs->malformed) return;
    size_t k = (size_t)snprintf(buf, n, "%lld malformed row%s skipped (", (long long)rs->malformed,
                                rs->malformed == 1 ? "" : "s");
    bool first = true;
    for (int r = 0; r < HX_MALFORMED_REASON_COUNT && k < n; r++) {
        if (!rs->malformed_by_reason[r]) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%lld %s", first ? "" : ", ",
                              (long long)rs->malformed_by_reason[r],
                              hx_malformed_reason_name((hx_malformed_reason)r));
        first = false;
    }
    if (k < n)
        snprintf(buf + k, n - k, "); the first at line %lld: %s", (long long)rs->first_malformed_line,
                 rs->first_malformed);
}

hx_status wd_input_check(hx_reader *r, const char *path, int64_t batch, bool partial, bool test,
                         wd_input *out, char *msg, size_t msg_len)
{
    memset(out, 0, sizeof *out);
    const hx_batch *b;
    hx_status st;
    while (!(st = hx_reader_next(r, &b)) && b)
        for (int64_t i = 0; i < b->n; i++) out->positives += b->labels[i] > 0.5f;
    hx_reader_stats rs;
    if (st || (st = hx_reader_stats_get(r, &rs)) || (st = hx_reader_rewind(r))) return st;
    out->rows = rs.rows;
    out->malformed = rs.malformed;
    malformed_text(&rs, out->malformed_text, sizeof out->malformed_text);
    const char *flag = test ? "the test file" : "the training file";
    if (!rs.rows && !rs.malformed) {
        snprintf(msg, msg_len, "%s '%s' has no rows (%lld lines): nothing to %s; check --data",
                 flag, path, (long long)rs.lines, test ? "evaluate" : "train on");
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (!rs.rows) {
        snprintf(msg, msg_len, "%s '%s' has no good row: %s; check --data", flag, path,
                 out->malformed_text);
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (!test && !partial && rs.rows < batch) {
        snprintf(msg, msg_len, "%s '%s' has %lld rows, fewer than one batch of %lld: give "
                 "--batch %lld or less, or --partial-batch to train them as one short batch",
                 flag, path, (long long)rs.rows, (long long)batch, (long long)rs.rows);
        return HX_ERR_INVALID_ARGUMENT;
    }
    if (test && (out->positives == 0 || out->positives == rs.rows)) {
        snprintf(msg, msg_len, "%s '%s' has labels of one class only (%lld rows, all %s): its "
                 "AUC is undefined; give a test file with both classes", flag, path,
                 (long long)rs.rows, out->positives ? "positive" : "negative");
        return HX_ERR_INVALID_ARGUMENT;
    }
    return HX_OK;
}
