// Fault tests of the real clusterkv-server binary on 127.0.0.1:0: a client
// cancelling or missing its deadline mid-stream leaves the session intact;
// SIGTERM mid-stream gives the streaming client UNAVAILABLE, exits 0 and
// snapshots the sessions, which a restart on the same --snapshot-dir
// restores and continues exactly; SIGKILL loses what came after a session's
// last snapshot (the loss is printed) and nothing before it; limits reached
// under load give RESOURCE_EXHAUSTED while the server's memory stays
// bounded. Every wait is bounded.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/soak/soak_util.h"

namespace ckv::soak {
namespace {

namespace fs = std::filesystem;
using grpc::StatusCode;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int kContinuation = 16;  // greedy tokens compared after a fault

// Bound of the server's RSS growth under the limits test (2 MiB of KV):
// AddressSanitizer keeps freed memory in quarantine (256 MiB) and shadow.
#ifdef CLUSTERKV_SANITIZED
constexpr int64_t kRssGrowthBound = int64_t{1} << 30;
#else
constexpr int64_t kRssGrowthBound = int64_t{128} << 20;
#endif

const char kDoc[] =
    "Clustered keys recall what matters: a long document is prefilled once, "
    "forks answer questions, and snapshots keep sessions across restarts. "
    "Les données résumées — 日本語のテキスト — 🙂 survive a crash up "
    "to "
    "the "
    "last snapshot. The quick brown fox jumps over the lazy dog, again and "
    "again, while the server streams tokens to many clients at once. ";

std::string WorkDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    fs::path p = tmp != nullptr ? tmp : fs::temp_directory_path();
    p /= absl::StrCat("ckv_faults_", ::getpid());
    fs::create_directories(p);
    return p.string();
  }();
  return dir;
}

// Removes the work folder (model, logs, snapshots) after a passing run.
class RemoveWorkDir : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Failed()) {
      fs::remove_all(WorkDir());
    }
  }
};
::testing::Environment* const kRemoveWorkDir =
    ::testing::AddGlobalTestEnvironment(new RemoveWorkDir);

std::string ModelPath() {
  const std::string path = WorkDir() + "/model.gguf";
  const absl::Status st = WriteSoakModel(path);
  EXPECT_TRUE(st.ok()) << st;
  return path;
}

std::string FreshDir(const std::string& name) {
  const std::string dir = WorkDir() + "/" + name;
  fs::remove_all(dir);
  return dir;
}

std::vector<std::string> ServerArgs(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--model",
                                ModelPath(),
                                "--listen",
                                "127.0.0.1:0",
                                "--metrics-address=",
                                "--threads",
                                "2",
                                "--prefill-chunk",
                                "64",
                                "--policy",
                                "clusterkv",
                                "--dense-layers",
                                "1",
                                "--sink-tokens",
                                "4",
                                "--tokens-per-cluster",
                                "16",
                                "--window",
                                "32",
                                "--budget",
                                "32",
                                "--drain-grace-seconds",
                                "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::unique_ptr<ServerProcess> Spawn(const std::string& name,
                                     std::vector<std::string> extra = {}) {
  auto server =
      ServerProcess::Start(CLUSTERKV_SERVER_BIN, ServerArgs(std::move(extra)),
                           WorkDir() + "/" + name + ".log");
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A greedy session holding kDoc; its token count in *tokens.
std::string CreatePrefilled(v1::ClusterKv::Stub& stub, int64_t* tokens,
                            uint32_t idle_ttl = 0) {
  v1::CreateSessionRequest req;
  req.mutable_sampling()->set_temperature(0.0f);
  req.set_idle_ttl_seconds(idle_ttl);
  v1::SessionInfo info;
  EXPECT_TRUE(CreateSession(stub, req, &info).ok());
  const StreamResult r = Prefill(stub, info.session_id(), kDoc, 3);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  *tokens = r.session_tokens;
  return info.session_id();
}

// The greedy continuation of `id` as it is now, computed on a fork (which
// is closed again), so that `id` itself is left unchanged.
std::vector<int32_t> ContinuationOf(v1::ClusterKv::Stub& stub,
                                    const std::string& id) {
  v1::SessionInfo fork;
  EXPECT_TRUE(ForkSession(stub, id, &fork).ok());
  const StreamResult r = DecodeGreedy(stub, fork.session_id(), kContinuation);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids.size(), static_cast<size_t>(kContinuation));
  EXPECT_TRUE(CloseSession(stub, fork.session_id()).ok());
  return r.ids;
}

int64_t TokensOf(v1::ClusterKv::Stub& stub, const std::string& id) {
  v1::SessionInfo info;
  const grpc::Status st = WaitNotBusy(stub, id, milliseconds(10000), &info);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(info.busy()) << "session " << id << " still busy";
  return info.tokens();
}

