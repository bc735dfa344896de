// Internal to model/kv/snapshot*.cc: the header and section tags of the
// snapshot format (described in model/kv/snapshot.h).
#pragma once

#include <bit>
#include <cstdint>

#include "model/kv/snapshot.h"

namespace ckv::snapshot_format {

static_assert(std::endian::native == std::endian::little,
              "the snapshot format is written as in memory: little-endian");

inline constexpr char kMagic[8] = {'C', 'K', 'V', 'S', 'N', 'A', 'P', '\0'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t model_fingerprint;
  uint64_t store_fingerprint;
  uint64_t payload_bytes;
  uint32_t payload_crc;
  uint32_t header_crc;  // of the bytes before it
};
static_assert(sizeof(Header) == kSnapshotHeaderBytes);
inline constexpr size_t kHeaderCrcBytes = kSnapshotHeaderBytes - 4;

constexpr uint32_t Tag(const char (&s)[5]) {
  return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 |
         uint32_t(uint8_t(s[2])) << 16 | uint32_t(uint8_t(s[3])) << 24;
}
inline constexpr uint32_t kMeta = Tag("META");
inline constexpr uint32_t kConf = Tag("CONF");
inline constexpr uint32_t kEdge = Tag("EDGE");
inline constexpr uint32_t kSegm = Tag("SEGM");
inline constexpr size_t kSectionHeaderBytes = 16;  // tag, reserved, length

}  // namespace ckv::snapshot_format
