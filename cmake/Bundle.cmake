# CLUSTERKV_BUNDLE=ON (scripts/device-bundle.sh): link the device-check
# binaries so that they run on a machine with a CUDA driver and cuBLAS but
# none of this project's dev packages (docs/device-check.md):
#   - libstdc++ and libgcc static;
#   - the CUDA runtime static (CUDA::cudart points at libcudart_static.a);
#   - Abseil static: Debian's CMake config imports the .so files, so every
#     absl:: target whose libabsl_*.a sits beside its .so is pointed at
#     the .a (GTest is static already);
#   - PCRE2 static (libpcre2-8.a);
#   - --as-needed, so a binary that uses no cuBLAS call does not need it;
#   - sections per function and --gc-sections (smaller binaries);
#   - RUNPATH $ORIGIN/../lib only (bin/ and lib/ of the bundle; no path of
#     this machine), for any shared library the bundle script must copy.
# cuBLAS stays shared: the device has it (the CUDA toolkit or PyTorch's
# nvidia/ wheels) and it is far larger than the bundle.
# Included by the top-level CMakeLists.txt after the dependencies are found;
# ckv_bundle_relocate_tests() runs after the tests are defined.

add_link_options(-static-libstdc++ -static-libgcc LINKER:--as-needed)
# Every function and object in its own section, unreferenced ones dropped
# at link: the bundle's test binaries link whole libraries of which each
# uses a part (the bundle must stay within 20 MiB).
add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:-ffunction-sections;-fdata-sections>"
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffunction-sections,-fdata-sections>")
add_link_options(LINKER:--gc-sections)
set(CMAKE_BUILD_WITH_INSTALL_RPATH ON)
set(CMAKE_INSTALL_RPATH "$ORIGIN/../lib")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH OFF)

# Abseil: .so -> .a wherever the static archive exists.
get_property(ckv_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
set(ckv_absl_static 0)
set(ckv_absl_shared "")
foreach(t ${ckv_imported})
  if(NOT t MATCHES "^absl::")
    continue()
  endif()
  get_target_property(type ${t} TYPE)
  if(NOT type STREQUAL "SHARED_LIBRARY")
    continue()
  endif()
  get_target_property(loc ${t} IMPORTED_LOCATION_NONE)
  if(NOT loc)
    get_target_property(loc ${t} IMPORTED_LOCATION)
  endif()
  if(loc MATCHES "^(.*)/lib([A-Za-z0-9_]+)\\.so")
    set(archive "${CMAKE_MATCH_1}/lib${CMAKE_MATCH_2}.a")
    if(EXISTS "${archive}")
      set_target_properties(${t} PROPERTIES
        IMPORTED_LOCATION "${archive}" IMPORTED_LOCATION_NONE "${archive}"
        IMPORTED_LOCATION_RELEASE "${archive}")
      math(EXPR ckv_absl_static "${ckv_absl_static} + 1")
    else()
      list(APPEND ckv_absl_shared ${t})
    endif()
  endif()
endforeach()
message(STATUS "ClusterKV bundle: ${ckv_absl_static} Abseil targets static"
               "; still shared: ${ckv_absl_shared}")

# PCRE2 (pkg-config imports the .so).
if(TARGET PkgConfig::PCRE2)
  find_library(CKV_PCRE2_STATIC libpcre2-8.a HINTS ${PCRE2_LIBRARY_DIRS})
  if(CKV_PCRE2_STATIC)
    set_target_properties(PkgConfig::PCRE2 PROPERTIES
      INTERFACE_LINK_LIBRARIES "${CKV_PCRE2_STATIC}")
    message(STATUS "ClusterKV bundle: PCRE2 static ${CKV_PCRE2_STATIC}")
  endif()
endif()

# The CUDA runtime: every CUDA::cudart user gets the static one.
if(CLUSTERKV_HAVE_CUDA)
  if(NOT TARGET CUDA::cudart_static)
    message(FATAL_ERROR "CLUSTERKV_BUNDLE: libcudart_static.a not found")
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  set_target_properties(CUDA::cudart PROPERTIES
    IMPORTED_LOCATION "${CUDA_cudart_static_LIBRARY}")
  set_property(TARGET CUDA::cudart APPEND PROPERTY
    INTERFACE_LINK_LIBRARIES CUDA::cudart_static_deps)
  message(STATUS "ClusterKV bundle: cudart static ${CUDA_cudart_static_LIBRARY}")
endif()

# Tests that name files of the source tree by absolute path get paths
# relative to the bundle root instead (device-check.sh runs every binary
# from there): CLUSTERKV_MODELS_DIR="<source>/models" -> "models".
function(ckv_bundle_relocate_tests)
  foreach(t device_backend_test cuda_e2e_test gpu_engine_bench)
    if(NOT TARGET ${t})
      continue()
    endif()
    get_target_property(defs ${t} COMPILE_DEFINITIONS)
    if(defs)
      string(REPLACE "CLUSTERKV_MODELS_DIR=\"${CMAKE_SOURCE_DIR}/models\""
             "CLUSTERKV_MODELS_DIR=\"models\"" defs "${defs}")
      set_target_properties(${t} PROPERTIES COMPILE_DEFINITIONS "${defs}")
    endif()
  endforeach()
endfunction()
