// Cost of one live recall sample (server/recall_sampler.h) against one
// decode step, to choose --recall-sample-every so that sampling costs at
// most 1% of decode time. Same machine, same run:
//   - step: one single-token decode step of the default benchmark model
//     (bench_common.h) with a --context-token session, policy streaming
//     (a sparse step whose cost, like clusterkv's, does not grow with
//     context), B = 1024, median of --steps;
//   - sample: ArmRecallProbe + CollectRecallProbe of one sparse layer of a
//     store of that model's shape holding N random tokens, for each N of
//     --sample-contexts (the measurement reads every stored token, so its
//     cost grows linearly with N), median of --repeats.
// Prints one JSON line per context: sample_ms, step_ms, ratio and the
// smallest N (power of two) with ratio / N <= 1%.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_common.h"
#include "model/kv/recall_probe.h"
#include "model/model.h"
#include "model/transformer.h"

ABSL_FLAG(std::string, work_dir, "/tmp/ckv_recall_probe_bench",
          "where the random model is cached");
ABSL_FLAG(int, context_tokens, 2048, "session length of the timed steps");
ABSL_FLAG(int, steps, 9, "timed decode steps");
ABSL_FLAG(std::string, sample_contexts, "8192,32768,131072",
          "stored tokens of the timed samples");
ABSL_FLAG(int, repeats, 3, "timed samples per context");
ABSL_FLAG(int, threads, 0, "compute threads of the decode steps (0: all)");

namespace ckv {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

KvStoreConfig StreamingConfig() {
  KvStoreConfig c;
  c.policy = KvPolicy::kStreaming;
  c.max_tokens = 1 << 20;
  return c;
}

absl::StatusOr<double> DecodeStepMs(const Model& m) {
  TransformerOptions opt;
  opt.threads = absl::GetFlag(FLAGS_threads);
  Transformer tf(m.config, m.weights, opt);
  ClusterWorker worker;
  ClusteredKvStore store(KvShapeOf(m.config), StreamingConfig(), &worker);
  std::vector<int32_t> prompt(absl::GetFlag(FLAGS_context_tokens));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 100 + i % 5000;
  std::vector<float> logits;
  SequenceInput in = MakeInput(prompt, &store, LogitsMode::kNone, &logits);
  if (auto s = tf.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
  std::vector<double> ms;
  for (int i = 0; i < absl::GetFlag(FLAGS_steps); ++i) {
    const int32_t t = 100 + i;
    SequenceInput step =
        MakeInput(absl::MakeConstSpan(&t, 1), &store, LogitsMode::kLast,
                  &logits, AppendKind::kGenerated);
    const auto t0 = Clock::now();
    if (auto s = tf.Forward(absl::MakeSpan(&step, 1)); !s.ok()) return s;
    ms.push_back(Ms(t0, Clock::now()));
  }
  return Median(ms);
}

// A store of `shape` with n random prompt tokens and one decode step armed
// and taken; returns the median time of measuring it.
absl::StatusOr<double> SampleMs(const KvShape& shape, int64_t n) {
  ClusterWorker worker;
  ClusteredKvStore store(shape, StreamingConfig(), &worker);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const size_t row = size_t{1} * shape.n_kv_heads * shape.head_dim;
  std::vector<float> k(row * n), v(row * n);
  if (auto s = store.Reserve(n, AppendKind::kPrompt); !s.ok()) return s;
  for (int l = 0; l < shape.n_layers; ++l) {
    for (auto* a : {&k, &v}) {
      for (float& x : *a) x = normal(rng);
    }
    store.Append(l, n, k.data(), v.data());
  }
  store.Commit(n);
  const int layer = shape.n_layers - 1;
  std::vector<double> ms;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    const int64_t pos = store.num_tokens();
    if (!ArmRecallProbe(store, layer)) {
      return absl::InternalError("nothing to sample");
    }
    if (auto s = store.Reserve(1, AppendKind::kGenerated); !s.ok()) return s;
    std::vector<float> q(size_t{1} * shape.n_heads * shape.head_dim);
    for (float& x : q) x = normal(rng);
    AttendSet set;
    for (int l = 0; l < shape.n_layers; ++l) {
      store.Append(l, 1, k.data(), v.data());
      const LayerQuery query{q.data(), &pos, 1};
      store.Select(l, query, &set);
    }
    const auto t0 = Clock::now();
    auto sample = CollectRecallProbe(store, layer, pos);
    ms.push_back(Ms(t0, Clock::now()));
    if (!sample.ok()) return sample.status();
    store.Commit(1);
  }
  return Median(ms);
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "recall_probe_bench: %s\n", s.ToString().c_str());
  return 1;
}

int Run() {
  auto path = bench::EnsureRandomModel(bench::DefaultModelSpec(),
                                       absl::GetFlag(FLAGS_work_dir),
                                       "recall_probe_bench");
  if (!path.ok()) return Fail(path.status());
  auto model = LoadModel(*path);
  if (!model.ok()) return Fail(model.status());
  auto step = DecodeStepMs(**model);
  if (!step.ok()) return Fail(step.status());
  auto contexts = bench::ParseList<int64_t>(
      "sample-contexts", absl::GetFlag(FLAGS_sample_contexts), 64);
  if (!contexts.ok()) return Fail(contexts.status());
  for (int64_t n : *contexts) {
    auto sample = SampleMs(KvShapeOf((*model)->config), n);
    if (!sample.ok()) return Fail(sample.status());
    const double ratio = *sample / *step;
    int64_t every = 1;
    while (ratio / every > 0.01) every *= 2;
    std::printf(
        "{\"sample_context\": %lld, \"sample_ms\": %.3f, \"step_ms\": %.3f, "
        "\"step_context\": %d, \"ratio\": %.3f, \"every_for_1pct\": %lld}\n",
        static_cast<long long>(n), *sample, *step,
        absl::GetFlag(FLAGS_context_tokens), ratio,
        static_cast<long long>(every));
  }
  return 0;
}

}  // namespace
}  // namespace ckv

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ckv::Run();
}
