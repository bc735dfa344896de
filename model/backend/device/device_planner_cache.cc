// DevicePlanner's copy mode on the device (device_planner.h): a copy-mode
// request's block caches prepared and sized (DevicePagedCache,
// StepPagesBound), their sections in the call's buffers, the cache_lists
// items and op (after the row lists, whose items it reads and whose lists
// it rewrites over the caches' arenas), the arenas' addresses for the
// store's spans, and the check that every cache served its requests.
#include <algorithm>
#include <cstring>

#include "kernels/device/op_launchers.h"
#include "model/backend/device/device_planner.h"
#include "model/backend/device/device_planner_layout.h"

namespace ckv {

namespace dev = kernels::device;

std::unique_ptr<DeviceBlockCache> DevicePlanner::NewBlockCache(
    int head_dim, int cache_steps) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!status_.ok() || debug_.no_block_caches || head_dim <= 0 ||
      cache_steps < 0) {
    return nullptr;
  }
  std::weak_ptr<CacheRegistry> weak = cache_registry_;
  auto on_move = [weak](uint64_t old_base, uint64_t base, int64_t bytes) {
    auto r = weak.lock();
    if (r == nullptr) return;
    std::lock_guard<std::mutex> lock(r->mu);
    if (old_base != 0) r->tables.erase(old_base);
    if (base != 0) r->tables[base] = bytes;
  };
  return std::make_unique<DevicePagedCache>(rt_, stream_, head_dim, cache_steps,
                                            on_move);
}

bool DevicePlanner::FindCacheRows(const void* p, dev::Range* rows) const {
  const uint64_t at = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  std::lock_guard<std::mutex> lock(cache_registry_->mu);
  const auto& t = cache_registry_->tables;
  auto it = t.upper_bound(at);
  if (it == t.begin()) return false;
  --it;
  if (at >= it->first + static_cast<uint64_t>(it->second)) return false;
  *rows =
      dev::Range{DevPtr{at}, static_cast<int64_t>(it->first + it->second - at)};
  return true;
}

void DevicePlanner::SetHostRowsMap(
    std::function<bool(const void*, int64_t, uint64_t*)> map) {
  std::lock_guard<std::mutex> lock(mu_);
  host_rows_map_ = std::move(map);
}

int64_t DevicePlanner::cache_ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_ops_;
}

bool DevicePlanner::MakeCacheLayout(const Request& r, Layout* l, int64_t* in,
                                    int64_t* work, int64_t* out) {
  const DeviceRowLists& lists = *r.lists;
  const int64_t n_rows = int64_t{l->n_segs} * l->n_kv;
  if (static_cast<int>(lists.caches.size()) != l->n_kv ||
      static_cast<int64_t>(lists.seg_keys.size()) != n_rows ||
      static_cast<int64_t>(lists.seg_values.size()) != n_rows) {
    return false;
  }
  for (int g = 0; g < l->n_kv; ++g) {
    auto* cache = static_cast<DevicePagedCache*>(lists.caches[g]);
    // A cache that cannot be made (device memory) leaves the layer to the
    // host path this step.
    if (cache == nullptr ||
        !cache->Prepare(*r.segments, r.layer, g, *r.config, l->nq)) {
      return false;
    }
    l->caches.push_back(cache);
    Layout::Head& h = l->heads[g];
    h.cache_seg_block = *in;
    *in += Section<int32_t>(l->n_segs + 1);
    h.cache_seg_keys = *in;
    *in += Section<uint64_t>(l->n_segs);
    h.cache_seg_values = *in;
    *in += Section<uint64_t>(l->n_segs);
    h.cache_requests = *work;
    *work += Section<dev::CacheRequest>(int64_t{l->nq} * h.max_out);
    h.cache_counters = *out;
    *out += Section<dev::CacheCounters>(1);
  }
  return true;
}

// Per KV head: the cache's segment blocks and each segment's rows on the
// device (mapped pinned rows, or device rows as they are).
void DevicePlanner::FillCacheTables(const Layout& l, const Request& r) {
  char* base = call_->in_host + l.in_off;
  auto device = [this](const void* p, int64_t bytes) {
    uint64_t addr = 0;
    if (host_rows_map_ && host_rows_map_(p, bytes, &addr)) return addr;
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  };
  for (int g = 0; g < l.n_kv; ++g) {
    const Layout::Head& h = l.heads[g];
    const std::vector<int32_t>& first = l.caches[g]->seg_block();
    std::memcpy(base + h.cache_seg_block, first.data(), 4 * first.size());
    auto* keys = reinterpret_cast<uint64_t*>(base + h.cache_seg_keys);
    auto* values = reinterpret_cast<uint64_t*>(base + h.cache_seg_values);
    for (int s = 0; s < l.n_segs; ++s) {
      const int64_t bytes = (*r.segments)[s]->size() * l.hd * 2;
      const size_t at = size_t{1} * s * l.n_kv + g;
      keys[s] = device(r.lists->seg_keys[at], bytes);
      values[s] = device(r.lists->seg_values[at], bytes);
    }
  }
}

