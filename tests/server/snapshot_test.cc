// Durable sessions (--snapshot-dir): a server restarted on the same folder
// restores a session when a call first names it and continues it exactly as
// without the restart; unusable snapshots are reported and skipped; idle
// expiry and SnapshotSession write snapshots; Close deletes them. Also with
// the real clusterkv-server binary stopped by SIGTERM.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server_runner.h"
#include "tests/server/small_server_config.h"
#include "tests/model/test_util.h"

extern char** environ;

namespace ckv::server {
namespace {

namespace v1 = ::clusterkv::v1;
namespace fs = std::filesystem;
using ::grpc::ClientContext;
using ::grpc::StatusCode;

std::string ModelPath() {
  RandomModelSpec s;
  s.layers = 4;
  s.dim = 128;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 256;
  s.seed = 7;
  return ckv::testing::RandomModelPath("snapsvc", s);
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ckv::testing::TempPath(name);
  fs::remove_all(dir);
  return dir;
}

ServerConfig Config(const std::string& snapshot_dir) {
  ServerConfig c = testing::SmallServerConfig(ModelPath());
  c.snapshot_dir = snapshot_dir;
  return c;
}

const char kDoc[] =
    "Clustered keys recall what matters: a long document is prefilled once, "
    "forks answer questions, and snapshots keep sessions across restarts. "
    "The quick brown fox jumps over the lazy dog, again and again and again.";

// Calls of one server, over a loopback channel.
class Client {
 public:
  // `token`: sent as "authorization: Bearer TOKEN" when not empty.
  explicit Client(int port, std::string token = "")
      : token_(std::move(token)),
        stub_(v1::ClusterKv::NewStub(
            grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials()))) {}

  std::string Create(uint32_t idle_ttl = 0) {
    ClientContext ctx;
    Auth(&ctx);
    v1::CreateSessionRequest req;
    req.set_idle_ttl_seconds(idle_ttl);
    v1::SessionInfo info;
    EXPECT_TRUE(stub_->CreateSession(&ctx, req, &info).ok());
    return info.session_id();
  }
  grpc::Status Prefill(const std::string& id, const std::string& text) {
    ClientContext ctx;
    Auth(&ctx);
    auto stream = stub_->Prefill(&ctx);
    v1::PrefillRequest req;
    req.set_session_id(id);
    req.set_text(text);
    stream->Write(req);
    stream->WritesDone();
    v1::PrefillResponse r;
    while (stream->Read(&r)) {
    }
    return stream->Finish();
  }
  // Greedy tokens of one Decode call (empty on error, status in *status).
  std::vector<int32_t> Decode(const std::string& id, int n,
                              grpc::Status* status = nullptr) {
    ClientContext ctx;
    Auth(&ctx);
    v1::DecodeRequest req;
    req.set_session_id(id);
    req.mutable_sampling()->set_max_tokens(n);
    auto reader = stub_->Decode(&ctx, req);
    std::vector<int32_t> ids;
    v1::DecodeResponse r;
    while (reader->Read(&r)) {
      if (r.has_token() && r.token().id() >= 0) ids.push_back(r.token().id());
    }
    const grpc::Status s = reader->Finish();
    if (status != nullptr) *status = s;
    EXPECT_TRUE(status != nullptr || s.ok()) << s.error_message();
    return ids;
  }
  grpc::Status Get(const std::string& id, v1::SessionInfo* info) {
    ClientContext ctx;
    Auth(&ctx);
    v1::GetSessionRequest req;
    req.set_session_id(id);
    return stub_->GetSession(&ctx, req, info);
  }
  grpc::Status Fork(const std::string& id, std::string* child) {
    ClientContext ctx;
    Auth(&ctx);
    v1::ForkSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    const grpc::Status s = stub_->ForkSession(&ctx, req, &info);
    *child = info.session_id();
    return s;
  }
  grpc::Status Close(const std::string& id) {
    ClientContext ctx;
    Auth(&ctx);
    v1::CloseSessionRequest req;
    req.set_session_id(id);
    v1::CloseSessionResponse resp;
    return stub_->CloseSession(&ctx, req, &resp);
  }
  grpc::Status Snapshot(const std::string& id,
                        v1::SnapshotSessionResponse* resp) {
    ClientContext ctx;
    Auth(&ctx);
    v1::SnapshotSessionRequest req;
    req.set_session_id(id);
    return stub_->SnapshotSession(&ctx, req, resp);
  }
  int Sessions() {
    ClientContext ctx;
    Auth(&ctx);
    v1::ListSessionsResponse resp;
    EXPECT_TRUE(stub_->ListSessions(&ctx, {}, &resp).ok());
    return resp.sessions_size();
  }
  bool Ready() {
    ClientContext ctx;
    Auth(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(500));
    v1::ServerInfo info;
    return stub_->GetServerInfo(&ctx, {}, &info).ok();
  }

