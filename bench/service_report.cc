#include "bench/service_report.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_join.h"
#include "bench/bench_common.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"

namespace ckv::bench {
namespace {

using Json = nlohmann::ordered_json;

double Ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

std::vector<const RunSample*> Select(const ServiceReport& r,
                                     const std::string& mode, int sessions) {
  std::vector<const RunSample*> out;
  for (const RunSample& s : r.samples) {
    if (s.mode == mode && s.sessions == sessions) out.push_back(&s);
  }
  return out;
}

// Median over `runs` of field(run).
template <typename F>
double MedianOf(const std::vector<const RunSample*>& runs, F field) {
  std::vector<double> v;
  for (const RunSample* s : runs) v.push_back(field(*s));
  return Median(std::move(v));
}

ModeMedians Medians(const std::vector<const RunSample*>& runs,
                    int engine_threads) {
  ModeMedians m;
  m.rounds = static_cast<int>(runs.size());
  m.tokens_per_second =
      MedianOf(runs, [](const RunSample& s) { return s.tokens_per_second; });
  m.prefill_tokens_per_second = MedianOf(runs, [](const RunSample& s) {
    return Ratio(static_cast<double>(s.prefill_tokens), s.prefill_seconds);
  });
  m.ttft_p50_ms =
      MedianOf(runs, [](const RunSample& s) { return s.ttft_p50_ms; });
  m.ttft_p99_ms =
      MedianOf(runs, [](const RunSample& s) { return s.ttft_p99_ms; });
  m.itl_p50_ms =
      MedianOf(runs, [](const RunSample& s) { return s.itl_p50_ms; });
  m.itl_p99_ms =
      MedianOf(runs, [](const RunSample& s) { return s.itl_p99_ms; });
  m.cpu_ms_per_token = MedianOf(runs, [](const RunSample& s) {
    return 1e3 * Ratio(s.usage.cpu_seconds, s.generated_tokens);
  });
  m.switches_per_token = MedianOf(runs, [](const RunSample& s) {
    return Ratio(s.usage.voluntary_switches + s.usage.involuntary_switches,
                 s.generated_tokens);
  });
  m.cpu_share = MedianOf(runs, [engine_threads](const RunSample& s) {
    return Ratio(s.usage.cpu_seconds, s.decode_seconds * engine_threads);
  });
  for (const RunSample* s : runs) {
    m.eos_sessions = std::max(m.eos_sessions, s->eos_sessions);
  }
  return m;
}

Comparison CompareAt(const ServiceReport& r, int sessions) {
  const auto grpc = Select(r, "grpc", sessions);
  const auto inproc = Select(r, "inprocess", sessions);
  Comparison c;
  c.sessions = sessions;
  c.grpc = Medians(grpc, r.engine_threads);
  c.inprocess = Medians(inproc, r.engine_threads);
  c.overhead =
      1.0 - Ratio(c.grpc.tokens_per_second, c.inprocess.tokens_per_second);
  for (size_t i = 0; i < grpc.size() && i < inproc.size(); ++i) {
    c.round_overheads.push_back(
        1.0 - Ratio(grpc[i]->tokens_per_second, inproc[i]->tokens_per_second));
  }
  c.outputs_match = !grpc.empty() && !inproc.empty() &&
                    grpc[0]->first_session_ids == inproc[0]->first_session_ids;
  return c;
}

// ------------------------------------------------------------------- table

void PrintHeader(const ServiceReport& r, std::FILE* out) {
  const ServiceBenchOptions& o = *r.options;
  const ModelConfig& c = r.model->config;
  std::fprintf(out,
               "model: %s (%s)\n  %s, %d layers, d_model %d, heads %d/%d, "
               "ffn %d, vocab %d\n",
               r.model_path.c_str(), r.random_model ? "random" : "file",
               c.arch.c_str(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads,
               c.ffn_dim, c.vocab_size);
  std::fprintf(out, "cpu: %s | kernels: %s | hardware threads: %u\n",
               kernels::cpu::DescribeCpuFeatures().c_str(),
               kernels::cpu::KernelSetName(),
               std::thread::hardware_concurrency());
  std::fprintf(out,
               "engine threads %d | policy %s budget %d | prompt %d, question "
               "%d, decode %d tokens (greedy) | %d round(s), medians\n\n",
               r.engine_threads, KvPolicyName(o.policy), o.budget,
               o.prompt_tokens, o.question_tokens, o.decode_tokens, o.rounds);
}

void PrintMode(const char* mode, const ModeMedians& m, std::FILE* out) {
  std::fprintf(out,
               "  %-9s %9.1f %8.1f / %-8.1f %7.1f / %-7.1f %9.1f %8.2f %7.2f "
               "%6.2f %4d\n",
               mode, m.tokens_per_second, m.ttft_p50_ms, m.ttft_p99_ms,
               m.itl_p50_ms, m.itl_p99_ms, m.prefill_tokens_per_second,
               m.cpu_ms_per_token, m.switches_per_token, m.cpu_share,
               m.eos_sessions);
}

void PrintComparison(const Comparison& c, std::FILE* out) {
  std::fprintf(out, "sessions %d:\n", c.sessions);
  PrintMode("grpc", c.grpc, out);
  PrintMode("inprocess", c.inprocess, out);
  std::vector<std::string> rounds;
  for (double x : c.round_overheads) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%.1f%%", 100 * x);
    rounds.push_back(buf);
  }
  std::fprintf(out,
               "  service overhead %.1f%% (per round: %s); session 0 tokens "
               "%s\n",
               100 * c.overhead, absl::StrJoin(rounds, ", ").c_str(),
               c.outputs_match ? "identical" : "DIFFER");
}

}  // namespace

std::vector<Comparison> Compare(const ServiceReport& report) {
  std::vector<Comparison> out;
  for (int n : report.options->sessions) out.push_back(CompareAt(report, n));
  return out;
}

void PrintReport(const ServiceReport& report, std::FILE* out) {
  PrintHeader(report, out);
  std::fprintf(out, "  %-9s %9s %-19s %-17s %9s %8s %7s %6s %4s\n", "mode",
               "tok/s", "TTFT ms p50/p99", "ITL ms p50/p99", "pf tok/s",
               "cpu ms/t", "csw/t", "cpu sh", "eos");
  bool low_share = false;
  for (const Comparison& c : Compare(report)) {
    PrintComparison(c, out);
    low_share = low_share || c.inprocess.cpu_share < kLowCpuShare;
  }
  std::fprintf(out,
               "\ntok/s: generated tokens / (Decode release -> last token); "
               "overhead = 1 - grpc / inprocess tok/s (target <= %.0f%% at "
               "%d sessions)\ncpu ms/t, csw/t: process CPU time and context "
               "switches per generated token; cpu sh: process CPU / (wall x "
               "%d engine threads); all over the decode phase\n",
               100 * kOverheadTarget, report.options->max_sessions(),
               report.engine_threads);
  if (low_share) {
    std::fprintf(out,
                 "NOTE: in-process cpu share below %.1f: other load took the "
                 "cores (or the engine idled between short steps); the "
                 "per-round spread shows how far the overhead can be "
                 "trusted\n",
                 kLowCpuShare);
  }
}

// -------------------------------------------------------------------- JSON

namespace {

Json SampleJson(const RunSample& s) {
  return Json{{"mode", s.mode},
              {"sessions", s.sessions},
              {"round", s.round},
              {"prefill_tokens", s.prefill_tokens},
              {"prefill_seconds", s.prefill_seconds},
              {"prefill_tok_per_s",
               Ratio(static_cast<double>(s.prefill_tokens), s.prefill_seconds)},
              {"generated_tokens", s.generated_tokens},
              {"decode_seconds", s.decode_seconds},
              {"tok_per_s", s.tokens_per_second},
              {"ttft_ms", Json{{"p50", s.ttft_p50_ms}, {"p99", s.ttft_p99_ms}}},
              {"itl_ms", Json{{"mean", s.itl_mean_ms},
                              {"p50", s.itl_p50_ms},
                              {"p90", s.itl_p90_ms},
                              {"p99", s.itl_p99_ms},
                              {"max", s.itl_max_ms}}},
              {"eos_sessions", s.eos_sessions},
              {"cpu_seconds", s.usage.cpu_seconds},
              {"voluntary_switches", s.usage.voluntary_switches},
              {"involuntary_switches", s.usage.involuntary_switches}};
}

Json MediansJson(const ModeMedians& m) {
  return Json{{"rounds", m.rounds},
              {"tok_per_s", m.tokens_per_second},
              {"prefill_tok_per_s", m.prefill_tokens_per_second},
              {"ttft_ms", Json{{"p50", m.ttft_p50_ms}, {"p99", m.ttft_p99_ms}}},
              {"itl_ms", Json{{"p50", m.itl_p50_ms}, {"p99", m.itl_p99_ms}}},
              {"cpu_ms_per_token", m.cpu_ms_per_token},
              {"switches_per_token", m.switches_per_token},
              {"cpu_share", m.cpu_share},
              {"eos_sessions_max", m.eos_sessions}};
}

Json ComparisonJson(const Comparison& c) {
  return Json{{"sessions", c.sessions},
              {"grpc", MediansJson(c.grpc)},
              {"inprocess", MediansJson(c.inprocess)},
              {"overhead", c.overhead},
              {"round_overheads", c.round_overheads},
              {"outputs_match", c.outputs_match}};
}

Json HeaderJson(const ServiceReport& r) {
  const ServiceBenchOptions& o = *r.options;
  const ModelConfig& c = r.model->config;
  return Json{
      {"system", Json{{"cpu_features", kernels::cpu::DescribeCpuFeatures()},
                      {"kernel_set", kernels::cpu::KernelSetName()},
                      {"hardware_threads", std::thread::hardware_concurrency()},
                      {"engine_threads", r.engine_threads}}},
      {"model", Json{{"path", r.model_path},
                     {"random", r.random_model},
                     {"arch", c.arch},
                     {"n_layers", c.n_layers},
                     {"d_model", c.d_model},
                     {"n_heads", c.n_heads},
                     {"n_kv_heads", c.n_kv_heads},
                     {"ffn_dim", c.ffn_dim},
                     {"vocab_size", c.vocab_size}}},
      {"config", Json{{"sessions", o.sessions},
                      {"prompt_tokens", o.prompt_tokens},
                      {"question_tokens", o.question_tokens},
                      {"decode_tokens", o.decode_tokens},
                      {"rounds", o.rounds},
                      {"warmup", o.warmup},
                      {"prefill_chunk", o.prefill_chunk},
                      {"prefill_share", o.prefill_share},
                      {"policy", KvPolicyName(o.policy)},
                      {"budget", o.budget},
                      {"server_metrics", o.metrics},
                      {"seed", o.seed},
                      {"quick", o.quick},
                      {"transport",
                       "gRPC over 127.0.0.1, one channel (connection) and "
                       "one blocking client thread per session"}}}};
}

}  // namespace

Json ReportJson(const ServiceReport& r) {
  Json runs = Json::array();
  for (const RunSample& s : r.samples) runs.push_back(SampleJson(s));
  Json summary = Json::array();
  const std::vector<Comparison> cmp = Compare(r);
  for (const Comparison& c : cmp) summary.push_back(ComparisonJson(c));
  Json out{{"benchmark", "service_bench"}, {"timestamp", UtcTimestamp()}};
  out.update(HeaderJson(r));
  out["runs"] = runs;
  out["summary"] = summary;
  const Comparison& last = *std::max_element(
      cmp.begin(), cmp.end(), [](const Comparison& a, const Comparison& b) {
        return a.sessions < b.sessions;
      });
  out["target"] = Json{{"sessions", last.sessions},
                       {"max_overhead", kOverheadTarget},
                       {"overhead", last.overhead},
                       {"met", last.overhead <= kOverheadTarget}};
  return out;
}

}  // namespace ckv::bench
