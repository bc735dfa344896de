// The gRPC mode of service_bench: a ClusterKvServer started in this process
// on 127.0.0.1:0 (the whole service: reactors, admission, request logs and,
// with --metrics, a metrics registry) and one client thread per session, each
// with its own channel (its own TCP connection), doing CreateSession,
// Prefill, then a blocking streaming Decode that timestamps every TokenEvent
// as it is read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/service_workload.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "server/metrics.h"
#include "server/server_runner.h"

namespace ckv::bench {

class GrpcMode final : public ServiceMode {
 public:
  // Starts the server and connects `channels` channels.
  static absl::StatusOr<std::unique_ptr<GrpcMode>> Start(
      const server::ServerConfig& config, bool metrics, int channels);
  ~GrpcMode() override;

  const char* name() const override { return "grpc"; }
  absl::StatusOr<RawRun> Run(const Workload& w) override;

 private:
  GrpcMode() = default;
  absl::Status Connect(int channels);

  std::unique_ptr<server::ServerMetrics> metrics_;
  std::unique_ptr<server::ClusterKvServer> server_;
  std::vector<std::unique_ptr<clusterkv::v1::ClusterKv::Stub>> stubs_;
};

}  // namespace ckv::bench
