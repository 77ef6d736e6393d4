# hx_api_functions(<header> <var>): the names of the functions <header>
# declares HX_API, in the order declared. Comments and preprocessor lines
# (HX_API's own #define) are skipped; a declaration's name is the identifier
# before its first '('. Used by write_version_script.cmake (what libhetex.so
# exports) and by tests/install/check_symbols.cmake (what it must export).
function(hx_api_functions header var)
  file(READ "${header}" text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "\n${text}")
  string(REGEX REPLACE "\n[ \t]*#[^\n]*" "" text "${text}")
  string(REGEX MATCHALL "HX_API[^;(]*\\(" decls "${text}")
  set(names "")
  foreach(decl IN LISTS decls)
    string(REGEX MATCH "([A-Za-z_][A-Za-z0-9_]*)[ \t\n]*\\($" name "${decl}")
    list(APPEND names ${CMAKE_MATCH_1})
  endforeach()
  set(${var} ${names} PARENT_SCOPE)
endfunction()
