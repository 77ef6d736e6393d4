/* Reader configurations: defaults, the Adult and Criteo presets, checking
 * and copying a schema. */
#include "input/input.h"

#include <stdlib.h>
#include <string.h>

hx_reader_config hx_reader_config_default(void)
{
    hx_reader_config c;
    memset(&c, 0, sizeof c);
    c.delimiter = ',';
    c.quotes = true;
    c.on_malformed = HX_MALFORMED_SKIP;
    c.batch_size = 256;
    c.n_threads = 1;
    c.block_bytes = (size_t)1 << 20;
    c.max_blocks = 0; /* 0: 2 * n_threads + 2, resolved at open */
    c.max_line_bytes = (size_t)64 << 10;
    return c;
}

static const hx_column_spec adult_columns[15] = {
    {"age", HX_COLUMN_NUMERIC, 0, 0},
    {"workclass", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"fnlwgt", HX_COLUMN_NUMERIC, 0, 0},
    {"education", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"education_num", HX_COLUMN_NUMERIC, 0, 0},
    {"marital_status", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"occupation", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"relationship", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"race", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"sex", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"capital_gain", HX_COLUMN_NUMERIC, 0, 0},
    {"capital_loss", HX_COLUMN_NUMERIC, 0, 0},
    {"hours_per_week", HX_COLUMN_NUMERIC, 0, 0},
    {"native_country", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"income", HX_COLUMN_LABEL, 0, 0},
};
static const hx_label_map adult_labels[2] = {{"<=50K", 0.0f}, {">50K", 1.0f}};

hx_reader_config hx_reader_config_adult(bool test_file)
{
    hx_reader_config c = hx_reader_config_default();
    c.columns = adult_columns;
    c.n_columns = 15;
    c.trim_spaces = true;
    c.missing_token = "?";
    c.labels = adult_labels;
    c.n_labels = 2;
    if (test_file) {
        c.skip_lines = 1;      /* "|1x3 Cross validator" */
        c.label_suffix = ".";  /* "<=50K." */
    }
    return c;
}

static const hx_column_spec criteo_columns[40] = {
    {"label", HX_COLUMN_LABEL, 0, 0},
#define I(k) {"I" #k, HX_COLUMN_NUMERIC, 0, 0}
    I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), I(9), I(10), I(11), I(12), I(13),
#undef I
#define C(k) {"C" #k, HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HEX}
    C(1), C(2), C(3), C(4), C(5), C(6), C(7), C(8), C(9), C(10), C(11), C(12), C(13),
    C(14), C(15), C(16), C(17), C(18), C(19), C(20), C(21), C(22), C(23), C(24), C(25), C(26),
#undef C
};

hx_reader_config hx_reader_config_criteo(void)
{
    hx_reader_config c = hx_reader_config_default();
    c.columns = criteo_columns;
    c.n_columns = 40;
    c.delimiter = '\t';
    c.quotes = false;
    return c;
}

int hx_reader_config_find(const hx_reader_config *cfg, const char *name)
{
    if (!cfg || !name || !cfg->columns) return -1;
    int nn = 0, nc = 0;
    for (int i = 0; i < cfg->n_columns; i++) {
        const hx_column_spec *c = &cfg->columns[i];
        bool match = c->name && strcmp(c->name, name) == 0;
        if (c->kind == HX_COLUMN_NUMERIC) {
            if (match) return nn;
            nn++;
        } else if (c->kind == HX_COLUMN_CATEGORICAL) {
            if (match) return nc;
            nc++;
        }
    }
    return -1;
}

const char *hx_malformed_reason_name(hx_malformed_reason r)
{
    static const char *names[HX_MALFORMED_REASON_COUNT] = {
        "wrong number of columns", "unparsable number", "bad label", "bad quoting",
        "line too long"};
    return (unsigned)r < HX_MALFORMED_REASON_COUNT ? names[r] : "(unknown reason)";
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = true;
    return d;
}

void hx__schema_free(hx__schema *s)
{
    if (s->names)
        for (int i = 0; i < s->cfg.n_columns; i++) free(s->names[i]);
    if (s->label_texts)
        for (int i = 0; i < s->cfg.n_labels; i++) free(s->label_texts[i]);
    free(s->names);
    free(s->label_texts);
    free(s->columns);
    free(s->labels);
    free(s->slot);
    free(s->missing_token);
    free(s->label_suffix);
    memset(s, 0, sizeof *s);
}

