// Link probe of the device check (scripts/device-check.sh, stage "link"):
// how fast the host link and the device memory move the bytes that
// offloaded ClusterKV moves. Each figure is the mean over --reps timed reps
// (CUDA events on one non-blocking stream, after warm-ups):
//   h2d_pinned, d2h_pinned  cudaMemcpyAsync between pinned host memory and
//                           device memory;
//   d2d                     cudaMemcpyAsync within device memory (bytes
//                           copied; the memory moves twice that: read and
//                           write);
//   gather_zero_copy        kernels::cuda::GatherRows reading rows of 256 B
//                           (head_dim 128, F16) straight from mapped pinned
//                           host memory, in by-cluster runs of 16..64
//                           contiguous rows at random offsets of a pool (the
//                           miss fetch of the offloaded cluster cache);
//   gather_device           the same gather from a device-resident copy of
//                           the pool (the kernel without the link).
// GB/s are 1e9 payload bytes per second. The gathered rows are checked byte
// for byte against the pool. Output: one line of JSON on stdout, or in
// --json FILE. Without a CUDA device: a message naming the missing device
// on stderr and exit status 2. --dry-run touches no device and prints the
// same JSON with null figures (exit 0).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gather.h"
#include "nlohmann/json.hpp"

namespace ckv::bench {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kRowBytes = 256;  // head_dim 128, F16
constexpr int kWarmups = 2;

struct Options {
  bool dry_run = false;
  std::string json_path;
  int device = 0;
  int reps = 10;
  int64_t copy_mib = 256;
  int64_t pool_mib = 1024;
  int64_t gather_mib = 256;
  int run_min = 16;
  int run_max = 64;
  uint64_t seed = 1;
};

constexpr const char* kUsage =
    "usage: link_probe [--dry-run] [--json FILE] [--device N] [--reps N]\n"
    "                  [--copy-mib N] [--pool-mib N] [--gather-mib N]\n"
    "                  [--run-rows MIN,MAX] [--seed N]\n";

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "link_probe: %s\n%s", why.c_str(), kUsage);
  std::exit(64);
}

int64_t ParseInt(const std::string& flag, const char* text, int64_t lo) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < lo) {
    Usage(flag + " needs an integer >= " + std::to_string(lo));
  }
  return v;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--dry-run") {
      o.dry_run = true;
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "--device") {
      o.device = static_cast<int>(ParseInt(a, value(), 0));
    } else if (a == "--reps") {
      o.reps = static_cast<int>(ParseInt(a, value(), 1));
    } else if (a == "--copy-mib") {
      o.copy_mib = ParseInt(a, value(), 1);
    } else if (a == "--pool-mib") {
      o.pool_mib = ParseInt(a, value(), 1);
    } else if (a == "--gather-mib") {
      o.gather_mib = ParseInt(a, value(), 1);
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(ParseInt(a, value(), 0));
    } else if (a == "--run-rows") {
      const std::string v = value();
      const size_t comma = v.find(',');
      if (comma == std::string::npos) Usage("--run-rows needs MIN,MAX");
      o.run_min = static_cast<int>(ParseInt(a, v.substr(0, comma).c_str(), 1));
      o.run_max =
          static_cast<int>(ParseInt(a, v.substr(comma + 1).c_str(), o.run_min));
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      Usage("unknown argument " + a);
    }
  }
  if (o.pool_mib * kMiB / kRowBytes > INT32_MAX) Usage("--pool-mib too big");
  return o;
}

// The gather's source rows: runs of run_min..run_max contiguous rows, each
// inside its own slot of run_max rows (so no row is read twice), slots in a
// random order, until gather_mib of rows are listed or the pool is used up.
struct GatherPlan {
  int64_t pool_rows = 0;
  int64_t runs = 0;
  std::vector<int32_t> rows;
};

