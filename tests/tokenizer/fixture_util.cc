#include "tests/tokenizer/fixture_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf.h"

namespace ckv {
namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

std::string TokenizerFixtureDir() {
  return std::string(CLUSTERKV_FIXTURES_DIR) + "/tokenizer";
}

std::string FixtureMissingReason() {
  return "tokenizer fixtures not found at " + TokenizerFixtureDir() +
         " (copied into the repository from llama.cpp; see tests/fixtures/README.md)";
}

std::vector<TokenizerCase> ParseFixture(const std::string& inp,
                                        const std::string& out) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  while (pos < inp.size()) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines = absl::StrSplit(out, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::vector<TokenizerCase> cases;
  if (lines.size() != texts.size()) return cases;
  for (size_t i = 0; i < texts.size(); ++i) {
    TokenizerCase c;
    c.text = texts[i];
    for (absl::string_view f :
         absl::StrSplit(lines[i], ' ', absl::SkipWhitespace())) {
      int32_t id = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(f), &id)) {
        c.ids.push_back(id);
      }
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

bool LoadFixture(const std::string& name, std::unique_ptr<Tokenizer>* tok,
                 std::vector<TokenizerCase>* cases) {
  const std::string base = TokenizerFixtureDir() + "/ggml-vocab-" + name;
  if (!std::filesystem::exists(base + ".gguf")) return false;
  tok->reset();
  auto file = gguf::GgufFile::Open(base + ".gguf");
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    return true;
  }
  auto t = Tokenizer::FromGguf(**file);
  if (!t.ok()) {
    ADD_FAILURE() << t.status();
    return true;
  }
  std::string inp, out;
  if (!ReadFile(base + ".gguf.inp", &inp) ||
      !ReadFile(base + ".gguf.out", &out)) {
    ADD_FAILURE() << "cannot read " << base << ".gguf.inp/.out";
    return true;
  }
  *cases = ParseFixture(inp, out);
  EXPECT_FALSE(cases->empty()) << "no cases parsed for " << name;
  *tok = std::move(*t);
  return true;
}

}  // namespace ckv
