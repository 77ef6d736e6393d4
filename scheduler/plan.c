/* Execution plans: which nodes a run needs, in which order, the units the
 * executor runs concurrently (plan_units.c), and a static memory plan that
 * lets transient tensors share arena bytes when one is wholly done before
 * the other is produced, in every order the executor may take (greedy by
 * size, lowest free offset first).
 *
 * Positions are those of the unit-major order (units in topological order,
 * each unit's steps in order), which every execution respects. Step i of
 * unit U runs after unit u has finished when u is a pred of U that U's
 * steps need from i on (link_at <= i), or reaches such a pred; so the steps
 * of U that run after u are a suffix of U, from thr(U, u) on. The lifetime
 * of a value X on a device is [first, ext]: first its production (-1: fed
 * before the run), ext the later of its last use (the end for fetches) and,
 * for every other unit U on that device, the position before the suffix of
 * U that runs after all of X's users. Two values whose intervals are
 * disjoint, X's before Y's, may share bytes: Y's production lies in such a
 * suffix (or in X's own unit after X's last use there), so it comes after
 * every use of X in every execution. */
#include "scheduler/plan.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

typedef struct lifetime {
    int id;
    int first, last; /* positions in unit-major order; then last becomes ext */
    size_t bytes;
    int64_t offset;
    int unit;   /* the unit of its first event (-1: none yet, a fed input) */
    int more;   /* other units with events: a list in the builder's pool, -1 */
    int step;   /* a copy: its step; else -1 */
} lifetime;

static int by_size_desc(const void *pa, const void *pb)
{
    const lifetime *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    return a->id - b->id;
}

/* Places each buffer, largest first, at the lowest offset that does not
 * overlap a placed buffer whose lifetime overlaps its own. The placed ones
 * stay sorted by offset, so that each placement is one scan over them. */
static size_t assign_offsets(lifetime *lt, int n)
{
    qsort(lt, n, sizeof *lt, by_size_desc);
    lifetime **placed = malloc(sizeof *placed * (n ? n : 1));
    if (!placed) return SIZE_MAX;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        lifetime *x = &lt[i];
        size_t off = 0;
        for (int j = 0; j < i; j++) {
            const lifetime *y = placed[j];
            if (y->first > x->last || x->first > y->last) continue; /* never live together */
            if ((size_t)y->offset >= off + x->bytes) break;          /* x fits below y */
            if ((size_t)y->offset + y->bytes > off) off = y->offset + y->bytes;
        }
        x->offset = (int64_t)off;
        if (off + x->bytes > total) total = off + x->bytes;
        int lo = 0, hi = i; /* after every placed one at offset <= off */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if ((size_t)placed[mid]->offset <= off) lo = mid + 1;
            else hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, sizeof *placed * (i - lo));
        placed[lo] = x;
    }
    free(placed);
    return total;
}

void hx__plan_free(const hx_engine *e, hx_plan *p)
{
    if (!p) return;
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    for (int u = 0; p->done && u < p->n_units; u++)
        if (p->done[u]) acc->event_destroy(acc, p->done[u]);
    free(p->done);
    free(p->clock);
    free(p->key);
    free(p->steps);
    free(p->in_pool);
    free(p->offset);
    free(p->inputs);
    free(p->units);
    free(p->unit_steps);
    free(p->links);
    free(p->link_at);
    free(p->scan_update);
    free(p->scan_at);
    free(p->dev_in_slot);
    free(p->dev_in_id);
    free(p->input_copy_unit);
    free(p->input_host_use);
    free(p->skip);
    free(p->scan_home);
    free(p->src_step);
    free(p->step_offset);
    free(p->step_chunk);
    free(p->step_role);
    hx__partition_free(&p->part);
    free(p);
}

/* Marks what the fetches (and with train, the updates) need; returns the
 * number of op nodes. */
static int mark_needed(const hx_engine *e, const int *fetch_ids, int n_fetch, bool train,
                       bool *need)
{
    const hx_graph *g = e->g;
    for (int k = 0; k < n_fetch; k++) need[fetch_ids[k]] = true;
    for (int i = 0; train && i < g->n; i++)
        if (g->tensors[i]->kind == HX_TENSOR_UPDATE) need[i] = true;
    int n_ops = 0;
    for (int i = g->n - 1; i >= 0; i--) {
        if (!need[i]) continue;
        const hx_tensor *t = g->tensors[i];
        for (int k = 0; k < hx__n_reads(e, t); k++) need[hx__read(e, t, k)->id] = true;
        n_ops += t->op > HX_OP_STATE;
    }
    return n_ops;
}

