# Sourced (from the repository root) by the scripts that run on the GPU
# machine: unpacks the Debian packages tests/gpu/prepare_gpu_run.sh carried
# in .gpu-libs/debs, inside the tree (never into /), once, and puts them,
# the carried CUDA runtime and the machine's CUDA on LD_LIBRARY_PATH.
# Sets libs (.gpu-libs), sysroot (the unpacked packages) and lib (their
# library folder).
libs=$PWD/.gpu-libs
sysroot=$libs/root
if [ ! -d "$sysroot" ] && ls "$libs"/debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$sysroot"
  for f in "$libs"/debs/*.deb; do dpkg -x "$f" "$sysroot"; done
fi
lib=$sysroot/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$lib:$lib/openblas-openmp:$libs/cuda:${CUDA_HOME:-/usr/local/cuda}/lib64:${LD_LIBRARY_PATH:-}"
