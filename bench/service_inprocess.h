// The in-process mode of service_bench: the server's engine objects (model,
// cluster worker, SessionManager, EngineLoop) built as ClusterKvServer builds
// them, driven directly with the JobSpecs the gRPC reactors submit; tokens
// are timestamped in the on_token callbacks. No gRPC, no admission, no
// metrics: the reference the service is compared against.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/service_workload.h"
#include "model/kv/cluster_worker.h"
#include "server/engine_loop.h"
#include "server/session_manager.h"

namespace ckv::bench {

class InProcessMode final : public ServiceMode {
 public:
  static absl::StatusOr<std::unique_ptr<InProcessMode>> Start(
      const server::ServerConfig& config);
  ~InProcessMode() override;

  const char* name() const override { return "inprocess"; }
  absl::StatusOr<RawRun> Run(const Workload& w) override;
  const Model& model() const { return *model_; }

 private:
  InProcessMode() = default;
  // Creates the sessions and runs their prompt jobs; returns their ids.
  absl::StatusOr<std::vector<std::string>> Prefill(const Workload& w);
  // Submits every Decode job at once and waits for them.
  absl::Status Decode(const Workload& w, const std::vector<std::string>& ids,
                      RawRun& run);

  std::unique_ptr<Model> model_;
  std::unique_ptr<ClusterWorker> worker_;
  std::unique_ptr<server::SessionManager> sessions_;
  std::unique_ptr<server::EngineLoop> engine_;
};

}  // namespace ckv::bench
