// BlockCache against a plain model of its contract: random lookups of page
// blocks of several segments (repeats within a step, segments that stop
// being used and come back), in both modes and for several cache_steps.
#include "model/kv/block_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "model/kv/segment.h"

namespace ckv {
namespace {

constexpr int kHeadDim = 8;
constexpr int kPage = 4;

const KvShape& Shape() {
  static const KvShape s{
      .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = kHeadDim};
  return s;
}

std::unique_ptr<Segment> MakeSegment(int64_t uid, int64_t first_pos,
                                     int64_t n) {
  auto seg = std::make_unique<Segment>(uid, first_pos, n, Shape());
  uint16_t* k = seg->mutable_keys(0, 0);
  uint16_t* v = seg->mutable_values(0, 0);
  for (int64_t i = 0; i < n * kHeadDim; ++i) {
    k[i] = static_cast<uint16_t>(uid * 1000 + i);
    v[i] = static_cast<uint16_t>(uid * 2000 + i);
  }
  return seg;
}

// What the cache must report: a block resident while used in the last
// cache_steps steps; one lookup per block and step.
struct Model {
  int cache_steps;
  std::map<std::pair<int64_t, int32_t>, std::pair<int32_t, int64_t>> live;
  CacheStats stats;
  std::map<std::pair<int64_t, int32_t>, int64_t> seen_in_step;

  void Ensure(int64_t step, const Segment& seg, int32_t id, int32_t size) {
    const auto key = std::make_pair(seg.uid(), id);
    if (seen_in_step.count(key) && seen_in_step[key] == step) return;
    seen_in_step[key] = step;
    ++stats.lookups;
    auto it = live.find(key);
    if (it != live.end()) {
      ++stats.hits;
      stats.hit_tokens += size;
      it->second.second = step;
      return;
    }
    ++stats.misses;
    stats.miss_tokens += size;
    stats.h2d_bytes += int64_t{size} * 2 * 2 * kHeadDim;
    live[key] = {size, step};
  }
  void EndStep(int64_t step) {
    for (auto it = live.begin(); it != live.end();) {
      it = step - it->second.second >= cache_steps ? live.erase(it)
                                                   : std::next(it);
    }
  }
  int64_t resident() const {
    int64_t n = 0;
    for (const auto& [key, e] : live) n += e.first;
    return n;
  }
};

TEST(BlockCacheTest, MatchesThePlainModel) {
  for (bool copy : {false, true}) {
    for (int cache_steps : {0, 1, 3}) {
      SCOPED_TRACE(testing::Message()
                   << "copy " << copy << " cache_steps " << cache_steps);
      std::vector<std::unique_ptr<Segment>> segs;
      for (int s = 0; s < 4; ++s) {
        segs.push_back(MakeSegment(100 + s, 37 * s, 13 + 9 * s));
      }
      BlockCache cache(kHeadDim, cache_steps, kPage, copy);
      Model model{cache_steps, {}, {}, {}};
      std::mt19937 rng(cache_steps * 2 + copy);
      for (int64_t step = 0; step < 200; ++step) {
        // Phases: some segments unused for a while, then used again.
        const int n_segs = 1 + static_cast<int>((step / 25) % 4);
        const int lookups = static_cast<int>(rng() % 12);
        for (int i = 0; i < lookups; ++i) {
          const Segment& seg = *segs[rng() % n_segs];
          const int32_t pages =
              static_cast<int32_t>((seg.size() + kPage - 1) / kPage);
          const int32_t id = static_cast<int32_t>(rng() % pages);
          const BlockRef block{0, BlockKind::kPage, id, 0, 1};
          const int32_t size =
              BlockSize(seg, 0, 0, BlockKind::kPage, id, kPage);
          const int64_t offset = cache.Ensure(step, seg, 0, 0, block);
          model.Ensure(step, seg, id, size);
          if (!copy) {
            EXPECT_EQ(offset, -1);
          } else {
            // The arena rows are the block's rows, with their positions.
            for (int32_t r = 0; r < size; ++r) {
              const int64_t row = int64_t{id} * kPage + r;
              ASSERT_EQ(cache.positions()[offset + r], seg.first_pos() + row);
              ASSERT_EQ(cache.keys()[(offset + r) * kHeadDim + 1],
                        seg.keys(0, 0)[row * kHeadDim + 1]);
              ASSERT_EQ(cache.values()[(offset + r) * kHeadDim],
                        seg.values(0, 0)[row * kHeadDim]);
            }
          }
        }
        cache.EndStep(step);
        model.EndStep(step);
        const CacheStats& s = cache.stats();
        ASSERT_EQ(s.lookups, model.stats.lookups) << "step " << step;
        ASSERT_EQ(s.hits, model.stats.hits) << "step " << step;
        ASSERT_EQ(s.misses, model.stats.misses);
        ASSERT_EQ(s.hit_tokens, model.stats.hit_tokens);
        ASSERT_EQ(s.miss_tokens, model.stats.miss_tokens);
        ASSERT_EQ(s.h2d_bytes, model.stats.h2d_bytes);
        ASSERT_EQ(cache.resident_tokens(), model.resident()) << "step " << step;
      }
      if (cache_steps > 0) {
        EXPECT_GT(model.stats.hits, 0);
      }
      EXPECT_GT(model.stats.misses, 0);
    }
  }
}

}  // namespace
}  // namespace ckv
