#include "kernels/device/fake_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckv::kernels::device {
namespace {

constexpr int64_t kAlign = 256;  // as cudaMalloc
constexpr size_t kPinnedQuarantine = 16;

int64_t RoundUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string Hex(uint64_t a) { return absl::StrFormat("0x%x", a); }

}  // namespace

std::string SiteString(const Site& site) {
  return absl::StrCat(site.file, ":", site.line);
}

FakeMemory::FakeMemory(int64_t device_bytes, int64_t quarantine_bytes)
    : device_bytes_(RoundUp(device_bytes)),
      quarantine_limit_(quarantine_bytes >= 0 ? quarantine_bytes
                                              : device_bytes_ / 4) {
  if (device_bytes <= 0) {
    init_status_ = absl::InvalidArgumentError("fake device size must be > 0");
    device_bytes_ = 0;
    return;
  }
  const size_t n = static_cast<size_t>(device_bytes_);
  void* r = mmap(nullptr, n, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* b = mmap(nullptr, n, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED || b == MAP_FAILED) {
    if (r != MAP_FAILED) munmap(r, n);
    if (b != MAP_FAILED) munmap(b, n);
    init_status_ = absl::ResourceExhaustedError(
        absl::StrCat("cannot map a fake device of ", device_bytes_, " bytes"));
    device_bytes_ = 0;
    return;
  }
  reserved_ = static_cast<char*>(r);
  backing_ = static_cast<char*>(b);
  free_[0] = device_bytes_;
}

FakeMemory::~FakeMemory() {
  if (reserved_ != nullptr) munmap(reserved_, device_bytes_);
  if (backing_ != nullptr) munmap(backing_, device_bytes_);
  for (auto& [addr, b] : pinned_) std::free(reinterpret_cast<void*>(addr));
  for (auto& [addr, b] : freed_pinned_) {
    std::free(reinterpret_cast<void*>(addr));
  }
}

const FakeMemory::Block* FakeMemory::Find(
    const std::map<uint64_t, Block>& blocks, uint64_t addr, uint64_t* base) {
  auto it = blocks.upper_bound(addr);
  if (it == blocks.begin()) return nullptr;
  --it;
  if (addr >= it->first + static_cast<uint64_t>(it->second.bytes)) {
    return nullptr;
  }
  *base = it->first;
  return &it->second;
}

absl::StatusOr<DevPtr> FakeMemory::Malloc(int64_t bytes, Site site,
                                          bool async) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Malloc of ", bytes, " bytes at ", SiteString(site)));
  }
  const int64_t need = RoundUp(bytes);
  for (int pass = 0; pass < 2; ++pass) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      const uint64_t off = it->first;
      const int64_t left = it->second - need;
      free_.erase(it);
      if (left > 0) free_[off + need] = left;
      used_bytes_ += need;
      std::memset(backing_ + off, kPoisonByte, static_cast<size_t>(need));
      const uint64_t addr = reinterpret_cast<uint64_t>(reserved_) + off;
      live_[addr] = Block{need, site, {}, async};
      return DevPtr{addr};
    }
    // Out of room: only then may quarantined blocks come back early.
    if (quarantine_.empty()) break;
    while (!quarantine_.empty()) ReleaseQuarantine();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("fake device out of memory: Malloc of ", bytes, " bytes at ",
                   SiteString(site), " with ", free_bytes(), " of ",
                   device_bytes_, " bytes free"));
}

void FakeMemory::AddFree(uint64_t off, int64_t bytes) {
  auto [it, added] = free_.emplace(off, bytes);
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
}

void FakeMemory::ReleaseQuarantine() {
  const uint64_t addr = quarantine_.front();
  quarantine_.pop_front();
  auto it = freed_.find(addr);
  quarantined_bytes_ -= it->second.bytes;
  used_bytes_ -= it->second.bytes;
  AddFree(addr - reinterpret_cast<uint64_t>(reserved_), it->second.bytes);
  freed_.erase(it);
}

absl::Status FakeMemory::NotLive(DevPtr p, const char* call, Site site) const {
  uint64_t base = 0;
  const Block* f = Find(freed_, p.addr, &base);
  if (f != nullptr && base == p.addr) {
    return absl::FailedPreconditionError(
        absl::StrCat("double free of device address ", Hex(p.addr), " at ",
                     SiteString(site), " (allocated at ", SiteString(f->site),
                     ", freed at ", SiteString(f->freed_at), ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(call, " of ", Hex(p.addr), " at ", SiteString(site),
                   ": not the start of a live device allocation"));
}

absl::Status FakeMemory::Free(DevPtr p, Site site, bool async) {
  auto it = live_.find(p.addr);
  if (it == live_.end()) return NotLive(p, async ? "FreeAsync" : "Free", site);
  if (it->second.async != async) {
    return absl::InvalidArgumentError(absl::StrCat(
        async ? "FreeAsync" : "Free", " of ", Hex(p.addr), " at ",
        SiteString(site), ": allocated at ", SiteString(it->second.site),
        async ? " by Malloc (free it with Free)"
              : " by MallocAsync (free it with FreeAsync)"));
  }
  Block b = it->second;
  if (!b.freeing) b.freed_at = site;
  live_.erase(it);
  std::memset(backing_ + (p.addr - reinterpret_cast<uint64_t>(reserved_)),
              kPoisonByte, static_cast<size_t>(b.bytes));
  freed_[p.addr] = b;
  quarantine_.push_back(p.addr);
  quarantined_bytes_ += b.bytes;
  while (quarantined_bytes_ > quarantine_limit_) ReleaseQuarantine();
  return absl::OkStatus();
}

absl::Status FakeMemory::CheckAsyncFree(DevPtr p, Site site) const {
  auto it = live_.find(p.addr);
  if (it != live_.end() && it->second.freeing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "double free of device address ", Hex(p.addr), " at ", SiteString(site),
        " (allocated at ", SiteString(it->second.site), ", FreeAsync at ",
        SiteString(it->second.freed_at), ")"));
  }
  if (it != live_.end() && !it->second.async) {
    return absl::InvalidArgumentError(
        absl::StrCat("FreeAsync of ", Hex(p.addr), " at ", SiteString(site),
                     ": allocated at ", SiteString(it->second.site),
                     " by Malloc (free it with Free)"));
  }
  if (it == live_.end()) return NotLive(p, "FreeAsync", site);
  return absl::OkStatus();
}

