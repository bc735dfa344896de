// ClusteredKvStore::Export and ::Restore: the store's host tier as plain
// parts (for snapshots) and back, with every invariant the store relies on
// checked on the way in.
#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "model/kv/clustered_store.h"
#include "model/kv/policies/registry.h"

namespace ckv {
namespace {

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("store parts: ", what));
}

// [n_kv][rows][hd] copied out of a row buffer of `capacity` rows per head.
std::vector<uint16_t> Pack(const std::vector<uint16_t>& buf, int64_t capacity,
                           int64_t rows, const KvShape& s) {
  std::vector<uint16_t> out(size_t{1} * s.n_kv_heads * rows * s.head_dim);
  for (int h = 0; h < s.n_kv_heads; ++h) {
    std::copy_n(buf.data() + size_t{1} * h * capacity * s.head_dim,
                rows * s.head_dim,
                out.data() + size_t{1} * h * rows * s.head_dim);
  }
  return out;
}

absl::Status CheckShape(const KvShape& s) {
  if (s.n_layers < 1 || s.n_heads < 1 || s.n_kv_heads < 1 || s.head_dim < 1 ||
      s.n_heads % s.n_kv_heads != 0) {
    return Bad("invalid KV shape");
  }
  return absl::OkStatus();
}

bool NoClusters(const HeadIndex& h) {
  return h.k == 0 && h.centroids.empty() && h.offsets.empty() &&
         h.members.empty();
}