// A Decode of `id` that runs until cancelled (by the client or the server).
v1::DecodeRequest EndlessDecode(const std::string& id) {
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.mutable_sampling()->set_max_tokens(100000);
  req.mutable_sampling()->set_ignore_eos(true);  // no early end of the stream
  return req;
}

bool WaitForFile(const std::string& path, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!fs::exists(path)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return true;
}

std::string SnapshotFile(const std::string& dir, const std::string& id) {
  return dir + "/" + id + ".ckvsnap";
}

// ---------------------------------------------------- cancel and deadline

TEST(FaultTest, CancelAndDeadlineMidStreamLeaveTheSessionIntact) {
  auto server = Spawn("cancel");
  ASSERT_NE(server, nullptr);
  auto stub = NewStub(server->address());
  int64_t tokens = 0;
  const std::string id = CreatePrefilled(*stub, &tokens);
  const std::vector<int32_t> expected = ContinuationOf(*stub, id);

  StreamOptions cancel;
  cancel.cancel_after_tokens = 4;
  const StreamResult cancelled = Decode(*stub, EndlessDecode(id), cancel);
  EXPECT_EQ(cancelled.status.error_code(), StatusCode::CANCELLED);
  EXPECT_GE(cancelled.ids.size(), 4u);
  EXPECT_EQ(TokensOf(*stub, id), tokens) << "cancel did not roll back";

  StreamOptions deadline;
  deadline.timeout = milliseconds(500);
  const StreamResult late = Decode(*stub, EndlessDecode(id), deadline);
  EXPECT_EQ(late.status.error_code(), StatusCode::DEADLINE_EXCEEDED);
  EXPECT_GT(late.ids.size(), 0u) << "the deadline hit before any token";
  EXPECT_EQ(TokensOf(*stub, id), tokens) << "deadline did not roll back";

  // Generate cancelled mid-stream: its ephemeral session goes away.
  v1::GenerateRequest gen;
  gen.set_prompt(kDoc);
  gen.mutable_sampling()->set_max_tokens(100000);
  gen.mutable_sampling()->set_ignore_eos(true);
  EXPECT_EQ(Generate(*stub, gen, cancel).status.error_code(),
            StatusCode::CANCELLED);

  const StreamResult after = DecodeGreedy(*stub, id, kContinuation);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.ids, expected) << "the session changed";
  ASSERT_TRUE(CloseSession(*stub, id).ok());
  v1::ServerInfo info;
  for (int i = 0; i < 100; ++i) {  // the Generate job may still be ending
    ASSERT_TRUE(GetServerInfo(*stub, &info).ok());
    if (info.capacity().free_sessions() == info.limits().max_sessions()) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(info.capacity().free_sessions(), info.limits().max_sessions());
  EXPECT_EQ(info.capacity().free_host_kv_bytes(),
            info.limits().max_host_kv_bytes());
  EXPECT_EQ(server->Stop(), 0);
}

// ------------------------------------------------------ SIGTERM mid-stream

// Starts an endless Decode of `id` on another thread; returns once the
// server runs it (the session is busy).
std::thread StartStream(v1::ClusterKv::Stub& stub, const std::string& id,
                        StreamResult* result) {
  std::thread t(
      [&stub, id, result] { *result = Decode(stub, EndlessDecode(id)); });
  v1::SessionInfo info;
  for (int i = 0; i < 200; ++i) {
    if (GetSession(stub, id, &info).ok() && info.busy()) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(info.busy()) << "the stream did not start";
  std::this_thread::sleep_for(milliseconds(100));  // a few tokens
  return t;
}

TEST(FaultTest, SigtermMidStreamSnapshotsAndARestartContinuesExactly) {
  const std::string dir = FreshDir("snap_sigterm");
  auto server = Spawn("sigterm", {"--snapshot-dir", dir});
  ASSERT_NE(server, nullptr);
  auto stub = NewStub(server->address());
  int64_t tokens = 0;
  const std::string id = CreatePrefilled(*stub, &tokens);
  const std::vector<int32_t> expected = ContinuationOf(*stub, id);

  StreamResult stream;
  std::thread streaming = StartStream(*stub, id, &stream);
  server->Signal(SIGTERM);
  // While the stream has its grace period, new calls are refused.
  grpc::Status refused;
  v1::SessionInfo info;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    refused = GetSession(*stub, id, &info);
    if (refused.ok()) std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(refused.error_code(), StatusCode::UNAVAILABLE)
      << refused.error_message();
  streaming.join();
  EXPECT_EQ(stream.status.error_code(), StatusCode::UNAVAILABLE)
      << stream.status.error_message();
  EXPECT_GT(stream.ids.size(), 0u) << "no token before the drain";
  const std::optional<int> code = server->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value()) << "the server did not exit after SIGTERM";
  EXPECT_EQ(*code, 0);
  EXPECT_NE(server->Log().find("drain: snapshotted 1 of 1 session(s)"),
            std::string::npos)
      << server->Log().substr(0, 4000);
  EXPECT_TRUE(fs::exists(SnapshotFile(dir, id)));

  server = Spawn("sigterm_restart", {"--snapshot-dir", dir});
  ASSERT_NE(server, nullptr);
  stub = NewStub(server->address());
  EXPECT_EQ(TokensOf(*stub, id), tokens) << "restored a different session";
  const StreamResult after = DecodeGreedy(*stub, id, kContinuation);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.ids, expected) << "the restored session continues otherwise";
  EXPECT_EQ(server->Stop(), 0);
}

