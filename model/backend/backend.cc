#include "model/backend/backend.h"

#include "absl/strings/str_cat.h"
#include "model/backend/cpu/cpu_backend.h"
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
  // No real device backend is built yet (the fake is for tests): auto is
  // the CPU.
  return kind == BackendKind::kAuto ? BackendKind::kCpu : kind;
}

absl::Status CheckBackendBuilt(BackendKind kind) {
  switch (ResolveBackendKind(kind)) {
    case BackendKind::kCpu:
    case BackendKind::kFake:
      return absl::OkStatus();
    case BackendKind::kCuda:
      return absl::InvalidArgumentError(
          "--backend cuda: this build has no CUDA backend yet (use cpu or "
          "auto)");
    case BackendKind::kAuto:
      break;
  }
  return absl::InternalError("unresolved backend kind");
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
  if (ResolveBackendKind(kind) == BackendKind::kFake) {
    return MakeFakeDeviceBackend(options);
  }
  // Otherwise the CPU backend (CheckBackendBuilt).
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
}

}  // namespace ckv
