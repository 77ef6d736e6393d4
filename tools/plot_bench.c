/* hetex plot --bench: a benchmark's results (bench/results/NAME.json or
 * .jsonl, one JSON object a line) drawn as the pictures the table below defines for
 * its benchmark, which the file's name starts with. Each benchmark's
 * numbers mean something of their own (a ratio to the ceiling measured in
 * the same run, a rate, bytes against ranks), so each row says which lines,
 * which fields and what kind of picture, and its title says what the
 * numbers are against. */
#include "plot.h"
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_plot {
    const char *file;   /* the results file's name starts with this (or "a-|b-": one of them) */
    const char *part;   /* the PNG is NAME<part>.png */
    const char *where;  /* "key=value": only such lines (NULL: all) */
    const char *x;      /* BARS: the fields naming a bar's group; LINES: the numeric x field */
    const char *series; /* the fields naming a series (NULL: one series per y field) */
    const char *y;      /* the fields drawn, a series each ("a,b"), or one series of the
                           first a line has ("a|b"); lines with none are left out */
    plot_kind kind;
    double ref;         /* a line across at this y: 1 where y is a ratio to a ceiling */
    const char *ylabel, *title;
} bench_plot;

#define RATIO(f, part, where, x, series, y, what, title) \
    {f, part, where, x, series, y, PLOT_BARS, 1, what, title}
#define BARS(f, part, where, x, series, y, what, title) \
    {f, part, where, x, series, y, PLOT_BARS, 0, what, title}
#define LINES(f, part, where, x, series, y, what, title) \
    {f, part, where, x, series, y, PLOT_LINES, 0, what, title}

