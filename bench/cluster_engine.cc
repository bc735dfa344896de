#include "bench/cluster_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_common.h"
#include "bench/cluster_keygen.h"
#include "bench/engine_prefill_cache.h"
#include "bench/step_stats.h"
#include "model/backend/device/device_backend.h"
#include "model/kv/clustered_store.h"
#include "model/kv/policies/registry.h"
#include "model/kv/quality.h"
#include "model/model.h"
#include "model/transformer.h"

namespace ckv::bench {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct PolicyChoice {
  const char* name;
  KvPolicy policy;
  bool evaluation_only = false;  // decoded at the first batch size only
};

constexpr PolicyChoice kFullPolicy = {"full", KvPolicy::kFull};

// Every registered policy that selects, in id order; only those named in
// `only` when it is not empty (INVALID_ARGUMENT for a name that is not a
// selecting policy).
absl::StatusOr<std::vector<PolicyChoice>> SparsePolicies(
    const std::vector<std::string>& only) {
  std::vector<PolicyChoice> out;
  for (const PolicyInfo& p : RegisteredPolicies()) {
    if (p.selects && (only.empty() || std::find(only.begin(), only.end(),
                                                p.name) != only.end())) {
      out.push_back({p.name.c_str(), p.id, p.evaluation_only});
    }
  }
  for (const std::string& name : only) {
    if (std::none_of(out.begin(), out.end(),
                     [&](const PolicyChoice& c) { return name == c.name; })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--engine_policies: '", name, "' is not a selecting policy"));
    }
  }
  return out;
}

// The measurements of a prefill, saved beside it when it is saved
// (engine_prefill_cache.h) and reported again when it is reused.
struct PrefillStats {
  double prefill_ms = 0;     // the Forward call
  double index_wait_ms = 0;  // clustering still running after it
  double kmeans_ms = 0, kmeans_wall_ms = 0, pages_ms = 0;
  int64_t kmeans_iterations = 0, kmeans_problems = 0;  // summed over heads
  // Keys scored / (keys x iterations), summed over heads: the share of
  // Lloyd's assignment work k-means did not skip.
  int64_t kmeans_key_scorings = 0, kmeans_key_iterations = 0;
  double attention_share = 0;  // of the prefill's forward steps
  int threads = 0;

  double ScoredShare() const {
    return kmeans_key_iterations > 0
               ? double(kmeans_key_scorings) / kmeans_key_iterations
               : kNotMeasured;
  }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    PrefillStats, prefill_ms, index_wait_ms, kmeans_ms, kmeans_wall_ms,
    pages_ms, kmeans_iterations, kmeans_problems, kmeans_key_scorings,
    kmeans_key_iterations, attention_share, threads)

// The prefilled parent session of one context.
struct Prefilled {
  std::unique_ptr<ClusteredKvStore> store;
  int64_t context = 0;
  PrefillStats stats;
  bool reused = false;  // restored from --engine_prefill_cache
};

// The sessions of one decode configuration at one context, timed in
// rounds (EngineBench::Decode).
struct DecodeSeries {
  const Prefilled* p = nullptr;
  std::vector<std::unique_ptr<ClusteredKvStore>> sessions;
  std::vector<int32_t> tokens;
  std::vector<double> ms;  // per timed step
  ForwardProfile prof;     // summed over the timed steps
  CacheStats before;       // cache counters before the timed steps
  int rounds = 0;
  double link_bytes = 0;        // host -> device bytes of the timed steps
  int64_t device_resident = 0;  // weights + resident KV after them
};

// Timed steps of every context are spread over this many interleaved rounds.
constexpr int kDecodeRounds = 8;

// Sums of the stores' counters over the sessions of a batch.
struct BatchCounters {
  SelectTimings select;
  CacheStats cache;
};

class EngineBench {
 public:
  EngineBench(const ClusterBenchOptions& o, int threads, ClusterWorker* worker,
              ClusterReport* report)
      : o_(o), threads_(threads), worker_(worker), report_(report) {}

  absl::Status Run();

