#include "kernels/device/cache_phases.h"

#include <algorithm>
#include <numeric>

#include "kernels/device/selection_phases.h"

namespace ckv::kernels::device {
namespace {

template <class T>
Range Of(uint64_t addr, int64_t count) {
  return Range{DevPtr{addr}, count * static_cast<int64_t>(sizeof(T))};
}

void Declare(const CacheHostItem& h, Op* op) {
  const CacheItem& c = h.item;
  op->reads.push_back(Of<threads::RowListItem>(c.lists, c.n_plans));
  for (const auto& it : h.lists) DeclareRowListItem(it, op);
  if (c.member_last != 0 && !h.lists.empty()) {
    op->reads.push_back(Of<int64_t>(c.member_last, h.lists[0].n));
  }
  op->reads.push_back(Of<int64_t>(c.seg_size, c.n_segs));
  op->reads.push_back(Of<int32_t>(c.seg_block, c.n_segs + 1));
  op->reads.push_back(Of<uint64_t>(c.seg_keys, c.n_segs));
  op->reads.push_back(Of<uint64_t>(c.seg_values, c.n_segs));
  for (const Range& r : h.seg_keys) op->reads.push_back(r);
  for (const Range& r : h.seg_values) op->reads.push_back(r);
  op->writes.push_back(Of<int32_t>(c.slot, c.n_blocks));
  op->writes.push_back(Of<int64_t>(c.last_used, c.n_blocks));
  op->writes.push_back(Of<int32_t>(c.size, c.n_blocks));
  op->writes.push_back(Of<int32_t>(c.next_page, c.n_pages));
  op->writes.push_back(Of<int32_t>(c.free_stack, c.n_pages));
  op->writes.push_back(Of<CacheCounters>(c.counters, 1));
  const int64_t rows = int64_t{c.n_pages} * kCachePageRows;
  op->writes.push_back(Of<uint16_t>(c.keys, rows * c.head_dim));
  op->writes.push_back(Of<uint16_t>(c.values, rows * c.head_dim));
  op->writes.push_back(Of<int64_t>(c.page_pos, rows));
  op->writes.push_back(Of<CacheRequest>(c.requests, c.max_requests));
}

// The fake's view of an item: every address mapped through the context;
// the segments' row addresses (device memory holding addresses) mapped
// one by one into `keys` / `values`.
struct ItemViews {
  threads::CacheView cache;
  std::vector<threads::RowListView> plans;
  std::vector<const uint16_t*> keys, values;
};

void ViewItem(OpContext& ctx, const CacheItem& c, ItemViews* out) {
  auto map = [&ctx](uint64_t addr, int64_t bytes, bool write) -> void* {
    return write ? static_cast<void*>(ctx.Out<uint8_t>(DevPtr{addr}, bytes))
                 : const_cast<uint8_t*>(ctx.In<uint8_t>(DevPtr{addr}, bytes));
  };
  const auto* lists = ctx.In<threads::RowListItem>(DevPtr{c.lists}, c.n_plans);
  out->plans.clear();
  for (int32_t p = 0; p < c.n_plans; ++p) {
    out->plans.push_back(threads::ViewOf(lists[p], map));
  }
  const int64_t n = c.n_plans > 0 ? lists[0].n : 0;
  const auto* kaddr = ctx.In<uint64_t>(DevPtr{c.seg_keys}, c.n_segs);
  const auto* vaddr = ctx.In<uint64_t>(DevPtr{c.seg_values}, c.n_segs);
  const auto* size = ctx.In<int64_t>(DevPtr{c.seg_size}, c.n_segs);
  out->keys.clear();
  out->values.clear();
  for (int32_t s = 0; s < c.n_segs; ++s) {
    const int64_t bytes = size[s] * c.head_dim * 2;
    out->keys.push_back(ctx.In<uint16_t>(DevPtr{kaddr[s]}, bytes / 2));
    out->values.push_back(ctx.In<uint16_t>(DevPtr{vaddr[s]}, bytes / 2));
  }
  threads::CacheView& v = out->cache;
  const int64_t rows = int64_t{c.n_pages} * kCachePageRows;
  v.seg_size = size;
  v.seg_block = ctx.In<int32_t>(DevPtr{c.seg_block}, c.n_segs + 1);
  v.seg_keys = out->keys.data();
  v.seg_values = out->values.data();
  v.member_last =
      c.member_last == 0 ? nullptr : ctx.In<int64_t>(DevPtr{c.member_last}, n);
  v.slot = ctx.Out<int32_t>(DevPtr{c.slot}, c.n_blocks);
  v.last_used = ctx.Out<int64_t>(DevPtr{c.last_used}, c.n_blocks);
  v.size = ctx.Out<int32_t>(DevPtr{c.size}, c.n_blocks);
  v.next_page = ctx.Out<int32_t>(DevPtr{c.next_page}, c.n_pages);
  v.free_stack = ctx.Out<int32_t>(DevPtr{c.free_stack}, c.n_pages);
  v.counters = ctx.Out<CacheCounters>(DevPtr{c.counters}, 1);
  v.keys = ctx.Out<uint16_t>(DevPtr{c.keys}, rows * c.head_dim);
  v.values = ctx.Out<uint16_t>(DevPtr{c.values}, rows * c.head_dim);
  v.page_pos = ctx.Out<int64_t>(DevPtr{c.page_pos}, rows);
  v.requests = ctx.Out<CacheRequest>(DevPtr{c.requests}, c.max_requests);
  threads::CopyScalars(c, &v);
}

}  // namespace

Op CacheListsBatchOp(const CacheListsArgs& a,
                     const std::vector<CacheHostItem>& host_items) {
  Op op;
  op.name = "cache_lists_batch";
  op.reads = {Of<CacheItem>(a.items.addr, a.n_items)};
  for (const CacheHostItem& h : host_items) Declare(h, &op);
  op.body = [a](OpContext& ctx) {
    const auto* items = ctx.In<CacheItem>(a.items, a.n_items);
    std::vector<ItemViews> views(a.n_items);
    for (int32_t i = 0; i < a.n_items; ++i) ViewItem(ctx, items[i], &views[i]);
    ctx.Phase(a.n_items, [&](int64_t i) {
      const auto& plans = views[i].plans;
      threads::CacheRequests(views[i].cache,
                             [&plans](int32_t p) { return plans[p]; });
    });
    ctx.Phase(a.n_items,
              [&](int64_t i) { threads::CacheResolve(views[i].cache); });
    ctx.Phase(int64_t{a.n_items} * a.max_requests, [&](int64_t t) {
      const ItemViews& v = views[t / a.max_requests];
      if (v.plans.empty() || t % a.max_requests >= v.cache.max_requests) {
        return;
      }
      threads::CacheFetch(v.cache, v.plans[0], t % a.max_requests);
    });
    ctx.Phase(int64_t{a.n_items} * a.max_slots, [&](int64_t t) {
      const ItemViews& v = views[t / a.max_slots];
      const int64_t slot = t % a.max_slots;
      if (v.plans.empty()) return;
      const int64_t per = v.plans[0].max_out;
      if (per <= 0 || slot / per >= v.cache.n_plans) return;
      threads::CacheFill(v.cache, v.plans[slot / per], slot % per);
    });
    ctx.Phase(a.n_items,
              [&](int64_t i) { threads::CacheEvict(views[i].cache); });
  };
  return op;
}

CacheTableImage EmptyCacheTable(int32_t n_blocks, int32_t n_pages) {
  CacheTableImage t;
  t.slot.assign(n_blocks, -1);
  t.last_used.assign(n_blocks, -1);
  t.size.assign(n_blocks, 0);
  t.next_page.assign(n_pages, -1);
  t.free_stack.resize(n_pages);
  std::iota(t.free_stack.begin(), t.free_stack.end(), 0);
  t.counters.free_top = n_pages;
  return t;
}

}  // namespace ckv::kernels::device
