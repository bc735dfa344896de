#include "bench/engine_report.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_join.h"
#include "bench/bench_common.h"
#include "bench/step_stats.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"

namespace ckv::bench {
namespace {

using Json = nlohmann::ordered_json;

int64_t KvBytesPerToken(const ModelConfig& c, kernels::DType kv_type) {
  const int elem = kv_type == kernels::DType::kF32 ? 4 : 2;
  return int64_t{c.n_layers} * c.kv_dim() * 2 * elem;  // K and V
}

const char* KvTypeName(kernels::DType t) {
  switch (t) {
    case kernels::DType::kF32:
      return "f32";
    case kernels::DType::kBF16:
      return "bf16";
    default:
      return "f16";
  }
}

kernels::DType WeightType(const Model& m) {
  return m.weights.layers.empty() ? m.weights.output.type
                                  : m.weights.layers[0].wq.type;
}

double Ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

// Speedup of `run` over `base` in decode (mean step time) at depth i.
double DecodeSpeedup(const ThreadRun& base, const ThreadRun& run, size_t i) {
  return Ratio(base.depths[i].decode.MeanSeconds(),
               run.depths[i].decode.MeanSeconds());
}

// 0 when either side has no prefill (e.g. the empty segment at depth 0).
double PrefillSpeedup(const PrefillResult& base, const PrefillResult& run) {
  return Ratio(run.TokensPerSecond(), base.TokensPerSecond());
}

// A speedup for the JSON: null when it could not be measured.
Json SpeedupValue(double x) { return x > 0 ? Json(x) : Json(nullptr); }

// "x1.23", or "-" when it could not be measured.
std::string SpeedupText(double x) {
  if (x <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "x%.2f", x);
  return buf;
}

// ------------------------------------------------------------------- table

void PrintHeader(const BenchReport& r, std::FILE* out) {
  const EngineBenchOptions& o = *r.options;
  const ModelConfig& c = r.model->config;
  std::fprintf(out,
               "model: %s (%s)\n  %s, %d layers, d_model %d, heads %d/%d "
               "(head_dim %d), ffn %d, vocab %d, weights %s, matrices "
               "%.1f MB/token\n",
               r.model_path.c_str(), r.random_model ? "random" : "file",
               c.arch.c_str(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads,
               c.head_dim, c.ffn_dim, c.vocab_size,
               kernels::DTypeName(WeightType(*r.model)),
               r.model->weights.MatrixBytes() / 1e6);
  std::fprintf(out,
               "cpu: %s | kernels: %s (decode matmul: %s) | hardware "
               "threads: %u\n",
               kernels::cpu::DescribeCpuFeatures().c_str(),
               kernels::cpu::KernelSetName(),
               kernels::cpu::QuantDotPath(WeightType(*r.model)),
               std::thread::hardware_concurrency());
  std::fprintf(out,
               "threads: %s | kv: %s | prefill chunk %d | decode tokens %d | "
               "pool schedule %s\n",
               absl::StrJoin(o.threads, ",").c_str(), KvTypeName(o.kv_type),
               o.prefill_chunk, o.decode_tokens, o.pool_schedule.c_str());
  std::fprintf(out,
               "memory read bandwidth (1 thread, %lld MiB, best of %d): "
               "%.2f GB/s\n",
               static_cast<long long>(r.bandwidth.bytes >> 20),
               r.bandwidth.repeats, r.bandwidth.bytes_per_second / 1e9);
  if (o.background.fraction > 0) {
    std::fprintf(out,
                 "background load: one process busy %.2f of a core (period "
                 "%.1f ms); it got %.2f of a core\n",
                 o.background.fraction, o.background.period_ms,
                 r.background_cpu_share);
  } else {
    std::fprintf(out, "background load: none\n");
  }
  std::fprintf(out, "\n");
}

void PrintDepthRow(const BenchReport& r, int threads, const DepthResult& d,
                   std::FILE* out) {
  char segment[48] = "-";
  char prefill[24] = "-";
  if (d.prefill.tokens > 0) {
    std::snprintf(segment, sizeof(segment), "%lld..%lld",
                  static_cast<long long>(d.prefill.from),
                  static_cast<long long>(d.prefill.from + d.prefill.tokens));
    std::snprintf(prefill, sizeof(prefill), "%.1f",
                  d.prefill.TokensPerSecond());
  }
  const StepStats st = d.decode.Stats();
  const double floor = r.DecodeFloorSeconds(d.decode);
  const double steps = std::max<size_t>(1, d.decode.step_seconds.size());
  constexpr char kRow[] =
      "%4d %7lld  %-15s %13s  %8.2f %7.2f %7.2f %7.2f %8.2f %10.1f %8.3f "
      "%8.3f %9.2f %6.2f\n";
  std::fprintf(out, kRow, threads, static_cast<long long>(d.decode.depth),
               segment, prefill, 1e3 * st.mean, 1e3 * st.median, 1e3 * st.p90,
               1e3 * st.p99, 1e3 * st.max, st.Rate(),
               1e3 * d.decode.run_delay_seconds / steps,
               d.decode.pool.caller_wait_ns / 1e6 / steps, 1e3 * floor,
               Ratio(floor, st.mean));
}

void PrintRuns(const BenchReport& r, std::FILE* out) {
  std::fprintf(out,
               "%4s %7s  %-15s %13s  %8s %7s %7s %7s %8s %10s %8s %8s %9s "
               "%6s\n",
               "thr", "depth", "prefill tokens", "prefill tok/s", "mean ms",
               "median", "p90", "p99", "max", "dec tok/s", "rdelay", "barrier",
               "floor ms", "eff");
  for (const ThreadRun& run : r.runs) {
    for (const DepthResult& d : run.depths) {
      PrintDepthRow(r, run.threads, d, out);
    }
  }
  std::fprintf(out, "\nfixed-size prefill:\n%4s %7s %7s %13s\n", "thr", "depth",
               "tokens", "prefill tok/s");
  for (const ThreadRun& run : r.runs) {
    for (const PrefillResult& p : run.pp) {
      std::fprintf(out, "%4d %7lld %7lld %13.1f\n", run.threads,
                   static_cast<long long>(p.from),
                   static_cast<long long>(p.tokens), p.TokensPerSecond());
    }
  }
}

// Runs whose timed steps got less than this share of their cores are flagged.
constexpr double kLowCpuShare = 0.9;

void PrintCpuShares(const BenchReport& r, std::FILE* out) {
  std::fprintf(out,
               "\ncpu share of timed steps (process CPU / wall / threads):");
  bool low = false;
  for (const ThreadRun& run : r.runs) {
    std::fprintf(out, " %d thr %.2f", run.threads, run.CpuShare());
    low = low || run.CpuShare() < kLowCpuShare;
  }
  std::fprintf(out, "\n%s",
               low ? "NOTE: below 0.9: other load on the cores (numbers are "
                     "pessimistic) or pool threads left idle\n"
                   : "");
}

void PrintSpeedups(const BenchReport& r, std::FILE* out) {
  const ThreadRun& base = r.BaseRun();
  for (const ThreadRun& run : r.runs) {
    if (&run == &base) continue;
    std::fprintf(out, "\nspeedup %d vs %d thread(s):", run.threads,
                 base.threads);
    for (size_t i = 0; i < run.pp.size() && i < base.pp.size(); ++i) {
      std::fprintf(out, " pp%lld@%lld %s",
                   static_cast<long long>(run.pp[i].tokens),
                   static_cast<long long>(run.pp[i].from),
                   SpeedupText(PrefillSpeedup(base.pp[i], run.pp[i])).c_str());
    }
    std::fprintf(out, "\n");
    for (size_t i = 0; i < run.depths.size() && i < base.depths.size(); ++i) {
      const DepthResult& d = run.depths[i];
      std::fprintf(
          out, "  depth %7lld: prefill %-6s decode %s\n",
          static_cast<long long>(d.depth),
          SpeedupText(PrefillSpeedup(base.depths[i].prefill, d.prefill))
              .c_str(),
          SpeedupText(DecodeSpeedup(base, run, i)).c_str());
    }
  }
}

// -------------------------------------------------------------------- JSON

Json ModelJson(const BenchReport& r) {
  const ModelConfig& c = r.model->config;
  return Json{{"path", r.model_path},
              {"random", r.random_model},
              {"arch", c.arch},
              {"n_layers", c.n_layers},
              {"d_model", c.d_model},
              {"n_heads", c.n_heads},
              {"n_kv_heads", c.n_kv_heads},
              {"head_dim", c.head_dim},
              {"ffn_dim", c.ffn_dim},
              {"vocab_size", c.vocab_size},
              {"weight_type", kernels::DTypeName(WeightType(*r.model))},
              {"matrix_bytes", r.model->weights.MatrixBytes()}};
}

Json ConfigJson(const BenchReport& r) {
  const EngineBenchOptions& o = *r.options;
  return Json{
      {"threads", o.threads},
      {"depths", o.depths},
      {"decode_tokens", o.decode_tokens},
      {"prefill_chunk", o.prefill_chunk},
      {"pp_tokens", o.pp_tokens},
      {"kv_type", KvTypeName(o.kv_type)},
      {"kv_bytes_per_token", KvBytesPerToken(r.model->config, o.kv_type)},
      {"quick", o.quick},
      {"seed", o.seed},
      {"pool_schedule", o.pool_schedule},
      {"background_load",
       Json{{"fraction", o.background.fraction},
            {"period_ms", o.background.period_ms},
            {"measured_core_share", r.background_cpu_share}}}};
}

Json SystemJson(const BenchReport& r) {
  const BandwidthResult& b = r.bandwidth;
  return Json{
      {"cpu_features", kernels::cpu::DescribeCpuFeatures()},
      {"kernel_set", kernels::cpu::KernelSetName()},
      {"decode_matmul", kernels::cpu::QuantDotPath(WeightType(*r.model))},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"bandwidth", Json{{"threads", 1},
                         {"bytes", b.bytes},
                         {"repeats", b.repeats},
                         {"best_seconds", b.best_seconds},
                         {"gb_per_s", b.bytes_per_second / 1e9}}}};
}

Json PrefillJson(const PrefillResult& p) {
  return Json{{"from", p.from},
              {"tokens", p.tokens},
              {"seconds", p.seconds},
              {"tok_per_s", p.TokensPerSecond()}};
}

Json DecodeJson(const BenchReport& r, const DecodeResult& d) {
  const StepStats st = d.Stats();
  const double mean = st.mean;
  const double floor = r.DecodeFloorSeconds(d);
  const double steps = std::max<size_t>(1, d.step_seconds.size());
  return Json{
      {"depth", d.depth},
      {"tokens", d.step_seconds.size()},
      {"mean_ms", 1e3 * mean},
      {"median_ms", 1e3 * st.median},
      {"p90_ms", 1e3 * st.p90},
      {"p99_ms", 1e3 * st.p99},
      {"max_ms", 1e3 * st.max},
      {"tok_per_s", st.Rate()},
      {"tok_per_s_median", Ratio(1.0, st.median)},
      {"run_delay_ms_per_step", 1e3 * d.run_delay_seconds / steps},
      {"pool",
       Json{
           {"jobs_per_step", d.pool.jobs / steps},
           {"caller_wait_ms_per_step", d.pool.caller_wait_ns / 1e6 / steps},
           {"max_wait_ms", d.pool.max_wait_ns / 1e6},
           {"caller_sleeps_per_step", d.pool.caller_sleeps / steps},
           {"caller_chunk_share", Ratio(d.pool.caller_chunks, d.pool.chunks)}}},
      {"bytes_per_token", r.DecodeBytes(d.depth)},
      {"achieved_gb_per_s", Ratio(r.DecodeBytes(d.depth), mean) / 1e9},
      {"probe_gb_per_s", d.probe_bytes_per_second / 1e9},
      {"floor_ms", 1e3 * floor},
      {"efficiency", Ratio(floor, mean)},
      {"step_ms", [&d] {
         std::vector<double> ms;
         for (double s : d.step_seconds) ms.push_back(1e3 * s);
         return ms;
       }()}};
}

Json RunJson(const BenchReport& r, const ThreadRun& run) {
  Json pp = Json::array();
  for (const PrefillResult& p : run.pp) pp.push_back(PrefillJson(p));
  Json depths = Json::array();
  for (const DepthResult& d : run.depths) {
    depths.push_back(Json{{"depth", d.depth},
                          {"prefill", PrefillJson(d.prefill)},
                          {"decode", DecodeJson(r, d.decode)}});
  }
  return Json{{"threads", run.threads},
              {"cpu_share", run.CpuShare()},
              {"pp", pp},
              {"depths", depths}};
}

Json SpeedupsJson(const BenchReport& r) {
  const ThreadRun& base = r.BaseRun();
  Json out = Json::array();
  for (const ThreadRun& run : r.runs) {
    if (&run == &base) continue;
    Json pp = Json::array();
    for (size_t i = 0; i < run.pp.size() && i < base.pp.size(); ++i) {
      pp.push_back(Json{
          {"from", run.pp[i].from},
          {"prefill", SpeedupValue(PrefillSpeedup(base.pp[i], run.pp[i]))}});
    }
    Json depths = Json::array();
    for (size_t i = 0; i < run.depths.size() && i < base.depths.size(); ++i) {
      depths.push_back(
          Json{{"depth", run.depths[i].depth},
               {"prefill", SpeedupValue(PrefillSpeedup(base.depths[i].prefill,
                                                       run.depths[i].prefill))},
               {"decode", SpeedupValue(DecodeSpeedup(base, run, i))}});
    }
    out.push_back(Json{{"threads", run.threads},
                       {"base_threads", base.threads},
                       {"pp", pp},
                       {"depths", depths}});
  }
  return out;
}

}  // namespace

int64_t BenchReport::DecodeBytes(int64_t depth) const {
  return model->weights.MatrixBytes() +
         depth * KvBytesPerToken(model->config, options->kv_type);
}

double BenchReport::DecodeFloorSeconds(const DecodeResult& d) const {
  return Ratio(static_cast<double>(DecodeBytes(d.depth)),
               d.probe_bytes_per_second);
}

const ThreadRun& BenchReport::BaseRun() const {
  const ThreadRun* base = &runs.front();
  for (const ThreadRun& run : runs) {
    if (run.threads == 1) return run;
    if (run.threads < base->threads) base = &run;
  }
  return *base;
}

void PrintReport(const BenchReport& report, std::FILE* out) {
  PrintHeader(report, out);
  PrintRuns(report, out);
  if (report.runs.size() > 1) PrintSpeedups(report, out);
  PrintCpuShares(report, out);
  std::fprintf(
      out,
      "\ndecode: step times in ms (mean, median, p90, p99, max); dec tok/s "
      "= 1 / mean step (as llama-bench); rdelay = ms per step the "
      "process's threads waited runnable for a CPU (schedstat); barrier = ms "
      "per step the engine thread waited for chunks held by the "
      "pool's other threads\n"
      "floor = (weight matrices + KV at depth) / 1-thread read "
      "bandwidth probed just before that row's steps; eff = floor / "
      "mean decode step\n");
}

Json ReportJson(const BenchReport& r) {
  Json runs = Json::array();
  for (const ThreadRun& run : r.runs) runs.push_back(RunJson(r, run));
  return Json{{"benchmark", "engine_bench"}, {"timestamp", UtcTimestamp()},
              {"system", SystemJson(r)},     {"model", ModelJson(r)},
              {"config", ConfigJson(r)},     {"runs", runs},
              {"speedups", SpeedupsJson(r)}};
}

}  // namespace ckv::bench
