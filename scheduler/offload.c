/* Memory offload: hx_offload_config, its "key=value,..." syntax ($HX_OFFLOAD,
 * the CLI), and the placement it implies (parameters, their optimizer state
 * and updates on the host). */
#include "scheduler/offload.h"
#include "scheduler/backend.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

hx_offload_config hx_offload_config_default(void)
{
    hx_offload_config c = {.offload_param = HX_OFFLOAD_NONE,
                           .offload_path = "./offload",
                           .host_mem_block_size = (size_t)1 << 30,
                           .enable_aio = true,
                           .enable_pinned_mem = true,
                           .chunk_size = (size_t)32 << 20,
                           .prefetch_depth = 1};
    return c;
}

/* "123", "64KB", "32MB", "2GB" (powers of 1024; B optional). */
static bool parse_size(const char *v, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || errno || *v == '-') return false;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    else if (*end == 'T' || *end == 't') shift = 40, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end || (shift && x > (~0ull >> shift))) return false;
    *out = (size_t)(x << shift);
    return true;
}

static bool parse_bool(const char *v, bool *out)
{
    if (!strcasecmp(v, "true") || !strcmp(v, "1")) *out = true;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0")) *out = false;
    else return false;
    return true;
}

/* Sets one key on c; false (message set) on a bad key or value. */
static bool set_key(hx_offload_config *c, const char *k, const char *v)
{
    const char *takes = NULL;
    if (!strcmp(k, "offload_param")) {
        if (!strcasecmp(v, "none")) c->offload_param = HX_OFFLOAD_NONE;
        else if (!strcasecmp(v, "cpu")) c->offload_param = HX_OFFLOAD_CPU;
        else if (!strcasecmp(v, "disk")) c->offload_param = HX_OFFLOAD_DISK;
        else takes = "none, cpu or disk";
    } else if (!strcmp(k, "offload_path")) {
        if (!*v || strlen(v) >= HX_OFFLOAD_PATH_MAX) takes = "a non-empty path under 512 bytes";
        else snprintf(c->offload_path, sizeof c->offload_path, "%s", v);
    } else if (!strcmp(k, "offload_cpu_size")) {
        if (!parse_size(v, &c->offload_cpu_size)) takes = "a size in bytes (suffix KB, MB or GB)";
    } else if (!strcmp(k, "offload_disk_size")) {
        if (!parse_size(v, &c->offload_disk_size)) takes = "a size in bytes (suffix KB, MB or GB)";
    } else if (!strcmp(k, "host_mem_block_size")) {
        if (!parse_size(v, &c->host_mem_block_size) || !c->host_mem_block_size)
            takes = "a size > 0 in bytes (suffix KB, MB or GB)";
    } else if (!strcmp(k, "chunk_size")) {
        if (!parse_size(v, &c->chunk_size)) takes = "a size in bytes (suffix KB, MB or GB; 0: 32 MB)";
    } else if (!strcmp(k, "enable_aio")) {
        if (!parse_bool(v, &c->enable_aio)) takes = "true or false";
    } else if (!strcmp(k, "enable_pinned_mem")) {
        if (!parse_bool(v, &c->enable_pinned_mem)) takes = "true or false";
    } else if (!strcmp(k, "auto_offload")) {
        if (!parse_bool(v, &c->auto_offload)) takes = "true or false";
    } else if (!strcmp(k, "prefetch_depth")) {
        char *end;
        long d = strtol(v, &end, 10);
        if (end == v || *end || d < 0 || d > 64) takes = "an integer in [0, 64]";
        else c->prefetch_depth = (int)d;
    } else {
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "hx_offload_config_parse: unknown key '%s'; the keys are offload_param, "
                  "offload_path, offload_cpu_size, offload_disk_size, host_mem_block_size, "
                  "enable_aio, enable_pinned_mem, auto_offload, chunk_size, prefetch_depth", k);
        return false;
    }
    if (takes)
        hx__error(HX_ERR_INVALID_ARGUMENT, "hx_offload_config_parse: %s='%s': %s takes %s", k, v,
                  k, takes);
    return !takes;
}

