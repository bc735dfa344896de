// Where the bytes of an opened GGUF file live. Decode streams every weight
// once per token, so the page size of that memory matters: a file mapped
// from the page cache uses 4 KiB pages (a TLB miss, and a hardware
// prefetch stream that stops, every 4 KiB), anonymous memory advised for
// transparent huge pages uses 2 MiB ones. engine_bench, 1B-shaped Q4_K_M,
// 2 threads, Zen 4 (2026-12-06, interleaved pairs): decode 36.5-38.1 tok/s
// mapped vs 39.6-42.2 in huge pages.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckv::gguf {

enum class FileMemory {
  kAuto,       // kHugePages where HugePagesHelp, else kMap
  kMap,        // the file mapped read-only (shared page cache)
  kHugePages,  // read into private anonymous memory advised for huge pages
};

// "auto", "map", "huge-pages" (the server's --weights-memory).
const char* FileMemoryName(FileMemory m);
absl::StatusOr<FileMemory> ParseFileMemory(absl::string_view name);

// True when copying `size` bytes into huge pages is worth it here:
// transparent huge pages are not disabled, the file is at least 64 MiB,
// and it takes at most half of the memory the kernel reports available.
bool HugePagesHelp(uint64_t size);

struct FileBytes {
  void* data = nullptr;  // null for an empty file
  size_t size = 0;
  FileMemory memory = FileMemory::kMap;  // kMap or kHugePages
};

// The `size` bytes of the open file `fd` as `want` asks (kAuto decided by
// HugePagesHelp; kHugePages falls back to kMap when the anonymous
// allocation fails). Errors: a failed mapping, a read error or a file that
// ended early (INTERNAL / DATA_LOSS). Release with ReleaseFileBytes.
absl::StatusOr<FileBytes> PlaceFileBytes(int fd, size_t size, FileMemory want);
void ReleaseFileBytes(const FileBytes& bytes);

}  // namespace ckv::gguf
