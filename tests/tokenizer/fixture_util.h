// Loading of llama.cpp tokenizer fixtures (ggml-vocab-NAME.gguf + .inp/.out)
// for tests and benchmarks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace ckv {

struct TokenizerCase {
  std::string text;
  std::vector<int32_t> ids;  // llama.cpp's output, no BOS
};

// Folder holding the tokenizer fixtures.
std::string TokenizerFixtureDir();

// Why a fixture could not be loaded (a failure message: fixtures are part of
// the repository).
std::string FixtureMissingReason();

// Splits .inp/.out contents exactly as llama.cpp's test-tokenizer-0 does:
// inputs are separated by "\n__ggml_vocab_test__\n" (the file ends with one),
// outputs are one line per input of space-separated ids.
std::vector<TokenizerCase> ParseFixture(const std::string& inp,
                                        const std::string& out);

// Loads ggml-vocab-`name`.gguf and its cases; false when the fixture folder
// is absent. Loading failures of a present fixture abort the test via
// ADD_FAILURE and return true with *tok == nullptr.
bool LoadFixture(const std::string& name, std::unique_ptr<Tokenizer>* tok,
                 std::vector<TokenizerCase>* cases);

}  // namespace ckv
