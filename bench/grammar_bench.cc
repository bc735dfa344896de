// grammar_bench: the cost of constrained decoding per token, against the
// demo model's decode step measured in the same run.
//
// What runs: for each vocabulary (the demo model's, and the tokenizer
// fixtures' Llama-SPM 32k, Llama-3 BPE 128k and Gemma 256k vocabularies,
// real byte strings) and each grammar (json_object, two corpus JSON
// Schemas, a GBNF with UTF-8 classes), `generations` constrained
// generations of up to `tokens` tokens are driven by random logits (N(0,2),
// +4 on tokens that can close a value and on end-of-generation, as the
// schema corpus test does; temperature 1 with the default top_k/top_p). Per
// token it times Matcher::Mask (the trie walk or a cached mask) plus
// Matcher::Accept (the replay matcher's mask runs first, so it pays the
// misses of the constraint's shared MaskIndex; the first generation's
// tokens, which find the index cold, are also reported apart), and the
// whole constrained Sampler::Sample against an
// unconstrained Sample of the same logits. Then the demo model decodes
// `decode_steps` tokens at `decode_context` tokens of dense KV (one thread),
// and every mask time is reported as a share of that step. Writes --out_json
// (plot: bench/plot_grammar.py).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "bench/bench_common.h"
#include "kernels/cpu/cpu_features.h"
#include "model/gguf/gguf.h"
#include "model/grammar/matcher.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, out_json, "grammar_bench.json", "output JSON");
ABSL_FLAG(std::string, vocabs, "demo,spm32k,bpe128k,gemma256k",
          "vocabularies: demo, spm32k, bpe128k, gemma256k");
ABSL_FLAG(std::string, grammars, "",
          "comma-separated grammar names to run (empty: all)");
ABSL_FLAG(int, generations, 4, "generations per vocabulary and grammar");
ABSL_FLAG(int, tokens, 200, "max tokens per generation");
ABSL_FLAG(int, decode_context, 8192, "dense KV tokens before decode steps");
ABSL_FLAG(int, decode_steps, 16, "timed decode steps");
ABSL_FLAG(bool, cpu_time, false,
          "time with the thread's CPU clock instead of the wall clock (the "
          "decode step runs on one thread, so shares stay comparable)");
ABSL_FLAG(bool, fold_repeats, true,
          "MaskIndex folds x{m,n} count states (GrammarLimits::fold_repeats)");
ABSL_FLAG(bool, quick, false,
          "smoke run: demo vocabulary, 1 generation of 40 tokens, decode "
          "at 256 tokens");

