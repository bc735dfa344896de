#include "bench/cluster_keys.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/cluster_keygen.h"
#include "kernels/cpu/ops.h"
#include "model/kv/clustered_store.h"
#include "model/kv/policies/registry.h"
#include "model/kv/quality.h"

namespace ckv::bench {
namespace {

namespace cpu = kernels::cpu;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double Median(std::vector<double> x) {
  if (x.empty()) return kNotMeasured;
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double Mean(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? kNotMeasured : s / x.size();
}

struct PolicyChoice {
  const char* name;
  KvPolicy policy;
  GqaSelection gqa;
  CacheMode cache_mode = CacheMode::kZeroCopy;
};

constexpr PolicyChoice kClusterKvPolicy = {"clusterkv", KvPolicy::kClusterKv,
                                           GqaSelection::kPerQueryHead};
constexpr PolicyChoice kFullPolicy = {"full", KvPolicy::kFull,
                                      GqaSelection::kPerQueryHead};
constexpr int kBaseTokensPerCluster = 80;

// Every registered policy that selects, per query head, in id order;
// clusterkv also per KV head (the GQA comparison).
std::vector<PolicyChoice> SparsePolicies() {
  std::vector<PolicyChoice> out;
  for (const PolicyInfo& p : RegisteredPolicies()) {
    if (!p.selects) continue;
    out.push_back({p.name.c_str(), p.id, GqaSelection::kPerQueryHead});
    if (p.id == KvPolicy::kClusterKv) {
      out.push_back({"clusterkv_kvhead", p.id, GqaSelection::kPerKvHead});
    }
  }
  return out;
}

// The timed configurations: SparsePolicies() and clusterkv with the copy
// cache mode (selected blocks gathered into a per-(layer, KV head) arena;
// the same rows, so only its time is measured).
std::vector<PolicyChoice> TimedPolicies() {
  std::vector<PolicyChoice> out = SparsePolicies();
  out.push_back({"clusterkv_copy", KvPolicy::kClusterKv,
                 GqaSelection::kPerQueryHead, CacheMode::kCopy});
  return out;
}

constexpr int kTimingWarmup = 2;
constexpr double kTimingDrift = 0.1;  // relative query change per step

// Wall time of the parts of one decode step of the layer.
struct StepTime {
  double select_ms = 0, attention_ms = 0;
};

// A prefilled parent store and what its prefill cost.
struct Parent {
  std::unique_ptr<ClusteredKvStore> store;
  double ingest_ms = 0, kmeans_ms = 0, pages_ms = 0;
};

class KeysBench {
 public:
  KeysBench(const ClusterBenchOptions& o, cpu::ThreadPool* pool,
            ClusterWorker* worker, std::vector<RunRecord>* runs)
      : o_(o), pool_(pool), worker_(worker), runs_(runs) {}

  absl::Status Run();

 private:
  KvShape Shape() const {
    return KvShape{1, o_.heads, o_.kv_heads, o_.head_dim};
  }
  KvStoreConfig BaseConfig() const;
  absl::StatusOr<Parent> Prefill(int64_t ctx, const KvStoreConfig& c);
  absl::Status DecodeStep(ClusteredKvStore& s, int64_t pos, const float* q,
                          bool attend, StepTime* t);
  absl::Status Recall(const Parent& p, int64_t ctx, const PolicyChoice& pc,
                      int budget, const std::vector<std::vector<float>>& qs);
  absl::Status TimeLayer(const Parent& p, int64_t ctx, const PolicyChoice& pc,
                         int budget);
  absl::Status RunContext(int64_t ctx, bool largest);
  absl::Status RunAblations(int64_t ctx,
                            const std::vector<std::vector<float>>& qs);
  std::vector<std::vector<float>> Queries(int64_t ctx, int count,
                                          uint64_t salt) const;
  RunRecord NewRecord(const char* experiment, const Parent& p, int64_t ctx,
                      const PolicyChoice& pc, int budget) const;
  void Add(RunRecord r);

