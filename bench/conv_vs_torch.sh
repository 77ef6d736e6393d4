#!/usr/bin/env bash
# bench_conv and PyTorch's CPU convolution (Debian's python3-torch) case by
# case, interleaved so that both see the same load: JSON lines on stdout.
#   bench/conv_vs_torch.sh [--threads N] [--reps N]
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
./build.sh build >/dev/null
py=${PYTHON:-/usr/bin/python3} # Debian's python3-torch is for the system python
"$py" -c 'import torch' 2>/dev/null || { echo "conv_vs_torch.sh: no torch (apt-get install python3-torch)" >&2; exit 1; }
for name in $(build/bench_conv --list | cut -d' ' -f1); do
  build/bench_conv --case "$name" "${args[@]}"
  "$py" bench/conv_torch.py --bench build/bench_conv --case "$name" "${args[@]}"
done
