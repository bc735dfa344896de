#include "tests/soak/soak_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "model/make_random.h"

extern char** environ;

namespace ckv::soak {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kUnaryTimeout{30000};

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Reads a Decode/Generate stream to its end.
StreamResult ReadDecodeStream(grpc::ClientContext& ctx,
                              grpc::ClientReader<v1::DecodeResponse>& reader,
                              const StreamOptions& options) {
  StreamResult r;
  v1::DecodeResponse resp;
  bool cancelled = false;
  if (options.cancel_after_tokens == 0) {
    ctx.TryCancel();
    cancelled = true;
  }
  while (reader.Read(&resp)) {
    if (resp.has_summary()) {
      r.session_tokens = resp.summary().session_tokens();
      r.input_tokens = resp.summary().input_tokens();
      continue;
    }
    if (resp.token().id() >= 0) r.ids.push_back(resp.token().id());
    r.text += resp.token().text();
    if (!cancelled && options.cancel_after_tokens > 0 &&
        static_cast<int>(r.ids.size()) >= options.cancel_after_tokens) {
      ctx.TryCancel();
      cancelled = true;
    }
  }
  r.status = reader.Finish();
  return r;
}

// The port of the first "listening on HOST:PORT" of a log; 0 if none yet.
int ListeningPort(const std::string& log) {
  constexpr char kMarker[] = "listening on ";
  const size_t at = log.find(kMarker);
  if (at == std::string::npos) return 0;
  const size_t end = log.find_first_of(" \n", at + sizeof(kMarker) - 1);
  if (end == std::string::npos) return 0;  // the line is incomplete
  const size_t colon = log.rfind(':', end);
  if (colon == std::string::npos || colon < at) return 0;
  int port = 0;
  for (size_t i = colon + 1; i < end; ++i) {
    if (log[i] < '0' || log[i] > '9') return 0;
    port = port * 10 + (log[i] - '0');
  }
  return port;
}

}  // namespace

absl::Status WriteSoakModel(const std::string& path) {
  if (std::filesystem::exists(path)) return absl::OkStatus();
  RandomModelSpec s;
  s.layers = 4;
  s.dim = 128;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 256;
  s.seed = 23;
  // Written next to the target and renamed: concurrent writers are safe.
  const std::string tmp = absl::StrCat(path, ".tmp", ::getpid());
  if (auto st = WriteRandomModel(s, tmp); !st.ok()) return st;
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename: ", ec.message()));
  return absl::OkStatus();
}

int64_t ReadRssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t kib = -1;
    fields >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args,
    const std::string& log_path, std::chrono::seconds timeout) {
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int err =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", binary, ": ", std::strerror(err)));
  }
  std::unique_ptr<ServerProcess> p(new ServerProcess(pid, log_path));
  if (auto st = p->WaitReady(timeout); !st.ok()) return st;
  return p;
}

ServerProcess::~ServerProcess() {
  if (Running()) {
    Signal(SIGKILL);
    Wait(milliseconds(10000));
  }
}

std::string ServerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::string ServerProcess::Log() const {
  std::ifstream in(log_path_);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

absl::Status ServerProcess::WaitReady(std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (!Running()) {
      const std::string log = Log();
      return absl::InternalError(absl::StrCat(
          "the server exited with ", exit_code_.value_or(-1), "; log tail: ",
          log.substr(log.size() > 2000 ? log.size() - 2000 : 0)));
    }
    if (port_ == 0) port_ = ListeningPort(Log());
    if (port_ != 0) {
      auto stub = NewStub(address());
      v1::ServerInfo info;
      if (GetServerInfo(*stub, &info).ok()) return absl::OkStatus();
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the server did not get ready; log ", log_path_));
}

bool ServerProcess::Running() {
  if (exit_code_.has_value()) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    exit_code_ = DecodeWaitStatus(status);
    return false;
  }
  return true;
}

void ServerProcess::Signal(int sig) const {
  if (!exit_code_.has_value()) kill(pid_, sig);
}

std::optional<int> ServerProcess::Wait(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Running()) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return exit_code_;
}

int ServerProcess::Stop(std::chrono::seconds timeout) {
  Signal(SIGTERM);
  if (auto code = Wait(timeout); code.has_value()) return *code;
  Signal(SIGKILL);
  return Wait(milliseconds(10000)).value_or(-1);
}

