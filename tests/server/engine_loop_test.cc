// The scheduler without gRPC: results equal the single-sequence generation
// path, batching does not change outputs, a long prefill interleaves with
// other sessions' decoding, cancellation restores the session.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include <future>
#include <thread>
#include <utility>
#include <vector>
#include "model/backend/cpu/cpu_backend.h"
#include "model/generation.h"
#include "model/model.h"
#include "server/engine_loop.h"
#include "server/input_order.h"
#include "server/session_manager.h"
#include "tests/model/test_util.h"

namespace ckv::server {
namespace {

const Model& TestModel() {
  static const Model* m = [] {
    RandomModelSpec s;
    s.layers = 3;
    s.dim = 64;
    s.heads = 4;
    s.kv_heads = 2;
    s.ffn = 96;
    auto model = LoadModel(testing::RandomModelPath("engine", s));
    if (!model.ok()) std::abort();
    return model->release();
  }();
  return *m;
}

KvStoreConfig Kv() {
  KvStoreConfig c;
  c.policy = KvPolicy::kClusterKv;
  c.budget = 64;
  c.dense_layers = 1;
  c.window = 48;
  return c;
}

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (i * 31 + salt * 7) % 250;
  return t;
}

// Collects a job's events; Wait() returns its result.
struct Collector {
  std::mutex mu;
  std::vector<int32_t> tokens;
  std::vector<int64_t> progress;
  std::vector<std::string> order;  // "p" progress / "t" token, across jobs
  std::promise<void> finished;
  std::shared_future<void> done_future = finished.get_future().share();
  JobResult result;
  void Wait() { done_future.wait(); }

  JobCallbacks Callbacks(std::vector<std::string>* shared_order = nullptr,
                         std::mutex* shared_mu = nullptr) {
    JobCallbacks cb;
    cb.on_progress = [this, shared_order, shared_mu](int64_t d, int64_t) {
      std::lock_guard<std::mutex> l(mu);
      progress.push_back(d);
      if (shared_order) {
        std::lock_guard<std::mutex> g(*shared_mu);
        shared_order->push_back("p");
      }
    };
    cb.on_token = [this, shared_order, shared_mu](int32_t t, absl::string_view,
                                                  const TokenLogprobs*) {
      std::lock_guard<std::mutex> l(mu);
      if (t >= 0) tokens.push_back(t);
      if (shared_order) {
        std::lock_guard<std::mutex> g(*shared_mu);
        shared_order->push_back("t");
      }
    };
    cb.on_done = [this](const JobResult& r) {
      result = r;
      finished.set_value();
    };
    return cb;
  }
};

class EngineLoopTest : public ::testing::Test {
 protected:
  // `prefill_share`: EngineLoop's (0: the fair input budget).
  explicit EngineLoopTest(double prefill_share = 0.0)
      : sessions_(TestModel().config, ServerLimits{}, &worker_),
        engine_(TestModel(), TransformerOptions{2, 32}, 16,
                std::make_unique<CpuBackend>(BackendOptions{.threads = 2}),
                prefill_share) {}

  std::string NewSession() {
    SessionOptions o;
    o.kv = Kv();
    auto s = sessions_.Create(o);
    EXPECT_TRUE(s.ok());
    return (*s)->id();
  }

  JobResult Run(const std::string& id, std::vector<int32_t> input,
                AppendKind kind, bool generate, int max_tokens, Collector* c,
                bool ignore_eos = false) {
    auto lease = sessions_.Acquire(id);
    EXPECT_TRUE(lease.ok()) << lease.status();
    JobSpec spec;
    spec.lease = *std::move(lease);
    spec.input = std::move(input);
    spec.kind = kind;
    spec.generate = generate;
    spec.sampling.max_tokens = max_tokens;
    spec.sampling.ignore_eos = ignore_eos;
    spec.callbacks = c->Callbacks();
    EXPECT_TRUE(engine_.Submit(std::move(spec)).ok());
    c->Wait();
    return c->result;
  }

