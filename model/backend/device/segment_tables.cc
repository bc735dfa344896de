#include "model/backend/device/segment_tables.h"

#include <algorithm>
#include <cstring>

namespace ckv {

namespace {

constexpr int64_t kAlign = 64;
constexpr int64_t kFirstPool = int64_t{1} << 20;

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

SegmentTables::SegmentTables(kernels::device::Runtime& runtime,
                             kernels::device::Stream stream, int64_t max_bytes)
    : rt_(runtime), stream_(stream), max_bytes_(max_bytes) {}

SegmentTables::~SegmentTables() {
  Release(rt_, &staging_);
  if (!pool_.null()) rt_.Free(pool_).IgnoreError();
}

bool SegmentTables::Ok(const absl::Status& s) {
  if (!s.ok() && status_.ok()) status_ = s;
  return s.ok();
}

const SegmentTables::Entry* SegmentTables::Ensure(const Segment& seg, int layer,
                                                  int64_t tick) {
  if (!status_.ok()) return nullptr;
  const Key key{seg.uid(), layer};
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.last_used = tick;
    return &it->second;
  }
  Entry e;
  e.last_used = tick;
  int64_t bytes = 0;
  for (const HeadIndex& h : seg.layer(layer).heads) {
    Head x;
    x.panels = bytes;
    bytes += AlignUp(static_cast<int64_t>(h.centroid_panels.size()) * 2);
    x.members = bytes;
    bytes += AlignUp(static_cast<int64_t>(h.members.size()) * 4);
    if (h.rows_by_cluster()) {
      x.row_of = bytes;
      bytes += AlignUp(static_cast<int64_t>(h.row_of.size()) * 4);
    }
    const int64_t hd = seg.shape().head_dim;
    if (!h.page_min.empty() && h.page_max.size() == h.page_min.size() &&
        hd > 0 && h.page_min.size() % hd == 0) {
      x.page_min = bytes;
      x.pages = static_cast<int64_t>(h.page_min.size()) / hd;
      bytes += AlignUp(static_cast<int64_t>(h.page_min.size()) * 8);
    }
    e.heads.push_back(x);
  }
  e.bytes = std::max<int64_t>(bytes, kAlign);
  e.offset = Place(e.bytes, tick);
  if (e.offset < 0) return nullptr;
  for (Head& x : e.heads) {
    x.panels += e.offset;
    x.members += e.offset;
    if (x.row_of >= 0) x.row_of += e.offset;
    if (x.page_min >= 0) x.page_min += e.offset;
  }
  if (!Upload(seg, layer, e)) {
    ranges_.Free(e.offset, e.bytes);
    return nullptr;
  }
  return &entries_.emplace(key, std::move(e)).first->second;
}

int64_t SegmentTables::Place(int64_t bytes, int64_t tick) {
  while (true) {
    const int64_t off = ranges_.Allocate(bytes);
    if (off >= 0) return off;
    if (EvictOne(tick)) continue;
    if (!GrowPool(bytes)) return -1;
  }
}

// Evicts the least recently used entry of an earlier call, if any; ties
// (the entries of one call) go oldest segment first, so that the order
// does not depend on the hash map's.
bool SegmentTables::EvictOne(int64_t tick) {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.last_used >= tick) continue;
    if (victim == entries_.end() ||
        std::pair(it->second.last_used, it->first) <
            std::pair(victim->second.last_used, victim->first)) {
      victim = it;
    }
  }
  if (victim == entries_.end()) return false;
  ranges_.Free(victim->second.offset, victim->second.bytes);
  entries_.erase(victim);
  ++evictions_;
  return true;
}

// Doubles the pool (at least to hold `need` more bytes) within max_bytes_,
// copying the resident entries on the device.
bool SegmentTables::GrowPool(int64_t need) {
  const int64_t old = ranges_.capacity();
  int64_t cap = std::max(kFirstPool, 2 * old);
  while (cap < old + need) cap *= 2;
  cap = std::min(cap, max_bytes_);
  if (cap < old + need || cap <= old) return false;
  auto p = rt_.Malloc(cap);
  if (!Ok(p.status())) return false;
  if (old > 0) {
    if (!Ok(rt_.CopyD2D(*p, pool_, old, stream_))) return false;
    // Free waits for the device's work, the copy included.
    if (!Ok(rt_.Free(pool_))) return false;
  }
  pool_ = *p;
  ranges_.Grow(cap);
  return true;
}

// Copies the entry's panels, members, row_of and page bounds through the
// pinned staging.
bool SegmentTables::Upload(const Segment& seg, int layer, Entry& e) {
  if (staging_.bytes < e.bytes) {
    if (!Ok(Grow(rt_, e.bytes, &staging_))) return false;
  } else if (!Ok(rt_.Synchronize(stream_))) {  // its last copy is done
    return false;
  }
  if (!Ok(rt_.HostWrite(staging_.host, e.bytes))) return false;
  const std::vector<HeadIndex>& heads = seg.layer(layer).heads;
  // v's bytes at pool offset `at` (an index a policy does not build is
  // empty: nothing to copy, and memcpy may not read a null pointer).
  auto put = [&](int64_t at, const auto& v) {
    if (v.empty()) return;
    std::memcpy(staging_.host + (at - e.offset), v.data(),
                v.size() * sizeof(v[0]));
  };
  for (size_t g = 0; g < heads.size(); ++g) {
    const HeadIndex& h = heads[g];
    const Head& at = e.heads[g];
    put(at.panels, h.centroid_panels);
    put(at.members, h.members);
    if (at.row_of >= 0) put(at.row_of, h.row_of);
    if (at.page_min >= 0) {
      put(at.page_min, h.page_min);
      put(at.page_min + static_cast<int64_t>(h.page_min.size() * 4),
          h.page_max);
    }
  }
  ++uploads_;
  return Ok(rt_.CopyH2D(pool_ + e.offset, staging_.host, e.bytes, stream_));
}

}  // namespace ckv
