#include "bench/loopback_server.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace ckv::bench {

server::ServerConfig LoopbackServerConfig(const std::string& model_path,
                                          int threads, int prefill_chunk) {
  server::ServerConfig c;
  c.model_path = model_path;
  c.listen_address = "127.0.0.1:0";
  c.metrics_address = "";
  c.threads =
      threads > 0
          ? threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.prefill_chunk = prefill_chunk;
  return c;
}

absl::StatusOr<std::vector<std::unique_ptr<clusterkv::v1::ClusterKv::Stub>>>
ConnectStubs(int port, int n) {
  constexpr auto kConnectTimeout = std::chrono::seconds(10);
  const std::string target = absl::StrCat("127.0.0.1:", port);
  std::vector<std::unique_ptr<clusterkv::v1::ClusterKv::Stub>> stubs;
  for (int i = 0; i < n; ++i) {
    // Separate channels share one connection unless each has its own
    // subchannel pool.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                   kConnectTimeout)) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", target));
    }
    stubs.push_back(clusterkv::v1::ClusterKv::NewStub(channel));
  }
  return stubs;
}

}  // namespace ckv::bench