  ClusterWorker worker_;
  SessionManager sessions_;
  EngineLoop engine_;
};

// The same prompt and question through model/generation.h's Generate.
std::vector<int32_t> Reference(const std::vector<int32_t>& doc,
                               const std::vector<int32_t>& question,
                               int max_tokens) {
  const Model& m = TestModel();
  Transformer tf(m.config, m.weights, {1, 32});
  ClusterWorker worker;
  ClusteredKvStore store(KvShapeOf(m.config), Kv(), &worker);
  std::vector<float> logits;
  SequenceInput in = MakeInput(doc, &store, LogitsMode::kNone, &logits);
  EXPECT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  SamplingParams p;
  p.max_tokens = max_tokens;
  // Generate appends its prompt as kPrompt; the engine appends a question
  // as generated input (tail). Mirror the engine: feed the question as
  // kGenerated, then decode greedily.
  SequenceInput q = MakeInput(question, &store, LogitsMode::kLast, &logits,
                              AppendKind::kGenerated);
  EXPECT_TRUE(tf.Forward(absl::MakeSpan(&q, 1)).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t t = ArgMax(logits);
    if (m.tokenizer->IsEndOfGeneration(t)) break;
    out.push_back(t);
    if (i + 1 == max_tokens) break;
    SequenceInput step =
        MakeInput(absl::MakeConstSpan(&out.back(), 1), &store,
                  LogitsMode::kLast, &logits, AppendKind::kGenerated);
    EXPECT_TRUE(tf.Forward(absl::MakeSpan(&step, 1)).ok());
  }
  return out;
}

TEST_F(EngineLoopTest, PrefillThenDecodeEqualsDirectGeneration) {
  const auto doc = Tokens(300, 1), question = Tokens(9, 2);
  const std::string id = NewSession();
  Collector pre, dec;
  const JobResult r1 = Run(id, doc, AppendKind::kPrompt, false, 0, &pre);
  ASSERT_TRUE(r1.status.ok()) << r1.status;
  EXPECT_EQ(r1.session_tokens, 300);
  EXPECT_GT(r1.clusters_built, 0);
  EXPECT_EQ(pre.progress.back(), 300);
  const JobResult r2 =
      Run(id, question, AppendKind::kGenerated, true, 12, &dec);
  ASSERT_TRUE(r2.status.ok()) << r2.status;
  EXPECT_EQ(dec.tokens, Reference(doc, question, 12));
  // Every token in the session went through one step: the input as input,
  // the generated ones as decode steps.
  const EngineStats s = engine_.stats();
  EXPECT_EQ(s.batched_tokens - s.decoded_tokens, 309);
  EXPECT_EQ(s.decoded_tokens, r2.session_tokens - 309);
  EXPECT_EQ(s.queued, 0);
  EXPECT_EQ(s.waiting_input, 0);
}

// Whole chunks every step (prefill_share 1): concurrent answers equal
// sequential ones bit for bit. The fair budget splits an input by measured
// times, and a different split rounds differently (ServiceTest says more).
class EngineLoopFixedChunkTest : public EngineLoopTest {
 protected:
  EngineLoopFixedChunkTest() : EngineLoopTest(1.0) {}
};

TEST_F(EngineLoopFixedChunkTest, ConcurrentSessionsMatchSequentialRuns) {
  std::vector<std::string> ids;
  std::vector<std::vector<int32_t>> sequential;
  for (int s = 0; s < 4; ++s) {
    ids.push_back(NewSession());
    Collector c;
    Run(ids.back(), Tokens(100 + 20 * s, s), AppendKind::kPrompt, false, 0, &c);
    sequential.push_back(Reference(Tokens(100 + 20 * s, s), Tokens(5, s), 10));
  }
  std::vector<Collector> cs(4);
  for (int s = 0; s < 4; ++s) {
    auto lease = sessions_.Acquire(ids[s]);
    ASSERT_TRUE(lease.ok());
    JobSpec spec;
    spec.lease = *std::move(lease);
    spec.input = Tokens(5, s);
    spec.generate = true;
    spec.sampling.max_tokens = 10;
    spec.callbacks = cs[s].Callbacks();
    ASSERT_TRUE(engine_.Submit(std::move(spec)).ok());
  }
  for (int s = 0; s < 4; ++s) {
    cs[s].Wait();
    EXPECT_EQ(cs[s].tokens, sequential[s]) << "session " << s;
  }
  EXPECT_GT(engine_.stats().batched_tokens, engine_.stats().steps)
      << "decode steps of several sessions must share model steps";
}

TEST_F(EngineLoopTest, LongPrefillInterleavesWithDecoding) {
  const std::string a = NewSession(), b = NewSession();
  Collector warm;
  Run(a, Tokens(50, 3), AppendKind::kPrompt, false, 0, &warm);
  std::mutex order_mu;
  std::vector<std::string> order;
  Collector dec, pre;
  auto la = sessions_.Acquire(a);
  auto lb = sessions_.Acquire(b);
  ASSERT_TRUE(la.ok() && lb.ok());
  JobSpec d;
  d.lease = *std::move(la);
  d.input = Tokens(3, 4);
  d.generate = true;
  d.sampling.max_tokens = 30;
  d.callbacks = dec.Callbacks(&order, &order_mu);
  JobSpec p;
  p.lease = *std::move(lb);
  p.input = Tokens(32 * 20, 5);  // 20 chunks of 32
  p.kind = AppendKind::kPrompt;
  p.callbacks = pre.Callbacks(&order, &order_mu);
  ASSERT_TRUE(engine_.Submit(std::move(p)).ok());
  ASSERT_TRUE(engine_.Submit(std::move(d)).ok());
  dec.Wait();
  pre.Wait();
  // Between the decoding session's first and last tokens, at most one
  // prefill chunk runs between two of its consecutive tokens (the prefill,
  // in smaller chunks while the session decodes, may outlive it).
  const auto first_t = std::find(order.begin(), order.end(), "t");
  const auto last_t = std::find(order.rbegin(), order.rend(), "t").base();
  int run = 0, worst = 0;
  for (auto it = first_t; it < last_t; ++it) {
    run = *it == "p" ? run + 1 : 0;
    worst = std::max(worst, run);
  }
  EXPECT_LE(worst, 1) << "a decode token waited for more than one chunk";
  EXPECT_EQ(dec.tokens.size(), 30u);
  // server/input_budget.h measures a decode-only step when decoding and
  // input first meet: two tokens in a row before the prefill's last chunk.
  const auto last_p = std::find(order.rbegin(), order.rend(), "p");
  bool decode_only_step = false;
  for (auto it = order.begin(); it + 1 < last_p.base(); ++it) {
    decode_only_step = decode_only_step || (*it == "t" && *(it + 1) == "t");
  }
  EXPECT_TRUE(decode_only_step);
}

// server/input_order.h over simulated steps: one long input (6 chunks) and
// a new one-chunk input arriving every step, budget one chunk a step.
// Returns the step of the long input's first chunk and of its last (-1:
// not within `steps`).
std::pair<int, int> LongInputSteps(bool (*goes_first)(const InputCandidate&,
                                                      const InputCandidate&),
                                   int steps) {
  constexpr int64_t kChunk = 32;
  std::vector<InputCandidate> jobs = {{6 * kChunk, 0}};  // [0]: the long one
  std::vector<bool> is_long = {true};
  int first = -1;
  for (int step = 0; step < steps; ++step) {
    jobs.push_back({kChunk, 0});
    is_long.push_back(false);
    std::vector<size_t> order(jobs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return goes_first(jobs[a], jobs[b]);
    });
    const size_t fed = order.front();  // the budget is one chunk
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs[i].waits = NextWaits(jobs[i].waits, i == fed ? kChunk : 0);
    }
    jobs[fed].remaining -= kChunk;
    if (is_long[fed] && first < 0) first = step;
    if (jobs[fed].remaining == 0) {
      if (is_long[fed]) return {first, step};
      jobs.erase(jobs.begin() + fed);
      is_long.erase(is_long.begin() + fed);
    }
  }
  return {first, -1};
}

