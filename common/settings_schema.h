// The one description of every KV store and sampling setting: its name (the
// KvStoreConfig / SamplingParams member, the clusterkv.v1 wire field, the
// snapshot record key, and with dashes the command-line flag), its type, its
// range and its help text. Defaults stay in the typed structs
// (model/kv/kv_config.h, model/sampler.h); ranges and names live only here.
//
// Each list is an X-macro: a caller defines X and expands the list to declare
// flags, read them, convert to and from the wire, merge, validate and write
// snapshots, so that adding a setting is one entry here plus its use.
//
// Why common/: the wire-only client (which links no project library, so it
// cannot see KvStoreConfig) declares its flags and builds requests from the
// same lists as the server and clusterkv-model, so this header holds no model
// types: it depends on the C++ standard library alone, like every common/
// header, and model/, server/ and client/ may all include it. The model layer
// binds the entries to struct members (model/kv/kv_config.cc,
// model/sampler.cc, model/kv/snapshot_settings.cc); a misspelt entry is a
// compile error there.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "common/flag_spelling.h"

namespace ckv::settings {

// The accepted values of a setting: [lo, hi], either end open; an infinite
// end is no bound.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;

  // NaN and infinities are never contained.
  bool Contains(double v) const {
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) &&
           (hi_open ? v < hi : v <= hi);
  }
};

constexpr Range Any() { return {}; }
constexpr Range AtLeast(double lo) {
  return {lo, std::numeric_limits<double>::infinity(), false, false};
}
constexpr Range Between(double lo, double hi) { return {lo, hi, false, false}; }
// (lo, hi]
constexpr Range AboveUpTo(double lo, double hi) {
  return {lo, hi, true, false};
}

// Upper bound of the token-count settings (budget, window, max_tokens, ...).
inline constexpr int64_t kMaxTokenSetting = int64_t{1} << 20;

// Sampling limits (also the wire contract's, proto/clusterkv/v1).
inline constexpr int kMaxLogprobs = 20;
inline constexpr int kMaxPenaltyLastN = 4096;
inline constexpr int kMaxLogitBiasEntries = 1024;
inline constexpr float kMaxLogitBias = 100.0f;  // |bias| <= this
inline constexpr float kMaxRepetitionPenalty = 10.0f;
inline constexpr float kMaxFrequencyPenalty = 2.0f;  // |penalty| <= this
inline constexpr float kMaxPresencePenalty = 2.0f;   // |penalty| <= this
inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 256;

// The names of the KV enum settings, by enum value (model/kv/kv_config.h).
// Policy names come from the policy registry (model/kv/policies/registry.h);
// the client keeps its own wire-level list (client/options.h).
inline constexpr const char* kGqaSelectionNames[] = {"per_query_head",
                                                     "per_kv_head"};
inline constexpr const char* kCacheModeNames[] = {"zero_copy", "copy"};
inline constexpr const char* kClusterMetricNames[] = {"cosine", "l2", "ip"};

// `names` joined by `separator`.
template <size_t N>
std::string JoinNames(const char* const (&names)[N],
                      std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += separator;
    out += names[i];
  }
  return out;
}

// Whether a fork (ClusteredKvStore::Fork) may change a KV setting: kLayout
// settings shape the stored segments and indexes, so a fork keeps its
// parent's, and the snapshot store fingerprint covers them.
enum class Fork { kMayChange, kLayout };

// ------------------------------------------------------------------- KV
// X(name, type, range, fork, help)

