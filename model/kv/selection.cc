#include "model/kv/selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ckv {

int32_t BlockSize(const Segment& seg, int layer, int kv_head, BlockKind kind,
                  int32_t id, int page_size) {
  if (kind == BlockKind::kCluster) {
    const HeadIndex& h = seg.layer(layer).heads[kv_head];
    return h.offsets[id + 1] - h.offsets[id];
  }
  const int64_t begin = int64_t{id} * page_size;
  return static_cast<int32_t>(std::min<int64_t>(page_size, seg.size() - begin));
}

void AppendBlockRows(const Segment& seg, int layer, int kv_head, BlockKind kind,
                     int32_t id, int32_t begin, int32_t count, int page_size,
                     std::vector<int32_t>* out) {
  const auto& heads = seg.layer(layer).heads;
  const HeadIndex* h = heads.empty() ? nullptr : &heads[kv_head];
  const bool by_cluster = h != nullptr && h->rows_by_cluster();
  // Row `begin` of the block as an index into `map`, or the stored row
  // itself when there is no map (the block's rows are then contiguous).
  const bool cluster = kind == BlockKind::kCluster;
  const int32_t first =
      cluster ? h->offsets[id] + begin : id * page_size + begin;
  const int32_t* map = cluster ? (by_cluster ? nullptr : h->members.data())
                               : (by_cluster ? h->row_of.data() : nullptr);
  if (map != nullptr) {
    out->insert(out->end(), map + first, map + first + count);
    return;
  }
  const size_t old = out->size();
  out->resize(old + count);
  std::iota(out->begin() + old, out->end(), first);
}

void SortBestBlocks(std::vector<ScoredBlock>* order, size_t prefix) {
  for (ScoredBlock& b : *order) {  // a strict weak order: NaN ranks last
    if (std::isnan(b.score)) b.score = -INFINITY;
  }
  prefix = std::min(prefix, order->size());
  if (prefix < order->size()) {
    std::nth_element(order->begin(), order->begin() + prefix, order->end(),
                     kScoreBefore);
  }
  std::sort(order->begin(), order->begin() + prefix, kScoreBefore);
}

int64_t ClusteredTokens(const PlanContext& ctx) {
  int64_t n = 0;
  for (const Segment* s : *ctx.segments) n += s->size();
  return n;
}

void AddRecentRows(const PlanContext& ctx, int64_t n, int page_size,
                   HeadPlan* out, std::vector<int64_t>* recent_begin) {
  const auto& segs = *ctx.segments;
  recent_begin->resize(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) (*recent_begin)[i] = segs[i]->size();
  for (int64_t s = static_cast<int64_t>(segs.size()) - 1; s >= 0 && n > 0;
       --s) {
    const int64_t size = segs[s]->size();
    const int64_t take = std::min(n, size);
    (*recent_begin)[s] = size - take;
    n -= take;
    for (int64_t row = size - take; row < size;) {
      const int32_t page = static_cast<int32_t>(row / page_size);
      const int64_t page_end =
          std::min<int64_t>(size, (page + 1) * int64_t{page_size});
      const int32_t begin =
          static_cast<int32_t>(row - int64_t{page} * page_size);
      const int32_t count = static_cast<int32_t>(page_end - row);
      out->blocks.push_back(
          {static_cast<int32_t>(s), BlockKind::kPage, page, begin, count});
      out->tokens += count;
      row = page_end;
    }
  }
}

}  // namespace ckv
