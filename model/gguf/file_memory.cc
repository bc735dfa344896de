#include "model/gguf/file_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace ckv::gguf {
namespace {

constexpr uint64_t kMinHugeFile = uint64_t{64} << 20;

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t AvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

bool TransparentHugePagesOn() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return false;
  return line.find("[never]") == std::string::npos;
}

absl::StatusOr<FileBytes> MapFile(int fd, size_t size) {
  FileBytes b;
  b.size = size;
  b.memory = FileMemory::kMap;
  if (size == 0) return b;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("mmap failed: ", std::strerror(errno)));
  }
  b.data = p;
  return b;
}

}  // namespace

const char* FileMemoryName(FileMemory m) {
  switch (m) {
    case FileMemory::kMap:
      return "map";
    case FileMemory::kHugePages:
      return "huge-pages";
    case FileMemory::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<FileMemory> ParseFileMemory(absl::string_view name) {
  for (FileMemory m :
       {FileMemory::kAuto, FileMemory::kMap, FileMemory::kHugePages}) {
    if (name == FileMemoryName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown weights memory '", name,
                   "' (expected auto, map or huge-pages)"));
}

bool HugePagesHelp(uint64_t size) {
  return size >= kMinHugeFile && TransparentHugePagesOn() &&
         size <= AvailableBytes() / 2;
}

absl::StatusOr<FileBytes> PlaceFileBytes(int fd, size_t size, FileMemory want) {
  if (want == FileMemory::kAuto) {
    want = HugePagesHelp(size) ? FileMemory::kHugePages : FileMemory::kMap;
  }
  if (want == FileMemory::kMap || size == 0) return MapFile(fd, size);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return MapFile(fd, size);
  // Advice only: without it (or without THP) the copy still works.
  ::madvise(p, size, MADV_HUGEPAGE);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, static_cast<char*>(p) + done, size - done,
                              static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "file ended early";
      ::munmap(p, size);
      return n < 0 ? absl::InternalError(absl::StrCat("read failed: ", why))
                   : absl::DataLossError(why);
    }
    done += static_cast<size_t>(n);
  }
  ::mprotect(p, size, PROT_READ);  // as read-only as the mapping
  return FileBytes{p, size, FileMemory::kHugePages};
}

void ReleaseFileBytes(const FileBytes& bytes) {
  if (bytes.data != nullptr) ::munmap(bytes.data, bytes.size);
}

}  // namespace ckv::gguf
