#include "model/kv/host_arena.h"

#include <new>
#include <utility>

namespace ckv {
namespace {

constexpr std::align_val_t kAlign{64};

class Heap final : public HostArena {
 public:
  void* Allocate(int64_t bytes) override {
    return ::operator new(static_cast<size_t>(bytes), kAlign);
  }
  void Free(void* p, int64_t /*bytes*/) override {
    ::operator delete(p, kAlign);
  }
  bool Contains(const void*, int64_t) const override { return false; }
};

}  // namespace

std::shared_ptr<HostArena> HeapArena() {
  static const std::shared_ptr<HostArena> heap = std::make_shared<Heap>();
  return heap;
}

HostRows::HostRows(std::shared_ptr<HostArena> arena, int64_t elems)
    : arena_(arena ? std::move(arena) : HeapArena()), elems_(elems) {
  if (elems_ > 0) {
    data_ = static_cast<uint16_t*>(
        arena_->Allocate(elems_ * static_cast<int64_t>(sizeof(uint16_t))));
  }
}

HostRows& HostRows::operator=(HostRows&& o) noexcept {
  if (this != &o) {
    Reset();
    arena_ = std::move(o.arena_);
    data_ = std::exchange(o.data_, nullptr);
    elems_ = std::exchange(o.elems_, 0);
  }
  return *this;
}

void HostRows::Reset() {
  if (data_ != nullptr) {
    arena_->Free(data_, elems_ * static_cast<int64_t>(sizeof(uint16_t)));
  }
  data_ = nullptr;
  elems_ = 0;
}

}  // namespace ckv