static hx_status check(const hx_reader_config *c)
{
    const char *w = "hx_reader_open";
    if (!c->columns || c->n_columns <= 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: the schema has no columns (set columns and n_columns, "
                         "or start from hx_reader_config_adult/criteo)", w);
    if (c->delimiter == '\n' || c->delimiter == '\r' || c->delimiter == '"' || c->delimiter == 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: delimiter %d cannot separate fields", w,
                         c->delimiter);
    if (c->trim_spaces && (c->delimiter == ' ' || c->delimiter == '\t'))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: trim_spaces with a space or tab delimiter would "
                         "trim the delimiter; turn one of them off", w);
    if (c->batch_size < 1)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: batch_size %lld must be >= 1", w,
                         (long long)c->batch_size);
    if (c->n_threads < 1 || c->n_threads > 256)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: n_threads %d must be in 1..256", w, c->n_threads);
    if (c->max_blocks != 0 && (c->max_blocks < 2 || c->max_blocks > 4096))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: max_blocks %d must be 0 (automatic) or 2..4096",
                         w, c->max_blocks);
    if (c->block_bytes < 64 || c->block_bytes > ((size_t)1 << 30))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: block_bytes %zu must be in 64 .. 1 GiB", w,
                         c->block_bytes);
    if (c->max_line_bytes < 16 || c->max_line_bytes > ((size_t)1 << 30))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: max_line_bytes %zu must be in 16 .. 1 GiB", w,
                         c->max_line_bytes);
    if (c->skip_lines < 0 || c->shuffle_rows < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: skip_lines and shuffle_rows must be >= 0", w);
    if (c->n_labels < 0 || (c->n_labels > 0 && !c->labels))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: n_labels %d without a labels array", w, c->n_labels);
    int n_label = 0;
    for (int i = 0; i < c->n_columns; i++) {
        const hx_column_spec *col = &c->columns[i];
        if ((unsigned)col->kind > HX_COLUMN_CATEGORICAL)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d has an unknown kind %d", w, i, col->kind);
        if (col->kind == HX_COLUMN_CATEGORICAL && (unsigned)col->parse > HX_CATEGORY_HEX)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d has an unknown category parse %d", w,
                             i, col->parse);
        n_label += col->kind == HX_COLUMN_LABEL;
    }
    if (n_label > 1)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: the schema has %d label columns; at most one", w,
                         n_label);
    if (n_label == 0 && c->n_labels > 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: a label map but no label column", w);
    for (int i = 0; i < c->n_labels; i++)
        if (!c->labels[i].text)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: label map entry %d has no text", w, i);
    return HX_OK;
}

hx_status hx__schema_init(hx__schema *s, const hx_reader_config *cfg)
{
    memset(s, 0, sizeof *s);
    if (!cfg) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_reader_open: config is NULL");
    hx_status st = check(cfg);
    if (st) return st;
    s->cfg = *cfg;
    int n = cfg->n_columns;
    bool oom = false;
    s->columns = malloc(sizeof *s->columns * (size_t)n);
    s->names = calloc((size_t)n, sizeof *s->names);
    s->slot = malloc(sizeof *s->slot * (size_t)n);
    if (cfg->n_labels) {
        s->labels = malloc(sizeof *s->labels * (size_t)cfg->n_labels);
        s->label_texts = calloc((size_t)cfg->n_labels, sizeof *s->label_texts);
        oom |= !s->labels || !s->label_texts;
    }
    oom |= !s->columns || !s->names || !s->slot;
    s->label_column = -1;
    for (int i = 0; !oom && i < n; i++) {
        s->columns[i] = cfg->columns[i];
        s->names[i] = dup_or_null(cfg->columns[i].name, &oom);
        s->columns[i].name = s->names[i];
        switch (cfg->columns[i].kind) {
        case HX_COLUMN_NUMERIC: s->slot[i] = s->n_numeric++; break;
        case HX_COLUMN_CATEGORICAL: s->slot[i] = s->n_categorical++; break;
        case HX_COLUMN_LABEL: s->slot[i] = -1; s->label_column = i; break;
        default: s->slot[i] = -1; break;
        }
    }
    for (int i = 0; !oom && i < cfg->n_labels; i++) {
        s->labels[i] = cfg->labels[i];
        s->label_texts[i] = dup_or_null(cfg->labels[i].text, &oom);
        s->labels[i].text = s->label_texts[i];
    }
    s->missing_token = dup_or_null(cfg->missing_token, &oom);
    s->label_suffix = dup_or_null(cfg->label_suffix, &oom);
    if (oom) {
        hx__schema_free(s);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_reader_open: out of host memory copying the schema");
    }
    s->missing_len = s->missing_token ? strlen(s->missing_token) : 0;
    s->suffix_len = s->label_suffix ? strlen(s->label_suffix) : 0;
    s->cfg.columns = s->columns;
    s->cfg.labels = s->labels;
    s->cfg.missing_token = s->missing_token;
    s->cfg.label_suffix = s->label_suffix;
    if (s->cfg.max_blocks == 0) s->cfg.max_blocks = 2 * cfg->n_threads + 2;
    return HX_OK;
}
