#!/usr/bin/env bash
# Everything a session with a GPU should run, in one device call (after
# tests/gpu/prepare_gpu_run.sh here; carry .gpu-libs): the GPU tests,
# compute-sanitizer and bench_cuda (run_on_gpu.sh), hetex gpt against
# PyTorch (bench/gpt_vs_torch.sh, DTYPES), the examples' device-only paths
# (examples_on_gpu.sh), and a device trace of the nanoGPT-sized model,
# summarised per lane (bench/trace_summary.py). At most 8 files under $OUT
# (what the device tool brings back): the traces travel as traces.tgz and
# their summaries are appended to summary.txt. About 3 minutes on an H200.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
HX_GPU_TIMEOUT=${HX_GPU_TIMEOUT:-60} bash tests/gpu/run_on_gpu.sh
DTYPES=${DTYPES:-bf16} STEPS=${STEPS:-200} LIMIT=45 bash bench/gpt_vs_torch.sh
LIMIT=45 bash tests/gpu/examples_on_gpu.sh
. tests/gpu/gpu_env.sh # the carried packages on LD_LIBRARY_PATH
HX_TRACE=$OUT/gpt-trace.json timeout 60 .gpu-libs/bin/hetex gpt --layers 6 --heads 6 \
  --width 384 --context 256 --batch 64 --steps 30 --eval-every 30 --eval-iters 1 \
  --dtype bf16 --accelerator cuda --offload none >/dev/null
{
  echo "== device trace of hetex gpt 6x384 bf16, 30 steps (the first second left out)"
  python3 bench/trace_summary.py "$OUT/gpt-trace.json" --skip 1 --top 16
  echo "== device trace of hetex widedeep on cuda"
  python3 bench/trace_summary.py "$OUT/widedeep-cuda-trace.json" --top 8
} >>"$OUT/summary.txt" 2>&1
(cd "$OUT" && tar czf traces.tgz gpt-trace.json widedeep-cuda-trace.json 2>/dev/null &&
   rm -f gpt-trace.json widedeep-cuda-trace.json)
cat "$OUT/summary.txt"