 private:
  absl::Status LoadAndDescribe();
  KvStoreConfig PrefillConfig(int64_t ctx) const;
  // Prefill(ctx), or the saved one (--engine_prefill_cache), saving it.
  absl::StatusOr<Prefilled> PrefillOrReuse(int64_t ctx);
  absl::StatusOr<Prefilled> Prefill(int64_t ctx);
  absl::Status SyntheticPrefill(Prefilled& p);
  // A device backend's host -> device bytes so far (0 on the CPU), and its
  // device memory in use (weights and resident KV).
  int64_t LinkBytes() const;
  int64_t DeviceResidentBytes() const;
  // Decodes `pc` at every prefilled context (interleaved rounds) and
  // records one RunRecord per context.
  absl::Status Decode(const PolicyChoice& pc, int budget, int batch);
  absl::StatusOr<DecodeSeries> StartSeries(const Prefilled& p,
                                           const PolicyChoice& pc, int budget,
                                           int batch);
  absl::Status TimeSteps(DecodeSeries& s, int steps);
  absl::Status FinishSeries(DecodeSeries& s, const PolicyChoice& pc, int budget,
                            int batch);
  absl::Status Step(std::vector<std::unique_ptr<ClusteredKvStore>>& sessions,
                    std::vector<int32_t>& tokens);
  void Quality(const ClusteredKvStore& s, RunRecord* r) const;
  static BatchCounters Counters(
      const std::vector<std::unique_ptr<ClusteredKvStore>>& sessions);

  const ClusterBenchOptions& o_;
  int threads_;
  ClusterWorker* worker_;
  ClusterReport* report_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Transformer> tr_;
  std::vector<std::vector<float>> logits_;
  std::vector<Prefilled> prefilled_;
  std::optional<PrefillCache> cache_;  // --engine_prefill_cache
};

absl::Status EngineBench::LoadAndDescribe() {
  const bool random = o_.engine_model.empty();
  auto path = random ? EnsureRandomModel(o_.model, o_.work_dir, "cluster_bench")
                     : absl::StatusOr<std::string>(o_.engine_model);
  if (!path.ok()) return path.status();
  auto model = LoadModel(*path);
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
  if (o_.dense_layers > model_->config.n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dense_layers ", o_.dense_layers, " exceeds the ",
                     model_->config.n_layers, " layers of ", *path));
  }
  TransformerOptions to;
  to.threads = threads_;
  to.prefill_chunk = o_.prefill_chunk;
  to.profile = true;
  BackendOptions bo;
  bo.threads = threads_;
  bo.kv_residency = o_.kv_residency;
  auto backend = MakeBackend(o_.backend, bo);
  if (!backend.ok()) return backend.status();
  tr_ = std::make_unique<Transformer>(model_->config, model_->weights, to,
                                      *std::move(backend));
  if (!o_.engine_prefill_cache.empty()) {
    auto cache = PrefillCache::Open(o_.engine_prefill_cache, *model_);
    if (!cache.ok()) return cache.status();
    cache_ = *std::move(cache);
  }
  const ModelConfig& c = model_->config;
  report_->engine_model = Json{
      {"path", *path},
      {"random", random},
      {"n_layers", c.n_layers},
      {"dense_layers", o_.dense_layers},
      {"d_model", c.d_model},
      {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"ffn_dim", c.ffn_dim},
      {"vocab_size", c.vocab_size},
      {"weight_type", kernels::DTypeName(model_->weights.layers[0].wq.type)},
      {"matrix_bytes", model_->weights.MatrixBytes()},
      {"backend", tr_->backend().info().name},
      {"device", tr_->backend().info().device},
      {"backend_selection", tr_->backend().info().selection},
      {"kv_residency", KvResidencyName(o_.kv_residency)},
      {"gqa_selection", GqaSelectionName(o_.gqa_selection)},
      {"synthetic_sessions", o_.engine_synthetic}};
  std::printf(
      "engine model: %s\n  %d layers (dense_layers %d), d_model %d, "
      "heads %d/%d (head_dim %d), ffn %d, vocab %d, %.1f MB of "
      "matrices\n",
      path->c_str(), c.n_layers, o_.dense_layers, c.d_model, c.n_heads,
      c.n_kv_heads, c.head_dim, c.ffn_dim, c.vocab_size,
      model_->weights.MatrixBytes() / 1e6);
  return absl::OkStatus();
}

