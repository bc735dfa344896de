#include "model/kv/segment.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <numeric>

namespace ckv {

namespace cpu = kernels::cpu;

int64_t HeadIndex::bytes() const {
  return static_cast<int64_t>(centroids.size() + page_min.size() +
                              page_max.size()) *
             sizeof(float) +
         static_cast<int64_t>(centroid_panels.size()) * sizeof(uint16_t) +
         static_cast<int64_t>(offsets.size() + members.size() + row_of.size()) *
             sizeof(int32_t);
}

Segment::Segment(int64_t uid, int64_t first_pos, int64_t n,
                 const KvShape& shape, std::shared_ptr<HostArena> arena)
    : uid_(uid),
      first_pos_(first_pos),
      n_(n),
      shape_(shape),
      layers_(shape.n_layers) {
  const int64_t per_layer = int64_t{shape.n_kv_heads} * n * shape.head_dim;
  for (auto& l : layers_) {
    l.k = HostRows(arena, per_layer);
    l.v = HostRows(arena, per_layer);
  }
}

const uint16_t* Segment::keys(int l, int h) const {
  return layers_[l].k.data() + static_cast<size_t>(h) * n_ * shape_.head_dim;
}
const uint16_t* Segment::values(int l, int h) const {
  return layers_[l].v.data() + static_cast<size_t>(h) * n_ * shape_.head_dim;
}
uint16_t* Segment::mutable_keys(int l, int h) {
  return layers_[l].k.data() + static_cast<size_t>(h) * n_ * shape_.head_dim;
}
uint16_t* Segment::mutable_values(int l, int h) {
  return layers_[l].v.data() + static_cast<size_t>(h) * n_ * shape_.head_dim;
}

const int32_t* Segment::row_positions(int l, int h) const {
  const auto& heads = layers_[l].heads;
  if (heads.empty() || !heads[h].rows_by_cluster()) return nullptr;
  return heads[h].members.data();
}

int32_t Segment::StoredRow(int l, int h, int32_t r) const {
  const auto& heads = layers_[l].heads;
  return heads.empty() || !heads[h].rows_by_cluster() ? r : heads[h].row_of[r];
}

const CacheRows* Segment::ResidentRows(int l, CacheRowsFactory& factory) const {
  std::lock_guard<std::mutex> lock(resident_mu_);
  if (resident_.empty()) {
    resident_.resize(layers_.size());
    refused_.assign(layers_.size(), false);
  }
  if (resident_[l] != nullptr) {
    if (resident_[l]->Use()) return resident_[l].get();
    resident_[l].reset();  // evicted: idle for steps, no span points at it
  }
  const int64_t rows = int64_t{shape_.n_kv_heads} * n_;
  auto made = factory.NewResidentRows(shape_.head_dim, rows, refused_[l]);
  if (made == nullptr) {
    refused_[l] = true;
    return nullptr;
  }
  made->Reserve(rows, 0);
  made->Write(0, keys(l, 0), values(l, 0), rows);
  resident_[l] = std::move(made);
  return resident_[l].get();
}

int32_t Segment::SegmentRow(int l, int h, int32_t stored) const {
  const int32_t* pos = row_positions(l, h);
  return pos == nullptr ? stored : pos[stored];
}

int64_t Segment::kv_bytes() const {
  int64_t b = 0;
  for (const auto& l : layers_) b += (l.k.size() + l.v.size()) * 2;
  return b;
}

int64_t Segment::index_bytes() const {
  int64_t b = 0;
  for (const auto& l : layers_) {
    for (const auto& h : l.heads) b += h.bytes();
  }
  return b;
}

int64_t Segment::NextUid() {
  static std::atomic<int64_t> next{1};
  return next.fetch_add(1);
}

namespace {

uint64_t MixSeed(uint64_t seed, int layer, int head, int64_t first_pos) {
  uint64_t z = seed ^ (uint64_t(layer) << 48) ^ (uint64_t(head) << 32) ^
               static_cast<uint64_t>(first_pos);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t NanosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

// CPU time of the calling thread.
int64_t ThreadCpuNanos() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

// Members of each cluster in ascending row order (= position order).
void FillClusters(const ClusterResult& r, HeadIndex& h) {
  h.k = r.k;
  h.kmeans_iterations = r.iterations;
  h.kmeans_key_scorings = r.key_scorings;
  h.centroids.assign(r.centroids.begin(), r.centroids.end());
  h.offsets.assign(r.k + 1, 0);
  for (int c = 0; c < r.k; ++c) h.offsets[c + 1] = h.offsets[c] + r.sizes[c];
  h.members.resize(r.assignment.size());
  std::vector<int32_t> cursor(h.offsets.begin(), h.offsets.end() - 1);
  for (size_t i = 0; i < r.assignment.size(); ++i) {
    h.members[cursor[r.assignment[i]]++] = static_cast<int32_t>(i);
  }
}

// Permutes `rows` ([n][hd]) in place: stored row j becomes the old row
// members[j].
void PermuteRows(std::vector<uint16_t>& scratch, uint16_t* rows,
                 const std::vector<int32_t>& members, int hd) {
  const size_t n = members.size();
  scratch.resize(n * hd);
  for (size_t j = 0; j < n; ++j) {
    std::memcpy(&scratch[j * hd], rows + size_t{1} * members[j] * hd,
                sizeof(uint16_t) * hd);
  }
  std::memcpy(rows, scratch.data(), sizeof(uint16_t) * n * hd);
}

}  // namespace

void SortRowsByCluster(Segment& seg, int layer) {
  const int hd = seg.shape().head_dim;
  std::vector<uint16_t> scratch;
  for (int h = 0; h < static_cast<int>(seg.layer(layer).heads.size()); ++h) {
    HeadIndex& hi = seg.layer(layer).heads[h];
    if (hi.k == 0 || hi.rows_by_cluster()) continue;
    PermuteRows(scratch, seg.mutable_keys(layer, h), hi.members, hd);
    PermuteRows(scratch, seg.mutable_values(layer, h), hi.members, hd);
    hi.row_of.assign(hi.members.size(), 0);
    for (size_t j = 0; j < hi.members.size(); ++j) {
      hi.row_of[hi.members[j]] = static_cast<int32_t>(j);
    }
  }
}

void PackCentroidPanels(Segment& seg, int layer) {
  const int hd = seg.shape().head_dim;
  for (HeadIndex& hi : seg.layer(layer).heads) {
    if (hi.k == 0) continue;
    cpu::PackCentroidPanels(hi.centroids.data(), hi.k, hd, &hi.centroid_panels);
  }
}

void IndexSegmentLayers(const KvStoreConfig& config, IndexSet indexes,
                        Segment& seg, const std::vector<int>& layers,
                        IndexBuilder& builder) {
  const KvShape& s = seg.shape();
  const int64_t n = seg.size();
  for (int l : layers) seg.layer(l).heads.assign(s.n_kv_heads, HeadIndex{});
  if (n == 0) return;
  const auto t_pages = std::chrono::steady_clock::now();
  if (indexes & kPageIndex) {
    for (int l : layers) {
      for (int h = 0; h < s.n_kv_heads; ++h) {
        HeadIndex& hi = seg.layer(l).heads[h];
        const int64_t pages =
            (n + config.quest_page_size - 1) / config.quest_page_size;
        hi.page_min.resize(pages * s.head_dim);
        hi.page_max.resize(pages * s.head_dim);
        cpu::QuestPageBounds(seg.keys(l, h), config.kv_dtype, s.head_dim, n,
                             s.head_dim, config.quest_page_size,
                             hi.page_min.data(), hi.page_max.data());
      }
    }
  }
  const int64_t pages_ns = NanosSince(t_pages);
  if (!(indexes & kClusterIndex)) {
    seg.AddIndexNanos(0, 0, pages_ns);
    return;
  }
  const auto t_kmeans = std::chrono::steady_clock::now();
  const int64_t cpu_kmeans = ThreadCpuNanos();
  std::vector<ClusterJob> problems;
  for (int l : layers) {
    for (int h = 0; h < s.n_kv_heads; ++h) {
      ClusterJob p;
      p.keys = seg.keys(l, h);
      p.dtype = config.kv_dtype;
      p.stride = s.head_dim;
      p.n = n;
      p.dim = s.head_dim;
      p.k = static_cast<int>(std::max<int64_t>(
          1, (n + config.tokens_per_cluster - 1) / config.tokens_per_cluster));
      p.max_iters = config.kmeans_max_iters;
      p.seed = MixSeed(config.seed, l, h, seg.first_pos());
      p.metric = config.metric;
      problems.push_back(p);
    }
  }
  std::vector<ClusterResult> results;
  builder.KMeans(problems, &results);
  size_t i = 0;
  for (int l : layers) {
    for (int h = 0; h < s.n_kv_heads; ++h) {
      FillClusters(results[i++], seg.layer(l).heads[h]);
    }
    SortRowsByCluster(seg, l);
    PackCentroidPanels(seg, l);
  }
  // With other threads, their k-means time is not in this thread's clock:
  // count the wall time then.
  const int64_t wall = NanosSince(t_kmeans);
  seg.AddIndexNanos(
      wall, builder.uses_other_threads() ? wall : ThreadCpuNanos() - cpu_kmeans,
      pages_ns);
}

}  // namespace ckv
