# FindLibUring: liburing (liburing.h, liburing) as the imported target
# LibUring::LibUring. Installed with hetex's CMake package: its static
# library links liburing when hetex was built with it (the disk tier).
find_path(LibUring_INCLUDE_DIR liburing.h)
find_library(LibUring_LIBRARY uring)
mark_as_advanced(LibUring_INCLUDE_DIR LibUring_LIBRARY)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LibUring REQUIRED_VARS LibUring_LIBRARY LibUring_INCLUDE_DIR)
if(LibUring_FOUND AND NOT TARGET LibUring::LibUring)
  add_library(LibUring::LibUring UNKNOWN IMPORTED)
  set_target_properties(LibUring::LibUring PROPERTIES
    IMPORTED_LOCATION "${LibUring_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${LibUring_INCLUDE_DIR}")
endif()