KvStoreConfig EngineBench::PrefillConfig(int64_t ctx) const {
  KvStoreConfig c;
  c.policy = KvPolicy::kClusterKv;
  c.build_all_indexes = true;
  c.dense_layers = o_.dense_layers;
  c.seed = o_.seed;
  c.max_tokens = ctx + o_.decode_steps + 8;
  return c;
}

absl::StatusOr<Prefilled> EngineBench::PrefillOrReuse(int64_t ctx) {
  if (!cache_.has_value()) return Prefill(ctx);
  const KvStoreConfig c = PrefillConfig(ctx);
  const std::string path = cache_->PathOf(c, ctx, o_.seed, o_.prefill_chunk);
  auto saved = cache_->Load(path, c.max_tokens, worker_);
  if (saved.ok()) {
    Prefilled p;
    p.context = ctx;
    p.store = std::move(saved->store);
    p.reused = true;
    p.stats = saved->stats.get<PrefillStats>();
    std::fprintf(stderr,
                 "cluster_bench: engine prefill %lld tokens restored from %s "
                 "(prefilled in %.1f s)\n",
                 static_cast<long long>(ctx), path.c_str(),
                 p.stats.prefill_ms / 1e3);
    return p;
  }
  if (!absl::IsNotFound(saved.status())) return saved.status();
  auto p = Prefill(ctx);
  if (!p.ok()) return p.status();
  if (auto s = cache_->Save(path, *p->store, p->stats); !s.ok()) return s;
  return p;
}