  const ClusterBenchOptions& o_;
  cpu::ThreadPool* pool_;
  ClusterWorker* worker_;
  std::vector<RunRecord>* runs_;
  KeyData keys_;
  AttendSet attend_;
  std::vector<float> out_;
};

KvStoreConfig KeysBench::BaseConfig() const {
  KvStoreConfig c;
  c.policy = KvPolicy::kClusterKv;
  c.build_all_indexes = true;
  c.dense_layers = 0;
  c.tokens_per_cluster = kBaseTokensPerCluster;
  c.seed = o_.seed;
  c.max_tokens = keys_.n;
  return c;
}

absl::StatusOr<Parent> KeysBench::Prefill(int64_t ctx, const KvStoreConfig& c) {
  Parent p;
  p.store = std::make_unique<ClusteredKvStore>(Shape(), c, worker_);
  const auto t0 = Clock::now();
  if (auto s = p.store->Reserve(ctx, AppendKind::kPrompt); !s.ok()) return s;
  p.store->Append(0, ctx, keys_.k.data(), keys_.v.data());
  p.store->Commit(ctx);
  p.store->WaitForIndex(0);
  p.ingest_ms = MsSince(t0);
  for (const auto& seg : p.store->segments()) {
    p.kmeans_ms += seg->kmeans_cpu_nanos() / 1e6;
    p.pages_ms += seg->pages_nanos() / 1e6;
  }
  return p;
}

absl::Status KeysBench::DecodeStep(ClusteredKvStore& s, int64_t pos,
                                   const float* q, bool attend, StepTime* t) {
  if (auto st = s.Reserve(1, AppendKind::kGenerated); !st.ok()) return st;
  const int64_t row = keys_.row_elems();
  s.Append(0, 1, &keys_.k[pos * row], &keys_.v[pos * row]);
  const LayerQuery query{q, &pos, 1};
  const auto t0 = Clock::now();
  s.Select(0, query, &attend_);
  t->select_ms = MsSince(t0);
  if (attend) {
    const auto t1 = Clock::now();
    out_.resize(size_t{1} * o_.heads * o_.head_dim);
    cpu::AttentionArgs a;
    a.q = q;
    a.q_pos = &pos;
    a.n_q = 1;
    a.n_heads = o_.heads;
    a.head_dim = o_.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(o_.head_dim));
    a.kv = attend_.per_head.data();
    a.out = out_.data();
    cpu::Attention(pool_, a);
    t->attention_ms = MsSince(t1);
  }
  s.Commit(1);
  return absl::OkStatus();
}

std::vector<std::vector<float>> KeysBench::Queries(int64_t ctx, int count,
                                                   uint64_t salt) const {
  std::mt19937_64 rng(o_.seed * 7919 + ctx + salt);
  std::vector<std::vector<float>> qs;
  const int64_t first = std::min<int64_t>(KvStoreConfig{}.sink_tokens, ctx - 1);
  for (int i = 0; i < count; ++i) {
    qs.push_back(MakeQuery(o_.keygen, keys_, o_.heads, first, ctx, rng));
  }
  return qs;
}

RunRecord KeysBench::NewRecord(const char* experiment, const Parent& p,
                               int64_t ctx, const PolicyChoice& pc,
                               int budget) const {
  const KvStoreConfig& c = p.store->config();
  RunRecord r;
  r.workload = "keys";
  r.experiment = experiment;
  r.policy = pc.name;
  r.context = ctx;
  r.budget = budget;
  r.cluster_ms = p.kmeans_ms;
  r.extra["metric"] = MetricName(c.metric);
  r.extra["tokens_per_cluster"] = c.tokens_per_cluster;
  r.extra["gqa"] = GqaSelectionName(pc.gqa);
  r.extra["ingest_ms"] = p.ingest_ms;
  r.extra["quest_pages_ms"] = p.pages_ms;
  return r;
}

// |union of a KV group's selections| / sum of their sizes, averaged over the
// groups of layer 0's last recorded decode step: 1 / group when the query
// heads of a group select the same rows, 1 when they select disjoint ones.
double GroupUnionShare(const ClusteredKvStore& s, int heads, int kv_heads) {
  const int group = heads / kv_heads;
  double total = 0.0;
  for (int g = 0; g < kv_heads; ++g) {
    std::vector<int64_t> all;
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const auto& sel = s.selected_positions(0, h);
      all.insert(all.end(), sel.begin(), sel.end());
    }
    const size_t sum = all.size();
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    total += sum > 0 ? double(all.size()) / double(sum) : 1.0;
  }
  return total / kv_heads;
}

void KeysBench::Add(RunRecord r) {
  PrintRecord(r, stderr);
  runs_->push_back(std::move(r));
}

absl::Status KeysBench::Recall(const Parent& p, int64_t ctx,
                               const PolicyChoice& pc, int budget,
                               const std::vector<std::vector<float>>& qs) {
  KvStoreConfig c = p.store->config();
  c.policy = pc.policy;
  c.gqa_selection = pc.gqa;
  c.budget = budget;
  auto fork = p.store->Fork(c);
  if (!fork.ok()) return fork.status();
  (*fork)->set_record_selection(true);
  std::vector<double> topk, mass, err, attended, union_share;
  for (size_t i = 0; i < qs.size(); ++i) {
    StepTime t;
    auto s = DecodeStep(**fork, ctx + i, qs[i].data(), false, &t);
    if (!s.ok()) return s;
    union_share.push_back(GroupUnionShare(**fork, o_.heads, o_.kv_heads));
    auto q = MeasureLastDecode(**fork, 0);
    if (!q.ok()) return q.status();
    topk.push_back(q->topk_recall);
    mass.push_back(q->mass_recall);
    err.push_back(q->output_rel_err);
    attended.push_back(static_cast<double>(q->attended) / o_.heads);
  }
  RunRecord r = NewRecord("recall", p, ctx, pc, budget);
  r.topk_recall = Mean(topk);
  r.mass_recall = Mean(mass);
  r.output_rel_err = Mean(err);
  r.extra["queries"] = qs.size();
  r.extra["attended_tokens"] = Mean(attended);
  r.extra["topk_recall_min"] = *std::min_element(topk.begin(), topk.end());
  r.extra["group_union_share"] = Mean(union_share);
  Add(std::move(r));
  return absl::OkStatus();
}

absl::Status KeysBench::TimeLayer(const Parent& p, int64_t ctx,
                                  const PolicyChoice& pc, int budget) {
  KvStoreConfig c = p.store->config();
  c.policy = pc.policy;
  c.gqa_selection = pc.gqa;
  c.cache_mode = pc.cache_mode;
  c.budget = std::max(budget, 1);
  auto fork = p.store->Fork(c);
  if (!fork.ok()) return fork.status();
  ClusteredKvStore& s = **fork;
  const int steps = kTimingWarmup + o_.timing_steps;
  const auto bases = Queries(ctx, steps / o_.timing_hold + 1, 17);
  std::mt19937_64 rng(o_.seed + 99);
  std::vector<double> step, sel, att;
  CacheStats before;
  for (int i = 0; i < steps; ++i) {
    if (i == kTimingWarmup) {
      before = s.cache_stats();
      s.ResetSelectTimings();
    }
    const auto q =
        PerturbQuery(bases[i / o_.timing_hold], o_.head_dim, kTimingDrift, rng);
    StepTime t;
    if (auto st = DecodeStep(s, ctx + i, q.data(), true, &t); !st.ok()) {
      return st;
    }
    if (i < kTimingWarmup) continue;
    step.push_back(t.select_ms + t.attention_ms);
    sel.push_back(t.select_ms);
    att.push_back(t.attention_ms);
  }
  const CacheStats after = s.cache_stats();
  const SelectTimings& st = s.select_timings();
  const double n = o_.timing_steps;
  RunRecord r = NewRecord("layer_timing", p, ctx, pc, budget);
  r.step_ms = Median(step);
  r.select_ms = Median(sel);
  r.extra["step_ms_mean"] = Mean(step);
  r.extra["attention_ms"] = Median(att);
  r.extra["plan_ms"] = st.plan_ns / 1e6 / n;
  r.extra["cache_ms"] = st.cache_ns / 1e6 / n;
  r.extra["index_wait_ms"] = st.wait_ns / 1e6 / n;
  const int64_t lookups = after.lookups - before.lookups;
  r.extra["cache_hit_rate"] = Num(
      lookups > 0 ? double(after.hits - before.hits) / lookups : kNotMeasured);
  r.extra["h2d_bytes_per_step"] = (after.h2d_bytes - before.h2d_bytes) / n;
  r.extra["timed_steps"] = o_.timing_steps;
  Add(std::move(r));
  return absl::OkStatus();
}

absl::Status KeysBench::RunAblations(
    int64_t ctx, const std::vector<std::vector<float>>& qs) {
  const PolicyChoice& ckv = kClusterKvPolicy;
  std::vector<KvStoreConfig> configs;
  for (auto m : {ClusterMetric::kL2, ClusterMetric::kInnerProduct}) {
    KvStoreConfig c = BaseConfig();
    c.build_all_indexes = false;
    c.metric = m;
    configs.push_back(c);
  }
  for (int tpc : o_.tokens_per_cluster) {
    if (tpc == kBaseTokensPerCluster) continue;
    KvStoreConfig c = BaseConfig();
    c.build_all_indexes = false;
    c.tokens_per_cluster = tpc;
    configs.push_back(c);
  }
  for (const KvStoreConfig& c : configs) {
    auto parent = Prefill(ctx, c);
    if (!parent.ok()) return parent.status();
    for (int b : o_.budgets) {
      if (auto s = Recall(*parent, ctx, ckv, b, qs); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status KeysBench::RunContext(int64_t ctx, bool largest) {
  std::fprintf(stderr, "cluster_bench: keys, context %lld\n",
               static_cast<long long>(ctx));
  auto parent = Prefill(ctx, BaseConfig());
  if (!parent.ok()) return parent.status();
  const auto qs = Queries(ctx, o_.key_queries, 0);
  for (const PolicyChoice& pc : SparsePolicies()) {
    for (int b : o_.budgets) {
      if (auto s = Recall(*parent, ctx, pc, b, qs); !s.ok()) return s;
    }
  }
  if (!largest) return absl::OkStatus();
  if (auto s = TimeLayer(*parent, ctx, kFullPolicy, 0); !s.ok()) return s;
  for (const PolicyChoice& pc : TimedPolicies()) {
    for (int b : o_.budgets) {
      if (auto s = TimeLayer(*parent, ctx, pc, b); !s.ok()) return s;
    }
  }
  parent->store.reset();
  return RunAblations(ctx, qs);
}

absl::Status KeysBench::Run() {
  const int64_t max_ctx = o_.key_contexts.back();
  const int extra = std::max(o_.key_queries, o_.timing_steps + kTimingWarmup);
  const auto t0 = Clock::now();
  keys_ = GenerateKeys(o_.keygen, o_.kv_heads, o_.head_dim, max_ctx + extra,
                       o_.seed, pool_);
  std::fprintf(stderr,
               "cluster_bench: keys generated (%lld x %d x %d) in "
               "%.1f s\n",
               static_cast<long long>(keys_.n), o_.kv_heads, o_.head_dim,
               MsSince(t0) / 1e3);
  for (int64_t ctx : o_.key_contexts) {
    if (auto s = RunContext(ctx, ctx == max_ctx); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunKeysWorkload(const ClusterBenchOptions& options,
                             cpu::ThreadPool* pool, ClusterWorker* worker,
                             std::vector<RunRecord>* runs) {
  KeysBench bench(options, pool, worker, runs);
  return bench.Run();
}

}  // namespace ckv::bench
