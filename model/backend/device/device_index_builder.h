// The device backend's IndexBuilder (model/kv/index_builder.h): the
// k-means of closing segments as device work on a low-priority stream, so
// that it yields to the decode step's ops. Keys in the pinned arena are
// read in place through their mapped device view (zero copy); others go
// up through pinned staging. One op per job runs the k-means contract
// (on the fake: the CPU's kernels::cpu::KMeansBatch, so the clusters equal
// the CPU builder's bit for bit); the results come back in one D2H copy
// that the host waits for through an event, and the host store stays
// authoritative (it writes the index, as with the CPU builder). A runtime
// error is kept (status()) and the jobs are solved on the host instead,
// so a store never lacks its index. Thread-safe (a mutex: jobs from the
// ClusterWorker and from inline clustering run one call at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "kernels/device/runtime.h"
#include "model/backend/device/grow_buffer.h"
#include "model/kv/host_arena.h"
#include "model/kv/index_builder.h"

namespace ckv {

// Faults planted on purpose (tests only).
struct DeviceIndexBuilderDebug {
  // The host reads the results without waiting for the event.
  bool skip_event_wait = false;
};

class DeviceIndexBuilder final : public IndexBuilder {
 public:
  // `arena`: whose blocks are read in place (may be null). The runtime
  // must outlive the builder, which keeps `keep_alive` (or null).
  DeviceIndexBuilder(kernels::device::Runtime& runtime,
                     std::shared_ptr<void> keep_alive,
                     std::shared_ptr<const HostArena> arena,
                     DeviceIndexBuilderDebug debug = {});
  ~DeviceIndexBuilder() override;

  void KMeans(absl::Span<const ClusterJob> jobs,
              std::vector<ClusterResult>* out) override;
  // The device does the work: index time is wall time.
  bool uses_other_threads() const override { return true; }

  absl::Status status() const;
  // Jobs solved on the device; keys read in place (bytes) and staged.
  int64_t device_jobs() const;
  int64_t mapped_key_bytes() const;
  int64_t staged_key_bytes() const;

 private:
  using DevPtr = kernels::device::DevPtr;
  struct Place;  // device_index_builder.cc

  bool Ok(const absl::Status& s);
  bool Solve(absl::Span<const ClusterJob> jobs,
             std::vector<ClusterResult>* out);
  void StageSeeds(const ClusterJob& j, int64_t off);

  kernels::device::Runtime& rt_;
  std::shared_ptr<void> keep_alive_;
  std::shared_ptr<const HostArena> arena_;
  DeviceIndexBuilderDebug debug_;
  mutable std::mutex mu_;
  kernels::device::Stream stream_;
  kernels::device::Event done_;
  PinnedBuffer stage_host_;   // staged keys
  PinnedBuffer result_host_;  // results read back
  DeviceBuffer stage_dev_, result_dev_, scratch_dev_;
  absl::Status status_;
  int64_t device_jobs_ = 0, mapped_bytes_ = 0, staged_bytes_ = 0;
};

}  // namespace ckv