GatherPlan PlanGather(const Options& o) {
  GatherPlan p;
  p.pool_rows = o.pool_mib * kMiB / kRowBytes;
  const int64_t slots = p.pool_rows / o.run_max;
  const int64_t want = o.gather_mib * kMiB / kRowBytes;
  std::vector<int64_t> order(slots);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> len_of(o.run_min, o.run_max);
  for (int64_t slot : order) {
    if (static_cast<int64_t>(p.rows.size()) >= want) break;
    const int len = len_of(rng);
    const int shift =
        std::uniform_int_distribution<int>(0, o.run_max - len)(rng);
    const int64_t first = slot * o.run_max + shift;
    for (int j = 0; j < len; ++j) {
      p.rows.push_back(static_cast<int32_t>(first + j));
    }
    ++p.runs;
  }
  return p;
}

struct Figure {
  int64_t bytes = 0;
  bool measured = false;
  double mean_ms = 0, min_ms = 0, max_ms = 0;
};

Json ToJson(const Figure& f) {
  auto gbps = [&](double ms) -> Json {
    if (!f.measured || ms <= 0) return nullptr;
    return std::round(f.bytes / (ms * 1e6) * 1000) / 1000;
  };
  Json j;
  j["gbps"] = gbps(f.mean_ms);
  j["min_gbps"] = gbps(f.max_ms);
  j["max_gbps"] = gbps(f.min_ms);
  j["mean_ms"] =
      f.measured ? Json(std::round(f.mean_ms * 1e4) / 1e4) : Json(nullptr);
  j["bytes"] = f.bytes;
  return j;
}

[[noreturn]] void Die(const std::string& what, cudaError_t e) {
  std::fprintf(stderr, "link_probe: %s: %s (error %d)\n", what.c_str(),
               cudaGetErrorString(e), static_cast<int>(e));
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(what, e);
}

// Times `reps` runs of fn on stream s (after kWarmups untimed ones).
Figure Time(cudaStream_t s, int reps, int64_t bytes, const char* what,
            const std::function<cudaError_t()>& fn) {
  std::vector<cudaEvent_t> ev(reps + 1);
  for (auto& e : ev) Check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < kWarmups; ++i) Check(fn(), what);
  Check(cudaEventRecord(ev[0], s), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) {
    Check(fn(), what);
    Check(cudaEventRecord(ev[i + 1], s), "cudaEventRecord");
  }
  Check(cudaEventSynchronize(ev[reps]), what);
  Figure f;
  f.bytes = bytes;
  f.measured = true;
  f.min_ms = 1e300;
  double sum = 0;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "cudaEventElapsedTime");
    sum += ms;
    f.min_ms = std::min<double>(f.min_ms, ms);
    f.max_ms = std::max<double>(f.max_ms, ms);
  }
  f.mean_ms = sum / reps;
  for (auto& e : ev) cudaEventDestroy(e);
  return f;
}

// Fills n bytes with a fixed pseudo-random pattern (splitmix64).
void FillPattern(uint8_t* p, int64_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(p + i, &z, 8);
  }
}

// Rows of `got` (gathered in plan order) that differ from the pool.
int64_t Mismatches(const uint8_t* got, const uint8_t* pool,
                   const GatherPlan& plan) {
  int64_t bad = 0;
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    bad +=
        std::memcmp(got + i * kRowBytes,
                    pool + int64_t{plan.rows[i]} * kRowBytes, kRowBytes) != 0;
  }
  return bad;
}

struct Results {
  Figure h2d, d2h, d2d, gather_zero_copy, gather_device;
  Json device = Json::object();
  Json verified = nullptr;
};

