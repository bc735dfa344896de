#include "bench/service_workload.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/loopback_server.h"

namespace ckv::bench {
namespace {

// Ids drawn from [0, vocab) that the tokenizer treats as ordinary text.
std::vector<int32_t> RandomIds(const Tokenizer& tok, int count,
                               std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> dist(0, tok.vocab_size() - 1);
  std::vector<int32_t> ids;
  ids.reserve(count);
  while (static_cast<int>(ids.size()) < count) {
    const int32_t id = dist(rng);
    if (tok.IsControl(id) || tok.IsEndOfGeneration(id)) continue;
    ids.push_back(id);
  }
  return ids;
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double TimevalSeconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec;
}

}  // namespace

Workload MakeWorkload(const ServiceBenchOptions& o, const Model& model,
                      int sessions, int decode_tokens) {
  Workload w;
  for (int i = 0; i < sessions; ++i) {
    // Session i gets the same ids whatever the session count.
    std::mt19937_64 rng(o.seed * 1000003u + static_cast<uint64_t>(i));
    w.prompts.push_back(RandomIds(*model.tokenizer, o.prompt_tokens, rng));
    w.questions.push_back(RandomIds(*model.tokenizer, o.question_tokens, rng));
  }
  w.sampling.temperature = 0.0f;
  w.sampling.seed = o.seed;
  w.sampling.max_tokens = decode_tokens;
  w.kv = BenchServerConfig(o, "").kv;
  return w;
}

server::ServerConfig BenchServerConfig(const ServiceBenchOptions& o,
                                       const std::string& model_path) {
  server::ServerConfig c =
      LoopbackServerConfig(model_path, o.threads, o.prefill_chunk);
  c.prefill_share = o.prefill_share;
  c.kv.policy = o.policy;
  c.kv.budget = o.budget;
  c.limits.max_sessions = std::max(c.limits.max_sessions, o.max_sessions());
  return c;
}

Usage ProcessUsage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  Usage u;
  u.cpu_seconds = TimevalSeconds(ru.ru_utime) + TimevalSeconds(ru.ru_stime);
  u.voluntary_switches = ru.ru_nvcsw;
  u.involuntary_switches = ru.ru_nivcsw;
  return u;
}

Usage operator-(const Usage& a, const Usage& b) {
  return Usage{a.cpu_seconds - b.cpu_seconds,
               a.voluntary_switches - b.voluntary_switches,
               a.involuntary_switches - b.involuntary_switches};
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double pos = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + frac * (values[hi] - values[lo]);
}

absl::StatusOr<RunSample> Summarize(const RawRun& run, int64_t prompt_tokens) {
  RunSample s;
  s.sessions = static_cast<int>(run.traces.size());
  s.prefill_tokens = prompt_tokens * s.sessions;
  s.prefill_seconds = Seconds(run.prefill_start, run.prefill_end);
  std::vector<double> ttft, itl;
  Clock::time_point end = run.decode_start;
  for (size_t i = 0; i < run.traces.size(); ++i) {
    const SessionTrace& t = run.traces[i];
    if (!t.status.ok()) {
      return absl::Status(t.status.code(), absl::StrCat("session ", i, ": ",
                                                        t.status.message()));
    }
    if (t.tokens.empty()) continue;
    ttft.push_back(Ms(t.tokens.front() - t.request));
    for (size_t k = 1; k < t.tokens.size(); ++k) {
      itl.push_back(Ms(t.tokens[k] - t.tokens[k - 1]));
    }
    end = std::max(end, t.tokens.back());
    s.generated_tokens += static_cast<int64_t>(t.tokens.size());
    if (t.finish == "eos") ++s.eos_sessions;
  }
  s.decode_seconds = Seconds(run.decode_start, end);
  s.tokens_per_second =
      s.decode_seconds > 0 ? s.generated_tokens / s.decode_seconds : 0.0;
  s.ttft_p50_ms = Percentile(ttft, 50);
  s.ttft_p99_ms = Percentile(ttft, 99);
  s.itl_p50_ms = Percentile(itl, 50);
  s.itl_p99_ms = Percentile(itl, 99);
  s.itl_p90_ms = Percentile(itl, 90);
  s.itl_max_ms = itl.empty() ? 0.0 : *std::max_element(itl.begin(), itl.end());
  double sum = 0.0;
  for (double x : itl) sum += x;
  s.itl_mean_ms = itl.empty() ? 0.0 : sum / static_cast<double>(itl.size());
  s.usage = run.decode_usage;
  if (!run.traces.empty()) s.first_session_ids = run.traces[0].ids;
  return s;
}

}  // namespace ckv::bench
