#include "kernels/cuda/cublas_loader.h"

#include <dlfcn.h>

namespace ckv::kernels::cuda {
namespace {

struct Loaded {
  CublasApi api;
  bool ok = false;
  std::string error;
};

// Entry point `name` of `lib` into *fn; false (and the error) when absent.
template <typename Fn>
bool Find(void* lib, const char* name, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr) *error = std::string("no symbol ") + name;
  return *fn != nullptr;
}

Loaded Load() {
  Loaded l;
  const std::string name = CublasLibraryName();
  // Never closed: its handles live as long as the process.
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    l.error = name + " could not be opened (" +
              (why != nullptr ? why : "unknown") +
              "); put its folder on LD_LIBRARY_PATH";
    return l;
  }
  std::string e;
  l.ok = Find(lib, "cublasCreate_v2", &l.api.create, &e) &&
         Find(lib, "cublasDestroy_v2", &l.api.destroy, &e) &&
         Find(lib, "cublasSetStream_v2", &l.api.set_stream, &e) &&
         Find(lib, "cublasSetWorkspace_v2", &l.api.set_workspace, &e) &&
         Find(lib, "cublasGemmEx", &l.api.gemm_ex, &e);
  if (!l.ok) l.error = name + ": " + e;
  return l;
}

const Loaded& Once() {
  static const Loaded* loaded = new Loaded(Load());
  return *loaded;
}

}  // namespace

std::string CublasLibraryName() {
  return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
}

const CublasApi* Cublas() {
  const Loaded& l = Once();
  return l.ok ? &l.api : nullptr;
}

std::string LastCublasLoadError() { return Once().error; }

}  // namespace ckv::kernels::cuda
