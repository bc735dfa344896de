# The test suite in two halves, so that CI (scripts/test.sh) compiles and
# runs each test once in the build where it says most:
#   release   numeric tests against llama.cpp goldens and against the
#             simple references (heavy arithmetic: slow under sanitizers,
#             and what users run is -O3), the tokenizer and chat-template
#             fixture tests (their parsers run under ASan+UBSan in the
#             fuzzers of fuzz_smoke), and the end-to-end tests that drive the shipped Release
#             binaries (CLI, Python package, deployment, benchmark smokes,
#             fuzzers, GPU tests);
#   sanitize  every other test: parsers, KV store, engine, server, client,
#             kernel odd-size/bounds tests — run under ASan+UBSan (the
#             `concurrency` ones also under TSan: scripts/test-tsan.sh).
# A test is in `sanitize` unless listed below (the soak runs there; the
# Release binaries are soaked by status_page_test, which loads its page while
# clusterkv_soak runs).
# Targets: ckv_release_set builds everything but the sanitize-only test
# binaries; ckv_sanitize_set builds the sanitize tests and the binaries
# they spawn. The regexes for `ctest -R` are written to
# <build>/test_sets/{release,sanitize}.regex. A plain build
# (`cmake --build build`, `ctest`) still builds and runs everything.
set(CKV_RELEASE_TESTS
  golden_test needle_model_test arch_golden_test arch_forward_test quant_golden_test
  quant_model_test long_context_test
  kernels_cluster_test forward_test generation_test quality_test
  kv_oracle_test sampler_test
  tokenizer_test chat_template_test
  cli_test gguf_tools_test python_client_test openai_client_test http_front_test
  status_page_test http_grpc_soak_smoke
  deploy_config_test deploy_k8s_schema_test
  deploy_affinity_test
  engine_bench_smoke cluster_bench_smoke service_bench_smoke
  gpu_engine_bench_dry_run needle_bench_smoke
  stall_bench_smoke fuzz_smoke json_schema_corpus_test grammar_bench_smoke
  cuda_device_test cuda_ops_test cuda_runtime_test cuda_e2e_test
  cuda_launch_checks_test
  cuda_stream_lint_test
  cuda_ptxas_test link_probe_dry_run_test)
set(CKV_BOTH_SETS_TESTS)
# Benchmarks that no smoke test runs: built by a plain build and
# scripts/bench.sh, left out of ckv_release_set to keep CI in its budget.
set(CKV_NOT_IN_RELEASE_SET kernels_bench matvec_bench gemm_bench recall_probe_bench
  snapshot_bench cuda_ops_bench hwy_eval_bench)

# Fuzzers built in this (clang ASan) build run here, in the sanitize set
# (cmake/Fuzzers.cmake); the Release build of scripts/test.sh then has none.
if(CLUSTERKV_FUZZ_IN_TREE)
  list(REMOVE_ITEM CKV_RELEASE_TESTS fuzz_smoke)
endif()

# Tests and targets of `dir` and its subdirectories.
function(ckv_collect_tests dir tests_var targets_var)
  get_property(tests DIRECTORY ${dir} PROPERTY TESTS)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    ckv_collect_tests(${sub} sub_tests sub_targets)
    list(APPEND tests ${sub_tests})
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${tests_var} ${tests} PARENT_SCOPE)
  set(${targets_var} ${targets} PARENT_SCOPE)
endfunction()

ckv_collect_tests(${CMAKE_SOURCE_DIR} ckv_all_tests ckv_all_targets)
set(ckv_sanitize_only_targets)
set(ckv_release_names)
set(ckv_sanitize_names)
foreach(t ${ckv_all_tests})
  if(t IN_LIST CKV_BOTH_SETS_TESTS)
    list(APPEND ckv_release_names ${t})
    list(APPEND ckv_sanitize_names ${t})
  elseif(t IN_LIST CKV_RELEASE_TESTS)
    list(APPEND ckv_release_names ${t})
  else()
    list(APPEND ckv_sanitize_names ${t})
    # A gtest test is its own executable target of the same name.
    if(TARGET ${t})
      list(APPEND ckv_sanitize_only_targets ${t})
    endif()
  endif()
endforeach()
foreach(set release sanitize)
  list(JOIN ckv_${set}_names "|" names)
  file(WRITE ${CMAKE_BINARY_DIR}/test_sets/${set}.regex "^(${names})$")
endforeach()

set(ckv_release_targets)
foreach(t ${ckv_all_targets})
  get_target_property(type ${t} TYPE)
  if(NOT type MATCHES "UTILITY|INTERFACE_LIBRARY" AND
     NOT t IN_LIST ckv_sanitize_only_targets AND
     NOT t IN_LIST CKV_NOT_IN_RELEASE_SET)
    list(APPEND ckv_release_targets ${t})
  endif()
endforeach()
if(TARGET clusterkv_fuzzers)
  list(APPEND ckv_release_targets clusterkv_fuzzers)
endif()
add_custom_target(ckv_release_set)
add_dependencies(ckv_release_set ${ckv_release_targets})

# The sanitize tests plus the programs they start (servers, CLIs, soak,
# in-tree fuzzers).
set(ckv_spawned clusterkv-server clusterkv clusterkv_soak)
if(CLUSTERKV_FUZZ_IN_TREE)
  get_property(ckv_fuzzers DIRECTORY ${CMAKE_SOURCE_DIR}/tests/fuzz
               PROPERTY BUILDSYSTEM_TARGETS)
  list(APPEND ckv_spawned ${ckv_fuzzers})
endif()
foreach(t ${ckv_spawned})
  if(TARGET ${t})
    list(APPEND ckv_sanitize_only_targets ${t})
  endif()
endforeach()
add_custom_target(ckv_sanitize_set)
add_dependencies(ckv_sanitize_set ${ckv_sanitize_only_targets})