static const bench_plot table[] = {
    BARS("attn-permute-", "", "bench=gpt-attn", "config,dtype,rep", "tree", "tokens_per_s",
         "tokens/s", "hetex gpt on the CPU before (base) and after (new) attention's matmuls "
         "read and write through the head permutes, runs alternating"),
    RATIO("attn-permute-", "-ops", "bench=gpt-attn-trace", "config,dtype,rep", NULL,
          "attn_new_over_base_normalised", "new over base",
          "attention's matmuls and head permutes (HX_TRACE), each over the other GEMMs of its run: "
          "new over base (line at 1)"),
    BARS("attn-permute-", "-peer", "case=run", "config,dtype,rep", NULL,
         "hetex_tokens_per_s,torch_tokens_per_s", "tokens/s",
         "GPT f32 on the CPU after the change: hetex against PyTorch (./build.sh bench gpt-peer)"),
    RATIO("bf16-gemm-", "", "bench=gemm_half", "case,threads", NULL,
          "half_over_widened,ratio_to_f32", "time over the oneDNN engine's",
          "bf16 GEMM (hx_k_gemm_half) through oneDNN: the widened OpenBLAS engine's time and "
          "the f32 GEMM's over it, same run (line at 1)"),
    RATIO("dnnl-percall-", "", "threads=1", "case", "build", "half_over_widened",
          "widened engine's time over the oneDNN engine's",
          "bf16 GEMM, 1 thread: oneDNN state made per call (base) or kept per thread (new), "
          "each over the widened OpenBLAS engine in the same run (line at 1)"),
    BARS("bf16-gemm-", "-gpt", "case=run", "config,dtype,round", "gemm", "hetex_tokens_per_s",
         "tokens/s", "hetex gpt on the CPU, bf16 GEMM widened for OpenBLAS (openblas) or through "
         "oneDNN (onednn), runs interleaved"),
    RATIO("bf16-gemm-", "-gpt-ratio", "case=run", "config,dtype,round", "gemm", "ratio",
          "hetex tokens/s over torch's", "hetex gpt over the PyTorch run beside it (bf16: torch "
          "autocast), bf16 GEMM widened (openblas) or through oneDNN (line at 1: torch)"),
    RATIO("bf16-host-", "", "case=bf16", "fn,rows,n", NULL, "chain_over_half,f32_over_half",
          "time over the 16-bit kernel's", "bf16 elementwise, softmax, layernorm kernels: the "
          "widen-f32-round chain's time and the f32 kernel's over the 16-bit kernel's, same run "
          "(line at 1)"),
    RATIO("bf16-host-", "-gelu", "case=gelu_saved", "dtype", NULL, "recompute_over_saved",
          "time over the saving pair's", "GELU forward + backward: recomputing the sigmoid "
          "over keeping the derivative, same run (line at 1)"),
    BARS("bf16-host-", "-gpt", "bench=gpt-half", "config,dtype,rep", "tree", "tokens_per_s",
         "tokens/s", "hetex gpt on the CPU before (base) and after (new), runs interleaved"),
    RATIO("conv-", "", "bench=conv", "case,direction", NULL, "fraction_of_sgemm",
          "GFLOP/s over sgemm's", "conv2d: GFLOP/s over sgemm's in the same run (line at 1: the sgemm ceiling)"),
    BARS("conv-", "-vs-torch", NULL, "case,direction", "bench", "gflops", "GFLOP/s",
         "conv2d GFLOP/s: hetex (conv) against PyTorch (conv_torch) in the same run"),
    RATIO("cuda-", "", NULL, "case,dtype,M", NULL, "ratio_to_cublas|ratio_to_memcpy|pinned_ratio",
          "ratio to the ceiling", "CUDA kernels over their ceiling in the same run (gemm: "
          "cuBLAS; elementwise: a device memcpy; copies: raw pinned cudaMemcpy)"),
    RATIO("devcache-", "", "case=cache", "ids,cache_fraction", NULL, "moved_over_no_cache,time_over_no_cache",
          "over no cache's", "device cache of hot rows: rows moved and step time over the table's "
          "without the cache in the same run (line at 1: no cache)"),
    BARS("devcache-", "-hits", "case=cache", "ids,cache_fraction", NULL, "hit_rate", "hit rate",
         "device cache of hot rows: hit rate (distinct rows a step) by ids and cache size"),
    RATIO("devcache-pin-", "", "case=cache", "ids,cache_fraction", "variant", "time_over_no_cache",
          "step time over no cache's", "device cache, local table: cached step time over uncached, before "
          "and after s16's read-ahead (line at 1; #k: k-th run)"),
    BARS("devcache-pin-", "-moved", "case=cache", "ids,cache_fraction", "variant", "moved_over_no_cache",
         "rows moved over no cache's", "device cache, local table: rows moved a step over the uncached "
         "table's, before and after (#k: k-th run)"),
    RATIO("dispatch-", "", NULL, "case,backend,threads", NULL, "ratio_to_plain",
          "plain loop's time over hetex's", "op dispatch: speed as a fraction of a plain C loop "
          "over the same ops in the same run (line at 1: the loop)"),
    RATIO("embedding-", "", NULL, "case,ids", "threads", "x_gather", "time over a gather's",
          "embedding ops: time over a plain gather of the same ids in the same run (line at 1: "
          "the gather)"),
    BARS("embedding-ssd-compare-", "", "case=compare", "ids,policy,write_ahead", NULL, "samples_per_s",
         "samples/s", "table on disk, cache variants stepped in turn on the same ids: samples/s"),
    BARS("embedding-ssd-compare-", "-hits", "case=compare", "ids,policy,write_ahead", NULL,
         "hit_rate,hit_rate_of_rows_on_disk_or_cached", "hit rate",
         "table on disk, cache variants on the same ids: hit rate (all lookups; rows with a value)"),
    BARS("embedding-ssd-compare-", "-io", "case=compare", "ids,policy,write_ahead", NULL,
         "io_wait_ms_per_step,io_bound_step_ms,step_ms", "ms per step",
         "table on disk, cache variants: I/O wait, the disk's bound for the step's I/O, the step"),
    BARS("embedding-ssd-", "", NULL, "case,ids", NULL, "samples_per_s", "samples/s",
         "a table of twice the RAM: on disk behind a cache (ssd), in memory, and on a backing file"),
    RATIO("gemm-f32-rules-", "", "bench=gemm_f32", "config,case,threads", NULL,
          "whole_n_speedup,large_speedup", "sgemm's time over the rule's",
          "f32 GEMMs of a GPT step on the oneDNN engine under each f32 rule (whole_n, large): "
          "OpenBLAS's median wall time over the rule's, same run (line at 1)"),
    RATIO("gemm-f32-rules-", "-cpu", "threads=1", "config,case", NULL,
          "whole_n_cpu_speedup,large_cpu_speedup", "sgemm's CPU time over the rule's",
          "f32 GEMMs of a GPT step, 1 thread: OpenBLAS's median CPU time over each f32 rule's, "
          "same run (line at 1)"),
    BARS("gemm-f32-gpt-", "", "case=run", "config,dtype,threads,round", "engine", "tokens_per_s",
         "tokens/s", "hetex gpt on the CPU: each f32 GEMM rule (whole_n: main's build), the "
         "oneDNN engine and OpenBLAS, runs rotated"),
    BARS("gemm-f32-gpt-", "-cpu", "threads=1", "config,dtype,round", "engine", "user_s",
         "user CPU seconds (less: faster)", "hetex gpt on the CPU, 1 thread: the process's user "
         "CPU time under each f32 GEMM rule, the oneDNN engine and OpenBLAS, runs rotated"),
    BARS("gpt-capacity-", "", NULL, "case", "capacity_mib", "params_over_none",
         "parameters over no offload's", "largest GPT that trains under a device cap: "
         "parameters over no offload's (#2: a second run)"),
    RATIO("gpt-", "", NULL, "case", NULL, "ratio", "GFLOP/s over sgemm's",
          "GPT training step: GFLOP/s over the sgemm ceiling measured in the same run"),
    BARS("gpt-peer-ab-", "", "case=run", "config,rep", "build", "hetex_tokens_per_s", "tokens/s",
         "hetex gpt f32 on the CPU before (base) and after (new), each run beside a PyTorch "
         "run (./build.sh bench gpt-peer)"),
    RATIO("gpt-peer-ab-", "-ratio", "case=run", "config,rep", "build", "ratio",
          "hetex tokens/s over torch's", "hetex gpt f32 before (base) and after (new): tokens/s "
          "over the PyTorch run beside it (line at 1: torch)"),
    BARS("gpt-peer-runs-", "", "case=run", "config,dtype,rep", NULL,
         "hetex_tokens_per_s,torch_tokens_per_s", "tokens/s",
         "GPT on the CPU: hetex against PyTorch, runs interleaved (./build.sh bench gpt-peer)"),
    BARS("gpt-peer-", "-fusion", "bench=gpt-fusion", "config,order", "fusion", "tokens_per_s",
         "tokens/s", "hetex GPT f32 on the CPU: fusion off and on, runs interleaved"),
    RATIO("gpt-peer-", "-epilogue", "bench=fusion", "case,threads", NULL,
          "fused_over_chain,ratio_to_gemm", "time over the fused kernel's",
          "fused GEMM epilogue: the unfused chain's time and the GEMM alone's over the fused "
          "kernel's, same run (line at 1)"),
    RATIO("host-kernels-|vmath-", "", "bench=vmath", "fn,rows,n", NULL, "ratio_to_copy", "GB/s over a copy's",
          "vector math: GB/s over a copy of the same bytes in the same run (line at 1: the copy)"),
    BARS("host-kernels-", "-gpt-peer", "case=run", "config,dtype,rep", NULL,
         "hetex_tokens_per_s,torch_tokens_per_s", "tokens/s",
         "GPT on the CPU: hetex against PyTorch, runs interleaved"),
    RATIO("hostk-", "", "bench=gemm_half", "case", NULL, "half_over_widened,ratio_to_f32",
          "time over hx_k_gemm_half's", "bf16 GEMM: the widened path's time and the f32 GEMM's "
          "over hx_k_gemm_half's, same run (line at 1)"),
    RATIO("house-before-after-", "-optim", "bench=optim", "case,threads", "tree", "ratio",
          "GB/s over the ceiling's", "optimizer updates before and after the house moves: GB/s "
          "over the same-shape ceiling"),
    BARS("house-before-after-", "-gpt", "bench=gpt", "case", "tree", "tokens_per_s", "tokens/s",
         "GPT training tokens/s before and after the house moves"),
    BARS("house-before-after-", "-embedding", "bench=embedding", "case,ids,threads", "tree",
         "samples_per_s", "samples/s", "embedding ops before and after the house moves"),
    BARS("memory-chunks-", "", "case=chunks_gpt_24x1024_fp16", "range", NULL, "waste_pct",
         "% of chunk memory holding no parameter", "chunk-size search on the GPT 24x1024 fp16 "
         "layout: waste of the best chunk size in each range"),
    RATIO("memory-", "", NULL, "case", NULL, "pools_ratio,baseline_ratio",
          "peak reserved over peak live", "device memory: peak reserved over peak live bytes "
          "(line at 1: no waste), hetex's pools against a caching baseline"),
    RATIO("offload-", "", NULL, "case,layers,cap", NULL, "throughput_vs_uncapped",
          "steps/s over the uncapped run's", "parameter offload under a device cap: steps/s over "
          "the uncapped run's in the same run (line at 1)"),
    RATIO("optim-", "", NULL, "case,n,threads", NULL, "ratio", "GB/s over the ceiling's",
          "optimizer updates: GB/s over the ceiling of the same memory access shape in the same run"),
    RATIO("overlap-", "", "bench=overlap", "case,threads", NULL, "step_over_max",
          "step time over the longer lane's", "host and device lanes: step time over the longer "
          "lane's (line at 1: full overlap; #k: the k-th run)"),
    RATIO("pin-", "", NULL, "ranks,rank,load,rep", NULL, "pinned_over_unpinned,ratio_pinned,ratio_unpinned",
          "GB/s over unpinned's or the ceiling's", "host AdamW per rank, update threads pinned: GB/s "
          "over unpinned's, and each over the ceiling in the same run (line at 1)"),
    RATIO("placement-", "", NULL, "graph,nodes", "device_speedup",
          "auto_vs_best_single_side,auto_vs_best_manual", "automatic placement's time over the best other's",
          "automatic placement: step time over the best single side's or hand placement's (line at 1: equal)"),
    LINES("ps-", "", "rank=0", "ranks", "ids", "dedup_saving", "bytes without de-dup over with",
          "sharded table lookups: bytes saved by de-duplicating ids, against ranks (rank 0)"),
    LINES("ps-", "-rate", "rank=0", "ranks", "ids", "ratio_to_alone",
          "lookups/s over a plain lookup's", "sharded table lookups: lookups/s over a plain "
          "lookup's in the same run, against ranks (rank 0)"),
    RATIO("ps-devcache-", "", "bench=ps_devcache", "ranks,ids,cache_rows", NULL,
          "moved_over_no_cache,bytes_over_no_cache,time_over_no_cache", "over no cache's",
          "server mode, one worker: a device cache's rows moved, bytes and step time over the table's "
          "without it, same run (line at 1: no cache)"),
    BARS("ps-devcache-", "-hits", "bench=ps_devcache", "ranks,ids,cache_rows", NULL, "hit_rate", "hit rate",
         "server mode, one worker: the device cache's hit rate (distinct rows a step)"),
    RATIO("ps-devcache-workers-", "", "bench=ps_devcache_workers", "ids,cache_rows,worker", NULL,
          "moved_over_no_cache,bytes_over_no_cache,time_over_no_cache", "over no cache's",
          "server mode, 2 workers' hot rows: rows moved, bytes, step time over no cache's (line at 1)"),
    BARS("ps-devcache-workers-", "-hits", "bench=ps_devcache_workers", "ids,cache_rows,worker", NULL, "hit_rate",
         "hit rate", "server mode, two workers: the hot rows' hit rate (distinct rows a lookup)"),
    RATIO("shard-devcache-", "", "bench=shard_devcache", "ids,cache_rows,rank", NULL,
          "moved_over_no_cache,bytes_over_no_cache,time_over_no_cache", "over no cache's",
          "collective mode, 2 ranks' hot rows: rows moved, bytes, step time over no cache's (line at 1)"),
    BARS("shard-devcache-", "-hits", "bench=shard_devcache", "ids,cache_rows,rank", NULL, "hit_rate", "hit rate",
         "collective mode, two ranks: the hot rows' hit rate (distinct rows a lookup)"),
    RATIO("ps-devcache-pin-", "", "bench=ps_devcache", "ranks,ids,cache_rows", "variant", "time_over_no_cache",
          "step time over no cache's", "server mode, one worker: cached step time over uncached, before and "
          "after s16's read-ahead (line at 1; #k: k-th run)"),
    BARS("ps-devcache-pin-", "-moved", "bench=ps_devcache", "ranks,ids,cache_rows", "variant",
         "moved_over_no_cache", "rows moved over no cache's", "server mode, one worker: rows moved a step "
         "over the uncached table's, before and after (#k: k-th run)"),
    RATIO("ps-devcache-slots-", "", "bench=ps_devcache", "ranks,ids,cache_rows", "variant", "time_over_no_cache",
          "step time over no cache's", "server mode, one worker: cached step time over uncached, before and "
          "after the update reuses the lookup's slots (line at 1; #k: k-th run)"),
    RATIO("ps-cpu-2026-11-26-server", "", "rank=0", "ranks,mode,staleness", NULL, "ratio_to_alone",
          "samples/s over a table of its own", "training steps, rank 0: samples/s over its steps on "
          "a table of its own in the same run (line at 1)"),
    BARS("ps-cpu-2026-11-26-server", "-bytes", "rank=0", "ranks,mode,staleness", NULL, "bytes_per_step",
         "bytes a step", "training steps, rank 0: bytes sent a step (server mode: pulls, "
         "rows back, pushes)"),
    BARS("python-", "", NULL, "side,case", NULL, "us", "microseconds a call",
         "binding overhead: microseconds a call from C (c) and Python (py); #k: the k-th run"),
    BARS("recompute-", "", NULL, "mode", NULL, "largest_context,largest_layers",
         "the largest that trains", "GPT under a 16 MiB device cap: the longest context and "
         "the most layers that train, by activation policy"),
    BARS("widedeep-", "", NULL, "case", NULL, "samples_per_s", "samples/s",
         "wide & deep training: all on the host (none) and with the emulated device (emu)"),
    LINES("zero-", "", "rank=0", "ranks", "stage,offload_param", "model_state_bytes", "bytes",
          "ZeRO: model-state bytes on rank 0 against ranks, by stage"),
    LINES("zero-", "-comm", "rank=0", "ranks", "stage,offload_param", "bytes_per_step", "bytes a step",
          "ZeRO: bytes rank 0 sends a step against ranks, by stage"),
    LINES("zero-cpu-2026-11-26-s12", "-hidden", "rank=0", "ranks", "stage,offload_param", "hidden_share",
          "1 - comm wait with overlap / without", "ZeRO: share of the communication hidden, rank 0, "
          "by stage (median wait a step)"),
    LINES("zero-cpu-2026-11-26-s13-bytes", "-ratio", NULL, "ranks", "stage,offload_param,rank", "bytes_ratio",
          "bytes a step over the minimum", "ZeRO: bytes each rank sends a step over the theoretical "
          "minimum of its stage, against ranks (no padding: variable-length blocks)"),
    LINES("zero-cpu-2026-11-26-s13", "-hidden", "rank=0", "ranks", "stage,offload_param,rep", "hidden_share",
          "1 - comm wait with overlap / without", "ZeRO: share of the communication hidden, rank 0, "
          "by stage and run (median wait a step)"),
    BARS("zero-cpu-2026-12-07-s14", "-hidden", "stage=2", "ranks,rank,rep", "variant", "hidden_share",
         "1 - comm wait with overlap / without", "ZeRO stage 2: communication hidden, per rank and "
         "run, before and after (groups in backward order)"),
    BARS("zero-cpu-2026-12-07-s14", "-bytes", "rep=1", "stage,offload_param,ranks,rank", "variant",
         "bytes_ratio", "bytes a step over the minimum", "ZeRO: bytes each rank sends a step over the "
         "minimum of its stage, before and after (groups in backward order)"),
    BARS("zero-cpu-2026-12-07-s14", "-memory", "rep=1", "stage,offload_param,ranks,rank", "variant",
         "memory_ratio", "model states over the formula", "ZeRO: each rank's model-state bytes over "
         "the ZeRO formula of its stage, before and after (groups in backward order)"),
    BARS("zero-cpu-2026-12-07-s15", "-hidden", NULL, "stage,ranks,rank,rep", "variant", "hidden_share",
         "1 - comm wait with overlap / without", "ZeRO stages 1-2: communication hidden, per rank and "
         "run, before and after (all-gathers in place, finished in the next forward)"),
    BARS("zero-cpu-2026-12-07-s16", "-hidden", NULL, "stage,ranks,rank,rep", "variant", "hidden_share",
         "1 - comm wait with overlap / without", "ZeRO stages 1-2: communication hidden, per rank and "
         "run, one session alone (before, after) and interleaved sessions"),
    BARS("zero-cpu-2026-12-08-s17-norm", "-hidden", NULL, "rank,rep", "variant", "hidden_share",
         "1 - comm wait with overlap / without", "ZeRO stage 2, 2 ranks: hidden share per rank and run, "
         "the norm's all-gather not counted (before) or counted (after)"),
    BARS("zero-cpu-2026-12-08-s18-hidden", "-hidden", "ranks=2", "round_set,rank,rep", "variant", "hidden_share",
         "1 - comm wait with overlap / without", "ZeRO stage 2, 2 ranks: hidden share per rank and run, "
         "main against the norm's sums taken in the backward (tried, not landed)"),
    BARS("zero-cpu-2026-12-08-s18-hidden", "-last", "rank=0", "round_set,ranks,rep", "variant",
         "hidden_share_last", "1 - last rank's wait with overlap / without", "ZeRO stage 2: hidden share "
         "of the rank that came last to each step (skew left out), per run"),
    RATIO("zero-cpu-2026-12-08-s18-update", "", NULL, "stage,offload_param,ranks,rank", NULL,
          "update_ratio,update_ratio_cold", "GB/s over the ceiling's", "ZeRO host AdamW per rank: GB/s "
          "over its shape's ceiling, cached and from memory, same run (#k: k-th run)"),
    BARS("zero-cpu-2026-12-08-s17-memory", "-ratio", NULL, "stage,offload_param,rank", "layers",
         "memory_ratio", "model states over the formula", "ZeRO at 4 ranks: each rank's model-state "
         "bytes over the formula of its stage, the GPT at 2 and 8 layers (width 128)"),
};
enum { N_ROWS = (int)(sizeof table / sizeof table[0]) };

