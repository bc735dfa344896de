// clusterkv-model: inspect, tokenize, evaluate and generate with GGUF models,
// and write random-weight models. Its interface is used by external checks:
// keep subcommands, flags and output formats stable.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flag_spelling.h"
#include "common/settings_schema.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "model/generation.h"
#include "model/kv/policies/registry.h"
#include "model/make_random.h"
#include "model/model.h"
#include "model/tools/cli_options.h"
#include "model/tools/fork_command.h"
#include "model/tools/recall_command.h"
#include "model/tools/render_template_command.h"
#include "nlohmann/json.hpp"

namespace ckv {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::vector<int32_t>> ReadTokens(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::istringstream in(*text);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a token id: '", word, "'"));
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

absl::Status Info(const std::string& path) {
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto config = ReadModelConfig(**file);
  if (!config.ok()) return config.status();
  std::cout << ModelInfoJson(*config, **file) << "\n";
  return absl::OkStatus();
}

absl::Status Tokenize(const std::string& path, const CliOptions& o) {
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return tokenizer.status();
  auto text = ReadFile(o.text_file);
  if (!text.ok()) return text.status();
  auto ids = (*tokenizer)->Encode(*text, o.bos, o.parse_special);
  if (!ids.ok()) return ids.status();
  std::cout << absl::StrJoin(*ids, " ") << "\n";
  return absl::OkStatus();
}

absl::Status Logits(const std::string& path, const CliOptions& o) {
  auto model = LoadModel(path);
  if (!model.ok()) return model.status();
  auto ids = ReadTokens(o.tokens_file);
  if (!ids.ok()) return ids.status();
  if (o.positions != "all" && o.positions != "last") {
    return absl::InvalidArgumentError("--positions must be all or last");
  }
  const ModelConfig& c = (*model)->config;
  auto tf = NewToolTransformer(c, (*model)->weights, o);
  if (!tf.ok()) return tf.status();
  ClusterWorker worker;
  auto cache =
      NewKvCache(c, o.kv, o.kv_type, &worker, (*tf)->backend().store_env());
  std::vector<float> logits;
  const bool all = o.positions == "all";
  SequenceInput in = MakeInput(
      *ids, cache.get(), all ? LogitsMode::kAll : LogitsMode::kLast, &logits);
  if (auto s = (*tf)->Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
  nlohmann::json j;
  j["positions"] = nlohmann::json::array();
  j["logits"] = nlohmann::json::array();
  const int64_t n = ids->size();
  for (int64_t r = 0; r < (all ? n : 1); ++r) {
    j["positions"].push_back(all ? r : n - 1);
    j["logits"].push_back(
        std::vector<float>(logits.begin() + r * c.vocab_size,
                           logits.begin() + (r + 1) * c.vocab_size));
  }
  std::cout << j.dump() << "\n";
  return absl::OkStatus();
}

// --prompt, or the text of --prompt-file.
absl::StatusOr<std::string> PromptText(const CliOptions& o) {
  if (o.prompt_file.empty()) return o.prompt;
  return ReadFile(o.prompt_file);
}

absl::Status RunGenerate(const std::string& path, const CliOptions& o) {
  auto text = PromptText(o);
  if (!text.ok()) return text.status();
  const std::string& prompt = *text;
  auto model = LoadModel(path);
  if (!model.ok()) return model.status();
  const Model& m = **model;
  auto ids = m.tokenizer->Encode(prompt, /*add_special=*/true,
                                 /*parse_special=*/true);
  if (!ids.ok()) return ids.status();
  auto tf = NewToolTransformer(m.config, m.weights, o);
  if (!tf.ok()) return tf.status();
  ClusterWorker worker;
  auto cache = NewKvCache(m.config, o.kv, o.kv_type, &worker,
                          (*tf)->backend().store_env());
  auto result = Generate(**tf, *m.tokenizer, *cache, *ids, o.sampling,
                         [](absl::string_view piece) {
                           std::fwrite(piece.data(), 1, piece.size(), stdout);
                           std::fflush(stdout);
                           return true;
                         });
  if (!result.ok()) return result.status();
  std::printf("\n");
  const double n_gen = result->tokens.size();
  std::fprintf(stderr,
               "prefill: %lld tokens, %.1f tok/s | decode: %.0f tokens, "
               "%.1f tok/s | finish: %s | policy %s | threads %d, kernels %s\n",
               static_cast<long long>(result->prompt_tokens),
               result->prompt_tokens / std::max(1e-9, result->prefill_seconds),
               n_gen, (n_gen - 1) / std::max(1e-9, result->decode_seconds),
               FinishReasonName(result->finish), KvPolicyName(o.kv.policy),
               o.transformer.threads, kernels::cpu::KernelSetName());
  return absl::OkStatus();
}

absl::Status Recall(const std::string& path, const CliOptions& o) {
  if (o.tokens_file.empty()) {
    return absl::InvalidArgumentError("recall: --tokens-file is required");
  }
  auto ids = ReadTokens(o.tokens_file);
  if (!ids.ok()) return ids.status();
  return RunRecall(path, *ids, o);
}

absl::Status MakeRandom(const CliOptions& o) {
  if (o.out.empty()) return absl::InvalidArgumentError("--out is required");
  return WriteRandomModel(o.random, o.out);
}

constexpr char kUsageCommands[] =
    "usage: clusterkv-model COMMAND [MODEL] [flags]\n"
    "  info MODEL\n"
    "  tokenize MODEL --text-file F [--bos]\n"
    "  logits MODEL --tokens-file F [--positions all|last]\n"
    "  generate MODEL (--prompt TEXT | --prompt-file F) [--max-tokens N]\n"
    "      [--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N]\n"
    "      [--backend auto|cpu|cuda|fake]\n"
    "  generate-forks MODEL (--prompt TEXT | --prompt-file F)\n"
    "      --forks POLICY:BUDGET,... [--max-tokens N]: one greedy answer per\n"
    "      fork of one prefill, JSON lines\n"
    "  recall MODEL --tokens-file F --prompt-tokens P [--policy ...]\n"
    "      [--budget B] [--probe-span B:E] [KV store flags]: sparse vs\n"
    "      dense quality, JSON\n"
    "  make-random --out F.gguf --layers N --dim D --heads H --kv-heads K\n"
    "      --ffn F [--vocab byte|byte-chatml|VOCAB.gguf]\n"
    "      [--chat-template chatml|F.jinja] [--dtype "
    "f32|f16|bf16|q8_0|q4_k|...]\n"
    "      [--seed S]\n"
    "  render-template (--template F.jinja | --model M.gguf)\n"
    "      --messages F.json [--add-generation-prompt] [--bos-token S]\n"
    "      [--eos-token S] [--date YYYY-MM-DD]: the chat template's text\n"
    "Every command: --kernels auto|scalar|avx2|avx512|avx512_bf16 (scalar: "
    "reference "
    "path)\n";
// The engine-only KV flags (the request ones come from the schema).
constexpr char kUsageEngineKvFlags[] =
    "  --kmeans-max-iters N --cluster-seed S --async-clustering=true|false\n";

// The policy names come from the registry (oracle: evaluation only).
const std::string& Usage() {
  static const std::string* usage = new std::string(absl::StrCat(
      kUsageCommands, "KV store flags (generate, logits, recall):\n  --policy ",
      JoinPolicyNames("|", /*with_evaluation_only=*/true), "\n  ",
      settings::KvRequestFlagsUsage(), "\n  --cluster-metric ",
      settings::JoinNames(settings::kClusterMetricNames, "|"), " --cache-mode ",
      settings::JoinNames(settings::kCacheModeNames, "|"), "\n",
      kUsageEngineKvFlags));
  return *usage;
}

absl::Status Dispatch(const std::vector<std::string>& args,
                      const CliOptions& o) {
  const std::string cmd = args.size() > 1 ? args[1] : "";
  if (cmd == "make-random" && args.size() == 2) return MakeRandom(o);
  if (cmd == "render-template" && args.size() == 2) {
    // Any failure, bad flags included, exits 1 (the documented contract).
    const absl::Status s = RunRenderTemplate();
    return s.ok() ? s : absl::Status(absl::StatusCode::kUnknown, s.message());
  }
  if (args.size() != 3) return absl::InvalidArgumentError(Usage());
  const std::string& model = args[2];
  if (cmd == "info") return Info(model);
  if (cmd == "tokenize") return Tokenize(model, o);
  if (cmd == "logits") return Logits(model, o);
  if (cmd == "generate") return RunGenerate(model, o);
  if (cmd == "generate-forks") {
    auto text = PromptText(o);
    if (!text.ok()) return text.status();
    return RunGenerateForks(model, *text, o);
  }
  if (cmd == "recall") return Recall(model, o);
  return absl::InvalidArgumentError(Usage());
}

}  // namespace
}  // namespace ckv

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(ckv::Usage());
  ckv::DashesToUnderscores(argc, argv);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  auto options = ckv::CliOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "error: %s\n", options.status().ToString().c_str());
    return 2;
  }
  if (!ckv::kernels::cpu::SelectKernels(options->kernels.c_str())) {
    std::fprintf(stderr, "error: this CPU or build cannot run --kernels %s\n",
                 options->kernels.c_str());
    return 2;
  }
  const absl::Status s = ckv::Dispatch(
      std::vector<std::string>(positional.begin(), positional.end()), *options);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
