#include "bench/engine_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include <time.h>

#include "bench/background_load.h"
#include "bench/mem_bandwidth.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/dense_kv_cache.h"
#include "model/transformer.h"

namespace ckv::bench {

double DecodeResult::MedianSeconds() const {
  if (step_seconds.empty()) return 0.0;
  std::vector<double> s = step_seconds;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double DecodeResult::MeanSeconds() const {
  if (step_seconds.empty()) return 0.0;
  return std::accumulate(step_seconds.begin(), step_seconds.end(), 0.0) /
         step_seconds.size();
}

namespace {

using Clock = std::chrono::steady_clock;

kernels::cpu::ThreadPool* CpuPoolOf(Backend* backend) {
  auto* cpu = dynamic_cast<CpuBackend*>(backend);
  return cpu != nullptr ? cpu->pool() : nullptr;
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

class Runner {
 public:
  // Runs on `backend`; its pool statistics are recorded when it is the CPU
  // backend.
  Runner(const Model& model, const EngineBenchOptions& o, int threads,
         std::unique_ptr<Backend> backend)
      : config_(model.config),
        o_(o),
        pool_(CpuPoolOf(backend.get())),
        tf_(model.config, model.weights,
            TransformerOptions{.threads = threads,
                               .prefill_chunk = o.prefill_chunk},
            std::move(backend)),
        rng_(o.seed) {}

  absl::StatusOr<ThreadRun> Run(int threads);

 private:
  // A cache holding up to `tokens`, with its memory allocated up front so
  // that no timed step grows it.
  DenseKvCache MakeCache(int64_t tokens) const;
  int32_t RandomToken();
  int32_t Argmax() const;
  // One forward call over `tokens` (a prefill: kPrompt; a decode step:
  // kGenerated), last-row logits into logits_; returns its wall time.
  absl::StatusOr<double> Timed(KvCache& cache, absl::Span<const int32_t> tokens,
                               AppendKind kind);
  absl::StatusOr<PrefillResult> Prefill(KvCache& cache, int64_t n);
  absl::StatusOr<DecodeResult> Decode(KvCache& cache, int32_t* next);
  absl::Status WarmUp();
  absl::Status MeasureDepth(DenseKvCache& cache, int64_t depth, int32_t* next,
                            ThreadRun* run);

  const ModelConfig& config_;
  const EngineBenchOptions& o_;
  kernels::cpu::ThreadPool* pool_;  // null unless on the CPU backend
  Transformer tf_;
  std::mt19937_64 rng_;
  std::vector<float> logits_;
  double wall_seconds_ = 0;  // totals over Timed() calls
  double cpu_seconds_ = 0;
};

DenseKvCache Runner::MakeCache(int64_t tokens) const {
  DenseKvCache cache(DenseCacheOptions(config_, o_.kv_type, tokens));
  if (cache.Reserve(tokens, AppendKind::kPrompt).ok()) {
    cache.Reserve(0, AppendKind::kPrompt).IgnoreError();
  }
  return cache;
}

int32_t Runner::RandomToken() {
  std::uniform_int_distribution<int32_t> dist(0, config_.vocab_size - 1);
  return dist(rng_);
}

int32_t Runner::Argmax() const {
  const auto end = logits_.begin() + config_.vocab_size;
  return static_cast<int32_t>(std::max_element(logits_.begin(), end) -
                              logits_.begin());
}

absl::StatusOr<double> Runner::Timed(KvCache& cache,
                                     absl::Span<const int32_t> tokens,
                                     AppendKind kind) {
  SequenceInput in =
      MakeInput(tokens, &cache, LogitsMode::kLast, &logits_, kind);
  const double cpu0 = ProcessCpuSeconds();
  const Clock::time_point t0 = Clock::now();
  const absl::Status s = tf_.Forward(absl::MakeSpan(&in, 1));
  const std::chrono::duration<double> dt = Clock::now() - t0;
  if (!s.ok()) return s;
  wall_seconds_ += dt.count();
  cpu_seconds_ += ProcessCpuSeconds() - cpu0;
  return dt.count();
}

absl::StatusOr<PrefillResult> Runner::Prefill(KvCache& cache, int64_t n) {
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = RandomToken();
  PrefillResult r;
  r.from = cache.num_tokens();
  r.tokens = n;
  auto seconds = Timed(cache, tokens, AppendKind::kPrompt);
  if (!seconds.ok()) return seconds.status();
  r.seconds = *seconds;
  return r;
}

absl::StatusOr<DecodeResult> Runner::Decode(KvCache& cache, int32_t* next) {
  DecodeResult r;
  r.depth = cache.num_tokens();
  r.probe_bytes_per_second =
      MeasureReadBandwidth(o_.bandwidth_bytes, o_.bandwidth_repeats)
          .bytes_per_second;
  const double delay0 = ProcessRunDelaySeconds();
  if (pool_ != nullptr) pool_->ResetStats();
  for (int i = 0; i < o_.decode_tokens; ++i) {
    auto seconds =
        Timed(cache, absl::MakeConstSpan(next, 1), AppendKind::kGenerated);
    if (!seconds.ok()) return seconds.status();
    r.step_seconds.push_back(*seconds);
    *next = Argmax();
  }
  r.run_delay_seconds = ProcessRunDelaySeconds() - delay0;
  if (pool_ != nullptr) r.pool = pool_->stats();
  return r;
}

absl::Status Runner::WarmUp() {
  DenseKvCache cache = MakeCache(o_.prefill_chunk + 2);
  auto prefill = Prefill(cache, o_.prefill_chunk);
  if (!prefill.ok()) return prefill.status();
  int32_t next = Argmax();
  for (int i = 0; i < 2; ++i) {
    if (auto s =
            Timed(cache, absl::MakeConstSpan(&next, 1), AppendKind::kGenerated);
        !s.ok()) {
      return s.status();
    }
  }
  return absl::OkStatus();
}

// Tokens the depth sweep stores at most (decode steps may carry the cache
// past the next depth), including the copies the pp_depths prefills extend.
int64_t CacheTokensNeeded(const EngineBenchOptions& o) {
  int64_t tokens = 0;
  int64_t most = 0;
  for (int64_t depth : o.depths) {
    tokens = std::max(tokens, depth);
    if (std::count(o.pp_depths.begin(), o.pp_depths.end(), depth) > 0) {
      most = std::max(most, tokens + o.pp_tokens);
    }
    tokens += o.decode_tokens;
    most = std::max(most, tokens);
  }
  return most;
}

void LogPrefill(int threads, const char* what, const PrefillResult& p) {
  std::fprintf(stderr, "  [%d thr] %s: %lld tokens at depth %lld: %.1f tok/s\n",
               threads, what, static_cast<long long>(p.tokens),
               static_cast<long long>(p.from), p.TokensPerSecond());
}

absl::Status Runner::MeasureDepth(DenseKvCache& cache, int64_t depth,
                                  int32_t* next, ThreadRun* run) {
  DepthResult d;
  d.depth = depth;
  d.prefill.from = cache.num_tokens();
  const int64_t n = std::max<int64_t>(0, depth - cache.num_tokens());
  if (n > 0) {
    auto p = Prefill(cache, n);
    if (!p.ok()) return p.status();
    d.prefill = *p;
    *next = Argmax();
    LogPrefill(run->threads, "prefill", d.prefill);
  }
  const auto& pp_depths = o_.pp_depths;
  if (depth > 0 &&
      std::find(pp_depths.begin(), pp_depths.end(), depth) != pp_depths.end()) {
    DenseKvCache fork = cache;
    auto p = Prefill(fork, o_.pp_tokens);
    if (!p.ok()) return p.status();
    run->pp.push_back(*p);
    LogPrefill(run->threads, "pp", *p);
  }
  auto dec = Decode(cache, next);
  if (!dec.ok()) return dec.status();
  d.decode = *std::move(dec);
  const StepStats st = d.decode.Stats();
  std::fprintf(stderr,
               "  [%d thr] decode at depth %lld: mean %.2f ms/token (median "
               "%.2f, p99 %.2f, max %.2f)\n",
               run->threads, static_cast<long long>(d.decode.depth),
               1e3 * st.mean, 1e3 * st.median, 1e3 * st.p99, 1e3 * st.max);
  run->depths.push_back(std::move(d));
  return absl::OkStatus();
}

absl::StatusOr<ThreadRun> Runner::Run(int threads) {
  ThreadRun run;
  run.threads = threads;
  if (auto s = WarmUp(); !s.ok()) return s;
  wall_seconds_ = cpu_seconds_ = 0;
  {
    DenseKvCache empty = MakeCache(o_.pp_tokens);
    auto p = Prefill(empty, o_.pp_tokens);
    if (!p.ok()) return p.status();
    run.pp.push_back(*p);
    LogPrefill(threads, "pp", *p);
  }
  DenseKvCache cache = MakeCache(CacheTokensNeeded(o_));
  int32_t next = RandomToken();
  for (int64_t depth : o_.depths) {
    if (auto s = MeasureDepth(cache, depth, &next, &run); !s.ok()) return s;
  }
  run.wall_seconds = wall_seconds_;
  run.cpu_seconds = cpu_seconds_;
  return run;
}

}  // namespace

absl::StatusOr<ThreadRun> RunThreadCount(const Model& model,
                                         const EngineBenchOptions& options,
                                         int threads) {
  std::fprintf(stderr, "engine_bench: %d thread(s)\n", threads);
  auto backend =
      MakeBackend(options.backend, BackendOptions{.threads = threads});
  if (!backend.ok()) return backend.status();
  std::fprintf(stderr, "engine_bench: backend %s%s: %s\n",
               (*backend)->info().name.c_str(),
               options.backend == BackendKind::kAuto ? " (auto)" : "",
               (*backend)->info().device.c_str());
  Runner runner(model, options, threads, *std::move(backend));
  return runner.Run(threads);
}

}  // namespace ckv::bench