/* The value of field f as text: a string as it is, a number as "key N"
 * (whole numbers in full). */
static void value(const plot_field *f, char *buf, size_t n)
{
    if (!f->number) snprintf(buf, n, "%s", f->text);
    else if (fabs(f->num) < 1e15 && f->num == (double)(int64_t)f->num)
        snprintf(buf, n, "%s %lld", f->key, (long long)f->num);
    else snprintf(buf, n, "%s %g", f->key, f->num);
}

/* The values of the comma-separated fields `keys` of a line, joined by
 * spaces (fields the line lacks left out). */
static void join(const plot_field *f, int n, const char *keys, char *buf, size_t len)
{
    size_t k = 0;
    *buf = 0;
    for (const char *c = keys; c && *c && k < len;) {
        size_t w = strcspn(c, ",");
        char key[48], v[128];
        snprintf(key, sizeof key, "%.*s", (int)w, c);
        const plot_field *x = plot_json_find(f, n, key);
        if (x) {
            value(x, v, sizeof v);
            k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? " " : "", v);
        }
        c += w + (c[w] == ',');
    }
}

static bool selected(const plot_field *f, int n, const char *where)
{
    if (!where) return true;
    char key[48], v[128];
    size_t w = strcspn(where, "=");
    snprintf(key, sizeof key, "%.*s", (int)w, where);
    const plot_field *x = plot_json_find(f, n, key);
    if (!x) return false;
    if (x->number) snprintf(v, sizeof v, "%g", x->num);
    else snprintf(v, sizeof v, "%s", x->text);
    return !strcmp(v, where + w + 1);
}

