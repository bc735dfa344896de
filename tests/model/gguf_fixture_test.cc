// Tests of the GGUF reader against real files written by llama.cpp's gguf-py
// (tests/fixtures/models, tests/fixtures/tokenizer).

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "model/gguf/gguf.h"

namespace ckv::gguf {
namespace {

using kernels::DType;
// --------------------------------------------------------------- fixtures

std::string Fixture(const std::string& rel) {
  return std::string(CLUSTERKV_FIXTURES_DIR) + "/" + rel;
}

// Size of the file at `path`; -1 when it does not exist.
int64_t FileSize(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0 ? sb.st_size : -1;
}

// Checks invariants every valid file must meet: tensors lie inside the
// mapping, sizes match dims and type, and no two tensors overlap.
void ExpectSaneTensors(const GgufFile& f, size_t file_size) {
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : f.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    EXPECT_EQ(t.n_elements, n) << t.name;
    EXPECT_EQ(t.n_bytes, kernels::RowBytes(t.type, t.dims[0]) * t.rows())
        << t.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_EQ(f.FindTensor(t.name), &t);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    EXPECT_LE(by_offset[i - 1]->offset + by_offset[i - 1]->n_bytes,
              by_offset[i]->offset);
  }
  if (!by_offset.empty()) {
    const TensorInfo* first = by_offset.front();
    const TensorInfo* last = by_offset.back();
    EXPECT_LE(static_cast<size_t>(last->data + last->n_bytes - first->data),
              file_size);
  }
}

struct TinyModel {
  const char* file;
  int layers, d_model, heads, kv_heads, ffn;
  size_t n_tensors;
  DType weight_type;
};

class GgufFixtureModel : public ::testing::TestWithParam<TinyModel> {};

TEST_P(GgufFixtureModel, Parses) {
  const TinyModel& m = GetParam();
  const std::string path = Fixture(std::string("models/") + m.file);
  const int64_t size = FileSize(path);
  ASSERT_GE(size, 0) << "fixture missing: " << path;
  auto parsed = GgufFile::Open(path);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const GgufFile& f = **parsed;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), m.layers);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), m.d_model);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count"), m.heads);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), m.kv_heads);
  EXPECT_EQ(*f.GetInt("llama.feed_forward_length"), m.ffn);
  EXPECT_NEAR(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5,
              1e-9);
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "llama");
  auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ((*tokens)->size(), 259u);
  EXPECT_EQ(
      std::vector<std::string>((*tokens)->begin(), (*tokens)->begin() + 4),
      (std::vector<std::string>{"<unk>", "<s>", "</s>", "<0x00>"}));
  EXPECT_EQ((**tokens)[258], "<0xFF>");

  EXPECT_EQ(f.tensors().size(), m.n_tensors);
  const TensorInfo* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{m.d_model, 259}));
  EXPECT_EQ(embd->type, m.weight_type);
  const TensorInfo* out = f.FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->dims, (std::vector<int64_t>{m.d_model, 259}));
  const TensorInfo* norm = f.FindTensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dims, (std::vector<int64_t>{m.d_model}));
  EXPECT_EQ(norm->type, DType::kF32);
  // Random norm weights lie around 1.
  float w0;
  std::memcpy(&w0, norm->data, 4);
  EXPECT_NEAR(w0, 1.0f, 0.5f);
  const TensorInfo* up =
      f.FindTensor(absl::StrCat("blk.", m.layers - 1, ".ffn_up.weight"));
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->dims, (std::vector<int64_t>{m.d_model, m.ffn}));
  EXPECT_EQ(up->type, m.weight_type);
  ExpectSaneTensors(f, static_cast<size_t>(size));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, GgufFixtureModel,
    ::testing::Values(
        TinyModel{"tiny-a-f32.gguf", 2, 128, 4, 2, 352, 21, DType::kF32},
        TinyModel{"tiny-b-f16.gguf", 3, 256, 8, 2, 704, 31, DType::kF16}),
    [](const auto& info) {
      return std::string(info.param.file[5] == 'a' ? "TinyA" : "TinyB");
    });

TEST(GgufFixture, RopeFreqsInTinyB) {
  const std::string path = Fixture("models/tiny-b-f16.gguf");
  ASSERT_GE(FileSize(path), 0) << "fixture missing: " << path;
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetFloat("llama.rope.freq_base"), 500000.0);
  const TensorInfo* r = (*f)->FindTensor("rope_freqs.weight");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->dims, (std::vector<int64_t>{16}));  // head_dim / 2
  EXPECT_EQ(r->type, DType::kF32);
}

TEST(GgufFixture, Vocabularies) {
  for (const char* name : {"gpt-2", "llama-bpe", "llama-spm", "qwen2"}) {
    SCOPED_TRACE(name);
    const std::string path =
        Fixture(absl::StrCat("tokenizer/ggml-vocab-", name, ".gguf"));
    ASSERT_GE(FileSize(path), 0) << "fixture missing: " << path;
    auto parsed = GgufFile::Open(path);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const GgufFile& f = **parsed;
    EXPECT_TRUE(f.tensors().empty());
    auto model = f.GetString("tokenizer.ggml.model");
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(*model, std::string(name) == "llama-spm" ? "llama" : "gpt2");
    auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    EXPECT_GT((*tokens)->size(), 30000u);
    if (auto types = f.GetIntArray("tokenizer.ggml.token_type"); types.ok()) {
      EXPECT_EQ((*types)->size(), (*tokens)->size());
    }
    if (auto scores = f.GetFloatArray("tokenizer.ggml.scores"); scores.ok()) {
      EXPECT_EQ((*scores)->size(), (*tokens)->size());
    }
    if (*model == "gpt2") {
      auto merges = f.GetStringArray("tokenizer.ggml.merges");
      ASSERT_TRUE(merges.ok()) << merges.status();
      EXPECT_GT((*merges)->size(), 10000u);
    }
  }
}

}  // namespace
}  // namespace ckv::gguf
