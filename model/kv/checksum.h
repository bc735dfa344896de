// Checksums and hashes of the snapshot format (model/kv/snapshot.h), written
// here: CRC-32C (Castagnoli polynomial, slicing-by-8 tables) for corruption
// and FNV-1a 64 for fingerprints.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckv {

// CRC-32C of `n` bytes continuing from `crc` (0 to start). The standard
// check value: Crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// FNV-1a, 64 bits; continue with the previous result as `h`.
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
uint64_t Fnv1a64(uint64_t h, const void* data, size_t n);

}  // namespace ckv