 private:
  void Auth(ClientContext* ctx) const {
    if (!token_.empty()) {
      ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
    }
  }
  std::string token_;
  std::unique_ptr<v1::ClusterKv::Stub> stub_;
};

std::unique_ptr<ClusterKvServer> Start(const ServerConfig& c) {
  auto s = ClusterKvServer::Start(c, nullptr);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// A session with the document and 5 decoded tokens, and the 12 tokens a
// fork of it decodes next (the continuation without any restart).
struct Prepared {
  std::string id;
  int64_t tokens = 0;
  std::vector<int32_t> continuation;
};

Prepared Prepare(Client& c) {
  Prepared p;
  p.id = c.Create();
  EXPECT_TRUE(c.Prefill(p.id, kDoc).ok());
  EXPECT_EQ(c.Decode(p.id, 5).size(), 5u);
  std::string child;
  EXPECT_TRUE(c.Fork(p.id, &child).ok());
  p.continuation = c.Decode(child, 12);
  EXPECT_EQ(p.continuation.size(), 12u);
  EXPECT_TRUE(c.Close(child).ok());
  v1::SessionInfo info;
  EXPECT_TRUE(c.Get(p.id, &info).ok());
  p.tokens = info.tokens();
  return p;
}

std::string SnapshotFile(const std::string& dir, const std::string& id) {
  return dir + "/" + id + ".ckvsnap";
}

TEST(ServerSnapshotTest, RestartRestoresOnFirstUseAndSkipsBadSnapshots) {
  const std::string dir = FreshDir("snapdir_restart");
  auto server = Start(Config(dir));
  ASSERT_NE(server, nullptr);
  Prepared p;
  std::string cut_id;
  {
    Client c(server->port());
    p = Prepare(c);
    v1::SnapshotSessionResponse snap;
    ASSERT_TRUE(c.Snapshot(p.id, &snap).ok());
    EXPECT_EQ(snap.path(), SnapshotFile(dir, p.id));
    EXPECT_EQ(snap.bytes(), static_cast<int64_t>(fs::file_size(snap.path())));
    EXPECT_GE(snap.seconds(), 0.0);
    cut_id = c.Create();
    ASSERT_TRUE(c.Prefill(cut_id, kDoc).ok());
  }
  server.reset();  // drain: every idle session is written
  ASSERT_TRUE(fs::exists(SnapshotFile(dir, cut_id)));
  fs::resize_file(SnapshotFile(dir, cut_id),
                  fs::file_size(SnapshotFile(dir, cut_id)) / 2);
  std::ofstream(SnapshotFile(dir, "s-garbage")) << std::string(100, 'x');
  std::ofstream(SnapshotFile(dir, "s-left") + ".tmp") << "interrupted";

  server = Start(Config(dir));
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  EXPECT_FALSE(fs::exists(SnapshotFile(dir, "s-left") + ".tmp"));
  EXPECT_EQ(c.Sessions(), 0);  // nothing is loaded before it is used
  // First use by ForkSession, then by Decode: both continue exactly.
  std::string child;
  ASSERT_TRUE(c.Fork(p.id, &child).ok());
  EXPECT_EQ(c.Decode(child, 12), p.continuation);
  EXPECT_EQ(c.Decode(p.id, 12), p.continuation);
  v1::SessionInfo info;
  ASSERT_TRUE(c.Get(p.id, &info).ok());
  EXPECT_EQ(info.tokens(), p.tokens + 12);  // every streamed token is in
  // Unusable snapshots: FAILED_PRECONDITION naming the problem, then
  // skipped (NOT_FOUND).
  grpc::Status s = c.Get(cut_id, &info);
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("truncated"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(c.Get(cut_id, &info).error_code(), StatusCode::NOT_FOUND);
  c.Decode("s-garbage", 3, &s);
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("bad magic"), std::string::npos)
      << s.error_message();
  // Close deletes the snapshot: gone for good.
  ASSERT_TRUE(c.Close(p.id).ok());
  EXPECT_FALSE(fs::exists(SnapshotFile(dir, p.id)));
  EXPECT_EQ(c.Get(p.id, &info).error_code(), StatusCode::NOT_FOUND);
  server.reset();
  fs::remove_all(dir);
}

TEST(ServerSnapshotTest, IdleExpiryWritesASnapshotFirst) {
  const std::string dir = FreshDir("snapdir_idle");
  auto server = Start(Config(dir));
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  const std::string id = c.Create(/*idle_ttl=*/1);
  ASSERT_TRUE(c.Prefill(id, kDoc).ok());
  v1::SessionInfo before;
  ASSERT_TRUE(c.Get(id, &before).ok());
  for (int i = 0; i < 100 && c.Sessions() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(c.Sessions(), 0) << "the janitor did not expire the session";
  EXPECT_TRUE(fs::exists(SnapshotFile(dir, id)));
  v1::SessionInfo after;
  ASSERT_TRUE(c.Get(id, &after).ok());  // restored
  EXPECT_EQ(after.tokens(), before.tokens());
  EXPECT_EQ(after.segments(), before.segments());
  EXPECT_EQ(after.idle_ttl_seconds(), 1u);
  EXPECT_EQ(c.Decode(id, 4).size(), 4u);
  server.reset();
  fs::remove_all(dir);
}

TEST(ServerSnapshotTest, SnapshotSessionNeedsASnapshotDir) {
  auto server = Start(Config(""));
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  const std::string id = c.Create();
  v1::SnapshotSessionResponse resp;
  const grpc::Status s = c.Snapshot(id, &resp);
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("--snapshot-dir"), std::string::npos);
  EXPECT_EQ(c.Snapshot("s-nope", &resp).error_code(),
            StatusCode::FAILED_PRECONDITION);
}

// The tenant is part of the snapshot: after a restart the session is still
// its owner's only (another tenant gets NOT_FOUND and loads nothing).
TEST(ServerSnapshotTest, RestoredSessionKeepsItsTenant) {
  const std::string dir = FreshDir("snapdir_tenant");
  const std::string tokens = ckv::testing::TempPath("snap_tokens.txt");
  std::ofstream(tokens) << "token-a team-a\ntoken-b team-b\n";
  ServerConfig config = Config(dir);
  config.auth_tokens_file = tokens;
  auto server = Start(config);
  ASSERT_NE(server, nullptr);
  std::string id;
  {
    Client a(server->port(), "token-a");
    id = a.Create();
    ASSERT_TRUE(a.Prefill(id, kDoc).ok());
  }
  server.reset();
  server = Start(config);
  ASSERT_NE(server, nullptr);
  Client a(server->port(), "token-a"), b(server->port(), "token-b");
  v1::SessionInfo info;
  EXPECT_EQ(b.Get(id, &info).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(a.Sessions(), 0);  // b's attempt did not load it
  ASSERT_TRUE(a.Get(id, &info).ok());
  EXPECT_GT(info.tokens(), 0);
  EXPECT_EQ(b.Get(id, &info).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(b.Close(id).error_code(), StatusCode::NOT_FOUND);
  EXPECT_TRUE(fs::exists(SnapshotFile(dir, id)));
  server.reset();
  fs::remove_all(dir);
  fs::remove(tokens);
}

// ------------------------------------------- the real binary and SIGTERM

class ServerProcess {
 public:
  ServerProcess(const std::string& dir, const std::string& log) : log_(log) {
    const ServerConfig c = Config(dir);
    std::vector<std::string> args = {CLUSTERKV_SERVER_BIN,
                                     "--model",
                                     c.model_path,
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
                                     "--max-session-tokens",
                                     "8192",
                                     "--snapshot-dir",
                                     dir};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(
        posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ),
        0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServerProcess() {
    if (pid_ > 0) Stop();
  }

  // The port once the model is loaded; 0 on failure.
  int WaitReady() {
    const std::string listening = "listening on 127.0.0.1:";
    for (int i = 0; i < 300; ++i) {
      std::ifstream in(log_);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      const size_t at = text.find(listening);
      const int port = at == std::string::npos
                           ? 0
                           : std::atoi(text.c_str() + at + listening.size());
      if (port > 0 && Client(port).Ready()) return port;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }
  // SIGTERM (drain); the exit status.
  int Stop() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  std::string log_;
  pid_t pid_ = 0;
};

TEST(ServerSnapshotTest, ProcessRestartAfterSigtermContinuesExactly) {
  const std::string dir = FreshDir("snapdir_process");
  const std::string log = ckv::testing::TempPath("snap_server.log");
  Prepared p;
  {
    ServerProcess server(dir, log);
    const int port = server.WaitReady();
    ASSERT_GT(port, 0) << "server did not start; log " << log;
    Client c(port);
    p = Prepare(c);
    EXPECT_EQ(server.Stop(), 0);
  }
  EXPECT_TRUE(fs::exists(SnapshotFile(dir, p.id)));
  ServerProcess server(dir, log);
  const int port = server.WaitReady();
  ASSERT_GT(port, 0) << "server did not restart; log " << log;
  Client c(port);
  EXPECT_EQ(c.Decode(p.id, 12), p.continuation);
  EXPECT_EQ(server.Stop(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ckv::server
