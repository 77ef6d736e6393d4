# libhetex.so exports the public API and nothing else: a linker version
# script written from include/hetex.h at build time (write_version_script.cmake)
# makes every HX_API function global and every other symbol local.
# tests/install/check_symbols.cmake checks the result.
set(HX_VERSION_SCRIPT ${PROJECT_BINARY_DIR}/hetex.map)
add_custom_command(OUTPUT ${HX_VERSION_SCRIPT}
  COMMAND ${CMAKE_COMMAND} -DHEADER=${PROJECT_SOURCE_DIR}/include/hetex.h -DOUT=${HX_VERSION_SCRIPT}
          -P ${PROJECT_SOURCE_DIR}/cmake/write_version_script.cmake
  DEPENDS ${PROJECT_SOURCE_DIR}/include/hetex.h ${PROJECT_SOURCE_DIR}/cmake/write_version_script.cmake
          ${PROJECT_SOURCE_DIR}/cmake/hetex_api.cmake
  COMMENT "Writing the export list of libhetex.so from hetex.h")
target_sources(hetex PRIVATE ${HX_VERSION_SCRIPT})
target_link_options(hetex PRIVATE "LINKER:--version-script=${HX_VERSION_SCRIPT}")
set_property(TARGET hetex APPEND PROPERTY LINK_DEPENDS ${HX_VERSION_SCRIPT})