// k-means clusters over n rows: offsets partition the members, which are
// rows of the segment ascending within each cluster, each row once; row_of,
// when set, is their inverse.
absl::Status CheckClusters(const HeadIndex& h, int64_t n, int hd) {
  if (h.k < 1 || h.k > n) return Bad("cluster count out of range");
  if (h.centroids.size() != size_t{1} * h.k * hd ||
      h.offsets.size() != static_cast<size_t>(h.k) + 1 ||
      h.members.size() != static_cast<size_t>(n)) {
    return Bad("cluster array sizes do not match the segment");
  }
  if (h.offsets[0] != 0 || h.offsets[h.k] != n) {
    return Bad("cluster offsets do not cover the segment");
  }
  std::vector<char> seen(n, 0);
  for (int c = 0; c < h.k; ++c) {
    if (h.offsets[c + 1] < h.offsets[c]) return Bad("cluster offsets descend");
    for (int32_t i = h.offsets[c]; i < h.offsets[c + 1]; ++i) {
      const int32_t m = h.members[i];
      if (m < 0 || m >= n) return Bad("cluster member out of range");
      if (i > h.offsets[c] && m <= h.members[i - 1]) {
        return Bad("cluster members not ascending");
      }
      if (seen[m]++) return Bad("a row is in two clusters");
    }
  }
  if (!h.row_of.empty()) {
    if (h.row_of.size() != static_cast<size_t>(n)) return Bad("row map size");
    for (int64_t j = 0; j < n; ++j) {
      if (h.row_of[h.members[j]] != j) return Bad("row map is not members'");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPages(const HeadIndex& h, int64_t n, const KvShape& s,
                        int page_size) {
  const size_t want =
      static_cast<size_t>((n + page_size - 1) / page_size) * s.head_dim;
  if (h.page_min.size() != want || h.page_max.size() != want) {
    return Bad("quest page array sizes do not match the segment");
  }
  return absl::OkStatus();
}

// One (layer, head) index: what the config needs must be there; what is
// there (e.g. inherited by a fork that changed policy) must be consistent.
absl::Status CheckHead(const HeadIndex& h, int64_t n, const KvShape& s,
                       const KvStoreConfig& c) {
  const IndexSet built = BuiltIndexes(c);
  const bool clusters = (built & kClusterIndex) != 0;
  const bool pages = (built & kPageIndex) != 0;
  if (clusters || !NoClusters(h)) {
    if (auto st = CheckClusters(h, n, s.head_dim); !st.ok()) return st;
  }
  if (pages || !h.page_min.empty() || !h.page_max.empty()) {
    if (auto st = CheckPages(h, n, s, c.quest_page_size); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status CheckSegment(const Segment& seg, int64_t first_pos,
                          const KvShape& s, const KvStoreConfig& c) {
  const KvShape& g = seg.shape();
  if (g.n_layers != s.n_layers || g.n_heads != s.n_heads ||
      g.n_kv_heads != s.n_kv_heads || g.head_dim != s.head_dim) {
    return Bad("segment shape differs from the store's");
  }
  if (seg.size() < 1 || seg.first_pos() != first_pos) {
    return Bad("segments are not contiguous");
  }
  for (int l = 0; l < s.n_layers; ++l) {
    if (seg.layer(l).ticket != 0) return Bad("segment index still building");
  }
  const size_t elems = size_t{1} * s.n_kv_heads * seg.size() * s.head_dim;
  for (int l = 0; l < s.n_layers; ++l) {
    const SegmentLayer& layer = seg.layer(l);
    if (layer.k.size() != static_cast<int64_t>(elems) ||
        layer.v.size() != static_cast<int64_t>(elems)) {
      return Bad("segment K/V size does not match its rows");
    }
    const bool sparse = l >= c.dense_layers && s.window(l) == 0;
    const bool needed = sparse && BuiltIndexes(c) != 0;
    if (layer.heads.empty() && !needed) continue;
    if (!sparse || layer.heads.size() != static_cast<size_t>(s.n_kv_heads)) {
      return Bad(absl::StrCat("segment index of layer ", l,
                              " missing or of the wrong size"));
    }
    for (const HeadIndex& h : layer.heads) {
      if (auto st = CheckHead(h, seg.size(), s, c); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRows(const std::vector<std::vector<uint16_t>>& rows,
                       int64_t n, const KvShape& s, const char* what) {
  const size_t elems = size_t{1} * s.n_kv_heads * n * s.head_dim;
  if (rows.size() != static_cast<size_t>(s.n_layers)) {
    return Bad(absl::StrCat(what, ": one array per layer expected"));
  }
  for (const auto& r : rows) {
    if (r.size() != elems) return Bad(absl::StrCat(what, ": wrong size"));
  }
  return absl::OkStatus();
}

absl::Status CheckParts(const StoreParts& p) {
  if (auto st = CheckShape(p.shape); !st.ok()) return st;
  if (auto st = ValidateKvStoreConfig(p.config); !st.ok()) return st;
  const KvStoreConfig& c = p.config;
  if (p.n_tokens < 0 || p.n_tokens > c.max_tokens) {
    return Bad("token count out of range");
  }
  if (p.sink_rows != std::min<int64_t>(p.n_tokens, c.sink_tokens) ||
      p.tail_rows < 0) {
    return Bad("sink or tail row count out of range");
  }
  int64_t pos = c.sink_tokens;
  for (const auto& seg : p.segments) {
    if (seg == nullptr) return Bad("null segment");
    if (auto st = CheckSegment(*seg, pos, p.shape, c); !st.ok()) return st;
    pos += seg->size();
  }
  const int64_t clustered = pos - c.sink_tokens;
  if (p.sink_rows + clustered + p.tail_rows != p.n_tokens) {
    return Bad("sinks, segments and tail do not add up to the token count");
  }
  for (auto [rows, n, what] : {std::tuple{&p.sink_k, p.sink_rows, "sink keys"},
                               {&p.sink_v, p.sink_rows, "sink values"},
                               {&p.tail_k, p.tail_rows, "tail keys"},
                               {&p.tail_v, p.tail_rows, "tail values"}}) {
    if (auto st = CheckRows(*rows, n, p.shape, what); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StoreParts> ClusteredKvStore::Export() const {
  if (reserved_ != 0) {
    return absl::FailedPreconditionError("cannot export during a call");
  }
  for (int l = 0; l < shape_.n_layers; ++l) WaitForIndex(l);
  StoreParts p;
  p.shape = shape_;
  p.config = config_;
  p.n_tokens = n_tokens_;
  p.sink_rows = sink_count();
  p.tail_rows = tail_tokens();
  for (int l = 0; l < shape_.n_layers; ++l) {
    const RowBuffer& s = sinks_[l];
    const RowBuffer& o = open_[l];
    p.sink_k.push_back(Pack(s.k, s.capacity, p.sink_rows, shape_));
    p.sink_v.push_back(Pack(s.v, s.capacity, p.sink_rows, shape_));
    p.tail_k.push_back(Pack(o.k, o.capacity, p.tail_rows, shape_));
    p.tail_v.push_back(Pack(o.v, o.capacity, p.tail_rows, shape_));
  }
  p.segments = segments_;
  return p;
}

absl::StatusOr<std::unique_ptr<ClusteredKvStore>> ClusteredKvStore::Restore(
    StoreParts parts, ClusterWorker* worker, StoreEnv env) {
  if (auto st = CheckParts(parts); !st.ok()) return st;
  auto store = std::make_unique<ClusteredKvStore>(parts.shape, parts.config,
                                                  worker, std::move(env));
  const KvShape& s = parts.shape;
  store->n_tokens_ = parts.n_tokens;
  for (int l = 0; l < s.n_layers; ++l) {
    RowBuffer& sink = store->sinks_[l];
    for (int h = 0; h < s.n_kv_heads; ++h) {
      const size_t from = size_t{1} * h * parts.sink_rows * s.head_dim;
      const size_t to = size_t{1} * h * sink.capacity * s.head_dim;
      std::copy_n(parts.sink_k[l].data() + from, parts.sink_rows * s.head_dim,
                  sink.k.data() + to);
      std::copy_n(parts.sink_v[l].data() + from, parts.sink_rows * s.head_dim,
                  sink.v.data() + to);
    }
    store->open_[l].k = std::move(parts.tail_k[l]);
    store->open_[l].v = std::move(parts.tail_v[l]);
    store->open_[l].capacity = parts.tail_rows;
    store->sink_rows_[l] = parts.sink_rows;
    store->open_rows_[l] = parts.tail_rows;
  }
  for (const auto& seg : parts.segments) {
    store->open_first_pos_ += seg->size();
    for (int l = 0; l < s.n_layers; ++l) {
      SortRowsByCluster(*seg, l);
      PackCentroidPanels(*seg, l);
    }
  }
  store->segments_ = std::move(parts.segments);
  return store;
}

}  // namespace ckv
