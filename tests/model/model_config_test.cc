// Unsupported or malformed models are rejected with a message that names
// what is missing; supported variants are read correctly.
#include <gtest/gtest.h>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/model.h"
#include "model/model_config.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

RandomModelSpec Tiny() {
  RandomModelSpec s;
  s.layers = 1;
  s.dim = 32;
  s.heads = 2;
  s.kv_heads = 1;
  s.ffn = 32;
  s.dtype = kernels::DType::kF32;
  return s;
}

// Re-serialises the tiny model with metadata edited or one tensor dropped;
// returns the new file's path.
std::string MutatedPath(const std::string& name,
                        const std::function<void(gguf::GgufWriter&)>& edit,
                        const std::string& drop_tensor = "") {
  auto src = gguf::GgufFile::Open(testing::RandomModelPath("tiny", Tiny()));
  EXPECT_TRUE(src.ok());
  gguf::GgufWriter w;
  for (const auto& [k, v] : (*src)->metadata()) w.Set(k, v);
  for (const auto& t : (*src)->tensors()) {
    if (t.name == drop_tensor) continue;
    w.AddTensor(t.name, t.dims, t.type,
                std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  edit(w);
  const std::string path = testing::TempPath(name + ".gguf");
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

absl::Status LoadMutated(const std::string& name,
                         const std::function<void(gguf::GgufWriter&)>& edit,
                         const std::string& drop_tensor = "") {
  return LoadModel(MutatedPath(name, edit, drop_tensor)).status();
}

TEST(ModelConfig, ReadsRandomModel) {
  auto f = gguf::GgufFile::Open(testing::RandomModelPath("tiny", Tiny()));
  ASSERT_TRUE(f.ok());
  auto c = ReadModelConfig(**f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_layers, 1);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->vocab_size, 259);
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_FALSE(c->has_rope_freqs);
  const std::string json = ModelInfoJson(*c, **f);
  EXPECT_NE(json.find("\"kv_heads\": 1"), std::string::npos) << json;
}

TEST(ModelConfig, UnsupportedArchitectureIsNamed) {
  const absl::Status s = LoadMutated("arch", [](gguf::GgufWriter& w) {
    w.SetString("general.architecture", "gptneox");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("gptneox"), std::string::npos) << s;
}

TEST(ModelConfig, MissingKeyIsNamed) {
  const absl::Status s = LoadMutated("nokey", [](gguf::GgufWriter& w) {
    // A string where a count is required.
    w.SetString("llama.block_count", "two");
  });
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("llama.block_count"), std::string::npos) << s;
}

TEST(ModelConfig, MissingTensorIsNamed) {
  const absl::Status s = LoadMutated(
      "notensor", [](gguf::GgufWriter&) {}, "blk.0.ffn_up.weight");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("blk.0.ffn_up.weight"), std::string::npos) << s;
}

TEST(ModelConfig, InconsistentHeadsAreRejected) {
  const absl::Status s = LoadMutated("heads", [](gguf::GgufWriter& w) {
    w.SetUint32("llama.attention.head_count_kv", 3);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head_count_kv"), std::string::npos) << s;
}

TEST(ModelConfig, WrongTensorShapeIsNamed) {
  auto src = gguf::GgufFile::Open(testing::RandomModelPath("tiny", Tiny()));
  ASSERT_TRUE(src.ok());
  const absl::Status s = LoadMutated("shape", [](gguf::GgufWriter& w) {
    w.SetUint32("llama.feed_forward_length", 64);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ffn_gate.weight"), std::string::npos) << s;
}

TEST(ModelConfig, UnsupportedRopeScalingIsNamed) {
  const absl::Status s = LoadMutated("yarn", [](gguf::GgufWriter& w) {
    w.SetString("llama.rope.scaling.type", "yarn");
  });
  EXPECT_NE(s.message().find("yarn"), std::string::npos) << s;
}

TEST(ModelConfig, LinearRopeScalingSetsFreqScale) {
  auto f = gguf::GgufFile::Open(MutatedPath("linear", [](gguf::GgufWriter& w) {
    w.SetString("llama.rope.scaling.type", "linear");
    w.SetFloat32("llama.rope.scaling.factor", 4.0f);
  }));
  ASSERT_TRUE(f.ok());
  auto c = ReadModelConfig(**f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rope_freq_scale, 0.25f);
}

TEST(ModelConfig, TruncatedModelFileIsAnError) {
  const std::string path = testing::RandomModelPath("tiny", Tiny());
  auto f = gguf::GgufFile::Open(path);
  ASSERT_TRUE(f.ok());
  std::vector<uint8_t> bytes;
  {
    FILE* in = std::fopen(path.c_str(), "rb");
    bytes.resize(std::filesystem::file_size(path));
    ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), in), bytes.size());
    std::fclose(in);
  }
  const std::string cut = testing::TempPath("cut.gguf");
  FILE* out = std::fopen(cut.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size() - 100, out);
  std::fclose(out);
  auto m = LoadModel(cut);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("outside the file"), std::string::npos)
      << m.status();
}

}  // namespace
}  // namespace ckv