/* Scratch of one plan build. */
typedef struct builder {
    const hx_engine *e;
    hx_plan *p;
    int n;
    int *copy_step; /* [dev * n + id]: the step copying id to dev, -1 */
    int *lt_of;     /* [dev * n + id]: its lifetime, -1 */
    int *copy_lt;   /* per step: a copy's lifetime */
    int *slot_of;   /* per step: its first in_pool slot */
    /* parameter offload: chunks in execution order, copies again after a gap */
    bool offload;
    size_t chunk_bytes, window;
    int chunk;
    size_t fill, streamed;
    size_t *last_use;   /* per id: `streamed` when the device last read its copy */
    /* activation offload: a chunk also ends after act_window bytes of device
     * op outputs; a read `gap` chunks or more after the one before is far */
    bool act;
    size_t act_window, act_fill;
    int gap;
    int *op_chunk;      /* per id: the chunk its op step is ordered in */
    int *act_back;      /* per id: the first chunk of its far reads (-1: none, it stays) */
    bool *grad_out;     /* per id: a device gradient whose update runs on the host */
    lifetime *lt[HX_NDEV];
    int n_lt[HX_NDEV];
    uint64_t *reach; /* unit reachability (plan_units.c) */
    int words;
    int *unit_at;    /* per position: its unit */
    struct unit_list { int unit, next; } *pool; /* lifetime.more lists */
    int n_pool, cap_pool;
    bool oom;
} builder;

static void add_lifetime(builder *b, int dev, int id, int pos, int unit, int step)
{
    /* a copy back to the value's home (activation offload) is read through
     * its step: the readers of the home's value keep extending that one */
    if (step < 0 || hx__dev_of(b->e, id) != dev) b->lt_of[dev * b->n + id] = b->n_lt[dev];
    if (step >= 0) b->copy_lt[step] = b->n_lt[dev];
    const hx_tensor *t = b->e->g->tensors[id];
    size_t bytes = step < 0 ? hx__lowered_out_bytes(t, b->e->lowered) : hx_tensor_nbytes(t);
    b->lt[dev][b->n_lt[dev]++] = (lifetime){id, pos, pos, align_up(bytes), 0, unit, -1, step};
}

/* Adds unit u to x's other units. */
static void add_unit(builder *b, lifetime *x, int u)
{
    if (b->n_pool == b->cap_pool) {
        int cap = b->cap_pool ? 2 * b->cap_pool : 64;
        struct unit_list *pool = realloc(b->pool, sizeof *pool * cap);
        if (!pool) {
            b->oom = true;
            return;
        }
        b->pool = pool;
        b->cap_pool = cap;
    }
    b->pool[b->n_pool] = (struct unit_list){u, x->more};
    x->more = b->n_pool++;
}

/* A use of id's value on dev at position pos by unit u (-1: the fetch at
 * the end of the run). */
static void extend_lt(builder *b, int dev, int l, int pos, int u)
{
    if (l < 0) return;
    lifetime *x = &b->lt[dev][l];
    if (x->last < pos) x->last = pos;
    if (u < 0 || x->unit == u) return;
    if (x->unit < 0) x->unit = u;
    else add_unit(b, x, u);
}

static void extend(builder *b, int dev, int id, int pos, int u)
{
    extend_lt(b, dev, b->lt_of[dev * b->n + id], pos, u);
}

/* Starts the next chunk (segment) of the step. */
static void next_chunk(builder *b)
{
    b->chunk++;
    b->fill = b->act_fill = 0;
}

/* Appends a copy of t from device `from` to dev as step k. */
static void add_copy(builder *b, int k, const hx_tensor *t, int dev, int from, char role)
{
    hx_plan *p = b->p;
    b->copy_step[dev * b->n + t->id] = k;
    p->steps[k] = (hx_step){NULL, t, NULL, NULL, dev, from};
    p->src_step[b->slot_of[k]] = -1;
    size_t bytes = hx_tensor_nbytes(t);
    p->n_copies++;
    p->copy_bytes += bytes;
    if (dev == HX_DEV_ACCEL) p->n_h2d++;
    else p->n_d2h++;
    p->step_role[k] = role;
    if (role == HX_ROLE_ACT_OUT) p->n_act++, p->act_bytes += bytes;
    if (!p->step_chunk) return;
    if (role == HX_ROLE_STREAM_IN) { /* the next chunk when this one is full */
        if (b->fill && b->fill + bytes > b->chunk_bytes) next_chunk(b);
        b->fill += bytes;
        b->streamed += bytes;
        p->streamed_bytes += bytes;
    }
    p->step_chunk[k] = b->chunk;
}

