# The fuzz targets (tests/fuzz/fuzz_*.c, libFuzzer), built with HX_FUZZ=ON
# by clang only, with ASan and UBSan (./build.sh fuzz configures
# build-fuzz so). Everything is compiled with -fsanitize=fuzzer-no-link for
# coverage; each target links libFuzzer's main. fuzz_seeds (tests/fuzz/
# seeds.c, a plain program) writes the seed corpora. Included by
# CMakeLists.txt when HX_FUZZ is on.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "HX_FUZZ needs clang (libFuzzer): configure with CC=clang")
endif()
if(NOT HX_SANITIZE STREQUAL "address,undefined")
  message(FATAL_ERROR "HX_FUZZ builds with HX_SANITIZE=address,undefined")
endif()
file(GLOB HX_FUZZ_TARGETS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
list(REMOVE_ITEM HX_FUZZ_TARGETS ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_common.c)
add_library(hx_fuzz_common STATIC ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_common.c)
target_link_libraries(hx_fuzz_common PUBLIC hetex_internal)
foreach(src ${HX_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE hx_fuzz_common)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
endforeach()
add_executable(fuzz_seeds ${PROJECT_SOURCE_DIR}/tests/fuzz/seeds.c)
target_link_libraries(fuzz_seeds PRIVATE hx_fuzz_common)
