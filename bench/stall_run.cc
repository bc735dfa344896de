#include "bench/stall_run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/loopback_server.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/server_runner.h"

namespace ckv::bench {
namespace {

namespace v1 = ::clusterkv::v1;
using Stub = v1::ClusterKv::Stub;
using Clock = std::chrono::steady_clock;

// Tokens the loaded decode produces before the work starts and after it ends.
constexpr int kMarginTokens = 8;
constexpr int kSampleWords = 2000;  // words tokenized to calibrate the text
// max_tokens of the loaded decode (it is cancelled once the work is done).
constexpr int kLoadedMaxTokens = 65536;

absl::Status ToAbsl(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Common English words, most of them one token in BPE vocabularies.
std::string Words(int n, uint32_t seed) {
  static constexpr const char* kWords[] = {
      "the",   "of",   "and",  "to",     "in",    "that", "he",   "shall",
      "unto",  "for",  "his",  "a",      "they",  "be",   "is",   "with",
      "not",   "all",  "them", "was",    "which", "it",   "my",   "from",
      "house", "land", "said", "people", "day",   "came", "city", "hand"};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, std::size(kWords) - 1);
  std::string text;
  for (int i = 0; i < n; ++i) {
    if (i > 0) text += (i % 17 == 0) ? ".\n" : " ";
    text += kWords[pick(rng)];
  }
  return text;
}

// A text of about `tokens` tokens of the server's tokenizer.
absl::StatusOr<std::string> TextOfTokens(Stub& stub, int tokens,
                                         uint32_t seed) {
  grpc::ClientContext ctx;
  v1::TokenizeRequest req;
  req.set_text(Words(kSampleWords, seed));
  v1::TokenizeResponse resp;
  if (grpc::Status s = stub.Tokenize(&ctx, req, &resp); !s.ok()) {
    return ToAbsl(s);
  }
  const double per_word =
      std::max(1, resp.ids_size()) / static_cast<double>(kSampleWords);
  return Words(std::max(1, static_cast<int>(tokens / per_word)), seed);
}

absl::StatusOr<std::string> CreateSession(Stub& stub) {
  grpc::ClientContext ctx;
  v1::CreateSessionRequest req;
  v1::SessionInfo info;
  if (grpc::Status s = stub.CreateSession(&ctx, req, &info); !s.ok()) {
    return ToAbsl(s);
  }
  return info.session_id();
}

// Returns the tokens the call prefilled.
absl::StatusOr<int64_t> Prefill(Stub& stub, const std::string& id,
                                const std::string& text) {
  grpc::ClientContext ctx;
  auto stream = stub.Prefill(&ctx);
  v1::PrefillRequest req;
  req.set_session_id(id);
  req.set_text(text);
  stream->Write(req);
  stream->WritesDone();
  v1::PrefillResponse r;
  int64_t tokens = 0;
  while (stream->Read(&r)) {
    if (r.has_summary()) tokens = r.summary().prompt_tokens();
  }
  if (grpc::Status s = stream->Finish(); !s.ok()) return ToAbsl(s);
  return tokens;
}

// A token of the decoding session: when it arrived and how many engine
// steps had run by then.
struct Arrival {
  Clock::time_point at;
  int64_t step = 0;
};

// Greedy decode of up to `max_tokens` tokens; every token's arrival time is
// appended to `times` and counted in `count` (read by other threads).
absl::Status Decode(Stub& stub, grpc::ClientContext& ctx, const std::string& id,
                    int max_tokens, const server::ClusterKvServer& server,
                    std::vector<Arrival>& times, std::atomic<int>& count) {
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_sampling()->set_ignore_eos(true);
  auto reader = stub.Decode(&ctx, req);
  v1::DecodeResponse r;
  while (reader->Read(&r)) {
    if (!r.has_token() || r.token().id() < 0) continue;
    times.push_back({Clock::now(), server.engine_steps()});
    count.fetch_add(1);
  }
  const grpc::Status s = reader->Finish();
  return s.error_code() == grpc::StatusCode::CANCELLED ? absl::OkStatus()
                                                       : ToAbsl(s);
}

GapStats Gaps(const std::vector<Arrival>& t, Clock::time_point from,
              Clock::time_point to) {
  std::vector<double> ms;
  GapStats g;
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i].at < from || t[i].at > to) continue;
    ms.push_back(1e3 * Seconds(t[i - 1].at, t[i].at));
    g.max_steps = std::max(g.max_steps, t[i].step - t[i - 1].step);
  }
  if (ms.empty()) return g;
  std::sort(ms.begin(), ms.end());
  g.tokens = static_cast<int>(ms.size());
  double sum = 0.0;
  for (double v : ms) sum += v;
  g.mean_ms = sum / static_cast<double>(ms.size());
  g.p50_ms = ms[ms.size() / 2];
  g.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  g.max_ms = ms.back();
  return g;
}

