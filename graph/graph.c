/* Graph and tensor objects: creation, names, targets, errors. */
#include "graph/graph.h"
#include "embedding/embedding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- shapes ----------------------------------------------------------------- */

bool hx__is_dense_update(const hx_tensor *t)
{
    return t->op == HX_OP_SGD_UPDATE || t->op == HX_OP_ADAM_UPDATE ||
           t->op == HX_OP_ADAGRAD_UPDATE || t->op == HX_OP_FTRL_UPDATE;
}

int64_t hx__numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

bool hx__numel_checked(int ndim, const int64_t *shape, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] > HX_MAX_ELEMENTS / n) return false;
        n *= shape[i];
    }
    *out = n;
    return true;
}

bool hx__same_shape(const hx_tensor *a, const hx_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim);
}

bool hx__broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                         int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) { /* i counts from the right */
        int64_t da = i < na ? a[na - 1 - i] : 1, db = i < nb ? b[nb - 1 - i] : 1;
        if (da != db && da != 1 && db != 1) return false;
        out[n - 1 - i] = da == 1 ? db : da;
    }
    *nout = n;
    return true;
}

const char *hx__shape_str(const hx_tensor *t, char *buf, size_t n)
{
    size_t k = 0;
    k += snprintf(buf + k, n - k, "[");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static char *copy_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    return c ? memcpy(c, s, n) : NULL;
}

/* ---- names ------------------------------------------------------------------- */

static size_t name_hash(const char *s) { return (size_t)XXH3_64bits(s, strlen(s)); }

static hx_tensor **name_slot(const hx_name_map *m, const char *name)
{
    size_t mask = m->cap - 1, i = name_hash(name) & mask;
    while (m->slots[i] && strcmp(m->slots[i]->name, name)) i = (i + 1) & mask;
    return &m->slots[i];
}

static hx_tensor *name_find(const hx_name_map *m, const char *name)
{
    return m->cap ? *name_slot(m, name) : NULL;
}

static bool name_insert(hx_name_map *m, hx_tensor *t)
{
    if (2 * (m->count + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        hx_tensor **old = m->slots;
        size_t oldcap = m->cap;
        m->slots = calloc(cap, sizeof *m->slots);
        if (!m->slots) { m->slots = old; return false; }
        m->cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i]) *name_slot(m, old[i]->name) = old[i];
        free(old);
    }
    *name_slot(m, t->name) = t;
    m->count++;
    return true;
}

/* Deletion with backward-shift so that probe chains stay intact. */
static void name_remove(hx_name_map *m, const hx_tensor *t)
{
    size_t mask = m->cap - 1;
    hx_tensor **slot = name_slot(m, t->name);
    if (*slot != t) return;
    size_t i = (size_t)(slot - m->slots), j = i;
    m->slots[i] = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->slots[j]) break;
        size_t home = name_hash(m->slots[j]->name) & mask;
        /* move j back to i unless its home lies cyclically in (i, j] */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            m->slots[i] = m->slots[j];
            m->slots[j] = NULL;
            i = j;
        }
    }
    m->count--;
}

hx_tensor *hx_graph_find(const hx_graph *g, const char *name)
{
    if (!g || !name) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_find: %s is NULL", g ? "name" : "graph");
        return NULL;
    }
    hx_tensor *t = name_find(&g->names, name);
    if (!t)
        hx__error(HX_ERR_NOT_FOUND,
                  "hx_graph_find: no tensor named '%s' in this graph (names are case-sensitive; "
                  "op outputs are named like 'matmul_7' unless renamed)", name);
    return t;
}

/* ---- graph ------------------------------------------------------------------- */

hx_graph *hx_graph_create(void)
{
    hx_graph *g = calloc(1, sizeof *g);
    if (!g) hx__error(HX_ERR_OUT_OF_MEMORY, "hx_graph_create: out of host memory");
    else atomic_init(&g->holders, 1); /* the user's, until hx_graph_free */
    return g;
}

static void tensor_free(hx_tensor *t)
{
    free(t->name);
    free(t->src);
    free(t->constant);
    free(t->optimizer);
    free(t->emb_update);
    free(t);
}

