// Chooses the primitive table once from the CPU's features.
#include <atomic>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/ops.h"

namespace ckv::kernels::cpu {
namespace {

bool HasAvx512(const CpuFeatures& f) {
  return f.avx512f && f.avx512bw && f.avx512vl && f.fma && f.f16c;
}

// The exact tables only: avx512_bf16 rounds prefill operands to BF16 and is
// chosen by name (SelectKernels), never by default.
const KernelSet& Choose() {
  const CpuFeatures& f = GetCpuFeatures();
  if (HasAvx512(f)) {
    if (const KernelSet* ks = Avx512Kernels()) return *ks;
  }
  if (f.avx2 && f.fma && f.f16c) {
    if (const KernelSet* ks = Avx2Kernels()) return *ks;
  }
  return ScalarKernels();
}

std::atomic<const KernelSet*> g_override{nullptr};

}  // namespace

const KernelSet& ActiveKernels() {
  static const KernelSet& chosen = Choose();
  const KernelSet* o = g_override.load(std::memory_order_relaxed);
  return o != nullptr ? *o : chosen;
}

void SetKernelsForTesting(const KernelSet* ks) { g_override.store(ks); }

const char* KernelSetName() { return ActiveKernels().name; }

bool IsKernelSetName(const std::string& name) {
  for (const char* n : {"auto", "scalar", "avx2", "avx512", "avx512_bf16"}) {
    if (name == n) return true;
  }
  return false;
}

bool SelectKernels(const char* name) {
  const CpuFeatures& f = GetCpuFeatures();
  const KernelSet* ks = nullptr;
  if (std::strcmp(name, "auto") == 0) {
    SetKernelsForTesting(nullptr);
    return true;
  }
  if (std::strcmp(name, "scalar") == 0) {
    ks = &ScalarKernels();
  } else if (std::strcmp(name, "avx2") == 0) {
    if (f.avx2 && f.fma && f.f16c) ks = Avx2Kernels();
  } else if (std::strcmp(name, "avx512") == 0) {
    if (HasAvx512(f)) ks = Avx512Kernels();
  } else if (std::strcmp(name, "avx512_bf16") == 0) {
    if (HasAvx512(f) && f.avx512_bf16) ks = Avx512Bf16Kernels();
  }
  if (ks == nullptr) return false;
  SetKernelsForTesting(ks);
  return true;
}

}  // namespace ckv::kernels::cpu