absl::StatusOr<Prefilled> EngineBench::Prefill(int64_t ctx) {
  const KvStoreConfig c = PrefillConfig(ctx);
  Prefilled p;
  p.context = ctx;
  PrefillStats& st = p.stats;
  st.threads = threads_;
  p.store = std::make_unique<ClusteredKvStore>(
      KvShapeOf(model_->config), c, worker_, tr_->backend().store_env());
  if (o_.engine_synthetic) {
    if (auto s = SyntheticPrefill(p); !s.ok()) return s;
    return p;
  }
  std::mt19937_64 rng(o_.seed * 31 + ctx);
  std::uniform_int_distribution<int32_t> byte(3, model_->config.vocab_size - 1);
  std::vector<int32_t> tokens(ctx);
  for (int32_t& t : tokens) t = byte(rng);
  std::vector<float> logits;
  SequenceInput in = MakeInput(tokens, p.store.get(), LogitsMode::kLast,
                               &logits, AppendKind::kPrompt);
  tr_->ResetProfile();
  auto t0 = Clock::now();
  if (auto s = tr_->Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
  st.prefill_ms = MsSince(t0);
  t0 = Clock::now();
  for (int l = 0; l < model_->config.n_layers; ++l) p.store->WaitForIndex(l);
  st.index_wait_ms = MsSince(t0);
  for (const auto& seg : p.store->segments()) {
    st.kmeans_ms += seg->kmeans_cpu_nanos() / 1e6;
    st.kmeans_wall_ms += seg->kmeans_nanos() / 1e6;
    st.pages_ms += seg->pages_nanos() / 1e6;
    for (int l = 0; l < model_->config.n_layers; ++l) {
      for (const HeadIndex& h : seg->layer(l).heads) {
        if (h.k == 0) continue;
        st.kmeans_iterations += h.kmeans_iterations;
        ++st.kmeans_problems;
        st.kmeans_key_scorings += h.kmeans_key_scorings;
        st.kmeans_key_iterations += int64_t{h.kmeans_iterations} * seg->size();
      }
    }
  }
  const ForwardProfile& prof = tr_->profile();
  st.attention_share =
      prof.total_ns > 0 ? double(prof.attention_ns) / prof.total_ns : 0;
  std::fprintf(stderr,
               "cluster_bench: engine prefill %lld tokens: %.1f s (attention "
               "%.0f%%), k-means %.2f s of CPU (%.1f%% of prefill; %.2f s "
               "wall on the worker; %.1f Lloyd iterations per head, %.0f%% of "
               "their key assignments scored), index wait %.2f s\n",
               static_cast<long long>(ctx), st.prefill_ms / 1e3,
               100 * st.attention_share, st.kmeans_ms / 1e3,
               100 * st.kmeans_ms / st.prefill_ms, st.kmeans_wall_ms / 1e3,
               st.kmeans_problems > 0
                   ? double(st.kmeans_iterations) / st.kmeans_problems
                   : 0.0,
               100 * std::max(0.0, st.ScoredShare()), st.index_wait_ms / 1e3);
  return p;
}

// The session of p.context tokens from synthetic clustered keys
// (cluster_keygen: the structure of real post-RoPE keys) and random
// values, the same rows appended to every layer in chunks of 4096 (so
// that segments close and cluster as in a chunked prefill); then every
// layer's index is waited for. Times the appends and the wait.
absl::Status EngineBench::SyntheticPrefill(Prefilled& p) {
  const ModelConfig& m = model_->config;
  const KeyData keys =
      GenerateKeys(o_.keygen, m.n_kv_heads, m.head_dim, p.context,
                   o_.seed * 31 + p.context, nullptr);
  const int64_t row = keys.row_elems(), chunk = 4096;
  auto t0 = Clock::now();
  for (int64_t at = 0; at < p.context; at += chunk) {
    const int64_t n = std::min(chunk, p.context - at);
    if (auto s = p.store->Reserve(n, AppendKind::kPrompt); !s.ok()) return s;
    for (int l = 0; l < m.n_layers; ++l) {
      p.store->Append(l, n, keys.k.data() + at * row, keys.v.data() + at * row);
    }
    p.store->Commit(n);
  }
  p.stats.prefill_ms = MsSince(t0);
  t0 = Clock::now();
  for (int l = 0; l < m.n_layers; ++l) p.store->WaitForIndex(l);
  p.stats.index_wait_ms = MsSince(t0);
  std::fprintf(stderr,
               "cluster_bench: engine synthetic session of %lld tokens: "
               "appends %.1f s, index wait %.2f s\n",
               static_cast<long long>(p.context), p.stats.prefill_ms / 1e3,
               p.stats.index_wait_ms / 1e3);
  return absl::OkStatus();
}

absl::Status EngineBench::Step(
    std::vector<std::unique_ptr<ClusteredKvStore>>& sessions,
    std::vector<int32_t>& tokens) {
  const size_t n = sessions.size();
  logits_.resize(n);
  std::vector<SequenceInput> batch;
  for (size_t i = 0; i < n; ++i) {
    batch.push_back(MakeInput(absl::MakeConstSpan(&tokens[i], 1),
                              sessions[i].get(), LogitsMode::kLast, &logits_[i],
                              AppendKind::kGenerated));
  }
  if (auto s = tr_->Forward(absl::MakeSpan(batch)); !s.ok()) return s;
  for (size_t i = 0; i < n; ++i) {  // greedy
    tokens[i] = static_cast<int32_t>(
        std::max_element(logits_[i].begin(), logits_[i].end()) -
        logits_[i].begin());
  }
  return absl::OkStatus();
}

BatchCounters EngineBench::Counters(
    const std::vector<std::unique_ptr<ClusteredKvStore>>& sessions) {
  BatchCounters c;
  for (const auto& s : sessions) {
    const SelectTimings& t = s->select_timings();
    c.select.calls += t.calls;
    c.select.wait_ns += t.wait_ns;
    c.select.plan_ns += t.plan_ns;
    c.select.cache_ns += t.cache_ns;
    c.cache.Add(s->cache_stats());
  }
  return c;
}

// Recall of session 0's last step, averaged over the sparse layers.
void EngineBench::Quality(const ClusteredKvStore& s, RunRecord* r) const {
  double topk = 0, mass = 0, err = 0;
  int n = 0;
  for (int l = o_.dense_layers; l < model_->config.n_layers; ++l, ++n) {
    auto q = MeasureLastDecode(s, l);
    if (!q.ok()) return;
    topk += q->topk_recall;
    mass += q->mass_recall;
    err += q->output_rel_err;
  }
  if (n == 0) return;
  r->topk_recall = topk / n;
  r->mass_recall = mass / n;
  r->output_rel_err = err / n;
}

absl::StatusOr<DecodeSeries> EngineBench::StartSeries(const Prefilled& p,
                                                      const PolicyChoice& pc,
                                                      int budget, int batch) {
  KvStoreConfig c = p.store->config();
  c.policy = pc.policy;
  c.budget = std::max(budget, 1);
  c.gqa_selection = o_.gqa_selection;
  DecodeSeries s;
  s.p = &p;
  for (int i = 0; i < batch; ++i) {
    auto fork = p.store->Fork(c);
    if (!fork.ok()) return fork.status();
    s.sessions.push_back(*std::move(fork));
    s.tokens.push_back(3 + (17 * i + 5) % 256);  // distinct questions
  }
  if (auto st = Step(s.sessions, s.tokens); !st.ok()) return st;  // untimed
  for (auto& session : s.sessions) session->ResetSelectTimings();
  s.before = Counters(s.sessions).cache;
  return s;
}

int64_t EngineBench::LinkBytes() const {
  const auto* d = dynamic_cast<const DeviceBackend*>(&tr_->backend());
  if (d == nullptr) return 0;
  return d->attend_copies().staged_bytes + d->attend_copies().direct_bytes +
         d->cache_rows().stats().fill_bytes;
}

int64_t EngineBench::DeviceResidentBytes() const {
  const auto* d = dynamic_cast<const DeviceBackend*>(&tr_->backend());
  if (d == nullptr) return 0;
  return d->resident_bytes() + d->cache_rows().stats().resident_bytes;
}

absl::Status EngineBench::TimeSteps(DecodeSeries& s, int steps) {
  tr_->ResetProfile();
  const int64_t link0 = LinkBytes();
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    if (auto st = Step(s.sessions, s.tokens); !st.ok()) return st;
    s.ms.push_back(MsSince(t0));
  }
  const ForwardProfile& prof = tr_->profile();
  s.prof.steps += prof.steps;
  s.prof.total_ns += prof.total_ns;
  s.prof.attention_ns += prof.attention_ns;
  s.prof.select_ns += prof.select_ns;
  s.link_bytes += static_cast<double>(LinkBytes() - link0);
  s.device_resident = DeviceResidentBytes();
  return absl::OkStatus();
}