static void graph_destroy(hx_graph *g)
{
    for (int i = 0; i < g->n_tables; i++) hx__embedding_use(g->tables[i].table, -1);
    free(g->tables);
    for (int i = 0; i < g->n; i++) tensor_free(g->tensors[i]);
    free(g->tensors);
    free(g->names.slots);
    free(g);
}

void hx__graph_hold(hx_graph *g) { atomic_fetch_add(&g->holders, 1); }

void hx__graph_release(hx_graph *g)
{
    if (atomic_fetch_sub(&g->holders, 1) == 1) graph_destroy(g);
}

/* With sessions alive the graph lives on (a zombie, as after
 * sqlite3_close_v2) until the last of them is freed. */
void hx_graph_free(hx_graph *g)
{
    if (g) hx__graph_release(g);
}

int hx_graph_tensor_count(const hx_graph *g) { return g ? g->n : 0; }

void hx__graph_truncate(hx_graph *g, int n)
{
    for (int i = g->n - 1; i >= n; i--) {
        hx_tensor *t = g->tensors[i];
        name_remove(&g->names, t);
        for (int k = 0; k < n; k++)
            if (g->tensors[k]->grad == t) g->tensors[k]->grad = NULL;
        tensor_free(t);
    }
    g->n = n < g->n ? n : g->n;
    while (g->n_tables && g->tables[g->n_tables - 1].first_id >= g->n)
        hx__embedding_use(g->tables[--g->n_tables].table, -1);
}

hx_status hx__graph_use_table(hx_graph *g, hx_embedding_table *t, int first_id)
{
    for (int i = 0; i < g->n_tables; i++)
        if (g->tables[i].table == t) return HX_OK;
    if (g->n_tables == g->cap_tables) {
        int cap = g->cap_tables ? 2 * g->cap_tables : 4;
        hx_graph_table *p = realloc(g->tables, sizeof *p * cap);
        if (!p) return hx__error(HX_ERR_OUT_OF_MEMORY, "embedding op: out of host memory");
        g->tables = p;
        g->cap_tables = cap;
    }
    g->tables[g->n_tables++] = (hx_graph_table){t, first_id};
    hx__embedding_use(t, +1);
    return HX_OK;
}

static hx_status check_graph_open(const hx_graph *g, const char *what)
{
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: graph is NULL", what);
    int sessions = atomic_load(&g->holders) - 1; /* the user holds it too */
    if (sessions)
        return hx__error(HX_ERR_STATE,
                         "%s: the graph is frozen while %d session(s) exist; free the sessions "
                         "before changing the graph, or build a new graph", what, sessions);
    return HX_OK;
}

/* A NULL input usually means the op that should have made it failed: keep
 * that first failure's message, so the end of a chain reports its cause. */
static hx_status null_input(const char *opname, int i)
{
    static const char *marker = " is NULL because an earlier call failed: ";
    const char *last = hx_last_error();
    if (strstr(last, marker)) return HX_ERR_INVALID_ARGUMENT;
    if (!last[0]) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: input %d is NULL", opname, i);
    char first[HX_ERROR_LEN];
    memcpy(first, last, sizeof first);
    return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: input %d%s%s", opname, i, marker, first);
}

hx_status hx__check_srcs(hx_graph *g, const char *opname, int n, hx_tensor *const *srcs)
{
    hx_status st = check_graph_open(g, opname);
    if (st) return st;
    for (int i = 0; i < n; i++) {
        if (!srcs[i]) return null_input(opname, i);
        if (srcs[i]->graph != g)
            return hx__error(HX_ERR_INVALID_ARGUMENT,
                             "%s: input %d ('%s') belongs to another graph; tensors cannot be "
                             "shared between graphs", opname, i, srcs[i]->name);
        if (srcs[i]->kind == HX_TENSOR_UPDATE)
            return hx__error(HX_ERR_INVALID_ARGUMENT,
                             "%s: input %d ('%s') is an optimizer update, which has no value",
                             opname, i, srcs[i]->name);
    }
    return HX_OK;
}

