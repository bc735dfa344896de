// The device backend's LayerPlanner (model/kv/store_env.h): clusterkv's
// selection of one sparse layer of a decode query on the device, with the
// phase ops of kernels/device/ — ScoreClustersOp per (KV head, segment)
// over the segments' F16 centroid panels (the CPU's exact bits), then
// SelectBlocksOp per planned query (each query head, or the group's summed
// query with gqa_selection = per_kv_head) — so the device gives the
// policy's plans exactly. Stage 2a of docs/device-runtime.md: the
// per-segment index (panels, cluster offsets, members) is uploaded with
// every call through one pinned staging buffer and the plans come back
// with one synchronisation per call; resident segment tables and plans
// consumed on the device (residency, row lists) are the next stage.
// One call at a time (a mutex); the runtime must outlive the planner, which
// keeps `keep_alive` (the runtime's owner, or null).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "kernels/device/runtime.h"
#include "model/kv/store_env.h"

namespace ckv {

// Faults planted on purpose, for the tests that show the cross-backend
// comparison catches them (never set outside tests).
struct DevicePlannerDebug {
  bool budget_one_short = false;  // plans budget - 1 tokens
};

class DevicePlanner final : public LayerPlanner {
 public:
  DevicePlanner(kernels::device::Runtime& runtime,
                std::shared_ptr<void> keep_alive,
                DevicePlannerDebug debug = {});
  ~DevicePlanner() override;

  bool Plans(const KvStoreConfig& config) const override;
  bool PlanLayer(const KvStoreConfig& config, const KvShape& shape,
                 const std::vector<const Segment*>& segments, int layer,
                 const float* q, HeadPlan* plans) override;

  // The first runtime error (every later call returns false), or OK.
  absl::Status status() const;
  // Layers planned on the device so far.
  int64_t layers_planned() const;

 private:
  using DevPtr = kernels::device::DevPtr;
  struct Buffers {
    char* in_host = nullptr;   // pinned: what one call uploads
    char* out_host = nullptr;  // pinned: the plans it reads back
    DevPtr in_dev, work_dev;   // device: the upload; scores, plans, scratch
    int64_t in_bytes = 0, out_bytes = 0, work_bytes = 0;
  };
  struct Layout;  // device_planner.cc

  bool Ok(const absl::Status& s);
  bool Reserve(const Layout& l);
  void FreeBuffers();
  void Fill(const Layout& l, const KvStoreConfig& config, const KvShape& shape,
            const std::vector<const Segment*>& segments, int layer,
            const float* q);
  bool Launch(const Layout& l, const KvStoreConfig& config,
              const KvShape& shape, const std::vector<const Segment*>& segments,
              int layer);
  void ReadPlans(const Layout& l, const KvShape& shape, bool shared,
                 HeadPlan* plans) const;

  kernels::device::Runtime& rt_;
  std::shared_ptr<void> keep_alive_;
  DevicePlannerDebug debug_;
  mutable std::mutex mu_;
  kernels::device::Stream stream_;
  Buffers buf_;
  absl::Status status_;
  int64_t layers_planned_ = 0;
};

}  // namespace ckv