bool ShortestOnly(const InputCandidate& a, const InputCandidate& b) {
  return a.remaining < b.remaining;
}

TEST(InputOrderTest, LongInputIsNotStarvedByAStreamOfShortOnes) {
  // Shortest-first alone: the long input never gets a chunk.
  EXPECT_EQ(LongInputSteps(&ShortestOnly, 1000), std::make_pair(-1, -1));
  // With aging: a chunk at least every kMaxInputWaitSteps + 1 steps.
  const auto [first, last] = LongInputSteps(&InputGoesFirst, 1000);
  EXPECT_EQ(first, kMaxInputWaitSteps);
  ASSERT_GE(last, 0);
  EXPECT_LE(last, 6 * (kMaxInputWaitSteps + 1));
  // A short input among longer ones still goes first.
  EXPECT_TRUE(InputGoesFirst({32, 0}, {640, 5}));
  EXPECT_FALSE(InputGoesFirst({640, 5}, {32, 0}));
}

TEST_F(EngineLoopTest, CancellationRestoresTheSession) {
  const std::string id = NewSession();
  Collector pre;
  Run(id, Tokens(200, 6), AppendKind::kPrompt, false, 0, &pre);
  auto session = sessions_.Get(id);
  ASSERT_TRUE(session.ok());
  const SessionStats before = (*session)->stats();
  Collector c;
  auto lease = sessions_.Acquire(id);
  ASSERT_TRUE(lease.ok());
  JobSpec spec;
  spec.lease = *std::move(lease);
  spec.input = Tokens(4, 7);
  spec.generate = true;
  spec.sampling.max_tokens = 100000;
  std::atomic<JobHandle*> handle{nullptr};  // set after Submit returns
  JobCallbacks cb = c.Callbacks();
  auto inner = cb.on_token;
  int seen = 0;
  cb.on_token = [&](int32_t t, absl::string_view s,
                    const TokenLogprobs* logprobs) {
    inner(t, s, logprobs);
    JobHandle* h = handle.load();
    if (++seen >= 20 && h != nullptr) h->Cancel();
  };
  spec.callbacks = cb;
  auto h = engine_.Submit(std::move(spec));
  ASSERT_TRUE(h.ok());
  handle.store(h->get());
  c.Wait();
  EXPECT_EQ(c.result.status.code(), absl::StatusCode::kCancelled);
  const SessionStats after = (*session)->stats();
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.memory.host_bytes, before.memory.host_bytes);
  EXPECT_FALSE((*session)->busy());
}