absl::Status EngineBench::FinishSeries(DecodeSeries& s, const PolicyChoice& pc,
                                       int budget, int batch) {
  const Prefilled& p = *s.p;
  const bool quality = o_.engine_quality && pc.policy != KvPolicy::kFull &&
                       batch == o_.batches.front();
  const BatchCounters after = Counters(s.sessions);
  const ForwardProfile& prof = s.prof;
  const double n = static_cast<double>(s.ms.size());
  RunRecord r;
  r.workload = "engine";
  r.experiment = "decode";
  r.policy = pc.name;
  r.context = p.context;
  r.budget = budget;
  r.batch = batch;
  double total = 0;
  for (double x : s.ms) total += x;
  r.step_ms = total / n;
  r.select_ms = prof.select_ns / 1e6 / n;
  r.cluster_ms = p.stats.kmeans_ms;
  r.prefill_ms = p.stats.prefill_ms;
  if (quality) {  // one more, untimed step records session 0's selection
    s.sessions[0]->set_record_selection(true);
    if (auto st = Step(s.sessions, s.tokens); !st.ok()) return st;
    Quality(*s.sessions[0], &r);
  }
  std::vector<double> ms = s.ms;
  std::sort(ms.begin(), ms.end());
  const CacheStats& before = s.before;
  const int64_t lookups = after.cache.lookups - before.lookups;
  const KvMemoryStats mem = s.sessions[0]->memory();
  r.extra = Json{
      {"tokens_per_s", batch * 1e3 / r.step_ms},
      {"kmeans_wall_ms", p.stats.kmeans_wall_ms},
      {"kmeans_scored_share", Num(p.stats.ScoredShare())},
      {"step_ms_median", ms[ms.size() / 2]},
      {"step_ms_p90", SortedPercentile(ms, 90)},
      {"step_ms_p99", SortedPercentile(ms, 99)},
      {"step_ms_max", ms.back()},
      {"attention_ms", prof.attention_ns / 1e6 / n},
      {"attention_share",
       prof.total_ns > 0 ? double(prof.attention_ns) / prof.total_ns : 0.0},
      {"plan_ms", after.select.plan_ns / 1e6 / n},
      {"cache_ms", after.select.cache_ns / 1e6 / n},
      {"index_wait_ms", after.select.wait_ns / 1e6 / n},
      {"cache_hit_rate",
       Num(lookups > 0 ? double(after.cache.hits - before.hits) / lookups
                       : kNotMeasured)},
      {"h2d_bytes_per_step", (after.cache.h2d_bytes - before.h2d_bytes) / n},
      {"prefill_attention_share", p.stats.attention_share},
      {"prefill_index_wait_ms", p.stats.index_wait_ms},
      {"prefill_reused", p.reused},
      {"quest_pages_ms", p.stats.pages_ms},
      {"session_host_bytes", mem.host_bytes},
      {"session_host_shared_bytes", mem.host_shared_bytes},
      {"session_device_bytes", mem.working_set_bytes},
      {"link_h2d_bytes_per_step", s.link_bytes / n},
      {"device_resident_bytes", s.device_resident},
      {"timed_steps", o_.decode_steps},
      {"timed_rounds", s.rounds}};
  PrintRecord(r, stderr);
  report_->runs.push_back(std::move(r));
  return absl::OkStatus();
}

