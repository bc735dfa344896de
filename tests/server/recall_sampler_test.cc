// Live recall telemetry through the scheduler (server/recall_sampler.h):
// the sampled recall moves with the budget, one decode step in N per
// session is sampled, 0 samples nothing, and the samples appear on the
// metrics exposition as clusterkv_attention_recall{measure, policy}.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/kv/recall_probe.h"
#include "model/model.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/recall_sampler.h"
#include "server/session_manager.h"
#include "tests/model/test_util.h"

namespace ckv::server {
namespace {

constexpr int kLayers = 3, kDenseLayers = 1;
constexpr int kPrompt = 300;  // one segment of kPrompt - sink tokens

const Model& TestModel() {
  static const Model* m = [] {
    RandomModelSpec s;
    s.layers = kLayers;
    s.dim = 64;
    s.heads = 4;
    s.kv_heads = 2;
    s.ffn = 96;
    auto model = LoadModel(testing::RandomModelPath("recall_sampler", s));
    if (!model.ok()) std::abort();
    return model->release();
  }();
  return *m;
}

KvStoreConfig Kv(KvPolicy policy, int budget) {
  KvStoreConfig c;
  c.policy = policy;
  c.budget = budget;
  c.dense_layers = kDenseLayers;
  c.window = 48;
  return c;
}

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (i * 31 + salt * 7) % 250;
  return t;
}

struct Sample {
  std::string policy;
  double topk, mass;
};

class RecallSamplerTest : public ::testing::Test {
 protected:
  RecallSamplerTest()
      : sessions_(TestModel().config, ServerLimits{}, &worker_),
        engine_(TestModel(), TransformerOptions{2, 32}, 16) {
    metrics_ = ServerMetrics::Create();
  }

  // Samples every `every` steps into samples_ and metrics_.
  void StartSampling(int every) {
    auto sampler = std::make_unique<RecallSampler>(
        every, [this](absl::string_view policy, double topk, double mass) {
          std::lock_guard<std::mutex> l(mu_);
          samples_.push_back({std::string(policy), topk, mass});
          metrics_->ObserveRecall(policy, topk, mass);
        });
    sampler_ = sampler.get();
    engine_.SetRecallSampler(std::move(sampler));
  }

  // A session holding a kPrompt-token prompt (clustered).
  std::string PromptedSession(KvPolicy policy, int budget) {
    SessionOptions o;
    o.kv = Kv(policy, budget);
    auto s = sessions_.Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    const std::string id = (*s)->id();
    EXPECT_TRUE(RunJob(id, Tokens(kPrompt, 1), AppendKind::kPrompt, 0).ok());
    return id;
  }

  // Generates `tokens` from the session's logits: decode steps at positions
  // kPrompt .. kPrompt + tokens - 2 (the first token needs no step).
  absl::Status Generate(const std::string& id, int tokens) {
    return RunJob(id, {}, AppendKind::kGenerated, tokens);
  }

  absl::Status RunJob(const std::string& id, std::vector<int32_t> input,
                      AppendKind kind, int max_tokens) {
    auto lease = sessions_.Acquire(id);
    if (!lease.ok()) return lease.status();
    std::promise<absl::Status> done;
    JobSpec spec;
    spec.lease = *std::move(lease);
    spec.input = std::move(input);
    spec.kind = kind;
    spec.generate = max_tokens > 0;
    spec.sampling.max_tokens = max_tokens;
    spec.sampling.ignore_eos = true;
    spec.callbacks.on_done = [&done](const JobResult& r) {
      done.set_value(r.status);
    };
    if (auto h = engine_.Submit(std::move(spec)); !h.ok()) return h.status();
    return done.get_future().get();
  }

  std::vector<Sample> Samples() {
    std::lock_guard<std::mutex> l(mu_);
    return samples_;
  }

  // The value of an exposition sample line `key value`; -1 when absent.
  double Exported(const std::string& key) const {
    std::istringstream in(metrics_->Serialize());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(key + " ", 0) == 0) {
        return std::stod(line.substr(key.size() + 1));
      }
    }
    return -1;
  }

  ClusterWorker worker_;
  SessionManager sessions_;
  EngineLoop engine_;
  std::unique_ptr<ServerMetrics> metrics_;
  RecallSampler* sampler_ = nullptr;  // owned by engine_
  std::mutex mu_;
  std::vector<Sample> samples_;  // guarded by mu_
};

// Decode positions p in [first, last] with p % every == 0.
int Expected(int64_t first, int64_t last, int every) {
  int n = 0;
  for (int64_t p = first; p <= last; ++p) n += p % every == 0;
  return n;
}

TEST(RecallProbeLayerTest, RotatesThroughTheSparseLayers) {
  EXPECT_EQ(RecallProbeLayer(4, 1, 0), 1);
  EXPECT_EQ(RecallProbeLayer(4, 1, 1), 2);
  EXPECT_EQ(RecallProbeLayer(4, 1, 2), 3);
  EXPECT_EQ(RecallProbeLayer(4, 1, 3), 1);
  EXPECT_EQ(RecallProbeLayer(4, 4, 0), -1);  // no sparse layer
  EXPECT_EQ(RecallProbeLayer(4, 5, 0), -1);
}