/* Whether source j of t (on dev, from `from`) needs a copy step now: none
 * exists, or (offload) the device last read the copy more than a window of
 * streamed bytes ago, so that it is dropped meanwhile and copied again. */
static bool needs_copy(const builder *b, const hx_tensor *src, int dev, int from, char *role)
{
    *role = b->offload && dev == HX_DEV_ACCEL && hx__offload_streamed(src) ? HX_ROLE_STREAM_IN
                                                                           : HX_ROLE_OTHER;
    if (from == dev) return false;
    if (b->copy_step[dev * b->n + src->id] < 0) return true;
    return *role == HX_ROLE_STREAM_IN && b->streamed - b->last_use[src->id] > b->window;
}

/* Whether device op i (forward or backward) reads src from a copy back to
 * the device that is not there yet: its read is a far one (act_decide). */
static bool comes_back(const builder *b, const hx_tensor *src, int i, int dev)
{
    return b->act_back && dev == HX_DEV_ACCEL && b->act_back[src->id] >= 0 &&
           b->op_chunk[i] >= b->act_back[src->id] && b->copy_step[dev * b->n + src->id] < 0;
}

/* Activation offload: device op outputs end the chunk once act_window
 * bytes of them are in it (counted before the op's copies, which then
 * belong to its chunk). */
static void count_output(builder *b, const hx_tensor *t)
{
    size_t bytes = hx_tensor_nbytes(t);
    if (b->act_fill && b->act_fill + bytes > b->act_window) next_chunk(b);
    b->act_fill += bytes;
}

/* Orders the steps: op nodes in creation order (a topological order),
 * updates last, each copy right before the first step that reads it (with
 * offload: a parameter again before a read long after the last one; an
 * activation that goes out back before its first far read), but a
 * gradient whose update runs on the host, and an activation that goes out,
 * right after it is produced. */
static hx_status order_steps(builder *b, const bool *need)
{
    const hx_engine *e = b->e;
    const hx_graph *g = e->g;
    hx_plan *p = b->p;
    int k = 0, slot = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) p->first_update = k;
        for (int i = 0; i < g->n; i++) {
            const hx_tensor *t = g->tensors[i];
            if (!need[i] || t->op <= HX_OP_STATE || (t->kind == HX_TENSOR_UPDATE) != pass)
                continue;
            int dev = hx__dev_of(e, i);
            if (b->act && !pass && dev == HX_DEV_ACCEL) count_output(b, t);
            for (int j = 0; j < hx__n_reads(e, t); j++) {
                const hx_tensor *s = hx__read(e, t, j);
                int from = hx__dev_of(e, s->id);
                char role;
                if (comes_back(b, s, i, dev)) from = HX_DEV_HOST, role = HX_ROLE_ACT_IN;
                else if (!needs_copy(b, s, dev, from, &role)) continue;
                b->slot_of[k] = slot++;
                add_copy(b, k++, s, dev, from, role);
            }
            hx_launch_fn fn = e->be[dev]->kernel(e->be[dev], hx__run_op(t, e->lowered), t->dtype);
            if (!fn)
                return hx__error(HX_ERR_NO_KERNEL,
                                 "session: op '%s' (%s, %s) has no kernel on the %s backend; "
                                 "place it on the other target with hx_tensor_set_target",
                                 t->name, hx__ops[t->op].name, hx_dtype_name(t->dtype),
                                 e->be[dev]->name);
            b->slot_of[k] = slot;
            for (int j = 0; j < hx__n_reads(e, t); j++) { /* a copy at dev, if any (-1: the home's value) */
                int u = hx__read(e, t, j)->id;
                p->src_step[slot++] = b->copy_step[dev * b->n + u];
                if (b->offload && dev == HX_DEV_ACCEL) b->last_use[u] = b->streamed;
            }
            if (p->step_chunk) p->step_chunk[k] = b->chunk;
            if (b->op_chunk) b->op_chunk[i] = b->chunk;
            p->steps[k++] = (hx_step){fn, t, NULL, NULL, dev, -1};
            if (e->lowered && e->lowered[i].kind) {
                size_t ws = hx__lowered_workspace(t, (hx_lower_kind)e->lowered[i].kind);
                if (ws > p->workspace_bytes) p->workspace_bytes = ws;
            }
            if (t->recompute_of) p->n_recomputed++, p->recompute_flops += hx__run_flops(t, e->lowered);
            if (b->grad_out && b->grad_out[i] && !pass) {
                b->slot_of[k] = slot++;
                add_copy(b, k++, t, HX_DEV_HOST, dev, HX_ROLE_GRAD_OUT);
            }
            if (b->act_back && b->act_back[i] >= 0) {
                b->slot_of[k] = slot++;
                add_copy(b, k++, t, HX_DEV_HOST, dev, HX_ROLE_ACT_OUT);
            }
        }
    }
    p->n_steps = k;
    return HX_OK;
}