// The numeric KV settings a request may set (clusterkv.v1.KvConfig, each an
// `optional int32`): also flags of clusterkv-server (its defaults),
// clusterkv-model and the clusterkv client. recent_tokens is further bounded
// by budget, dense_layers by the model's layers.
#define CKV_KV_WIRE_NUMBERS(X)                                              \
  X(budget, int,                                                            \
    ::ckv::settings::Between(1, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kMayChange,                                      \
    "selected clustered tokens per head (B)")                               \
  X(sink_tokens, int,                                                       \
    ::ckv::settings::Between(0, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kLayout, "first tokens, always attended")        \
  X(tokens_per_cluster, int,                                                \
    ::ckv::settings::Between(1, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kLayout,                                         \
    "tokens per k-means cluster: k = ceil(n / tokens_per_cluster)")         \
  X(window, int,                                                            \
    ::ckv::settings::Between(1, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kLayout,                                         \
    "tail length at which it closes as a clustered segment")                \
  X(recent_tokens, int,                                                     \
    ::ckv::settings::Between(0, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kMayChange,                                      \
    "most recent clustered tokens always selected (at most budget)")        \
  X(cache_steps, int,                                                       \
    ::ckv::settings::Between(0, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kMayChange,                                      \
    "R: the device cache keeps blocks selected in the last R steps (0: no " \
    "cache)")                                                               \
  X(dense_layers, int,                                                      \
    ::ckv::settings::Between(0, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kLayout,                                         \
    "layers below this attend densely (at most the model's layers)")

// The named KV settings a request may set (`optional string` on the wire).
// X(name, fork, help): the accepted names are the registry's (policy) or
// kGqaSelectionNames.
#define CKV_KV_WIRE_NAMES(X)                                             \
  X(policy, ::ckv::settings::Fork::kMayChange, "selection policy")       \
  X(gqa_selection, ::ckv::settings::Fork::kMayChange,                    \
    "GQA: per_query_head (each query head selects) or per_kv_head (one " \
    "selection per KV head, scores summed over its query heads)")

// The numeric KV settings of the engine only (clusterkv-model flags,
// benchmarks, snapshots). seed is the flag --cluster-seed of clusterkv-model
// (--seed there is the sampling seed); max_tokens is set from the program's
// context limit.
#define CKV_KV_ENGINE_NUMBERS(X)                                            \
  X(kmeans_max_iters, int,                                                  \
    ::ckv::settings::Between(1, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kLayout, "k-means iterations at most")           \
  X(quest_page_size, int,                                                   \
    ::ckv::settings::Between(1, ::ckv::settings::kMaxTokenSetting),         \
    ::ckv::settings::Fork::kLayout, "tokens per Quest page")                \
  X(seed, uint64_t, ::ckv::settings::Any(), ::ckv::settings::Fork::kLayout, \
    "k-means initialisation seed")                                          \
  X(max_tokens, int64_t, ::ckv::settings::AtLeast(1),                       \
    ::ckv::settings::Fork::kMayChange, "tokens the store may hold at most") \
  X(async_clustering, bool, ::ckv::settings::Any(),                         \
    ::ckv::settings::Fork::kMayChange, "cluster on a worker thread")        \
  X(build_all_indexes, bool, ::ckv::settings::Any(),                        \
    ::ckv::settings::Fork::kMayChange,                                      \
    "build every policy's index, so that forks may switch policy")

// The named KV settings of the engine only. X(name, fork, help).
#define CKV_KV_ENGINE_NAMES(X)                                       \
  X(cache_mode, ::ckv::settings::Fork::kMayChange,                   \
    "zero_copy (read selected rows in place) | copy (device arena)") \
  X(metric, ::ckv::settings::Fork::kLayout,                          \
    "k-means metric: cosine|l2|ip (ablation)")                       \
  X(kv_dtype, ::ckv::settings::Fork::kLayout, "host-tier type: f16|bf16")

// -------------------------------------------------------------- sampling
// X(name, type, range, help): the scalar fields of clusterkv.v1.SamplingParams
// (each `optional`) and SamplingParams. stop and logit_bias (lists) are
// bounded by kMaxStopStrings/kMaxStopBytes and kMaxLogitBiasEntries/
// kMaxLogitBias. logprobs -1 (outside its range) is "off" in SamplingParams;
// on the wire it is unset instead.
#define CKV_SAMPLING_NUMBERS(X)                                                \
  X(temperature, float, ::ckv::settings::AtLeast(0), "0 = greedy")             \
  X(top_k, int, ::ckv::settings::Between(0, 2147483647), "top-k (0 = off)")    \
  X(top_p, float, ::ckv::settings::AboveUpTo(0, 1), "top-p (1 = off)")         \
  X(seed, uint64_t, ::ckv::settings::Any(), "sampling seed")                   \
  X(max_tokens, int,                                                           \
    ::ckv::settings::Between(0, ::ckv::settings::kMaxTokenSetting),            \
    "tokens to generate at most")                                              \
  X(ignore_eos, bool, ::ckv::settings::Any(),                                  \
    "keep generating past end-of-generation tokens")                           \
  X(min_p, float, ::ckv::settings::Between(0, 1), "min-p (0 = off)")           \
  X(repetition_penalty, float,                                                 \
    ::ckv::settings::AboveUpTo(0, ::ckv::settings::kMaxRepetitionPenalty),     \
    "repetition penalty (1 = off)")                                            \
  X(frequency_penalty, float,                                                  \
    ::ckv::settings::Between(-::ckv::settings::kMaxFrequencyPenalty,           \
                             ::ckv::settings::kMaxFrequencyPenalty),           \
    "frequency penalty (0 = off)")                                             \
  X(presence_penalty, float,                                                   \
    ::ckv::settings::Between(-::ckv::settings::kMaxPresencePenalty,            \
                             ::ckv::settings::kMaxPresencePenalty),            \
    "presence penalty (0 = off)")                                              \
  X(penalty_last_n, int,                                                       \
    ::ckv::settings::Between(0, ::ckv::settings::kMaxPenaltyLastN),            \
    "penalty window in tokens (0 = off)")                                      \
  X(logprobs, int, ::ckv::settings::Between(0, ::ckv::settings::kMaxLogprobs), \
    "per-token log-probabilities with the top N alternatives")

namespace internal {
inline std::string Number(double v, bool integral) {
  if (integral && std::isfinite(v)) {
    return std::to_string(static_cast<int64_t>(v));
  }
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  std::string s = std::to_string(v);  // "%f": trim the trailing zeros
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}
}  // namespace internal

// The one wording of a range rule: "must be in [lo, hi]", "must be in
// (lo, hi]", "must be >= lo" ("must be finite and >= lo" for a float).
// `integral` prints the bounds as integers.
inline std::string RangeRule(const Range& r, bool integral) {
  using internal::Number;
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  if (has_lo && has_hi) {
    return std::string("must be in ") + (r.lo_open ? "(" : "[") +
           Number(r.lo, integral) + ", " + Number(r.hi, integral) +
           (r.hi_open ? ")" : "]");
  }
  const std::string finite = integral ? "" : "finite and ";
  if (has_lo) {
    return "must be " + finite + (r.lo_open ? "> " : ">= ") +
           Number(r.lo, integral);
  }
  if (has_hi) {
    return "must be " + finite + (r.hi_open ? "< " : "<= ") +
           Number(r.hi, integral);
  }
  return integral ? "may be any value" : "must be finite";
}

// Empty when `value` is in `r`; else "FIELD RULE, got VALUE", the message of
// every range error (flags, requests, snapshots).
inline std::string OutOfRange(std::string_view field, double value,
                              const Range& r, bool integral) {
  if (integral
          ? (value >= r.lo && value <= r.hi && !(r.lo_open && value == r.lo) &&
             !(r.hi_open && value == r.hi))
          : r.Contains(value)) {
    return "";
  }
  return std::string(field) + " " + RangeRule(r, integral) + ", got " +
         internal::Number(value, integral);
}

// The help text of KV setting `name` ("" when there is none), for flags
// declared one by one (clusterkv-model's engine settings).
inline const char* KvSettingHelp(std::string_view name) {
#define CKV_HELP_NUMBER(field, type, range, fork, help) \
  if (name == #field) return help;
#define CKV_HELP_NAMED(field, fork, help) \
  if (name == #field) return help;
  CKV_KV_WIRE_NUMBERS(CKV_HELP_NUMBER)
  CKV_KV_ENGINE_NUMBERS(CKV_HELP_NUMBER)
  CKV_KV_WIRE_NAMES(CKV_HELP_NAMED)
  CKV_KV_ENGINE_NAMES(CKV_HELP_NAMED)
#undef CKV_HELP_NUMBER
#undef CKV_HELP_NAMED
  return "";
}

// The flags of the KV settings a request may set, for usage texts:
// "--budget N --sink-tokens N ... --gqa-selection per_query_head|per_kv_head"
// (policy left out: its names come from a registry), a line break after
// every `per_line` flags.
inline std::string KvRequestFlagsUsage(int per_line = 4) {
  std::string out;
  int n = 0;
  auto add = [&](const char* name, const std::string& value) {
    if (n > 0) out += (n % per_line == 0) ? "\n  " : " ";
    ++n;
    out += DocumentedFlagName(name) + " " + value;
  };
#define CKV_USAGE_NUMBER(name, ...) add(#name, "N");
  CKV_KV_WIRE_NUMBERS(CKV_USAGE_NUMBER)
#undef CKV_USAGE_NUMBER
  add("gqa_selection", JoinNames(kGqaSelectionNames, "|"));
  return out;
}

}  // namespace ckv::settings