/* Appends t, naming it `name` or "<op>_<id>" when name is NULL. */
static hx_status graph_add(hx_graph *g, hx_tensor *t, const char *name)
{
    char auto_name[64];
    if (!name) {
        snprintf(auto_name, sizeof auto_name, "%s_%d", hx__ops[t->op].name, g->n);
        for (int k = 1; name_find(&g->names, auto_name); k++)
            snprintf(auto_name, sizeof auto_name, "%s_%d_%d", hx__ops[t->op].name, g->n, k);
        name = auto_name;
    } else if (name_find(&g->names, name)) {
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "%s: a tensor named '%s' already exists in this graph; names must "
                         "be unique", hx__ops[t->op].name, name);
    }
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        hx_tensor **p = realloc(g->tensors, sizeof *p * cap);
        if (!p) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", hx__ops[t->op].name);
        g->tensors = p;
        g->cap = cap;
    }
    t->name = copy_string(name);
    if (!t->name || !name_insert(&g->names, t))
        return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", hx__ops[t->op].name);
    t->id = g->n;
    t->graph = g;
    g->tensors[g->n++] = t;
    return HX_OK;
}

/* A tensor of op's with this shape (dims positive); name: a leaf's, for
 * the message. NULL with HX_ERR_SHAPE past HX_MAX_ELEMENTS. */
static hx_tensor *tensor_alloc(hx_op op, const char *name, hx_dtype dt, int ndim,
                               const int64_t *shape)
{
    int64_t numel;
    if (!hx__numel_checked(ndim, shape, &numel)) {
        hx_tensor big = {.ndim = ndim};
        memcpy(big.shape, shape, sizeof(int64_t) * ndim);
        char sh[HX_SHAPE_STR_LEN];
        hx__error(HX_ERR_SHAPE, "%s%s%s%s: shape %s holds more than 2^56 elements (HX_MAX_ELEMENTS)",
                  hx__ops[op].name, name ? " '" : "", name ? name : "", name ? "'" : "",
                  hx__shape_str(&big, sh, sizeof sh));
        return NULL;
    }
    hx_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", hx__ops[op].name);
        return NULL;
    }
    t->op = op;
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * ndim);
    return t;
}

hx_tensor *hx__node_new(hx_graph *g, hx_op op, int n_src, hx_tensor *const *srcs,
                        hx_dtype dt, int ndim, const int64_t *shape, const hx_attrs *attr)
{
    hx_tensor *t = tensor_alloc(op, NULL, dt, ndim, shape);
    if (!t) return NULL;
    t->kind = op >= HX_OP_SGD_UPDATE ? HX_TENSOR_UPDATE : HX_TENSOR_INTERMEDIATE;
    t->src = malloc(sizeof *t->src * (n_src ? n_src : 1));
    if (!t->src) {
        free(t);
        hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", hx__ops[op].name);
        return NULL;
    }
    memcpy(t->src, srcs, sizeof *t->src * n_src);
    t->n_src = n_src;
    if (attr) t->attr = *attr;
    t->target = g->target_depth ? g->target_stack[g->target_depth - 1] : HX_TARGET_DEFAULT;
    t->block = g->open_block;
    if (graph_add(g, t, NULL)) {
        tensor_free(t);
        return NULL;
    }
    return t;
}

/* ---- leaves ------------------------------------------------------------------ */

static hx_tensor *leaf_new(hx_graph *g, const char *what, hx_op op, hx_tensor_kind kind,
                           const char *name, hx_dtype dt, int ndim, const int64_t *shape)
{
    if (check_graph_open(g, what)) return NULL;
    if (!name || !*name) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "%s: name is %s; leaves need a unique name", what,
                  name ? "empty" : "NULL");
        return NULL;
    }
    if (!hx_dtype_size(dt)) {
        hx__error(HX_ERR_DTYPE, "%s '%s': invalid dtype value %d (use HX_DTYPE_*)", what, name,
                  (int)dt);
        return NULL;
    }
    if (ndim < 0 || ndim > HX_MAX_DIMS || (ndim && !shape)) {
        hx__error(HX_ERR_SHAPE, "%s '%s': ndim %d is outside 0..%d or shape is NULL", what,
                  name, ndim, HX_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) {
            hx__error(HX_ERR_SHAPE, "%s '%s': dim %d is %lld; dims must be positive", what,
                      name, i, (long long)shape[i]);
            return NULL;
        }
    hx_tensor *t = tensor_alloc(op, name, dt, ndim, shape);
    if (!t) return NULL;
    t->kind = kind;
    if (graph_add(g, t, name)) {
        tensor_free(t);
        return NULL;
    }
    return t;
}