/* Lifetimes of transient values per device: fed inputs and op outputs at
 * their home, copies at their destination; positions in unit-major order. */
static void lifetimes(builder *b, const bool *need, const int *fetch_ids, int n_fetch)
{
    const hx_graph *g = b->e->g;
    hx_plan *p = b->p;
    for (int i = 0; i < g->n; i++)
        if (need[i] && g->tensors[i]->kind == HX_TENSOR_INPUT) {
            p->inputs[p->n_inputs++] = i;
            add_lifetime(b, HX_DEV_HOST, i, -1, -1, -1);
        }
    for (int q = 0; q < p->n_steps; q++) {
        const hx_step *sp = &p->steps[p->unit_steps[q]];
        const hx_tensor *t = sp->node;
        int u = b->unit_at[q];
        int k = p->unit_steps[q];
        if (!sp->fn) {
            add_lifetime(b, sp->dev, t->id, q, u, k);
            extend(b, sp->src_dev, t->id, q, u);
            continue;
        }
        for (int j = 0; j < hx__n_reads(b->e, t); j++) {
            int c = p->src_step[b->slot_of[k] + j];
            if (c >= 0) extend_lt(b, sp->dev, b->copy_lt[c], q, u);
            else extend(b, sp->dev, hx__read(b->e, t, j)->id, q, u);
        }
        if (t->kind != HX_TENSOR_UPDATE) add_lifetime(b, sp->dev, t->id, q, u, -1);
    }
    for (int f = 0; f < n_fetch; f++)
        extend(b, hx__dev_of(b->e, fetch_ids[f]), fetch_ids[f], p->n_steps, -1);
}

/* Whether unit u touches device d's arena. */
static bool touches(const hx_unit *u, int d)
{
    if (u->lane == HX_LANE_HOST) return d == HX_DEV_HOST;
    if (u->lane == HX_LANE_COMPUTE) return d == HX_DEV_ACCEL;
    return true;
}

/* The last position, over the units on device d other than x's own, of a
 * step that may run before all of x's units have finished (-1: none). */
static int concurrent_end(const builder *b, int d, const lifetime *x)
{
    const hx_plan *p = b->p;
    int end = -1;
    for (int U = 0; U < p->n_units; U++) {
        if (!touches(&p->units[U], d)) continue;
        int t = U == x->unit ? 0 : hx__unit_after(p, b->reach, U, x->unit);
        for (int l = x->more; l >= 0 && t < p->units[U].n_steps; l = b->pool[l].next)
            if (b->pool[l].unit != U) {
                int tu = hx__unit_after(p, b->reach, U, b->pool[l].unit);
                if (tu > t) t = tu;
            }
        if (t > 0 && p->units[U].first + t - 1 > end) end = p->units[U].first + t - 1;
    }
    return end;
}

/* Turns each lifetime's last into its ext (see the top of the file). */
static hx_status extend_concurrent(builder *b)
{
    const hx_plan *p = b->p;
    int nu = p->n_units;
    int *memo = malloc(sizeof *memo * HX_NDEV * (nu ? nu : 1));
    if (!memo || b->oom) {
        free(memo);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
    }
    for (int i = 0; i < HX_NDEV * nu; i++) memo[i] = -2;
    for (int d = 0; d < HX_NDEV; d++)
        for (int l = 0; l < b->n_lt[d]; l++) {
            lifetime *x = &b->lt[d][l];
            int end = -1;
            if (x->unit >= 0 && x->more < 0) { /* one unit: the same for all its values */
                int *m = &memo[d * nu + x->unit];
                if (*m == -2) *m = concurrent_end(b, d, x);
                end = *m;
            } else if (x->unit >= 0) {
                end = concurrent_end(b, d, x);
            }
            if (end > x->last) x->last = end;
        }
    free(memo);
    return HX_OK;
}

