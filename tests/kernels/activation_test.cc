// GELU-tanh gating, soft-capping and RoPE's attn_factor: fast ops against
// their references on random inputs and odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cpu {
namespace {

using testing::RandomFloats;

TEST(ActivationTest, GeluTanhGateMatchesReference) {
  std::mt19937 rng(31);
  ThreadPool pool(2);
  for (int64_t n : {1, 15, 17, 4097, 10001}) {
    const auto g = RandomFloats(rng, n, -12, 12);
    const auto u = RandomFloats(rng, n, -2, 2);
    std::vector<float> y(n), yr(n);
    GeluTanhGate(n > 20 ? &pool : nullptr, g.data(), u.data(), n, y.data());
    ref::GeluTanhGate(g.data(), u.data(), n, yr.data());
    for (int64_t i = 0; i < n; ++i) {
      // Float tanh via exp: a few ulps of |gate * up|.
      ASSERT_NEAR(y[i], yr[i], 2e-6 * (std::fabs(g[i] * u[i]) + 1e-3))
          << "gate " << g[i];
    }
  }
  // Known values: gelu(0) = 0, gelu(x) -> x for large x, -> 0 for very
  // negative x; gelu_tanh(1) = 0.841192.
  const float g[4] = {0.0f, 30.0f, -30.0f, 1.0f}, u[4] = {1, 1, 1, 1};
  float y[4];
  ref::GeluTanhGate(g, u, 4, y);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], 30.0f);
  EXPECT_NEAR(y[2], 0.0f, 1e-6);
  EXPECT_NEAR(y[3], 0.841192f, 1e-6);
}

TEST(ActivationTest, SoftCapMatchesReference) {
  std::mt19937 rng(32);
  ThreadPool pool(3);
  for (float cap : {0.5f, 4.0f, 30.0f}) {
    for (int64_t n : {1, 7, 4099, 20000}) {
      auto x = RandomFloats(rng, n, -200, 200);
      auto xr = x;
      SoftCap(&pool, x.data(), n, cap);
      ref::SoftCap(xr.data(), n, cap);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(x[i], xr[i], 1e-6 * cap) << "cap " << cap;
        ASSERT_LE(std::fabs(xr[i]), cap);
      }
    }
  }
  float small = 1e-3f;
  ref::SoftCap(&small, 1, 30.0f);
  EXPECT_NEAR(small, 1e-3f, 1e-9);  // ~identity near 0
}

TEST(ActivationTest, RopeAttnFactorScalesCosAndSin) {
  std::mt19937 rng(33);
  const int heads = 3, hd = 32;
  const int64_t tokens = 5;
  const int64_t pos[tokens] = {0, 1, 17, 1000, 4095};
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    RopeParams p;
    p.mode = mode;
    p.rot_dims = 16;  // partial: dims 16..31 pass through
    p.attn_factor = 1.19f;
    const auto x0 = RandomFloats(rng, tokens * heads * hd);
    auto fast = x0, slow = x0, plain = x0;
    Rope(nullptr, fast.data(), tokens, heads, hd, pos, p);
    ref::Rope(slow.data(), tokens, heads, hd, pos, p);
    p.attn_factor = 1.0f;
    ref::Rope(plain.data(), tokens, heads, hd, pos, p);
    for (size_t i = 0; i < x0.size(); ++i) {
      ASSERT_NEAR(fast[i], slow[i], 1e-5);
      const bool rotated = static_cast<int>(i % hd) < 16;
      ASSERT_NEAR(slow[i], rotated ? 1.19f * plain[i] : x0[i], 1e-5);
    }
  }
}

}  // namespace
}  // namespace ckv::kernels::cpu