std::unique_ptr<v1::ClusterKv::Stub> NewStub(const std::string& address) {
  return v1::ClusterKv::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> ContextWithDeadline(milliseconds timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

StreamResult Prefill(v1::ClusterKv::Stub& stub, const std::string& id,
                     const std::string& text, int parts, milliseconds timeout) {
  auto ctx = ContextWithDeadline(timeout);
  auto stream = stub.Prefill(ctx.get());
  const size_t step = text.size() / std::max(1, parts) + 1;
  for (size_t i = 0; i == 0 || i < text.size(); i += step) {
    v1::PrefillRequest req;
    if (i == 0) req.set_session_id(id);
    req.set_text(text.substr(i, step));
    if (!stream->Write(req)) break;  // the server ended the call
  }
  stream->WritesDone();
  StreamResult r;
  v1::PrefillResponse resp;
  while (stream->Read(&resp)) {
    if (resp.has_summary()) {
      r.session_tokens = resp.summary().session_tokens();
      r.input_tokens = resp.summary().prompt_tokens();
    }
  }
  r.status = stream->Finish();
  return r;
}

StreamResult Decode(v1::ClusterKv::Stub& stub, const v1::DecodeRequest& req,
                    const StreamOptions& options) {
  auto ctx = ContextWithDeadline(options.timeout);
  auto reader = stub.Decode(ctx.get(), req);
  return ReadDecodeStream(*ctx, *reader, options);
}

StreamResult Generate(v1::ClusterKv::Stub& stub, const v1::GenerateRequest& req,
                      const StreamOptions& options) {
  auto ctx = ContextWithDeadline(options.timeout);
  auto reader = stub.Generate(ctx.get(), req);
  return ReadDecodeStream(*ctx, *reader, options);
}

StreamResult DecodeGreedy(v1::ClusterKv::Stub& stub, const std::string& id,
                          int n) {
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_sampling()->set_max_tokens(n);
  req.mutable_sampling()->set_ignore_eos(true);  // exactly n tokens
  return Decode(stub, req);
}

grpc::Status CreateSession(v1::ClusterKv::Stub& stub,
                           const v1::CreateSessionRequest& req,
                           v1::SessionInfo* info) {
  return stub.CreateSession(ContextWithDeadline(kUnaryTimeout).get(), req,
                            info);
}

grpc::Status GetSession(v1::ClusterKv::Stub& stub, const std::string& id,
                        v1::SessionInfo* info) {
  v1::GetSessionRequest req;
  req.set_session_id(id);
  return stub.GetSession(ContextWithDeadline(kUnaryTimeout).get(), req, info);
}

grpc::Status ForkSession(v1::ClusterKv::Stub& stub, const std::string& id,
                         v1::SessionInfo* info) {
  v1::ForkSessionRequest req;
  req.set_session_id(id);
  return stub.ForkSession(ContextWithDeadline(kUnaryTimeout).get(), req, info);
}

grpc::Status CloseSession(v1::ClusterKv::Stub& stub, const std::string& id) {
  v1::CloseSessionRequest req;
  req.set_session_id(id);
  v1::CloseSessionResponse resp;
  return stub.CloseSession(ContextWithDeadline(kUnaryTimeout).get(), req,
                           &resp);
}

grpc::Status SnapshotSession(v1::ClusterKv::Stub& stub, const std::string& id,
                             v1::SnapshotSessionResponse* resp) {
  v1::SnapshotSessionRequest req;
  req.set_session_id(id);
  return stub.SnapshotSession(ContextWithDeadline(kUnaryTimeout).get(), req,
                              resp);
}

grpc::Status GetServerInfo(v1::ClusterKv::Stub& stub, v1::ServerInfo* info) {
  return stub.GetServerInfo(ContextWithDeadline(kUnaryTimeout).get(), {}, info);
}

grpc::Status ListSessions(v1::ClusterKv::Stub& stub,
                          v1::ListSessionsResponse* resp) {
  return stub.ListSessions(ContextWithDeadline(kUnaryTimeout).get(), {}, resp);
}

grpc::Status WaitNotBusy(v1::ClusterKv::Stub& stub, const std::string& id,
                         milliseconds timeout, v1::SessionInfo* info) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const grpc::Status s = GetSession(stub, id, info);
    if (!s.ok() || !info->busy() || Clock::now() >= deadline) return s;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN_CODE";
}

}  // namespace ckv::soak