/* The gradients the scan reads before the updates: one per update step. */
static hx_status scan_list(builder *b)
{
    hx_plan *p = b->p;
    int n = p->n_steps - p->first_update;
    p->scan_update = malloc(sizeof *p->scan_update * (n ? n : 1));
    p->scan_at = malloc(sizeof *p->scan_at * (n ? n : 1));
    p->scan_home = malloc(sizeof *p->scan_home * (n ? n : 1));
    if (!p->scan_update || !p->scan_at || !p->scan_home)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
    for (int k = p->first_update; k < p->n_steps; k++) {
        if (!p->steps[k].fn) continue;
        int g = p->steps[k].node->src[1]->id; /* copied out early: scanned on the host */
        p->scan_home[p->n_scan] = b->grad_out && b->grad_out[g] ? HX_DEV_HOST : hx__dev_of(b->e, g);
        p->scan_update[p->n_scan++] = p->steps[k].node;
    }
    return HX_OK;
}

/* Where each input is needed: its copy unit to the device, and the host
 * op (or fetch) that needs it on the host. */
static hx_status input_uses(builder *b, const int *fetch_ids, int n_fetch)
{
    hx_plan *p = b->p;
    int ni = p->n_inputs ? p->n_inputs : 1;
    p->input_copy_unit = malloc(sizeof *p->input_copy_unit * ni);
    p->input_host_use = calloc(ni, sizeof *p->input_host_use);
    p->skip = calloc(p->n_units ? p->n_units : 1, sizeof *p->skip);
    if (!p->input_copy_unit || !p->input_host_use || !p->skip)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
    for (int k = 0; k < p->n_inputs; k++) {
        int id = p->inputs[k];
        p->input_copy_unit[k] = -1;
        for (int u = 0; u < p->n_units; u++)
            if (p->units[u].fed_input == id) p->input_copy_unit[k] = u;
        for (int f = 0; f < n_fetch; f++)
            if (fetch_ids[f] == id) p->input_host_use[k] = b->e->g->tensors[id];
    }
    for (int q = 0; q < p->n_steps; q++) {
        const hx_step *sp = &p->steps[q];
        for (int j = 0; sp->fn && sp->dev == HX_DEV_HOST && j < hx__n_reads(b->e, sp->node); j++)
            for (int k = 0; k < p->n_inputs && hx__read(b->e, sp->node, j)->kind == HX_TENSOR_INPUT; k++)
                if (p->inputs[k] == hx__read(b->e, sp->node, j)->id && !p->input_host_use[k])
                    p->input_host_use[k] = sp->node;
    }
    return HX_OK;
}

/* Device-read input slots, completion events of stream units, and every
 * unit's clock. */
static hx_status exec_parts(builder *b)
{
    const hx_engine *e = b->e;
    hx_plan *p = b->p;
    size_t n_in = 0;
    for (int k = 0; k < p->n_steps; k++)
        if (p->steps[k].fn && p->steps[k].dev == HX_DEV_ACCEL) n_in += hx__n_reads(e, p->steps[k].node);
    p->dev_in_slot = malloc(sizeof *p->dev_in_slot * (n_in ? n_in : 1));
    p->dev_in_id = malloc(sizeof *p->dev_in_id * (n_in ? n_in : 1));
    p->done = calloc(p->n_units ? p->n_units : 1, sizeof *p->done);
    p->clock = calloc(p->n_units ? p->n_units : 1, sizeof *p->clock);
    if (!p->dev_in_slot || !p->dev_in_id || !p->done || !p->clock)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
    hx_backend *acc = e->be[HX_DEV_ACCEL];
    for (int u = 0; u < p->n_units; u++) {
        if (p->units[u].lane == HX_LANE_HOST) continue;
        hx_status st = acc->event_create(acc, &p->done[u]);
        if (st) return st;
    }
    return HX_OK;
}

/* Parameter and activation offload's scratch: the chunk size, window and
 * gap. */
