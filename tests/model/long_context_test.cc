// Chunked prefill keeps activation memory bounded: an 8k-token prompt must
// not allocate anything proportional to L^2 (an 8192^2 F32 score matrix alone
// would be 256 MiB).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "model/model.h"
#include "model/transformer.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

int64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

TEST(LongContext, PrefillMemoryDoesNotGrowWithTheSquareOfTheLength) {
  RandomModelSpec spec;
  spec.layers = 1;
  spec.dim = 64;
  spec.heads = 4;
  spec.kv_heads = 1;
  spec.ffn = 64;
  spec.dtype = kernels::DType::kF16;
  auto m = LoadModel(testing::RandomModelPath("long", spec));
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config;
  Transformer tf(c, (*m)->weights, {2, 256});
  const int64_t n = 8192;
  DenseKvCache cache(DenseCacheOptions(c, kernels::DType::kF16, n));
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = (i * 7919) % c.vocab_size;
  std::vector<float> logits;
  const int64_t before = PeakRssBytes();
  SequenceInput in{tokens, &cache, LogitsMode::kLast, &logits};
  ASSERT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  const int64_t growth = PeakRssBytes() - before;
  EXPECT_EQ(cache.num_tokens(), n);
  // KV is 8192 * 2 * 16 dims * 2 bytes = 0.5 MiB; activations for a 256-row
  // chunk are < 1 MiB. 64 MiB leaves room for allocator slack only.
  EXPECT_LT(growth, 64ll << 20) << "peak RSS grew by " << growth << " bytes";
  for (float l : logits) ASSERT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace ckv
