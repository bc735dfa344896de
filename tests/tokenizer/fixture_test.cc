// Golden tests against llama.cpp's tokenizer test vectors in
// tests/fixtures/tokenizer (see tests/fixtures/README.md).

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/tokenizer/fixture_util.h"

namespace ckv {
namespace {

class FixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureTest, MatchesLlamaCpp) {
  const std::string name = GetParam();
  std::unique_ptr<Tokenizer> tok;
  std::vector<TokenizerCase> cases;
  ASSERT_TRUE(LoadFixture(name, &tok, &cases)) << FixtureMissingReason();
  ASSERT_NE(tok, nullptr);
  int passed = 0;
  for (const TokenizerCase& c : cases) {
    absl::StatusOr<std::vector<int32_t>> ids =
        tok->Encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids == c.ids) {
      ++passed;
    } else {
      ADD_FAILURE() << name << ": mismatch for '" << c.text << "'\n got "
                    << testing::PrintToString(*ids) << "\nwant "
                    << testing::PrintToString(c.ids);
    }
  }
  std::cout << "[fixture] " << name << ": " << passed << "/" << cases.size()
            << " cases match llama.cpp\n";
  EXPECT_EQ(passed, static_cast<int>(cases.size()));
}

INSTANTIATE_TEST_SUITE_P(Vocabs, FixtureTest,
                         ::testing::Values("llama-spm", "llama-bpe", "qwen2",
                                           "gpt-2", "command-r",
                                           "deepseek-coder", "falcon", "mpt",
                                           "refact", "starcoder", "gemma-4"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace ckv