namespace {

// Wall time, or with --cpu_time this thread's CPU time (a shared,
// loaded machine then weighs less on the figures); microseconds.
bool use_cpu_time = false;
struct Clock {
  using time_point = double;
  static double now() {
    if (use_cpu_time) {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
    }
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};
using ckv::grammar::ConstraintSpec;
using json = nlohmann::json;

double Us(double a, double b) { return b - a; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabSource {
  std::string name, path;
};

std::string Src(const std::string& rel) {
  return std::string(CLUSTERKV_SOURCE_DIR) + "/" + rel;
}

VocabSource SourceOf(const std::string& name) {
  if (name == "demo") return {name, Src("models/kjv-llama.gguf")};
  if (name == "spm32k") {
    return {name, Src("tests/fixtures/tokenizer/ggml-vocab-llama-spm.gguf")};
  }
  if (name == "bpe128k") {
    return {name, Src("tests/fixtures/tokenizer/ggml-vocab-llama-bpe.gguf")};
  }
  if (name == "gemma256k") {
    return {name, Src("tests/fixtures/tokenizer/ggml-vocab-gemma-4.gguf")};
  }
  return {name, ""};
}

struct Stats {
  std::vector<double> v;
  json ToJson() const {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    double sum = 0;
    for (double x : s) sum += x;
    auto q = [&](double f) {
      return s.empty() ? 0.0 : s[std::min(s.size() - 1, size_t(f * s.size()))];
    };
    return {{"n", s.size()},
            {"mean_us", s.empty() ? 0.0 : sum / s.size()},
            {"p50_us", q(0.5)},
            {"p99_us", q(0.99)},
            {"max_us", s.empty() ? 0.0 : s.back()}};
  }
};

// One vocabulary x grammar: constrained generations with timings.
json RunGrammar(const std::shared_ptr<const ckv::grammar::TokenIndex>& vocab,
                const std::string& grammar_name, const ConstraintSpec& spec,
                int generations, int max_tokens) {
  const auto c0 = Clock::now();
  ckv::grammar::GrammarLimits limits;
  limits.fold_repeats = absl::GetFlag(FLAGS_fold_repeats);
  auto c = ckv::grammar::CompileConstraint(spec, vocab, limits);
  const double compile_us = Us(c0, Clock::now());
  if (!c.ok())
    return {{"grammar", grammar_name}, {"error", c.status().message()}};
  std::vector<float> bias(vocab->vocab_size(), 0.0f);
  for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
    const std::string& b = vocab->bytes(t);
    if (vocab->IsEog(t) || b.find_first_of("\"]},") != std::string::npos) {
      bias[t] = 4.0f;
    }
  }
  Stats mask, sample_constrained, sample_plain, first_mask, mask_cold,
      mask_warm;
  int64_t tokens = 0, computed = 0, ended = 0;
  for (int g = 0; g < generations; ++g) {
    ckv::SamplingParams p;
    p.temperature = 1.0f;  // top_k 40, top_p 0.95: the defaults
    p.seed = g;
    ckv::SamplingParams plain = p;
    p.constraint = *c;
    ckv::Sampler constrained(p), unconstrained(plain);
    ckv::grammar::Matcher m(*c);  // replays the chosen tokens, timed alone
    std::mt19937 rng(1000 + g);
    std::normal_distribution<float> noise(0.0f, 2.0f);
    std::vector<float> logits(vocab->vocab_size());
    for (int step = 0; step < max_tokens; ++step) {
      for (size_t t = 0; t < logits.size(); ++t)
        logits[t] = noise(rng) + bias[t];
      // m's mask first: it pays any miss of the constraint's shared
      // MaskIndex, which the sampler's own matcher then finds.
      const auto t0 = Clock::now();
      m.Mask();
      const auto t1 = Clock::now();
      const int32_t tok = constrained.Sample(logits);
      const auto t2 = Clock::now();
      unconstrained.Sample(logits);
      const auto t3 = Clock::now();
      if (!m.Accept(tok).ok()) std::abort();  // the same grammar state
      const auto t4 = Clock::now();
      sample_constrained.v.push_back(Us(t1, t2));
      sample_plain.v.push_back(Us(t2, t3));
      const double mask_us = Us(t0, t1) + Us(t3, t4);
      mask.v.push_back(mask_us);
      (g == 0 ? mask_cold : mask_warm).v.push_back(mask_us);
      if (step == 0) first_mask.v.push_back(mask_us);
      ++tokens;
      if (vocab->IsEog(tok)) {
        ++ended;
        break;
      }
      constrained.Accept(tok);
      unconstrained.Accept(tok);
    }
    computed += m.masks_computed();
  }
  const auto& masks = (*c)->masks;
  return {{"grammar", grammar_name},
          {"compile_us", compile_us},
          {"mask_index_lookups", masks ? masks->lookups() : 0},
          {"mask_index_walks", masks ? masks->walks() : 0},
          {"tokens", tokens},
          {"generations", generations},
          {"ended_with_eos", ended},
          {"mask_cache_miss_share", tokens ? double(computed) / tokens : 0.0},
          {"mask_plus_accept", mask.ToJson()},
          {"first_mask", first_mask.ToJson()},
          {"mask_plus_accept_first_generation", mask_cold.ToJson()},
          {"mask_plus_accept_later_generations", mask_warm.ToJson()},
          {"sample_constrained", sample_constrained.ToJson()},
          {"sample_unconstrained", sample_plain.ToJson()}};
}

// The demo model with a dense KV cache prefilled to `context` tokens; each
// TimeSteps call decodes more tokens and returns their mean step time, so
// that decode steps can be timed between the mask runs (a shared machine's
// load then weighs on both alike).
class Decoder {
 public:
  absl::Status Init(int context, int capacity) {
    auto model = ckv::LoadModel(Src("models/kjv-llama.gguf"));
    if (!model.ok()) return model.status();
    model_ = *std::move(model);
    ckv::TransformerOptions opt;
    opt.threads = 1;
    tf_ = std::make_unique<ckv::Transformer>(model_->config, model_->weights,
                                             opt);
    cache_ = std::make_unique<ckv::DenseKvCache>(ckv::DenseCacheOptions(
        model_->config, ckv::kernels::DType::kF16, context + capacity + 1));
    std::mt19937 rng(5);
    std::vector<int32_t> prompt(context);
    for (auto& t : prompt) t = 3 + rng() % (model_->config.vocab_size - 3);
    const auto p0 = Clock::now();
    ckv::SequenceInput in =
        ckv::MakeInput(prompt, cache_.get(), ckv::LogitsMode::kLast, &logits_);
    if (auto s = tf_->Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
    prefill_seconds_ = Us(p0, Clock::now()) / 1e6;
    context_ = context;
    return absl::OkStatus();
  }

  double TimeSteps(int steps) {
    double total = 0;
    for (int i = 0; i < steps; ++i) {
      const int32_t next[1] = {ckv::ArgMax(logits_)};
      ckv::SequenceInput d =
          ckv::MakeInput(next, cache_.get(), ckv::LogitsMode::kLast, &logits_,
                         ckv::AppendKind::kGenerated);
      const auto t0 = Clock::now();
      if (!tf_->Forward(absl::MakeSpan(&d, 1)).ok()) std::abort();
      const double us = Us(t0, Clock::now());
      all_.v.push_back(us);
      total += us;
    }
    return steps > 0 ? total / steps : 0.0;
  }

  json Summary() const {
    json j = all_.ToJson();
    j["model"] = "models/kjv-llama.gguf";
    j["kv"] = "dense F16";
    j["context"] = context_;
    j["threads"] = 1;
    j["prefill_seconds"] = prefill_seconds_;
    j["note"] =
        "steps timed between the mask runs; each grammar's share uses the "
        "steps timed right after it";
    return j;
  }

 private:
  std::unique_ptr<ckv::Model> model_;
  std::unique_ptr<ckv::Transformer> tf_;
  std::unique_ptr<ckv::DenseKvCache> cache_;
  std::vector<float> logits_;
  Stats all_;
  int context_ = 0;
  double prefill_seconds_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const bool quick = absl::GetFlag(FLAGS_quick);
  use_cpu_time = absl::GetFlag(FLAGS_cpu_time);
  std::vector<std::string> names =
      absl::StrSplit(absl::GetFlag(FLAGS_vocabs), ',', absl::SkipEmpty());
  int generations = absl::GetFlag(FLAGS_generations);
  int tokens = absl::GetFlag(FLAGS_tokens);
  int context = absl::GetFlag(FLAGS_decode_context);
  int steps = absl::GetFlag(FLAGS_decode_steps);
  if (quick) {
    names = {"demo"};
    generations = 1;
    tokens = 40;
    context = 256;
    steps = 4;
  }
  const std::vector<std::pair<std::string, ConstraintSpec>> grammars = {
      {"json_object", {ConstraintSpec::kJsonObject, ""}},
      {"schema:product",
       {ConstraintSpec::kJsonSchema,
        ReadFile(Src("tests/grammar/schemas/00_product.json"))}},
      {"schema:openai_ui_recursive",
       {ConstraintSpec::kJsonSchema,
        ReadFile(Src("tests/grammar/schemas/21_openai_ui_recursive.json"))}},
      {"gbnf:utf8_words",
       {ConstraintSpec::kGbnf,
        "root ::= ( word \" \" )* word \".\"\nword ::= "
        "[a-z\\u00e0-\\u00ff\\u03b1-\\u03c9]+ | \"\\\"\" [^\"]{0,20} "
        "\"\\\"\""}},
  };
  json out;
  out["benchmark"] = "grammar_bench";
  out["timestamp"] = ckv::bench::UtcTimestamp();
  out["machine"] = {{"cpu_features", ckv::kernels::cpu::DescribeCpuFeatures()}};
  out["config"] = {{"generations", generations},
                   {"tokens", tokens},
                   {"quick", quick},
                   {"fold_repeats", absl::GetFlag(FLAGS_fold_repeats)},
                   {"clock", use_cpu_time ? "thread CPU time" : "wall"},
                   {"driver",
                    "random logits N(0,2), +4 on closing tokens "
                    "and EOS; temperature 1, top_k 40, top_p 0.95"}};
  Decoder decoder;
  const int runs = static_cast<int>(names.size() * grammars.size());
  if (auto s = decoder.Init(context, steps * (runs + 1)); !s.ok()) {
    std::cerr << "grammar_bench: decoder: " << s << "\n";
    return 1;
  }
  decoder.TimeSteps(2);  // warm-up
  for (const std::string& name : names) {
    const VocabSource src = SourceOf(name);
    auto file = ckv::gguf::GgufFile::Open(src.path);
    if (!file.ok()) {
      std::cerr << "grammar_bench: " << name << ": " << file.status() << "\n";
      return 1;
    }
    auto tok = ckv::Tokenizer::FromGguf(**file);
    if (!tok.ok()) {
      std::cerr << "grammar_bench: " << name << ": " << tok.status() << "\n";
      return 1;
    }
    const auto b0 = Clock::now();
    auto vocab = ckv::grammar::TokenIndex::For(**tok);
    json v = {
        {"name", name},
        {"source",
         src.path.substr(std::string(CLUSTERKV_SOURCE_DIR).size() + 1)},
        {"kind", "real tokenizer vocabulary (byte strings of its pieces)"},
        {"vocab_size", vocab->vocab_size()},
        {"trie_nodes", vocab->num_nodes()},
        {"index_build_ms", Us(b0, Clock::now()) / 1e3}};
    const std::string only = absl::GetFlag(FLAGS_grammars);
    for (const auto& [gname, spec] : grammars) {
      if (!only.empty() &&
          !absl::c_linear_search(absl::StrSplit(only, ','), gname)) {
        continue;
      }
      json r = RunGrammar(vocab, gname, spec, generations, tokens);
      const double step_us = decoder.TimeSteps(steps);
      r["decode_step_us_after"] = step_us;
      if (!r.contains("error") && step_us > 0) {
        r["mask_share_of_decode_step"] =
            r["mask_plus_accept"]["mean_us"].get<double>() / step_us;
      }
      std::fprintf(stderr,
                   "%-10s %-28s mask+accept mean %8.1f us p99 %8.1f "
                   "(miss %.2f, index walks %d)\n",
                   name.c_str(), gname.c_str(),
                   r.value("/mask_plus_accept/mean_us"_json_pointer, 0.0),
                   r.value("/mask_plus_accept/p99_us"_json_pointer, 0.0),
                   r.value("mask_cache_miss_share", 0.0),
                   r.value("mask_index_walks", 0));
      v["grammars"].push_back(r);
    }
    out["vocabularies"].push_back(v);
  }
  out["decode_step"] = decoder.Summary();
  std::fprintf(stderr, "decode step at %d dense tokens: mean %.1f us\n",
               context, out["decode_step"].value("mean_us", 0.0));
  std::ofstream(absl::GetFlag(FLAGS_out_json)) << out.dump(1) << "\n";
  return 0;
}
