#!/usr/bin/env bash
# On a GPU machine, after `tests/gpu/prepare_gpu_run.sh --mpi` here (carry
# .gpu-libs): the programs built with MPI and NCCL, each a one-rank job
# started without mpirun (MPI's singleton start, on the carried Open MPI):
#   - test_gpu_nccl: the NCCL clique bootstrapped over MPI, its collectives;
#   - hetex gpt --zero S on cuda for S = 0, 1, 2 and 3 (3 with its
#     parameters on the host, as it requires), whose val losses must equal
#     the same run without MPI (one rank sums nothing: the ZeRO session's
#     sharding, gathers and the host chunks it reduces in run, and change
#     no value): the optimizer on the host (gpt's default on cuda), so that
#     the ranks sum the gradients in host memory;
#   - the optimizer on the device (--offload none): --zero 0 sums the
#     gradients in GPU memory over NCCL (the same val loss as without MPI),
#     --zero 1 is refused, naming the update on the device.
# Into $OUT/mpi.log (or gpu-out/). LIMIT seconds per run (60).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
log=$out/mpi.log
: >"$log"
limit=${LIMIT:-60}
. tests/gpu/gpu_env.sh
{
  echo "Open MPI: ${mpi_root:-not carried (prepare_gpu_run.sh --mpi)}"
  echo "NCCL: ${nccl_lib:-none found}"
} | tee -a "$log"
bin=.gpu-libs/bin-mpi
[ -x "$bin/test_gpu_nccl" ] || { echo "no $bin/test_gpu_nccl: run prepare_gpu_run.sh --mpi" | tee -a "$log"; exit 2; }
run() {
  echo "== $*" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  echo "== exit $rc" >>"$log"
  echo "$(basename "$1") ${*:2:3}: exit $rc"
}
run "$bin/test_gpu_nccl"
small="--layers 2 --heads 4 --width 128 --context 64 --batch 32 --steps 100 --eval-every 50 --eval-iters 4 --dtype bf16 --accelerator cuda"
output() { # what the run whose "== command" line is exactly $* printed
  awk -v c="== $*" '$0 == c {on = 1; next} on && /^== exit/ {exit} on' "$log"
}
val() { output "$@" | sed -n 's/.*final val loss //p' | head -1; }
same() { # the val loss of run B must equal run A's, digit for digit
  local a b
  a=$(val "$1") b=$(val "$2")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then r="same val loss $a"; else r="DIFFER: '$a' against '$b'"; fi
  echo "check: $(echo "$2" | grep -o -- '--zero [0-3].*') against no MPI: $r" | tee -a "$log"
}
plain=".gpu-libs/bin/hetex gpt $small"
run $plain
for s in 0 1 2; do run "$bin/hetex" gpt $small --zero $s; same "$plain" "$bin/hetex gpt $small --zero $s"; done
run $plain --offload-config offload_param=cpu
run "$bin/hetex" gpt $small --zero 3 --offload-config offload_param=cpu
same "$plain --offload-config offload_param=cpu" "$bin/hetex gpt $small --zero 3 --offload-config offload_param=cpu"
# the optimizer on the device: its gradients stay in GPU memory, summed
# there over NCCL at stage 0; the sharding stages refuse it by name
run $plain --offload none
HX_DEBUG=zero run "$bin/hetex" gpt $small --offload none --zero 0
grep -q "gradients summed in cuda device memory over NCCL" "$log" &&
  echo "check: --offload none --zero 0 sums over NCCL (HX_DEBUG=zero says so)" | tee -a "$log" ||
  echo "check: --offload none --zero 0 did NOT say it sums over NCCL" | tee -a "$log"
same "$plain --offload none" "$bin/hetex gpt $small --offload none --zero 0"
run "$bin/hetex" gpt $small --offload none --zero 1
output "$bin/hetex" gpt $small --offload none --zero 1 | grep -q "runs on the cuda device" &&
  echo "check: --offload none --zero 1 refused, naming the device update" | tee -a "$log" ||
  echo "check: --offload none --zero 1 NOT refused as expected" | tee -a "$log"
grep -E "^== |summary:|^zero:|^check:|hetex zero:|hx_session_create" "$log"
