# libFuzzer targets need clang and instrumented code under test. Two ways to
# build them:
#  - in tree, when this build is itself clang with AddressSanitizer (the
#    sanitizer build of scripts/test.sh): the fuzzed libraries get libFuzzer's
#    coverage instrumentation (-fsanitize=fuzzer-no-link) and UBSan, and the
#    fuzzers are targets of this build (tests/fuzz/). This saves CI a second
#    instrumented compile of the libraries (~1/3 of the Release stage's
#    compile work).
#  - otherwise (a gcc or uninstrumented build), in a clang sub-build of this
#    same source tree with CLUSTERKV_FUZZERS_ONLY=ON (see the top-level
#    CMakeLists), under ${CMAKE_BINARY_DIR}/fuzz.
# Test `fuzz_smoke` runs each of them briefly through scripts/fuzz.sh.
# CLUSTERKV_FUZZ_IN_TREE tells cmake/TestSets.cmake which build runs it.
set(CLUSTERKV_FUZZ_IN_TREE OFF)
# (In tree needs UBSan's runtime linked: CLUSTERKV_SANITIZE or _CORE has it.)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND
   CLUSTERKV_SANITIZE MATCHES "address" AND
   "${CLUSTERKV_SANITIZE};${CLUSTERKV_SANITIZE_CORE}" MATCHES "undefined")
  set(CLUSTERKV_FUZZ_IN_TREE ON)
  # The libraries the fuzzers drive (tests/fuzz/CMakeLists.txt). UBSan is
  # already on the core ones (CLUSTERKV_SANITIZE_CORE) or everywhere.
  set(ckv_fuzzed_libs ckv_gguf ckv_tokenizer ckv_model ckv_chat ckv_grammar
      ckv_request ckv_http_parser ckv_openai_json)
  foreach(t ${ckv_fuzzed_libs})
    target_compile_options(${t} PRIVATE -fsanitize=fuzzer-no-link)
    if(NOT CLUSTERKV_SANITIZE MATCHES "undefined" AND
       NOT (CLUSTERKV_SANITIZE_CORE MATCHES "undefined" AND
            t MATCHES "^ckv_(gguf|tokenizer)$"))
      target_compile_options(${t} PRIVATE -fsanitize=undefined
                             -fno-sanitize-recover=all)
    endif()
  endforeach()
  add_subdirectory(tests/fuzz)
  set(CLUSTERKV_FUZZ_BIN_DIR ${CMAKE_BINARY_DIR}/tests/fuzz)
else()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(CLUSTERKV_CLANGXX ${CMAKE_CXX_COMPILER})
    set(CLUSTERKV_CLANG ${CMAKE_C_COMPILER})
  else()
    find_program(CLUSTERKV_CLANGXX NAMES clang++ clang++-14)
    find_program(CLUSTERKV_CLANG NAMES clang clang-14)
  endif()
  if(NOT CLUSTERKV_CLANGXX OR NOT CLUSTERKV_CLANG)
    message(STATUS "ClusterKV: clang not found, fuzz targets are not built")
    return()
  endif()

  include(ExternalProject)
  ExternalProject_Add(clusterkv_fuzzers
    SOURCE_DIR ${CMAKE_SOURCE_DIR}
    BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
    CMAKE_GENERATOR ${CMAKE_GENERATOR}
    # -O1: libFuzzer's usual level; instrumented -O3 compiles ~2x slower.
    CMAKE_ARGS -DCMAKE_BUILD_TYPE=Release
               "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
               -DCMAKE_C_COMPILER=${CLUSTERKV_CLANG}
               -DCMAKE_CXX_COMPILER=${CLUSTERKV_CLANGXX}
               -DCLUSTERKV_FUZZERS_ONLY=ON
               -DCLUSTERKV_CUDA=OFF
               -DCLUSTERKV_TESTS=OFF
               -DCLUSTERKV_BENCH=OFF
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON)  # the sub-build tracks source changes itself
  set(CLUSTERKV_FUZZ_BIN_DIR ${CMAKE_BINARY_DIR}/fuzz/tests/fuzz)
endif()
message(STATUS "ClusterKV: fuzzers in tree ${CLUSTERKV_FUZZ_IN_TREE}")

# A short run of every fuzzer: 200k executions, at most 5 s each, fixed seed
# (scripts/fuzz.sh runs them for as long as asked).
add_test(NAME fuzz_smoke
  COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh --bin-dir ${CLUSTERKV_FUZZ_BIN_DIR}
          --runs 200000 --max-time 5 --seed 1)
set_tests_properties(fuzz_smoke PROPERTIES TIMEOUT 120 LABELS fuzz)
