// Vocabularies for the grammar tests: the demo model's tokenizer and a
// synthetic byte vocabulary with split UTF-8 characters.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/grammar/token_index.h"
#include "model/tokenizer/tokenizer.h"

namespace ckv::grammar::testing {

// The demo model's tokenizer (models/kjv-llama.gguf); fails the test
// when the file is missing.
inline std::unique_ptr<Tokenizer> DemoTokenizer() {
  auto file = gguf::GgufFile::Open(std::string(CLUSTERKV_MODELS_DIR) +
                                   "/kjv-llama.gguf");
  if (!file.ok()) return nullptr;
  auto t = Tokenizer::FromGguf(**file);
  if (!t.ok()) return nullptr;
  return *std::move(t);
}

// All single bytes, JSON-ish pieces, random ASCII strings and pieces of
// multi-byte characters (leading bytes alone, whole characters, tails);
// token 0 is the end-of-generation token.
inline std::shared_ptr<const TokenIndex> SyntheticIndex(int extra,
                                                        uint32_t seed) {
  std::vector<std::string> v = {""};
  for (int b = 1; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* s :
       {"{\"",          "\":",        "\",",     "\"}",      "true", "false",
        "null",         "{\"name\":", " \"",     "12",       "3.5",  "-1",
        "e+",           "\\n",        "\\u00e9", "\xce\xb2", "\xce", "\xb2\"",
        "\xe2\x82\xac", "\xe2\x82",   "\xac",    "ab",       "abc",  "[1,",
        "]}",           "\n",         "  "}) {
    v.push_back(s);
  }
  std::mt19937 rng(seed);
  const std::string alphabet = "abcdefxyz0123456789{}[]\":, -.\\\n";
  for (int i = 0; i < extra; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
    v.push_back(s);
  }
  return std::make_shared<TokenIndex>(std::move(v), std::vector<int32_t>{0});
}

}  // namespace ckv::grammar::testing