// Every streamed token is in the session when the job reports: N calls of
// one token each (the later ones continuing from the session's logits)
// stream what one call of N tokens streams, and each call's session_tokens
// is the tokens before + input + generated.
TEST_F(EngineLoopTest, OneTokenCallsEqualOneLongCall) {
  constexpr int kN = 60;  // crosses the window: segments close meanwhile
  const auto doc = Tokens(120, 9), question = Tokens(4, 3);
  const std::string root = NewSession();
  Collector pre;
  Run(root, doc, AppendKind::kPrompt, false, 0, &pre);
  auto whole_session = sessions_.Fork(root);
  ASSERT_TRUE(whole_session.ok());
  Collector whole;
  const JobResult r = Run((*whole_session)->id(), question,
                          AppendKind::kGenerated, true, kN, &whole, true);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(whole.tokens.size(), size_t{kN});
  EXPECT_EQ(r.session_tokens, 120 + 4 + kN);
  auto split = sessions_.Fork(root);
  ASSERT_TRUE(split.ok());
  std::vector<int32_t> tokens;
  int64_t expected = 120;
  for (int i = 0; i < kN; ++i) {
    Collector one;
    const auto input = i == 0 ? question : std::vector<int32_t>();
    const JobResult step =
        Run((*split)->id(), input, AppendKind::kGenerated, true, 1, &one, true);
    ASSERT_TRUE(step.status.ok()) << step.status;
    ASSERT_EQ(one.tokens.size(), 1u);
    tokens.push_back(one.tokens[0]);
    expected += static_cast<int64_t>(input.size()) + 1;
    EXPECT_EQ(step.session_tokens, expected) << "call " << i;
    EXPECT_EQ((*split)->stats().tokens, expected);
  }
  EXPECT_EQ(tokens, whole.tokens);
}