static char *trim(char *a)
{
    while (isspace((unsigned char)*a)) a++;
    size_t n = strlen(a);
    while (n && isspace((unsigned char)a[n - 1])) a[--n] = 0;
    return a;
}

hx_status hx_offload_config_parse(const char *spec, hx_offload_config *cfg)
{
    if (!spec || !cfg)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_offload_config_parse: %s is NULL",
                         spec ? "cfg" : "spec");
    char *buf = strdup(spec);
    if (!buf) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_offload_config_parse: out of host memory");
    hx_offload_config c = *cfg;
    hx_status st = HX_OK;
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item && !st; item = strtok_r(NULL, ",", &save)) {
        char *kv = trim(item), *eq = strchr(kv, '=');
        if (!*kv) continue;
        if (!eq) {
            st = hx__error(HX_ERR_INVALID_ARGUMENT, "hx_offload_config_parse: '%s' has no '='; "
                           "write key=value (e.g. offload_param=cpu)", kv);
            break;
        }
        *eq = 0;
        if (!set_key(&c, trim(kv), trim(eq + 1))) st = HX_ERR_INVALID_ARGUMENT;
    }
    free(buf);
    if (!st) *cfg = c;
    return st;
}

hx_status hx__offload_resolve(hx_offload_config *cfg)
{
    const char *env = getenv("HX_OFFLOAD");
    if (cfg->offload_param == HX_OFFLOAD_NONE && !cfg->auto_offload && env && *env) {
        hx_offload_config c = hx_offload_config_default();
        if (hx_offload_config_parse(env, &c)) {
            char msg[640];
            snprintf(msg, sizeof msg, "%s", hx_last_error());
            return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: $HX_OFFLOAD: %s", msg);
        }
        *cfg = c;
    }
    if ((unsigned)cfg->offload_param > HX_OFFLOAD_DISK || cfg->prefetch_depth < 0)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_session_create: offload.offload_param must "
                         "be one of HX_OFFLOAD_* and offload.prefetch_depth >= 0 (it is %d)",
                         cfg->prefetch_depth);
    if (cfg->offload_param == HX_OFFLOAD_DISK)
        return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: offload_param=disk is not "
                         "available yet; use offload_param=cpu (parameters in host memory)");
    if (cfg->auto_offload)
        return hx__error(HX_ERR_UNSUPPORTED, "hx_session_create: auto_offload is not available "
                         "yet; set offload_param=cpu to stream parameters from host memory");
    if (!cfg->chunk_size) cfg->chunk_size = (size_t)32 << 20;
    return HX_OK;
}

hx_status hx__offload_place(hx_session *s)
{
    if (!hx__offload_on(s)) return HX_OK;
    const hx_graph *g = s->g;
    hx_backend *host = s->be[HX_DEV_HOST];
    for (int i = 0; i < g->n; i++) {
        const hx_tensor *t = g->tensors[i];
        if (t->kind != HX_TENSOR_UPDATE || s->target[i] != HX_TARGET_DEVICE) continue;
        if (!host->kernel(host, t->op, t->dtype))
            return hx__error(HX_ERR_NO_KERNEL, "hx_session_create: offload_param: the update of "
                             "'%s' (%s) has no CPU kernel; it cannot run on the host",
                             t->param->name, hx__ops[t->op].name);
        s->target[i] = HX_TARGET_CPU;
        s->why[i] = HX_WHY_OFFLOAD;
        for (int k = 2; k < t->n_src; k++)
            if (t->src[k]->kind == HX_TENSOR_STATE) {
                s->target[t->src[k]->id] = HX_TARGET_CPU;
                s->why[t->src[k]->id] = HX_WHY_OFFLOAD;
            }
    }
    for (int i = 0; i < g->n; i++) /* parameters, with or without an update */
        if (g->tensors[i]->kind == HX_TENSOR_PARAMETER && s->target[i] == HX_TARGET_DEVICE) {
            s->target[i] = HX_TARGET_CPU;
            s->why[i] = HX_WHY_OFFLOAD;
        }
    return HX_OK;
}
