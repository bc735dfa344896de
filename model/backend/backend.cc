#include "model/backend/backend.h"

#include "absl/strings/str_cat.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/backend/device/device_backend.h"

namespace ckv {

const char* BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
    case BackendKind::kFake:
      return "fake";
  }
  return "?";
}

absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view name) {
  for (BackendKind k : {BackendKind::kAuto, BackendKind::kCpu,
                        BackendKind::kCuda, BackendKind::kFake}) {
    if (name == BackendKindName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend '", name, "' (expected auto, cpu, cuda or fake)"));
}

const char* KvResidencyName(KvResidency r) {
  switch (r) {
    case KvResidency::kAuto:
      return "auto";
    case KvResidency::kDevice:
      return "device";
    case KvResidency::kOffload:
      return "offload";
  }
  return "?";
}

absl::StatusOr<KvResidency> ParseKvResidency(absl::string_view name) {
  for (KvResidency r :
       {KvResidency::kAuto, KvResidency::kDevice, KvResidency::kOffload}) {
    if (name == KvResidencyName(r)) return r;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown kv residency '", name, "' (expected auto, device or offload)"));
}

BackendKind ResolveBackendKind(BackendKind kind) {
  if (kind != BackendKind::kAuto) return kind;
  return CudaDeviceStatus().ok() ? BackendKind::kCuda : BackendKind::kCpu;
}

absl::Status CheckBackendBuilt(BackendKind kind) {
  if (kind == BackendKind::kCuda && !CudaBackendBuilt()) {
    return absl::InvalidArgumentError(
        "--backend cuda: this build has no CUDA backend (configured without "
        "nvcc or with -DCLUSTERKV_CUDA=OFF; use cpu or auto)");
  }
  return absl::OkStatus();
}

absl::StatusOr<BackendKind> ParseBackendFlag(absl::string_view name) {
  auto kind = ParseBackendKind(name);
  if (!kind.ok()) return kind.status();
  if (auto s = CheckBackendBuilt(*kind); !s.ok()) return s;
  return *kind;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(
    BackendKind kind, const BackendOptions& options) {
  if (auto s = CheckBackendBuilt(kind); !s.ok()) return s;
  switch (kind) {
    case BackendKind::kFake:
      return MakeFakeDeviceBackend(options);
    case BackendKind::kCuda:
      return MakeCudaDeviceBackend(options);
    case BackendKind::kCpu:
      return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
    case BackendKind::kAuto:
      break;
  }
  // auto: the CUDA backend when a device is usable, else the CPU, saying
  // why in info().selection.
  const absl::Status cuda = CudaDeviceStatus();
  std::string why;
  if (cuda.ok()) {
    auto made = MakeCudaDeviceBackend(options);
    if (made.ok()) {
      (*made)->set_selection("auto: a CUDA device is usable");
      return made;
    }
    why = std::string(made.status().message());
  } else {
    why = std::string(cuda.message());
  }
  auto cpu = std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
  cpu->set_selection(absl::StrCat("auto: CPU (no CUDA backend: ", why, ")"));
  return cpu;
}

}  // namespace ckv
