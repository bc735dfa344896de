// Helpers of the load/soak program and the fault tests: the real
// clusterkv-server binary run as a child process on 127.0.0.1:0 (port read
// from its log, resident memory from /proc), a tiny random model, and
// blocking ClusterKv calls that report their gRPC status (streams may be
// cancelled after some tokens or bounded by a deadline).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace ckv::soak {

namespace v1 = ::clusterkv::v1;

// Writes the random model of the soak and fault tests (4 layers, dim 128,
// 4 heads, 2 KV heads, byte vocabulary: 1 KiB of host KV per token) to
// `path` unless it exists.
absl::Status WriteSoakModel(const std::string& path);

// Resident set size of a process (VmRSS of /proc/PID/status); -1 when the
// process is gone or the file is unreadable.
int64_t ReadRssBytes(pid_t pid);

// One clusterkv-server child process; its stdout and stderr go to a log file.
class ServerProcess {
 public:
  // Starts `binary` with `args` (add "--listen 127.0.0.1:0" yourself) and
  // waits until the log says "listening on HOST:PORT" and the ClusterKv
  // service answers GetServerInfo; error (with the log's tail) otherwise.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      const std::string& log_path,
      std::chrono::seconds timeout = std::chrono::seconds(60));
  ~ServerProcess();  // SIGKILL if still running

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string address() const;
  const std::string& log_path() const { return log_path_; }
  std::string Log() const;  // the whole log
  int64_t RssBytes() const { return ReadRssBytes(pid_); }
  bool Running();  // not exited yet (reaps it when it has)

  void Signal(int sig) const;
  // Waits for the exit: the exit code, 128 + signal when killed by one, or
  // nullopt on timeout (the process keeps running).
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, then waits up to `timeout` (SIGKILL after it): the exit code.
  int Stop(std::chrono::seconds timeout = std::chrono::seconds(30));

 private:
  ServerProcess(pid_t pid, std::string log_path)
      : pid_(pid), log_path_(std::move(log_path)) {}
  absl::Status WaitReady(std::chrono::seconds timeout);

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  int port_ = 0;
  std::string log_path_;
};

std::unique_ptr<v1::ClusterKv::Stub> NewStub(const std::string& address);

// A ClientContext with a deadline `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithDeadline(
    std::chrono::milliseconds timeout);

// Outcome of a streaming call.
struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> ids;     // generated token ids (Decode, Generate)
  std::string text;             // their text pieces
  int64_t session_tokens = -1;  // from the summary; -1 without one
  int64_t input_tokens = 0;     // from the summary
};

// How a Decode or Generate stream is read.
struct StreamOptions {
  std::chrono::milliseconds timeout{60000};  // the call's deadline
  int cancel_after_tokens = -1;  // >= 0: TryCancel after this many tokens
};

// Prefill in `parts` messages (a UTF-8 character may be split between
// them); the first carries the session id. The server may end the call
// early (e.g. a too long input): the remaining writes are skipped.
StreamResult Prefill(
    v1::ClusterKv::Stub& stub, const std::string& id, const std::string& text,
    int parts = 1,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));
StreamResult Decode(v1::ClusterKv::Stub& stub, const v1::DecodeRequest& req,
                    const StreamOptions& options = {});
StreamResult Generate(v1::ClusterKv::Stub& stub, const v1::GenerateRequest& req,
                      const StreamOptions& options = {});
// Greedy Decode of exactly `n` tokens (EOS ignored) without input.
StreamResult DecodeGreedy(v1::ClusterKv::Stub& stub, const std::string& id,
                          int n);

// Unary calls with a 30 s deadline.
grpc::Status CreateSession(v1::ClusterKv::Stub& stub,
                           const v1::CreateSessionRequest& req,
                           v1::SessionInfo* info);
grpc::Status GetSession(v1::ClusterKv::Stub& stub, const std::string& id,
                        v1::SessionInfo* info);
grpc::Status ForkSession(v1::ClusterKv::Stub& stub, const std::string& id,
                         v1::SessionInfo* info);
grpc::Status CloseSession(v1::ClusterKv::Stub& stub, const std::string& id);
grpc::Status SnapshotSession(v1::ClusterKv::Stub& stub, const std::string& id,
                             v1::SnapshotSessionResponse* resp);
grpc::Status GetServerInfo(v1::ClusterKv::Stub& stub, v1::ServerInfo* info);
grpc::Status ListSessions(v1::ClusterKv::Stub& stub,
                          v1::ListSessionsResponse* resp);

// Polls GetSession until the session is not busy (a cancelled call's job
// may still hold it for a moment); the last status, info in *info.
grpc::Status WaitNotBusy(v1::ClusterKv::Stub& stub, const std::string& id,
                         std::chrono::milliseconds timeout,
                         v1::SessionInfo* info);

// "OK", "NOT_FOUND", ... for a gRPC status code.
const char* CodeName(grpc::StatusCode code);

}  // namespace ckv::soak
