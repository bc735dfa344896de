// libFuzzer target: the grammar engine (model/grammar/) on arbitrary GBNF,
// JSON Schema and regex text.
//
// Input: byte 0 selects the text's kind (% 3: GBNF, JSON Schema, a JSON
// Schema string `pattern`); bytes after the first NUL (if any) are the
// input a matcher is driven with.
//
// Checked invariants (violations trap): compiling fails only with
// INVALID_ARGUMENT and a message; a compiled grammar's recogniser agrees
// with the reference recogniser on the input bytes (until either's state
// space is cut off); the token mask over a small vocabulary is never empty,
// only allowed tokens are accepted, and an allowed token's bytes keep the
// reference alive.
//
// Seeds: when CLUSTERKV_FUZZ_SEED_DIR names a folder, LLVMFuzzerInitialize
// writes a few grammars and schemas there.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "model/grammar/reference_recognizer.h"
#include "nlohmann/json.hpp"

namespace {

using ckv::grammar::ConstraintSpec;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

ckv::grammar::GrammarLimits FuzzLimits() {
  ckv::grammar::GrammarLimits limits;  // small, so that each input runs fast
  limits.max_source_bytes = 1 << 16;
  limits.max_rules = 4000;
  limits.max_elements = 40000;
  limits.max_repeat = 200;
  limits.max_stacks = 256;
  limits.max_stack_nodes = 1 << 14;
  limits.max_states = 256;
  return limits;
}

const std::shared_ptr<const ckv::grammar::TokenIndex>& Vocab() {
  static const auto* v =
      new std::shared_ptr<const ckv::grammar::TokenIndex>([] {
        std::vector<std::string> t = {""};
        for (int b = 1; b < 256; ++b) t.push_back(std::string(1, char(b)));
        for (const char* s : {"{\"", "\":", "true", "null", "ab", "\xce\xb2",
                              "12", "\\n", "\"}", "[", "\xe2\x82"}) {
          t.push_back(s);
        }
        return std::make_shared<const ckv::grammar::TokenIndex>(
            std::move(t), std::vector<int32_t>{0});
      }());
  return *v;
}

const char* const kSeeds[] = {
    "\x00root ::= \"{\" ws ( [a-z]+ \":\" ws [0-9]{1,3} )* \"}\"\nws ::= [ "
    "\\t]*",
    "\x00root ::= x | \"(\" root \")\"\nx ::= [^()]{0,4} \"\\u00e9\"?",
    "\x01{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\","
    "\"minimum\":-5,\"maximum\":70},\"b\":{\"enum\":[\"x\",null]}},"
    "\"required\":[\"a\"],\"additionalProperties\":false}",
    "\x01{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
    "n\"},\"maxItems\":2}},\"$ref\":\"#/$defs/n\"}",
    "\x02^[A-Z]{2}-\\d{3}(x|yz)*$",
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("CLUSTERKV_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == '\0') return 0;
  int i = 0;
  for (const char* seed : kSeeds) {
    const std::string path =
        std::string(dir) + "/grammar_seed_" + std::to_string(i++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) continue;  // the fuzzer still runs, just unseeded
    // The kind byte may be NUL: write it, then the rest.
    const std::string data = std::string(1, seed[0]) + (seed + 1) +
                             std::string(1, '\0') + "{\"a\":12}";
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int kind = data[0] % 3;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1),
                              size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view text = rest.substr(0, nul);
  const std::string_view input =
      nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  ConstraintSpec spec;
  if (kind == 0) {
    spec = {ConstraintSpec::kGbnf, std::string(text)};
  } else if (kind == 1) {
    spec = {ConstraintSpec::kJsonSchema, std::string(text)};
  } else {
    nlohmann::json schema = {{"type", "string"}};
    schema["pattern"] = nlohmann::json(std::string(text));
    spec = {
        ConstraintSpec::kJsonSchema,
        schema.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
  }
  const auto limits = FuzzLimits();
  auto c = ckv::grammar::CompileConstraint(spec, Vocab(), limits);
  if (!c.ok()) {
    Check(c.status().code() == absl::StatusCode::kInvalidArgument &&
          !c.status().message().empty());
    return 0;
  }
  // Recogniser vs reference on the input bytes.
  ckv::grammar::Recognizer rec((*c)->grammar, limits);
  ckv::grammar::ReferenceRecognizer ref(*(*c)->grammar);
  auto s = rec.Start();
  for (size_t i = 0; i < input.size() && i < 64 && s >= 0; ++i) {
    s = rec.Step(s, static_cast<uint8_t>(input[i]));
    const bool alive = ref.Feed(static_cast<uint8_t>(input[i]));
    if (rec.Overflowed() || ref.num_stacks() > 200) break;
    Check((s >= 0) == alive);
    if (s >= 0) Check(rec.Accepting(s) == ref.Accepting());
  }
  // A short walk: the input's bytes pick allowed tokens.
  ckv::grammar::Matcher m(*c);
  ckv::grammar::ReferenceRecognizer walk(*(*c)->grammar);
  const auto& v = *Vocab();
  bool track = true;  // the reference follows the walk
  for (size_t i = 0; i < input.size() && i < 16; ++i) {
    const std::vector<uint64_t>& mask = m.Mask();
    if (track && !m.Overflowed() && i < 4 && walk.num_stacks() < 50) {
      // The mask is exact: a text token is allowed iff the reference takes
      // all its bytes (MaskIndex entries, folded repetitions, rechecks).
      // First steps only: a reference copy per token is slow.
      for (int32_t t = 0; t < v.vocab_size(); ++t) {
        if (v.IsEog(t) || v.bytes(t).empty()) continue;
        ckv::grammar::ReferenceRecognizer r = walk;
        bool taken = true;
        for (unsigned char b : v.bytes(t)) {
          if (!(taken = r.Feed(b))) break;
        }
        Check(((mask[t >> 6] >> (t & 63)) & 1) == taken);
      }
    }
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < v.vocab_size(); ++t) {
      if ((mask[t >> 6] >> (t & 63)) & 1) allowed.push_back(t);
    }
    Check(!allowed.empty());
    const int32_t t = allowed[static_cast<uint8_t>(input[i]) % allowed.size()];
    Check(m.Accept(t).ok());
    if (v.IsEog(t)) break;
    for (unsigned char b : v.bytes(t)) {
      track = track && !m.Overflowed() && walk.num_stacks() < 200;
      if (track) Check(walk.Feed(b));
    }
  }
  return 0;
}
