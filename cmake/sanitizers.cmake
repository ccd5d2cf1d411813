# Sanitizer and fuzzing builds (docs/hardening.md).
#
#   -DKVTIER_SANITIZE=address,undefined   ASan + UBSan (clang or g++)
#   -DKVTIER_SANITIZE=thread              TSan (clang or g++)
#   -DKVTIER_FUZZ=ON                      libFuzzer targets in fuzz/ (clang only)
#
# The flags go to every C and C++ compile and every link of the tree, tests
# included, so a test exercises sanitized code end to end and a daemon the
# tests spawn is sanitized too. nvcc gets none of them: configure sanitizer
# builds with -DKVTIER_CUDA=OFF (sanitizers do not apply to device code).
set(KVTIER_SANITIZE "" CACHE STRING
    "Sanitizers to build with, comma-separated: address,undefined | thread | '' (none)")
option(KVTIER_FUZZ "Build the libFuzzer targets in fuzz/ (needs clang)" OFF)

set(_kvtier_is_clang OFF)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(_kvtier_is_clang ON)
endif()

# Boost 1.74's asio enables coroutines (co_await) for g++ only; clang 14 has
# them with -std=c++20 but needs telling. Harmless where nothing uses asio.
if(_kvtier_is_clang)
  add_compile_definitions(BOOST_ASIO_HAS_CO_AWAIT=1)
endif()

set(KVTIER_SANITIZER_COMPILE_FLAGS "")
set(KVTIER_SANITIZER_LINK_FLAGS "")

# Fuzz targets run under ASan + UBSan unless told otherwise: libFuzzer finds
# memory errors through them, and its coverage hooks need a sanitizer runtime
# in every program of the tree.
set(_kvtier_sanitize "${KVTIER_SANITIZE}")
if(KVTIER_FUZZ AND NOT _kvtier_sanitize)
  set(_kvtier_sanitize "address,undefined")
endif()

if(_kvtier_sanitize)
  string(REPLACE "," ";" _kvtier_sanitizers "${_kvtier_sanitize}")
  foreach(s IN LISTS _kvtier_sanitizers)
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "KVTIER_SANITIZE: unknown sanitizer '${s}' "
                          "(expected address, undefined, thread or leak)")
    endif()
  endforeach()
  if("thread" IN_LIST _kvtier_sanitizers AND ("address" IN_LIST _kvtier_sanitizers OR
                                               "leak" IN_LIST _kvtier_sanitizers))
    message(FATAL_ERROR "KVTIER_SANITIZE: thread cannot be combined with address or leak")
  endif()
  if(KVTIER_HAS_CUDA)
    message(WARNING "KVTIER_SANITIZE with CUDA: .cu files are built without sanitizers; "
                    "configure with -DKVTIER_CUDA=OFF for a fully sanitized tree")
  endif()

  list(APPEND KVTIER_SANITIZER_COMPILE_FLAGS -fsanitize=${_kvtier_sanitize}
       -fno-omit-frame-pointer -fno-optimize-sibling-calls)
  list(APPEND KVTIER_SANITIZER_LINK_FLAGS -fsanitize=${_kvtier_sanitize})

  if("undefined" IN_LIST _kvtier_sanitizers)
    # Every UBSan finding aborts (as ASan's do), so no test can pass over one
    # whatever UBSAN_OPTIONS says.
    list(APPEND KVTIER_SANITIZER_COMPILE_FLAGS -fno-sanitize-recover=all)
    if(_kvtier_is_clang)
      # clang 14's -fsanitize=function mis-fires on coroutine frames
      # (docs/build.md). It checks only calls through function pointers
      # cast to another type.
      list(APPEND KVTIER_SANITIZER_COMPILE_FLAGS -fno-sanitize=function)
    endif()
  endif()
  if("address" IN_LIST _kvtier_sanitizers)
    # libstdc++'s own bounds checks (operator[], front(), back() of the
    # containers): what ASan cannot see inside a vector's capacity.
    list(APPEND KVTIER_SANITIZER_COMPILE_FLAGS -D_GLIBCXX_ASSERTIONS)
  endif()
  if("thread" IN_LIST _kvtier_sanitizers AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # g++ warns that TSan does not model atomic_thread_fence (asio uses it).
    list(APPEND KVTIER_SANITIZER_COMPILE_FLAGS -Wno-tsan)
  endif()
endif()

if(KVTIER_FUZZ)
  if(NOT _kvtier_is_clang)
    message(FATAL_ERROR "KVTIER_FUZZ=ON needs clang (libFuzzer): "
                        "-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14")
  endif()
  if("thread" IN_LIST _kvtier_sanitizers)
    message(FATAL_ERROR "KVTIER_FUZZ=ON goes with address,undefined, not thread")
  endif()
  # Coverage instrumentation for the libraries the fuzz targets link; the
  # targets themselves link libFuzzer's main (fuzz/CMakeLists.txt).
  list(APPEND KVTIER_SANITIZER_COMPILE_FLAGS -fsanitize=fuzzer-no-link)
endif()

if(KVTIER_SANITIZER_COMPILE_FLAGS)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${KVTIER_SANITIZER_COMPILE_FLAGS}>")
endif()
if(KVTIER_SANITIZER_LINK_FLAGS)
  add_link_options(${KVTIER_SANITIZER_LINK_FLAGS})
endif()
message(STATUS "kvtier: sanitizers '${_kvtier_sanitize}', fuzz targets ${KVTIER_FUZZ}")