hx_tensor *hx_graph_input(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                          const int64_t *shape)
{
    return leaf_new(g, "hx_graph_input", HX_OP_INPUT, HX_TENSOR_INPUT, name, dt, ndim, shape);
}

static bool init_valid(hx_init init)
{
    return (unsigned)init.kind <= HX_INIT_XAVIER_NORMAL &&
           !(init.kind == HX_INIT_UNIFORM && !(init.a <= init.b)) &&
           !(init.kind == HX_INIT_NORMAL && !(init.b >= 0));
}

hx_tensor *hx_graph_param(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                          const int64_t *shape, hx_init init)
{
    if (g && name && !init_valid(init)) {
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "hx_graph_param '%s': invalid initialiser (kind %d, a %g, b %g); use "
                  "hx_init_*()", name, (int)init.kind, init.a, init.b);
        return NULL;
    }
    if (g && name && hx_dtype_size(dt) && !hx__is_float(dt)) {
        hx__error(HX_ERR_DTYPE, "hx_graph_param '%s': parameters must be f32, f16 or bf16, not %s",
                  name, hx_dtype_name(dt));
        return NULL;
    }
    hx_tensor *t = leaf_new(g, "hx_graph_param", HX_OP_PARAM, HX_TENSOR_PARAMETER, name, dt,
                            ndim, shape);
    if (t) t->init = init;
    return t;
}

hx_tensor *hx_graph_constant(hx_graph *g, const char *name, hx_dtype dt, int ndim,
                             const int64_t *shape, const void *data)
{
    if (g && name && !data) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_constant '%s': data is NULL", name);
        return NULL;
    }
    hx_tensor *t = leaf_new(g, "hx_graph_constant", HX_OP_CONSTANT, HX_TENSOR_CONSTANT, name,
                            dt, ndim, shape);
    if (!t) return NULL;
    size_t bytes = hx_tensor_nbytes(t);
    t->constant = malloc(bytes ? bytes : 1);
    if (!t->constant) {
        hx__graph_truncate(g, t->id);
        hx__error(HX_ERR_OUT_OF_MEMORY, "hx_graph_constant '%s': out of host memory", name);
        return NULL;
    }
    memcpy(t->constant, data, bytes);
    return t;
}

/* Optimizer state: a persistent leaf that belongs to `param`. */
hx_tensor *hx__state_new(hx_graph *g, hx_tensor *param, const char *suffix, hx_init init)
{
    char name[512];
    snprintf(name, sizeof name, "%s/%s", param->name, suffix);
    hx_tensor *t = leaf_new(g, "optimizer state", HX_OP_STATE, HX_TENSOR_STATE, name,
                            HX_DTYPE_F32, param->ndim, param->shape);
    if (t) {
        t->init = init;
        t->param = param;
    }
    return t;
}

/* ---- tensor queries ------------------------------------------------------------- */

hx_status hx_tensor_set_name(hx_tensor *t, const char *name)
{
    if (!t || !name || !*name)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_tensor_set_name: %s",
                         !t ? "tensor is NULL" : !name ? "name is NULL" : "name is empty");
    hx_graph *g = t->graph;
    if (!strcmp(t->name, name)) return HX_OK;
    if (name_find(&g->names, name))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_tensor_set_name: a tensor named '%s' already exists; names must "
                         "be unique", name);
    char *copy = copy_string(name);
    if (!copy) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_tensor_set_name: out of host memory");
    name_remove(&g->names, t);
    free(t->name);
    t->name = copy;
    if (!name_insert(&g->names, t))
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_tensor_set_name: out of host memory");
    return HX_OK;
}

