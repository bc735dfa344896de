// Run-time CPU feature detection (cpuid + OS support via xgetbv).
// AMX is never used: it needs kernel permission (arch_prctl) on these hosts.
#pragma once

#include <string>

namespace ckv::kernels::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool avx512_vnni = false;
};

const CpuFeatures& GetCpuFeatures();
// E.g. "avx2 fma f16c avx512f avx512bw ...".
std::string DescribeCpuFeatures();

}  // namespace ckv::kernels::cpu
