# FindOpenBLAS: OpenBLAS's CBLAS interface (cblas.h, libopenblas) as the
# imported target OpenBLAS::OpenBLAS. pkg-config's openblas module, where
# there is one, says which of the distribution's builds to take (Debian's
# openblas-openmp or openblas-pthread), so that header and library match.
# Installed with hetex's CMake package: its static library links OpenBLAS.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_OpenBLAS QUIET openblas)
endif()
find_path(OpenBLAS_INCLUDE_DIR cblas.h HINTS ${PC_OpenBLAS_INCLUDE_DIRS} PATH_SUFFIXES openblas)
find_library(OpenBLAS_LIBRARY openblas HINTS ${PC_OpenBLAS_LIBRARY_DIRS})
mark_as_advanced(OpenBLAS_INCLUDE_DIR OpenBLAS_LIBRARY)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES
    IMPORTED_LOCATION "${OpenBLAS_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIR}")
endif()