void FakeMemory::MarkFreeing(DevPtr p, Site site) {
  auto it = live_.find(p.addr);
  if (it == live_.end()) return;
  it->second.freeing = true;
  it->second.freed_at = site;
}

absl::StatusOr<void*> FakeMemory::HostAllocPinned(int64_t bytes, Site site) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HostAllocPinned of ", bytes, " bytes at ", SiteString(site)));
  }
  const int64_t need = RoundUp(bytes);
  void* p = std::aligned_alloc(kAlign, static_cast<size_t>(need));
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HostAllocPinned of ", bytes, " bytes failed"));
  }
  std::memset(p, kPoisonByte, static_cast<size_t>(need));
  pinned_[reinterpret_cast<uint64_t>(p)] = Block{bytes, site, {}};
  return p;
}

absl::Status FakeMemory::HostFree(void* p, Site site) {
  auto it = pinned_.find(reinterpret_cast<uint64_t>(p));
  if (it == pinned_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostFree of ", Hex(reinterpret_cast<uint64_t>(p)), " at ",
                     SiteString(site), ": not a pinned buffer"));
  }
  Block b = it->second;
  b.freed_at = site;
  pinned_.erase(it);
  freed_pinned_[reinterpret_cast<uint64_t>(p)] = b;
  pinned_quarantine_.push_back(reinterpret_cast<uint64_t>(p));
  if (pinned_quarantine_.size() > kPinnedQuarantine) {
    const uint64_t old = pinned_quarantine_.front();
    pinned_quarantine_.pop_front();
    freed_pinned_.erase(old);
    std::free(reinterpret_cast<void*>(old));
  }
  return absl::OkStatus();
}

bool FakeMemory::InDeviceSpace(uint64_t addr) const {
  const uint64_t base = reinterpret_cast<uint64_t>(reserved_);
  return reserved_ != nullptr && addr >= base &&
         addr < base + static_cast<uint64_t>(device_bytes_);
}

bool FakeMemory::IsPinned(uint64_t addr, int64_t bytes) const {
  uint64_t base = 0;
  const Block* b = Find(pinned_, addr, &base);
  return b != nullptr && addr + bytes <= base + b->bytes;
}

absl::Status FakeMemory::CheckRange(Range r, const std::string& what,
                                    Site site) const {
  const uint64_t a = r.ptr.addr;
  if (r.bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " at ", SiteString(site), ": negative size ", r.bytes));
  }
  if (r.bytes == 0) return absl::OkStatus();
  uint64_t base = 0;
  const bool device = InDeviceSpace(a);
  const auto& live = device ? live_ : pinned_;
  const auto& freed = device ? freed_ : freed_pinned_;
  if (const Block* b = Find(live, a, &base)) {
    if (b->freeing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "use after free: ", what, " at ", SiteString(site), " touches ",
          Hex(a), " of the allocation made at ", SiteString(b->site),
          " and freed on a stream at ", SiteString(b->freed_at)));
    }
    if (a + r.bytes <= base + b->bytes) return absl::OkStatus();
    return absl::OutOfRangeError(
        absl::StrCat(what, " at ", SiteString(site), ": [", Hex(a), ", +",
                     r.bytes, ") runs past the end of the ", b->bytes,
                     "-byte allocation made at ", SiteString(b->site)));
  }
  if (const Block* f = Find(freed, a, &base)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "use after free: ", what, " at ", SiteString(site), " touches ", Hex(a),
        " of the allocation made at ", SiteString(f->site), " and freed at ",
        SiteString(f->freed_at)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " at ", SiteString(site), ": ", Hex(a),
      device ? " is not in a live device allocation"
             : " is neither device memory nor a mapped-pinned buffer"));
}

void* FakeMemory::HostView(DevPtr p) const {
  if (!InDeviceSpace(p.addr)) return reinterpret_cast<void*>(p.addr);
  return backing_ + (p.addr - reinterpret_cast<uint64_t>(reserved_));
}

int64_t FakeMemory::BlockBytes(DevPtr p) const {
  auto it = live_.find(p.addr);
  return it == live_.end() ? 0 : it->second.bytes;
}

std::string FakeMemory::AllocationSite(uint64_t addr) const {
  uint64_t base = 0;
  const Block* b = Find(InDeviceSpace(addr) ? live_ : pinned_, addr, &base);
  return b != nullptr ? SiteString(b->site) : "?";
}

}  // namespace ckv::kernels::device
