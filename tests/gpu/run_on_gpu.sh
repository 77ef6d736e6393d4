#!/usr/bin/env bash
# Run on the GPU machine, in the repository root of a copy of the working
# tree, with .gpu-libs/ carried in (tests/gpu/prepare_gpu_run.sh made it).
# No package registry or network is needed. Writes its logs under $OUT (or
# ./gpu-out): device.txt, gpu-tests.log, memcheck.log, bench_cuda.json,
# summary.txt; copy bench_cuda.json into bench/results/ with the date and device.
#
# Programs: the prebuilt ones in .gpu-libs/bin when present; otherwise the
# tree is built here (needs cmake, a C compiler and nvcc, as the GPU image
# has) against the carried OpenBLAS/xxHash, and tested with ctest -L gpu.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${OUT:-$root/gpu-out}
limit=${HX_GPU_TIMEOUT:-120} # seconds per program: a hang must not eat the lease
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

. tests/gpu/gpu_env.sh # the carried packages on LD_LIBRARY_PATH
{ date -u; uname -a; nvidia-smi 2>&1 || echo "nvidia-smi: not found"; } >"$out/device.txt"
note "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
note "cuDNN: ${cudnn_lib:-none found (convolutions on the device run as im2col + cuBLAS; test_gpu_cudnn fails)}"

bin=$libs/bin
if ! ls "$bin"/test_gpu_* >/dev/null 2>&1; then
  note "no prebuilt programs in $bin: building here"
  for tool in cmake cc nvcc; do
    command -v $tool >/dev/null || [ -x /usr/local/cuda/bin/$tool ] ||
      { note "missing $tool: cannot build here; run prepare_gpu_run.sh and carry .gpu-libs"; exit 2; }
  done
  bdir=$root/build-gpu-here
  cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DHX_CUDA=ON \
    -DOPENBLAS_LIB="$lib/openblas-openmp/libopenblas.so.0" \
    -DCBLAS_INCLUDE="$sysroot/usr/include/x86_64-linux-gnu/openblas-openmp" \
    -DXXHASH_LIB="$lib/libxxhash.so.0" -DCMAKE_C_FLAGS="-I$sysroot/usr/include" \
    >"$out/configure.log" 2>&1 || { note "configure failed (configure.log)"; exit 2; }
  cmake --build "$bdir" -j "$(nproc)" >"$out/build.log" 2>&1 || { note "build failed (build.log)"; exit 2; }
  (cd "$bdir" && ctest -L gpu --output-on-failure --timeout "$limit") >"$out/gpu-tests.log" 2>&1
  note "ctest -L gpu: exit $?"
  bin=$bdir
else
  : >"$out/gpu-tests.log"
  for t in "$bin"/test_gpu_*; do
    [ -x "$t" ] || continue
    echo "== $(basename "$t")" >>"$out/gpu-tests.log"
    timeout "$limit" "$t" >>"$out/gpu-tests.log" 2>&1
    rc=$?
    case $rc in 0) r=passed ;; 77) r=skipped ;; 124) r="TIMED OUT (${limit} s)" ;; *) r="FAILED ($rc)" ;; esac
    note "$(basename "$t"): $r"
  done
fi

# compute-sanitizer memcheck over the kernel suite, where it exists and runs.
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$cs" ]; then
  timeout "$((2 * limit))" "$cs" --tool memcheck --error-exitcode 3 "$bin/test_gpu_kernels" >"$out/memcheck.log" 2>&1
  note "compute-sanitizer memcheck test_gpu_kernels: exit $?"
else
  note "compute-sanitizer: not found, memcheck skipped"
fi

# The benchmark (what ./build.sh bench cuda runs, from the prebuilt binary).
timeout "$limit" "$bin/bench_cuda" >"$out/bench_cuda.json" 2>&1
note "bench_cuda: exit $? ($(wc -l <"$out/bench_cuda.json") lines)"
cat "$summary"
