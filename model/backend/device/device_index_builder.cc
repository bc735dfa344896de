#include "model/backend/device/device_index_builder.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/device/op_launchers.h"
#include "kernels/ref/kmeans_contract.h"

namespace ckv {

namespace dev = kernels::device;

namespace {

constexpr int64_t kAlign = 64;

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

using Header = dev::KMeansHeader;

// What a job's result occupies on the device and in pinned memory.
int64_t ResultBytes(const ClusterJob& j) {
  return dev::KMeansResultLayout(j.n, j.k, j.dim).bytes;
}

// Elements of the job's keys: n rows of `stride`, the last `dim` long.
int64_t KeyBytes(const ClusterJob& j) {
  return kernels::RowBytes(j.dtype, (j.n - 1) * j.stride + j.dim);
}

}  // namespace

// Where one job's keys are read from and its result written.
struct DeviceIndexBuilder::Place {
  DevPtr keys;
  int64_t staged = -1;  // offset in the staging, or -1: mapped in place
  int64_t result = 0;   // offset in the result buffers
  int64_t seeds = -1;   // offset of the staged seeds (device k-means)
};

DeviceIndexBuilder::DeviceIndexBuilder(dev::Runtime& runtime,
                                       std::shared_ptr<void> keep_alive,
                                       std::shared_ptr<const HostArena> arena,
                                       DeviceIndexBuilderDebug debug)
    : rt_(runtime),
      keep_alive_(std::move(keep_alive)),
      arena_(std::move(arena)),
      debug_(debug) {
  auto st = rt_.CreateStream(dev::kLowestPriority);
  if (Ok(st.status())) stream_ = *st;
  auto ev = rt_.CreateEvent();
  if (Ok(ev.status())) done_ = *ev;
}

DeviceIndexBuilder::~DeviceIndexBuilder() {
  Release(rt_, &stage_host_);
  Release(rt_, &result_host_);
  Release(rt_, &stage_dev_);
  Release(rt_, &result_dev_);
  Release(rt_, &scratch_dev_);
}

absl::Status DeviceIndexBuilder::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

int64_t DeviceIndexBuilder::device_jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_jobs_;
}

int64_t DeviceIndexBuilder::mapped_key_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_bytes_;
}

int64_t DeviceIndexBuilder::staged_key_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staged_bytes_;
}

bool DeviceIndexBuilder::Ok(const absl::Status& s) {
  if (!s.ok() && status_.ok()) status_ = s;
  return s.ok();
}

void DeviceIndexBuilder::KMeans(absl::Span<const ClusterJob> jobs,
                                std::vector<ClusterResult>* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok() && Solve(jobs, out)) return;
  }
  // A device error: the host solves them, so the store gets its index.
  CpuIndexBuilder().KMeans(jobs, out);
}

