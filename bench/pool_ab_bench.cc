// pool_ab_bench: the thread pool's two schedules (kernels/cpu/thread_pool.h)
// on the same decode, in one process, step by step: steps alternate static
// and dynamic in an ABBA order, so a shared machine's drift and another
// process's load hit both alike (separate runs minutes apart on a machine
// with other work are not comparable). Per schedule: step-time mean (tok/s
// = 1 / mean), median, p90, p99, max; the engine thread's barrier wait per
// step (time it waited for chunks other threads held); the run delay of
// the process's threads (schedstat). Before timing, one step from the same
// cache is run under each schedule and the logits must be bitwise equal.
//   pool_ab_bench --model M.gguf [--threads 1,2] [--steps 256]
//     [--background-load 0.5] [--out-json F]   (plot: plot_pool_ab.py)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/background_load.h"
#include "bench/bench_common.h"
#include "bench/bench_main.h"
#include "bench/step_stats.h"
#include "kernels/cpu/thread_pool.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/dense_kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "GGUF model (required)");
ABSL_FLAG(std::string, threads, "1,2", "thread counts");
ABSL_FLAG(int, steps, 256, "timed decode steps per schedule");
ABSL_FLAG(int, depth, 16, "prompt tokens before the decode steps");
ABSL_FLAG(double, background_load, 0.0,
          "a second process busy this fraction of one core (0..1)");
ABSL_FLAG(double, background_period_ms, 10.0, "its duty-cycle period (ms)");
ABSL_FLAG(std::string, out_json, "", "write the results to this JSON file");

namespace ckv::bench {
namespace {

using Json = nlohmann::ordered_json;
using kernels::cpu::PoolSchedule;
using kernels::cpu::ThreadPoolStats;

struct Options {
  std::string model;
  std::vector<int> threads;
  int steps = 256;
  int depth = 16;
  BackgroundLoadOptions load;
  std::string out_json;
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  o.model = absl::GetFlag(FLAGS_model);
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required");
  auto threads = ParseList<int>("threads", absl::GetFlag(FLAGS_threads), 1);
  if (!threads.ok()) return threads.status();
  o.threads = *threads;
  o.steps = absl::GetFlag(FLAGS_steps);
  o.depth = absl::GetFlag(FLAGS_depth);
  if (o.steps < 4 || o.depth < 1) {
    return absl::InvalidArgumentError("--steps must be >= 4, --depth >= 1");
  }
  o.load.fraction = absl::GetFlag(FLAGS_background_load);
  o.load.period_ms = absl::GetFlag(FLAGS_background_period_ms);
  o.out_json = absl::GetFlag(FLAGS_out_json);
  return o;
}

// One schedule's timed steps and counters.
struct Series {
  std::vector<double> ms;
  ThreadPoolStats pool;
  double run_delay_s = 0;
};

void Add(const ThreadPoolStats& s, ThreadPoolStats* total) {
  total->jobs += s.jobs;
  total->chunks += s.chunks;
  total->caller_chunks += s.caller_chunks;
  total->caller_wait_ns += s.caller_wait_ns;
  total->caller_sleeps += s.caller_sleeps;
  total->max_wait_ns = std::max(total->max_wait_ns, s.max_wait_ns);
}

class AbRun {
 public:
  AbRun(const Model& m, const Options& o, int threads)
      : AbRun(
            m, o, threads,
            std::make_unique<CpuBackend>(BackendOptions{.threads = threads})) {}
  AbRun(const Model& m, const Options& o, int threads,
        std::unique_ptr<CpuBackend> backend)
      : m_(m),
        o_(o),
        pool_(backend->pool()),
        tf_(m.config, m.weights, TransformerOptions{.threads = threads},
            std::move(backend)),
        cache_(DenseCacheOptions(m.config, kernels::DType::kF16,
                                 o.depth + 2 * o.steps + 16)) {}

