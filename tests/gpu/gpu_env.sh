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
# Open MPI's runtime, where prepare_gpu_run.sh --mpi carried its packages:
# unpacked beside the others (the GPU image has no MPI) and relocated with
# OPAL_PREFIX, so that a program of bin-mpi/ starts as a one-rank job
# (MPI's singleton start, no mpirun). Sets mpi_root (empty: none carried).
mpi_root=
if ls "$libs"/mpi-debs/*.deb >/dev/null 2>&1; then
  mpi_root=$libs/mpi-root
  if [ ! -d "$mpi_root" ]; then
    mkdir -p "$mpi_root"
    for f in "$libs"/mpi-debs/*.deb; do dpkg -x "$f" "$mpi_root"; done
  fi
  export LD_LIBRARY_PATH="$mpi_root/usr/lib/x86_64-linux-gnu:$mpi_root/usr/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH"
  export OPAL_PREFIX=$mpi_root/usr OPAL_SYSCONFDIR=$mpi_root/etc/openmpi PMIX_INSTALL_PREFIX=$mpi_root/usr
  export PATH="$mpi_root/usr/bin:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# NCCL 2 (218 MB, not carried), for the programs of bin-mpi/: the loader's
# own, else the CUDA toolkit's, else PyTorch's (the nvidia-nccl wheel).
# Sets nccl_lib (empty: none found).
nccl_lib=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
if [ -z "$nccl_lib" ]; then
  d=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)/lib
  [ -e "$d/libnccl.so.2" ] ||
    d=$(dirname "$(find /usr/local/cuda*/lib* /usr/local/lib/python3* /usr/lib/python3* /opt \
                      -name libnccl.so.2 2>/dev/null | head -1)" 2>/dev/null)
  if [ -e "$d/libnccl.so.2" ]; then
    nccl_lib=$d/libnccl.so.2
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  fi
fi
