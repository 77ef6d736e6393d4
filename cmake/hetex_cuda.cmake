# The CUDA backend (kernels/gpu/, backend/backend_cuda*.c), included by
# CMakeLists.txt once the library targets exist.
#
# HX_CUDA: AUTO (default) builds it when nvcc is found, ON requires it, OFF
# leaves it out. Sanitizer builds leave it out: the CUDA runtime does not
# run under TSan, and CI's second build stays fast (those builds test the
# entry points' no-CUDA side instead). Without it, backend_cuda_none.c
# answers for the backend. Kernels are built for sm_80 (A100) and sm_90
# (H100/H200) machine code, plus sm_90 PTX for later GPUs; CMAKE_CUDA_ARCHITECTURES
# or the environment's CUDAARCHS (on the first configure) picks others.
set(HX_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE HX_CUDA PROPERTY STRINGS AUTO ON OFF)
set(HX_HAVE_CUDA OFF)
if(NOT HX_CUDA STREQUAL "OFF" AND NOT HX_SANITIZE)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(HX_HAVE_CUDA ON)
  elseif(HX_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HX_CUDA=ON but no CUDA compiler (nvcc) was found; set CMAKE_CUDA_COMPILER")
  endif()
endif()
if(HX_SANITIZE AND HX_CUDA STREQUAL "ON")
  message(FATAL_ERROR "HX_CUDA=ON cannot be combined with HX_SANITIZE")
endif()

if(HX_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    if(DEFINED ENV{CUDAARCHS}) # as CMake 3.20+ reads it: CI compiles one architecture
      set(CMAKE_CUDA_ARCHITECTURES $ENV{CUDAARCHS})
    else()
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared) # one runtime: the libcudart.so hetex links
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "hetex: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")

  # The kernels: their own object library, so the C-only flags of the
  # directory do not reach nvcc.
  file(GLOB HX_CUDA_SOURCES CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/kernels/gpu/*.cu ${PROJECT_SOURCE_DIR}/kernels/gpu/*.c)
  add_library(hetex_cuda_objects OBJECT ${HX_CUDA_SOURCES})
  set_property(TARGET hetex_cuda_objects PROPERTY COMPILE_OPTIONS
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wno-unused-parameter -fvisibility=hidden>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-fvisibility=hidden>)
  target_include_directories(hetex_cuda_objects PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR})
  target_link_libraries(hetex_cuda_objects PRIVATE CUDA::cudart CUDA::cublas)

  target_compile_definitions(hetex_objects PUBLIC HX_HAVE_CUDA)
  target_link_libraries(hetex_objects PUBLIC CUDA::cudart CUDA::cublas)
  # The runtime and cuBLAS as CUDAToolkit's imported targets, which the
  # installed package finds again; the C++ runtime the kernels' objects need.
  set(HX_CUDA_LIBS CUDA::cublas CUDA::cudart stdc++)
  foreach(lib hetex_objects hetex hetex_static) # made before the architectures were set
    set_property(TARGET ${lib} PROPERTY CUDA_ARCHITECTURES ${CMAKE_CUDA_ARCHITECTURES})
    set_property(TARGET ${lib} PROPERTY CUDA_RUNTIME_LIBRARY Shared)
  endforeach()
  foreach(lib hetex hetex_static)
    target_sources(${lib} PRIVATE $<TARGET_OBJECTS:hetex_cuda_objects>)
  endforeach()
  target_link_libraries(hetex PRIVATE ${HX_CUDA_LIBS})
  target_link_libraries(hetex_static PRIVATE ${HX_CUDA_LIBS})
  target_compile_definitions(hetex_static PUBLIC $<BUILD_INTERFACE:HX_HAVE_CUDA>)
  target_include_directories(hetex_static PUBLIC $<BUILD_INTERFACE:${CUDAToolkit_INCLUDE_DIRS}>)
  string(APPEND HX_CONFIG_DEPENDENCIES "find_dependency(CUDAToolkit)\n")
  # No -L: CUDA's library directory is the user's (or their linker's) to give.
  string(APPEND HX_PC_LIBS " -lcublas -lcudart -lstdc++")

  # cuDNN for the device's convolutions (graph/lower.c, kernels/gpu/conv_cudnn.c):
  # HX_CUDNN AUTO (default) uses it when cudnn.h (version 9) and libcudnn are
  # found beside the CUDA toolkit (or under CUDNN_ROOT), ON requires it, OFF
  # leaves it out; without it a conv on the device runs as im2col + cuBLAS.
  set(HX_CUDNN AUTO CACHE STRING "Use cuDNN for convolutions on the device: AUTO (when found), ON, OFF")
  set_property(CACHE HX_CUDNN PROPERTY STRINGS AUTO ON OFF)
  set(HX_HAVE_CUDNN OFF)
  if(NOT HX_CUDNN STREQUAL "OFF")
    find_path(HX_CUDNN_INCLUDE_DIR cudnn_version.h
      HINTS ${CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
    find_library(HX_CUDNN_LIBRARY cudnn
      HINTS ${CUDNN_ROOT}/lib ${CUDNN_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR})
    set(HX_CUDNN_VERSION "")
    if(HX_CUDNN_INCLUDE_DIR)
      file(STRINGS ${HX_CUDNN_INCLUDE_DIR}/cudnn_version.h v REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
      string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*CUDNN_MINOR ([0-9]+).*CUDNN_PATCHLEVEL ([0-9]+).*"
        "\\1.\\2.\\3" HX_CUDNN_VERSION "${v}")
    endif()
    if(HX_CUDNN_LIBRARY AND HX_CUDNN_VERSION MATCHES "^9\\.")
      set(HX_HAVE_CUDNN ON)
      message(STATUS "hetex: cuDNN ${HX_CUDNN_VERSION} for convolutions on the device (opened at run time; found ${HX_CUDNN_LIBRARY})")
      # Headers only: kernels/gpu/conv_cudnn.c opens libcudnn.so.9 at run time
      # from the loader's path (LD_LIBRARY_PATH, ld.so.cache).
      target_compile_definitions(hetex_cuda_objects PRIVATE HX_HAVE_CUDNN)
      target_include_directories(hetex_cuda_objects PRIVATE ${HX_CUDNN_INCLUDE_DIR})
      target_compile_definitions(hetex_objects PUBLIC HX_HAVE_CUDNN)
      target_include_directories(hetex_objects PUBLIC ${HX_CUDNN_INCLUDE_DIR})
      target_link_libraries(hetex PRIVATE ${CMAKE_DL_LIBS})
      target_link_libraries(hetex_static PRIVATE ${CMAKE_DL_LIBS})
      target_compile_definitions(hetex_static PUBLIC $<BUILD_INTERFACE:HX_HAVE_CUDNN>)
    elseif(HX_CUDNN STREQUAL "ON")
      message(FATAL_ERROR "HX_CUDNN=ON but no cuDNN 9 was found (cudnn_version.h: "
        "'${HX_CUDNN_INCLUDE_DIR}', version '${HX_CUDNN_VERSION}', libcudnn: '${HX_CUDNN_LIBRARY}'); "
        "set CUDNN_ROOT")
    else()
      message(STATUS "hetex: no cuDNN 9: convolutions on the device run as im2col + cuBLAS")
    endif()
  endif()
endif()
