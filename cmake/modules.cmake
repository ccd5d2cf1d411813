# The layering (DESIGN.md §2), enforced at compile time: each module's
# include root is a folder of symlinks to the module itself and to every
# module it may use (its DEPS, transitively), so `#include "daemon/server.h"`
# from tiers/ finds no such file. From the bottom up: common; kernels,
# prefix_index, eviction, protocol; client; tiers; engine; daemon, replay;
# and the kvtier program (cli/) on top. tests/layering/ proves the rules.

# kvtier_layer_root(<name> <out_var> <deps...>): makes
# ${CMAKE_BINARY_DIR}/layers/<name>, the symlinks to the folder <name> and to
# every module its deps may use, records that set for the modules above, and
# sets <out_var> to the folder.
function(kvtier_layer_root name out_var)
  set(allowed ${name})
  foreach(dep IN LISTS ARGN)
    get_property(dep_allowed GLOBAL PROPERTY KVTIER_ALLOWED_${dep})
    if(NOT dep_allowed)
      message(FATAL_ERROR "${name}: unknown module '${dep}' (declare it first)")
    endif()
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
  set(${out_var} ${root} PARENT_SCOPE)
endfunction()

# kvtier_module(<name> SRCS <files...> DEPS <kvtier modules...>
#               [ALLOWS <kvtier modules...>] [LIBS <other libs...>])
#
# Declares the library of one module, kvtier_<name> (alias kvtier::<name>),
# whose include root is its layer root. DEPS are linked; ALLOWS are modules
# it may include but does not link yet (engine/ may use kernels/, whose CUDA
# code links the shared CUDA runtime that kvtierd must not need: the day the
# engine calls a kernel, kernels/ moves to its DEPS and that is settled).
function(kvtier_module name)
  cmake_parse_arguments(M "" "" "SRCS;DEPS;ALLOWS;LIBS" ${ARGN})
  kvtier_layer_root(${name} root ${M_DEPS} ${M_ALLOWS})

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

# kvtier_program(<target> FOLDER <folder> SRCS <files...> DEPS <kvtier modules...> [LIBS ...])
#
# A program whose sources are a top-level folder of their own (cli/: the
# kvtier command), on the top floor: it may include its own folder and the
# modules it links (DEPS, transitively), through the same kind of include
# root as a module, and nothing else.
function(kvtier_program target)
  cmake_parse_arguments(P "" "FOLDER" "SRCS;DEPS;LIBS" ${ARGN})
  kvtier_layer_root(${P_FOLDER} root ${P_DEPS})
  add_executable(${target} ${P_SRCS})
  target_include_directories(${target} PRIVATE ${root})
  foreach(dep IN LISTS P_DEPS)
    target_link_libraries(${target} PRIVATE kvtier_${dep})
  endforeach()
  if(P_LIBS)
    target_link_libraries(${target} PRIVATE ${P_LIBS})
  endif()
  kvtier_set_warnings(${target})
endfunction()