  // Logits of one step from a copy of the cache under `schedule`.
  absl::StatusOr<std::vector<float>> TrialStep(PoolSchedule schedule) {
    DenseKvCache copy = cache_;
    pool_->set_schedule(schedule);
    std::vector<float> logits;
    SequenceInput in =
        MakeInput(absl::MakeConstSpan(&next_, 1), &copy, LogitsMode::kLast,
                  &logits, AppendKind::kGenerated);
    if (auto s = tf_.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
    return logits;
  }

  absl::StatusOr<double> Step() {
    SequenceInput in =
        MakeInput(absl::MakeConstSpan(&next_, 1), &cache_, LogitsMode::kLast,
                  &logits_, AppendKind::kGenerated);
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = tf_.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
    const std::chrono::duration<double, std::milli> dt =
        std::chrono::steady_clock::now() - t0;
    next_ = static_cast<int32_t>(
        std::max_element(logits_.begin(),
                         logits_.begin() + m_.config.vocab_size) -
        logits_.begin());
    return dt.count();
  }

  absl::Status Run(Series* stat, Series* dyn) {
    std::vector<int32_t> prompt(o_.depth);
    for (int i = 0; i < o_.depth; ++i) prompt[i] = (i * 7919 + 13) % 256;
    SequenceInput in = MakeInput(prompt, &cache_, LogitsMode::kLast, &logits_);
    if (auto s = tf_.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
    next_ = 1;
    for (int i = 0; i < 4; ++i) {  // warm-up
      if (auto s = Step(); !s.ok()) return s.status();
    }
    auto a = TrialStep(PoolSchedule::kStatic);
    auto b = TrialStep(PoolSchedule::kDynamic);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    if (a->size() != b->size() ||
        std::memcmp(a->data(), b->data(), a->size() * sizeof(float)) != 0) {
      return absl::InternalError(
          "logits differ between the static and the dynamic schedule");
    }
    for (int i = 0; i < 2 * o_.steps; ++i) {
      const bool is_static = i % 4 == 0 || i % 4 == 3;  // ABBA
      Series* s = is_static ? stat : dyn;
      pool_->set_schedule(is_static ? PoolSchedule::kStatic
                                    : PoolSchedule::kDynamic);
      pool_->ResetStats();
      const double d0 = ProcessRunDelaySeconds();
      auto ms = Step();
      if (!ms.ok()) return ms.status();
      s->run_delay_s += ProcessRunDelaySeconds() - d0;
      s->ms.push_back(*ms);
      Add(pool_->stats(), &s->pool);
    }
    return absl::OkStatus();
  }

 private:
  const Model& m_;
  const Options& o_;
  kernels::cpu::ThreadPool* pool_;  // the CPU backend's, owned by tf_
  Transformer tf_;
  DenseKvCache cache_;
  std::vector<float> logits_;
  int32_t next_ = 1;
};

Json SeriesJson(const Series& s) {
  const StepStats st = ComputeStepStats(s.ms);
  const double n = std::max<size_t>(1, s.ms.size());
  return Json{
      {"steps", st.count},
      {"mean_ms", st.mean},
      {"median_ms", st.median},
      {"p90_ms", st.p90},
      {"p99_ms", st.p99},
      {"max_ms", st.max},
      {"tok_per_s", st.Rate(1e3)},
      {"barrier_ms_per_step", s.pool.caller_wait_ns / 1e6 / n},
      {"max_barrier_ms", s.pool.max_wait_ns / 1e6},
      {"caller_sleeps_per_step", s.pool.caller_sleeps / n},
      {"jobs_per_step", s.pool.jobs / n},
      {"caller_chunk_share",
       s.pool.chunks > 0 ? double(s.pool.caller_chunks) / s.pool.chunks : 0.0},
      {"run_delay_ms_per_step", 1e3 * s.run_delay_s / n},
      {"step_ms", s.ms}};
}

void PrintRow(int threads, const char* name, const Json& j) {
  std::printf(
      "%4d %-8s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.3f %8.3f %7.2f %7.2f\n",
      threads, name, j["mean_ms"].get<double>(), j["median_ms"].get<double>(),
      j["p90_ms"].get<double>(), j["p99_ms"].get<double>(),
      j["max_ms"].get<double>(), j["tok_per_s"].get<double>(),
      j["barrier_ms_per_step"].get<double>(),
      j["run_delay_ms_per_step"].get<double>(),
      j["p99_ms"].get<double>() / j["median_ms"].get<double>(),
      j["max_ms"].get<double>() / j["median_ms"].get<double>());
}

absl::Status Run(const Options& o) {
  auto model = LoadModel(o.model);
  if (!model.ok()) return model.status();
  auto load = BackgroundLoad::Start(o.load);
  if (!load.ok()) return load.status();
  const double load_cpu0 = load->CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  Json runs = Json::array();
  std::printf("%4s %-8s %8s %8s %8s %8s %8s %8s %9s %8s %7s %7s\n", "thr",
              "schedule", "mean ms", "median", "p90", "p99", "max", "tok/s",
              "barrier", "rdelay", "p99/med", "max/med");
  for (int threads : o.threads) {
    std::fprintf(stderr, "pool_ab_bench: %d thread(s)\n", threads);
    Series stat, dyn;
    AbRun run(**model, o, threads);
    if (auto s = run.Run(&stat, &dyn); !s.ok()) return s;
    Json js = SeriesJson(stat), jd = SeriesJson(dyn);
    PrintRow(threads, "static", js);
    PrintRow(threads, "dynamic", jd);
    const double ratio =
        js["mean_ms"].get<double>() / jd["mean_ms"].get<double>();
    std::printf("     dynamic / static decode tok/s (mean): %.3f\n", ratio);
    runs.push_back(Json{{"threads", threads},
                        {"static", js},
                        {"dynamic", jd},
                        {"dynamic_over_static_tok_per_s", ratio}});
  }
  const std::chrono::duration<double> wall =
      std::chrono::steady_clock::now() - t0;
  const double load_share =
      load->running() ? (load->CpuSeconds() - load_cpu0) / wall.count() : 0.0;
  std::printf(
      "background load %.2f of a core (got %.2f); barrier = ms per step the "
      "engine thread waited for chunks other threads held; rdelay = ms per "
      "step the process's threads waited runnable (schedstat)\n",
      o.load.fraction, load_share);
  if (o.out_json.empty()) return absl::OkStatus();
  const Json out{{"benchmark", "pool_ab_bench"},
                 {"timestamp", UtcTimestamp()},
                 {"model", o.model},
                 {"n_layers", (*model)->config.n_layers},
                 {"d_model", (*model)->config.d_model},
                 {"steps_per_schedule", o.steps},
                 {"depth", o.depth},
                 {"background_load", Json{{"fraction", o.load.fraction},
                                          {"period_ms", o.load.period_ms},
                                          {"measured_core_share", load_share}}},
                 {"runs", runs}};
  return WriteTextFile(o.out_json, out.dump(1) + "\n");
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain(
      argc, argv,
      "thread pool schedules A/B on decode: pool_ab_bench --model M.gguf "
      "[--threads 1,2] [--steps 256] [--background-load F] [--out-json F]",
      &ckv::bench::OptionsFromFlags, &ckv::bench::Run);
}
