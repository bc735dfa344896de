// Samples constrained outputs for every JSON Schema file given, one JSON
// line per output, for validate_corpus.py to check with python3-jsonschema:
//   {"schema": "<file>", "seed": S, "output": "<text>", "ended": true}
// or {"schema": "<file>", "error": "<message>"} when a schema does not
// compile. The driver is random logits over the demo model's vocabulary
// (no forward pass): N(0, 2) per token, +4 for tokens that can close a
// value (containing " ] } ,) and for end-of-generation, so that outputs
// stay short; validity comes from the mask alone, whatever the logits.
//
// Usage: schema_corpus_gen MODEL.gguf SAMPLES MAX_TOKENS SCHEMA.json...
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "model/gguf/gguf.h"
#include "model/grammar/matcher.h"
#include "model/sampler.h"
#include "nlohmann/json.hpp"

namespace {

using ckv::grammar::ConstraintSpec;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: schema_corpus_gen MODEL.gguf SAMPLES MAX_TOKENS "
                 "SCHEMA.json...\n";
    return 2;
  }
  auto file = ckv::gguf::GgufFile::Open(argv[1]);
  if (!file.ok()) {
    std::cerr << file.status() << "\n";
    return 1;
  }
  auto tok = ckv::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::cerr << tok.status() << "\n";
    return 1;
  }
  const int samples = std::atoi(argv[2]);
  const int max_tokens = std::atoi(argv[3]);
  auto vocab = ckv::grammar::TokenIndex::For(**tok);
  std::vector<float> bias(vocab->vocab_size(), 0.0f);
  for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
    const std::string& b = vocab->bytes(t);
    if (vocab->IsEog(t) || b.find_first_of("\"]},") != std::string::npos) {
      bias[t] = 4.0f;
    }
  }
  for (int i = 4; i < argc; ++i) {
    nlohmann::json line;
    line["schema"] = argv[i];
    auto c = ckv::grammar::CompileConstraint(
        {ConstraintSpec::kJsonSchema, ReadFile(argv[i])}, vocab);
    if (!c.ok()) {
      line["error"] = std::string(c.status().message());
      std::cout << line.dump() << "\n";
      continue;
    }
    for (int seed = 0; seed < samples; ++seed) {
      ckv::SamplingParams p;
      p.temperature = 1.0f;
      p.top_k = 0;
      p.top_p = 1.0f;
      p.seed = seed;
      p.constraint = *c;
      ckv::Sampler sampler(p);
      std::mt19937 rng(seed * 7919 + i);
      std::normal_distribution<float> noise(0.0f, 2.0f);
      std::vector<float> logits(vocab->vocab_size());
      std::string out;
      bool ended = false;
      for (int step = 0; step < max_tokens; ++step) {
        for (size_t t = 0; t < logits.size(); ++t) {
          logits[t] = noise(rng) + bias[t];
        }
        const int32_t t = sampler.Sample(logits);
        if (vocab->IsEog(t)) {
          ended = true;
          break;
        }
        out += vocab->bytes(t);
        sampler.Accept(t);
      }
      line["seed"] = seed;
      line["output"] = out;
      line["ended"] = ended;
      std::cout << line.dump(-1, ' ', false,
                             nlohmann::json::error_handler_t::replace)
                << "\n";
    }
  }
  return 0;
}
