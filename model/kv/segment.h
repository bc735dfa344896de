// An immutable run of clustered tokens: the host-tier K,V of every layer and
// KV head, plus the selection indexes of each sparse layer that the store's
// policies need (k-means clusters, min/max pages). Built once when the segment
// closes, then shared read-only (forks share their parent's segments).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/dtype.h"
#include "model/kv/cache_rows.h"
#include "model/kv/host_arena.h"
#include "model/kv/index_builder.h"
#include "model/kv/kv_config.h"

namespace ckv {

// Shape of the KV rows a store holds.
struct KvShape {
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  // Per layer (or empty): > 0 makes the layer a sliding-window layer that
  // attends only its last `window` positions. The store never clusters or
  // selects in such a layer: it attends the window densely.
  std::vector<int32_t> layer_window = {};
  int group() const { return n_heads / n_kv_heads; }
  int64_t window(int layer) const {
    return layer < static_cast<int>(layer_window.size()) ? layer_window[layer]
                                                         : 0;
  }
};

// The per-segment selection indexes, as a bit set of IndexKind.
enum IndexKind : uint32_t {
  kClusterIndex = 1u << 0,  // k-means clusters (clusterkv)
  kPageIndex = 1u << 1,     // per-page key min/max (quest)
};
using IndexSet = uint32_t;

// Selection indexes of one (layer, KV head) of a segment. A "segment row" r
// is the token at position first_pos + r; a "stored row" is where its K,V
// sit in the host tier (SegmentLayer::k, v).
struct HeadIndex {
  // kClusterIndex: cluster c holds members[offsets[c] .. offsets[c+1]),
  // segment rows in ascending order; centroids are [k][head_dim].
  int k = 0;
  std::vector<float> centroids;
  // The centroids as clusterkv scores them: F16 panels of
  // kernels::cpu::kCentroidPanel, element-major (PackCentroidPanels).
  // Derived, not in snapshots.
  std::vector<uint16_t> centroid_panels;
  std::vector<int32_t> offsets;
  std::vector<int32_t> members;
  int kmeans_iterations = 0;
  // Keys scored against every centroid over the iterations (k-means skips
  // keys whose cluster cannot change): a statistic, not in snapshots.
  int64_t kmeans_key_scorings = 0;
  // Empty: K,V stored in position order (stored row r = segment row r).
  // Else stored by cluster (SortRowsByCluster): stored row j holds segment
  // row members[j], so cluster c is the contiguous stored rows [offsets[c],
  // offsets[c+1]), and row_of[r] is the stored row of segment row r.
  std::vector<int32_t> row_of;
  // kPageIndex: pages of quest_page_size segment rows in position order,
  // [pages][hd].
  std::vector<float> page_min, page_max;

  bool rows_by_cluster() const { return !row_of.empty(); }
  int64_t bytes() const;
};

struct SegmentLayer {
  HostRows k, v;                 // [n_kv_heads][n][head_dim], host tier
  std::vector<HeadIndex> heads;  // [n_kv_heads]; empty for dense layers
  int64_t ticket = 0;            // ClusterWorker job that builds `heads`
};

class Segment {
 public:
  // The rows come from `arena` (null: the heap), uninitialised: the
  // store writes every row before anyone reads the segment.
  Segment(int64_t uid, int64_t first_pos, int64_t n, const KvShape& shape,
          std::shared_ptr<HostArena> arena = nullptr);

  int64_t uid() const { return uid_; }  // unique in the process
  int64_t first_pos() const { return first_pos_; }
  int64_t size() const { return n_; }
  const KvShape& shape() const { return shape_; }

  SegmentLayer& layer(int l) { return layers_[l]; }
  const SegmentLayer& layer(int l) const { return layers_[l]; }
  // Rows of one (layer, KV head): [n][head_dim] of the host dtype.
  const uint16_t* keys(int l, int h) const;
  const uint16_t* values(int l, int h) const;
  uint16_t* mutable_keys(int l, int h);
  uint16_t* mutable_values(int l, int h);
  // Segment row of each stored row of (l, h) (members), or null when the
  // rows are stored in position order.
  const int32_t* row_positions(int l, int h) const;
  // Stored row of segment row r of (l, h), and the reverse.
  int32_t StoredRow(int l, int h, int32_t r) const;
  int32_t SegmentRow(int l, int h, int32_t stored) const;

  // Layer l's K,V rows (every KV head, in stored order) resident on the
  // device: made on the first call from `factory` (NewResidentRows) and
  // shared by every store that holds the segment; null when the backend
  // keeps none. Each call marks them used by the current step (Use); rows
  // the backend evicted are dropped and asked for again. Call only once
  // the layer's rows are final (its index job done). Thread-safe.
  const CacheRows* ResidentRows(int l, CacheRowsFactory& factory) const;

  int64_t kv_bytes() const;     // host-tier K,V
  int64_t index_bytes() const;  // centroids, offsets, members, pages

  // Time spent building this segment's indexes (k-means; Quest page
  // bounds), summed over the index jobs of all its layers. Written by the
  // job (possibly on the ClusterWorker), read after WaitForIndex. Wall
  // time, and the k-means job's CPU time (its thread's; a job on a busy
  // machine waits for a core, which only the wall time counts).
  int64_t kmeans_nanos() const { return kmeans_ns_.load(); }
  int64_t kmeans_cpu_nanos() const { return kmeans_cpu_ns_.load(); }
  int64_t pages_nanos() const { return pages_ns_.load(); }
  void AddIndexNanos(int64_t kmeans, int64_t kmeans_cpu, int64_t pages) {
    kmeans_ns_.fetch_add(kmeans);
    kmeans_cpu_ns_.fetch_add(kmeans_cpu);
    pages_ns_.fetch_add(pages);
  }

  static int64_t NextUid();

 private:
  int64_t uid_, first_pos_, n_;
  KvShape shape_;
  std::vector<SegmentLayer> layers_;
  mutable std::mutex resident_mu_;
  mutable std::vector<std::unique_ptr<CacheRows>> resident_;  // per layer
  mutable std::vector<bool> refused_;  // per layer: NewResidentRows said no
  std::atomic<int64_t> kmeans_ns_{0}, kmeans_cpu_ns_{0}, pages_ns_{0};
};

// Builds heads[] of the given layers of `seg` with the `indexes` asked for
// (page bounds; k-means over post-RoPE keys per KV head, batched over all
// (layer, head) problems). Deterministic: the k-means seed of (layer, head)
// derives from config.seed, the layer, the head and the segment's first
// position — not from timing or thread count.
// Then stores the K,V of every clustered head of those layers by cluster
// (SortRowsByCluster), so that a selected cluster is one contiguous run.
// `builder` runs the k-means jobs.
void IndexSegmentLayers(const KvStoreConfig& config, IndexSet indexes,
                        Segment& seg, const std::vector<int>& layers,
                        IndexBuilder& builder);

// Reorders the K,V rows of every head of `layer` that has clusters (k > 0)
// and is still in position order into cluster order, and fills row_of.
// The members must partition the segment rows (as k-means and the checked
// snapshot reader make them). Nobody may read the layer's rows meanwhile.
void SortRowsByCluster(Segment& seg, int layer);

// Fills centroid_panels of every clustered head of `layer` from its
// centroids (kernels::cpu::PackCentroidPanels): run once they are final,
// after k-means and after a snapshot restore.
void PackCentroidPanels(Segment& seg, int layer);

}  // namespace ckv