Json Report(const Options& o, const GatherPlan& plan, const Results& r) {
  Json j;
  j["probe"] = "link_probe";
  j["dry_run"] = o.dry_run;
  j["device"] = r.device;
  Json c;
  c["reps"] = o.reps;
  c["warmups"] = kWarmups;
  c["copy_bytes"] = o.copy_mib * kMiB;
  c["pool_bytes"] = plan.pool_rows * kRowBytes;
  c["row_bytes"] = kRowBytes;
  c["run_rows_min"] = o.run_min;
  c["run_rows_max"] = o.run_max;
  c["gather_runs"] = plan.runs;
  c["gather_rows"] = static_cast<int64_t>(plan.rows.size());
  c["seed"] = o.seed;
  j["config"] = c;
  Json res;
  res["h2d_pinned"] = ToJson(r.h2d);
  res["d2h_pinned"] = ToJson(r.d2h);
  res["d2d"] = ToJson(r.d2d);
  res["gather_zero_copy"] = ToJson(r.gather_zero_copy);
  res["gather_device"] = ToJson(r.gather_device);
  j["results"] = res;
  j["gather_verified"] = r.verified;
  j["units"] =
      "GB/s = 1e9 payload bytes/s; mean over reps (min/max: "
      "slowest/fastest rep); d2d memory traffic is twice its figure";
  return j;
}

