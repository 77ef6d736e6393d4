#!/usr/bin/env bash
# On a GPU machine, after tests/gpu/prepare_gpu_run.sh here: the examples'
# paths that only a real device exercises (copies on their own streams,
# pinned memory, events), each under a time limit, into one log
# $OUT/examples.log (or gpu-out/) and a Chrome trace of wide & deep:
#   - GPT with every parameter offloaded to the host (offload_param=cpu),
#     whose losses must equal the same run without offload (bench/gpt_vs_torch.sh's
#     "offload none" run of the large model: val 2.4531 at 100 steps, bf16);
#   - GPT under a device cap that auto_offload must plan for (the activations
#     alone exceed it);
#   - GPT in f16 with dynamic loss scaling, and with the delayed parameter update;
#   - wide & deep on cuda and on the host alone;
#   - the large GPT with every block recomputed (its losses must equal the
#     "offload none" run; the steps/s against it is the overhead), and placed
#     by the measured cost model on the real device (--placement auto);
#   - ResNet-20 on Fashion-MNIST on cuda, one epoch (the conv kernels). The
#     tree with the 45 MB training images does not fit beside .gpu-libs in
#     the 64 MiB a device call carries; where they were left behind, it
#     trains on the 10k test images (an accuracy that means nothing: this
#     checks and times the kernels).
# LIMIT seconds per run (60), HETEX (the binary; .gpu-libs/bin/hetex).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
log=$out/examples.log
hetex=${HETEX:-.gpu-libs/bin/hetex}
. tests/gpu/gpu_env.sh # the carried packages on LD_LIBRARY_PATH
run() {
  echo "== $*" >>"$log"
  timeout "${LIMIT:-60}" "$@" >>"$log" 2>&1
  echo "== exit $?" >>"$log"
}
: >"$log"
large="--layers 6 --heads 6 --width 384 --context 256 --batch 64 --steps 200 --eval-every 100 --eval-iters 10"
small="--steps 300 --eval-every 100 --eval-iters 10"
run "$hetex" gpt $large --dtype bf16 --accelerator cuda --offload none --offload-config offload_param=cpu
run "$hetex" gpt $large --dtype bf16 --accelerator cuda --offload none --max-device-memory 1600M \
  --offload-config auto_offload=true
run "$hetex" gpt $small --dtype f16 --accelerator cuda --offload none
run "$hetex" gpt $small --dtype bf16 --accelerator cuda --offload optimizer --dpu 20
run "$hetex" widedeep --epochs 2 --accelerator cuda --trace "$out/widedeep-cuda-trace.json"
run "$hetex" widedeep --epochs 2 --accelerator none
run "$hetex" gpt $large --dtype bf16 --accelerator cuda --offload none --recompute
run "$hetex" gpt $large --dtype bf16 --accelerator cuda --offload none --placement auto
fm=data/fashion-mnist
if [ ! -f $fm/train-images-idx3-ubyte ]; then
  fm=$out/fm-stand-in && mkdir -p $fm && cp data/fashion-mnist/t10k-* $fm/
  cp $fm/t10k-images-idx3-ubyte $fm/train-images-idx3-ubyte
  cp $fm/t10k-labels-idx1-ubyte $fm/train-labels-idx1-ubyte
fi
LIMIT=$((2 * ${LIMIT:-60})) run "$hetex" resnet --data $fm --epochs 1 --dtype bf16 --accelerator cuda
rm -rf "$out/fm-stand-in"
grep -vE '^\s*$' "$log" | grep -vE '^(plan:|  offload )' | cut -c1-400
