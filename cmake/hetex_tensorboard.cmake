# --tensorboard's event files (cli/tensorboard.c): Events encoded by
# protobuf-c from cli/tensorboard.proto, compiled with protoc-c into the
# build folder. Without protobuf-c (libprotobuf-c-dev, protobuf-c-compiler:
# build.sh installs them) hetex is built without it and --tensorboard says
# how to get it. Sets HX_HAVE_PROTOBUF_C.
find_program(HX_PROTOC_C protoc-c)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(HX_PROTOBUF_C QUIET IMPORTED_TARGET libprotobuf-c)
endif()
set(HX_HAVE_PROTOBUF_C OFF)
if(HX_PROTOC_C AND HX_PROTOBUF_C_FOUND)
  set(HX_HAVE_PROTOBUF_C ON)
  set(hx_tb_out ${CMAKE_BINARY_DIR}/tensorboard)
  file(MAKE_DIRECTORY ${hx_tb_out})
  add_custom_command(
    OUTPUT ${hx_tb_out}/tensorboard.pb-c.c ${hx_tb_out}/tensorboard.pb-c.h
    COMMAND ${HX_PROTOC_C} --c_out=${hx_tb_out} -I${PROJECT_SOURCE_DIR}/cli
            ${PROJECT_SOURCE_DIR}/cli/tensorboard.proto
    DEPENDS ${PROJECT_SOURCE_DIR}/cli/tensorboard.proto
    COMMENT "protoc-c cli/tensorboard.proto")
  target_sources(hx_cli PRIVATE ${hx_tb_out}/tensorboard.pb-c.c)
  # PUBLIC: the tests decode the files with the same messages
  target_include_directories(hx_cli PUBLIC ${hx_tb_out})
  target_link_libraries(hx_cli PUBLIC PkgConfig::HX_PROTOBUF_C)
  target_compile_definitions(hx_cli PUBLIC HX_HAVE_PROTOBUF_C)
else()
  message(STATUS "protobuf-c not found: hetex --tensorboard is not built "
                 "(apt-get install libprotobuf-c-dev protobuf-c-compiler)")
endif()
