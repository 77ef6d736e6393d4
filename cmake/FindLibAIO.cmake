# FindLibAIO: libaio (libaio.h, libaio) as the imported target
# LibAIO::LibAIO. Installed with hetex's CMake package: its static library
# links libaio when hetex was built with it (the disk tier).
find_path(LibAIO_INCLUDE_DIR libaio.h)
find_library(LibAIO_LIBRARY aio)
mark_as_advanced(LibAIO_INCLUDE_DIR LibAIO_LIBRARY)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LibAIO REQUIRED_VARS LibAIO_LIBRARY LibAIO_INCLUDE_DIR)
if(LibAIO_FOUND AND NOT TARGET LibAIO::LibAIO)
  add_library(LibAIO::LibAIO UNKNOWN IMPORTED)
  set_target_properties(LibAIO::LibAIO PROPERTIES
    IMPORTED_LOCATION "${LibAIO_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${LibAIO_INCLUDE_DIR}")
endif()
