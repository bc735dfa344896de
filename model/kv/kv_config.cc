#include "model/kv/kv_config.h"

#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace ckv {

namespace {

// The engine's range of a setting: requests and the server's flags may set
// token counts up to settings::kMaxTokenSetting (server/service_convert.cc
// checks the whole range), the engine takes larger ones too (clusterkv-model,
// forks, snapshots, benchmarks: budget = INT32_MAX selects everything).
settings::Range EngineRange(settings::Range r) {
  if (r.hi == static_cast<double>(settings::kMaxTokenSetting)) {
    r.hi = std::numeric_limits<double>::infinity();
  }
  return r;
}

absl::Status CheckRange(absl::string_view field, double value,
                        const settings::Range& range, bool integral) {
  const std::string error = settings::OutOfRange(
      std::string_view(field.data(), field.size()), value, range, integral);
  if (error.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(error);
}

// The name of enum value `v` in `names`; "?" when out of range.
template <class E, size_t N>
const char* NameIn(const char* const (&names)[N], E v) {
  const auto i = static_cast<size_t>(v);
  return i < N ? names[i] : "?";
}

// The enum value named `name` in `names`, else INVALID_ARGUMENT listing them.
template <class E, size_t N>
absl::StatusOr<E> ParseIn(const char* const (&names)[N], absl::string_view what,
                          const std::string& name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<E>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", name, "' (",
                   settings::JoinNames(names, ", "), ")"));
}

}  // namespace

absl::Status CheckKvRange(absl::string_view name, double value,
                          const settings::Range& range, bool integral) {
  return CheckRange(absl::StrCat("kv.", name), value, range, integral);
}

absl::Status ValidateKvStoreConfig(const KvStoreConfig& c, int model_layers) {
  if (!IsRegisteredPolicy(c.policy)) {
    return absl::InvalidArgumentError(
        "kv.policy is not a registered selection policy");
  }
#define CKV_CHECK(name, type, range, fork, help)                               \
  if (auto s =                                                                 \
          CheckKvRange(#name, static_cast<double>(c.name), EngineRange(range), \
                       !std::is_floating_point_v<type>);                       \
      !s.ok()) {                                                               \
    return s;                                                                  \
  }
  CKV_KV_WIRE_NUMBERS(CKV_CHECK)
  CKV_KV_ENGINE_NUMBERS(CKV_CHECK)
#undef CKV_CHECK
  // The bounds that depend on another setting or on the model.
  if (auto s = CheckKvRange("recent_tokens", c.recent_tokens,
                            settings::Between(0, c.budget), true);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckKvRange("dense_layers", c.dense_layers,
                            settings::Between(0, model_layers), true);
      !s.ok()) {
    return s;
  }
  if (c.kv_dtype != kernels::DType::kF16 &&
      c.kv_dtype != kernels::DType::kBF16) {
    return absl::InvalidArgumentError(
        "kv.kv_dtype must be f16 or bf16 (the host tier)");
  }
  return absl::OkStatus();
}

const char* GqaSelectionName(GqaSelection g) {
  return NameIn(settings::kGqaSelectionNames, g);
}

absl::StatusOr<GqaSelection> ParseGqaSelection(const std::string& name) {
  return ParseIn<GqaSelection>(settings::kGqaSelectionNames, "gqa_selection",
                               name);
}

const char* CacheModeName(CacheMode m) {
  return NameIn(settings::kCacheModeNames, m);
}

absl::StatusOr<CacheMode> ParseCacheMode(const std::string& name) {
  return ParseIn<CacheMode>(settings::kCacheModeNames, "cache mode", name);
}

const char* ClusterMetricName(ClusterMetric m) {
  return NameIn(settings::kClusterMetricNames, m);
}

absl::StatusOr<ClusterMetric> ParseClusterMetric(const std::string& name) {
  if (name == "inner_product") return ClusterMetric::kInnerProduct;
  return ParseIn<ClusterMetric>(settings::kClusterMetricNames, "cluster metric",
                                name);
}

namespace {

template <class E>
absl::Status Assign(absl::StatusOr<E> v, E* out) {
  if (!v.ok()) return v.status();
  *out = *v;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseSettingValue(const std::string& name, KvPolicy* out) {
  return Assign(ParseKvPolicy(name), out);
}
absl::Status ParseSettingValue(const std::string& name, GqaSelection* out) {
  return Assign(ParseGqaSelection(name), out);
}
absl::Status ParseSettingValue(const std::string& name, CacheMode* out) {
  return Assign(ParseCacheMode(name), out);
}
absl::Status ParseSettingValue(const std::string& name, ClusterMetric* out) {
  return Assign(ParseClusterMetric(name), out);
}
absl::Status ParseSettingValue(const std::string& name, kernels::DType* out) {
  if (kernels::ParseDTypeName(name.c_str(), out)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unknown type '", name, "'"));
}

}  // namespace ckv
