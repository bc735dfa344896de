// What the gRPC benchmarks (service_bench, stall_bench) share: the
// configuration of a ClusterKvServer in the benchmark's own process on
// 127.0.0.1:0, and client stubs each on its own channel (its own TCP
// connection, as separate real clients would have).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "server/server_config.h"

namespace ckv::bench {

// `threads` 0: every hardware thread. No metrics listener.
server::ServerConfig LoopbackServerConfig(const std::string& model_path,
                                          int threads, int prefill_chunk);

// `n` stubs connected to 127.0.0.1:`port` (UNAVAILABLE after 10 s).
absl::StatusOr<std::vector<std::unique_ptr<clusterkv::v1::ClusterKv::Stub>>>
ConnectStubs(int port, int n);

}  // namespace ckv::bench