static hx_status offload_setup(builder *b, int max_steps)
{
    const hx_engine *e = b->e;
    hx_plan *p = b->p;
    const hx_offload_config *c = &e->cfg.offload;
    b->offload = hx__offload_on(e);
    b->act = hx__offload_activations_on(e);
    b->chunk_bytes = b->act_window = c->chunk_size;
    b->window = c->chunk_size * (size_t)(c->prefetch_depth + 1);
    b->gap = 2 * c->prefetch_depth + 2;
    b->last_use = calloc(b->n ? b->n : 1, sizeof *b->last_use);
    b->op_chunk = b->act ? malloc(sizeof *b->op_chunk * (b->n ? b->n : 1)) : NULL;
    p->step_chunk = malloc(sizeof *p->step_chunk * (max_steps ? max_steps : 1));
    if (!b->last_use || !p->step_chunk || (b->act && !b->op_chunk))
        return hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
    for (int k = 0; k < max_steps; k++) p->step_chunk[k] = -1;
    for (int i = 0; b->op_chunk && i < b->n; i++) b->op_chunk[i] = -1;
    return HX_OK;
}

/* Forgets an ordering of the steps (not op_chunk), to order them again. */
static void reset_order(builder *b, int max_steps)
{
    hx_plan *p = b->p;
    for (int i = 0; i < HX_NDEV * b->n; i++) b->copy_step[i] = -1;
    memset(p->step_role, 0, max_steps);
    for (int k = 0; k < max_steps; k++) p->step_chunk[k] = -1;
    memset(b->last_use, 0, sizeof *b->last_use * b->n);
    p->n_copies = p->n_h2d = p->n_d2h = p->n_act = 0;
    p->copy_bytes = p->streamed_bytes = p->act_bytes = 0;
    p->n_recomputed = 0;
    p->recompute_flops = 0;
    b->chunk = 0;
    b->fill = b->act_fill = b->streamed = 0;
}

/* Whether id is an op output at home on the device that activation
 * offload may move: no host op, no update and no fetch reads it. */
static bool movable(const builder *b, const bool *need, const bool *pinned, int id)
{
    const hx_tensor *t = b->e->g->tensors[id];
    return need[id] && !pinned[id] && t->op > HX_OP_STATE && t->kind != HX_TENSOR_UPDATE &&
            hx__dev_of(b->e, id) == HX_DEV_ACCEL;
}

/* Activation offload, from an ordering's op chunks: which device values
 * go to the host and back. The device reads of a movable value, in step
 * order, are near until one comes `gap` chunks or more after the read
 * before it (or its production): that read and every later one are far,
 * and act_back is the chunk of the first. With depth d, gap 2d + 2 leaves
 * at least one chunk between the copy out being done (before the device
 * work of chunk c + 1 + d, c that of the last near read or later) and the
 * copy back starting (after the device work of chunk f - 1 - d, f that of
 * the first far read): the device bytes are free there. Returns the
 * number of values that move. */
static int act_decide(builder *b, const bool *need, const int *fetch_ids, int n_fetch)
{
    const hx_graph *g = b->e->g;
    int n = b->n, moved = 0;
    bool *pinned = calloc(n ? n : 1, sizeof *pinned);
    int *prev = malloc(sizeof *prev * (n ? n : 1));
    b->act_back = malloc(sizeof *b->act_back * (n ? n : 1));
    if (!pinned || !prev || !b->act_back) {
        b->oom = true;
        free(pinned);
        free(prev);
        return 0;
    }
    for (int f = 0; f < n_fetch; f++) pinned[fetch_ids[f]] = true;
    for (int i = 0; i < n; i++) {
        const hx_tensor *t = g->tensors[i];
        b->act_back[i] = -1;
        prev[i] = b->op_chunk[i];
        bool far_side = t->kind == HX_TENSOR_UPDATE || hx__dev_of(b->e, i) != HX_DEV_ACCEL;
        for (int j = 0; need[i] && far_side && j < hx__n_reads(b->e, t); j++)
            pinned[hx__read(b->e, t, j)->id] = true;
    }
    for (int i = 0; i < n; i++) { /* device ops of forward and backward, in step order */
        const hx_tensor *t = g->tensors[i];
        if (!need[i] || t->op <= HX_OP_STATE || t->kind == HX_TENSOR_UPDATE ||
            hx__dev_of(b->e, i) != HX_DEV_ACCEL)
            continue;
        for (int j = 0; j < hx__n_reads(b->e, t); j++) {
            int u = hx__read(b->e, t, j)->id;
            if (!movable(b, need, pinned, u) || b->act_back[u] >= 0) continue;
            if (b->op_chunk[i] - prev[u] >= b->gap) b->act_back[u] = b->op_chunk[i], moved++;
            else prev[u] = b->op_chunk[i];
        }
    }
    free(pinned);
    free(prev);
    return moved;
}

/* The device gradients that an update on the host reads: each goes back as
 * soon as it is complete (optimizer offload: its copy overlaps the rest of
 * backward, plan_units.c cuts the device work into buckets after them) and
 * is scanned there. */
