#include "model/generation.h"

#include <chrono>

namespace ckv {
namespace {

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

StopMatcher::StopMatcher(std::vector<std::string> stops)
    : stops_(std::move(stops)) {}

std::string StopMatcher::Push(absl::string_view text, bool* stopped) {
  *stopped = false;
  pending_.append(text.data(), text.size());
  size_t first_stop = std::string::npos;
  for (const auto& s : stops_) {
    first_stop = std::min(first_stop, pending_.find(s));
  }
  if (first_stop != std::string::npos) {
    *stopped = true;
    std::string out = pending_.substr(0, first_stop);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

absl::StatusOr<GenerationResult> Generate(Transformer& model,
                                          const Tokenizer& tokenizer,
                                          KvCache& cache,
                                          absl::Span<const int32_t> prompt,
                                          const SamplingParams& params,
                                          const TextSink& sink) {
  if (auto s = ValidateSamplingParams(params, tokenizer.vocab_size());
      !s.ok()) {
    return s;
  }
  GenerationResult r;
  r.prompt_tokens = prompt.size();
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  SequenceInput prefill{prompt, &cache, LogitsMode::kLast, &logits};
  if (auto s = model.Forward(absl::MakeSpan(&prefill, 1)); !s.ok()) return s;
  const auto t1 = std::chrono::steady_clock::now();
  r.prefill_seconds = Seconds(t0, t1);
  Sampler sampler(params);
  for (int32_t t : prompt) sampler.Accept(t);
  StopMatcher stops(params.stop);
  StreamingDetokenizer detok(tokenizer, /*render_special=*/false);
  auto t_first = t1;
  for (int i = 0; i < params.max_tokens; ++i) {
    const int32_t token = sampler.Sample(logits);
    sampler.Accept(token);
    r.tokens.push_back(token);
    if (i == 0) {
      t_first = std::chrono::steady_clock::now();
      r.time_to_first_token_seconds = Seconds(t0, t_first);
    }
    if (!params.ignore_eos && tokenizer.IsEndOfGeneration(token)) {
      r.finish = FinishReason::kEos;
      break;
    }
    bool stopped = false;
    const std::string text = stops.Push(detok.Push(token), &stopped);
    const bool cancelled = !text.empty() && !sink(text);
    // Every generated token but an end-of-generation one is appended, the
    // last one too, so that the cache continues after it.
    const int32_t next[1] = {token};
    SequenceInput in = MakeInput(next, &cache, LogitsMode::kLast, &logits,
                                 AppendKind::kGenerated);
    if (auto s = model.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
    if (cancelled) {
      r.finish = FinishReason::kCancelled;
      break;
    }
    if (stopped) {
      r.finish = FinishReason::kStop;
      break;
    }
  }
  if (r.finish == FinishReason::kLength || r.finish == FinishReason::kEos) {
    bool stopped = false;
    std::string rest = stops.Push(detok.Flush(), &stopped);
    if (!stopped) rest += stops.Flush();
    if (!rest.empty()) sink(rest);
  }
  r.decode_seconds = Seconds(t_first, std::chrono::steady_clock::now());
  return r;
}

}  // namespace ckv
