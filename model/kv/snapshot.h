// Durable snapshots of a session: its clustered KV store (host tier, built
// indexes: restoring runs no k-means, so decoding continues bit-identically)
// and the session's own state, in one versioned, checksummed binary file.
//
// Format, little-endian:
//   header (48 bytes): magic "CKVSNAP\0", u32 version (2), u32 header size
//     (48), u64 model fingerprint, u64 store fingerprint, u64 payload size,
//     u32 CRC-32C of the payload, u32 CRC-32C of the 44 header bytes before.
//   payload: sections, each u32 tag, u32 reserved (0), u64 length, then
//     `length` bytes, in this order: META (session id, parent id, tenant,
//     idle TTL, sampling defaults as a settings record, stop strings, logit
//     bias, last logits, chat conversation: u8 active, and when 1: u8
//     reply_open, u32 count + (role, content) strings, the text), CONF (KV
//     shape, store config as a settings record), EDGE (token counts, segment
//     count, sink and tail rows of every layer), then one SEGM per segment
//     (first position, rows, K and V of every layer, and per sparse layer and
//     KV head the k-means clusters (k, centroids, offsets, members) and Quest
//     page bounds).
//   Arrays are u64 count + elements; strings u32 length + bytes. A settings
//   record (a string) holds name -> typed value entries of the settings
//   schema (common/settings_schema.h), read by name: a setting missing from
//   the file keeps its default, one unknown to the reader is
//   FAILED_PRECONDITION.
//
// Readers check every count and length against the bytes that remain before
// allocating, so hostile files yield errors: DATA_LOSS for a corrupt or
// truncated file, FAILED_PRECONDITION for a snapshot of another model, store
// layout or format version. ClusteredKvStore::Restore then checks the parts'
// invariants (INVALID_ARGUMENT).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/gguf/gguf.h"
#include "model/kv/clustered_store.h"
#include "model/sampler.h"

namespace ckv {

// The version written. Version 1 stored the settings as positional integers
// (and no sampling settings besides temperature, top_k, top_p, seed,
// max_tokens and stop); version 2 as self-describing records
// (model/kv/snapshot_settings.h). Both are read; a file of any other version
// is FAILED_PRECONDITION naming its version.
inline constexpr uint32_t kSnapshotVersion = 2;
inline constexpr uint32_t kSnapshotVersionV1 = 1;
inline constexpr size_t kSnapshotHeaderBytes = 48;

// A session's chat conversation (server/session.h Conversation): the
// messages its tokens were rendered from, replies included.
struct SnapshotConversation {
  bool active = false;  // false: the rest is empty
  std::vector<std::pair<std::string, std::string>> messages;  // role, content
  std::string text;  // the rendered text of the session's tokens
  bool reply_open = false;
};

// The session's state besides its store.
struct SnapshotMeta {
  std::string session_id;
  std::string parent_id;
  std::string tenant;
  uint32_t idle_ttl_seconds = 0;
  SamplingParams sampling;            // the session's defaults
  std::vector<float> last_logits;     // after the last token (may be empty)
  SnapshotConversation conversation;  // format version 1: none
};

struct Snapshot {
  SnapshotMeta meta;
  StoreParts store;  // store.config is the session's KV config
};

// What a reader requires of a snapshot.
struct SnapshotExpect {
  uint64_t model_fingerprint = 0;
  KvShape shape;                 // of the loaded model
  int vocab_size = 0;            // last_logits: empty or this long
  int64_t max_tokens = 1 << 20;  // replaces the file's store token limit
  // Where the segments' rows are read into (model/kv/host_arena.h; the
  // arena of the backend that will run the store); null: the heap.
  std::shared_ptr<HostArena> arena;
  // False skips both CRCs and the store fingerprint, so that a fuzzer
  // reaches the section parser with arbitrary payloads. Servers verify.
  bool verify_checksums = true;
};

// Fingerprint of a model file: its size, CRC-32C of its first and last MiB,
// and its tensor table (names, dims, types, offsets). IO errors name the path.
absl::StatusOr<uint64_t> ModelFingerprint(
    const std::string& path, const std::vector<gguf::TensorInfo>& tensors);
// Fingerprint of what shapes the stored rows and indexes: the KV shape and
// the layout fields of the config (sinks, window, clustering, dense layers,
// page size, dtype, metric, policy and which indexes are built).
uint64_t StoreFingerprint(const KvShape& shape, const KvStoreConfig& config);

// The snapshot as bytes (header + payload).
std::string SerializeSnapshot(const Snapshot& s, uint64_t model_fingerprint);
// Writes `path` atomically: PATH.tmp, fsync, rename, fsync of the folder.
// Returns the bytes written.
absl::StatusOr<int64_t> WriteSnapshotFile(const std::string& path,
                                          const Snapshot& s,
                                          uint64_t model_fingerprint);

absl::StatusOr<Snapshot> ParseSnapshot(absl::string_view bytes,
                                       const SnapshotExpect& expect);
absl::StatusOr<Snapshot> ReadSnapshotFile(const std::string& path,
                                          const SnapshotExpect& expect);

}  // namespace ckv
