# FindOneDNN: oneDNN's C API (oneapi/dnnl/dnnl.h, libdnnl) as the imported
# target OneDNN::OneDNN. Installed with hetex's CMake package: its static
# library links oneDNN when hetex was built with it (bf16 GEMM tiles).
find_path(OneDNN_INCLUDE_DIR oneapi/dnnl/dnnl.h)
find_library(OneDNN_LIBRARY dnnl)
mark_as_advanced(OneDNN_INCLUDE_DIR OneDNN_LIBRARY)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN REQUIRED_VARS OneDNN_LIBRARY OneDNN_INCLUDE_DIR)
if(OneDNN_FOUND AND NOT TARGET OneDNN::OneDNN)
  add_library(OneDNN::OneDNN UNKNOWN IMPORTED)
  set_target_properties(OneDNN::OneDNN PROPERTIES
    IMPORTED_LOCATION "${OneDNN_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${OneDNN_INCLUDE_DIR}")
endif()
