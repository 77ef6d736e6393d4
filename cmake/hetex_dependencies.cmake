# The libraries hetex links, as imported targets. Included by CMakeLists.txt
# before the library targets; sets
#   HX_DEPS                 what both libraries link (privately: users of the
#                           static library get them as link-only items)
#   HX_IO_DEFINITIONS       HX_HAVE_LIBURING / HX_HAVE_LIBAIO for the disk tier
#   HX_HAVE_DNNL            ON where bf16 GEMM tiles run through oneDNN
#   HX_CONFIG_DEPENDENCIES  the installed CMake package's find_dependency calls
#   HX_PC_REQUIRES          hetex.pc's Requires.private
#   HX_PC_LIBS              hetex.pc's Libs.private
# OpenBLAS, xxHash, liburing, libaio and oneDNN are found by cmake/Find*.cmake, which
# the CMake package installs beside its config. cmake/hetex_cuda.cmake adds
# the CUDA libraries to the same variables.
find_package(PkgConfig QUIET)
find_package(OpenMP REQUIRED COMPONENTS C)
find_package(Threads REQUIRED)
find_package(OpenBLAS REQUIRED)
find_package(xxHash REQUIRED)

set(HX_DEPS OpenMP::OpenMP_C Threads::Threads m)
set(HX_CONFIG_DEPENDENCIES "find_dependency(OpenMP COMPONENTS C)\nfind_dependency(Threads)\n")
set(HX_PC_REQUIRES "")
set(HX_PC_LIBS "")

# hx_dependency(<package> <target> <pkg-config module> <library>): link the
# found <package>'s <target>, have the CMake package find it again, and name
# it in hetex.pc: its own pkg-config module where the system has one, else
# -l<library>.
function(hx_dependency package target module lib)
  set(HX_DEPS ${HX_DEPS} ${target} PARENT_SCOPE)
  set(HX_CONFIG_DEPENDENCIES "${HX_CONFIG_DEPENDENCIES}find_dependency(${package})\n" PARENT_SCOPE)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(HX_PC_${lib} QUIET ${module})
  endif()
  if(HX_PC_${lib}_FOUND)
    set(HX_PC_REQUIRES "${HX_PC_REQUIRES} ${module}" PARENT_SCOPE)
  else()
    set(HX_PC_LIBS "${HX_PC_LIBS} -l${lib}" PARENT_SCOPE)
  endif()
endfunction()

hx_dependency(OpenBLAS OpenBLAS::OpenBLAS openblas openblas)
hx_dependency(xxHash xxHash::xxhash libxxhash xxhash)

# Async I/O of the disk tier (memory/disk_io.c): io_uring (liburing) and
# libaio, each optional; the tier falls back to the other, then to
# pread/pwrite, and says which it uses.
set(HX_IO_DEFINITIONS "")
find_package(LibUring QUIET)
if(LibUring_FOUND)
  hx_dependency(LibUring LibUring::LibUring liburing uring)
  list(APPEND HX_IO_DEFINITIONS HX_HAVE_LIBURING)
endif()
find_package(LibAIO QUIET)
if(LibAIO_FOUND)
  hx_dependency(LibAIO LibAIO::LibAIO libaio aio)
  list(APPEND HX_IO_DEFINITIONS HX_HAVE_LIBAIO)
endif()

# bf16 GEMM tiles through oneDNN (kernels/cpu/gemm_dnnl.c), optional: without
# it (or -DHX_DNNL=OFF) bf16 is widened for OpenBLAS like f16. Debian's
# libdnnl runs on libgomp, so a clang build (libomp) leaves it out rather
# than load two OpenMP runtimes whose thread settings it would not share.
option(HX_DNNL "bf16 GEMM through oneDNN where libdnnl-dev is found (gcc)" ON)
set(HX_HAVE_DNNL OFF)
if(HX_DNNL AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
  find_package(OneDNN QUIET)
  if(OneDNN_FOUND)
    set(HX_HAVE_DNNL ON)
    hx_dependency(OneDNN OneDNN::OneDNN dnnl dnnl)
    message(STATUS "hetex: oneDNN on (${OneDNN_LIBRARY}): bf16 GEMM tiles native")
  else()
    message(STATUS "hetex: no oneDNN (libdnnl-dev): bf16 GEMM widened for OpenBLAS")
  endif()
elseif(HX_DNNL)
  message(STATUS "hetex: oneDNN left out (libgomp-based; this compiler's OpenMP is another)")
endif()

# After the libraries that need them: OpenMP's runtime, threads, libm.
if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  # clang's libomp lives in clang's own folder (Debian: /usr/lib/llvm-14/lib),
  # which its driver finds for -fopenmp and the linker alone does not
  string(APPEND HX_PC_LIBS " ${OpenMP_C_FLAGS}")
else()
  foreach(lib ${OpenMP_C_LIB_NAMES})
    string(APPEND HX_PC_LIBS " -l${lib}")
  endforeach()
endif()
if(CMAKE_THREAD_LIBS_INIT)
  string(APPEND HX_PC_LIBS " ${CMAKE_THREAD_LIBS_INIT}")
endif()
string(APPEND HX_PC_LIBS " -lm")