// "Prefill once, fork, ask concurrently": forks of one parent share a
// read-only hold on it, so racing ForkSession calls all succeed, and the
// parent is free again (exclusive calls work) once they end.
TEST_F(EngineLoopTest, ConcurrentForksOfOneSessionAllSucceed) {
  const std::string root = NewSession();
  Collector pre;
  Run(root, Tokens(80, 5), AppendKind::kPrompt, false, 0, &pre);
  constexpr int kThreads = 8, kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> ready{0};
    std::vector<absl::Status> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        auto child = sessions_.Fork(root);
        results[t] = child.status();
        if (!child.ok()) return;
        EXPECT_EQ((*child)->stats().tokens, 80);
        EXPECT_TRUE(sessions_.Close((*child)->id()).ok());
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_TRUE(results[t].ok()) << "round " << round << ": " << results[t];
    }
  }
  auto session = sessions_.Get(root);
  ASSERT_TRUE(session.ok());
  EXPECT_FALSE((*session)->busy());
  EXPECT_TRUE(sessions_.Acquire(root).ok());
}

TEST_F(EngineLoopTest, BadInputFailsOnlyItsJob) {
  const std::string id = NewSession();
  Collector c;
  const JobResult r =
      Run(id, {1, 2, 100000}, AppendKind::kPrompt, false, 0, &c);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  Collector ok;
  EXPECT_TRUE(
      Run(id, Tokens(20, 1), AppendKind::kPrompt, false, 0, &ok).status.ok());
}

// A job on a new session of `sessions`: prefill `prompt`, then generate up
// to `max_tokens`, its events into `c`.
absl::StatusOr<JobSpec> NewSessionJob(SessionManager& sessions,
                                      std::vector<int32_t> prompt,
                                      int max_tokens, Collector& c) {
  SessionOptions so;
  so.kv = Kv();
  auto session = sessions.Create(so);
  if (!session.ok()) return session.status();
  auto lease = sessions.Acquire((*session)->id());
  if (!lease.ok()) return lease.status();
  JobSpec spec;
  spec.lease = *std::move(lease);
  spec.input = std::move(prompt);
  spec.kind = AppendKind::kPrompt;
  spec.generate = true;
  spec.sampling.max_tokens = max_tokens;
  spec.callbacks = c.Callbacks();
  return spec;
}