void Emit(const Options& o, const Json& j) {
  const std::string text = j.dump() + "\n";
  if (o.json_path.empty()) {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::ofstream f(o.json_path);
  f << text;
  if (!f.good()) {
    std::fprintf(stderr, "link_probe: cannot write %s\n", o.json_path.c_str());
    std::exit(1);
  }
}

// Device `o.device`, or exit 2 with a message naming what is missing.
void SelectDevice(const Options& o, Results* r) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::fprintf(stderr,
                 "link_probe: no CUDA device %d (no GPU or no driver "
                 "here): cudaGetDeviceCount: %s (error %d)\n",
                 o.device, cudaGetErrorString(e), static_cast<int>(e));
    std::exit(2);
  }
  if (o.device >= count) {
    std::fprintf(stderr, "link_probe: no CUDA device %d (%d present)\n",
                 o.device, count);
    std::exit(2);
  }
  Check(cudaSetDevice(o.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  char bus[32] = "";
  cudaDeviceGetPCIBusId(bus, sizeof(bus), o.device);
  r->device["ordinal"] = o.device;
  r->device["name"] = prop.name;
  r->device["pci_bus_id"] = bus;
  r->device["memory_bytes"] = static_cast<int64_t>(prop.totalGlobalMem);
  r->device["driver_version"] = driver;
  r->device["runtime_version"] = runtime;
  r->device["can_map_host_memory"] = prop.canMapHostMemory != 0;
  if (!prop.canMapHostMemory) {
    std::fprintf(stderr, "link_probe: device %d cannot map host memory\n",
                 o.device);
    std::exit(1);
  }
}

int Run(const Options& o) {
  const GatherPlan plan = PlanGather(o);
  Results r;
  r.h2d.bytes = r.d2h.bytes = r.d2d.bytes = o.copy_mib * kMiB;
  const int64_t gather_bytes =
      static_cast<int64_t>(plan.rows.size()) * kRowBytes;
  r.gather_zero_copy.bytes = r.gather_device.bytes = gather_bytes;
  if (o.dry_run) {
    r.device["ordinal"] = o.device;
    for (const char* key :
         {"name", "pci_bus_id", "memory_bytes", "driver_version",
          "runtime_version", "can_map_host_memory"}) {
      r.device[key] = nullptr;
    }
    Emit(o, Report(o, plan, r));
    return 0;
  }
  SelectDevice(o, &r);
  const int64_t copy = o.copy_mib * kMiB;
  const int64_t pool_bytes = plan.pool_rows * kRowBytes;
  cudaStream_t s;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");

  uint8_t *host = nullptr, *pool = nullptr, *check = nullptr;
  Check(cudaHostAlloc(&host, copy, cudaHostAllocDefault), "cudaHostAlloc");
  Check(cudaHostAlloc(&pool, pool_bytes, cudaHostAllocMapped),
        "cudaHostAlloc(mapped)");
  Check(cudaHostAlloc(&check, std::max<int64_t>(gather_bytes, 1),
                      cudaHostAllocDefault),
        "cudaHostAlloc");
  FillPattern(host, copy, o.seed);
  FillPattern(pool, pool_bytes, o.seed + 1);
  void* pool_view = nullptr;  // the device's address of the mapped pool
  Check(cudaHostGetDevicePointer(&pool_view, pool, 0),
        "cudaHostGetDevicePointer");

  uint8_t *dev_a = nullptr, *dev_b = nullptr, *dev_pool = nullptr,
          *dst = nullptr;
  int32_t* rows = nullptr;
  Check(cudaMalloc(&dev_a, copy), "cudaMalloc");
  Check(cudaMalloc(&dev_b, copy), "cudaMalloc");
  Check(cudaMalloc(&dev_pool, pool_bytes), "cudaMalloc");
  Check(cudaMalloc(&dst, std::max<int64_t>(gather_bytes, 1)), "cudaMalloc");
  Check(cudaMalloc(&rows, std::max<size_t>(plan.rows.size(), 1) * 4),
        "cudaMalloc");
  Check(cudaMemcpyAsync(dev_pool, pool, pool_bytes, cudaMemcpyHostToDevice, s),
        "pool upload");
  // Row ids go up from pinned memory (a pageable source would make the
  // copy synchronous).
  int32_t* rows_pinned = nullptr;
  Check(cudaHostAlloc(&rows_pinned, std::max<size_t>(plan.rows.size(), 1) * 4,
                      cudaHostAllocDefault),
        "cudaHostAlloc");
  std::copy(plan.rows.begin(), plan.rows.end(), rows_pinned);
  Check(cudaMemcpyAsync(rows, rows_pinned, plan.rows.size() * 4,
                        cudaMemcpyHostToDevice, s),
        "rows upload");
  Check(cudaStreamSynchronize(s), "upload");

  r.h2d = Time(s, o.reps, copy, "H2D copy", [&] {
    return cudaMemcpyAsync(dev_a, host, copy, cudaMemcpyHostToDevice, s);
  });
  r.d2h = Time(s, o.reps, copy, "D2H copy", [&] {
    return cudaMemcpyAsync(host, dev_a, copy, cudaMemcpyDeviceToHost, s);
  });
  r.d2d = Time(s, o.reps, copy, "D2D copy", [&] {
    return cudaMemcpyAsync(dev_b, dev_a, copy, cudaMemcpyDeviceToDevice, s);
  });

  const int64_t n = static_cast<int64_t>(plan.rows.size());
  int64_t bad = 0;
  const std::pair<const void*, Figure*> sources[] = {
      {pool_view, &r.gather_zero_copy}, {dev_pool, &r.gather_device}};
  for (const auto& [src, fig] : sources) {
    Check(cudaMemsetAsync(dst, 0, std::max<int64_t>(gather_bytes, 1), s),
          "cudaMemsetAsync");
    *fig = Time(s, o.reps, gather_bytes, "GatherRows", [&] {
      return kernels::cuda::GatherRows(src, kRowBytes, rows, dst, kRowBytes,
                                       nullptr, n, kRowBytes, s);
    });
    Check(cudaMemcpyAsync(check, dst, gather_bytes, cudaMemcpyDeviceToHost, s),
          "gather read-back");
    Check(cudaStreamSynchronize(s), "gather read-back");
    bad += Mismatches(check, pool, plan);
  }
  r.verified = bad == 0;

  cudaFree(dev_a);
  cudaFree(dev_b);
  cudaFree(dev_pool);
  cudaFree(dst);
  cudaFree(rows);
  cudaFreeHost(host);
  cudaFreeHost(pool);
  cudaFreeHost(check);
  cudaFreeHost(rows_pinned);
  cudaStreamDestroy(s);
  Emit(o, Report(o, plan, r));
  if (bad != 0) {
    std::fprintf(stderr,
                 "link_probe: %lld gathered rows differ from the pool\n",
                 static_cast<long long>(bad));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::Run(ckv::bench::ParseOptions(argc, argv));
}
