#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdint>

namespace ckv::kernels::cpu {
namespace {

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

uint64_t ReadXcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Queries cpuid and checks that the OS saves the vector state it needs.
CpuFeatures Detect() {
  CpuFeatures f;
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = Bit(c, 27);
  const bool avx = Bit(c, 28);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  if (!os_avx) return f;
  f.fma = Bit(c, 12);
  f.f16c = Bit(c, 29);
  uint32_t max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = Bit(b, 5);
  if (os_avx512) {
    f.avx512f = Bit(b, 16);
    f.avx512bw = Bit(b, 30);
    f.avx512vl = Bit(b, 31);
    f.avx512_vnni = Bit(c, 11);
    f.avx512_fp16 = Bit(d, 23);
    const uint32_t sub_leaves = a;
    if (sub_leaves >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512_bf16 = Bit(a, 5);
    }
  }
  return f;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

std::string DescribeCpuFeatures() {
  const CpuFeatures& f = GetCpuFeatures();
  struct Named {
    bool on;
    const char* name;
  };
  const Named all[] = {
      {f.avx2, "avx2"},
      {f.fma, "fma"},
      {f.f16c, "f16c"},
      {f.avx512f, "avx512f"},
      {f.avx512bw, "avx512bw"},
      {f.avx512vl, "avx512vl"},
      {f.avx512_bf16, "avx512_bf16"},
      {f.avx512_fp16, "avx512_fp16"},
      {f.avx512_vnni, "avx512_vnni"},
  };
  std::string out;
  for (const Named& n : all) {
    if (!n.on) continue;
    if (!out.empty()) out += ' ';
    out += n.name;
  }
  return out;
}

}  // namespace ckv::kernels::cpu
