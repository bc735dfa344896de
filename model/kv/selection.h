// Selection plans: which clustered tokens a decode query attends, as a plan
// of blocks (whole k-means clusters or position-ordered pages, or row ranges
// of them), and helpers the policies (model/kv/policies/) share. Semantics:
// docs/clusterkv.md, "Selection".
#pragma once

#include <cstdint>
#include <vector>

#include "model/kv/kv_config.h"
#include "model/kv/segment.h"

namespace ckv {

enum class BlockKind : uint8_t { kCluster, kPage };

// Rows [begin, begin + count) of one block. A cluster's rows are its members
// in ascending position order; a page's rows are the segment rows
// page*page_size + r.
struct BlockRef {
  int32_t segment = 0;  // index into the segment list
  BlockKind kind = BlockKind::kCluster;
  int32_t id = 0;  // cluster or page index within the segment
  int32_t begin = 0;
  int32_t count = 0;
};

struct HeadPlan {
  std::vector<BlockRef> blocks;
  int64_t tokens = 0;  // sum of counts: min(B, clustered) for clusterkv
};

// What a plan is computed over: one sparse layer and KV head.
struct PlanContext {
  const std::vector<const Segment*>* segments = nullptr;
  int layer = 0;
  int kv_head = 0;
  int head_dim = 0;
};

// Number of rows of a block (whole block, before begin/count).
int32_t BlockSize(const Segment& seg, int layer, int kv_head, BlockKind kind,
                  int32_t id, int page_size);
// Appends the stored rows (Segment::keys indices) of rows [begin, begin +
// count) of a block to `out`, in bulk: the hot path of every decode step.
void AppendBlockRows(const Segment& seg, int layer, int kv_head, BlockKind kind,
                     int32_t id, int32_t begin, int32_t count, int page_size,
                     std::vector<int32_t>* out);

// Rows of all segments of ctx.
int64_t ClusteredTokens(const PlanContext& ctx);

// Appends page blocks covering the last `n` clustered rows (in position
// order); *recent_begin = per segment, the first row that is "recent" (its
// size when none is).
void AddRecentRows(const PlanContext& ctx, int64_t n, int page_size,
                   HeadPlan* out, std::vector<int64_t>* recent_begin);

// A scored block (cluster or page) of one segment.
struct ScoredBlock {
  float score;
  int32_t segment;
  int32_t id;
};

// Descending score; ties by segment, then block index.
inline bool ScoreBefore(const ScoredBlock& a, const ScoredBlock& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.segment != b.segment) return a.segment < b.segment;
  return a.id < b.id;
}
// ScoreBefore as a function object (inlined by the sorts).
inline constexpr auto kScoreBefore = [](const ScoredBlock& a,
                                        const ScoredBlock& b) {
  return ScoreBefore(a, b);
};

// Puts the `prefix` best blocks (ScoreBefore order) first, in that order;
// the rest follow unordered, each after all of them. NaN scores become
// -infinity first (they rank last). O(n + prefix log
// prefix): an exact selection, then a sort of the prefix only.
void SortBestBlocks(std::vector<ScoredBlock>* order, size_t prefix);

}  // namespace ckv