TEST_F(RecallSamplerTest, BudgetCoveringEverythingRecallsAll) {
  StartSampling(4);
  const std::string id = PromptedSession(KvPolicy::kClusterKv, 1024);
  ASSERT_TRUE(Generate(id, 20).ok());
  const auto samples = Samples();
  ASSERT_EQ(samples.size(), Expected(kPrompt, kPrompt + 18, 4));
  for (const Sample& s : samples) {
    EXPECT_EQ(s.policy, "clusterkv");
    EXPECT_EQ(s.topk, 1.0);
    EXPECT_NEAR(s.mass, 1.0, 1e-9);
  }
  EXPECT_EQ(sampler_->failures(), 0);
}

TEST_F(RecallSamplerTest, TinyBudgetRecallsLessAndTheMetricMoves) {
  StartSampling(3);
  const std::string big = PromptedSession(KvPolicy::kClusterKv, 1024);
  ASSERT_TRUE(Generate(big, 13).ok());
  const std::string topk = R"(measure="topk",policy="clusterkv")";
  const std::string mass = R"(measure="mass",policy="clusterkv")";
  const auto count = [&](const std::string& l) {
    return Exported(absl::StrCat("clusterkv_attention_recall_count{", l, "}"));
  };
  const auto sum = [&](const std::string& l) {
    return Exported(absl::StrCat("clusterkv_attention_recall_sum{", l, "}"));
  };
  const double n_big = count(topk), mass_big = sum(mass);
  ASSERT_GT(n_big, 0);
  EXPECT_EQ(sum(topk), n_big);  // every sample 1
  EXPECT_NEAR(mass_big, n_big, 1e-6);

  const std::string tiny = PromptedSession(KvPolicy::kClusterKv, 8);
  ASSERT_TRUE(Generate(tiny, 13).ok());
  const double n = count(topk) - n_big;
  ASSERT_GT(n, 0);
  EXPECT_EQ(count(mass) - n_big, n);
  // 8 of 284 clustered tokens selected: far from every true top-8, and
  // the attention mass of the unselected tokens is lost.
  EXPECT_LT((sum(topk) - n_big) / n, 0.9);
  EXPECT_LT((sum(mass) - mass_big) / n, 0.99);
  // Fewer than half the tokens attended: the bucket le=0.5 holds samples.
  EXPECT_GT(Exported(absl::StrCat("clusterkv_attention_recall_bucket{", topk,
                                  R"(,le="0.5"})")),
            0);
}

TEST_F(RecallSamplerTest, SamplesOneStepInNPerSessionAndLabelsThePolicy) {
  StartSampling(5);
  const std::string a = PromptedSession(KvPolicy::kClusterKv, 64);
  const std::string b = PromptedSession(KvPolicy::kQuest, 64);
  ASSERT_TRUE(Generate(a, 23).ok());
  ASSERT_TRUE(Generate(b, 12).ok());
  const int want_a = Expected(kPrompt, kPrompt + 21, 5);  // 300..320: 5
  const int want_b = Expected(kPrompt, kPrompt + 10, 5);  // 300..310: 3
  std::map<std::string, int> by_policy;
  for (const Sample& s : Samples()) ++by_policy[s.policy];
  EXPECT_EQ(by_policy["clusterkv"], want_a);
  EXPECT_EQ(by_policy["quest"], want_b);
  EXPECT_EQ(sampler_->samples(), want_a + want_b);
  EXPECT_EQ(
      Exported(
          R"(clusterkv_attention_recall_count{measure="topk",policy="quest"})"),
      want_b);
  EXPECT_EQ(
      Exported(
          R"(clusterkv_attention_recall_count{measure="mass",policy="clusterkv"})"),
      want_a);
}

TEST_F(RecallSamplerTest, ZeroRecordsNothing) {
  StartSampling(0);
  const std::string id = PromptedSession(KvPolicy::kClusterKv, 8);
  ASSERT_TRUE(Generate(id, 20).ok());
  EXPECT_TRUE(Samples().empty());
  EXPECT_EQ(sampler_->samples() + sampler_->failures(), 0);
  EXPECT_EQ(metrics_->Serialize().find("clusterkv_attention_recall_count"),
            std::string::npos);
}

TEST_F(RecallSamplerTest, NothingClusteredIsNotSampled) {
  StartSampling(1);
  SessionOptions o;
  o.kv = Kv(KvPolicy::kClusterKv, 8);
  auto s = sessions_.Create(o);
  ASSERT_TRUE(s.ok());
  // 10 prompt tokens: all sinks, nothing clustered.
  ASSERT_TRUE(RunJob((*s)->id(), Tokens(10, 3), AppendKind::kPrompt, 0).ok());
  ASSERT_TRUE(Generate((*s)->id(), 5).ok());
  EXPECT_TRUE(Samples().empty());
}

}  // namespace
}  // namespace ckv::server
