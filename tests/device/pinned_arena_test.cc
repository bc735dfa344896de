// PinnedArena (model/backend/device/pinned_arena.h): segment rows in
// mapped-pinned slabs of the fake device, carved first-fit, coalesced,
// slabs returned when empty, heap blocks past the limit, and a block reused
// while a device copy of it may still be pending reported as a race.
#include "model/backend/device/pinned_arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kernels/device/fake_runtime.h"
#include "model/kv/clustered_store.h"
#include "model/kv/host_arena.h"
#include "model/kv/snapshot.h"
#include "tests/device/test_util.h"

namespace ckv {
namespace {

namespace dev = kernels::device;
using dev::ValueOrDie;

constexpr int64_t kSlab = 64 << 10;

StoreEnv ArenaEnv(std::shared_ptr<HostArena> arena) {
  StoreEnv env;
  env.arena = std::move(arena);
  return env;
}

std::shared_ptr<PinnedArena> Arena(dev::FakeRuntime& rt,
                                   int64_t limit = int64_t{1} << 30) {
  return std::make_shared<PinnedArena>(
      rt, nullptr,
      PinnedArenaOptions{.slab_bytes = kSlab, .limit_bytes = limit});
}

TEST(PinnedArenaTest, BlocksArePinnedDistinctAndAligned) {
  dev::FakeRuntime rt(dev::TestConfig(dev::Schedule::kInline, 1, 16, 0));
  auto arena = Arena(rt);
  std::vector<void*> blocks;
  for (int i = 0; i < 20; ++i) {
    void* p = arena->Allocate(1000 + i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    EXPECT_TRUE(arena->Contains(p, 1000 + i));
    EXPECT_TRUE(rt.MappedPointer(p).ok());  // the runtime's pinned memory
    std::memset(p, i, 1000 + i);
    blocks.push_back(p);
  }
  for (int i = 0; i < 20; ++i) {  // no block overwrote another
    const auto* b = static_cast<const unsigned char*>(blocks[i]);
    EXPECT_EQ(b[0], i);
    EXPECT_EQ(b[999 + i], i);
  }
  // 20 blocks of 1,024 bytes (rounded) share one 64 KiB slab.
  EXPECT_EQ(arena->pinned_bytes(), kSlab);
  EXPECT_EQ(arena->used_bytes(), 20 * 1024);
  int x = 0;
  EXPECT_FALSE(arena->Contains(&x, sizeof(x)));
  for (int i = 0; i < 20; ++i) arena->Free(blocks[i], 1000 + i);
  EXPECT_EQ(arena->used_bytes(), 0);
  EXPECT_EQ(arena->pinned_bytes(), kSlab);  // the last slab is kept
}

TEST(PinnedArenaTest, FreedNeighboursCoalesceIntoOneBlock) {
  dev::FakeRuntime rt(dev::TestConfig(dev::Schedule::kInline, 1, 16, 0));
  auto arena = Arena(rt);
  void* a = arena->Allocate(kSlab / 4);
  void* b = arena->Allocate(kSlab / 4);
  void* c = arena->Allocate(kSlab / 4);
  void* d = arena->Allocate(kSlab / 4);
  EXPECT_EQ(arena->pinned_bytes(), kSlab);  // exactly one slab
  arena->Free(b, kSlab / 4);
  arena->Free(a, kSlab / 4);
  arena->Free(c, kSlab / 4);
  // Only a coalesced run of three quarters can hold a block of a half.
  void* e = arena->Allocate(kSlab / 2);
  EXPECT_EQ(e, a);
  EXPECT_EQ(arena->pinned_bytes(), kSlab);
  arena->Free(e, kSlab / 2);
  arena->Free(d, kSlab / 4);
}

TEST(PinnedArenaTest, LargeBlocksOwnTheirMemoryAndEmptySlabsGoBack) {
  dev::FakeRuntime rt(dev::TestConfig(dev::Schedule::kInline, 1, 16, 0));
  auto arena = Arena(rt);
  void* big = arena->Allocate(kSlab);  // over half a slab: its own
  EXPECT_EQ(arena->pinned_bytes(), kSlab);
  std::vector<void*> small;
  for (int i = 0; i < 6; ++i) small.push_back(arena->Allocate(kSlab / 3));
  EXPECT_EQ(arena->pinned_bytes(), kSlab + 3 * kSlab);  // 2 per slab
  arena->Free(big, kSlab);
  EXPECT_EQ(arena->pinned_bytes(), 3 * kSlab);
  for (void* p : small) arena->Free(p, kSlab / 3);
  EXPECT_EQ(arena->pinned_bytes(), kSlab);
}

TEST(PinnedArenaTest, PastTheLimitBlocksComeFromTheHeap) {
  dev::FakeRuntime rt(dev::TestConfig(dev::Schedule::kInline, 1, 16, 0));
  auto arena = Arena(rt, /*limit=*/kSlab);
  void* a = arena->Allocate(kSlab / 3);
  void* b = arena->Allocate(kSlab / 3);
  void* c = arena->Allocate(kSlab / 3);  // the slab is full
  EXPECT_TRUE(arena->Contains(a, kSlab / 3));
  EXPECT_TRUE(arena->Contains(b, kSlab / 3));
  EXPECT_FALSE(arena->Contains(c, kSlab / 3));
  EXPECT_FALSE(rt.MappedPointer(c).ok());
  EXPECT_EQ(arena->heap_blocks(), 1);
  std::memset(c, 1, kSlab / 3);  // plain, writable memory
  for (void* p : {a, b, c}) arena->Free(p, kSlab / 3);
}

TEST(PinnedArenaTest, HostRowsKeepTheArenaAndFreeOnce) {
  dev::FakeRuntime rt(dev::TestConfig(dev::Schedule::kInline, 1, 16, 0));
  auto arena = Arena(rt);
  HostRows rows(arena, 300);
  EXPECT_EQ(rows.size(), 300);
  EXPECT_TRUE(arena->Contains(rows.data(), 600));
  HostRows moved = std::move(rows);
  EXPECT_EQ(rows.data(), nullptr);
  EXPECT_EQ(moved.size(), 300);
  const PinnedArena* raw = arena.get();
  arena.reset();  // the block keeps it alive
  EXPECT_EQ(raw->used_bytes(), 768);
  moved = HostRows();         // frees once
  HostRows heap(nullptr, 5);  // the heap arena
  EXPECT_NE(heap.data(), nullptr);
  EXPECT_FALSE(heap.arena()->Contains(heap.data(), 10));
}

// A block freed and handed out again while an async copy out of it has not
// been waited for: the arena's host-write announcement makes the ordering
// checker report it (the freed segment's rows would be overwritten under
// the copy on a device).
TEST(PinnedArenaTest, ReuseBeforeAPendingCopyFinishesIsARace) {
  for (dev::Schedule s : {dev::Schedule::kInline, dev::Schedule::kLazy}) {
    dev::FakeRuntime rt(dev::TestConfig(s, 1, 16, 0));
    auto arena = Arena(rt);
    const dev::Stream st = ValueOrDie(rt.CreateStream());
    const dev::DevPtr d = ValueOrDie(rt.Malloc(4096));
    void* a = arena->Allocate(4096);
    ASSERT_TRUE(rt.CopyH2D(d, a, 4096, st).ok());
    arena->Free(a, 4096);
    void* b = arena->Allocate(4096);  // the same bytes, no sync between
    EXPECT_EQ(a, b);
    EXPECT_EQ(rt.race_count(), 1) << "schedule " << static_cast<int>(s);
    arena->Free(b, 4096);
    // Synchronised first: no report.
    ASSERT_TRUE(rt.Synchronize(st).ok());
    void* c = arena->Allocate(4096);
    ASSERT_TRUE(rt.CopyH2D(d, c, 4096, st).ok());
    ASSERT_TRUE(rt.Synchronize(st).ok());
    arena->Free(c, 4096);
    arena->Free(arena->Allocate(4096), 4096);
    EXPECT_EQ(rt.race_count(), 1);
  }
}

TEST(PinnedArenaTest, ConcurrentAllocationsAndFreesStayConsistent) {
  dev::FakeRuntime rt(dev::TestConfig(dev::Schedule::kInline, 1, 64, 0));
  auto arena = Arena(rt);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&arena, t] {
      std::mt19937 rng(t);
      std::vector<HostRows> live;
      for (int i = 0; i < 300; ++i) {
        if (!live.empty() && rng() % 3 == 0) {
          live.erase(live.begin() + rng() % live.size());
        } else {
          const int64_t n = 1 + rng() % 20000;
          live.emplace_back(arena, n);
          std::fill_n(live.back().data(), n, static_cast<uint16_t>(t));
        }
      }
      for (const HostRows& r : live) {
        for (int64_t j = 0; j < r.size(); ++j) {
          ASSERT_EQ(r.data()[j], t);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(arena->used_bytes(), 0);
  EXPECT_EQ(arena->pinned_bytes(), kSlab);
}

// A store made with the arena keeps its segments there; a snapshot of it
// read with the arena in SnapshotExpect, and restored with it, holds its old
// and its new segments in the arena and the same rows.
TEST(PinnedArenaTest, StoresAndSnapshotRestoresKeepSegmentsInTheArena) {
  dev::FakeRuntime rt(dev::TestConfig(dev::Schedule::kInline, 1, 16, 0));
  auto arena = Arena(rt);
  const KvShape shape{/*n_layers=*/2, /*n_heads=*/4, /*n_kv_heads=*/2,
                      /*head_dim=*/16};
  KvStoreConfig c;
  c.budget = 16;
  c.sink_tokens = 4;
  c.tokens_per_cluster = 8;
  c.window = 16;
  c.dense_layers = 1;
  c.async_clustering = false;
  c.max_tokens = 4096;
  auto feed = [&shape](ClusteredKvStore& store, int64_t n, AppendKind kind,
                       uint64_t seed) {
    ASSERT_TRUE(store.Reserve(n, kind).ok());
    std::mt19937 rng(seed);
    std::normal_distribution<float> g;
    std::vector<float> k(n * shape.n_kv_heads * shape.head_dim), v(k.size());
    for (int l = 0; l < shape.n_layers; ++l) {
      for (size_t i = 0; i < k.size(); ++i) k[i] = g(rng), v[i] = g(rng);
      store.Append(l, n, k.data(), v.data());
    }
    store.Commit(n);
  };
  auto in_arena = [&](const ClusteredKvStore& store) {
    auto parts = store.Export();
    EXPECT_TRUE(parts.ok()) << parts.status();
    int n = 0;
    for (const auto& seg : parts->segments) {
      for (int l = 0; l < shape.n_layers; ++l) {
        const SegmentLayer& layer = seg->layer(l);
        EXPECT_TRUE(arena->Contains(layer.k.data(), layer.k.size() * 2));
        EXPECT_TRUE(arena->Contains(layer.v.data(), layer.v.size() * 2));
      }
      ++n;
    }
    return n;
  };
  ClusteredKvStore store(shape, c, nullptr, ArenaEnv(arena));
  feed(store, 60, AppendKind::kPrompt, 1);
  for (int i = 0; i < 20; ++i) feed(store, 1, AppendKind::kGenerated, 2 + i);
  EXPECT_EQ(in_arena(store), 2);  // the prompt's and one generated
  auto fork = store.Fork();
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(in_arena(**fork), 2);

  auto parts = store.Export();
  ASSERT_TRUE(parts.ok()) << parts.status();
  Snapshot snap;
  snap.meta.session_id = "s";
  snap.store = *parts;
  const std::string bytes = SerializeSnapshot(snap, 7);
  SnapshotExpect e;
  e.model_fingerprint = 7;
  e.shape = shape;
  e.max_tokens = 4096;
  e.arena = arena;
  auto parsed = ParseSnapshot(bytes, e);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto restored = ClusteredKvStore::Restore(std::move(parsed->store), nullptr,
                                            ArenaEnv(arena));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(in_arena(**restored), 2);
  auto again = (*restored)->Export();
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < parts->segments.size(); ++i) {
    const SegmentLayer& a = parts->segments[i]->layer(1);
    const SegmentLayer& b = again->segments[i]->layer(1);
    ASSERT_EQ(a.k.size(), b.k.size());
    EXPECT_EQ(std::memcmp(a.k.data(), b.k.data(), a.k.size() * 2), 0);
  }
  for (int i = 0; i < 16; ++i) {
    feed(**restored, 1, AppendKind::kGenerated, 40 + i);
  }
  EXPECT_EQ(in_arena(**restored), 3);  // a new segment closed, in the arena
}

}  // namespace
}  // namespace ckv