void DevicePlanner::AddCacheItem(const Layout& l, const Request& r, int g,
                                 Batch* b) {
  const Call& c = *call_;
  const Layout::Head& h = l.heads[g];
  const DevPtr in = c.in_dev + l.in_off, work = c.work_dev + l.work_off;
  const size_t first = b->row_items.size() - l.nq;
  dev::CacheItem it;
  l.caches[g]->FillItem(&it);
  it.lists = (c.in_dev + b->row_items_off +
              static_cast<int64_t>(first * sizeof(dev::threads::RowListItem)))
                 .addr;
  it.seg_size = (in + h.seg_size).addr;
  it.seg_block = (in + h.cache_seg_block).addr;
  it.seg_keys = (in + h.cache_seg_keys).addr;
  it.seg_values = (in + h.cache_seg_values).addr;
  it.member_last = l.quest ? 0 : (in + h.member_last).addr;  // pages: none
  it.requests = (work + h.cache_requests).addr;
  it.max_requests = int64_t{l.nq} * h.max_out;
  it.step = r.lists->cache_step;
  it.n_plans = l.nq;
  it.n_segs = l.n_segs;
  b->cache_items.push_back(it);
  dev::CacheHostItem host;
  host.item = it;
  host.lists.assign(b->row_items.begin() + first, b->row_items.end());
  const char* base = c.in_host + l.in_off;
  const auto* keys = reinterpret_cast<const uint64_t*>(base + h.cache_seg_keys);
  const auto* values =
      reinterpret_cast<const uint64_t*>(base + h.cache_seg_values);
  for (int s = 0; s < l.n_segs; ++s) {
    const int64_t bytes = (*r.segments)[s]->size() * l.hd * 2;
    host.seg_keys.push_back({DevPtr{keys[s]}, bytes});
    host.seg_values.push_back({DevPtr{values[s]}, bytes});
  }
  b->cache_host.push_back(std::move(host));
  b->cache_counters_at.push_back(b->results + l.out_off + h.cache_counters);
  b->max_requests = std::max(b->max_requests, it.max_requests);
  b->max_cache_slots = std::max(b->max_cache_slots, it.max_requests);
}

// One op for every cache of the call, then each cache's counters into its
// request's results (read back with the plans).
bool DevicePlanner::LaunchCacheLists(const Batch& b) {
  const dev::OpLaunchers* k = rt_.launchers();
  dev::CacheListsArgs a;
  a.items = call_->in_dev + b.cache_items_off;
  a.n_items = static_cast<int32_t>(b.cache_items.size());
  a.max_requests = b.max_requests;
  a.max_slots = b.max_cache_slots;
  dev::Op op = dev::CacheListsBatchOp(a, b.cache_host);
  if (k != nullptr) {
    op.device_launch = [k, a](void* st) { return k->CacheListsBatch(a, st); };
  }
  if (!Ok(rt_.Launch(std::move(op), stream_))) return false;
  ++cache_ops_;
  for (size_t i = 0; i < b.cache_items.size(); ++i) {
    if (!Ok(rt_.CopyD2D(call_->work_dev + b.cache_counters_at[i],
                        DevPtr{b.cache_items[i].counters},
                        sizeof(dev::CacheCounters), stream_))) {
      return false;
    }
  }
  return true;
}

void DevicePlanner::FillCacheLists(const Layout& l, DeviceRowLists* lists) {
  lists->arena_keys.clear();
  lists->arena_values.clear();
  lists->arena_rows.clear();
  for (const DevicePagedCache* cache : l.caches) {
    dev::CacheItem it;
    cache->FillItem(&it);
    lists->arena_keys.push_back(it.keys);
    lists->arena_values.push_back(it.values);
    lists->arena_rows.push_back(int64_t{it.n_pages} * dev::kCachePageRows);
  }
}

bool DevicePlanner::CacheCountersOk(const Call& c) {
  for (size_t i = 0; i < c.requests.size(); ++i) {
    const Layout& l = c.layouts[i];
    if (!c.planned[i] || !l.cache) continue;
    for (int g = 0; g < l.n_kv; ++g) {
      dev::CacheCounters k;
      std::memcpy(&k, c.out_host + l.out_off + l.heads[g].cache_counters,
                  sizeof(k));
      if (k.overflow != 0) {
        Ok(absl::InternalError(
            "a device block cache could not serve its requests (overflow)"));
        return false;
      }
    }
  }
  return true;
}

}  // namespace ckv
