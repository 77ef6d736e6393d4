# CUDA tests, included by CMakeLists.txt after the tests are defined.
# tests/gpu/test_*.c: one ctest each, built with the CUDA backend only;
# each exits 77 ("no CUDA device: skipped") where there is no device
# (cmake/hetex_tests.cmake gives them the label gpu and their timeouts).
# test_gpu_cudnn needs cuDNN's headers (HX_HAVE_CUDNN).
if(HX_HAVE_CUDA)
  file(GLOB HX_GPU_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu/test_*.c)
  foreach(src ${HX_GPU_TESTS})
    get_filename_component(name ${src} NAME_WE)
    if(name STREQUAL "test_gpu_cudnn" AND NOT HX_HAVE_CUDNN)
      continue() # cuDNN's kernels are not built: nothing to test
    endif()
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE hx_testlib CUDA::cudart CUDA::cublas)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "HX_TEST_SRC=${PROJECT_SOURCE_DIR}")
  endforeach()
endif()
