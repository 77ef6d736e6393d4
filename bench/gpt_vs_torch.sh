#!/usr/bin/env bash
# On a GPU machine, after tests/gpu/prepare_gpu_run.sh here: `hetex gpt` on
# the CUDA backend (optimizer on the device, and offloaded to the host) and
# bench/gpt_torch.py (the same model, batches and optimizer in PyTorch) on
# the same GPU, for a small and a nanoGPT-sized model, in each of DTYPES,
# each run under a time limit. Everything goes to one log,
# $OUT/gpt-vs-torch.log (or gpu-out/): the step lines of both, and torch's
# JSON line. STEPS (300), DTYPES ("bf16 f32"), LIMIT seconds per run (90),
# HETEX (the binary; .gpu-libs/bin/hetex), NO_TORCH=1 to skip PyTorch.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
log=$out/gpt-vs-torch.log
hetex=${HETEX:-.gpu-libs/bin/hetex}
. tests/gpu/gpu_env.sh # the carried packages on LD_LIBRARY_PATH
small="--layers 2 --heads 4 --width 128 --context 64 --batch 32"
large="--layers 6 --heads 6 --width 384 --context 256 --batch 64"
run() {
  echo "== $*" >>"$log"
  timeout "${LIMIT:-90}" "$@" >>"$log" 2>&1
  echo "== exit $?" >>"$log"
}
: >"$log"
for dt in ${DTYPES:-bf16 f32}; do
  common="--steps ${STEPS:-300} --eval-every 100 --eval-iters 10 --dtype $dt"
  for cfg in small large; do
    run "$hetex" gpt ${!cfg} $common --accelerator cuda --offload none
    run "$hetex" gpt ${!cfg} $common --accelerator cuda --offload optimizer
    [ -n "${NO_TORCH:-}" ] || run python3 bench/gpt_torch.py ${!cfg} $common
  done
done
grep -E '^(==|step|hetex gpt|torch gpt|\{)' "$log"
