# cmake -DHEADER=include/hetex.h -DOUT=hetex.map -P write_version_script.cmake
# Writes the linker version script of libhetex.so: the HX_API functions of
# the header are global, everything else local. Visibility attributes alone
# do not hold: GCC and Clang give the ifunc resolvers of target_clones
# functions (embedding/) default visibility, and a named OpenMP critical
# section is a global common symbol.
cmake_minimum_required(VERSION 3.18)
include("${CMAKE_CURRENT_LIST_DIR}/hetex_api.cmake")
hx_api_functions("${HEADER}" names)
if(NOT names)
  message(FATAL_ERROR "${HEADER}: no HX_API function found")
endif()
list(JOIN names ";\n    " global)
file(WRITE "${OUT}" "{\n  global:\n    ${global};\n  local: *;\n};\n")
