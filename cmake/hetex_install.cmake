# Installation: the shared and static libraries, the CLI, the header, a
# pkg-config file and a CMake package (hetex::hetex, hetex::hetex_static),
# both relocatable: they find the prefix from where they are installed, and
# name the dependencies (cmake/hetex_dependencies.cmake, hetex_cuda.cmake)
# rather than where the build machine keeps them. The package installs the
# Find modules its config uses beside it.
set(HX_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hetex)
install(TARGETS hetex hetex_static EXPORT hetexTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS hetex_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/hetex.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The bundled data the commands read by default (cli/data.c finds it from
# the installed binary), with its sources and licences; and the licence.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/data DESTINATION ${CMAKE_INSTALL_DATADIR}/hetex)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/hetex)

file(RELATIVE_PATH HX_PC_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /) # ../.. for lib/pkgconfig
string(REGEX REPLACE "/$" "" HX_PC_PREFIX "${HX_PC_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/hetex.pc.in ${PROJECT_BINARY_DIR}/hetex.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/hetex.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(CMakePackageConfigHelpers)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hetexConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hetexConfig.cmake INSTALL_DESTINATION ${HX_PACKAGE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hetexConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(EXPORT hetexTargets NAMESPACE hetex:: DESTINATION ${HX_PACKAGE_DIR})
install(FILES ${PROJECT_BINARY_DIR}/hetexConfig.cmake ${PROJECT_BINARY_DIR}/hetexConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindOpenBLAS.cmake ${PROJECT_SOURCE_DIR}/cmake/FindxxHash.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindLibUring.cmake ${PROJECT_SOURCE_DIR}/cmake/FindLibAIO.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindOneDNN.cmake
  DESTINATION ${HX_PACKAGE_DIR})