static hx_status grads_out(builder *b, const bool *need)
{
    const hx_engine *e = b->e;
    b->grad_out = calloc(b->n ? b->n : 1, sizeof *b->grad_out);
    if (!b->grad_out)
        return hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
    for (int i = 0; i < b->n; i++) {
        const hx_tensor *u = e->g->tensors[i];
        if (!need[i] || u->kind != HX_TENSOR_UPDATE || hx__dev_of(e, i) != HX_DEV_HOST) continue;
        if (hx__dev_of(e, u->src[1]->id) == HX_DEV_ACCEL) b->grad_out[u->src[1]->id] = true;
    }
    return HX_OK;
}

hx_status hx__plan_build(hx_engine *e, const int *fetch_ids, int n_fetch, bool train, hx_plan **out)
{
    const hx_graph *g = e->g;
    int n = g->n;
    hx_plan *p = calloc(1, sizeof *p);
    bool *need = calloc(n ? n : 1, sizeof *need);
    builder b = {.e = e,
                 .p = p,
                 .n = n,
                 .copy_step = malloc(sizeof(int) * HX_NDEV * (n ? n : 1)),
                 .lt_of = malloc(sizeof(int) * HX_NDEV * (n ? n : 1))};
    hx_status st = HX_OK;
    if (!p || !need || !b.copy_step || !b.lt_of) goto oom;
    for (int i = 0; i < HX_NDEV * n; i++) b.copy_step[i] = b.lt_of[i] = -1;

    p->key_len = n_fetch + 1;
    p->key = malloc(sizeof *p->key * p->key_len);
    if (!p->key) goto oom;
    memcpy(p->key, fetch_ids, sizeof *p->key * n_fetch);
    p->key[n_fetch] = train;

    int n_ops = mark_needed(e, fetch_ids, n_fetch, train, need);
    size_t n_in = 0;
    for (int i = 0; i < n; i++)
        if (need[i]) n_in += hx__n_reads(e, g->tensors[i]);
    /* at most one copy per input edge, and one more per edge to a far
     * read of an activation that goes out */
    int max_steps = n_ops + 2 * (int)n_in;
    p->steps = calloc(max_steps ? max_steps : 1, sizeof *p->steps);
    p->offset = malloc(sizeof *p->offset * HX_NDEV * (n ? n : 1));
    p->inputs = malloc(sizeof *p->inputs * (n ? n : 1));
    p->in_pool = malloc(sizeof *p->in_pool * (n_in + max_steps + 1));
    for (int d = 0; d < HX_NDEV; d++) b.lt[d] = malloc(sizeof *b.lt[d] * (max_steps + n + 1));
    p->src_step = malloc(sizeof *p->src_step * (n_in + max_steps + 1));
    p->step_offset = malloc(sizeof *p->step_offset * (max_steps ? max_steps : 1));
    p->step_role = calloc(max_steps ? max_steps : 1, sizeof *p->step_role);
    b.copy_lt = malloc(sizeof *b.copy_lt * (max_steps ? max_steps : 1));
    b.slot_of = malloc(sizeof *b.slot_of * (max_steps ? max_steps : 1));
    if (!p->steps || !p->offset || !p->inputs || !p->in_pool || !b.lt[0] || !b.lt[1] ||
        !p->src_step || !p->step_offset || !p->step_role || !b.copy_lt || !b.slot_of)
        goto oom;
    for (int k = 0; k < max_steps; k++) b.copy_lt[k] = -1;
    if ((hx__offload_on(e) || hx__offload_activations_on(e)) && (st = offload_setup(&b, max_steps)))
        goto fail;
    if (train && (st = grads_out(&b, need))) goto fail;

    if ((st = order_steps(&b, need))) goto fail;
    if (b.act) { /* order again, with the activations that move */
        int moved = act_decide(&b, need, fetch_ids, n_fetch);
        if (b.oom) goto oom;
        if (moved) reset_order(&b, max_steps);
        if (moved && (st = order_steps(&b, need))) goto fail;
        if (!moved && !b.offload) { /* nothing moves: the plan without it */
            free(p->step_chunk);
            p->step_chunk = NULL;
        }
    }
    p->n_chunks = p->step_chunk && (p->streamed_bytes || p->n_act) ? b.chunk + 1 : 0;
    bool *ops = calloc(n ? n : 1, sizeof *ops); /* the partition covers the plan's op nodes */
    if (!ops) goto oom;
    for (int i = 0; i < n; i++) ops[i] = need[i] && g->tensors[i]->op > HX_OP_STATE;
    st = hx__partition(g, ops, e->target, hx__recompute_on(e), e->lowered, &p->part);
    free(ops);
    if (st || (st = hx__plan_units(e, p, &b.reach))) goto fail;
    b.words = hx__reach_words(p->n_units);
    b.unit_at = malloc(sizeof *b.unit_at * (p->n_steps ? p->n_steps : 1));
    if (!b.unit_at) goto oom;
    for (int u = 0; u < p->n_units; u++)
        for (int q = 0; q < p->units[u].n_steps; q++) b.unit_at[p->units[u].first + q] = u;
    lifetimes(&b, need, fetch_ids, n_fetch);
    if ((st = extend_concurrent(&b)) || (st = scan_list(&b)) || (st = exec_parts(&b)) ||
        (st = input_uses(&b, fetch_ids, n_fetch)))
        goto fail;
    for (int i = 0; i < HX_NDEV * n; i++) p->offset[i] = -1;
    for (int d = 0; d < HX_NDEV; d++) {
        for (int l = 0; l < b.n_lt[d]; l++) {
            const hx_tensor *t = g->tensors[b.lt[d][l].id];
            p->transient_tensor_bytes[d] += b.lt[d][l].step < 0
                                                    ? hx__lowered_out_bytes(t, e->lowered)
                                                    : hx_tensor_nbytes(t);
        }
        p->arena_bytes[d] = assign_offsets(b.lt[d], b.n_lt[d]);
        if (p->arena_bytes[d] == SIZE_MAX) goto oom;
        for (int l = 0; l < b.n_lt[d]; l++) {
            const lifetime *x = &b.lt[d][l];
            if (x->step < 0 || p->offset[d * n + x->id] < 0) p->offset[d * n + x->id] = x->offset;
            if (x->step >= 0) p->step_offset[x->step] = x->offset;
        }
    }
    goto done;
oom:
    st = hx__error(HX_ERR_OUT_OF_MEMORY, "session: out of host memory while planning a run");
fail:
    hx__plan_free(e, p);
    p = NULL;
done:
    free(need);
    free(b.copy_step);
    free(b.lt_of);
    free(b.copy_lt);
    free(b.slot_of);
    free(b.last_use);
    free(b.op_chunk);
    free(b.act_back);
    free(b.grad_out);
    free(b.reach);
    free(b.unit_at);
    free(b.pool);
    for (int d = 0; d < HX_NDEV; d++) free(b.lt[d]);
    *out = p;
    return st;
}

