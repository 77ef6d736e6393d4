#!/usr/bin/env bash
# On a GPU machine, after `tests/gpu/prepare_gpu_run.sh --host-cpu` here
# (carry .gpu-libs): the host side on that machine's CPU, which is another
# one than the development machine's (other cores, maybe AVX-512 or Zen 4,
# the CPU issue 21's LazyAdam study asks for). Its model and flags (lscpu),
# the kernels' accuracy and bitwise suites on the paths it has (test_vmath,
# test_kernels, test_optim, test_embedding_optim: each ISA the CPU offers
# against the scalar path), then bench_optim at 64M params (the issue's size), 1 and 2
# threads, the ceilings measured in the same run. Into $OUT/host-cpu.log and
# $OUT/optim-host.json (or gpu-out/). LIMIT seconds per program (60).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
log=$out/host-cpu.log
limit=${LIMIT:-60}
. tests/gpu/gpu_env.sh
bin=.gpu-libs/bin-cpu
[ -x "$bin/bench_optim" ] || { echo "no $bin/bench_optim: run prepare_gpu_run.sh --host-cpu" | tee -a "$log"; exit 2; }
{
  echo "== lscpu"
  lscpu | grep -E '^(Model name|Vendor ID|CPU\(s\)|Thread|Core|Socket|L1d|L2|L3|NUMA node\(s\)|Flags)'
  echo "== uptime: $(uptime)"
} >"$log" 2>&1
status=0
for t in test_vmath test_kernels test_optim test_embedding_optim; do
  echo "== $t" >>"$log"
  t0=$SECONDS
  timeout "$limit" "$bin/$t" >>"$log" 2>&1
  rc=$?
  case $rc in 0) r=passed ;; 77) r=skipped ;; 124) r="TIMED OUT (${limit} s)" ;; *) r="FAILED ($rc)" ;; esac
  echo "$t: $r ($((SECONDS - t0)) s)" | tee -a "$log"
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
done
# the bench on 2 of the machine's cores (its 1- and 2-thread figures)
t0=$SECONDS
OMP_PROC_BIND=close timeout "$((2 * limit))" "$bin/bench_optim" 67108864 >"$out/optim-host.json" 2>>"$log"
echo "bench_optim: exit $? ($(wc -l <"$out/optim-host.json") lines, $((SECONDS - t0)) s)" | tee -a "$log"
exit "$status"
