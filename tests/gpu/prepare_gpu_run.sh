#!/usr/bin/env bash
# Run HERE (a machine with nvcc and apt, no GPU needed) before sending the
# tree to a GPU machine that has no package registry. Fills the git-ignored
# folder .gpu-libs/ with:
#   debs/  the Debian packages the build and the programs need (apt-get
#          download; run_on_gpu.sh unpacks them with dpkg -x inside the tree,
#          never into /)
#   bin/   the GPU test programs, bench_cuda and the CLI (hetex, for
#          bench/gpt_vs_torch.sh), built here (Release, CUDA on)
#   cuda/  libcudart.so.13 (0.7 MB). cuBLAS is not copied by default: with
#          cublasLt it is ~600 MB, over the 64 MiB a tree may carry; the GPU
#          image's own CUDA 13 toolkit provides it. --with-cublas copies
#          libcublas too (54 MB) for machines whose cuBLAS is older.
#          cuDNN is never copied (hundreds of MB): hetex opens libcudnn.so.9
#          at run time, and gpu_env.sh finds the GPU image's (PyTorch's).
#   --mpi  adds Open MPI's runtime packages and the MPI + NCCL programs
#          (bin-mpi/) for tests/gpu/mpi_on_gpu.sh
#   --host-cpu  adds the host kernels' tests and bench_optim (bin-cpu/) for
#          tests/gpu/host_cpu_on_gpu.sh
# Then carry .gpu-libs (and nothing else ignored) and run tests/gpu/run_on_gpu.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dest=$root/.gpu-libs
build=${HX_GPU_BUILD:-$root/build-gpu}
rm -rf "$dest"
mkdir -p "$dest/debs" "$dest/bin" "$dest/cuda"

# Packages: runtime libraries, and the headers for building there if it must.
(cd "$dest/debs" && apt-get download libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev \
    libxxhash0 libxxhash-dev libgomp1 liburing2 liburing-dev libaio1 libaio-dev libprotobuf-c1 >/dev/null)

# MPI off: the GPU image has no Open MPI to load libmpi from (and NCCL needs
# MPI here), so these programs are the single-process ones.
# Kernels for the lent GPUs only (H100, H200: sm_90; HX_GPU_ARCH to change it):
# one architecture halves the programs' fat binaries, so that the tree and
# .gpu-libs stay under the 64 MiB a call carries.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DHX_CUDA=ON -DHX_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${HX_GPU_ARCH:-90-real}" \
  -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" >/dev/null
cmake --build "$build" -j "$(nproc)" --target test_gpu_kernels test_gpu_backend test_gpu_backend_ops test_gpu_cudnn test_gpu_devcache bench_cuda \
  hetex_cli
for f in "$build"/test_gpu_* "$build"/bench_cuda "$build"/hetex; do
  [ -x "$f" ] && cp "$f" "$dest/bin/"
done
strip "$dest"/bin/* 2>/dev/null || true
cp -L /usr/local/cuda/lib64/libcudart.so.13 "$dest/cuda/"
for arg in "$@"; do
  case $arg in
  --with-cublas) cp -L /usr/local/cuda/lib64/libcublas.so.13 "$dest/cuda/" ;;
  --mpi)
    # Open MPI's runtime (6.5 MB of packages; gpu_env.sh unpacks them and
    # points Open MPI at them with OPAL_PREFIX) and the programs built with
    # MPI and NCCL, in their own build folder: test_gpu_nccl and the CLI as
    # bin-mpi/hetex, for tests/gpu/mpi_on_gpu.sh. NCCL itself (218 MB) is
    # the GPU machine's own. The carry is then too large for the training
    # images and data/adult: mpi_on_gpu.sh needs neither.
    mkdir -p "$dest/mpi-debs" "$dest/bin-mpi"
    (cd "$dest/mpi-debs" && apt-get download libopenmpi3 openmpi-bin openmpi-common libhwloc15 \
        libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 libpmix2 libudev1 libltdl7 \
        libnuma1 libmunge2 >/dev/null)
    mbuild=${HX_GPU_MPI_BUILD:-$root/build-gpu-mpi}
    cmake -S "$root" -B "$mbuild" -DCMAKE_BUILD_TYPE=Release -DHX_CUDA=ON -DHX_MPI=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${HX_GPU_ARCH:-90-real}" \
      -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" >/dev/null
    cmake --build "$mbuild" -j "$(nproc)" --target test_gpu_nccl hetex_cli
    cp "$mbuild"/test_gpu_nccl "$mbuild"/hetex "$dest/bin-mpi/"
    strip "$dest"/bin-mpi/* 2>/dev/null || true
    ;;
  --host-cpu)
    # The host kernels' tests and the optimizer benchmark, for
    # tests/gpu/host_cpu_on_gpu.sh: the GPU machine's CPU is another one
    # than this (16 cores, maybe AVX-512), and the kernels pick their path
    # at run time, so these programs built here run its own.
    mkdir -p "$dest/bin-cpu"
    cmake --build "$build" -j "$(nproc)" --target test_vmath test_kernels test_optim test_embedding_optim bench_optim
    cp "$build"/test_vmath "$build"/test_kernels "$build"/test_optim "$build"/test_embedding_optim \
      "$build"/bench_optim "$dest/bin-cpu/"
    strip "$dest"/bin-cpu/* 2>/dev/null || true
    ;;
  *) echo "prepare_gpu_run.sh: unknown argument '$arg' (--with-cublas, --mpi, --host-cpu)" >&2; exit 2 ;;
  esac
done
du -sh "$dest" "$dest"/*
echo "carry: .gpu-libs   then run: bash tests/gpu/run_on_gpu.sh (or all_on_gpu.sh)"
# The tracked tree (66 MB, 45 of them Fashion-MNIST's training images) and
# .gpu-libs together pass the 64 MiB a device call carries.
echo "move data/fashion-mnist/train-images-idx3-ubyte out of the tree for the call (examples_on_gpu.sh then"
echo "trains ResNet on the test images), and back after it"