// A device error (here: a fake device too small for the weights) finishes
// the step's jobs with INTERNAL naming it; nothing aborts, and the error is
// sticky, as a device's are: the next job fails the same way.
TEST(EngineLoopDeviceTest, DeviceErrorFailsTheJobs) {
  ClusterWorker worker;
  SessionManager sessions(TestModel().config, ServerLimits{}, &worker);
  // Outlive the engine: their results share error payloads with the
  // engine's jobs, freed on the engine thread (TSan does not see the
  // system Abseil's reference counts).
  Collector collectors[2];
  BackendOptions o;
  o.fake_device_bytes = 64 << 10;
  auto backend = MakeBackend(BackendKind::kFake, o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EngineLoop engine(TestModel(), TransformerOptions{1, 32}, 16,
                    *std::move(backend));
  std::atomic<int> failures{0};
  engine.SetBackendFailureListener(
      [&](const absl::Status&) { failures.fetch_add(1); });
  EXPECT_TRUE(engine.backend_failure().ok());
  for (int i = 0; i < 2; ++i) {
    Collector& c = collectors[i];
    auto spec = NewSessionJob(sessions, Tokens(40, i), 4, c);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(engine.Submit(*std::move(spec)).ok());
    c.Wait();
    EXPECT_EQ(c.result.status.code(), absl::StatusCode::kInternal)
        << c.result.status;
    EXPECT_NE(c.result.status.message().find(
                  "model step failed: fake device out of memory"),
              absl::string_view::npos)
        << c.result.status;
    EXPECT_TRUE(c.tokens.empty());
  }
  // Sticky: reported once, kept for health checks.
  EXPECT_EQ(failures.load(), 1);
  EXPECT_NE(engine.backend_failure().message().find("out of memory"),
            absl::string_view::npos)
      << engine.backend_failure();
}

// The engine reports its device's segment residency (the server's
// clusterkv_kv_resident_* metrics): a fake device with kv residency
// `device` holds the session's prompt segment once it is attended; with
// `auto` and a one-byte budget the segment's layers are refused (counted
// once each) and nothing is resident.
// Streamed bytes (Backend::Residency::streamed_bytes, published as
// clusterkv_kv_streamed_bytes_total): none with the default chunk on this
// small model; with 1 KiB chunks and offloaded segments, the prefill
// chunks after the first and the decode steps stream.
TEST(EngineLoopDeviceTest, StreamedBytesAreReported) {
  for (const int64_t chunk :
       {BackendOptions{}.kv_stream_chunk_bytes, int64_t{1024}}) {
    ClusterWorker worker;
    SessionManager sessions(TestModel().config, ServerLimits{}, &worker);
    Collector c;  // outlives the engine (see DeviceErrorFailsTheJobs)
    BackendOptions o;
    o.kv_residency = KvResidency::kOffload;
    o.kv_stream_chunk_bytes = chunk;
    auto backend = MakeBackend(BackendKind::kFake, o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    sessions.set_store_env((*backend)->store_env());
    EngineLoop engine(TestModel(), TransformerOptions{1, 32}, 16,
                      *std::move(backend));
    auto spec = NewSessionJob(sessions, Tokens(100, 3), 4, c);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(engine.Submit(*std::move(spec)).ok());
    c.Wait();
    ASSERT_TRUE(c.result.status.ok()) << c.result.status;
    if (chunk == 1024) {
      EXPECT_GT(engine.residency().streamed_bytes, 0);
    } else {
      EXPECT_EQ(engine.residency().streamed_bytes, 0);
    }
  }
}

TEST(EngineLoopDeviceTest, ResidencyIsReported) {
  for (const bool room : {true, false}) {
    ClusterWorker worker;
    SessionManager sessions(TestModel().config, ServerLimits{}, &worker);
    Collector c;  // outlives the engine (see DeviceErrorFailsTheJobs)
    BackendOptions o;
    o.kv_residency = room ? KvResidency::kDevice : KvResidency::kAuto;
    o.resident_kv_bytes = room ? 0 : 1;
    auto backend = MakeBackend(BackendKind::kFake, o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    sessions.set_store_env((*backend)->store_env());
    EngineLoop engine(TestModel(), TransformerOptions{1, 32}, 16,
                      *std::move(backend));
    EXPECT_EQ(engine.residency().segment_bytes, 0);
    auto spec = NewSessionJob(sessions, Tokens(100, 3), 4, c);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(engine.Submit(*std::move(spec)).ok());
    c.Wait();
    ASSERT_TRUE(c.result.status.ok()) << c.result.status;
    const Backend::Residency r = engine.residency();
    const int layers = TestModel().config.n_layers;
    if (room) {
      EXPECT_GT(r.segment_bytes, 0);
      EXPECT_EQ(r.refusals, 0);
    } else {
      EXPECT_EQ(r.segment_bytes, 0);
      EXPECT_GT(r.refusals, 0);
      EXPECT_LE(r.refusals, layers);  // one prompt segment: once per layer
    }
    EXPECT_EQ(r.evictions, 0);
  }
}

}  // namespace
}  // namespace ckv::server
