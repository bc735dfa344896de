# libFuzzer targets need clang and instrumented code under test. The main
# build (any compiler) therefore builds them in a clang sub-build of this same
# source tree with CLUSTERKV_FUZZERS_ONLY=ON (see the top-level CMakeLists),
# under ${CMAKE_BINARY_DIR}/fuzz; the binaries land in fuzz/tests/fuzz/.
# Test `fuzz_smoke` runs each of them briefly through scripts/fuzz.sh.
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
# A short run of every fuzzer: 200k executions, at most 5 s each, fixed seed
# (scripts/fuzz.sh runs them for as long as asked).
add_test(NAME fuzz_smoke
  COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh --bin-dir ${CLUSTERKV_FUZZ_BIN_DIR}
          --runs 200000 --max-time 5 --seed 1)
set_tests_properties(fuzz_smoke PROPERTIES TIMEOUT 120 LABELS fuzz)
