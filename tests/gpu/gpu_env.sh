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
# cuDNN 9, which hetex opens at run time for the device's convolutions (too
# big to carry: libcudnn_engines_precompiled alone is hundreds of MB): the
# loader's own, else PyTorch's (the nvidia-cudnn wheel torch depends on),
# else the first libcudnn.so.9 under the Python and CUDA folders. Sets
# cudnn_lib (empty: none found; the convolutions then run as im2col + cuBLAS).
cudnn_lib=$(ldconfig -p 2>/dev/null | awk '/libcudnn\.so\.9 /{print $NF; exit}')
if [ -z "$cudnn_lib" ]; then
  d=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)/lib
  [ -e "$d/libcudnn.so.9" ] ||
    d=$(dirname "$(find /usr/local/lib/python3* /usr/lib/python3* /opt /usr/local/cuda*/lib* \
                      -name libcudnn.so.9 2>/dev/null | head -1)" 2>/dev/null)
  if [ -e "$d/libcudnn.so.9" ]; then
    cudnn_lib=$d/libcudnn.so.9
    export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
  fi
fi