void *hx__plan_locate(const hx_engine *e, const hx_plan *p, int dev, int id)
{
    int64_t off = p->offset[dev * e->g->n + id];
    return off >= 0 ? e->arena[dev] + off : e->persist[id];
}

void hx__plan_bind(hx_engine *e, hx_plan *p)
{
    void **pool = p->in_pool;
    p->n_dev_in = 0;
    for (int k = 0; k < p->n_steps; k++) {
        hx_step *st = &p->steps[k];
        const hx_tensor *t = st->node;
        st->in = pool;
        if (!st->fn) {
            st->out = e->arena[st->dev] + p->step_offset[k];
            *pool++ = hx__plan_locate(e, p, st->src_dev, t->id);
            continue;
        }
        st->out = t->kind == HX_TENSOR_UPDATE ? NULL : hx__plan_locate(e, p, st->dev, t->id);
        for (int j = 0; j < hx__n_reads(e, t); j++) {
            const hx_tensor *s = hx__read(e, t, j);
            if (st->dev == HX_DEV_ACCEL && s->kind == HX_TENSOR_INPUT) {
                p->dev_in_slot[p->n_dev_in] = (int)(pool - p->in_pool);
                p->dev_in_id[p->n_dev_in++] = s->id;
            }
            int c = p->src_step[pool - p->in_pool];
            *pool++ = c >= 0 ? e->arena[st->dev] + p->step_offset[c]
                             : hx__plan_locate(e, p, st->dev, s->id);
        }
    }
    for (int i = 0; i < p->n_scan; i++) { /* a gradient copied out early: its host copy */
        int id = p->scan_update[i]->src[1]->id;
        p->scan_at[i] = hx__plan_locate(e, p, p->scan_home[i], id);
    }
    for (int d = 0; d < HX_NDEV; d++) p->bound_to[d] = e->arena[d];
    p->bound_gen = e->bind_gen;
}
