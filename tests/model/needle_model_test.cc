// The project's retrieval model (models/needle-llama.gguf, made by
// scripts/train/train_needle.py): with dense attention it must answer
// single-needle prompts of ~4k tokens (the format of docs/clusterkv.md,
// "Needle prompts") written over the held-out KJV text, with keys and
// values from the held-out vocabularies, at the start, middle and end.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/dense_kv_cache.h"
#include "model/generation.h"
#include "model/model.h"
#include "model/transformer.h"

namespace ckv {
namespace {

const std::string kModelsDir = CLUSTERKV_MODELS_DIR;

std::string HeldOutText() {
  std::ifstream in(kModelsDir + "/kjv-llama.heldout.txt");
  EXPECT_TRUE(in.good()) << "missing " << kModelsDir
                         << "/kjv-llama.heldout.txt";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Filler of about `bytes` bytes with the needle after the sentence end
// nearest to `depth` (0: before the filler, 1: after it), then the question.
std::string NeedlePrompt(const std::string& text, size_t bytes, double depth,
                         const std::string& key, const std::string& value) {
  std::string filler = text.substr(0, text.rfind(". ", bytes) + 1);
  const std::string needle =
      " The magic number for " + key + " is " + value + ".";
  size_t at = 0;
  if (depth >= 1.0) {
    at = filler.size();
  } else if (depth > 0.0) {
    at = filler.find(". ", static_cast<size_t>(depth * filler.size())) + 1;
  }
  filler.insert(at, needle);
  return filler + "\n\nQuestion: What is the magic number for " + key +
         "?\nAnswer: The magic number for " + key + " is";
}

struct Case {
  double depth;
  const char* key;
  const char* value;
};

TEST(NeedleModel, DenseAnswersSingleNeedlesAt4k) {
  auto model = LoadModel(kModelsDir + "/needle-llama.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const std::string text = HeldOutText();
  ASSERT_GT(text.size(), 20000u);
  // Keys and values from the held-out quarters (needle.held_out); values
  // of 7 different digits, as the model was trained on.
  const std::vector<Case> cases = {{0.0, "mountain", "4817263"},
                                   {0.5, "thunder", "9051736"},
                                   {1.0, "camel", "7542961"}};
  for (const Case& c : cases) {
    const std::string prompt = NeedlePrompt(text, 15000, c.depth, c.key,
                                            c.value);
    auto ids = m.tokenizer->Encode(prompt, /*add_special=*/true,
                                   /*parse_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_GT(ids->size(), 3500u);
    ASSERT_LT(ids->size(), 4600u);
    Transformer tf(m.config, m.weights, {1, 256});
    DenseKvCache cache(
        DenseCacheOptions(m.config, kernels::DType::kF32, ids->size() + 16));
    SamplingParams greedy;
    greedy.max_tokens = 12;
    std::string out;
    auto result = Generate(tf, *m.tokenizer, cache, *ids, greedy,
                           [&out](absl::string_view piece) {
                             out.append(piece.data(), piece.size());
                             return true;
                           });
    ASSERT_TRUE(result.ok()) << result.status();
    const std::string want = std::string(" ") + c.value + ".";
    EXPECT_EQ(out.substr(0, want.size()), want)
        << "depth " << c.depth << ", " << ids->size() << " tokens";
    EXPECT_EQ(result->finish, FinishReason::kEos) << "answer then <|eos|>";
  }
}

}  // namespace
}  // namespace ckv