/* One line's points for row r into p. false: out of memory. */
static bool add_line(plot *p, const bench_plot *r, const plot_field *f, int n)
{
    if (!selected(f, n, r->where)) return true;
    double x = 0;
    if (r->kind == PLOT_LINES) {
        const plot_field *xf = plot_json_find(f, n, r->x);
        if (!xf || !xf->number) return true;
        x = xf->num;
    }
    char group[128], name[192];
    join(f, n, r->series, group, sizeof group);
    bool first_of = strchr(r->y, '|') != NULL, drawn = false;
    for (const char *c = r->y; *c && !drawn;) {
        size_t w = strcspn(c, ",|");
        char key[48];
        snprintf(key, sizeof key, "%.*s", (int)w, c);
        c += w + (c[w] != 0);
        const plot_field *y = plot_json_find(f, n, key);
        if (!y || !y->number) continue;
        drawn = first_of;
        if (r->kind == PLOT_BARS) {
            char label[128];
            join(f, n, r->x, label, sizeof label);
            if ((x = plot_label(p, label)) < 0) continue; /* past the first 64 groups */
        }
        bool many_y = strchr(r->y, ',') != NULL;
        if (first_of) snprintf(key, sizeof key, "%s", r->ylabel);
        snprintf(name, sizeof name, "%s%s%s", many_y || !*group ? key : "",
                 many_y && *group ? " " : "", group);
        /* a group drawn already in this series: the same case again (another run) */
        plot_series *s = NULL;
        for (int k = 1; k < 100 && !s; k++) {
            char title[224];
            snprintf(title, sizeof title, k > 1 ? "%s #%d" : "%s", name, k);
            s = plot_series_get(p, title);
            for (int i = 0; s && r->kind == PLOT_BARS && i < s->n; i++)
                if (s->x[i] == x) s = NULL;
        }
        if (s && !plot_add(p, s, x, y->num)) return false;
    }
    return true;
}