// ------------------------------------------------------ SIGKILL and restart

TEST(FaultTest, SigkillRestartRestoresTheLastSnapshotsAndStatesTheLoss) {
  const std::string dir = FreshDir("snap_sigkill");
  auto server = Spawn("sigkill", {"--snapshot-dir", dir});
  ASSERT_NE(server, nullptr);
  auto stub = NewStub(server->address());
  // A: snapshotted by the RPC, then grown further (that part is lost).
  int64_t a_snapshot = 0;
  const std::string a = CreatePrefilled(*stub, &a_snapshot);
  v1::SnapshotSessionResponse snap;
  ASSERT_TRUE(SnapshotSession(*stub, a, &snap).ok());
  EXPECT_GT(snap.bytes(), 0);
  EXPECT_TRUE(fs::exists(snap.path()));
  const std::vector<int32_t> expected = ContinuationOf(*stub, a);
  ASSERT_TRUE(Prefill(*stub, a, " More text after the snapshot.").status.ok());
  const StreamResult grown = DecodeGreedy(*stub, a, 20);
  ASSERT_TRUE(grown.status.ok());
  const int64_t a_killed = grown.session_tokens;
  // B: idle TTL 1 s; the janitor snapshots it before expiring it.
  int64_t b_tokens = 0;
  const std::string b = CreatePrefilled(*stub, &b_tokens, /*idle_ttl=*/1);
  EXPECT_TRUE(WaitForFile(SnapshotFile(dir, b), std::chrono::seconds(15)))
      << "no idle snapshot of " << b;
  // C: never snapshotted (lost entirely).
  int64_t c_tokens = 0;
  const std::string c = CreatePrefilled(*stub, &c_tokens);

  server->Signal(SIGKILL);
  EXPECT_EQ(server->Wait(milliseconds(10000)), 128 + SIGKILL);
  server = Spawn("sigkill_restart", {"--snapshot-dir", dir});
  ASSERT_NE(server, nullptr);
  stub = NewStub(server->address());
  EXPECT_EQ(TokensOf(*stub, a), a_snapshot);
  EXPECT_EQ(TokensOf(*stub, b), b_tokens);
  v1::SessionInfo info;
  EXPECT_EQ(GetSession(*stub, c, &info).error_code(), StatusCode::NOT_FOUND);
  std::cout << "SIGKILL loss: session " << a << " held " << a_killed
            << " tokens, restored " << a_snapshot << " from its SnapshotSession"
            << " snapshot (lost " << a_killed - a_snapshot << " tokens); "
            << "session " << b << " restored from its idle snapshot with all "
            << b_tokens << " tokens; session " << c << " (" << c_tokens
            << " tokens, never snapshotted) lost entirely\n";
  ::testing::Test::RecordProperty("lost_tokens_after_snapshot",
                                  static_cast<int>(a_killed - a_snapshot));
  const StreamResult after = DecodeGreedy(*stub, a, kContinuation);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.ids, expected) << "the restored session continues otherwise";
  EXPECT_EQ(server->Stop(), 0);
}

// ------------------------------------------------------ limits under load

// Outcomes of the load: status code -> calls, and RESOURCE_EXHAUSTED by
// the limit its message names.
struct LoadTally {
  std::mutex mu;
  std::map<std::string, int> codes;
  std::map<std::string, int> limits;
  void Add(const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    ++codes[CodeName(s.error_code())];
    if (s.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
      const std::string& m = s.error_message();
      ++limits[m.substr(0, m.find(' '))];
    }
  }
};

