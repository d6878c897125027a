# Compile options for project code (generated code gets none of the -Werror).
add_library(dctrain_options INTERFACE)
target_compile_options(dctrain_options INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual)
if(DCTRAIN_WERROR)
  target_compile_options(dctrain_options INTERFACE -Werror)
endif()
# A switch over a config kind (proto/config.proto) lists every value and no
# default, so a new kind fails to compile until each switch handles it.
target_compile_options(dctrain_options INTERFACE -Werror=switch)
# Floating point stays IEEE: no -ffast-math, and no contraction of a*b+c into
# FMA, so an optimizer update is the same bit pattern on every x86-64 host.
target_compile_options(dctrain_options INTERFACE -ffp-contract=off)

if(DCTRAIN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Every library gets libFuzzer's coverage instrumentation and the sanitizers;
# only the fuzz targets link libFuzzer's main (fuzz/CMakeLists.txt).
if(DCTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DCTRAIN_FUZZ needs clang (libFuzzer): configure with the `fuzz` preset "
                        "(clang++-14, installed by tools/setup.sh --fuzz)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  # The code's GCC pragmas name warnings clang does not know.
  target_compile_options(dctrain_options INTERFACE -Wno-unknown-warning-option)
endif()

# Helper: a project library in folder DIR with public headers under the
# repository root (so includes read "model/param_table.h").
# The link graph of the project's libraries and programs, one line per
# target: FOLDER NAME DEP,DEP,... (the dctrain_* ones it links directly).
# Written to link_graph.txt at the end of the configure (the top-level
# CMakeLists.txt); docs_architecture_test holds docs/architecture.md to it.
function(dctrain_record_links name)
  set(deps)
  foreach(dep ${ARGN})
    if(dep MATCHES "^dctrain_" AND NOT dep STREQUAL "dctrain_options")
      list(APPEND deps ${dep})
    endif()
  endforeach()
  list(SORT deps)
  string(JOIN "," joined ${deps})
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  set_property(GLOBAL APPEND PROPERTY DCTRAIN_LINK_GRAPH "${folder} ${name} ${joined}")
endfunction()

function(dctrain_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE dctrain_options ${ARG_PRIVATE_DEPS})
  dctrain_record_links(${name} ${ARG_PUBLIC_DEPS} ${ARG_PRIVATE_DEPS})
endfunction()

function(dctrain_program name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE dctrain_options ${ARG_DEPS})
  dctrain_record_links(${name} ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  install(TARGETS ${name} RUNTIME DESTINATION bin)
  set_property(GLOBAL APPEND PROPERTY DCTRAIN_PROGRAMS ${name})
endfunction()