bool DeviceIndexBuilder::Solve(absl::Span<const ClusterJob> jobs,
                               std::vector<ClusterResult>* out) {
  std::vector<Place> places(jobs.size());
  const dev::OpLaunchers* launchers = rt_.launchers();
  int64_t staged = 0, results = 0, scratch = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ClusterJob& j = jobs[i];
    const int64_t bytes = KeyBytes(j);
    if (arena_ != nullptr && arena_->Contains(j.keys, bytes)) {
      auto mapped = rt_.MappedPointer(j.keys);
      if (!Ok(mapped.status())) return false;
      places[i].keys = *mapped;
      mapped_bytes_ += bytes;
    } else {
      places[i].staged = staged;
      staged += AlignUp(bytes);
      staged_bytes_ += bytes;
    }
    places[i].result = results;
    results += ResultBytes(j);
    if (launchers != nullptr) {  // the device k-means' seeds, staged
      places[i].seeds = staged;
      staged += AlignUp(int64_t{j.k} * 4);
      scratch =
          std::max(scratch, launchers->KMeansScratchBytes(j.n, j.k, j.dim));
    }
  }
  // The previous call waited for its work: the buffers are free.
  if (!Ok(Grow(rt_, staged, &stage_host_)) ||
      !Ok(Grow(rt_, staged, &stage_dev_)) ||
      !Ok(Grow(rt_, results, &result_host_)) ||
      !Ok(Grow(rt_, results, &result_dev_)) ||
      !Ok(Grow(rt_, scratch, &scratch_dev_))) {
    return false;
  }
  if (staged > 0) {
    if (!Ok(rt_.HostWrite(stage_host_.host, staged))) return false;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (places[i].seeds >= 0) StageSeeds(jobs[i], places[i].seeds);
      if (places[i].staged < 0) continue;
      std::memcpy(stage_host_.host + places[i].staged, jobs[i].keys,
                  KeyBytes(jobs[i]));
      places[i].keys = stage_dev_.ptr + places[i].staged;
    }
    if (!Ok(rt_.CopyH2D(stage_dev_.ptr, stage_host_.host, staged, stream_))) {
      return false;
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ClusterJob job = jobs[i];
    const DevPtr keys = places[i].keys;
    const DevPtr res = result_dev_.ptr + places[i].result;
    const int64_t key_bytes = KeyBytes(job), res_bytes = ResultBytes(job);
    dev::Op op;
    op.name = "kmeans";
    op.reads = {{keys, key_bytes}};
    op.writes = {{res, res_bytes}};
    op.body = [job, keys, res, key_bytes, res_bytes](dev::OpContext& c) {
      ClusterJob local = job;
      local.keys = c.In<char>(keys, key_bytes);
      std::vector<ClusterResult> r;
      CpuIndexBuilder().KMeans({&local, 1}, &r);
      char* o = c.Out<char>(res, res_bytes);
      const dev::KMeansLayout l =
          dev::KMeansResultLayout(job.n, job.k, job.dim);
      const Header h{r[0].k, r[0].iterations, r[0].key_scorings};
      std::memcpy(o, &h, sizeof(h));
      std::memcpy(o + l.centroids, r[0].centroids.data(),
                  r[0].centroids.size() * 4);
      std::memcpy(o + l.assignment, r[0].assignment.data(),
                  r[0].assignment.size() * 4);
      std::memcpy(o + l.sizes, r[0].sizes.data(), r[0].sizes.size() * 4);
    };
    if (launchers != nullptr) {
      dev::KMeansArgs a;
      a.keys = keys;
      a.seeds = stage_dev_.ptr + places[i].seeds;
      a.result = res;
      a.scratch = scratch_dev_.ptr;
      a.scratch_bytes = scratch_dev_.bytes;
      a.type = job.dtype;
      a.stride = job.stride;
      a.n = job.n;
      a.dim = job.dim;
      a.k = job.k;
      a.max_iters = job.max_iters;
      a.metric = static_cast<int32_t>(KernelMetric(job.metric));
      op.reads.push_back({a.seeds, int64_t{job.k} * 4});
      op.writes.push_back({a.scratch, a.scratch_bytes});
      op.device_launch = [launchers, a](void* st) {
        return launchers->KMeans(a, st);
      };
    }
    if (!Ok(rt_.Launch(std::move(op), stream_))) return false;
  }
  if (!Ok(rt_.CopyD2H(result_host_.host, result_dev_.ptr, results, stream_)) ||
      !Ok(rt_.Record(done_, stream_))) {
    return false;
  }
  if (!debug_.skip_event_wait && !Ok(rt_.Synchronize(done_))) return false;
  if (!Ok(rt_.HostRead(result_host_.host, results))) return false;
  out->resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ClusterJob& j = jobs[i];
    const char* p = result_host_.host + places[i].result;
    Header h;
    std::memcpy(&h, p, sizeof(h));
    if (h.k < 1 || h.k > j.k) {
      return Ok(absl::InternalError(absl::StrCat("device k-means gave ", h.k,
                                                 " clusters for k = ", j.k)));
    }
    ClusterResult& r = (*out)[i];
    r.k = static_cast<int>(h.k);
    r.iterations = static_cast<int>(h.iterations);
    r.key_scorings = h.key_scorings;
    const dev::KMeansLayout l = dev::KMeansResultLayout(j.n, j.k, j.dim);
    const auto* centroids = reinterpret_cast<const float*>(p + l.centroids);
    r.centroids.assign(centroids, centroids + h.k * j.dim);
    const auto* assignment = reinterpret_cast<const int32_t*>(p + l.assignment);
    r.assignment.assign(assignment, assignment + j.n);
    const auto* sizes = reinterpret_cast<const int32_t*>(p + l.sizes);
    r.sizes.assign(sizes, sizes + h.k);
  }
  device_jobs_ += static_cast<int64_t>(jobs.size());
  return true;
}

// The CPU's seeds of `j` (ref::contract::KMeansSeeds) as int32 at `off`
// of the key staging.
void DeviceIndexBuilder::StageSeeds(const ClusterJob& j, int64_t off) {
  const std::vector<int64_t> seeds =
      kernels::ref::contract::KMeansSeeds(j.n, j.k, j.seed);
  auto* out = reinterpret_cast<int32_t*>(stage_host_.host + off);
  for (int c = 0; c < j.k; ++c) {
    out[c] =
        c < static_cast<int>(seeds.size()) ? static_cast<int32_t>(seeds[c]) : 0;
  }
}

}  // namespace ckv