const char *hx_tensor_name(const hx_tensor *t) { return t ? t->name : NULL; }
hx_dtype hx_tensor_dtype(const hx_tensor *t) { return t ? t->dtype : HX_DTYPE_F32; }
int hx_tensor_ndim(const hx_tensor *t) { return t ? t->ndim : -1; }
int64_t hx_tensor_numel(const hx_tensor *t) { return t ? hx__numel(t->ndim, t->shape) : 0; }
size_t hx_tensor_nbytes(const hx_tensor *t)
{
    return t ? (size_t)hx_tensor_numel(t) * hx_dtype_size(t->dtype) : 0;
}
hx_tensor_kind hx_tensor_kind_of(const hx_tensor *t) { return t ? t->kind : HX_TENSOR_INTERMEDIATE; }
const char *hx_tensor_op_name(const hx_tensor *t) { return t ? hx__ops[t->op].name : NULL; }

int64_t hx_tensor_dim(const hx_tensor *t, int i)
{
    if (!t) return -1;
    if (i < 0) i += t->ndim;
    return i >= 0 && i < t->ndim ? t->shape[i] : -1;
}

/* ---- targets ---------------------------------------------------------------------- */

static bool target_valid(hx_target t) { return (unsigned)t <= HX_TARGET_AUTO; }

hx_status hx_tensor_set_target(hx_tensor *t, hx_target target)
{
    if (!t) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_tensor_set_target: tensor is NULL");
    if (!target_valid(target))
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_tensor_set_target '%s': invalid target value %d", t->name,
                         (int)target);
    if (t->kind == HX_TENSOR_INPUT || t->kind == HX_TENSOR_CONSTANT)
        return hx__error(HX_ERR_INVALID_ARGUMENT,
                         "hx_tensor_set_target '%s': %s has no op to place; set the target of "
                         "the ops that consume it", t->name,
                         t->kind == HX_TENSOR_INPUT ? "an input" : "a constant");
    hx_status st = check_graph_open(t->graph, "hx_tensor_set_target");
    if (st) return st;
    t->target = target;
    t->target_set = target != HX_TARGET_DEFAULT;
    return HX_OK;
}

hx_target hx_tensor_target(const hx_tensor *t) { return t ? t->target : HX_TARGET_DEFAULT; }

hx_status hx_graph_push_target(hx_graph *g, hx_target target)
{
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_push_target: graph is NULL");
    if (!target_valid(target))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_push_target: invalid target %d",
                         (int)target);
    if (g->target_depth == (int)(sizeof g->target_stack / sizeof g->target_stack[0]))
        return hx__error(HX_ERR_STATE,
                         "hx_graph_push_target: target scopes nest at most 16 deep; a push "
                         "without a matching pop?");
    g->target_stack[g->target_depth++] = target;
    return HX_OK;
}

hx_status hx_graph_pop_target(hx_graph *g)
{
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_graph_pop_target: graph is NULL");
    if (!g->target_depth)
        return hx__error(HX_ERR_STATE,
                         "hx_graph_pop_target: no target scope is open (pop without a push)");
    g->target_depth--;
    return HX_OK;
}

/* ---- initialisers ------------------------------------------------------------------- */

hx_init hx_init_zeros(void) { return (hx_init){HX_INIT_ZEROS, 0, 0}; }
hx_init hx_init_constant(double v) { return (hx_init){HX_INIT_CONSTANT, v, 0}; }
hx_init hx_init_uniform(double lo, double hi) { return (hx_init){HX_INIT_UNIFORM, lo, hi}; }
hx_init hx_init_normal(double mean, double std) { return (hx_init){HX_INIT_NORMAL, mean, std}; }
hx_init hx_init_xavier_uniform(double gain) { return (hx_init){HX_INIT_XAVIER_UNIFORM, gain, 0}; }
hx_init hx_init_xavier_normal(double gain) { return (hx_init){HX_INIT_XAVIER_NORMAL, gain, 0}; }
