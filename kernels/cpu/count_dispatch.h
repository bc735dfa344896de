// Turns a small run-time count into a compile-time one for kernels whose
// register blocking depends on it.
#pragma once

#include <type_traits>

namespace ckv::kernels::cpu {

// Calls f(std::integral_constant<int, c>{}) with c = clamp(n, 1, kMax).
template <int kMax, int kFrom = 1, typename F>
inline void WithCount(int n, F&& f) {
  if constexpr (kFrom >= kMax) {
    f(std::integral_constant<int, kMax>{});
  } else if (n <= kFrom) {
    f(std::integral_constant<int, kFrom>{});
  } else {
    WithCount<kMax, kFrom + 1>(n, f);
  }
}

}  // namespace ckv::kernels::cpu
