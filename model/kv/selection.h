// Selection policies: which clustered tokens a decode query attends, as a
// plan of blocks (whole k-means clusters or position-ordered pages, or row
// ranges of them). Semantics: ARCHITECTURE.md, "ClusterKV semantics".
#pragma once

#include <cstdint>
#include <vector>

#include "model/kv/kv_config.h"
#include "model/kv/segment.h"

namespace ckv {

enum class BlockKind : uint8_t { kCluster, kPage };

// Rows [begin, begin + count) of one block. A cluster's rows are its members
// in ascending position order; a page's rows are page*page_size + r.
struct BlockRef {
  int32_t segment = 0;  // index into the segment list
  BlockKind kind = BlockKind::kCluster;
  int32_t id = 0;       // cluster or page index within the segment
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
// Segment row of row r of a block.
int32_t BlockRow(const Segment& seg, int layer, int kv_head, BlockKind kind,
                 int32_t id, int32_t r, int page_size);

// clusterkv: clusters by descending q . centroid (exact order; ties by
// segment then cluster index), whole clusters until B, the last trimmed to
// its first rows in position order; `recent_tokens` most recent rows first.
// For per_kv_head pass the sum of the group's queries.
void PlanClusterKv(const KvStoreConfig& config, const PlanContext& ctx,
                   const float* q, HeadPlan* out);
// quest: the top ceil(B/page) pages by sum_c max(q_c max_c, q_c min_c),
// summed over `n_q` queries (1 head, or the group for per_kv_head).
void PlanQuest(const KvStoreConfig& config, const PlanContext& ctx,
               const float* const* qs, int n_q, HeadPlan* out);
// streaming: the most recent B clustered rows.
void PlanStreaming(const KvStoreConfig& config, const PlanContext& ctx,
                   HeadPlan* out);

}  // namespace ckv