void WaitForTokens(const std::atomic<int>& count, int n) {
  while (count.load() < n)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

class StallRun {
 public:
  absl::Status Start(const StallOptions& o, const std::string& model_path);
  absl::StatusOr<StallResult> Measure(const StallOptions& o);

 private:
  Stub& stub(int i) { return *stubs_[i]; }
  absl::Status LoadedPhase(const StallOptions& o, StallResult& r);

  std::unique_ptr<server::ClusterKvServer> server_;
  std::vector<std::unique_ptr<Stub>> stubs_;  // decode, snapshot, prefill
  std::string decode_id_, snapshot_id_;
  int engine_threads_ = 0;
};

absl::Status StallRun::Start(const StallOptions& o,
                             const std::string& model_path) {
  server::ServerConfig c =
      LoopbackServerConfig(model_path, o.threads, o.prefill_chunk);
  c.prefill_share = o.prefill_share;
  c.snapshot_dir = o.work_dir + "/stall_snapshots";
  std::error_code ignored;  // the previous run's drain snapshots
  std::filesystem::remove_all(c.snapshot_dir, ignored);
  engine_threads_ = c.threads;
  auto server = server::ClusterKvServer::Start(c, nullptr);
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  auto stubs = ConnectStubs(server_->port(), 3);
  if (!stubs.ok()) return stubs.status();
  stubs_ = *std::move(stubs);
  return absl::OkStatus();
}

// Work that starts once the decode streams: SnapshotSession of the long
// session and a Prefill of a long text into a new session, concurrently.
absl::Status StallRun::LoadedPhase(const StallOptions& o, StallResult& r) {
  auto text = TextOfTokens(stub(2), o.context, 2);
  if (!text.ok()) return text.status();
  auto prefill_id = CreateSession(stub(2));
  if (!prefill_id.ok()) return prefill_id.status();
  r.prefill_text_bytes = static_cast<int64_t>(text->size());
  grpc::ClientContext decode_ctx;
  std::vector<Arrival> times;
  std::atomic<int> count{0};
  absl::Status decode_status, snapshot_status, prefill_status;
  const Clock::time_point t0 = Clock::now();
  std::thread decoder([&] {
    decode_status = Decode(stub(0), decode_ctx, decode_id_, kLoadedMaxTokens,
                           *server_, times, count);
  });
  WaitForTokens(count, kMarginTokens);
  const Clock::time_point work_start = Clock::now();
  Clock::time_point snapshot_end, prefill_end;
  std::thread snapshotter([&] {
    grpc::ClientContext ctx;
    v1::SnapshotSessionRequest req;
    req.set_session_id(snapshot_id_);
    v1::SnapshotSessionResponse resp;
    snapshot_status = ToAbsl(stub(1).SnapshotSession(&ctx, req, &resp));
    r.snapshot_bytes = resp.bytes();
    snapshot_end = Clock::now();
  });
  std::thread prefiller([&] {
    auto tokens = Prefill(stub(2), *prefill_id, *text);
    prefill_status = tokens.status();
    if (tokens.ok()) r.prefill_tokens = *tokens;
    prefill_end = Clock::now();
  });
  snapshotter.join();
  prefiller.join();
  const Clock::time_point work_end = Clock::now();
  WaitForTokens(count, count.load() + kMarginTokens);
  decode_ctx.TryCancel();
  decoder.join();
  for (const absl::Status& s :
       {decode_status, snapshot_status, prefill_status}) {
    if (!s.ok()) return s;
  }
  r.loaded = Gaps(times, work_start, work_end);
  r.snapshot = {Seconds(t0, work_start), Seconds(t0, snapshot_end)};
  r.prefill = {Seconds(t0, work_start), Seconds(t0, prefill_end)};
  for (const Arrival& a : times) r.token_times_s.push_back(Seconds(t0, a.at));
  return absl::OkStatus();
}

absl::StatusOr<StallResult> StallRun::Measure(const StallOptions& o) {
  StallResult r;
  r.engine_threads = engine_threads_;
  auto decode_id = CreateSession(stub(0));
  auto snapshot_id = CreateSession(stub(1));
  if (!decode_id.ok()) return decode_id.status();
  if (!snapshot_id.ok()) return snapshot_id.status();
  decode_id_ = *decode_id;
  snapshot_id_ = *snapshot_id;
  auto question = TextOfTokens(stub(0), 256, 0);
  auto document = TextOfTokens(stub(1), o.context, 1);
  if (!question.ok()) return question.status();
  if (!document.ok()) return document.status();
  if (auto n = Prefill(stub(0), decode_id_, *question); !n.ok()) {
    return n.status();
  }
  auto n = Prefill(stub(1), snapshot_id_, *document);
  if (!n.ok()) return n.status();
  r.snapshot_tokens = *n;
  {  // the baseline: decoding alone
    grpc::ClientContext ctx;
    std::vector<Arrival> times;
    std::atomic<int> count{0};
    if (auto s = Decode(stub(0), ctx, decode_id_, o.baseline_tokens, *server_,
                        times, count);
        !s.ok()) {
      return s;
    }
    r.baseline =
        Gaps(times, Clock::time_point::min(), Clock::time_point::max());
  }
  if (auto s = LoadedPhase(o, r); !s.ok()) return s;
  return r;
}

}  // namespace

absl::StatusOr<StallResult> RunStall(const StallOptions& o,
                                     const std::string& model_path) {
  StallRun run;
  if (auto s = run.Start(o, model_path); !s.ok()) return s;
  auto r = run.Measure(o);
  if (r.ok()) r->model_path = model_path;
  return r;
}

}  // namespace ckv::bench
