# Warning flags for C++ (never passed to nvcc; see cmake/cuda.cmake).
set(KVTIER_CXX_WARNINGS
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Woverloaded-virtual -Wconversion -Wsign-conversion -Wimplicit-fallthrough
    -Wmissing-declarations)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND KVTIER_CXX_WARNINGS -Wthread-safety)
endif()
if(KVTIER_WERROR)
  list(APPEND KVTIER_CXX_WARNINGS -Werror)
endif()

function(kvtier_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${KVTIER_CXX_WARNINGS}>)
endfunction()