// Every context's sessions of one configuration are decoded in interleaved
// rounds (context A's next steps, then B's, ...), so that the contexts'
// step times -- compared with each other for flatness -- share the same
// stretch of a noisy machine's time instead of following one another.
absl::Status EngineBench::Decode(const PolicyChoice& pc, int budget,
                                 int batch) {
  std::vector<DecodeSeries> series;
  for (const Prefilled& p : prefilled_) {
    auto s = StartSeries(p, pc, budget, batch);
    if (!s.ok()) return s.status();
    series.push_back(*std::move(s));
  }
  const int steps = o_.decode_steps;
  const int rounds = std::max(1, std::min(steps, kDecodeRounds));
  for (int r = 0; r < rounds; ++r) {
    for (DecodeSeries& s : series) {
      const int n = steps * (r + 1) / rounds - steps * r / rounds;
      if (auto st = TimeSteps(s, n); !st.ok()) return st;
    }
  }
  for (DecodeSeries& s : series) {
    s.rounds = rounds;
    if (auto st = FinishSeries(s, pc, budget, batch); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status EngineBench::Run() {
  const auto policies = SparsePolicies(o_.engine_policies);
  if (!policies.ok()) return policies.status();
  if (auto s = LoadAndDescribe(); !s.ok()) return s;
  // Every context is prefilled before any is decoded, so that the decode
  // timings of all contexts come from one stretch of the run (Decode).
  for (int64_t ctx : o_.engine_contexts) {
    auto p = PrefillOrReuse(ctx);
    if (!p.ok()) return p.status();
    prefilled_.push_back(*std::move(p));
  }
  for (int batch : o_.batches) {
    if (auto s = Decode(kFullPolicy, 0, batch); !s.ok()) return s;
  }
  for (const PolicyChoice& pc : *policies) {
    for (int b : o_.budgets) {
      for (int batch : o_.batches) {
        if (pc.evaluation_only && batch != o_.batches.front()) continue;
        if (auto s = Decode(pc, b, batch); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunEngineWorkload(const ClusterBenchOptions& options, int threads,
                               ClusterWorker* worker, ClusterReport* report) {
  EngineBench bench(options, threads, worker, report);
  return bench.Run();
}

}  // namespace ckv::bench