// One client: sessions, prefills (some too long), decodes, generates.
void LoadClient(const std::string& address, int index, Clock::time_point end,
                LoadTally* tally) {
  auto stub = NewStub(address);
  std::vector<std::string> owned;
  const std::string text(300 + 40 * index, 'a' + index);
  for (int round = 0; Clock::now() < end; ++round) {
    v1::SessionInfo info;
    grpc::Status st = CreateSession(*stub, {}, &info);
    tally->Add(st);
    if (st.ok()) owned.push_back(info.session_id());
    if (!st.ok()) std::this_thread::sleep_for(milliseconds(10));  // back off
    for (const std::string& id : owned) {
      tally->Add(Prefill(*stub, id, text).status);
      tally->Add(Prefill(*stub, id, std::string(1500, 'x')).status);
      v1::DecodeRequest req;
      req.set_session_id(id);
      req.set_text(" and?");
      req.mutable_sampling()->set_max_tokens(64);
      tally->Add(Decode(*stub, req).status);
    }
    v1::GenerateRequest gen;
    gen.set_prompt(text);
    gen.mutable_sampling()->set_max_tokens(8);
    tally->Add(Generate(*stub, gen).status);
    if (round % 4 == 3 && !owned.empty()) {  // churn
      tally->Add(CloseSession(*stub, owned.front()));
      owned.erase(owned.begin());
    }
  }
  for (const std::string& id : owned) tally->Add(CloseSession(*stub, id));
}

// Host KV bytes of all sessions (no forks here: nothing is shared).
int64_t HostBytesInUse(v1::ClusterKv::Stub& stub) {
  v1::ListSessionsResponse resp;
  if (!ListSessions(stub, &resp).ok()) return -1;
  int64_t total = 0;
  for (const auto& s : resp.sessions()) total += s.memory().host_bytes();
  return total;
}

TEST(FaultTest, LimitsUnderLoadGiveResourceExhaustedWithoutOom) {
  constexpr int64_t kMaxHost = int64_t{2} << 20;  // 2048 tokens
  auto server =
      Spawn("limits",
            {"--max-sessions=6", absl::StrCat("--max-host-kv-bytes=", kMaxHost),
             "--max-prompt-tokens=512", "--max-session-tokens=4096",
             "--max-queued-requests=2"});
  ASSERT_NE(server, nullptr);
  auto stub = NewStub(server->address());
  const int64_t rss_start = server->RssBytes();
  LoadTally tally;
  const auto end = Clock::now() + std::chrono::seconds(6);
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back(LoadClient, server->address(), i, end, &tally);
  }
  int64_t rss_peak = rss_start, host_peak = 0;
  while (Clock::now() < end) {
    rss_peak = std::max(rss_peak, server->RssBytes());
    host_peak = std::max(host_peak, HostBytesInUse(*stub));
    std::this_thread::sleep_for(milliseconds(50));
  }
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(server->Running()) << "the server died under load";
  std::cout << "limits under load:";
  for (const auto& [code, n] : tally.codes)
    std::cout << " " << code << "=" << n;
  std::cout << "; RESOURCE_EXHAUSTED by limit:";
  for (const auto& [limit, n] : tally.limits)
    std::cout << " " << limit << "=" << n;
  std::cout << "; RSS " << rss_start / 1048576.0 << " -> peak "
            << rss_peak / 1048576.0 << " MiB; host KV peak " << host_peak
            << " of " << kMaxHost << " bytes\n";
  for (const auto& [code, n] : tally.codes) {
    EXPECT_TRUE(code == "OK" || code == "RESOURCE_EXHAUSTED") << code;
  }
  for (const char* limit :
       {"max_sessions", "max_host_kv_bytes", "max_prompt_tokens"}) {
    EXPECT_GT(tally.limits[limit], 0) << limit << " never reached";
  }
  // Admission reserves K,V bytes per token, but a session's host bytes also
  // count its segments' k-means/Quest index (about 7% of their K,V with
  // this model), which the reservation leaves out: while segments are being
  // built the total may pass the limit by their index bytes.
  EXPECT_LE(host_peak, kMaxHost + kMaxHost / 10);
  if (host_peak > kMaxHost) {
    std::cout << "note: host KV peak passed --max-host-kv-bytes by "
              << host_peak - kMaxHost << " bytes (segment indexes)\n";
  }
  EXPECT_LT(rss_peak - rss_start, kRssGrowthBound) << "memory not bounded";
  v1::ServerInfo info;
  ASSERT_TRUE(GetServerInfo(*stub, &info).ok());
  EXPECT_EQ(info.capacity().free_host_kv_bytes(), kMaxHost);
  EXPECT_EQ(info.capacity().free_sessions(), 6);
  EXPECT_EQ(server->Stop(), 0);
}

}  // namespace
}  // namespace ckv::soak
