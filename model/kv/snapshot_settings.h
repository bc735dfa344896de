// Internal to model/kv/snapshot*.cc: the KV and sampling settings of a
// snapshot as a self-describing record, driven by the settings schema
// (common/settings_schema.h), so that no field list is copied by position.
//
// Record: u32 entry count, then per entry: u32 name length, the name (the
// schema's), u8 kind, the value: 'i' i64 (int, int64, bool settings), 'u'
// u64, 'f' f64 (float settings), 's' u32 length + bytes (named settings:
// policy, gqa_selection, ...). A reader takes each entry by name: a setting
// missing from the record keeps its default (the struct's); a name it does
// not know is FAILED_PRECONDITION (written by a newer program); a malformed
// record, a wrong kind, a duplicate or a value that does not fit its type is
// DATA_LOSS. Ranges are checked afterwards (ValidateKvStoreConfig,
// ValidateSamplingParams).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/kv/clustered_store.h"
#include "model/sampler.h"

namespace ckv::snapshot_settings {

std::string EncodeKv(const KvStoreConfig& c);
absl::Status DecodeKv(absl::string_view record, KvStoreConfig* c);

// The scalar sampling settings (stop strings and logit_bias are not scalars:
// the snapshot's META section holds them).
std::string EncodeSampling(const SamplingParams& s);
absl::Status DecodeSampling(absl::string_view record, SamplingParams* s);

// FNV-1a of what shapes stored rows and indexes, continuing from `h`: the
// KV shape, policy, build_all_indexes and every settings::Fork::kLayout
// setting, each by name and value.
uint64_t LayoutFingerprint(uint64_t h, const KvShape& shape,
                           const KvStoreConfig& c);

// Format version 1 stored the KV config as 16 positional int32 (in the
// order below, enums by id) plus the k-means seed and the token limit; it
// is still read. DATA_LOSS when an enum is out of range.
using KvIntsV1 = std::array<int32_t, 16>;
absl::Status DecodeKvV1(const KvIntsV1& v, uint64_t seed, int64_t max_tokens,
                        KvStoreConfig* c);
// The store fingerprint of format version 1 (positional fields).
uint64_t StoreFingerprintV1(const KvShape& shape, const KvStoreConfig& c);

}  // namespace ckv::snapshot_settings
