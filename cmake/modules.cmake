# kvtier_module(<name> SRCS <files...> DEPS <kvtier modules...> [LIBS <other libs...>])
#
# Declares the library of one module (DESIGN.md §2). The layering is enforced
# at compile time: the target's include root is a folder of symlinks to the
# module itself and to every module it may use (its DEPS, transitively), so
# `#include "daemon/server.h"` from tiers/ finds no such file.
function(kvtier_module name)
  cmake_parse_arguments(M "" "" "SRCS;DEPS;LIBS" ${ARGN})
  set(allowed ${name})
  foreach(dep IN LISTS M_DEPS)
    get_property(dep_allowed GLOBAL PROPERTY KVTIER_ALLOWED_${dep})
    list(APPEND allowed ${dep_allowed})
  endforeach()
  list(REMOVE_DUPLICATES allowed)
  set_property(GLOBAL PROPERTY KVTIER_ALLOWED_${name} ${allowed})

  set(root ${CMAKE_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root})
  foreach(mod IN LISTS allowed)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${mod} ${root}/${mod} SYMBOLIC)
  endforeach()

  add_library(kvtier_${name} ${M_SRCS})
  add_library(kvtier::${name} ALIAS kvtier_${name})
  target_include_directories(kvtier_${name} PUBLIC $<BUILD_INTERFACE:${root}>)
  foreach(dep IN LISTS M_DEPS)
    target_link_libraries(kvtier_${name} PUBLIC kvtier_${dep})
  endforeach()
  if(M_LIBS)
    target_link_libraries(kvtier_${name} ${M_LIBS})
  endif()
  kvtier_set_warnings(kvtier_${name})
endfunction()