/* The length of the start of `starts` ("a-|b-") that name begins with, or 0. */
static size_t start_of(const char *name, const char *starts)
{
    size_t best = 0;
    for (const char *c = starts; *c;) {
        size_t w = strcspn(c, "|");
        if (!strncmp(name, c, w) && w > best) best = w;
        c += w + (c[w] == '|');
    }
    return best;
}

/* The rows for the file named `name`: those of the longest matching start. */
static int rows_for(const char *name, const bench_plot **rows)
{
    size_t best = 0;
    int n = 0;
    for (int i = 0; i < N_ROWS; i++) {
        size_t len = start_of(name, table[i].file);
        if (!len || len < best) continue;
        if (len > best) best = len, n = 0;
        rows[n++] = &table[i];
    }
    return n;
}

int plot_bench(const char *results, const char *out_dir)
{
    const char *slash = strrchr(results, '/'), *name = slash ? slash + 1 : results;
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name || (strcmp(dot, ".json") && strcmp(dot, ".jsonl"))) {
        fprintf(stderr, "hetex plot: '%s' is not a results file (bench/results/NAME.json or "
                ".jsonl)\n", results);
        return CLI_EXIT_USAGE;
    }
    int stem = (int)(dot - name);
    const bench_plot *rows[N_ROWS];
    int n_rows = rows_for(name, rows);
    if (!n_rows) {
        fprintf(stderr, "hetex plot: '%s': no picture is defined for its benchmark; known: ", results);
        for (int i = 0; i < N_ROWS; i++)
            if (!i || strcmp(table[i].file, table[i - 1].file))
                fprintf(stderr, "%s%s*", i ? ", " : "", table[i].file);
        fprintf(stderr, " (add a row to the table in tools/plot_bench.c)\n");
        return 1;
    }
    char dir[4096];
    if (out_dir) snprintf(dir, sizeof dir, "%s", out_dir);
    else snprintf(dir, sizeof dir, "%.*splots", (int)(name - results), results);
    FILE *f = fopen(results, "r");
    if (!f) {
        fprintf(stderr, "hetex plot: cannot read '%s': %s\n", results, strerror(errno));
        return 1;
    }
    static plot p[N_ROWS];
    for (int i = 0; i < n_rows; i++)
        p[i] = (plot){.kind = rows[i]->kind, .xlabel = rows[i]->kind == PLOT_LINES ? rows[i]->x : "",
                      .ylabel = rows[i]->ylabel, .ref = rows[i]->ref,
                      .value_ticks = rows[i]->kind == PLOT_LINES};
    char *buf = NULL;
    size_t cap = 0;
    long no = 0;
    int rc = 0;
    static plot_field fields[PLOT_MAX_FIELDS];
    while (!rc && getline(&buf, &cap, f) > 0) {
        no++;
        int n = plot_json_fields(buf, fields, PLOT_MAX_FIELDS);
        if (n < 0) {
            fprintf(stderr, "hetex plot: '%s' line %ld is not a JSON object (results are one "
                    "object a line; inf and nan are not JSON: write null)\n", results, no);
            rc = 1;
        }
        for (int i = 0; i < n_rows && !rc; i++)
            if (!add_line(&p[i], rows[i], fields, n)) rc = 1;
    }
    free(buf);
    fclose(f);
    for (int i = 0; i < n_rows && !rc; i++) {
        char png[4400], title[600];
        snprintf(png, sizeof png, "%s/%.*s%s.png", dir, stem, name, rows[i]->part);
        snprintf(title, sizeof title, "%.*s: %s", stem, name, rows[i]->title);
        if (!p[i].points) {
            fprintf(stderr, "hetex plot: '%s': no line has a number for %s%s%s (tools/plot_bench.c's "
                    "row for %s*)\n", results, rows[i]->y, rows[i]->where ? " where " : "",
                    rows[i]->where ? rows[i]->where : "", rows[i]->file);
            rc = 1;
        } else if (!cli_check_output("plot", "--output-dir", png, CLI_PATH_FILE) ||
                   !plot_draw(&p[i], png, title)) {
            rc = 1;
        } else {
            printf("hetex plot: '%s': %d series, %ld points from '%s'\n", png, p[i].n, p[i].points,
                   results);
        }
    }
    for (int i = 0; i < n_rows; i++) plot_free(&p[i]);
    return rc;
}
